// SPDX-License-Identifier: LGPL-2.1-or-later
/* Entry tables: process -> thread -> entries, address index, orphans, limits, drains. */
#include <errno.h>
#include <stdlib.h>

#include "daemon/entries.h"
#include "tests/unit/test.h"

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

	if (e) {
		e->owner = owner;
		e->words = addr & 0xff;
		e->nsamples = 1;
	}
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
		ASSERT_EQ(e->tid, 101, "allocating thread kept");
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
		ASSERT_EQ(e->tid, 0, "orphan has no thread");
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

	*sum += e->words;
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

int main(void)
{
	RUN(test_htab);
	RUN(test_cross_thread_free);
	RUN(test_thread_exit_orphans);
	RUN(test_limits_counted);
	RUN(test_drain_by_owner);
	return test_exit();
}
