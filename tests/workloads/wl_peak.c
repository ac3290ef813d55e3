// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * A workload whose peak and temporary allocations are known, for
 * tests/bpf/report-peak-recorded.sh:
 *   1. wl_peak_hold: N blocks of 4 KiB allocated and all held: the live heap peaks here, at
 *      N x words(4096) x 8 bytes, then all are freed;
 *   2. wl_temp: M blocks of 256 bytes, each freed right after its allocation (temporary);
 *   3. wl_long: K blocks of 1 KiB held across a 300 ms sleep, then freed (not temporary at any
 *      threshold under 300 ms, whatever the machine's speed).
 * Prints TRUTH lines as wl_alloc does, then "PEAK bytes=B" (the phase-1 peak in requested bytes,
 * whole words here, nothing else of ours being live then: stdio's buffer is static).
 */
#include <stdlib.h>
#include <time.h>

#include "wl_truth.h"

#define N_HOLD	2000
#define M_TEMP	100000
#define K_LONG	400

static char outbuf[4096];

WL_SITE(wl_peak_hold, (void), malloc(4096))
WL_SITE(wl_long, (void), malloc(1024))

__attribute__((noipa)) static void wl_temp(void)
{
	void *p = malloc(256);

	wl_sink = p;
	free(p);
}

int main(void)
{
	static void *held[N_HOLD > K_LONG ? N_HOLD : K_LONG];
	struct timespec ts = { 0, 300 * 1000 * 1000 };

	setvbuf(stdout, outbuf, _IOFBF, sizeof(outbuf));
	for (int i = 0; i < N_HOLD; i++)
		held[i] = wl_peak_hold();
	for (int i = 0; i < N_HOLD; i++)
		free(held[i]);
	for (int i = 0; i < M_TEMP; i++)
		wl_temp();
	for (int i = 0; i < K_LONG; i++)
		held[i] = wl_long();
	nanosleep(&ts, NULL);
	for (int i = 0; i < K_LONG; i++)
		free(held[i]);
	truth("wl_peak_hold", N_HOLD * words(4096), 0, N_HOLD);
	truth("wl_temp", M_TEMP * words(256), 0, M_TEMP);
	truth("wl_long", K_LONG * words(1024), 0, K_LONG);
	printf("PEAK bytes=%llu\n", (unsigned long long)(N_HOLD * 4096));
	fflush(stdout);
	return 0;
}
