// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The report model: load traces into compact per-block records with interned frames and
 * stacks, then aggregate them into sites with unbiased estimates (see report.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <memprof/trace.h>

#include "report/report.h"
#include "userspace-lib/array.h"
#include "userspace-lib/estimate.h"
#include "userspace-lib/codec/outfile.h"

#define GROW(arr, cap, need) MP_ARRAY_RESERVE(arr, cap, need, 64)

const char *rp_by_name(enum rp_by by)
{
	switch (by) {
	case RP_BY_FUNCTION:
		return "function";
	case RP_BY_LINE:
		return "line";
	case RP_BY_STACK:
		return "stack";
	case RP_BY_OBJECT:
		return "object";
	}
	return "?";
}

struct rp_model *rp_model__new(const struct rp_options *opts)
{
	struct rp_model *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->opts = *opts;
	if (!m->opts.points)
		m->opts.points = 10;
	if (m->opts.points > RP_MAX_POINTS)
		m->opts.points = RP_MAX_POINTS;
	if (!m->opts.temp_us)
		m->opts.temp_us = RP_TEMP_US;
	return m;
}

static void sites_free(struct rp_model *m)
{
	for (size_t i = 0; i < m->nsites; i++) {
		free(m->sites[i].key);
		free(m->sites[i].lifetimes);
		free(m->sites[i].ages);
	}
	free(m->sites);
	m->sites = NULL;
	m->nsites = m->cap_sites = 0;
	free(m->by_bytes);
	free(m->by_blocks);
	free(m->suspects);
	free(m->timeline);
	free(m->stack_vals);
	free(m->stack_view);
	free(m->by_change_bytes);
	free(m->by_change_live);
	free(m->by_peak);
	free(m->by_temp);
	m->by_change_bytes = m->by_change_live = m->by_peak = m->by_temp = NULL;
	m->stack_view = NULL;
	m->nstack_view = 0;
	m->by_bytes = m->by_blocks = m->suspects = NULL;
	m->timeline = NULL;
	m->stack_vals = NULL;
}

static void trace_free(struct rp_trace *t)
{
	free(t->path);
	free(t->executable);
	free(t->host);
	free(t->context);
}

void rp_model__free(struct rp_model *m)
{
	if (!m)
		return;
	sites_free(m);
	for (size_t i = 0; i < m->ntraces; i++)
		trace_free(&m->traces[i]);
	free(m->traces);
	for (size_t i = 0; i < m->nframes; i++) {
		free(m->frames[i].func);
		free(m->frames[i].file);
		free(m->frames[i].object);
	}
	free(m->frames);
	free(m->blocks);
	free(m->stack_frames);
	free(m->stacks);
	mp_hashmap__clear(&m->frame_idx);
	mp_hashmap__clear(&m->stack_idx);
	mp_hashmap__clear(&m->site_idx);
	free(m);
}

/* ---------------------------------------------------------------------------------------
 * Frames
 */

/* Allocator entry points: when innermost, the allocation site is their caller. */
static const char *const allocator_names[] = {
	"malloc", "calloc", "realloc", "reallocarray", "free", "posix_memalign",
	"aligned_alloc", "memalign", "valloc", "pvalloc", "mmap", "mmap64", "munmap",
	"strdup", "strndup", "__strdup", "__strndup", "malloc_usable_size",
	"__libc_malloc", "__libc_calloc", "__libc_realloc", "__libc_memalign",
	"__libc_valloc", "__libc_pvalloc", "__GI___libc_malloc", "__GI___libc_realloc",
	"_int_malloc", "_int_realloc", "_int_memalign", "tcache_init", "sysmalloc",
	"__mmap", "__GI___mmap64",
};

static const char *const allocator_prefixes[] = {
	"operator new", "_Znw", "_Zna", "je_", "tc_", "mi_malloc", "mi_calloc", "mi_realloc",
	"mi_zalloc", "mi_new", "mi_heap_malloc", "mi_posix_memalign", "mi_aligned_alloc",
	"tcmalloc::", "__libc_",
};

/*
 * Standard-library allocation wrappers, innermost between the user's code and operator new
 * (std::__new_allocator<int>::allocate, std::allocator_traits<...>::allocate,
 * std::_Vector_base<...>::_M_allocate, and the container member that called them,
 * std::vector<int>::_M_default_append): every frame of namespace std or __gnu_cxx, with or
 * without a return type printed before it, and every frame of a libstdc++ header.
 */
static bool is_std_frame(const char *func, const char *file)
{
	const char *name = func;

	if (strstr(file, "/include/c++/"))
		return true;
	/* "void std::vector<int>::_M_realloc_insert<int>(...)": skip the return type's words */
	for (int i = 0; i < 3; i++) {
		size_t n = strcspn(name, " <(");

		if (name[n] != ' ' || memmem(name, n, "::", 2))
			break;
		name += n + 1;
	}
	return !strncmp(name, "std::", 5) || !strncmp(name, "__gnu_cxx::", 11) ||
	       strstr(name, "::_M_allocate") || strstr(name, "::_M_create(");
}

/* Frames of our preload library (libmemprof-preload.so) and its sources. */
static bool is_preload_frame(const char *file, const char *object)
{
	return !strncmp(object, "libmemprof-preload", 18) ||
	       strstr(file, "userspace-lib/preload/") || !strncmp(file, "libmemprof-preload", 18);
}

static bool is_allocator(const char *func)
{
	char name[128];
	size_t len = strcspn(func, "+(");	/* "malloc+0x12", "operator new(unsigned long)" */

	if (!strncmp(func, "operator new", 12))
		return true;
	if (len == 0 || len >= sizeof(name))
		return false;
	memcpy(name, func, len);
	name[len] = '\0';
	for (size_t i = 0; i < sizeof(allocator_names) / sizeof(allocator_names[0]); i++)
		if (!strcmp(name, allocator_names[i]))
			return true;
	for (size_t i = 0; i < sizeof(allocator_prefixes) / sizeof(allocator_prefixes[0]); i++)
		if (!strncmp(name, allocator_prefixes[i], strlen(allocator_prefixes[i])))
			return true;
	return false;
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s ? s + 1 : path;
}

static bool is_source_file(const char *path)
{
	static const char *const exts[] = {
		"c", "h", "cc", "cpp", "cxx", "hpp", "hh", "hxx", "C", "H", "ml", "mli", "rs",
		"go", "s", "S", "y", "l", "zig", "d", "m", "mm", "f", "f90", "java", "inc",
		"def", "tcc", "ipp", "tpp", "inl",
	};
	const char *base = base_name(path), *dot = strrchr(base, '.');

	if (strstr(path, "/include/"))
		return true;
	if (!dot)
		return false;
	for (size_t i = 0; i < sizeof(exts) / sizeof(exts[0]); i++)
		if (!strcmp(dot + 1, exts[i]))
			return true;
	return false;
}

/*
 * The mapped object of a location. Our engine writes either a source file or, when nothing
 * better is known, an object ("libc.so.6+0x1234" or a path) in the filename; the defname may
 * carry "object+0x...". A source-level frame names no object: it is attributed to the traced
 * executable, the best guess the format allows.
 */
static char *frame_object(const char *func, const char *file, const char *exe)
{
	const char *plus;
	const char *s = NULL;
	size_t len = 0;

	if (file[0] && (plus = strstr(file, "+0x"))) {
		s = file;
		len = (size_t)(plus - file);
	} else if (func[0] && (plus = strstr(func, "+0x")) && !strchr(func, '(')) {
		s = func;
		len = (size_t)(plus - func);
	} else if (file[0] && !is_source_file(file)) {
		s = file;
		len = strlen(file);
	}
	if (s) {
		char *obj = strndup(s, len);
		char *r;

		if (!obj)
			return NULL;
		r = strdup(base_name(obj));
		free(obj);
		return r;
	}
	return strdup(exe[0] ? base_name(exe) : "[unknown]");
}

struct frame_key {
	const struct rp_model *m;
	const char *func, *file, *object;
	uint32_t line;
	uint64_t code;
};

static bool frame_eq(const void *ctx, uint64_t idx)
{
	const struct frame_key *k = ctx;
	const struct rp_frame *f = &k->m->frames[idx];

	return f->line == k->line && f->code == k->code && !strcmp(f->func, k->func) &&
	       !strcmp(f->file, k->file) && !strcmp(f->object, k->object);
}

/* Intern a frame. @code is kept only for frames without a name (it is their identity). */
static int64_t frame_intern(struct rp_model *m, const char *func, const char *file,
			    uint32_t line, uint64_t code, const char *exe)
{
	struct frame_key k = { m, func ? func : "", file ? file : "", NULL, line, 0 };
	struct rp_frame *f;
	char *object;
	uint64_t h;
	int64_t idx;
	int err;

	if (!k.func[0] && !k.file[0])
		k.code = code;
	object = frame_object(k.func, k.file, exe);
	if (!object)
		return -ENOMEM;
	k.object = object;
	h = rp_hash_str(rp_hash_str(rp_hash_str(rp_hash_mix(line, k.code), k.func), k.file),
			object);
	idx = rp_index_find(&m->frame_idx, h, frame_eq, &k);
	if (idx >= 0) {
		free(object);
		return idx;
	}
	if (m->nframes >= RP_MAX_FRAMES) {
		free(object);
		return -E2BIG;
	}
	if (GROW(m->frames, m->cap_frames, m->nframes + 1)) {
		free(object);
		return -ENOMEM;
	}
	f = &m->frames[m->nframes];
	f->func = strdup(k.func);
	f->file = strdup(k.file);
	f->object = object;
	f->line = line;
	f->code = k.code;
	f->allocator = (k.func[0] && (is_allocator(k.func) || is_std_frame(k.func, k.file))) ||
		       is_preload_frame(k.file, object);
	if (!f->func || !f->file) {
		free(f->func);
		free(f->file);
		free(object);
		return -ENOMEM;
	}
	err = mp_hashmap__add_eq(&m->frame_idx, h, m->nframes);
	if (err) {
		free(f->func);
		free(f->file);
		free(object);
		return err;
	}
	return (int64_t)m->nframes++;
}

const char *rp_frame__name(const struct rp_model *m, uint32_t frame, char *buf, size_t len)
{
	const struct rp_frame *f = &m->frames[frame];

	if (f->func[0])
		return f->func;
	if (f->file[0])
		return f->file;
	snprintf(buf, len, "0x%llx", (unsigned long long)f->code);
	return buf;
}

/* ---------------------------------------------------------------------------------------
 * Stacks
 */

struct stack_key {
	const struct rp_model *m;
	const uint32_t *frames;
	uint32_t len;
};

static bool stack_eq(const void *ctx, uint64_t idx)
{
	const struct stack_key *k = ctx;
	const struct rp_stack *s = &k->m->stacks[idx];

	return s->len == k->len &&
	       !memcmp(&k->m->stack_frames[s->off], k->frames, k->len * sizeof(uint32_t));
}

static int64_t stack_intern(struct rp_model *m, const uint32_t *frames, uint32_t len)
{
	struct stack_key k = { m, frames, len };
	struct rp_stack *s;
	uint64_t h = 0x5bd1e995;
	int64_t idx;
	int err;

	for (uint32_t i = 0; i < len; i++)
		h = rp_hash_mix(h, frames[i]);
	idx = rp_index_find(&m->stack_idx, h, stack_eq, &k);
	if (idx >= 0)
		return idx;
	if (m->nstacks >= RP_MAX_STACKS || m->nstack_frames + len > UINT32_MAX)
		return -E2BIG;
	if (GROW(m->stacks, m->cap_stacks, m->nstacks + 1) ||
	    GROW(m->stack_frames, m->cap_stack_frames, m->nstack_frames + len))
		return -ENOMEM;
	s = &m->stacks[m->nstacks];
	s->off = (uint32_t)m->nstack_frames;
	s->len = len;
	memcpy(&m->stack_frames[s->off], frames, len * sizeof(uint32_t));
	m->nstack_frames += len;
	s->eff_len = len;
	while (!m->opts.no_trim && s->eff_len > 1 && m->frames[frames[s->eff_len - 1]].allocator)
		s->eff_len--;
	err = mp_hashmap__add_eq(&m->stack_idx, h, m->nstacks);
	if (err)
		return err;
	return (int64_t)m->nstacks++;
}

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
		int64_t f = frame_intern(l->m, "", "", 0, code, l->exe);

		if (f < 0)
			return (int)f;
		l->code_frames[l->ncode_frames++] = (uint32_t)f;
	}
	for (unsigned int i = 0; i < nlocs; i++) {
		int64_t f = frame_intern(l->m, locs[i].defname, locs[i].filename, locs[i].line,
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
		int64_t f = frame_intern(l->m, "(no backtrace)", "", 0, 0, l->exe);

		if (f < 0)
			return f;
		if (GROW(l->tmp, l->cap_tmp, 1))
			return -ENOMEM;
		l->tmp[n++] = (uint32_t)f;
	}
	if (n > UINT32_MAX)
		return -E2BIG;
	return stack_intern(l->m, l->tmp, (uint32_t)n);
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
	fprintf(stderr, "memprofctl report: warning: '%s' at offset %llu: %s\n", l->t->path,
		(unsigned long long)offset, msg);
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
			fprintf(stderr, "memprofctl report: warning: '%s' is the same trace as "
				"'%s' (pid %llu, same start time and events): counted once\n",
				t->path, o->path, (unsigned long long)t->pid);
			m->nblocks = t->first_block;
			trace_free(t);
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

/* ---------------------------------------------------------------------------------------
 * Analysis
 */

struct site_key {
	const struct rp_model *m;
	const char *key;
};

static bool site_eq(const void *ctx, uint64_t idx)
{
	const struct site_key *k = ctx;

	return !strcmp(k->m->sites[idx].key, k->key);
}

/* The site name of stack @si under --by. Returns a malloc'd string or NULL. */
static char *site_name(const struct rp_model *m, uint32_t si, uint32_t *leaf)
{
	const struct rp_stack *s = &m->stacks[si];
	const uint32_t *fr = &m->stack_frames[s->off];
	const struct rp_frame *f;
	char buf[32], *out = NULL;
	size_t len = 0;
	FILE *mem;
	int ret;

	*leaf = fr[s->eff_len - 1];
	f = &m->frames[*leaf];
	switch (m->opts.by) {
	case RP_BY_FUNCTION:
		return strdup(rp_frame__name(m, *leaf, buf, sizeof(buf)));
	case RP_BY_OBJECT:
		return strdup(f->object);
	case RP_BY_LINE:
		if (f->line)
			ret = asprintf(&out, "%s %s:%u", rp_frame__name(m, *leaf, buf, sizeof(buf)),
				       f->file[0] ? f->file : "?", f->line);
		else
			ret = asprintf(&out, "%s %s", rp_frame__name(m, *leaf, buf, sizeof(buf)),
				       f->file[0] ? f->file : "?");
		return ret < 0 ? NULL : out;
	case RP_BY_STACK:
		/* Innermost first, as one reads an allocation site. */
		mem = open_memstream(&out, &len);
		if (!mem)
			return NULL;
		for (uint32_t i = s->eff_len; i-- > 0;)
			fprintf(mem, "%s%s", i + 1 < s->eff_len ? " <- " : "",
				rp_frame__name(m, fr[i], buf, sizeof(buf)));
		if (fclose(mem))
			return NULL;
		return out;
	}
	return NULL;
}

static int64_t site_intern(struct rp_model *m, uint32_t si)
{
	struct site_key k = { m, NULL };
	struct rp_site *s;
	uint32_t leaf;
	char *name = site_name(m, si, &leaf);
	int64_t idx;
	uint64_t h;

	if (!name)
		return -ENOMEM;
	k.key = name;
	h = rp_hash_str(0, name);
	idx = rp_index_find(&m->site_idx, h, site_eq, &k);
	if (idx >= 0) {
		free(name);
		return idx;
	}
	if (GROW(m->sites, m->cap_sites, m->nsites + 1) ||
	    mp_hashmap__add_eq(&m->site_idx, h, m->nsites)) {
		free(name);
		return -ENOMEM;
	}
	s = &m->sites[m->nsites];
	memset(s, 0, sizeof(*s));
	s->key = name;
	s->frame = leaf;
	s->stack = si;
	return (int64_t)m->nsites++;
}

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

static int cmp_bytes(const void *a, const void *b, void *ctx)
{
	const struct rp_model *sm = ctx;
	const struct rp_site *x = &sm->sites[*(const uint32_t *)a];
	const struct rp_site *y = &sm->sites[*(const uint32_t *)b];
	double vx = sm->opts.live ? x->live_bytes.est : x->bytes.est;
	double vy = sm->opts.live ? y->live_bytes.est : y->bytes.est;

	if (vx != vy)
		return vx > vy ? -1 : 1;
	return strcmp(x->key, y->key);
}

static int cmp_blocks(const void *a, const void *b, void *ctx)
{
	const struct rp_model *sm = ctx;
	const struct rp_site *x = &sm->sites[*(const uint32_t *)a];
	const struct rp_site *y = &sm->sites[*(const uint32_t *)b];
	double vx = sm->opts.live ? x->live_blocks.est : x->blocks.est;
	double vy = sm->opts.live ? y->live_blocks.est : y->blocks.est;

	if (vx != vy)
		return vx > vy ? -1 : 1;
	return strcmp(x->key, y->key);
}

static int cmp_suspects(const void *a, const void *b, void *ctx)
{
	const struct rp_model *sm = ctx;
	const struct rp_site *x = &sm->sites[*(const uint32_t *)a];
	const struct rp_site *y = &sm->sites[*(const uint32_t *)b];

	if (x->old_live_bytes.est != y->old_live_bytes.est)
		return x->old_live_bytes.est > y->old_live_bytes.est ? -1 : 1;
	return strcmp(x->key, y->key);
}

static int cmp_est_desc(const struct rp_est *x, const struct rp_est *y, const char *kx,
			const char *ky)
{
	if (x->est != y->est)
		return x->est > y->est ? -1 : 1;
	return strcmp(kx, ky);
}

static int cmp_temp(const void *a, const void *b, void *ctx)
{
	const struct rp_model *sm = ctx;
	const struct rp_site *x = &sm->sites[*(const uint32_t *)a];
	const struct rp_site *y = &sm->sites[*(const uint32_t *)b];

	return cmp_est_desc(&x->temp_blocks, &y->temp_blocks, x->key, y->key);
}

static int cmp_peak(const void *a, const void *b, void *ctx)
{
	const struct rp_model *sm = ctx;
	const struct rp_site *x = &sm->sites[*(const uint32_t *)a];
	const struct rp_site *y = &sm->sites[*(const uint32_t *)b];

	return cmp_est_desc(&x->peak_live_bytes, &y->peak_live_bytes, x->key, y->key);
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

/* By the size of the change, growth first between equal sizes, then by name. */
static int cmp_change(double dx, double dy, const char *kx, const char *ky)
{
	if (fabs(dx) != fabs(dy))
		return fabs(dx) > fabs(dy) ? -1 : 1;
	if (dx != dy)
		return dx > dy ? -1 : 1;
	return strcmp(kx, ky);
}

static int cmp_change_bytes(const void *a, const void *b, void *ctx)
{
	const struct rp_model *sm = ctx;
	const struct rp_site *x = &sm->sites[*(const uint32_t *)a];
	const struct rp_site *y = &sm->sites[*(const uint32_t *)b];

	return cmp_change(x->bytes.est - x->base_bytes.est, y->bytes.est - y->base_bytes.est,
			  x->key, y->key);
}

static int cmp_change_live(const void *a, const void *b, void *ctx)
{
	const struct rp_model *sm = ctx;
	const struct rp_site *x = &sm->sites[*(const uint32_t *)a];
	const struct rp_site *y = &sm->sites[*(const uint32_t *)b];

	return cmp_change(x->live_bytes.est - x->base_live_bytes.est,
			  y->live_bytes.est - y->base_live_bytes.est, x->key, y->key);
}

static void est_add(struct rp_est *e, double est, double var)
{
	e->est += est;
	e->var += var;
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
		if (m->opts.has_since && since >= t->end_us)
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
	r = stack_intern(m, *tmp + from, n - from);
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

	sites_free(m);
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
			stack_site[vi] = site_intern(m, (uint32_t)vi);
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
			est_add(&s->base_bytes, eb, vb);
			est_add(&s->base_blocks, ec, vc);
			est_add(&m->base_total_bytes, eb, vb);
			est_add(&m->base_total_blocks, ec, vc);
			sv->base_bytes += eb;
			sv->base_blocks += ec;
			sv->base_bytes_var += vb;
			if (live) {
				est_add(&s->base_live_bytes, eb, vb);
				est_add(&s->base_live_blocks, ec, vc);
				est_add(&m->base_total_live_bytes, eb, vb);
				est_add(&m->base_total_live_blocks, ec, vc);
				sv->base_live_bytes += eb;
				sv->base_live_blocks += ec;
				sv->base_live_bytes_var += vb;
			}
			continue;
		}
		est_add(&s->bytes, eb, vb);
		est_add(&s->blocks, ec, vc);
		cls = rp_size_class((double)b->length * wb);
		est_add(&s->size_blocks[cls], ec, vc);
		est_add(&m->size_blocks[cls], ec, vc);
		est_add(&m->size_bytes[cls], eb, vb);
		if (!live && b->t_free - b->t_alloc <= m->opts.temp_us) {
			est_add(&s->temp_bytes, eb, vb);
			est_add(&s->temp_blocks, ec, vc);
			est_add(&m->total_temp_bytes, eb, vb);
			est_add(&m->total_temp_blocks, ec, vc);
		}
		est_add(&m->total_bytes, eb, vb);
		est_add(&m->total_blocks, ec, vc);
		est_add(&m->total_words, ew, vw);
		s->sampled++;
		s->samples += b->nsamples;
		m->total_sampled++;
		m->total_samples += b->nsamples;
		sv->bytes += eb;
		sv->blocks += ec;
		sv->bytes_var += vb;
		if (live) {
			est_add(&s->live_bytes, eb, vb);
			est_add(&s->live_blocks, ec, vc);
			est_add(&m->total_live_bytes, eb, vb);
			est_add(&m->total_live_blocks, ec, vc);
			est_add(&m->total_live_words, ew, vw);
			sv->live_bytes += eb;
			sv->live_blocks += ec;
			sv->live_bytes_var += vb;
			s->sampled_live++;
			m->total_sampled_live++;
			if (push_u64(&s->ages, &s->nages, &s->cap_ages, t->win_end - b->t_alloc))
				goto out;
			if (b->t_alloc < t->young_after) {
				est_add(&s->old_live_bytes, eb, vb);
				est_add(&s->old_live_blocks, ec, vc);
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
	qsort_r(m->by_bytes, m->nsites, sizeof(uint32_t), cmp_bytes, m);
	qsort_r(m->by_blocks, m->nsites, sizeof(uint32_t), cmp_blocks, m);
	qsort_r(m->suspects, m->nsuspects, sizeof(uint32_t), cmp_suspects, m);
	qsort_r(m->by_change_bytes, m->nsites, sizeof(uint32_t), cmp_change_bytes, m);
	qsort_r(m->by_change_live, m->nsites, sizeof(uint32_t), cmp_change_live, m);
	qsort_r(m->by_temp, m->nsites, sizeof(uint32_t), cmp_temp, m);
	err = build_timeline(m);
	if (!err)
		err = build_peak(m, stack_site);
	if (!err)
		qsort_r(m->by_peak, m->nsites, sizeof(uint32_t), cmp_peak, m);
out:
	free(stack_site);
	return err;
}

/* ---------------------------------------------------------------------------------------
 * Small helpers shared by the outputs
 */

int rp_parse_duration(const char *s, uint64_t *us)
{
	static const struct {
		const char *suffix;
		double mult;
	} units[] = {
		{ "", 1e6 }, { "s", 1e6 }, { "ms", 1e3 }, { "us", 1 }, { "µs", 1 },
		{ "m", 60e6 }, { "min", 60e6 }, { "h", 3600e6 },
	};
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || errno || !(v >= 0) || isinf(v))
		return -EINVAL;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (!strcmp(end, units[i].suffix)) {
			double r = v * units[i].mult;

			if (r > 1.8e19)
				return -EINVAL;
			*us = (uint64_t)llround(r);
			return 0;
		}
	}
	return -EINVAL;
}

const char *rp_fmt_bytes(double bytes, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	unsigned int u = 0;

	while (fabs(bytes) >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		bytes /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%.0f B", bytes);
	else
		snprintf(buf, len, "%.1f %s", bytes, units[u]);
	return buf;
}

int rp_write_output(const char *path, const void *data, size_t len)
{
	struct mp_outfile o;
	int err;

	if (!strcmp(path, "-"))
		return mp_write_all(STDOUT_FILENO, data, len);
	err = mp_outfile__open(&o, path, false, 0644);
	if (err)
		return err;
	err = mp_write_all(o.fd, data, len);
	if (!err && fsync(o.fd) && errno != EINVAL && errno != EROFS)
		err = -errno;	/* a full disk may only say so here (not a FIFO, a device) */
	if (close(o.fd) && !err)
		err = -errno;
	o.fd = -1;
	if (err) {
		mp_outfile__abort(&o);
		return err;
	}
	return mp_outfile__commit(&o);
}
