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

static inline uint32_t bucket1(uintptr_t addr)
{
	return (uint32_t)(((addr >> 4) * 0xff51afd7ed558ccdULL) >> (64 - PL_TABLE_BUCKET_BITS));
}

static inline uint32_t bucket2(uintptr_t addr)
{
	return (uint32_t)(((addr >> 4) * 0xc4ceb9fe1a85ec53ULL) >> (64 - PL_TABLE_BUCKET_BITS));
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

	return addr && slot && (bucket_find(slot[bucket1(addr)], addr) >= 0 ||
				bucket_find(slot[bucket2(addr)], addr) >= 0);
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
	struct pl_slot *b1, *b2;

	if (!slot && !(slot = table_map(t)))
		return PL_FULL;
	b1 = slot[bucket1(addr)];
	b2 = slot[bucket2(addr)];

	/*
	 * Nobody else can insert or remove @addr now: the allocator just handed it to us. It
	 * can only be present if its previous free went unseen.
	 */
	if (bucket_find(b1, addr) >= 0 || bucket_find(b2, addr) >= 0)
		return PL_ALREADY;
	if (!bucket_claim(b1, addr, id) && !bucket_claim(b2, addr, id))
		return PL_FULL;
	filter_inc(t, addr);
	return PL_INSERTED;
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

	if (!addr || !slot)
		return false;
	if (!bucket_remove(slot[bucket1(addr)], addr, id) &&
	    !bucket_remove(slot[bucket2(addr)], addr, id))
		return false;
	filter_dec(t, addr);
	return true;
}
