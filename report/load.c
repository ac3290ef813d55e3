// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Loading traces into the report model: each trace's events become per-block records whose
 * stacks are interned (model.c) from the trace's location codes, with the trace's header
 * kept for the outputs; a second trace can be loaded as the base of a comparison.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <memprof/trace.h>

#include "report/report.h"
#include "report/model_int.h"
#include "userspace-lib/codec/trace_context.h"

/* ---------------------------------------------------------------------------------------
 * Loading
 */

struct loader {
	struct rp_model *m;
	struct memprof_reader *r;
	struct rp_trace *t;
	struct mp_hashmap codes;	/* (location code, 1) -> index into code_ranges */
	struct { uint32_t off, len; } *code_ranges;
	size_t ncode_ranges, cap_code_ranges;
	uint32_t *code_frames;		/* frame ids of the codes' locations */
	size_t ncode_frames, cap_code_frames;
	uint32_t *tmp;			/* the stack being built */
	size_t cap_tmp;
	struct mp_hashmap ids;		/* (object id, 1) -> block index */
	const char *exe;
};

static int code_frames(struct loader *l, uint64_t code, uint32_t *range)
{
	const struct memprof_location *locs;
	const uint64_t *idx = mp_hashmap__find(&l->codes, code, 1);
	unsigned int nlocs = 0;
	int err;

	if (idx) {
		*range = (uint32_t)*idx;
		return 0;
	}
	if (l->ncode_ranges >= RP_MAX_CODES)
		return -E2BIG;
	locs = memprof_reader__lookup(l->r, code, &nlocs);
	if (!locs)
		nlocs = 0;
	if (GROW(l->code_ranges, l->cap_code_ranges, l->ncode_ranges + 1) ||
	    GROW(l->code_frames, l->cap_code_frames, l->ncode_frames + (nlocs ? nlocs : 1)))
		return -ENOMEM;
	l->code_ranges[l->ncode_ranges].off = (uint32_t)l->ncode_frames;
	if (!nlocs) {
		int64_t f = rp_frame_intern(l->m, "", "", 0, code, l->exe);

		if (f < 0)
			return (int)f;
		l->code_frames[l->ncode_frames++] = (uint32_t)f;
	}
	for (unsigned int i = 0; i < nlocs; i++) {
		int64_t f = rp_frame_intern(l->m, locs[i].defname, locs[i].filename, locs[i].line,
					 code, l->exe);

		if (f < 0)
			return (int)f;
		l->code_frames[l->ncode_frames++] = (uint32_t)f;
	}
	l->code_ranges[l->ncode_ranges].len =
		(uint32_t)(l->ncode_frames - l->code_ranges[l->ncode_ranges].off);
	err = mp_hashmap__put(&l->codes, code, 1, l->ncode_ranges);
	if (err)
		return err;
	*range = (uint32_t)l->ncode_ranges++;
	return 0;
}

static int64_t event_stack(struct loader *l, const struct memprof_event *ev)
{
	size_t n = 0;
	int err;

	for (size_t i = 0; i < ev->backtrace_len; i++) {
		uint32_t range = 0;

		err = code_frames(l, ev->backtrace[i], &range);
		if (err)
			return err;
		if (GROW(l->tmp, l->cap_tmp, n + l->code_ranges[range].len))
			return -ENOMEM;
		memcpy(&l->tmp[n], &l->code_frames[l->code_ranges[range].off],
		       l->code_ranges[range].len * sizeof(uint32_t));
		n += l->code_ranges[range].len;
	}
	if (!n) {
		int64_t f = rp_frame_intern(l->m, "(no backtrace)", "", 0, 0, l->exe);

		if (f < 0)
			return f;
		if (GROW(l->tmp, l->cap_tmp, 1))
			return -ENOMEM;
		l->tmp[n++] = (uint32_t)f;
	}
	if (n > UINT32_MAX)
		return -E2BIG;
	return rp_stack_intern(l->m, l->tmp, (uint32_t)n);
}

static void progress(struct loader *l, uint64_t *last)
{
	uint64_t off = memprof_reader__offset(l->r), size = memprof_reader__file_size(l->r);

	if (!size || off - *last < (1u << 20))
		return;
	*last = off;
	fprintf(stderr, "\rReading '%s': %3u%%", l->t->path,
		(unsigned int)(off >= size ? 100 : off * 100 / size));
}

static int load_events(struct loader *l, char *err, size_t errlen)
{
	struct rp_model *m = l->m;
	struct rp_trace *t = l->t;
	struct memprof_event ev;
	uint64_t last_progress = 0;
	int ret;

	while ((ret = memprof_reader__next(l->r, &ev)) > 0) {
		struct rp_block *b;
		const uint64_t *bi;
		int64_t st;

		if (ev.time_us > t->end_us)
			t->end_us = ev.time_us;
		if (m->opts.progress)
			progress(l, &last_progress);
		switch (ev.type) {
		case MEMPROF_EV_ALLOC:
			if (m->nblocks >= RP_MAX_BLOCKS) {
				snprintf(err, errlen, "more than %u sampled blocks", RP_MAX_BLOCKS);
				return -E2BIG;
			}
			st = event_stack(l, &ev);
			if (st == -E2BIG) {
				snprintf(err, errlen, "more than %u distinct frames, %u stacks or "
					 "%u location codes", RP_MAX_FRAMES, RP_MAX_STACKS,
					 RP_MAX_CODES);
				return (int)st;
			}
			if (st < 0)
				return (int)st;
			if (GROW(m->blocks, m->cap_blocks, m->nblocks + 1))
				return -ENOMEM;
			b = &m->blocks[m->nblocks];
			if (!t->nblocks)
				t->first_alloc_us = ev.time_us;
			b->t_alloc = ev.time_us;
			b->t_free = RP_NO_FREE;
			b->length = ev.length;
			b->nsamples = ev.nsamples;
			b->stack = (uint32_t)st;
			b->trace = (uint16_t)(t - m->traces);
			ret = mp_hashmap__put(&l->ids, ev.id, 1, m->nblocks);
			if (ret)
				return ret;
			t->digest = rp_hash_mix(rp_hash_mix(rp_hash_mix(rp_hash_mix(t->digest,
				ev.time_us), ev.length), ev.nsamples), (uint64_t)st);
			m->nblocks++;
			t->nblocks++;
			t->sum_nsamples += ev.nsamples;
			t->sum_length += ev.length;
			break;
		case MEMPROF_EV_COLLECT:
			bi = mp_hashmap__find(&l->ids, ev.id, 1);
			if (!bi || m->blocks[*bi].t_free != RP_NO_FREE) {
				t->unmatched_collects++;
				break;
			}
			m->blocks[*bi].t_free = ev.time_us;
			t->digest = rp_hash_mix(rp_hash_mix(t->digest, ev.time_us),
						 *bi - t->first_block);
			t->collects++;
			break;
		case MEMPROF_EV_PROMOTE:
			t->promotes++;
			break;
		case MEMPROF_EV_LOCATION:
			break;
		}
	}
	if (m->opts.progress && last_progress)
		fprintf(stderr, "\r%*s\r", (int)strlen(t->path) + 20, "");
	if (ret < 0) {
		snprintf(err, errlen, "%s", memprof_reader__errmsg(l->r));
		return ret;
	}
	return 0;
}

static void loader_warn(void *ctx, uint64_t offset, const char *msg)
{
	struct loader *l = ctx;

	/* Shown where it happens: a skipped packet changes the numbers of this report. */
	if (!l->m->opts.quiet)
		fprintf(stderr, "memprofctl report: warning: '%s' at offset %llu: %s\n",
			l->t->path, (unsigned long long)offset, msg);
}

/* An earlier trace with the same pid, host, start time and events as @t, or NULL. */
static const struct rp_trace *same_trace(const struct rp_model *m, const struct rp_trace *t)
{
	for (const struct rp_trace *o = m->traces; o < t; o++)
		if (o->base == t->base && o->pid == t->pid && o->start_us == t->start_us &&
		    o->end_us == t->end_us && o->nblocks == t->nblocks &&
		    o->collects == t->collects && o->digest == t->digest && o->rate == t->rate &&
		    !strcmp(o->host, t->host) && !strcmp(o->executable, t->executable))
			return o;
	return NULL;
}

static char *dup_or_empty(const char *s)
{
	return strdup(s ? s : "");
}

static int load_trace(struct rp_model *m, const char *path, bool base, char *err,
		      size_t errlen)
{
	struct memprof_reader_opts ropts = { .sz = sizeof(ropts), .strict = 1 };
	const struct memprof_trace_info *info;
	struct loader l = { .m = m };
	struct rp_trace *t;
	int ret;

	if (m->ntraces >= RP_MAX_TRACES) {
		snprintf(err, errlen, "more than %u traces", RP_MAX_TRACES);
		return -E2BIG;
	}
	if (GROW(m->traces, m->cap_traces, m->ntraces + 1))
		return -ENOMEM;
	t = &m->traces[m->ntraces];
	memset(t, 0, sizeof(*t));
	t->path = strdup(path);
	if (!t->path)
		return -ENOMEM;
	t->base = base;
	m->ntraces++;
	t->first_block = m->nblocks;
	l.t = t;
	ropts.warn = loader_warn;
	ropts.warn_ctx = &l;

	l.r = memprof_reader__open(path, &ropts, err, errlen);
	if (!l.r) {
		ret = -errno;
		if (!err[0])
			snprintf(err, errlen, "%s", strerror(errno));
		return ret ? ret : -EIO;
	}
	info = memprof_reader__info(l.r);
	t->executable = dup_or_empty(info->executable_name);
	t->host = dup_or_empty(info->host_name);
	t->context = dup_or_empty(info->context);
	t->pid = info->pid;
	t->start_us = info->start_time_us;
	t->rate = info->sample_rate;
	t->word_size = info->word_size;
	t->word_bytes = info->word_size / 8.0;
	t->version = info->version;
	t->in_progress = mp_ctx__in_progress(info->context);
	if (!t->executable || !t->host || !t->context) {
		ret = -ENOMEM;
		goto out;
	}
	if (!(t->rate > 0 && t->rate <= 1)) {
		snprintf(err, errlen, "sample rate %g is not in (0, 1]", t->rate);
		ret = -EINVAL;
		goto out;
	}
	l.exe = t->executable;
	ret = load_events(&l, err, errlen);
	t->warnings = memprof_reader__warnings(l.r);
	if (!ret) {
		const struct rp_trace *o = same_trace(m, t);

		if (o) {
			/* Its frames and stacks stay interned: without blocks, they weigh
			 * nothing. */
			if (!m->opts.quiet)
				fprintf(stderr, "memprofctl report: warning: '%s' is the same trace "
					"as '%s' (pid %llu, same start time and events): counted "
					"once\n", t->path, o->path, (unsigned long long)t->pid);
			m->nblocks = t->first_block;
			rp_trace_free(t);
			m->ntraces--;
			m->nduplicates++;
		}
	}
out:
	if (ret == -ENOMEM && !err[0])
		snprintf(err, errlen, "out of memory");
	memprof_reader__free(l.r);
	mp_hashmap__clear(&l.codes);
	mp_hashmap__clear(&l.ids);
	free(l.code_ranges);
	free(l.code_frames);
	free(l.tmp);
	return ret;
}

int rp_model__load(struct rp_model *m, const char *path, char *err, size_t errlen)
{
	return load_trace(m, path, false, err, errlen);
}

int rp_model__load_base(struct rp_model *m, const char *path, char *err, size_t errlen)
{
	int ret = load_trace(m, path, true, err, errlen);

	if (!ret)
		m->has_base = true;
	return ret;
}

