// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * What the writer spends per event, pinned to the format's floor: an alloc whose backtrace
 * equals the previous one costs its fixed fields only (event header 4, length 1 or 3, nsamples
 * 1, source 1, common prefix 1, codeword count 2), a collect 5 (7 with a delta over 252), a
 * backtrace suffix that the cache's predictions cover one codeword (2 bytes up to 2 frames, 3
 * up to 256), a location is defined once per trace, and packets are filled to within one
 * event of the 32 KiB limit. A stream shaped like the benchmark's mixed-size loop (sizes 16..4096
 * bytes, size-biased sampling, every block freed) is then accounted for to the byte, and reads
 * back with the strict reader as written. Any byte the writer adds beyond these fails here.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memprof/trace.h>

#include "tests/unit/test.h"
#include "userspace-lib/rng.h"

#define HDR		66u		/* v2 packet header */
#define T0		1700000000000000ull

static char *tmp_path(const char *name)
{
	static char buf[4096];
	const char *tmp = getenv("MP_TMP");

	snprintf(buf, sizeof(buf), "%s/%s", tmp ? tmp : "/tmp", name);
	return buf;
}

static const struct memprof_trace_info info = {
	.sample_rate = 1e-4,
	.word_size = 64,
	.executable_name = "size-test",
	.host_name = "h",
	.pid = 4242,
	.start_time_us = T0,
};

static struct memprof_writer *open_writer(const char *name)
{
	struct memprof_writer_opts o = { .sz = sizeof(o) };

	return memprof_writer__open(tmp_path(name), &info, &o);
}

static uint64_t T = T0;

static int define(struct memprof_writer *w, uint64_t code)
{
	char def[32];
	struct memprof_location l = { "f.c", def, (uint32_t)code & 0xFFFF, 1, 2 };

	snprintf(def, sizeof(def), "fn%" PRIu64, code);
	return memprof_writer__location(w, code, &l, 1);
}

static int alloc(struct memprof_writer *w, uint64_t length, uint64_t nsamples, const uint64_t *bt,
		 size_t n, uint64_t *id)
{
	T += 3;
	return memprof_writer__alloc(w, T, length, nsamples, MEMPROF_SOURCE_EXTERNAL, bt, n, id);
}

/* Bytes written between two flushes, minus the one packet header they wrote. */
static uint64_t mark(struct memprof_writer *w)
{
	ASSERT_OK(memprof_writer__flush(w), "flush");
	return memprof_writer__bytes(w);
}

static int64_t since(struct memprof_writer *w, uint64_t m)
{
	return (int64_t)(mark(w) - m) - HDR;
}

static void test_event_fields(void)
{
	struct memprof_writer *w = open_writer("size-fields.ctf");
	uint64_t bt[3] = { 0x401000, 0x401100, 0x401200 }, id, first, m;

	if (!ASSERT_TRUE(w, "open writer"))
		return;
	for (int i = 0; i < 3; i++)
		ASSERT_OK(define(w, bt[i]), "define");
	ASSERT_OK(alloc(w, 100, 1, bt, 3, &first), "first alloc");

	/* same backtrace: prefix 3, no codewords */
	m = mark(w);
	ASSERT_OK(alloc(w, 252, 1, bt, 3, &id), "alloc");
	ASSERT_EQ(since(w, m), 4 + 1 + 1 + 1 + 1 + 2, "alloc, length <= 252 words");
	m = mark(w);
	ASSERT_OK(alloc(w, 253, 1, bt, 3, &id), "alloc");
	ASSERT_EQ(since(w, m), 4 + 3 + 1 + 1 + 1 + 2, "alloc, length 253..65535 words");
	m = mark(w);
	ASSERT_OK(alloc(w, 300, 7, bt, 3, &id), "alloc");
	ASSERT_EQ(since(w, m), 12, "alloc with 7 samples");

	/* collects: 5 bytes, 7 once the object is more than 252 allocs back */
	m = mark(w);
	ASSERT_OK(memprof_writer__collect(w, T, id), "collect latest");
	ASSERT_EQ(since(w, m), 5, "collect, delta 0");
	for (int i = 0; i < 300; i++)
		ASSERT_OK(alloc(w, 10, 1, bt, 3, &id), "filler alloc");
	m = mark(w);
	ASSERT_OK(memprof_writer__collect(w, T, first), "collect 303 back");
	ASSERT_EQ(since(w, m), 7, "collect, delta 253..65535");

	/* redefining a code writes nothing */
	m = mark(w);
	ASSERT_OK(define(w, bt[1]), "redefine");
	ASSERT_EQ(mark(w), m, "a location is written once per trace");
	ASSERT_OK(memprof_writer__close(w), "close");
}

/*
 * Backtrace suffixes the cache already knows: after one pass over a path (misses that also set
 * the predictions), any suffix of it costs one codeword: 2 bytes for 1 or 2 frames, 3 bytes
 * for 3..256 frames; 300 frames of recursion cost a handful of codewords, not 300.
 */
static void test_suffix_codewords(void)
{
	struct memprof_writer *w = open_writer("size-suffix.ctf");
	uint64_t path[40], other[2] = { 0x500000, 0x500100 }, rec[301], id, m;
	struct memprof_reader *r;
	struct memprof_event ev;
	char err[256];
	int n = 0;

	if (!ASSERT_TRUE(w, "open writer"))
		return;
	for (int i = 0; i < 40; i++) {
		path[i] = 0x600000 + 0x40 * (uint64_t)i;
		ASSERT_OK(define(w, path[i]), "define path");
	}
	for (int i = 0; i < 2; i++)
		ASSERT_OK(define(w, other[i]), "define other");
	ASSERT_OK(alloc(w, 8, 1, path, 40, &id), "learn the path");
	for (int i = 0; i < 301; i++)
		rec[i] = i ? 0x700000 : path[0];
	ASSERT_OK(define(w, 0x700000), "define recursion");

	/* Alternate with a stack sharing nothing (prefix 0), then come back to a suffix of the
	 * path: prefix k, and 40 - k frames from the cache. */
	for (int k = 39; k >= 0; k -= 3) {
		ASSERT_OK(alloc(w, 8, 1, other, 2, &id), "other");
		ASSERT_OK(alloc(w, 8, 1, path, (size_t)k, &id), "path prefix");
		m = mark(w);
		ASSERT_OK(alloc(w, 8, 1, path, 40, &id), "path");
		ASSERT_EQ(since(w, m), 10 + (40 - k <= 2 ? 2 : 3),
			  "suffix of a known path is one codeword");
	}
	ASSERT_OK(alloc(w, 8, 1, rec, 301, &id), "learn the recursion");
	ASSERT_OK(alloc(w, 8, 1, other, 2, &id), "other");
	m = mark(w);
	ASSERT_OK(alloc(w, 8, 1, rec, 301, &id), "recursion");
	ASSERT_TRUE(since(w, m) <= 10 + 3 * 3, "300 recursive frames in <= 3 codewords");
	ASSERT_OK(memprof_writer__close(w), "close");

	/* and the strict reader decodes what was written */
	r = memprof_reader__open(tmp_path("size-suffix.ctf"), NULL, err, sizeof(err));
	if (!ASSERT_TRUE(r, err))
		return;
	while (memprof_reader__next(r, &ev) == 1) {
		if (ev.type != MEMPROF_EV_ALLOC)
			continue;
		if (ev.backtrace_len == 40)
			ASSERT_TRUE(!memcmp(ev.backtrace, path, sizeof(path)), "path read back");
		else if (ev.backtrace_len == 301)
			ASSERT_TRUE(!memcmp(ev.backtrace, rec, sizeof(rec)), "recursion read back");
		n++;
	}
	ASSERT_STREQ(memprof_reader__errmsg(r) ? memprof_reader__errmsg(r) : "", "", "no error");
	ASSERT_EQ(n, 1 + 14 * 3 + 3, "allocs read back");
	memprof_reader__free(r);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
	return mp_splitmix64(&rng);
}

static size_t vint_len(uint64_t v)
{
	return v <= 252 ? 1 : v <= 0xFFFF ? 3 : 5;
}

struct live {
	uint64_t id, slot;
};

/*
 * The mixed-size loop as the daemon writes it: a ring of 256 blocks of 16..4096 bytes, each op
 * frees one slot and allocates into it; a block is sampled with probability ~ its words
 * (size-biased, as Binomial(w, λ) sampling is), backtrace always the same 3 frames. The file
 * must be exactly: info packet + packet headers + 3 location events + the fields of each event,
 * and every packet but the last within one event of 32 KiB.
 */
static void test_mixed_loop_accounting(void)
{
	const char *path = tmp_path("size-mixed.ctf");
	struct memprof_writer *w = open_writer("size-mixed.ctf");
	uint64_t bt[3] = { 0x7f0000001234, 0x555500001211, 0x55550000167a };
	uint64_t ring_id[256], fields = 0, sampled = 0, freed = 0, info_len, loc_len, m;
	bool ring_live[256] = { false };
	uint64_t npk = 0, pos, fsize;
	struct memprof_reader *r;
	struct memprof_event ev;
	uint8_t *buf = NULL;
	char err[256];
	struct stat st;
	int fd;

	if (!ASSERT_TRUE(w, "open writer"))
		return;
	info_len = memprof_writer__bytes(w);
	m = mark(w);
	for (int i = 0; i < 3; i++)
		ASSERT_OK(define(w, bt[i]), "define");
	loc_len = (uint64_t)since(w, m);
	for (unsigned int op = 0; op < 400000 && test_ok; op++) {
		uint64_t x = rnd(), slot = x % 256, size = 16 + (x >> 32) % 4081;
		uint64_t words = (size + 7) / 8;

		T += 1 + x % 5;
		if (ring_live[slot]) {
			ASSERT_OK(memprof_writer__collect(w, T, ring_id[slot]), "collect");
			fields += 4 + vint_len(sampled - 1 - ring_id[slot]);
			ring_live[slot] = false;
			freed++;
		}
		/* sampled with probability (words + 1) / 2^14: ~2.6% of ops */
		if ((rnd() & 16383) < words + 1) {
			ASSERT_OK(memprof_writer__alloc(w, T, words, 1, MEMPROF_SOURCE_EXTERNAL, bt, 3,
							&ring_id[slot]),
				  "alloc");
			ASSERT_EQ(ring_id[slot], sampled, "ids contiguous");
			/* the first alloc carries the 3 misses (3 x 10 bytes) */
			fields += 4 + vint_len(words) + 1 + 1 + 1 + 2 + (sampled ? 0 : 30);
			ring_live[slot] = true;
			sampled++;
		}
	}
	ASSERT_OK(memprof_writer__close(w), "close");
	ASSERT_TRUE(sampled > 5000, "thousands of samples");

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (!ASSERT_TRUE(fd >= 0 && !fstat(fd, &st), "open trace"))
		return;
	fsize = (uint64_t)st.st_size;
	buf = malloc(fsize);
	ASSERT_EQ(read(fd, buf, fsize), (ssize_t)fsize, "read trace");
	close(fd);
	/* packets: the info packet, the locations' packet (flushed by mark()), then events */
	for (pos = 0; pos + HDR <= fsize; npk++) {
		uint32_t bits;

		memcpy(&bits, buf + pos + 4, 4);
		if (!ASSERT_TRUE(bits / 8 >= HDR, "packet size"))
			break;
		if (npk >= 2 && pos + bits / 8 < fsize)
			ASSERT_TRUE(bits / 8 > 32768 - 64, "full packets are filled");
		pos += bits / 8;
	}
	ASSERT_EQ(pos, fsize, "packets cover the file");
	ASSERT_EQ(fsize, info_len + (npk - 1) * HDR + loc_len + fields,
		  "every byte is a required field, a packet header, the info or a location");
	fprintf(stderr, "mixed loop: %" PRIu64 " sampled blocks, %" PRIu64 " bytes, %.3f per block "
		"(event fields %.3f)\n", sampled, fsize, (double)fsize / (double)sampled,
		(double)fields / (double)sampled);
	free(buf);

	r = memprof_reader__open(path, NULL, err, sizeof(err));
	if (!ASSERT_TRUE(r, err))
		return;
	{
		uint64_t na = 0, nc = 0;
		int ret;

		while ((ret = memprof_reader__next(r, &ev)) == 1) {
			if (ev.type == MEMPROF_EV_ALLOC) {
				ASSERT_EQ(ev.id, na, "alloc id");
				ASSERT_EQ(ev.backtrace_len, 3, "backtrace length");
				ASSERT_TRUE(ev.backtrace_len == 3 && !memcmp(ev.backtrace, bt, sizeof(bt)),
					    "backtrace");
				ASSERT_EQ(ev.source, MEMPROF_SOURCE_EXTERNAL, "source");
				na++;
			} else if (ev.type == MEMPROF_EV_COLLECT) {
				nc++;
			}
		}
		ASSERT_EQ(ret, 0, memprof_reader__errmsg(r) ? memprof_reader__errmsg(r) : "read");
		ASSERT_EQ(na, sampled, "allocs read back");
		ASSERT_EQ(nc, freed, "collects read back");
	}
	memprof_reader__free(r);
}

int main(void)
{
	RUN(test_event_fields);
	RUN(test_suffix_codewords);
	RUN(test_mixed_loop_accounting);
	return test_exit();
}
