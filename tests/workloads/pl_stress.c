// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Stress for libmemprof-preload: worker threads that allocate with every entry point, trade
 * blocks through a shared pool (cross-thread frees) and exit after a while, replaced by new
 * ones; meanwhile the main thread forks children that allocate, free inherited blocks and
 * exit. At the end everything is freed and the library's counters are checked:
 *
 *	pl_stress SECONDS THREADS armed|disarmed
 *
 * armed: samples were taken (alloc hooks > 0) and every sampled block the workload freed was
 * released from the table (LIVE back to its starting value); disarmed: no hook was reached.
 * Without the preload (no memprof_preload_config symbol) only the workload runs.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <memprof/preload.h>

#define POOL		4096
#define RING		128
#define OPS_PER_THREAD	30000

struct blk {
	void *p;
	size_t len;
	int mapped;
};

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct blk pool[POOL];
static volatile int stop;

static uint64_t xorshift(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static void blk_free(struct blk *b)
{
	if (b->mapped)
		munmap(b->p, b->len);
	else
		free(b->p);
	b->p = NULL;
}

static struct blk blk_alloc(uint64_t r)
{
	struct blk b = { NULL, 8 + (r >> 16) % 4000, 0 };
	void *q;

	switch ((r >> 56) % 8) {
	case 0:
		b.p = calloc(1, b.len);
		break;
	case 1:
		if (posix_memalign(&q, (size_t)64 << ((r >> 8) % 4), b.len) == 0)
			b.p = q;
		break;
	case 2:
		b.p = aligned_alloc(256, b.len);
		break;
	case 3:
		b.len = 4096 * (1 + (r >> 8) % 4);
		b.p = mmap(NULL, b.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		b.mapped = 1;
		if (b.p == MAP_FAILED)
			b.p = NULL;
		break;
	case 4:
		b.p = malloc(b.len / 2 + 1);
		q = realloc(b.p, b.len);
		if (q)
			b.p = q;
		break;
	default:
		b.p = malloc(b.len);
		break;
	}
	if (!b.p) {
		fprintf(stderr, "allocation of %zu failed\n", b.len);
		abort();
	}
	((volatile char *)b.p)[b.len - 1] = 1;
	return b;
}

static void *worker(void *arg)
{
	struct blk ring[RING] = { 0 };
	uint64_t x = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ULL + 1;

	for (int op = 0; op < OPS_PER_THREAD && !stop; op++) {
		uint64_t r = xorshift(&x);
		struct blk *b = &ring[r % RING];

		if (b->p)
			blk_free(b);
		*b = blk_alloc(r);
		if ((r >> 40) % 8 == 0) {
			/* trade with the pool: the block is freed by some other thread */
			unsigned slot = (unsigned)((r >> 24) % POOL);

			pthread_mutex_lock(&pool_lock);
			struct blk t = pool[slot];

			pool[slot] = *b;
			pthread_mutex_unlock(&pool_lock);
			*b = t;
		}
	}
	for (int i = 0; i < RING; i++)
		if (ring[i].p)
			blk_free(&ring[i]);
	return NULL;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int child(uint64_t seed, struct blk *mine, int nmine)
{
	struct blk ring[64] = { 0 };
	uint64_t x = seed | 1;

	/* free blocks inherited from the parent (parent-sampled, freed in the child) */
	for (int i = 0; i < nmine; i++)
		if (mine[i].p)
			blk_free(&mine[i]);
	for (int op = 0; op < 5000; op++) {
		struct blk *b = &ring[xorshift(&x) % 64];

		if (b->p)
			blk_free(b);
		*b = blk_alloc(xorshift(&x));
	}
	for (int i = 0; i < 64; i++)
		if (ring[i].p)
			blk_free(&ring[i]);
	return 0;
}

int main(int argc, char **argv)
{
	double secs, end;
	int nthreads, forks = 0, threads_started = 0, bad_children = 0;
	pthread_t *t;
	struct memprof_preload_config *cfg;
	uint64_t live0 = 0, x = 12345;
	struct blk mine[32] = { 0 };

	if (argc != 4) {
		fprintf(stderr, "usage: pl_stress SECONDS THREADS armed|disarmed\n");
		return 2;
	}
	secs = atof(argv[1]);
	nthreads = atoi(argv[2]);
	cfg = dlsym(RTLD_DEFAULT, "memprof_preload_config");
	if (cfg)
		live0 = __atomic_load_n(&cfg->stats[MEMPROF_PRELOAD_STAT_LIVE], __ATOMIC_RELAXED);
	t = calloc((size_t)nthreads, sizeof(*t));
	for (int i = 0; i < nthreads; i++)
		pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)threads_started++);

	end = now() + secs;
	while (now() < end) {
		/* churn: replace one finished worker (join waits for its ops to end) */
		int i = (int)(xorshift(&x) % (uint64_t)nthreads);

		for (int k = 0; k < 32; k++) {
			if (mine[k].p)
				blk_free(&mine[k]);
			mine[k] = blk_alloc(xorshift(&x));
		}
		pid_t pid = fork();

		if (pid == 0)
			_exit(child(xorshift(&x), mine, 32));
		if (pid > 0) {
			int st;

			forks++;
			if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
				bad_children++;
		}
		pthread_join(t[i], NULL);
		pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)threads_started++);
	}
	stop = 1;
	for (int i = 0; i < nthreads; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < POOL; i++)
		if (pool[i].p)
			blk_free(&pool[i]);
	for (int k = 0; k < 32; k++)
		if (mine[k].p)
			blk_free(&mine[k]);
	free(t);

	printf("threads %d, forks %d, bad children %d\n", threads_started, forks, bad_children);
	int fail = bad_children > 0 || forks == 0;

	if (cfg) {
		uint64_t *s = cfg->stats;
		uint64_t live = __atomic_load_n(&s[MEMPROF_PRELOAD_STAT_LIVE], __ATOMIC_RELAXED);

		printf("alloc hooks %lu, free hooks %lu, samples %lu, live %lu (start %lu), "
		       "table full %lu, stale %lu, realloc lost %lu, armings %lu\n",
		       s[MEMPROF_PRELOAD_STAT_ALLOC_HOOKS], s[MEMPROF_PRELOAD_STAT_FREE_HOOKS],
		       s[MEMPROF_PRELOAD_STAT_SAMPLES], live, live0,
		       s[MEMPROF_PRELOAD_STAT_TABLE_FULL], s[MEMPROF_PRELOAD_STAT_STALE],
		       s[MEMPROF_PRELOAD_STAT_REALLOC_LOST], s[MEMPROF_PRELOAD_STAT_ARMINGS]);
		if (!strcmp(argv[3], "armed")) {
			fail |= s[MEMPROF_PRELOAD_STAT_ALLOC_HOOKS] == 0;
			/*
			 * The workload freed all its blocks: thousands were sampled, so a table
			 * that kept freed entries would show here. A few blocks glibc keeps
			 * (stdio buffer, cached thread stacks' DTVs) may stay live.
			 */
			fail |= live > live0 + 16;
			fail |= s[MEMPROF_PRELOAD_STAT_STALE] != 0;
		} else {
			fail |= s[MEMPROF_PRELOAD_STAT_ALLOC_HOOKS] != 0 ||
				s[MEMPROF_PRELOAD_STAT_FREE_HOOKS] != 0 ||
				s[MEMPROF_PRELOAD_STAT_ARMINGS] != 0 || live != 0;
		}
	}
	return fail;
}
