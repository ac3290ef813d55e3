// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * A workload with exactly known allocations made through another allocator than glibc's, for
 * tests/bpf/alloc-*.sh. Built once per allocator (bpf/allocators.mk):
 *
 *	-DWL_JEMALLOC	linked with Debian's libjemalloc (or its static libjemalloc_pic.a)
 *	-DWL_TCMALLOC	linked with gperftools' libtcmalloc
 *	-DWL_MIMALLOC	linked with libmimalloc (which then also provides malloc)
 *
 * Every allocation happens in a noinline function named wl_site_*; "std" sites use the standard
 * API (which the linked allocator interposes), the others the allocator's own API. For each site
 * the program prints "TRUTH <site> words=<W> live_words=<L> blocks=<N>" as tests/workloads/
 * wl_alloc.c does (W = Σ ceil(size/8) + 1; L the same over blocks never freed).
 *
 *	wl_<allocator> api SCALE	all sites, SCALE multiplies the counts
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wl_truth.h"

#if defined(WL_JEMALLOC)
#include <jemalloc/jemalloc.h>
#elif defined(WL_TCMALLOC)
#include <gperftools/tcmalloc.h>
/* C++-only declarations of <gperftools/tcmalloc.h> (C linkage symbols) */
void *tc_new(size_t size);
void tc_delete(void *p);
void *tc_newarray(size_t size);
void tc_deletearray_sized(void *p, size_t size);
#elif defined(WL_MIMALLOC)
#include <mimalloc.h>
#else
#error "define WL_JEMALLOC, WL_TCMALLOC or WL_MIMALLOC"
#endif

static void *volatile sink;

/* A site: a noinline function of its own (its own return address and symbol) that calls the
 * allocator once and returns the block. */
#define WL_SITE(name, params, call)		\
	NOINLINE static void *name params	\
	{					\
		void *p = call;			\
						\
		sink = p;			\
		return p;			\
	}

static void die(const char *what)
{
	fprintf(stderr, "wl_allocators: %s: %s\n", what, strerror(errno));
	exit(3);
}

/* Every 2000 calls, 1 ms for the consumer to drain the ring buffer. */
static void pace(long i)
{
	struct timespec ts = { 0, 1000000 };

	if (i % 2000 == 1999)
		nanosleep(&ts, NULL);
}

/* ---- the standard API, served by the linked allocator ---- */

WL_SITE(wl_site_std_small, (size_t size), malloc(size))
WL_SITE(wl_site_std_leak, (size_t size), malloc(size))
WL_SITE(wl_site_std_calloc, (size_t n, size_t size), calloc(n, size))
WL_SITE(wl_site_std_realloc, (void *old, size_t size), realloc(old, size))

NOINLINE static void *wl_site_std_memalign(size_t align, size_t size)
{
	void *p = NULL;

	if (posix_memalign(&p, align, size))
		die("posix_memalign");
	sink = p;
	return p;
}

static void run_std(long scale)
{
	const long n_small = 100000 * scale, n_leak = 2000 * scale, n_calloc = 3000 * scale;
	const long n_chains = 100 * scale, n_memalign = 1000 * scale;
	uint64_t w;

	for (long i = 0; i < n_small; i++) {
		free(wl_site_std_small(24));
		pace(i);
	}
	truth("wl_site_std_small", n_small * words(24), 0, n_small);

	for (long i = 0; i < n_leak; i++) {
		wl_site_std_leak(1000);
		pace(i);
	}
	w = n_leak * words(1000);
	truth("wl_site_std_leak", w, w, n_leak);

	for (long i = 0; i < n_calloc; i++) {
		free(wl_site_std_calloc(10, 100));
		pace(i);
	}
	truth("wl_site_std_calloc", n_calloc * words(1000), 0, n_calloc);

	w = 0;
	for (long c = 0; c < n_chains; c++) {
		void *p = NULL;

		for (size_t s = 16; s <= 65536; s *= 2) {
			p = wl_site_std_realloc(p, s);
			if (!p)
				die("realloc");
			w += words(s);
		}
		free(p);
	}
	truth("wl_site_std_realloc", w, 0, n_chains * 13);

	for (long i = 0; i < n_memalign; i++) {
		free(wl_site_std_memalign(64, 4000));
		pace(i);
	}
	truth("wl_site_std_memalign", n_memalign * words(4000), 0, n_memalign);
}

/* ---- the allocator's own API ---- */

#if defined(WL_JEMALLOC)

WL_SITE(wl_site_mallocx, (size_t size), mallocx(size, 0))

NOINLINE static void *wl_site_mallocx_aligned(size_t size)
{
	/* alignment and zeroing flags do not change the size accounted */
	void *p = mallocx(size, MALLOCX_ALIGN(64) | MALLOCX_ZERO);

	sink = p;
	return p;
}

WL_SITE(wl_site_mallocx_leak, (size_t size), mallocx(size, 0))
WL_SITE(wl_site_mallocx_big, (size_t size), mallocx(size, 0))
WL_SITE(wl_site_mallocx_keep, (size_t size), mallocx(size, 0))
WL_SITE(wl_site_rallocx, (void *old, size_t size), rallocx(old, size, 0))

NOINLINE static size_t wl_site_xallocx(void *p, size_t size)
{
	size_t r = xallocx(p, size, 0, 0);

	sink = p;
	return r;
}

static void run_own(long scale)
{
	const long n_small = 50000 * scale, n_aligned = 1000 * scale, n_leak = 1000 * scale;
	const long n_chains = 100 * scale, n_x = 200 * scale;
	uint64_t w, xw = 0, xblocks = 0;

	for (long i = 0; i < n_small; i++) {
		sdallocx(wl_site_mallocx(200), 200, 0);
		pace(i);
	}
	truth("wl_site_mallocx", n_small * words(200), 0, n_small);

	for (long i = 0; i < n_aligned; i++) {
		dallocx(wl_site_mallocx_aligned(4000), 0);
		pace(i);
	}
	truth("wl_site_mallocx_aligned", n_aligned * words(4000), 0, n_aligned);

	for (long i = 0; i < n_leak; i++)
		wl_site_mallocx_leak(3000);
	w = n_leak * words(3000);
	truth("wl_site_mallocx_leak", w, w, n_leak);

	/* rallocx chains 8 -> 16 -> ... -> 64 KiB (the first block comes from mallocx) */
	w = 0;
	for (long c = 0; c < n_chains; c++) {
		void *p = mallocx(8, 0);

		if (!p)
			die("mallocx");
		for (size_t s = 16; s <= 65536; s *= 2) {
			p = wl_site_rallocx(p, s);
			if (!p)
				die("rallocx");
			w += words(s);
		}
		dallocx(p, 0);
	}
	truth("wl_site_rallocx", w, 0, n_chains * 13);

	/* xallocx: a block of 64 KiB shrunk in place to 32 KiB, then asked to grow back to
	 * 48 KiB (in place only if the pages after it are free). Each call that returns at least
	 * the size asked for is a new block of that size at the same address (collect + alloc);
	 * the others change nothing. The 64 KiB blocks come from wl_site_mallocx_big. */
	for (long i = 0; i < n_x; i++) {
		void *p = wl_site_mallocx_big(65536);

		if (!p)
			die("mallocx");
		for (size_t s = 32768; s <= 49152; s += 16384) {
			if (wl_site_xallocx(p, s) >= s) {
				xw += words(s);
				xblocks++;
			}
		}
		dallocx(p, 0);
	}
	truth("wl_site_mallocx_big", n_x * words(65536), 0, n_x);

	/* xallocx that cannot grow a small block to 4 MiB in place: nothing changes, the blocks
	 * stay live (leaked) as wl_site_mallocx_keep's */
	for (long i = 0; i < n_leak; i++) {
		void *p = wl_site_mallocx_keep(3000);

		if (!p)
			die("mallocx");
		if (wl_site_xallocx(p, 4 << 20) >= (size_t)(4 << 20)) {
			xw += words(4 << 20);
			xblocks++;
			fprintf(stderr, "wl_allocators: xallocx grew a 3000-byte block to 4 MiB\n");
		}
	}
	w = n_leak * words(3000);
	truth("wl_site_mallocx_keep", w, w, n_leak);
	truth("wl_site_xallocx", xw, 0, xblocks);
}

#elif defined(WL_TCMALLOC)

WL_SITE(wl_site_tc_malloc, (size_t size), tc_malloc(size))
WL_SITE(wl_site_tc_calloc, (size_t n, size_t size), tc_calloc(n, size))
WL_SITE(wl_site_tc_realloc, (void *old, size_t size), tc_realloc(old, size))
WL_SITE(wl_site_tc_memalign, (size_t align, size_t size), tc_memalign(align, size))
WL_SITE(wl_site_tc_new, (size_t size), tc_new(size))
WL_SITE(wl_site_tc_leak, (size_t size), tc_newarray(size))

static void run_own(long scale)
{
	const long n_small = 50000 * scale, n_calloc = 2000 * scale, n_chains = 100 * scale;
	const long n_aligned = 1000 * scale, n_new = 20000 * scale, n_leak = 1000 * scale;
	uint64_t w;

	for (long i = 0; i < n_small; i++) {
		tc_free(wl_site_tc_malloc(200));
		pace(i);
	}
	truth("wl_site_tc_malloc", n_small * words(200), 0, n_small);

	for (long i = 0; i < n_calloc; i++) {
		tc_cfree(wl_site_tc_calloc(20, 100));
		pace(i);
	}
	truth("wl_site_tc_calloc", n_calloc * words(2000), 0, n_calloc);

	w = 0;
	for (long c = 0; c < n_chains; c++) {
		void *p = NULL;

		for (size_t s = 16; s <= 65536; s *= 2) {
			p = wl_site_tc_realloc(p, s);
			if (!p)
				die("tc_realloc");
			w += words(s);
		}
		tc_free_sized(p, 65536);
	}
	truth("wl_site_tc_realloc", w, 0, n_chains * 13);

	for (long i = 0; i < n_aligned; i++) {
		tc_free(wl_site_tc_memalign(256, 4000));
		pace(i);
	}
	truth("wl_site_tc_memalign", n_aligned * words(4000), 0, n_aligned);

	for (long i = 0; i < n_new; i++) {
		tc_delete(wl_site_tc_new(72));
		pace(i);
	}
	truth("wl_site_tc_new", n_new * words(72), 0, n_new);

	for (long i = 0; i < n_leak; i++)
		wl_site_tc_leak(3000);
	w = n_leak * words(3000);
	truth("wl_site_tc_leak", w, w, n_leak);
}

#elif defined(WL_MIMALLOC)

WL_SITE(wl_site_mi_malloc, (size_t size), mi_malloc(size))
WL_SITE(wl_site_mi_zalloc, (size_t size), mi_zalloc(size))
WL_SITE(wl_site_mi_calloc, (size_t n, size_t size), mi_calloc(n, size))
WL_SITE(wl_site_mi_realloc, (void *old, size_t size), mi_realloc(old, size))
WL_SITE(wl_site_mi_aligned, (size_t size), mi_malloc_aligned(size, 128))
WL_SITE(wl_site_mi_heap, (mi_heap_t *heap, size_t size), mi_heap_malloc(heap, size))
WL_SITE(wl_site_mi_new, (size_t size), mi_new(size))
WL_SITE(wl_site_mi_leak, (size_t size), mi_malloc(size))

static void run_own(long scale)
{
	const long n_small = 50000 * scale, n_zalloc = 5000 * scale, n_calloc = 2000 * scale;
	const long n_chains = 100 * scale, n_aligned = 1000 * scale, n_heap = 20000 * scale;
	const long n_new = 10000 * scale, n_leak = 1000 * scale;
	mi_heap_t *heap;
	uint64_t w;

	for (long i = 0; i < n_small; i++) {
		mi_free(wl_site_mi_malloc(200));
		pace(i);
	}
	truth("wl_site_mi_malloc", n_small * words(200), 0, n_small);

	for (long i = 0; i < n_zalloc; i++) {
		mi_free_size(wl_site_mi_zalloc(500), 500);
		pace(i);
	}
	truth("wl_site_mi_zalloc", n_zalloc * words(500), 0, n_zalloc);

	for (long i = 0; i < n_calloc; i++) {
		mi_free(wl_site_mi_calloc(20, 100));
		pace(i);
	}
	truth("wl_site_mi_calloc", n_calloc * words(2000), 0, n_calloc);

	w = 0;
	for (long c = 0; c < n_chains; c++) {
		void *p = NULL;

		for (size_t s = 16; s <= 65536; s *= 2) {
			p = wl_site_mi_realloc(p, s);
			if (!p)
				die("mi_realloc");
			w += words(s);
		}
		mi_free(p);
	}
	truth("wl_site_mi_realloc", w, 0, n_chains * 13);

	for (long i = 0; i < n_aligned; i++) {
		mi_free_aligned(wl_site_mi_aligned(4000), 128);
		pace(i);
	}
	truth("wl_site_mi_aligned", n_aligned * words(4000), 0, n_aligned);

	heap = mi_heap_new();
	if (!heap)
		die("mi_heap_new");
	for (long i = 0; i < n_heap; i++) {
		mi_free(wl_site_mi_heap(heap, 120));
		pace(i);
	}
	mi_heap_delete(heap);
	truth("wl_site_mi_heap", n_heap * words(120), 0, n_heap);

	for (long i = 0; i < n_new; i++) {
		mi_free(wl_site_mi_new(72));
		pace(i);
	}
	truth("wl_site_mi_new", n_new * words(72), 0, n_new);

	for (long i = 0; i < n_leak; i++)
		wl_site_mi_leak(3000);
	w = n_leak * words(3000);
	truth("wl_site_mi_leak", w, w, n_leak);
}

#endif

int main(int argc, char **argv)
{
	long scale = argc > 2 ? atol(argv[2]) : 1;

	if (argc < 2 || strcmp(argv[1], "api") || scale < 1) {
		fprintf(stderr, "usage: %s api [SCALE]\n", argv[0]);
		return 2;
	}
	run_std(scale);
	run_own(scale);
	return 0;
}
