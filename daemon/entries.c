// SPDX-License-Identifier: LGPL-2.1-or-later
#include <errno.h>
#include <stdlib.h>

#include "daemon/entries.h"

/* ---- hash table ---- */

static inline size_t hslot(const struct mp_htab *h, uint64_t key)
{
	/* Fibonacci hashing: addresses are 16-aligned and pids small, so mix the bits. */
	key *= 0x9e3779b97f4a7c15ull;
	return (size_t)(key >> 32) & (h->nbuckets - 1);
}

static int htab_grow(struct mp_htab *h)
{
	size_t n = h->nbuckets ? h->nbuckets * 2 : 16;
	struct mp_hnode **nb = calloc(n, sizeof(*nb));
	struct mp_htab nh = { .buckets = nb, .nbuckets = n };

	if (!nb)
		return -ENOMEM;
	for (size_t i = 0; i < h->nbuckets; i++) {
		struct mp_hnode *p = h->buckets[i], *next;

		for (; p; p = next) {
			size_t s = hslot(&nh, p->key);

			next = p->next;
			p->next = nb[s];
			nb[s] = p;
		}
	}
	free(h->buckets);
	h->buckets = nb;
	h->nbuckets = n;
	return 0;
}

int mp_htab__insert(struct mp_htab *h, struct mp_hnode *n)
{
	size_t s;

	if (h->count >= h->nbuckets) {
		int err = htab_grow(h);

		if (err && !h->nbuckets)
			return err;
		/* a failed growth only makes chains longer */
	}
	s = hslot(h, n->key);
	n->next = h->buckets[s];
	h->buckets[s] = n;
	h->count++;
	return 0;
}

struct mp_hnode *mp_htab__find(const struct mp_htab *h, uint64_t key)
{
	if (!h->nbuckets)
		return NULL;
	for (struct mp_hnode *p = h->buckets[hslot(h, key)]; p; p = p->next)
		if (p->key == key)
			return p;
	return NULL;
}

void mp_htab__remove(struct mp_htab *h, struct mp_hnode *n)
{
	struct mp_hnode **pp = &h->buckets[hslot(h, n->key)];

	for (; *pp; pp = &(*pp)->next) {
		if (*pp == n) {
			*pp = n->next;
			n->next = NULL;
			h->count--;
			return;
		}
	}
}

struct mp_hnode *mp_htab__next(const struct mp_htab *h, const struct mp_hnode *prev)
{
	size_t i = 0;

	if (prev) {
		if (prev->next)
			return prev->next;
		i = hslot(h, prev->key) + 1;
	}
	for (; i < h->nbuckets; i++)
		if (h->buckets[i])
			return h->buckets[i];
	return NULL;
}

void mp_htab__fini(struct mp_htab *h)
{
	free(h->buckets);
	h->buckets = NULL;
	h->nbuckets = h->count = 0;
}

/* ---- entries ---- */

struct mp_ethread {
	struct mp_hnode node;	/* key: tid */
	struct mp_entry *head;
	size_t count;
};

struct mp_eproc {
	struct mp_hnode node;	/* key: pid */
	struct mp_htab threads;
	struct mp_htab addrs;	/* every live entry, by address */
	struct mp_entry *orphans;
	size_t norphans;
};

struct mp_entries {
	struct mp_entries_opts opts;
	struct mp_htab procs;
	size_t total;
	uint64_t drops[MP_EDROP__MAX];
};

struct mp_entries *mp_entries__new(const struct mp_entries_opts *opts)
{
	struct mp_entries *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->opts = *opts;
	if (!t->opts.max_entries)
		t->opts.max_entries = 1 << 20;
	if (!t->opts.max_procs)
		t->opts.max_procs = 4096;
	if (!t->opts.max_threads)
		t->opts.max_threads = 65536;
	return t;
}

static void list_free(struct mp_entry *e)
{
	while (e) {
		struct mp_entry *next = e->next;

		free(e);
		e = next;
	}
}

static void proc_free(struct mp_eproc *p)
{
	struct mp_hnode *n;

	while ((n = mp_htab__next(&p->threads, NULL))) {
		struct mp_ethread *th = (struct mp_ethread *)n;

		mp_htab__remove(&p->threads, n);
		list_free(th->head);
		free(th);
	}
	list_free(p->orphans);
	mp_htab__fini(&p->threads);
	mp_htab__fini(&p->addrs);
	free(p);
}

void mp_entries__free(struct mp_entries *t)
{
	struct mp_hnode *n;

	if (!t)
		return;
	while ((n = mp_htab__next(&t->procs, NULL))) {
		mp_htab__remove(&t->procs, n);
		proc_free((struct mp_eproc *)n);
	}
	mp_htab__fini(&t->procs);
	free(t);
}

static struct mp_eproc *proc_find(const struct mp_entries *t, pid_t pid)
{
	return (struct mp_eproc *)mp_htab__find(&t->procs, (uint64_t)pid);
}

static void proc_maybe_forget(struct mp_entries *t, struct mp_eproc *p)
{
	if (p->addrs.count || p->threads.count || p->orphans)
		return;
	mp_htab__remove(&t->procs, &p->node);
	proc_free(p);
}

static void link_into(struct mp_entry **head, struct mp_entry *e)
{
	e->prev = NULL;
	e->next = *head;
	if (*head)
		(*head)->prev = e;
	*head = e;
}

static void unlink_from(struct mp_entry **head, struct mp_entry *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		*head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	e->prev = e->next = NULL;
}

struct mp_entry *mp_entries__insert(struct mp_entries *t, pid_t pid, pid_t tid, uint64_t addr)
{
	struct mp_eproc *p = proc_find(t, pid);
	struct mp_ethread *th = NULL;
	struct mp_entry *e;

	if (t->total >= t->opts.max_entries) {
		t->drops[MP_EDROP_TABLE_FULL]++;
		errno = ENOSPC;
		return NULL;
	}
	if (!p) {
		if (t->procs.count >= t->opts.max_procs) {
			t->drops[MP_EDROP_PROCS_FULL]++;
			errno = ENOSPC;
			return NULL;
		}
		p = calloc(1, sizeof(*p));
		if (p)
			p->node.key = (uint64_t)pid;
		if (!p || mp_htab__insert(&t->procs, &p->node)) {
			free(p);
			t->drops[MP_EDROP_NOMEM]++;
			errno = ENOMEM;
			return NULL;
		}
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		goto nomem;
	th = (struct mp_ethread *)mp_htab__find(&p->threads, (uint64_t)tid);
	if (!th) {
		if (p->threads.count >= t->opts.max_threads) {
			/* Too many threads: keep the block, attributed to the process. */
			t->drops[MP_EDROP_THREADS_FULL]++;
		} else {
			th = calloc(1, sizeof(*th));
			if (th) {
				th->node.key = (uint64_t)tid;
				if (mp_htab__insert(&p->threads, &th->node)) {
					free(th);
					th = NULL;
				}
			}
			if (!th) {
				free(e);
				goto nomem;
			}
		}
	}
	e->addr_node.key = addr;
	if (mp_htab__insert(&p->addrs, &e->addr_node)) {
		free(e);
		goto nomem;
	}
	e->proc = p;
	e->thread = th;
	if (th) {
		e->tid = tid;
		link_into(&th->head, e);
		th->count++;
	} else {
		link_into(&p->orphans, e);
		p->norphans++;
	}
	t->total++;
	return e;
nomem:
	t->drops[MP_EDROP_NOMEM]++;
	proc_maybe_forget(t, p);
	errno = ENOMEM;
	return NULL;
}

struct mp_entry *mp_entries__find(const struct mp_entries *t, pid_t pid, uint64_t addr)
{
	struct mp_eproc *p = proc_find(t, pid);

	if (!p)
		return NULL;
	return (struct mp_entry *)mp_htab__find(&p->addrs, addr);
}

static void entry_unlink(struct mp_entries *t, struct mp_entry *e)
{
	struct mp_eproc *p = e->proc;
	struct mp_ethread *th = e->thread;

	mp_htab__remove(&p->addrs, &e->addr_node);
	if (th) {
		unlink_from(&th->head, e);
		if (!--th->count) {
			mp_htab__remove(&p->threads, &th->node);
			free(th);
		}
	} else {
		unlink_from(&p->orphans, e);
		p->norphans--;
	}
	t->total--;
}

void mp_entries__remove(struct mp_entries *t, struct mp_entry *e)
{
	struct mp_eproc *p = e->proc;

	entry_unlink(t, e);
	free(e);
	proc_maybe_forget(t, p);
}

size_t mp_entries__thread_exit(struct mp_entries *t, pid_t pid, pid_t tid)
{
	struct mp_eproc *p = proc_find(t, pid);
	struct mp_ethread *th;
	size_t n = 0;

	if (!p)
		return 0;
	th = (struct mp_ethread *)mp_htab__find(&p->threads, (uint64_t)tid);
	if (!th)
		return 0;
	while (th->head) {
		struct mp_entry *e = th->head;

		unlink_from(&th->head, e);
		e->thread = NULL;
		e->tid = 0;
		link_into(&p->orphans, e);
		p->norphans++;
		n++;
	}
	mp_htab__remove(&p->threads, &th->node);
	free(th);
	return n;
}

size_t mp_entries__foreach(const struct mp_entries *t, pid_t pid, mp_entry_fn fn, void *ctx)
{
	struct mp_eproc *p = proc_find(t, pid);
	struct mp_hnode *n = NULL;
	size_t count = 0;

	if (!p)
		return 0;
	while ((n = mp_htab__next(&p->addrs, n))) {
		fn(ctx, (struct mp_entry *)n);
		count++;
	}
	return count;
}

static bool owned(const struct mp_entry *e, const void *owner)
{
	return !owner || e->owner == owner;
}

size_t mp_entries__drain(struct mp_entries *t, pid_t pid, void *owner, mp_entry_fn fn, void *ctx)
{
	struct mp_eproc *p = proc_find(t, pid);
	struct mp_entry **all;
	struct mp_hnode *n = NULL;
	size_t count = 0, k = 0;

	if (!p)
		return 0;
	while ((n = mp_htab__next(&p->addrs, n)))
		count += owned((struct mp_entry *)n, owner);
	if (!count)
		return 0;
	/* Removal while iterating the index is not allowed: list the victims first. */
	all = malloc(count * sizeof(*all));
	if (all) {
		while ((n = mp_htab__next(&p->addrs, n)))
			if (owned((struct mp_entry *)n, owner))
				all[k++] = (struct mp_entry *)n;
	}
	for (k = 0; k < count; k++) {
		struct mp_entry *e = all ? all[k] : NULL;

		if (!e) {
			/* no memory for the list: rescan from the start each time */
			do
				n = mp_htab__next(&p->addrs, n);
			while (n && !owned((struct mp_entry *)n, owner));
			e = (struct mp_entry *)n;
			n = NULL;
		}
		if (fn)
			fn(ctx, e);
		entry_unlink(t, e);
		free(e);
	}
	free(all);
	proc_maybe_forget(t, p);
	return count;
}

size_t mp_entries__count(const struct mp_entries *t, pid_t pid)
{
	struct mp_eproc *p = proc_find(t, pid);

	return p ? p->addrs.count : 0;
}

size_t mp_entries__total(const struct mp_entries *t)
{
	return t->total;
}

size_t mp_entries__threads(const struct mp_entries *t, pid_t pid)
{
	struct mp_eproc *p = proc_find(t, pid);

	return p ? p->threads.count : 0;
}

size_t mp_entries__orphans(const struct mp_entries *t, pid_t pid)
{
	struct mp_eproc *p = proc_find(t, pid);

	return p ? p->norphans : 0;
}

uint64_t mp_entries__drops(const struct mp_entries *t, enum mp_entries_drop cause)
{
	return cause < MP_EDROP__MAX ? t->drops[cause] : 0;
}
