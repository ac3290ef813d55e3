/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The estimators of requested bytes every figure goes through (report, memprofd, memprofctl).
 * A block of len words (the trace's length: the request rounded up to whole words) is a run of
 * len + 1 words sampled at λ each (one header word, as memtrace counts it), so it carries
 * n ~ Binomial(len + 1, λ) samples. Each sample stands for 8 len / ((len + 1) λ) bytes: the sum
 * over a set of blocks is unbiased for Σ 8 len, with variance Σ (8 len/(len+1))² (len+1)(1-λ)/λ,
 * estimated from the data by Σ n (8 len/(len+1))² (1-λ)/λ². docs/sampling.md §4 derives them.
 */
#ifndef MP_ESTIMATE_H
#define MP_ESTIMATE_H

#include <math.h>
#include <stdint.h>

/* The share of a block's samples that stand for its own words: len / (len + 1). */
static inline double mp_est_weight(uint64_t len)
{
	return (double)len / ((double)len + 1.0);
}

/* Σ n w and Σ n w² over a set of sampled blocks (w = mp_est_weight of each). */
struct mp_est_sum {
	double nw, nw2;
};

/* Count (@sign 1) or uncount (@sign -1) a block of @n samples and weight @w. */
static inline void mp_est_sum__add(struct mp_est_sum *s, double sign_n, double w)
{
	s->nw += sign_n * w;
	s->nw2 += sign_n * w * w;
}

/* Add the blocks counted in @b to @s (the estimators of a sum of processes). */
static inline void mp_est_sum__merge(struct mp_est_sum *s, const struct mp_est_sum *b)
{
	s->nw += b->nw;
	s->nw2 += b->nw2;
}

/* Requested bytes, unbiased. */
static inline double mp_est_bytes(double rate, const struct mp_est_sum *s)
{
	return 8.0 * s->nw / rate;
}

/* The variance of mp_est_bytes(), estimated from the samples, in bytes². */
static inline double mp_est_var_bytes(double rate, const struct mp_est_sum *s)
{
	return s->nw2 > 0 ? 64.0 * (1.0 - rate) * s->nw2 / (rate * rate) : 0.0;
}

static inline double mp_est_se_bytes(double rate, const struct mp_est_sum *s)
{
	return sqrt(mp_est_var_bytes(rate, s));
}

/* One block of @len words and @n samples: its requested bytes and their variance. */
static inline void mp_est_block(double rate, uint64_t len, uint64_t n, double *est, double *var)
{
	struct mp_est_sum s = { 0, 0 };

	mp_est_sum__add(&s, (double)n, mp_est_weight(len));
	*est = mp_est_bytes(rate, &s);
	*var = mp_est_var_bytes(rate, &s);
}

/* Words as memtrace counts them (one header word per block): Σ n / λ. */
static inline double mp_est_words(double rate, uint64_t nsamples)
{
	return (double)nsamples / rate;
}

/*
 * A bound on the standard error of @est_bytes requested bytes when only the estimate is known
 * (memprofd's bus properties): w² <= w gives Var <= 8 est (1 - λ) / λ.
 */
static inline double mp_est_se_bound_bytes(double rate, double est_bytes)
{
	return est_bytes > 0 ? sqrt(8.0 * est_bytes * (1.0 - rate) / rate) : 0.0;
}

#endif
