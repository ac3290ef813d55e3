// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * stk_c: allocations through a known call chain in code built WITHOUT frame pointers
 * (-fomit-frame-pointer -O2 -g, see daemon/stacks/build.mk): main -> stk_level1 -> stk_level2 ->
 * stk_site, which allocates through the always-inlined stk_inline_alloc(). DWARF unwinding must
 * give the whole chain, with the inlined helper as its own location of stk_site's frame, across
 * stack pages that were never touched (stk_level1).
 *
 *	stk_c [ITERATIONS [PAUSE_US]]	(default 20000 blocks of 1 KiB, each freed at once;
 *					 PAUSE_US: sleep after each, default 0)
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

void *volatile stk_sink;
void stk_site(size_t n);
void stk_level2(size_t n, int iters, long pause_us);
void stk_level1(size_t n, int iters, long pause_us);

static inline __attribute__((always_inline)) void *stk_inline_alloc(size_t n)
{
	void *p = malloc(n);

	if (p)
		memset(p, 0x5a, 16);
	return p;
}

__attribute__((noinline, noipa)) void stk_site(size_t n)
{
	stk_sink = stk_inline_alloc(n);
	free(stk_sink);
}

/* The calls are not in tail position (the volatile accesses after them), so every frame stays
 * on the stack; noipa keeps GCC from cloning or inlining them. */
__attribute__((noinline, noipa)) void stk_level2(size_t n, int iters, long pause_us)
{
	struct timespec ts = { .tv_nsec = pause_us * 1000 };

	for (int i = 0; i < iters; i++) {
		stk_site(n);
		if (pause_us)
			nanosleep(&ts, NULL);
	}
	stk_sink = NULL;
}

/*
 * stk_level1's frame holds 3 pages of which only the lowest byte is ever written (built without
 * -fstack-clash-protection, as Debian builds): the stack pages above it are never faulted in,
 * and a stack copy must read across them to reach main.
 */
__attribute__((noinline, noipa)) void stk_level1(size_t n, int iters, long pause_us)
{
	char untouched[3 * 4096];

	untouched[0] = 1;
	stk_sink = untouched;
	stk_level2(n, iters, pause_us);
	stk_sink = NULL;
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 20000;
	long pause_us = argc > 2 ? atol(argv[2]) : 0;

	if (pause_us < 0 || pause_us > 999999)
		pause_us = 0;
	stk_level1(1024, iters, pause_us);
	stk_sink = NULL;
	return 0;
}
