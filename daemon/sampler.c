// SPDX-License-Identifier: LGPL-2.1-or-later
#include <errno.h>
#include <math.h>

#include "daemon/sampler.h"

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void mp_rng__seed(struct mp_rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&seed);
	if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3]))
		r->s[0] = 1;
}

static inline uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

/* xoshiro256** (Blackman and Vigna). */
uint64_t mp_rng__next(struct mp_rng *r)
{
	uint64_t *s = r->s;
	uint64_t res = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return res;
}

double mp_rng__uniform(struct mp_rng *r)
{
	/* (k + 1) / 2^53 for k uniform on [0, 2^53): never 0, so ln(U) is finite. */
	return (double)((mp_rng__next(r) >> 11) + 1) * 0x1.0p-53;
}

int mp_sampler__init(struct mp_sampler *s, double rate, uint64_t seed)
{
	if (!(rate > 0.0 && rate <= 1.0))
		return -EINVAL;
	mp_rng__seed(&s->rng, seed);
	s->rate = rate;
	s->inv_log1m = rate < 1.0 ? 1.0 / log1p(-rate) : 0.0;
	return 0;
}

uint64_t mp_sampler__geometric(struct mp_sampler *s)
{
	double g;

	if (s->inv_log1m == 0.0)
		return 1;
	/* G = floor(ln U / ln(1 - λ)) + 1; both logs are <= 0. */
	g = floor(log(mp_rng__uniform(&s->rng)) * s->inv_log1m);
	if (g >= 0x1.0p62)
		return 1ull << 62;
	return (uint64_t)g + 1;
}

uint64_t mp_sampler__binomial(struct mp_sampler *s, uint64_t r)
{
	uint64_t n = 0, pos;

	if (s->inv_log1m == 0.0)
		return r;
	/* Sample points fall at the running sums of independent geometric gaps; count those
	 * within the r words. Costs about rλ + 1 draws. */
	pos = mp_sampler__geometric(s);
	while (pos <= r) {
		n++;
		pos += mp_sampler__geometric(s);
	}
	return n;
}
