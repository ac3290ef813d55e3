/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Entry tables: the sampled blocks still live, keyed by process and thread (the statmemprof
 * "domain"), with a per-process index by block key so that a free from any thread finds its
 * block. A thread that exits hands its entries to its process (orphans); exec and exit drain a
 * process. Every table has a hard limit and every refusal is counted. Each live block costs one
 * 24-byte slot of its process' open-addressing table, at most 3/4 full and at least half full
 * while it grows (32 to 48 bytes a block), and nothing else.
 *
 * Owner: the engine component.
 */
#ifndef MEMPROFD_ENTRIES_H
#define MEMPROFD_ENTRIES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * ---- A small intrusive chained hash table on 64-bit keys (grows by doubling). ----
 * Not userspace-lib/hashmap on purpose: the node lives in the process record, so an insertion
 * allocates nothing once the buckets exist (a failed growth only lengthens the chains, it never
 * loses a process), and removal takes the record itself.
 */
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

/* Why a block or an event was refused or lost: counted by mp_entries__drops(). */
enum mp_entries_drop {
	MP_EDROP_TABLE_FULL,	/* max_entries live blocks already tracked */
	MP_EDROP_PROCS_FULL,	/* max_procs processes already tracked */
	MP_EDROP_THREADS_FULL,	/* max_threads threads of one process already tracked */
	MP_EDROP_NOMEM,
	MP_EDROP_OWNERS_FULL,	/* MP_ENTRY_MAX_OWNERS owners of one process' blocks already */
	MP_EDROP_OVERFLOW,	/* an id or multiplicity too large for an entry's fields */
	MP_EDROP__MAX,
};

/*
 * One tracked block: a 24-byte slot of its process' open-addressing table (entries.c). The
 * key is opaque: a block address for uprobe-mode processes, whatever unique 64-bit name a
 * process' blocks have otherwise. The owner (the process of a profile whose trace the block went to) and the
 * allocating thread are small indexes into per-process tables: read them with
 * mp_entries__owner() and mp_entries__tid(), set the owner, id and multiplicity with
 * mp_entries__set(). id and nsamples are read directly; len is the engine's to set.
 *
 * A pointer to an entry is valid until the next insert, remove, drain or thread_exit on the
 * table (slots move).
 */
#define MP_ENTRY_ID_BITS	40
#define MP_ENTRY_LEN_MAX	0xFFFFu	/* lengths clamp here (mp_entry.len) */
#define MP_ENTRY_NSAMPLES_BITS	48
#define MP_ENTRY_MAX_OWNERS	253	/* distinct owners of one process' live entries */

struct mp_entry {
	uint64_t key;
	uint64_t id : MP_ENTRY_ID_BITS;		/* object id in the owner's trace */
	uint64_t owner_ix : 8;			/* 0: empty slot (entries.c) */
	uint64_t len : 16;			/* words, at most MP_ENTRY_LEN_MAX (the engine's) */
	uint64_t nsamples : MP_ENTRY_NSAMPLES_BITS;	/* multiplicity */
	uint64_t thread_ix : 16;		/* 0: orphaned (entries.c) */
};

struct mp_entries_opts {
	size_t max_entries;	/* all processes */
	size_t max_procs;
	size_t max_threads;	/* per process, at most 65535 */
};

struct mp_entries;

struct mp_entries *mp_entries__new(const struct mp_entries_opts *opts);
void mp_entries__free(struct mp_entries *t);	/* frees every entry; NULL-safe */

/*
 * Track a block of @pid allocated by thread @tid under @key. Returns the new entry (owned by the
 * table) with no owner, id 0 and nsamples 0 for the caller to set, or NULL with errno ENOSPC (a
 * limit; counted) or ENOMEM. A key already tracked for @pid is the caller's business: look it
 * up first.
 */
struct mp_entry *mp_entries__insert(struct mp_entries *t, pid_t pid, pid_t tid, uint64_t key);
/*
 * Set @e's owner (whose trace it was written to; NULL: none), id and multiplicity. Returns 0,
 * -ENOSPC when @e's process has MP_ENTRY_MAX_OWNERS other owners with live entries, or
 * -EOVERFLOW when @id or @nsamples does not fit (both counted); @e is unchanged then.
 */
int mp_entries__set(struct mp_entries *t, struct mp_entry *e, void *owner, uint64_t id,
		    uint64_t nsamples);
/* The live entry of @pid under @key, whichever thread allocated it, or NULL. */
struct mp_entry *mp_entries__find(struct mp_entries *t, pid_t pid, uint64_t key);
/* Forget @e (after writing its collect). */
void mp_entries__remove(struct mp_entries *t, struct mp_entry *e);
/* @e's owner as set (NULL if none), its allocating thread (0 once orphaned). */
void *mp_entries__owner(const struct mp_entries *t, const struct mp_entry *e);
pid_t mp_entries__tid(const struct mp_entries *t, const struct mp_entry *e);

/* Thread @tid of @pid exited: its entries become the process' orphans. Returns how many. */
size_t mp_entries__thread_exit(struct mp_entries *t, pid_t pid, pid_t tid);

typedef void (*mp_entry_fn)(void *ctx, struct mp_entry *e);
/* Call @fn for every live entry of @pid (threads' and orphans'); @fn must not change the table. */
size_t mp_entries__foreach(const struct mp_entries *t, pid_t pid, mp_entry_fn fn, void *ctx);
/* Call @fn (if not NULL) for every entry of @pid whose owner is @owner (NULL: any), then forget
 * those entries; the process is forgotten when it has none left. @fn must not change the
 * table. Returns how many. */
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

/* Bytes the table holds for its entries (slot arrays, thread and owner tables, processes):
 * what tracking costs, for the benchmark and status. */
size_t mp_entries__bytes(const struct mp_entries *t);

#endif
