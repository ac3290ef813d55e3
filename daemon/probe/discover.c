// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Allocator discovery: the table of entry points probed, their symbols found in an object
 * (daemon/probe/elf_syms.h), each probe placed (daemon/probe/placement.h) and given its
 * cookie; the result cached per object by (device, inode, mtime).
 */
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>

#include <gelf.h>
#include <libelf.h>

#include "daemon/probe/elf_syms.h"
#include "daemon/probe/loader_internal.h"
#include "daemon/probe/placement.h"

/* Optional entry points of other allocators (jemalloc, tcmalloc, mimalloc, C23). */
#define MP_ALLOC_DEF(s, k, sh, n)	{ s, k, sh, n, true, true }
#define MP_FREE_DEF(s)			{ s, MP_KIND_FREE, MP_SHAPE_FREE, 1, false, true }
#define MP_DELETE_DEF(s)		{ s, MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true }
/* jemalloc's non-standard API, under the prefix @p of its build ("" or "je_") */
#define MP_JE_NONSTANDARD(p)                                                                    \
	MP_ALLOC_DEF(p "mallocx", MP_KIND_MALLOC, MP_SHAPE_SIZE1, 1),                           \
	MP_ALLOC_DEF(p "rallocx", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),                        \
	MP_ALLOC_DEF(p "xallocx", MP_KIND_XALLOCX, MP_SHAPE_XALLOCX, 2),                        \
	MP_FREE_DEF(p "dallocx"),                                                               \
	MP_FREE_DEF(p "sdallocx")

/*
 * The allocator entry points, looked up in every executable object a process maps (.dynsym and
 * .symtab: an allocator linked into the executable is found too). Aliases (one address under
 * several names, as tcmalloc's tc_free = free = operator delete) are probed once, as the first
 * of their names in this table.
 */
const struct probe_def probe_table[] = {
	{ "malloc", MP_KIND_MALLOC, MP_SHAPE_SIZE1, 1, true, false },
	{ "calloc", MP_KIND_CALLOC, MP_SHAPE_CALLOC, 2, true, false },
	{ "realloc", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2, true, false },
	{ "free", MP_KIND_FREE, MP_SHAPE_FREE, 1, false, false },
	{ "reallocarray", MP_KIND_REALLOCARRAY, MP_SHAPE_REALLOCARRAY, 3, true, true },
	{ "posix_memalign", MP_KIND_POSIX_MEMALIGN, MP_SHAPE_POSIX_MEMALIGN, 3, true, true },
	/* glibc's aligned_alloc and memalign are one function: it reports as aligned_alloc */
	{ "aligned_alloc", MP_KIND_ALIGNED_ALLOC, MP_SHAPE_SIZE2, 2, true, true },
	{ "memalign", MP_KIND_MEMALIGN, MP_SHAPE_SIZE2, 2, true, true },
	{ "valloc", MP_KIND_VALLOC, MP_SHAPE_SIZE1, 1, true, true },
	{ "pvalloc", MP_KIND_PVALLOC, MP_SHAPE_PAGES, 1, true, true },
	{ "_Znwm", MP_KIND_NEW, MP_SHAPE_SIZE1, 1, true, true },
	{ "_Znam", MP_KIND_NEW, MP_SHAPE_SIZE1, 1, true, true },
	{ "_ZnwmRKSt9nothrow_t", MP_KIND_NEW, MP_SHAPE_SIZE1, 1, true, true },
	{ "_ZnamRKSt9nothrow_t", MP_KIND_NEW, MP_SHAPE_SIZE1, 1, true, true },
	{ "_ZnwmSt11align_val_t", MP_KIND_NEW, MP_SHAPE_SIZE1, 1, true, true },
	{ "_ZnamSt11align_val_t", MP_KIND_NEW, MP_SHAPE_SIZE1, 1, true, true },
	{ "_ZnwmSt11align_val_tRKSt9nothrow_t", MP_KIND_NEW, MP_SHAPE_SIZE1, 1, true, true },
	{ "_ZnamSt11align_val_tRKSt9nothrow_t", MP_KIND_NEW, MP_SHAPE_SIZE1, 1, true, true },
	{ "_ZdlPv", MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true },
	{ "_ZdaPv", MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true },
	{ "_ZdlPvm", MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true },
	{ "_ZdaPvm", MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true },
	{ "_ZdlPvRKSt9nothrow_t", MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true },
	{ "_ZdaPvRKSt9nothrow_t", MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true },
	{ "_ZdlPvSt11align_val_t", MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true },
	{ "_ZdaPvSt11align_val_t", MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true },
	{ "_ZdlPvmSt11align_val_t", MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true },
	{ "_ZdaPvmSt11align_val_t", MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true },
	{ "_ZdlPvSt11align_val_tRKSt9nothrow_t", MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true },
	{ "_ZdaPvSt11align_val_tRKSt9nothrow_t", MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true },
	{ "mmap", MP_KIND_MMAP, MP_SHAPE_MMAP, 4, true, true },
	{ "mmap64", MP_KIND_MMAP, MP_SHAPE_MMAP, 4, true, true },
	{ "munmap", MP_KIND_MUNMAP, MP_SHAPE_FREE, 1, false, true },
	/* C23 sized frees, cfree */
	MP_FREE_DEF("free_sized"),
	MP_FREE_DEF("free_aligned_sized"),
	MP_FREE_DEF("cfree"),
	/*
	 * jemalloc's own API (libjemalloc.so.2 exports it beside malloc and friends), and the
	 * same with the je_ prefix of builds that keep the system allocator (redis' bundled
	 * copy, --with-jemalloc-prefix). nallocx and sallocx allocate nothing: not probed.
	 */
	MP_JE_NONSTANDARD(""),
	MP_ALLOC_DEF("je_malloc", MP_KIND_MALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("je_calloc", MP_KIND_CALLOC, MP_SHAPE_CALLOC, 2),
	MP_ALLOC_DEF("je_realloc", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_FREE_DEF("je_free"),
	MP_ALLOC_DEF("je_posix_memalign", MP_KIND_POSIX_MEMALIGN, MP_SHAPE_POSIX_MEMALIGN, 3),
	MP_ALLOC_DEF("je_aligned_alloc", MP_KIND_ALIGNED_ALLOC, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("je_memalign", MP_KIND_MEMALIGN, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("je_valloc", MP_KIND_VALLOC, MP_SHAPE_SIZE1, 1),
	MP_JE_NONSTANDARD("je_"),
	/* gperftools' tcmalloc: tc_* (aliases of malloc & co. in Debian's build) */
	MP_ALLOC_DEF("tc_malloc", MP_KIND_MALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("tc_malloc_skip_new_handler", MP_KIND_MALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("tc_calloc", MP_KIND_CALLOC, MP_SHAPE_CALLOC, 2),
	MP_ALLOC_DEF("tc_realloc", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_ALLOC_DEF("tc_memalign", MP_KIND_MEMALIGN, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("tc_posix_memalign", MP_KIND_POSIX_MEMALIGN, MP_SHAPE_POSIX_MEMALIGN, 3),
	MP_ALLOC_DEF("tc_valloc", MP_KIND_VALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("tc_pvalloc", MP_KIND_PVALLOC, MP_SHAPE_PAGES, 1),
	MP_ALLOC_DEF("tc_new", MP_KIND_NEW, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("tc_newarray", MP_KIND_NEW, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("tc_new_nothrow", MP_KIND_NEW, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("tc_newarray_nothrow", MP_KIND_NEW, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("tc_new_aligned", MP_KIND_NEW, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("tc_newarray_aligned", MP_KIND_NEW, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("tc_new_aligned_nothrow", MP_KIND_NEW, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("tc_newarray_aligned_nothrow", MP_KIND_NEW, MP_SHAPE_SIZE1, 1),
	MP_FREE_DEF("tc_free"),
	MP_FREE_DEF("tc_free_sized"),
	MP_FREE_DEF("tc_cfree"),
	MP_DELETE_DEF("tc_delete"),
	MP_DELETE_DEF("tc_deletearray"),
	MP_DELETE_DEF("tc_delete_sized"),
	MP_DELETE_DEF("tc_deletearray_sized"),
	MP_DELETE_DEF("tc_delete_nothrow"),
	MP_DELETE_DEF("tc_deletearray_nothrow"),
	MP_DELETE_DEF("tc_delete_aligned"),
	MP_DELETE_DEF("tc_deletearray_aligned"),
	MP_DELETE_DEF("tc_delete_sized_aligned"),
	MP_DELETE_DEF("tc_deletearray_sized_aligned"),
	MP_DELETE_DEF("tc_delete_aligned_nothrow"),
	MP_DELETE_DEF("tc_deletearray_aligned_nothrow"),
	/*
	 * mimalloc's API. mi_expand(p, n) resizes in place or returns NULL leaving p alone:
	 * realloc semantics. mi_reallocf frees p when it fails (counted as a realloc that failed,
	 * p stays live). mi_heap_reallocn/recalloc (4 arguments) are not probed.
	 */
	MP_ALLOC_DEF("mi_malloc", MP_KIND_MALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_zalloc", MP_KIND_CALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_malloc_small", MP_KIND_MALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_zalloc_small", MP_KIND_CALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_calloc", MP_KIND_CALLOC, MP_SHAPE_CALLOC, 2),
	MP_ALLOC_DEF("mi_mallocn", MP_KIND_CALLOC, MP_SHAPE_CALLOC, 2),
	MP_ALLOC_DEF("mi_realloc", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_ALLOC_DEF("mi_reallocf", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_ALLOC_DEF("reallocf", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_ALLOC_DEF("mi_rezalloc", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_ALLOC_DEF("mi_expand", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_ALLOC_DEF("mi_reallocn", MP_KIND_REALLOCARRAY, MP_SHAPE_REALLOCARRAY, 3),
	MP_ALLOC_DEF("mi_recalloc", MP_KIND_REALLOCARRAY, MP_SHAPE_REALLOCARRAY, 3),
	MP_ALLOC_DEF("mi_reallocarray", MP_KIND_REALLOCARRAY, MP_SHAPE_REALLOCARRAY, 3),
	MP_ALLOC_DEF("mi_malloc_aligned", MP_KIND_ALIGNED_ALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_malloc_aligned_at", MP_KIND_ALIGNED_ALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_zalloc_aligned", MP_KIND_ALIGNED_ALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_zalloc_aligned_at", MP_KIND_ALIGNED_ALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_calloc_aligned", MP_KIND_CALLOC, MP_SHAPE_CALLOC, 2),
	MP_ALLOC_DEF("mi_calloc_aligned_at", MP_KIND_CALLOC, MP_SHAPE_CALLOC, 2),
	MP_ALLOC_DEF("mi_realloc_aligned", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_ALLOC_DEF("mi_realloc_aligned_at", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_ALLOC_DEF("mi_rezalloc_aligned", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_ALLOC_DEF("mi_rezalloc_aligned_at", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_ALLOC_DEF("mi_recalloc_aligned", MP_KIND_REALLOCARRAY, MP_SHAPE_REALLOCARRAY, 3),
	MP_ALLOC_DEF("mi_recalloc_aligned_at", MP_KIND_REALLOCARRAY, MP_SHAPE_REALLOCARRAY, 3),
	MP_ALLOC_DEF("mi_posix_memalign", MP_KIND_POSIX_MEMALIGN, MP_SHAPE_POSIX_MEMALIGN, 3),
	MP_ALLOC_DEF("mi_memalign", MP_KIND_MEMALIGN, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("mi_aligned_alloc", MP_KIND_ALIGNED_ALLOC, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("mi_valloc", MP_KIND_VALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_pvalloc", MP_KIND_PVALLOC, MP_SHAPE_PAGES, 1),
	MP_ALLOC_DEF("mi_new", MP_KIND_NEW, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_new_nothrow", MP_KIND_NEW, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_new_aligned", MP_KIND_NEW, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_new_aligned_nothrow", MP_KIND_NEW, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_new_n", MP_KIND_NEW, MP_SHAPE_CALLOC, 2),
	MP_ALLOC_DEF("mi_new_realloc", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_ALLOC_DEF("mi_new_reallocn", MP_KIND_REALLOCARRAY, MP_SHAPE_REALLOCARRAY, 3),
	MP_ALLOC_DEF("mi_heap_malloc", MP_KIND_MALLOC, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("mi_heap_zalloc", MP_KIND_CALLOC, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("mi_heap_malloc_small", MP_KIND_MALLOC, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("mi_heap_malloc_aligned", MP_KIND_ALIGNED_ALLOC, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("mi_heap_malloc_aligned_at", MP_KIND_ALIGNED_ALLOC, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("mi_heap_zalloc_aligned", MP_KIND_ALIGNED_ALLOC, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("mi_heap_zalloc_aligned_at", MP_KIND_ALIGNED_ALLOC, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("mi_heap_alloc_new", MP_KIND_NEW, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("mi_heap_calloc", MP_KIND_CALLOC, MP_SHAPE_HEAP_CALLOC, 3),
	MP_ALLOC_DEF("mi_heap_mallocn", MP_KIND_CALLOC, MP_SHAPE_HEAP_CALLOC, 3),
	MP_ALLOC_DEF("mi_heap_calloc_aligned", MP_KIND_CALLOC, MP_SHAPE_HEAP_CALLOC, 3),
	MP_ALLOC_DEF("mi_heap_calloc_aligned_at", MP_KIND_CALLOC, MP_SHAPE_HEAP_CALLOC, 3),
	MP_ALLOC_DEF("mi_heap_alloc_new_n", MP_KIND_NEW, MP_SHAPE_HEAP_CALLOC, 3),
	MP_ALLOC_DEF("mi_heap_realloc", MP_KIND_REALLOC, MP_SHAPE_HEAP_REALLOC, 3),
	MP_ALLOC_DEF("mi_heap_reallocf", MP_KIND_REALLOC, MP_SHAPE_HEAP_REALLOC, 3),
	MP_ALLOC_DEF("mi_heap_rezalloc", MP_KIND_REALLOC, MP_SHAPE_HEAP_REALLOC, 3),
	MP_ALLOC_DEF("mi_heap_realloc_aligned", MP_KIND_REALLOC, MP_SHAPE_HEAP_REALLOC, 3),
	MP_ALLOC_DEF("mi_heap_realloc_aligned_at", MP_KIND_REALLOC, MP_SHAPE_HEAP_REALLOC, 3),
	MP_ALLOC_DEF("mi_heap_rezalloc_aligned", MP_KIND_REALLOC, MP_SHAPE_HEAP_REALLOC, 3),
	MP_ALLOC_DEF("mi_heap_rezalloc_aligned_at", MP_KIND_REALLOC, MP_SHAPE_HEAP_REALLOC, 3),
	MP_FREE_DEF("mi_free"),
	MP_FREE_DEF("mi_cfree"),
	MP_FREE_DEF("mi_free_size"),
	MP_FREE_DEF("mi_free_aligned"),
	MP_FREE_DEF("mi_free_size_aligned"),
	/* libraries mapped by ld.so (startup, dlopen): attach to them (MP_EV_MAP) */
	{ "_dl_debug_state", 0, MP_SHAPE_DLSTATE, 0, false, true },
};

_Static_assert(sizeof(probe_table) / sizeof(probe_table[0]) == N_PROBES,
	       "N_PROBES (loader_internal.h) is the size of probe_table");
static int sym_index(const char *name, void *ctx)
{
	size_t len = strcspn(name, "@");

	for (size_t i = 0; i < N_PROBES; i++)
		if (strlen(probe_table[i].sym) == len && !strncmp(probe_table[i].sym, name, len))
			return (int)i;
	return -1;
}

/* MP_PLACEMENT=entry: probe every function at its first byte (tests, benchmarks). */
static bool placement_entry_only(void)
{
	const char *v = getenv("MP_PLACEMENT");

	return v && !strcmp(v, "entry");
}

static void place(struct mp_bpf *b, int fd, const char *path, const struct probe_def *pd,
		  uint64_t off, uint64_t size, uint64_t avail, struct resolved *r)
{
	struct mp_placement_req req = {
		.addr = off,
		.nargs = pd->nargs,
		.has_return = pd->ret,
		.skip_null_check = pd->shape == MP_SHAPE_FREE,
	};
	struct mp_placement pl;

	r->placed = 0;
	if (pd->shape == MP_SHAPE_DLSTATE)
		return; /* not an allocator, hit only when libraries are loaded */
	if (placement_entry_only()) {
		logf_(b, 7, "Probe on %s in '%s' at +0: MP_PLACEMENT=entry", pd->sym, path);
		return;
	}
	if (mp_elf_place(fd, &req, size, avail, &pl))
		return;
	r->placed = pl.offset;
	logf_(b, pl.emulated ? 7 : 6, "Probe on %s in '%s' at +%#" PRIx64 ": %s", pd->sym, path,
	      pl.offset, pl.reason);
}

/*
 * The C library's probes (MP_COOKIE_F_LEAF, MP_COOKIE_SEG): its malloc and calloc call no
 * probed function but its own mmap/munmap, and an mmap made by its own code (a heap, a thread
 * stack) is not the program's. Only for a shared C library: in a static executable the
 * program's own mmap calls come from the same segment.
 */
static bool is_libc(const char *path, const GElf_Ehdr *eh)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	return eh->e_type == ET_DYN && !strncmp(base, "libc.so", 7);
}

static void cookies_set(struct obj *o, bool libc)
{
	bool own_mmap = false;

	for (size_t i = 0; i < o->nres; i++)
		own_mmap |= probe_table[o->res[i].probe].kind == MP_KIND_MMAP;
	for (size_t i = 0; i < o->nres; i++) {
		struct resolved *r = &o->res[i];
		const struct probe_def *pd = &probe_table[r->probe];

		r->cookie = MP_COOKIE(pd->shape, pd->kind);
		if (!libc || !own_mmap)
			continue;
		if (pd->kind == MP_KIND_MALLOC || pd->kind == MP_KIND_CALLOC)
			r->cookie |= MP_COOKIE_F_LEAF;
		if (pd->kind == MP_KIND_MMAP && r->seg_before >> 4 <= MP_COOKIE_SEG_MAX &&
		    r->seg_after >> 4 <= MP_COOKIE_SEG_MAX)
			r->cookie |= MP_COOKIE_SEG(r->seg_before, r->seg_after);
	}
}

/* Find the allocator symbols of the object at @path, open as @fd (the caller's). */
static struct obj *obj_scan(struct mp_bpf *b, const char *path, const struct stat *st, int fd)
{
	struct mp_sym_found found[N_PROBES] = { 0 };
	GElf_Ehdr eh;
	struct obj *o;
	Elf *elf;

	o = calloc(1, sizeof(*o));
	if (!o)
		return NULL;
	o->dev = st->st_dev;
	o->ino = st->st_ino;
	o->mtime = st->st_mtim;
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF || !gelf_getehdr(elf, &eh) ||
	    eh.e_machine != EM_X86_64 || gelf_getclass(elf) != ELFCLASS64)
		goto out;
	o->go = mp_elf_is_go(elf);
	mp_elf_find_funcs(elf, sym_index, NULL, found);
	for (size_t i = 0; i < N_PROBES; i++) {
		uint64_t off, avail, before;
		bool dup = false;

		if (!found[i].prio || mp_elf_vaddr_to_off(elf, found[i].value, &off, &avail, &before))
			continue;
		/* aliases (memalign = aligned_alloc, mmap64 = mmap): the first entry wins */
		for (size_t j = 0; j < o->nres; j++)
			if (o->res[j].offset - o->res[j].placed == off)
				dup = true;
		if (dup)
			continue;
		o->res[o->nres].probe = (unsigned int)i;
		place(b, fd, path, &probe_table[i], off, found[i].size, avail, &o->res[o->nres]);
		o->res[o->nres].offset = off + o->res[o->nres].placed;
		o->res[o->nres].seg_before = before + o->res[o->nres].placed;
		o->res[o->nres].seg_after = avail - o->res[o->nres].placed;
		o->nres++;
	}
	cookies_set(o, is_libc(path, &eh));
	/* An object defining malloc is an allocator: say which of its usual companions it lacks. */
	if (found[0].prio) {
		for (size_t i = 1; i < N_PROBES; i++)
			if (!probe_table[i].optional && !found[i].prio)
				logf_(b, 4, "'%s' defines malloc but not %s: its %s calls are not seen",
				      path, probe_table[i].sym, probe_table[i].sym);
	}
out:
	elf_end(elf);
	return o;
}

const struct obj *obj_find(const struct mp_bpf *b, dev_t dev, ino_t ino)
{
	for (const struct obj *o = b->objs; o; o = o->next)
		if (o->dev == dev && o->ino == ino)
			return o;
	return NULL;
}

struct obj *obj_get(struct mp_bpf *b, const char *path, const struct stat *st, int fd)
{
	struct obj *o, **pp;

	for (pp = &b->objs; (o = *pp); pp = &o->next) {
		if (o->dev == st->st_dev && o->ino == st->st_ino) {
			if (o->mtime.tv_sec == st->st_mtim.tv_sec &&
			    o->mtime.tv_nsec == st->st_mtim.tv_nsec)
				return o;
			*pp = o->next; /* the file changed in place: scan again */
			free(o);
			b->nobjs--;
			break;
		}
	}
	if (b->nobjs >= MAX_OBJ_CACHE) {
		/* drop the oldest (the list tail) */
		for (pp = &b->objs; (*pp)->next; pp = &(*pp)->next)
			;
		free(*pp);
		*pp = NULL;
		b->nobjs--;
	}
	o = obj_scan(b, path, st, fd);
	if (!o)
		return NULL;
	o->next = b->objs;
	b->objs = o;
	b->nobjs++;
	return o;
}
