/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Chi-square goodness of fit for the sampler tests (unit and bpf tiers): the p-value of a
 * histogram against a binomial distribution, pooling cells whose expected count is below 5.
 * Header-only; link with -lm.
 */
#ifndef MP_TEST_CHISQ_H
#define MP_TEST_CHISQ_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* log P(X = k) for X ~ Binomial(n, p), 0 < p < 1. */
static inline double chisq_log_binom_pmf(uint64_t n, uint64_t k, double p)
{
	return lgamma((double)n + 1) - lgamma((double)k + 1) - lgamma((double)(n - k) + 1) +
	       (double)k * log(p) + (double)(n - k) * log1p(-p);
}

/* Regularized upper incomplete gamma Q(a, x): series for x < a + 1, continued fraction else. */
static inline double chisq_gamma_q(double a, double x)
{
	double gln = lgamma(a);

	if (x <= 0)
		return 1.0;
	if (x < a + 1) {
		double ap = a, sum = 1.0 / a, del = sum;

		for (int i = 0; i < 10000; i++) {
			ap += 1;
			del *= x / ap;
			sum += del;
			if (fabs(del) < fabs(sum) * 1e-15)
				break;
		}
		return 1.0 - sum * exp(-x + a * log(x) - gln);
	} else {
		/* Lentz's method for the continued fraction. */
		double b = x + 1 - a, c = 1.0 / 1e-300, d = 1.0 / b, h = d;

		for (int i = 1; i < 10000; i++) {
			double an = -i * (i - a), del;

			b += 2;
			d = an * d + b;
			if (fabs(d) < 1e-300)
				d = 1e-300;
			c = b + an / c;
			if (fabs(c) < 1e-300)
				c = 1e-300;
			d = 1.0 / d;
			del = d * c;
			h *= del;
			if (fabs(del - 1) < 1e-15)
				break;
		}
		return exp(-x + a * log(x) - gln) * h;
	}
}

/*
 * @hist[k] = number of observations equal to k, for k in [0, @len - 1); @hist[len - 1] counts
 * every observation >= len - 1 (the tail). @total = all observations. Compares with
 * Binomial(@n, @p): cells are pooled left to right until each expected count is >= 5, and a
 * last cell short of 5 joins the one before. Returns the p-value; *@chi2 and *@df get the
 * statistic and the degrees of freedom.
 */
static inline double chisq_binomial_test(const uint64_t *hist, size_t len, uint64_t total,
					 uint64_t n, double p, double *chi2, int *df)
{
	double stat = 0, acc_e = 0, acc_o = 0, prev_e = 0, prev_o = 0, used_e = 0;
	int cells = 0;

	for (size_t k = 0; k < len; k++) {
		double e, o = (double)hist[k];

		if (k + 1 < len)
			e = k <= n ? (double)total * exp(chisq_log_binom_pmf(n, k, p)) : 0;
		else
			e = (double)total - used_e;	/* P(X >= len - 1) */
		used_e += e;
		acc_e += e;
		acc_o += o;
		if (acc_e >= 5 || k + 1 == len) {
			if (acc_e < 5 && cells > 0) {
				/* too small a last cell: merge it into the previous one */
				stat -= (prev_o - prev_e) * (prev_o - prev_e) / prev_e;
				acc_e += prev_e;
				acc_o += prev_o;
				cells--;
			}
			if (acc_e > 0)
				stat += (acc_o - acc_e) * (acc_o - acc_e) / acc_e;
			cells++;
			prev_e = acc_e;
			prev_o = acc_o;
			acc_e = acc_o = 0;
		}
	}
	*chi2 = stat;
	*df = cells - 1;
	if (*df < 1)
		return 1.0;
	return chisq_gamma_q(*df / 2.0, stat / 2.0);
}

#endif
