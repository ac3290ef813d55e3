/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libmemprof-preload: the cooperative fast path. The library interposes the allocator
 * (malloc family, C++ new/delete, anonymous mmap/munmap), samples allocated words in-process
 * with the statistics of Gc.Memprof, and reaches an instrumentation point only for blocks
 * that hold a sample point and for frees of such blocks. Everything else costs a handful of
 * instructions and no trap.
 *
 * This header is the ABI between the library (loaded into a target process with LD_PRELOAD,
 * or linked) and whoever profiles it (memprofd). It is self-contained.
 *
 * 1. USDT probes (provider "memprof"), notes in the library's .note.stapsdt section:
 *
 *	memprof:alloc	(u64 addr, u64 size, u64 nsamples, u32 kind, u32 generation)
 *	memprof:free	(u64 addr, u32 kind)
 *
 *    "alloc" fires once per allocated block that holds at least one sample point, after the
 *    block was allocated and recorded as sampled; nsamples >= 1 is already the block's
 *    complete count, 1 + Binomial(remaining words, rate), drawn in-process (no further
 *    drawing by the profiler). "free" fires when a block reported by "alloc" is released
 *    (free, delete, realloc that moves or shrinks to 0, munmap of the mapping's start), before
 *    the memory goes back to the allocator, so a later "alloc" of the same address from
 *    another thread always comes after it. "generation" is the config generation (below) the
 *    sample was drawn under; 0 when sampling was armed by the environment alone. Frees are
 *    reported whether or not sampling is still armed (as Gc.Memprof reports deallocations
 *    after stop), and may name blocks sampled under an older generation or inherited from
 *    the parent across fork: a profiler ignores frees of addresses it does not track. An
 *    "alloc" at an address the profiler still tracks means the old block's free was missed
 *    (counted in MEMPROF_PRELOAD_STAT_STALE): treat it as collected.
 *    Each probe site is a 5-byte nop (0f 1f 44 00 00), which Linux >= 6.18 turns into a call
 *    to the uprobe trampoline instead of an int3 trap. Both probes sit in noinline functions
 *    called from the allocator entry points; a frame-pointer stack walked from the probe
 *    starts inside the library: skip frames whose address lies in the library's mapping.
 *
 * 2. Semaphores. "memprof:alloc" carries the USDT semaphore memprof_alloc_semaphore (and
 *    "free" memprof_free_semaphore). The kernel increments it in the target's memory when a
 *    uprobe is attached with the note's semaphore as ref_ctr_offset (libbpf's
 *    bpf_program__attach_usdt() does this). While the alloc semaphore is 0 the library is
 *    disarmed: its countdown only polls (every MEMPROF_PRELOAD_POLL_WORDS words allocated per
 *    thread) and no probe site is ever reached.
 *
 * 3. The configuration block, exported as the dynamic symbol "memprof_preload_config"
 *    (struct memprof_preload_config below). The profiler finds it with the symbol table of
 *    the library's file and the mapping in /proc/PID/maps, checks magic/version/size with
 *    process_vm_readv(), then sets the rate:
 *	  write rate, profile, flags	(one process_vm_writev)
 *	  write generation = old + 1	(a second process_vm_writev, after the first)
 *    The library reads generation, then the fields, then generation again (a seqlock read),
 *    on a thread's next countdown expiry; a thread that sees a new generation discards its
 *    pending sample point and draws a fresh countdown at the new rate, so the rate never
 *    changes under a drawn countdown. Sampling is armed iff
 *	  alloc semaphore != 0 && (generation == 0 || (flags & MEMPROF_PRELOAD_F_SAMPLING))
 *    or the test/benchmark variable MEMPROF_ARM=1 is set. With generation 0 the rate comes
 *    from the environment (MEMPROF_RATE) or defaults to MEMPROF_PRELOAD_DEFAULT_RATE.
 *    While an in-process profile samples (memprof_start(), <memprof/memprof.h>) its rate wins
 *    and its samples go to its tracker, not to memprof:alloc; memprof_start() refuses (EBUSY)
 *    while the profiler has sampling armed.
 *    The counters in the block are written by the library (relaxed atomics) and can be read
 *    with process_vm_readv(); every loss is counted there.
 *
 * Environment (read once, by the library's constructor):
 *	MEMPROF_RATE=λ		sampling rate per word when no profiler set one, (0, 1]
 *	MEMPROF_SEED=N		seed the per-thread PRNGs deterministically (tests)
 *	MEMPROF_ARM=1		sample without a probe attached (tests, benchmarks)
 *	MEMPROF_TEST_LOG=FD	also write a struct memprof_preload_test_rec to FD at every
 *				alloc/free probe site, and arm sampling (tests). The write is
 *				part of the hook, after the probe site: the real code path.
 *
 * Limits: at most MEMPROF_PRELOAD_MAX_LIVE sampled blocks are tracked for frees at once;
 * further samples are still reported but their frees are not (counted in table_full).
 * The library must be loaded at startup (LD_PRELOAD or DT_NEEDED): it uses initial-exec TLS,
 * which dlopen() may refuse.
 */
#ifndef MEMPROF_PRELOAD_H
#define MEMPROF_PRELOAD_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MEMPROF_PRELOAD_MAGIC		0x31444c455250504dULL	/* "MPPRELD1" in memory (LE) */
#define MEMPROF_PRELOAD_VERSION		1
#define MEMPROF_PRELOAD_DEFAULT_RATE	1e-4
#define MEMPROF_PRELOAD_POLL_WORDS	8192	/* disarmed: re-check arming every 64 KiB */
#define MEMPROF_PRELOAD_MAX_LIVE	(1u << 18)

#define MEMPROF_PRELOAD_F_SAMPLING	(1u << 0)	/* profiler wants samples */

/* Kinds passed by the probes; the same numbers as enum mp_kind in bpf/memprof.h. */
enum memprof_preload_kind {
	MEMPROF_PRELOAD_MALLOC = 1,
	MEMPROF_PRELOAD_CALLOC = 2,
	MEMPROF_PRELOAD_REALLOC = 3,
	MEMPROF_PRELOAD_REALLOCARRAY = 4,
	MEMPROF_PRELOAD_POSIX_MEMALIGN = 5,
	MEMPROF_PRELOAD_ALIGNED_ALLOC = 6,
	MEMPROF_PRELOAD_MEMALIGN = 7,
	MEMPROF_PRELOAD_VALLOC = 8,
	MEMPROF_PRELOAD_PVALLOC = 9,
	MEMPROF_PRELOAD_NEW = 10,		/* operator new, new[], nothrow, aligned */
	MEMPROF_PRELOAD_MMAP = 11,		/* anonymous mmap */
	MEMPROF_PRELOAD_FREE = 12,
	MEMPROF_PRELOAD_DELETE = 13,		/* operator delete, delete[], all variants */
	MEMPROF_PRELOAD_MUNMAP = 14,
};

/* Counters maintained by the library (index into memprof_preload_config.stats). */
enum memprof_preload_stat {
	MEMPROF_PRELOAD_STAT_ALLOC_HOOKS,	/* memprof:alloc probe sites reached */
	MEMPROF_PRELOAD_STAT_FREE_HOOKS,	/* memprof:free probe sites reached */
	MEMPROF_PRELOAD_STAT_SAMPLES,		/* sum of nsamples over alloc hooks */
	MEMPROF_PRELOAD_STAT_LIVE,		/* sampled blocks currently tracked */
	MEMPROF_PRELOAD_STAT_TABLE_FULL,	/* samples whose frees cannot be tracked */
	MEMPROF_PRELOAD_STAT_STALE,		/* tracked address handed out again: a free we
						 * never saw (e.g. munmap of a block's middle) */
	MEMPROF_PRELOAD_STAT_REALLOC_LOST,	/* realloc of a sampled block failed after its
						 * free was reported: block no longer tracked */
	MEMPROF_PRELOAD_STAT_REENTERED,		/* sampling path re-entered (signal handler
						 * during a sampled call): call not sampled */
	MEMPROF_PRELOAD_STAT_TEST_LOG_ERRORS,	/* MEMPROF_TEST_LOG writes that failed */
	MEMPROF_PRELOAD_STAT_ARMINGS,		/* disarmed -> armed transitions (all threads) */
	MEMPROF_PRELOAD_STAT_FORK_REPAIRS,	/* probe sites a fork child restored to a nop:
						 * the parent's optimised uprobe pointed at a
						 * trampoline the child does not have */
	MEMPROF_PRELOAD_STAT__MAX,
	MEMPROF_PRELOAD_STAT__SLOTS = 16,
};

struct memprof_preload_config {
	/* Constant, set by the library. */
	uint64_t magic;			/* MEMPROF_PRELOAD_MAGIC */
	uint32_t version;		/* MEMPROF_PRELOAD_VERSION */
	uint32_t size;			/* sizeof(struct memprof_preload_config) */
	/* Written by the profiler (see the protocol above). */
	double rate;			/* probability per word, (0, 1] */
	uint32_t profile;		/* profiler's profile id, for its own bookkeeping */
	uint32_t flags;			/* MEMPROF_PRELOAD_F_* */
	uint32_t generation;		/* bumped last; 0: never written */
	uint32_t _pad;
	/* Written by the library. */
	uint64_t stats[MEMPROF_PRELOAD_STAT__SLOTS];	/* enum memprof_preload_stat */
};

extern struct memprof_preload_config memprof_preload_config;

/* MEMPROF_TEST_LOG record, native endianness. */
enum memprof_preload_rec_type {
	MEMPROF_PRELOAD_REC_ALLOC = 1,
	MEMPROF_PRELOAD_REC_FREE = 2,
};

struct memprof_preload_test_rec {
	uint32_t type;			/* enum memprof_preload_rec_type */
	uint32_t kind;			/* enum memprof_preload_kind */
	uint64_t addr;
	uint64_t size;			/* ALLOC: requested bytes; FREE: 0 */
	uint64_t nsamples;		/* ALLOC: >= 1; FREE: 0 */
	uint32_t pid;
	uint32_t tid;
	uint32_t generation;		/* ALLOC: as the probe's; FREE: 0 */
	uint32_t _pad;
};

#ifdef __cplusplus
}
#endif

#endif /* MEMPROF_PRELOAD_H */
