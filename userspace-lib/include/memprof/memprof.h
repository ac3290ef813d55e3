/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The in-process profiling API of libmemprof-preload, after OCaml's Gc.Memprof: sample the
 * words a program allocates with probability @sampling_rate each (one header word per block
 * included), and call a user tracker for every sampled block when it is allocated and when it
 * is released. Link with -lmemprof-preload (or run under LD_PRELOAD=libmemprof-preload.so and
 * link the same library for these symbols). See memprof_start(3).
 *
 * Mapping of Gc.Memprof's notions: a "domain" is the process. One profile at a time samples in
 * a process; every thread, including threads created later, samples for it. Callbacks run on
 * the allocating (or freeing) thread, synchronously inside the allocator call, with sampling
 * disabled on that thread. Native blocks never move: there is no promotion callback.
 */
#ifndef MEMPROF_MEMPROF_H
#define MEMPROF_MEMPROF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Deepest callstack recorded per sample, whatever callstack_size asks for. */
#define MEMPROF_MAX_CALLSTACK	256
/* Sampled blocks one profile tracks at once; further samples are counted, not tracked. */
#define MEMPROF_MAX_TRACKED	(1u << 16)
/* Profiles that may exist (sampling or stopped, not yet discarded) in a process at once. */
#define MEMPROF_MAX_PROFILES	16

/* Which allocator entry point made the block (the numbers of enum memprof_preload_kind). */
enum memprof_alloc_source {
	MEMPROF_SOURCE_MALLOC = 1,
	MEMPROF_SOURCE_CALLOC = 2,
	MEMPROF_SOURCE_REALLOC = 3,
	MEMPROF_SOURCE_REALLOCARRAY = 4,
	MEMPROF_SOURCE_POSIX_MEMALIGN = 5,
	MEMPROF_SOURCE_ALIGNED_ALLOC = 6,
	MEMPROF_SOURCE_MEMALIGN = 7,
	MEMPROF_SOURCE_VALLOC = 8,
	MEMPROF_SOURCE_PVALLOC = 9,
	MEMPROF_SOURCE_NEW = 10,	/* C++ operator new, all variants */
	MEMPROF_SOURCE_MMAP = 11,	/* anonymous mmap */
};

/* A sampled block, as passed to the allocation callback (valid during the call only). */
struct memprof_allocation {
	uint64_t n_samples;		/* samples in this block, >= 1: 1 + Binomial(words - r, λ) */
	size_t size;			/* bytes requested */
	size_t words;			/* ceil(size / 8) + 1: one header word, as Gc.Memprof counts */
	const void *block;		/* the address returned to the program */
	enum memprof_alloc_source source;
	const uintptr_t *callstack;	/* return addresses, innermost (allocation site) first */
	size_t callstack_len;		/* <= min(callstack_size, MEMPROF_MAX_CALLSTACK) */
};

struct memprof_tracker {
	/*
	 * A block was sampled. Runs on the allocating thread before the allocator returns the
	 * block. Returns the metadata to keep for the block; NULL means "do not track it" (no
	 * dealloc callback for it). May be NULL: nothing is tracked.
	 */
	void *(*alloc)(const struct memprof_allocation *a, void *ctx);
	/*
	 * A tracked block is being released (free, delete, realloc that moves it or to 0,
	 * munmap of its start), before the memory goes back to the allocator. Runs on the
	 * releasing thread. May be NULL.
	 */
	void (*dealloc)(void *meta, void *ctx);
};

struct memprof_stats {
	uint64_t samples;	/* sum of n_samples over blocks given to the alloc callback */
	uint64_t blocks;	/* blocks given to the alloc callback */
	uint64_t tracked;	/* blocks currently tracked (alloc returned non-NULL) */
	uint64_t untracked;	/* sampled blocks dropped: table full (not given to alloc) */
	uint64_t deallocs_lost;	/* dealloc callbacks dropped: nested in a callback, queue full */
};

struct memprof_profile;

/*
 * Start sampling the whole process at @sampling_rate (samples per word, 0 <= λ <= 1; 0 samples
 * nothing) recording up to @callstack_size frames per sample. Returns the profile, or NULL
 * with errno: EBUSY (a profile already samples in this process, or memprofd drives the
 * library's sampling), EINVAL (bad rate, NULL tracker), ENOSPC (MEMPROF_MAX_PROFILES
 * profiles not yet discarded), ENOMEM, ENOTSUP (the library's interposers are not in effect:
 * it was dlopen()ed, or another allocator wins symbol resolution).
 */
struct memprof_profile *memprof_start(double sampling_rate, unsigned int callstack_size,
				      const struct memprof_tracker *tracker, void *ctx);

/*
 * Stop sampling for the current profile: no new allocation callbacks (a thread already past
 * its sample point when stop returns does not call alloc either). Dealloc callbacks for
 * tracked blocks keep coming until memprof_discard(). Returns 0, or -EINVAL when no profile
 * samples.
 */
int memprof_stop(void);

/*
 * Drop a stopped profile's state: once this returns no callback for @p runs or is running
 * (it waits for callbacks of other threads in progress). Returns 0, -EINVAL if @p still
 * samples, -EDEADLK when called from one of @p's callbacks. NULL: returns 0.
 */
int memprof_discard(struct memprof_profile *p);

/* Counters of @p (sampling or stopped). Returns 0, or -EINVAL. */
int memprof_profile_stats(const struct memprof_profile *p, struct memprof_stats *st);

#ifdef __cplusplus
}
#endif

#endif /* MEMPROF_MEMPROF_H */
