/* SPDX-License-Identifier: (LGPL-2.1-or-later OR BSD-2-Clause) */
/*
 * Geometric gaps between sample points without floating point (docs/sampling.md), shared by the
 * BPF programs and user space (tests/unit/test_gap.c runs this very code).
 *
 * A thread's countdown c is the number of words up to and including the next sample point:
 * G ~ Geometric(rate) on {1, 2, ...}. With U = (u + 1) / 2^32, u uniform on 32 bits:
 *
 *	G - 1 = floor(-log2(U) * K),	K = ln 2 / -ln(1 - rate)
 *
 * because P(G - 1 >= k) = P(U <= 2^(-k/K)) = (1 - rate)^k. -log2(U) = 32 - log2(u + 1) is computed
 * in 32.32 fixed point from the position of the top bit and a 1025-entry table of
 * log2(1 + i/1024) with linear interpolation (error < 1e-7). K comes from the daemon as 32.32
 * fixed point (struct mp_proc_cfg.gap_k); the 37.32 x 32.32 product is taken exactly in 64-bit
 * halves, so G is exact to the table's precision for any rate down to 2^-31.
 */
#ifndef MEMPROF_GAP_H
#define MEMPROF_GAP_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#include "gap_table.h"

#define MP_GAP_INLINE static inline __attribute__((always_inline))

/* floor(log2(x)) for x >= 1. */
MP_GAP_INLINE __u32 mp_gap_ilog2(__u64 x)
{
	__u32 n = 0;

	/* halve the range that holds the highest set bit: 32, 16, 8, 4, 2, 1 bits */
	for (__u32 s = 32; s; s >>= 1) {
		if (x >> s) {
			n += s;
			x >>= s;
		}
	}
	return n;
}

/* log2(x) in 32.32 fixed point, for 1 <= x <= 2^32. */
MP_GAP_INLINE __u64 mp_gap_log2_q32(__u64 x)
{
	__u32 n = mp_gap_ilog2(x);
	__u64 frac, r, lo, hi;
	__u32 i;

	if (n > 32)
		n = 32;
	/* The bits below the top one, as a 32-bit binary fraction of [0, 1). */
	frac = (x << (32 - n)) & 0xffffffffULL;
	i = (__u32)(frac >> (32 - MP_GAP_TAB_BITS)) & ((1u << MP_GAP_TAB_BITS) - 1);
	r = frac & ((1ULL << (32 - MP_GAP_TAB_BITS)) - 1);
	lo = MP_GAP_LOG2_TAB[i];
	hi = MP_GAP_LOG2_TAB[i + 1];
	return ((__u64)n << 32) + lo + (((hi - lo) * r) >> (32 - MP_GAP_TAB_BITS));
}

/* floor(a * b / 2^64) for a < 2^38 and any b, in 64-bit arithmetic. */
MP_GAP_INLINE __u64 mp_gap_mulhi(__u64 a, __u64 b)
{
	__u64 ah = a >> 32, al = a & 0xffffffffULL;
	__u64 bh = b >> 32, bl = b & 0xffffffffULL;
	__u64 low = al * bl, m1 = al * bh, m2 = ah * bl;
	__u64 carry = ((m1 & 0xffffffffULL) + (m2 & 0xffffffffULL) + (low >> 32)) >> 32;

	return ah * bh + (m1 >> 32) + (m2 >> 32) + carry;
}

/*
 * One geometric gap G >= 1 from a uniform 32-bit @u and @k_q32 = K in 32.32 fixed point.
 * The result saturates at 2^63.
 */
MP_GAP_INLINE __u64 mp_gap_draw(__u32 u, __u64 k_q32)
{
	/* -log2(U) = 32 - log2(u + 1), in [0, 32], as 32.32 */
	__u64 neglog = (32ULL << 32) - mp_gap_log2_q32((__u64)u + 1);
	__u64 g = mp_gap_mulhi(neglog, k_q32);

	if (g >= (1ULL << 63))
		g = (1ULL << 63) - 1;
	return g + 1;
}

/* Words of a block of @size bytes: ceil(size / 8) + 1 header word, without overflow. */
MP_GAP_INLINE __u64 mp_gap_words(__u64 size)
{
	return (size >> 3) + ((size & 7) != 0) + 1;
}

#ifndef __bpf__
#include <math.h>
#include <stdint.h>

/* K = ln 2 / -ln(1 - rate) in 32.32 fixed point, for rate in (0, 1); 0 otherwise. */
static inline __u64 mp_gap_k_q32(double rate)
{
	double k;

	if (!(rate > 0.0 && rate < 1.0))
		return 0;
	k = M_LN2 / -log1p(-rate) * 4294967296.0;
	if (k >= 18446744073709549568.0)
		return UINT64_MAX;
	return (__u64)(k + 0.5);
}
#endif

#endif /* MEMPROF_GAP_H */
