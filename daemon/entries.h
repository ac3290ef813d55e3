/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Entry tables: the sampled blocks still live, keyed by process and thread (the statmemprof
 * "domain"), with a per-process address index so that a free from any thread finds its block.
 * A thread that exits hands its entries to its process (orphans); exec and exit drain a
 * process. Every table has a hard limit and every refusal is counted.
 *
 * Owner: the engine component.
 */
#ifndef MEMPROFD_ENTRIES_H
#define MEMPROFD_ENTRIES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- A small intrusive chained hash table on 64-bit keys (grows by doubling). ---- */
struct mp_hnode {
	uint64_t key;
	struct mp_hnode *next;
};

struct mp_htab {
	struct mp_hnode **buckets;
	size_t nbuckets;	/* a power of two, or 0 before the first insert */
	size_t count;
};

/* Returns 0 or -ENOMEM. Duplicate keys are allowed; lookup finds the newest. */
int mp_htab__insert(struct mp_htab *h, struct mp_hnode *n);
struct mp_hnode *mp_htab__find(const struct mp_htab *h, uint64_t key);
/* Unlink @n (which must be in @h). */
void mp_htab__remove(struct mp_htab *h, struct mp_hnode *n);
/* Iterate: returns the node after @prev (NULL: the first), or NULL at the end. Removing
 * the returned node before asking for the next one is not allowed; collect first. */
struct mp_hnode *mp_htab__next(const struct mp_htab *h, const struct mp_hnode *prev);
void mp_htab__fini(struct mp_htab *h);	/* frees the buckets, not the nodes */

/* ---- Entries ---- */

/* Why a block or an event was refused or lost: counted in struct mp_entries_stats. */
enum mp_entries_drop {
	MP_EDROP_TABLE_FULL,	/* max_entries live blocks already tracked */
	MP_EDROP_PROCS_FULL,	/* max_procs processes already tracked */
	MP_EDROP_THREADS_FULL,	/* max_threads threads of one process already tracked */
	MP_EDROP_NOMEM,
	MP_EDROP__MAX,
};

struct mp_entry {
	struct mp_hnode addr_node;	/* key: block address */
	uint64_t id;		/* object id in the owner's trace */
	uint64_t words;		/* length written to the trace (header excluded) */
	uint64_t nsamples;
	void *owner;		/* the trace the block was written to (profile, process) */
	pid_t tid;		/* allocating thread; 0 once orphaned */
	/* list of the owning thread's (or the process' orphan) entries */
	struct mp_entry *prev, *next;
	struct mp_ethread *thread;	/* NULL when orphaned */
	struct mp_eproc *proc;
};

struct mp_entries_opts {
	size_t max_entries;	/* all processes */
	size_t max_procs;
	size_t max_threads;	/* per process */
};

struct mp_entries;

struct mp_entries *mp_entries__new(const struct mp_entries_opts *opts);
void mp_entries__free(struct mp_entries *t);	/* frees every entry; NULL-safe */

/*
 * Track a block of @pid allocated by thread @tid at @addr. Returns the new entry (owned by the
 * table) with addr, tid and proc set, the rest zeroed for the caller to fill, or NULL with
 * errno ENOSPC (a limit; counted) or ENOMEM. An address already tracked for @pid is the
 * caller's business: look it up first.
 */
struct mp_entry *mp_entries__insert(struct mp_entries *t, pid_t pid, pid_t tid, uint64_t addr);
/* The live entry of @pid at @addr, whichever thread allocated it, or NULL. */
struct mp_entry *mp_entries__find(const struct mp_entries *t, pid_t pid, uint64_t addr);
/* Forget @e (after writing its collect). */
void mp_entries__remove(struct mp_entries *t, struct mp_entry *e);

/* Thread @tid of @pid exited: its entries become the process' orphans. Returns how many. */
size_t mp_entries__thread_exit(struct mp_entries *t, pid_t pid, pid_t tid);

typedef void (*mp_entry_fn)(void *ctx, struct mp_entry *e);
/* Call @fn for every live entry of @pid (threads' and orphans'); @fn must not remove. */
size_t mp_entries__foreach(const struct mp_entries *t, pid_t pid, mp_entry_fn fn, void *ctx);
/* Call @fn (if not NULL) for every entry of @pid whose owner is @owner (NULL: any), then forget
 * those entries; the process is forgotten when it has none left. Returns how many. */
size_t mp_entries__drain(struct mp_entries *t, pid_t pid, void *owner, mp_entry_fn fn, void *ctx);

/* Live entries of @pid (all owners), and in all. */
size_t mp_entries__count(const struct mp_entries *t, pid_t pid);
size_t mp_entries__total(const struct mp_entries *t);
/* Threads of @pid with entries of their own (orphans excluded). */
size_t mp_entries__threads(const struct mp_entries *t, pid_t pid);
/* Orphaned entries of @pid. */
size_t mp_entries__orphans(const struct mp_entries *t, pid_t pid);

/* Drops by cause (enum mp_entries_drop). */
uint64_t mp_entries__drops(const struct mp_entries *t, enum mp_entries_drop cause);

#endif
