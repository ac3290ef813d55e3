// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Allocation from signal handlers under libmemprof-preload. A SIGALRM timer fires every
 * 20 µs while the main loop allocates; both sides go through the library's interposers, so
 * its countdown, sampling path, address table and hooks get interrupted by themselves.
 * glibc's malloc is not async-signal-safe, so each phase keeps the program itself correct:
 *   phase 1: main loop malloc/calloc/realloc/free, handler anonymous mmap/munmap (syscalls)
 *   phase 2: main loop anonymous mmap/munmap, handler malloc/calloc/realloc/free
 * Everything is freed at the end; prints the handler count per phase.
 *
 *	pl_signal SECONDS_PER_PHASE [INTERVAL_US]
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>

#define HRING 64

static volatile sig_atomic_t phase;
static volatile unsigned long handled[4];
static void *hring[HRING];
static size_t hsize[HRING];
static unsigned hidx;
static uint64_t hx = 0x9e3779b97f4a7c15ULL;

static uint64_t xorshift(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/*
 * On a loaded host (or under UBSan) a handler can take longer than the interval: signals would
 * then run back to back and the main loop would never get past its next instruction. When 1000
 * handlers in a row saw no progress of the main loop, the interval doubles (setitimer() is
 * async-signal-safe), up to 5 ms (still hundreds of handlers a phase); the count of such
 * backoffs is printed.
 */
static volatile unsigned long main_ops;
static long interval_us;
static unsigned long backoffs;

static void back_off_if_starving(void)
{
	static unsigned long seen, starved;

	if (main_ops != seen) {
		seen = main_ops;
		starved = 0;
		return;
	}
	if (++starved < 1000 || interval_us >= 5000)
		return;
	interval_us *= 2;
	setitimer(ITIMER_REAL, &(struct itimerval){ { 0, interval_us }, { 0, interval_us } },
		  NULL);
	starved = 0;
	backoffs++;
}

static void on_alarm(int sig)
{
	unsigned i = hidx++ % HRING;
	uint64_t r = xorshift(&hx);

	(void)sig;
	back_off_if_starving();
	if (phase == 1) {
		size_t len = 4096 * (1 + r % 8);

		if (hring[i])
			munmap(hring[i], hsize[i]);
		hring[i] = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				-1, 0);
		hsize[i] = len;
		if (hring[i] == MAP_FAILED)
			hring[i] = NULL;
		else
			((volatile char *)hring[i])[0] = 1;
	} else if (phase == 2) {
		size_t len = 16 + r % 3000;
		void *p;

		switch (r >> 60) {
		case 0:
			p = calloc(1, len);
			break;
		case 1:
			p = realloc(hring[i], len);
			hring[i] = NULL;	/* moved into p (or freed with it) */
			break;
		default:
			p = malloc(len);
			break;
		}
		free(hring[i]);
		hring[i] = p;
		if (p)
			((volatile char *)p)[len - 1] = 1;
	}
	handled[phase]++;
}

static double now(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (double)tv.tv_sec + tv.tv_usec / 1e6;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 1.0;
	struct sigaction sa;
	long us = argc > 2 ? atol(argv[2]) : 20;
	struct itimerval it = { { 0, us }, { 0, us } };
	static void *ring[256];
	static size_t len[256];
	uint64_t x = 88172645463325252ULL;
	unsigned long ops[4] = { 0 };

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGALRM, &sa, NULL);
	interval_us = us;
	if (setitimer(ITIMER_REAL, &it, NULL)) {
		perror("setitimer");
		return 1;
	}
	phase = 1;
	for (int ph = 1; ph <= 2; ph++) {
		double end = now() + secs;

		while (now() < end) {
			for (int k = 0; k < 1000; k++) {
				uint64_t r = xorshift(&x);
				unsigned i = r % 256;

				if (phase == 1) {
					size_t n = 8 + (r >> 20) % 6000;

					if ((r >> 50) % 4 == 0) {
						void *q = realloc(ring[i], n);

						if (q)
							ring[i] = q;
					} else {
						free(ring[i]);
						ring[i] = (r >> 50) % 4 == 1 ? calloc(1, n)
									     : malloc(n);
					}
					if (ring[i])
						((volatile char *)ring[i])[n - 1] = 1;
				} else {
					size_t n = 4096 * (1 + (r >> 20) % 16);

					if (ring[i])
						munmap(ring[i], len[i]);
					ring[i] = mmap(NULL, n, PROT_READ | PROT_WRITE,
						       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
					len[i] = n;
					if (ring[i] == MAP_FAILED)
						ring[i] = NULL;
				}
				ops[phase]++;
				main_ops++;
			}
		}
		/* Quiesce the handler, then release this phase's blocks. */
		sigset_t set, old;

		sigemptyset(&set);
		sigaddset(&set, SIGALRM);
		sigprocmask(SIG_BLOCK, &set, &old);
		for (int i = 0; i < 256; i++) {
			if (phase == 1)
				free(ring[i]);
			else if (ring[i])
				munmap(ring[i], len[i]);
			ring[i] = NULL;
		}
		for (int i = 0; i < HRING; i++) {
			if (phase == 1 && hring[i])
				munmap(hring[i], hsize[i]);
			else if (phase == 2)
				free(hring[i]);
			hring[i] = NULL;
		}
		if (phase == 2) {
			struct itimerval off = { { 0, 0 }, { 0, 0 } };

			setitimer(ITIMER_REAL, &off, NULL);
		}
		phase = ph + 1;	/* while blocked: a handler never sees the other phase's ring */
		sigprocmask(SIG_SETMASK, &old, NULL);
	}
	printf("phase1 ops %lu signals %lu\nphase2 ops %lu signals %lu\nbackoffs %lu\n", ops[1],
	       handled[1], ops[2], handled[2], backoffs);
	return handled[1] > 100 && handled[2] > 100 ? 0 : 1;
}
