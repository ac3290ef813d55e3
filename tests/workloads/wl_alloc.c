// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * A workload with exactly known allocations for the record tests (tests/bpf/record-*.sh).
 * Every allocation happens in a noinline function named wl_site_* that does not tail-call the
 * allocator, so the sampled stack's innermost frame names the site. For each site the program
 * prints its truth on stdout:
 *
 *	TRUTH <site> words=<W> live_words=<L> blocks=<N>
 *
 * where W = Σ (ceil(size/8) + 1) over the site's blocks (the sampling model's words, header
 * included) and L the same over the blocks it never frees (the sites and loops: wl_truth.h).
 *
 *	wl_alloc equal N SIZE [K]  N blocks of SIZE bytes, each freed at once (pause 2 ms
 *	                           every K blocks)
 *	wl_alloc sites SCALE       malloc/calloc/realloc/posix_memalign/aligned_alloc/mmap sites
 *	                           (and PROT_NONE reservations, which are not allocations),
 *	                           one of them leaking; SCALE (default 1) multiplies the counts
 *	wl_alloc sizes MIB [gate]  about MIB MiB of blocks of each size from 16 B to 1 MiB, one in
 *	                           four leaked; also prints BYTES lines (requested bytes). With
 *	                           gate: "ready", then waits for a line on stdin first and for EOF
 *	                           at the end
 *	wl_alloc threads T N SIZE  T threads allocate N blocks each; main frees them all
 *	wl_alloc fork              parent and child allocate (and leak) at distinct sites
 *	wl_alloc exec              leak, exec itself ("post-exec"), leak again
 *	wl_alloc deep              one leaked block under wl_deep_a -> wl_deep_b -> wl_site_deep
 *	wl_alloc ctl               commands on stdin (see run_ctl)
 *	wl_alloc spin FILE         write the pid to FILE after a first round, then allocate and
 *	                           free forever (for the SIGKILL test)
 *	wl_alloc libcmaps N        N blocks of 1 MiB that glibc's malloc maps with mmap, 8 threads
 *	                           at once (glibc maps their stacks), N mmaps of the program's own:
 *	                           only the malloc and mmap sites are allocations of the program
 */
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "wl_truth.h"

static volatile uint64_t touch;

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/*
 * Give the profiler time to probe a process that just appeared (fork child, exec'd image):
 * attaching uprobes costs an RCU grace period per probe. With WL_WAIT_TRACE=PREFIX, wait
 * until the trace PREFIX.<pid> exists (the engine creates it once the probes are attached),
 * at most 30 s; else sleep WL_SETTLE_MS (default 400) ms.
 */
static void settle(void)
{
	const char *prefix = getenv("WL_WAIT_TRACE"), *ms = getenv("WL_SETTLE_MS");
	char path[4096];

	if (prefix) {
		snprintf(path, sizeof(path), "%s.%d", prefix, (int)getpid());
		for (int i = 0; i < 3000 && access(path, F_OK); i++)
			sleep_ms(10);
		return;
	}
	sleep_ms(ms ? atol(ms) : 400);
}

/* ---- sites ---- */

#define MALLOC_SITES(X)									\
	X(wl_site_equal) X(wl_site_small) X(wl_site_large) X(wl_site_leak) X(wl_site_words)	\
	X(wl_site_odd) X(wl_site_thread) X(wl_site_parent) X(wl_site_child)			\
	X(wl_site_pre_exec) X(wl_site_post_exec) X(wl_site_deep) X(wl_site_spin) X(wl_site_ctl)
MALLOC_SITES(WL_MALLOC_SITE)

WL_SITE(wl_site_calloc, (size_t size), calloc(10, size / 10))
WL_MEMALIGN_SITE(wl_site_memalign, 64)
WL_SITE(wl_site_aligned, (size_t size), aligned_alloc(256, size))
WL_SITE(wl_site_realloc, (void *old, size_t size), realloc(old, size))

__attribute__((noipa)) static void *wl_site_mmap(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		wl_die("mmap");
	wl_sink = p;
	return p;
}

/* Address space reserved as Go's runtime does (PROT_NONE): no memory, not an allocation. */
__attribute__((noipa)) static void *wl_site_reserve(size_t len)
{
	void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (p == MAP_FAILED)
		wl_die("mmap");
	wl_sink = p;
	return p;
}

/* ... and committed in pieces, read-write over the reservation (MAP_FIXED): allocations. */
__attribute__((noipa)) static void *wl_site_commit(void *at, size_t len)
{
	void *p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
		       -1, 0);

	if (p == MAP_FAILED)
		wl_die("mmap");
	wl_sink = p;
	return p;
}

/* n reservations of 32 MiB, each committed 1 MiB at a time at 8 places, all unmapped again */
static void reserve_and_commit(long n)
{
	for (long i = 0; i < n; i++) {
		char *r = wl_site_reserve(32 << 20);

		for (int k = 0; k < 8; k++)
			munmap(wl_site_commit(r + ((size_t)(2 * k + 1) << 20), 1 << 20), 1 << 20);
		munmap(r, 32 << 20);
	}
	truth("wl_site_reserve", 0, 0, 0);
	truth("wl_site_commit", (uint64_t)n * 8 * words(1 << 20), 0, (uint64_t)n * 8);
}

/* ---- modes ---- */

static int run_equal(long n, long size, long pause_every)
{
	for (long i = 0; i < n; i++) {
		free(wl_site_equal((size_t)size));
		/* let the consumer drain the ring buffer: a lost event would look like n = 0 */
		if (pause_every > 0 && i % pause_every == pause_every - 1)
			sleep_ms(2);
	}
	truth("wl_site_equal", (uint64_t)n * words((size_t)size), 0, (uint64_t)n);
	return 0;
}

static int run_sites(long scale)
{
	const long n_mmap = 25 * scale;

	wl_freed("wl_site_small", wl_site_small, wl_free, 24, 100000 * scale);
	wl_freed("wl_site_large", wl_site_large, wl_free, 80000, 100 * scale);
	wl_leaked("wl_site_leak", wl_site_leak, 1000, 2000 * scale);
	wl_freed("wl_site_calloc", wl_site_calloc, wl_free, 1000, 3000 * scale);
	wl_freed("wl_site_memalign", wl_site_memalign, wl_free, 4000, 1000 * scale);
	wl_freed("wl_site_aligned", wl_site_aligned, wl_free, 2048, 1000 * scale);
	wl_realloc_chains("wl_site_realloc", wl_site_realloc, NULL, wl_free, 100 * scale);
	for (long i = 0; i < n_mmap; i++) {
		void *p = wl_site_mmap(1 << 20);

		munmap(p, 1 << 20);
	}
	truth("wl_site_mmap", (uint64_t)n_mmap * words(1 << 20), 0, (uint64_t)n_mmap);
	reserve_and_commit(4 * scale);
	return 0;
}

/*
 * Blocks of @nsizes sizes from @site, about @bytes of each size, one block in four kept to the
 * end; prints TRUTH and "BYTES site requested=R rounded=B live=L" (B and L: sizes rounded up
 * to whole words, no header word).
 */
static void sizes_site(const char *name, void *(*site)(size_t), const size_t *sizes,
		       size_t nsizes, uint64_t bytes)
{
	uint64_t w = 0, lw = 0, nb = 0, req = 0, rnd = 0, live = 0;
	long k = 0;

	for (size_t j = 0; j < nsizes; j++) {
		uint64_t n = bytes / sizes[j] ? bytes / sizes[j] : 1;

		for (uint64_t i = 0; i < n; i++, k++) {
			void *p = site(sizes[j]);

			if (!p)
				wl_die("malloc");
			w += words(sizes[j]);
			req += sizes[j];
			rnd += (sizes[j] + 7) / 8 * 8;
			if (i % 4 == 3) {
				lw += words(sizes[j]);
				live += (sizes[j] + 7) / 8 * 8;	/* leaked */
			} else {
				free(p);
			}
			wl_pace(k);
		}
		nb += n;
	}
	truth(name, w, lw, nb);
	printf("BYTES %s requested=%llu rounded=%llu live=%llu\n", name, (unsigned long long)req,
	       (unsigned long long)rnd, (unsigned long long)live);
	fflush(stdout);
}

/* Sizes from 16 B to 1 MiB: whole words at wl_site_words, others at wl_site_odd. */
static int run_sizes(long scale, bool gated)
{
	static const size_t whole[] = { 16, 72, 128, 1000, 4096, 65536, 1 << 20 };
	static const size_t odd[] = { 13, 100, 1001, 70001 };
	const uint64_t bytes = (uint64_t)scale << 20;
	char line[64];

	if (gated) {	/* a profiler attaches now */
		printf("ready\n");
		fflush(stdout);
		if (!fgets(line, sizeof(line), stdin))
			return 1;
	}
	sizes_site("wl_site_words", wl_site_words, whole, sizeof(whole) / sizeof(whole[0]), bytes);
	sizes_site("wl_site_odd", wl_site_odd, odd, sizeof(odd) / sizeof(odd[0]), bytes);
	if (gated)	/* the profiler reads its figures, then lets go */
		while (fgets(line, sizeof(line), stdin))
			;
	return 0;
}

static void *idle_thread(void *arg)
{
	return arg;
}

static int run_libcmaps(long n)
{
	pthread_t t[8];

	/* No dynamic threshold: every block of 1 MiB is an mmap made inside malloc. */
	if (!mallopt(M_MMAP_THRESHOLD, 64 * 1024))
		wl_die("mallopt");
	for (long i = 0; i < n; i++)
		free(wl_site_large(1 << 20));
	truth("wl_site_large", (uint64_t)n * words(1 << 20), 0, (uint64_t)n);
	/* Eight stacks of 8 MiB mapped by pthread_create at once (the stack cache holds none). */
	for (int i = 0; i < 8; i++)
		if (pthread_create(&t[i], NULL, idle_thread, NULL))
			wl_die("pthread_create");
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	for (long i = 0; i < n; i++) {
		void *p = wl_site_mmap(1 << 20);

		munmap(p, 1 << 20);
	}
	truth("wl_site_mmap", (uint64_t)n * words(1 << 20), 0, (uint64_t)n);
	return 0;
}

struct queue {
	void **slots;
	long n, size;
};

static void *producer(void *arg)
{
	struct queue *q = arg;

	for (long i = 0; i < q->n; i++)
		q->slots[i] = wl_site_thread((size_t)q->size);
	return NULL;
}

static int run_threads(long nthreads, long n, long size)
{
	pthread_t th[64];
	struct queue q[64];

	if (nthreads < 1 || nthreads > 64)
		return 2;
	for (long t = 0; t < nthreads; t++) {
		q[t] = (struct queue){ .slots = calloc((size_t)n, sizeof(void *)), .n = n,
				       .size = size };
		if (!q[t].slots)
			wl_die("calloc");
		if (pthread_create(&th[t], NULL, producer, &q[t]))
			wl_die("pthread_create");
	}
	/* Threads exit first: their entries become orphans; main frees everything. */
	for (long t = 0; t < nthreads; t++)
		pthread_join(th[t], NULL);
	for (long t = 0; t < nthreads; t++) {
		for (long i = 0; i < n; i++)
			free(q[t].slots[i]);
		free(q[t].slots);
	}
	truth("wl_site_thread", (uint64_t)(nthreads * n) * words((size_t)size), 0,
	      (uint64_t)(nthreads * n));
	return 0;
}

static int run_fork(void)
{
	const long n = 20000;
	int st;
	pid_t child;

	for (long i = 0; i < n; i++)
		wl_site_parent(1000);
	child = fork();
	if (child < 0)
		wl_die("fork");
	if (child == 0) {
		settle();
		for (long i = 0; i < 2 * n; i++)
			wl_site_child(1000);
		printf("CHILD %d\n", (int)getpid());
		truth("wl_site_child", 2 * n * words(1000), 2 * n * words(1000), 2 * n);
		exit(0);
	}
	if (waitpid(child, &st, 0) != child)
		wl_die("waitpid");
	truth("wl_site_parent", n * words(1000), n * words(1000), n);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

static int run_exec(char *self)
{
	const long n = 20000;

	for (long i = 0; i < n; i++)
		wl_site_pre_exec(1000);
	/* Freed by exec: the engine collects them. */
	truth("wl_site_pre_exec", n * words(1000), 0, n);
	fflush(stdout);
	execl("/proc/self/exe", self, "post-exec", (char *)NULL);
	wl_die("exec");
	return 3;
}

static int run_post_exec(void)
{
	const long n = 30000;

	settle();
	for (long i = 0; i < n; i++)
		wl_site_post_exec(1000);
	truth("wl_site_post_exec", n * words(1000), n * words(1000), n);
	return 0;
}

NOINLINE static void wl_deep_b(void)
{
	/* enough blocks that several get sampled at any rate the tests use */
	for (int i = 0; i < 5000; i++)
		wl_site_deep(4000);
	touch++;
}

NOINLINE static void wl_deep_a(void)
{
	wl_deep_b();
	touch++;
}

static int run_spin(const char *file)
{
	for (long i = 0;; i++) {
		free(wl_site_spin(512));
		if (i == 20000) {
			FILE *f = fopen(file, "w");

			if (!f)
				wl_die("fopen");
			fprintf(f, "%d\n", (int)getpid());
			fclose(f);
		}
	}
	return 0;
}

/*
 * Driven through stdin by tests/bpf/engine_check.c: "leak N" allocates N blocks of 1000 bytes
 * at wl_site_ctl and keeps them, "free" frees every kept block, "exit" exits. Each command is
 * answered by "done" once it is complete (its probe events are in the ring buffer by then).
 */
static int run_ctl(void)
{
	static void *kept[1 << 20];
	static char inbuf[BUFSIZ], outbuf[BUFSIZ];
	long nkept = 0, n;
	char line[128];

	/* stdio's own buffers are malloc'ed on first use: the stdin one by the first fgets(),
	 * right after "ready", while the test may already be attaching. That block (4 KiB, almost
	 * surely sampled) lives until exit and was counted as a leak of the first profile. Static
	 * buffers: the only allocator calls here are the commands'. */
	setvbuf(stdin, inbuf, _IOFBF, sizeof(inbuf));
	setvbuf(stdout, outbuf, _IOFBF, sizeof(outbuf));
	printf("ready\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		if (sscanf(line, "leak %ld", &n) == 1) {
			for (long i = 0; i < n && nkept < (1 << 20); i++)
				kept[nkept++] = wl_site_ctl(1000);
		} else if (!strncmp(line, "free", 4)) {
			while (nkept > 0)
				free(kept[--nkept]);
		} else if (!strncmp(line, "exit", 4)) {
			return 0;
		}
		printf("done\n");
		fflush(stdout);
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";

	if (!strcmp(mode, "equal") && (argc == 4 || argc == 5))
		return run_equal(atol(argv[2]), atol(argv[3]), argc == 5 ? atol(argv[4]) : 0);
	if (!strcmp(mode, "sites"))
		return run_sites(argc > 2 ? atol(argv[2]) : 1);
	if (!strcmp(mode, "sizes"))
		return run_sizes(argc > 2 ? atol(argv[2]) : 1, argc > 3 && !strcmp(argv[3], "gate"));
	if (!strcmp(mode, "threads") && argc == 5)
		return run_threads(atol(argv[2]), atol(argv[3]), atol(argv[4]));
	if (!strcmp(mode, "fork"))
		return run_fork();
	if (!strcmp(mode, "exec"))
		return run_exec(argv[0]);
	if (!strcmp(mode, "post-exec"))
		return run_post_exec();
	if (!strcmp(mode, "deep")) {
		wl_deep_a();
		truth("wl_site_deep", 5000 * words(4000), 5000 * words(4000), 5000);
		return 0;
	}
	if (!strcmp(mode, "ctl"))
		return run_ctl();
	if (!strcmp(mode, "spin") && argc == 3)
		return run_spin(argv[2]);
	if (!strcmp(mode, "libcmaps") && argc == 3)
		return run_libcmaps(atol(argv[2]));
	fprintf(stderr, "usage: wl_alloc equal N SIZE [K] | sites [SCALE] | sizes [MIB [gate]] | "
		"threads T N SIZE | "
		"fork | exec | deep | ctl | spin FILE | libcmaps N\n");
	return 2;
}
