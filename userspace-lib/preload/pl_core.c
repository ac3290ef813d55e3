// SPDX-License-Identifier: LGPL-2.1-or-later
/* PRNG, sampling draws and the sampled-address table of libmemprof-preload (see pl_core.h). */
#include <math.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pl_core.h"
#include "userspace-lib/rng.h"

uint64_t pl_splitmix64(uint64_t *x)
{
	return mp_splitmix64(x);
}

void pl_rng_seed(struct pl_rng *r, uint64_t seed)
{
	mp_xoshiro256_seed(r->s, seed);
}

uint64_t pl_rng_next(struct pl_rng *r)
{
	return mp_xoshiro256_next(r->s);
}

int64_t pl_draw_geom(struct pl_rng *r, double log1m)
{
	double u = mp_uniform53(pl_rng_next(r));
	double g = floor(log(u) / log1m) + 1.0;

	/* rate 1: log1m = -inf, log(u)/-inf = 0 (or -0 for u = 1): g = 1. */
	if (!(g < (double)PL_GEOM_MAX))
		return PL_GEOM_MAX;
	return g < 1.0 ? 1 : (int64_t)g;
}

uint64_t pl_draw_samples(struct pl_rng *r, double log1m, int64_t remaining, int64_t *next)
{
	uint64_t n = 1;
	int64_t pos = pl_draw_geom(r, log1m);

	while (pos <= remaining) {
		n++;
		pos += pl_draw_geom(r, log1m);
	}
	*next = pos - remaining;
	return n;
}

/* ---- table ---------------------------------------------------------------------------- */

/*
 * An address' candidate buckets, tried in order. The first is its filter counter's own index:
 * blocks close in memory share lines of buckets as they share lines of counters, so the
 * buckets a program's sampled blocks use follow its heap's working set (at one sample in a
 * few hundred allocations, buckets picked by hash cost an insert one or two cache misses:
 * ~160 ns a sample in bench-fast's loop at a 512 KiB interval, bench/RESULTS.md). What that
 * bucket cannot hold (more than 4 sampled blocks in a 64-byte granule, or 4 MiB windows that
 * fold onto it) goes to buckets picked by double hashing: several, because a dense heap fills
 * whole ranges of first buckets, and a hashed candidate falls into such a range more often than
 * a random bucket is full.
 */
#define PL_CANDIDATES	6

struct pl_probe {
	uint32_t k;		/* candidates returned so far */
	uint32_t at, step;
};

static inline struct pl_probe probe_start(uintptr_t addr)
{
	uint64_t h = (addr >> 4) * 0xff51afd7ed558ccdULL;

	h ^= h >> 29;	/* the low bits of a product depend on the low bits of addr only */
	h *= 0xc4ceb9fe1a85ec53ULL;
	return (struct pl_probe){
		.at = (uint32_t)(h >> 48),
		.step = (uint32_t)(h >> 32) | 1,	/* odd: the sequence visits every bucket */
	};
}

/* The next candidate bucket's index, false after the last. */
static inline bool probe_next(struct pl_probe *p, uintptr_t addr, uint32_t *bucket)
{
	if (p->k == PL_CANDIDATES)
		return false;
	if (p->k++ == 0) {
		*bucket = pl_filter_index(addr);
		return true;
	}
	if (p->k > 2)	/* the second candidate is the hash itself */
		p->at += p->step;
	*bucket = p->at & ((1u << PL_TABLE_BUCKET_BITS) - 1);
	return true;
}

static void filter_inc(struct pl_table *t, uintptr_t addr)
{
	uint8_t *f = &t->filter[pl_filter_index(addr)];
	uint8_t v = __atomic_load_n(f, __ATOMIC_RELAXED);

	while (v != 255 &&
	       !__atomic_compare_exchange_n(f, &v, v + 1, true, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		;
}

static void filter_dec(struct pl_table *t, uintptr_t addr)
{
	uint8_t *f = &t->filter[pl_filter_index(addr)];
	uint8_t v = __atomic_load_n(f, __ATOMIC_RELAXED);

	/* 255 is sticky; 0 happens only for entries a fork child inherited half-inserted. */
	while (v != 255 && v != 0 &&
	       !__atomic_compare_exchange_n(f, &v, v - 1, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

static int bucket_find(struct pl_slot *b, uintptr_t addr)
{
	for (int i = 0; i < PL_BUCKET_SLOTS; i++)
		if (__atomic_load_n(&b[i].addr, __ATOMIC_ACQUIRE) == addr)
			return i;
	return -1;
}

static bool table_find(pl_bucket *slot, uintptr_t addr)
{
	struct pl_probe p = probe_start(addr);
	uint32_t b;

	while (probe_next(&p, addr, &b))
		if (bucket_find(slot[b], addr) >= 0)
			return true;
	return false;
}

static pl_bucket *table_slots(struct pl_table *t)
{
	return __atomic_load_n(&t->slot, __ATOMIC_ACQUIRE);
}

#define PL_TABLE_BYTES	((size_t)sizeof(pl_bucket) << PL_TABLE_BUCKET_BITS)
#define PL_HUGE		((size_t)2 << 20)

void *pl_anon_map(size_t len)
{
	return (void *)syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
}

/* Map the buckets, 2 MiB aligned for huge pages; the first thread to get here wins. */
static pl_bucket *table_map(struct pl_table *t)
{
	pl_bucket *expect = NULL;
	uintptr_t raw, start;
	char *m = pl_anon_map(PL_TABLE_BYTES + PL_HUGE);

	if (m == MAP_FAILED)
		return NULL;
	raw = (uintptr_t)m;
	start = (raw + PL_HUGE - 1) & ~(uintptr_t)(PL_HUGE - 1);
	if (start > raw)
		syscall(SYS_munmap, raw, start - raw);
	/* start < raw + PL_HUGE: there is always a tail */
	syscall(SYS_munmap, start + PL_TABLE_BYTES, raw + PL_HUGE - start);
	syscall(SYS_madvise, start, PL_TABLE_BYTES, MADV_HUGEPAGE);	/* best effort */
	if (!__atomic_compare_exchange_n(&t->slot, &expect, (pl_bucket *)start, false,
					 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		syscall(SYS_munmap, start, PL_TABLE_BYTES);
		return expect;
	}
	return (pl_bucket *)start;
}

bool pl_table_contains(struct pl_table *t, uintptr_t addr)
{
	pl_bucket *slot = table_slots(t);

	return addr && slot && table_find(slot, addr);
}

static bool bucket_claim(struct pl_slot *b, uintptr_t addr, uint64_t id)
{
	for (int i = 0; i < PL_BUCKET_SLOTS; i++) {
		uint64_t expect = 0;

		if (__atomic_load_n(&b[i].addr, __ATOMIC_RELAXED) == 0 &&
		    __atomic_compare_exchange_n(&b[i].addr, &expect, addr, false, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED)) {
			/* Published with the block itself: whoever frees it got it from us. */
			__atomic_store_n(&b[i].id, id, __ATOMIC_RELEASE);
			return true;
		}
	}
	return false;
}

enum pl_insert_result pl_table_insert(struct pl_table *t, uintptr_t addr, uint64_t id)
{
	pl_bucket *slot = table_slots(t);
	uint32_t b;

	if (!slot && !(slot = table_map(t)))
		return PL_FULL;
	/*
	 * Nobody else can insert or remove @addr now: the allocator just handed it to us. It
	 * can only be present if its previous free went unseen, and then its filter counter is
	 * not 0: an address alone in its granule costs no look at the hashed buckets.
	 */
	if (pl_filter_hit(t, (const void *)addr) && table_find(slot, addr))
		return PL_ALREADY;
	for (struct pl_probe p = probe_start(addr); probe_next(&p, addr, &b);) {
		if (bucket_claim(slot[b], addr, id)) {
			filter_inc(t, addr);
			return PL_INSERTED;
		}
	}
	return PL_FULL;
}

static bool bucket_remove(struct pl_slot *b, uintptr_t addr, uint64_t *id)
{
	int i = bucket_find(b, addr);
	uint64_t expect = addr;

	if (i < 0)
		return false;
	/* Read before the slot is released: then another block may take it. */
	*id = __atomic_load_n(&b[i].id, __ATOMIC_ACQUIRE);
	return __atomic_compare_exchange_n(&b[i].addr, &expect, 0, false, __ATOMIC_ACQ_REL,
					   __ATOMIC_RELAXED);
}

bool pl_table_remove(struct pl_table *t, uintptr_t addr, uint64_t *id)
{
	pl_bucket *slot = table_slots(t);
	uint32_t b;

	if (!addr || !slot)
		return false;
	for (struct pl_probe p = probe_start(addr); probe_next(&p, addr, &b);) {
		if (bucket_remove(slot[b], addr, id)) {
			filter_dec(t, addr);
			return true;
		}
	}
	return false;
}
