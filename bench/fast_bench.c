// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The workload of bench/fast-bench.sh (bench-fast): a mixed-size malloc/free loop. Each of T
 * threads keeps a ring of 256 live blocks; each op frees a random slot and mallocs 16..4096
 * bytes into it (xorshift, fixed seed per thread). Prints, once every thread is done:
 *
 *	elapsed_ns E ops N bytes B
 *
 * E: wall time from the start barrier to the last thread's end (process start-up and the
 * profiler's attach are outside it), N: ops of all threads, B: bytes requested.
 *
 *	fast_bench THREADS OPS_PER_THREAD
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench.h"

#define RING 256

static void *volatile sink;
static pthread_barrier_t start;
static uint64_t ops_per_thread;

static void *run(void *arg)
{
	uint64_t x = 88172645463325252ULL + (uintptr_t)arg * 0x9e3779b97f4a7c15ULL, bytes = 0;
	void *ring[RING] = { 0 };

	pthread_barrier_wait(&start);
	for (uint64_t i = 0; i < ops_per_thread; i++) {
		unsigned int slot;
		size_t size;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		slot = (unsigned int)(x & (RING - 1));
		size = 16 + ((x >> 8) % 4081);
		free(ring[slot]);
		ring[slot] = malloc(size);
		sink = ring[slot];
		bytes += size;
	}
	for (int i = 0; i < RING; i++)
		free(ring[i]);
	return (void *)(uintptr_t)bytes;
}

int main(int argc, char **argv)
{
	unsigned long nth = argc > 1 ? strtoul(argv[1], NULL, 0) : 1;
	pthread_t th[64];
	uint64_t t0, bytes = 0;

	ops_per_thread = argc > 2 ? strtoull(argv[2], NULL, 0) : 4000000;
	if (nth < 1 || nth > 64) {
		fprintf(stderr, "usage: fast_bench THREADS(1-64) OPS_PER_THREAD\n");
		return 2;
	}
	pthread_barrier_init(&start, NULL, (unsigned int)nth + 1);
	for (unsigned long i = 0; i < nth; i++)
		if (pthread_create(&th[i], NULL, run, (void *)(uintptr_t)i))
			return 1;
	pthread_barrier_wait(&start);
	t0 = bench_now_ns();
	for (unsigned long i = 0; i < nth; i++) {
		void *r;

		pthread_join(th[i], &r);
		bytes += (uintptr_t)r;
	}
	printf("elapsed_ns %llu ops %llu bytes %llu\n", (unsigned long long)(bench_now_ns() - t0),
	       (unsigned long long)(nth * ops_per_thread), (unsigned long long)bytes);
	return 0;
}
