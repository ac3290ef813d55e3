// SPDX-License-Identifier: LGPL-2.1-or-later
/* A profile's figures and their JSON form: see daemon/engine/summary.h. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "daemon/engine/summary.h"
#include "userspace-lib/estimate.h"

const char *mp_proc_stats__write_error(const struct mp_proc_stats *ps, uint64_t *since_us)
{
	const char *name;

	*since_us = 0;
	if (ps->write_errno) {
		*since_us = ps->write_error_us;
		name = strerrorname_np(ps->write_errno);
		return name ? name : "EIO";
	}
	if (ps->stalled) {
		*since_us = ps->stalled_us;
		return "stalled";
	}
	return NULL;
}

void mp_summary_proc__from_stats(struct mp_summary_proc *out, const struct mp_proc_stats *ps,
				 double rate)
{
	*out = (struct mp_summary_proc){
		.pid = ps->pid,
		.mode = mp_proc_mode__name(ps->mode),
		.exited = ps->exited,
		.trace = ps->trace_path,
		.sampled_blocks = ps->samples,
		.samples = ps->nsamples,
		.live_samples = ps->live_nsamples,
		.freed_blocks = ps->frees,
		.drops = ps->drops,
		.allocated_bytes = ps->est_alloc_bytes,
		.allocated_bytes_se = ps->se_alloc_bytes,
		.live_bytes = ps->est_live_bytes,
		.live_bytes_se = ps->se_live_bytes,
		.allocated_words = mp_est_words(rate, ps->nsamples),
		.live_words = mp_est_words(rate, ps->live_nsamples),
		.detached_reason = ps->detached_reason,
		.lost_writes = ps->write_errors,
		.engine_counts = true,
		.trace_complete = ps->trace_done,
		.unmatched_frees = ps->unmatched_frees,
		.truncated_stacks = ps->truncated_stacks,
		.dwarf_stacks = ps->dwarf_stacks,
		.window_cut_stacks = ps->window_cut_stacks,
		.unwind_fallbacks = ps->unwind_fallbacks,
		.image_gone_stacks = ps->image_gone_stacks,
		.probe_hits = ps->probe_hits,
		.stalled_output = ps->stalled,
		.overhead_pct = ps->overhead_pct,
		.preload_samples = ps->preload_samples,
		.preload_lost = ps->preload_lost,
	};
	memcpy(out->comm, ps->comm, sizeof(out->comm));
	out->comm[sizeof(out->comm) - 1] = '\0';
	out->write_error = mp_proc_stats__write_error(ps, &out->write_error_since_us);
}

int mp_summary__alloc_procs(struct mp_summary *s, size_t n)
{
	s->procs = calloc(n ? n : 1, sizeof(*s->procs));
	if (!s->procs)
		return -ENOMEM;
	s->nprocs = n;
	return 0;
}

void mp_summary__sum(struct mp_summary *s)
{
	struct mp_summary_proc *t = &s->total;

	memset(t, 0, sizeof(*t));
	for (size_t i = 0; i < s->nprocs; i++) {
		const struct mp_summary_proc *p = &s->procs[i];

		t->sampled_blocks += p->sampled_blocks;
		t->samples += p->samples;
		t->live_samples += p->live_samples;
		t->freed_blocks += p->freed_blocks;
		t->drops += p->drops;
		t->allocated_bytes += p->allocated_bytes;
		t->live_bytes += p->live_bytes;
		t->truncated_stacks += p->truncated_stacks;
		t->dwarf_stacks += p->dwarf_stacks;
		t->window_cut_stacks += p->window_cut_stacks;
	}
}

void mp_summary__set_losses(struct mp_summary *s, const uint64_t *stats, const uint64_t *drops)
{
	s->nlosses = 0;
	for (int i = MP_STAT_RINGBUF_DROPS; i < MP_STAT__MAX; i++) {
		if (i == MP_STAT_NESTED)
			continue;	/* activity, not a loss */
		s->loss_values[s->nlosses] = stats ? stats[i] : 0;
		s->loss_names[s->nlosses++] = mp_stat__name(i);
	}
	for (int i = 0; i < MP_DROP__MAX; i++) {
		s->loss_values[s->nlosses] = drops ? drops[i] : 0;
		s->loss_names[s->nlosses++] = mp_engine_drop__name(i);
	}
}

int mp_summary__from_profile(struct mp_summary *s, struct mp_engine *e, struct mp_profile *p,
			     const uint64_t *base)
{
	const struct mp_profile_opts *o = mp_profile__opts(p);
	uint64_t st[MP_STAT__MAX] = { 0 }, drops[MP_DROP__MAX] = { 0 };
	size_t n = mp_profile__procs(p, NULL, 0);
	struct mp_proc_stats *ps = calloc(n ? n : 1, sizeof(*ps));

	memset(s, 0, sizeof(*s));
	if (!ps || mp_summary__alloc_procs(s, n) < 0) {
		free(ps);
		return -ENOMEM;
	}
	s->rate = o->rate;
	s->nprocs = mp_profile__procs(p, ps, n);	/* the count, even beyond @n */
	if (s->nprocs > n)
		s->nprocs = n;
	for (size_t i = 0; i < s->nprocs; i++)
		mp_summary_proc__from_stats(&s->procs[i], &ps[i], s->rate);
	s->nretired = mp_profile__retired(p, ps);
	if (s->nretired)
		mp_summary_proc__from_stats(&s->retired, ps, s->rate);
	free(ps);
	mp_summary__sum(s);

	mp_engine__stats(e, st, MP_STAT__MAX);
	mp_engine__drops(e, drops, MP_DROP__MAX);
	for (int i = 0; i < MP_STAT__MAX; i++)
		st[i] -= base[i];	/* since the profile began */
	mp_summary__set_losses(s, st, drops);
	s->has_calls = true;
	s->probed_calls = st[MP_STAT_CALLS];
	s->sampled_calls = st[MP_STAT_SAMPLED];
	s->has_stacks = true;
	s->unwind = mp_unwind__name(o->unwind);
	s->stack_copy_size = o->stack_copy_size;
	s->callstack_size = o->callstack_size;
	mp_engine__stack_stats(e, &s->stacks);
	s->mechanisms = mp_engine__mechanisms(e);
	return 0;
}

void mp_summary__free(struct mp_summary *s)
{
	if (!s)
		return;
	free(s->procs);
	s->procs = NULL;
	s->nprocs = 0;
}

static void add_u64(struct json_object *o, const char *key, bool known, uint64_t v)
{
	json_object_object_add(o, key, known ? json_object_new_uint64(v) : NULL);
}

/* Estimates are whole bytes or words: a fraction would claim a precision they lack. */
static void add_round(struct json_object *o, const char *key, double v)
{
	json_object_object_add(o, key, json_object_new_double(round(v)));
}

static void add_str(struct json_object *o, const char *key, const char *v)
{
	json_object_object_add(o, key, v ? json_object_new_string(v) : NULL);
}

/* Counts as JSON keys: @f[i].key is the uint64_t at @f[i].off in @base; null unless @known. */
struct u64_field {
	const char *key;
	size_t off;
};

static void add_u64s(struct json_object *o, const struct u64_field *f, size_t n,
		     const void *base, bool known)
{
	for (size_t i = 0; i < n; i++)
		add_u64(o, f[i].key, known, *(const uint64_t *)((const char *)base + f[i].off));
}

#define PROC_U64(name) { #name, offsetof(struct mp_summary_proc, name) }
#define N(a) (sizeof(a) / sizeof((a)[0]))

struct json_object *mp_summary_proc__json(const struct mp_summary_proc *ps)
{
	static const struct u64_field counts[] = {
		PROC_U64(sampled_blocks), PROC_U64(samples), PROC_U64(live_samples),
		PROC_U64(freed_blocks),
	}, engine_counts[] = {
		PROC_U64(unmatched_frees), PROC_U64(truncated_stacks), PROC_U64(dwarf_stacks),
		PROC_U64(window_cut_stacks), PROC_U64(unwind_fallbacks), PROC_U64(image_gone_stacks),
		PROC_U64(probe_hits),
	}, preload_counts[] = {
		PROC_U64(preload_samples), PROC_U64(preload_lost),
	};
	struct json_object *j = json_object_new_object();
	bool ec = ps->engine_counts;

	if (!j)
		return NULL;
	json_object_object_add(j, "pid", json_object_new_int(ps->pid));
	json_object_object_add(j, "comm", json_object_new_string(ps->comm));
	add_str(j, "mode", ps->mode);
	json_object_object_add(j, "exited", json_object_new_boolean(ps->exited));
	add_str(j, "trace", ps->trace);
	json_object_object_add(j, "trace_complete",
			       ec ? json_object_new_boolean(ps->trace_complete) : NULL);
	add_u64s(j, counts, N(counts), ps, true);
	add_round(j, "allocated_bytes", ps->allocated_bytes);
	add_round(j, "allocated_bytes_se", ps->allocated_bytes_se);
	add_round(j, "live_bytes", ps->live_bytes);
	add_round(j, "live_bytes_se", ps->live_bytes_se);
	add_round(j, "allocated_words", ps->allocated_words);
	add_round(j, "live_words", ps->live_words);
	add_u64(j, "drops", true, ps->drops);
	add_u64s(j, engine_counts, N(engine_counts), ps, ec);
	json_object_object_add(j, "overhead_pct", ec ? json_object_new_double(
			       round(ps->overhead_pct * 100) / 100) : NULL);
	add_u64s(j, preload_counts, N(preload_counts), ps,
		 ec && ps->mode && !strcmp(ps->mode, "preload"));
	add_str(j, "detached_reason", ps->detached_reason);
	add_str(j, "write_error", ps->write_error);
	add_u64(j, "write_error_since_us", ps->write_error, ps->write_error_since_us);
	add_u64(j, "lost_writes", true, ps->lost_writes);
	add_u64(j, "stalled_output", ec, ps->stalled_output);
	return j;
}

struct json_object *mp_summary__procs_json(const struct mp_summary *s)
{
	struct json_object *a = json_object_new_array();

	for (size_t i = 0; a && i < s->nprocs; i++)
		json_object_array_add(a, mp_summary_proc__json(&s->procs[i]));
	return a;
}

struct json_object *mp_summary__retired_json(const struct mp_summary *s)
{
	struct json_object *j;

	if (!s->nretired)
		return NULL;
	j = mp_summary_proc__json(&s->retired);
	if (j)
		json_object_object_add(j, "processes", json_object_new_uint64(s->nretired));
	return j;
}

#define STACK_U64(key, name) { key, offsetof(struct mp_engine_stack_stats, name) }

static struct json_object *stacks_json(const struct mp_summary *s)
{
	static const struct u64_field counts[] = {
		STACK_U64("events", events), STACK_U64("event_ns", event_ns),
		STACK_U64("with_copy", with_copy), STACK_U64("fp", fp_stacks),
		STACK_U64("dwarf", dwarf_stacks), STACK_U64("unwind_ns", unwind_ns),
		STACK_U64("window_cut", window_cut), STACK_U64("image_gone", image_gone),
		STACK_U64("max_stack_used_bytes", max_stack_used),
	};
	struct json_object *o = json_object_new_object();

	if (!o)
		return NULL;
	json_object_object_add(o, "unwind", s->unwind ? json_object_new_string(s->unwind) : NULL);
	json_object_object_add(o, "stack_copy_size_bytes", json_object_new_int(s->stack_copy_size));
	json_object_object_add(o, "callstack_size", json_object_new_int64(s->callstack_size));
	add_u64s(o, counts, N(counts), &s->stacks, true);
	return o;
}

struct json_object *mp_summary__json(const struct mp_summary *s, int status)
{
	struct json_object *o = json_object_new_object(), *d;

	if (!o)
		return NULL;
	json_object_object_add(o, "status", json_object_new_int(status));
	json_object_object_add(o, "rate", json_object_new_double(s->rate));
	add_u64(o, "daemon_profile", s->daemon_profile, s->daemon_profile);
	json_object_object_add(o, "processes", mp_summary__procs_json(s));
	add_u64(o, "sampled_blocks", true, s->total.sampled_blocks);
	add_u64(o, "samples", true, s->total.samples);
	add_u64(o, "freed_blocks", true, s->total.freed_blocks);
	add_u64(o, "process_drops", true, s->total.drops);
	d = json_object_new_object();
	for (size_t i = 0; d && i < s->nlosses; i++)
		json_object_object_add(d, s->loss_names[i], json_object_new_uint64(s->loss_values[i]));
	json_object_object_add(o, "drops", d);
	add_str(o, "drops_scope", s->losses_daemon_wide ? "memprofd" : "profile");
	add_u64(o, "probed_calls", s->has_calls, s->probed_calls);
	add_u64(o, "sampled_calls", s->has_calls, s->sampled_calls);
	json_object_object_add(o, "stacks", s->has_stacks ? stacks_json(s) : NULL);
	add_str(o, "mechanisms", s->mechanisms);
	return o;
}
