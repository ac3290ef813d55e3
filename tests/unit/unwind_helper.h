/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Call chains for test_unwind: f1 -> f2 -> f3, where f3 captures its registers and copies the
 * stack from its sp up to mp_uw_stack_end, as BPF would at a probe. unwind_helper.c is built
 * -O2 -g -fomit-frame-pointer (CFI only), unwind_fp.c -fno-omit-frame-pointer without any CFI
 * (frame pointers only).
 */
#ifndef MP_UNWIND_HELPER_H
#define MP_UNWIND_HELPER_H

#include <stddef.h>
#include <stdint.h>

struct mp_uw_capture {
	uint64_t ip, sp, bp;
	unsigned char *stack;		/* the copy, from sp */
	size_t len;
	size_t cap;			/* size of stack */
	int line_f3, line_f2, line_f1;	/* lines of the capture and of the calls */
};

extern uint64_t mp_uw_stack_end;	/* copy up to here (end of the [stack] mapping) */
extern struct mp_uw_capture mp_uw;

int mp_uw_f1(int x);			/* CFI only */
int mp_uw_fp_f1(int x);			/* frame pointers only */

/* Copy [sp, mp_uw_stack_end) into mp_uw; shared by both files. */
void mp_uw_copy(uint64_t sp);

#endif
