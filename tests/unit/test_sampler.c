// SPDX-License-Identifier: LGPL-2.1-or-later
/* The daemon half of the sampler: binomial completion and geometric gaps (docs/sampling.md). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "daemon/engine/sampler.h"
#include "tests/unit/chisq.h"
#include "tests/unit/test.h"

#define HIST_LEN 512

static void test_rng_reproducible(void)
{
	struct mp_rng a, b, c;
	int differ = 0;

	mp_rng__seed(&a, 42);
	mp_rng__seed(&b, 42);
	mp_rng__seed(&c, 43);
	for (int i = 0; i < 1000; i++) {
		uint64_t x = mp_rng__next(&a);

		ASSERT_EQ(x, mp_rng__next(&b), "same seed, same stream");
		differ += x != mp_rng__next(&c);
	}
	ASSERT_TRUE(differ > 990, "another seed gives another stream");
	for (int i = 0; i < 100000; i++) {
		double u = mp_rng__uniform(&a);

		if (!ASSERT_TRUE(u > 0 && u <= 1, "uniform on (0, 1]"))
			break;
	}
}

static void test_init_rejects_bad_rates(void)
{
	struct mp_sampler s;

	ASSERT_EQ(mp_sampler__init(&s, 0, 1), -EINVAL, "rate 0");
	ASSERT_EQ(mp_sampler__init(&s, -0.5, 1), -EINVAL, "negative rate");
	ASSERT_EQ(mp_sampler__init(&s, 1.5, 1), -EINVAL, "rate above 1");
	ASSERT_EQ(mp_sampler__init(&s, NAN, 1), -EINVAL, "rate NaN");
	ASSERT_OK(mp_sampler__init(&s, 1, 1), "rate 1");
	ASSERT_EQ(mp_sampler__binomial(&s, 1234), 1234, "rate 1 samples every word");
	ASSERT_EQ(mp_sampler__geometric(&s), 1, "rate 1 gap");
	ASSERT_EQ(mp_sampler__nsamples(&s, 0), 1, "first point only");
}

/* Binomial(r, λ) by gap counting, against the exact binomial. */
static void check_binomial(uint64_t r, double rate, unsigned int draws, uint64_t seed)
{
	static uint64_t hist[HIST_LEN];
	struct mp_sampler s;
	double chi2, p;
	int df;

	memset(hist, 0, sizeof(hist));
	ASSERT_OK(mp_sampler__init(&s, rate, seed), "init");
	for (unsigned int i = 0; i < draws; i++) {
		uint64_t k = mp_sampler__binomial(&s, r);

		if (!ASSERT_TRUE(k <= r, "at most r samples"))
			return;
		hist[k < HIST_LEN - 1 ? k : HIST_LEN - 1]++;
	}
	p = chisq_binomial_test(hist, HIST_LEN, draws, r, rate, &chi2, &df);
	if (!ASSERT_TRUE(p > 0.001, "binomial chi-square p > 0.001"))
		fprintf(stderr, "  r=%" PRIu64 " rate=%g: chi2=%.2f df=%d p=%g\n", r, rate, chi2,
			df, p);
	ASSERT_TRUE(df >= 1, "enough cells for a test");
}

static void test_binomial_chisq(void)
{
	check_binomial(10, 0.1, 200000, 1);
	check_binomial(100, 0.01, 200000, 2);
	check_binomial(2000, 0.003, 100000, 3);
	check_binomial(60, 0.5, 100000, 4);
	check_binomial(7, 0.9, 100000, 5);
	check_binomial(100000, 1e-4, 100000, 6);
	check_binomial(300, 0.0001, 100000, 7);	/* mostly zero: tests the tail pooling */
}

/* The geometric gap's mean 1/λ and variance (1-λ)/λ², within 5 standard errors. */
static void test_geometric_moments(void)
{
	const double rates[] = { 1e-4, 1e-2, 0.3 };

	for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++) {
		struct mp_sampler s;
		double lam = rates[i], sum = 0, sq = 0, mean, var, se;
		const int n = 400000;

		ASSERT_OK(mp_sampler__init(&s, lam, 100 + i), "init");
		for (int k = 0; k < n; k++) {
			double g = (double)mp_sampler__geometric(&s);

			sum += g;
			sq += g * g;
		}
		mean = sum / n;
		var = sq / n - mean * mean;
		se = sqrt((1 - lam) / (lam * lam) / n);
		if (!ASSERT_TRUE(fabs(mean - 1 / lam) < 5 * se, "geometric mean 1/λ"))
			fprintf(stderr, "  rate %g: mean %g, expected %g (se %g)\n", lam, mean,
				1 / lam, se);
		ASSERT_TRUE(fabs(var / ((1 - lam) / (lam * lam)) - 1) < 0.05, "geometric variance");
	}
}

/*
 * The whole model end to end in user space: a per-thread countdown c of geometric gaps
 * decides which blocks of w words hold a sample point (what BPF does), the daemon completes
 * with 1 + Binomial(w - c, λ). The histogram over all blocks, n = 0 included, must be
 * Binomial(w, λ), for blocks smaller and larger than the mean gap.
 */
static void check_split(uint64_t w, double lam, unsigned int blocks, uint64_t seed)
{
	static uint64_t hist[HIST_LEN];
	struct mp_sampler bpf, daemon;
	uint64_t c;
	double chi2, p;
	int df;

	memset(hist, 0, sizeof(hist));
	ASSERT_OK(mp_sampler__init(&bpf, lam, seed), "init");
	ASSERT_OK(mp_sampler__init(&daemon, lam, seed + 1000), "init");
	c = mp_sampler__geometric(&bpf);
	for (unsigned int i = 0; i < blocks; i++) {
		uint64_t n = 0;

		if (w < c) {
			c -= w;
		} else {
			n = mp_sampler__nsamples(&daemon, w - c);
			c = mp_sampler__geometric(&bpf);
		}
		hist[n < HIST_LEN - 1 ? n : HIST_LEN - 1]++;
	}
	p = chisq_binomial_test(hist, HIST_LEN, blocks, w, lam, &chi2, &df);
	if (!ASSERT_TRUE(p > 0.001, "split sampling chi-square p > 0.001"))
		fprintf(stderr, "  w=%" PRIu64 " rate=%g: chi2=%.2f df=%d p=%g\n", w, lam, chi2,
			df, p);
}

static void test_split_model(void)
{
	check_split(17, 0.01, 400000, 11);
	check_split(1001, 0.01, 100000, 12);
	check_split(30000, 1e-4, 200000, 13);
	check_split(3, 0.5, 200000, 14);
}

int main(void)
{
	RUN(test_rng_reproducible);
	RUN(test_init_rejects_bad_rates);
	RUN(test_binomial_chisq);
	RUN(test_geometric_moments);
	RUN(test_split_model);
	return test_exit();
}
