// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Unit tests of the report model (report/model.c) on small traces written with libmemprof's
 * writer: the estimators against hand-computed values, allocator-frame skipping, site keys
 * (function, line, stack, object), inlined frames, windows and the leak tail, merging traces
 * with different rates, and time parsing.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <memprof/trace.h>

#include "report/report.h"
#include "tests/unit/test.h"

#define T0 1700000000000000ull

#define A(t, len, nsamples, ...)                                                              \
	{ .kind = 'a', .t_ms = t, .length = len, .n = nsamples, .bt = { __VA_ARGS__ } }
#define C(t, obj) { .kind = 'c', .t_ms = t, .id = obj }

static char dir[] = "/tmp/test_report.XXXXXX";

struct ev {
	char kind;		/* 'a' alloc, 'c' collect */
	uint64_t t_ms;
	uint64_t length, n;	/* alloc */
	uint64_t bt[4];		/* codes, 0-terminated, outermost first */
	uint64_t id;		/* collect */
};

/*
 * Codes: 1 main (main.c:1), 2 foo (foo.c:10), 3 malloc, 4 operator new, 5 bar inlined into
 * baz (two locations), 6 a frame in libc.so.6+0x1234, 7 an object path, 8 "libbar.so+0x10"
 * as function, 9 no location at all, 10 foo at another line (foo.c:11), 11 and 12 libstdc++
 * allocation wrappers (std::__new_allocator::allocate, vector::_M_default_append) in its
 * headers, 13 a std:: member with a return type and no file.
 */
static int define_codes(struct memprof_writer *w)
{
	static const struct memprof_location main_l = { "main.c", "main", 1, 0, 0 };
	static const struct memprof_location foo_l = { "src/foo.c", "foo", 10, 0, 0 };
	static const struct memprof_location foo2_l = { "src/foo.c", "foo", 11, 0, 0 };
	static const struct memprof_location malloc_l = { "", "malloc", 0, 0, 0 };
	static const struct memprof_location new_l = { "", "operator new(unsigned long)", 0, 0, 0 };
	static const struct memprof_location inl[2] = {
		{ "baz.c", "baz", 5, 0, 0 }, { "bar.h", "bar", 7, 0, 0 },
	};
	static const struct memprof_location libc_l = { "libc.so.6+0x1234", "strtok", 0, 0, 0 };
	static const struct memprof_location path_l = {
		"/usr/lib/x86_64-linux-gnu/libfoo.so.1", "foo_make", 0, 0, 0 };
	static const struct memprof_location fn_l = { "", "libbar.so+0x10", 0, 0, 0 };
	static const struct memprof_location alloc_l = {
		"/usr/include/c++/12/bits/new_allocator.h",
		"std::__new_allocator<int>::allocate(unsigned long, void const*)", 137, 0, 0 };
	static const struct memprof_location append_l = {
		"/usr/include/c++/12/bits/vector.tcc",
		"std::vector<int, std::allocator<int> >::_M_default_append(unsigned long)", 650,
		0, 0 };
	static const struct memprof_location insert_l = {
		"", "void std::vector<int, std::allocator<int> >::_M_realloc_insert<int>(int&&)",
		0, 0, 0 };
	int err = 0;

	err = err ?: memprof_writer__location(w, 1, &main_l, 1);
	err = err ?: memprof_writer__location(w, 2, &foo_l, 1);
	err = err ?: memprof_writer__location(w, 3, &malloc_l, 1);
	err = err ?: memprof_writer__location(w, 4, &new_l, 1);
	err = err ?: memprof_writer__location(w, 5, inl, 2);
	err = err ?: memprof_writer__location(w, 6, &libc_l, 1);
	err = err ?: memprof_writer__location(w, 7, &path_l, 1);
	err = err ?: memprof_writer__location(w, 8, &fn_l, 1);
	err = err ?: memprof_writer__location(w, 9, NULL, 0);
	err = err ?: memprof_writer__location(w, 10, &foo2_l, 1);
	err = err ?: memprof_writer__location(w, 11, &alloc_l, 1);
	err = err ?: memprof_writer__location(w, 12, &append_l, 1);
	err = err ?: memprof_writer__location(w, 13, &insert_l, 1);
	return err;
}

static char *write_trace(const char *name, double rate, const struct ev *evs, size_t n)
{
	struct memprof_trace_info info = {
		.sample_rate = rate, .word_size = 64, .executable_name = "/opt/app/bin/server",
		.host_name = "h", .runtime_params = "", .pid = 7, .start_time_us = T0,
	};
	struct memprof_writer *w;
	char *path;
	uint64_t id;

	if (asprintf(&path, "%s/%s", dir, name) < 0)
		return NULL;
	w = memprof_writer__open(path, &info, NULL);
	if (!ASSERT_TRUE(w != NULL, "writer open"))
		return path;
	ASSERT_OK(define_codes(w), "define codes");
	for (size_t i = 0; i < n; i++) {
		const struct ev *e = &evs[i];
		size_t len = 0;

		while (len < 4 && e->bt[len])
			len++;
		if (e->kind == 'a')
			ASSERT_OK(memprof_writer__alloc(w, T0 + e->t_ms * 1000, e->length, e->n,
							MEMPROF_SOURCE_EXTERNAL, e->bt, len, &id),
				  "alloc");
		else
			ASSERT_OK(memprof_writer__collect(w, T0 + e->t_ms * 1000, e->id), "collect");
	}
	ASSERT_OK(memprof_writer__close(w), "writer close");
	return path;
}

static struct rp_model *load(const struct rp_options *o, char **paths, size_t n)
{
	struct rp_model *m = rp_model__new(o);
	char err[256] = "";

	if (!ASSERT_TRUE(m != NULL, "model"))
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (!ASSERT_OK(rp_model__load(m, paths[i], err, sizeof(err)), err)) {
			rp_model__free(m);
			return NULL;
		}
	if (!ASSERT_OK(rp_model__analyze(m), "analyze")) {
		rp_model__free(m);
		return NULL;
	}
	return m;
}

static const struct rp_site *site(const struct rp_model *m, const char *key)
{
	for (size_t i = 0; i < m->nsites; i++)
		if (!strcmp(m->sites[i].key, key))
			return &m->sites[i];
	fprintf(stderr, "no site '%s'; sites:", key);
	for (size_t i = 0; i < m->nsites; i++)
		fprintf(stderr, " '%s'", m->sites[i].key);
	fputc('\n', stderr);
	return NULL;
}

/* The samples of site @key of @m, 0 if it has none. */
static uint64_t samples_at(const struct rp_model *m, const char *key)
{
	const struct rp_site *s = site(m, key);

	return s ? s->samples : 0;
}

static bool near(double a, double b)
{
	return fabs(a - b) <= 1e-9 * fmax(1.0, fabs(b));
}

#define ASSERT_NEAR(a, b, what)                                                               \
	({                                                                                     \
		bool ___ok = near((a), (b));                                                   \
		if (!___ok) {                                                                  \
			fprintf(stderr, "%s:%d: %s: %.17g != %.17g\n", __FILE__, __LINE__, what,   \
				(double)(a), (double)(b));                                     \
			test_ok = false;                                                       \
		}                                                                              \
		___ok;                                                                         \
	})

/* Requested bytes of a block of @len words with @n samples, and the variance estimate. */
static double eb(double lam, double len, double n)
{
	return n * 8 * len / ((len + 1) * lam);
}

static double vb(double lam, double len, double n)
{
	return n * pow(8 * len / (len + 1), 2) * (1 - lam) / (lam * lam);
}

/* p(w) = 1 - (1-λ)^w */
static double ptrack(double lam, double w)
{
	return 1 - pow(1 - lam, w);
}

static void test_estimators(void)
{
	const double lam = 0.25;
	static const struct ev evs[] = {
		A(0, 3, 2, 1, 2, 3),		/* id 0: foo via malloc, w=4 */
		A(10, 0, 1, 1, 2, 3),		/* id 1: foo, w=1 */
		A(20, 99, 30, 1, 4),		/* id 2: main via operator new, w=100 */
		C(30, 0),
		A(40, 7, 3, 3),		/* id 3: only an allocator frame */
		C(100, 3),
	};
	struct rp_options o = { .by = RP_BY_FUNCTION, .top = 10, .tail = 0.1 };
	char *path = write_trace("est.ctf", lam, evs, sizeof(evs) / sizeof(evs[0]));
	struct rp_model *m = path ? load(&o, &path, 1) : NULL;
	const struct rp_site *foo, *mn, *ma;
	free(path);
	if (!m)
		return;
	foo = site(m, "foo");
	mn = site(m, "main");
	ma = site(m, "malloc");
	if (!ASSERT_TRUE(foo && mn && ma, "sites foo, main, malloc") ||
	    !ASSERT_EQ(m->nsites, 3, "sites")) {
		rp_model__free(m);
		return;
	}
	ASSERT_NEAR(foo->bytes.est, eb(lam, 3, 2) + eb(lam, 0, 1), "foo bytes");
	ASSERT_NEAR(foo->bytes.var, vb(lam, 3, 2) + vb(lam, 0, 1), "foo bytes var");
	ASSERT_NEAR(foo->blocks.est, 1 / ptrack(lam, 4) + 1 / ptrack(lam, 1), "foo blocks");
	ASSERT_NEAR(foo->blocks.var,
		    (1 - ptrack(lam, 4)) / pow(ptrack(lam, 4), 2) +
		    (1 - ptrack(lam, 1)) / pow(ptrack(lam, 1), 2), "foo blocks var");
	ASSERT_NEAR(foo->live_bytes.est, 0, "foo live bytes (id 1: no words asked for)");
	ASSERT_NEAR(foo->live_blocks.est, 1 / ptrack(lam, 1), "foo live blocks");
	ASSERT_EQ(foo->sampled, 2, "foo sampled");
	ASSERT_EQ(foo->sampled_freed, 1, "foo freed");
	ASSERT_EQ(foo->nlifetimes, 1, "foo lifetimes");
	ASSERT_NEAR(foo->life_median_s, 0.030, "foo lifetime");
	ASSERT_NEAR(mn->bytes.est, eb(lam, 99, 30), "main bytes (operator new skipped)");
	ASSERT_NEAR(mn->blocks.est, 1 / ptrack(lam, 100), "main blocks");
	ASSERT_NEAR(ma->bytes.est, eb(lam, 7, 3), "an allocator-only stack keeps its frame");
	ASSERT_NEAR(m->total_bytes.est, eb(lam, 3, 2) + eb(lam, 0, 1) + eb(lam, 99, 30) +
		    eb(lam, 7, 3), "total bytes");
	ASSERT_NEAR(m->total_live_bytes.est, eb(lam, 0, 1) + eb(lam, 99, 30), "total live bytes");
	ASSERT_NEAR(m->total_words.est, 36 / lam, "total words, header words included");
	ASSERT_NEAR(m->total_live_words.est, 31 / lam, "total live words");
	ASSERT_EQ(m->total_samples, 36, "samples");
	/* Ranking: main (240 words) > foo > malloc by bytes; by blocks foo first. */
	ASSERT_STREQ(m->sites[m->by_bytes[0]].key, "main", "top by bytes");
	ASSERT_STREQ(m->sites[m->by_blocks[0]].key, "foo", "top by blocks");
	/* Window: first alloc at 0, last event at 100 ms; young after 90 ms. */
	ASSERT_EQ(m->traces[0].win_end, 100000, "window end");
	ASSERT_EQ(m->traces[0].young_after, 90000, "young after");
	/* Leak suspects: live and old: foo (id 1) and main (id 2). */
	ASSERT_EQ(m->nsuspects, 2, "suspects");
	ASSERT_STREQ(m->sites[m->suspects[0]].key, "main", "first suspect");
	rp_model__free(m);
}

static void test_keys(void)
{
	static const struct ev evs[] = {
		A(0, 1, 1, 1, 5, 3),		/* baz -> bar (inlined) */
		A(1, 1, 1, 1, 6),		/* strtok in libc.so.6+0x1234 */
		A(2, 1, 1, 1, 7, 3),		/* foo_make in /usr/lib/.../libfoo.so.1 */
		A(3, 1, 1, 1, 8),		/* libbar.so+0x10 as a function name */
		A(4, 1, 1, 1, 9),		/* a code without locations */
		A(5, 1, 1, 1, 2, 3),		/* foo.c:10 */
		A(6, 1, 1, 1, 10, 3),		/* foo.c:11 */
	};
	struct rp_options o = { .by = RP_BY_FUNCTION, .top = 10, .tail = 0.1 };
	char *path = write_trace("keys.ctf", 1.0, evs, sizeof(evs) / sizeof(evs[0]));
	struct rp_model *m;

	if (!path)
		return;
	m = load(&o, &path, 1);
	if (m) {
		ASSERT_EQ(m->nsites, 6, "function sites (foo's two lines merge)");
		ASSERT_TRUE(site(m, "bar") && site(m, "strtok") && site(m, "foo_make") &&
			    site(m, "libbar.so+0x10") && site(m, "0x9") && site(m, "foo"),
			    "function names");
		ASSERT_NEAR(site(m, "foo") ? site(m, "foo")->bytes.est : 0, 2 * eb(1, 1, 1),
			    "foo at rate 1: n words");
		rp_model__free(m);
	}
	o.by = RP_BY_LINE;
	m = load(&o, &path, 1);
	if (m) {
		ASSERT_TRUE(site(m, "foo src/foo.c:10") && site(m, "foo src/foo.c:11") &&
			    site(m, "bar bar.h:7") && site(m, "strtok libc.so.6+0x1234"),
			    "line sites");
		rp_model__free(m);
	}
	o.by = RP_BY_STACK;
	m = load(&o, &path, 1);
	if (m) {
		ASSERT_TRUE(site(m, "bar <- baz <- main") != NULL, "inlined frames expand");
		rp_model__free(m);
	}
	o.by = RP_BY_OBJECT;
	m = load(&o, &path, 1);
	if (m) {
		ASSERT_TRUE(site(m, "libc.so.6") && site(m, "libfoo.so.1") && site(m, "libbar.so") &&
			    site(m, "server"), "object sites");
		ASSERT_EQ(m->nsites, 4, "objects");
		/* Source-level frames (bar, foo) and the unnamed code go to the executable. */
		ASSERT_EQ(site(m, "server") ? site(m, "server")->sampled : 0, 4, "server blocks");
		rp_model__free(m);
	}
	free(path);
}

/* Allocator and std:: wrapper trimming, --no-trim, and pprof's focus/ignore/hide/show-from. */
/* Load the trace @path with options @o and run the block on the model m, then free it. */
#define WITH_MODEL(o, path, ...)						\
	do {									\
		struct rp_model *m = load((o), (path), 1);			\
										\
		if (m) {							\
			__VA_ARGS__;						\
			rp_model__free(m);					\
		}								\
	} while (0)

static void test_filters(void)
{
	static const struct ev evs[] = {
		A(0, 1, 1, 1, 2, 3),		/* main -> foo -> malloc */
		A(1, 1, 2, 1, 5, 3),		/* main -> baz -> bar (inlined) -> malloc */
		A(2, 1, 4, 2, 12, 11, 4),	/* foo -> vector::_M_default_append -> allocate
						 * -> operator new */
		A(3, 1, 8, 1, 13, 4),		/* main -> vector::_M_realloc_insert -> new */
	};
	struct rp_options o = { .by = RP_BY_FUNCTION, .top = 10, .tail = 0.1 };
	char *path = write_trace("filt.ctf", 1.0, evs, sizeof(evs) / sizeof(evs[0]));
	regex_t focus, ignore, hide, from;

	if (!path)
		return;
	ASSERT_OK(regcomp(&focus, "bar", REG_EXTENDED | REG_NOSUB), "regcomp");
	ASSERT_OK(regcomp(&ignore, "^foo$", REG_EXTENDED | REG_NOSUB), "regcomp");
	ASSERT_OK(regcomp(&hide, "^(foo|bar)$", REG_EXTENDED | REG_NOSUB), "regcomp");
	ASSERT_OK(regcomp(&from, "^foo$", REG_EXTENDED | REG_NOSUB), "regcomp");
	WITH_MODEL(&o, &path, {
		ASSERT_EQ(samples_at(m, "foo"), 5,
			  "foo: its own and the vector's (wrappers trimmed)");
		ASSERT_EQ(samples_at(m, "main"), 8, "main: _M_realloc_insert with a return type");
		ASSERT_EQ(m->nsites, 3, "foo, bar, main");
	});
	o.no_trim = true;
	WITH_MODEL(&o, &path, {
		ASSERT_EQ(samples_at(m, "operator new(unsigned long)"), 12,
			  "--no-trim: operator new");
		ASSERT_EQ(samples_at(m, "malloc"), 3, "--no-trim: malloc");
	});
	o.no_trim = false;
	o.focus = &focus;
	WITH_MODEL(&o, &path, {
		ASSERT_EQ(m->total_samples, 2, "focus bar: the inlined stack only");
		ASSERT_EQ(m->filtered_out, 3, "three stacks filtered out");
		ASSERT_NEAR(m->timeline[m->npoints - 1].live_bytes.est, eb(1, 1, 2),
			    "the timeline sees the filter too");
	});
	o.focus = NULL;
	o.ignore = &ignore;
	WITH_MODEL(&o, &path, {
		ASSERT_EQ(m->total_samples, 10, "ignore foo: bar's and main's");
		ASSERT_TRUE(site(m, "bar") && site(m, "main") && m->nsites == 2, "sites");
	});
	o.ignore = NULL;
	o.hide = &hide;
	WITH_MODEL(&o, &path, {
		ASSERT_EQ(samples_at(m, "main"), 1 + 8, "hide foo|bar: main allocates itself");
		ASSERT_EQ(samples_at(m, "baz"), 2, "hide: bar's caller baz");
		ASSERT_EQ(m->total_samples, 15, "hide drops no sample");
	});
	o.hide = NULL;
	o.show_from = &from;
	o.by = RP_BY_STACK;
	WITH_MODEL(&o, &path, {
		ASSERT_EQ(samples_at(m, "foo"), 5, "show-from foo: stacks start at foo");
		ASSERT_EQ(m->nsites, 1, "stacks without foo dropped");
	});
	o.show_from = NULL;
	o.focus = &ignore;	/* ^foo$ */
	o.ignore = &focus;	/* bar */
	WITH_MODEL(&o, &path, {
		ASSERT_EQ(m->total_samples, 5, "focus foo, ignore bar");
	});
	regfree(&focus);
	regfree(&ignore);
	regfree(&hide);
	regfree(&from);
	free(path);
}

static void test_window_merge(void)
{
	static const struct ev a[] = {
		A(1000, 9, 2, 1, 2),	/* id 0 at 1 s: freed at 5 s */
		A(2000, 9, 1, 1, 2),	/* id 1 at 2 s: leaks */
		C(5000, 0),
		A(10500, 9, 1, 1, 2),	/* id 2 at 10.5 s: young at the end */
		A(11000, 9, 4, 1, 5),	/* id 3 at 11 s: last event */
	};
	static const struct ev b[] = {
		A(0, 3, 1, 1, 2),
		A(500, 3, 2, 1, 2),
	};
	struct rp_options o = { .by = RP_BY_FUNCTION, .top = 10, .tail = 0.1, .points = 4 };
	char *paths[2] = { write_trace("wa.ctf", 0.5, a, 5), write_trace("wb.ctf", 0.01, b, 2) };
	struct rp_model *m;
	const struct rp_site *foo;

	if (!paths[0] || !paths[1])
		goto out;
	m = load(&o, paths, 2);
	if (m) {
		foo = site(m, "foo");
		ASSERT_EQ(m->traces[0].collects, 1, "collects");
		ASSERT_EQ(m->traces[0].unmatched_collects, 0, "unmatched collects");
		if (foo) {
			ASSERT_NEAR(foo->bytes.est, eb(0.5, 9, 4) + eb(0.01, 3, 3), "merged bytes");
			ASSERT_NEAR(foo->bytes.var, vb(0.5, 9, 4) + vb(0.01, 3, 3),
				    "merged variance");
		}
		/* Trace a's window is [1 s, 11 s]: young after 10 s, so id 2 is young; trace b's
		 * is [0, 0.5 s]: its second block is young. */
		ASSERT_EQ(m->traces[0].win_start, 1000000, "window starts at the first alloc");
		ASSERT_EQ(m->traces[0].young_after, 10000000, "young after");
		ASSERT_EQ(foo ? foo->sampled_old_live : 0, 2, "old live: id 1 and trace b's");
		ASSERT_EQ(m->npoints, 4, "points");
		rp_model__free(m);
	}
	o.has_since = o.has_until = true;
	o.since_us = 1500000;
	o.until_us = 9000000;
	m = load(&o, paths, 1);
	if (m) {
		foo = site(m, "foo");
		ASSERT_EQ(m->total_sampled, 1, "window keeps id 1 only");
		ASSERT_NEAR(foo ? foo->live_bytes.est : 0, eb(0.5, 9, 1), "id 1 live at 9 s");
		ASSERT_EQ(m->traces[0].win_end, 9000000, "window end");
		rp_model__free(m);
	}
	o.until_us = 5500000;
	o.since_us = 0;
	m = load(&o, paths, 1);
	if (m) {
		/* id 0 freed at 5 s < 5.5 s; id 1 live at the window end. */
		ASSERT_NEAR(m->total_live_bytes.est, eb(0.5, 9, 1), "live at 5.5 s");
		ASSERT_NEAR(m->total_bytes.est, eb(0.5, 9, 3), "allocated by 5.5 s");
		rp_model__free(m);
	}
out:
	free(paths[0]);
	free(paths[1]);
}

static void test_bad_trace(void)
{
	struct rp_options o = { .by = RP_BY_FUNCTION, .top = 10, .tail = 0.1 };
	struct rp_model *m = rp_model__new(&o);
	char path[64], err[256] = "";
	FILE *f;

	snprintf(path, sizeof(path), "%s/bad.ctf", dir);
	f = fopen(path, "we");
	if (!ASSERT_TRUE(f && m, "setup"))
		goto out;
	fputs("garbage garbage garbage garbage garbage garbage garbage garbage garbage", f);
	fclose(f);
	ASSERT_TRUE(rp_model__load(m, path, err, sizeof(err)) < 0, "garbage rejected");
	ASSERT_TRUE(strstr(err, "offset 0") != NULL, err);
	/* The model stays usable and empty. */
	ASSERT_OK(rp_model__analyze(m), "analyze after failure");
	ASSERT_EQ(m->nsites, 0, "no sites");
out:
	rp_model__free(m);
	rp_model__free(NULL);
}

int main(void)
{
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	RUN(test_estimators);
	RUN(test_keys);
	RUN(test_filters);
	RUN(test_window_merge);
	RUN(test_bad_trace);
	{
		char cmd[64];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd))
			fprintf(stderr, "could not remove %s\n", dir);
	}
	return test_exit();
}
