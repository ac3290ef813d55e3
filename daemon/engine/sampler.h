/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The daemon half of the sampler (docs/sampling.md): BPF decides that a block holds its first
 * sample point and reports r, the words after that point; the block then carries
 * n = 1 + Binomial(r, λ) samples, drawn here by counting geometric gaps that fit in r (the
 * statmemprof method). PRNG: xoshiro256** seeded with SplitMix64, so a run is reproducible
 * with a fixed seed.
 *
 * Owner: the engine component.
 */
#ifndef MEMPROFD_SAMPLER_H
#define MEMPROFD_SAMPLER_H

#include <stdint.h>

struct mp_rng {
	uint64_t s[4];
};

/* Seed the four state words from @seed with SplitMix64 (never all zero). */
void mp_rng__seed(struct mp_rng *r, uint64_t seed);
uint64_t mp_rng__next(struct mp_rng *r);
/* Uniform on (0, 1], 53 bits. */
double mp_rng__uniform(struct mp_rng *r);

struct mp_sampler {
	struct mp_rng rng;
	double rate;		/* λ in (0, 1] */
	double inv_log1m;	/* 1 / ln(1 - λ); 0 when λ = 1 */
};

/* Returns 0, or -EINVAL unless 0 < @rate <= 1. */
int mp_sampler__init(struct mp_sampler *s, double rate, uint64_t seed);
/* A geometric gap on {1, 2, ...}: P(G = k) = (1-λ)^(k-1) λ. */
uint64_t mp_sampler__geometric(struct mp_sampler *s);
/* Binomial(@r, λ): the number of sample points among @r words. */
uint64_t mp_sampler__binomial(struct mp_sampler *s, uint64_t r);
/* Multiplicity of a block whose first sample point is followed by @remaining words. */
static inline uint64_t mp_sampler__nsamples(struct mp_sampler *s, uint64_t remaining)
{
	return 1 + mp_sampler__binomial(s, remaining);
}

/* Words of a block of @size bytes as the model counts them: ceil(size / 8) + 1 header word. */
static inline uint64_t mp_block_words(uint64_t size)
{
	return (size + 7) / 8 + 1;
}

#endif
