// SPDX-License-Identifier: LGPL-2.1-or-later
/* The one duration parser and byte formatter of memprofctl and its reports (userspace-lib/units.h). */
#include <errno.h>
#include <stdint.h>

#include "tests/unit/test.h"
#include "userspace-lib/units.h"

static void test_durations(void)
{
	static const struct {
		const char *s;
		uint64_t us;
	} good[] = {
		{ "1.5s", 1500000 }, { "500ms", 500000 }, { "2", 2000000 }, { "20us", 20 },
		{ "20\u00b5s", 20 }, { "2m", 120000000 }, { "2min", 120000000 },
		{ "1h", 3600000000ull }, { "0", 0 }, { "0.0000015s", 2 }, { "0.4us", 0 },
		{ "4000000000s", 4000000000000000ull },
	};
	static const char *const bad[] = { "", "x", "-1", "-0", "1.5q", "nan", "inf", "1s2", "s",
					   " 1s", "+1s", ".s", "1 s", "1S" };
	static const char *const huge[] = { "1e30", "18446744073710s", "6000000000000h" };
	uint64_t us;

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		us = 42;
		ASSERT_OK(mp_parse_duration(good[i].s, &us), good[i].s);
		ASSERT_EQ(us, good[i].us, good[i].s);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		us = 42;
		ASSERT_EQ(mp_parse_duration(bad[i], &us), -EINVAL, bad[i]);
		ASSERT_EQ(us, 42, "left as it was");
	}
	for (size_t i = 0; i < sizeof(huge) / sizeof(huge[0]); i++)
		ASSERT_EQ(mp_parse_duration(huge[i], &us), -ERANGE, huge[i]);
}

static void test_bytes(void)
{
	static const struct {
		double b;
		const char *s;
	} cases[] = {
		{ 0, "0 B" }, { 12, "12 B" }, { 1023, "1023 B" }, { 1024, "1.0 KiB" },
		{ 1536, "1.5 KiB" }, { 10.4 * 1024 * 1024, "10.4 MiB" }, { -300, "-300 B" },
		{ -3.25 * 1024 * 1024, "-3.2 MiB" }, { 5.0 * (1ull << 40), "5.0 TiB" },
		{ 2048.0 * (1ull << 50), "2048.0 PiB" },
	};
	char buf[32];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		ASSERT_STREQ(mp_fmt_bytes(cases[i].b, buf, sizeof(buf)), cases[i].s, cases[i].s);
}

int main(void)
{
	RUN(test_durations);
	RUN(test_bytes);
	return test_exit();
}
