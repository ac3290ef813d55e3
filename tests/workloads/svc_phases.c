// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * svc_phases: a workload for the service tests, driven by signals so a test can interleave
 * memprofctl commands with its allocations:
 *   SIGUSR1  allocate COUNT blocks of SIZE bytes and keep them ("allocated N" on stdout)
 *   SIGUSR2  free every kept block ("freed N")
 *   SIGTERM  exit 0 ("exit")
 * Usage: svc_phases [COUNT [SIZE]]   (default 2000 blocks of 4000 bytes). Prints "ready PID"
 * once it waits for signals. Stdout is line-buffered so a test can wait for each line.
 * With SVC_PHASES_NONDUMPABLE=1 in the environment it makes itself non-dumpable first.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

/* volatile: GCC must not drop malloc/free pairs whose pointer never escapes. */
static void *volatile *blocks;

int main(int argc, char **argv)
{
	long count = argc > 1 ? atol(argv[1]) : 2000;
	long size = argc > 2 ? atol(argv[2]) : 4000;
	long kept = 0;
	sigset_t set;
	int sig;

	if (count <= 0 || size <= 0) {
		fprintf(stderr, "usage: svc_phases [COUNT [SIZE]]\n");
		return 2;
	}
	blocks = calloc((size_t)count, sizeof(void *));
	if (!blocks)
		return 1;
	if (getenv("SVC_PHASES_NONDUMPABLE") && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0))
		return 1;
	setvbuf(stdout, NULL, _IOLBF, 0);
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGUSR2);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	printf("ready %d\n", (int)getpid());
	for (;;) {
		if (sigwait(&set, &sig))
			return 1;
		if (sig == SIGUSR1) {
			for (long i = kept; i < count; i++) {
				blocks[i] = malloc((size_t)size);
				if (!blocks[i])
					return 1;
				memset(blocks[i], (int)i, 8);
			}
			kept = count;
			printf("allocated %ld\n", kept);
		} else if (sig == SIGUSR2) {
			for (long i = 0; i < kept; i++) {
				free(blocks[i]);
				blocks[i] = NULL;
			}
			printf("freed %ld\n", kept);
			kept = 0;
		} else {
			printf("exit\n");
			return 0;
		}
	}
}
