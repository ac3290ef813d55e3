// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * paced: malloc+free pairs at a fixed rate, for the profiler's event throughput (bench/run).
 *
 *   paced PAIRS_PER_SEC SECONDS [SIZE]
 *
 * A ring of 256 live blocks of SIZE bytes (default 64); pair i is issued at t0 + i / rate
 * (busy-waiting on CLOCK_MONOTONIC in between), so the allocator call rate is fixed however fast
 * the probes are, unless they are too slow to keep up. Prints
 * "pairs <n> seconds <s> achieved_per_sec <rate>".
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define RING 256

static void *volatile sink;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double rate, secs, t0, t1;
	unsigned long size = 64, n;
	void *ring[RING] = { 0 };
	char *end;

	if (argc < 3 || argc > 4) {
		fprintf(stderr, "usage: %s PAIRS_PER_SEC SECONDS [SIZE]\n", argv[0]);
		return 2;
	}
	errno = 0;
	rate = strtod(argv[1], &end);
	if (errno || *end || rate <= 0) {
		fprintf(stderr, "paced: bad PAIRS_PER_SEC '%s'\n", argv[1]);
		return 2;
	}
	secs = strtod(argv[2], &end);
	if (errno || *end || secs <= 0) {
		fprintf(stderr, "paced: bad SECONDS '%s'\n", argv[2]);
		return 2;
	}
	if (argc == 4) {
		size = strtoul(argv[3], &end, 10);
		if (errno || *end || !size) {
			fprintf(stderr, "paced: bad SIZE '%s'\n", argv[3]);
			return 2;
		}
	}
	n = (unsigned long)(rate * secs);
	t0 = now_s();
	for (unsigned long i = 0; i < n; i++) {
		double due = t0 + (double)i / rate;
		unsigned int slot = i % RING;

		while (now_s() < due)
			;
		free(ring[slot]);
		ring[slot] = malloc(size);
		if (!ring[slot])
			abort();
		sink = ring[slot];
	}
	t1 = now_s();
	for (unsigned int i = 0; i < RING; i++)
		free(ring[i]);
	printf("pairs %lu seconds %.3f achieved_per_sec %.0f\n", n, t1 - t0, (double)n / (t1 - t0));
	return 0;
}
