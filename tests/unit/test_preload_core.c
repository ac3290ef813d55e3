// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libmemprof-preload's core without interposition: the geometric and binomial draws
 * (distribution tests against the exact laws) and the lock-free sampled-address table
 * (single-threaded semantics, then several threads inserting and removing each other's
 * addresses). Built with ASan/UBSan too.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/chisq.h"
#include "tests/unit/test.h"
#include "userspace-lib/preload/pl_core.h"

/* The countdown process: blocks of w words; the histogram of samples per block. */
static void check_blocks(double rate, uint64_t w, uint64_t blocks, uint64_t seed)
{
	struct pl_rng r;
	double log1m = log1p(-rate), chi2, pv;
	uint64_t hist[64] = { 0 }, total = 0;
	int64_t c;
	int df;

	pl_rng_seed(&r, seed);
	c = pl_draw_geom(&r, log1m);
	for (uint64_t b = 0; b < blocks; b++) {
		uint64_t n = 0;

		c -= (int64_t)w;
		if (c <= 0)
			n = pl_draw_samples(&r, log1m, -c, &c);
		total += n;
		hist[n < 63 ? n : 63]++;
	}
	pv = chisq_binomial_test(hist, 64, blocks, w, rate, &chi2, &df);
	if (!ASSERT_TRUE(pv > 0.001, "samples per block ~ Binomial(w, rate)"))
		fprintf(stderr, "rate %g w %" PRIu64 ": chi2 %.2f df %d p %.3g\n", rate, w, chi2,
			df, pv);
	/* Total: z of the unbiased estimate. */
	double wt = (double)w * (double)blocks;
	double z = ((double)total / rate - wt) / sqrt(wt * (1 - rate) / rate);

	if (!ASSERT_TRUE(fabs(z) < 4, "estimated words within 4 SE"))
		fprintf(stderr, "rate %g w %" PRIu64 ": z %.2f\n", rate, w, z);
}

static void test_binomial_small_blocks(void)
{
	check_blocks(0.01, 251, 40000, 1);	/* w < 1/rate: mostly 0 or 1 sample */
}

static void test_binomial_large_blocks(void)
{
	check_blocks(0.01, 1001, 20000, 2);	/* w > 1/rate: several samples each */
	check_blocks(1e-4, 25001, 20000, 3);
}

static void test_rate_one(void)
{
	struct pl_rng r;
	int64_t next;

	pl_rng_seed(&r, 4);
	ASSERT_EQ(pl_draw_geom(&r, log1p(-1.0)), 1, "rate 1: every word");
	ASSERT_EQ(pl_draw_samples(&r, log1p(-1.0), 99, &next), 100, "rate 1: n = w");
	ASSERT_EQ(next, 1, "rate 1: next countdown");
}

static void test_geometric_mean(void)
{
	struct pl_rng r;
	double rate = 1.0 / 65536, sum = 0;
	const int N = 200000;

	pl_rng_seed(&r, 5);
	for (int i = 0; i < N; i++) {
		int64_t g = pl_draw_geom(&r, log1p(-rate));

		if (!ASSERT_TRUE(g >= 1, "geometric >= 1"))
			return;
		sum += (double)g;
	}
	/* mean 1/rate, sd sqrt(1-rate)/rate */
	double z = (sum / N - 1 / rate) / (sqrt(1 - rate) / rate / sqrt(N));

	ASSERT_TRUE(fabs(z) < 4, "geometric mean 1/rate");
	ASSERT_TRUE(pl_draw_geom(&r, log1p(-1e-300)) <= PL_GEOM_MAX, "tiny rate is clamped");
}

static void test_rng_streams_differ(void)
{
	struct pl_rng a, b;
	int same = 0;

	pl_rng_seed(&a, 42);
	pl_rng_seed(&b, 43);
	for (int i = 0; i < 1000; i++)
		same += pl_rng_next(&a) == pl_rng_next(&b);
	ASSERT_EQ(same, 0, "adjacent seeds give unrelated streams");
}

static struct pl_table table;

static void test_table_basic(void)
{
	uintptr_t a = 0x7f0000001000, b = 0x7f0000002010;
	uint64_t id = 0;

	ASSERT_TRUE(!pl_table_maybe(&table, (void *)a), "empty filter");
	ASSERT_EQ(pl_table_insert(&table, a, 41), PL_INSERTED, "insert a");
	ASSERT_EQ(pl_table_insert(&table, a, 42), PL_ALREADY, "insert a again");
	ASSERT_TRUE(pl_table_maybe(&table, (void *)a), "filter after insert");
	ASSERT_TRUE(pl_table_contains(&table, a), "contains a");
	ASSERT_TRUE(!pl_table_contains(&table, b), "not b");
	ASSERT_TRUE(!pl_table_remove(&table, b, &id), "remove absent");
	ASSERT_TRUE(pl_table_remove(&table, a, &id), "remove a");
	ASSERT_EQ(id, 41, "the id stored with a comes back with its removal");
	ASSERT_TRUE(!pl_table_remove(&table, a, &id), "remove a twice");
	ASSERT_EQ(pl_table_insert(&table, a, 43), PL_INSERTED, "a reused");
	ASSERT_TRUE(pl_table_remove(&table, a, &id) && id == 43, "the reused block's own id");
	ASSERT_TRUE(!pl_table_maybe(&table, (void *)a), "filter cleared");
	ASSERT_TRUE(!pl_table_remove(&table, 0, &id), "NULL is never sampled");
}

/* Insert @n addresses addr(i), count the results, then remove them all again. */
static void table_fill(uintptr_t (*addr)(int), int n, int *inserted, int *full)
{
	uint64_t id;

	*inserted = *full = 0;
	for (int i = 0; i < n; i++) {
		enum pl_insert_result res = pl_table_insert(&table, addr(i), (uint64_t)i + 1);

		*inserted += res == PL_INSERTED;
		*full += res == PL_FULL;
	}
	for (int i = 0; i < n; i++) {
		bool in = pl_table_contains(&table, addr(i));

		ASSERT_TRUE(pl_table_remove(&table, addr(i), &id) == in, "removed if present");
		if (in)
			ASSERT_EQ(id, (uint64_t)i + 1, "each address' own id");
	}
	for (int i = 0; i < n; i += 4099)
		ASSERT_TRUE(!pl_table_contains(&table, addr(i)), "emptied");
}

#define T_SLOTS	(PL_BUCKET_SLOTS << PL_TABLE_BUCKET_BITS)

/* A heap of 32-byte chunks, every one sampled: 64-byte granules hold 2, over 1.5 windows. */
static uintptr_t heap_addr(int i)
{
	return 0x7f0000000010 + (uintptr_t)i * 32;
}

/* Blocks scattered at random over 64 GiB. */
static uintptr_t scattered_addr(int i)
{
	uint64_t x = (uint64_t)i;

	return 0x100000000000 + (pl_splitmix64(&x) & 0xffffffff0);
}

/* 16-byte blocks, 4 per granule, 6 windows: the first bucket overflows everywhere. */
static uintptr_t dense_addr(int i)
{
	return 0x200000000000 + (uintptr_t)i * 16;
}

static void test_table_load(void)
{
	const int three_quarters = T_SLOTS / 4 * 3;
	int inserted, full;

	/* Laid out as heaps are, a load of 3/4 fits; at random, 1/2 does, 3/4 nearly. */
	table_fill(heap_addr, three_quarters, &inserted, &full);
	ASSERT_EQ(full, 0, "heap layout at load 3/4: no overflow");
	ASSERT_EQ(inserted, three_quarters, "heap layout: all inserted");
	table_fill(dense_addr, three_quarters, &inserted, &full);
	ASSERT_EQ(full, 0, "dense at load 3/4: no overflow");
	table_fill(scattered_addr, T_SLOTS / 2, &inserted, &full);
	ASSERT_EQ(full, 0, "scattered at load 1/2: no overflow");
	table_fill(scattered_addr, three_quarters, &inserted, &full);
	ASSERT_TRUE(full <= three_quarters / 1000, "scattered at load 3/4: under 0.1% overflow");
	/* More addresses than slots: what does not fit is reported, the rest fills the table. */
	table_fill(scattered_addr, T_SLOTS + T_SLOTS / 4, &inserted, &full);
	ASSERT_TRUE(full >= T_SLOTS / 4, "overflow reported as PL_FULL");
	ASSERT_TRUE(inserted > T_SLOTS / 10 * 9, "at least 90% of the slots usable");
	/* Saturated filter counters stay set (sticky), everything else is back to 0. */
	ASSERT_EQ(pl_table_insert(&table, dense_addr(0), 7), PL_INSERTED, "reusable after removal");
	ASSERT_EQ(pl_table_insert(&table, dense_addr(0), 8), PL_ALREADY, "found after removal");
	ASSERT_TRUE(pl_table_remove(&table, dense_addr(0), &(uint64_t){ 0 }), "removed again");
}

/*
 * A size class laid out over several 4 MiB windows (blocks of 512 B to 4 KiB, one in each
 * slot, up to 64 MiB): its blocks spread over the filter, at most 2 on a counter. An index
 * that moved a page's line with its window but permuted its granules only by its 64 KiB chunk
 * put the blocks of 16 windows on one counter, and a block's six buckets could all be full.
 */
static void test_filter_spread(void)
{
	static uint8_t count[1u << PL_FILTER_BITS];
	const uintptr_t bases[] = { 0x7f1234000000, 0x55e0c1e3a000, 0x560f00000800 };
	const struct {
		uintptr_t stride;
		int windows;
	} classes[] = { { 512, 2 }, { 1024, 4 }, { 2048, 8 }, { 2048, 16 }, { 4096, 16 } };

	for (size_t b = 0; b < sizeof(bases) / sizeof(bases[0]); b++) {
		for (size_t c = 0; c < sizeof(classes) / sizeof(classes[0]); c++) {
			uintptr_t n = ((uintptr_t)classes[c].windows << 22) / classes[c].stride;
			unsigned int max = 0;

			memset(count, 0, sizeof(count));
			for (uintptr_t k = 0; k < n; k++) {
				uint8_t *x = &count[pl_filter_index(bases[b] + k * classes[c].stride)];

				if (++*x > max)
					max = *x;
			}
			ASSERT_TRUE(max <= 2, "a size class over windows: at most 2 blocks a counter");
		}
	}
	/* ... while a page's 64 granules still share one line of counters */
	for (uintptr_t g = 0; g < 64; g++)
		ASSERT_EQ(pl_filter_index(0x55e0c1e3a000 + g * 64) >> 6,
			  pl_filter_index(0x55e0c1e3a000) >> 6, "one line a page");
}

/* Threads insert addresses and hand them to the next thread, which removes them. */
#define T_THREADS	4
#define T_ROUNDS	200
#define T_BATCH		512

static uintptr_t handoff[T_THREADS][T_BATCH];
static pthread_barrier_t barrier;
static int errors[T_THREADS];

static void *table_worker(void *arg)
{
	int id = (int)(intptr_t)arg;

	for (int round = 0; round < T_ROUNDS; round++) {
		for (int i = 0; i < T_BATCH; i++) {
			uintptr_t a = ((uintptr_t)(id + 1) << 40) | ((uintptr_t)round << 20) |
				      ((uintptr_t)i << 4);

			if (pl_table_insert(&table, a, a ^ 0x5555) != PL_INSERTED)
				errors[id]++;
			handoff[id][i] = a;
		}
		pthread_barrier_wait(&barrier);
		/* remove what the previous thread inserted (cross-thread frees) */
		int prev = (id + T_THREADS - 1) % T_THREADS;

		for (int i = 0; i < T_BATCH; i++) {
			uint64_t bid = 0;

			if (!pl_table_maybe(&table, (void *)handoff[prev][i]) ||
			    !pl_table_remove(&table, handoff[prev][i], &bid) ||
			    bid != (handoff[prev][i] ^ 0x5555))
				errors[id]++;
		}
		pthread_barrier_wait(&barrier);
	}
	return NULL;
}

static void test_table_threads(void)
{
	pthread_t t[T_THREADS];
	int total = 0;

	pthread_barrier_init(&barrier, NULL, T_THREADS);
	for (int i = 0; i < T_THREADS; i++)
		pthread_create(&t[i], NULL, table_worker, (void *)(intptr_t)i);
	for (int i = 0; i < T_THREADS; i++) {
		pthread_join(t[i], NULL);
		total += errors[i];
	}
	pthread_barrier_destroy(&barrier);
	ASSERT_EQ(total, 0, "every insert found and removed by another thread");
	for (int id = 0; id < T_THREADS; id++)
		for (int i = 0; i < T_BATCH; i += 37)
			ASSERT_TRUE(!pl_table_contains(&table, handoff[id][i]), "table empty");
}

int main(void)
{
	RUN(test_rate_one);
	RUN(test_geometric_mean);
	RUN(test_rng_streams_differ);
	RUN(test_binomial_small_blocks);
	RUN(test_binomial_large_blocks);
	RUN(test_table_basic);
	RUN(test_filter_spread);
	RUN(test_table_load);
	RUN(test_table_threads);
	return test_exit();
}
