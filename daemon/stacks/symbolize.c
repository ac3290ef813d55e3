// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Symbolizer: runtime address of a process -> memtrace locations.
 *
 * Data flow:
 *   (pid, addr) -> per-process address cache (pc -> result)            O(1) on repeats
 *               -> per-process snapshot of executable mappings (sorted; /proc/PID/maps)
 *               -> object (struct module, shared by all processes, keyed by build-id)
 *               -> ELF virtual address = file offset mapped back through the object's PT_LOADs
 *               -> shared result cache (object, vaddr) -> result       O(1) across processes
 *               -> libdwfl session of the object alone, reported at its link-time addresses:
 *                  line table; function and inlined callers from a per-CU index of function
 *                  ranges; ELF symbol tables (incl. MiniDebugInfo) for what DWARF lacks
 *   anonymous code -> the process' JIT perf map, else "[anon]+0x<offset>"
 *
 * One libdwfl session per object rather than one per process: N processes that map the same libc
 * share one parsed libc and one set of results. Objects are held open by fd from the moment a
 * process' maps are snapshotted, so a process that exits (or a file replaced by a package
 * upgrade) still resolves. Results and strings live in an arena until __free().
 */
#include "daemon/stacks/symbolize_int.h"

void *sym_arena_alloc(struct mp_symbolizer *s, size_t n)
{
	struct chunk *c = s->chunks;
	void *p;

	n = (n + 7) & ~(size_t)7;
	if (!c || c->size - c->used < n) {
		size_t size = n > CHUNK_SIZE / 4 ? n : CHUNK_SIZE;

		c = malloc(sizeof(*c) + size);
		if (!c)
			return NULL;
		c->size = size;
		c->used = 0;
		if (size == CHUNK_SIZE || !s->chunks) {
			c->next = s->chunks;
			s->chunks = c;
		} else {
			/* a big one-off: keep the current chunk in front for small allocations */
			c->next = s->chunks->next;
			s->chunks->next = c;
		}
		s->st.bytes += sizeof(*c) + size;
	}
	p = c->data + c->used;
	c->used += n;
	return p;
}

static bool over_budget(const struct mp_symbolizer *s)
{
	return s->st.bytes >= s->opts.max_bytes;
}

/* Interned strings: the map holds a string under the hash of its bytes. */
struct istr_key {
	const char *p;
	size_t n;
};

static bool istr_eq(const void *ctx, uint64_t val)
{
	const struct istr_key *k = ctx;
	const char *str = (const char *)(uintptr_t)val;

	return !strncmp(str, k->p, k->n) && !str[k->n];
}

static const char *intern_n(struct mp_symbolizer *s, const char *p, size_t n)
{
	struct istr_key k = { p, n };
	uint64_t h = mp_hash_bytes(MP_HASH_SEED, p, n);
	uint64_t *v = mp_hashmap__find_eq(&s->strings, h, istr_eq, &k);
	char *str;

	if (v)
		return (const char *)(uintptr_t)*v;
	str = sym_arena_alloc(s, n + 1);
	if (!str)
		return NULL;
	memcpy(str, p, n);
	str[n] = 0;
	if (mp_hashmap__add_eq(&s->strings, h, (uintptr_t)str))
		return NULL;
	return str;
}

const char *sym_intern(struct mp_symbolizer *s, const char *p)
{
	return p ? intern_n(s, p, strlen(p)) : NULL;
}

const char *sym_internf(struct mp_symbolizer *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

const char *sym_internf(struct mp_symbolizer *s, const char *fmt, ...)
{
	char buf[PATH_MAX + 64];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0)
		return NULL;
	return intern_n(s, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

/* Demangled (C++) or as is, interned. */
const char *sym_intern_symbol(struct mp_symbolizer *s, const char *name)
{
	const char *r;
	char *d;
	int status = -1;

	if (!name)
		return NULL;
	if (name[0] != '_' || name[1] != 'Z')
		return sym_intern(s, name);
	d = __cxa_demangle(name, NULL, NULL, &status);
	r = sym_intern(s, status == 0 && d ? d : name);
	free(d);
	return r;
}
static struct result *resolve_jit(struct mp_symbolizer *s, struct proc *p, uint64_t pc)
{
	const struct perfmap_sym *sym = sym_perfmap_find(&p->perfmap, pc);
	struct memprof_location loc = { 0 };

	if (!sym && !p->gone) {
		sym_perfmap_open(p);	/* created after the snapshot */
		sym_perfmap_update(s, &p->perfmap);
		sym = sym_perfmap_find(&p->perfmap, pc);
	}
	if (!sym)
		return NULL;
	s->st.perfmap_hits++;
	loc.filename = sym_intern(s, "[jit]");
	loc.defname = sym->name;
	return loc.filename ? sym_result_new(s, &loc, 1, NULL, NULL) : NULL;
}

static struct result *resolve_mapping(struct mp_symbolizer *s, struct proc *p, struct proc_map *pm,
				      uint64_t pc)
{
	struct memprof_location loc = { 0 };
	struct result *r;
	uint64_t off = pc - pm->start + pm->pgoff, vaddr;

	if (pm->mod && sym_module_vaddr(pm->mod, off, &vaddr)) {
		r = hmap_get(&s->results, (uintptr_t)pm->mod->key, vaddr);
		if (r) {
			s->st.result_hits++;
			return r;
		}
		lru_touch(&s->mod_lru, &pm->mod->lru);
		r = sym_lookup_module(s, pm->mod, vaddr);
		if (r && hmap_put(&s->results, (uintptr_t)pm->mod->key, vaddr, r))
			r = NULL;
		return r;
	}
	if (pm->name[0] != '/') {
		r = resolve_jit(s, p, pc);
		if (r)
			return r;
	}
	/* Anonymous code (JIT), an object that could not be opened: name+offset in the mapping. */
	s->st.unknown++;
	loc.filename = pm->name[0] == '/' ? sym_intern(s, basename_of(pm->name)) : pm->name;
	if (pm->name[0] == '/')
		loc.defname = sym_internf(s, "%s+0x%" PRIx64, loc.filename, off);
	else
		loc.defname = sym_internf(s, "%s+0x%" PRIx64, pm->name, pc - pm->start);
	if (!loc.filename || !loc.defname)
		return NULL;
	return sym_result_new(s, &loc, 1, NULL, pm->name[0] == '/' ? pm->name : NULL);
}

/* An address in no mapping: "0x<addr>" in "[unknown]", shared by all processes. */
static struct result *resolve_unmapped(struct mp_symbolizer *s, uint64_t pc)
{
	struct memprof_location loc = { 0 };
	struct result *r = hmap_get(&s->unknowns, pc | 1ULL << 63, 0);

	s->st.unknown++;
	if (r)
		return r;
	loc.filename = sym_intern(s, "[unknown]");
	loc.defname = sym_internf(s, "0x%" PRIx64, pc);
	if (!loc.filename || !loc.defname)
		return NULL;
	r = sym_result_new(s, &loc, 1, NULL, NULL);
	if (r && hmap_put(&s->unknowns, pc | 1ULL << 63, 0, r))
		return NULL;
	return r;
}

int mp_symbolizer__resolve(struct mp_symbolizer *s, pid_t pid, uint64_t addr, int is_return_addr,
			   struct mp_frame *out)
{
	uint64_t pc = is_return_addr && addr ? addr - 1 : addr;
	bool fresh = false, final;
	struct proc_map *pm;
	struct result *r;
	struct proc *p;
	int err = 0;

	s->st.resolves++;
	p = sym_proc_get(s, pid, &err, &fresh);
	if (!p)
		return err;
	r = pc ? hmap_get(&p->addrs, pc, 0) : NULL;
	if (r) {
		s->st.addr_hits++;
		*out = r->frame;
		return 0;
	}
	if (over_budget(s)) {
		s->st.nospace++;
		return -ENOSPC;
	}
	pm = sym_proc_lookup(s, p, pc, fresh, &final);
	r = pm ? resolve_mapping(s, p, pm, pc) : resolve_unmapped(s, pc);
	if (!r)
		return -ENOMEM;
	if (pc && final) {
		if (p->addrs.len >= s->opts.max_addrs) {
			mp_hashmap__clear(&p->addrs);
			s->st.addr_cache_resets++;
		}
		if (hmap_put(&p->addrs, pc, 0, r))
			return -ENOMEM;
	}
	*out = r->frame;
	return 0;
}

static void mapping_info(const struct proc_map *pm, struct mp_mapping_info *out)
{
	const struct load_seg *sg;

	*out = (struct mp_mapping_info){ .start = pm->start, .end = pm->end, .pgoff = pm->pgoff,
					 .path = pm->name, .fd = -1 };
	sg = pm->mod ? sym_module_seg(pm->mod, pm->pgoff, pm->pgoff + (pm->end - pm->start)) : NULL;
	if (sg) {
		out->build_id = pm->mod->build_id;
		out->fd = pm->mod->fd;
		out->bias = (int64_t)(pm->start - pm->pgoff + sg->offset - sg->vaddr);
	}
}

int mp_symbolizer__mapping(struct mp_symbolizer *s, pid_t pid, uint64_t addr,
			   struct mp_mapping_info *out)
{
	bool fresh = false, final;
	struct proc_map *pm;
	struct proc *p;
	int err = 0;

	p = sym_proc_get(s, pid, &err, &fresh);
	if (!p)
		return err;
	pm = sym_proc_lookup(s, p, addr, fresh, &final);
	if (!pm)
		return -ENOENT;
	mapping_info(pm, out);
	return 0;
}

int mp_symbolizer__mappings(struct mp_symbolizer *s, pid_t pid,
			    int (*fn)(void *ctx, const struct mp_mapping_info *m), void *ctx,
			    uint64_t *generation)
{
	struct mp_mapping_info mi;
	bool fresh = false;
	struct proc *p;
	int err = 0;

	p = sym_proc_get(s, pid, &err, &fresh);
	if (!p)
		return err;
	if (generation)
		*generation = p->generation;
	for (size_t i = 0; i < p->nmaps; i++) {
		mapping_info(&p->maps[i], &mi);
		err = fn(ctx, &mi);
		if (err)
			return err;
	}
	return 0;
}

int mp_symbolizer__snapshot(struct mp_symbolizer *s, pid_t pid)
{
	bool fresh = false;
	int err = 0;
	struct proc *p = sym_proc_get(s, pid, &err, &fresh);

	if (!p || fresh || p->gone)
		return err;	/* 0 unless there is no process */
	err = sym_proc_read_maps(s, p);
	if (err == -ESRCH) {
		p->gone = true;
		return 0;
	}
	return err;
}

uint64_t mp_symbolizer__generation(struct mp_symbolizer *s, pid_t pid)
{
	struct proc *p = hmap_get(&s->procs, (uint64_t)pid + 1, 0);

	return p ? p->generation : 0;
}

bool mp_symbolizer__image_is(struct mp_symbolizer *s, pid_t pid, uint64_t image,
			     uint64_t time_ns)
{
	bool fresh = false;
	struct proc *p;
	int err = 0;

	p = sym_proc_get(s, pid, &err, &fresh);
	if (!p || !image || !p->image || p->image == image)
		return true;
	if (!fresh && !p->gone && p->read_ns < time_ns && sym_proc_read_maps(s, p) == -ESRCH)
		p->gone = true;
	return !p->image || p->image == image;
}

void mp_symbolizer__forget(struct mp_symbolizer *s, pid_t pid)
{
	struct proc *p = s ? hmap_get(&s->procs, (uint64_t)pid + 1, 0) : NULL;

	if (p)
		sym_proc_free(s, p);
}

void mp_symbolizer__stats(const struct mp_symbolizer *s, struct mp_symbolizer_stats *out)
{
	*out = s->st;
	out->modules = s->nmodules;
	out->procs = s->nprocs;
}

struct mp_symbolizer *mp_symbolizer__new_opts(const struct mp_symbolizer_opts *opts)
{
	struct mp_symbolizer *s;

	if (opts && opts->sz < sizeof(size_t)) {
		errno = EINVAL;
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	if (opts)
		memcpy(&s->opts, opts,
		       opts->sz < sizeof(s->opts) ? opts->sz : sizeof(s->opts));
	s->opts.sz = sizeof(s->opts);
	if (!s->opts.max_modules)
		s->opts.max_modules = 256;
	if (!s->opts.max_procs)
		s->opts.max_procs = 4096;
	if (!s->opts.max_addrs)
		s->opts.max_addrs = 65536;
	if (!s->opts.max_bytes)
		s->opts.max_bytes = 256u << 20;
	if (!s->opts.reread_ms)
		s->opts.reread_ms = 100;
	if (s->opts.debuginfo_path) {
		s->debuginfo_path = strdup(s->opts.debuginfo_path);
		if (!s->debuginfo_path) {
			free(s);
			errno = ENOMEM;
			return NULL;
		}
	}
	s->opts.debuginfo_path = s->debuginfo_path;
	s->cbs.find_elf = dwfl_build_id_find_elf;
	s->cbs.find_debuginfo = mp_find_debuginfo;
	s->cbs.section_address = dwfl_offline_section_address;
	s->cbs.debuginfo_path = &s->debuginfo_path;
	elf_version(EV_CURRENT);
	return s;
}

struct mp_symbolizer *mp_symbolizer__new(void)
{
	return mp_symbolizer__new_opts(NULL);
}

void mp_symbolizer__free(struct mp_symbolizer *s)
{
	struct chunk *c, *next;

	if (!s)
		return;
	while (s->proc_lru.head)
		sym_proc_free(s, lru_entry(s->proc_lru.head, struct proc));
	while (s->mod_lru.head)
		sym_module_free(s, lru_entry(s->mod_lru.head, struct module));
	mp_hashmap__clear(&s->procs);
	mp_hashmap__clear(&s->mods_by_key);
	mp_hashmap__clear(&s->mods_by_ino);
	mp_hashmap__clear(&s->results);
	mp_hashmap__clear(&s->unknowns);
	mp_hashmap__clear(&s->strings);
	for (c = s->chunks; c; c = next) {
		next = c->next;
		free(c);
	}
	free(s->debuginfo_path);
	free(s);
}
