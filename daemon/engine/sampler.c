// SPDX-License-Identifier: LGPL-2.1-or-later
#include <errno.h>
#include <math.h>

#include "daemon/engine/sampler.h"
#include "userspace-lib/rng.h"

void mp_rng__seed(struct mp_rng *r, uint64_t seed)
{
	mp_xoshiro256_seed(r->s, seed);
	if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3]))
		r->s[0] = 1;
}

uint64_t mp_rng__next(struct mp_rng *r)
{
	return mp_xoshiro256_next(r->s);
}

double mp_rng__uniform(struct mp_rng *r)
{
	return mp_uniform53(mp_rng__next(r));
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
