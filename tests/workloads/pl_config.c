// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The config-block ABI of libmemprof-preload (<memprof/preload.h>), exercised as memprofd
 * would: from another process, with process_vm_readv/process_vm_writev.
 *
 *	pl_config LIB		(parent: plays the profiler)
 *	pl_config --child	(run by the parent under LD_PRELOAD=LIB)
 *
 * The child runs with MEMPROF_ARM=1 (standing in for an attached probe: the semaphore is
 * tested in tests/bpf/preload-usdt.sh), MEMPROF_RATE=1e-4 and MEMPROF_TEST_LOG. Phases:
 *   A: generation 0, environment rate 1e-4: records carry generation 0, estimate at 1e-4
 *   B: profiler writes rate 0.01 + SAMPLING, then generation 1: records carry generation 1,
 *      estimate at 0.01 (the change takes effect at each thread's next countdown expiry)
 *   C: profiler writes flags 0, generation 2: no sample at all
 *   D: profiler writes an invalid rate (2.0) + SAMPLING, generation 3: no sample either
 * and the library's counters, read back with process_vm_readv, agree with the log.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memprof/preload.h>

#define BLOCK	4008		/* 502 words */
#define COUNT	20000		/* per phase: 10^7 words */

static int failures;

static void result(bool ok, const char *what, double v)
{
	printf("%s: config: %s (%g)\n", ok ? "PASS" : "FAIL", what, v);
	failures += !ok;
}

static int child(void)
{
	struct memprof_preload_config *cfg = dlsym(RTLD_DEFAULT, "memprof_preload_config");
	static void *blocks[COUNT];
	char c;

	if (!cfg)
		return 1;
	if (dprintf(4, "%p\n", (void *)cfg) < 0)
		return 1;
	while (read(3, &c, 1) == 1 && c != 'q') {
		for (int i = 0; i < COUNT; i++) {
			blocks[i] = malloc(BLOCK);
			((volatile char *)blocks[i])[0] = 1;
		}
		for (int i = 0; i < COUNT; i++)
			free(blocks[i]);
		if (write(4, "k", 1) != 1)
			return 1;
	}
	return 0;
}

static pid_t pid;
static uintptr_t remote;

static int peer_read(struct memprof_preload_config *out)
{
	struct iovec l = { out, sizeof(*out) }, r = { (void *)remote, sizeof(*out) };

	return process_vm_readv(pid, &l, 1, &r, 1, 0) == (ssize_t)sizeof(*out) ? 0 : -errno;
}

/* The documented protocol: fields first, generation last, in a second write. */
static int peer_set(double rate, uint32_t flags, uint32_t gen)
{
	struct {
		double rate;
		uint32_t profile, flags;
	} f = { rate, 7, flags };
	struct iovec l = { &f, sizeof(f) },
		     r = { (void *)(remote + offsetof(struct memprof_preload_config, rate)),
			   sizeof(f) };
	struct iovec lg = { &gen, sizeof(gen) },
		     rg = { (void *)(remote + offsetof(struct memprof_preload_config, generation)),
			    sizeof(gen) };

	_Static_assert(offsetof(struct memprof_preload_config, flags) ==
			       offsetof(struct memprof_preload_config, rate) + 12,
		       "rate, profile, flags are contiguous");
	if (process_vm_writev(pid, &l, 1, &r, 1, 0) != (ssize_t)sizeof(f) ||
	    process_vm_writev(pid, &lg, 1, &rg, 1, 0) != (ssize_t)sizeof(gen))
		return -errno;
	return 0;
}

static void phase(int go, int ack)
{
	char c;

	if (write(go, "p", 1) != 1 || read(ack, &c, 1) != 1) {
		printf("FAIL: config: child died\n");
		exit(1);
	}
}

int main(int argc, char **argv)
{
	int go[2], ack[2], status;
	char path[] = "/tmp/pl_config.XXXXXX", line[64];
	int logfd;

	if (argc == 2 && !strcmp(argv[1], "--child"))
		return child();
	if (argc != 2) {
		fprintf(stderr, "usage: pl_config LIB\n");
		return 2;
	}
	logfd = mkstemp(path);
	if (logfd < 0 || pipe(go) || pipe(ack))
		return 1;
	unlink(path);
	pid = fork();
	if (pid == 0) {
		char fdstr[16];

		/* move everything above 5 first: the targets may be any of these fds */
		int g = fcntl(go[0], F_DUPFD, 10), a = fcntl(ack[1], F_DUPFD, 10);
		int l = fcntl(logfd, F_DUPFD, 10);

		if (g < 0 || a < 0 || l < 0 || dup2(g, 3) < 0 || dup2(a, 4) < 0 || dup2(l, 5) < 0)
			_exit(127);
		snprintf(fdstr, sizeof(fdstr), "%d", 5);
		setenv("LD_PRELOAD", argv[1], 1);
		setenv("MEMPROF_ARM", "1", 1);
		setenv("MEMPROF_RATE", "1e-4", 1);
		setenv("MEMPROF_TEST_LOG", fdstr, 1);
		execl("/proc/self/exe", argv[0], "--child", (char *)NULL);
		_exit(127);
	}
	close(go[0]);
	close(ack[1]);
	ssize_t n = read(ack[0], line, sizeof(line) - 1);

	if (n <= 0)
		return 1;
	line[n] = 0;
	remote = strtoull(line, NULL, 16);

	struct memprof_preload_config cfg;

	result(peer_read(&cfg) == 0, "process_vm_readv of the config block", 0);
	result(cfg.magic == MEMPROF_PRELOAD_MAGIC && cfg.version == MEMPROF_PRELOAD_VERSION &&
		       cfg.size == sizeof(cfg),
	       "magic, version and size", cfg.version);
	result(cfg.generation == 0, "generation starts at 0", cfg.generation);

	phase(go[1], ack[0]);				/* A */
	result(peer_set(0.01, MEMPROF_PRELOAD_F_SAMPLING, 1) == 0, "set rate 0.01, gen 1", 1);
	phase(go[1], ack[0]);				/* B */
	result(peer_set(0.01, 0, 2) == 0, "clear SAMPLING, gen 2", 2);
	off_t before_c = lseek(logfd, 0, SEEK_END);
	phase(go[1], ack[0]);				/* C */
	off_t after_c = lseek(logfd, 0, SEEK_END);
	result(peer_set(2.0, MEMPROF_PRELOAD_F_SAMPLING, 3) == 0, "invalid rate, gen 3", 3);
	phase(go[1], ack[0]);				/* D */
	off_t after_d = lseek(logfd, 0, SEEK_END);
	result(peer_read(&cfg) == 0, "read counters back", 0);
	if (write(go[1], "q", 1) != 1)
		return 1;
	waitpid(pid, &status, 0);
	result(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child exited 0", status);
	result(after_c == before_c, "flags without SAMPLING: no samples", (double)(after_c - before_c));
	result(after_d == after_c, "invalid rate: no samples", (double)(after_d - after_c));

	/* Phase A and B from the log. */
	struct stat st;
	fstat(logfd, &st);
	size_t nrec = (size_t)st.st_size / sizeof(struct memprof_preload_test_rec);
	struct memprof_preload_test_rec *recs = malloc(nrec * sizeof(*recs) + 1);

	if (pread(logfd, recs, nrec * sizeof(*recs), 0) != (ssize_t)(nrec * sizeof(*recs)))
		return 1;
	uint64_t nA = 0, nB = 0, allocs = 0, bad_gen = 0;
	bool seen_b = false;
	uint64_t w = (BLOCK + 15) / 8;

	for (size_t i = 0; i < nrec; i++) {
		struct memprof_preload_test_rec *e = &recs[i];

		if (e->type != MEMPROF_PRELOAD_REC_ALLOC)
			continue;
		allocs++;
		if (e->size != BLOCK)
			continue;
		if (e->generation == 0 && !seen_b) {
			nA += e->nsamples;
		} else if (e->generation == 1) {
			seen_b = true;
			nB += e->nsamples;
		} else {
			bad_gen++;
		}
	}
	double wa = (double)w * COUNT, za = (nA / 1e-4 - wa) / sqrt(wa * (1 - 1e-4) / 1e-4);
	double wb = (double)w * COUNT, zb = (nB / 0.01 - wb) / sqrt(wb * (1 - 0.01) / 0.01);

	result(bad_gen == 0, "records carry the generation they were drawn under", (double)bad_gen);
	result(fabs(za) < 4, "phase A (env rate 1e-4) estimate within 4 SE: z", za);
	/* B's first ~1/1e-4 words ran on the old countdown: at most a 0.5 SE shift here. */
	result(fabs(zb) < 4, "phase B (rate 0.01 from the profiler) estimate within 4 SE: z", zb);
	result(cfg.stats[MEMPROF_PRELOAD_STAT_ALLOC_HOOKS] == allocs,
	       "alloc hook counter matches the log", (double)allocs);
	result(cfg.stats[MEMPROF_PRELOAD_STAT_TABLE_FULL] == 0, "no table drops", 0);
	free(recs);
	return failures ? 1 : 0;
}
