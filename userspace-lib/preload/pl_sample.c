// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libmemprof-preload's sampler, entered from the interposers' slow paths when a thread's
 * countdown expires: the arming (the parameters the profiler or an in-process profile set),
 * the draws that decide whether a block is sampled and how many samples it carries, the
 * frame-pointer walk of a sampled allocation, the table of sampled addresses that frees are
 * checked against, and the parking of the countdown that pl_api.c asks for around callbacks.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pl_api.h"
#include "pl_core.h"
#include "pl_next.h"
#include "pl_state.h"

/* Pending frees ride along with an immediate alloc report once there are this many. */
#define PL_RIDE_MIN	8

PL_HIDDEN __thread struct pl_thread pl_tls __attribute__((tls_model("initial-exec")));

/* The library's own image: return addresses in it are dropped from the top of a walk. */
extern const char __ehdr_start[] __attribute__((visibility("hidden")));
extern const char _end[] __attribute__((visibility("hidden")));
extern void *__libc_stack_end;

PL_HIDDEN struct pl_table pl_table;

PL_HIDDEN void pl_gate_api(bool on)
{
	pl_gate_set(PL_GATE_API, on);
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

PL_HIDDEN void pl_thread_seed(struct pl_thread *t)
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
PL_HIDDEN int64_t pl_cross_begin(int64_t w)
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

/* ---- frame-pointer walk --------------------------------------------------------------- */

#define PL_STACK_MAX	(16u << 20)	/* deeper stacks are walked by the profiler */
#define PL_MAX_SKIP	16		/* as the profiler's: library frames dropped, ip included */


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
PL_HIDDEN void pl_cross_finish(int64_t r, void *p, size_t size, uint32_t kind)
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
	if (track == PL_API_UNTRACKED) {
		/* not reported (counted in table_full): without its free it would look like a leak */
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
PL_HIDDEN bool pl_release(void *p, uint32_t kind)
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
