// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * A library linked into tests/workloads/pl_foreign.c whose constructor allocates. The dynamic
 * linker runs it before the constructor of a preloaded libmemprof-preload (a preloaded object
 * is initialised after the program's own dependencies), so this malloc is the library's
 * first call before its initialisation: it must already reach the program's allocator.
 */
#include <stdlib.h>

#define PL_EARLY_SIZE	4242

void *pl_early_block;

__attribute__((constructor)) static void pl_early_init(void)
{
	pl_early_block = malloc(PL_EARLY_SIZE);
}
