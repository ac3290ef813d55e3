// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libmemprof-preload's deferred mode (MEMPROF_BATCH, tests/bpf/preload-batch.sh), under
 * `memprofctl record --preload --batch N -r 0.5`: blocks of 2000 bytes (251 words), so every
 * block is sampled (a block escapes with probability 2^-251; the first allocation, which arms
 * the library, is not sampled: it is made outside the sites).
 *
 *	pl_batch exit N		mallocs N blocks (site batch_site_exit), keeps them live and
 *				exits: with N below the batch size they are all still queued at
 *				exit (the destructor reports them). Prints TRUTH.
 *	pl_batch freepending N	N times: mallocs a block (site batch_site_fp) and frees it at
 *				once, alternately in this thread and in another (the free arrives
 *				while the alloc is still queued). Prints TRUTH.
 *	pl_batch fork N		mallocs N live blocks (site batch_site_parent), forks; the child
 *				mallocs N live blocks (site batch_site_child) and exits; the parent
 *				waits for it. Prints TRUTH for the parent's site (the child's line
 *				is "CHILD_TRUTH").
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "wl_truth.h"

#define SIZE 2000

WL_SITE(batch_site_exit, (void), malloc(SIZE))
WL_SITE(batch_site_fp, (void), malloc(SIZE))
WL_SITE(batch_site_parent, (void), malloc(SIZE))
WL_SITE(batch_site_child, (void), malloc(SIZE))

/* The child of "fork": @n live blocks at its own site, then exit. */
static void child(long n)
{
	for (long i = 0; i < n; i++)
		batch_site_child();
	printf("CHILD_TRUTH batch_site_child blocks=%ld\n", n);
	fflush(stdout);
	exit(0);
}

static void *freer(void *p)
{
	free(p);
	return NULL;
}

int main(int argc, char **argv)
{
	long n = argc > 2 ? atol(argv[2]) : 0;

	if (argc < 3 || n <= 0) {
		fprintf(stderr, "usage: pl_batch exit|freepending|fork N\n");
		return 2;
	}
	/* The allocation that arms the library is not sampled (a fresh countdown starts after
	 * it): make it this one, not the first at a site. */
	wl_sink = malloc(16);
	free(wl_sink);
	if (!strcmp(argv[1], "exit")) {
		for (long i = 0; i < n; i++)
			batch_site_exit();
		truth("batch_site_exit", (uint64_t)n * words(SIZE), (uint64_t)n * words(SIZE),
		      (uint64_t)n);
		return 0;
	}
	if (!strcmp(argv[1], "freepending")) {
		for (long i = 0; i < n; i++) {
			void *p = batch_site_fp();
			pthread_t th;

			if (i & 1) {
				if (pthread_create(&th, NULL, freer, p) || pthread_join(th, NULL))
					return 1;
			} else {
				free(p);
			}
		}
		truth("batch_site_fp", (uint64_t)n * words(SIZE), 0, (uint64_t)n);
		return 0;
	}
	if (!strcmp(argv[1], "fork")) {
		pid_t pid;
		int st;

		for (long i = 0; i < n; i++)
			batch_site_parent();
		fflush(stdout);
		pid = fork();
		if (pid == 0)
			child(n);
		if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
			return 1;
		truth("batch_site_parent", (uint64_t)n * words(SIZE), (uint64_t)n * words(SIZE),
		      (uint64_t)n);
		return 0;
	}
	fprintf(stderr, "pl_batch: unknown mode '%s'\n", argv[1]);
	return 2;
}
