// SPDX-License-Identifier: LGPL-2.1-or-later
/* Built -O2 -g -fomit-frame-pointer: unwinding these frames needs their CFI. */
#include <sys/uio.h>
#include <unistd.h>

#include "tests/unit/unwind_helper.h"

uint64_t mp_uw_stack_end;
struct mp_uw_capture mp_uw;

/* process_vm_readv, not memcpy: the copy crosses other frames' ASan redzones. */
void mp_uw_copy(uint64_t sp)
{
	size_t len = mp_uw_stack_end > sp ? mp_uw_stack_end - sp : 0;
	struct iovec local, remote;
	ssize_t n;

	if (len > mp_uw.cap)
		len = mp_uw.cap;
	local = (struct iovec){ mp_uw.stack, len };
	remote = (struct iovec){ (void *)(uintptr_t)sp, len };
	n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
	mp_uw.len = n > 0 ? (size_t)n : 0;
}

static volatile int sink;

__attribute__((noinline)) static int f3(int x)
{
	volatile char pad[48];
	uint64_t ip, sp, bp;

	pad[0] = (char)x;
	/* one asm: ip is the next instruction, where sp is still the captured one */
	mp_uw.line_f3 = __LINE__; __asm__ volatile("lea 0(%%rip), %0; mov %%rsp, %1; mov %%rbp, %2"
							 : "=r"(ip), "=r"(sp), "=r"(bp));
	mp_uw.ip = ip;
	mp_uw.sp = sp;
	mp_uw.bp = bp;
	mp_uw_copy(sp);
	return pad[0] + sink;
}

__attribute__((noinline)) static int f2(int x)
{
	volatile char pad[80];

	pad[1] = (char)x;
	mp_uw.line_f2 = __LINE__; x = f3(x + pad[1]);
	return x + 1;
}

__attribute__((noinline)) int mp_uw_f1(int x)
{
	volatile char pad[16];

	pad[2] = (char)x;
	mp_uw.line_f1 = __LINE__; x = f2(x + pad[2]);
	return x + 2;
}
