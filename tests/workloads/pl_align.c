// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * posix_memalign, aligned_alloc, memalign, valloc and pvalloc: a transcript of results,
 * errno values and alignment checks for valid and invalid arguments, then a heavy random
 * loop. tests/unit/preload-align.sh runs it with and without libmemprof-preload and
 * requires identical transcripts: the interposers keep glibc's exact contract.
 */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SENTINEL ((void *)0x5a5a)

static size_t pow2_at_least(size_t a)
{
	size_t p = 1;

	while (p < a && p)
		p <<= 1;
	return p ? p : 1;
}

int main(void)
{
	static const size_t aligns[] = { 0, 1, 2, 3, 4, 8, 16, 24, 32, 48, 64, 100, 128, 4096,
					 65536, 1 << 20, SIZE_MAX / 2 + 1, SIZE_MAX / 2 + 2,
					 SIZE_MAX };
	static const size_t sizes[] = { 0, 1, 100, 100000, SIZE_MAX - 4096 };
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	volatile unsigned long sink = 0;

	for (size_t i = 0; i < sizeof(aligns) / sizeof(aligns[0]); i++) {
		for (size_t j = 0; j < sizeof(sizes) / sizeof(sizes[0]); j++) {
			size_t a = aligns[i], s = sizes[j], ap = pow2_at_least(a);
			void *p = SENTINEL;
			int rc, e;

			errno = 12345;
			rc = posix_memalign(&p, a, s);
			e = errno;
			printf("posix_memalign(%zu, %zu) = %d errno %d %s %s\n", a, s, rc, e,
			       p == SENTINEL ? "untouched" : p ? "set" : "null",
			       rc == 0 && ((uintptr_t)p % a) ? "MISALIGNED" : "");
			if (rc == 0)
				free(p);

			errno = 12345;
			p = aligned_alloc(a, s);
			e = errno;
			printf("aligned_alloc(%zu, %zu) = %s errno %d %s\n", a, s, p ? "ptr" : "NULL",
			       e, p && ((uintptr_t)p % ap) ? "MISALIGNED" : "");
			free(p);

			errno = 12345;
			p = memalign(a, s);
			e = errno;
			printf("memalign(%zu, %zu) = %s errno %d %s\n", a, s, p ? "ptr" : "NULL", e,
			       p && ((uintptr_t)p % ap) ? "MISALIGNED" : "");
			free(p);
		}
	}
	for (size_t j = 0; j < sizeof(sizes) / sizeof(sizes[0]); j++) {
		void *p;
		int e;

		errno = 12345;
		p = valloc(sizes[j]);
		e = errno;
		printf("valloc(%zu) = %s errno %d %s\n", sizes[j], p ? "ptr" : "NULL", e,
		       p && ((uintptr_t)p % page) ? "MISALIGNED" : "");
		if (p)
			memset(p, 1, sizes[j]);
		free(p);
		errno = 12345;
		p = pvalloc(sizes[j]);
		e = errno;
		printf("pvalloc(%zu) = %s errno %d %s usable>=page-rounded %d\n", sizes[j],
		       p ? "ptr" : "NULL", e, p && ((uintptr_t)p % page) ? "MISALIGNED" : "",
		       p ? malloc_usable_size(p) >= ((sizes[j] + page - 1) & ~(page - 1)) : -1);
		free(p);
	}

	/* Heavy use: random alignments and sizes, a ring of live blocks, all entry points. */
	enum { RING = 512, OPS = 400000 };
	static void *ring[RING];
	uint64_t x = 88172645463325252ULL, bad = 0;

	for (int op = 0; op < OPS; op++) {
		int slot;
		size_t a, s;
		void *p = NULL;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		slot = (int)(x % RING);
		a = (size_t)1 << (3 + (x >> 20) % 10);	/* 8 .. 4096 */
		s = (size_t)((x >> 32) % 5000);
		free(ring[slot]);
		switch ((x >> 40) % 4) {
		case 0:
			if (posix_memalign(&p, a, s))
				p = NULL;
			break;
		case 1:
			p = aligned_alloc(a, s);
			break;
		case 2:
			p = memalign(a, s);
			break;
		default:
			p = valloc(s);
			a = page;
			break;
		}
		if (!p || ((uintptr_t)p % a))
			bad++;
		else if (s)
			((volatile char *)p)[s - 1] = 1;
		ring[slot] = p;
		sink += (uintptr_t)p & 1;
	}
	for (int i = 0; i < RING; i++)
		free(ring[i]);
	printf("heavy loop: %d ops, %lu failed or misaligned\n", OPS, (unsigned long)bad);
	return 0;
}
