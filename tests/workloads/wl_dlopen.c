// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * wl_dlopen SO [SCALE]: allocate at wl_site_before, then dlopen SO (tests/workloads/
 * wl_dlalloc.c), give the profiler time to probe what ld.so mapped (WL_SETTLE_MS, default
 * 500 ms: attaching is asynchronous), and run its wl_dl_run(SCALE), which allocates through an
 * allocator this process did not map before. Truth lines as tests/workloads/wl_alloc.c.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

static void *volatile sink;

NOINLINE static void *wl_site_before(size_t size)
{
	void *p = malloc(size);

	sink = p;
	return p;
}

int main(int argc, char **argv)
{
	const char *ms = getenv("WL_SETTLE_MS");
	long scale = argc > 2 ? atol(argv[2]) : 1, settle = ms ? atol(ms) : 500;
	struct timespec ts = { settle / 1000, (settle % 1000) * 1000000 };
	const long n = 20000;
	int (*run)(long);
	void *h;

	if (argc < 2 || scale < 1) {
		fprintf(stderr, "usage: %s SO [SCALE]\n", argv[0]);
		return 2;
	}
	for (long i = 0; i < n; i++)
		free(wl_site_before(100));
	printf("TRUTH wl_site_before words=%llu live_words=0 blocks=%ld\n",
	       (unsigned long long)n * (100 / 8 + 1 + 1), n);
	h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "wl_dlopen: %s\n", dlerror());
		return 3;
	}
	run = (int (*)(long))dlsym(h, "wl_dl_run");
	if (!run) {
		fprintf(stderr, "wl_dlopen: %s\n", dlerror());
		return 3;
	}
	nanosleep(&ts, NULL);
	return run(scale);
}
