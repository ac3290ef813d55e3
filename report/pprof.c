// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * pprof export: one Sample per distinct stack (leaf first) with the values alloc_objects,
 * alloc_space, inuse_objects and inuse_space, rounded from the unbiased estimates; one
 * Location (with one Line) per frame, one Function per (name, file), one Mapping per object.
 * Serialized with protobuf-c, gzip-compressed with zlib.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "report/profile.pb-c.h"
#include "report/report.h"
#include "userspace-lib/array.h"

typedef Perftools__Profiles__Profile Profile;
typedef Perftools__Profiles__ValueType ValueType;
typedef Perftools__Profiles__Sample Sample;
typedef Perftools__Profiles__Mapping Mapping;
typedef Perftools__Profiles__Location Location;
typedef Perftools__Profiles__Line Line;
typedef Perftools__Profiles__Function Function;
typedef Perftools__Profiles__Label Label;

struct strtab {
	char **s;
	size_t n, cap;
	struct mp_hashmap idx;	/* hash of a string -> its index */
};

struct str_key {
	const struct strtab *t;
	const char *s;
};

static bool str_eq(const void *ctx, uint64_t idx)
{
	const struct str_key *k = ctx;

	return !strcmp(k->t->s[idx], k->s);
}

/* The string-table index of @s (added if new), or -ENOMEM. */
static int64_t strtab_get(struct strtab *t, const char *s)
{
	struct str_key k = { t, s };
	uint64_t h = rp_hash_str(7, s);
	int64_t i = rp_index_find(&t->idx, h, str_eq, &k);

	if (i >= 0)
		return i;
	if (MP_ARRAY_RESERVE(t->s, t->cap, t->n + 1, 256))
		return -ENOMEM;
	t->s[t->n] = strdup(s);
	if (!t->s[t->n] || mp_hashmap__add_eq(&t->idx, h, t->n)) {
		free(t->s[t->n]);
		return -ENOMEM;
	}
	return (int64_t)t->n++;
}

static int64_t clamp_i64(double v)
{
	if (!(v > 0))
		return 0;
	if (v >= 9.2e18)
		return INT64_MAX;
	return llround(v);
}

static int gzip_buf(const uint8_t *in, size_t len, uint8_t **out, size_t *outlen)
{
	z_stream zs = { 0 };
	uLong bound;
	int ret;

	if (deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return -ENOMEM;
	bound = deflateBound(&zs, len) + 64;
	*out = malloc(bound);
	if (!*out) {
		deflateEnd(&zs);
		return -ENOMEM;
	}
	zs.next_in = (Bytef *)in;
	zs.avail_in = (uInt)len;
	zs.next_out = *out;
	zs.avail_out = (uInt)bound;
	ret = deflate(&zs, Z_FINISH);
	*outlen = zs.total_out;
	deflateEnd(&zs);
	if (ret != Z_STREAM_END) {
		free(*out);
		*out = NULL;
		return -EIO;
	}
	return 0;
}

/* Everything the profile points to, freed in one place. */
struct pp {
	struct strtab st;
	ValueType vt[4], period_type;
	ValueType *vtp[4];
	Sample *samples;
	Sample **samplep;
	uint64_t *loc_ids;
	int64_t *values;
	Mapping *maps;
	Mapping **mapp;
	Location *locs;
	Location **locp;
	Line *lines;
	Line **linep;
	Function *funcs;
	Function **funcp;
	int64_t *comments;
	int64_t *frame_func;	/* frame -> function index */
	int64_t *frame_map;	/* frame -> mapping index */
	Label base_label;	/* pprof::base=true on the negated samples of a difference */
	Label *base_labelp[1];
};

static void pp_free(struct pp *p)
{
	for (size_t i = 0; i < p->st.n; i++)
		free(p->st.s[i]);
	free(p->st.s);
	mp_hashmap__clear(&p->st.idx);
	free(p->samples);
	free(p->samplep);
	free(p->loc_ids);
	free(p->values);
	free(p->maps);
	free(p->mapp);
	free(p->locs);
	free(p->locp);
	free(p->lines);
	free(p->linep);
	free(p->funcs);
	free(p->funcp);
	free(p->comments);
	free(p->frame_func);
	free(p->frame_map);
}

#define STR(p, s)                                                                             \
	({                                                                                     \
		int64_t ___i = strtab_get(&(p)->st, (s));                                      \
		if (___i < 0)                                                                  \
			goto nomem;                                                            \
		___i;                                                                          \
	})

/* Functions (by name and file) and mappings (by object) of every frame. */
static int pp_functions(struct pp *p, const struct rp_model *m, Profile *prof)
{
	size_t nf = 0, nm = 0, nfr = m->nframes ? m->nframes : 1;
	int64_t *fn_name = NULL, *fn_file = NULL, *map_name = NULL;
	char buf[32];

	p->frame_func = malloc(nfr * sizeof(int64_t));
	p->frame_map = malloc(nfr * sizeof(int64_t));
	p->funcs = calloc(nfr, sizeof(*p->funcs));
	p->funcp = calloc(nfr, sizeof(*p->funcp));
	p->maps = calloc(nfr, sizeof(*p->maps));
	p->mapp = calloc(nfr, sizeof(*p->mapp));
	fn_name = malloc(nfr * sizeof(int64_t));
	fn_file = malloc(nfr * sizeof(int64_t));
	map_name = malloc(nfr * sizeof(int64_t));
	if (!p->frame_func || !p->frame_map || !p->funcs || !p->funcp || !p->maps || !p->mapp ||
	    !fn_name || !fn_file || !map_name)
		goto nomem;
	/* Strings are interned: (name index, file index) keys a function, the object's index
	 * a mapping. */
	{
		struct mp_hashmap fmap = { 0 }, mmap_ = { 0 };

		for (size_t i = 0; i < m->nframes; i++) {
			const struct rp_frame *fr = &m->frames[i];
			int64_t name = strtab_get(&p->st, rp_frame__name(m, (uint32_t)i, buf,
									 sizeof(buf)));
			int64_t file = strtab_get(&p->st, fr->file);
			int64_t obj = strtab_get(&p->st, fr->object);
			uint64_t *idx;
			bool found;
			int e;

			if (name < 0 || file < 0 || obj < 0 || name >= (1 << 30) || file >= (1 << 30))
				goto nomem_maps;
			idx = mp_hashmap__insert(&fmap, (uint64_t)name << 30 | (uint64_t)file, 1,
						 &found, &e);
			if (!idx)
				goto nomem_maps;
			if (!found) {
				*idx = nf;
				fn_name[nf] = name;
				fn_file[nf] = file;
				nf++;
			}
			p->frame_func[i] = (uint32_t)*idx;
			idx = mp_hashmap__insert(&mmap_, (uint64_t)obj, 1, &found, &e);
			if (!idx)
				goto nomem_maps;
			if (!found)
				*idx = nm, map_name[nm++] = obj;
			p->frame_map[i] = (uint32_t)*idx;
		}
		mp_hashmap__clear(&fmap);
		mp_hashmap__clear(&mmap_);
		goto built;
nomem_maps:
		mp_hashmap__clear(&fmap);
		mp_hashmap__clear(&mmap_);
		goto nomem;
	}
built:
	for (size_t i = 0; i < nf; i++) {
		Function *f = &p->funcs[i];

		perftools__profiles__function__init(f);
		f->id = i + 1;
		f->name = fn_name[i];
		f->system_name = fn_name[i];
		f->filename = fn_file[i];
		p->funcp[i] = f;
	}
	for (size_t i = 0; i < nm; i++) {
		Mapping *mp = &p->maps[i];

		perftools__profiles__mapping__init(mp);
		mp->id = i + 1;
		mp->filename = map_name[i];
		mp->has_functions = 1;
		mp->has_filenames = 1;
		mp->has_line_numbers = 1;
		p->mapp[i] = mp;
	}
	prof->n_function = nf;
	prof->function = p->funcp;
	prof->n_mapping = nm;
	prof->mapping = p->mapp;
	free(fn_name);
	free(fn_file);
	free(map_name);
	return 0;
nomem:
	free(fn_name);
	free(fn_file);
	free(map_name);
	return -ENOMEM;
}

/* One Location per frame: id = frame + 1. */
static int pp_locations(struct pp *p, const struct rp_model *m, Profile *prof)
{
	size_t nfr = m->nframes ? m->nframes : 1;

	p->locs = calloc(nfr, sizeof(*p->locs));
	p->locp = calloc(nfr, sizeof(*p->locp));
	p->lines = calloc(nfr, sizeof(*p->lines));
	p->linep = calloc(nfr, sizeof(*p->linep));
	if (!p->locs || !p->locp || !p->lines || !p->linep)
		return -ENOMEM;
	for (size_t i = 0; i < m->nframes; i++) {
		Location *l = &p->locs[i];
		Line *ln = &p->lines[i];

		perftools__profiles__location__init(l);
		perftools__profiles__line__init(ln);
		ln->function_id = (uint64_t)p->frame_func[i] + 1;
		ln->line = m->frames[i].line;
		p->linep[i] = ln;
		l->id = i + 1;
		l->mapping_id = (uint64_t)p->frame_map[i] + 1;
		l->n_line = 1;
		l->line = &p->linep[i];
		p->locp[i] = l;
	}
	prof->n_location = m->nframes;
	prof->location = p->locp;
	return 0;
}

/* The sample of stack @i with its four values (multiplied by @sign), leaf first. */
static void pp_sample(struct pp *p, const struct rp_model *m, size_t i, const double v[4],
		      double sign, size_t ns, size_t *nloc)
{
	const struct rp_stack *s = &m->stacks[i];
	Sample *sm = &p->samples[ns];

	perftools__profiles__sample__init(sm);
	sm->location_id = &p->loc_ids[*nloc];
	for (uint32_t k = s->eff_len; k-- > 0;)	/* leaf first */
		p->loc_ids[(*nloc)++] = (uint64_t)m->stack_frames[s->off + k] + 1;
	sm->n_location_id = s->eff_len;
	sm->value = &p->values[ns * 4];
	sm->n_value = 4;
	for (int k = 0; k < 4; k++)
		sm->value[k] = (int64_t)sign * clamp_i64(v[k]);
	if (sign < 0) {
		sm->n_label = 1;
		sm->label = p->base_labelp;
	}
	p->samplep[ns] = sm;
}

/*
 * One sample per stack with estimates; with a base (--base), the base's samples follow with
 * their values negated and the label pprof::base=true, as `pprof -diff_base` builds a
 * difference, so every pprof view shows new - base.
 */
static int pp_samples(struct pp *p, const struct rp_model *m, Profile *prof)
{
	size_t ns = 0, nloc = 0;

	for (size_t i = 0; i < m->nstacks; i++) {
		const struct rp_stackval *v = &m->stack_vals[i];

		if (v->bytes > 0 || v->blocks > 0) {
			ns++;
			nloc += m->stacks[i].eff_len;
		}
		if (v->base_bytes > 0 || v->base_blocks > 0) {
			ns++;
			nloc += m->stacks[i].eff_len;
		}
	}
	p->samples = calloc(ns ? ns : 1, sizeof(*p->samples));
	p->samplep = calloc(ns ? ns : 1, sizeof(*p->samplep));
	p->loc_ids = calloc(nloc ? nloc : 1, sizeof(*p->loc_ids));
	p->values = calloc((ns ? ns : 1) * 4, sizeof(*p->values));
	if (!p->samples || !p->samplep || !p->loc_ids || !p->values)
		return -ENOMEM;
	perftools__profiles__label__init(&p->base_label);
	p->base_label.key = strtab_get(&p->st, "pprof::base");
	p->base_label.str = strtab_get(&p->st, "true");
	if (p->base_label.key < 0 || p->base_label.str < 0)
		return -ENOMEM;
	p->base_labelp[0] = &p->base_label;
	ns = nloc = 0;
	for (size_t i = 0; i < m->nstacks; i++) {
		const struct rp_stackval *v = &m->stack_vals[i];
		const double cur[4] = { v->blocks, v->bytes, v->live_blocks, v->live_bytes };
		const double base[4] = { v->base_blocks, v->base_bytes, v->base_live_blocks,
					 v->base_live_bytes };

		if (v->bytes > 0 || v->blocks > 0)
			pp_sample(p, m, i, cur, 1, ns++, &nloc);
		if (v->base_bytes > 0 || v->base_blocks > 0)
			pp_sample(p, m, i, base, -1, ns++, &nloc);
	}
	prof->n_sample = ns;
	prof->sample = p->samplep;
	return 0;
}

int rp_write_pprof(const struct rp_model *m, const char *path)
{
	static const char *const types[4][2] = {
		{ "alloc_objects", "count" }, { "alloc_space", "bytes" },
		{ "inuse_objects", "count" }, { "inuse_space", "bytes" },
	};
	Profile prof = PERFTOOLS__PROFILES__PROFILE__INIT;
	struct pp p = { 0 };
	uint8_t *raw = NULL, *gz = NULL;
	size_t rawlen, gzlen;
	uint64_t t0, t1;
	char *comment = NULL;
	int err;

	STR(&p, "");
	for (int i = 0; i < 4; i++) {
		perftools__profiles__value_type__init(&p.vt[i]);
		p.vt[i].type = STR(&p, types[i][0]);
		p.vt[i].unit = STR(&p, types[i][1]);
		p.vtp[i] = &p.vt[i];
	}
	prof.n_sample_type = 4;
	prof.sample_type = p.vtp;
	prof.default_sample_type = STR(&p, m->opts.live ? "inuse_space" : "alloc_space");
	perftools__profiles__value_type__init(&p.period_type);
	p.period_type.type = STR(&p, "space");
	p.period_type.unit = STR(&p, "bytes");
	prof.period_type = &p.period_type;
	/* nominal: a sample stands for 8 len/((len+1) λ) requested bytes, a word's worth less
	 * its share of the header word (the values are those estimates) */
	if (m->ntraces)
		prof.period = clamp_i64(m->traces[0].word_bytes / m->traces[0].rate);
	if (rp_model__span(m, &t0, &t1)) {
		prof.time_nanos = (int64_t)(t0 * 1000);
		prof.duration_nanos = (int64_t)((t1 - t0) * 1000);
	}
	p.comments = calloc(m->ntraces + 1, sizeof(*p.comments));
	if (!p.comments)
		goto nomem;
	for (size_t i = 0; i < m->ntraces; i++) {
		const struct rp_trace *t = &m->traces[i];

		if (asprintf(&comment, "memprofctl report: %s (%s pid %llu, rate %g)", t->path,
			     t->executable, (unsigned long long)t->pid, t->rate) < 0)
			goto nomem;
		p.comments[i] = STR(&p, comment);
		free(comment);
		comment = NULL;
	}
	prof.n_comment = m->ntraces;
	prof.comment = p.comments;

	err = pp_functions(&p, m, &prof);
	if (!err)
		err = pp_locations(&p, m, &prof);
	if (!err)
		err = pp_samples(&p, m, &prof);
	if (err)
		goto out;
	prof.n_string_table = p.st.n;
	prof.string_table = p.st.s;

	rawlen = perftools__profiles__profile__get_packed_size(&prof);
	raw = malloc(rawlen ? rawlen : 1);
	if (!raw)
		goto nomem;
	perftools__profiles__profile__pack(&prof, raw);
	err = gzip_buf(raw, rawlen, &gz, &gzlen);
	if (!err)
		err = rp_write_output(path, gz, gzlen);
	goto out;
nomem:
	err = -ENOMEM;
out:
	free(comment);
	free(raw);
	free(gz);
	pp_free(&p);
	return err;
}
