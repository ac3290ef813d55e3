// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Resolution of the "next" allocator (pl_next.h). dl_iterate_phdr() visits the loaded objects
 * in load order, which for the objects loaded at startup is the global symbol search order;
 * the first object after ours whose dynamic symbol table defines a name (default version,
 * function) is what the dynamic linker would have bound without us. The lookup reads
 * DT_GNU_HASH (or DT_HASH), DT_SYMTAB, DT_STRTAB and DT_VERSYM directly: dlsym(RTLD_NEXT)
 * would do the same but may allocate its dlerror buffer, i.e. call the malloc being resolved.
 *
 * Every pointer starts at a lazy resolver that resolves and re-dispatches, so a call made before
 * the constructor (another library's constructor, ld.so allocating TLS) already goes to the
 * right allocator and no block is ever allocated by one allocator and freed by another.
 * Concurrent or nested (signal handler) resolutions compute the same table and store the same
 * values: there is no lock to deadlock on.
 */
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <stdint.h>
#include <string.h>

#include "pl_next.h"

/* glibc's exported entry points: the fallback when no object after ours defines a name. */
extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);
extern void __libc_free(void *p);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void *__libc_valloc(size_t size);
extern void *__libc_pvalloc(size_t size);

static int fallback_posix_memalign(void **memptr, size_t alignment, size_t size)
{
	void *p = __libc_memalign(alignment, size);

	if (!p)
		return ENOMEM;
	*memptr = p;
	return 0;
}

static void *lazy_malloc(size_t size)
{
	pl_next_resolve();
	return pl_next.malloc(size);
}

static void *lazy_calloc(size_t n, size_t size)
{
	pl_next_resolve();
	return pl_next.calloc(n, size);
}

static void *lazy_realloc(void *p, size_t size)
{
	pl_next_resolve();
	return pl_next.realloc(p, size);
}

static void lazy_free(void *p)
{
	pl_next_resolve();
	pl_next.free(p);
}

static int lazy_posix_memalign(void **memptr, size_t alignment, size_t size)
{
	pl_next_resolve();
	return pl_next.posix_memalign(memptr, alignment, size);
}

static void *lazy_aligned_alloc(size_t alignment, size_t size)
{
	pl_next_resolve();
	return pl_next.aligned_alloc(alignment, size);
}

static void *lazy_memalign(size_t alignment, size_t size)
{
	pl_next_resolve();
	return pl_next.memalign(alignment, size);
}

static void *lazy_valloc(size_t size)
{
	pl_next_resolve();
	return pl_next.valloc(size);
}

static void *lazy_pvalloc(size_t size)
{
	pl_next_resolve();
	return pl_next.pvalloc(size);
}

PL_HIDDEN struct pl_next pl_next = {
	.malloc = lazy_malloc,
	.calloc = lazy_calloc,
	.realloc = lazy_realloc,
	.free = lazy_free,
	.posix_memalign = lazy_posix_memalign,
	.aligned_alloc = lazy_aligned_alloc,
	.memalign = lazy_memalign,
	.valloc = lazy_valloc,
	.pvalloc = lazy_pvalloc,
};

enum pl_c_fn {
	PL_MALLOC, PL_CALLOC, PL_REALLOC, PL_FREE, PL_POSIX_MEMALIGN, PL_ALIGNED_ALLOC,
	PL_MEMALIGN, PL_VALLOC, PL_PVALLOC, PL_C__MAX,
};

#define PL_NAMES (PL_C__MAX + PL_CXX__MAX)

static const char *const pl_names[PL_NAMES] = {
	"malloc", "calloc", "realloc", "free", "posix_memalign", "aligned_alloc", "memalign",
	"valloc", "pvalloc",
	/* enum pl_cxx_op */
	"_Znwm", "_Znam", "_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t",
	"_ZnwmSt11align_val_t", "_ZnamSt11align_val_t",
	"_ZnwmSt11align_val_tRKSt9nothrow_t", "_ZnamSt11align_val_tRKSt9nothrow_t",
	"_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm", "_ZdlPvRKSt9nothrow_t", "_ZdaPvRKSt9nothrow_t",
	"_ZdlPvSt11align_val_t", "_ZdaPvSt11align_val_t",
	"_ZdlPvmSt11align_val_t", "_ZdaPvmSt11align_val_t",
	"_ZdlPvSt11align_val_tRKSt9nothrow_t", "_ZdaPvSt11align_val_tRKSt9nothrow_t",
};

struct pl_walk {
	uintptr_t self;			/* an address inside our own object */
	bool past_self;			/* objects from here on come after ours */
	uint32_t hash[PL_NAMES];	/* GNU hashes of pl_names */
	void *addr[PL_NAMES];		/* first definition after ours, or NULL */
	int objects;			/* objects visited so far */
	int owner[PL_NAMES];		/* number of the object that defines it */
	const char *owner_name[PL_NAMES];
	uintptr_t text_lo, text_hi;	/* executable segments of malloc's owner */
	bool go;			/* the main program has a Go build-id note */
};

struct pl_dso {
	uintptr_t base;
	const ElfW(Sym) *symtab;
	const char *strtab;
	const ElfW(Half) *versym;
	const uint32_t *gnu_hash;
	const uint32_t *sysv_hash;
};

static uint32_t pl_gnu_hash(const char *s)
{
	uint32_t h = 5381;

	for (; *s; s++)
		h = h * 33 + (uint8_t)*s;
	return h;
}

static uint32_t pl_sysv_hash(const char *s)
{
	uint32_t h = 0, g;

	for (; *s; s++) {
		h = (h << 4) + (uint8_t)*s;
		g = h & 0xf0000000;
		if (g)
			h ^= g >> 24;
		h &= ~g;
	}
	return h;
}

static bool pl_streq(const char *a, const char *b)
{
	while (*a && *a == *b)
		a++, b++;
	return *a == *b;
}

/* ld.so relocates the d_ptr entries in place, except where .dynamic is read-only (vDSO). */
static uintptr_t pl_dyn_ptr(const struct pl_dso *d, ElfW(Addr) p)
{
	return p < d->base ? d->base + p : p;
}

/* A definition the dynamic linker would bind to a reference to @name, or NULL. */
static void *pl_sym_match(const struct pl_dso *d, uint32_t i, const char *name)
{
	const ElfW(Sym) *s = &d->symtab[i];
	unsigned int type = ELF64_ST_TYPE(s->st_info), bind = ELF64_ST_BIND(s->st_info);
	uintptr_t addr;

	if (s->st_shndx == SHN_UNDEF || !s->st_value)
		return NULL;
	if (type != STT_FUNC && type != STT_GNU_IFUNC)
		return NULL;
	if (bind != STB_GLOBAL && bind != STB_WEAK && bind != STB_GNU_UNIQUE)
		return NULL;
	if (d->versym && (d->versym[i] & 0x8000))	/* a hidden (non-default) version */
		return NULL;
	if (!pl_streq(d->strtab + s->st_name, name))
		return NULL;
	addr = d->base + s->st_value;
	if (type == STT_GNU_IFUNC)
		addr = (uintptr_t)((void *(*)(void))addr)();
	return (void *)addr;
}

static void *pl_lookup_gnu(const struct pl_dso *d, const char *name, uint32_t h)
{
	const uint32_t *t = d->gnu_hash;
	uint32_t nbuckets = t[0], symoffset = t[1], bloom_size = t[2], shift = t[3];
	const ElfW(Addr) *bloom = (const ElfW(Addr) *)(t + 4);
	const uint32_t *buckets = (const uint32_t *)(bloom + bloom_size);
	const uint32_t *chain = buckets + nbuckets;
	const unsigned int bits = sizeof(ElfW(Addr)) * 8;
	ElfW(Addr) word, mask;
	uint32_t i;

	if (!nbuckets || !bloom_size)
		return NULL;
	word = bloom[(h / bits) % bloom_size];
	mask = ((ElfW(Addr))1 << (h % bits)) | ((ElfW(Addr))1 << ((h >> shift) % bits));
	if ((word & mask) != mask)
		return NULL;
	i = buckets[h % nbuckets];
	if (i < symoffset)
		return NULL;
	for (;; i++) {
		uint32_t h2 = chain[i - symoffset];
		void *p;

		if ((h | 1) == (h2 | 1) && (p = pl_sym_match(d, i, name)))
			return p;
		if (h2 & 1)
			return NULL;
	}
}

static void *pl_lookup_sysv(const struct pl_dso *d, const char *name)
{
	const uint32_t *t = d->sysv_hash;
	uint32_t nbucket = t[0], nchain = t[1];
	const uint32_t *bucket = t + 2, *chain = bucket + nbucket;

	if (!nbucket)
		return NULL;
	uint32_t n = 0;

	for (uint32_t i = bucket[pl_sysv_hash(name) % nbucket]; i && i < nchain && n < nchain;
	     i = chain[i], n++) {
		void *p = pl_sym_match(d, i, name);

		if (p)
			return p;
	}
	return NULL;
}

/* glibc's C library, by its soname's file name (libc.so.6 on every glibc target). */
static bool pl_is_libc(const char *path)
{
	const char *base = path;

	if (!path)
		return false;
	for (const char *c = path; *c; c++)
		if (*c == '/')
			base = c + 1;
	return pl_streq(base, "libc.so.6");
}

static bool pl_is_self(const struct dl_phdr_info *info, uintptr_t self)
{
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t start = info->dlpi_addr + ph->p_vaddr;

		if (ph->p_type == PT_LOAD && self >= start && self < start + ph->p_memsz)
			return true;
	}
	return false;
}

static void pl_text_range(const struct dl_phdr_info *info, uintptr_t *lo, uintptr_t *hi)
{
	*lo = UINTPTR_MAX;
	*hi = 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t start = info->dlpi_addr + ph->p_vaddr;

		if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
			continue;
		if (start < *lo)
			*lo = start;
		if (start + ph->p_memsz > *hi)
			*hi = start + ph->p_memsz;
	}
	if (*lo >= *hi)
		*lo = *hi = 0;
}

/* Does @info's object carry a Go build-id note (owner "Go", type 4) in a PT_NOTE segment? */
static bool pl_is_go(const struct dl_phdr_info *info)
{
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		const char *p = (const char *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;

		if (ph->p_type != PT_NOTE)
			continue;
		while (p + sizeof(ElfW(Nhdr)) <= end) {
			const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)p;
			const char *name = p + sizeof(*n);

			if (n->n_type == 4 && (n->n_namesz == 3 || n->n_namesz == 4) &&
			    name + 2 <= end && name[0] == 'G' && name[1] == 'o')
				return true;
			p = name + ((n->n_namesz + 3) & ~3u) + ((n->n_descsz + 3) & ~3u);
		}
	}
	return false;
}

static int pl_walk_object(struct dl_phdr_info *info, size_t size, void *data)
{
	struct pl_walk *w = data;
	struct pl_dso d = { .base = info->dlpi_addr };
	const ElfW(Dyn) *dyn = NULL;

	(void)size;
	if (!w->objects++)	/* the main program comes first */
		w->go = pl_is_go(info);
	if (!w->past_self) {
		w->past_self = pl_is_self(info, w->self);
		return 0;
	}
	for (int i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			dyn = (const ElfW(Dyn) *)(d.base + info->dlpi_phdr[i].p_vaddr);
	if (!dyn)
		return 0;
	for (; dyn->d_tag != DT_NULL; dyn++) {
		const void *p = (const void *)pl_dyn_ptr(&d, dyn->d_un.d_ptr);

		if (dyn->d_tag == DT_SYMTAB)
			d.symtab = p;
		else if (dyn->d_tag == DT_STRTAB)
			d.strtab = p;
		else if (dyn->d_tag == DT_VERSYM)
			d.versym = p;
		else if (dyn->d_tag == DT_GNU_HASH)
			d.gnu_hash = p;
		else if (dyn->d_tag == DT_HASH)
			d.sysv_hash = p;
	}
	if (!d.symtab || !d.strtab || (!d.gnu_hash && !d.sysv_hash))
		return 0;
	for (int n = 0; n < PL_NAMES; n++) {
		void *p;

		if (w->addr[n])
			continue;
		p = d.gnu_hash ? pl_lookup_gnu(&d, pl_names[n], w->hash[n]) :
				 pl_lookup_sysv(&d, pl_names[n]);
		if (p) {
			w->addr[n] = p;
			w->owner[n] = w->objects;
			w->owner_name[n] = info->dlpi_name;
			if (n == PL_MALLOC)
				pl_text_range(info, &w->text_lo, &w->text_hi);
		}
	}
	return 0;
}

#define PL_SET(field, idx, fallback)                                                           \
	__atomic_store_n(&pl_next.field,                                                       \
			 w.addr[idx] ? (__typeof__(pl_next.field))w.addr[idx] : (fallback),    \
			 __ATOMIC_RELAXED)

PL_HIDDEN void pl_next_resolve(void)
{
	struct pl_walk w = { .self = (uintptr_t)&pl_next_resolve };
	bool foreign;

	if (__atomic_load_n(&pl_next.ready, __ATOMIC_ACQUIRE))
		return;
	for (int n = 0; n < PL_NAMES; n++)
		w.hash[n] = pl_gnu_hash(pl_names[n]);
	dl_iterate_phdr(pl_walk_object, &w);

	/*
	 * By the defining object, not by comparing with __libc_malloc: tcmalloc and mimalloc
	 * define __libc_malloc too, and our reference to it may bind there.
	 */
	foreign = w.addr[PL_MALLOC] && !pl_is_libc(w.owner_name[PL_MALLOC]);
	PL_SET(malloc, PL_MALLOC, __libc_malloc);
	PL_SET(calloc, PL_CALLOC, __libc_calloc);
	PL_SET(realloc, PL_REALLOC, __libc_realloc);
	PL_SET(free, PL_FREE, __libc_free);
	PL_SET(memalign, PL_MEMALIGN, __libc_memalign);
	PL_SET(valloc, PL_VALLOC, __libc_valloc);
	PL_SET(pvalloc, PL_PVALLOC, __libc_pvalloc);
	/* libc.so.6 (after us) defines them all: the fallbacks only keep resolvers unreachable. */
	PL_SET(posix_memalign, PL_POSIX_MEMALIGN, fallback_posix_memalign);
	PL_SET(aligned_alloc, PL_ALIGNED_ALLOC, __libc_memalign);
	for (int op = 0; op < PL_CXX__MAX; op++) {
		int n = PL_C__MAX + op;
		void *p = foreign && w.addr[n] && w.owner[n] == w.owner[PL_MALLOC] ? w.addr[n] :
										      NULL;

		__atomic_store_n(&pl_next.cxx[op], p, __ATOMIC_RELAXED);
	}
	if (foreign) {
		__atomic_store_n(&pl_next.text_lo, w.text_lo, __ATOMIC_RELAXED);
		__atomic_store_n(&pl_next.text_hi, w.text_hi, __ATOMIC_RELAXED);
	}
	__atomic_store_n(&pl_next.foreign, foreign, __ATOMIC_RELAXED);
	__atomic_store_n(&pl_next.go, w.go, __ATOMIC_RELAXED);
	__atomic_store_n(&pl_next.ready, true, __ATOMIC_RELEASE);
}
