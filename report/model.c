// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The report model: its life cycle, the classification of frames (allocator, standard
 * library, the preload library), and the interned frames, stacks and sites that blocks refer
 * to. load.c fills it from traces, analyze.c aggregates it into sites with unbiased estimates
 * (see report.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report/report.h"
#include "report/model_int.h"
#include "userspace-lib/codec/outfile.h"

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

int rp_by__parse(const char *s, enum rp_by *by)
{
	for (enum rp_by b = RP_BY_FUNCTION; b <= RP_BY_OBJECT; b++) {
		if (!strcmp(s, rp_by_name(b))) {
			*by = b;
			return 0;
		}
	}
	return -EINVAL;
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

void rp_sites_free(struct rp_model *m)
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

void rp_trace_free(struct rp_trace *t)
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
	rp_sites_free(m);
	for (size_t i = 0; i < m->ntraces; i++)
		rp_trace_free(&m->traces[i]);
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
int64_t rp_frame_intern(struct rp_model *m, const char *func, const char *file, uint32_t line,
			uint64_t code, const char *exe)
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

int64_t rp_stack_intern(struct rp_model *m, const uint32_t *frames, uint32_t len)
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
 * Sites: the stacks' names under --by
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

int64_t rp_site_intern(struct rp_model *m, uint32_t si)
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

/* ---------------------------------------------------------------------------------------
 * Small helpers shared by the outputs
 */

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
