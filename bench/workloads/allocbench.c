// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * allocbench: the malloc+free loop of the overhead benchmark (bench/run).
 *
 *   allocbench [OPS [THREADS]]
 *
 * Each thread keeps a ring of 256 live blocks. Each op frees a pseudo-randomly chosen slot and
 * mallocs a new block of 16..MAXSZ bytes into it (xorshift64, deterministic per thread), so every
 * op is exactly one malloc and one free. The loop is timed inside the program with
 * CLOCK_MONOTONIC, and the program prints one line:
 *
 *   ns_per_pair <ns> ops <ops per thread> threads <n> maxsz <MAXSZ>
 *
 * ns_per_pair is the mean over threads of (thread's loop time / its ops). Built with
 * -O2 -fno-omit-frame-pointer; -DMAXSZ=256 gives the tcache-hot variant (allocbench_small).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../bench.h"

#ifndef MAXSZ
#define MAXSZ 4096
#endif
#define MINSZ 16
#define RING 256
#define MAX_THREADS 64

/* Stores here keep GCC from eliding malloc/free pairs whose pointer would not escape. */
static void *volatile sink;

struct worker {
	pthread_t thread;
	unsigned int index;
	unsigned long ops;
	double ns;
};

static pthread_barrier_t start_line;

static void *worker_run(void *arg)
{
	struct worker *w = arg;
	uint64_t state = 0x9E3779B97F4A7C15ull ^ ((uint64_t)(w->index + 1) * 0xBF58476D1CE4E5B9ull);
	char *ring[RING];
	double t0, t1;

	for (unsigned int i = 0; i < RING; i++) {
		ring[i] = malloc(MINSZ);
		if (!ring[i])
			abort();
		sink = ring[i];
	}
	pthread_barrier_wait(&start_line);
	t0 = (double)bench_now_ns();
	for (unsigned long op = 0; op < w->ops; op++) {
		uint64_t r = bench_xorshift64(&state);
		unsigned int slot = r % RING;
		size_t size = MINSZ + (r >> 32) % (MAXSZ - MINSZ + 1);
		char *p;

		free(ring[slot]);
		p = malloc(size);
		if (!p)
			abort();
		p[0] = (char)op;
		ring[slot] = p;
		sink = p;
	}
	t1 = (double)bench_now_ns();
	for (unsigned int i = 0; i < RING; i++)
		free(ring[i]);
	w->ns = t1 - t0;
	return NULL;
}

static int parse_ulong(const char *s, unsigned long min, unsigned long max, unsigned long *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);	/* accepts 1e6 as well as 1000000 */
	if (errno || end == s || *end || v < (double)min || v > (double)max)
		return -EINVAL;
	*out = (unsigned long)v;
	return 0;
}

int main(int argc, char **argv)
{
	unsigned long ops = 5000000, nthreads = 1;
	struct worker workers[MAX_THREADS];
	double sum = 0;
	int err;

	if (argc > 3 || (argc > 1 && parse_ulong(argv[1], 1, 1e12, &ops)) ||
	    (argc > 2 && parse_ulong(argv[2], 1, MAX_THREADS, &nthreads))) {
		fprintf(stderr, "usage: %s [OPS [THREADS (1..%d)]]\n", argv[0], MAX_THREADS);
		return 2;
	}
	pthread_barrier_init(&start_line, NULL, (unsigned int)nthreads);
	for (unsigned long i = 0; i < nthreads; i++) {
		workers[i].index = (unsigned int)i;
		workers[i].ops = ops;
		if (i == 0)
			continue;
		err = pthread_create(&workers[i].thread, NULL, worker_run, &workers[i]);
		if (err) {
			fprintf(stderr, "allocbench: failed to create thread %lu: %s\n", i,
				strerror(err));
			return 1;
		}
	}
	worker_run(&workers[0]);
	for (unsigned long i = 1; i < nthreads; i++)
		pthread_join(workers[i].thread, NULL);
	for (unsigned long i = 0; i < nthreads; i++)
		sum += workers[i].ns / (double)workers[i].ops;
	printf("ns_per_pair %.2f ops %lu threads %lu maxsz %d\n", sum / (double)nthreads, ops,
	       nthreads, MAXSZ);
	return 0;
}
