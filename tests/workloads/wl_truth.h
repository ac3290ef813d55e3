/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Shared by the workloads whose allocations are known exactly (wl_alloc.c, wl_allocators.c,
 * wl_dlalloc.c, wl_peak.c, pl_batch.c, pl_ids.c): the sites, the sink that keeps their blocks
 * from being optimised away, the loops that make and release them, and the truth lines the
 * tests compare memprofctl's estimates with.
 */
#ifndef MP_WL_TRUTH_H
#define MP_WL_TRUTH_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

/*
 * Where every site stores its block. GCC removes a malloc/free pair whose pointer does not
 * escape; a store to a volatile is an escape it cannot see through.
 */
static void *volatile wl_sink __attribute__((unused));

/*
 * WL_SITE(name, (params), call): a site, a function of its own (its symbol is the innermost
 * frame of its blocks' stacks) that makes one allocator call and returns the block. noipa:
 * GCC may neither inline nor clone it (a clone is named "name.constprop.0") nor assume what it
 * does; the store after the call keeps it from being a tail call.
 */
#define WL_SITE(name, params, call)			\
	__attribute__((noipa)) static void *name params	\
	{						\
		void *p = call;				\
							\
		wl_sink = p;				\
		return p;				\
	}

/* A site that calls malloc(size); for lists of sites: #define SITES(X) X(site_a) X(site_b) */
#define WL_MALLOC_SITE(name) WL_SITE(name, (size_t size), malloc(size))

/*
 * A site that calls posix_memalign(&p, @align, size) and returns the block, or NULL. A macro,
 * not an inline helper: the symbolizer names inlined functions, and the site must be the
 * innermost frame.
 */
#define WL_MEMALIGN_SITE(name, align)				\
	__attribute__((noipa)) static void *name(size_t size)	\
	{							\
		void *p = NULL;					\
								\
		if (posix_memalign(&p, (align), size))		\
			p = NULL;				\
		wl_sink = p;					\
		return p;					\
	}

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

/* An allocator call that failed: exit 3 (the tests tell it from a wrong estimate). */
static inline void wl_die(const char *what)
{
	perror(what);
	exit(3);
}

/*
 * Every 2000 calls, 1 ms for the consumer to drain the ring buffer (at high rates a burst of
 * sampled events could otherwise outrun it on a busy machine, and a lost event biases the
 * estimate; the trace would say so in its drops).
 */
static inline void wl_pace(long i)
{
	struct timespec ts = { 0, 1000000 };

	if (i % 2000 == 1999)
		nanosleep(&ts, NULL);
}

/* How a block goes back: free() or the allocator's own call, told the size it asked for. */
typedef void wl_release_fn(void *p, size_t size);

/* WL_RELEASE(name, call): a wl_release_fn that makes @call, with p and size in scope */
#define WL_RELEASE(name, call)				\
	static inline void name(void *p, size_t size)	\
	{						\
		(void)p;				\
		(void)size;				\
		call;					\
	}

WL_RELEASE(wl_free, free(p))

/* @n blocks of @size bytes from @site, each released at once; prints the site's TRUTH. */
static inline void wl_freed(const char *name, void *(*site)(size_t), wl_release_fn *release,
			    size_t size, long n)
{
	for (long i = 0; i < n; i++) {
		void *p = site(size);

		if (!p)
			wl_die(name);
		release(p, size);
		wl_pace(i);
	}
	truth(name, (uint64_t)n * words(size), 0, (uint64_t)n);
}

/* @n blocks of @size bytes from @site, never released; prints the site's TRUTH. */
static inline void wl_leaked(const char *name, void *(*site)(size_t), size_t size, long n)
{
	uint64_t w = (uint64_t)n * words(size);

	for (long i = 0; i < n; i++) {
		if (!site(size))
			wl_die(name);
		wl_pace(i);
	}
	truth(name, w, w, (uint64_t)n);
}

/*
 * @chains realloc chains 16 -> 32 -> ... -> 64 KiB through @site: each step is a new block of
 * the new size (realloc = collect + alloc). A chain starts from @first's block (not counted:
 * it is not made at @site), or with realloc(NULL, 16) when @first is NULL. Prints TRUTH.
 */
static inline void wl_realloc_chains(const char *name, void *(*site)(void *, size_t),
				     void *(*first)(void), wl_release_fn *release, long chains)
{
	uint64_t w = 0;

	for (long c = 0; c < chains; c++) {
		void *p = first ? first() : NULL;

		if (first && !p)
			wl_die(name);
		for (size_t s = 16; s <= 65536; s *= 2) {
			p = site(p, s);
			if (!p)
				wl_die(name);
			w += words(s);
		}
		release(p, 65536);
	}
	truth(name, w, 0, (uint64_t)chains * 13);
}

#endif
