// SPDX-License-Identifier: LGPL-2.1-or-later
/* A static program without libc and without any allocator: `memprofctl record` must refuse it
 * with a message naming the process. */
#include <sys/syscall.h>

void _start(void);

void _start(void)
{
	/* exit(0) */
	__asm__ volatile("syscall" : : "a"(SYS_exit), "D"(0) : "rcx", "r11", "memory");
	__builtin_unreachable();
}
