// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * A static program without libc and without any allocator (built -nostdlib -static): attaching
 * to it must fail with -ENOENT and a reason. Same sync protocol as probe_wl (fds 3 and 4).
 */
static long sys3(long nr, long a, long b, long c)
{
	long ret;

	__asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b), "d"(c)
			 : "rcx", "r11", "memory");
	return ret;
}

void _start(void);

__attribute__((noreturn)) void _start(void)
{
	char c = 'r';

	sys3(1 /* write */, 3, (long)&c, 1);
	sys3(0 /* read */, 4, (long)&c, 1);
	sys3(60 /* exit */, 0, 0, 0);
	__builtin_unreachable();
}
