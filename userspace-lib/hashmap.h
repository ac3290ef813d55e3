/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The one hash map of the tree: open addressing with linear probing over slots of a two-word
 * key (k1, k2) and a 64-bit value, at most half full, grown by doubling, deleted from by
 * backward shift (no tombstones, so lookups stay short however many removals there were).
 *
 * Keys: any pair but (0, 0), which marks an empty slot. A single 64-bit key is (key, 0) when
 * the caller's keys are never 0, else (key, 1). A value too large for a word (a pointer, an
 * index) is stored as a word. Keys that are byte strings held by the caller (interned strings,
 * frames, stacks) go through the _eq functions: the caller hashes the bytes, the map stores
 * (hash, n) for the n-th distinct key of that hash (n from 1) and asks the caller's callback
 * whether a stored value names the bytes looked for; such entries are only removed all at once.
 *
 * Used by the memtrace codec (userspace-lib/codec), the symbolizer (daemon/stacks) and the
 * report model (report/). Not thread-safe; library code, so it never logs.
 */
#ifndef MEMPROF_HASHMAP_H
#define MEMPROF_HASHMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mp_hashmap_slot {
	uint64_t k1, k2;
	uint64_t val;
};

struct mp_hashmap {
	struct mp_hashmap_slot *slots;
	size_t cap;		/* a power of two, 0 before the first insertion */
	size_t len;
	size_t limit;		/* 0, or the most entries held: insertions beyond fail, -ENOSPC */
};

/* The value stored under (@k1, @k2), or NULL. */
uint64_t *mp_hashmap__find(const struct mp_hashmap *m, uint64_t k1, uint64_t k2);
/*
 * The value stored under (@k1, @k2), inserted (as 0) if absent; *@found says which. Returns
 * NULL with *@err = -EINVAL (the key (0, 0)), -ENOSPC (limit reached) or -ENOMEM. The pointer
 * is valid until the next insertion or removal.
 */
uint64_t *mp_hashmap__insert(struct mp_hashmap *m, uint64_t k1, uint64_t k2, bool *found,
			     int *err);
/* Insert or replace. Returns 0, -EINVAL, -ENOSPC or -ENOMEM. */
int mp_hashmap__put(struct mp_hashmap *m, uint64_t k1, uint64_t k2, uint64_t val);
/* Returns 0, or -ENOENT if (@k1, @k2) was absent. */
int mp_hashmap__remove(struct mp_hashmap *m, uint64_t k1, uint64_t k2);
/* Drop every entry and the storage; @limit stays. */
void mp_hashmap__clear(struct mp_hashmap *m);

/* Whether the stored value @val names the key the caller looks for (described by @ctx). */
typedef bool (*mp_hashmap_eq_fn)(const void *ctx, uint64_t val);

/* The value of a byte-string key of hash @hash for which @eq holds, or NULL. */
uint64_t *mp_hashmap__find_eq(const struct mp_hashmap *m, uint64_t hash, mp_hashmap_eq_fn eq,
			      const void *ctx);
/* Store @val for a new key of hash @hash (the caller found it absent). Returns 0 or -errno. */
int mp_hashmap__add_eq(struct mp_hashmap *m, uint64_t hash, uint64_t val);

/* A 64-bit mixing function (the splitmix64 finaliser): a bijection, and 0 maps to 0. */
static inline uint64_t mp_hash64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

#define MP_HASH_SEED	0xcbf29ce484222325ull	/* the FNV-1a offset basis */

/* FNV-1a over @n bytes at @p, continuing from @h (MP_HASH_SEED to start). */
static inline uint64_t mp_hash_bytes(uint64_t h, const void *p, size_t n)
{
	const unsigned char *s = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ s[i]) * 0x100000001b3ull;
	return h;
}

#endif
