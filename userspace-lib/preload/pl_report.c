// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libmemprof-preload's reports to the profiler: the noinline hooks that carry the USDT probe
 * sites (memprof:alloc, free, free_batch, flush) and their semaphores, the buffer of pending
 * frees that ride along with the next report, and deferred mode (MEMPROF_BATCH), where walked
 * samples wait in the same queue for one memprof:flush. The layouts checked here are the ABI
 * of <memprof/preload.h> as bpf/memprof.h reads it.
 */
#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
/*
 * Make each probe site a 5-byte nop (0f 1f 44 00 00) instead of sdt.h's 1-byte nop: Linux
 * 6.18 optimises uprobes on exactly that instruction into a call to a trampoline (about
 * 0.6 µs instead of an int3 round trip; docs/probe-costs.md). sdt.h expands _SDT_NOP at
 * the probe, so redefining it here is enough; ".nops 5" has no comma to upset its macros.
 */
#undef _SDT_NOP
#define _SDT_NOP .nops 5

#include <memprof/preload.h>

#include "bpf/memprof.h"
#include "pl_state.h"

#define PL_SAME_KIND(a) ((int)MEMPROF_PRELOAD_##a == (int)MP_KIND_##a)
_Static_assert(PL_SAME_KIND(MALLOC) && PL_SAME_KIND(CALLOC) && PL_SAME_KIND(REALLOC) &&
		       PL_SAME_KIND(REALLOCARRAY) && PL_SAME_KIND(POSIX_MEMALIGN) &&
		       PL_SAME_KIND(ALIGNED_ALLOC) && PL_SAME_KIND(MEMALIGN) &&
		       PL_SAME_KIND(VALLOC) && PL_SAME_KIND(PVALLOC) && PL_SAME_KIND(NEW) &&
		       PL_SAME_KIND(MMAP) && PL_SAME_KIND(FREE) && PL_SAME_KIND(DELETE) &&
		       PL_SAME_KIND(MUNMAP),
	       "memprof_preload_kind must match enum mp_kind");
_Static_assert(MEMPROF_PRELOAD_STAT__MAX <= MEMPROF_PRELOAD_STAT__SLOTS, "stats slots");
_Static_assert(sizeof(struct memprof_preload_config) == 48 + 8 * MEMPROF_PRELOAD_STAT__SLOTS,
	       "config layout");
_Static_assert(sizeof(struct memprof_preload_test_rec) == 48, "test record layout");
_Static_assert(sizeof(struct memprof_preload_alloc_rec) ==
		       48 + 8 * (MEMPROF_PRELOAD_FREE_BATCH + MEMPROF_PRELOAD_MAX_FRAMES),
	       "alloc record layout");
_Static_assert(MEMPROF_PRELOAD_FREE_BATCH == MP_FREE_BATCH_MAX, "batch sizes");
_Static_assert(MEMPROF_PRELOAD_MAX_FRAMES == MP_MAX_STACK, "frame counts");
_Static_assert(offsetof(struct memprof_preload_alloc_rec, free_ids) == MP_PL_REC_FREE_IDS &&
		       offsetof(struct memprof_preload_alloc_rec, frames) == MP_PL_REC_FRAMES &&
		       offsetof(struct memprof_preload_alloc_rec, nframes) ==
			       offsetof(struct mp_preload_alloc_head, nframes),
	       "bpf/memprof.h's view of the alloc record");
_Static_assert(MEMPROF_PRELOAD_MAX_BATCH == MP_PL_QUEUE_MAX &&
		       offsetof(struct memprof_preload_queue, allocs) == MP_PL_QUEUE_ALLOCS &&
		       MEMPROF_PRELOAD_QUEUE_HEAD == MP_PL_QUEUE_ALLOCS &&
		       offsetof(struct memprof_preload_queue, free_ids) == 16 &&
		       offsetof(struct memprof_preload_queue, bytes) ==
			       offsetof(struct mp_preload_queue_head, bytes) &&
		       sizeof(struct memprof_preload_queue) == MP_PL_QUEUE_SIZE &&
		       sizeof(struct memprof_preload_queued_alloc) == MP_PL_QUEUED_SIZE &&
		       MEMPROF_PRELOAD_QUEUED_SIZE(MP_MAX_STACK) == MP_PL_QUEUED_SIZE &&
		       offsetof(struct memprof_preload_queued_alloc, addr) ==
			       offsetof(struct mp_preload_queued_head, r) &&
		       offsetof(struct memprof_preload_queued_alloc, frames) ==
			       sizeof(struct mp_preload_queued_head),
	       "bpf/memprof.h's view of the deferred queue");

/*
 * Ids of sampled blocks freed and not reported yet (q.free_ids), and in deferred mode the
 * sampled blocks not reported yet (q.allocs). The lock is only ever tried: a thread (or a
 * signal handler interrupting the holder) that finds it taken reports its free at once; in
 * deferred mode a free waits for another holder instead, or, when the holder is its own
 * thread, leaves its id in the thread's late[] (see pl_batch_free()).
 */
PL_HIDDEN struct memprof_preload_pending pl_pending;	/* busy: 0 free; 1 held; deferred mode: the
							 * holder's struct pl_thread */

static void pl_batch_send(void);
static void pl_batch_free(uint64_t id, uintptr_t addr, uint32_t kind);

PL_HIDDEN union pl_gate pl_gate __attribute__((section(".probes"), used, aligned(4)));
_Static_assert(offsetof(union pl_gate, sem) == 0, "the semaphore is the gate's first half");
__asm__(".globl memprof_alloc_semaphore\n\t.hidden memprof_alloc_semaphore\n\t"
	".set memprof_alloc_semaphore, pl_gate");
extern unsigned short memprof_alloc_semaphore;	/* for sdt.h's note */

/* USDT semaphores of the other probes (sdt.h's convention, in .probes). */
PL_HIDDEN unsigned short memprof_free_semaphore __attribute__((section(".probes"), used));
PL_HIDDEN unsigned short memprof_free_batch_semaphore __attribute__((section(".probes"), used));
PL_HIDDEN unsigned short memprof_flush_semaphore __attribute__((section(".probes"), used));

/* ---- hooks: the USDT probe sites ------------------------------------------------------ */

static void pl_test_log(uint32_t type, uint32_t kind, uint64_t addr, uint64_t size,
			uint64_t nsamples, uint32_t gen)
{
	struct memprof_preload_test_rec rec = {
		.type = type,
		.kind = kind,
		.addr = addr,
		.size = size,
		.nsamples = nsamples,
		.pid = (uint32_t)getpid(),
		.tid = (uint32_t)syscall(SYS_gettid),
		.generation = gen,
	};

	/* syscall(), not write(): write() is a cancellation point, malloc must not be. */
	if (syscall(SYS_write, pl_g.test_fd, &rec, sizeof(rec)) != (long)sizeof(rec))
		stat_add(MEMPROF_PRELOAD_STAT_TEST_LOG_ERRORS, 1);
}

/*
 * noipa: keep the signature (the probe's argument registers) and the call itself. On x86-64
 * the probes' arguments are pinned to the registers of the hooks' own arguments (<memprof/
 * preload.h>: a profiler may read them there instead of interpreting the note's specs).
 */
#if defined(__x86_64__)
#define PL_ARG(n, reg, v)	register __typeof__(v) n __asm__(reg) = (v)
#else
#define PL_ARG(n, reg, v)	__typeof__(v) n = (v)
#endif

/* A walked sample goes to the profiler, at once or queued. */
static void pl_alloc_account(const struct memprof_preload_alloc_rec *rec)
{
	stat_add(MEMPROF_PRELOAD_STAT_SAMPLES, (int64_t)rec->nsamples);
	if (pl_g.test_fd >= 0)
		pl_test_log(MEMPROF_PRELOAD_REC_ALLOC, rec->kind, rec->addr, rec->size,
			    rec->nsamples, rec->generation);
}

PL_HIDDEN __attribute__((noinline, noipa)) void
memprof_preload_alloc_hook(const struct memprof_preload_alloc_rec *rec)
{
	PL_ARG(a0, "rdi", rec);

	STAP_PROBE1(memprof, alloc, a0);
	stat_add(MEMPROF_PRELOAD_STAT_ALLOC_HOOKS, 1);
	if (rec->nfree)
		stat_add(MEMPROF_PRELOAD_STAT_BATCHED_IDS, rec->nfree);
	pl_alloc_account(rec);
}

PL_HIDDEN __attribute__((noinline, noipa)) void memprof_preload_free_hook(uint64_t id,
									 uint64_t addr,
									 uint32_t kind)
{
	PL_ARG(a0, "rdi", id);
	PL_ARG(a1, "rsi", addr);
	PL_ARG(a2, "rdx", kind);

	STAP_PROBE3(memprof, free, a0, a1, a2);
	stat_add(MEMPROF_PRELOAD_STAT_FREE_HOOKS, 1);
}

PL_HIDDEN __attribute__((noinline, noipa)) void memprof_preload_free_batch_hook(const uint64_t *ids,
									       uint32_t count)
{
	PL_ARG(a0, "rdi", ids);
	PL_ARG(a1, "rsi", count);

	STAP_PROBE2(memprof, free_batch, a0, a1);
	stat_add(MEMPROF_PRELOAD_STAT_BATCH_HOOKS, 1);
	stat_add(MEMPROF_PRELOAD_STAT_BATCHED_IDS, count);
}

/* Deferred mode: the queue, locked by the caller. */
PL_HIDDEN __attribute__((noinline, noipa)) void
memprof_preload_flush_hook(const struct memprof_preload_queue *q)
{
	PL_ARG(a0, "rdi", q);

	STAP_PROBE1(memprof, flush, a0);
	stat_add(MEMPROF_PRELOAD_STAT_BATCH_HOOKS, 1);
	stat_add(MEMPROF_PRELOAD_STAT_BATCHED_IDS, q->nfree);
}

/*
 * With the buffer locked: take the pending ids, unlock, report them. A function of its own so
 * that the copy (512 bytes) is on the stack only while it is reported, not on every free's
 * (a signal handler's free may run on a small alternate stack).
 */
static __attribute__((noinline)) void pl_pending_send(void)
{
	uint64_t ids[MEMPROF_PRELOAD_FREE_BATCH];
	uint32_t n = pl_pending_take(ids);

	pl_pending_unlock();
	if (n)
		memprof_preload_free_batch_hook(ids, n);
}

/* Report the pending ids now. @wait: retry while another thread holds the buffer (exit). */
PL_HIDDEN void pl_pending_flush(bool wait)
{
	if (pl_g.batch) {
		if (!__atomic_load_n(&pl_pending.q.nfree, __ATOMIC_RELAXED) &&
		    !__atomic_load_n(&pl_pending.q.nalloc, __ATOMIC_RELAXED))
			return;
		if (!pl_batch_lock(wait))
			return;
		pl_batch_send();
		pl_batch_unlock();
		return;
	}
	if (!__atomic_load_n(&pl_pending.q.nfree, __ATOMIC_RELAXED))
		return;
	for (int tries = 0; !pl_pending_trylock(); tries++) {
		if (!wait || tries >= 1000)
			return;
		sched_yield();
	}
	pl_pending_send();
}

/* The destructor may have flushed since we looked at "exiting": then nobody else will. */
static void pl_flush_if_exited(void)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (unlikely(__atomic_load_n(&pl_g.exiting, __ATOMIC_RELAXED)))
		pl_pending_flush(false);
}

/*
 * Is a profiler listening and sampling (as pl_params_read() arms: the probe or MEMPROF_ARM,
 * and the profiler's flags once it wrote any)? Then frees may wait for the next report.
 */
static bool pl_batching(void)
{
	uint32_t gen;

	if (__atomic_load_n(&pl_g.exiting, __ATOMIC_RELAXED))
		return false;
	if (!pl_gate_probe_or_force())
		return false;
	gen = __atomic_load_n(&memprof_preload_config.generation, __ATOMIC_ACQUIRE);
	return gen == 0 || (__atomic_load_n(&memprof_preload_config.flags, __ATOMIC_RELAXED) &
			    MEMPROF_PRELOAD_F_SAMPLING);
}

/*
 * A sampled block with id @id was released. Queue its id, or report it at once when the
 * pending buffer is busy or nobody samples. A full buffer is reported here.
 */
PL_HIDDEN void pl_free_report(uint64_t id, uintptr_t addr, uint32_t kind)
{
	if (pl_g.batch)
		return pl_batch_free(id, addr, kind);
	if (pl_g.test_fd >= 0 && !pl_pending_trylock()) {
		/* test log: busy buffer, reported alone (pl_signal.c checks this path) */
		pl_test_log(MEMPROF_PRELOAD_REC_FREE, kind, addr, 0, 0, 0);
		if (id)
			memprof_preload_free_hook(id, addr, kind);
		return;
	} else if (pl_g.test_fd >= 0) {
		/* written with the buffer held, so that a test can interrupt a holder */
		pl_test_log(MEMPROF_PRELOAD_REC_FREE, kind, addr, 0, 0, 0);
		pl_pending_unlock();
	}
	if (!id)
		return;		/* sampled for an in-process profile: not the profiler's */
	if (!pl_batching() || !pl_pending_trylock()) {
		memprof_preload_free_hook(id, addr, kind);
		return;
	}
	pl_pending.q.free_ids[pl_pending.q.nfree++] = id;
	stat_add(MEMPROF_PRELOAD_STAT_FREES_QUEUED, 1);
	if (pl_pending.q.nfree == MEMPROF_PRELOAD_FREE_BATCH)
		pl_pending_send();
	else
		pl_pending_unlock();
	pl_flush_if_exited();
}

/* ---- deferred mode (MEMPROF_BATCH) ----------------------------------------------------
 *
 * Walked samples wait in pl_pending.q.allocs, frees in pl_pending.q.free_ids, both under the
 * lock, so one memprof:flush reports several samples; the profiler emits the allocs before the
 * frees. A free never overtakes its alloc: every free of a sampled block goes through the
 * queue (waiting for another thread's hold; a signal handler that interrupted its own thread's
 * hold leaves the id in late[], moved into the queue before the lock is let go), and an alloc
 * reported at once takes the pending frees only when no alloc is queued.
 */
static uint64_t pl_clock_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);	/* vDSO: no system call */
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* When a sample is queued: CLOCK_MONOTONIC, the trace's clock (~20 ns here). */
static uint64_t pl_now_ns(void)
{
	return pl_clock_ns(CLOCK_MONOTONIC);
}

/*
 * For the age check of a free only: CLOCK_MONOTONIC's last tick (~3 ns; it lags by up to a
 * tick, 1-4 ms, so the queue may wait that much longer than MEMPROF_PRELOAD_BATCH_AGE_NS).
 */
static uint64_t pl_coarse_ns(void)
{
	return pl_clock_ns(CLOCK_MONOTONIC_COARSE);
}

/* Queue locked: report it (allocs, then frees) and empty it. */
static void pl_batch_send(void)
{
	struct memprof_preload_queue *q = &pl_pending.q;

	if (!q->nalloc && !q->nfree)
		return;
	memprof_preload_flush_hook(q);
	q->nalloc = 0;
	q->bytes = 0;
	q->nfree = 0;
}

/* Queue locked: append a freed id; full ids go out at once. */
static void pl_batch_add_free(uint64_t id)
{
	struct memprof_preload_queue *q = &pl_pending.q;

	q->free_ids[q->nfree++] = id;
	stat_add(MEMPROF_PRELOAD_STAT_FREES_QUEUED, 1);
	if (q->nfree >= MEMPROF_PRELOAD_FREE_BATCH)
		pl_batch_send();
}

/*
 * Lock the queue. @wait: spin (then yield) while another thread holds it. False when it is
 * busy and not waited for, or held by this very thread (a signal handler interrupted it).
 */
PL_HIDDEN bool pl_batch_lock(bool wait)
{
	struct pl_thread *self = &pl_tls;

	for (unsigned int tries = 0; !pl_pending_trylock_as((uintptr_t)self); tries++) {
		if (!wait || __atomic_load_n(&pl_pending.busy, __ATOMIC_RELAXED) == (uintptr_t)self)
			return false;
		if (tries >= 64)
			sched_yield();
		else
			__builtin_ia32_pause();
	}
	return true;
}

/* Move the ids a signal handler left in late[] into the queue (locked). */
static void pl_batch_drain_late(struct pl_thread *t)
{
	uint32_t n;

	while ((n = __atomic_load_n(&t->nlate, __ATOMIC_RELAXED)) != 0) {
		uint64_t id = t->late[n - 1];

		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		if (__atomic_compare_exchange_n(&t->nlate, &n, n - 1, false, __ATOMIC_RELAXED,
						__ATOMIC_RELAXED))
			pl_batch_add_free(id);
	}
}

PL_HIDDEN void pl_batch_unlock(void)
{
	struct pl_thread *t = &pl_tls;

	for (;;) {
		pl_batch_drain_late(t);
		pl_pending_release();
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		/* a handler struck between the drain and the store */
		if (!__atomic_load_n(&t->nlate, __ATOMIC_RELAXED) || !pl_batch_lock(false))
			return;
	}
}

static bool pl_batch_too_old(uint64_t now)
{
	const struct memprof_preload_queue *q = &pl_pending.q;

	/* the first entry's first field: its time (@now may be a coarse clock, behind it) */
	return q->nalloc && now > q->allocs[0] && now - q->allocs[0] > MEMPROF_PRELOAD_BATCH_AGE_NS;
}

static void pl_batch_free(uint64_t id, uintptr_t addr, uint32_t kind)
{
	struct pl_thread *t = &pl_tls;

	if (pl_g.test_fd >= 0)
		pl_test_log(MEMPROF_PRELOAD_REC_FREE, kind, addr, 0, 0, 0);
	if (!id)
		return;		/* sampled for an in-process profile: not the profiler's */
	if (!pl_batch_lock(true)) {
		/* A signal handler interrupted this thread's hold: its alloc may be queued. */
		uint32_t n = t->nlate;

		if (n < sizeof(t->late) / sizeof(t->late[0])) {
			t->late[n] = id;
			__atomic_signal_fence(__ATOMIC_SEQ_CST);
			__atomic_store_n(&t->nlate, n + 1, __ATOMIC_RELAXED);
		} else {
			memprof_preload_free_hook(id, addr, kind);
		}
		return;
	}
	pl_batch_add_free(id);
	if (!pl_batching() || (pl_pending.q.nalloc && pl_batch_too_old(pl_coarse_ns())))
		pl_batch_send();
	pl_batch_unlock();
	pl_flush_if_exited();
}

/* Queue a walked sample (@rec: nfree 0). False: report it at once (busy queue, exiting). */
PL_HIDDEN bool pl_batch_alloc(const struct memprof_preload_alloc_rec *rec)
{
	struct memprof_preload_queue *q = &pl_pending.q;
	struct memprof_preload_queued_alloc *e;
	uint64_t now;

	if (__atomic_load_n(&pl_g.exiting, __ATOMIC_RELAXED) || !pl_batch_lock(false))
		return false;
	now = pl_now_ns();
	/* packed: each record ends after its last frame (room: MAX_BATCH full-size ones, and
	 * nalloc < pl_g.batch <= MAX_BATCH: a full queue was sent) */
	e = (struct memprof_preload_queued_alloc *)((char *)q->allocs + q->bytes);
	e->time_ns = now;
	/* the alloc record's head, the same fields in the same order (asserted above) */
	memcpy(&e->addr, rec, MP_PL_REC_FREE_IDS);
	memcpy(e->frames, rec->frames, (size_t)rec->nframes * sizeof(e->frames[0]));
	q->bytes += MEMPROF_PRELOAD_QUEUED_SIZE(rec->nframes);
	q->nalloc++;
	stat_add(MEMPROF_PRELOAD_STAT_DEFERRED, 1);
	pl_alloc_account(rec);
	if (q->nalloc >= pl_g.batch || pl_batch_too_old(now))
		pl_batch_send();
	pl_batch_unlock();
	pl_flush_if_exited();
	return true;
}
