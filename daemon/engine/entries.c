// SPDX-License-Identifier: LGPL-2.1-or-later
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "daemon/engine/entries.h"

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

/*
 * Layout. Each process has an open-addressing table of 24-byte slots (struct mp_entry), linear
 * probing from the key's home slot (Fibonacci hash, scaled to any capacity), at most 3/4 full:
 * it grows by half when it would pass 3/4 (so it is half full right after) and shrinks by half
 * under 1/8 (slot arrays of 64 KiB and more are mmap'ed, so that memory goes back). Deletion
 * shifts the following slots back (no tombstones). A slot names its owner and its thread by
 * small indexes into per-process tables (owner_ix, thread_ix), so a live block costs its slot
 * and nothing else: no per-block allocation, no list pointers. This is why the table is its
 * own and not userspace-lib/hashmap (a key and one word of value per slot, never shrunk): a
 * block would need storage beside its slot, and with a million sampled blocks the bytes per
 * block and the memory given back are what the daemon's footprint is made of.
 *
 * Threads: a thread record (tid, entry count) per thread with entries, found by tid through a
 * small hash of 16-bit indexes. A thread's exit is O(1): its record is marked exited and its
 * entries count as orphans from then on (mp_entries__tid() says 0); the record is recycled when
 * its last entry goes, or, when the 65535 indexes run out, by one pass over the slots that
 * turns the exited threads' entries into plain orphans (thread_ix 0).
 */
#define OWNER_EMPTY	0		/* slot unused */
#define OWNER_NONE	(MP_ENTRY_MAX_OWNERS + 1)	/* used, no owner set */
#define MAX_THREAD_IX	65535u
#define MIN_SLOTS	16u

enum { TH_FREE, TH_LIVE, TH_EXITED };

struct mp_ethread {
	pid_t tid;		/* TH_LIVE */
	uint8_t state;
	uint16_t next_free;	/* TH_FREE: the next free index, 0: none */
	size_t count;		/* entries */
};

struct mp_eowner {
	void *owner;		/* NULL: a free index */
	size_t count;
};

struct mp_eproc {
	struct mp_hnode node;	/* key: pid */
	struct mp_entry *slots;
	size_t cap, count;
	size_t norphans;	/* thread_ix 0, or an exited thread's */
	/* threads: records by index (0 unused), and tid -> index */
	struct mp_ethread *th;
	size_t th_cap;		/* records allocated, index 0 included */
	size_t th_used;		/* indexes handed out so far (high-water mark) */
	uint16_t th_free;	/* free list head, 0: none */
	size_t nlive, nexited;	/* records TH_LIVE, TH_EXITED */
	uint16_t *tidx;		/* open addressing, 0: empty; power-of-two size */
	size_t tidx_cap;
	pid_t last_tid;		/* one-entry cache of the tid -> index lookup */
	uint16_t last_tix;
	/* owners: index 1..MP_ENTRY_MAX_OWNERS */
	struct mp_eowner *owners;
	unsigned int owners_cap;	/* entries of owners[], index 0 included */
	unsigned int last_owner;	/* cache of the owner lookup */
};

struct mp_entries {
	struct mp_entries_opts opts;
	struct mp_htab procs;
	struct mp_eproc *cur;	/* the process of the last operation (cache) */
	size_t total;
	uint64_t drops[MP_EDROP__MAX];
};

static inline uint64_t key_hash(uint64_t key)
{
	key ^= key >> 31;
	return key * 0x9e3779b97f4a7c15ull;
}

static inline size_t home(const struct mp_eproc *p, uint64_t key)
{
	return (size_t)(((unsigned __int128)key_hash(key) * p->cap) >> 64);
}

static inline bool used(const struct mp_entry *s)
{
	return s->owner_ix != OWNER_EMPTY;
}

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
	if (!t->opts.max_threads || t->opts.max_threads > MAX_THREAD_IX)
		t->opts.max_threads = MAX_THREAD_IX;
	return t;
}

static void slots_free(struct mp_entry *slots, size_t cap);

static void proc_free(struct mp_eproc *p)
{
	slots_free(p->slots, p->cap);
	free(p->th);
	free(p->tidx);
	free(p->owners);
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
	if (t->cur && t->cur->node.key == (uint64_t)pid)
		return t->cur;
	return (struct mp_eproc *)mp_htab__find(&t->procs, (uint64_t)pid);
}

static void proc_forget(struct mp_entries *t, struct mp_eproc *p)
{
	if (t->cur == p)
		t->cur = NULL;
	t->total -= p->count;
	mp_htab__remove(&t->procs, &p->node);
	proc_free(p);
}

/* The process whose table holds @e. */
static struct mp_eproc *proc_of(struct mp_entries *t, const struct mp_entry *e)
{
	struct mp_hnode *n = NULL;
	struct mp_eproc *p = t->cur;

	if (p && e >= p->slots && e < p->slots + p->cap)
		return p;
	while ((n = mp_htab__next(&t->procs, n))) {
		p = (struct mp_eproc *)n;
		if (e >= p->slots && e < p->slots + p->cap) {
			t->cur = p;
			return p;
		}
	}
	return NULL;
}

/* ---- slots ---- */

static struct mp_entry *slot_find(const struct mp_eproc *p, uint64_t key)
{
	size_t i;

	if (!p->count)
		return NULL;
	for (i = home(p, key);; i = i + 1 == p->cap ? 0 : i + 1) {
		struct mp_entry *s = &p->slots[i];

		if (!used(s))
			return NULL;
		if (s->key == key)
			return s;
	}
}

static struct mp_entry *slot_place(struct mp_eproc *p, const struct mp_entry *e)
{
	size_t i = home(p, e->key);

	while (used(&p->slots[i]))
		i = i + 1 == p->cap ? 0 : i + 1;
	p->slots[i] = *e;
	return &p->slots[i];
}

/*
 * Slot arrays of MMAP_SLOTS_BYTES and more are mapped and unmapped directly: the memory of a
 * table that grew or shrank goes back to the system at once, whatever malloc's thresholds
 * (which other large frees raise) would do with it.
 */
#define MMAP_SLOTS_BYTES	(64u << 10)

static struct mp_entry *slots_alloc(size_t cap)
{
	size_t bytes = cap * sizeof(struct mp_entry);
	void *m;

	if (bytes < MMAP_SLOTS_BYTES)
		return calloc(cap, sizeof(struct mp_entry));
	m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return m == MAP_FAILED ? NULL : m;
}

static void slots_free(struct mp_entry *slots, size_t cap)
{
	size_t bytes = cap * sizeof(struct mp_entry);

	if (bytes < MMAP_SLOTS_BYTES)
		free(slots);
	else if (slots)
		munmap(slots, bytes);
}

/* Rebuild the table with @cap slots (> count * 4 / 3). */
static int slots_resize(struct mp_eproc *p, size_t cap)
{
	struct mp_entry *old = p->slots;
	size_t ocap = p->cap;

	p->slots = slots_alloc(cap);
	if (!p->slots) {
		p->slots = old;
		return -ENOMEM;
	}
	p->cap = cap;
	for (size_t i = 0; i < ocap; i++)
		if (used(&old[i]))
			slot_place(p, &old[i]);
	slots_free(old, ocap);
	return 0;
}

/* Empty slot @j: shift back the entries after it that may live closer to their home. */
static void slot_delete(struct mp_eproc *p, size_t j)
{
	size_t i = j, k = j;

	for (;;) {
		size_t h;

		k = k + 1 == p->cap ? 0 : k + 1;
		if (!used(&p->slots[k]))
			break;
		h = home(p, p->slots[k].key);
		/* stays if its home is cyclically in (i, k] */
		if (i <= k ? (i < h && h <= k) : (i < h || h <= k))
			continue;
		p->slots[i] = p->slots[k];
		i = k;
	}
	memset(&p->slots[i], 0, sizeof(p->slots[i]));
}

static void slots_maybe_shrink(struct mp_eproc *p)
{
	if (p->cap > MIN_SLOTS && p->count < p->cap / 8)
		/* on failure it stays as it is */
		slots_resize(p, p->cap / 2 < MIN_SLOTS ? MIN_SLOTS : p->cap / 2);
}

/* ---- threads ---- */

static inline size_t tid_home(const struct mp_eproc *p, pid_t tid)
{
	return (size_t)(((uint32_t)tid * 0x9e3779b1u) >> 8) & (p->tidx_cap - 1);
}

static uint16_t tid_find(struct mp_eproc *p, pid_t tid)
{
	if (p->last_tix && p->last_tid == tid)
		return p->last_tix;
	if (!p->tidx_cap)
		return 0;
	for (size_t i = tid_home(p, tid);; i = (i + 1) & (p->tidx_cap - 1)) {
		uint16_t ix = p->tidx[i];

		if (!ix)
			return 0;
		if (p->th[ix].tid == tid) {
			p->last_tid = tid;
			p->last_tix = ix;
			return ix;
		}
	}
}

static void tidx_place(struct mp_eproc *p, uint16_t ix)
{
	size_t i = tid_home(p, p->th[ix].tid);

	while (p->tidx[i])
		i = (i + 1) & (p->tidx_cap - 1);
	p->tidx[i] = ix;
}

static int tidx_add(struct mp_eproc *p, uint16_t ix)
{
	if ((p->nlive + 1) * 2 > p->tidx_cap) {
		size_t ncap = p->tidx_cap ? p->tidx_cap * 2 : 8;
		uint16_t *old = p->tidx, *n = calloc(ncap, sizeof(*n));
		size_t ocap = p->tidx_cap;

		if (!n)
			return -ENOMEM;
		p->tidx = n;
		p->tidx_cap = ncap;
		for (size_t i = 0; i < ocap; i++)
			if (old[i])
				tidx_place(p, old[i]);
		free(old);
	}
	tidx_place(p, ix);
	return 0;
}

static void tidx_del(struct mp_eproc *p, uint16_t ix)
{
	size_t mask = p->tidx_cap - 1, i, j, k;

	for (i = tid_home(p, p->th[ix].tid); p->tidx[i] != ix; i = (i + 1) & mask)
		;
	for (j = i, k = i;;) {
		size_t h;

		k = (k + 1) & mask;
		if (!p->tidx[k])
			break;
		h = tid_home(p, p->th[p->tidx[k]].tid);
		if (j <= k ? (j < h && h <= k) : (j < h || h <= k))
			continue;
		p->tidx[j] = p->tidx[k];
		j = k;
	}
	p->tidx[j] = 0;
	if (p->last_tix == ix)
		p->last_tix = 0;
}

static void thread_release(struct mp_eproc *p, uint16_t ix)
{
	struct mp_ethread *th = &p->th[ix];

	if (th->state == TH_LIVE) {
		tidx_del(p, ix);
		p->nlive--;
	} else {
		p->nexited--;
	}
	th->state = TH_FREE;
	th->tid = 0;
	th->count = 0;
	th->next_free = p->th_free;
	p->th_free = ix;
}

/* Exited threads' entries become plain orphans; their records are released. */
static void threads_reclaim(struct mp_eproc *p)
{
	for (size_t i = 0; i < p->cap; i++) {
		struct mp_entry *s = &p->slots[i];

		if (used(s) && s->thread_ix && p->th[s->thread_ix].state == TH_EXITED)
			s->thread_ix = 0;
	}
	for (size_t ix = 1; ix < p->th_used; ix++)
		if (p->th[ix].state == TH_EXITED)
			thread_release(p, (uint16_t)ix);
}

/* A new record for thread @tid, or 0 (counted). */
static uint16_t thread_new(struct mp_entries *t, struct mp_eproc *p, pid_t tid)
{
	uint16_t ix;

	if (p->nlive >= t->opts.max_threads) {
		t->drops[MP_EDROP_THREADS_FULL]++;
		return 0;
	}
	if (!p->th_free && p->th_used > MAX_THREAD_IX && p->nexited)
		threads_reclaim(p);
	if (p->th_free) {
		ix = p->th_free;
		p->th_free = p->th[ix].next_free;
	} else if (p->th_used <= MAX_THREAD_IX) {
		if (!p->th_used)
			p->th_used = 1;		/* index 0 means none */
		if (p->th_used >= p->th_cap) {
			size_t ncap = p->th_cap ? p->th_cap * 2 : 8;
			struct mp_ethread *n;

			if (ncap > MAX_THREAD_IX + 1)
				ncap = MAX_THREAD_IX + 1;
			n = realloc(p->th, ncap * sizeof(*n));
			if (!n) {
				t->drops[MP_EDROP_NOMEM]++;
				return 0;
			}
			p->th = n;
			p->th_cap = ncap;
		}
		ix = (uint16_t)p->th_used++;
	} else {
		t->drops[MP_EDROP_THREADS_FULL]++;
		return 0;
	}
	p->th[ix] = (struct mp_ethread){ .tid = tid, .state = TH_LIVE };
	if (tidx_add(p, ix)) {
		p->th[ix].state = TH_EXITED;	/* released as one */
		p->nexited++;
		thread_release(p, ix);
		t->drops[MP_EDROP_NOMEM]++;
		return 0;
	}
	p->nlive++;
	return ix;
}

/* ---- owners ---- */

static unsigned int owner_find(const struct mp_eproc *p, const void *owner)
{
	unsigned int last = p->last_owner;

	if (last && last < p->owners_cap && p->owners[last].owner == owner)
		return last;
	for (unsigned int i = 1; i < p->owners_cap; i++)
		if (p->owners[i].owner == owner)
			return i;
	return 0;
}

static unsigned int owner_get(struct mp_eproc *p, void *owner)
{
	unsigned int ix = owner_find(p, owner);

	if (ix)
		return ix;
	for (ix = 1; ix < p->owners_cap && p->owners[ix].owner; ix++)
		;
	if (ix >= p->owners_cap) {
		unsigned int ncap = p->owners_cap ? p->owners_cap * 2 : 4;
		struct mp_eowner *n;

		if (p->owners_cap > MP_ENTRY_MAX_OWNERS)
			return 0;
		if (ncap > MP_ENTRY_MAX_OWNERS + 1)
			ncap = MP_ENTRY_MAX_OWNERS + 1;
		n = realloc(p->owners, ncap * sizeof(*n));
		if (!n)
			return 0;
		memset(n + p->owners_cap, 0, (ncap - p->owners_cap) * sizeof(*n));
		p->owners = n;
		p->owners_cap = ncap;
	}
	p->owners[ix].owner = owner;
	p->owners[ix].count = 0;
	return ix;
}

static void owner_put(struct mp_eproc *p, unsigned int ix)
{
	if (ix == OWNER_NONE || ix == OWNER_EMPTY)
		return;
	if (!--p->owners[ix].count) {
		p->owners[ix].owner = NULL;
		if (p->last_owner == ix)
			p->last_owner = 0;
	}
}

/* ---- entries ---- */

/* Drop @s's references to its thread and owner (before its slot is emptied). */
static void entry_release(struct mp_eproc *p, const struct mp_entry *s)
{
	unsigned int tix = s->thread_ix;

	owner_put(p, s->owner_ix);
	if (!tix) {
		p->norphans--;
	} else {
		if (p->th[tix].state == TH_EXITED)
			p->norphans--;
		if (!--p->th[tix].count)
			thread_release(p, (uint16_t)tix);
	}
	p->count--;
}

/* At the process limit, make room by forgetting a process without entries. */
static bool procs_evict_empty(struct mp_entries *t)
{
	struct mp_hnode *n = NULL;

	while ((n = mp_htab__next(&t->procs, n))) {
		struct mp_eproc *p = (struct mp_eproc *)n;

		if (!p->count) {
			proc_forget(t, p);
			return true;
		}
	}
	return false;
}

struct mp_entry *mp_entries__insert(struct mp_entries *t, pid_t pid, pid_t tid, uint64_t key)
{
	struct mp_eproc *p = proc_find(t, pid);
	struct mp_entry e = { .key = key, .owner_ix = OWNER_NONE }, *s;

	if (t->total >= t->opts.max_entries) {
		t->drops[MP_EDROP_TABLE_FULL]++;
		errno = ENOSPC;
		return NULL;
	}
	if (!p) {
		if (t->procs.count >= t->opts.max_procs && !procs_evict_empty(t)) {
			t->drops[MP_EDROP_PROCS_FULL]++;
			errno = ENOSPC;
			return NULL;
		}
		p = calloc(1, sizeof(*p));
		if (p) {
			p->node.key = (uint64_t)pid;
			p->cap = MIN_SLOTS;
			p->slots = slots_alloc(p->cap);
		}
		if (!p || !p->slots || mp_htab__insert(&t->procs, &p->node)) {
			if (p)
				slots_free(p->slots, p->cap);
			free(p);
			t->drops[MP_EDROP_NOMEM]++;
			errno = ENOMEM;
			return NULL;
		}
	}
	t->cur = p;
	/* at most 3/4 full: grow by half */
	if ((p->count + 1) * 4 > p->cap * 3 && slots_resize(p, p->cap + p->cap / 2)) {
		t->drops[MP_EDROP_NOMEM]++;
		errno = ENOMEM;
		return NULL;
	}
	e.thread_ix = tid_find(p, tid);
	if (!e.thread_ix)
		e.thread_ix = thread_new(t, p, tid);	/* 0: kept, attributed to the process */
	if (e.thread_ix)
		p->th[e.thread_ix].count++;
	else
		p->norphans++;
	s = slot_place(p, &e);
	p->count++;
	t->total++;
	return s;
}

int mp_entries__set(struct mp_entries *t, struct mp_entry *e, void *owner, uint64_t id,
		    uint64_t nsamples)
{
	struct mp_eproc *p = proc_of(t, e);
	unsigned int ix = OWNER_NONE;

	if (!p)
		return -EINVAL;
	if (id >> MP_ENTRY_ID_BITS || nsamples >> MP_ENTRY_NSAMPLES_BITS) {
		t->drops[MP_EDROP_OVERFLOW]++;
		return -EOVERFLOW;
	}
	if (owner) {
		ix = owner_get(p, owner);
		if (!ix) {
			t->drops[MP_EDROP_OWNERS_FULL]++;
			return -ENOSPC;
		}
		p->owners[ix].count++;
		p->last_owner = ix;
	}
	owner_put(p, e->owner_ix);
	e->owner_ix = ix;
	e->id = id;
	e->nsamples = nsamples;
	return 0;
}

struct mp_entry *mp_entries__find(struct mp_entries *t, pid_t pid, uint64_t key)
{
	struct mp_eproc *p = proc_find(t, pid);

	if (!p)
		return NULL;
	t->cur = p;
	return slot_find(p, key);
}

void *mp_entries__owner(const struct mp_entries *t, const struct mp_entry *e)
{
	struct mp_eproc *p = proc_of((struct mp_entries *)t, e);

	if (!p || e->owner_ix == OWNER_NONE || e->owner_ix == OWNER_EMPTY)
		return NULL;
	return p->owners[e->owner_ix].owner;
}

pid_t mp_entries__tid(const struct mp_entries *t, const struct mp_entry *e)
{
	struct mp_eproc *p = proc_of((struct mp_entries *)t, e);

	if (!p || !e->thread_ix || p->th[e->thread_ix].state != TH_LIVE)
		return 0;
	return p->th[e->thread_ix].tid;
}

void mp_entries__remove(struct mp_entries *t, struct mp_entry *e)
{
	struct mp_eproc *p = proc_of(t, e);

	if (!p || !used(e))
		return;
	entry_release(p, e);
	slot_delete(p, (size_t)(e - p->slots));
	t->total--;
	/* An empty process stays (its next block needs no allocation) until drained, exec,
	 * exit or the process limit. */
	slots_maybe_shrink(p);
}

size_t mp_entries__thread_exit(struct mp_entries *t, pid_t pid, pid_t tid)
{
	struct mp_eproc *p = proc_find(t, pid);
	uint16_t ix;
	size_t n;

	if (!p)
		return 0;
	ix = tid_find(p, tid);
	if (!ix)
		return 0;
	tidx_del(p, ix);
	p->nlive--;
	p->th[ix].state = TH_EXITED;
	p->th[ix].tid = 0;
	p->nexited++;
	n = p->th[ix].count;
	p->norphans += n;
	return n;
}

size_t mp_entries__foreach(const struct mp_entries *t, pid_t pid, mp_entry_fn fn, void *ctx)
{
	struct mp_eproc *p = proc_find(t, pid);
	size_t n = 0;

	if (!p)
		return 0;
	for (size_t i = 0; i < p->cap; i++) {
		if (used(&p->slots[i])) {
			fn(ctx, &p->slots[i]);
			n++;
		}
	}
	return n;
}

size_t mp_entries__drain(struct mp_entries *t, pid_t pid, void *owner, mp_entry_fn fn, void *ctx)
{
	struct mp_eproc *p = proc_find(t, pid);
	unsigned int oix = 0;
	size_t n = 0, start;

	if (!p)
		return 0;
	if (owner) {
		oix = owner_find(p, owner);
		if (!oix)
			return 0;
	}
	t->cur = p;
	for (size_t i = 0; i < p->cap; i++) {
		struct mp_entry *s = &p->slots[i];

		if (used(s) && (!oix || s->owner_ix == oix)) {
			if (fn)
				fn(ctx, s);
			n++;
		}
	}
	if (n == p->count) {
		proc_forget(t, p);
		return n;
	}
	/* Delete from the start of a cluster on: shifted entries only move back to the slot
	 * being looked at, never behind it. */
	for (start = 0; used(&p->slots[start]); start++)
		;
	for (size_t k = 1; k <= p->cap; k++) {
		size_t i = (start + k) % p->cap;

		while (used(&p->slots[i]) && p->slots[i].owner_ix == oix) {
			entry_release(p, &p->slots[i]);
			slot_delete(p, i);
			t->total--;
		}
	}
	slots_maybe_shrink(p);
	return n;
}

size_t mp_entries__count(const struct mp_entries *t, pid_t pid)
{
	struct mp_eproc *p = proc_find(t, pid);

	return p ? p->count : 0;
}

size_t mp_entries__total(const struct mp_entries *t)
{
	return t->total;
}

size_t mp_entries__threads(const struct mp_entries *t, pid_t pid)
{
	struct mp_eproc *p = proc_find(t, pid);

	return p ? p->nlive : 0;
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

size_t mp_entries__bytes(const struct mp_entries *t)
{
	struct mp_hnode *n = NULL;
	size_t b = sizeof(*t) + t->procs.nbuckets * sizeof(*t->procs.buckets);

	while ((n = mp_htab__next(&t->procs, n))) {
		const struct mp_eproc *p = (const struct mp_eproc *)n;

		b += sizeof(*p) + p->cap * sizeof(*p->slots) + p->th_cap * sizeof(*p->th) +
		     p->tidx_cap * sizeof(*p->tidx) + p->owners_cap * sizeof(*p->owners);
	}
	return b;
}
