// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Frees by block id (tests/bpf/preload-ids.sh), under `memprofctl record --preload -r 1`:
 *
 *	pl_ids reuse N		main mallocs a block (site ids_site_first), a second thread frees
 *				it, and main at once mallocs the same size (site ids_site_second),
 *				which glibc mostly hands out at the same address while the first
 *				block's free is still pending in the library's batch. Every 10th
 *				second block stays live. Prints "REUSED r" (second blocks at their
 *				first block's address) and TRUTH lines (wl_truth.h).
 *	pl_ids exitfree N	mallocs N blocks (site ids_site_exit), frees them all and exits
 *				without allocating again: the last N % 64 frees are still pending
 *				at exit (the library's destructor reports them). Prints TRUTH and,
 *				on stderr, "PENDING p" (frees queued and not yet reported).
 *	pl_ids remap N		N times: an anonymous mapping (site ids_site_remap), mapped again
 *				over itself with MAP_FIXED (same site, same address: the library
 *				never saw the first one's end), then unmapped. The first mapping is
 *				collected when the second replaces it, the second by munmap: none
 *				stays live. Prints TRUTH.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <memprof/preload.h>

#include "wl_truth.h"

#define SIZE 2000

static int to_freer[2], to_main[2];

#define MAP_LEN 8192

WL_SITE(ids_site_first, (void), malloc(SIZE))
WL_SITE(ids_site_second, (void), malloc(SIZE))
WL_SITE(ids_site_exit, (void), malloc(SIZE))
WL_SITE(ids_site_remap, (void *at), mmap(at, MAP_LEN, PROT_READ | PROT_WRITE,
					 MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED : 0), -1, 0))

static void *freer(void *arg)
{
	void *p;

	(void)arg;
	while (read(to_freer[0], &p, sizeof(p)) == sizeof(p) && p) {
		free(p);
		if (write(to_main[1], "x", 1) != 1)
			break;
	}
	return NULL;
}

static int reuse(long n)
{
	void **keep = calloc((size_t)n / 10 + 1, sizeof(*keep));
	long reused = 0, kept = 0;
	pthread_t th;
	char c;

	if (!keep || pipe(to_freer) || pipe(to_main) || pthread_create(&th, NULL, freer, NULL))
		return 1;
	for (long i = 0; i < n; i++) {
		void *p = ids_site_first(), *q;

		if (!p || write(to_freer[1], &p, sizeof(p)) != sizeof(p) ||
		    read(to_main[0], &c, 1) != 1)
			return 1;
		q = ids_site_second();
		if (!q)
			return 1;
		reused += q == p;
		if (i % 10 == 0)
			keep[kept++] = q;
		else
			free(q);
	}
	void *end = NULL;

	if (write(to_freer[1], &end, sizeof(end)) != sizeof(end))
		return 1;
	pthread_join(th, NULL);
	printf("REUSED %ld\n", reused);
	truth("ids_site_first", (uint64_t)n * words(SIZE), 0, (uint64_t)n);
	truth("ids_site_second", (uint64_t)n * words(SIZE), (uint64_t)kept * words(SIZE),
	      (uint64_t)n);
	return 0;	/* keep[] stays live at exit */
}

static int exitfree(long n)
{
	/* volatile: GCC assumes malloc() and free() leave the counters alone */
	volatile struct memprof_preload_config *cfg = dlsym(RTLD_DEFAULT, "memprof_preload_config");
	void **b = calloc((size_t)n, sizeof(*b));
	char msg[64];
	int len;

	if (!b || !cfg)
		return 1;
	/* Printed first: stdio's buffer is allocated (and sampled) before the frees. */
	truth("ids_site_exit", (uint64_t)n * words(SIZE), 0, (uint64_t)n);
	for (long i = 0; i < n; i++)
		if (!(b[i] = ids_site_exit()))
			return 1;
	for (long i = 0; i < n; i++)
		free(b[i]);
	len = snprintf(msg, sizeof(msg), "PENDING %llu\n",
		       (unsigned long long)(cfg->stats[MEMPROF_PRELOAD_STAT_FREES_QUEUED] -
					    cfg->stats[MEMPROF_PRELOAD_STAT_BATCHED_IDS]));
	if (write(2, msg, (size_t)len) != len)
		return 1;
	return 0;	/* b itself is not freed: its free would be queued too */
}

static int remap(long n)
{
	/* The thread's first allocation arms the library and is not sampled: not a mapping. */
	free(wl_sink = malloc(16));
	for (long i = 0; i < n; i++) {
		void *p = ids_site_remap(NULL);

		if (p == MAP_FAILED || ids_site_remap(p) != p || munmap(p, MAP_LEN))
			return 1;
	}
	truth("ids_site_remap", 2 * (uint64_t)n * words(MAP_LEN), 0, 2 * (uint64_t)n);
	return 0;
}

int main(int argc, char **argv)
{
	long n = argc > 2 ? atol(argv[2]) : 0;

	if (argc != 3 || n <= 0) {
		fprintf(stderr, "usage: pl_ids reuse|exitfree|remap N\n");
		return 2;
	}
	if (!strcmp(argv[1], "reuse"))
		return reuse(n);
	if (!strcmp(argv[1], "exitfree"))
		return exitfree(n);
	if (!strcmp(argv[1], "remap"))
		return remap(n);
	fprintf(stderr, "pl_ids: unknown mode '%s'\n", argv[1]);
	return 2;
}
