// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Crafted traces, byte by byte: every fatal condition of the format, and every extra rule of
 * strict mode, must be rejected with its own message naming the rule; skipped packets and a
 * truncated tail are warnings after which the rest is still read. Also: v1 traces, v3 traces
 * with per-domain decoder state, garbage and corrupt zstd input.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <zstd.h>

#include <memprof/trace.h>

#include "tests/unit/test.h"

#define S	(UINT64_C(1) << 40)	/* start time, aligned on 2^25 µs */
#define PID	100

struct bb {
	uint8_t d[80000];
	size_t n;
};

static void p8(struct bb *b, uint8_t v)
{
	b->d[b->n++] = v;
}

static void p16(struct bb *b, uint16_t v)
{
	memcpy(b->d + b->n, &v, 2);
	b->n += 2;
}

static void p32(struct bb *b, uint32_t v)
{
	memcpy(b->d + b->n, &v, 4);
	b->n += 4;
}

static void p64(struct bb *b, uint64_t v)
{
	memcpy(b->d + b->n, &v, 8);
	b->n += 8;
}

static void pstr(struct bb *b, const char *s)
{
	size_t l = strlen(s) + 1;

	memcpy(b->d + b->n, s, l);
	b->n += l;
}

static void ev(struct bb *b, unsigned int code, uint64_t t)
{
	p32(b, (uint32_t)code << 25 | (uint32_t)(t & 0x1FFFFFF));
}

struct hdr {
	uint16_t version, domain, vix, vpred;
	uint64_t begin, end, pid, vval, idb, ide;
};

static size_t pk_begin(struct bb *b, const struct hdr *h)
{
	size_t start = b->n;

	p32(b, 0xC1FC1FC1);
	p32(b, 0);	/* size, patched by pk_end */
	p64(b, h->begin);
	p64(b, h->end);
	p32(b, 0);
	p16(b, h->version);
	p64(b, h->pid);
	if (h->version >= 3)
		p16(b, h->domain);
	p16(b, h->vix);
	p16(b, h->vpred);
	p64(b, h->vval);
	p64(b, h->idb);
	p64(b, h->ide);
	return start;
}

static void pk_end(struct bb *b, size_t start)
{
	uint32_t bits = (uint32_t)(b->n - start) * 8;

	memcpy(b->d + start + 4, &bits, 4);
}

static struct hdr H(uint16_t version, uint64_t begin, uint64_t end, uint64_t idb, uint64_t ide)
{
	return (struct hdr){ .version = version, .begin = begin, .end = end, .pid = PID,
			     .vix = 0xFFFF, .idb = idb, .ide = ide };
}

static void info_packet(struct bb *b, uint16_t version)
{
	struct hdr h = H(version, S, S, 0, 0);
	size_t st = pk_begin(b, &h);
	double rate = 0.01;

	ev(b, 0, S);
	memcpy(b->d + b->n, &rate, 8);
	b->n += 8;
	p8(b, 64);
	pstr(b, "exe");
	pstr(b, "host");
	pstr(b, "");
	p64(b, PID);
	if (version >= 2)
		pstr(b, "ctx");
	pk_end(b, st);
}

/* One location: line 7, chars 1-2, file and defname as new strings (codes 31). */
static void loc_new(struct bb *b, uint64_t t, uint64_t code, const char *file, const char *def)
{
	uint64_t v = 7 | 1ull << 20 | 2ull << 28 | 31ull << 38 | 31ull << 43;

	ev(b, 1, t);
	p64(b, code);
	p8(b, 1);
	p32(b, (uint32_t)v);
	p16(b, (uint16_t)(v >> 32));
	pstr(b, file);
	pstr(b, def);
}

/* Long alloc of backtrace [0x10, 0x20] as two misses into buckets 1 and 2. */
static void alloc_two(struct bb *b, uint64_t t, uint64_t nsamples, uint8_t source)
{
	ev(b, 2, t);
	p8(b, 5);
	p8(b, (uint8_t)nsamples);
	p8(b, source);
	p8(b, 0);
	p16(b, 2);
	p16(b, 1 << 2 | 3);
	p64(b, 0x10);
	p16(b, 2 << 2 | 3);
	p64(b, 0x20);
}

/* Short alloc of 3 words repeating the previous backtrace. */
static void alloc_same(struct bb *b, uint64_t t, uint8_t pfx)
{
	ev(b, 103, t);
	p8(b, pfx);
	p8(b, 0);
}

/* The start of a location event at @t: @code, one location on line 7, the file and
 * definition name fields @mtf (their strings, if any, follow). */
static void loc_head(struct bb *b, uint64_t t, uint64_t code, unsigned int mtf)
{
	ev(b, 1, t);
	p64(b, code);
	p8(b, 1);
	p32(b, 7);
	p16(b, (uint16_t)mtf);
}

/* The locations 0x10 (f) and 0x20 (g) at @t, then an alloc at @t_alloc with backtrace g, f. */
static void locs_alloc(struct bb *b, uint64_t t, uint64_t t_alloc, uint64_t nsamples,
		       uint8_t source)
{
	loc_new(b, t, 0x10, "a.c", "f");
	loc_new(b, t, 0x20, "a.c", "g");
	alloc_two(b, t_alloc, nsamples, source);
}

/* A valid v2 trace: info; one packet with 2 locations, 2 allocs, promote, 2 collects. */
static void base(struct bb *b)
{
	struct hdr h = H(2, S + 1, S + 9, 0, 2);
	size_t st;

	b->n = 0;
	info_packet(b, 2);
	st = pk_begin(b, &h);
	locs_alloc(b, S + 1, S + 2, 1, 2);
	alloc_same(b, S + 3, 2);
	ev(b, 3, S + 4);
	p8(b, 0);	/* promote id 1 */
	ev(b, 4, S + 5);
	p8(b, 1);	/* collect id 0 */
	ev(b, 4, S + 9);
	p8(b, 0);	/* collect id 1 */
	pk_end(b, st);
}

struct result {
	int open_ok, ret, nevents, warnings;
	char msg[512];
	char warnmsg[512];
};

static void on_warn(void *ctx, uint64_t off, const char *msg)
{
	struct result *r = ctx;

	snprintf(r->warnmsg, sizeof(r->warnmsg), "offset %" PRIu64 ": %s", off, msg);
}

static struct result run(const struct bb *b, int strict)
{
	struct result res = {};
	struct memprof_reader_opts o = { .sz = sizeof(o), .strict = strict, .warn = on_warn,
					 .warn_ctx = &res, .report_locations = 1 };
	struct memprof_event e;
	struct memprof_reader *r;

	r = memprof_reader__new_buf(b->d, b->n, &o, res.msg, sizeof(res.msg));
	res.open_ok = r != NULL;
	if (!r) {
		res.ret = -errno;
		return res;
	}
	while ((res.ret = memprof_reader__next(r, &e)) > 0)
		res.nevents++;
	if (res.ret < 0) {
		snprintf(res.msg, sizeof(res.msg), "%s", memprof_reader__errmsg(r));
		/* Errors are sticky. */
		if (memprof_reader__next(r, &e) != res.ret)
			res.ret = 12345;
	}
	res.warnings = (int)memprof_reader__warnings(r);
	memprof_reader__free(r);
	return res;
}

static void expect_fail(const struct bb *b, int strict, const char *rule, const char *what)
{
	struct result r = run(b, strict);

	if (!ASSERT_TRUE(r.ret < 0, what))
		return;
	ASSERT_EQ(r.ret, -EBADMSG, what);
	if (!ASSERT_TRUE(strstr(r.msg, rule) != NULL, what))
		fprintf(stderr, "  message: '%s', expected rule '%s'\n", r.msg, rule);
	ASSERT_TRUE(!strncmp(r.msg, "offset ", 7), "message names the offset");
}

static void test_base_is_valid(void)
{
	struct bb *b = malloc(sizeof(*b));
	struct result r;

	base(b);
	r = run(b, 0);
	ASSERT_EQ(r.ret, 0, r.msg);
	ASSERT_EQ(r.nevents, 7, "events (2 locations, 2 allocs, promote, 2 collects)");
	ASSERT_EQ(r.warnings, 0, "warnings");
	free(b);
}

/* Offsets in the base trace. */
#define INFO_LEN	(66 + 4 + 8 + 1 + 4 + 5 + 1 + 8 + 4)
#define P2		INFO_LEN		/* the event packet */
#define P2_EVENTS	(P2 + 66)

static void test_packet_header_rules(void)
{
	struct bb *b = malloc(sizeof(*b));
	uint32_t v32;
	uint64_t v64;

	base(b);
	b->d[P2] ^= 0xFF;
	expect_fail(b, 0, "bad magic", "bad magic");
	base(b);
	b->d[0] = 0;
	expect_fail(b, 0, "bad magic", "bad magic in the info packet");

	base(b);
	b->d[P2 + 28] = 4;
	expect_fail(b, 0, "unsupported format version 4", "version too new");
	base(b);
	b->d[P2 + 28] = 0;
	expect_fail(b, 0, "unsupported format version 0", "version 0");

	base(b);
	v32 = 0x80000000u;
	memcpy(b->d + P2 + 4, &v32, 4);
	expect_fail(b, 0, "negative packet size", "negative size");
	base(b);
	v32 = 8 * 10;
	memcpy(b->d + P2 + 4, &v32, 4);
	expect_fail(b, 0, "smaller than its 66-byte header", "size below header");
	base(b);
	v32 = 8 * (66 + 32769);
	memcpy(b->d + P2 + 4, &v32, 4);
	expect_fail(b, 0, "packet content larger than 32768", "content too large");

	base(b);
	v64 = S + 100;
	memcpy(b->d + P2 + 8, &v64, 8);	/* begin > end */
	expect_fail(b, 0, "timestamp_begin", "begin > end");

	base(b);
	v64 = 5;
	memcpy(b->d + P2 + 50, &v64, 8);	/* id begin 5 > end 2 */
	expect_fail(b, 0, "alloc_id_begin 5 > alloc_id_end 2", "id begin > end");

	base(b);
	b->n = 60;
	expect_fail(b, 0, "truncated packet header", "truncated info header");
	b->n = 0;
	expect_fail(b, 0, "empty file", "empty file");
	free(b);
}

static void test_info_rules(void)
{
	struct bb *b = malloc(sizeof(*b));
	struct hdr h = H(2, S, S, 0, 0);
	size_t st;

	/* Info packet larger than 32 KiB. */
	b->n = 0;
	st = pk_begin(b, &h);
	ev(b, 0, S);
	p64(b, 0);
	p8(b, 64);
	memset(b->d + b->n, 'x', 33000);
	b->n += 33000;
	p8(b, 0);
	pstr(b, "");
	pstr(b, "");
	p64(b, PID);
	pstr(b, "");
	pk_end(b, st);
	expect_fail(b, 0, "trace-info packet larger than 32768", "info too large");

	/* First event is not trace_info. */
	b->n = 0;
	st = pk_begin(b, &h);
	ev(b, 4, S);
	p8(b, 0);
	pk_end(b, st);
	expect_fail(b, 0, "not trace_info", "first event");

	/* Its time differs from timestamp_begin. */
	base(b);
	b->d[66] += 1;
	h.end = S + 1;
	memcpy(b->d + 16, &h.end, 8);
	expect_fail(b, 0, "!= timestamp_begin", "info time");

	/* Leftover bytes after it. */
	b->n = 0;
	info_packet(b, 2);
	b->n--;		/* context "ctx" -> "ctx" + the next byte... rebuild with garbage */
	b->n = 0;
	h = H(2, S, S, 0, 0);
	st = pk_begin(b, &h);
	ev(b, 0, S);
	p64(b, 0);
	p8(b, 64);
	pstr(b, "e");
	pstr(b, "h");
	pstr(b, "");
	p64(b, PID);
	pstr(b, "");
	p8(b, 0xAA);
	pk_end(b, st);
	expect_fail(b, 0, "leftover bytes", "leftover");

	/* A truncated trace-info packet is fatal (nothing to read). */
	base(b);
	b->n = 70;
	expect_fail(b, 0, "truncated trace-info packet", "truncated info");
	free(b);
}

/* Build the base trace's event packet with a custom body. */
#define BODY(b, hh, ...)                                                                   \
	do {                                                                                   \
		struct hdr ___h = (hh);                                                        \
		size_t ___st;                                                                  \
		(b)->n = 0;                                                                    \
		info_packet((b), ___h.version);                                                \
		___st = pk_begin((b), &___h);                                                  \
		__VA_ARGS__;                                                                   \
		pk_end((b), ___st);                                                            \
	} while (0)

static void test_event_rules(void)
{
	static const uint8_t unknown[] = { 5, 117, 100 };
	static const struct {
		uint8_t code;
		uint32_t delta;
		const char *rule;
	} negative[] = {
		{ 3, 0xFFFFFFFF, "promote id sync" },	/* promote */
		{ 4, 0xFFFFFFFE, "collect id sync" },	/* collect */
	};
	struct bb *b = malloc(sizeof(*b));

	/* Event time outside [begin, end]. */
	BODY(b, H(2, S + 10, S + 20, 0, 1), { locs_alloc(b, S + 10, S + 21, 1, 2); });
	expect_fail(b, 0, "time in packet bounds", "after end");
	BODY(b, H(2, S + 10, S + 20, 0, 0), { ev(b, 4, S + 5); p8(b, 0); });
	/* tlow below begin's low bits reads as one wrap later: far past the end */
	expect_fail(b, 0, "time in packet bounds", "before begin");

	/* Time going backwards (across packets too). */
	BODY(b, H(2, S + 10, S + 20, 0, 2), {
		locs_alloc(b, S + 10, S + 15, 1, 2);
		alloc_same(b, S + 12, 2);
	});
	expect_fail(b, 0, "monotone timestamps", "backwards");

	/* Unknown event codes. */
	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		char rule[64];

		snprintf(rule, sizeof(rule), "unknown event code %u", unknown[i]);
		BODY(b, H(2, S, S, 0, 0), { ev(b, unknown[i], S); });
		expect_fail(b, 0, rule, rule);
	}

	/* A second trace_info. */
	BODY(b, H(2, S, S, 0, 0), { ev(b, 0, S); });
	expect_fail(b, 0, "second trace_info", "second info");

	/* Bad source byte. */
	BODY(b, H(2, S, S, 0, 1), { locs_alloc(b, S, S, 1, 3); });
	expect_fail(b, 0, "(source)", "source 3");

	/* Promote and collect deltas < 0 (FE ff ff ff ff = -1): fatal in v1/v2 packets. */
	for (size_t i = 0; i < sizeof(negative) / sizeof(negative[0]); i++) {
		BODY(b, H(2, S, S, 0, 1), {
			locs_alloc(b, S, S, 1, 2);
			ev(b, negative[i].code, S);
			p8(b, 254);
			p32(b, negative[i].delta);
		});
		expect_fail(b, -1, negative[i].rule, negative[i].rule);
	}

	/* A location code redefined differently. */
	BODY(b, H(2, S, S, 0, 0), {
		loc_new(b, S, 0x10, "a.c", "f");
		loc_new(b, S, 0x10, "a.c", "g");
	});
	expect_fail(b, 0, "consistent location info", "redefinition");
	/* ... identically is fine. */
	BODY(b, H(2, S, S, 0, 0), {
		loc_new(b, S, 0x10, "a.c", "f");
		loc_new(b, S, 0x10, "a.c", "f");
	});
	ASSERT_EQ(run(b, 0).ret, 0, "identical redefinition");

	/* alloc_id_end != begin + allocs. */
	BODY(b, H(2, S, S, 0, 2), { locs_alloc(b, S, S, 1, 2); });
	expect_fail(b, 0, "alloc id sync", "id sync");

	/* Running out of bytes inside an event: N says 3 codewords, 2 follow. */
	BODY(b, H(2, S, S, 0, 1), { locs_alloc(b, S, S, 1, 2); });
	ASSERT_EQ(run(b, 0).ret, 0, "N = 2 is right");
	b->d[P2_EVENTS + 2 * 25 + 8] = 3;
	expect_fail(b, 0, "buffer underflow", "wrong N");
	/* An unterminated string. */
	BODY(b, H(2, S, S, 0, 0), {
		loc_head(b, S, 0x10, 31 << 6 | 31 << 11);
		memcpy(b->d + b->n, "abc", 3);
		b->n += 3;
	});
	expect_fail(b, 0, "unterminated string", "unterminated");

	/* MTF codes pointing at empty slots: filename code 1 with one file; defname code 0 in a
	 * fresh file's table. */
	BODY(b, H(2, S, S, 0, 0), {
		loc_new(b, S, 0x10, "a.c", "f");
		loc_head(b, S, 0x20, 1 << 6 | 31 << 11);
		pstr(b, "g");
	});
	expect_fail(b, 0, "MTF filename code 1 points at an empty slot", "MTF file");
	BODY(b, H(2, S, S, 0, 0), {
		loc_head(b, S, 0x20, 31 << 6 | 0 << 11);
		pstr(b, "new.c");
	});
	expect_fail(b, 0, "MTF defname code 0 points at an empty slot", "MTF def");
	free(b);
}

static void test_cache_verifier(void)
{
	struct bb *b = malloc(sizeof(*b));
	struct hdr h = H(2, S + 10, S + 10, 2, 3);
	size_t st;

	/* After base(): loc[1] = 0x10, loc[2] = 0x20, pred[0] = 1, pred[1] = 2. */
	for (int good = 1; good >= 0; good--) {
		base(b);
		h.vix = 1;
		h.vpred = 2;
		h.vval = good ? 0x10 : 0x11;
		st = pk_begin(b, &h);
		alloc_same(b, S + 10, 2);
		pk_end(b, st);
		if (good)
			ASSERT_EQ(run(b, 0).ret, 0, "matching verifier");
		else
			expect_fail(b, 0, "cache verification failed", "verifier value");
	}
	base(b);
	h.vix = 16384;
	st = pk_begin(b, &h);
	pk_end(b, st);
	expect_fail(b, 0, "cache verification failed", "verifier index");
	free(b);
}

/* @b is refused by the strict reader only, with @msg. */
static void strict_only(const struct bb *b, const char *msg, const char *what)
{
	expect_fail(b, 0, msg, what);
	ASSERT_EQ(run(b, -1).ret, 0, "accepted when not strict");
}

static void test_strict_rules(void)
{
	struct bb *b = malloc(sizeof(*b));

	/* A code used without a definition. */
	BODY(b, H(2, S, S, 0, 1), {
		loc_new(b, S, 0x10, "a.c", "f");
		alloc_two(b, S, 1, 2);
	});
	strict_only(b, "undefined location code 0x20", "undefined code");

	/* Common prefix longer than the previous backtrace. */
	BODY(b, H(2, S, S, 0, 2), {
		locs_alloc(b, S, S, 1, 2);
		alloc_same(b, S, 3);
	});
	strict_only(b, "common prefix 3 longer than the previous backtrace", "prefix");

	/* Collect of an unknown id (delta 5 with one alloc), and twice the same id. */
	BODY(b, H(2, S, S, 0, 1), {
		locs_alloc(b, S, S, 1, 2);
		ev(b, 4, S);
		p8(b, 5);
	});
	strict_only(b, "unknown or already collected", "unknown id");
	BODY(b, H(2, S, S, 0, 1), {
		locs_alloc(b, S, S, 1, 2);
		ev(b, 4, S);
		p8(b, 0);
		ev(b, 3, S);
		p8(b, 0);
	});
	strict_only(b, "promote of unknown or already collected object id 0",
		    "promote after collect");

	/* nsamples < 1. */
	BODY(b, H(2, S, S, 0, 1), { locs_alloc(b, S, S, 0, 2); });
	strict_only(b, "nsamples 0 < 1", "nsamples");
	free(b);
}

/* @b is read to its end with @nevents events and one warning, which says @warning. */
static void expect_warning(const struct bb *b, int nevents, const char *warning)
{
	struct result r = run(b, 0);

	ASSERT_EQ(r.ret, 0, r.msg);
	ASSERT_EQ(r.nevents, nevents, warning);
	ASSERT_EQ(r.warnings, 1, "one warning");
	ASSERT_TRUE(strstr(r.warnmsg, warning) != NULL, r.warnmsg);
}

/* A packet @h with one alloc, the same backtrace as the previous one. */
static void packet_same(struct bb *b, const struct hdr *h)
{
	size_t st = pk_begin(b, h);

	alloc_same(b, h->begin, 2);
	pk_end(b, st);
}

static void test_warnings(void)
{
	struct bb *b = malloc(sizeof(*b));
	struct hdr h = H(2, S + 10, S + 10, 2, 3);
	size_t full;

	/* A packet of another pid is skipped with a warning; the next one is read. */
	base(b);
	h.pid = 777;
	packet_same(b, &h);
	h.pid = PID;
	packet_same(b, &h);
	expect_warning(b, 8, "pid 777");

	/* A truncated final packet: warning, earlier events still read. */
	base(b);
	full = b->n;
	packet_same(b, &h);
	b->n = full + 66 + 2;
	expect_warning(b, 7, "truncated packet");

	/* A final packet cut inside its header: the same. */
	b->n = full + 40;
	expect_warning(b, 7, "truncated packet header");
	free(b);
}

static void test_v1_and_v3(void)
{
	struct bb *b = malloc(sizeof(*b));
	struct memprof_reader_opts o = { .sz = sizeof(o) };
	struct memprof_event e;
	struct memprof_reader *r;
	struct hdr h;
	size_t st;
	int n = 0;

	/* v1: no context field. */
	BODY(b, H(1, S, S, 0, 1), { locs_alloc(b, S, S, 1, 2); });
	r = memprof_reader__new_buf(b->d, b->n, &o, NULL, 0);
	if (ASSERT_TRUE(r != NULL, "v1 open")) {
		ASSERT_EQ(memprof_reader__info(r)->version, 1, "version 1");
		ASSERT_TRUE(memprof_reader__info(r)->context == NULL, "no context");
		ASSERT_EQ(memprof_reader__next(r, &e), 1, "v1 alloc");
		ASSERT_EQ(e.backtrace_len, 2, "v1 backtrace");
		memprof_reader__free(r);
	}

	/*
	 * v3, two domains with their own decoder state: domain 5's cache and previous
	 * backtrace are untouched by domain 0's, and its MTF table starts empty.
	 */
	b->n = 0;
	info_packet(b, 3);
	h = H(3, S + 1, S + 2, 0, 1);
	st = pk_begin(b, &h);
	locs_alloc(b, S + 1, S + 2, 1, 2);
	pk_end(b, st);
	h = H(3, S + 1, S + 3, 10000, 10001);
	h.domain = 5;
	st = pk_begin(b, &h);
	ev(b, 105, S + 1);	/* domain 5: one miss into bucket 1 with code 0x20 */
	p8(b, 0);
	p8(b, 1);
	p16(b, 1 << 2 | 3);
	p64(b, 0x20);
	pk_end(b, st);
	h = H(3, S + 3, S + 3, 1, 2);
	st = pk_begin(b, &h);
	alloc_same(b, S + 3, 2);	/* domain 0: repeats [0x10, 0x20] */
	ev(b, 4, S + 3);	/* collect id 10000 of domain 5: delta 2 - 1 - 10000 < 0 (v3) */
	p8(b, 254);
	p32(b, (uint32_t)-9999);
	pk_end(b, st);
	o.strict = 0;
	r = memprof_reader__new_buf(b->d, b->n, &o, NULL, 0);
	if (ASSERT_TRUE(r != NULL, "v3 open")) {
		uint64_t want_dom[] = { 0, 5, 0, 0 }, want_len[] = { 2, 1, 2, 0 };
		int ret;

		while ((ret = memprof_reader__next(r, &e)) > 0 && n < 4) {
			ASSERT_EQ(e.domain, want_dom[n], "domain");
			if (e.type == MEMPROF_EV_ALLOC)
				ASSERT_EQ(e.backtrace_len, want_len[n], "per-domain backtrace");
			if (e.type == MEMPROF_EV_COLLECT)
				ASSERT_EQ(e.id, 10000, "collect across domains");
			n++;
		}
		ASSERT_EQ(ret, 0, memprof_reader__errmsg(r));
		ASSERT_EQ(n, 4, "v3 events");
		memprof_reader__free(r);
	}
	free(b);
}

static void test_garbage(void)
{
	struct bb *b = malloc(sizeof(*b));
	size_t zn;
	uint8_t *z;

	/* A valid zstd stream of the base trace reads; a corrupted one fails with a message. */
	base(b);
	zn = ZSTD_compressBound(b->n);
	z = malloc(zn);
	zn = ZSTD_compress(z, zn, b->d, b->n, 3);
	if (ASSERT_TRUE(!ZSTD_isError(zn), "compress")) {
		struct bb *c = malloc(sizeof(*c));
		struct result r;

		memcpy(c->d, z, zn);
		c->n = zn;
		r = run(c, 0);
		ASSERT_EQ(r.ret, 0, r.msg);
		ASSERT_EQ(r.nevents, 7, "zstd events");
		for (size_t i = 8; i < zn - 4; i++)
			c->d[i] ^= 0x5A;
		r = run(c, 0);
		ASSERT_TRUE(r.ret < 0, "corrupt zstd rejected");
		free(c);
	}
	free(z);
	/* Random bytes never crash and never succeed. */
	for (int i = 0; i < 64; i++) {
		uint64_t x = 88172645463325252ull + (uint64_t)i;

		b->n = 100 + (size_t)i * 37;
		for (size_t k = 0; k < b->n; k++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			b->d[k] = (uint8_t)x;
		}
		ASSERT_TRUE(run(b, 0).ret < 0, "garbage rejected");
	}
	free(b);
}

int main(void)
{
	RUN(test_base_is_valid);
	RUN(test_packet_header_rules);
	RUN(test_info_rules);
	RUN(test_event_rules);
	RUN(test_cache_verifier);
	RUN(test_strict_rules);
	RUN(test_warnings);
	RUN(test_v1_and_v3);
	RUN(test_garbage);
	return test_exit();
}
