// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Workload of the probe tests (tests/bpf/probe_check.c): allocations of exactly known sizes,
 * kinds and callers. Sizes are unusual numbers so that libc's own allocations cannot be mistaken
 * for them. At each sync point it writes one byte to fd 3 and waits for one byte on fd 4 (when
 * those fds are open), so the checker can attach and change settings at known places.
 *
 *   probe_wl basic	every allocator entry point, frees, realloc cases, stop phase
 *   probe_wl fork	allocations in a forked child (exit code 7)
 *   probe_wl loop N	N malloc(12001)+free pairs
 *   probe_wl burst N	N malloc(64) kept, then freed
 *   probe_wl same N S	N malloc(S)+free pairs (sampling statistics)
 *   probe_wl dlopen	dlopen libstdc++, sync, operator new(20777) through dlsym
 *   probe_wl threads	4 threads: thread t does 100 malloc(13001 + t), frees them
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>

void *volatile sink[64];
void *volatile sink1;
volatile size_t huge = SIZE_MAX / 2;
void *volatile nullp;			/* NULL the compiler cannot see (realloc(NULL) -> malloc) */	/* volatile: the compiler must not see the overflow */

void wl_small(int i);
void wl_family(void);
void wl_maps(void);
void wl_child_early(void);
void wl_child_late(void);

static void sync_point(void)
{
	char c = 'r';

	if (write(3, &c, 1) != 1)
		return; /* not driven by the checker */
	if (read(4, &c, 1) != 1)
		_exit(90);
}

/* Callers whose addresses the checker looks for in stack[0] and stack[1]. */
__attribute__((noinline)) void wl_small(int i)
{
	sink[i] = malloc(10001 + i);
}

__attribute__((noinline)) void wl_family(void)
{
	void *p = NULL;

	sink[10] = calloc(10, 1002);				/* 10020 bytes */
	sink1 = calloc(huge, 4);			/* overflows: NULL, no event */
	sink[11] = malloc(10030);
	sink[11] = realloc(sink[11], 10040);			/* free 10030 + alloc 10040 */
	sink[12] = realloc(nullp, 10050);			/* an allocation of kind realloc */
	sink[13] = malloc(10060);
	sink1 = realloc(sink[13], 0);				/* frees 10060, allocates nothing */
	sink[13] = NULL;
	free(NULL);						/* nothing */
	if (posix_memalign(&p, 64, 10070) == 0)
		sink[14] = p;
	sink[15] = aligned_alloc(128, 10112);
	sink[16] = memalign(256, 10120);
	sink[17] = valloc(10130);
	sink[18] = pvalloc(10140);
	sink[19] = reallocarray(NULL, 10, 1015);		/* 10150 bytes */
	sink1 = reallocarray(NULL, huge, 4);		/* overflows: NULL, no event */
}

__attribute__((noinline)) void wl_maps(void)
{
	size_t len = (3u << 20) + 7 * 4096;
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	void *f;

	if (m != MAP_FAILED)
		munmap(m, len);					/* alloc + free of kind munmap */
	f = mmap(NULL, 8192, PROT_READ, MAP_PRIVATE, open("/proc/self/exe", O_RDONLY), 0);
	if (f != MAP_FAILED)
		munmap(f, 8192);				/* file-backed: no event */
}

static int basic(void)
{
	for (int i = 0; i < 10; i++)
		wl_small(i);
	wl_family();
	wl_maps();
	for (int i = 0; i < 5; i++)
		free(sink[i]);					/* 10001..10005 freed */
	for (int i = 10; i < 20; i++)
		free(sink[i]);
	sync_point();			/* the checker clears MP_PROC_SAMPLING here */
	for (int i = 5; i < 10; i++)
		free(sink[i]);					/* still reported */
	for (int i = 0; i < 5; i++)
		sink[i] = malloc(10301);			/* not sampled any more */
	return 0;
}

__attribute__((noinline)) void wl_child_early(void)
{
	for (int i = 0; i < 100; i++)
		sink[i % 64] = malloc(11001);
}

__attribute__((noinline)) void wl_child_late(void)
{
	for (int i = 0; i < 50; i++)
		sink[i] = malloc(11002);
}

static int forking(void)
{
	pid_t c;
	int st;

	sink[0] = malloc(11000);
	c = fork();
	if (c == 0) {
		wl_child_early();
		usleep(300 * 1000);	/* the checker attaches to the child meanwhile */
		wl_child_late();
		_exit(7);
	}
	if (c < 0 || waitpid(c, &st, 0) != c)
		return 1;
	return 0;
}

static int dlopened(void)
{
	void *h = dlopen("libstdc++.so.6", RTLD_NOW);
	void *(*op_new)(size_t);

	if (!h)
		return 3;
	sync_point();		/* the checker lets the loader see the new library here */
	op_new = (void *(*)(size_t))dlsym(h, "_Znwm");
	if (!op_new)
		return 4;
	sink1 = op_new(20777);
	return 0;
}

static void *thread_main(void *arg)
{
	long t = (long)arg;
	void *v[100];

	for (int i = 0; i < 100; i++)
		v[i] = malloc(13001 + t);
	for (int i = 0; i < 100; i++)
		free(v[i]);
	return NULL;
}

static int threads(void)
{
	pthread_t th[4];

	for (long t = 0; t < 4; t++)
		if (pthread_create(&th[t], NULL, thread_main, (void *)t))
			return 5;
	for (int t = 0; t < 4; t++)
		pthread_join(th[t], NULL);
	return 0;
}

static int loop(long n, size_t size)
{
	for (long i = 0; i < n; i++) {
		sink1 = malloc(size);
		free(sink1);
	}
	return 0;
}

static int burst(long n)
{
	void **v = malloc(n * sizeof(*v));

	for (long i = 0; i < n; i++)
		v[i] = malloc(64);
	for (long i = 0; i < n; i++)
		free(v[i]);
	free(v);
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "basic";
	long n = argc > 2 ? atol(argv[2]) : 1000;
	int ret = 2;

	sync_point();			/* the checker attaches here */
	if (!strcmp(mode, "basic"))
		ret = basic();
	else if (!strcmp(mode, "fork"))
		ret = forking();
	else if (!strcmp(mode, "loop"))
		ret = loop(n, 12001);
	else if (!strcmp(mode, "burst"))
		ret = burst(n);
	else if (!strcmp(mode, "threads"))
		ret = threads();
	else if (!strcmp(mode, "dlopen"))
		ret = dlopened();
	else if (!strcmp(mode, "same"))
		ret = loop(n, argc > 3 ? (size_t)atol(argv[3]) : 1000);
	return ret;
}
