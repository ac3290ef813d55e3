// SPDX-License-Identifier: LGPL-2.1-or-later
/* The report as one JSON document (json-c). Field names are documented in memprofctl-report(1). */
#include <errno.h>
#include <stdio.h>

#include <json.h>

#include "report/report.h"

static struct json_object *est_obj(const struct rp_est *e)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "estimate", json_object_new_double(e->est));
	json_object_object_add(o, "se", json_object_new_double(rp_se(e)));
	return o;
}

/* A trace's counts of events. */
static void trace_counts(struct json_object *o, const struct rp_trace *t)
{
	const struct {
		const char *key;
		uint64_t v;
	} counts[] = {
		{ "sampled_blocks", t->nblocks }, { "freed_blocks", t->collects },
		{ "promotes", t->promotes }, { "unmatched_frees", t->unmatched_collects },
		{ "samples", t->sum_nsamples }, { "sum_length_words", t->sum_length },
		{ "warnings", t->warnings },
	};

	for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
		json_object_object_add(o, counts[k].key, json_object_new_int64((int64_t)counts[k].v));
}

static struct json_object *traces_obj(const struct rp_model *m)
{
	struct json_object *a = json_object_new_array();

	for (size_t i = 0; i < m->ntraces; i++) {
		const struct rp_trace *t = &m->traces[i];
		struct json_object *o = json_object_new_object();

		json_object_object_add(o, "path", json_object_new_string(t->path));
		json_object_object_add(o, "executable", json_object_new_string(t->executable));
		json_object_object_add(o, "host", json_object_new_string(t->host));
		json_object_object_add(o, "context", json_object_new_string(t->context));
		json_object_object_add(o, "pid", json_object_new_int64((int64_t)t->pid));
		json_object_object_add(o, "version", json_object_new_int((int)t->version));
		json_object_object_add(o, "sample_rate", json_object_new_double(t->rate));
		json_object_object_add(o, "word_size", json_object_new_int((int)t->word_size));
		json_object_object_add(o, "start_time_us",
				       json_object_new_int64((int64_t)t->start_us));
		json_object_object_add(o, "base", json_object_new_boolean(t->base));
		json_object_object_add(o, "in_progress", json_object_new_boolean(t->in_progress));
		json_object_object_add(o, "axis_offset_s",
				       json_object_new_double((double)(t->start_us -
						(t->base ? m->base_t0_us : m->t0_us)) / 1e6));
		json_object_object_add(o, "duration_s",
				       json_object_new_double((double)t->end_us / 1e6));
		json_object_object_add(o, "window_start_s",
				       json_object_new_double((double)t->win_start / 1e6));
		json_object_object_add(o, "window_end_s",
				       json_object_new_double((double)t->win_end / 1e6));
		json_object_object_add(o, "young_after_s",
				       json_object_new_double((double)t->young_after / 1e6));
		trace_counts(o, t);
		json_object_array_add(a, o);
	}
	return a;
}

/* The non-empty size classes: max_bytes (null for the last, open class), allocations, bytes. */
static struct json_object *sizes_arr(const struct rp_est *blocks, const struct rp_est *bytes)
{
	struct json_object *a = json_object_new_array();

	for (unsigned int k = 0; k < RP_SIZE_CLASSES; k++) {
		struct json_object *o;

		if (!(blocks[k].est > 0))
			continue;
		o = json_object_new_object();
		json_object_object_add(o, "max_bytes", k + 1 < RP_SIZE_CLASSES ?
				       json_object_new_double(rp_size_class_max(k)) : NULL);
		json_object_object_add(o, "allocations", est_obj(&blocks[k]));
		if (bytes)
			json_object_object_add(o, "bytes", est_obj(&bytes[k]));
		json_object_array_add(a, o);
	}
	return a;
}

static struct json_object *site_obj(const struct rp_model *m, const struct rp_site *s,
				    size_t rank)
{
	const struct rp_frame *f = &m->frames[s->frame];
	struct json_object *o = json_object_new_object();
	char buf[32];

	json_object_object_add(o, "rank", json_object_new_int64((int64_t)rank));
	json_object_object_add(o, "site", json_object_new_string(s->key));
	json_object_object_add(o, "function",
			       json_object_new_string(rp_frame__name(m, s->frame, buf,
								     sizeof(buf))));
	json_object_object_add(o, "file", json_object_new_string(f->file));
	json_object_object_add(o, "line", json_object_new_int((int)f->line));
	json_object_object_add(o, "object", json_object_new_string(f->object));
	json_object_object_add(o, "bytes", est_obj(&s->bytes));
	json_object_object_add(o, "allocations", est_obj(&s->blocks));
	json_object_object_add(o, "live_bytes", est_obj(&s->live_bytes));
	json_object_object_add(o, "live_allocations", est_obj(&s->live_blocks));
	json_object_object_add(o, "sampled_blocks", json_object_new_int64((int64_t)s->sampled));
	json_object_object_add(o, "samples", json_object_new_int64((int64_t)s->samples));
	json_object_object_add(o, "live_sampled_blocks",
			       json_object_new_int64((int64_t)s->sampled_live));
	json_object_object_add(o, "temporary_allocations", est_obj(&s->temp_blocks));
	json_object_object_add(o, "temporary_bytes", est_obj(&s->temp_bytes));
	json_object_object_add(o, "peak_live_bytes", est_obj(&s->peak_live_bytes));
	json_object_object_add(o, "sizes", sizes_arr(s->size_blocks, NULL));
	return o;
}

static struct json_object *sites_arr(const struct rp_model *m, const uint32_t *order)
{
	struct json_object *a = json_object_new_array();
	size_t n = m->nsites < m->opts.top ? m->nsites : m->opts.top;

	for (size_t i = 0; i < n; i++)
		json_object_array_add(a, site_obj(m, &m->sites[order[i]], i + 1));
	return a;
}

static struct json_object *peak_obj(const struct rp_model *m)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "live_bytes", est_obj(&m->peak_live));
	json_object_object_add(o, "t_s", json_object_new_double((double)m->peak_us / 1e6));
	json_object_object_add(o, "sites", sites_arr(m, m->by_peak));
	return o;
}

static struct json_object *temporary_obj(const struct rp_model *m)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "threshold_s",
			       json_object_new_double((double)m->opts.temp_us / 1e6));
	json_object_object_add(o, "allocations", est_obj(&m->total_temp_blocks));
	json_object_object_add(o, "bytes", est_obj(&m->total_temp_bytes));
	json_object_object_add(o, "sites", sites_arr(m, m->by_temp));
	return o;
}

static struct json_object *suspects_arr(const struct rp_model *m)
{
	struct json_object *a = json_object_new_array();

	for (size_t i = 0; i < m->nsuspects; i++) {
		const struct rp_site *s = &m->sites[m->suspects[i]];
		struct json_object *o = site_obj(m, s, i + 1);

		json_object_object_add(o, "old_live_bytes", est_obj(&s->old_live_bytes));
		json_object_object_add(o, "old_live_allocations", est_obj(&s->old_live_blocks));
		json_object_object_add(o, "old_live_sampled_blocks",
				       json_object_new_int64((int64_t)s->sampled_old_live));
		json_object_object_add(o, "freed_sampled_blocks",
				       json_object_new_int64((int64_t)s->sampled_freed));
		if (s->nlifetimes) {
			json_object_object_add(o, "lifetime_median_s",
					       json_object_new_double(s->life_median_s));
			json_object_object_add(o, "lifetime_p90_s",
					       json_object_new_double(s->life_p90_s));
		} else {
			json_object_object_add(o, "lifetime_median_s", NULL);
			json_object_object_add(o, "lifetime_p90_s", NULL);
		}
		json_object_object_add(o, "live_age_median_s",
				       json_object_new_double(s->age_median_s));
		json_object_object_add(o, "live_age_max_s", json_object_new_double(s->age_max_s));
		json_object_array_add(a, o);
	}
	return a;
}

static struct json_object *timeline_arr(const struct rp_model *m)
{
	struct json_object *a = json_object_new_array();

	for (size_t i = 0; i < m->npoints; i++) {
		struct json_object *o = json_object_new_object();

		json_object_object_add(o, "t_s", json_object_new_double(m->timeline[i].t_s));
		json_object_object_add(o, "live_bytes", est_obj(&m->timeline[i].live_bytes));
		json_object_array_add(a, o);
	}
	return a;
}

/* {"base": {estimate, se}, "new": ..., "change": ...} */
static struct json_object *change_obj(const struct rp_est *cur, const struct rp_est *base)
{
	struct json_object *o = json_object_new_object();
	struct rp_est d = rp_est_diff(cur, base);

	json_object_object_add(o, "base", est_obj(base));
	json_object_object_add(o, "new", est_obj(cur));
	json_object_object_add(o, "change", est_obj(&d));
	return o;
}

static struct json_object *changes_arr(const struct rp_model *m, const uint32_t *order)
{
	struct json_object *a = json_object_new_array();
	size_t n = m->nsites < m->opts.top ? m->nsites : m->opts.top;

	for (size_t i = 0; i < n; i++) {
		const struct rp_site *s = &m->sites[order[i]];
		struct json_object *o = json_object_new_object();

		json_object_object_add(o, "rank", json_object_new_int64((int64_t)i + 1));
		json_object_object_add(o, "site", json_object_new_string(s->key));
		json_object_object_add(o, "bytes", change_obj(&s->bytes, &s->base_bytes));
		json_object_object_add(o, "allocations", change_obj(&s->blocks, &s->base_blocks));
		json_object_object_add(o, "live_bytes",
				       change_obj(&s->live_bytes, &s->base_live_bytes));
		json_object_object_add(o, "live_allocations",
				       change_obj(&s->live_blocks, &s->base_live_blocks));
		json_object_array_add(a, o);
	}
	return a;
}

static struct json_object *diff_obj(const struct rp_model *m)
{
	struct json_object *o = json_object_new_object(), *tot = json_object_new_object();

	json_object_object_add(tot, "bytes", change_obj(&m->total_bytes, &m->base_total_bytes));
	json_object_object_add(tot, "allocations",
			       change_obj(&m->total_blocks, &m->base_total_blocks));
	json_object_object_add(tot, "live_bytes",
			       change_obj(&m->total_live_bytes, &m->base_total_live_bytes));
	json_object_object_add(tot, "live_allocations",
			       change_obj(&m->total_live_blocks, &m->base_total_live_blocks));
	json_object_object_add(o, "totals", tot);
	json_object_object_add(o, "sites_by_change_bytes", changes_arr(m, m->by_change_bytes));
	json_object_object_add(o, "sites_by_change_live_bytes",
			       changes_arr(m, m->by_change_live));
	return o;
}

int rp_print_json(const struct rp_model *m, FILE *f)
{
	struct json_object *root = json_object_new_object(), *tot = json_object_new_object();
	int err = 0;

	if (!root || !tot) {
		json_object_put(root);
		json_object_put(tot);
		return -ENOMEM;
	}
	json_object_object_add(root, "traces", traces_obj(m));
	json_object_object_add(root, "time_origin_us", json_object_new_int64((int64_t)m->t0_us));
	json_object_object_add(root, "duplicate_traces",
			       json_object_new_int64((int64_t)m->nduplicates));
	json_object_object_add(root, "by", json_object_new_string(rp_by_name(m->opts.by)));
	json_object_object_add(root, "live", json_object_new_boolean(m->opts.live));
	json_object_object_add(root, "tail_fraction", json_object_new_double(m->opts.tail));
	json_object_object_add(tot, "bytes", est_obj(&m->total_bytes));
	json_object_object_add(tot, "allocations", est_obj(&m->total_blocks));
	json_object_object_add(tot, "live_bytes", est_obj(&m->total_live_bytes));
	json_object_object_add(tot, "live_allocations", est_obj(&m->total_live_blocks));
	json_object_object_add(tot, "allocated_words", est_obj(&m->total_words));
	json_object_object_add(tot, "live_words", est_obj(&m->total_live_words));
	json_object_object_add(tot, "sampled_blocks",
			       json_object_new_int64((int64_t)m->total_sampled));
	json_object_object_add(tot, "samples", json_object_new_int64((int64_t)m->total_samples));
	json_object_object_add(tot, "live_sampled_blocks",
			       json_object_new_int64((int64_t)m->total_sampled_live));
	json_object_object_add(tot, "sites", json_object_new_int64((int64_t)m->nsites));
	json_object_object_add(root, "totals", tot);
	json_object_object_add(root, "sites_by_bytes", sites_arr(m, m->by_bytes));
	json_object_object_add(root, "sites_by_allocations", sites_arr(m, m->by_blocks));
	json_object_object_add(root, "leak_suspects", suspects_arr(m));
	json_object_object_add(root, "live_heap", timeline_arr(m));
	json_object_object_add(root, "peak", peak_obj(m));
	json_object_object_add(root, "temporary", temporary_obj(m));
	json_object_object_add(root, "sizes", sizes_arr(m->size_blocks, m->size_bytes));
	json_object_object_add(root, "diff", m->has_base ? diff_obj(m) : NULL);
	errno = 0;
	if (fprintf(f, "%s\n", json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
						JSON_C_TO_STRING_NOSLASHESCAPE)) < 0 ||
	    fflush(f))
		err = errno ? -errno : -EIO;
	json_object_put(root);
	return err;
}
