// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The reader against traces written by the real upstream writers (memtrace 0.2.3: v2, and
 * current head: v3), compared with the upstream reader's own decoding in the .expected files:
 * every header field, counts and sums, the first 40 events with backtraces and locations.
 * Then each fixture is re-encoded by our writer: the result must read back identically and be
 * at most 1.2 times the size of the upstream file.
 */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memprof/trace.h>

#include "tests/unit/test.h"

static char path_buf[4096];

static const char *fixture(const char *name)
{
	const char *src = getenv("MP_SRC");

	snprintf(path_buf, sizeof(path_buf), "%s/tests/fixtures/memtrace/%s", src ? src : ".", name);
	return path_buf;
}

static char *tmp_path(const char *name)
{
	static char buf[4096];
	const char *tmp = getenv("MP_TMP");

	snprintf(buf, sizeof(buf), "%s/%s", tmp ? tmp : "/tmp", name);
	return buf;
}

/* Append printf output to a growing string. */
struct sbuf {
	char *s;
	size_t len, cap;
};

__attribute__((format(printf, 2, 3)))
static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
		va_end(ap);
		if (b->s && (size_t)n < b->cap - b->len)
			break;
		b->cap = (b->cap + (size_t)n + 1) * 2;
		b->s = realloc(b->s, b->cap);
	}
	b->len += (size_t)n;
}

/* The upstream dump's event line, from our decoded event (an independent formatter). */
static void format_event(struct sbuf *b, struct memprof_reader *r, const struct memprof_event *e)
{
	static const char *const src[] = { "minor", "major", "external" };

	b->len = 0;
	sb_printf(b, "%" PRIu64 " ", e->time_us);
	switch (e->type) {
	case MEMPROF_EV_ALLOC:
		sb_printf(b, "alloc id=%" PRIu64 " dom=%u src=%s len=%" PRIu64 " n=%" PRIu64
			  " pfx=%zu nbt=%zu bt=", e->id, e->domain, src[e->source], e->length,
			  e->nsamples, e->common_prefix, e->backtrace_len);
		for (size_t i = 0; i < e->backtrace_len; i++) {
			unsigned int n;
			const struct memprof_location *l = memprof_reader__lookup(r, e->backtrace[i], &n);

			sb_printf(b, "%s0x%" PRIx64 "{", i ? " | " : "", e->backtrace[i]);
			for (unsigned int k = 0; k < n; k++)
				sb_printf(b, "%s\"%s\"@\"%s\":%u:%u-%u", k ? "; " : "", l[k].defname,
					  l[k].filename, l[k].line, l[k].start_char, l[k].end_char);
			sb_printf(b, "}");
		}
		break;
	case MEMPROF_EV_PROMOTE:
		sb_printf(b, "promote id=%" PRIu64 " dom=%u", e->id, e->domain);
		break;
	case MEMPROF_EV_COLLECT:
		sb_printf(b, "collect id=%" PRIu64 " dom=%u", e->id, e->domain);
		break;
	default:
		sb_printf(b, "location");
	}
}

/* "\"text\"" -> text (the fixtures' strings have no escapes). */
static const char *unquote(char *s)
{
	size_t n = strlen(s);

	if (n >= 2 && s[0] == '"' && s[n - 1] == '"') {
		s[n - 1] = 0;
		return s + 1;
	}
	return s;
}

static void check_fixture(const char *base)
{
	char name[64], line[16384], err[256] = "";
	struct memprof_reader_opts opts = { .sz = sizeof(opts) };
	const struct memprof_trace_info *info;
	uint64_t allocs = 0, promotes = 0, collects = 0, words = 0, samples = 0, frames = 0;
	unsigned int checked = 0, fields = 0, expected_events = 0;
	struct memprof_event ev;
	struct memprof_reader *r;
	struct sbuf b = {};
	char **lines = NULL;
	size_t nlines = 0;
	FILE *f;
	int ret;

	snprintf(name, sizeof(name), "%s.ctf", base);
	r = memprof_reader__open(fixture(name), &opts, err, sizeof(err));
	if (!ASSERT_TRUE(r != NULL, err))
		return;
	info = memprof_reader__info(r);
	snprintf(name, sizeof(name), "%s.expected", base);
	f = fopen(fixture(name), "re");
	if (!ASSERT_TRUE(f != NULL, "open .expected")) {
		memprof_reader__free(r);
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		char *key, *val;

		line[strcspn(line, "\n")] = 0;
		if (!strncmp(line, "info ", 5)) {
			val = strchr(line + 5, ' ');
			if (!ASSERT_TRUE(val != NULL, line))
				continue;
			*val++ = 0;
			key = line + 5;
			fields++;
			if (!strcmp(key, "sample_rate"))
				ASSERT_TRUE(info->sample_rate == strtod(val, NULL), "sample_rate");
			else if (!strcmp(key, "word_size"))
				ASSERT_EQ(info->word_size, strtoull(val, NULL, 10), "word_size");
			else if (!strcmp(key, "executable_name"))
				ASSERT_STREQ(info->executable_name, unquote(val), "executable_name");
			else if (!strcmp(key, "host_name"))
				ASSERT_STREQ(info->host_name, unquote(val), "host_name");
			else if (!strcmp(key, "ocaml_runtime_params"))
				ASSERT_STREQ(info->runtime_params, unquote(val), "runtime_params");
			else if (!strcmp(key, "pid"))
				ASSERT_EQ(info->pid, strtoull(val, NULL, 10), "pid");
			else if (!strcmp(key, "start_time_us"))
				ASSERT_EQ(info->start_time_us, strtoull(val, NULL, 10), "start_time_us");
			else if (!strcmp(key, "initial_domain"))
				ASSERT_EQ(info->initial_domain, strtoull(val, NULL, 10), "initial_domain");
			else if (!strcmp(key, "context"))
				ASSERT_STREQ(info->context, unquote(val), "context");
			else
				ASSERT_TRUE(false, key);
		} else if (line[0] >= '0' && line[0] <= '9') {
			lines = realloc(lines, (nlines + 1) * sizeof(*lines));
			lines[nlines++] = strdup(line);
		}
	}
	ASSERT_EQ(fields, 9, "info fields in .expected");
	ASSERT_EQ(nlines, 40, "event lines in .expected");

	while ((ret = memprof_reader__next(r, &ev)) > 0) {
		if (expected_events < nlines) {
			format_event(&b, r, &ev);
			ASSERT_STREQ(b.s, lines[expected_events], "event line");
			checked++;
		}
		expected_events++;
		switch (ev.type) {
		case MEMPROF_EV_ALLOC:
			allocs++;
			words += ev.length;
			samples += ev.nsamples;
			frames += ev.backtrace_len;
			break;
		case MEMPROF_EV_PROMOTE:
			promotes++;
			break;
		case MEMPROF_EV_COLLECT:
			collects++;
			break;
		default:
			break;
		}
	}
	ASSERT_EQ(ret, 0, memprof_reader__errmsg(r));
	ASSERT_EQ(checked, 40, "events compared");
	ASSERT_EQ(memprof_reader__warnings(r), 0, "warnings");

	/* Second pass over the .expected file: counts, sums and the summary line. */
	const struct {
		const char *line;	/* the figure's line, up to its value */
		uint64_t value;		/* what this reader found */
	} figures[] = {
		{ "count alloc", allocs },	      { "count promote", promotes },
		{ "count collect", collects },	      { "sum alloc.len_words", words },
		{ "sum alloc.nsamples", samples },    { "sum alloc.backtrace_frames", frames },
	};
	rewind(f);
	while (fgets(line, sizeof(line), f)) {
		char kind[16], what[64], figure[96];
		unsigned long long v, a, p, c, d;
		size_t i;

		if (sscanf(line, "%15s %63s %llu", kind, what, &v) == 3 &&
		    (!strcmp(kind, "count") || !strcmp(kind, "sum"))) {
			snprintf(figure, sizeof(figure), "%s %s", kind, what);
			for (i = 0; i < sizeof(figures) / sizeof(figures[0]); i++)
				if (!strcmp(figure, figures[i].line))
					break;
			if (ASSERT_TRUE(i < sizeof(figures) / sizeof(figures[0]), line))
				ASSERT_EQ(figures[i].value, v, figures[i].line);
		} else if (sscanf(line, "summary allocs=%llu promotes=%llu collects=%llu distinct_codes=%llu",
				  &a, &p, &c, &d) == 4) {
			ASSERT_EQ(allocs, a, "summary allocs");
			ASSERT_EQ(promotes, p, "summary promotes");
			ASSERT_EQ(collects, c, "summary collects");
			ASSERT_TRUE(d > 0, "distinct codes (checked in test_distinct_codes)");
		}
	}
	fclose(f);
	for (size_t i = 0; i < nlines; i++)
		free(lines[i]);
	free(lines);
	free(b.s);
	memprof_reader__free(r);
}

static void test_fixture_v2(void)
{
	check_fixture("upstream-v2");
}

static void test_fixture_v3(void)
{
	check_fixture("upstream-v3");
}

/* Count distinct location codes (defined ones, via report_locations) against "distinct_codes". */
static void check_distinct(const char *base)
{
	struct memprof_reader_opts opts = { .sz = sizeof(opts), .report_locations = 1 };
	char name[64], line[512], err[256] = "";
	unsigned long long a, p, c, d = 0;
	uint64_t codes[256];
	unsigned int ncodes = 0;
	struct memprof_event ev;
	struct memprof_reader *r;
	FILE *f;
	int ret;

	snprintf(name, sizeof(name), "%s.expected", base);
	f = fopen(fixture(name), "re");
	if (!ASSERT_TRUE(f != NULL, "open .expected"))
		return;
	while (fgets(line, sizeof(line), f))
		sscanf(line, "summary allocs=%llu promotes=%llu collects=%llu distinct_codes=%llu", &a,
		       &p, &c, &d);
	fclose(f);
	snprintf(name, sizeof(name), "%s.ctf", base);
	r = memprof_reader__open(fixture(name), &opts, err, sizeof(err));
	if (!ASSERT_TRUE(r != NULL, err))
		return;
	while ((ret = memprof_reader__next(r, &ev)) > 0) {
		uint64_t list[2] = { ev.code };
		size_t n = 1;
		const uint64_t *v = list;

		if (ev.type == MEMPROF_EV_ALLOC) {
			v = ev.backtrace;
			n = ev.backtrace_len;
		} else if (ev.type != MEMPROF_EV_LOCATION) {
			continue;
		}
		for (size_t i = 0; i < n; i++) {
			unsigned int k;

			for (k = 0; k < ncodes && codes[k] != v[i]; k++)
				;
			if (k == ncodes && ASSERT_TRUE(ncodes < 256, "few codes"))
				codes[ncodes++] = v[i];
		}
	}
	ASSERT_EQ(ret, 0, memprof_reader__errmsg(r));
	ASSERT_EQ(ncodes, d, "distinct_codes");
	for (unsigned int k = 0; k < ncodes; k++)
		ASSERT_TRUE(memprof_reader__lookup(r, codes[k], NULL) != NULL, "code defined");
	memprof_reader__free(r);
}

static void test_distinct_codes(void)
{
	check_distinct("upstream-v2");
	check_distinct("upstream-v3");
}

struct idmap {
	uint64_t *ours;		/* fixture id -> our id + 1 */
	size_t n;
};

static bool map_id(struct idmap *m, uint64_t theirs, uint64_t ours)
{
	if (theirs >= 1u << 24)
		return false;
	if (theirs >= m->n) {
		size_t n = (theirs + 1) * 2;

		m->ours = realloc(m->ours, n * sizeof(*m->ours));
		memset(m->ours + m->n, 0, (n - m->n) * sizeof(*m->ours));
		m->n = n;
	}
	m->ours[theirs] = ours + 1;
	return true;
}

static bool lookup_id(const struct idmap *m, uint64_t theirs, uint64_t *ours)
{
	if (theirs >= m->n || !m->ours[theirs])
		return false;
	*ours = m->ours[theirs] - 1;
	return true;
}

/* Decode a fixture, re-encode it with our writer, read both back in lockstep, compare size. */
static void reencode(const char *base, int zstd)
{
	struct memprof_reader_opts ropts = { .sz = sizeof(ropts), .report_locations = 1 };
	struct memprof_reader_opts copts = { .sz = sizeof(ropts) };
	struct memprof_writer_opts wopts = { .sz = sizeof(wopts) };
	struct memprof_trace_info info;
	struct memprof_reader *r, *a, *b;
	struct memprof_event ev, ea, eb;
	struct memprof_writer *w;
	char name[64], err[256] = "", *out;
	struct idmap ids = {};
	struct stat st_in, st_out;
	uint64_t n = 0, id;
	int ret, ra, rb;

	snprintf(name, sizeof(name), "%s.ctf", base);
	r = memprof_reader__open(fixture(name), &ropts, err, sizeof(err));
	if (!ASSERT_TRUE(r != NULL, err))
		return;
	info = *memprof_reader__info(r);
	wopts.version = info.version;
	wopts.zstd_level = zstd;
	snprintf(name, sizeof(name), "%s%s", base, zstd ? ".ctf.zst" : ".ctf");
	out = strdup(tmp_path(name));
	w = memprof_writer__open(out, &info, &wopts);
	if (!ASSERT_TRUE(w != NULL, "writer open")) {
		memprof_reader__free(r);
		free(out);
		return;
	}
	while ((ret = memprof_reader__next(r, &ev)) > 0) {
		uint64_t t = info.start_time_us + ev.time_us;

		switch (ev.type) {
		case MEMPROF_EV_LOCATION:
			ASSERT_OK(memprof_writer__location(w, ev.code, ev.locs, ev.nlocs), "location");
			break;
		case MEMPROF_EV_ALLOC:
			if (!ASSERT_OK(memprof_writer__alloc(w, t, ev.length, ev.nsamples, ev.source,
							     ev.backtrace, ev.backtrace_len, &id),
				       "alloc"))
				goto out;
			ASSERT_TRUE(map_id(&ids, ev.id, id), "id in range");
			break;
		case MEMPROF_EV_PROMOTE:
		case MEMPROF_EV_COLLECT:
			if (!ASSERT_TRUE(lookup_id(&ids, ev.id, &id), "known id"))
				goto out;
			ASSERT_OK(ev.type == MEMPROF_EV_PROMOTE ? memprof_writer__promote(w, t, id)
								: memprof_writer__collect(w, t, id),
				  "promote/collect");
			break;
		}
	}
	ASSERT_EQ(ret, 0, memprof_reader__errmsg(r));
out:
	ASSERT_OK(memprof_writer__close(w), "close");
	memprof_reader__free(r);

	snprintf(name, sizeof(name), "%s.ctf", base);
	ASSERT_OK(stat(fixture(name), &st_in), "stat fixture");
	ASSERT_OK(stat(out, &st_out), "stat ours");
	fprintf(stderr, "%s%s: upstream %lld bytes, ours %lld bytes\n", base, zstd ? " (zstd)" : "",
		(long long)st_in.st_size, (long long)st_out.st_size);
	if (!zstd)
		ASSERT_TRUE(st_out.st_size * 10 <= st_in.st_size * 12, "size <= 1.2 x upstream");

	/* Both decode to the same events (ids and times equal: ids run 0, 1, 2, ... in both). */
	a = memprof_reader__open(fixture(name), &copts, err, sizeof(err));
	b = memprof_reader__open(out, &copts, err, sizeof(err));
	if (ASSERT_TRUE(a && b, err)) {
		ASSERT_EQ(memprof_reader__info(b)->version, info.version, "version");
		ASSERT_STREQ(memprof_reader__info(b)->context, memprof_reader__info(a)->context, "context");
		do {
			ra = memprof_reader__next(a, &ea);
			rb = memprof_reader__next(b, &eb);
			if (!ASSERT_EQ(ra, rb, "both have an event") || ra <= 0)
				break;
			n++;
			if (!ASSERT_EQ(eb.type, ea.type, "type") ||
			    !ASSERT_EQ(eb.time_us, ea.time_us, "time") ||
			    !ASSERT_EQ(eb.id, ea.id, "id"))
				break;
			if (ea.type != MEMPROF_EV_ALLOC)
				continue;
			if (!ASSERT_EQ(eb.length, ea.length, "length") ||
			    !ASSERT_EQ(eb.nsamples, ea.nsamples, "nsamples") ||
			    !ASSERT_EQ(eb.source, ea.source, "source") ||
			    !ASSERT_EQ(eb.backtrace_len, ea.backtrace_len, "bt len") ||
			    !ASSERT_TRUE(!memcmp(eb.backtrace, ea.backtrace,
						 ea.backtrace_len * sizeof(uint64_t)), "bt"))
				break;
			for (size_t i = 0; i < ea.backtrace_len; i++) {
				unsigned int la, lb;
				const struct memprof_location *x, *y;

				x = memprof_reader__lookup(a, ea.backtrace[i], &la);
				y = memprof_reader__lookup(b, eb.backtrace[i], &lb);
				if (!ASSERT_EQ(lb, la, "nlocs"))
					break;
				for (unsigned int k = 0; k < la; k++) {
					ASSERT_STREQ(y[k].filename, x[k].filename, "filename");
					ASSERT_STREQ(y[k].defname, x[k].defname, "defname");
					ASSERT_EQ(y[k].line, x[k].line, "line");
				}
			}
		} while (test_ok);
		ASSERT_TRUE(n > 8000, "events compared");
	}
	memprof_reader__free(a);
	memprof_reader__free(b);
	free(ids.ours);
	free(out);
}

static void test_reencode_v2(void)
{
	reencode("upstream-v2", 0);
}

static void test_reencode_v3(void)
{
	reencode("upstream-v3", 0);
}

static void test_reencode_zstd(void)
{
	reencode("upstream-v2", 3);
}

int main(void)
{
	RUN(test_fixture_v2);
	RUN(test_fixture_v3);
	RUN(test_distinct_codes);
	RUN(test_reencode_v2);
	RUN(test_reencode_v3);
	RUN(test_reencode_zstd);
	return test_exit();
}
