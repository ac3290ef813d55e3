// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * trace_check: verifies traces written by `memprofctl record` against a workload's truth
 * (tests/workloads/wl_*.c print "TRUTH <site> words=W live_words=L blocks=N"), reading them
 * through libmemprof's strict reader.
 *
 *	trace_check strict TRACE...             every trace decodes strictly; ids and collects
 *	                                        are consistent
 *	trace_check info TRACE                  trace-info and per-site counts
 *	trace_check sites TRACE TRUTH [SITE...] per site: estimated words vs truth within 4.65 SE,
 *	                                        live words at exit too (all collected if L = 0)
 *	trace_check hist TRACE SITE BLOCKS SIZE chi-square of n_samples (n = 0: blocks not in the
 *	                                        trace) against Binomial(ceil(SIZE/8) + 1, rate)
 *	trace_check frames TRACE SITE           function names of the first sample at SITE,
 *	                                        outermost first (innermost last)
 *
 * A site is the function of the allocation's innermost frame (its last location). Results are
 * printed as "PASS: ..." / "FAIL: ..." lines; exit status 1 if any failed.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memprof/trace.h>

#include "tests/bpf/result.h"
#include "tests/unit/chisq.h"

struct obj {
	uint64_t length, nsamples;
	int site;		/* index in sites[], -1 = none */
	bool collected;
};

struct site {
	char *name;
	uint64_t allocs, nsamples, live_nsamples, collected;
	char *frames;		/* first sample's function names, outermost first */
};

struct trace {
	struct memprof_trace_info info;
	char *exe, *context;
	struct obj *objs;
	size_t nobjs, cap;
	struct site *sites;
	size_t nsites;
	uint64_t collects, locations;
};


/* The function name of location code @code's innermost location. */
static const char *code_name(struct memprof_reader *r, uint64_t code)
{
	unsigned int n = 0;
	const struct memprof_location *l = memprof_reader__lookup(r, code, &n);

	if (!l || !n || !l[n - 1].defname)
		return "?";
	return l[n - 1].defname;
}

static int site_index(struct trace *t, const char *name)
{
	for (size_t i = 0; i < t->nsites; i++)
		if (!strcmp(t->sites[i].name, name))
			return (int)i;
	t->sites = realloc(t->sites, (t->nsites + 1) * sizeof(*t->sites));
	memset(&t->sites[t->nsites], 0, sizeof(t->sites[0]));
	t->sites[t->nsites].name = strdup(name);
	return (int)t->nsites++;
}

static char *join_frames(struct memprof_reader *r, const struct memprof_event *ev)
{
	size_t len = 1;
	char *s;

	for (size_t i = 0; i < ev->backtrace_len; i++)
		len += strlen(code_name(r, ev->backtrace[i])) + 1;
	s = calloc(1, len);
	for (size_t i = 0; s && i < ev->backtrace_len; i++) {
		if (i)
			strcat(s, " ");
		strcat(s, code_name(r, ev->backtrace[i]));
	}
	return s;
}

/* Read @path strictly; on a decoding error print it and return -1. */
static int load(const char *path, struct trace *t)
{
	struct memprof_reader_opts o = { .sz = sizeof(o), .strict = 1, .report_locations = 1 };
	struct memprof_event ev;
	struct memprof_reader *r;
	char err[512] = "";
	int res;

	memset(t, 0, sizeof(*t));
	r = memprof_reader__open(path, &o, err, sizeof(err));
	if (!r) {
		fprintf(stderr, "trace_check: cannot open '%s': %s\n", path,
			err[0] ? err : strerror(errno));
		return -1;
	}
	t->info = *memprof_reader__info(r);
	t->exe = strdup(t->info.executable_name ? t->info.executable_name : "");
	t->context = strdup(t->info.context ? t->info.context : "");
	while ((res = memprof_reader__next(r, &ev)) > 0) {
		switch (ev.type) {
		case MEMPROF_EV_LOCATION:
			t->locations++;
			break;
		case MEMPROF_EV_ALLOC: {
			struct obj *o2;
			const char *name = ev.backtrace_len ?
				code_name(r, ev.backtrace[ev.backtrace_len - 1]) : "?";
			int si = site_index(t, name);

			if (ev.id != t->nobjs) {
				fprintf(stderr, "trace_check: %s: alloc id %" PRIu64
					", expected %zu\n", path, ev.id, t->nobjs);
				res = -1;
				goto out;
			}
			if (ev.nsamples < 1 || ev.source != MEMPROF_SOURCE_EXTERNAL) {
				fprintf(stderr, "trace_check: %s: alloc %" PRIu64 " has nsamples %"
					PRIu64 " source %d\n", path, ev.id, ev.nsamples, ev.source);
				res = -1;
				goto out;
			}
			if (t->nobjs == t->cap) {
				t->cap = t->cap ? 2 * t->cap : 1024;
				t->objs = realloc(t->objs, t->cap * sizeof(*t->objs));
			}
			o2 = &t->objs[t->nobjs++];
			*o2 = (struct obj){ .length = ev.length, .nsamples = ev.nsamples,
					    .site = si };
			t->sites[si].allocs++;
			t->sites[si].nsamples += ev.nsamples;
			t->sites[si].live_nsamples += ev.nsamples;
			if (!t->sites[si].frames)
				t->sites[si].frames = join_frames(r, &ev);
			break;
		}
		case MEMPROF_EV_COLLECT: {
			struct obj *o2;

			if (ev.id >= t->nobjs || t->objs[ev.id].collected) {
				fprintf(stderr, "trace_check: %s: bad collect of id %" PRIu64 "\n",
					path, ev.id);
				res = -1;
				goto out;
			}
			o2 = &t->objs[ev.id];
			o2->collected = true;
			t->collects++;
			t->sites[o2->site].live_nsamples -= o2->nsamples;
			t->sites[o2->site].collected++;
			break;
		}
		default:
			break;
		}
	}
	if (res < 0)
		fprintf(stderr, "trace_check: %s: %s\n", path, memprof_reader__errmsg(r));
out:
	memprof_reader__free(r);
	return res < 0 ? -1 : 0;
}

/* Site names: "wl_site_x", maybe with a clone suffix (".constprop.0") or C++ parameters. */
static bool site_is(const char *name, const char *site)
{
	size_t n = strlen(site);

	return !strncmp(name, site, n) && (name[n] == '\0' || name[n] == '.' || name[n] == '(');
}

static struct site *find_site(struct trace *t, const char *site)
{
	static struct site none;

	for (size_t i = 0; i < t->nsites; i++)
		if (site_is(t->sites[i].name, site))
			return &t->sites[i];
	memset(&none, 0, sizeof(none));
	return &none;
}

static int cmd_strict(int argc, char **argv)
{
	for (int i = 0; i < argc; i++) {
		struct trace t;

		if (load(argv[i], &t)) {
			result(false, "strict read of %s", argv[i]);
			continue;
		}
		result(true, "strict read of %s (%zu allocs, %" PRIu64 " collects, %" PRIu64
		       " locations, v%u)", argv[i], t.nobjs, t.collects, t.locations,
		       t.info.version);
	}
	return result_failures ? 1 : 0;
}

static int cmd_info(const char *path)
{
	struct trace t;

	if (load(path, &t))
		return 1;
	printf("pid %" PRIu64 "\nexe %s\nrate %g\nword_size %u\nversion %u\ncontext %s\n"
	       "allocs %zu\ncollects %" PRIu64 "\n", t.info.pid, t.exe, t.info.sample_rate,
	       t.info.word_size, t.info.version, t.context, t.nobjs, t.collects);
	for (size_t i = 0; i < t.nsites; i++)
		printf("site %s allocs=%" PRIu64 " nsamples=%" PRIu64 " live_nsamples=%" PRIu64
		       " collected=%" PRIu64 "\n", t.sites[i].name, t.sites[i].allocs,
		       t.sites[i].nsamples, t.sites[i].live_nsamples, t.sites[i].collected);
	return 0;
}

static bool wanted(const char *site, int n, char **only)
{
	if (!n)
		return true;
	for (int i = 0; i < n; i++)
		if (!strcmp(only[i], site))
			return true;
	return false;
}

/*
 * The bound on |z| of the per-site estimates. Which blocks BPF samples is not reproducible
 * (bpf_get_prandom_u32() draws the gaps: --seed only fixes the daemon's draws), so each check
 * can fail by chance: P(|Z| > 4) = 6.3e-5, and `tests/run -t "unit bpf system"` makes 211
 * of these checks (2 per site and trace), a 1.3% false alarm per run at 4 SE, more with
 * Poisson tails at small sample counts (1.5x at 50 samples). Bonferroni for a
 * family-wise rate of 1e-3 over 300 checks: P(|Z| > z) = 3.3e-6, z = 4.65. A real bias is far
 * outside it: a site counted twice is at z = sqrt(samples), 14 to 70 here.
 */
#define Z_BOUND 4.65

/*
 * After a failed site check, what the trace says about where samples went: its context (the
 * drops and losses it counted) and every innermost frame with its samples, largest first.
 */
static void explain_sites(const struct trace *t)
{
	size_t *order = calloc(t->nsites, sizeof(*order));

	fprintf(stderr, "  context: %s\n", t->context);
	if (!order)
		return;
	for (size_t i = 0; i < t->nsites; i++)
		order[i] = i;
	for (size_t i = 1; i < t->nsites; i++)	/* a few dozen sites: insertion sort */
		for (size_t j = i; j > 0 && t->sites[order[j]].nsamples >
					    t->sites[order[j - 1]].nsamples; j--) {
			size_t x = order[j];

			order[j] = order[j - 1];
			order[j - 1] = x;
		}
	for (size_t i = 0; i < t->nsites && i < 12; i++)
		fprintf(stderr, "  innermost frame %s: %" PRIu64 " samples in %" PRIu64 " blocks\n",
			t->sites[order[i]].name, t->sites[order[i]].nsamples,
			t->sites[order[i]].allocs);
	free(order);
}

static int cmd_sites(const char *path, const char *truth, int nonly, char **only)
{
	char line[512], site[128];
	unsigned long long w, l, b;
	struct trace t;
	double lam;
	FILE *f;
	int checked = 0;

	if (load(path, &t))
		return 1;
	lam = t.info.sample_rate;
	f = fopen(truth, "re");
	if (!f) {
		fprintf(stderr, "trace_check: cannot open '%s': %s\n", truth, strerror(errno));
		return 1;
	}
	while (fgets(line, sizeof(line), f)) {
		struct site *s;
		double est, se, z;

		if (sscanf(line, "TRUTH %127s words=%llu live_words=%llu blocks=%llu", site, &w, &l,
			   &b) != 4 || !wanted(site, nonly, only))
			continue;
		checked++;
		s = find_site(&t, site);
		if (w == 0) {	/* not an allocation (a PROT_NONE reservation) */
			result(s->nsamples == 0, "%s: no samples (not an allocation; %" PRIu64
			       " samples in %" PRIu64 " blocks)", site, s->nsamples, s->allocs);
			continue;
		}
		est = (double)s->nsamples / lam;
		se = sqrt((double)w * (1 - lam) / lam);
		z = (est - (double)w) / se;
		result(fabs(z) <= Z_BOUND, "%s: estimated words %.0f vs true %llu (z = %.2f, rate "
		       "%g, %" PRIu64 " samples in %" PRIu64 " blocks)", site, est, w, z, lam,
		       s->nsamples, s->allocs);
		if (l == 0) {
			result(s->live_nsamples == 0, "%s: every sampled block collected (%" PRIu64
			       " of %" PRIu64 ")", site, s->collected, s->allocs);
		} else {
			est = (double)s->live_nsamples / lam;
			se = sqrt((double)l * (1 - lam) / lam);
			z = (est - (double)l) / se;
			result(fabs(z) <= Z_BOUND, "%s: estimated live words at exit %.0f vs "
			       "leaked %llu (z = %.2f)", site, est, l, z);
		}
	}
	fclose(f);
	if (!checked)
		result(false, "%s: no TRUTH line to check", truth);
	if (result_failures)
		explain_sites(&t);
	return result_failures ? 1 : 0;
}

static int cmd_hist(const char *path, const char *site, uint64_t blocks, uint64_t size)
{
	enum { LEN = 256 };
	uint64_t hist[LEN] = { 0 }, tracked = 0, w = (size + 7) / 8 + 1;
	struct trace t;
	double chi2, p;
	int df, idx = -1;

	if (load(path, &t))
		return 1;
	for (size_t i = 0; i < t.nsites; i++)
		if (site_is(t.sites[i].name, site))
			idx = (int)i;
	for (size_t i = 0; i < t.nobjs; i++) {
		uint64_t n = t.objs[i].nsamples;

		if (t.objs[i].site != idx)
			continue;
		if (t.objs[i].length != (size + 7) / 8) {
			result(false, "%s: alloc %zu has length %" PRIu64 ", expected %" PRIu64,
			       site, i, t.objs[i].length, (size + 7) / 8);
			return 1;
		}
		hist[n < LEN - 1 ? n : LEN - 1]++;
		tracked++;
	}
	if (tracked > blocks) {
		result(false, "%s: %" PRIu64 " sampled blocks of %" PRIu64, site, tracked, blocks);
		return 1;
	}
	hist[0] = blocks - tracked;
	p = chisq_binomial_test(hist, LEN, blocks, w, t.info.sample_rate, &chi2, &df);
	printf("histogram of n_samples over %" PRIu64 " blocks of %" PRIu64 " words:", blocks, w);
	for (int k = 0; k < 12; k++)
		printf(" %" PRIu64, hist[k]);
	printf("\n");
	result(p > 0.001 && df >= 2, "%s: n_samples ~ Binomial(%" PRIu64 ", %g): chi2 = %.2f, "
	       "df = %d, p = %.4g", site, w, t.info.sample_rate, chi2, df, p);
	return result_failures ? 1 : 0;
}

static int cmd_frames(const char *path, const char *site)
{
	struct trace t;

	if (load(path, &t))
		return 1;
	for (size_t i = 0; i < t.nsites; i++) {
		if (site_is(t.sites[i].name, site)) {
			printf("%s\n", t.sites[i].frames ? t.sites[i].frames : "");
			return 0;
		}
	}
	fprintf(stderr, "trace_check: no sample at %s in %s\n", site, path);
	return 1;
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "";

	if (!strcmp(cmd, "strict") && argc >= 3)
		return cmd_strict(argc - 2, argv + 2);
	if (!strcmp(cmd, "info") && argc == 3)
		return cmd_info(argv[2]);
	if (!strcmp(cmd, "sites") && argc >= 4)
		return cmd_sites(argv[2], argv[3], argc - 4, argv + 4);
	if (!strcmp(cmd, "hist") && argc == 6)
		return cmd_hist(argv[2], argv[3], strtoull(argv[4], NULL, 0),
				strtoull(argv[5], NULL, 0));
	if (!strcmp(cmd, "frames") && argc == 4)
		return cmd_frames(argv[2], argv[3]);
	fprintf(stderr, "usage: trace_check strict TRACE... | info TRACE | sites TRACE TRUTH "
		"[SITE...] | hist TRACE SITE BLOCKS SIZE | frames TRACE SITE\n");
	return 2;
}
