// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * leak: allocates blocks and never frees them, for the profiler's memory per tracked block.
 *
 *   leak COUNT [SIZE]
 *
 * Prints "ready" and waits for a line on stdin. Warm-up: mallocs and frees COUNT blocks of SIZE
 * bytes (default 64) one at a time, so that a profiler's fixed costs (ring-buffer pages, trace
 * buffers, caches, the call stack) are paid with no block left live; prints "warm" and waits for
 * a line. Then mallocs COUNT blocks of SIZE bytes from the same call site, keeps them all live,
 * prints "leaked COUNT" and waits for end of file on stdin before it exits (still without
 * freeing), so the caller can measure what the live blocks cost it alone.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *volatile sink;

/* one call site (one call stack) for every block, warm-up included */
static __attribute__((noinline)) void *block(unsigned long size)
{
	void *p = malloc(size);

	if (p)
		memset(p, 0x5a, 8);
	sink = p;
	return p;
}

int main(int argc, char **argv)
{
	unsigned long count, size = 64;
	char line[64];
	void **blocks;
	char *end;

	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: %s COUNT [SIZE]\n", argv[0]);
		return 2;
	}
	errno = 0;
	count = strtoul(argv[1], &end, 10);
	if (errno || *end || !count) {
		fprintf(stderr, "leak: bad COUNT '%s'\n", argv[1]);
		return 2;
	}
	if (argc == 3) {
		size = strtoul(argv[2], &end, 10);
		if (errno || *end || !size) {
			fprintf(stderr, "leak: bad SIZE '%s'\n", argv[2]);
			return 2;
		}
	}
	blocks = calloc(count, sizeof(*blocks));
	if (!blocks) {
		fprintf(stderr, "leak: failed to allocate %lu pointers: %s\n", count, strerror(errno));
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	for (unsigned long i = 0; i < count; i++)
		free(block(size));
	printf("warm\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	for (unsigned long i = 0; i < count; i++) {
		blocks[i] = block(size);
		if (!blocks[i]) {
			fprintf(stderr, "leak: malloc(%lu) failed at block %lu\n", size, i);
			return 1;
		}
	}
	printf("leaked %lu\n", count);
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin))
		;
	return 0;
}
