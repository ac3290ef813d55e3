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
 *	memprof:alloc		(const struct memprof_preload_alloc_rec *rec)
 *	memprof:free		(u64 id, u64 addr, u32 kind)
 *	memprof:free_batch	(const u64 *ids, u32 count)
 *	memprof:flush		(const struct memprof_preload_queue *q)	(deferred mode only)
 *
 *    "alloc" fires once per allocated block that holds at least one sample point, after the
 *    block was allocated and recorded as sampled. Its one argument points to a record in the
 *    target's memory (struct memprof_preload_alloc_rec below, valid while the probe runs) that
 *    a profiler reads with one bpf_probe_read_user(): the block (addr, size, kind), its
 *    multiplicity nsamples >= 1, already final (1 + Binomial(remaining words, rate), drawn
 *    in-process: no further drawing by the profiler), the config generation it was drawn
 *    under (0 when sampling was armed by the environment alone), its id, the ids of sampled
 *    blocks freed since the last report (free_ids[0..nfree), to be treated as freed before
 *    this alloc) and, when the library could walk them, its stack's frames.
 *
 *    Ids. Every sampled block gets a 64-bit id, unique in the process (a process-wide
 *    counter, starting at 1; a forked child goes on from the parent's value, so key ids by
 *    process). Frees name the block by id, never by address: the order in which the
 *    reports of different threads arrive does not matter, and an address handed out again
 *    before the free of its previous block was reported cannot be confused with it.
 *
 *    Frees are batched. A free (free, delete, any realloc of it: the result is a new block,
 *    munmap of the mapping's start; or, when the block's end went unseen, e.g. munmap of more
 *    than the mapping or MAP_FIXED over it, the next sample at its address) of a sampled
 *    block appends its id to a process-wide pending buffer; the
 *    buffer goes out with the next "alloc" of any thread once it holds 8 ids or more
 *    (nfree/free_ids: each batch is a ring-buffer record of its own), or with "free_batch"
 *    (ids: count ids, 1 <= count <= MEMPROF_PRELOAD_FREE_BATCH) when it is full, when the library
 *    sees sampling disarmed or re-armed, and at exit (the library's destructor; after it frees are
 *    reported one by one). "free" reports one free at once: when the buffer is busy (another
 *    thread is appending or flushing, or a signal handler interrupted this thread doing so: the
 *    buffer's lock is only ever tried, never waited for) or when sampling is disarmed. A block's
 *    free is always reported after its "alloc" returned, but may be reported late: until then the
 *    profiler sees the block live (a process that frees sampled blocks and then stops allocating
 *    holds up to MEMPROF_PRELOAD_FREE_BATCH - 1 of them until it allocates again or exits, unless
 *    the profiler takes them from its queue: struct memprof_preload_pending). A
 *    process killed by a signal, or one that ends with _exit() or the exit_group system call,
 *    loses its pending ids.
 *    Frees are reported whether or not sampling is still armed (as Gc.Memprof reports
 *    deallocations after stop), and may name blocks sampled under an older generation or
 *    inherited from the parent across fork (a child drops the parent's pending ids): a
 *    profiler ignores ids it does not track. Blocks sampled for an in-process profile
 *    (memprof_start()) have id 0 and are never reported.
 *
 *    Frames. When nframes >= 0, frames[0..nframes) is the frame-pointer walk a profiler
 *    would get from the probe (bpf_get_stack(BPF_F_USER_STACK)) with the library's own
 *    frames dropped from its top: return addresses, innermost first, starting in the
 *    allocator's caller. The library walks only within its thread's stack (from the stack
 *    pointer up to the stack's top, a range checked readable once per thread), so a walk
 *    that leaves it (no frame pointers, a signal or coroutine stack) is cut there. When
 *    nframes is -1 the library did not walk (the stack could not be bounded): the profiler
 *    walks from the probe and drops the frames inside the library's mapping itself.
 *
 *    Each probe site is a 5-byte nop (0f 1f 44 00 00), which Linux >= 6.18 turns into a call
 *    to the uprobe trampoline instead of an int3 trap. The probes sit in noinline functions
 *    called from the allocator entry points. On x86-64 their arguments are in the registers
 *    of the C calling convention (%rdi, %rsi, %rdx/%edx, %esi), as the notes say: a profiler
 *    may read the registers directly (memprofd does: each argument fetched through the USDT
 *    spec costs its BPF program about 50 ns).
 *
 *    Deferred mode (the default, N = MEMPROF_PRELOAD_MAX_BATCH; MEMPROF_BATCH=N sets
 *    2 <= N <= MEMPROF_PRELOAD_MAX_BATCH, MEMPROF_BATCH=1 reports each sample at once through
 *    "alloc", "immediate mode", as the paragraphs above describe). A sampled
 *    block whose frames the library walked is not reported at once: its record (struct
 *    memprof_preload_queued_alloc: the head of an alloc record, nfree 0, its frames, and
 *    time_ns, CLOCK_MONOTONIC when it was sampled: the clock of bpf_ktime_get_ns()) is
 *    appended to a process-wide queue, struct memprof_preload_queue, under the same try-lock
 *    as the pending frees, which share the queue: free_ids[0..nfree), and nalloc records
 *    packed in allocs[], each cut after its last frame (MEMPROF_PRELOAD_QUEUED_SIZE(nframes)
 *    bytes), bytes in all. The queue's first MEMPROF_PRELOAD_QUEUE_HEAD + bytes bytes are
 *    all of it, so a profiler copies it with one read (memprofd: one ring-buffer record per
 *    flush, parsed and checked by the daemon).
 *    "flush" passes the queue (valid while the probe runs; the lock is held across it) when it
 *    holds N allocs, when its oldest alloc is older than 10 ms (checked at each sampled alloc
 *    and at each free of a sampled block), when the free ids fill up, when the library sees
 *    sampling disarmed or re-armed, before fork (the child drops what it inherits) and at exit
 *    (the destructor). A profiler reports the allocs, in order, then the frees: a free may name
 *    an alloc of the same queue. In deferred mode every free of a sampled block goes through
 *    the queue (a thread that finds it busy waits for the holder; a signal handler that
 *    interrupted the holder on its own thread leaves its id to the holder), so a block's free
 *    is never reported before its alloc. A sample the library could not walk (nframes -1, or
 *    the queue busy: another thread flushing, a signal handler) is reported at once through
 *    "alloc", as in immediate mode (taking the pending frees only when no alloc is
 *    queued). A pending sample reaches the profiler late: up to 10 ms, or, when the process
 *    samples and frees nothing more, when the profiler takes the queue (memprofd: within about
 *    half a second) or at exit; samples still queued when the
 *    profiler changes the generation (a new rate, a stop) go out at the library's next
 *    allocator call, which sees the change, under the generation they were drawn under (a
 *    profiler keeps the previous generation's samples: memprofd gives them to the profile
 *    that was sampling then); a process killed by a signal loses its queue.
 *
 * 2. Semaphores. "memprof:alloc" carries the USDT semaphore memprof_alloc_semaphore ("free"
 *    memprof_free_semaphore, "free_batch" memprof_free_batch_semaphore). The kernel
 *    increments it in the target's memory when a uprobe is attached with the note's
 *    semaphore as ref_ctr_offset (libbpf's
 *    bpf_program__attach_usdt() does this). While the alloc semaphore is 0 (and neither
 *    MEMPROF_ARM nor an in-process profile arms it) the library is disarmed: its allocation
 *    fast paths do not even look at the countdown and no probe site is ever reached. While it
 *    is raised but the flags below say not to sample (a stopped profile), each thread's
 *    countdown polls every MEMPROF_PRELOAD_POLL_WORDS words it allocates. The alloc semaphore
 *    is the low half of a 32-bit word whose high half the library uses itself: a profiler
 *    must change it only through the kernel's ref_ctr_offset (16-bit adds).
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
 *	MEMPROF_WALK=0		never walk stacks in-process: every alloc record has
 *				nframes -1 and the profiler walks from the probe
 *	MEMPROF_BATCH=N		deferred mode (see "Deferred mode" above): report walked
 *				samples N at a time (2..MEMPROF_PRELOAD_MAX_BATCH, default
 *				MEMPROF_PRELOAD_MAX_BATCH) through memprof:flush; 1: each
 *				at once through memprof:alloc; other values are ignored
 *	MEMPROF_TEST_LOG=FD	also write a struct memprof_preload_test_rec to FD at every
 *				alloc probe site and at every free of a sampled block (when
 *				it is queued or reported), and arm sampling (tests). The
 *				writes are on the real code path.
 *
 * Limits: at most MEMPROF_PRELOAD_MAX_LIVE sampled blocks are tracked for frees at once. A
 * sample that cannot be tracked (that limit, or all its table slots taken) is not reported,
 * since its free would not be, and it would look like a leak: it is counted in table_full.
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
#define MEMPROF_PRELOAD_VERSION		3
#define MEMPROF_PRELOAD_DEFAULT_RATE	1e-4
#define MEMPROF_PRELOAD_POLL_WORDS	8192	/* disarmed: re-check arming every 64 KiB */
#define MEMPROF_PRELOAD_MAX_LIVE	(1u << 18)
#define MEMPROF_PRELOAD_FREE_BATCH	64	/* pending-free ids reported at once, at most */
#define MEMPROF_PRELOAD_MAX_FRAMES	127	/* frames[] of an alloc record */
#define MEMPROF_PRELOAD_MAX_BATCH	16	/* MEMPROF_BATCH: queued allocs, at most */
#define MEMPROF_PRELOAD_BATCH_AGE_NS	10000000	/* deferred: oldest queued alloc, at most */

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
	MEMPROF_PRELOAD_STAT_FREE_HOOKS,	/* memprof:free probe sites reached (frees
						 * reported one by one) */
	MEMPROF_PRELOAD_STAT_SAMPLES,		/* sum of nsamples over alloc hooks and
						 * queued allocs */
	MEMPROF_PRELOAD_STAT_LIVE,		/* sampled blocks currently tracked */
	MEMPROF_PRELOAD_STAT_TABLE_FULL,	/* samples whose frees cannot be tracked */
	MEMPROF_PRELOAD_STAT_STALE,		/* tracked address handed out again: a free we
						 * never saw (e.g. munmap of more than the
						 * mapping, MAP_FIXED over it), reported late,
						 * just before the new block's alloc */
	MEMPROF_PRELOAD_STAT_REALLOC_LOST,	/* realloc of a sampled block failed after its
						 * free was queued or reported: block no
						 * longer tracked */
	MEMPROF_PRELOAD_STAT_REENTERED,		/* sampling path re-entered (signal handler
						 * during a sampled call): call not sampled */
	MEMPROF_PRELOAD_STAT_TEST_LOG_ERRORS,	/* MEMPROF_TEST_LOG writes that failed */
	MEMPROF_PRELOAD_STAT_ARMINGS,		/* disarmed -> armed transitions (all threads) */
	MEMPROF_PRELOAD_STAT_FORK_REPAIRS,	/* probe sites a fork child restored to a nop:
						 * the parent's optimised uprobe pointed at a
						 * trampoline the child does not have */
	MEMPROF_PRELOAD_STAT_FREES_QUEUED,	/* frees of sampled blocks queued in the
						 * pending buffer (reported in batches) */
	MEMPROF_PRELOAD_STAT_BATCH_HOOKS,	/* memprof:free_batch and memprof:flush probe
						 * sites reached */
	MEMPROF_PRELOAD_STAT_BATCHED_IDS,	/* ids reported by memprof:free_batch,
						 * memprof:flush and with memprof:alloc (nfree) */
	MEMPROF_PRELOAD_STAT_UNWALKED,		/* alloc records with nframes -1 */
	MEMPROF_PRELOAD_STAT_DEFERRED,		/* allocs queued for memprof:flush (their
						 * nsamples are in SAMPLES too) */
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
	uint64_t pending;		/* address of its struct memprof_preload_pending, 0 until
					 * its constructor ran */
	uint64_t stats[MEMPROF_PRELOAD_STAT__SLOTS];	/* enum memprof_preload_stat */
};

extern struct memprof_preload_config memprof_preload_config;

/* What memprof:alloc points to (native endianness). */
struct memprof_preload_alloc_rec {
	uint64_t addr;			/* the block */
	uint64_t size;			/* requested bytes */
	uint64_t nsamples;		/* >= 1, final */
	uint64_t id;			/* the block's id, >= 1 */
	uint32_t kind;			/* enum memprof_preload_kind */
	uint32_t generation;		/* config generation the sample was drawn under */
	uint32_t nfree;			/* valid entries in free_ids[], <= FREE_BATCH */
	int32_t nframes;		/* valid entries in frames[], or -1: not walked */
	uint64_t free_ids[MEMPROF_PRELOAD_FREE_BATCH];	/* freed since the last report */
	uint64_t frames[MEMPROF_PRELOAD_MAX_FRAMES];	/* innermost first, see above */
};

/* Deferred mode: a queued sampled block (native endianness), packed in the queue at its length,
 * MEMPROF_PRELOAD_QUEUED_SIZE(nframes). */
struct memprof_preload_queued_alloc {
	uint64_t time_ns;		/* CLOCK_MONOTONIC when sampled */
	/* as in struct memprof_preload_alloc_rec: */
	uint64_t addr;
	uint64_t size;
	uint64_t nsamples;
	uint64_t id;
	uint32_t kind;
	uint32_t generation;
	uint32_t nfree;			/* 0 */
	int32_t nframes;		/* >= 0 */
	uint64_t frames[MEMPROF_PRELOAD_MAX_FRAMES];
};

#define MEMPROF_PRELOAD_QUEUED_SIZE(nframes)	(56 + 8 * (uint32_t)(nframes))

/* What memprof:flush points to: allocs first, then frees (which may name them). */
struct memprof_preload_queue {
	uint32_t nfree;			/* valid entries in free_ids[], <= FREE_BATCH */
	uint32_t nalloc;		/* records packed in allocs[], <= MAX_BATCH */
	uint32_t bytes;			/* bytes of allocs[] they fill */
	uint32_t _pad;
	uint64_t free_ids[MEMPROF_PRELOAD_FREE_BATCH];
	/* nalloc struct memprof_preload_queued_alloc, each cut after frames[nframes - 1] */
	uint64_t allocs[MEMPROF_PRELOAD_MAX_BATCH *
			sizeof(struct memprof_preload_queued_alloc) / sizeof(uint64_t)];
};
#define MEMPROF_PRELOAD_QUEUE_HEAD	(16 + 8 * MEMPROF_PRELOAD_FREE_BATCH)	/* offsetof allocs */

/*
 * The queue with its lock, where memprof_preload_config.pending points. Whoever holds the lock
 * (busy != 0) may change the queue, and adds 1 to seq before letting it go, so a profiler can
 * copy a consistent queue without trapping: busy and seq, the queue, busy and seq again, each
 * read after the one before (process_vm_readv() calls); busy 0 both times and seq unchanged
 * means nobody touched it in between. What it copies will still be reported by the library:
 * a profiler that takes it early must treat those ids as already seen, and leave the copy's
 * frees of the copy's own samples for that report (memprofd takes the queue of a process that
 * left it untouched for a while, so an idle process shows its last samples and frees).
 */
struct memprof_preload_pending {
	uint64_t busy;			/* 0: free */
	uint64_t seq;
	struct memprof_preload_queue q;
};

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
