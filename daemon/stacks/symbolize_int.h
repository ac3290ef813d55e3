/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The symbolizer's internals, shared by its files (the data flow is described in symbolize.c):
 *   symbolize.c  the arena, interned strings, resolution of an address, the public API
 *   objects.c    objects (executables, libraries): opened, identified, cached, loaded, debuginfo
 *   lookup.c     an address of one object -> its locations (DWARF, inlines, ELF symbols)
 *   procmaps.c   a process' snapshot of its executable mappings, its JIT perf map
 * Not an interface: only daemon/stacks/ and its unit tests include it.
 */
#ifndef MEMPROFD_SYMBOLIZE_INT_H
#define MEMPROFD_SYMBOLIZE_INT_H

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

#include "daemon/stacks/lru.h"
#include "daemon/stacks/symbolize.h"
#include "daemon/probe/target_open.h"
#include "userspace-lib/array.h"
#include "userspace-lib/hashmap.h"

/* From libstdc++ (C++ ABI); declared here to keep this file C. */
extern char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

#define MP_MAX_INLINE_DEPTH	64	/* locations per code; memtrace allows 255 */

/* The maps hold pointers. */
static inline void *hmap_get(const struct mp_hashmap *m, uint64_t k1, uint64_t k2)
{
	uint64_t *v = mp_hashmap__find(m, k1, k2);

	return v ? (void *)(uintptr_t)*v : NULL;
}

static inline int hmap_put(struct mp_hashmap *m, uint64_t k1, uint64_t k2, void *val)
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
	uint64_t image;			/* mm->start_stack the maps were read in, 0 unknown */
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

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static inline const char *basename_of(const char *path)
{
	const char *b = strrchr(path, '/');

	return b ? b + 1 : path;
}

/*
 * In the @n elements of @base, @size bytes each and sorted by the u64 at @key_off, the number
 * whose key is <= @key: the index of the first element starting after @key.
 */
static inline size_t sym_upper_bound(const void *base, size_t n, size_t size, size_t key_off,
				     uint64_t key)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		uint64_t k;

		memcpy(&k, (const char *)base + mid * size + key_off, sizeof(k));
		if (k <= key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* sym_upper_bound() over the array @arr of @n elements, sorted by their u64 member @field. */
#define SYM_UPPER_BOUND(arr, n, field, key)                                                   \
	({                                                                                     \
		_Static_assert(sizeof((arr)->field) == sizeof(uint64_t), "a u64 key");         \
		sym_upper_bound((arr), (n), sizeof(*(arr)), offsetof(typeof(*(arr)), field),   \
				(key));                                                        \
	})

/* symbolize.c */
void *sym_arena_alloc(struct mp_symbolizer *s, size_t n);
const char *sym_intern(struct mp_symbolizer *s, const char *p);
const char *sym_internf(struct mp_symbolizer *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
const char *sym_intern_symbol(struct mp_symbolizer *s, const char *name);

/* objects.c */
void sym_module_free(struct mp_symbolizer *s, struct module *m);
void sym_module_unref(struct mp_symbolizer *s, struct module *m);
struct module *sym_module_get(struct mp_symbolizer *s, pid_t pid, const char *path,
			      dev_t dev, ino_t ino, uint64_t start, uint64_t end);
int sym_module_load(struct mp_symbolizer *s, struct module *m);
const struct load_seg *sym_module_seg(const struct module *m, uint64_t lo, uint64_t hi);
bool sym_module_vaddr(const struct module *m, uint64_t off, uint64_t *vaddr);

/* lookup.c */
void sym_cu_indexes_free(struct module *m);
struct result *sym_result_new(struct mp_symbolizer *s, const struct memprof_location *locs,
			      unsigned int n, const struct module *m, const char *object);
struct result *sym_lookup_module(struct mp_symbolizer *s, struct module *m, uint64_t vaddr);

/* procmaps.c */
void sym_perfmap_open(struct proc *p);
void sym_perfmap_update(struct mp_symbolizer *s, struct perfmap *pm);
const struct perfmap_sym *sym_perfmap_find(struct perfmap *pm, uint64_t pc);
void sym_proc_free(struct mp_symbolizer *s, struct proc *p);
int sym_proc_read_maps(struct mp_symbolizer *s, struct proc *p);
struct proc *sym_proc_get(struct mp_symbolizer *s, pid_t pid, int *err, bool *created);
struct proc_map *sym_proc_lookup(struct mp_symbolizer *s, struct proc *p, uint64_t pc,
				 bool fresh, bool *final);

#endif
