/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * What the files of libmemprof-preload share: the per-thread countdown (struct pl_thread, in
 * initial-exec TLS), the library's settings (pl_g), the gate every allocation reads first, the
 * queue of pending reports, and the inlines of the allocation fast path. preload.c gives the
 * overview; pl_sample.c draws and records samples, pl_report.c hands them to the profiler
 * (USDT probe sites, pending and deferred queues), pl_init.c reads the environment and
 * handles fork and exit, pl_cxx.c holds C++'s operators new and delete.
 */
#ifndef MP_PL_STATE_H
#define MP_PL_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <pthread.h>
#include <sys/types.h>

#include <memprof/preload.h>

#include "pl_core.h"

#define PL_EXPORT	__attribute__((visibility("default")))
#define likely(x)	__builtin_expect(!!(x), 1)
#define unlikely(x)	__builtin_expect(!!(x), 0)

/* protections are per page: at least this size */
#define PL_PAGE		4096u

/* ---- state ---------------------------------------------------------------------------- */

/* The countdown while the thread is inside the slow path: nested calls never expire it. */
#define PL_PARKED	(PL_GEOM_MAX * 2)

enum pl_thread_state {
	PL_T_NEW = 0,		/* zeroed TLS: first allocation takes the slow path */
	PL_T_DISARMED,
	PL_T_ARMED,
};

struct pl_thread {
	int64_t countdown;	/* first: the fast path addresses it at offset 0 */
	struct pl_rng rng;
	double log1m;		/* log1p(-rate) of the armed rate */
	uint32_t gen;		/* config generation the countdown was drawn under */
	uint8_t state;		/* enum pl_thread_state */
	uint8_t seeded;
	uint8_t in_slow;	/* inside the sampling path: signal handlers do not nest into it */
	uintptr_t stk_lo, stk_hi;	/* this thread's stack, checked readable */
	uintptr_t stk_bad;	/* highest page below stk_lo found not readable, or 0 */
	/* Deferred mode: ids freed by a signal handler that interrupted this thread while it
	 * held the queue; the holder moves them into the queue before it lets go. */
	uint32_t nlate;
	uint64_t late[8];
};

PL_HIDDEN extern __thread struct pl_thread pl_tls __attribute__((tls_model("initial-exec")));

struct pl_globals {
	double env_rate;	/* MEMPROF_RATE or the default */
	uint64_t seed_base;
	uint64_t threads;	/* threads seeded so far (atomic) */
	int test_fd;		/* MEMPROF_TEST_LOG, or -1 */
	bool ready;		/* constructor done: environment read */
	bool exiting;		/* destructor ran: frees are reported one by one */
	bool no_walk;		/* MEMPROF_WALK=0: the profiler walks every stack */
	uint32_t batch;		/* allocs per memprof:flush (MEMPROF_BATCH), 0: immediate */
	uint64_t next_id;	/* ids of sampled blocks (atomic) */
	pthread_t main_thread;	/* whose stack ends at __libc_stack_end */
	pid_t pid;		/* this process (set at start and in a fork child; not vfork) */
};
PL_HIDDEN extern struct pl_globals pl_g;

/* Pending frees, and in deferred mode queued samples (pl_report.c). */
PL_HIDDEN extern struct memprof_preload_pending pl_pending;

PL_HIDDEN extern struct pl_table pl_table;

/*
 * The gate every allocation's fast path reads first: while it is 0 nothing can sample, and the
 * call goes straight to the next allocator (a load and a branch; the countdown is not
 * touched). Its low half is memprof:alloc's USDT semaphore, which the kernel raises while a
 * uprobe is attached there (a 16-bit add at that address: it never writes our half); its high
 * half is ours (PL_GATE_*), changed with 16-bit atomics that never write the kernel's. sdt.h
 * names a probe's semaphore <provider>_<name>_semaphore: memprof_alloc_semaphore is the low
 * half's symbol, so the note points the kernel there.
 */
union pl_gate {
	uint32_t word;
	struct {
		unsigned short sem;	/* memprof:alloc's semaphore (the kernel's) */
		unsigned short local;	/* PL_GATE_* (ours) */
	};
};
enum {
	PL_GATE_FORCE = 1,	/* MEMPROF_ARM=1 or MEMPROF_TEST_LOG: armed without a probe */
	PL_GATE_API = 2,	/* an in-process profile (memprof_start) samples */
};
PL_HIDDEN extern union pl_gate pl_gate;

/* The configuration block the profiler finds by its dynamic symbol (pl_init.c). */
extern struct memprof_preload_config memprof_preload_config;

static inline void stat_add(enum memprof_preload_stat s, int64_t v)
{
	__atomic_fetch_add(&memprof_preload_config.stats[s], (uint64_t)v, __ATOMIC_RELAXED);
}

/* ---- the fast path -------------------------------------------------------------------- */

static inline int64_t pl_words(size_t size)
{
	/* ceil(size / 8) + 1; wraps for size > SIZE_MAX - 15, which no allocator satisfies. */
	return (int64_t)((size + 15) >> 3);
}

static inline bool pl_gate_open(void)
{
	return __atomic_load_n(&pl_gate.word, __ATOMIC_RELAXED) != 0;
}

/* Is a probe attached at memprof:alloc, or does MEMPROF_ARM arm us without one? */
static inline bool pl_gate_probe_or_force(void)
{
	return __atomic_load_n(&pl_gate.word, __ATOMIC_RELAXED) &
	       (0xffffu | (uint32_t)PL_GATE_FORCE << 16);
}

static inline void pl_gate_set(unsigned short bit, bool on)
{
	if (on)
		__atomic_fetch_or(&pl_gate.local, bit, __ATOMIC_SEQ_CST);
	else
		__atomic_fetch_and(&pl_gate.local, (unsigned short)~bit, __ATOMIC_SEQ_CST);
}

/* c -= w; true when c <= 0. One instruction on x86-64, so a signal cannot split it. */
static inline bool pl_countdown_sub(int64_t w)
{
#if defined(__x86_64__)
	bool expired;

	__asm__("subq %2, %0" : "+m"(pl_tls.countdown), "=@ccle"(expired) : "er"(w));
	return expired;
#else
	return __atomic_sub_fetch(&pl_tls.countdown, w, __ATOMIC_RELAXED) <= 0;
#endif
}

/*
 * Does this allocation of @w words reach a sample point? Only while the gate is open does the
 * countdown run: a thread's countdown is then either a draw (armed) or a poll interval
 * (MEMPROF_PRELOAD_POLL_WORDS) after which the slow path looks at the arming again; a thread
 * that never took the slow path has 0 and takes it at its first allocation.
 */
static inline bool pl_sample_due(int64_t w)
{
	return pl_gate_open() && pl_countdown_sub(w);
}

/* ---- the pending queue's lock (pl_report.c) ------------------------------------------- */

static inline bool pl_pending_trylock_as(uintptr_t holder)
{
	uintptr_t expect = 0;

	return __atomic_compare_exchange_n(&pl_pending.busy, &expect, holder, false,
					   __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

static inline bool pl_pending_trylock(void)
{
	return pl_pending_trylock_as(1);
}

/* Holder only: the queue may have changed (struct memprof_preload_pending). */
static inline void pl_pending_release(void)
{
	__atomic_store_n(&pl_pending.seq, pl_pending.seq + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&pl_pending.busy, 0, __ATOMIC_RELEASE);
}

static inline void pl_pending_unlock(void)
{
	pl_pending_release();
}

/* Take the pending ids into @ids (the buffer locked by the caller). */
static inline uint32_t pl_pending_take(uint64_t *ids)
{
	uint32_t n = pl_pending.q.nfree;

	memcpy(ids, pl_pending.q.free_ids, n * sizeof(*ids));
	pl_pending.q.nfree = 0;
	return n;
}

/* ---- between the files ---------------------------------------------------------------- */

/* pl_sample.c */
PL_HIDDEN void pl_thread_seed(struct pl_thread *t);
PL_HIDDEN int64_t pl_cross_begin(int64_t w);
PL_HIDDEN void pl_cross_finish(int64_t r, void *p, size_t size, uint32_t kind);
PL_HIDDEN bool pl_release(void *p, uint32_t kind);

/* pl_report.c */
PL_HIDDEN void memprof_preload_alloc_hook(const struct memprof_preload_alloc_rec *rec);
PL_HIDDEN void memprof_preload_free_hook(uint64_t id, uint64_t addr, uint32_t kind);
PL_HIDDEN void memprof_preload_free_batch_hook(const uint64_t *ids, uint32_t count);
PL_HIDDEN void memprof_preload_flush_hook(const struct memprof_preload_queue *q);
PL_HIDDEN void pl_pending_flush(bool wait);
PL_HIDDEN void pl_free_report(uint64_t id, uintptr_t addr, uint32_t kind);
PL_HIDDEN bool pl_batch_lock(bool wait);
PL_HIDDEN void pl_batch_unlock(void);
PL_HIDDEN bool pl_batch_alloc(const struct memprof_preload_alloc_rec *rec);

#endif
