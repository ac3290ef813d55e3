/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Symbolization of user-space addresses of a live process with libdw (libdwfl): function
 * names (demangled), source file and line, inlined frames, build-ids, with object+offset when
 * nothing better is known. Modules are cached per build-id and evicted by a limit. Code in
 * anonymous memory is named from the process' JIT perf map (/tmp/perf-PID.map) if it has one.
 *
 * Owner: the stacks/symbols component. The engine (daemon/engine/engine.c) is its user.
 */
#ifndef MEMPROFD_SYMBOLIZE_H
#define MEMPROFD_SYMBOLIZE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <memprof/trace.h>

struct mp_symbolizer;

/* What one address resolves to: the locations of one memtrace location code, outermost first
 * (an inlined callee comes after its caller). Strings are owned by the symbolizer and stay valid
 * until mp_symbolizer__free(). */
struct mp_frame {
	unsigned int nlocs;
	const struct memprof_location *locs;
	const char *object;		/* path of the mapped object, or NULL */
	const char *build_id;		/* hex, or NULL */
};

struct mp_symbolizer *mp_symbolizer__new(void);
void mp_symbolizer__free(struct mp_symbolizer *s);	/* NULL-safe */

/*
 * Resolve @addr in process @pid. @is_return_addr: @addr is a return address (every frame but
 * an exact instruction pointer), so the call instruction before it is what is looked up.
 * Returns 0 and fills *@out, or -errno (-ESRCH: the process is gone and was never seen).
 */
int mp_symbolizer__resolve(struct mp_symbolizer *s, pid_t pid, uint64_t addr, int is_return_addr,
			   struct mp_frame *out);

/* @pid's address space changed (dlopen, exec) or it exited: drop what was cached for it. */
void mp_symbolizer__forget(struct mp_symbolizer *s, pid_t pid);

/*
 * Additions to the drafted API (same owner).
 *
 * Life cycle of what is cached: a process' executable mappings are snapshotted from
 * /proc/PID/maps the first time PID is asked about, and re-read on a miss while PID lives, so
 * events of a process that has exited still resolve (the mapped files are held open). Call
 * mp_symbolizer__forget() once no more events of PID will be resolved (after its exit was
 * processed), or on exec. Objects (executables, libraries) are shared by all processes and
 * identified by build-id; their symbol and DWARF data are loaded lazily and the least recently
 * used are unloaded beyond opts.max_modules. Resolution results are shared by processes that
 * map the same object. Not thread-safe: one thread uses one symbolizer.
 *
 * Memory held for results and strings (which must stay valid until __free) is limited by
 * opts.max_bytes: beyond it, addresses not resolved before fail with -ENOSPC (counted).
 *
 * What a location holds: with DWARF, the function (C++ demangled, with its parameters), the
 * file as the line table names it (e.g. "./malloc/malloc.c"), the line, and the column in both
 * start_char and end_char (0: unknown); inlined callees are separate locations. With symbols
 * only (.symtab, .dynsym, MiniDebugInfo): the symbol, the object's basename, line 0. With
 * nothing: "<basename>+0x<ELF address>". Anonymous code: the JIT perf map's name in "[jit]",
 * else "[anon]+0x<offset in the mapping>". An address in no mapping: "0x<addr>" in "[unknown]".
 */
struct mp_symbolizer_opts {
	size_t sz;			/* sizeof(struct mp_symbolizer_opts) */
	unsigned int max_modules;	/* objects with loaded symbols/DWARF; 0 = 256 */
	unsigned int max_procs;		/* process snapshots; 0 = 4096 (LRU beyond) */
	unsigned int max_addrs;		/* per-process address cache; 0 = 65536 (reset beyond) */
	size_t max_bytes;		/* results + strings; 0 = 256 MiB */
	unsigned int reread_ms;		/* re-read a process' maps on a miss at most this often;
					 * 0 = 100 */
	const char *debuginfo_path;	/* libdwfl's search path; NULL = ":.debug:/usr/lib/debug" */
};

struct mp_symbolizer *mp_symbolizer__new_opts(const struct mp_symbolizer_opts *opts);

/*
 * Take @pid's snapshot now (or re-read it if one is held and the process lives): call it when
 * a process starts being profiled, while it surely lives, and when it is seen mapping new code
 * (dlopen): a miss re-reads the maps by itself, but at most every opts.reread_ms. Returns 0, or
 * -ESRCH if it is gone and was never seen.
 */
int mp_symbolizer__snapshot(struct mp_symbolizer *s, pid_t pid);

struct mp_symbolizer_stats {
	uint64_t resolves;		/* calls to __resolve */
	uint64_t addr_hits;		/* answered from the per-process address cache */
	uint64_t result_hits;		/* answered from the shared (build-id, address) cache */
	uint64_t lookups;		/* symbol/DWARF lookups made */
	uint64_t dwarf;			/* ... of which found DWARF (file:line) */
	uint64_t symtab_only;		/* ... of which found only an ELF symbol */
	uint64_t unknown;		/* no mapping, or nothing known: object+offset or 0xaddr */
	uint64_t maps_reads;		/* /proc/PID/maps snapshots taken */
	uint64_t rereads_skipped;	/* misses not re-read (reread_ms): "0x..." answered */
	uint64_t objects_opened;	/* distinct objects opened */
	uint64_t objects_failed;	/* mapped files that could not be opened */
	uint64_t modules_loaded;	/* libdwfl sessions created */
	uint64_t modules_unloaded;	/* ... evicted by max_modules */
	uint64_t procs_evicted;		/* snapshots dropped by max_procs */
	uint64_t addr_cache_resets;	/* per-process caches cleared by max_addrs */
	uint64_t perfmap_syms;		/* symbols read from JIT perf maps (/tmp/perf-PID.map) */
	uint64_t perfmap_hits;		/* addresses named by them */
	uint64_t perfmap_dropped;	/* symbols beyond the per-process limit (2^20) */
	uint64_t nospace;		/* -ENOSPC: max_bytes reached */
	uint64_t bytes;			/* memory held for results and strings */
	uint64_t modules;		/* objects currently known */
	uint64_t procs;			/* processes currently known */
};

void mp_symbolizer__stats(const struct mp_symbolizer *s, struct mp_symbolizer_stats *out);

/*
 * For the unwinder (daemon/stacks/unwind.c): the snapshot of @pid's executable mappings. An object
 * mapping has @fd (owned by the symbolizer, valid until the snapshot changes) and @bias.
 */
struct mp_mapping_info {
	uint64_t start, end;		/* runtime range of the mapping */
	uint64_t pgoff;			/* file offset of start */
	const char *path;		/* as in /proc/PID/maps; "[anon]", "[vdso]"... otherwise */
	const char *build_id;		/* hex or NULL */
	int fd;				/* the object file, or -1 (anonymous, not openable) */
	int64_t bias;			/* runtime address - ELF virtual address (when fd >= 0) */
};

/*
 * The mapping of @pid containing @addr (snapshotted as __resolve does; re-read once for an
 * address never seen unmapped before). -ENOENT if none, -ESRCH for a pid never seen and gone.
 */
int mp_symbolizer__mapping(struct mp_symbolizer *s, pid_t pid, uint64_t addr,
			   struct mp_mapping_info *out);

/*
 * Call @fn for each executable mapping in @pid's snapshot (taking it if needed), in address
 * order; stops early when @fn returns non-zero and returns that. *@generation (if not NULL)
 * gets a number that changes whenever the snapshot is re-read.
 */
int mp_symbolizer__mappings(struct mp_symbolizer *s, pid_t pid,
			    int (*fn)(void *ctx, const struct mp_mapping_info *m), void *ctx,
			    uint64_t *generation);

/* The snapshot generation of @pid, 0 if none is held. */
uint64_t mp_symbolizer__generation(struct mp_symbolizer *s, pid_t pid);

/*
 * Whether @pid's snapshot is of @image, the image a sample taken at @time_ns (CLOCK_MONOTONIC)
 * says it was taken in: its mm->start_stack, which every exec sets anew (ASLR). The snapshot's
 * is read from /proc/PID/stat before and after the maps. False means the sample's image is gone:
 * it was taken before an exec its address space did not survive, and its addresses mean nothing
 * in this snapshot. A snapshot of another image read before @time_ns is read again first: then
 * the sample may be the newer one (an exec whose record was lost). True when either image is
 * unknown (0: no permission to see it, or an exec during the read).
 */
bool mp_symbolizer__image_is(struct mp_symbolizer *s, pid_t pid, uint64_t image,
			     uint64_t time_ns);

/* libdwfl's standard find_debuginfo callback (build-id path, .gnu_debuglink, debuginfod when
 * DEBUGINFOD_URLS is set), with the debug file's fd made close-on-exec. */
struct Dwfl_Module;
int mp_find_debuginfo(struct Dwfl_Module *mod, void **userdata, const char *modname,
		      uint64_t base, const char *file_name, const char *debuglink_file,
		      uint32_t debuglink_crc, char **debuginfo_file_name);

#endif
