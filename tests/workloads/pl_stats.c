// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Workload for the preload statistics test (tests/unit/preload-stats.sh), run under
 * LD_PRELOAD=libmemprof-preload.so with MEMPROF_TEST_LOG.
 *
 *	pl_stats THREADS LEAK_EVERY SIZE:COUNT[,SIZE:COUNT...]
 *
 * Each of THREADS worker threads mallocs COUNT blocks of every SIZE (classes interleaved).
 * Every LEAK_EVERY-th block of a thread is leaked (kept until exit); the others are gathered
 * in batches that go through a shared pool, so most are freed by another thread than the
 * one that allocated them. Leaked blocks are printed as "L <addr> <size>" on stdout.
 * Bookkeeping lives in static arrays so that the workload's only mallocs are the test's.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CLASSES	16
#define MAX_THREADS	16
#define BATCH		64
#define POOL		1024
#define MAX_LEAKS	(1 << 18)

struct batch {
	int n;
	int owner;	/* the worker that allocated the blocks */
	void *p[BATCH];
};

static struct {
	size_t size;
	long count;
} classes[MAX_CLASSES];
static int nclasses;
static long leak_every;
static int nworkers;

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct batch pool[POOL];
static int pool_n;

static struct {
	void *p;
	size_t size;
} leaks[MAX_LEAKS];
static long nleaks;
static pthread_mutex_t leak_lock = PTHREAD_MUTEX_INITIALIZER;

static volatile char sink;

static void free_batch(struct batch *b)
{
	for (int i = 0; i < b->n; i++)
		free(b->p[i]);
	b->n = 0;
}

/*
 * Push @b to the pool and take the newest batch of another thread to free. Not our own: on a
 * busy machine the workers often run one after another, and a worker alone would take back
 * its own batches (then a run at a low rate may see no sampled block freed by another thread).
 */
static void exchange(struct batch *b)
{
	struct batch out = { 0 };

	pthread_mutex_lock(&pool_lock);
	for (int i = pool_n; i-- > 0;) {
		if (pool[i].owner == b->owner && nworkers > 1)
			continue;
		out = pool[i];
		pool[i] = pool[--pool_n];
		break;
	}
	if (pool_n < POOL) {
		pool[pool_n++] = *b;
		b->n = 0;
	}
	pthread_mutex_unlock(&pool_lock);
	free_batch(&out);
	free_batch(b);	/* only if the pool was full */
}

static void *worker(void *arg)
{
	struct batch b = { .owner = (int)(intptr_t)arg };
	long done[MAX_CLASSES] = { 0 }, k = 0;
	int busy = 1;

	while (busy) {
		busy = 0;
		for (int c = 0; c < nclasses; c++) {
			char *p;

			if (done[c] >= classes[c].count)
				continue;
			busy = 1;
			done[c]++;
			p = malloc(classes[c].size);
			if (!p) {
				fprintf(stderr, "malloc(%zu) failed\n", classes[c].size);
				exit(1);
			}
			p[0] = (char)k;
			sink = p[0];
			if (leak_every > 0 && ++k % leak_every == 0) {
				pthread_mutex_lock(&leak_lock);
				if (nleaks < MAX_LEAKS) {
					leaks[nleaks].p = p;
					leaks[nleaks++].size = classes[c].size;
					p = NULL;
				}
				pthread_mutex_unlock(&leak_lock);
				if (!p)
					continue;
			}
			b.p[b.n++] = p;
			if (b.n == BATCH)
				exchange(&b);
		}
	}
	exchange(&b);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t[MAX_THREADS];
	int threads;
	char *s, *save = NULL;

	if (argc != 4) {
		fprintf(stderr, "usage: pl_stats THREADS LEAK_EVERY SIZE:COUNT[,...]\n");
		return 2;
	}
	threads = atoi(argv[1]);
	leak_every = atol(argv[2]);
	for (s = strtok_r(argv[3], ",", &save); s && nclasses < MAX_CLASSES;
	     s = strtok_r(NULL, ",", &save)) {
		if (sscanf(s, "%zu:%ld", &classes[nclasses].size, &classes[nclasses].count) != 2) {
			fprintf(stderr, "bad class '%s'\n", s);
			return 2;
		}
		nclasses++;
	}
	if (threads < 1 || threads > MAX_THREADS)
		return 2;
	nworkers = threads;
	for (int i = 0; i < threads; i++)
		if (pthread_create(&t[i], NULL, worker, (void *)(intptr_t)(i + 1))) {
			fprintf(stderr, "pthread_create failed\n");
			return 1;
		}
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	/* The main thread frees what is left in the pool: cross-thread frees as well. */
	for (int i = 0; i < pool_n; i++)
		free_batch(&pool[i]);
	for (long i = 0; i < nleaks; i++)
		printf("L %p %zu\n", leaks[i].p, leaks[i].size);
	return 0;
}
