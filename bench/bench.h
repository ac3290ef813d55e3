/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the bench programs share: a monotonic clock and a fast pseudo-random sequence. */
#ifndef MEMPROF_BENCH_H
#define MEMPROF_BENCH_H

#include <stdint.h>
#include <time.h>

static inline uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline double bench_now_s(void)
{
	return (double)bench_now_ns() / 1e9;
}

static inline double bench_now_ms(void)
{
	return (double)bench_now_ns() / 1e6;
}

/* Marsaglia's xorshift64: @s must not start at 0. */
static inline uint64_t bench_xorshift64(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

#endif
