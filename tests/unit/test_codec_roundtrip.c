// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Writer -> reader round trips on random traces (fixed seeds): backtraces with shared
 * prefixes, deep recursion, more filenames than the MTF table holds, inlined frames, clamped
 * fields, short and long allocs, promotes, collects, packets crossing the 2^25 µs wrap, idle
 * gaps longer than 30 s, clocks stepping back; v2 and v3, plain and zstd. Every event must
 * read back exactly as written, and the plain files are checked packet by packet against the
 * format's limits. Also: a writer killed mid-trace leaves a readable prefix.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memprof/trace.h>

#include "tests/unit/test.h"

static uint64_t rng_state;

static uint64_t rnd(void)
{
	uint64_t x = rng_state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rng_state = x;
}

static uint64_t below(uint64_t n)
{
	return n ? rnd() % n : 0;
}

static char *tmp_path(const char *name)
{
	static char buf[4096];
	const char *tmp = getenv("MP_TMP");

	snprintf(buf, sizeof(buf), "%s/%s", tmp ? tmp : "/tmp", name);
	return buf;
}

#define NCODES		600
#define NFILES		45
#define NDEFS		80
#define MAX_BT		4000
#define KEEP_BT		3000	/* the writer keeps the innermost 3000 frames */

struct code {
	uint64_t code;
	unsigned int nlocs;
	struct memprof_location locs[3];
	bool defined;
};

struct exp_event {
	enum memprof_event_type type;
	uint64_t time, id, length, nsamples;
	enum memprof_source source;
	uint64_t *bt;
	size_t bt_len;
};

struct gen {
	struct code codes[NCODES];
	char files[NFILES][48];
	char defs[NDEFS][64];
	struct exp_event *ev;
	size_t nev, cap;
	uint64_t live[1 << 16];
	size_t nlive;
};

static uint32_t clampu(uint32_t v, uint32_t max)
{
	return v > max ? max : v;
}

static void gen_codes(struct gen *g)
{
	for (int i = 0; i < NFILES; i++)
		snprintf(g->files[i], sizeof(g->files[i]), "src/dir%d/file_%d.c", i % 7, i);
	for (int i = 0; i < NDEFS; i++)
		snprintf(g->defs[i], sizeof(g->defs[i]), "Module%d.function_%d", i % 5, i);
	for (int i = 0; i < NCODES; i++) {
		struct code *c = &g->codes[i];

		do {
			c->code = (rnd() >> 2) | 1;	/* 1 <= code < 2^62 */
			if (i % 50 == 0)
				c->code = (uint64_t)i + 1;	/* small codes too */
		} while (!c->code);
		c->nlocs = i % 13 == 0 ? 0 : (i % 7 == 0 ? 3 : 1);	/* no info, inlined */
		c->defined = false;
		for (unsigned int k = 0; k < c->nlocs; k++) {
			struct memprof_location *l = &c->locs[k];

			l->filename = g->files[below(NFILES)];
			l->defname = g->defs[below(NDEFS)];
			l->line = below(10) == 0 ? (uint32_t)rnd() : (uint32_t)below(5000);
			l->start_char = below(10) == 0 ? 4000 : (uint32_t)below(200);
			l->end_char = below(10) == 0 ? 70000 : (uint32_t)below(900);
		}
	}
}

static void push_event(struct gen *g, struct exp_event *e)
{
	if (g->nev == g->cap) {
		g->cap = g->cap ? g->cap * 2 : 1024;
		g->ev = realloc(g->ev, g->cap * sizeof(*g->ev));
	}
	g->ev[g->nev++] = *e;
}

static int define_used(struct gen *g, struct memprof_writer *w, const unsigned int *idx, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct code *c = &g->codes[idx[i]];

		if (c->defined)
			continue;
		if (memprof_writer__location(w, c->code, c->locs, c->nlocs))
			return -1;
		c->defined = true;
	}
	return 0;
}

/* Write a random trace of @nev events; record what the reader must return. */
static bool write_trace(struct gen *g, const char *path, uint16_t version, int zstd,
			uint64_t seed, unsigned int nev, int real_verifier)
{
	struct memprof_writer_opts o = { .sz = sizeof(o), .version = version, .zstd_level = zstd,
					 .real_verifier = real_verifier };
	/* Start just below a 2^25 µs boundary so early packets straddle the wrap. */
	uint64_t start = (UINT64_C(1700000000000000) | ((1u << 25) - 1)) - 300;
	struct memprof_trace_info info = {
		.sample_rate = 1e-4, .word_size = 64, .executable_name = "/usr/bin/roundtrip",
		.host_name = "host", .runtime_params = "", .pid = 4242, .start_time_us = start,
		.context = "seed", .initial_domain = 7,
	};
	static unsigned int stack[MAX_BT];
	static uint64_t bt[MAX_BT];
	size_t depth = 0;
	uint64_t t = start, last = start, id;
	struct memprof_writer *w;

	rng_state = seed;
	memset(g, 0, sizeof(*g));
	gen_codes(g);
	w = memprof_writer__open(path, &info, &o);
	if (!ASSERT_TRUE(w != NULL, "writer open"))
		return false;
	for (unsigned int n = 0; n < nev; n++) {
		struct exp_event e = {};
		uint64_t r = below(100);

		/* Time: mostly small steps; sometimes > 30 s idle; sometimes the clock steps back. */
		if (below(500) == 0)
			t += 31000000 + below(5000000);
		else if (below(200) == 0)
			t -= below(3000);
		else
			t += below(r < 50 ? 3 : 400);
		e.time = (t > last ? t : last);
		last = e.time;
		e.time -= start;

		if (r < 60 || !g->nlive) {
			size_t keep = depth ? below(depth + 1) : 0, push = 1 + below(6);

			if (below(60) == 0) {
				/* Deep recursion: 300..700 frames of one code. */
				unsigned int c = (unsigned int)below(NCODES), k = 300 + below(400);

				for (unsigned int i = 0; i < k && keep < MAX_BT; i++)
					stack[keep++] = c;
				push = 1;
			} else if (below(400) == 0) {
				/* Longer than the writer keeps. */
				keep = 0;
				push = MAX_BT;
			}
			for (size_t i = 0; i < push && keep < MAX_BT; i++)
				stack[keep++] = (unsigned int)below(NCODES);
			depth = keep;
			if (below(30) == 0)
				depth = 0;	/* an empty backtrace */
			if (define_used(g, w, stack, depth)) {
				ASSERT_TRUE(false, "define location");
				break;
			}
			for (size_t i = 0; i < depth; i++)
				bt[i] = g->codes[stack[i]].code;
			e.type = MEMPROF_EV_ALLOC;
			if (below(2)) {
				e.length = 1 + below(16);
				e.nsamples = 1;
				e.source = MEMPROF_SOURCE_MINOR;
			} else {
				e.length = below(4) ? below(100000) : rnd() >> 24;
				e.nsamples = 1 + (below(3) ? below(3) : rnd() >> 40);
				e.source = (enum memprof_source)below(3);
			}
			if (!ASSERT_OK(memprof_writer__alloc(w, start + e.time, e.length, e.nsamples,
							     e.source, bt, depth, &id), "alloc"))
				break;
			e.id = id;
			e.bt_len = depth > KEEP_BT ? KEEP_BT : depth;
			e.bt = malloc((e.bt_len + 1) * sizeof(uint64_t));
			memcpy(e.bt, bt + (depth - e.bt_len), e.bt_len * sizeof(uint64_t));
			if (g->nlive < sizeof(g->live) / sizeof(g->live[0]))
				g->live[g->nlive++] = id;
		} else {
			size_t k = below(g->nlive);

			e.id = g->live[k];
			if (r < 65) {
				e.type = MEMPROF_EV_PROMOTE;
				if (!ASSERT_OK(memprof_writer__promote(w, start + e.time, e.id), "promote"))
					break;
			} else {
				e.type = MEMPROF_EV_COLLECT;
				if (!ASSERT_OK(memprof_writer__collect(w, start + e.time, e.id), "collect"))
					break;
				g->live[k] = g->live[--g->nlive];
			}
		}
		push_event(g, &e);
		if (below(3000) == 0)
			ASSERT_OK(memprof_writer__flush(w), "flush");
	}
	/* Redefining identically is a no-op; differently is refused. */
	ASSERT_OK(memprof_writer__location(w, g->codes[1].code, g->codes[1].locs,
					   g->codes[1].nlocs), "identical redefinition");
	ASSERT_EQ(memprof_writer__location(w, g->codes[1].code, g->codes[2].locs, 2), -EINVAL,
		  "different redefinition");
	ASSERT_EQ(memprof_writer__alloc(w, t, 1, 1, MEMPROF_SOURCE_MINOR,
					(uint64_t[]){ 0x3ffffffffffffffull }, 1, NULL), -ENOENT,
		  "undefined code");
	ASSERT_EQ(memprof_writer__collect(w, t, 1u << 30), -EINVAL, "unknown id");
	return ASSERT_OK(memprof_writer__close(w), "close");
}

static bool read_back(struct gen *g, const char *path, uint16_t version)
{
	struct memprof_reader_opts o = { .sz = sizeof(o) };
	const struct memprof_trace_info *info;
	struct memprof_event ev;
	struct memprof_reader *r;
	char err[256] = "";
	size_t n = 0;
	int ret;

	r = memprof_reader__open(path, &o, err, sizeof(err));
	if (!ASSERT_TRUE(r != NULL, err))
		return false;
	info = memprof_reader__info(r);
	ASSERT_EQ(info->version, version, "version");
	ASSERT_EQ(info->pid, 4242, "pid");
	ASSERT_EQ(info->initial_domain, version >= 3 ? 7 : 0, "initial domain");
	ASSERT_STREQ(info->context, "seed", "context");
	ASSERT_STREQ(info->executable_name, "/usr/bin/roundtrip", "executable");
	ASSERT_TRUE(info->sample_rate == 1e-4, "sample rate");
	while ((ret = memprof_reader__next(r, &ev)) > 0 && test_ok) {
		const struct exp_event *e = &g->ev[n];

		if (!ASSERT_TRUE(n < g->nev, "more events than written"))
			break;
		n++;
		if (!ASSERT_EQ(ev.type, e->type, "type") || !ASSERT_EQ(ev.time_us, e->time, "time") ||
		    !ASSERT_EQ(ev.id, e->id, "id") ||
		    !ASSERT_EQ(ev.domain, version >= 3 ? 7 : 0, "domain"))
			break;
		if (e->type != MEMPROF_EV_ALLOC)
			continue;
		if (!ASSERT_EQ(ev.length, e->length, "length") ||
		    !ASSERT_EQ(ev.nsamples, e->nsamples, "nsamples") ||
		    !ASSERT_EQ(ev.source, e->source, "source") ||
		    !ASSERT_EQ(ev.backtrace_len, e->bt_len, "backtrace length") ||
		    !ASSERT_TRUE(!memcmp(ev.backtrace, e->bt, e->bt_len * sizeof(uint64_t)),
				 "backtrace"))
			break;
	}
	ASSERT_EQ(ret, 0, memprof_reader__errmsg(r));
	ASSERT_EQ(n, g->nev, "event count");
	ASSERT_EQ(memprof_reader__warnings(r), 0, "warnings");
	/* Every location reads back, clamped as the format requires. */
	for (int i = 0; i < NCODES && test_ok; i++) {
		const struct code *c = &g->codes[i];
		const struct memprof_location *l;
		unsigned int nl;

		if (!c->defined)
			continue;
		l = memprof_reader__lookup(r, c->code, &nl);
		if (!ASSERT_TRUE(l || !c->nlocs, "lookup") || !ASSERT_EQ(nl, c->nlocs, "nlocs"))
			break;
		for (unsigned int k = 0; k < nl; k++) {
			ASSERT_STREQ(l[k].filename, c->locs[k].filename, "filename");
			ASSERT_STREQ(l[k].defname, c->locs[k].defname, "defname");
			ASSERT_EQ(l[k].line, clampu(c->locs[k].line, 0xFFFFF), "line");
			ASSERT_EQ(l[k].start_char, clampu(c->locs[k].start_char, 0xFF), "start");
			ASSERT_EQ(l[k].end_char, clampu(c->locs[k].end_char, 0x3FF), "end");
		}
	}
	memprof_reader__free(r);
	return test_ok;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

/* Walk a plain trace's packets and check the limits the writer promises. */
static void check_packets(const char *path, uint16_t version, unsigned int *npackets,
			  unsigned int *nwrapped, unsigned int *nverified)
{
	unsigned int hdr = version >= 3 ? 68 : 66, o = version >= 3 ? 40 : 38;
	uint64_t prev_end = 0, prev_id = 0;
	uint8_t *buf;
	struct stat st;
	size_t pos = 0;
	FILE *f = fopen(path, "re");

	if (!ASSERT_TRUE(f && !fstat(fileno(f), &st), "open trace"))
		return;
	buf = malloc((size_t)st.st_size);
	ASSERT_EQ(fread(buf, 1, (size_t)st.st_size, f), st.st_size, "read trace");
	fclose(f);
	*npackets = *nwrapped = *nverified = 0;
	while (pos + hdr <= (size_t)st.st_size && test_ok) {
		uint32_t size;
		uint64_t begin = get64(buf + pos + 8), end = get64(buf + pos + 16);
		uint64_t idb = get64(buf + pos + o + 12), ide = get64(buf + pos + o + 20);
		uint16_t vix;

		memcpy(&size, buf + pos + 4, 4);
		ASSERT_EQ(size % 8, 0, "size in bits");
		ASSERT_TRUE(size / 8 <= 32768, "packet <= 32768 bytes");
		ASSERT_TRUE(end - begin < 30000000, "packet spans < 30 s");
		ASSERT_TRUE(begin >= prev_end, "packets ordered in time");
		ASSERT_EQ(idb, prev_id, "ids contiguous");
		memcpy(&vix, buf + pos + o, 2);
		if (vix != 0xFFFF)
			(*nverified)++;
		if ((begin >> 25) != (end >> 25))
			(*nwrapped)++;
		prev_end = end;
		prev_id = ide;
		pos += size / 8;
		(*npackets)++;
	}
	ASSERT_EQ(pos, st.st_size, "packets cover the file");
	free(buf);
}

static struct gen G;

static void roundtrip(uint16_t version, int zstd, uint64_t seed, unsigned int nev, int verifier)
{
	char name[64];
	const char *path;

	snprintf(name, sizeof(name), "rt-v%u-%d-%" PRIu64 ".ctf%s", version, zstd, seed,
		 zstd ? ".zst" : "");
	path = tmp_path(name);
	if (!write_trace(&G, path, version, zstd, seed, nev, verifier))
		goto out;
	read_back(&G, path, version);
	if (!zstd) {
		unsigned int np = 0, nw = 0, nv = 0;

		check_packets(path, version, &np, &nw, &nv);
		ASSERT_TRUE(np > 10, "several packets");
		ASSERT_TRUE(nw > 0, "a packet crosses the 2^25 µs wrap");
		if (verifier >= 0)
			ASSERT_TRUE(nv + 2 >= np, "real verifiers in event packets");
		else
			ASSERT_EQ(nv, 0, "no verifiers");
	}
out:
	for (size_t i = 0; i < G.nev; i++)
		free(G.ev[i].bt);
	free(G.ev);
	G.ev = NULL;
	G.nev = G.cap = 0;
}

static void test_v2_plain(void)
{
	roundtrip(2, 0, 1, 60000, 0);
	roundtrip(2, 0, 77, 20000, 0);
}

static void test_v3_plain(void)
{
	roundtrip(3, 0, 2, 60000, 0);
}

static void test_v2_zstd(void)
{
	roundtrip(2, 3, 3, 40000, 0);
}

static void test_v3_zstd(void)
{
	roundtrip(3, 1, 4, 40000, 0);
}

static void test_dummy_verifier(void)
{
	roundtrip(2, 0, 5, 20000, -1);
}

/* A small trace encoded by hand from the memtrace format's rules: the writer must match it byte
 * for byte. */
static void test_worked_example(void)
{
	static const uint8_t expect_info[] = {
		0xC1, 0x1F, 0xFC, 0xC1, 0x08, 0x03, 0x00, 0x00,
	};
	struct memprof_trace_info info = { .sample_rate = 1e-4, .word_size = 64,
					   .executable_name = "a.out", .host_name = "h",
					   .pid = 1234, .start_time_us = 1700000000000000ull };
	struct memprof_writer_opts o = { .sz = sizeof(o), .real_verifier = -1 };
	struct memprof_location l1 = { "x.c", "main", 12, 3, 20 }, l2 = { "x.c", "mk", 40, 5, 11 };
	uint64_t bt[2] = { 0x401000, 0x401100 }, id;
	const char *path = tmp_path("example.ctf");
	uint8_t buf[1024];
	struct memprof_writer *w = memprof_writer__open(path, &info, &o);
	FILE *f;
	size_t n;

	if (!ASSERT_TRUE(w != NULL, "open"))
		return;
	ASSERT_OK(memprof_writer__location(w, 0x401000, &l1, 1), "loc");
	ASSERT_OK(memprof_writer__location(w, 0x401100, &l2, 1), "loc");
	ASSERT_OK(memprof_writer__alloc(w, info.start_time_us + 10, 4, 1, MEMPROF_SOURCE_EXTERNAL,
					bt, 2, &id), "alloc");
	ASSERT_EQ(id, 0, "id");
	ASSERT_OK(memprof_writer__alloc(w, info.start_time_us + 12, 4, 1, MEMPROF_SOURCE_MINOR, bt,
					2, &id), "alloc");
	ASSERT_OK(memprof_writer__collect(w, info.start_time_us + 15, 0), "collect");
	ASSERT_OK(memprof_writer__close(w), "close");
	f = fopen(path, "re");
	n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	ASSERT_TRUE(!memcmp(buf, expect_info, sizeof(expect_info)), "info packet header");
	ASSERT_EQ(buf[28], 2, "version 2");
	/* Trace info 97 bytes; then one packet: 66 + locations (2 x 4+8+1+6 + strings) + events */
	ASSERT_EQ(n, 97 + 66 + (19 + 9) + (19 + 3) + (4 + 6 + 20) + (4 + 2) + (4 + 1), "size");
	/* The long alloc: len 4, nsamples 1, External, prefix 0, 2 codewords; both misses. */
	{
		const uint8_t *a = buf + 97 + 66 + 28 + 22;

		ASSERT_EQ(a[3] >> 1, 2, "code 2 (long alloc)");
		ASSERT_TRUE(!memcmp(a + 4, "\x04\x01\x02\x00\x02\x00", 6), "alloc body");
		ASSERT_EQ(a[6 + 4] & 3, 3, "miss");
		ASSERT_EQ(a[30 + 3] >> 1, 104, "short alloc code 104");
		ASSERT_EQ(a[30 + 4], 2, "prefix 2");
		ASSERT_EQ(a[30 + 5], 0, "no codewords");
	}
}

/* A writer killed without closing leaves every flushed packet readable (plain and zstd). */
static void crash_prefix(int zstd)
{
	struct memprof_trace_info info = { .sample_rate = 1, .word_size = 64, .pid = 9,
					   .start_time_us = 1000000 };
	struct memprof_writer_opts o = { .sz = sizeof(o), .zstd_level = zstd };
	struct memprof_reader_opts ro = { .sz = sizeof(ro) };
	const char *path = tmp_path(zstd ? "crash.ctf.zst" : "crash.ctf");
	struct memprof_location l = { "f.c", "g", 1, 2, 3 };
	struct memprof_event ev;
	struct memprof_reader *r;
	char err[256] = "";
	unsigned int n = 0;
	int status, ret;
	pid_t pid;

	pid = fork();
	if (pid == 0) {
		struct memprof_writer *w = memprof_writer__open(path, &info, &o);
		uint64_t bt[3] = { 1, 2, 3 };

		if (!w)
			_exit(1);
		for (int i = 1; i <= 3; i++)
			memprof_writer__location(w, (uint64_t)i, &l, 1);
		for (int i = 0; i < 1000; i++) {
			memprof_writer__alloc(w, 1000000 + (uint64_t)i, 3, 1, MEMPROF_SOURCE_EXTERNAL,
					      bt, 3, NULL);
			if (i % 100 == 99)
				memprof_writer__flush(w);
		}
		/* 50 more events pending in the packet buffer, then a crash. */
		for (int i = 0; i < 50; i++)
			memprof_writer__alloc(w, 2000000, 3, 1, MEMPROF_SOURCE_EXTERNAL, bt, 3, NULL);
		kill(getpid(), SIGKILL);
		_exit(2);
	}
	ASSERT_TRUE(pid > 0, "fork");
	waitpid(pid, &status, 0);
	ASSERT_TRUE(WIFSIGNALED(status), "writer killed");
	r = memprof_reader__open(path, &ro, err, sizeof(err));
	if (!ASSERT_TRUE(r != NULL, err))
		return;
	while ((ret = memprof_reader__next(r, &ev)) > 0)
		n++;
	ASSERT_EQ(ret, 0, memprof_reader__errmsg(r));
	ASSERT_EQ(n, 1000, "flushed events readable");
	/* An unfinished zstd frame is worth a warning; a plain trace ends on a packet. */
	ASSERT_EQ(memprof_reader__warnings(r), zstd ? 1 : 0, "warnings");
	memprof_reader__free(r);
}

static void test_crash_prefix(void)
{
	crash_prefix(0);
	crash_prefix(5);
}

int main(void)
{
	RUN(test_worked_example);
	RUN(test_v2_plain);
	RUN(test_v3_plain);
	RUN(test_v2_zstd);
	RUN(test_v3_zstd);
	RUN(test_dummy_verifier);
	RUN(test_crash_prefix);
	return test_exit();
}
