// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Workload of the overhead tests (tests/bpf/overhead-*.sh).
 *
 *   ovh_loop pairs N      N x free(malloc(16)), timed: prints "ns_per_pair <mean ns>
 *                         min_batch_ns_per_pair <ns in the fastest batch of 1000>"
 *   ovh_loop hog SECS     malloc/free pairs as fast as possible for SECS seconds, then prints
 *                         "pairs <n> last_second <n>" (pairs done in the last second)
 *   ovh_loop paced SECS   10 pairs every 10 ms for SECS seconds (a light allocator user)
 *   ovh_loop wait         blocks until its stdin is closed (a process to attach to)
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* GCC removes malloc/free pairs whose pointer never escapes. */
static void *volatile sink;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void pair(void)
{
	sink = malloc(16);
	free(sink);
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "pairs")) {
		long n = atol(argv[2]);
		uint64_t t0;

		for (int i = 0; i < 100; i++) /* warm up */
			pair();
		uint64_t best = UINT64_MAX;

		t0 = now_ns();
		for (long i = 0; i < n; i += 1000) {
			uint64_t b0 = now_ns(), d;

			for (long k = i; k < n && k < i + 1000; k++)
				pair();
			d = now_ns() - b0;
			if (i + 1000 <= n && d < best)
				best = d;
		}
		/* the mean, and the best batch of 1000 (robust to preemption on a busy machine) */
		printf("ns_per_pair %.1f min_batch_ns_per_pair %.1f\n",
		       (double)(now_ns() - t0) / (double)(n > 0 ? n : 1),
		       best == UINT64_MAX ? 0.0 : (double)best / 1000.0);
		return 0;
	}
	if (argc == 3 && (!strcmp(argv[1], "hog") || !strcmp(argv[1], "paced"))) {
		uint64_t end = now_ns() + (uint64_t)(atof(argv[2]) * 1e9), n = 0, last = 0;
		bool paced = !strcmp(argv[1], "paced");

		for (uint64_t t = now_ns(); t < end; t = now_ns()) {
			for (int i = 0; i < (paced ? 10 : 1000); i++)
				pair();
			n += paced ? 10 : 1000;
			if (t + 1000000000ull >= end)
				last += paced ? 10 : 1000;
			if (paced)
				usleep(10000);
		}
		printf("pairs %llu last_second %llu\n", (unsigned long long)n,
		       (unsigned long long)last);
		return 0;
	}
	if (argc == 2 && !strcmp(argv[1], "wait")) {
		char c;

		pair();
		while (read(0, &c, 1) > 0)
			;
		return 0;
	}
	fprintf(stderr, "usage: ovh_loop pairs N | hog SECS | paced SECS | wait\n");
	return 2;
}
