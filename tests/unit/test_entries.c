// SPDX-License-Identifier: LGPL-2.1-or-later
/* Entry tables: process -> thread -> entries, address index, orphans, limits, drains. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "daemon/engine/entries.h"
#include "tests/unit/test.h"
#include "userspace-lib/rng.h"

static void test_htab(void)
{
	struct mp_htab h = {};
	struct mp_hnode *nodes = calloc(10000, sizeof(*nodes));
	struct mp_hnode *n = NULL;
	size_t seen = 0;

	for (int i = 0; i < 10000; i++) {
		nodes[i].key = 0x7f0000000000ull + 16 * (uint64_t)i;
		ASSERT_OK(mp_htab__insert(&h, &nodes[i]), "insert");
	}
	ASSERT_EQ(h.count, 10000, "count");
	for (int i = 0; i < 10000; i += 7)
		ASSERT_TRUE(mp_htab__find(&h, nodes[i].key) == &nodes[i], "find");
	ASSERT_TRUE(!mp_htab__find(&h, 0x1234), "absent key");
	while ((n = mp_htab__next(&h, n)))
		seen++;
	ASSERT_EQ(seen, 10000, "iteration visits every node once");
	for (int i = 0; i < 10000; i += 2)
		mp_htab__remove(&h, &nodes[i]);
	ASSERT_EQ(h.count, 5000, "count after removal");
	ASSERT_TRUE(!mp_htab__find(&h, nodes[0].key), "removed");
	ASSERT_TRUE(mp_htab__find(&h, nodes[1].key) == &nodes[1], "kept");
	mp_htab__fini(&h);
	free(nodes);
}

static struct mp_entry *add(struct mp_entries *t, pid_t pid, pid_t tid, uint64_t addr, void *owner)
{
	struct mp_entry *e = mp_entries__insert(t, pid, tid, addr);

	if (e && mp_entries__set(t, e, owner, addr >> 4, (addr & 0xff) + 1))
		return NULL;
	return e;
}

static void test_cross_thread_free(void)
{
	struct mp_entries_opts o = {};
	struct mp_entries *t = mp_entries__new(&o);
	struct mp_entry *e;

	ASSERT_TRUE(add(t, 100, 101, 0x1000, NULL) != NULL, "insert thread 101");
	ASSERT_TRUE(add(t, 100, 102, 0x2000, NULL) != NULL, "insert thread 102");
	ASSERT_TRUE(add(t, 200, 201, 0x1000, NULL) != NULL, "same address, other process");
	ASSERT_EQ(mp_entries__threads(t, 100), 2, "two threads with entries");
	/* thread 102 frees the block thread 101 allocated: the process index finds it */
	e = mp_entries__find(t, 100, 0x1000);
	if (ASSERT_TRUE(e != NULL, "find from any thread")) {
		ASSERT_EQ(mp_entries__tid(t, e), 101, "allocating thread kept");
		mp_entries__remove(t, e);
	}
	ASSERT_TRUE(!mp_entries__find(t, 100, 0x1000), "gone after removal");
	ASSERT_TRUE(mp_entries__find(t, 200, 0x1000) != NULL, "other process untouched");
	ASSERT_EQ(mp_entries__threads(t, 100), 1, "empty thread table released");
	ASSERT_EQ(mp_entries__total(t), 2, "total");
	mp_entries__free(t);
}

static void test_thread_exit_orphans(void)
{
	struct mp_entries_opts o = {};
	struct mp_entries *t = mp_entries__new(&o);
	struct mp_entry *e;

	for (uint64_t i = 0; i < 50; i++)
		add(t, 7, 8, 0x10000 + 16 * i, NULL);
	add(t, 7, 9, 0x90000, NULL);
	ASSERT_EQ(mp_entries__thread_exit(t, 7, 8), 50, "thread exit hands over its entries");
	ASSERT_EQ(mp_entries__orphans(t, 7), 50, "orphans");
	ASSERT_EQ(mp_entries__threads(t, 7), 1, "one thread left");
	ASSERT_EQ(mp_entries__count(t, 7), 51, "nothing lost");
	e = mp_entries__find(t, 7, 0x10000 + 16 * 3);
	if (ASSERT_TRUE(e != NULL, "orphan still found by address")) {
		ASSERT_EQ(mp_entries__tid(t, e), 0, "orphan has no thread");
		mp_entries__remove(t, e);
	}
	ASSERT_EQ(mp_entries__orphans(t, 7), 49, "orphan freed");
	ASSERT_EQ(mp_entries__thread_exit(t, 7, 12345), 0, "unknown thread");
	ASSERT_EQ(mp_entries__thread_exit(t, 99, 1), 0, "unknown process");
	mp_entries__free(t);
}

static void test_limits_counted(void)
{
	struct mp_entries_opts o = { .max_entries = 10, .max_procs = 2, .max_threads = 2 };
	struct mp_entries *t = mp_entries__new(&o);

	ASSERT_TRUE(add(t, 1, 1, 0x10, NULL) != NULL, "proc 1");
	ASSERT_TRUE(add(t, 2, 2, 0x10, NULL) != NULL, "proc 2");
	errno = 0;
	ASSERT_TRUE(add(t, 3, 3, 0x10, NULL) == NULL, "third process refused");
	ASSERT_EQ(errno, ENOSPC, "ENOSPC");
	ASSERT_EQ(mp_entries__drops(t, MP_EDROP_PROCS_FULL), 1, "counted");
	ASSERT_TRUE(add(t, 1, 11, 0x20, NULL) != NULL, "second thread");
	ASSERT_TRUE(add(t, 1, 12, 0x30, NULL) != NULL, "third thread: kept as orphan");
	ASSERT_EQ(mp_entries__drops(t, MP_EDROP_THREADS_FULL), 1, "thread limit counted");
	ASSERT_EQ(mp_entries__orphans(t, 1), 1, "attributed to the process");
	for (uint64_t a = 0x100; a < 0x200; a += 16)
		add(t, 2, 2, a, NULL);
	ASSERT_EQ(mp_entries__total(t), 10, "hard limit");
	ASSERT_TRUE(mp_entries__drops(t, MP_EDROP_TABLE_FULL) == 16 - 6, "table full counted");
	mp_entries__free(t);
}

static void count_cb(void *ctx, struct mp_entry *e)
{
	uint64_t *sum = ctx;

	*sum += e->nsamples;
}

static void test_drain_by_owner(void)
{
	struct mp_entries_opts o = {};
	struct mp_entries *t = mp_entries__new(&o);
	int a, b;
	uint64_t sum = 0;

	for (uint64_t i = 0; i < 100; i++)
		add(t, 5, 5 + (i % 3), 0x1000 * (i + 1) + i, i % 2 ? (void *)&a : (void *)&b);
	mp_entries__thread_exit(t, 5, 6);
	ASSERT_EQ(mp_entries__foreach(t, 5, count_cb, &sum), 100, "foreach visits all");
	sum = 0;
	ASSERT_EQ(mp_entries__drain(t, 5, &a, count_cb, &sum), 50, "drain one owner");
	ASSERT_EQ(mp_entries__count(t, 5), 50, "other owner kept");
	ASSERT_EQ(mp_entries__drain(t, 5, NULL, NULL, NULL), 50, "drain the rest");
	ASSERT_EQ(mp_entries__count(t, 5), 0, "empty");
	ASSERT_EQ(mp_entries__total(t), 0, "total");
	ASSERT_TRUE(!mp_entries__find(t, 5, 0x1000), "nothing found");
	/* the process can come back */
	ASSERT_TRUE(add(t, 5, 5, 0x1000, NULL) != NULL, "reinsert after drain");
	mp_entries__free(t);
}

/* ---- the table against a plain model, under random operations ---- */

struct model_entry {
	pid_t pid, tid;		/* tid 0: orphaned */
	uint64_t key, id, nsamples;
	int owner;
	bool live;
};

#define MODEL_MAX	6000

static uint64_t rnd_state = 0x243f6a8885a308d3ull;

static uint64_t rnd(void)
{
	return mp_splitmix64(&rnd_state);
}

static struct model_entry *model_find(struct model_entry *m, size_t n, pid_t pid, uint64_t key)
{
	for (size_t i = 0; i < n; i++)
		if (m[i].live && m[i].pid == pid && m[i].key == key)
			return &m[i];
	return NULL;
}

static int owners[4];

static void test_model(void)
{
	struct mp_entries_opts o = {};
	struct mp_entries *t = mp_entries__new(&o);
	struct model_entry *m = calloc(MODEL_MAX, sizeof(*m));
	size_t n = 0, bad = 0;

	for (int step = 0; step < 200000 && !bad; step++) {
		pid_t pid = 10 + (pid_t)(rnd() % 3), tid = pid * 100 + (pid_t)(rnd() % 6);
		/* keys: sequential ids, 16-aligned addresses, arbitrary values, 0 */
		uint64_t key, r = rnd() % 100;

		switch (rnd() % 4) {
		case 0: key = rnd() % 3000; break;
		case 1: key = 0x7f0000000000ull + 16 * (rnd() % 3000); break;
		case 2: key = rnd() | (1ull << 63); break;
		default: key = 0; break;
		}
		if (r < 55) {
			struct model_entry *me = model_find(m, n, pid, key);
			struct mp_entry *e;

			if (me || n == MODEL_MAX)
				continue;
			e = mp_entries__insert(t, pid, tid, key);
			if (!e) {
				bad++;
				break;
			}
			me = &m[n++];
			*me = (struct model_entry){ .pid = pid, .tid = tid, .key = key,
						    .id = rnd() >> (64 - MP_ENTRY_ID_BITS), .nsamples = rnd() >> 20,
						    .owner = (int)(rnd() % 4), .live = true };
			if (mp_entries__set(t, e, &owners[me->owner], me->id, me->nsamples))
				bad++;
		} else if (r < 90) {
			/* free: a known key most of the time */
			struct model_entry *me = n ? &m[rnd() % n] : NULL;
			struct mp_entry *e;

			if (me && me->live) {
				pid = me->pid;
				key = me->key;
			}
			me = model_find(m, n, pid, key);
			e = mp_entries__find(t, pid, key);
			if (!me != !e) {
				bad++;
				break;
			}
			if (!e)
				continue;
			if (e->key != key || e->id != me->id || e->nsamples != me->nsamples ||
			    mp_entries__owner(t, e) != &owners[me->owner] ||
			    mp_entries__tid(t, e) != me->tid) {
				bad++;
				break;
			}
			mp_entries__remove(t, e);
			me->live = false;
		} else if (r < 96) {
			size_t k = 0;

			for (size_t i = 0; i < n; i++)
				if (m[i].live && m[i].pid == pid && m[i].tid == tid) {
					m[i].tid = 0;
					k++;
				}
			if (mp_entries__thread_exit(t, pid, tid) != k)
				bad++;
		} else {
			int ow = (int)(rnd() % 4);
			size_t k = 0;

			for (size_t i = 0; i < n; i++)
				if (m[i].live && m[i].pid == pid && m[i].owner == ow) {
					m[i].live = false;
					k++;
				}
			if (mp_entries__drain(t, pid, &owners[ow], NULL, NULL) != k)
				bad++;
		}
		/* compact the model now and then */
		if (n == MODEL_MAX) {
			size_t j = 0;

			for (size_t i = 0; i < n; i++)
				if (m[i].live)
					m[j++] = m[i];
			n = j;
		}
		if (step % 997 == 0) {
			for (pid_t q = 10; q < 13; q++) {
				size_t cnt = 0, orph = 0, nth = 0;
				pid_t seen[6] = { 0 };

				for (size_t i = 0; i < n; i++) {
					if (!m[i].live || m[i].pid != q)
						continue;
					cnt++;
					if (!m[i].tid) {
						orph++;
					} else if (!seen[m[i].tid % 100]) {
						seen[m[i].tid % 100] = 1;
						nth++;
					}
				}
				if (mp_entries__count(t, q) != cnt ||
				    mp_entries__orphans(t, q) != orph ||
				    mp_entries__threads(t, q) != nth)
					bad++;
			}
		}
	}
	ASSERT_EQ(bad, 0, "table agrees with the model over 200000 random operations");
	mp_entries__free(t);
	free(m);
}

/* A process whose threads all exit with blocks live: indexes are recycled, nothing lost. */
static void test_many_threads(void)
{
	struct mp_entries_opts o = {};
	struct mp_entries *t = mp_entries__new(&o);
	size_t exited = 0;

	for (pid_t tid = 1000; tid < 1000 + 70000; tid++) {
		if (!mp_entries__insert(t, 1, tid, (uint64_t)tid * 16))
			break;
		exited += mp_entries__thread_exit(t, 1, tid);
	}
	ASSERT_EQ(exited, 70000, "every thread handed over its block");
	ASSERT_EQ(mp_entries__orphans(t, 1), 70000, "all orphans");
	ASSERT_EQ(mp_entries__threads(t, 1), 0, "no thread left");
	ASSERT_EQ(mp_entries__drops(t, MP_EDROP_THREADS_FULL), 0, "exited threads' indexes reused");
	ASSERT_TRUE(mp_entries__insert(t, 1, 5, 1) != NULL, "a new thread after that");
	ASSERT_EQ(mp_entries__threads(t, 1), 1, "it has its own entries");
	ASSERT_EQ(mp_entries__drain(t, 1, NULL, NULL, NULL), 70001, "drain");
	ASSERT_EQ(mp_entries__total(t), 0, "empty");
	mp_entries__free(t);
}

static void test_overflow_and_owners(void)
{
	struct mp_entries_opts o = {};
	struct mp_entries *t = mp_entries__new(&o);
	static int many[MP_ENTRY_MAX_OWNERS + 1];
	struct mp_entry *e = mp_entries__insert(t, 1, 1, 42);
	int r;

	if (!ASSERT_TRUE(e != NULL, "insert"))
		return;
	ASSERT_EQ(mp_entries__set(t, e, &many[0], 1ull << MP_ENTRY_ID_BITS, 1), -EOVERFLOW,
		  "id too large");
	ASSERT_EQ(mp_entries__set(t, e, &many[0], 1, 1ull << MP_ENTRY_NSAMPLES_BITS),
		  -EOVERFLOW, "multiplicity too large");
	ASSERT_EQ(mp_entries__drops(t, MP_EDROP_OVERFLOW), 2, "counted");
	ASSERT_OK(mp_entries__set(t, e, &many[0], (1ull << MP_ENTRY_ID_BITS) - 1,
				  (1ull << MP_ENTRY_NSAMPLES_BITS) - 1), "largest values");
	e = mp_entries__find(t, 1, 42);
	ASSERT_TRUE(e && e->id == (1ull << MP_ENTRY_ID_BITS) - 1 &&
		    e->nsamples == (1ull << MP_ENTRY_NSAMPLES_BITS) - 1, "kept whole");
	for (int i = 1; i < MP_ENTRY_MAX_OWNERS; i++) {
		e = mp_entries__insert(t, 1, 1, 100 + (uint64_t)i);
		if (!e || mp_entries__set(t, e, &many[i], 0, 1))
			break;
	}
	e = mp_entries__insert(t, 1, 1, 7);
	r = e ? mp_entries__set(t, e, &many[MP_ENTRY_MAX_OWNERS], 0, 1) : -1;
	ASSERT_EQ(r, -ENOSPC, "one owner too many");
	ASSERT_EQ(mp_entries__drops(t, MP_EDROP_OWNERS_FULL), 1, "counted");
	ASSERT_TRUE(mp_entries__owner(t, e) == NULL, "left without owner");
	ASSERT_EQ(mp_entries__drain(t, 1, &many[5], NULL, NULL), 1, "drain one owner");
	ASSERT_OK(mp_entries__set(t, e, &many[MP_ENTRY_MAX_OWNERS], 0, 1), "its index is free");
	ASSERT_TRUE(mp_entries__owner(t, e) == &many[MP_ENTRY_MAX_OWNERS], "owner set");
	mp_entries__free(t);
}

/* What a tracked block costs: one slot at a bounded load factor. */
static void test_bytes_per_entry(void)
{
	struct mp_entries_opts o = {};
	struct mp_entries *t = mp_entries__new(&o);
	size_t base = mp_entries__bytes(t), worst = 0;
	int owner;

	ASSERT_EQ(sizeof(struct mp_entry), 24, "a slot is 24 bytes");
	for (uint64_t i = 1; i <= 300000; i++) {
		struct mp_entry *e = mp_entries__insert(t, 1, 1 + (pid_t)(i % 4), i * 48);

		if (!e || mp_entries__set(t, e, &owner, i, 1))
			break;
		if (i >= 1000 && i % 1000 == 0) {
			size_t per = (mp_entries__bytes(t) - base) / i;

			worst = per > worst ? per : worst;
		}
	}
	ASSERT_EQ(mp_entries__total(t), 300000, "all tracked");
	ASSERT_TRUE(worst <= 49, "at most 48 bytes per entry at any fill (and a little)");
	ASSERT_EQ(mp_entries__drain(t, 1, &owner, NULL, NULL), 300000, "drained");
	mp_entries__free(t);
}

int main(void)
{
	RUN(test_htab);
	RUN(test_cross_thread_free);
	RUN(test_thread_exit_orphans);
	RUN(test_limits_counted);
	RUN(test_drain_by_owner);
	RUN(test_model);
	RUN(test_many_threads);
	RUN(test_overflow_and_owners);
	RUN(test_bytes_per_entry);
	return test_exit();
}
