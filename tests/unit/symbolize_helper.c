// SPDX-License-Identifier: LGPL-2.1-or-later
/* Built -O2 -g: a plain function and one with an always-inlined helper (see the header). */
#include "tests/unit/symbolize_helper.h"

void *volatile mp_captured_ra;
volatile int mp_line_plain, mp_line_inner, mp_line_outer, mp_line_cxx;
static volatile int sink;

__attribute__((noinline)) void mp_capture(void)
{
	mp_captured_ra = __builtin_return_address(0);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void mp_plain_function(int x)
{
	sink = x;
	mp_line_plain = __LINE__; mp_capture();
	sink = x + 1;
}

static inline __attribute__((always_inline)) void inlined_helper(int x)
{
	sink = x * 3;
	mp_line_inner = __LINE__; mp_capture();
	sink = x + 7;
}

__attribute__((noinline)) void mp_outer_function(int x)
{
	sink = x;
	mp_line_outer = __LINE__; inlined_helper(x);
	sink = x + 1;
}
