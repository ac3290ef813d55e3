// SPDX-License-Identifier: LGPL-2.1-or-later
/* The human-readable report: traces, totals with error bars, top sites, leaks, live heap. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "report/report.h"

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s ? s + 1 : path;
}

#define TEXT_WIDTH 100

/*
 * A site's name for a table, starting at column @col. Whole stacks are shortened for reading:
 * runs of one frame (recursion) print once with a count, at most 12 distinct entries are
 * shown, and the line is folded before TEXT_WIDTH columns, continuing indented under the
 * table. The JSON output keeps the full key.
 */
static void print_site(const struct rp_model *m, const struct rp_site *s, FILE *f, int col)
{
	const struct rp_stack *st = &m->stacks[s->stack];
	const uint32_t *fr = &m->stack_frames[st->off];
	unsigned int shown = 0;
	char buf[32], item[96];

	if (m->opts.by != RP_BY_STACK) {
		fputs(s->key, f);
		return;
	}
	for (uint32_t i = st->eff_len; i-- > 0;) {
		uint32_t run = 1;
		const char *name = item;
		int len;

		while (i > 0 && fr[i - 1] == fr[i]) {
			run++;
			i--;
		}
		if (shown == 12) {
			len = snprintf(item, sizeof(item), "... (%u more frames)", i + run);
		} else {
			name = rp_frame__name(m, fr[i], buf, sizeof(buf));
			if (run > 1) {
				len = snprintf(item, sizeof(item), "%s (x%u)", name, run);
				if (len >= (int)sizeof(item))
					len = (int)sizeof(item) - 1;
				name = item;
			} else {
				len = (int)strlen(name);	/* a long C++ name: whole */
			}
		}
		if (shown && col + 4 + len > TEXT_WIDTH) {
			fputs(" <-\n        ", f);
			col = 8;
		} else if (shown) {
			fputs(" <- ", f);
			col += 4;
		}
		fputs(name, f);
		col += len;
		if (shown++ == 12)
			break;
	}
}

static void print_traces(const struct rp_model *m, FILE *f)
{
	uint64_t blocks = 0, samples = 0, frees = 0;

	for (size_t i = 0; i < m->ntraces; i++) {
		blocks += m->traces[i].nblocks;
		samples += m->traces[i].sum_nsamples;
		frees += m->traces[i].collects;
	}
	fprintf(f, "Traces: %zu (%llu sampled blocks, %llu samples, %llu frees)\n", m->ntraces,
		(unsigned long long)blocks, (unsigned long long)samples,
		(unsigned long long)frees);
	if (m->nduplicates)
		fprintf(f, "  (%zu trace%s given twice, counted once)\n", m->nduplicates,
			m->nduplicates == 1 ? "" : "s");
	for (size_t i = 0; i < m->ntraces; i++) {
		const struct rp_trace *t = &m->traces[i];
		double off = (double)(t->start_us - (t->base ? m->base_t0_us : m->t0_us)) / 1e6;

		fprintf(f, "  %s%s: '%s' pid %llu%s%s, format v%u, rate %g, %u-bit words, "
			"%.3f .. %.3f s", t->base ? "base " : "", base_name(t->path), t->executable,
			(unsigned long long)t->pid, t->host[0] ? " on " : "", t->host, t->version,
			t->rate, t->word_size, off, off + (double)t->end_us / 1e6);
		if (!m->same_window || t->base)
			fprintf(f, ", window %.3f .. %.3f s", off + (double)t->win_start / 1e6,
				off + (double)t->win_end / 1e6);
		if (t->in_progress)
			fprintf(f, ", in progress (still being written, or its writer stopped "
				"before completing it: the figures are of what it holds so far)");
		if (t->warnings)
			fprintf(f, ", %llu warnings", (unsigned long long)t->warnings);
		if (t->unmatched_collects)
			fprintf(f, ", %llu unmatched frees",
				(unsigned long long)t->unmatched_collects);
		fputc('\n', f);
	}
	if (m->has_base)
		fprintf(f, "Base traces are on their own axis, from the earliest base trace's "
			"start\n");
	if (m->ntraces) {
		const struct rp_trace *t = &m->traces[0];
		double off;
		time_t secs = (time_t)(m->t0_us / 1000000);
		char when[32] = "?";
		struct tm tm;

		while (t->base && t + 1 < m->traces + m->ntraces)
			t++;	/* the Window line describes the traces reported, not the base */
		off = (double)(t->start_us - m->t0_us) / 1e6;
		if (gmtime_r(&secs, &tm))
			strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
		fprintf(f, "Times: seconds from %s (the %strace's start)\n", when,
			m->ntraces > 1 ? "earliest " : "");
		if (m->same_window)
			fprintf(f, "Window: %.3f s .. %.3f s", off + (double)t->win_start / 1e6,
				off + (double)t->win_end / 1e6);
		else
			fprintf(f, "Window: per trace (above)");
		fprintf(f, "; sites by %s; estimates ± 1 standard error; bytes as requested, "
			"rounded up to words\n", rp_by_name(m->opts.by));
	}
}

static void print_total(FILE *f, const char *what, const struct rp_est *e, bool bytes)
{
	char b1[32], b2[32];

	if (bytes)
		fprintf(f, "  %-13s %12s ± %-12s (%.0f ± %.0f bytes)\n", what,
			mp_fmt_bytes(e->est, b1, sizeof(b1)), mp_fmt_bytes(rp_se(e), b2, sizeof(b2)),
			e->est, rp_se(e));
	else
		fprintf(f, "  %-13s %12.0f ± %.0f\n", what, e->est, rp_se(e));
}

/* The four estimates of a site, in the order of enum col. */
enum col { COL_BYTES, COL_BLOCKS, COL_LIVE_BYTES, COL_LIVE_BLOCKS };

static const struct rp_est *site_col(const struct rp_site *s, enum col c)
{
	switch (c) {
	case COL_BYTES:
		return &s->bytes;
	case COL_BLOCKS:
		return &s->blocks;
	case COL_LIVE_BYTES:
		return &s->live_bytes;
	case COL_LIVE_BLOCKS:
		return &s->live_blocks;
	}
	return &s->bytes;
}

static const char *const col_names[] = { "bytes", "allocations", "live bytes", "live blocks" };

static void print_col(FILE *f, enum col c, double v)
{
	char b[32];

	if (c == COL_BYTES || c == COL_LIVE_BYTES)
		fprintf(f, " %11s", mp_fmt_bytes(v, b, sizeof(b)));
	else
		fprintf(f, " %11.0f", v);
}

/*
 * A ranking: the value it is ranked by first, with its SE and its share of the total, then
 * the two other estimates a reader compares it with.
 */
static void print_sites(const struct rp_model *m, FILE *f, const uint32_t *order, bool by_blocks)
{
	size_t n = m->nsites < m->opts.top ? m->nsites : m->opts.top;
	enum col key = by_blocks ? (m->opts.live ? COL_LIVE_BLOCKS : COL_BLOCKS) :
				   (m->opts.live ? COL_LIVE_BYTES : COL_BYTES);
	enum col other1 = by_blocks ? (m->opts.live ? COL_LIVE_BYTES : COL_BYTES) :
				      (m->opts.live ? COL_LIVE_BLOCKS : COL_BLOCKS);
	enum col other2 = m->opts.live ? (by_blocks ? COL_BLOCKS : COL_BYTES) : COL_LIVE_BYTES;
	const struct rp_est totals[] = { m->total_bytes, m->total_blocks, m->total_live_bytes,
					 m->total_live_blocks };
	double total = totals[key].est;

	fprintf(f, "\nTop %zu site%s by estimated %s (by %s)\n", n, n == 1 ? "" : "s",
		col_names[key], rp_by_name(m->opts.by));
	fprintf(f, "  %3s %11s %11s %6s %11s %11s  %s\n", "#", col_names[key], "± SE", "%",
		col_names[other1], col_names[other2], "site");
	for (size_t i = 0; i < n; i++) {
		const struct rp_site *s = &m->sites[order[i]];
		const struct rp_est *v = site_col(s, key);

		fprintf(f, "  %3zu", i + 1);
		print_col(f, key, v->est);
		print_col(f, key, rp_se(v));
		fprintf(f, " %5.1f%%", total > 0 ? 100.0 * v->est / total : 0.0);
		print_col(f, other1, site_col(s, other1)->est);
		print_col(f, other2, site_col(s, other2)->est);
		fputs("  ", f);
		print_site(m, s, f, 62);
		fputc('\n', f);
	}
	if (!n)
		fprintf(f, "  (no allocations in the window)\n");
}

/* An estimate of bytes and its standard error, in two columns. */
static void print_bytes_se(FILE *f, const struct rp_est *e)
{
	char b1[32], b2[32];

	fprintf(f, " %11s %11s", mp_fmt_bytes(e->est, b1, sizeof(b1)),
		mp_fmt_bytes(rp_se(e), b2, sizeof(b2)));
}

static void print_leaks(const struct rp_model *m, FILE *f)
{
	fprintf(f, "\nLeak suspects: sites with sampled blocks still live at the end that were "
		"allocated before the last %.0f%% of the window\n", m->opts.tail * 100);
	if (!m->nsuspects) {
		fprintf(f, "  none\n");
		return;
	}
	fprintf(f, "  %3s %11s %11s %10s %9s %7s %19s %19s  %s\n", "#", "live bytes", "± SE",
		"live blks", "old/live", "freed", "lifetime med/p90 s", "live age med/max s",
		"site");
	for (size_t i = 0; i < m->nsuspects; i++) {
		const struct rp_site *s = &m->sites[m->suspects[i]];
		char life[32], age[32], ratio[24];

		if (s->nlifetimes)
			snprintf(life, sizeof(life), "%.3f/%.3f", s->life_median_s, s->life_p90_s);
		else
			snprintf(life, sizeof(life), "never freed");
		snprintf(age, sizeof(age), "%.3f/%.3f", s->age_median_s, s->age_max_s);
		snprintf(ratio, sizeof(ratio), "%llu/%llu",
			 (unsigned long long)s->sampled_old_live,
			 (unsigned long long)s->sampled_live);
		fprintf(f, "  %3zu", i + 1);
		print_bytes_se(f, &s->live_bytes);
		fprintf(f, " %10.0f %9s %6.1f%% %19s %19s  ", s->live_blocks.est, ratio,
			s->sampled ? 100.0 * (double)s->sampled_freed / (double)s->sampled : 0,
			life, age);
		print_site(m, s, f, 117);
		fputc('\n', f);
	}
}

/* The peak of the live heap, and the sites that held it. */
static void print_peak(const struct rp_model *m, FILE *f)
{
	size_t n = m->nsites < m->opts.top ? m->nsites : m->opts.top;
	char b1[32], b2[32];

	fprintf(f, "\nPeak of the live heap: %s ± %s at %.3f s (the largest estimate after a "
		"sampled allocation)\n", mp_fmt_bytes(m->peak_live.est, b1, sizeof(b1)),
		mp_fmt_bytes(rp_se(&m->peak_live), b2, sizeof(b2)), (double)m->peak_us / 1e6);
	fprintf(f, "  %3s %11s %11s %6s  %s\n", "#", "live bytes", "± SE", "%", "site");
	for (size_t i = 0; i < n; i++) {
		const struct rp_site *s = &m->sites[m->by_peak[i]];

		if (!(s->peak_live_bytes.est > 0))
			break;
		fprintf(f, "  %3zu", i + 1);
		print_bytes_se(f, &s->peak_live_bytes);
		fprintf(f, " %5.1f%%  ",
			m->peak_live.est > 0 ? 100 * s->peak_live_bytes.est / m->peak_live.est : 0);
		print_site(m, s, f, 38);
		fputc('\n', f);
	}
}

/* Blocks freed within the threshold of their allocation, per site. */
static void print_temporary(const struct rp_model *m, FILE *f)
{
	size_t n = m->nsites < m->opts.top ? m->nsites : m->opts.top;
	char b1[32], b2[32];

	fprintf(f, "\nTemporary allocations (freed within %.3f ms): %.0f ± %.0f, %.1f%% of all, "
		"%s ± %s\n", (double)m->opts.temp_us / 1e3, m->total_temp_blocks.est,
		rp_se(&m->total_temp_blocks),
		m->total_blocks.est > 0 ? 100 * m->total_temp_blocks.est / m->total_blocks.est : 0,
		mp_fmt_bytes(m->total_temp_bytes.est, b1, sizeof(b1)),
		mp_fmt_bytes(rp_se(&m->total_temp_bytes), b2, sizeof(b2)));
	fprintf(f, "  %3s %11s %10s %7s %11s  %s\n", "#", "temporary", "± SE", "of site", "bytes",
		"site");
	for (size_t i = 0; i < n; i++) {
		const struct rp_site *s = &m->sites[m->by_temp[i]];

		if (!(s->temp_blocks.est > 0))
			break;
		fprintf(f, "  %3zu %11.0f %10.0f %6.1f%% %11s  ", i + 1, s->temp_blocks.est,
			rp_se(&s->temp_blocks),
			s->blocks.est > 0 ? 100 * s->temp_blocks.est / s->blocks.est : 0,
			mp_fmt_bytes(s->temp_bytes.est, b1, sizeof(b1)));
		print_site(m, s, f, 50);
		fputc('\n', f);
	}
}

/* A size class's label: "<= 64 B", the last one "> 1.0 GiB". */
static const char *size_label(unsigned int k, char *buf, size_t len)
{
	char b[32];

	snprintf(buf, len, "%s %s", k + 1 < RP_SIZE_CLASSES ? "<=" : ">",
		 mp_fmt_bytes(rp_size_class_max(k), b, sizeof(b)));
	return buf;
}

/* Estimated allocations by size class, overall, and the classes of the top sites. */
static void print_sizes(const struct rp_model *m, FILE *f)
{
	size_t n = m->nsites < m->opts.top ? m->nsites : m->opts.top;
	double max = 0;
	char b1[32], b2[32], lab[40];

	for (unsigned int k = 0; k < RP_SIZE_CLASSES; k++)
		if (m->size_blocks[k].est > max)
			max = m->size_blocks[k].est;
	fprintf(f, "\nAllocations by size (block payload, whole words)\n");
	fprintf(f, "  %11s %11s %9s %11s\n", "size", "allocations", "± SE", "bytes");
	for (unsigned int k = 0; k < RP_SIZE_CLASSES; k++) {
		const struct rp_est *e = &m->size_blocks[k];
		char bar[41];
		int w = max > 0 ? (int)lround(40 * e->est / max) : 0;

		if (!(e->est > 0))
			continue;
		memset(bar, '#', (size_t)w);
		bar[w] = '\0';
		fprintf(f, "  %11s %11.0f %9.0f %11s  %s\n", size_label(k, lab, sizeof(lab)),
			e->est, rp_se(e), mp_fmt_bytes(m->size_bytes[k].est, b1, sizeof(b1)), bar);
	}
	fprintf(f, "  By site (the top %zu by bytes): size class: allocations ± SE\n", n);
	for (size_t i = 0; i < n; i++) {
		const struct rp_site *s = &m->sites[m->by_bytes[i]];
		int col = 5;

		fputs("    ", f);
		print_site(m, s, f, 4);
		fputs("\n     ", f);
		for (unsigned int k = 0; k < RP_SIZE_CLASSES; k++) {
			const struct rp_est *e = &s->size_blocks[k];
			int len;

			if (!(e->est > 0))
				continue;
			len = snprintf(b2, sizeof(b2), " %s: %.0f ± %.0f", size_label(k, lab,
				       sizeof(lab)), e->est, rp_se(e));
			if (col + len > 100) {
				fputs("\n     ", f);
				col = 5;
			}
			fputs(b2, f);
			col += len;
		}
		fputc('\n', f);
	}
}

static void print_timeline(const struct rp_model *m, FILE *f)
{
	double peak = 0;

	if (!m->npoints)
		return;
	for (size_t i = 0; i < m->npoints; i++)
		if (m->timeline[i].live_bytes.est > peak)
			peak = m->timeline[i].live_bytes.est;
	fprintf(f, "\nLive heap over time (the last point is live at end)\n");
	fprintf(f, "  %10s %11s %11s\n", "t (s)", "live bytes", "± SE");
	for (size_t i = 0; i < m->npoints; i++) {
		const struct rp_point *p = &m->timeline[i];
		char bar[41];
		int w = peak > 0 ? (int)lround(40 * p->live_bytes.est / peak) : 0;

		memset(bar, '#', (size_t)w);
		bar[w] = '\0';
		fprintf(f, "  %10.3f", p->t_s);
		print_bytes_se(f, &p->live_bytes);
		fprintf(f, "  %s\n", bar);
	}
}

/* Bytes with their sign: "+1.2 MiB", "-300 B". */
static const char *signed_bytes(double v, char *buf, size_t len)
{
	char b[24];

	snprintf(buf, len, "%s%s", v > 0 ? "+" : "", mp_fmt_bytes(v, b, sizeof(b)));
	return buf;
}

static void print_change_total(FILE *f, const char *what, const struct rp_est *cur,
			       const struct rp_est *base, bool bytes)
{
	struct rp_est d = rp_est_diff(cur, base);
	char b1[32], b2[32], b3[32], b4[32];

	if (bytes)
		fprintf(f, "  %-13s %12s %12s %12s ± %-11s\n", what,
			mp_fmt_bytes(base->est, b1, sizeof(b1)),
			mp_fmt_bytes(cur->est, b2, sizeof(b2)), signed_bytes(d.est, b3, sizeof(b3)),
			mp_fmt_bytes(rp_se(&d), b4, sizeof(b4)));
	else
		fprintf(f, "  %-13s %12.0f %12.0f %+12.0f ± %-11.0f\n", what, base->est, cur->est,
			d.est, rp_se(&d));
}

/* A ranking by the change of allocated (or live) bytes, with its SE and z = change / SE. */
static void print_changes(const struct rp_model *m, FILE *f, bool live)
{
	const uint32_t *order = live ? m->by_change_live : m->by_change_bytes;
	size_t n = m->nsites < m->opts.top ? m->nsites : m->opts.top;

	fprintf(f, "\nTop %zu site%s by change in %s bytes (by %s)\n", n, n == 1 ? "" : "s",
		live ? "live" : "allocated", rp_by_name(m->opts.by));
	fprintf(f, "  %3s %12s %11s %7s %11s %11s  %s\n", "#", "change", "± SE", "z", "base",
		"new", "site");
	for (size_t i = 0; i < n; i++) {
		const struct rp_site *s = &m->sites[order[i]];
		const struct rp_est *cur = live ? &s->live_bytes : &s->bytes;
		const struct rp_est *base = live ? &s->base_live_bytes : &s->base_bytes;
		struct rp_est d = rp_est_diff(cur, base);
		char b1[34], b2[32], b3[32], b4[32];

		fprintf(f, "  %3zu %12s %11s %7.1f %11s %11s  ", i + 1,
			signed_bytes(d.est, b1, sizeof(b1)),
			mp_fmt_bytes(rp_se(&d), b2, sizeof(b2)),
			rp_se(&d) > 0 ? d.est / rp_se(&d) : 0,
			mp_fmt_bytes(base->est, b3, sizeof(b3)),
			mp_fmt_bytes(cur->est, b4, sizeof(b4)));
		print_site(m, s, f, 64);
		fputc('\n', f);
	}
	if (!n)
		fprintf(f, "  (no allocations in the windows)\n");
}

/* --base: the difference new - base, variances added. */
static void print_diff(const struct rp_model *m, FILE *f)
{
	fprintf(f, "\nChange from the base (new - base; |z| > 2 is unlikely to be sampling "
		"noise)\n");
	fprintf(f, "  %-13s %12s %12s %12s   %-11s\n", "", "base", "new", "change", "± SE");
	print_change_total(f, "allocated", &m->total_bytes, &m->base_total_bytes, true);
	print_change_total(f, "allocations", &m->total_blocks, &m->base_total_blocks, false);
	print_change_total(f, "live at end", &m->total_live_bytes, &m->base_total_live_bytes, true);
	print_change_total(f, "live blocks", &m->total_live_blocks, &m->base_total_live_blocks,
			   false);
	print_changes(m, f, false);
	print_changes(m, f, true);
}

int rp_print_summary(const struct rp_model *m, const char *flame, const char *pprof, FILE *f)
{
	struct rp_est a = m->total_bytes, l = m->total_live_bytes;
	char b1[32], b2[32], b3[32], b4[32];
	size_t ncur = 0, nbase = 0;

	for (size_t i = 0; i < m->ntraces; i++)
		*(m->traces[i].base ? &nbase : &ncur) += 1;
	if (m->has_base) {
		a = rp_est_diff(&m->total_bytes, &m->base_total_bytes);
		l = rp_est_diff(&m->total_live_bytes, &m->base_total_live_bytes);
	}
	errno = 0;
	fprintf(f, "Wrote %s%s%s%s%s%s%s: %zu trace%s", flame ? "flame graph '" : "",
		flame ? flame : "", flame ? "'" : "", flame && pprof ? " and " : "",
		pprof ? "pprof profile '" : "", pprof ? pprof : "", pprof ? "'" : "", ncur,
		ncur == 1 ? "" : "s");
	if (m->has_base)
		fprintf(f, " minus %zu base trace%s", nbase, nbase == 1 ? "" : "s");
	fprintf(f, ", %s%s ± %s allocated, %s%s ± %s live at end, %zu sites%s\n",
		m->has_base && a.est > 0 ? "+" : "", mp_fmt_bytes(a.est, b1, sizeof(b1)),
		mp_fmt_bytes(rp_se(&a), b2, sizeof(b2)), m->has_base && l.est > 0 ? "+" : "",
		mp_fmt_bytes(l.est, b3, sizeof(b3)), mp_fmt_bytes(rp_se(&l), b4, sizeof(b4)),
		m->nsites, m->opts.live ? " (by live bytes)" : "");
	if (fflush(f) || ferror(f))
		return errno ? -errno : -EIO;
	return 0;
}

int rp_print_text(const struct rp_model *m, FILE *f)
{
	errno = 0;
	print_traces(m, f);
	if (m->has_base) {
		print_diff(m, f);
		rp_print_notes(m, f);
		goto out;
	}
	fprintf(f, "\nTotals (%llu sampled blocks in the window, %llu still live)\n",
		(unsigned long long)m->total_sampled, (unsigned long long)m->total_sampled_live);
	print_total(f, "allocated", &m->total_bytes, true);
	print_total(f, "allocations", &m->total_blocks, false);
	print_total(f, "live at end", &m->total_live_bytes, true);
	print_total(f, "live blocks", &m->total_live_blocks, false);
	print_sites(m, f, m->by_bytes, false);
	print_sites(m, f, m->by_blocks, true);
	print_leaks(m, f);
	print_peak(m, f);
	print_temporary(m, f);
	print_sizes(m, f);
	print_timeline(m, f);
	rp_print_notes(m, f);
out:
	if (fflush(f) || ferror(f))
		return errno ? -errno : -EIO;	/* the failed write's errno (ENOSPC, EPIPE) */
	return 0;
}
