/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Shared by the workloads that print their exact allocation truth per site (wl_alloc.c,
 * wl_allocators.c, wl_dlalloc.c): the tests compare memprofctl's estimates with these lines.
 */
#ifndef MP_WL_TRUTH_H
#define MP_WL_TRUTH_H

#include <stdint.h>
#include <stdio.h>

#define NOINLINE __attribute__((noinline))

/* Words of a block as Gc.Memprof counts them: ceil(size / 8) + 1 (a header word). */
static inline uint64_t words(size_t size)
{
	return (size + 7) / 8 + 1;
}

/* "TRUTH SITE words=W live_words=L blocks=N", flushed at once. */
static inline void truth(const char *site, uint64_t w, uint64_t live, uint64_t blocks)
{
	printf("TRUTH %s words=%llu live_words=%llu blocks=%llu\n", site, (unsigned long long)w,
	       (unsigned long long)live, (unsigned long long)blocks);
	fflush(stdout);
}

#endif
