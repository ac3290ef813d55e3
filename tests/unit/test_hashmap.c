// SPDX-License-Identifier: LGPL-2.1-or-later
/* The hash map (userspace-lib/hashmap.c) against a reference array: random insertions,
 * replacements and removals (backward shift), the limit, the reserved key, byte-string keys of
 * colliding hashes. */
#include <errno.h>
#include <string.h>

#include "userspace-lib/hashmap.h"
#include "tests/unit/test.h"

#define NKEYS	4096

static uint64_t xorshift(uint64_t *x)
{
	*x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
	return *x;
}

/* Keys of both words, some with k1 = 0, some with k2 = 0; values never 0 (0 = absent). */
static void key_of(unsigned int k, uint64_t *k1, uint64_t *k2)
{
	*k1 = k % 3 ? (uint64_t)k << 40 : 0;
	*k2 = k % 5 ? (uint64_t)k * 7 + 1 : 0;
	if (!*k1 && !*k2)
		*k1 = 1ull << 63 | k;
}

static void test_reference(void)
{
	static uint64_t ref[NKEYS];
	struct mp_hashmap m = { 0 };
	uint64_t x = 88172645463325252ull, k1, k2;
	size_t n = 0;

	for (int it = 0; it < 500000; it++) {
		unsigned int k = xorshift(&x) % NKEYS, op = (x >> 20) % 3;
		uint64_t *v;

		key_of(k, &k1, &k2);
		if (op == 0) {
			uint64_t val = (x >> 32) | 1;

			if (!ASSERT_OK(mp_hashmap__put(&m, k1, k2, val), "put"))
				break;
			ref[k] = val;
		} else if (op == 1) {
			int want = ref[k] ? 0 : -ENOENT;

			if (!ASSERT_EQ(mp_hashmap__remove(&m, k1, k2), want, "remove"))
				break;
			ref[k] = 0;
		} else {
			v = mp_hashmap__find(&m, k1, k2);
			if (!ASSERT_EQ(v ? *v : 0, ref[k], "find = reference"))
				break;
		}
	}
	for (unsigned int k = 0; k < NKEYS; k++) {
		uint64_t *v;

		key_of(k, &k1, &k2);
		v = mp_hashmap__find(&m, k1, k2);
		n += ref[k] != 0;
		if (!ASSERT_EQ(v ? *v : 0, ref[k], "final"))
			break;
	}
	ASSERT_EQ(m.len, n, "length");
	ASSERT_TRUE(m.len * 2 <= m.cap, "at most half full");
	mp_hashmap__clear(&m);
	ASSERT_TRUE(!m.slots && !m.len && !m.cap, "cleared");
	ASSERT_TRUE(!mp_hashmap__find(&m, 1, 2), "find in an empty map");
	ASSERT_EQ(mp_hashmap__remove(&m, 1, 2), -ENOENT, "remove from an empty map");
}

static void test_insert_limit(void)
{
	struct mp_hashmap m = { .limit = 100 };
	bool found = true;
	int err = 0;
	uint64_t *v;

	v = mp_hashmap__insert(&m, 0, 0, &found, &err);
	ASSERT_TRUE(!v && err == -EINVAL && !found, "(0, 0) is reserved");
	for (uint64_t k = 1; k <= 100; k++) {
		v = mp_hashmap__insert(&m, k, 0, &found, &err);
		if (!ASSERT_TRUE(v && !found && *v == 0, "new entry, value 0"))
			break;
		*v = k * 10;
	}
	v = mp_hashmap__insert(&m, 7, 0, &found, &err);
	ASSERT_TRUE(v && found && *v == 70, "found at the limit");
	err = 0;
	v = mp_hashmap__insert(&m, 101, 0, &found, &err);
	ASSERT_TRUE(!v && err == -ENOSPC, "new key beyond the limit");
	ASSERT_EQ(mp_hashmap__put(&m, 102, 0, 1), -ENOSPC, "put beyond the limit");
	ASSERT_OK(mp_hashmap__remove(&m, 7, 0), "remove");
	ASSERT_OK(mp_hashmap__put(&m, 101, 0, 1), "room again");
	mp_hashmap__clear(&m);
	ASSERT_EQ(m.limit, 100, "limit kept by clear");
}

struct strs {
	const char *s[8];
	const char *want;
};

static bool str_eq(const void *ctx, uint64_t val)
{
	const struct strs *t = ctx;

	return !strcmp(t->s[val], t->want);
}

static void test_eq_keys(void)
{
	struct strs t = { .s = { "malloc", "free", "calloc", "realloc" } };
	struct mp_hashmap m = { 0 };
	uint64_t *v;

	/* All of one hash, 0 included: only the callback tells them apart. */
	for (uint64_t i = 0; i < 4; i++) {
		t.want = t.s[i];
		if (!ASSERT_TRUE(!mp_hashmap__find_eq(&m, 0, str_eq, &t), "absent before"))
			break;
		ASSERT_OK(mp_hashmap__add_eq(&m, 0, i), "add");
	}
	for (uint64_t i = 0; i < 4; i++) {
		t.want = t.s[i];
		v = mp_hashmap__find_eq(&m, 0, str_eq, &t);
		if (!ASSERT_TRUE(v && *v == i, "found by equality"))
			break;
	}
	t.want = "mmap";
	ASSERT_TRUE(!mp_hashmap__find_eq(&m, 0, str_eq, &t), "equal hash, other bytes");
	ASSERT_TRUE(!mp_hashmap__find_eq(&m, 1, str_eq, &t), "other hash");
	ASSERT_EQ(m.len, 4, "length");
	mp_hashmap__clear(&m);
}

static void test_hashes(void)
{
	ASSERT_EQ(mp_hash64(0), 0, "mixing keeps 0");
	ASSERT_TRUE(mp_hash64(1) != mp_hash64(2), "mixing separates");
	ASSERT_EQ(mp_hash_bytes(MP_HASH_SEED, "a", 1), 0xaf63dc4c8601ec8cull, "FNV-1a of \"a\"");
	ASSERT_EQ(mp_hash_bytes(MP_HASH_SEED, "", 0), MP_HASH_SEED, "FNV-1a of nothing");
}

int main(void)
{
	RUN(test_reference);
	RUN(test_insert_limit);
	RUN(test_eq_keys);
	RUN(test_hashes);
	return test_exit();
}
