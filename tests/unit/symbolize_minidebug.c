// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * A program shipped the way Fedora ships binaries: stripped, with MiniDebugInfo (an
 * xz-compressed .symtab of the functions .dynsym lacks, in .gnu_debugdata; see
 * daemon/stacks/build.mk). Prints the address of a static function, then waits to be symbolized.
 */
#include <stdio.h>
#include <unistd.h>

static volatile int sink;

__attribute__((noinline)) static void mp_minidebug_static_function(void)
{
	sink++;
}

int main(void)
{
	mp_minidebug_static_function();
	printf("%p\n", (void *)mp_minidebug_static_function);
	fflush(stdout);
	pause();
	return 0;
}
