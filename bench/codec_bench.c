// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * codec_bench: throughput of the memtrace writer and reader on a synthetic trace shaped like a
 * native process's: backtraces of ~20 frames drawn from a few hundred call paths (so
 * consecutive backtraces share long prefixes), mixed sizes, 80% of objects freed. Prints
 * events/s for encoding and decoding, plain and zstd. Not a test: numbers only.
 *
 *   codec_bench [NEVENTS]
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <memprof/trace.h>

#include "bench.h"

#define NPATHS		400
#define DEPTH		20
#define NCODES		2000

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
	return bench_xorshift64(&rng);
}

static uint64_t paths[NPATHS][DEPTH];

static void make_paths(void)
{
	/* A tree: each path shares a random-length prefix with an earlier one. */
	for (int p = 0; p < NPATHS; p++) {
		int from = p ? (int)(rnd() % (uint64_t)p) : 0, share = p ? (int)(rnd() % DEPTH) : 0;

		for (int d = 0; d < DEPTH; d++)
			paths[p][d] = d < share ? paths[from][d]
						: 0x400000 + (rnd() % NCODES) * 16;
	}
}

static int write_trace(const char *path, int zstd, unsigned long n, double *secs)
{
	struct memprof_trace_info info = { .sample_rate = 1e-4, .word_size = 64,
					   .executable_name = "bench", .host_name = "h",
					   .pid = 1, .start_time_us = 1700000000000000ull };
	struct memprof_writer_opts o = { .sz = sizeof(o), .zstd_level = zstd };
	struct memprof_location loc = { "lib/module.c", NULL, 0, 0, 0 };
	char def[64];
	uint64_t *live = malloc(n * sizeof(*live)), t = info.start_time_us, id;
	unsigned long nlive = 0;
	struct memprof_writer *w;
	double t0;
	int err = 0;

	w = memprof_writer__open(path, &info, &o);
	if (!w || !live) {
		fprintf(stderr, "codec_bench: Failed to create '%s': %s\n", path, strerror(errno));
		free(live);
		return -1;
	}
	/* Definitions up front (the daemon symbolizes once per code). */
	for (uint64_t c = 0; c < NCODES; c++) {
		snprintf(def, sizeof(def), "function_%" PRIu64, c);
		loc.defname = def;
		loc.line = (uint32_t)c;
		err = memprof_writer__location(w, 0x400000 + c * 16, &loc, 1);
		if (err)
			break;
	}
	t0 = bench_now_s();
	for (unsigned long i = 0; i < n && !err; i++) {
		t += rnd() % 20;
		if (nlive && rnd() % 10 < 4) {
			unsigned long k = rnd() % nlive;

			err = memprof_writer__collect(w, t, live[k]);
			live[k] = live[--nlive];
		} else {
			const uint64_t *bt = paths[rnd() % NPATHS];
			uint64_t words = 1 + (rnd() % 8 ? rnd() % 16 : rnd() % 100000);

			err = memprof_writer__alloc(w, t, words, 1 + words / 1000,
						    MEMPROF_SOURCE_EXTERNAL, bt, DEPTH, &id);
			live[nlive++] = id;
		}
	}
	if (!err)
		err = memprof_writer__close(w);
	else
		memprof_writer__close(w);
	*secs = bench_now_s() - t0;
	free(live);
	if (err)
		fprintf(stderr, "codec_bench: Failed to write '%s': %s\n", path, strerror(-err));
	return err;
}

static long read_trace(const char *path, double *secs)
{
	struct memprof_reader_opts o = { .sz = sizeof(o) };
	struct memprof_event ev;
	struct memprof_reader *r;
	char err[256];
	long n = 0;
	double t0 = bench_now_s();
	int ret;

	r = memprof_reader__open(path, &o, err, sizeof(err));
	if (!r) {
		fprintf(stderr, "codec_bench: Failed to open '%s': %s\n", path, err);
		return -1;
	}
	while ((ret = memprof_reader__next(r, &ev)) > 0)
		n++;
	*secs = bench_now_s() - t0;
	if (ret < 0) {
		fprintf(stderr, "codec_bench: Failed to read '%s': %s\n", path,
			memprof_reader__errmsg(r));
		n = -1;
	}
	memprof_reader__free(r);
	return n;
}

int main(int argc, char **argv)
{
	unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 10) : 3000000;
	char path[] = "/tmp/codec_bench.XXXXXX";
	int fd = mkstemp(path);

	if (fd < 0) {
		perror("codec_bench: mkstemp");
		return 1;
	}
	close(fd);
	make_paths();
	printf("codec_bench: %lu events, %d-frame backtraces over %d paths\n", n, DEPTH, NPATHS);
	for (int zstd = 0; zstd <= 3; zstd += 3) {
		double we, rd;
		long got;
		FILE *f;
		long size = 0;

		if (write_trace(path, zstd, n, &we))
			goto fail;
		f = fopen(path, "re");
		if (f) {
			fseek(f, 0, SEEK_END);
			size = ftell(f);
			fclose(f);
		}
		got = read_trace(path, &rd);
		if (got < 0)
			goto fail;
		printf("  %-5s encode %6.2f M events/s   decode %6.2f M events/s   %5.1f bytes/event\n",
		       zstd ? "zstd" : "plain", (double)n / we / 1e6, (double)got / rd / 1e6,
		       (double)size / (double)n);
	}
	unlink(path);
	return 0;
fail:
	unlink(path);
	return 1;
}
