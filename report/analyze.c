// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The analysis of a loaded report model (rp_model__analyze): blocks aggregated by site under
 * --by with unbiased estimates, lifetimes and ages, the sorted views the outputs print (bytes,
 * blocks, suspects, temporaries, changes against a base), the timeline, the stack view behind
 * flame graphs and pprof, and the heap's peak.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "report/report.h"
#include "userspace-lib/estimate.h"
#include "report/model_int.h"

static int push_u64(uint64_t **arr, size_t *n, size_t *cap, uint64_t v)
{
	if (mp_array_reserve((void **)arr, cap, *n + 1, sizeof(**arr), 64))
		return -ENOMEM;
	(*arr)[(*n)++] = v;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The q-quantile (nearest rank) of sorted @v, in seconds. */
static double quantile_s(const uint64_t *v, size_t n, double q)
{
	size_t i;

	if (!n)
		return 0;
	i = (size_t)ceil(q * (double)n);
	i = i ? i - 1 : 0;
	if (i >= n)
		i = n - 1;
	return (double)v[i] / 1e6;
}

unsigned int rp_size_class(double bytes)
{
	unsigned int k = 0;

	while (k + 1 < RP_SIZE_CLASSES && bytes > rp_size_class_max(k))
		k++;
	return k;
}

double rp_size_class_max(unsigned int k)
{
	return k + 1 < RP_SIZE_CLASSES ? ldexp(8, (int)k) : ldexp(8, (int)k - 1);
}

/*
 * The orders of the site views: descending by one of a site's estimates, or by its change
 * against the base (the larger change first, growth before shrinkage), ties by name so that
 * the outputs do not depend on the sort. Estimates are named by their offset in struct
 * rp_site.
 */
#define SITE_EST(field)	offsetof(struct rp_site, field)
#define SITE_NO_BASE	SIZE_MAX

struct site_order {
	const struct rp_model *m;
	size_t est, base;	/* base: SITE_NO_BASE, or the estimate the change is from */
};

static double site_est(const struct rp_site *s, size_t off)
{
	return ((const struct rp_est *)((const char *)s + off))->est;
}

static int cmp_sites(const void *a, const void *b, void *ctx)
{
	const struct site_order *o = ctx;
	const struct rp_site *x = &o->m->sites[*(const uint32_t *)a];
	const struct rp_site *y = &o->m->sites[*(const uint32_t *)b];
	double dx = site_est(x, o->est), dy = site_est(y, o->est);

	if (o->base != SITE_NO_BASE) {
		dx -= site_est(x, o->base);
		dy -= site_est(y, o->base);
		if (fabs(dx) != fabs(dy))
			return fabs(dx) > fabs(dy) ? -1 : 1;
	}
	if (dx != dy)
		return dx > dy ? -1 : 1;
	return strcmp(x->key, y->key);
}

/* Sort the @n site indices at @idx by the estimate at @est (its change from @base). */
static void sort_sites(const struct rp_model *m, uint32_t *idx, size_t n, size_t est,
		       size_t base)
{
	struct site_order o = { m, est, base };

	qsort_r(idx, n, sizeof(uint32_t), cmp_sites, &o);
}

static void est_add(struct rp_est *e, double est, double var)
{
	e->est += est;
	e->var += var;
}

/* Add a sampled block's estimates: bytes @eb (variance @vb) and blocks @ec (variance @vc). */
static void est_add_block(struct rp_est *bytes, struct rp_est *blocks, double eb, double vb,
			  double ec, double vc)
{
	est_add(bytes, eb, vb);
	est_add(blocks, ec, vc);
}

/* A time on the report's axis (µs from t0_us) as µs from @t's start, clamped at 0. */
static uint64_t axis_to_trace(const struct rp_model *m, const struct rp_trace *t, uint64_t v)
{
	uint64_t abs = (t->base ? m->base_t0_us : m->t0_us) + v;

	return abs > t->start_us ? abs - t->start_us : 0;
}

/*
 * Windows per trace: [since, min(until, end)], young after the last @tail of it. --since and
 * --until are on one axis for all traces, from the earliest trace's start.
 */
static void set_windows(struct rp_model *m)
{
	const struct rp_trace *first = NULL;

	m->t0_us = m->base_t0_us = UINT64_MAX;
	for (size_t i = 0; i < m->ntraces; i++) {
		uint64_t *t0 = m->traces[i].base ? &m->base_t0_us : &m->t0_us;

		if (m->traces[i].start_us < *t0)
			*t0 = m->traces[i].start_us;
	}
	if (m->t0_us == UINT64_MAX)
		m->t0_us = m->base_t0_us;
	m->same_window = true;
	for (size_t i = 0; i < m->ntraces; i++) {
		struct rp_trace *t = &m->traces[i];
		uint64_t t0 = t->base ? m->base_t0_us : m->t0_us;
		uint64_t since = m->opts.has_since ? axis_to_trace(m, t, m->opts.since_us) : 0;

		/* The window opens at the first allocation: a trace often starts (attach,
		 * exec) well before the program allocates, and the leak tail is a fraction of
		 * the time the program actually ran. */
		t->win_start = since;
		if (t->nblocks && t->first_alloc_us > t->win_start)
			t->win_start = t->first_alloc_us;
		t->win_end = t->end_us;
		if (m->opts.has_since && since >= t->end_us && !m->opts.quiet)
			fprintf(stderr, "memprofctl report: warning: '%s' ends at %.3f s, before "
				"--since: nothing of it is in the window\n", t->path,
				(double)(t->start_us - t0 + t->end_us) / 1e6);
		if (m->opts.has_until && axis_to_trace(m, t, m->opts.until_us) < t->win_end)
			t->win_end = axis_to_trace(m, t, m->opts.until_us);
		if (t->win_end < t->win_start)
			t->win_end = t->win_start;
		t->young_after = t->win_end -
				 (uint64_t)(m->opts.tail * (double)(t->win_end - t->win_start));
		if (t->base)
			continue;
		if (!first)
			first = t;
		if (t->start_us + t->win_start != first->start_us + first->win_start ||
		    t->start_us + t->win_end != first->start_us + first->win_end)
			m->same_window = false;
	}
}

/* First index k of the sorted @pts with pts[k] >= @v. */
static size_t lower_bound(const uint64_t *pts, size_t n, uint64_t v)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (pts[mid] < v)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

bool rp_model__span(const struct rp_model *m, uint64_t *t0, uint64_t *t1)
{
	*t0 = UINT64_MAX;
	*t1 = 0;
	for (size_t i = 0; i < m->ntraces; i++) {
		const struct rp_trace *t = &m->traces[i];

		if (t->base)
			continue;
		if (t->start_us + t->win_start < *t0)
			*t0 = t->start_us + t->win_start;
		if (t->start_us + t->win_end > *t1)
			*t1 = t->start_us + t->win_end;
	}
	return *t0 != UINT64_MAX && *t1 >= *t0;
}

/* The block's estimated bytes and variance (its trace's λ). */
static void block_bytes(const struct rp_model *m, const struct rp_block *b, double *est,
			double *var)
{
	const struct rp_trace *t = &m->traces[b->trace];
	double f = t->word_bytes / 8;	/* mp_est_block() counts 8-byte words */

	mp_est_block(t->rate, b->length, b->nsamples, est, var);
	*est *= f;
	*var *= f * f;
}

static int build_timeline(struct rp_model *m)
{
	size_t k = m->opts.points;
	uint64_t t0, t1;
	uint64_t *pts;
	double *d_est, *d_var;

	if (!rp_model__span(m, &t0, &t1))
		return 0;
	if (t1 == t0)
		k = 1;	/* an empty window: one point, not the same one over and over */
	m->timeline = calloc(k, sizeof(*m->timeline));
	pts = calloc(k, sizeof(*pts));
	d_est = calloc(k + 1, sizeof(*d_est));
	d_var = calloc(k + 1, sizeof(*d_var));
	if (!m->timeline || !pts || !d_est || !d_var) {
		free(pts);
		free(d_est);
		free(d_var);
		return -ENOMEM;
	}
	m->span_s = (double)(t1 - t0) / 1e6;
	for (size_t i = 0; i < k; i++)
		pts[i] = t0 + (uint64_t)((double)(t1 - t0) * (double)(i + 1) / (double)k);
	for (size_t i = 0; i < m->nblocks; i++) {
		const struct rp_block *b = &m->blocks[i];
		const struct rp_trace *t = &m->traces[b->trace];
		uint64_t a;
		size_t ka, ke;
		double est, var;

		if (b->t_alloc < t->win_start || b->t_alloc > t->win_end)
			continue;
		/* Live at p: alloc <= p < free, and p within the trace's window. */
		a = t->start_us + b->t_alloc;
		ka = lower_bound(pts, k, a);
		/* A block live at its trace's window end stays counted to the last point,
		 * so that point is "live at end" (a trace that ended earlier keeps what it
		 * had live then); a block freed in the window counts until its free. */
		ke = k;
		if (b->t_free != RP_NO_FREE && b->t_free <= t->win_end)
			ke = lower_bound(pts, k, t->start_us + b->t_free);
		if (ka >= ke)
			continue;
		block_bytes(m, b, &est, &var);
		d_est[ka] += est;
		d_var[ka] += var;
		d_est[ke] -= est;
		d_var[ke] -= var;
	}
	{
		double ce = 0, cv = 0;

		for (size_t i = 0; i < k; i++) {
			ce += d_est[i];
			cv += d_var[i];
			m->timeline[i].t_s = (double)(pts[i] - m->t0_us) / 1e6;
			m->timeline[i].live_bytes.est = ce < 0 ? 0 : ce;
			m->timeline[i].live_bytes.var = cv < 0 ? 0 : cv;
		}
		/* The same blocks as total_live_bytes: equal up to rounding, made exact. */
		m->timeline[k - 1].live_bytes = m->total_live_bytes;
	}
	m->npoints = k;
	free(pts);
	free(d_est);
	free(d_var);
	return 0;
}

/* Does frame @fi's function, file or object match @re? */
static bool frame_matches(const struct rp_model *m, uint32_t fi, const regex_t *re)
{
	const struct rp_frame *f = &m->frames[fi];
	char buf[32];

	return !regexec(re, rp_frame__name(m, fi, buf, sizeof(buf)), 0, NULL, 0) ||
	       (f->file[0] && !regexec(re, f->file, 0, NULL, 0)) ||
	       !regexec(re, f->object, 0, NULL, 0);
}

/*
 * The stack @si becomes under the filters (pprof's order and rules: focus and ignore look at
 * the whole stack, hide removes frames, then show_from cuts above the outermost match), into
 * *@out, or -1 when they drop it. Returns 0 or -errno.
 */
static int filter_stack(struct rp_model *m, uint32_t si, uint32_t **tmp, size_t *cap,
			int64_t *out)
{
	const struct rp_options *o = &m->opts;
	const struct rp_stack st = m->stacks[si];	/* interning may move m->stacks */
	bool focused = !o->focus;
	uint32_t n = 0, from = 0;
	int64_t r;

	*out = -1;
	if (mp_array_reserve((void **)tmp, cap, st.len ? st.len : 1, sizeof(**tmp), 64))
		return -ENOMEM;
	for (uint32_t i = 0; i < st.len; i++) {
		uint32_t fi = m->stack_frames[st.off + i];

		if (o->ignore && frame_matches(m, fi, o->ignore))
			return 0;
		if (o->focus && !focused && frame_matches(m, fi, o->focus))
			focused = true;
		if (o->hide && frame_matches(m, fi, o->hide))
			continue;
		(*tmp)[n++] = fi;
	}
	if (!focused || !n)
		return 0;
	if (o->show_from) {
		while (from < n && !frame_matches(m, (*tmp)[from], o->show_from))
			from++;
		if (from == n)
			return 0;
	}
	r = rp_stack_intern(m, *tmp + from, n - from);
	if (r < 0)
		return (int)r;
	*out = r;
	return 0;
}

static int build_views(struct rp_model *m)
{
	const struct rp_options *o = &m->opts;
	bool any = o->focus || o->ignore || o->hide || o->show_from;
	size_t n0 = m->nstacks;
	uint32_t *tmp = NULL;
	size_t cap = 0;
	int err = 0;

	m->stack_view = malloc((n0 ? n0 : 1) * sizeof(*m->stack_view));
	if (!m->stack_view)
		return -ENOMEM;
	m->nstack_view = n0;
	for (size_t i = 0; i < n0 && !err; i++) {
		m->stack_view[i] = (int64_t)i;
		if (any)
			err = filter_stack(m, (uint32_t)i, &tmp, &cap, &m->stack_view[i]);
	}
	free(tmp);
	return err;
}

struct peak_ev {
	uint64_t t;		/* µs on the axis */
	uint32_t block;
	bool alloc;
};

static int cmp_peak_ev(const void *a, const void *b)
{
	const struct peak_ev *x = a, *y = b;

	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	return x->alloc - y->alloc;	/* frees first at the same time */
}

/* Is block @b counted (in its window, not a base, kept by the filters)? */
static bool block_counted(const struct rp_model *m, const struct rp_block *b)
{
	const struct rp_trace *t = &m->traces[b->trace];

	return !t->base && b->t_alloc >= t->win_start && b->t_alloc <= t->win_end &&
	       m->stack_view[b->stack] >= 0;
}

/*
 * The peak of the estimated live heap: the live bytes just after each sampled allocation on
 * the axis (blocks live at their trace's window end stay counted, as in the timeline), the
 * largest of them, and each site's live bytes at that moment.
 */
static int build_peak(struct rp_model *m, const int64_t *stack_site)
{
	struct peak_ev *ev = malloc((2 * m->nblocks + 1) * sizeof(*ev));
	double cur = 0, cur_var = 0;
	size_t n = 0;

	if (!ev)
		return -ENOMEM;
	for (size_t i = 0; i < m->nblocks; i++) {
		const struct rp_block *b = &m->blocks[i];
		const struct rp_trace *t = &m->traces[b->trace];

		if (!block_counted(m, b))
			continue;
		ev[n++] = (struct peak_ev){ t->start_us + b->t_alloc - m->t0_us, (uint32_t)i,
					    true };
		if (b->t_free != RP_NO_FREE && b->t_free <= t->win_end)
			ev[n++] = (struct peak_ev){ t->start_us + b->t_free - m->t0_us, (uint32_t)i,
						    false };
	}
	qsort(ev, n, sizeof(*ev), cmp_peak_ev);
	for (size_t i = 0; i < n; i++) {
		double e, v;

		block_bytes(m, &m->blocks[ev[i].block], &e, &v);
		cur += ev[i].alloc ? e : -e;
		cur_var += ev[i].alloc ? v : -v;
		if (ev[i].alloc && cur > m->peak_live.est) {
			m->peak_live.est = cur;
			m->peak_live.var = cur_var > 0 ? cur_var : 0;
			m->peak_us = ev[i].t;
		}
	}
	free(ev);
	for (size_t i = 0; i < m->nblocks; i++) {
		const struct rp_block *b = &m->blocks[i];
		const struct rp_trace *t = &m->traces[b->trace];
		double e, v;

		if (!block_counted(m, b) || t->start_us + b->t_alloc - m->t0_us > m->peak_us ||
		    (b->t_free != RP_NO_FREE && b->t_free <= t->win_end &&
		     t->start_us + b->t_free - m->t0_us <= m->peak_us))
			continue;
		block_bytes(m, b, &e, &v);
		est_add(&m->sites[stack_site[m->stack_view[b->stack]]].peak_live_bytes, e, v);
	}
	return 0;
}

int rp_model__analyze(struct rp_model *m)
{
	int64_t *stack_site;
	int err = -ENOMEM;

	rp_sites_free(m);
	mp_hashmap__clear(&m->site_idx);
	m->filtered_out = 0;
	err = build_views(m);
	if (err)
		return err;
	err = -ENOMEM;
	m->stack_vals = calloc(m->nstacks ? m->nstacks : 1, sizeof(*m->stack_vals));
	stack_site = malloc((m->nstacks ? m->nstacks : 1) * sizeof(*stack_site));
	if (!m->stack_vals || !stack_site)
		goto out;
	for (size_t i = 0; i < m->nstacks; i++)
		stack_site[i] = -1;
	memset(&m->total_bytes, 0, sizeof(m->total_bytes));
	memset(&m->total_blocks, 0, sizeof(m->total_blocks));
	memset(&m->total_live_bytes, 0, sizeof(m->total_live_bytes));
	memset(&m->total_words, 0, sizeof(m->total_words));
	memset(&m->total_live_words, 0, sizeof(m->total_live_words));
	memset(&m->total_live_blocks, 0, sizeof(m->total_live_blocks));
	m->total_sampled = m->total_samples = m->total_sampled_live = 0;
	memset(&m->total_temp_bytes, 0, sizeof(m->total_temp_bytes));
	memset(&m->total_temp_blocks, 0, sizeof(m->total_temp_blocks));
	memset(m->size_blocks, 0, sizeof(m->size_blocks));
	memset(m->size_bytes, 0, sizeof(m->size_bytes));
	memset(&m->peak_live, 0, sizeof(m->peak_live));
	m->peak_us = 0;
	memset(&m->base_total_bytes, 0, sizeof(m->base_total_bytes));
	memset(&m->base_total_blocks, 0, sizeof(m->base_total_blocks));
	memset(&m->base_total_live_bytes, 0, sizeof(m->base_total_live_bytes));
	memset(&m->base_total_live_blocks, 0, sizeof(m->base_total_live_blocks));
	set_windows(m);

	for (size_t i = 0; i < m->nblocks; i++) {
		const struct rp_block *b = &m->blocks[i];
		const struct rp_trace *t = &m->traces[b->trace];
		double lam = t->rate, wb = t->word_bytes, eb, vb;
		double ew = mp_est_words(lam, b->nsamples);
		double vw = (1 - lam) * (double)b->nsamples / (lam * lam);
		double w = (double)b->length + 1;
		/* P(block tracked) = 1 - (1-λ)^w, computed without cancellation. */
		double p = lam >= 1 ? 1 : -expm1(w * log1p(-lam));
		double ec = 1 / p, vc = (1 - p) / (p * p);
		int64_t vi = m->stack_view[b->stack];
		unsigned int cls;
		struct rp_stackval *sv;
		struct rp_site *s;
		bool live;

		if (b->t_alloc < t->win_start || b->t_alloc > t->win_end)
			continue;
		block_bytes(m, b, &eb, &vb);
		if (vi < 0) {
			m->filtered_out++;
			continue;
		}
		if (stack_site[vi] < 0) {
			stack_site[vi] = rp_site_intern(m, (uint32_t)vi);
			if (stack_site[vi] < 0) {
				err = (int)stack_site[vi];
				goto out;
			}
			m->stacks[vi].site = (uint32_t)stack_site[vi];
		}
		s = &m->sites[stack_site[vi]];
		live = b->t_free == RP_NO_FREE || b->t_free > t->win_end;
		sv = &m->stack_vals[vi];
		if (t->base) {
			est_add_block(&s->base_bytes, &s->base_blocks, eb, vb, ec, vc);
			est_add_block(&m->base_total_bytes, &m->base_total_blocks, eb, vb, ec, vc);
			sv->base_bytes += eb;
			sv->base_blocks += ec;
			sv->base_bytes_var += vb;
			if (live) {
				est_add_block(&s->base_live_bytes, &s->base_live_blocks,
					      eb, vb, ec, vc);
				est_add_block(&m->base_total_live_bytes, &m->base_total_live_blocks,
					      eb, vb, ec, vc);
				sv->base_live_bytes += eb;
				sv->base_live_blocks += ec;
				sv->base_live_bytes_var += vb;
			}
			continue;
		}
		est_add_block(&s->bytes, &s->blocks, eb, vb, ec, vc);
		cls = rp_size_class((double)b->length * wb);
		est_add(&s->size_blocks[cls], ec, vc);
		est_add(&m->size_blocks[cls], ec, vc);
		est_add(&m->size_bytes[cls], eb, vb);
		if (!live && b->t_free - b->t_alloc <= m->opts.temp_us) {
			est_add_block(&s->temp_bytes, &s->temp_blocks, eb, vb, ec, vc);
			est_add_block(&m->total_temp_bytes, &m->total_temp_blocks, eb, vb, ec, vc);
		}
		est_add_block(&m->total_bytes, &m->total_blocks, eb, vb, ec, vc);
		est_add(&m->total_words, ew, vw);
		s->sampled++;
		s->samples += b->nsamples;
		m->total_sampled++;
		m->total_samples += b->nsamples;
		sv->bytes += eb;
		sv->blocks += ec;
		sv->bytes_var += vb;
		if (live) {
			est_add_block(&s->live_bytes, &s->live_blocks, eb, vb, ec, vc);
			est_add_block(&m->total_live_bytes, &m->total_live_blocks, eb, vb, ec, vc);
			est_add(&m->total_live_words, ew, vw);
			sv->live_bytes += eb;
			sv->live_blocks += ec;
			sv->live_bytes_var += vb;
			s->sampled_live++;
			m->total_sampled_live++;
			if (push_u64(&s->ages, &s->nages, &s->cap_ages, t->win_end - b->t_alloc))
				goto out;
			if (b->t_alloc < t->young_after) {
				est_add_block(&s->old_live_bytes, &s->old_live_blocks,
					      eb, vb, ec, vc);
				s->sampled_old_live++;
			}
		} else {
			s->sampled_freed++;
			if (push_u64(&s->lifetimes, &s->nlifetimes, &s->cap_lifetimes,
				     b->t_free - b->t_alloc))
				goto out;
		}
	}

	m->by_peak = malloc((m->nsites ? m->nsites : 1) * sizeof(uint32_t));
	m->by_temp = malloc((m->nsites ? m->nsites : 1) * sizeof(uint32_t));
	m->by_change_bytes = malloc((m->nsites ? m->nsites : 1) * sizeof(uint32_t));
	m->by_change_live = malloc((m->nsites ? m->nsites : 1) * sizeof(uint32_t));
	m->by_bytes = malloc((m->nsites ? m->nsites : 1) * sizeof(*m->by_bytes));
	m->by_blocks = malloc((m->nsites ? m->nsites : 1) * sizeof(*m->by_blocks));
	m->suspects = malloc((m->nsites ? m->nsites : 1) * sizeof(*m->suspects));
	if (!m->by_bytes || !m->by_blocks || !m->suspects || !m->by_change_bytes ||
	    !m->by_change_live || !m->by_peak || !m->by_temp)
		goto out;
	m->nsuspects = 0;
	for (size_t i = 0; i < m->nsites; i++) {
		struct rp_site *s = &m->sites[i];

		m->by_bytes[i] = m->by_blocks[i] = (uint32_t)i;
		m->by_change_bytes[i] = m->by_change_live[i] = (uint32_t)i;
		m->by_peak[i] = m->by_temp[i] = (uint32_t)i;
		if (s->sampled_old_live)
			m->suspects[m->nsuspects++] = (uint32_t)i;
		if (s->nlifetimes)
			qsort(s->lifetimes, s->nlifetimes, sizeof(uint64_t), cmp_u64);
		if (s->nages)
			qsort(s->ages, s->nages, sizeof(uint64_t), cmp_u64);
		s->life_median_s = quantile_s(s->lifetimes, s->nlifetimes, 0.5);
		s->life_p90_s = quantile_s(s->lifetimes, s->nlifetimes, 0.9);
		s->age_median_s = quantile_s(s->ages, s->nages, 0.5);
		s->age_max_s = quantile_s(s->ages, s->nages, 1.0);
	}
	sort_sites(m, m->by_bytes, m->nsites,
		   m->opts.live ? SITE_EST(live_bytes) : SITE_EST(bytes), SITE_NO_BASE);
	sort_sites(m, m->by_blocks, m->nsites,
		   m->opts.live ? SITE_EST(live_blocks) : SITE_EST(blocks), SITE_NO_BASE);
	sort_sites(m, m->suspects, m->nsuspects, SITE_EST(old_live_bytes), SITE_NO_BASE);
	sort_sites(m, m->by_change_bytes, m->nsites, SITE_EST(bytes), SITE_EST(base_bytes));
	sort_sites(m, m->by_change_live, m->nsites, SITE_EST(live_bytes),
		   SITE_EST(base_live_bytes));
	sort_sites(m, m->by_temp, m->nsites, SITE_EST(temp_blocks), SITE_NO_BASE);
	err = build_timeline(m);
	if (!err)
		err = build_peak(m, stack_site);
	if (!err)
		sort_sites(m, m->by_peak, m->nsites, SITE_EST(peak_live_bytes), SITE_NO_BASE);
out:
	free(stack_site);
	return err;
}

