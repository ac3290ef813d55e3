// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Workload of tests/bpf/follow-*.sh (`memprofctl record` following forks and execs). Every
 * allocation is made at once, with no pause for a profiler to catch up, in a noinline function
 * named fw_site_* (the checker counts allocations per site).
 *
 *	follow_wl alloc N SIZE           N blocks of SIZE bytes (fw_site_alloc), kept live
 *	follow_wl kill N SIZE            the same, then SIGKILL to itself
 *	follow_wl fork N SIZE            the child allocates N blocks (fw_site_child) right after
 *	                                 fork; the parent waits and exits with its status.
 *	                                 Prints "CHILD <pid>".
 *	follow_wl thread-fork N SIZE     the same fork made from a second thread
 *	follow_wl spawn N SIZE           posix_spawn (CLONE_VFORK) of "follow_wl alloc N SIZE";
 *	                                 prints "CHILD <pid>"
 *	follow_wl signals                a SIGUSR1 handler must run for kill(getpid(), SIGUSR1); a
 *	                                 child that stops itself with SIGSTOP is seen stopped,
 *	                                 continued with SIGCONT, and exits 7. Exit 0 when all hold.
 *	follow_wl exit CODE              exit with CODE after one allocation
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

extern char **environ;
static void *volatile sink;
static volatile sig_atomic_t got_usr1;

NOINLINE static void fw_site_alloc(size_t size)
{
	sink = malloc(size);
}

NOINLINE static void fw_site_child(size_t size)
{
	sink = malloc(size);
}

static int wait_status(pid_t pid)
{
	int st;

	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return 3;
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	return 128 + WTERMSIG(st);
}

static int do_fork(long n, size_t size)
{
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return 3;
	if (pid == 0) {
		for (long i = 0; i < n; i++)
			fw_site_child(size);
		_exit(0);
	}
	printf("CHILD %d\n", (int)pid);
	fflush(stdout);
	return wait_status(pid);
}

struct fork_args {
	long n;
	size_t size;
	int status;
};

static void *fork_thread(void *arg)
{
	struct fork_args *a = arg;

	a->status = do_fork(a->n, a->size);
	return NULL;
}

static void on_usr1(int sig)
{
	(void)sig;
	got_usr1 = 1;
}

static int signals(void)
{
	struct sigaction sa = { .sa_handler = on_usr1 };
	pid_t pid;
	int st;

	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGUSR1, &sa, NULL) || kill(getpid(), SIGUSR1))
		return 3;
	if (!got_usr1) {
		fprintf(stderr, "follow_wl: the SIGUSR1 handler did not run\n");
		return 1;
	}
	pid = fork();
	if (pid < 0)
		return 3;
	if (pid == 0) {
		fw_site_child(100);
		raise(SIGSTOP);
		_exit(7);
	}
	if (waitpid(pid, &st, WUNTRACED) != pid || !WIFSTOPPED(st) || WSTOPSIG(st) != SIGSTOP) {
		fprintf(stderr, "follow_wl: the child was not seen stopped (status %#x)\n", st);
		return 1;
	}
	kill(pid, SIGCONT);
	if (wait_status(pid) != 7) {
		fprintf(stderr, "follow_wl: the continued child did not exit 7\n");
		return 1;
	}
	printf("signals ok\n");
	return 0;
}

int main(int argc, char **argv)
{
	long n = argc > 2 ? atol(argv[2]) : 0;
	size_t size = argc > 3 ? (size_t)atol(argv[3]) : 0;

	if (argc >= 4 && !strcmp(argv[1], "alloc")) {
		for (long i = 0; i < n; i++)
			fw_site_alloc(size);
		return 0;
	}
	if (argc >= 4 && !strcmp(argv[1], "kill")) {
		for (long i = 0; i < n; i++)
			fw_site_alloc(size);
		raise(SIGKILL);
		return 3;
	}
	if (argc >= 4 && !strcmp(argv[1], "fork"))
		return do_fork(n, size);
	if (argc >= 4 && !strcmp(argv[1], "thread-fork")) {
		struct fork_args a = { .n = n, .size = size, .status = 3 };
		pthread_t th;

		if (pthread_create(&th, NULL, fork_thread, &a) || pthread_join(th, NULL))
			return 3;
		return a.status;
	}
	if (argc >= 4 && !strcmp(argv[1], "spawn")) {
		char *args[] = { argv[0], "alloc", argv[2], argv[3], NULL };
		pid_t pid;

		if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, args, environ))
			return 3;
		printf("CHILD %d\n", (int)pid);
		fflush(stdout);
		return wait_status(pid);
	}
	if (argc >= 2 && !strcmp(argv[1], "signals"))
		return signals();
	if (argc >= 3 && !strcmp(argv[1], "exit")) {
		fw_site_alloc(64);
		return atoi(argv[2]);
	}
	fprintf(stderr, "usage: follow_wl alloc|kill|fork|thread-fork|spawn N SIZE | signals | "
		"exit CODE\n");
	return 2;
}
