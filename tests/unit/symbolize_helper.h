/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Functions with known source positions for test_symbolize and test_unwind (symbolize_helper.c,
 * symbolize_cxx.cc): each stores the return address of its call to mp_capture() and the line
 * of that call. */
#ifndef MP_SYMBOLIZE_HELPER_H
#define MP_SYMBOLIZE_HELPER_H

#ifdef __cplusplus
extern "C" {
#endif

extern void *volatile mp_captured_ra;	/* return address of the last mp_capture() call */
extern volatile int mp_line_plain;	/* line of the call in mp_plain_function() */
extern volatile int mp_line_inner;	/* line of the call in the inlined helper */
extern volatile int mp_line_outer;	/* line of the inlined call in mp_outer_function() */
extern volatile int mp_line_cxx;	/* line of the call in ns::Class::method() */

void mp_capture(void);
void mp_plain_function(int x);
void mp_outer_function(int x);
int mp_call_cxx(int x);

#ifdef __cplusplus
}
#endif

#endif
