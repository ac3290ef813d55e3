// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libmemprof-preload: in-process sampling of allocated words, traps only on samples.
 * The ABI (USDT probes, semaphores, config block, environment) is documented in
 * <memprof/preload.h>; the statistics are those of docs/sampling.md: every word, including
 * one header word per block, is a sample point with probability λ.
 *
 * Per thread we keep c = words left up to and including the next sample point, in
 * initial-exec TLS. An allocation of w = ceil(size/8) + 1 words does "c -= w" with one
 * read-modify-write instruction (atomic with respect to signal handlers on the same thread)
 * and goes to the slow path only when c <= 0: then the block holds a sample point and
 * r = -c words of it follow that point. The slow path draws n = 1 + Binomial(r, λ) and the
 * next countdown, records the address and the block's id for frees, walks the stack, and
 * queues the sample for the next memprof:flush (deferred reports, the default) or calls the
 * noinline hook with the memprof:alloc USDT probe site. Before any of that, each allocation
 * reads a gate (pl_gate: memprof:alloc's USDT semaphore, which the kernel raises while a
 * probe is attached, and our own bits for MEMPROF_ARM and in-process profiles): while it is 0
 * the call goes straight to the allocator and the countdown is never touched. While the gate
 * is open but sampling is not armed (a stopped profile), the countdown is a poll interval and
 * the slow path only re-checks arming. Frees look at the filter of sampled addresses only once
 * something was ever sampled.
 *
 * Every call forwards to the allocator the process would have used without us: the next
 * definition in the symbol search order (pl_next.c), glibc's in most programs, libjemalloc's
 * in one linked with -ljemalloc. So the blocks are that allocator's own: malloc_usable_size,
 * malloc_trim, sdallocx, tc_free, mi_free (which we do not interpose) keep working on them.
 * The forwarding is a tail jump through a resolved pointer, the same one memory-indirect jmp
 * the -fno-plt GOT call to __libc_malloc was; glibc's own internal calls (memalign ->
 * _int_memalign) never come back through us, so nothing is counted twice.
 */
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/param.h>
#include <sys/random.h>
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
#include "pl_api.h"
#include "pl_core.h"
#include "pl_next.h"

#define PL_EXPORT	__attribute__((visibility("default")))
#define likely(x)	__builtin_expect(!!(x), 1)
#define unlikely(x)	__builtin_expect(!!(x), 0)

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

/* ---- state ---------------------------------------------------------------------------- */

/* The countdown while the thread is inside the slow path: nested calls never expire it. */
#define PL_PARKED	(PL_GEOM_MAX * 2)
/* Pending frees ride along with an immediate alloc report once there are this many. */
#define PL_RIDE_MIN	8

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

static __thread struct pl_thread pl_tls __attribute__((tls_model("initial-exec")));

static struct {
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
} pl_g = { .env_rate = MEMPROF_PRELOAD_DEFAULT_RATE, .test_fd = -1,
	    .batch = MEMPROF_PRELOAD_MAX_BATCH };

/*
 * Ids of sampled blocks freed and not reported yet (q.free_ids), and in deferred mode the
 * sampled blocks not reported yet (q.allocs). The lock is only ever tried: a thread (or a
 * signal handler interrupting the holder) that finds it taken reports its free at once; in
 * deferred mode a free waits for another holder instead, or, when the holder is its own
 * thread, leaves its id in the thread's late[] (see pl_batch_free()).
 */
static struct memprof_preload_pending pl_pending;	/* busy: 0 free; 1 held; deferred mode: the
							 * holder's struct pl_thread */

static void pl_pending_flush(bool wait);
static bool pl_batch_lock(bool wait);
static void pl_batch_send(void);
static void pl_batch_unlock(void);
static void pl_batch_free(uint64_t id, uintptr_t addr, uint32_t kind);
static bool pl_release(void *p, uint32_t kind);

/* The library's own image: return addresses in it are dropped from the top of a walk. */
extern const char __ehdr_start[] __attribute__((visibility("hidden")));
extern const char _end[] __attribute__((visibility("hidden")));
extern void *__libc_stack_end;

static struct pl_table pl_table;

PL_EXPORT struct memprof_preload_config memprof_preload_config = {
	.magic = MEMPROF_PRELOAD_MAGIC,
	.version = MEMPROF_PRELOAD_VERSION,
	.size = sizeof(struct memprof_preload_config),
};

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
PL_HIDDEN union pl_gate pl_gate __attribute__((section(".probes"), used, aligned(4)));
_Static_assert(offsetof(union pl_gate, sem) == 0, "the semaphore is the gate's first half");
__asm__(".globl memprof_alloc_semaphore\n\t.hidden memprof_alloc_semaphore\n\t"
	".set memprof_alloc_semaphore, pl_gate");
extern unsigned short memprof_alloc_semaphore;	/* for sdt.h's note */

/* USDT semaphores of the other probes (sdt.h's convention, in .probes). */
PL_HIDDEN unsigned short memprof_free_semaphore __attribute__((section(".probes"), used));
PL_HIDDEN unsigned short memprof_free_batch_semaphore __attribute__((section(".probes"), used));
PL_HIDDEN unsigned short memprof_flush_semaphore __attribute__((section(".probes"), used));

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

static void pl_gate_set(unsigned short bit, bool on)
{
	if (on)
		__atomic_fetch_or(&pl_gate.local, bit, __ATOMIC_SEQ_CST);
	else
		__atomic_fetch_and(&pl_gate.local, (unsigned short)~bit, __ATOMIC_SEQ_CST);
}

PL_HIDDEN void pl_gate_api(bool on)
{
	pl_gate_set(PL_GATE_API, on);
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

/* ---- arming --------------------------------------------------------------------------- */

struct pl_params {
	bool armed;
	uint32_t gen;
	double rate;
};

static void pl_params_read(struct pl_params *p)
{
	struct memprof_preload_config *cfg = &memprof_preload_config;

	p->armed = false;
	if (!__atomic_load_n(&pl_g.ready, __ATOMIC_ACQUIRE))
		return;
	/* An in-process profile (memprof_start) wins: memprofd cannot arm while one samples. */
	if (pl_api_params(&p->gen, &p->rate)) {
		p->armed = true;
		return;
	}
	if (!pl_gate_probe_or_force())
		return;
	/* Seqlock read of what the profiler wrote with process_vm_writev. */
	for (int tries = 0; tries < 4; tries++) {
		uint32_t g1 = __atomic_load_n(&cfg->generation, __ATOMIC_ACQUIRE), g2, flags;
		double rate;

		if (g1 == 0) {
			p->armed = true;
			p->gen = 0;
			p->rate = pl_g.env_rate;
			return;
		}
		__atomic_load(&cfg->rate, &rate, __ATOMIC_RELAXED);
		flags = __atomic_load_n(&cfg->flags, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		g2 = __atomic_load_n(&cfg->generation, __ATOMIC_RELAXED);
		if (g1 != g2)
			continue;
		p->armed = (flags & MEMPROF_PRELOAD_F_SAMPLING) && rate > 0 && rate <= 1;
		p->gen = g1;
		p->rate = rate;
		return;
	}
}

static void pl_thread_seed(struct pl_thread *t)
{
	uint64_t idx = __atomic_fetch_add(&pl_g.threads, 1, __ATOMIC_RELAXED);
	uint64_t x = pl_g.seed_base ^ (idx * 0xd1342543de82ef95ULL);

	pl_rng_seed(&t->rng, pl_splitmix64(&x));
	t->seeded = 1;
}

/*
 * The countdown expired (c <= 0) on an allocation of @w words. Returns r >= 0, the words of the
 * block after its first sample point, when the block is sampled: pl_cross_end() must follow
 * once the allocator returned. Returns -1 otherwise (the countdown is already re-armed or
 * re-parked).
 */
static int64_t pl_cross_begin(int64_t w)
{
	struct pl_thread *t = &pl_tls;
	struct pl_params p;
	int64_t c, next;
	int saved = errno;

	if (unlikely(t->in_slow)) {
		/* Unreachable while the countdown is parked; kept as a cheap guard. */
		stat_add(MEMPROF_PRELOAD_STAT_REENTERED, 1);
		return -1;
	}
	t->in_slow = 1;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	c = __atomic_exchange_n(&t->countdown, PL_PARKED, __ATOMIC_RELAXED);
	pl_next_ensure();

	pl_params_read(&p);
	/* Disarmed or re-armed: what is pending goes out before the profiler moves on. */
	if (t->state == PL_T_ARMED && (!p.armed || t->gen != p.gen))
		pl_pending_flush(false);
	if (!p.armed) {
		t->state = PL_T_DISARMED;
		next = MEMPROF_PRELOAD_POLL_WORDS;
	} else if (t->state != PL_T_ARMED || t->gen != p.gen) {
		/*
		 * Newly armed or new rate: the pending point (drawn at another rate, or a poll)
		 * is not a sample. A fresh geometric starts at this block's first word, so the
		 * block that arms a thread (its first, often a large buffer) is sampled as any
		 * other would be: by memorylessness, nothing before it matters.
		 */
		if (!t->seeded)
			pl_thread_seed(t);
		if (t->state != PL_T_ARMED)
			stat_add(MEMPROF_PRELOAD_STAT_ARMINGS, 1);
		t->log1m = log1p(-p.rate);
		t->gen = p.gen;
		t->state = PL_T_ARMED;
		next = pl_draw_geom(&t->rng, t->log1m);
		if (next <= w) {
			errno = saved;
			return w - next;	/* sampled: as below */
		}
		next -= w;
	} else if (c > 0) {
		/* A signal handler's sampled call ran between our subtraction and here. */
		next = c;
	} else {
		errno = saved;
		return -c;	/* in_slow stays set, countdown parked, until pl_cross_end() */
	}
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	__atomic_store_n(&t->countdown, next, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	t->in_slow = 0;
	errno = saved;
	return -1;
}

/*
 * Complete a sampled block: its sample count, and the countdown after it. A block the
 * allocator refused has no words: draw a fresh countdown instead (memorylessness makes that
 * exact), and never loop over the words of an impossible size.
 */
static uint64_t pl_cross_end(int64_t r, bool allocated)
{
	struct pl_thread *t = &pl_tls;
	uint64_t n = 0;
	int64_t next;

	if (allocated) {
		n = pl_draw_samples(&t->rng, t->log1m, r, &next);
	} else {
		next = pl_draw_geom(&t->rng, t->log1m);
	}
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	__atomic_store_n(&t->countdown, next, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	t->in_slow = 0;
	return n;
}

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

static __attribute__((noinline, noipa)) void
memprof_preload_alloc_hook(const struct memprof_preload_alloc_rec *rec)
{
	PL_ARG(a0, "rdi", rec);

	STAP_PROBE1(memprof, alloc, a0);
	stat_add(MEMPROF_PRELOAD_STAT_ALLOC_HOOKS, 1);
	if (rec->nfree)
		stat_add(MEMPROF_PRELOAD_STAT_BATCHED_IDS, rec->nfree);
	pl_alloc_account(rec);
}

static __attribute__((noinline, noipa)) void memprof_preload_free_hook(uint64_t id,
									 uint64_t addr,
									 uint32_t kind)
{
	PL_ARG(a0, "rdi", id);
	PL_ARG(a1, "rsi", addr);
	PL_ARG(a2, "rdx", kind);

	STAP_PROBE3(memprof, free, a0, a1, a2);
	stat_add(MEMPROF_PRELOAD_STAT_FREE_HOOKS, 1);
}

static __attribute__((noinline, noipa)) void memprof_preload_free_batch_hook(const uint64_t *ids,
									       uint32_t count)
{
	PL_ARG(a0, "rdi", ids);
	PL_ARG(a1, "rsi", count);

	STAP_PROBE2(memprof, free_batch, a0, a1);
	stat_add(MEMPROF_PRELOAD_STAT_BATCH_HOOKS, 1);
	stat_add(MEMPROF_PRELOAD_STAT_BATCHED_IDS, count);
}

/* Deferred mode: the queue, locked by the caller. */
static __attribute__((noinline, noipa)) void
memprof_preload_flush_hook(const struct memprof_preload_queue *q)
{
	PL_ARG(a0, "rdi", q);

	STAP_PROBE1(memprof, flush, a0);
	stat_add(MEMPROF_PRELOAD_STAT_BATCH_HOOKS, 1);
	stat_add(MEMPROF_PRELOAD_STAT_BATCHED_IDS, q->nfree);
}

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
static uint32_t pl_pending_take(uint64_t *ids)
{
	uint32_t n = pl_pending.q.nfree;

	memcpy(ids, pl_pending.q.free_ids, n * sizeof(*ids));
	pl_pending.q.nfree = 0;
	return n;
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
static void pl_pending_flush(bool wait)
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
static void pl_free_report(uint64_t id, uintptr_t addr, uint32_t kind)
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
static bool pl_batch_lock(bool wait)
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

static void pl_batch_unlock(void)
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
static bool pl_batch_alloc(const struct memprof_preload_alloc_rec *rec)
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

/* ---- frame-pointer walk --------------------------------------------------------------- */

#define PL_STACK_MAX	(16u << 20)	/* deeper stacks are walked by the profiler */
#define PL_MAX_SKIP	16		/* as the profiler's: library frames dropped, ip included */

#define PL_PAGE		4096u	/* protections are per page: at least this size */

/*
 * The highest page in [lo, hi) that is not readable, or 0. Each page is probed with
 * rt_sigprocmask(): the kernel copies the new mask from the page (EFAULT if it cannot) before
 * it rejects the invalid "how" (EINVAL), so nothing changes. Not process_vm_readv(): seccomp
 * filters kill a process for it (systemd's SystemCallFilter=@system-service leaves it out),
 * and no filter lets a program run without rt_sigprocmask().
 */
static uintptr_t pl_unreadable(uintptr_t lo, uintptr_t hi)
{
	uintptr_t page = (hi - 1) & ~(uintptr_t)(PL_PAGE - 1);	/* lo: a page, below hi */

	for (;;) {
		long r = syscall(SYS_rt_sigprocmask, ~0, (void *)page, NULL, (size_t)8);

		if (r == 0 || errno != EINVAL)
			return page;
		if (page <= lo)
			return 0;
		page -= PL_PAGE;
	}
}

/*
 * The frame-pointer walk the profiler's bpf_get_stack() would make from the alloc probe,
 * library frames dropped from the top (<memprof/preload.h>), into @frames. Reads only this
 * thread's stack between the current frame and its top: __libc_stack_end for the main thread,
 * the thread descriptor (glibc places it at the top of every thread's stack block) for the
 * others; that range is checked readable once per thread, and again when the stack grows
 * below what was checked. Returns the frames, or -1 when the stack cannot be bounded.
 */
static __attribute__((noinline)) int32_t pl_walk(uint64_t *frames)
{
	struct pl_thread *t = &pl_tls;
	pthread_t self = pthread_self();
	uintptr_t fp = (uintptr_t)__builtin_frame_address(0), sp = fp, hi;
	uintptr_t lib_lo = (uintptr_t)__ehdr_start, lib_hi = (uintptr_t)_end;
	uint32_t used = 1, n = 0;	/* the probe's ip is the profiler's first entry */
	bool top = true;

	hi = self == pl_g.main_thread ? (uintptr_t)__libc_stack_end : (uintptr_t)self;
	if (sp >= hi || hi - sp > PL_STACK_MAX)
		return -1;
	/*
	 * A signal handler may walk in the middle of this: stk_lo and stk_bad are reset before
	 * stk_hi says they belong to @hi, and stk_lo only ever takes checked values.
	 */
	if (t->stk_hi != hi) {	/* first walk of this thread (or a new stack top) */
		t->stk_lo = hi;
		t->stk_bad = 0;
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		t->stk_hi = hi;
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
	}
	if (sp < t->stk_lo) {	/* check what was not checked yet, once */
		uintptr_t lo = sp & ~(uintptr_t)(PL_PAGE - 1), bad;

		if (lo <= t->stk_bad)	/* [sp, hi) holds a page known not readable */
			return -1;
		bad = pl_unreadable(lo, t->stk_lo);
		if (bad) {
			t->stk_bad = bad;	/* e.g. a signal or coroutine stack below */
			return -1;
		}
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		t->stk_lo = lo;
	}
	while (used < MEMPROF_PRELOAD_MAX_FRAMES) {
		const uintptr_t *f = (const uintptr_t *)fp;
		uintptr_t next, ret;

		if (fp < sp || fp > hi - 2 * sizeof(uintptr_t) || (fp & 7))
			break;
		next = f[0];
		ret = f[1];
		used++;
		if (top && used <= PL_MAX_SKIP && ret >= lib_lo && ret < lib_hi)
			; /* still inside the library */
		else {
			top = false;
			frames[n++] = ret;
		}
		if (next <= fp)
			break;
		fp = next;
	}
	return (int32_t)n;
}

/* After the allocator returned on a sampled path. */
static void pl_cross_finish(int64_t r, void *p, size_t size, uint32_t kind)
{
	enum pl_api_track track = PL_API_TRACKED;
	struct memprof_preload_alloc_rec rec;
	bool api = pl_tls.gen & PL_API_GEN_BIT;
	int saved = errno;
	uint64_t n, id = 0;

	if (r < 0)
		return;
	/* the draws take long enough to hide most of the bucket's miss (~25 ns a sample) */
	if (p)
		pl_table_prefetch(&pl_table, (uintptr_t)p);
	n = pl_cross_end(r, p != NULL);
	if (!p)
		return;
	/* Samples drawn for an in-process profile go to its tracker only, not to the probe. */
	if (!api)
		id = __atomic_add_fetch(&pl_g.next_id, 1, __ATOMIC_RELAXED);
	if (__atomic_fetch_add(&memprof_preload_config.stats[MEMPROF_PRELOAD_STAT_LIVE], 1,
			       __ATOMIC_RELAXED) >= MEMPROF_PRELOAD_MAX_LIVE) {
		stat_add(MEMPROF_PRELOAD_STAT_LIVE, -1);
		stat_add(MEMPROF_PRELOAD_STAT_TABLE_FULL, 1);
		track = PL_API_UNTRACKED;
	} else {
		enum pl_insert_result res = pl_table_insert(&pl_table, (uintptr_t)p, id);

		if (res == PL_ALREADY) {
			/*
			 * The block the table holds here ended unseen (munmap of more than it,
			 * MAP_FIXED over it, a free we do not interpose): it is freed now, its
			 * id reported, so this block can be tracked under its own id.
			 */
			stat_add(MEMPROF_PRELOAD_STAT_STALE, 1);
			pl_release(p, kind == MEMPROF_PRELOAD_MMAP ? MEMPROF_PRELOAD_MUNMAP :
								     MEMPROF_PRELOAD_FREE);
			res = pl_table_insert(&pl_table, (uintptr_t)p, id);
		}
		switch (res) {
		case PL_INSERTED:
			break;
		case PL_ALREADY:	/* inserted again meanwhile: cannot be */
		case PL_FULL:
			stat_add(MEMPROF_PRELOAD_STAT_LIVE, -1);
			stat_add(MEMPROF_PRELOAD_STAT_TABLE_FULL, 1);
			track = PL_API_UNTRACKED;
			break;
		}
	}
	if (api) {
		pl_api_alloc(pl_tls.gen, p, size, n, kind, track);
		errno = saved;
		return;
	}
	rec.addr = (uintptr_t)p;
	rec.size = size;
	rec.nsamples = n;
	rec.id = id;
	rec.kind = kind;
	rec.generation = pl_tls.gen;
	rec.nfree = 0;
	rec.nframes = pl_g.no_walk ? -1 : pl_walk(rec.frames);
	if (pl_g.batch) {
		if (rec.nframes >= 0 && pl_batch_alloc(&rec)) {
			errno = saved;
			return;
		}
		/* At once: the pending frees ride along if none can name a queued alloc. */
		if (__atomic_load_n(&pl_pending.q.nfree, __ATOMIC_RELAXED) &&
		    pl_batch_lock(false)) {
			if (!pl_pending.q.nalloc)
				rec.nfree = pl_pending_take(rec.free_ids);
			pl_batch_unlock();
		}
	} else {
		/*
		 * The pending frees ride along, several at a time: each batch is a ring record
		 * of its own in BPF (~0.1 us), so a lone free waits for a few more (PL_RIDE_MIN).
		 */
		if (__atomic_load_n(&pl_pending.q.nfree, __ATOMIC_RELAXED) >= PL_RIDE_MIN &&
		    pl_pending_trylock()) {
			rec.nfree = pl_pending_take(rec.free_ids);
			pl_pending_unlock();
		}
	}
	if (rec.nframes < 0)
		stat_add(MEMPROF_PRELOAD_STAT_UNWALKED, 1);
	memprof_preload_alloc_hook(&rec);
	errno = saved;
}

/* A free whose address passed the filter: report it if it is really a sampled block. */
static bool pl_release(void *p, uint32_t kind)
{
	uint64_t id;
	int saved;

	if (!pl_table_remove(&pl_table, (uintptr_t)p, &id))
		return false;
	saved = errno;
	stat_add(MEMPROF_PRELOAD_STAT_LIVE, -1);
	pl_free_report(id, (uintptr_t)p, kind);
	if (__atomic_load_n(&pl_api_live, __ATOMIC_ACQUIRE))
		pl_api_free((uintptr_t)p);
	errno = saved;
	return true;
}

/* ---- for pl_api.c: callbacks run with this thread's sampling parked ------------------- */

PL_HIDDEN int64_t pl_sampling_suspend(void)
{
	int64_t c;

	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	c = __atomic_exchange_n(&pl_tls.countdown, PL_PARKED, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	return c;
}

PL_HIDDEN void pl_sampling_resume(int64_t saved)
{
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	__atomic_store_n(&pl_tls.countdown, saved, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
}

PL_HIDDEN void pl_sampling_kick(void)
{
	int64_t c = __atomic_load_n(&pl_tls.countdown, __ATOMIC_RELAXED);

	/* Parked (in the slow path or a callback): the thread re-reads when it unparks. */
	if (c < PL_GEOM_MAX)
		__atomic_compare_exchange_n(&pl_tls.countdown, &c, 0, false, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED);
}

/* ---- malloc family -------------------------------------------------------------------- */

static __attribute__((noinline)) void *pl_malloc_slow(size_t size, uint32_t kind)
{
	int64_t r = pl_cross_begin(pl_words(size));
	void *p = pl_next.malloc(size);

	pl_cross_finish(r, p, size, kind);
	return p;
}

/*
 * malloc and free, the hottest, spell out their idle path: the gate (the table) closed, one
 * tail jump of its own. The armed path is laid out straight (no taken branch before its own
 * tail jump); the barrier and -fno-crossjumping (preload.mk) keep GCC from merging the two
 * tail jumps into one, which would put a taken branch back on one of the paths.
 */
PL_EXPORT void *malloc(size_t size)
{
	if (unlikely(!pl_gate_open()))
		return pl_next.malloc(size);
	if (unlikely(pl_countdown_sub(pl_words(size))))
		return pl_malloc_slow(size, MEMPROF_PRELOAD_MALLOC);
	__asm__ volatile("" ::: "memory");
	return pl_next.malloc(size);
}

static __attribute__((noinline)) void pl_free_slow(void *p, uint32_t kind)
{
	pl_release(p, kind);
	pl_next.free(p);
}

PL_EXPORT void free(void *p)
{
	if (unlikely(!pl_table_used(&pl_table)))
		return pl_next.free(p);
	if (unlikely(pl_filter_hit(&pl_table, p)))
		return pl_free_slow(p, MEMPROF_PRELOAD_FREE);
	__asm__ volatile("" ::: "memory");
	pl_next.free(p);
}

static __attribute__((noinline)) void *pl_calloc_slow(size_t n, size_t size, size_t total)
{
	int64_t r = pl_cross_begin(pl_words(total));
	void *p = pl_next.calloc(n, size);

	pl_cross_finish(r, p, total, MEMPROF_PRELOAD_CALLOC);
	return p;
}

PL_EXPORT void *calloc(size_t n, size_t size)
{
	size_t total;

	if (unlikely(__builtin_mul_overflow(n, size, &total)))
		return pl_next.calloc(n, size);	/* fails with ENOMEM, as the allocator does */
	if (unlikely(pl_sample_due(pl_words(total))))
		return pl_calloc_slow(n, size, total);
	return pl_next.calloc(n, size);
}

static __attribute__((noinline)) void *pl_realloc_slow(void *old, size_t size, bool expired,
						       uint32_t kind)
{
	int64_t r = expired ? pl_cross_begin(pl_words(size)) : -1;
	bool was_sampled = old && pl_table_maybe(&pl_table, old) && pl_release(old, kind);
	void *p;

	/*
	 * The free of a sampled block is queued (or reported) by id before the allocator can hand
	 * the address out again. If the realloc then fails, the block lives on untracked
	 * (counted).
	 */
	p = pl_next.realloc(old, size);
	if (!p && size && was_sampled)
		stat_add(MEMPROF_PRELOAD_STAT_REALLOC_LOST, 1);
	pl_cross_finish(r, p, size, kind);
	return p;
}

PL_EXPORT void *realloc(void *old, size_t size)
{
	bool expired = pl_sample_due(pl_words(size));

	if (unlikely(expired || pl_table_maybe(&pl_table, old)))
		return pl_realloc_slow(old, size, expired, MEMPROF_PRELOAD_REALLOC);
	return pl_next.realloc(old, size);
}

PL_EXPORT void *reallocarray(void *old, size_t n, size_t size)
{
	size_t total;
	bool expired;

	if (__builtin_mul_overflow(n, size, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	expired = pl_sample_due(pl_words(total));
	if (unlikely(expired || pl_table_maybe(&pl_table, old)))
		return pl_realloc_slow(old, total, expired, MEMPROF_PRELOAD_REALLOCARRAY);
	return pl_next.realloc(old, total);
}

/* Each forwards to the next definition of the same function: its contract is the host's. */
static __attribute__((noinline)) void *pl_memalign_slow(size_t alignment, size_t size,
							uint32_t kind)
{
	int64_t r = pl_cross_begin(pl_words(size));
	void *p;

	switch (kind) {
	case MEMPROF_PRELOAD_VALLOC:
		p = pl_next.valloc(size);
		break;
	case MEMPROF_PRELOAD_PVALLOC:
		p = pl_next.pvalloc(size);
		break;
	case MEMPROF_PRELOAD_ALIGNED_ALLOC:
		p = pl_next.aligned_alloc(alignment, size);
		break;
	default:
		p = pl_next.memalign(alignment, size);
		break;
	}
	pl_cross_finish(r, p, size, kind);
	return p;
}

static __attribute__((noinline)) int pl_posix_memalign_slow(void **memptr, size_t alignment,
							    size_t size)
{
	int64_t r = pl_cross_begin(pl_words(size));
	void *p = NULL;
	int err = pl_next.posix_memalign(&p, alignment, size);

	pl_cross_finish(r, err ? NULL : p, size, MEMPROF_PRELOAD_POSIX_MEMALIGN);
	if (!err)
		*memptr = p;
	return err;
}

PL_EXPORT int posix_memalign(void **memptr, size_t alignment, size_t size)
{
	/* POSIX: a power-of-two multiple of sizeof(void *), else EINVAL (nothing sampled). */
	if (alignment % sizeof(void *) != 0 || !powerof2(alignment / sizeof(void *)) ||
	    alignment == 0)
		return EINVAL;
	if (unlikely(pl_sample_due(pl_words(size))))
		return pl_posix_memalign_slow(memptr, alignment, size);
	return pl_next.posix_memalign(memptr, alignment, size);
}

PL_EXPORT void *aligned_alloc(size_t alignment, size_t size)
{
	if (unlikely(pl_sample_due(pl_words(size))))
		return pl_memalign_slow(alignment, size, MEMPROF_PRELOAD_ALIGNED_ALLOC);
	return pl_next.aligned_alloc(alignment, size);
}

PL_EXPORT void *memalign(size_t alignment, size_t size)
{
	if (unlikely(pl_sample_due(pl_words(size))))
		return pl_memalign_slow(alignment, size, MEMPROF_PRELOAD_MEMALIGN);
	return pl_next.memalign(alignment, size);
}

PL_EXPORT void *valloc(size_t size)
{
	if (unlikely(pl_sample_due(pl_words(size))))
		return pl_memalign_slow(0, size, MEMPROF_PRELOAD_VALLOC);
	return pl_next.valloc(size);
}

PL_EXPORT void *pvalloc(size_t size)
{
	/* the block is whole pages: its size rounded up to them, at least one (as uprobe mode) */
	size_t pages = size > SIZE_MAX - PL_PAGE ? size :
		       size ? (size + PL_PAGE - 1) & ~(size_t)(PL_PAGE - 1) : PL_PAGE;

	if (unlikely(pl_sample_due(pl_words(pages))))
		return pl_memalign_slow(0, pages, MEMPROF_PRELOAD_PVALLOC);
	return pl_next.pvalloc(size);
}

/* ---- anonymous mmap ------------------------------------------------------------------- */

/* glibc's __mmap is GLIBC_PRIVATE; the syscall is what it does on x86-64 anyway. */
static void *pl_sys_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

static __attribute__((noinline)) void *pl_mmap_slow(void *addr, size_t len, int prot, int flags,
						    int fd, off_t off)
{
	int64_t r = pl_cross_begin(pl_words(len));
	void *p = pl_sys_mmap(addr, len, prot, flags, fd, off);

	pl_cross_finish(r, p == MAP_FAILED ? NULL : p, len, MEMPROF_PRELOAD_MMAP);
	return p;
}

/* Anonymous mappings of the program; not those a foreign allocator carves its blocks from. */
PL_EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if ((flags & MAP_ANONYMOUS) && !pl_next_from_allocator(__builtin_return_address(0)) &&
	    unlikely(pl_sample_due(pl_words(len))))
		return pl_mmap_slow(addr, len, prot, flags, fd, off);
	return pl_sys_mmap(addr, len, prot, flags, fd, off);
}

PL_EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
	__attribute__((alias("mmap")));

PL_EXPORT int munmap(void *addr, size_t len)
{
	/* Only the start of a sampled mapping is known: unmapping its middle is not seen. */
	if (unlikely(pl_table_maybe(&pl_table, addr)))
		pl_release(addr, MEMPROF_PRELOAD_MUNMAP);
	return (int)syscall(SYS_munmap, addr, len);
}

/* ---- C++ operator new / delete -------------------------------------------------------- */

/*
 * Written in C against the Itanium C++ ABI so that C programs do not load libstdc++. Only a
 * program that calls operator new has libstdc++ loaded, so the weak references below are
 * resolved whenever they are needed: the new-handler loop and std::bad_alloc.
 */
typedef void (*pl_new_handler)(void);
extern pl_new_handler _ZSt15get_new_handlerv(void) __attribute__((weak));
extern void *__cxa_allocate_exception(size_t size) __attribute__((weak));
extern void __cxa_throw(void *obj, void *tinfo, void (*dtor)(void *)) __attribute__((weak));
extern char _ZTISt9bad_alloc[] __attribute__((weak));	/* typeinfo for std::bad_alloc */
extern char _ZTVSt9bad_alloc[] __attribute__((weak));	/* vtable for std::bad_alloc */
extern void _ZNSt9bad_allocD1Ev(void *obj) __attribute__((weak));

static __attribute__((noreturn, noinline)) void pl_throw_bad_alloc(void)
{
	void **obj;

	if (!__cxa_allocate_exception || !__cxa_throw || !_ZTISt9bad_alloc || !_ZTVSt9bad_alloc)
		abort();
	obj = __cxa_allocate_exception(sizeof(void *));
	obj[0] = _ZTVSt9bad_alloc + 2 * sizeof(void *);	/* vptr: past offset-to-top, RTTI */
	__cxa_throw(obj, _ZTISt9bad_alloc, _ZNSt9bad_allocD1Ev);
	abort();
}

/* The operator new loop: retry through the new-handler; throw or return NULL without one. */
static void *pl_new_retry(size_t size, size_t alignment, bool nothrow)
{
	for (;;) {
		pl_new_handler h = _ZSt15get_new_handlerv ? _ZSt15get_new_handlerv() : NULL;
		void *p;

		if (!h) {
			if (nothrow)
				return NULL;
			pl_throw_bad_alloc();
		}
		h();	/* may throw: the frames here have unwind tables (-fexceptions) */
		p = alignment ? pl_next.memalign(alignment, size) : pl_next.malloc(size);
		if (p)
			return p;
	}
}

/* enum pl_cxx_op of an operator new variant. */
#define PL_NEW_OP(array, nothrow, aligned) \
	((enum pl_cxx_op)(PL_ZNWM + (array) + 2 * (nothrow) + 4 * (aligned)))

static const char pl_nothrow;	/* stands for std::nothrow: the operators ignore it */

typedef void *(*pl_new_fn)(size_t size);
typedef void *(*pl_new_nt_fn)(size_t size, const void *nt);
typedef void *(*pl_new_al_fn)(size_t size, size_t alignment);
typedef void *(*pl_new_al_nt_fn)(size_t size, size_t alignment, const void *nt);

/* The next allocator's own operator new (jemalloc's, tcmalloc's, ...): its contract. */
static inline void *pl_call_new(void *fn, size_t size, size_t alignment, bool nothrow)
{
	if (alignment)
		return nothrow ? ((pl_new_al_nt_fn)fn)(size, alignment, &pl_nothrow) :
				 ((pl_new_al_fn)fn)(size, alignment);
	return nothrow ? ((pl_new_nt_fn)fn)(size, &pl_nothrow) : ((pl_new_fn)fn)(size);
}

static __attribute__((noinline)) void *pl_new_slow(size_t size, size_t alignment, bool nothrow,
						   bool array)
{
	int64_t r = pl_cross_begin(pl_words(size));
	/* The nothrow variant inside the sampling window: an exception must not leave it open. */
	void *fn = __atomic_load_n(&pl_next.cxx[PL_NEW_OP(array, true, alignment != 0)],
				   __ATOMIC_RELAXED);
	void *p;

	if (fn)
		p = pl_call_new(fn, size, alignment, true);
	else
		p = alignment ? pl_next.memalign(alignment, size) : pl_next.malloc(size);
	pl_cross_finish(r, p, size, MEMPROF_PRELOAD_NEW);
	if (p)
		return p;
	/* Not sampled when the first attempt fails: the handler path is rare. */
	fn = __atomic_load_n(&pl_next.cxx[PL_NEW_OP(array, nothrow, alignment != 0)],
			     __ATOMIC_RELAXED);
	if (fn)
		return pl_call_new(fn, size, alignment, nothrow);
	return pl_new_retry(size, alignment, nothrow);
}

static inline void *pl_new(size_t size, bool nothrow, bool array)
{
	void *fn, *p;

	if (!size)
		size = 1;
	if (unlikely(pl_sample_due(pl_words(size))))
		return pl_new_slow(size, 0, nothrow, array);
	pl_next_ensure();	/* no slow path may have run yet: the gate skips it while closed */
	fn = __atomic_load_n(&pl_next.cxx[PL_NEW_OP(array, nothrow, false)], __ATOMIC_RELAXED);
	if (fn)
		return pl_call_new(fn, size, 0, nothrow);
	p = pl_next.malloc(size);
	return likely(p != NULL) ? p : pl_new_retry(size, 0, nothrow);
}

static inline void *pl_new_aligned(size_t size, size_t alignment, bool nothrow, bool array)
{
	void *fn, *p;

	if (!powerof2(alignment) || !alignment) {
		if (nothrow)
			return NULL;
		pl_throw_bad_alloc();
	}
	if (!size)
		size = 1;
	if (unlikely(pl_sample_due(pl_words(size))))
		return pl_new_slow(size, alignment, nothrow, array);
	pl_next_ensure();
	fn = __atomic_load_n(&pl_next.cxx[PL_NEW_OP(array, nothrow, true)], __ATOMIC_RELAXED);
	if (fn)
		return pl_call_new(fn, size, alignment, nothrow);
	p = pl_next.memalign(alignment, size);
	return likely(p != NULL) ? p : pl_new_retry(size, alignment, nothrow);
}

static __attribute__((noinline)) void pl_delete_slow(void *p)
{
	pl_release(p, MEMPROF_PRELOAD_DELETE);
}

typedef void (*pl_del_fn)(void *p);
typedef void (*pl_del_sz_fn)(void *p, size_t sz);		/* sized, or aligned */
typedef void (*pl_del_nt_fn)(void *p, const void *nt);
typedef void (*pl_del_sz_al_fn)(void *p, size_t sz, size_t al);
typedef void (*pl_del_al_nt_fn)(void *p, size_t al, const void *nt);

/*
 * Report a sampled block, then give it to the next allocator's operator delete of the same
 * variant (sizes and alignments passed on: jemalloc and tcmalloc use them) or to its free.
 */
static inline void pl_delete(void *p, enum pl_cxx_op op, size_t a, size_t b)
{
	void *fn;

	if (unlikely(pl_table_maybe(&pl_table, p)))
		pl_delete_slow(p);
	/* resolved: the operator new that made @p did it, before @p reached this thread */
	fn = __atomic_load_n(&pl_next.cxx[op], __ATOMIC_RELAXED);
	if (likely(!fn)) {
		pl_next.free(p);
		return;
	}
	switch (op) {
	case PL_ZDLPV_SZ:
	case PL_ZDAPV_SZ:
	case PL_ZDLPV_AL:
	case PL_ZDAPV_AL:
		((pl_del_sz_fn)fn)(p, a);
		break;
	case PL_ZDLPV_NT:
	case PL_ZDAPV_NT:
		((pl_del_nt_fn)fn)(p, &pl_nothrow);
		break;
	case PL_ZDLPV_SZ_AL:
	case PL_ZDAPV_SZ_AL:
		((pl_del_sz_al_fn)fn)(p, a, b);
		break;
	case PL_ZDLPV_AL_NT:
	case PL_ZDAPV_AL_NT:
		((pl_del_al_nt_fn)fn)(p, a, &pl_nothrow);
		break;
	default:
		((pl_del_fn)fn)(p);
		break;
	}
}

#define PL_CXX(ret, name, mangled, ...)                                                        \
	PL_EXPORT ret name(__VA_ARGS__) __asm__(mangled);                                      \
	PL_EXPORT ret name(__VA_ARGS__)

/* operator new(size_t), new[](size_t) */
PL_CXX(void *, pl_op_new, "_Znwm", size_t size) { return pl_new(size, false, false); }
PL_CXX(void *, pl_op_new_arr, "_Znam", size_t size) { return pl_new(size, false, true); }
/* nothrow */
PL_CXX(void *, pl_op_new_nt, "_ZnwmRKSt9nothrow_t", size_t size, const void *nt)
{
	return pl_new(size, true, false);
}
PL_CXX(void *, pl_op_new_arr_nt, "_ZnamRKSt9nothrow_t", size_t size, const void *nt)
{
	return pl_new(size, true, true);
}
/* aligned (std::align_val_t is a size_t enum) */
PL_CXX(void *, pl_op_new_al, "_ZnwmSt11align_val_t", size_t size, size_t al)
{
	return pl_new_aligned(size, al, false, false);
}
PL_CXX(void *, pl_op_new_arr_al, "_ZnamSt11align_val_t", size_t size, size_t al)
{
	return pl_new_aligned(size, al, false, true);
}
PL_CXX(void *, pl_op_new_al_nt, "_ZnwmSt11align_val_tRKSt9nothrow_t", size_t size, size_t al,
       const void *nt)
{
	return pl_new_aligned(size, al, true, false);
}
PL_CXX(void *, pl_op_new_arr_al_nt, "_ZnamSt11align_val_tRKSt9nothrow_t", size_t size,
       size_t al, const void *nt)
{
	return pl_new_aligned(size, al, true, true);
}

/* operator delete: plain, array, sized, nothrow, aligned, sized+aligned, aligned+nothrow */
PL_CXX(void, pl_op_del, "_ZdlPv", void *p) { pl_delete(p, PL_ZDLPV, 0, 0); }
PL_CXX(void, pl_op_del_arr, "_ZdaPv", void *p) { pl_delete(p, PL_ZDAPV, 0, 0); }
PL_CXX(void, pl_op_del_sz, "_ZdlPvm", void *p, size_t sz) { pl_delete(p, PL_ZDLPV_SZ, sz, 0); }
PL_CXX(void, pl_op_del_arr_sz, "_ZdaPvm", void *p, size_t sz)
{
	pl_delete(p, PL_ZDAPV_SZ, sz, 0);
}
PL_CXX(void, pl_op_del_nt, "_ZdlPvRKSt9nothrow_t", void *p, const void *nt)
{
	pl_delete(p, PL_ZDLPV_NT, 0, 0);
}
PL_CXX(void, pl_op_del_arr_nt, "_ZdaPvRKSt9nothrow_t", void *p, const void *nt)
{
	pl_delete(p, PL_ZDAPV_NT, 0, 0);
}
PL_CXX(void, pl_op_del_al, "_ZdlPvSt11align_val_t", void *p, size_t al)
{
	pl_delete(p, PL_ZDLPV_AL, al, 0);
}
PL_CXX(void, pl_op_del_arr_al, "_ZdaPvSt11align_val_t", void *p, size_t al)
{
	pl_delete(p, PL_ZDAPV_AL, al, 0);
}
PL_CXX(void, pl_op_del_sz_al, "_ZdlPvmSt11align_val_t", void *p, size_t sz, size_t al)
{
	pl_delete(p, PL_ZDLPV_SZ_AL, sz, al);
}
PL_CXX(void, pl_op_del_arr_sz_al, "_ZdaPvmSt11align_val_t", void *p, size_t sz, size_t al)
{
	pl_delete(p, PL_ZDAPV_SZ_AL, sz, al);
}
PL_CXX(void, pl_op_del_al_nt, "_ZdlPvSt11align_val_tRKSt9nothrow_t", void *p, size_t al,
       const void *nt)
{
	pl_delete(p, PL_ZDLPV_AL_NT, al, 0);
}
PL_CXX(void, pl_op_del_arr_al_nt, "_ZdaPvSt11align_val_tRKSt9nothrow_t", void *p, size_t al,
       const void *nt)
{
	pl_delete(p, PL_ZDAPV_AL_NT, al, 0);
}

/* ---- initialisation and fork ---------------------------------------------------------- */

/*
 * Linux 6.18 optimises a uprobe on a 5-byte nop by rewriting it into a call to a per-mm
 * trampoline page ("[uprobes-trampoline]"). fork() copies the rewritten text into the child
 * but not the trampoline, so a child that reaches a probe site before it is probed itself
 * (a child nobody follows, or one memprofd attaches to a moment later) jumps to an unmapped
 * address. The child, still single-threaded in the fork handler, puts the nop back at a site
 * whose call target is not mapped; the kernel probes it afresh if the child is attached later.
 * The sites are found once, at load, when no probe can have been hit yet: the hooks run only
 * after pl_init().
 */
#define PL_USDT_SITES 4

static uint8_t *pl_usdt_site[PL_USDT_SITES];

static const uint8_t pl_nop5[5] = { 0x0f, 0x1f, 0x44, 0x00, 0x00 };

static uint8_t *pl_find_usdt_site(void *fn)
{
	uint8_t *code = fn;

	/* The site is the nop5 near the hook's start; an armed, unhit probe shows an int3. */
	for (int i = 0; i < 32; i++)
		if ((code[i] == 0x0f || code[i] == 0xcc) && !memcmp(code + i + 1, pl_nop5 + 1, 4))
			return code + i;
	return NULL;
}

static bool pl_page_mapped(uintptr_t addr)
{
	long page = sysconf(_SC_PAGESIZE);

	return msync((void *)(addr & ~(uintptr_t)(page - 1)), 1, MS_ASYNC) == 0 || errno != ENOMEM;
}

static void pl_usdt_repair_child(void)
{
	long page = sysconf(_SC_PAGESIZE);
	int saved = errno;

	for (int i = 0; i < PL_USDT_SITES; i++) {
		uint8_t *site = pl_usdt_site[i];
		uintptr_t start, end;
		int32_t rel;

		if (!site || site[0] != 0xe8)
			continue;
		memcpy(&rel, site + 1, sizeof(rel));
		if (pl_page_mapped((uintptr_t)site + 5 + (intptr_t)rel))
			continue;
		start = (uintptr_t)site & ~(uintptr_t)(page - 1);
		end = ((uintptr_t)site + 5 + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
		if (mprotect((void *)start, end - start, PROT_READ | PROT_WRITE | PROT_EXEC))
			continue;
		memcpy(site, pl_nop5, sizeof(pl_nop5));
		mprotect((void *)start, end - start, PROT_READ | PROT_EXEC);
		stat_add(MEMPROF_PRELOAD_STAT_FORK_REPAIRS, 1);
	}
	errno = saved;
}

static void pl_atfork_child(void)
{
	struct pl_thread *t = &pl_tls;
	uint64_t x;

	/*
	 * The child must not replay the parent's random stream: mix the child's pid and the
	 * parent stream's next value into a new base, and reseed the only thread. Counters
	 * start over for the new process; the table (and LIVE) is inherited with the heap.
	 */
	pl_g.pid = (pid_t)syscall(SYS_getpid);
	x = pl_g.seed_base ^ ((uint64_t)pl_g.pid << 32) ^ (t->seeded ? pl_rng_next(&t->rng) : 0);
	pl_g.seed_base = pl_splitmix64(&x);
	pl_g.threads = 0;
	pl_thread_seed(t);
	/* The parent reports its own pending frees; the lock may have been held by a thread
	 * that does not exist here. */
	pl_pending.q.nfree = 0;
	pl_pending.q.nalloc = 0;	/* deferred mode: the parent reports its samples */
	pl_pending.q.bytes = 0;
	t->nlate = 0;
	pl_pending.busy = 0;
	if (t->state == PL_T_ARMED && !t->in_slow)
		t->countdown = pl_draw_geom(&t->rng, t->log1m);
	for (int i = 0; i < MEMPROF_PRELOAD_STAT__SLOTS; i++)
		if (i != MEMPROF_PRELOAD_STAT_LIVE)
			memprof_preload_config.stats[i] = 0;
	pl_usdt_repair_child();
}

/* Deferred mode: what is queued goes out before fork, rather than waiting in the parent. */
static void pl_atfork_prepare(void)
{
	if (pl_g.batch && pl_g.ready)
		pl_pending_flush(false);
}

static bool parse_u64(const char *s, uint64_t *v)
{
	char *end;

	errno = 0;
	*v = strtoull(s, &end, 0);
	return !errno && end != s && !*end;
}

__attribute__((constructor)) static void pl_init(void)
{
	const char *s;
	uint64_t v;
	int saved = errno;

	if ((s = getenv("MEMPROF_RATE"))) {
		char *end;
		double rate = strtod(s, &end);

		if (end != s && !*end && rate > 0 && rate <= 1)
			pl_g.env_rate = rate;
	}
	if ((s = getenv("MEMPROF_SEED")) && parse_u64(s, &v)) {
		pl_g.seed_base = v;
	} else if (getrandom(&pl_g.seed_base, sizeof(pl_g.seed_base), GRND_NONBLOCK) !=
		   sizeof(pl_g.seed_base)) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		pl_g.seed_base = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
				 ((uint64_t)getpid() << 16);
	}
	if ((s = getenv("MEMPROF_ARM")) && !strcmp(s, "1"))
		pl_gate_set(PL_GATE_FORCE, true);
	if ((s = getenv("MEMPROF_WALK")) && !strcmp(s, "0"))
		pl_g.no_walk = true;
	if ((s = getenv("MEMPROF_BATCH")) && parse_u64(s, &v) && v >= 1 &&
	    v <= MEMPROF_PRELOAD_MAX_BATCH)
		pl_g.batch = v == 1 ? 0 : (uint32_t)v;	/* 1: each sample at once */
	if ((s = getenv("MEMPROF_TEST_LOG")) && parse_u64(s, &v) && v <= INT32_MAX) {
		pl_g.test_fd = (int)v;
		pl_gate_set(PL_GATE_FORCE, true);
	}
	pl_next_resolve();	/* if no allocation did it yet */
	pl_usdt_site[0] = pl_find_usdt_site((void *)memprof_preload_alloc_hook);
	pl_usdt_site[1] = pl_find_usdt_site((void *)memprof_preload_free_hook);
	pl_usdt_site[2] = pl_find_usdt_site((void *)memprof_preload_free_batch_hook);
	pl_usdt_site[3] = pl_find_usdt_site((void *)memprof_preload_flush_hook);
	pl_g.main_thread = pthread_self();
	pl_g.pid = (pid_t)syscall(SYS_getpid);
	memprof_preload_config.pending = (uintptr_t)&pl_pending;
	pthread_atfork(pl_atfork_prepare, NULL, pl_atfork_child);
	__atomic_store_n(&pl_g.ready, true, __ATOMIC_RELEASE);
	/* Allocations made before this constructor only polled: re-evaluate at the next one. */
	__atomic_store_n(&pl_tls.countdown, 0, __ATOMIC_RELAXED);
	pl_tls.state = PL_T_NEW;
	errno = saved;
}

/* At exit: report what is pending; later frees (other destructors) are reported one by one. */
static void pl_exit_flush(void)
{
	__atomic_store_n(&pl_g.exiting, true, __ATOMIC_RELEASE);
	/* Pairs with pl_free_report(): either it sees exiting, or this sees its id. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	pl_pending_flush(true);
}

__attribute__((destructor)) static void pl_fini(void)
{
	pl_exit_flush();
}

/*
 * _exit() and _Exit() run no destructor (a fork child's usual end, or a signal handler's): the
 * queued samples and frees are reported first, or they would be lost with the process. Not in
 * a vfork child: it runs on its parent's memory, so the queue is the parent's (its pid is not
 * the one recorded, since vfork runs no atfork handler). Async-signal-safe as _exit is: a
 * handler that interrupted this thread's own hold of the queue does not wait for it.
 */
PL_EXPORT void _exit(int status)
{
	if (__atomic_load_n(&pl_g.ready, __ATOMIC_ACQUIRE) &&
	    (pid_t)syscall(SYS_getpid) == pl_g.pid)
		pl_exit_flush();
	for (;;)
		syscall(SYS_exit_group, status);
}

PL_EXPORT void _Exit(int status) __attribute__((alias("_exit")));
