// SPDX-License-Identifier: LGPL-2.1-or-later
/* Open-addressing tables with linear probing; see intern.h. */
#include <errno.h>
#include <stdlib.h>

#include "report/intern.h"

struct rp_intern {
	uint64_t *hashes;
	uint32_t *idx;		/* index + 1; 0 = empty */
	size_t cap, n;
};

struct rp_intern *rp_intern__new(void)
{
	struct rp_intern *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->cap = 1024;
	t->hashes = calloc(t->cap, sizeof(*t->hashes));
	t->idx = calloc(t->cap, sizeof(*t->idx));
	if (!t->hashes || !t->idx) {
		rp_intern__free(t);
		errno = ENOMEM;
		return NULL;
	}
	return t;
}

void rp_intern__free(struct rp_intern *t)
{
	if (!t)
		return;
	free(t->hashes);
	free(t->idx);
	free(t);
}

int64_t rp_intern__find(const struct rp_intern *t, uint64_t hash, rp_intern_eq_fn eq,
			const void *ctx)
{
	size_t mask = t->cap - 1;

	for (size_t i = hash & mask;; i = (i + 1) & mask) {
		if (!t->idx[i])
			return -1;
		if (t->hashes[i] == hash && eq(ctx, t->idx[i] - 1))
			return t->idx[i] - 1;
	}
}

static void intern_place(uint64_t *hashes, uint32_t *idx, size_t cap, uint64_t hash,
			 uint32_t val)
{
	size_t i = hash & (cap - 1);

	while (idx[i])
		i = (i + 1) & (cap - 1);
	hashes[i] = hash;
	idx[i] = val;
}

int rp_intern__add(struct rp_intern *t, uint64_t hash, uint32_t idx)
{
	if ((t->n + 1) * 4 > t->cap * 3) {
		size_t cap = t->cap * 2;
		uint64_t *h = calloc(cap, sizeof(*h));
		uint32_t *x = calloc(cap, sizeof(*x));

		if (!h || !x) {
			free(h);
			free(x);
			return -ENOMEM;
		}
		for (size_t i = 0; i < t->cap; i++)
			if (t->idx[i])
				intern_place(h, x, cap, t->hashes[i], t->idx[i]);
		free(t->hashes);
		free(t->idx);
		t->hashes = h;
		t->idx = x;
		t->cap = cap;
	}
	intern_place(t->hashes, t->idx, t->cap, hash, idx + 1);
	t->n++;
	return 0;
}

struct rp_u64map {
	uint64_t *keys;		/* key + 1; 0 = empty */
	uint32_t *vals;
	size_t cap, n;
};

struct rp_u64map *rp_u64map__new(void)
{
	struct rp_u64map *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->cap = 1024;
	m->keys = calloc(m->cap, sizeof(*m->keys));
	m->vals = calloc(m->cap, sizeof(*m->vals));
	if (!m->keys || !m->vals) {
		rp_u64map__free(m);
		errno = ENOMEM;
		return NULL;
	}
	return m;
}

void rp_u64map__free(struct rp_u64map *m)
{
	if (!m)
		return;
	free(m->keys);
	free(m->vals);
	free(m);
}

static size_t u64map_slot(const uint64_t *keys, size_t cap, uint64_t key1)
{
	size_t i = (size_t)(rp_hash_mix(0, key1) & (cap - 1));

	while (keys[i] && keys[i] != key1)
		i = (i + 1) & (cap - 1);
	return i;
}

int rp_u64map__get(const struct rp_u64map *m, uint64_t key, uint32_t *val)
{
	size_t i;

	if (key == UINT64_MAX)
		return -ENOENT;
	i = u64map_slot(m->keys, m->cap, key + 1);
	if (!m->keys[i])
		return -ENOENT;
	*val = m->vals[i];
	return 0;
}

int rp_u64map__put(struct rp_u64map *m, uint64_t key, uint32_t val)
{
	size_t i;

	if (key == UINT64_MAX)
		return -EINVAL;
	if ((m->n + 1) * 4 > m->cap * 3) {
		size_t cap = m->cap * 2;
		uint64_t *k = calloc(cap, sizeof(*k));
		uint32_t *v = calloc(cap, sizeof(*v));

		if (!k || !v) {
			free(k);
			free(v);
			return -ENOMEM;
		}
		for (size_t j = 0; j < m->cap; j++) {
			if (!m->keys[j])
				continue;
			i = u64map_slot(k, cap, m->keys[j]);
			k[i] = m->keys[j];
			v[i] = m->vals[j];
		}
		free(m->keys);
		free(m->vals);
		m->keys = k;
		m->vals = v;
		m->cap = cap;
	}
	i = u64map_slot(m->keys, m->cap, key + 1);
	if (!m->keys[i]) {
		m->keys[i] = key + 1;
		m->n++;
	}
	m->vals[i] = val;
	return 0;
}
