/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Small open-addressing tables for the report module: an intern table (hash -> index into the
 * caller's array, equality decided by a callback) and a u64 -> u32 map. Both grow by doubling
 * and never delete.
 */
#ifndef MEMPROF_REPORT_INTERN_H
#define MEMPROF_REPORT_INTERN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rp_intern;
typedef bool (*rp_intern_eq_fn)(const void *ctx, uint32_t idx);

struct rp_intern *rp_intern__new(void);
void rp_intern__free(struct rp_intern *t);	/* NULL-safe */
/* The index stored under @hash for which @eq holds, or -1. */
int64_t rp_intern__find(const struct rp_intern *t, uint64_t hash, rp_intern_eq_fn eq,
			const void *ctx);
/* Store @idx under @hash (the caller checked it is absent). Returns 0 or -ENOMEM. */
int rp_intern__add(struct rp_intern *t, uint64_t hash, uint32_t idx);

struct rp_u64map;
struct rp_u64map *rp_u64map__new(void);
void rp_u64map__free(struct rp_u64map *m);	/* NULL-safe */
/* Returns 0 and *val, or -ENOENT. Keys are < UINT64_MAX. */
int rp_u64map__get(const struct rp_u64map *m, uint64_t key, uint32_t *val);
/* Insert or overwrite. Returns 0, -EINVAL (key UINT64_MAX) or -ENOMEM. */
int rp_u64map__put(struct rp_u64map *m, uint64_t key, uint32_t val);

/* FNV-1a style mixing helpers. */
static inline uint64_t rp_hash_mix(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
	return h * 0xff51afd7ed558ccdull;
}

static inline uint64_t rp_hash_str(uint64_t h, const char *s)
{
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return rp_hash_mix(h, 0xff);
}

#endif
