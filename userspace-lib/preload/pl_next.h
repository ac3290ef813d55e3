/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Where libmemprof-preload forwards each interposed call: the definition the process would
 * have bound without the library ("next" in the symbol search order), e.g. libjemalloc's
 * malloc in a program linked with -ljemalloc, glibc's everywhere else. Resolved once, on the
 * first call through any pointer (each starts at a lazy resolver), by reading the dynamic symbol
 * tables of the loaded objects: no dlsym, no allocation, no lock but dl_iterate_phdr's
 * recursive one, so it is safe from any context that may call malloc.
 */
#ifndef MP_PL_NEXT_H
#define MP_PL_NEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pl_core.h"

/* C++ operators, in the order of pl_next_cxx_names[] (pl_next.c). */
enum pl_cxx_op {
	PL_ZNWM, PL_ZNAM, PL_ZNWM_NT, PL_ZNAM_NT,
	PL_ZNWM_AL, PL_ZNAM_AL, PL_ZNWM_AL_NT, PL_ZNAM_AL_NT,
	PL_ZDLPV, PL_ZDAPV, PL_ZDLPV_SZ, PL_ZDAPV_SZ, PL_ZDLPV_NT, PL_ZDAPV_NT,
	PL_ZDLPV_AL, PL_ZDAPV_AL, PL_ZDLPV_SZ_AL, PL_ZDAPV_SZ_AL, PL_ZDLPV_AL_NT, PL_ZDAPV_AL_NT,
	PL_CXX__MAX,
};

struct pl_next {
	void *(*malloc)(size_t size);
	void *(*calloc)(size_t n, size_t size);
	void *(*realloc)(void *p, size_t size);
	void (*free)(void *p);
	int (*posix_memalign)(void **memptr, size_t alignment, size_t size);
	void *(*aligned_alloc)(size_t alignment, size_t size);
	void *(*memalign)(size_t alignment, size_t size);
	void *(*valloc)(size_t size);
	void *(*pvalloc)(size_t size);
	/*
	 * The next allocator's own operator new/delete (jemalloc, tcmalloc, mimalloc define
	 * them), or NULL: then ours runs on top of the next malloc/memalign/free, as
	 * libstdc++'s would. Only the object that defines the next malloc counts, so that
	 * libstdc++'s operators (which call malloc, i.e. us) are never used: no double count.
	 */
	void *cxx[PL_CXX__MAX];
	/*
	 * Text of the foreign allocator's object: its own anonymous mmaps (the arenas the
	 * blocks are carved from) are not allocations of the program and are not sampled,
	 * as glibc's internal ones never reach us. Empty (0, 0) with glibc.
	 */
	uintptr_t text_lo, text_hi;
	bool foreign;		/* the next malloc is not glibc's */
	bool go;		/* the program is Go's: its mmaps are the runtime's arenas */
	bool ready;		/* resolved (release store after every pointer) */
} __attribute__((aligned(64)));	/* read-mostly: no cache line shared with the counters */

PL_HIDDEN extern struct pl_next pl_next;

/* Resolve every pointer if not done yet. Idempotent, async-signal-safe, never allocates. */
PL_HIDDEN void pl_next_resolve(void);

static inline void pl_next_ensure(void)
{
	if (__builtin_expect(!__atomic_load_n(&pl_next.ready, __ATOMIC_ACQUIRE), 0))
		pl_next_resolve();
}

/*
 * An mmap an allocator makes for its own arenas, not an allocation of the program: one called
 * from the foreign allocator's code, or any in a Go program (its executable's Go build-id
 * note), where mmap is the Go runtime's.
 */
static inline bool pl_next_from_allocator(const void *ret)
{
	pl_next_ensure();
	return __atomic_load_n(&pl_next.go, __ATOMIC_RELAXED) ||
	       ((uintptr_t)ret >= __atomic_load_n(&pl_next.text_lo, __ATOMIC_RELAXED) &&
		(uintptr_t)ret < __atomic_load_n(&pl_next.text_hi, __ATOMIC_RELAXED));
}

#endif /* MP_PL_NEXT_H */
