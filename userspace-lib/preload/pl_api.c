// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The in-process profiling API (<memprof/memprof.h>), after Gc.Memprof, on top of the
 * interposers' sampler. pl_sample.c draws the samples (exact 1 + Binomial multiplicities) and
 * keeps the table of sampled addresses that frees are checked against; this file turns its
 * slow-path events into tracker callbacks:
 *
 *  - memprof_start() publishes the profile (rate, generation with PL_API_GEN_BIT). Each
 *    thread picks it up at its next countdown expiry (the caller at once: it is "kicked"),
 *    discards its pending sample point and draws at the profile's rate; new threads start
 *    with it. Samples drawn under an API generation go to pl_api_alloc() instead of the
 *    USDT probe.
 *  - pl_api_alloc() runs the alloc callback on the allocating thread, with its countdown
 *    parked (nothing allocated by a callback is sampled or even counted), and stores the
 *    returned metadata in the profile's address table.
 *  - pl_api_free() (from pl_sample.c's release of a sampled address) finds the metadata and runs
 *    dealloc on the releasing thread; inside a callback it queues it (per thread) until the
 *    outer callback returns.
 *
 * Profiles live in a static array and are never freed, so a hook can always look at one: it
 * takes a reference (users), then checks the state; memprof_discard() marks the profile, then
 * waits on a futex until the references are gone. The address tables are lock-free (CAS on
 * the key, two candidate buckets, no tombstones), like pl_core's.
 */
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <memprof/memprof.h>
#include <memprof/preload.h>

#include "pl_api.h"

#define PL_EXPORT	__attribute__((visibility("default")))

#define PL_SAME_SOURCE(a) ((int)MEMPROF_SOURCE_##a == (int)MEMPROF_PRELOAD_##a)
_Static_assert(PL_SAME_SOURCE(MALLOC) && PL_SAME_SOURCE(CALLOC) && PL_SAME_SOURCE(REALLOC) &&
		       PL_SAME_SOURCE(REALLOCARRAY) && PL_SAME_SOURCE(POSIX_MEMALIGN) &&
		       PL_SAME_SOURCE(ALIGNED_ALLOC) && PL_SAME_SOURCE(MEMALIGN) &&
		       PL_SAME_SOURCE(VALLOC) && PL_SAME_SOURCE(PVALLOC) && PL_SAME_SOURCE(NEW) &&
		       PL_SAME_SOURCE(MMAP),
	       "memprof_alloc_source must match memprof_preload_kind");

/* This object's text, to skip our own frames and to check that our malloc is the one. */
extern char __ehdr_start[] __attribute__((visibility("hidden")));
extern char __etext[] __attribute__((visibility("hidden")));
/* The USDT semaphore of memprof:alloc (pl_report.c): nonzero while memprofd is attached. */
extern unsigned short memprof_alloc_semaphore __attribute__((visibility("hidden")));

enum {
	PROF_FREE = 0,
	PROF_SAMPLING,
	PROF_STOPPED,
	PROF_DISCARDING,
};

#define API_BUCKET_SLOTS	8
#define API_BUCKETS		(MEMPROF_MAX_TRACKED * 2 / API_BUCKET_SLOTS)
#define API_PENDING		32

struct api_slot {
	uintptr_t addr;		/* 0: empty */
	void *meta;
};

struct api_bucket {
	struct api_slot s[API_BUCKET_SLOTS];
} __attribute__((aligned(64)));

struct memprof_profile {
	int state;			/* PROF_*, atomic */
	uint32_t gen;
	uint32_t users;			/* hooks looking at this profile (futex word) */
	uint32_t waiting;		/* memprof_discard() waits on users */
	double rate;
	unsigned int callstack_size;
	struct memprof_tracker tracker;
	void *ctx;
	struct api_bucket *table;	/* API_BUCKETS, mmap()ed */
	uint64_t ntracked;		/* reserved table entries (atomic) */
	struct memprof_stats st;	/* atomics */
};

static struct memprof_profile api_profiles[MEMPROF_MAX_PROFILES];
static struct memprof_profile *api_sampling;	/* atomic; NULL: none */
static uint32_t api_gen_seq;
static pthread_mutex_t api_lock = PTHREAD_MUTEX_INITIALIZER;	/* start/stop/discard only */
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

PL_HIDDEN int pl_api_live;

struct api_pending {
	struct memprof_profile *prof;
	uint32_t gen;
	void *meta;
};

struct api_tls {
	struct memprof_profile *in_cb;	/* the profile whose callback this thread runs */
	uintptr_t stack_lo, stack_hi;	/* 0: not known yet; 1: unknown (no callstacks) */
	unsigned int npending;
	struct api_pending pending[API_PENDING];
};

static __thread struct api_tls api_tls __attribute__((tls_model("initial-exec")));

#define ADD(field, v)	__atomic_fetch_add(&(field), (v), __ATOMIC_RELAXED)

/* ---- profile references ---------------------------------------------------------------- */

static void prof_put(struct memprof_profile *p)
{
	if (__atomic_sub_fetch(&p->users, 1, __ATOMIC_SEQ_CST) == 0 &&
	    __atomic_load_n(&p->waiting, __ATOMIC_SEQ_CST))
		syscall(SYS_futex, &p->users, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Reference @p if it is (still) generation @gen in one of the states allowed. */
static bool prof_get(struct memprof_profile *p, uint32_t gen, bool sampling_only)
{
	int st;

	__atomic_add_fetch(&p->users, 1, __ATOMIC_SEQ_CST);
	st = __atomic_load_n(&p->state, __ATOMIC_SEQ_CST);
	if ((st == PROF_SAMPLING || (!sampling_only && st == PROF_STOPPED)) &&
	    (!gen || __atomic_load_n(&p->gen, __ATOMIC_RELAXED) == gen))
		return true;
	prof_put(p);
	return false;
}

/* ---- address table --------------------------------------------------------------------- */

static inline uint32_t bucket_of(uintptr_t a, int which)
{
	uint64_t h = (uint64_t)a * (which ? 0xc2b2ae3d27d4eb4fULL : 0x9e3779b97f4a7c15ULL);

	return (uint32_t)(h >> 40) % API_BUCKETS;
}

static bool table_insert(struct api_bucket *t, uintptr_t addr, void *meta)
{
	for (int w = 0; w < 2; w++) {
		struct api_bucket *b = &t[bucket_of(addr, w)];

		for (int i = 0; i < API_BUCKET_SLOTS; i++) {
			uintptr_t zero = 0;

			if (__atomic_load_n(&b->s[i].addr, __ATOMIC_RELAXED))
				continue;
			/* meta first: a remover only looks after the block was handed out. */
			if (__atomic_compare_exchange_n(&b->s[i].addr, &zero, addr, false,
							__ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
				__atomic_store_n(&b->s[i].meta, meta, __ATOMIC_RELEASE);
				return true;
			}
		}
	}
	return false;
}

static bool table_remove(struct api_bucket *t, uintptr_t addr, void **meta)
{
	for (int w = 0; w < 2; w++) {
		struct api_bucket *b = &t[bucket_of(addr, w)];

		for (int i = 0; i < API_BUCKET_SLOTS; i++) {
			uintptr_t a = addr;
			void *m;

			if (__atomic_load_n(&b->s[i].addr, __ATOMIC_ACQUIRE) != addr)
				continue;
			m = __atomic_load_n(&b->s[i].meta, __ATOMIC_ACQUIRE);
			if (__atomic_compare_exchange_n(&b->s[i].addr, &a, 0, false,
							__ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
				*meta = m;
				return true;
			}
		}
	}
	return false;
}

/* ---- callstacks ------------------------------------------------------------------------ */

/* The thread's stack bounds, once per thread (may allocate: call with sampling parked). */
static void stack_bounds(void)
{
	pthread_attr_t attr;
	void *addr;
	size_t size;

	api_tls.stack_lo = api_tls.stack_hi = 1;
	if (pthread_getattr_np(pthread_self(), &attr))
		return;
	if (!pthread_attr_getstack(&attr, &addr, &size) && size) {
		api_tls.stack_lo = (uintptr_t)addr;
		api_tls.stack_hi = (uintptr_t)addr + size;
	}
	pthread_attr_destroy(&attr);
}

/*
 * Walk the frame-pointer chain from here: return addresses, innermost first, skipping the
 * library's own frames. Every frame must lie on this thread's stack, above the previous one;
 * code without frame pointers ends the walk early (at worst a short or wrong tail), never a
 * fault.
 */
static __attribute__((noinline)) size_t capture(uintptr_t *out, size_t max)
{
	uintptr_t lo = (uintptr_t)__builtin_frame_address(0), fp = lo;
	uintptr_t text_lo = (uintptr_t)__ehdr_start, text_hi = (uintptr_t)__etext;
	size_t n = 0;

	if (!max)
		return 0;
	if (!api_tls.stack_hi)
		stack_bounds();
	/* Not on the thread's stack (signal alternate stack): no callstack. */
	if (lo < api_tls.stack_lo || lo >= api_tls.stack_hi)
		return 0;
	while (n < max) {
		uintptr_t next, ret;

		if (fp < lo || fp > api_tls.stack_hi - 2 * sizeof(uintptr_t) ||
		    fp % sizeof(uintptr_t))
			break;
		next = ((const uintptr_t *)fp)[0];
		ret = ((const uintptr_t *)fp)[1];
		if (!ret)
			break;
		if (ret < text_lo || ret >= text_hi)
			out[n++] = ret;
		if (next <= fp)
			break;
		fp = next;
	}
	return n;
}

/* ---- callbacks ------------------------------------------------------------------------- */

static void run_dealloc(struct memprof_profile *p, void *meta)
{
	api_tls.in_cb = p;
	if (p->tracker.dealloc)
		p->tracker.dealloc(meta, p->ctx);
	api_tls.in_cb = NULL;
}

/* Deallocations that happened inside callbacks, now that none runs (sampling parked). */
static void drain_pending(void)
{
	while (api_tls.npending) {
		struct api_pending d = api_tls.pending[--api_tls.npending];

		if (!prof_get(d.prof, d.gen, false))
			continue;	/* discarded meanwhile: no more callbacks */
		run_dealloc(d.prof, d.meta);
		prof_put(d.prof);
	}
}

PL_HIDDEN bool pl_api_params(uint32_t *gen, double *rate)
{
	struct memprof_profile *p = __atomic_load_n(&api_sampling, __ATOMIC_ACQUIRE);

	if (!p)
		return false;
	*gen = __atomic_load_n(&p->gen, __ATOMIC_RELAXED);
	*rate = p->rate;
	return *rate > 0;
}

PL_HIDDEN void pl_api_free(uintptr_t addr)
{
	for (int i = 0; i < MEMPROF_MAX_PROFILES; i++) {
		struct memprof_profile *p = &api_profiles[i];
		int64_t saved;
		void *meta;

		if (__atomic_load_n(&p->state, __ATOMIC_RELAXED) == PROF_FREE || !prof_get(p, 0, false))
			continue;
		if (!table_remove(p->table, addr, &meta)) {
			prof_put(p);
			continue;
		}
		ADD(p->st.tracked, -1);
		ADD(p->ntracked, -1);
		if (api_tls.in_cb) {
			if (api_tls.npending < API_PENDING)
				api_tls.pending[api_tls.npending++] = (struct api_pending){
					.prof = p, .gen = p->gen, .meta = meta };
			else
				ADD(p->st.deallocs_lost, 1);
		} else {
			saved = pl_sampling_suspend();
			run_dealloc(p, meta);
			drain_pending();
			pl_sampling_resume(saved);
		}
		prof_put(p);
		return;		/* a block is sampled for one profile only */
	}
}

PL_HIDDEN void pl_api_alloc(uint32_t gen, void *block, size_t size, uint64_t n, uint32_t kind,
			    enum pl_api_track track)
{
	struct memprof_profile *p = __atomic_load_n(&api_sampling, __ATOMIC_ACQUIRE);
	uintptr_t stack[MEMPROF_MAX_CALLSTACK];
	struct memprof_allocation a;
	int64_t saved;
	void *meta;

	/* Stopped before the callback could run: not called, not tracked (as Gc.Memprof). */
	if (!p || api_tls.in_cb || !prof_get(p, gen, true))
		return;
	if (track == PL_API_UNTRACKED ||
	    __atomic_fetch_add(&p->ntracked, 1, __ATOMIC_RELAXED) >= MEMPROF_MAX_TRACKED) {
		if (track != PL_API_UNTRACKED)
			ADD(p->ntracked, -1);
		ADD(p->st.untracked, 1);
		prof_put(p);
		return;
	}
	saved = pl_sampling_suspend();
	a = (struct memprof_allocation){
		.n_samples = n,
		.size = size,
		.words = (size + 15) >> 3,
		.block = block,
		.source = (enum memprof_alloc_source)kind,
		.callstack = stack,
	};
	a.callstack_len = capture(stack, p->callstack_size < MEMPROF_MAX_CALLSTACK ?
						 p->callstack_size : MEMPROF_MAX_CALLSTACK);
	ADD(p->st.samples, n);
	ADD(p->st.blocks, 1);
	api_tls.in_cb = p;
	meta = p->tracker.alloc ? p->tracker.alloc(&a, p->ctx) : NULL;
	api_tls.in_cb = NULL;
	if (!meta) {
		ADD(p->ntracked, -1);
	} else if (table_insert(p->table, (uintptr_t)block, meta)) {
		ADD(p->st.tracked, 1);
	} else {
		/* Both buckets full (rare below the limit): release it from tracking now. */
		ADD(p->ntracked, -1);
		ADD(p->st.untracked, 1);
		run_dealloc(p, meta);
	}
	drain_pending();
	pl_sampling_resume(saved);
	prof_put(p);
}

/* ---- the API --------------------------------------------------------------------------- */

static void api_prepare(void)
{
	pthread_mutex_lock(&api_lock);
}

static void api_parent(void)
{
	pthread_mutex_unlock(&api_lock);
}

/* The child has one thread: only its own callback (if it forked in one) holds a profile. */
static void api_child(void)
{
	pthread_mutex_init(&api_lock, NULL);
	for (int i = 0; i < MEMPROF_MAX_PROFILES; i++) {
		api_profiles[i].users = api_tls.in_cb == &api_profiles[i];
		api_profiles[i].waiting = 0;
	}
}

static void api_init(void)
{
	pthread_atfork(api_prepare, api_parent, api_child);
}

/* memprofd drives this library's sampling (USDT attached and sampling flag set). */
static bool external_armed(void)
{
	const struct memprof_preload_config *c = &memprof_preload_config;

	return __atomic_load_n(&memprof_alloc_semaphore, __ATOMIC_RELAXED) &&
	       __atomic_load_n(&c->generation, __ATOMIC_ACQUIRE) &&
	       (__atomic_load_n(&c->flags, __ATOMIC_RELAXED) & MEMPROF_PRELOAD_F_SAMPLING);
}

PL_EXPORT struct memprof_profile *memprof_start(double sampling_rate, unsigned int callstack_size,
						const struct memprof_tracker *tracker, void *ctx)
{
	uintptr_t m = (uintptr_t)&malloc;
	struct memprof_profile *p = NULL;
	void *t;
	int err = 0;

	if (!tracker || !(sampling_rate >= 0 && sampling_rate <= 1)) {
		errno = EINVAL;
		return NULL;
	}
	/* The program's malloc must be ours, or nothing would ever be sampled. */
	if (m < (uintptr_t)__ehdr_start || m >= (uintptr_t)__etext) {
		errno = ENOTSUP;
		return NULL;
	}
	pthread_once(&api_once, api_init);
	t = pl_anon_map(sizeof(struct api_bucket) * API_BUCKETS);
	if (t == MAP_FAILED) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&api_lock);
	if (__atomic_load_n(&api_sampling, __ATOMIC_RELAXED) || external_armed()) {
		err = EBUSY;
	} else {
		for (int i = 0; i < MEMPROF_MAX_PROFILES && !p; i++)
			if (__atomic_load_n(&api_profiles[i].state, __ATOMIC_ACQUIRE) == PROF_FREE)
				p = &api_profiles[i];
		if (!p)
			err = ENOSPC;
	}
	if (p) {
		p->rate = sampling_rate;
		p->callstack_size = callstack_size;
		p->tracker = *tracker;
		p->ctx = ctx;
		p->table = t;
		p->ntracked = 0;
		memset(&p->st, 0, sizeof(p->st));
		api_gen_seq = (api_gen_seq + 1) & ~PL_API_GEN_BIT;
		__atomic_store_n(&p->gen, PL_API_GEN_BIT | api_gen_seq, __ATOMIC_RELAXED);
		__atomic_store_n(&p->state, PROF_SAMPLING, __ATOMIC_SEQ_CST);
		__atomic_add_fetch(&pl_api_live, 1, __ATOMIC_SEQ_CST);
		__atomic_store_n(&api_sampling, p, __ATOMIC_RELEASE);
		pl_gate_api(true);
	}
	pthread_mutex_unlock(&api_lock);
	if (!p) {
		syscall(SYS_munmap, t, sizeof(struct api_bucket) * API_BUCKETS);
		errno = err;
		return NULL;
	}
	pl_sampling_kick();
	return p;
}

PL_EXPORT int memprof_stop(void)
{
	struct memprof_profile *p;

	pthread_mutex_lock(&api_lock);
	p = __atomic_load_n(&api_sampling, __ATOMIC_RELAXED);
	if (p) {
		__atomic_store_n(&api_sampling, NULL, __ATOMIC_RELEASE);
		__atomic_store_n(&p->state, PROF_STOPPED, __ATOMIC_SEQ_CST);
		pl_gate_api(false);
	}
	pthread_mutex_unlock(&api_lock);
	if (!p)
		return -EINVAL;
	pl_sampling_kick();
	return 0;
}

static bool is_profile(const struct memprof_profile *p)
{
	return p >= api_profiles && p < api_profiles + MEMPROF_MAX_PROFILES &&
	       (uintptr_t)p == (uintptr_t)&api_profiles[p - api_profiles];
}

PL_EXPORT int memprof_discard(struct memprof_profile *p)
{
	uint32_t u;
	void *t;

	if (!p)
		return 0;
	if (!is_profile(p))
		return -EINVAL;
	if (api_tls.in_cb == p)
		return -EDEADLK;
	pthread_mutex_lock(&api_lock);
	if (__atomic_load_n(&p->state, __ATOMIC_RELAXED) != PROF_STOPPED) {
		pthread_mutex_unlock(&api_lock);
		return -EINVAL;
	}
	__atomic_store_n(&p->waiting, 1, __ATOMIC_SEQ_CST);
	__atomic_store_n(&p->state, PROF_DISCARDING, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&api_lock);
	/* Wait for callbacks in progress on other threads (they may call stop: lock released). */
	while ((u = __atomic_load_n(&p->users, __ATOMIC_SEQ_CST)))
		syscall(SYS_futex, &p->users, FUTEX_WAIT_PRIVATE, u, NULL, NULL, 0);
	t = p->table;
	p->table = NULL;
	syscall(SYS_munmap, t, sizeof(struct api_bucket) * API_BUCKETS);
	__atomic_store_n(&p->waiting, 0, __ATOMIC_RELAXED);
	__atomic_sub_fetch(&pl_api_live, 1, __ATOMIC_SEQ_CST);
	__atomic_store_n(&p->state, PROF_FREE, __ATOMIC_RELEASE);
	return 0;
}

PL_EXPORT int memprof_profile_stats(const struct memprof_profile *p, struct memprof_stats *st)
{
	int s;

	if (!p || !st || !is_profile(p))
		return -EINVAL;
	s = __atomic_load_n(&p->state, __ATOMIC_ACQUIRE);
	if (s != PROF_SAMPLING && s != PROF_STOPPED)
		return -EINVAL;
	st->samples = __atomic_load_n(&p->st.samples, __ATOMIC_RELAXED);
	st->blocks = __atomic_load_n(&p->st.blocks, __ATOMIC_RELAXED);
	st->tracked = __atomic_load_n(&p->st.tracked, __ATOMIC_RELAXED);
	st->untracked = __atomic_load_n(&p->st.untracked, __ATOMIC_RELAXED);
	st->deallocs_lost = __atomic_load_n(&p->st.deallocs_lost, __ATOMIC_RELAXED);
	return 0;
}
