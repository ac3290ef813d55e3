// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Workload for tests/unit/preload-foreign.sh: a program linked with another allocator than
 * glibc's, run under LD_PRELOAD=libmemprof-preload.so. Built three times (preload.mk):
 * pl_foreign_je (-ljemalloc), pl_foreign_tc (-ltcmalloc_minimal), pl_foreign_mi (-lmimalloc).
 *
 *	pl_foreign_XX THREADS ROUNDS
 *
 * Every block comes from an interposed call (malloc family, operator new) and is checked and
 * released with the allocator's own API, which the preload does not interpose, and the other
 * way round: malloc_usable_size, sdallocx/rallocx/sallocx, tc_free/tc_malloc_size/
 * MallocExtension_GetOwnership, mi_free/mi_usable_size/mi_is_in_heap_region. A block the
 * preload took from glibc would crash or fail an ownership check; so would the block that
 * libpl_early.so's constructor allocated before the preload's constructor. Exits 0 when all
 * passed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * Per allocator: OWNED(p, n) whether it owns @p with at least @n usable bytes; OWN_FREE(p, n),
 * OWN_ALLOC(n), OWN_REALLOC(p, n) its own calls; COUNTED() the bytes it says it allocated
 * (UINT64_MAX: no cheap counter, ownership checks only).
 */
#if defined(PL_JE)
#include <jemalloc/jemalloc.h>
#define ALLOCATOR		"jemalloc"
#define OWNED(p, n)		(sallocx(p, 0) >= (n))
#define OWN_FREE(p, n)		sdallocx(p, n, 0)
#define OWN_ALLOC(n)		mallocx(n, 0)
#define OWN_REALLOC(p, n)	rallocx(p, n, 0)
#define COUNTED()		je_thread_allocated()
/* jemalloc's per-thread count of bytes it allocated: proves malloc reached jemalloc. */
static uint64_t je_thread_allocated(void)
{
	uint64_t v = 0;
	size_t sz = sizeof(v);

	return mallctl("thread.allocated", &v, &sz, NULL, 0) ? UINT64_MAX : v;
}
#elif defined(PL_TC)
#include <gperftools/malloc_extension_c.h>
#include <gperftools/tcmalloc.h>
#define ALLOCATOR		"tcmalloc"
#define OWNED(p, n)		(MallocExtension_GetOwnership(p) == MallocExtension_kOwned && \
				 tc_malloc_size(p) >= (n))
#define OWN_FREE(p, n)		((n) & 1 ? tc_free(p) : tc_free_sized(p, n))
#define OWN_ALLOC(n)		tc_malloc(n)
#define OWN_REALLOC(p, n)	tc_realloc(p, n)
#define COUNTED()		tc_current_allocated()
static uint64_t tc_current_allocated(void)
{
	size_t v = 0;

	return MallocExtension_GetNumericProperty("generic.current_allocated_bytes", &v) ?
		       v : UINT64_MAX;
}
#elif defined(PL_MI)
#include <mimalloc.h>
#define ALLOCATOR		"mimalloc"
#define OWNED(p, n)		(mi_is_in_heap_region(p) && mi_usable_size(p) >= (n))
#define OWN_FREE(p, n)		((n) & 1 ? mi_free(p) : mi_free_size(p, n))
#define OWN_ALLOC(n)		mi_malloc(n)
#define OWN_REALLOC(p, n)	mi_realloc(p, n)
#define COUNTED()		UINT64_MAX
#else
#error "define PL_JE, PL_TC or PL_MI"
#endif

static int owned(void *p, size_t n)
{
	return OWNED(p, n);
}

static void own_free(void *p, size_t n)
{
	OWN_FREE(p, n);
}

static void *own_alloc(size_t n)
{
	return OWN_ALLOC(n);
}

static void *own_realloc(void *p, size_t n)
{
	return OWN_REALLOC(p, n);
}

static uint64_t counted(void)
{
	return COUNTED();
}

/* The C++ operators, called by their mangled names (each allocator library defines them). */
void *op_new(size_t n) __asm__("_Znwm");
void *op_new_arr(size_t n) __asm__("_Znam");
void *op_new_al(size_t n, size_t al) __asm__("_ZnwmSt11align_val_t");
void op_delete(void *p) __asm__("_ZdlPv");
void op_delete_arr(void *p) __asm__("_ZdaPv");
void op_delete_sized(void *p, size_t n) __asm__("_ZdlPvm");
void op_delete_sz_al(void *p, size_t n, size_t al) __asm__("_ZdlPvmSt11align_val_t");

/* libpl_early.so's constructor mallocs this before the preload's constructor runs. */
#define PL_EARLY_SIZE	4242
extern void *pl_early_block;

static volatile uintptr_t sink;
static long failures;
static long rounds;

#define CHECK(cond, ...)                                                                       \
	do {                                                                                   \
		if (!(cond)) {                                                                 \
			__atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);                    \
			fprintf(stderr, "pl_foreign(" ALLOCATOR "): " __VA_ARGS__);            \
			fputc('\n', stderr);                                                   \
			return;                                                                \
		}                                                                              \
	} while (0)

static void fill(unsigned char *p, size_t n, unsigned int seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(seed + i * 7);
}

static int filled(const unsigned char *p, size_t n, unsigned int seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (unsigned char)(seed + i * 7))
			return 0;
	return 1;
}

static void one_round(unsigned int r)
{
	size_t n = 1 + (r * 2654435761u) % 5000;
	unsigned char *p, *q;
	void *a;

	/* malloc -> the allocator's usable size and sized free */
	p = malloc(n);
	CHECK(p && owned(p, n), "malloc(%zu) = %p not owned", n, (void *)p);
	CHECK(malloc_usable_size(p) >= n, "malloc_usable_size(%p) < %zu", (void *)p, n);
	sink = (uintptr_t)p;
	own_free(p, n);

	/* the allocator's own block -> our realloc and free */
	p = own_alloc(n);
	CHECK(p, "own_alloc(%zu)", n);
	fill(p, n, r);
	q = realloc(p, 2 * n);
	CHECK(q && owned(q, 2 * n) && filled(q, n, r), "realloc(own block, %zu)", 2 * n);
	free(q);

	/* realloc chain: grow to 256 KiB and back, contents kept, then the allocator's realloc */
	p = NULL;
	for (size_t sz = 8; sz <= 256 * 1024; sz *= 4) {
		q = realloc(p, sz);
		CHECK(q && owned(q, sz), "realloc(..., %zu)", sz);
		if (p)
			CHECK(filled(q, sz / 4, r), "realloc(%zu) lost contents", sz);
		fill(q, sz, r);
		p = q;
	}
	q = realloc(p, 100);
	CHECK(q && filled(q, 100, r), "realloc shrink");
	p = own_realloc(q, 200);
	CHECK(p && filled(p, 100, r), "own realloc of our realloc's block");
	free(p);

	/* calloc, reallocarray */
	p = calloc(n, 3);
	CHECK(p && owned(p, 3 * n), "calloc(%zu, 3)", n);
	for (size_t i = 0; i < 3 * n; i++)
		CHECK(!p[i], "calloc not zeroed");
	q = reallocarray(p, n, 5);
	CHECK(q && owned(q, 5 * n), "reallocarray");
	own_free(q, malloc_usable_size(q));

	/* aligned: posix_memalign, aligned_alloc, memalign, valloc */
	CHECK(!posix_memalign(&a, 256, n) && !((uintptr_t)a & 255) && owned(a, n),
	      "posix_memalign(256, %zu)", n);
	own_free(a, malloc_usable_size(a));
	a = aligned_alloc(64, 64 * (1 + n / 64));
	CHECK(a && !((uintptr_t)a & 63) && owned(a, n), "aligned_alloc(64)");
	free(a);
	a = memalign(4096, n);
	CHECK(a && !((uintptr_t)a & 4095) && owned(a, n), "memalign(4096, %zu)", n);
	free(a);
	a = valloc(n);
	CHECK(a && !((uintptr_t)a & 4095) && owned(a, n), "valloc(%zu)", n);
	free(a);

	/* C++: new/delete in every pairing with malloc/free and the allocator's API */
	p = op_new(n);
	CHECK(p && owned(p, n), "operator new(%zu)", n);
	op_delete_sized(p, n);
	p = op_new_arr(n);
	CHECK(p && owned(p, n), "operator new[](%zu)", n);
	own_free(p, malloc_usable_size(p));
	p = malloc(n);
	CHECK(p, "malloc");
	op_delete(p);
	p = op_new(n);
	free(p);
	p = op_new_arr(n);
	op_delete_arr(p);
	p = op_new_al(n, 128);
	CHECK(p && !((uintptr_t)p & 127) && owned(p, n), "aligned new(%zu, 128)", n);
	op_delete_sz_al(p, n, 128);
}

static void *worker(void *arg)
{
	(void)arg;
	for (long r = 0; r < rounds; r++)
		one_round((unsigned int)r);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t[16];
	int threads;
	uint64_t before, after;
	void *p;

	if (argc != 3) {
		fprintf(stderr, "usage: pl_foreign THREADS ROUNDS\n");
		return 2;
	}
	threads = atoi(argv[1]);
	rounds = atol(argv[2]);
	if (threads < 1 || threads > 16)
		return 2;

	if (!pl_early_block || !owned(pl_early_block, PL_EARLY_SIZE)) {
		fprintf(stderr, "pl_foreign(" ALLOCATOR "): a constructor's block is not owned\n");
		return 1;
	}
	own_free(pl_early_block, PL_EARLY_SIZE);

	/* The 3-line reproducer: malloc_usable_size on malloc's block. */
	p = malloc(10);
	if (!p || malloc_usable_size(p) < 10) {
		fprintf(stderr, "pl_foreign(" ALLOCATOR "): malloc_usable_size(malloc(10))\n");
		return 1;
	}
	free(p);
	/* A large malloc shows up in the allocator's own statistics. */
	before = counted();
	p = malloc(1 << 20);
	sink = (uintptr_t)p;
	after = counted();
	if (before != UINT64_MAX && (after == UINT64_MAX || after - before < (1 << 20))) {
		fprintf(stderr, "pl_foreign(" ALLOCATOR "): malloc(1 MiB) not counted "
			"(%llu -> %llu)\n", (unsigned long long)before, (unsigned long long)after);
		return 1;
	}
	free(p);

	for (int i = 0; i < threads; i++)
		if (pthread_create(&t[i], NULL, worker, NULL)) {
			fprintf(stderr, "pthread_create failed\n");
			return 1;
		}
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	if (failures) {
		fprintf(stderr, "pl_foreign(" ALLOCATOR "): %ld checks failed\n", failures);
		return 1;
	}
	printf("pl_foreign(" ALLOCATOR "): %d x %ld rounds ok\n", threads, rounds);
	return 0;
}
