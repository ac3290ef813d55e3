// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * A free from a signal handler while the pending-free buffer's lock is held by the thread it
 * interrupted (tests/unit/preload-signal.sh). Run under libmemprof-preload with
 * MEMPROF_RATE=1 and MEMPROF_TEST_LOG=FD, FD a FIFO opened read-write: the library writes its
 * test record of a sampled free while it holds the buffer, so a full FIFO holds it there.
 *
 * main mallocs blocks a and s (both sampled at rate 1), fills the FIFO, and frees a: the
 * library takes the buffer and blocks writing to the FIFO. A helper thread waits until main is
 * in that write(), sends it SIGUSR1 and drains the FIFO. The handler frees s: it must find the
 * buffer busy and report s at once (memprof:free) instead of waiting for the lock (deadlock).
 * Prints "handler_ran free_hooks frees_queued logged_a logged_s" and exits 0 when
 * 1 1 1 1 1; a deadlock is caught by the test's timeout.
 *
 *	pl_sigfree FD
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <memprof/preload.h>

static int log_fd;
static pid_t main_tid;
static void *volatile a, *volatile s;
static volatile sig_atomic_t handler_ran;
static int done[2];		/* main -> helper: finished */
static int start[2];		/* main -> helper: the FIFO is full, watch main */
static unsigned long logged_a, logged_s;

static void on_usr1(int sig)
{
	(void)sig;
	free(s);
	handler_ran = 1;
}

/* Is main blocked in write(2)? /proc/self/task/TID/syscall starts with the syscall number. */
static int main_in_write(void)
{
	char path[64], buf[64] = "";
	int fd, n;

	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", main_tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = (int)read(fd, buf, sizeof(buf) - 1);
	close(fd);
	return n > 0 && atoi(buf) == SYS_write;
}

static void drain_records(char *buf, ssize_t n, size_t *carry)
{
	static char rec[sizeof(struct memprof_preload_test_rec)];

	for (ssize_t i = 0; i < n; i++) {
		rec[(*carry)++] = buf[i];
		if (*carry == sizeof(rec)) {
			struct memprof_preload_test_rec r;

			memcpy(&r, rec, sizeof(r));
			if (r.type == MEMPROF_PRELOAD_REC_FREE) {
				logged_a += r.addr == (uintptr_t)a;
				logged_s += r.addr == (uintptr_t)s;
			}
			*carry = 0;
		}
	}
}

static void *helper(void *arg)
{
	struct timespec tick = { 0, 1000000 };
	size_t carry = 0;
	char buf[4096];

	if (read(start[0], buf, 1) != 1)
		return NULL;
	/* Bounded wait for a state we cannot be told about: 10 s at most. */
	for (int i = 0; i < 10000 && !main_in_write(); i++)
		nanosleep(&tick, NULL);
	pthread_kill(*(pthread_t *)arg, SIGUSR1);
	for (;;) {
		struct pollfd p[2] = { { .fd = log_fd, .events = POLLIN },
				       { .fd = done[0], .events = POLLIN } };

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[0].revents & POLLIN) {
			ssize_t n = read(log_fd, buf, sizeof(buf));

			if (n > 0)
				drain_records(buf, n, &carry);
		} else if (p[1].revents) {
			break;
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	/* volatile: GCC assumes malloc() and free() leave the counters alone */
	volatile struct memprof_preload_config *cfg = dlsym(RTLD_DEFAULT, "memprof_preload_config");
	struct sigaction sa = { .sa_handler = on_usr1, .sa_flags = SA_RESTART };
	char path[64], junk[4096];
	pthread_t self = pthread_self(), th;
	uint64_t hooks0, queued0;
	int wfd;

	if (argc != 2 || !cfg) {
		fprintf(stderr, "usage: pl_sigfree FD (under libmemprof-preload)\n");
		return 2;
	}
	log_fd = atoi(argv[1]);
	main_tid = (pid_t)syscall(SYS_gettid);
	sigaction(SIGUSR1, &sa, NULL);
	if (pipe2(done, O_CLOEXEC) || pipe2(start, O_CLOEXEC))
		return 1;
	/* The first allocation arms the thread (not sampled); at rate 1 all later ones are. */
	a = malloc(16);
	free(a);
	hooks0 = cfg->stats[MEMPROF_PRELOAD_STAT_ALLOC_HOOKS];
	a = malloc(1000);
	s = malloc(1000);
	hooks0 = cfg->stats[MEMPROF_PRELOAD_STAT_ALLOC_HOOKS] - hooks0;
	if (hooks0 != 2) {
		fprintf(stderr, "pl_sigfree: a and s not both sampled (MEMPROF_RATE=1?): %lu hooks\n",
			(unsigned long)hooks0);
		return 1;
	}
	/* Before the FIFO is full: creating a thread allocates (and logs). */
	if (pthread_create(&th, NULL, helper, &self))
		return 1;
	/* Empty the FIFO, shrink it to one page and fill it through a non-blocking description
	 * of our own (the library's blocks). */
	fcntl(log_fd, F_SETFL, fcntl(log_fd, F_GETFL) | O_NONBLOCK);
	while (read(log_fd, junk, sizeof(junk)) > 0)
		;
	fcntl(log_fd, F_SETFL, fcntl(log_fd, F_GETFL) & ~O_NONBLOCK);
	fcntl(log_fd, F_SETPIPE_SZ, 4096);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", log_fd);
	wfd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
	if (wfd < 0)
		return 1;
	memset(junk, 0, sizeof(junk));
	/* whole records of zeros (type 0), so that the helper stays aligned on records */
	while (write(wfd, junk, sizeof(struct memprof_preload_test_rec)) > 0)
		;
	hooks0 = cfg->stats[MEMPROF_PRELOAD_STAT_FREE_HOOKS];
	queued0 = cfg->stats[MEMPROF_PRELOAD_STAT_FREES_QUEUED];
	if (write(start[1], "x", 1) != 1)
		return 1;
	free(a);	/* blocks in the library's log write, buffer held, until drained */
	if (write(done[1], "x", 1) != 1)
		return 1;
	pthread_join(th, NULL);
	/* snprintf and write: printf would malloc (and be sampled) */
	char out[128];
	unsigned long hooks = cfg->stats[MEMPROF_PRELOAD_STAT_FREE_HOOKS] - hooks0;
	unsigned long queued = cfg->stats[MEMPROF_PRELOAD_STAT_FREES_QUEUED] - queued0;
	int n = snprintf(out, sizeof(out), "%d %lu %lu %lu %lu\n", (int)handler_ran, hooks, queued,
			 logged_a, logged_s);

	if (write(1, out, (size_t)n) != n)
		return 1;
	return handler_ran && hooks == 1 && queued == 1 && logged_a == 1 && logged_s == 1 ? 0 : 1;
}
