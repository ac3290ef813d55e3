/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Checks of what a profile asks for, shared by memprofctl, memprofd's control API and its
 * configuration, so that each value is refused the same way, with the same sentence,
 * wherever it comes from. Internal (not exported by libmemprof.so).
 */
#ifndef MP_VALIDATE_H
#define MP_VALIDATE_H

#include <errno.h>
#include <stddef.h>
#include <stdio.h>

/*
 * The smallest sampling rate: one sample per 8 GB allocated on average. The BPF sampler draws
 * its gaps in 32.32 fixed point (bpf/gap.h), exact for rates down to 2^-31 (4.7e-10); far
 * below, the gap constant no longer fits and sampling would be wrong rather than rare.
 */
#define MP_RATE_MIN	1e-9

/* 0 when @rate is in [MP_RATE_MIN, 1], else -EINVAL and a sentence in @err. */
static inline int mp_rate__check(double rate, char *err, size_t err_len)
{
	if (rate >= MP_RATE_MIN && rate <= 1)
		return 0;
	snprintf(err, err_len, "Invalid sampling rate %g: it must be in [%g, 1]", rate,
		 MP_RATE_MIN);
	return -EINVAL;
}

#endif
