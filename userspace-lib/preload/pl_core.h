/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The parts of libmemprof-preload that do not interpose anything: the per-thread PRNG, the
 * geometric/binomial draws of docs/sampling.md, and the table of sampled addresses that frees
 * are checked against. Everything here is async-signal-safe (no locks, no allocation) so the
 * interposers can call it from any context. Unit-tested on its own
 * (tests/unit/test_preload_core.c).
 */
#ifndef MP_PL_CORE_H
#define MP_PL_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PL_HIDDEN __attribute__((visibility("hidden")))

/*
 * @len bytes of private anonymous memory, read-write, MAP_NORESERVE, or MAP_FAILED: the system
 * call, not mmap() (the library interposes mmap).
 */
PL_HIDDEN void *pl_anon_map(size_t len);

/* ---- PRNG: xoshiro256** seeded with SplitMix64 ---------------------------------------- */

struct pl_rng {
	uint64_t s[4];
};

PL_HIDDEN uint64_t pl_splitmix64(uint64_t *x);
PL_HIDDEN void pl_rng_seed(struct pl_rng *r, uint64_t seed);
PL_HIDDEN uint64_t pl_rng_next(struct pl_rng *r);

/* ---- Sampling draws ------------------------------------------------------------------- */

/* Largest countdown we ever draw: keeps "countdown - words" far from overflow. */
#define PL_GEOM_MAX	(1LL << 60)

/*
 * G ~ Geometric(rate) on {1, 2, ...}: words up to and including the next sample point.
 * @log1m is log1p(-rate) (-inf for rate 1).
 */
PL_HIDDEN int64_t pl_draw_geom(struct pl_rng *r, double log1m);

/*
 * A block whose first sample point leaves @remaining words after it: returns its sample
 * count 1 + Binomial(remaining, rate), counting geometric gaps that fit, and stores in
 * *@next the countdown for the words after the block (the overshoot of the last gap, a fresh
 * geometric by memorylessness).
 */
PL_HIDDEN uint64_t pl_draw_samples(struct pl_rng *r, double log1m, int64_t remaining,
				   int64_t *next);

/* ---- Sampled-address table -------------------------------------------------------------
 *
 * Frees must find out cheaply whether their address was sampled. Two structures:
 *  - filter: 64 Ki saturating 8-bit counters, one per 64-byte granule of a 4 MiB window of
 *    the address space (pl_filter_index()). A free whose counter is 0 was certainly not
 *    sampled (the only check on the hot free path: one byte load). 255 is sticky (never
 *    decremented) so counts never underflow.
 *  - table: 64 Ki buckets of 4 slots (one cache line each); an address may live in one of
 *    six: first the bucket of its filter counter's index, so that blocks close in memory use
 *    close buckets, then five picked by double hashing for what that one cannot hold. Slots
 *    hold the address (or 0) and the block's id; insert is a CAS 0 -> addr
 *    then a store of the id, remove a read of the id then a CAS addr -> 0, so there are no
 *    tombstones and no locks: safe in signal handlers and across threads. An address is
 *    inserted by the thread that allocated it, before the allocator returns it, so any thread
 *    that can free it sees the insert and its id.
 * The filter lives in .bss: while nothing was ever sampled every filter read hits the shared
 * zero page. The table (4 MiB) is mapped at the first insert, with transparent huge pages
 * where the system allows them: a heap spreads its buckets over the whole table, and in 4 KiB
 * pages the first touches would cost two page faults each (a read, then the write) for
 * thousands of pages, more than the rest of the sampled path. If it cannot be mapped, inserts
 * report PL_FULL.
 */
#define PL_FILTER_BITS		16
#define PL_TABLE_BUCKET_BITS	16
#define PL_BUCKET_SLOTS		4

struct pl_slot {
	uint64_t addr;
	uint64_t id;
};

typedef struct pl_slot pl_bucket[PL_BUCKET_SLOTS] __attribute__((aligned(64)));

struct pl_table {
	/* first: a free indexes it as is */
	uint8_t filter[1u << PL_FILTER_BITS] __attribute__((aligned(64)));
	pl_bucket *slot;	/* 1 << PL_TABLE_BUCKET_BITS buckets, mapped at the first insert */
};

enum pl_insert_result {
	PL_INSERTED,
	PL_ALREADY,	/* address was still there: its free was missed */
	PL_FULL,	/* all its candidate buckets full */
};

/*
 * The counter of @addr: one per 64-byte granule of a 4 MiB window of the address space. Frees
 * close in memory read close counters (the 64 granules of a 4 KiB page share one 64-byte line
 * of counters), so the filter's share of the cache follows the heap's working set (1/64 of
 * it): counters picked at random put every free on a line of its own among 1024, an L1 miss
 * a pair once they are all mapped (~1 ns per pair in bench-fast's loop). Two shifted copies of
 * the address are XORed in, both constant over a page, so a page's 64 granules stay on one line
 * and are only permuted there:
 *  - bits 16-31 move a page's line with its window (bits 22-31; glibc's arenas are 64 MiB
 *    aligned) and permute its granules by its 64 KiB chunk;
 *  - bits 22-37 permute its granules by its window too. Without them, windows whose numbers
 *    differ in their low 4 bits only map whole chunks onto the same counters, granule for
 *    granule: with a size class spread over a few windows (tcmalloc's 2 KiB class in
 *    preload-foreign's test), 26 % of the inserts overflowed their first bucket and one run in
 *    70 found all six candidates of a block full (0 and 5 in 954k with them, replaying the
 *    same runs).
 * A false positive costs a table lookup.
 */
static inline uint32_t pl_filter_index(uintptr_t addr)
{
	return (uint32_t)((addr >> 6) ^ (addr >> 16) ^ (addr >> 22)) & ((1u << PL_FILTER_BITS) - 1);
}

/*
 * Was anything ever tracked? The buckets are mapped at the first insert and never unmapped:
 * until then every filter byte is 0 and a release needs no look at the filter. The thread that
 * frees a block learned its address from the one that allocated it, after the insert.
 */
static inline bool pl_table_used(const struct pl_table *t)
{
	return __atomic_load_n(&t->slot, __ATOMIC_RELAXED) != NULL;
}

/* The filter alone: false means "certainly not sampled". */
static inline bool pl_filter_hit(const struct pl_table *t, const void *p)
{
	return __atomic_load_n(&t->filter[pl_filter_index((uintptr_t)p)], __ATOMIC_RELAXED) != 0;
}

/* The hot-path check: false means "certainly not sampled". */
static inline bool pl_table_maybe(const struct pl_table *t, const void *p)
{
	return pl_table_used(t) && pl_filter_hit(t, p);
}

/*
 * Start loading @addr's first bucket: the caller has work to do before it inserts @addr, and
 * the bucket is usually not in the cache.
 */
static inline void pl_table_prefetch(const struct pl_table *t, uintptr_t addr)
{
	const pl_bucket *slot = __atomic_load_n(&t->slot, __ATOMIC_RELAXED);

	if (slot)
		__builtin_prefetch(&slot[pl_filter_index(addr)], 1);
}

/* Track @addr with its block id @id. */
PL_HIDDEN enum pl_insert_result pl_table_insert(struct pl_table *t, uintptr_t addr, uint64_t id);
/* True if @addr was in the table (and is now removed); its id in *@id. */
PL_HIDDEN bool pl_table_remove(struct pl_table *t, uintptr_t addr, uint64_t *id);
PL_HIDDEN bool pl_table_contains(struct pl_table *t, uintptr_t addr);

#endif
