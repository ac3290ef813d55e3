// SPDX-License-Identifier: LGPL-2.1-or-later
/* Helpers shared by the memtrace writer and reader: MTF tables and a u64 hash map. */
#include <errno.h>
#include <stdlib.h>

#include "userspace-lib/codec/codec.h"

void mtc_mtf_to_front(void *arr, size_t elem, unsigned int i)
{
	uint8_t tmp[32];
	uint8_t *a = arr;

	if (!i || elem > sizeof(tmp))
		return;
	memcpy(tmp, a + i * elem, elem);
	memmove(a + elem, a, i * elem);
	memcpy(a, tmp, elem);
}

static void defs__free(struct mp_mtf_defs *d)
{
	if (!d)
		return;
	for (unsigned int i = 0; i < d->n; i++)
		free(d->s[i]);
	free(d);
}

void mtc_mtf__free(struct mp_mtf *t)
{
	if (!t)
		return;
	for (unsigned int i = 0; i < t->n; i++) {
		free(t->f[i].name);
		defs__free(t->f[i].defs);
	}
	t->n = 0;
}

static size_t slot_of(const struct mtc_map *m, uint64_t key)
{
	return mp_hash64(key) & (m->cap - 1);
}

uint64_t *mtc_map__find(const struct mtc_map *m, uint64_t key)
{
	if (!m->cap || !key)
		return NULL;
	for (size_t i = slot_of(m, key);; i = (i + 1) & (m->cap - 1)) {
		if (m->keys[i] == key)
			return &m->vals[i];
		if (!m->keys[i])
			return NULL;
	}
}

static int map__grow(struct mtc_map *m)
{
	size_t ncap = m->cap ? m->cap * 2 : 64;
	uint64_t *nk = calloc(ncap, sizeof(*nk)), *nv = calloc(ncap, sizeof(*nv));

	if (!nk || !nv) {
		free(nk);
		free(nv);
		return -ENOMEM;
	}
	for (size_t i = 0; i < m->cap; i++) {
		size_t j;

		if (!m->keys[i])
			continue;
		for (j = mp_hash64(m->keys[i]) & (ncap - 1); nk[j]; j = (j + 1) & (ncap - 1))
			;
		nk[j] = m->keys[i];
		nv[j] = m->vals[i];
	}
	free(m->keys);
	free(m->vals);
	m->keys = nk;
	m->vals = nv;
	m->cap = ncap;
	return 0;
}

uint64_t *mtc_map__insert(struct mtc_map *m, uint64_t key, bool *found, int *err)
{
	size_t i;

	if (!key) {
		*found = false;
		*err = -EINVAL;
		return NULL;
	}
	if (m->cap) {
		for (i = slot_of(m, key); m->keys[i]; i = (i + 1) & (m->cap - 1)) {
			if (m->keys[i] == key) {
				*found = true;
				return &m->vals[i];
			}
		}
	}
	*found = false;
	if (m->limit && m->n >= m->limit) {
		*err = -ENOSPC;
		return NULL;
	}
	if ((m->n + 1) * 2 > m->cap) {
		*err = map__grow(m);
		if (*err)
			return NULL;
	}
	for (i = slot_of(m, key); m->keys[i]; i = (i + 1) & (m->cap - 1))
		;
	m->keys[i] = key;
	m->vals[i] = 0;
	m->n++;
	return &m->vals[i];
}

/* Linear probing with backward-shift deletion: no tombstones, lookups stay short. */
int mtc_map__remove(struct mtc_map *m, uint64_t key)
{
	size_t mask = m->cap - 1, i, j;

	if (!m->cap || !key)
		return -ENOENT;
	for (i = slot_of(m, key); m->keys[i] != key; i = (i + 1) & mask)
		if (!m->keys[i])
			return -ENOENT;
	m->keys[i] = 0;
	m->n--;
	for (j = (i + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
		size_t home = slot_of(m, m->keys[j]);

		/* Move j back to the hole i unless its home lies cyclically in (i, j]. */
		if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
			m->keys[i] = m->keys[j];
			m->vals[i] = m->vals[j];
			m->keys[j] = 0;
			i = j;
		}
	}
	return 0;
}

void mtc_map__free(struct mtc_map *m)
{
	free(m->keys);
	free(m->vals);
	memset(m, 0, sizeof(*m));
}
