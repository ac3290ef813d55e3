// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * A shared object that tests/workloads/wl_dlopen.c loads with dlopen after its profile
 * started. It links libmimalloc, which the process did not map before: its mi_* entry points
 * are probed only if the profiler probes objects as ld.so maps them. The sites print their
 * truth as tests/workloads/wl_alloc.c does.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <mimalloc.h>

#include "wl_truth.h"

int wl_dl_run(long scale);

WL_SITE(wl_site_dl_mi, (size_t size), mi_malloc(size))
WL_SITE(wl_site_dl_mi_leak, (size_t size), mi_calloc(1, size))
/* glibc's malloc, called from code that was not mapped when the profile started */
WL_MALLOC_SITE(wl_site_dl_malloc)

WL_RELEASE(mi_release, mi_free(p))

int wl_dl_run(long scale)
{
	wl_freed("wl_site_dl_mi", wl_site_dl_mi, mi_release, 200, 50000 * scale);
	wl_leaked("wl_site_dl_mi_leak", wl_site_dl_mi_leak, 3000, 1000 * scale);
	wl_freed("wl_site_dl_malloc", wl_site_dl_malloc, wl_free, 300, 30000 * scale);
	return 0;
}
