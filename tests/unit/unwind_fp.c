// SPDX-License-Identifier: LGPL-2.1-or-later
/* Built without CFI (no .eh_frame, no .debug_frame) but with frame pointers: unwinding these
 * frames needs the frame-pointer fallback. */
#include "tests/unit/unwind_helper.h"

static volatile int sink;

__attribute__((noinline)) static int fp_f3(int x)
{
	uint64_t ip, sp, bp;

	__asm__ volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2"
			 : "=r"(ip), "=r"(sp), "=r"(bp));
	mp_uw.ip = ip;
	mp_uw.sp = sp;
	mp_uw.bp = bp;
	mp_uw_copy(sp);
	return x + sink;
}

__attribute__((noinline)) static int fp_f2(int x)
{
	return fp_f3(x + 1) + 1;
}

__attribute__((noinline)) int mp_uw_fp_f1(int x)
{
	return fp_f2(x + 1) + 2;
}
