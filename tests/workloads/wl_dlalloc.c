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

static void *volatile sink;

NOINLINE static void *wl_site_dl_mi(size_t size)
{
	void *p = mi_malloc(size);

	sink = p;
	return p;
}

NOINLINE static void *wl_site_dl_mi_leak(size_t size)
{
	void *p = mi_calloc(1, size);

	sink = p;
	return p;
}

/* glibc's malloc, called from code that was not mapped when the profile started */
NOINLINE static void *wl_site_dl_malloc(size_t size)
{
	void *p = malloc(size);

	sink = p;
	return p;
}

int wl_dl_run(long scale)
{
	const long n = 50000 * scale, n_leak = 1000 * scale, n_libc = 30000 * scale;
	uint64_t w;

	for (long i = 0; i < n; i++)
		mi_free(wl_site_dl_mi(200));
	truth("wl_site_dl_mi", n * words(200), 0, n);
	for (long i = 0; i < n_leak; i++)
		wl_site_dl_mi_leak(3000);
	w = n_leak * words(3000);
	truth("wl_site_dl_mi_leak", w, w, n_leak);
	for (long i = 0; i < n_libc; i++)
		free(wl_site_dl_malloc(300));
	truth("wl_site_dl_malloc", n_libc * words(300), 0, n_libc);
	return 0;
}
