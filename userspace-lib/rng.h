/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The pseudo-random generator shared by the daemon's sampler (daemon/engine/sampler.c) and the
 * in-process sampler of libmemprof-preload (userspace-lib/preload/pl_core.c): SplitMix64 for
 * seeding, xoshiro256** (Blackman and Vigna) for the stream, and the (0, 1] uniform the
 * geometric draws take the logarithm of.
 *
 * Internal, header-only: static inline functions with no libc calls, so the preload library
 * can use them inside its malloc interposers without allocating or recursing.
 */
#ifndef MP_RNG_H
#define MP_RNG_H

#include <stdint.h>

/* One SplitMix64 step: advances *x and returns a well-mixed 64-bit value. */
static inline uint64_t mp_splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Fills the four xoshiro256** state words from SplitMix64 seeded with seed. */
static inline void mp_xoshiro256_seed(uint64_t s[4], uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		s[i] = mp_splitmix64(&seed);
}

static inline uint64_t mp_rotl64(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

/* xoshiro256**: the next 64 random bits; s must not be all zero. */
static inline uint64_t mp_xoshiro256_next(uint64_t s[4])
{
	uint64_t res = mp_rotl64(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = mp_rotl64(s[3], 45);
	return res;
}

/* (k + 1) / 2^53 for k = the top 53 bits of x: uniform on (0, 1], never 0, so ln(U) is finite. */
static inline double mp_uniform53(uint64_t x)
{
	return (double)((x >> 11) + 1) * 0x1.0p-53;
}

#endif /* MP_RNG_H */
