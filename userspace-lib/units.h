/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Durations and byte counts as people write and read them, by one rule for every command of
 * memprofctl and for its reports (cli/, report/). Unit-tested by tests/unit/test_units.c.
 */
#ifndef MP_UNITS_H
#define MP_UNITS_H

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Parse a duration, a decimal number >= 0 with an optional unit: "us" (or "µs"), "ms", "s"
 * (the default), "m" or "min", "h"; "1.5", "500ms", "2m". *@us gets it in microseconds, rounded
 * to the nearest. Returns 0, -EINVAL (not a duration), or -ERANGE (beyond 2^64 µs). Bounds of
 * their own are the callers'.
 */
static inline int mp_parse_duration(const char *s, uint64_t *us)
{
	static const struct {
		const char *suffix;
		double mult;
	} units[] = {
		{ "", 1e6 }, { "s", 1e6 }, { "ms", 1e3 }, { "us", 1 }, { "\u00b5s", 1 },
		{ "m", 60e6 }, { "min", 60e6 }, { "h", 3600e6 },
	};
	char *end;
	double v;

	if (!(s[0] >= '0' && s[0] <= '9') && s[0] != '.')
		return -EINVAL;	/* no sign, space, "nan" or "inf" */
	errno = 0;
	v = strtod(s, &end);
	if (end == s || errno || !(v >= 0) || isinf(v))
		return -EINVAL;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (!strcmp(end, units[i].suffix)) {
			double r = round(v * units[i].mult);

			if (r >= 18446744073709551616.0)	/* 2^64 */
				return -ERANGE;
			*us = (uint64_t)r;
			return 0;
		}
	}
	return -EINVAL;
}

/*
 * @bytes in binary units into @buf: "12 B", "1.5 KiB", "-3.2 MiB" (one decimal from KiB on,
 * up to PiB). Returns @buf.
 */
static inline const char *mp_fmt_bytes(double bytes, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	unsigned int u = 0;

	while (fabs(bytes) >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		bytes /= 1024;
		u++;
	}
	snprintf(buf, len, "%.*f %s", u ? 1 : 0, bytes, units[u]);
	return buf;
}

#endif
