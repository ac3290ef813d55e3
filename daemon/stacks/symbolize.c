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
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <zlib.h>

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <gelf.h>
#include <libelf.h>

#include "daemon/stacks/symbolize.h"
#include "daemon/probe/target_open.h"
#include "userspace-lib/hashmap.h"

/* From libstdc++ (C++ ABI); declared here to keep this file C. */
extern char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

#define MP_MAX_INLINE_DEPTH	64	/* locations per code; memtrace allows 255 */

/* The maps hold pointers. */
static void *hmap_get(const struct mp_hashmap *m, uint64_t k1, uint64_t k2)
{
	uint64_t *v = mp_hashmap__find(m, k1, k2);

	return v ? (void *)(uintptr_t)*v : NULL;
}

static int hmap_put(struct mp_hashmap *m, uint64_t k1, uint64_t k2, void *val)
{
	return mp_hashmap__put(m, k1, k2, (uintptr_t)val);
}

/* ---------------------------------------------------------------------------------------------
 * Arena: results and interned strings, freed all at once.
 */
struct chunk {
	struct chunk *next;
	size_t used, size;
	char data[];
};

#define CHUNK_SIZE	(64 * 1024)

struct module;

/* What the caller gets; mp_frame points into it. */
struct result {
	struct mp_frame frame;
	struct memprof_location locs[];
};

struct proc_map {
	uint64_t start, end, pgoff;
	const char *name;		/* interned path, "[anon]", "[vdso]"... */
	struct module *mod;		/* referenced; NULL if anonymous or unopenable */
};

/*
 * A JIT's perf map, /tmp/perf-<pid>.map in the process' mount namespace ("START SIZE name" per
 * line, hex; written by node --perf-basic-prof, Java agents, python3.12 -X perf, LuaJIT...):
 * names for code in anonymous memory. Opened with the first snapshot (so it outlives the
 * process), read incrementally as it grows.
 */
struct perfmap_sym {
	uint64_t start, end;
	uint64_t seq;			/* offset of the line: a later line wins */
	const char *name;
};

struct perfmap {
	int fd;				/* -1: none found (yet) */
	uint64_t parsed;		/* bytes of the file parsed (whole lines) */
	bool skipping;			/* inside a line longer than the read buffer */
	struct perfmap_sym *syms;
	size_t n, cap;
	bool sorted;
};

#define MP_PERFMAP_MAX	(1u << 20)	/* symbols per process */

/* An intrusive list in least-recently-used order: most recent at the head. */
struct lru_node {
	struct lru_node *prev, *next;
};

struct lru_list {
	struct lru_node *head, *tail;
};

/* The object holding @n (NULL-safe). */
#define lru_entry(n, type) ((n) ? (type *)((char *)(n) - offsetof(type, lru)) : (type *)NULL)

struct proc {
	pid_t pid;
	bool gone;			/* maps could no longer be read */
	struct perfmap perfmap;
	struct proc_map *maps;		/* executable mappings, sorted by start */
	size_t nmaps;
	struct mp_hashmap addrs;	/* pc -> struct result */
	struct mp_hashmap misses;	/* pcs unmapped after a re-read: not re-read again */
	uint64_t read_ns;		/* when the maps were last read */
	uint64_t generation;		/* of the snapshot, from mp_symbolizer.generation */
	struct lru_node lru;
};

struct load_seg {
	uint64_t offset, vaddr, filesz;
	uint32_t flags;
};

struct module {
	const char *key;		/* interned: build-id hex, or "file:dev:ino:size:mtime" */
	const char *build_id;		/* interned hex or NULL */
	const char *path;		/* interned path as first seen in a process' maps */
	const char *base;		/* interned basename of path */
	dev_t maps_dev;			/* identity in /proc/PID/maps, for lookups w/o opening */
	ino_t maps_ino;
	int fd;
	Elf *elf;
	struct load_seg *segs;
	size_t nsegs;
	unsigned int refs;		/* proc_maps pointing here */
	/* The libdwfl session, loaded on first lookup, unloaded by LRU. */
	Dwfl *dwfl;
	Dwfl_Module *dmod;
	GElf_Addr bias;			/* dwfl module address - ELF vaddr */
	bool dwfl_failed;
	struct mp_hashmap cu_index;	/* CU DIE offset + 1 -> struct cu_index */
	/* Function symbols sorted by address (built on the first symbol lookup: libdwfl's
	 * dwfl_module_addrinfo() searches linearly); names point into the session's ELF. */
	struct sym_ent *syms;
	size_t nsyms;
	bool syms_built;
	struct lru_node lru;		/* all modules, most recent first */
};

struct sym_ent {
	GElf_Addr start, end;		/* module addresses (bias applied); end == start: unsized */
	const char *name;
	unsigned int rank;		/* 0 global, 1 weak, 2 local: the preferred alias first */
};

struct mp_symbolizer {
	struct mp_symbolizer_opts opts;
	char *debuginfo_path;
	Dwfl_Callbacks cbs;
	/* arena */
	struct chunk *chunks;
	struct mp_hashmap strings;	/* hash of the bytes -> interned string */
	/* objects */
	struct mp_hashmap mods_by_key;	/* (key ptr) -> module */
	struct mp_hashmap mods_by_ino;	/* (dev|1<<63, ino) -> module */
	struct lru_list mod_lru;
	unsigned int nmodules, nloaded;
	/* shared results */
	struct mp_hashmap results;	/* (module key ptr, vaddr) -> result */
	struct mp_hashmap unknowns;	/* (pc | 1 << 63) -> result for unmapped addresses */
	/* processes */
	struct mp_hashmap procs;	/* (pid + 1) -> proc */
	struct lru_list proc_lru;
	unsigned int nprocs;
	uint64_t generation;		/* last snapshot generation handed out */
	struct mp_symbolizer_stats st;
};

static void *arena_alloc(struct mp_symbolizer *s, size_t n)
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
	str = arena_alloc(s, n + 1);
	if (!str)
		return NULL;
	memcpy(str, p, n);
	str[n] = 0;
	if (mp_hashmap__add_eq(&s->strings, h, (uintptr_t)str))
		return NULL;
	return str;
}

static const char *intern(struct mp_symbolizer *s, const char *p)
{
	return p ? intern_n(s, p, strlen(p)) : NULL;
}

static const char *internf(struct mp_symbolizer *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static const char *internf(struct mp_symbolizer *s, const char *fmt, ...)
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

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static const char *basename_of(const char *path)
{
	const char *b = strrchr(path, '/');

	return b ? b + 1 : path;
}

/* Demangled (C++) or as is, interned. */
static const char *intern_symbol(struct mp_symbolizer *s, const char *name)
{
	const char *r;
	char *d;
	int status = -1;

	if (!name)
		return NULL;
	if (name[0] != '_' || name[1] != 'Z')
		return intern(s, name);
	d = __cxa_demangle(name, NULL, NULL, &status);
	r = intern(s, status == 0 && d ? d : name);
	free(d);
	return r;
}

/* ---------------------------------------------------------------------------------------------
 * Objects
 */
static void lru_unlink(struct lru_list *l, struct lru_node *n)
{
	if (n->prev)
		n->prev->next = n->next;
	else
		l->head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	else
		l->tail = n->prev;
	n->prev = n->next = NULL;
}

static void lru_push(struct lru_list *l, struct lru_node *n)
{
	n->prev = NULL;
	n->next = l->head;
	if (l->head)
		l->head->prev = n;
	l->head = n;
	if (!l->tail)
		l->tail = n;
}

/* @n was just used: move it to the head. */
static void lru_touch(struct lru_list *l, struct lru_node *n)
{
	if (l->head != n) {
		lru_unlink(l, n);
		lru_push(l, n);
	}
}

static void cu_indexes_free(struct module *m);

static void module_unload(struct mp_symbolizer *s, struct module *m)
{
	cu_indexes_free(m);
	free(m->syms);
	m->syms = NULL;
	m->nsyms = 0;
	m->syms_built = false;
	if (m->dwfl) {
		dwfl_end(m->dwfl);
		m->dwfl = NULL;
		m->dmod = NULL;
		s->nloaded--;
	}
	m->dwfl_failed = false;
}

static void module_free(struct mp_symbolizer *s, struct module *m)
{
	uint64_t dev = (uint64_t)m->maps_dev | 1ULL << 63;

	module_unload(s, m);
	lru_unlink(&s->mod_lru, &m->lru);
	mp_hashmap__remove(&s->mods_by_key, (uintptr_t)m->key, 0);
	if (hmap_get(&s->mods_by_ino, dev, m->maps_ino) == m)
		mp_hashmap__remove(&s->mods_by_ino, dev, m->maps_ino);
	if (m->elf)
		elf_end(m->elf);
	if (m->fd >= 0)
		close(m->fd);
	free(m->segs);
	free(m);
	s->nmodules--;
}

/* Enforce the limits, least recently used first: unload libdwfl sessions beyond max_modules,
 * free objects no process refers to beyond max_modules. */
static void modules_trim(struct mp_symbolizer *s, struct module *keep)
{
	struct module *m, *prev;

	for (m = lru_entry(s->mod_lru.tail, struct module); m && s->nloaded > s->opts.max_modules;
	     m = lru_entry(m->lru.prev, struct module)) {
		if (m != keep && m->dwfl) {
			module_unload(s, m);
			s->st.modules_unloaded++;
		}
	}
	for (m = lru_entry(s->mod_lru.tail, struct module); m && s->nmodules > s->opts.max_modules;
	     m = prev) {
		prev = lru_entry(m->lru.prev, struct module);
		if (m != keep && !m->refs)
			module_free(s, m);
	}
}

static void module_unref(struct mp_symbolizer *s, struct module *m)
{
	if (m && !--m->refs)
		modules_trim(s, NULL);
}

/* Hex of the object's NT_GNU_BUILD_ID note, interned, or NULL. */
static const char *read_build_id(struct mp_symbolizer *s, Elf *elf)
{
	const void *id;
	ssize_t n = dwelf_elf_gnu_build_id(elf, &id);
	char hex[2 * 64 + 1];

	if (n <= 0)
		return NULL;
	if (n > 64)
		n = 64;
	for (ssize_t i = 0; i < n; i++)
		snprintf(hex + 2 * i, 3, "%02x", ((const unsigned char *)id)[i]);
	return intern(s, hex);
}

static int read_segments(Elf *elf, struct load_seg **out, size_t *nout)
{
	size_t phnum, n = 0;
	struct load_seg *segs;

	if (elf_getphdrnum(elf, &phnum))
		return -EINVAL;
	segs = calloc(phnum ? phnum : 1, sizeof(*segs));
	if (!segs)
		return -ENOMEM;
	for (size_t i = 0; i < phnum; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD)
			continue;
		segs[n++] = (struct load_seg){ ph.p_offset, ph.p_vaddr, ph.p_filesz, ph.p_flags };
	}
	*out = segs;
	*nout = n;
	return 0;
}

/* Open a mapped file the way the process sees it (its mount namespace, deleted files):
 * map_files gives the mapped file itself (it needs CAP_SYS_ADMIN, which the unit does not
 * grant); else its name in the process' root, then in ours, if it is still that file. */
static int open_mapped(pid_t pid, const char *path, ino_t ino, uint64_t start, uint64_t end)
{
	char buf[PATH_MAX + 64];
	int fd;

	snprintf(buf, sizeof(buf), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, (int)pid, start, end);
	fd = open(buf, O_RDONLY | O_CLOEXEC);
	if (fd >= 0)
		return fd;
	fd = mp_target_open(pid, path, mp_same_inode, &ino);
	if (fd >= 0)
		return fd;
	fd = mp_target_open(0, path, mp_same_inode, &ino);
	return fd < 0 ? -1 : fd;
}

/* The object behind a file mapping: found by maps identity, else opened and found by build-id,
 * else created. NULL if the file cannot be opened or is not ELF (counted). */
static struct module *module_get(struct mp_symbolizer *s, pid_t pid, const char *path,
				 dev_t dev, ino_t ino, uint64_t start, uint64_t end)
{
	struct module *m = hmap_get(&s->mods_by_ino, (uint64_t)dev | 1ULL << 63, ino);
	const char *build_id, *key;
	struct stat stb;
	Elf *elf;
	int fd;

	if (m)
		return m;
	fd = open_mapped(pid, path, ino, start, end);
	if (fd < 0)
		goto fail;
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF || fstat(fd, &stb)) {
		if (elf)
			elf_end(elf);
		close(fd);
		goto fail;
	}
	build_id = read_build_id(s, elf);
	if (build_id)
		key = build_id;
	else
		key = internf(s, "file:%ju:%ju:%jd:%jd.%09ld", (uintmax_t)stb.st_dev,
			      (uintmax_t)stb.st_ino, (intmax_t)stb.st_size,
			      (intmax_t)stb.st_mtim.tv_sec, stb.st_mtim.tv_nsec);
	m = key ? hmap_get(&s->mods_by_key, (uintptr_t)key, 0) : NULL;
	if (m || !key) {
		/* Same object under another identity (hard link, bind mount, container). */
		elf_end(elf);
		close(fd);
		if (!m)
			goto fail;
		return m;
	}
	m = calloc(1, sizeof(*m));
	if (!m || read_segments(elf, &m->segs, &m->nsegs)) {
		free(m);
		elf_end(elf);
		close(fd);
		goto fail;
	}
	m->key = key;
	m->build_id = build_id;
	m->path = intern(s, path);
	m->base = intern(s, basename_of(path));
	m->maps_dev = dev;
	m->maps_ino = ino;
	m->fd = fd;
	m->elf = elf;
	if (!m->path || !m->base || hmap_put(&s->mods_by_key, (uintptr_t)key, 0, m) ||
	    hmap_put(&s->mods_by_ino, (uint64_t)dev | 1ULL << 63, ino, m)) {
		mp_hashmap__remove(&s->mods_by_key, (uintptr_t)key, 0);
		free(m->segs);
		free(m);
		elf_end(elf);
		close(fd);
		goto fail;
	}
	lru_push(&s->mod_lru, &m->lru);
	s->nmodules++;
	s->st.objects_opened++;
	return m;
fail:
	s->st.objects_failed++;
	return NULL;
}

static int module_load(struct mp_symbolizer *s, struct module *m)
{
	Dwfl_Module *dm;
	int fd;

	if (m->dwfl)
		return 0;
	if (m->dwfl_failed)
		return -ENOENT;
	m->dwfl = dwfl_begin(&s->cbs);
	if (!m->dwfl)
		goto fail;
	fd = fcntl(m->fd, F_DUPFD_CLOEXEC, 0);	/* libdwfl consumes it */
	if (fd < 0)
		goto fail;
	dwfl_report_begin(m->dwfl);
	dm = dwfl_report_elf(m->dwfl, m->base, m->path, fd, 0, false);
	if (!dm) {
		close(fd);
		goto fail;
	}
	if (s->debuginfo_path) {	/* for mp_find_debuginfo() */
		void **ud;

		if (dwfl_module_info(dm, &ud, NULL, NULL, NULL, NULL, NULL, NULL))
			*ud = s->debuginfo_path;
	}
	if (dwfl_report_end(m->dwfl, NULL, NULL) || !dwfl_module_getelf(dm, &m->bias))
		goto fail;
	m->dmod = dm;
	s->nloaded++;
	s->st.modules_loaded++;
	modules_trim(s, m);
	return 0;
fail:
	if (m->dwfl)
		dwfl_end(m->dwfl);
	m->dwfl = NULL;
	m->dwfl_failed = true;
	return -ENOENT;
}

/* The PT_LOAD overlapping file offsets [@lo, @hi), executable segments first (a page may hold
 * the end of one segment and the start of the next). */
static const struct load_seg *module_seg(const struct module *m, uint64_t lo, uint64_t hi)
{
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < m->nsegs; i++) {
			const struct load_seg *sg = &m->segs[i];

			if (!pass != !!(sg->flags & PF_X))
				continue;
			if (lo < sg->offset + sg->filesz && hi > sg->offset)
				return sg;
		}
	}
	return NULL;
}

/* ELF virtual address of file offset @off. */
static bool module_vaddr(const struct module *m, uint64_t off, uint64_t *vaddr)
{
	const struct load_seg *sg = module_seg(m, off, off + 1);

	if (!sg)
		return false;
	*vaddr = off - sg->offset + sg->vaddr;
	return true;
}

/* ---------------------------------------------------------------------------------------------
 * Lookups in one object
 */
struct loc_builder {
	struct memprof_location locs[MP_MAX_INLINE_DEPTH];
	unsigned int n;		/* innermost first while building */
};

/*
 * A function's name: the demangled linkage name for C++ (and Rust legacy mangling), whose
 * DW_AT_name is unqualified; DW_AT_name otherwise, since a C linkage name is an asm label
 * (glibc's "__GI___libc_malloc" for __libc_malloc).
 */
static const char *die_name(struct mp_symbolizer *s, Dwarf_Die *die)
{
	Dwarf_Attribute a;
	const char *name;

	name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &a));
	if (!name)
		name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &a));
	if (name && name[0] == '_' && name[1] == 'Z')
		return intern_symbol(s, name);
	name = dwarf_diename(die);
	return name ? intern(s, name) : NULL;
}

static uint32_t die_udata(Dwarf_Die *die, int at)
{
	Dwarf_Attribute a;
	Dwarf_Word w;

	if (dwarf_formudata(dwarf_attr(die, at, &a), &w))
		return 0;
	return w > UINT32_MAX ? UINT32_MAX : (uint32_t)w;
}

/*
 * Per-CU index of the functions (DW_TAG_subprogram with code) by address range, so that finding
 * the function of a pc costs a binary search rather than dwarf_getscopes()' walk over the CU's
 * DIEs (large C++ CUs have tens of thousands). Built on first use of a CU, freed on unload.
 */
struct fn_range {
	uint64_t lo, hi;		/* [lo, hi) in CU (DWARF) addresses */
	Dwarf_Die die;
};

struct cu_index {
	struct fn_range *r;
	size_t n, cap;
};

#define MP_MAX_SCOPE_DEPTH	256	/* nested blocks and inlines walked below a function */

static int cu_index_add(struct cu_index *ix, uint64_t lo, uint64_t hi, const Dwarf_Die *die)
{
	if (ix->n == ix->cap) {
		size_t ncap = ix->cap ? ix->cap * 2 : 64;
		struct fn_range *nr = reallocarray(ix->r, ncap, sizeof(*nr));

		if (!nr)
			return -ENOMEM;
		ix->r = nr;
		ix->cap = ncap;
	}
	ix->r[ix->n++] = (struct fn_range){ lo, hi, *die };
	return 0;
}

/* Functions below @parent, through namespaces and classes (C++ methods defined in the class),
 * not into functions (a GNU C nested function is left to dwarf_getscopes). */
static int cu_index_walk(struct cu_index *ix, Dwarf_Die *parent, int depth)
{
	Dwarf_Die child;

	if (depth > 32 || dwarf_child(parent, &child) != 0)
		return 0;
	do {
		Dwarf_Addr base, lo, hi;
		ptrdiff_t off = 0;
		int r;

		switch (dwarf_tag(&child)) {
		case DW_TAG_subprogram:
			while ((off = dwarf_ranges(&child, off, &base, &lo, &hi)) > 0)
				if (hi > lo && (r = cu_index_add(ix, lo, hi, &child)))
					return r;
			break;
		case DW_TAG_namespace:
		case DW_TAG_class_type:
		case DW_TAG_structure_type:
		case DW_TAG_union_type:
		case DW_TAG_module:
			r = cu_index_walk(ix, &child, depth + 1);
			if (r)
				return r;
			break;
		default:
			break;
		}
	} while (dwarf_siblingof(&child, &child) == 0);
	return 0;
}

static int fn_range_cmp(const void *a, const void *b)
{
	const struct fn_range *x = a, *y = b;
	Dwarf_Off ox, oy;

	if (x->lo != y->lo)
		return x->lo < y->lo ? -1 : 1;
	/* aliases (glibc's __GI_ names) share a range: the first DIE, as dwarf_getscopes has */
	ox = dwarf_dieoffset((Dwarf_Die *)&x->die);
	oy = dwarf_dieoffset((Dwarf_Die *)&y->die);
	return ox < oy ? -1 : ox > oy;
}

static void cu_indexes_free(struct module *m)
{
	for (size_t i = 0; i < m->cu_index.cap; i++) {
		struct cu_index *ix = (void *)(uintptr_t)m->cu_index.slots[i].val;

		if (ix) {
			free(ix->r);
			free(ix);
		}
	}
	mp_hashmap__clear(&m->cu_index);
}

static struct cu_index *cu_index_get(struct module *m, Dwarf_Die *cudie)
{
	uint64_t key = dwarf_dieoffset(cudie) + 1;
	struct cu_index *ix = hmap_get(&m->cu_index, key, 0);

	if (ix)
		return ix;
	ix = calloc(1, sizeof(*ix));
	if (!ix)
		return NULL;
	if (cu_index_walk(ix, cudie, 0) || hmap_put(&m->cu_index, key, 0, ix)) {
		free(ix->r);
		free(ix);
		return NULL;
	}
	if (ix->n > 1)	/* a CU without functions has no array at all */
		qsort(ix->r, ix->n, sizeof(ix->r[0]), fn_range_cmp);
	return ix;
}

/*
 * The functions containing @pc, innermost first (inlined subroutines, then the subprogram),
 * into @fns (up to @max). From the index: the subprogram by binary search, then down through
 * the blocks and inlined subroutines that contain @pc. Returns how many, 0 if the index does
 * not know @pc.
 */
static int scopes_indexed(struct module *m, Dwarf_Die *cudie, Dwarf_Addr pc, Dwarf_Die *fns,
			  int max)
{
	struct cu_index *ix = cu_index_get(m, cudie);
	Dwarf_Die chain[MP_MAX_SCOPE_DEPTH], cur, child;
	const struct fn_range *fr = NULL;
	size_t lo = 0, hi;
	int n = 0;

	if (!ix || !ix->n)
		return 0;
	hi = ix->n;
	while (lo < hi) {	/* first range starting after pc */
		size_t mid = lo + (hi - lo) / 2;

		if (ix->r[mid].lo <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo > 0 && pc < ix->r[lo - 1].hi)
		fr = &ix->r[lo - 1];
	if (!fr)
		return 0;
	while (fr > ix->r && fr[-1].lo == fr->lo && pc < fr[-1].hi)
		fr--;
	cur = fr->die;
	chain[n++] = cur;
	while (n < MP_MAX_SCOPE_DEPTH && dwarf_child(&cur, &child) == 0) {
		bool found = false;

		do {
			int tag = dwarf_tag(&child);

			if ((tag == DW_TAG_inlined_subroutine || tag == DW_TAG_lexical_block ||
			     tag == DW_TAG_try_block || tag == DW_TAG_catch_block) &&
			    dwarf_haspc(&child, pc) > 0) {
				found = true;
				break;
			}
		} while (dwarf_siblingof(&child, &child) == 0);
		if (!found)
			break;
		cur = child;
		if (dwarf_tag(&cur) == DW_TAG_inlined_subroutine)
			chain[n++] = cur;
	}
	if (n > max)
		n = max;
	for (int i = 0; i < n; i++)
		fns[i] = chain[n - 1 - i];
	return n;
}

/*
 * The same with dwarf_getscopes(), for what the index does not cover. Past an inlined
 * subroutine, dwarf_getscopes() continues with the scopes of its abstract origin (the inline
 * function's definition), not with the function it was inlined into: those come from
 * dwarf_getscopes_die() on the inlined instance.
 */
static int scopes_walked(Dwarf_Die *cudie, Dwarf_Addr pc, Dwarf_Die *fns, int max)
{
	Dwarf_Die *scopes = NULL;
	int n = dwarf_getscopes(cudie, pc, &scopes), k = 0, i = 0;

	while (i < n && k < max) {
		int tag = dwarf_tag(&scopes[i]);

		if (tag == DW_TAG_subprogram) {
			fns[k++] = scopes[i];
			break;
		}
		if (tag != DW_TAG_inlined_subroutine) {
			i++;
			continue;
		}
		fns[k++] = scopes[i];
		/* the concrete scopes around this instance; [0] is the instance itself */
		free(scopes);
		scopes = NULL;
		n = dwarf_getscopes_die(&fns[k - 1], &scopes);
		i = 1;
	}
	free(scopes);
	return k;
}

/*
 * Locations of the functions containing @pc, innermost first: the innermost at the line
 * table's position (already in locs[0]), each enclosing one at the call site
 * (DW_AT_call_file/line/column) of the inlined subroutine it contains.
 */
static void add_inlines(struct mp_symbolizer *s, struct module *m, struct loc_builder *b,
			Dwarf_Die *cudie, Dwarf_Addr pc)
{
	Dwarf_Die fns[MP_MAX_INLINE_DEPTH];
	Dwarf_Files *files = NULL;
	size_t nfiles = 0;
	int n;

	n = scopes_indexed(m, cudie, pc, fns, MP_MAX_INLINE_DEPTH);
	if (!n)
		n = scopes_walked(cudie, pc, fns, MP_MAX_INLINE_DEPTH);
	for (int i = 0; i < n; i++) {
		Dwarf_Die *d = &fns[i];
		struct memprof_location *l;
		uint32_t file;

		b->locs[b->n - 1].defname = die_name(s, d);
		if (dwarf_tag(d) != DW_TAG_inlined_subroutine || b->n >= MP_MAX_INLINE_DEPTH)
			break;
		/* inlined: the next enclosing function is at the call site */
		l = &b->locs[b->n++];
		file = die_udata(d, DW_AT_call_file);
		*l = (struct memprof_location){ 0 };
		l->line = die_udata(d, DW_AT_call_line);
		l->start_char = l->end_char = die_udata(d, DW_AT_call_column);
		if (!files && dwarf_getsrcfiles(cudie, &files, &nfiles))
			files = NULL;
		if (files && file < nfiles)
			l->filename = intern(s, dwarf_filesrc(files, file, NULL, NULL));
		if (!l->filename)
			l->filename = b->locs[0].filename;
		/* its defname: the enclosing function's, next round */
	}
}

/* A result with @n locations, copied from @locs (outermost first) into the arena. */
static struct result *result_new(struct mp_symbolizer *s, const struct memprof_location *locs,
				 unsigned int n, const struct module *m, const char *object)
{
	struct result *r = arena_alloc(s, sizeof(*r) + n * sizeof(r->locs[0]));

	if (!r)
		return NULL;
	memcpy(r->locs, locs, n * sizeof(r->locs[0]));
	r->frame.nlocs = n;
	r->frame.locs = r->locs;
	r->frame.object = m ? m->path : object;
	r->frame.build_id = m ? m->build_id : NULL;
	return r;
}

static int sym_cmp(const void *a, const void *b)
{
	const struct sym_ent *x = a, *y = b;

	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	return x->end > y->end ? -1 : x->end < y->end;	/* sized before unsized */
}

static void syms_build(struct module *m)
{
	int n = dwfl_module_getsymtab(m->dmod);

	m->syms_built = true;
	if (n <= 1)
		return;
	m->syms = calloc((size_t)n, sizeof(*m->syms));
	if (!m->syms)
		return;
	for (int i = 1; i < n; i++) {
		GElf_Addr addr;
		GElf_Sym sym;
		const char *name = dwfl_module_getsym_info(m->dmod, i, &sym, &addr, NULL, NULL,
							   NULL);
		int type = GELF_ST_TYPE(sym.st_info), bind = GELF_ST_BIND(sym.st_info);

		if (!name || !name[0] || sym.st_shndx == SHN_UNDEF ||
		    (type != STT_FUNC && type != STT_GNU_IFUNC))
			continue;
		m->syms[m->nsyms++] = (struct sym_ent){
			.start = addr, .end = addr + sym.st_size, .name = name,
			.rank = bind == STB_GLOBAL ? 0 : bind == STB_WEAK ? 1 : 2,
		};
	}
	qsort(m->syms, m->nsyms, sizeof(*m->syms), sym_cmp);
}

/* The function symbol containing @a (a sized one, else the unsized one just below), or NULL. */
static const char *syms_lookup(struct module *m, GElf_Addr a)
{
	size_t lo = 0, hi, i;

	if (!m->syms_built)
		syms_build(m);
	hi = m->nsyms;
	while (lo < hi) {	/* first entry with start > a */
		size_t mid = lo + (hi - lo) / 2;

		if (m->syms[mid].start <= a)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo)
		return NULL;
	i = lo - 1;
	while (i > 0 && m->syms[i - 1].start == m->syms[i].start)
		i--;		/* the preferred of the aliases at that address */
	if (m->syms[i].end == m->syms[i].start || a < m->syms[i].end)
		return m->syms[i].name;
	/* past its end: an enclosing sized symbol just below (rare), within a few entries */
	for (size_t k = 0; k < 8 && i > 0; k++) {
		i--;
		if (m->syms[i].end > a)
			return m->syms[i].name;
	}
	return NULL;
}

/*
 * Names come from DWARF when there is some (the DIEs of the function and its inlined callees);
 * the ELF symbol tables (.symtab of the object or its debug file, .dynsym, MiniDebugInfo) are
 * asked only for what DWARF did not name, as libdwfl searches them linearly.
 */
static struct result *lookup_module(struct mp_symbolizer *s, struct module *m, uint64_t vaddr)
{
	struct loc_builder b = { .n = 1 };
	struct memprof_location out[MP_MAX_INLINE_DEPTH];
	const char *symname = NULL, *fallback;
	bool dwarf = false, symtab = false;
	Dwarf_Addr a = 0, dbias;
	Dwfl_Line *line;
	Dwarf_Die *cudie;

	s->st.lookups++;
	fallback = internf(s, "%s+0x%" PRIx64, m->base, vaddr);
	if (!fallback)
		return NULL;
	b.locs[0] = (struct memprof_location){ .filename = m->base };
	if (module_load(s, m) == 0) {
		a = vaddr + m->bias;
		/* libdwfl gives an address in a gap between a CU's ranges (code of an object
		 * without debug info linked in, e.g. crt1.o's _start) to the preceding CU, and
		 * the line of its last row: only a CU that covers the address is asked. */
		cudie = dwfl_module_addrdie(m->dmod, a, &dbias);
		if (cudie && dwarf_haspc(cudie, a - dbias) <= 0)
			cudie = NULL;
		line = cudie ? dwfl_module_getsrc(m->dmod, a) : NULL;
		if (line) {
			int lineno = 0, col = 0;
			const char *file = dwfl_lineinfo(line, NULL, &lineno, &col, NULL, NULL);

			if (file) {
				b.locs[0].filename = intern(s, file);
				b.locs[0].line = lineno > 0 ? (uint32_t)lineno : 0;
				b.locs[0].start_char = col > 0 ? (uint32_t)col : 0;
				b.locs[0].end_char = b.locs[0].start_char;
				dwarf = true;
			}
		}
		if (cudie) {
			add_inlines(s, m, &b, cudie, a - dbias);
			dwarf = true;
		}
		if (!b.locs[0].filename)
			b.locs[0].filename = m->base;
	}
	for (unsigned int i = 0; i < b.n; i++) {
		if (b.locs[i].defname)
			continue;
		if (!symtab && m->dmod) {
			const char *sn = syms_lookup(m, a);

			symname = sn ? intern_symbol(s, sn) : NULL;
			symtab = true;
		}
		/* the ELF symbol is the outermost function: inlined ones get it if unnamed */
		b.locs[i].defname = symname ? symname : fallback;
	}
	if (dwarf)
		s->st.dwarf++;
	else if (symname)
		s->st.symtab_only++;
	else
		s->st.unknown++;
	for (unsigned int i = 0; i < b.n; i++) {
		out[i] = b.locs[b.n - 1 - i];
		if (!out[i].filename || !out[i].defname)
			return NULL;	/* interning failed: out of memory */
	}
	return result_new(s, out, b.n, m, NULL);
}

/* ---------------------------------------------------------------------------------------------
 * Processes
 */
static void maps_release(struct mp_symbolizer *s, struct proc_map *maps, size_t n)
{
	for (size_t i = 0; i < n; i++)
		module_unref(s, maps[i].mod);
	free(maps);
}

static void perfmap_close(struct perfmap *pm)
{
	if (pm->fd >= 0)
		close(pm->fd);
	free(pm->syms);
	*pm = (struct perfmap){ .fd = -1 };
}

/* The pid of @pid in its own pid namespace (the number in its perf map's name) and its
 * effective uid. -errno if its status cannot be read. */
static int proc_ids(pid_t pid, pid_t *nspid, uid_t *euid)
{
	char path[64], line[256];
	bool have_uid = false;
	FILE *f;

	*nspid = pid;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		unsigned long ruid, uid;
		char *last;

		if (!strncmp(line, "Uid:", 4) && sscanf(line + 4, "%lu %lu", &ruid, &uid) == 2) {
			*euid = (uid_t)uid;
			have_uid = true;
		}
		if (strncmp(line, "NSpid:", 6))
			continue;
		last = strrchr(line, '\t');
		if (last && strtol(last + 1, NULL, 10) > 0)
			*nspid = (pid_t)strtol(last + 1, NULL, 10);
		break;	/* after Uid: */
	}
	fclose(f);
	return have_uid ? 0 : -EIO;
}

/* A perf map the process may read itself: its effective uid's file, readable by its owner.
 * A file of anyone else (a hard link, a bind mount of a root-only file) is not read. */
static bool owned_by(const struct stat *st, const void *arg)
{
	return st->st_uid == *(const uid_t *)arg && (st->st_mode & S_IRUSR);
}

static void perfmap_open(struct proc *p)
{
	char path[64];
	pid_t nspid;
	uid_t euid;
	int fd;

	if (p->perfmap.fd >= 0 || p->gone || proc_ids(p->pid, &nspid, &euid))
		return;
	snprintf(path, sizeof(path), "/tmp/perf-%d.map", (int)nspid);
	fd = mp_target_open(p->pid, path, owned_by, &euid);
	p->perfmap.fd = fd >= 0 ? fd : -1;
}

static int perfsym_cmp(const void *a, const void *b)
{
	const struct perfmap_sym *x = a, *y = b;

	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int perfmap_add(struct mp_symbolizer *s, struct perfmap *pm, uint64_t start, uint64_t size,
		       const char *name, uint64_t seq)
{
	struct perfmap_sym *sym;

	if (pm->n == MP_PERFMAP_MAX) {
		s->st.perfmap_dropped++;
		return 0;
	}
	if (pm->n == pm->cap) {
		size_t ncap = pm->cap ? pm->cap * 2 : 256;
		struct perfmap_sym *ns = reallocarray(pm->syms, ncap, sizeof(*ns));

		if (!ns)
			return -ENOMEM;
		pm->syms = ns;
		pm->cap = ncap;
	}
	sym = &pm->syms[pm->n];
	sym->name = intern(s, name);
	if (!sym->name)
		return -ENOMEM;
	sym->start = start;
	sym->end = start + size;
	sym->seq = seq;
	pm->n++;
	pm->sorted = false;
	s->st.perfmap_syms++;
	return 0;
}

/* Parse what was appended to the perf map since the last call. */
static void perfmap_update(struct mp_symbolizer *s, struct perfmap *pm)
{
	char buf[16384];
	struct stat st;

	if (pm->fd < 0 || fstat(pm->fd, &st) || !S_ISREG(st.st_mode))
		return;
	while ((uint64_t)st.st_size > pm->parsed) {
		ssize_t n = pread(pm->fd, buf, sizeof(buf) - 1, (off_t)pm->parsed);
		char *line = buf, *nl;

		if (n <= 0)
			return;
		buf[n] = 0;
		if (pm->skipping) {
			nl = memchr(buf, '\n', (size_t)n);
			if (!nl) {
				pm->parsed += (uint64_t)n;
				continue;
			}
			pm->skipping = false;
			line = nl + 1;
		}
		while ((nl = memchr(line, '\n', (size_t)(buf + n - line)))) {
			unsigned long long start, size;
			char *end, *name;
			uint64_t seq;

			*nl = 0;
			start = strtoull(line, &end, 16);
			size = strtoull(end, &name, 16);
			while (*name == ' ' || *name == '\t')
				name++;
			seq = pm->parsed + (uint64_t)(line - buf);
			if (end != line && name != end && *name && size &&
			    perfmap_add(s, pm, start, size, name, seq))
				return;
			line = nl + 1;
		}
		if (line == buf) {
			/* no newline in a full buffer: skip that line */
			pm->skipping = true;
			pm->parsed += (uint64_t)n;
			continue;
		}
		pm->parsed += (uint64_t)(line - buf);
		if ((size_t)n < sizeof(buf) - 1 && line != buf + n)
			break;	/* a partial last line: the writer is not done with it */
	}
}

static const struct perfmap_sym *perfmap_find(struct perfmap *pm, uint64_t pc)
{
	size_t lo = 0, hi;

	if (!pm->n)
		return NULL;
	if (!pm->sorted) {
		qsort(pm->syms, pm->n, sizeof(pm->syms[0]), perfsym_cmp);
		pm->sorted = true;
	}
	hi = pm->n;
	while (lo < hi) {	/* first entry starting after pc */
		size_t mid = lo + (hi - lo) / 2;

		if (pm->syms[mid].start <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* the latest of the entries starting at or before pc that contain it (code reused) */
	for (size_t i = lo, k = 0; i > 0 && k < 64; i--, k++) {
		const struct perfmap_sym *sym = &pm->syms[i - 1];

		if (pc < sym->end)
			return sym;
	}
	return NULL;
}

static void proc_free(struct mp_symbolizer *s, struct proc *p)
{
	mp_hashmap__remove(&s->procs, (uint64_t)p->pid + 1, 0);
	lru_unlink(&s->proc_lru, &p->lru);
	maps_release(s, p->maps, p->nmaps);
	mp_hashmap__clear(&p->addrs);
	mp_hashmap__clear(&p->misses);
	perfmap_close(&p->perfmap);
	free(p);
	s->nprocs--;
}

static int map_cmp(const void *a, const void *b)
{
	const struct proc_map *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

/* Snapshot @p's executable mappings. -ESRCH if the process is gone. */
static int proc_read_maps(struct mp_symbolizer *s, struct proc *p)
{
	struct proc_map *maps = NULL;
	size_t n = 0, cap = 0, len = 0;
	char path[64], *line = NULL;
	FILE *f;
	int r = 0;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)p->pid);
	f = fopen(path, "re");
	if (!f)
		return errno == ENOENT || errno == ESRCH ? -ESRCH : -errno;
	s->st.maps_reads++;
	while (getline(&line, &len, f) > 0) {
		unsigned long long start, end, pgoff, ino;
		unsigned int maj, min;
		char perms[8];
		int name_at = 0;
		char *name, *nl;
		struct proc_map *pm;

		if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %n", &start, &end, perms, &pgoff,
			   &maj, &min, &ino, &name_at) < 7 || !strchr(perms, 'x'))
			continue;
		name = line + name_at;
		nl = strchr(name, '\n');
		if (nl)
			*nl = 0;
		if (n == cap) {
			struct proc_map *nm = reallocarray(maps, cap ? cap * 2 : 64, sizeof(*maps));

			if (!nm) {
				r = -ENOMEM;
				break;
			}
			maps = nm;
			cap = cap ? cap * 2 : 64;
		}
		pm = &maps[n];
		*pm = (struct proc_map){ .start = start, .end = end, .pgoff = pgoff };
		if (name[0] == '/') {
			size_t l = strlen(name);

			if (l > 10 && !strcmp(name + l - 10, " (deleted)"))
				name[l - 10] = 0;
			pm->mod = module_get(s, p->pid, name, makedev(maj, min), (ino_t)ino, start,
					     end);
			if (pm->mod) {
				pm->mod->refs++;
				lru_touch(&s->mod_lru, &pm->mod->lru);
			}
			pm->name = intern(s, name);
		} else {
			pm->name = intern(s, name[0] ? name : "[anon]");
		}
		n++;
		if (!pm->name) {
			r = -ENOMEM;
			break;
		}
	}
	if (!r && ferror(f))
		r = errno == ESRCH ? -ESRCH : -EIO;
	free(line);
	fclose(f);
	if (!r && !n)
		r = -ESRCH;	/* a zombie or kernel thread: nothing mapped */
	if (r) {
		maps_release(s, maps, n);
		return r;
	}
	qsort(maps, n, sizeof(*maps), map_cmp);
	maps_release(s, p->maps, p->nmaps);
	p->maps = maps;
	p->nmaps = n;
	p->generation = ++s->generation;
	p->read_ns = now_ns();
	/* A library unloaded and another loaded in its place would make cached pcs wrong. */
	mp_hashmap__clear(&p->addrs);
	return 0;
}

/* @pid's snapshot, taken now if there is none (*@created set then). */
static struct proc *proc_get(struct mp_symbolizer *s, pid_t pid, int *err, bool *created)
{
	struct proc *p = hmap_get(&s->procs, (uint64_t)pid + 1, 0);
	int r;

	if (p) {
		lru_touch(&s->proc_lru, &p->lru);
		return p;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		*err = -ENOMEM;
		return NULL;
	}
	p->pid = pid;
	p->perfmap.fd = -1;
	r = proc_read_maps(s, p);
	if (!r)
		perfmap_open(p);
	if (r || hmap_put(&s->procs, (uint64_t)pid + 1, 0, p)) {
		maps_release(s, p->maps, p->nmaps);
		mp_hashmap__clear(&p->addrs);
		free(p);
		*err = r ? r : -ENOMEM;
		return NULL;
	}
	lru_push(&s->proc_lru, &p->lru);
	s->nprocs++;
	*created = true;
	while (s->nprocs > s->opts.max_procs && s->proc_lru.tail != &p->lru) {
		proc_free(s, lru_entry(s->proc_lru.tail, struct proc));
		s->st.procs_evicted++;
	}
	return p;
}

static struct proc_map *proc_find(struct proc *p, uint64_t pc)
{
	size_t lo = 0, hi = p->nmaps;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (pc < p->maps[mid].start)
			hi = mid;
		else if (pc >= p->maps[mid].end)
			lo = mid + 1;
		else
			return &p->maps[mid];
	}
	return NULL;
}

/*
 * The mapping of @pc, re-reading the maps on a miss while the process lives (dlopen, JIT code).
 * A pc still unmapped after a re-read is remembered, so it costs one re-read only; re-reads
 * are at most every opts.reread_ms, since garbage return addresses (frame-pointer walks through
 * code without frame pointers) would otherwise each cost one. *@final is false when a re-read
 * was skipped for that reason: the answer may change later, do not cache it.
 */
static struct proc_map *proc_lookup(struct mp_symbolizer *s, struct proc *p, uint64_t pc,
				    bool fresh, bool *final)
{
	struct proc_map *pm = proc_find(p, pc);

	*final = true;
	if (pm || p->gone || hmap_get(&p->misses, pc | 1ULL << 63, 0))
		return pm;
	if (!fresh) {
		if (now_ns() - p->read_ns < (uint64_t)s->opts.reread_ms * 1000000) {
			s->st.rereads_skipped++;
			*final = false;
			return NULL;
		}
		if (proc_read_maps(s, p) == -ESRCH)
			p->gone = true;
		pm = proc_find(p, pc);
	}
	if (!pm) {
		if (p->misses.len >= s->opts.max_addrs)
			mp_hashmap__clear(&p->misses);
		hmap_put(&p->misses, pc | 1ULL << 63, 0, p);	/* best effort: ENOMEM = re-read */
	}
	return pm;
}

/* Code in anonymous memory named by the process' perf map, or NULL. */
static struct result *resolve_jit(struct mp_symbolizer *s, struct proc *p, uint64_t pc)
{
	const struct perfmap_sym *sym = perfmap_find(&p->perfmap, pc);
	struct memprof_location loc = { 0 };

	if (!sym && !p->gone) {
		perfmap_open(p);	/* created after the snapshot */
		perfmap_update(s, &p->perfmap);
		sym = perfmap_find(&p->perfmap, pc);
	}
	if (!sym)
		return NULL;
	s->st.perfmap_hits++;
	loc.filename = intern(s, "[jit]");
	loc.defname = sym->name;
	return loc.filename ? result_new(s, &loc, 1, NULL, NULL) : NULL;
}

static struct result *resolve_mapping(struct mp_symbolizer *s, struct proc *p, struct proc_map *pm,
				      uint64_t pc)
{
	struct memprof_location loc = { 0 };
	struct result *r;
	uint64_t off = pc - pm->start + pm->pgoff, vaddr;

	if (pm->mod && module_vaddr(pm->mod, off, &vaddr)) {
		r = hmap_get(&s->results, (uintptr_t)pm->mod->key, vaddr);
		if (r) {
			s->st.result_hits++;
			return r;
		}
		lru_touch(&s->mod_lru, &pm->mod->lru);
		r = lookup_module(s, pm->mod, vaddr);
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
	loc.filename = pm->name[0] == '/' ? intern(s, basename_of(pm->name)) : pm->name;
	if (pm->name[0] == '/')
		loc.defname = internf(s, "%s+0x%" PRIx64, loc.filename, off);
	else
		loc.defname = internf(s, "%s+0x%" PRIx64, pm->name, pc - pm->start);
	if (!loc.filename || !loc.defname)
		return NULL;
	return result_new(s, &loc, 1, NULL, pm->name[0] == '/' ? pm->name : NULL);
}

/* An address in no mapping: "0x<addr>" in "[unknown]", shared by all processes. */
static struct result *resolve_unmapped(struct mp_symbolizer *s, uint64_t pc)
{
	struct memprof_location loc = { 0 };
	struct result *r = hmap_get(&s->unknowns, pc | 1ULL << 63, 0);

	s->st.unknown++;
	if (r)
		return r;
	loc.filename = intern(s, "[unknown]");
	loc.defname = internf(s, "0x%" PRIx64, pc);
	if (!loc.filename || !loc.defname)
		return NULL;
	r = result_new(s, &loc, 1, NULL, NULL);
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
	p = proc_get(s, pid, &err, &fresh);
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
	pm = proc_lookup(s, p, pc, fresh, &final);
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
	sg = pm->mod ? module_seg(pm->mod, pm->pgoff, pm->pgoff + (pm->end - pm->start)) : NULL;
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

	p = proc_get(s, pid, &err, &fresh);
	if (!p)
		return err;
	pm = proc_lookup(s, p, addr, fresh, &final);
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

	p = proc_get(s, pid, &err, &fresh);
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
	struct proc *p;
	int err = 0;

	p = proc_get(s, pid, &err, &fresh);
	if (!p)
		return err;
	if (fresh || p->gone)
		return 0;
	err = proc_read_maps(s, p);
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

void mp_symbolizer__forget(struct mp_symbolizer *s, pid_t pid)
{
	struct proc *p = s ? hmap_get(&s->procs, (uint64_t)pid + 1, 0) : NULL;

	if (p)
		proc_free(s, p);
}

void mp_symbolizer__stats(const struct mp_symbolizer *s, struct mp_symbolizer_stats *out)
{
	*out = s->st;
	out->modules = s->nmodules;
	out->procs = s->nprocs;
}

/* A separate debug file named by an object: readable by everyone (the object may belong to a
 * user who could not read a file of root's or of another user's that it names). */
static bool world_readable(const struct stat *st, const void *arg)
{
	(void)arg;
	return st->st_mode & S_IROTH;
}

/* Is @fd the debug file of @mod: the same build-id, else the CRC its .gnu_debuglink gives? */
static bool debuginfo_matches(Dwfl_Module *mod, int fd, GElf_Word crc)
{
	const unsigned char *want;
	const void *have;
	GElf_Addr vaddr;
	int nwant = dwfl_module_build_id(mod, &want, &vaddr);
	bool ok = false;

	if (nwant > 0) {
		Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
		ssize_t nhave = elf ? dwelf_elf_gnu_build_id(elf, &have) : -1;

		ok = nhave == nwant && !memcmp(have, want, (size_t)nwant);
		if (elf)
			elf_end(elf);
	} else {
		unsigned char buf[65536];
		uLong c = crc32(0, NULL, 0);
		off_t off = 0;
		ssize_t n;

		while ((n = pread(fd, buf, sizeof(buf), off)) > 0) {
			c = crc32(c, buf, (uInt)n);
			off += n;
		}
		ok = n == 0 && (GElf_Word)c == crc;
	}
	return ok;
}

/*
 * libdwfl's own search, by build-id (the debug directories' .build-id trees, debuginfod), then
 * the name in the object's .gnu_debuglink (or BASENAME.debug), which the object chooses: a
 * plain name (no '/'), looked for where libdwfl would (beside the object, in .debug/ there, and
 * under each absolute debug directory plus the object's directory), and opened by
 * mp_target_open()'s rules: no symlinks, a regular file, readable by everyone, never a FIFO or a
 * device. libdwfl's own search of those names would follow symlinks and block on a FIFO.
 */
int mp_find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
		      const char *file_name, const char *debuglink_file, GElf_Word debuglink_crc,
		      char **debuginfo_file_name)
{
	/* module_load() puts our search path there; NULL: libdwfl's default */
	const char *p = *userdata ? *userdata : ":.debug:/usr/lib/debug";
	char name[NAME_MAX + 1], dir[PATH_MAX], cand[PATH_MAX];
	const char *slash;
	int fd;

	/* no file name: the build-id search and debuginfod only */
	fd = dwfl_standard_find_debuginfo(mod, userdata, modname, base, NULL, NULL, 0,
					  debuginfo_file_name);
	if (fd >= 0) {
		/* libdwfl opens without O_CLOEXEC: our fds must not leak into programs we start */
		fcntl(fd, F_SETFD, FD_CLOEXEC);
		return fd;
	}
	slash = file_name ? strrchr(file_name, '/') : NULL;
	if (!slash || slash == file_name)
		return -1;
	if (debuglink_file)
		snprintf(name, sizeof(name), "%s", debuglink_file);
	else
		snprintf(name, sizeof(name), "%s.debug", slash + 1);
	if (!name[0] || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
		return -1;
	snprintf(dir, sizeof(dir), "%.*s", (int)(slash - file_name), file_name);
	for (;;) {
		size_t len = strcspn(p, ":");
		const char *e = p;
		int n;

		if (*e == '+' || *e == '-') {	/* libdwfl's CRC-check flags */
			e++;
			len--;
		}
		if (!len)
			n = snprintf(cand, sizeof(cand), "%s/%s", dir, name);
		else if (*e == '/')
			n = snprintf(cand, sizeof(cand), "%.*s%s/%s", (int)len, e, dir, name);
		else
			n = snprintf(cand, sizeof(cand), "%s/%.*s/%s", dir, (int)len, e, name);
		if (n > 0 && (size_t)n < sizeof(cand)) {
			fd = mp_target_open(0, cand, world_readable, NULL);
			if (fd >= 0 && debuginfo_matches(mod, fd, debuglink_crc)) {
				*debuginfo_file_name = strdup(cand);
				return fd;
			}
			if (fd >= 0)
				close(fd);
		}
		p += strcspn(p, ":");
		if (!*p++)
			break;
	}
	return -1;
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
		proc_free(s, lru_entry(s->proc_lru.head, struct proc));
	while (s->mod_lru.head)
		module_free(s, lru_entry(s->mod_lru.head, struct module));
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
