/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A tiny test harness in the style of selftests/bpf: ASSERT_* macros print what differed and
 * return false; each test function is one result line ("PASS: name" / "FAIL: name") that
 * tests/run counts. A test binary includes this header once and lists its tests in main():
 *
 *	int main(void) { RUN(test_roundtrip); RUN(test_v3); return test_exit(); }
 */
#ifndef MP_TEST_H
#define MP_TEST_H

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static int test_failures;
static bool test_ok;

#define ASSERT_TRUE(cond, what)                                                               \
	({                                                                                     \
		bool ___ok = (cond);                                                           \
		if (!___ok) {                                                                  \
			fprintf(stderr, "%s:%d: %s: '%s' is false\n", __FILE__, __LINE__, (what),      \
				#cond);                                                        \
			test_ok = false;                                                       \
		}                                                                              \
		___ok;                                                                         \
	})

#define ASSERT_EQ(actual, expected, what)                                                     \
	({                                                                                     \
		long long ___a = (long long)(actual), ___e = (long long)(expected);            \
		bool ___ok = ___a == ___e;                                                     \
		if (!___ok) {                                                                  \
			fprintf(stderr, "%s:%d: %s: actual %lld != expected %lld\n", __FILE__,  \
				__LINE__, (what), ___a, ___e);                                 \
			test_ok = false;                                                       \
		}                                                                              \
		___ok;                                                                         \
	})

#define ASSERT_STREQ(actual, expected, what)                                                  \
	({                                                                                     \
		const char *___a = (actual), *___e = (expected);                               \
		bool ___ok = ___a && ___e && !strcmp(___a, ___e);                              \
		if (!___ok) {                                                                  \
			fprintf(stderr, "%s:%d: %s: actual '%s' != expected '%s'\n", __FILE__,  \
				__LINE__, (what), ___a ? ___a : "(null)", ___e ? ___e : "(null)");     \
			test_ok = false;                                                       \
		}                                                                              \
		___ok;                                                                         \
	})

/* An error code: 0 or positive is success. */
#define ASSERT_OK(res, what)                                                                  \
	({                                                                                     \
		long long ___r = (long long)(res);                                             \
		bool ___ok = ___r >= 0;                                                        \
		if (!___ok) {                                                                  \
			fprintf(stderr, "%s:%d: %s failed: %lld (%s)\n", __FILE__, __LINE__,    \
				(what), ___r, strerror((int)-___r));                           \
			test_ok = false;                                                       \
		}                                                                              \
		___ok;                                                                         \
	})

/* The result line of the test that just ran, named @name. */
static inline void test_result(const char *name)
{
	printf("%s: %s\n", test_ok ? "PASS" : "FAIL", name);
	fflush(stdout);
	if (!test_ok)
		test_failures++;
}

#define RUN(fn)                                                                               \
	do {                                                                                   \
		test_ok = true;                                                                \
		fn();                                                                          \
		test_result(#fn);                                                              \
	} while (0)

/* A table-driven test: fn(arg) is one result line, named @name. */
#define RUN_CASE(name, fn, arg)                                                               \
	do {                                                                                   \
		test_ok = true;                                                                \
		fn(arg);                                                                       \
		test_result(name);                                                             \
	} while (0)

static inline int test_exit(void)
{
	return test_failures ? 1 : 0;
}

#endif
