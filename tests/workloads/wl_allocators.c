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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- the standard API, served by the linked allocator ---- */

WL_MALLOC_SITE(wl_site_std_small)
WL_MALLOC_SITE(wl_site_std_leak)
WL_SITE(wl_site_std_calloc, (size_t size), calloc(10, size / 10))
WL_SITE(wl_site_std_realloc, (void *old, size_t size), realloc(old, size))
WL_MEMALIGN_SITE(wl_site_std_memalign, 64)

static void run_std(long scale)
{
	wl_freed("wl_site_std_small", wl_site_std_small, wl_free, 24, 100000 * scale);
	wl_leaked("wl_site_std_leak", wl_site_std_leak, 1000, 2000 * scale);
	wl_freed("wl_site_std_calloc", wl_site_std_calloc, wl_free, 1000, 3000 * scale);
	wl_realloc_chains("wl_site_std_realloc", wl_site_std_realloc, NULL, wl_free, 100 * scale);
	wl_freed("wl_site_std_memalign", wl_site_std_memalign, wl_free, 4000, 1000 * scale);
}

/* ---- the allocator's own API ---- */

#if defined(WL_JEMALLOC)

WL_SITE(wl_site_mallocx, (size_t size), mallocx(size, 0))
/* alignment and zeroing flags do not change the size accounted */
WL_SITE(wl_site_mallocx_aligned, (size_t size), mallocx(size, MALLOCX_ALIGN(64) | MALLOCX_ZERO))
WL_SITE(wl_site_mallocx_leak, (size_t size), mallocx(size, 0))
WL_SITE(wl_site_mallocx_big, (size_t size), mallocx(size, 0))
WL_SITE(wl_site_mallocx_keep, (size_t size), mallocx(size, 0))
WL_SITE(wl_site_rallocx, (void *old, size_t size), rallocx(old, size, 0))

__attribute__((noipa)) static size_t wl_site_xallocx(void *p, size_t size)
{
	size_t r = xallocx(p, size, 0, 0);

	wl_sink = p;
	return r;
}

WL_RELEASE(je_sdallocx, sdallocx(p, size, 0))
WL_RELEASE(je_dallocx, dallocx(p, 0))

static void *je_first(void)
{
	return mallocx(8, 0);
}

static void run_own(long scale)
{
	const long n_leak = 1000 * scale, n_x = 200 * scale;
	uint64_t w, xw = 0, xblocks = 0;

	wl_freed("wl_site_mallocx", wl_site_mallocx, je_sdallocx, 200, 50000 * scale);
	wl_freed("wl_site_mallocx_aligned", wl_site_mallocx_aligned, je_dallocx, 4000,
		 1000 * scale);
	wl_leaked("wl_site_mallocx_leak", wl_site_mallocx_leak, 3000, n_leak);
	/* rallocx chains 8 -> 16 -> ... -> 64 KiB (the first block comes from mallocx) */
	wl_realloc_chains("wl_site_rallocx", wl_site_rallocx, je_first, je_dallocx, 100 * scale);

	/* xallocx: a block of 64 KiB shrunk in place to 32 KiB, then asked to grow back to
	 * 48 KiB (in place only if the pages after it are free). Each call that returns at least
	 * the size asked for is a new block of that size at the same address (collect + alloc);
	 * the others change nothing. The 64 KiB blocks come from wl_site_mallocx_big. */
	for (long i = 0; i < n_x; i++) {
		void *p = wl_site_mallocx_big(65536);

		if (!p)
			wl_die("mallocx");
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
			wl_die("mallocx");
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
WL_SITE(wl_site_tc_calloc, (size_t size), tc_calloc(20, size / 20))
WL_SITE(wl_site_tc_realloc, (void *old, size_t size), tc_realloc(old, size))
WL_SITE(wl_site_tc_memalign, (size_t size), tc_memalign(256, size))
WL_SITE(wl_site_tc_new, (size_t size), tc_new(size))
WL_SITE(wl_site_tc_leak, (size_t size), tc_newarray(size))

WL_RELEASE(tc_release, tc_free(p))
WL_RELEASE(tc_release_c, tc_cfree(p))
WL_RELEASE(tc_release_sized, tc_free_sized(p, size))
WL_RELEASE(tc_release_new, tc_delete(p))

static void run_own(long scale)
{
	wl_freed("wl_site_tc_malloc", wl_site_tc_malloc, tc_release, 200, 50000 * scale);
	wl_freed("wl_site_tc_calloc", wl_site_tc_calloc, tc_release_c, 2000, 2000 * scale);
	wl_realloc_chains("wl_site_tc_realloc", wl_site_tc_realloc, NULL, tc_release_sized,
			  100 * scale);
	wl_freed("wl_site_tc_memalign", wl_site_tc_memalign, tc_release, 4000, 1000 * scale);
	wl_freed("wl_site_tc_new", wl_site_tc_new, tc_release_new, 72, 20000 * scale);
	wl_leaked("wl_site_tc_leak", wl_site_tc_leak, 3000, 1000 * scale);
}

#elif defined(WL_MIMALLOC)

/* the heap wl_site_mi_heap allocates from */
static mi_heap_t *heap;

WL_SITE(wl_site_mi_malloc, (size_t size), mi_malloc(size))
WL_SITE(wl_site_mi_zalloc, (size_t size), mi_zalloc(size))
WL_SITE(wl_site_mi_calloc, (size_t size), mi_calloc(20, size / 20))
WL_SITE(wl_site_mi_realloc, (void *old, size_t size), mi_realloc(old, size))
WL_SITE(wl_site_mi_aligned, (size_t size), mi_malloc_aligned(size, 128))
WL_SITE(wl_site_mi_heap, (size_t size), mi_heap_malloc(heap, size))
WL_SITE(wl_site_mi_new, (size_t size), mi_new(size))
WL_SITE(wl_site_mi_leak, (size_t size), mi_malloc(size))

WL_RELEASE(mi_release, mi_free(p))
WL_RELEASE(mi_release_sized, mi_free_size(p, size))
WL_RELEASE(mi_release_aligned, mi_free_aligned(p, 128))

static void run_own(long scale)
{
	wl_freed("wl_site_mi_malloc", wl_site_mi_malloc, mi_release, 200, 50000 * scale);
	wl_freed("wl_site_mi_zalloc", wl_site_mi_zalloc, mi_release_sized, 500, 5000 * scale);
	wl_freed("wl_site_mi_calloc", wl_site_mi_calloc, mi_release, 2000, 2000 * scale);
	wl_realloc_chains("wl_site_mi_realloc", wl_site_mi_realloc, NULL, mi_release,
			  100 * scale);
	wl_freed("wl_site_mi_aligned", wl_site_mi_aligned, mi_release_aligned, 4000,
		 1000 * scale);
	heap = mi_heap_new();
	if (!heap)
		wl_die("mi_heap_new");
	wl_freed("wl_site_mi_heap", wl_site_mi_heap, mi_release, 120, 20000 * scale);
	mi_heap_delete(heap);
	wl_freed("wl_site_mi_new", wl_site_mi_new, mi_release, 72, 10000 * scale);
	wl_leaked("wl_site_mi_leak", wl_site_mi_leak, 3000, 1000 * scale);
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
