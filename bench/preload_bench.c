// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Microbenchmark of libmemprof-preload's fast path (bench/preload-bench.sh runs it with and
 * without the preload, in pairs).
 *
 *	preload_bench isolated	4000 windows of 2000 malloc(64..127)+free pairs: prints the
 *				minimum and the median window, in ns per pair
 *	preload_bench mixed N	a ring of 256 live blocks; each op frees a random slot and
 *				mallocs 16..4096 bytes into it; N ops in windows of 2000:
 *				prints the minimum and the median window, in ns per pair
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

static void *volatile sink;

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	uint64_t x = 88172645463325252ULL;

	if (argc >= 2 && !strcmp(argv[1], "isolated")) {
		enum { WINDOWS = 4000, PAIRS = 2000 };
		static double w[WINDOWS];

		for (int i = 0; i < WINDOWS; i++) {
			uint64_t t0 = bench_now_ns();

			for (int k = 0; k < PAIRS; k++) {
				void *p = malloc(64 + (bench_xorshift64(&x) & 63));

				sink = p;
				free(p);
			}
			w[i] = (double)(bench_now_ns() - t0) / PAIRS;
		}
		qsort(w, WINDOWS, sizeof(w[0]), cmp_double);
		printf("min_ns %.2f median_ns %.2f\n", w[0], w[WINDOWS / 2]);
		return 0;
	}
	if (argc >= 3 && !strcmp(argv[1], "mixed")) {
		enum { PAIRS = 2000 };
		long windows = atol(argv[2]) / PAIRS;
		static void *ring[256];
		double *w;

		if (windows < 1)
			return 2;
		w = calloc((size_t)windows, sizeof(*w));
		for (int i = 0; i < 256; i++)
			ring[i] = malloc(16 + bench_xorshift64(&x) % 4081);
		for (long i = 0; i < windows; i++) {
			uint64_t t0 = bench_now_ns();

			for (int k = 0; k < PAIRS; k++) {
				uint64_t r = bench_xorshift64(&x);
				unsigned slot = r & 255;

				free(ring[slot]);
				ring[slot] = malloc(16 + (r >> 8) % 4081);
				sink = ring[slot];
			}
			w[i] = (double)(bench_now_ns() - t0) / PAIRS;
		}
		qsort(w, (size_t)windows, sizeof(w[0]), cmp_double);
		printf("min_ns %.2f median_ns %.2f\n", w[0], w[windows / 2]);
		free(w);
		for (int i = 0; i < 256; i++)
			free(ring[i]);
		return 0;
	}
	fprintf(stderr, "usage: preload_bench isolated | mixed N\n");
	return 2;
}
