// SPDX-License-Identifier: LGPL-2.1-or-later
/* Open-addressing hash map; see hashmap.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "userspace-lib/hashmap.h"

#define MP_HASHMAP_MIN_CAP	64

static size_t home_of(uint64_t k1, uint64_t k2, size_t cap)
{
	return mp_hash64(k1 ^ mp_hash64(k2)) & (cap - 1);
}

static bool slot_empty(const struct mp_hashmap_slot *sl)
{
	return !sl->k1 && !sl->k2;
}

/* The slot of (@k1, @k2), or the empty slot that ends its probe sequence. @m->cap != 0. */
static struct mp_hashmap_slot *slot_for(const struct mp_hashmap *m, uint64_t k1, uint64_t k2)
{
	size_t mask = m->cap - 1;

	for (size_t i = home_of(k1, k2, m->cap);; i = (i + 1) & mask) {
		struct mp_hashmap_slot *sl = &m->slots[i];

		if (slot_empty(sl) || (sl->k1 == k1 && sl->k2 == k2))
			return sl;
	}
}

uint64_t *mp_hashmap__find(const struct mp_hashmap *m, uint64_t k1, uint64_t k2)
{
	struct mp_hashmap_slot *sl;

	if (!m->cap || (!k1 && !k2))
		return NULL;
	sl = slot_for(m, k1, k2);
	return slot_empty(sl) ? NULL : &sl->val;
}

static int grow(struct mp_hashmap *m)
{
	size_t ncap = m->cap ? m->cap * 2 : MP_HASHMAP_MIN_CAP;
	struct mp_hashmap_slot *ns = calloc(ncap, sizeof(*ns));

	if (!ns)
		return -ENOMEM;
	for (size_t j = 0; j < m->cap; j++) {
		const struct mp_hashmap_slot *sl = &m->slots[j];
		size_t i = home_of(sl->k1, sl->k2, ncap);

		if (slot_empty(sl))
			continue;
		while (!slot_empty(&ns[i]))
			i = (i + 1) & (ncap - 1);
		ns[i] = *sl;
	}
	free(m->slots);
	m->slots = ns;
	m->cap = ncap;
	return 0;
}

uint64_t *mp_hashmap__insert(struct mp_hashmap *m, uint64_t k1, uint64_t k2, bool *found,
			     int *err)
{
	struct mp_hashmap_slot *sl;

	*found = false;
	if (!k1 && !k2) {
		*err = -EINVAL;
		return NULL;
	}
	if (m->cap) {
		sl = slot_for(m, k1, k2);
		if (!slot_empty(sl)) {
			*found = true;
			return &sl->val;
		}
	}
	if (m->limit && m->len >= m->limit) {
		*err = -ENOSPC;
		return NULL;
	}
	if ((m->len + 1) * 2 > m->cap) {
		*err = grow(m);
		if (*err)
			return NULL;
	}
	sl = slot_for(m, k1, k2);
	*sl = (struct mp_hashmap_slot){ k1, k2, 0 };
	m->len++;
	return &sl->val;
}

int mp_hashmap__put(struct mp_hashmap *m, uint64_t k1, uint64_t k2, uint64_t val)
{
	bool found;
	int err = 0;
	uint64_t *v = mp_hashmap__insert(m, k1, k2, &found, &err);

	if (!v)
		return err;
	*v = val;
	return 0;
}

int mp_hashmap__remove(struct mp_hashmap *m, uint64_t k1, uint64_t k2)
{
	size_t mask = m->cap - 1, i, j;
	struct mp_hashmap_slot *sl;

	if (!m->cap || (!k1 && !k2))
		return -ENOENT;
	sl = slot_for(m, k1, k2);
	if (slot_empty(sl))
		return -ENOENT;
	i = (size_t)(sl - m->slots);
	/* Move the later entries of the run into the hole when it is not before their home. */
	for (j = (i + 1) & mask; !slot_empty(&m->slots[j]); j = (j + 1) & mask) {
		size_t home = home_of(m->slots[j].k1, m->slots[j].k2, m->cap);

		if (((j - home) & mask) >= ((j - i) & mask)) {
			m->slots[i] = m->slots[j];
			i = j;
		}
	}
	m->slots[i] = (struct mp_hashmap_slot){ 0 };
	m->len--;
	return 0;
}

void mp_hashmap__clear(struct mp_hashmap *m)
{
	size_t limit = m->limit;

	free(m->slots);
	memset(m, 0, sizeof(*m));
	m->limit = limit;
}

uint64_t *mp_hashmap__find_eq(const struct mp_hashmap *m, uint64_t hash, mp_hashmap_eq_fn eq,
			      const void *ctx)
{
	uint64_t *v;

	for (uint64_t n = 1; (v = mp_hashmap__find(m, hash, n)); n++)
		if (eq(ctx, *v))
			return v;
	return NULL;
}

int mp_hashmap__add_eq(struct mp_hashmap *m, uint64_t hash, uint64_t val)
{
	uint64_t n = 1;

	while (mp_hashmap__find(m, hash, n))
		n++;
	return mp_hashmap__put(m, hash, n, val);
}
