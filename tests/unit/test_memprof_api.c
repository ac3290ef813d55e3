// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The in-process API (<memprof/memprof.h>) against the real libmemprof-preload: linked
 * (DT_NEEDED), so the interposers are the program's malloc. Not an ASan test (ASan's allocator
 * would replace the interposers): built by test-bins and run by tests/unit/memprof-api.sh with
 * a fixed MEMPROF_SEED.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <memprof/memprof.h>
/* Both public headers together: one program may profile itself and read traces. */
#include <memprof/trace.h>

#include "chisq.h"
#include "test.h"

static void *volatile sink;

static pid_t tid(void)
{
	return (pid_t)syscall(SYS_gettid);
}

/* ---- a recording tracker --------------------------------------------------------------- */

#define MAXREC 200000

struct rec {
	const void *block;
	size_t size;
	uint64_t n;
	pid_t alloc_tid, dealloc_tid;
	int deallocs;
};

static struct rec recs[MAXREC];
static unsigned int nrecs;		/* atomic */
static unsigned int nested;		/* alloc callbacks that found one running on their thread */
static unsigned int deallocs;		/* atomic */
static __thread int in_cb;
static __thread unsigned int my_allocs;
static size_t cb_alloc_size;		/* > 0: each alloc callback mallocs this much */
static const void *cb_blocks[64];	/* what those callback allocations returned */
static unsigned int ncb_blocks;

static void reset(void)
{
	memset(recs, 0, sizeof(recs));
	nrecs = nested = deallocs = ncb_blocks = 0;
	cb_alloc_size = 0;
}

static void *rec_alloc(const struct memprof_allocation *a, void *ctx)
{
	unsigned int i;
	struct rec *r;

	(void)ctx;
	if (in_cb)
		__atomic_add_fetch(&nested, 1, __ATOMIC_RELAXED);
	in_cb = 1;
	i = __atomic_fetch_add(&nrecs, 1, __ATOMIC_RELAXED);
	my_allocs++;
	if (cb_alloc_size) {
		/* Large enough that, sampled at the test's rate, it would certainly hold a point. */
		void *p = malloc(cb_alloc_size);

		if (ncb_blocks < 64)
			cb_blocks[ncb_blocks++] = p;
		free(p);
	}
	in_cb = 0;
	if (i >= MAXREC)
		return NULL;
	r = &recs[i];
	r->block = a->block;
	r->size = a->size;
	r->n = a->n_samples;
	r->alloc_tid = tid();
	return r;
}

static void rec_dealloc(void *meta, void *ctx)
{
	struct rec *r = meta;

	(void)ctx;
	r->dealloc_tid = tid();
	r->deallocs++;
	__atomic_add_fetch(&deallocs, 1, __ATOMIC_RELAXED);
}

static const struct memprof_tracker rec_tracker = { .alloc = rec_alloc, .dealloc = rec_dealloc };

/* ---- tests ----------------------------------------------------------------------------- */

static void test_state_errors(void)
{
	struct memprof_profile *p, *q;

	ASSERT_EQ(memprof_stop(), -EINVAL, "stop without a profile");
	errno = 0;
	ASSERT_TRUE(!memprof_start(1.5, 8, &rec_tracker, NULL) && errno == EINVAL, "rate > 1");
	errno = 0;
	ASSERT_TRUE(!memprof_start(0.5, 8, NULL, NULL) && errno == EINVAL, "no tracker");
	p = memprof_start(1e-3, 8, &rec_tracker, NULL);
	ASSERT_TRUE(p != NULL, "start");
	errno = 0;
	q = memprof_start(1e-3, 8, &rec_tracker, NULL);
	ASSERT_TRUE(!q && errno == EBUSY, "second start: EBUSY");
	ASSERT_EQ(memprof_discard(p), -EINVAL, "discard while sampling");
	ASSERT_OK(memprof_stop(), "stop");
	ASSERT_EQ(memprof_stop(), -EINVAL, "stop twice");
	/* A stopped profile does not block a new one. */
	q = memprof_start(1e-3, 8, &rec_tracker, NULL);
	ASSERT_TRUE(q != NULL && q != p, "start while another is stopped");
	ASSERT_OK(memprof_stop(), "stop second");
	ASSERT_OK(memprof_discard(p), "discard");
	ASSERT_EQ(memprof_discard(p), -EINVAL, "discard twice");
	ASSERT_OK(memprof_discard(q), "discard second");
	ASSERT_OK(memprof_discard(NULL), "discard NULL");
}

/* Sampling is disabled inside callbacks: their allocations are never sampled. */
static void test_no_sampling_in_callbacks(void)
{
	struct memprof_profile *p;

	reset();
	cb_alloc_size = 1 << 20;	/* 131073 words at λ = 0.01: P(unsampled) = e^-1310 */
	p = memprof_start(0.01, 4, &rec_tracker, NULL);
	if (!ASSERT_TRUE(p != NULL, "start"))
		return;
	for (int i = 0; i < 2000; i++) {
		sink = malloc(800);
		free(sink);
	}
	ASSERT_OK(memprof_stop(), "stop");
	ASSERT_OK(memprof_discard(p), "discard");
	ASSERT_TRUE(nrecs > 0, "some samples");
	ASSERT_EQ(nested, 0, "no alloc callback inside a callback");
	for (unsigned int i = 0; i < nrecs && i < MAXREC; i++)
		ASSERT_TRUE(recs[i].size != cb_alloc_size, "callback's own block never sampled");
	ASSERT_EQ(deallocs, nrecs, "every sampled freed block deallocated");
}

/*
 * n_samples ~ Binomial(w, λ) per block (chi-square, zeros are the blocks never reported) and
 * the unbiased estimates Σn/λ of allocated and live words within 4 standard errors.
 */
static void stats_run(double rate, size_t size, unsigned int blocks)
{
	uint64_t w = (size + 15) / 8, hist[64] = { 0 }, sum = 0, live = 0, seen = 0;
	static void *keep[400000];
	struct memprof_profile *p;
	double chi2, pv, est, se;
	int df;

	reset();
	p = memprof_start(rate, 0, &rec_tracker, NULL);
	if (!ASSERT_TRUE(p != NULL, "start"))
		return;
	sink = malloc(1);	/* the first block after start only re-arms this thread */
	free(sink);
	for (unsigned int i = 0; i < blocks; i++)
		keep[i] = malloc(size);
	/* Free every other block: the rest is "live". */
	for (unsigned int i = 0; i < blocks; i += 2)
		free(keep[i]);
	ASSERT_OK(memprof_stop(), "stop");
	for (unsigned int i = 0; i < nrecs && i < MAXREC; i++) {
		if (recs[i].size != size)
			continue;
		seen++;
		sum += recs[i].n;
		hist[recs[i].n < 63 ? recs[i].n : 63]++;
		if (!recs[i].deallocs)
			live += recs[i].n;
		ASSERT_TRUE(recs[i].n >= 1 && recs[i].n <= w, "1 <= n_samples <= words");
	}
	hist[0] = blocks - seen;
	pv = chisq_binomial_test(hist, 64, blocks, w, rate, &chi2, &df);
	printf("# rate %g size %zu: %" PRIu64 " sampled of %u, chi2 %.1f df %d p %.4f\n", rate,
	       size, seen, blocks, chi2, df, pv);
	ASSERT_TRUE(pv > 1e-3, "n_samples ~ Binomial(words, rate)");
	est = (double)sum / rate;
	se = sqrt((double)blocks * (double)w * (1 - rate) / rate);
	ASSERT_TRUE(fabs(est - (double)blocks * (double)w) < 4 * se, "allocated words within 4 SE");
	est = (double)live / rate;
	se = sqrt((double)(blocks / 2) * (double)w * (1 - rate) / rate);
	ASSERT_TRUE(fabs(est - (double)(blocks / 2) * (double)w) < 4 * se, "live words within 4 SE");
	for (unsigned int i = 1; i < blocks; i += 2)
		free(keep[i]);
	ASSERT_OK(memprof_discard(p), "discard");
}

static void test_statistics(void)
{
	stats_run(0.01, 2000, 50000);	/* w = 251: λw = 2.5 (tracked < MEMPROF_MAX_TRACKED) */
	stats_run(1e-3, 40, 400000);	/* w = 6: mostly zeros */
}

/* Dealloc callbacks keep coming after stop, none after discard; no alloc after stop. */
static void test_stop_discard(void)
{
	static void *keep[20000];
	struct memprof_profile *p;
	unsigned int before, tracked_before_stop, freed = 0;

	reset();
	p = memprof_start(0.01, 4, &rec_tracker, NULL);
	if (!ASSERT_TRUE(p != NULL, "start"))
		return;
	for (int i = 0; i < 20000; i++)
		keep[i] = malloc(400);
	ASSERT_OK(memprof_stop(), "stop");
	tracked_before_stop = nrecs;
	ASSERT_TRUE(tracked_before_stop > 100, "samples before stop");
	for (int i = 0; i < 2000; i++) {
		sink = malloc(400);	/* after stop: never reported */
		free(sink);
	}
	ASSERT_EQ(nrecs, tracked_before_stop, "no alloc callback after stop");
	for (int i = 0; i < 10000; i++)
		free(keep[i]);
	for (unsigned int i = 0; i < nrecs; i++)
		for (int j = 0; j < 10000; j++)
			if (recs[i].block == keep[j])
				freed++;
	ASSERT_EQ(deallocs, freed, "dealloc after stop for each freed tracked block");
	ASSERT_TRUE(freed > 0, "some tracked blocks freed after stop");
	ASSERT_OK(memprof_discard(p), "discard");
	before = deallocs;
	for (int i = 10000; i < 20000; i++)
		free(keep[i]);
	ASSERT_EQ(deallocs, before, "no dealloc after discard");
}

/* Threads created after start join the profile; callbacks run on the allocating thread. */
struct thr {
	void *keep[4000];
	pid_t tid;
	unsigned int allocs;
};

static void *thread_main(void *arg)
{
	struct thr *t = arg;

	t->tid = tid();
	for (int i = 0; i < 4000; i++)
		t->keep[i] = malloc(1000);
	t->allocs = my_allocs;
	return NULL;
}

static void test_threads(void)
{
	struct thr thr[4] = { 0 };
	pthread_t th[4];
	struct memprof_profile *p;
	unsigned int total = 0, bad_tid = 0, freed_by_main = 0;

	reset();
	p = memprof_start(0.01, 4, &rec_tracker, NULL);
	if (!ASSERT_TRUE(p != NULL, "start"))
		return;
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, thread_main, &thr[i]);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 4; i++) {
		ASSERT_TRUE(thr[i].allocs > 100, "new thread samples");
		total += thr[i].allocs;
	}
	for (unsigned int i = 0; i < nrecs; i++) {
		bool found = false;

		for (int k = 0; k < 4 && !found; k++)
			if (recs[i].alloc_tid == thr[k].tid)
				found = recs[i].size == 1000;
		if (recs[i].size == 1000 && !found)
			bad_tid++;
	}
	ASSERT_EQ(bad_tid, 0, "alloc callbacks on the allocating thread");
	ASSERT_TRUE(total >= nrecs - 4 && total <= nrecs, "per-thread counts add up");
	/* Cross-thread frees: dealloc runs on the freeing (main) thread. */
	for (int k = 0; k < 4; k++)
		for (int i = 0; i < 4000; i++)
			free(thr[k].keep[i]);
	for (unsigned int i = 0; i < nrecs; i++)
		if (recs[i].size == 1000 && recs[i].deallocs == 1 && recs[i].dealloc_tid == tid())
			freed_by_main++;
	ASSERT_EQ(freed_by_main, total, "dealloc on the freeing thread, once per block");
	ASSERT_OK(memprof_stop(), "stop");
	ASSERT_OK(memprof_discard(p), "discard");
}

/*
 * Threads that were running before start join the profile too, whatever they allocated
 * before (the library's gate was closed then: their countdowns never ran), within a poll
 * interval (MEMPROF_PRELOAD_POLL_WORDS) of their allocations after it.
 */
static pthread_barrier_t early_started, early_go;

static void *early_main(void *arg)
{
	struct thr *t = arg;

	t->tid = tid();
	for (int i = 0; i < 1000; i++) {	/* before any profile: nothing samples */
		sink = malloc(64);
		free(sink);
	}
	t->allocs = my_allocs;
	pthread_barrier_wait(&early_started);
	pthread_barrier_wait(&early_go);
	for (int i = 0; i < 4000; i++)
		t->keep[i] = malloc(1000);
	t->allocs = my_allocs - t->allocs;
	return NULL;
}

static void test_threads_before_start(void)
{
	static struct thr thr[2];
	struct memprof_profile *p;
	pthread_t th[2];
	unsigned int before = 0;

	reset();
	pthread_barrier_init(&early_started, NULL, 3);
	pthread_barrier_init(&early_go, NULL, 3);
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, early_main, &thr[i]);
	pthread_barrier_wait(&early_started);
	for (int i = 0; i < 2; i++)
		before += thr[i].allocs;
	ASSERT_EQ(before, 0, "nothing sampled before start");
	p = memprof_start(0.01, 4, &rec_tracker, NULL);
	pthread_barrier_wait(&early_go);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	/* 4000 blocks of 126 words at 1e-2: ~3,900 samples each; 100 is far below any chance */
	for (int i = 0; i < 2; i++)
		ASSERT_TRUE(thr[i].allocs > 100, "a thread that ran before start samples after it");
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < 4000; i++)
			free(thr[k].keep[i]);
	if (p) {
		ASSERT_OK(memprof_stop(), "stop");
		ASSERT_OK(memprof_discard(p), "discard");
	}
	pthread_barrier_destroy(&early_started);
	pthread_barrier_destroy(&early_go);
}

/* λ = 1: every block, n_samples = words, innermost frame is the allocating function. */
static uintptr_t first_frame;
static size_t first_len, first_words;
static uint64_t first_n;

static void *cs_alloc(const struct memprof_allocation *a, void *ctx)
{
	(void)ctx;
	if (a->size == 4242 && !first_frame) {
		first_frame = a->callstack_len ? a->callstack[0] : 0;
		first_len = a->callstack_len;
		first_words = a->words;
		first_n = a->n_samples;
	}
	return NULL;
}

static __attribute__((noinline)) void alloc_site(void)
{
	sink = malloc(4242);
	__asm__ volatile("" ::: "memory");
}

static void test_callstack(void)
{
	static const struct memprof_tracker t = { .alloc = cs_alloc };
	struct memprof_profile *p = memprof_start(1.0, 3, &t, NULL);

	if (!ASSERT_TRUE(p != NULL, "start"))
		return;
	sink = malloc(1);	/* re-arms */
	free(sink);
	alloc_site();
	free(sink);
	ASSERT_OK(memprof_stop(), "stop");
	ASSERT_OK(memprof_discard(p), "discard");
	ASSERT_EQ(first_words, (4242 + 7) / 8 + 1, "words = ceil(size/8) + 1");
	ASSERT_EQ(first_n, first_words, "λ = 1: every word sampled");
	ASSERT_TRUE(first_len >= 2 && first_len <= 3, "callstack bounded by callstack_size");
	ASSERT_TRUE(first_frame > (uintptr_t)alloc_site && first_frame < (uintptr_t)alloc_site + 256,
		    "innermost frame is the allocation site");
}

/* A block freed inside a callback gets its dealloc after that callback, not nested in it. */
static void *victim;
static int victim_deallocs, victim_nested, victim_same_thread;
static pid_t victim_cb_tid;
static __thread int dc_in_cb;

static void *dc_alloc(const struct memprof_allocation *a, void *ctx)
{
	(void)ctx;
	if (a->size == 111)
		return (void *)a->block;
	if (a->size == 222 && victim) {
		dc_in_cb = 1;
		victim_cb_tid = tid();
		free(victim);	/* a tracked block, released inside a callback */
		victim = NULL;
		dc_in_cb = 0;
	}
	return NULL;
}

static void dc_dealloc(void *meta, void *ctx)
{
	(void)ctx;
	(void)meta;
	victim_deallocs++;
	victim_nested += dc_in_cb;
	victim_same_thread = victim_cb_tid == tid();
}

static void test_dealloc_in_callback(void)
{
	static const struct memprof_tracker t = { .alloc = dc_alloc, .dealloc = dc_dealloc };
	struct memprof_profile *p = memprof_start(1.0, 0, &t, NULL);
	void *b;

	if (!ASSERT_TRUE(p != NULL, "start"))
		return;
	sink = malloc(1);	/* re-arms */
	free(sink);
	victim = malloc(111);
	ASSERT_EQ(victim_deallocs, 0, "victim tracked, not released");
	b = malloc(222);	/* its callback frees the victim */
	ASSERT_TRUE(victim == NULL, "victim freed in the callback");
	ASSERT_EQ(victim_deallocs, 1, "dealloc delivered once");
	ASSERT_EQ(victim_nested, 0, "dealloc ran after the callback, not inside it");
	ASSERT_EQ(victim_same_thread, 1, "dealloc on the releasing thread");
	free(b);
	ASSERT_OK(memprof_stop(), "stop");
	ASSERT_OK(memprof_discard(p), "discard");
}

/* discard waits for a dealloc callback running on another thread; -EDEADLK from inside. */
static struct memprof_profile *dw_prof;
static sem_t dw_entered, dw_go;
static int dw_self_discard, dw_done, dw_discard_returned, dw_done_at_return;

static void *dw_alloc(const struct memprof_allocation *a, void *ctx)
{
	(void)ctx;
	return a->size == 333 ? (void *)a->block : NULL;
}

static void dw_dealloc(void *meta, void *ctx)
{
	(void)meta;
	(void)ctx;
	dw_self_discard = memprof_discard(dw_prof);
	sem_post(&dw_entered);
	sem_wait(&dw_go);
	__atomic_store_n(&dw_done, 1, __ATOMIC_SEQ_CST);
}

static void *dw_free_thread(void *arg)
{
	free(arg);
	return NULL;
}

static void *dw_discard_thread(void *arg)
{
	int r = memprof_discard(arg);

	dw_done_at_return = __atomic_load_n(&dw_done, __ATOMIC_SEQ_CST);
	__atomic_store_n(&dw_discard_returned, 1, __ATOMIC_SEQ_CST);
	return (void *)(intptr_t)r;
}

static void test_discard_waits(void)
{
	static const struct memprof_tracker t = { .alloc = dw_alloc, .dealloc = dw_dealloc };
	pthread_t ft, dt;
	void *blk, *ret;

	sem_init(&dw_entered, 0, 0);
	sem_init(&dw_go, 0, 0);
	dw_prof = memprof_start(1.0, 0, &t, NULL);
	if (!ASSERT_TRUE(dw_prof != NULL, "start"))
		return;
	sink = malloc(1);	/* re-arms */
	free(sink);
	blk = malloc(333);
	ASSERT_OK(memprof_stop(), "stop");
	pthread_create(&ft, NULL, dw_free_thread, blk);
	sem_wait(&dw_entered);		/* the dealloc callback runs on ft and waits */
	pthread_create(&dt, NULL, dw_discard_thread, dw_prof);
	usleep(200 * 1000);		/* give discard every chance to return too early */
	ASSERT_EQ(__atomic_load_n(&dw_discard_returned, __ATOMIC_SEQ_CST), 0,
		  "discard waits for the running callback");
	sem_post(&dw_go);
	pthread_join(ft, NULL);
	pthread_join(dt, &ret);
	ASSERT_EQ((intptr_t)ret, 0, "discard");
	ASSERT_EQ(dw_done_at_return, 1, "callback finished before discard returned");
	ASSERT_EQ(dw_self_discard, -EDEADLK, "discard from the profile's own callback");
}

int main(void)
{
	RUN(test_state_errors);
	RUN(test_no_sampling_in_callbacks);
	RUN(test_statistics);
	RUN(test_stop_discard);
	RUN(test_threads);
	RUN(test_threads_before_start);
	RUN(test_callstack);
	RUN(test_dealloc_in_callback);
	RUN(test_discard_waits);
	return test_exit();
}
