/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The result lines of the bpf tier's checkers (trace_check.c, usdt_check.c): "PASS: ..." or
 * "FAIL: ...", which tests/run counts, after result_prefix; result_failures counts the FAILs
 * (the checker exits non-zero if any).
 */
#ifndef MP_TESTS_RESULT_H
#define MP_TESTS_RESULT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

static const char *result_prefix = "";
static int result_failures;

static void result(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void result(bool ok, const char *fmt, ...)
{
	va_list ap;

	printf("%s: %s", ok ? "PASS" : "FAIL", result_prefix);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	result_failures += !ok;
}

#endif
