// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * paced: malloc+free pairs at a fixed rate, or as fast as possible, for the profiler's event
 * throughput (bench/run).
 *
 *   paced [-t THREADS] [-d DEPTH] [-w] PAIRS_PER_SEC SECONDS [SIZE]
 *
 * Each thread keeps a ring of 256 live blocks of SIZE bytes (default 64) and frees the oldest
 * before each malloc, which it calls through 0 to DEPTH - 1 (default 16) nested calls in turn:
 * DEPTH distinct call stacks of 3 to DEPTH + 2 frames, as a profiler's stack handling sees in
 * real programs; pair i of a thread is issued at t0 + i / (PAIRS_PER_SEC / THREADS)
 * (busy-waiting on CLOCK_MONOTONIC in between), so the allocator call rate is fixed however
 * fast the probes are, unless they are too slow to keep up. PAIRS_PER_SEC 0: no pacing, each
 * thread runs for SECONDS as fast as it can. At the end every thread frees its ring, so each
 * pair is one malloc and one free of the same block. Prints
 * "pairs <n> seconds <s> achieved_per_sec <rate>" (all threads together).
 *
 * -w: handshake with the caller, for measuring a profiler's own CPU time over the loop only:
 * print "ready" and wait for a line on stdin before starting; after the result line, wait for
 * end of file on stdin before exiting.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../bench.h"

#define RING		256
#define MAX_THREADS	64

static void *volatile sink;

struct worker {
	pthread_t th;
	unsigned int depth;
	double rate;		/* pairs per second of this thread, 0: unpaced */
	double secs;
	double t0;
	unsigned long size;
	unsigned long pairs;	/* done */
	double end;
};

/* malloc @size at @depth more frames down (no tail calls: the frames stay) */
static __attribute__((noinline)) void *nested(unsigned int depth, unsigned long size)
{
	void *p;

	if (!depth)
		return malloc(size);
	p = nested(depth - 1, size);
	__asm__ volatile("" : : "r"(p) : "memory");
	return p;
}

static void *run(void *arg)
{
	struct worker *w = arg;
	void *ring[RING] = { 0 };
	unsigned long i, n = w->rate > 0 ? (unsigned long)(w->rate * w->secs) : ~0ul;
	double stop = w->t0 + w->secs;

	for (i = 0; i < n; i++) {
		unsigned int slot = i % RING;

		if (w->rate > 0) {
			double due = w->t0 + (double)i / w->rate;

			while (bench_now_s() < due)
				;
		} else if (!(i & 1023) && bench_now_s() >= stop) {
			break;
		}
		free(ring[slot]);
		ring[slot] = nested((unsigned int)(i % w->depth), w->size);
		if (!ring[slot])
			abort();
		sink = ring[slot];
	}
	for (unsigned int k = 0; k < RING; k++)
		free(ring[k]);
	w->pairs = i;
	w->end = bench_now_s();
	return NULL;
}

static int parse_double(const char *s, double *out, const char *what)
{
	char *end;

	errno = 0;
	*out = strtod(s, &end);
	if (errno || *end || *out < 0) {
		fprintf(stderr, "paced: bad %s '%s'\n", what, s);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct worker w[MAX_THREADS];
	unsigned long size = 64, nthreads = 1, total = 0, depth = 16;
	double rate, secs, t0, t1 = 0;
	bool handshake = false;
	char line[64], *end;
	int opt;

	while ((opt = getopt(argc, argv, "t:d:w")) != -1) {
		switch (opt) {
		case 'd':
			errno = 0;
			depth = strtoul(optarg, &end, 10);
			if (errno || *end || !depth || depth > 100) {
				fprintf(stderr, "paced: bad DEPTH '%s' (1-100)\n", optarg);
				return 2;
			}
			break;
		case 't':
			errno = 0;
			nthreads = strtoul(optarg, &end, 10);
			if (errno || *end || !nthreads || nthreads > MAX_THREADS) {
				fprintf(stderr, "paced: bad THREADS '%s' (1-%d)\n", optarg,
					MAX_THREADS);
				return 2;
			}
			break;
		case 'w':
			handshake = true;
			break;
		default:
			goto usage;
		}
	}
	if (argc - optind < 2 || argc - optind > 3)
		goto usage;
	if (parse_double(argv[optind], &rate, "PAIRS_PER_SEC") ||
	    parse_double(argv[optind + 1], &secs, "SECONDS"))
		return 2;
	if (secs <= 0) {
		fprintf(stderr, "paced: SECONDS must be positive\n");
		return 2;
	}
	if (argc - optind == 3) {
		errno = 0;
		size = strtoul(argv[optind + 2], &end, 10);
		if (errno || *end || !size) {
			fprintf(stderr, "paced: bad SIZE '%s'\n", argv[optind + 2]);
			return 2;
		}
	}
	if (handshake) {
		printf("ready\n");
		fflush(stdout);
		if (!fgets(line, sizeof(line), stdin))
			return 1;
	}
	t0 = bench_now_s();
	for (unsigned long k = 0; k < nthreads; k++) {
		int err;

		w[k] = (struct worker){ .rate = rate / (double)nthreads, .secs = secs, .t0 = t0,
					.size = size, .depth = (unsigned int)depth };
		err = nthreads == 1 ? 0 : pthread_create(&w[k].th, NULL, run, &w[k]);
		if (err) {
			fprintf(stderr, "paced: failed to create thread %lu: %s\n", k,
				strerror(err));
			return 1;
		}
	}
	for (unsigned long k = 0; k < nthreads; k++) {
		if (nthreads == 1)
			run(&w[k]);
		else
			pthread_join(w[k].th, NULL);
		total += w[k].pairs;
		if (w[k].end > t1)
			t1 = w[k].end;
	}
	printf("pairs %lu seconds %.3f achieved_per_sec %.0f\n", total, t1 - t0,
	       (double)total / (t1 - t0));
	fflush(stdout);
	if (handshake)
		while (fgets(line, sizeof(line), stdin))
			;
	return 0;
usage:
	fprintf(stderr, "usage: %s [-t THREADS] [-d DEPTH] [-w] PAIRS_PER_SEC SECONDS [SIZE]\n",
		argv[0]);
	return 2;
}
