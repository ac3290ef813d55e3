// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The geometric draw of bpf/gap.h (the code the BPF programs run): its log table, and the
 * distribution of G against Geometric(rate) by chi-square at several rates, with a fixed seed.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "bpf/gap.h"
#include "tests/unit/chisq.h"
#include "tests/unit/test.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

/* SplitMix64: a fixed-seed stand-in for bpf_get_prandom_u32(). */
static uint32_t rnd32(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return (uint32_t)((z ^ (z >> 31)) >> 32);
}

static void test_table(void)
{
	for (int i = 0; i <= 1024; i++) {
		double want = log2(1.0 + i / 1024.0) * 4294967296.0;

		if (!ASSERT_TRUE(fabs((double)MP_GAP_LOG2_TAB[i] - want) <= 0.5, "table entry"))
			return;
	}
}

static void test_log2(void)
{
	double worst = 0;

	for (uint64_t x = 1; x <= (1ULL << 32); x = x * 3 / 2 + 1) {
		double got = (double)mp_gap_log2_q32(x) / 4294967296.0, err = fabs(got - log2(x));

		if (err > worst)
			worst = err;
	}
	ASSERT_TRUE(worst < 2e-7, "log2 within 2e-7");
	ASSERT_EQ(mp_gap_log2_q32(1ULL << 32), 32ULL << 32, "log2(2^32)");
	ASSERT_EQ(mp_gap_log2_q32(1), 0, "log2(1)");
}

static void test_mulhi(void)
{
	uint64_t a = (37ULL << 32) + 12345, b = 0xfedcba9876543210ULL;
	unsigned __int128 p = (unsigned __int128)a * b;

	ASSERT_EQ(mp_gap_mulhi(a, b), (uint64_t)(p >> 64), "mulhi");
	for (int i = 0; i < 100000; i++) {
		uint64_t x = ((uint64_t)rnd32() << 6) ^ rnd32(), y = ((uint64_t)rnd32() << 32) | rnd32();

		x &= (1ULL << 38) - 1;
		if (!ASSERT_EQ(mp_gap_mulhi(x, y), (uint64_t)(((unsigned __int128)x * y) >> 64),
			       "mulhi random"))
			return;
	}
}

static void test_words(void)
{
	ASSERT_EQ(mp_gap_words(0), 1, "0 bytes");
	ASSERT_EQ(mp_gap_words(1), 2, "1 byte");
	ASSERT_EQ(mp_gap_words(8), 2, "8 bytes");
	ASSERT_EQ(mp_gap_words(9), 3, "9 bytes");
	ASSERT_EQ(mp_gap_words(UINT64_MAX), (UINT64_MAX >> 3) + 2, "no overflow");
}

/*
 * Chi-square of N draws against Geometric(rate), on ~100 cells of (nearly) equal probability:
 * cell edges at quantiles, probabilities from the exact CDF P(G <= k) = 1 - (1 - rate)^k.
 */
static double gap_pvalue(double rate, long n, double *mean)
{
	enum { CELLS = 100 };
	uint64_t edge[CELLS + 1], cnt[CELLS + 1] = { 0 };
	uint64_t k = mp_gap_k_q32(rate);
	double chi = 0, sum = 0, q = log1p(-rate);
	int ncell = 0;

	/* edges: the smallest k with CDF(k) >= j / CELLS, deduplicated; the last cell is open */
	for (int j = 1; j < CELLS; j++) {
		uint64_t e = (uint64_t)ceil(log1p(-(double)j / CELLS) / q);

		if (e < 1)
			e = 1;
		if (ncell == 0 || e > edge[ncell - 1])
			edge[ncell++] = e;
	}
	for (long i = 0; i < n; i++) {
		uint64_t g = mp_gap_draw(rnd32(), k);
		int lo = 0, hi = ncell;

		sum += (double)g;
		while (lo < hi) { /* first edge >= g */
			int mid = (lo + hi) / 2;

			if (edge[mid] >= g)
				hi = mid;
			else
				lo = mid + 1;
		}
		cnt[lo]++;
	}
	for (int c = 0; c <= ncell; c++) {
		double lo = c ? -expm1((double)edge[c - 1] * q) : 0;
		double hi = c < ncell ? -expm1((double)edge[c] * q) : 1;
		double exp_n = (hi - lo) * n;

		chi += ((double)cnt[c] - exp_n) * ((double)cnt[c] - exp_n) / exp_n;
	}
	*mean = sum / n;
	return chisq_gamma_q(ncell / 2.0, chi / 2.0); /* ncell + 1 cells, ncell degrees of freedom */
}

static void test_distribution(void)
{
	const double rates[] = { 0.5, 0.1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6 };

	for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++) {
		double mean, p = gap_pvalue(rates[i], 400000, &mean);
		double se = sqrt((1 - rates[i]) / (rates[i] * rates[i]) / 400000);

		printf("# rate %g: p = %.4f, mean %.2f (expected %.2f)\n", rates[i], p, mean,
		       1 / rates[i]);
		ASSERT_TRUE(p > 0.001, "chi-square p > 0.001");
		ASSERT_TRUE(fabs(mean - 1 / rates[i]) < 5 * se, "mean within 5 SE");
	}
}

/* The test can fail: a gap drawn at the wrong rate is rejected. */
static void test_detects_wrong_rate(void)
{
	double mean, p;
	uint64_t saved = rng_state;

	/* draw with K of rate 0.0105 but test against 0.01 */
	{
		enum { N = 400000 };
		uint64_t k = mp_gap_k_q32(0.0105);
		double chi_mean = 0;

		for (int i = 0; i < N; i++)
			chi_mean += (double)mp_gap_draw(rnd32(), k);
		mean = chi_mean / N;
	}
	p = fabs(mean - 100) / sqrt(0.99 / 1e-4 / 400000);
	ASSERT_TRUE(p > 5, "a 5% rate error is visible");
	rng_state = saved;
}

int main(void)
{
	RUN(test_table);
	RUN(test_log2);
	RUN(test_mulhi);
	RUN(test_words);
	RUN(test_distribution);
	RUN(test_detects_wrong_rate);
	return test_exit();
}
