/* SPDX-License-Identifier: (LGPL-2.1-or-later OR BSD-2-Clause) */
/*
 * The ABI between the BPF programs (bpf/memprof.bpf.c) and user space (daemon/).
 * Fixed-width fields, explicit padding, sizes pinned by _Static_assert: this header is
 * compiled by clang -target bpf and by gcc, and both must agree byte for byte.
 */
#ifndef MEMPROF_BPF_ABI_H
#define MEMPROF_BPF_ABI_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define MP_MAX_STACK		127	/* frames per sampled event (bpf_get_stack limit) */
#define MP_MAX_PROCS		4096	/* processes under a profile at once */
#define MP_MAX_SAMPLED		(1 << 20) /* sampled live blocks tracked for frees */
#define MP_RINGBUF_SIZE		(8 << 20)

/* Which allocator entry point produced an event. */
enum mp_kind {
	MP_KIND_MALLOC = 1,
	MP_KIND_CALLOC,
	MP_KIND_REALLOC,
	MP_KIND_REALLOCARRAY,
	MP_KIND_POSIX_MEMALIGN,
	MP_KIND_ALIGNED_ALLOC,
	MP_KIND_MEMALIGN,
	MP_KIND_VALLOC,
	MP_KIND_PVALLOC,
	MP_KIND_NEW,		/* operator new, new[], nothrow and aligned variants */
	MP_KIND_MMAP,		/* anonymous mmap: source distinct from the heap */
	MP_KIND_FREE,
	MP_KIND_DELETE,		/* operator delete, delete[], sized and aligned variants */
	MP_KIND_MUNMAP,
	MP_KIND_EXEC,		/* block dropped because its process exec'd */
	MP_KIND_XALLOCX,	/* jemalloc xallocx: a resize in place, modelled as collect +
				 * alloc of the new size at the same address when it succeeds */
	MP_KIND__MAX,
};

/*
 * Flag in the kind field of MP_EV_ALLOC and MP_EV_FREE records, above every enum mp_kind value
 * (kind & MP_KIND_MASK is the enum mp_kind). MP_KIND_F_PRELOAD: the record comes from
 * libmemprof-preload's USDT probes (memprof:alloc / memprof:free, <memprof/preload.h>), not
 * from allocator uprobes. An alloc's "remaining" is then the block's final multiplicity
 * n >= 1, drawn in-process: the daemon draws nothing, and its "addr" is the block's id
 * (memprof_preload_alloc_rec.id, unique per process), not its address: its frees arrive by id
 * in MP_EV_FREE_BATCH records, which may name blocks the daemon never saw (sampled under an
 * older generation, or inherited across fork): those are ignored.
 */
#define MP_KIND_F_PRELOAD	(1u << 31)
#define MP_KIND_MASK		0xffu

enum mp_event_type {
	MP_EV_ALLOC = 1,	/* a block that holds a sample point: struct mp_alloc_event */
	MP_EV_FREE,		/* a sampled block was freed: struct mp_free_event */
	MP_EV_FORK,		/* a profiled process forked: struct mp_proc_event */
	MP_EV_EXEC,		/* a profiled process exec'd: struct mp_proc_event */
	MP_EV_EXIT,		/* a profiled process exited (last thread): struct mp_proc_event */
	MP_EV_THREAD_EXIT,	/* a thread (not the last) of a profiled process exited */
	/* A process no profile samples joined a profile's target (struct mp_proc_event; its
	 * profile the target's, exit_code an enum mp_join_how): it exec'd a watched executable
	 * or in a watched cgroup, or was moved into one. BPF only reports it: the daemon checks
	 * the owner's access, then configures and probes it as it does a PID attach. */
	MP_EV_JOIN,
	/* A cgroup was created in the v2 hierarchy while cgroups are watched (struct
	 * mp_proc_event, pid 0): a watched path may have a new cgroup (a unit restarted). */
	MP_EV_CGROUP_NEW,
	/* libmemprof-preload: sampled blocks freed, by id: struct mp_free_batch_event */
	MP_EV_FREE_BATCH = 16,
	/* libmemprof-preload's deferred queue: struct mp_preload_batch_event */
	MP_EV_PRELOAD_BATCH = 17,
	/* Internal to the loader (daemon/probe/ring.c), never delivered to its callback: ld.so of a
	 * profiled process reached _dl_debug_state (libraries mapped, dlopen): struct
	 * mp_proc_event. */
	MP_EV_MAP = 100,
};

struct mp_event_hdr {
	__u32 type;		/* enum mp_event_type */
	__u32 pid;		/* tgid in the loader's pid namespace (so are all pids) */
	__u32 tid;
	__u32 profile;		/* profile id the event belongs to */
	__u64 time_ns;		/* bpf_ktime_get_ns() (CLOCK_MONOTONIC) */
};

struct mp_alloc_event {
	struct mp_event_hdr h;
	__u64 addr;		/* returned block (0 if the allocation failed: never sent) */
	__u64 size;		/* requested bytes */
	__u64 remaining;	/* words of the block after its first sample point: the daemon
				 * draws 1 + Binomial(remaining, rate) samples */
	__u32 kind;		/* enum mp_kind */
	__u32 nframes;		/* valid entries in stack[], innermost first */
	__u64 start_stack;	/* the allocating image's mm->start_stack (0: unknown): set anew
				 * at each exec, it tells the daemon whether /proc/PID/maps still
				 * shows the image the stack's addresses belong to */
	__u64 stack[MP_MAX_STACK];
};

/*
 * Optional tail of an MP_EV_ALLOC record, for DWARF unwinding in the daemon (daemon/stacks/unwind.h):
 * present when the record is longer than struct mp_alloc_event, right after it (stack[] is then
 * always full size). Only sampled allocations of processes whose mp_proc_cfg.ustack_size is
 * non-zero carry one. Taken at the allocator's return: ip is the return address into the
 * caller and sp the caller's stack pointer after the ret, a valid unwinding start for the
 * caller's frame. The copy is whole pages from sp's page upward (a read fails wholly when a
 * page is unmapped), ending after the last readable page (an unreadable page below it was never
 * faulted in, and is zero in the copy): data[offset] is the byte at sp, and size bytes from sp
 * upward are valid (size <= ustack_size). It never reaches a trace.
 */
struct mp_ustack {
	__u64 ip;		/* PT_REGS_IP: return address into the allocator's caller */
	__u64 sp;		/* PT_REGS_SP */
	__u64 bp;		/* PT_REGS_FP */
	__u32 offset;		/* sp & (MP_PAGE_SIZE - 1): where sp's byte is in data[] */
	__u32 size;		/* valid bytes from data[offset] up */
	/* __u8 data[]: whole pages starting at sp's page (record size - headers bytes) */
};

#define MP_PAGE_SIZE		4096
#define MP_USTACK_MAX		(64 << 10)	/* largest copy (mp_proc_cfg.ustack_size) */
#define MP_USTACK_DEFAULT	(16 << 10)	/* default copy: see docs/DESIGN.md, stacks */

struct mp_free_event {
	struct mp_event_hdr h;
	__u64 addr;
	__u32 kind;		/* enum mp_kind */
	__u32 _pad;
};

/*
 * MP_EV_FREE_BATCH: ids (the "addr" of MP_KIND_F_PRELOAD alloc records) of sampled blocks that
 * process h.pid freed, oldest first, all before any alloc record that follows this one from the
 * same thread. The record holds at least count ids (it may be shorter than the struct).
 */
#define MP_FREE_BATCH_MAX	64

struct mp_free_batch_event {
	struct mp_event_hdr h;
	__u32 count;		/* 1..MP_FREE_BATCH_MAX */
	__u32 kind;		/* MP_KIND_F_PRELOAD | MP_KIND_FREE */
	__u64 ids[MP_FREE_BATCH_MAX];
};

/*
 * The head of struct memprof_preload_alloc_rec (<memprof/preload.h>), what the memprof:alloc
 * USDT probe points to, as the BPF program reads it; free_ids[] and frames[] follow.
 */
struct mp_preload_alloc_head {
	__u64 addr;
	__u64 size;
	__u64 nsamples;
	__u64 id;
	__u32 kind;
	__u32 generation;
	__u32 nfree;
	__s32 nframes;		/* -1: walk from the probe */
};
#define MP_PL_REC_FREE_IDS	48	/* offsetof free_ids */
#define MP_PL_REC_FRAMES	(48 + 8 * MP_FREE_BATCH_MAX)	/* offsetof frames */

/*
 * Deferred mode: struct memprof_preload_queue, what memprof:flush points to: nfree, nalloc,
 * bytes, free_ids[MP_FREE_BATCH_MAX], then nalloc entries packed in "bytes" bytes, each this
 * head followed by its nframes frames. The queue's first MP_PL_QUEUE_ALLOCS + bytes bytes are
 * all of it.
 */
#define MP_PL_QUEUE_MAX		16
#define MP_PL_QUEUE_ALLOCS	(16 + 8 * MP_FREE_BATCH_MAX)	/* offsetof allocs */
#define MP_PL_QUEUED_SIZE	(8 + 48 + 8 * MP_MAX_STACK)	/* an entry, at most */
#define MP_PL_QUEUE_SIZE	(MP_PL_QUEUE_ALLOCS + MP_PL_QUEUE_MAX * MP_PL_QUEUED_SIZE)

struct mp_preload_queued_head {
	__u64 time_ns;		/* CLOCK_MONOTONIC when sampled */
	struct mp_preload_alloc_head r;	/* nfree 0; nframes >= 0 */
};

struct mp_preload_queue_head {
	__u32 nfree;
	__u32 nalloc;
	__u32 bytes;
	__u32 _pad;
};

/*
 * MP_EV_PRELOAD_BATCH: what one memprof:flush passed, copied as it is (one record, one read,
 * whatever the number of samples): q[0..size) is the start of the process' struct
 * memprof_preload_queue. The daemon parses and checks it (it is the process' memory: anything
 * may be there): entries go to the profile of their generation as struct mp_preload_target
 * says (gen/flags/h.profile, or prev_*), others are dropped, frames beyond max_frames cut,
 * times later than h.time_ns set to it; then the allocs are handled as MP_KIND_F_PRELOAD alloc
 * records of h.tid, in order, then the frees as an MP_EV_FREE_BATCH.
 */
struct mp_preload_batch_event {
	struct mp_event_hdr h;	/* profile: the process' current one */
	__u32 gen;		/* the generation memprofd last wrote (mp_preload_target.gen) */
	__u32 max_frames;	/* the process' mp_proc_cfg.max_frames, 1..MP_MAX_STACK */
	__u32 flags;		/* the process' mp_proc_cfg.flags */
	__u32 size;		/* bytes of q[]: 0 when the queue could not be read */
	__u32 prev_gen;		/* mp_preload_target's previous generation, its profile and */
	__u32 prev_profile;	/* flags: samples drawn under it go to that profile */
	__u32 prev_flags;
	__u32 origin;		/* enum mp_preload_batch_origin */
	__u8 q[];
};

enum mp_preload_batch_origin {
	MP_PL_BATCH_FLUSHED = 0,	/* memprof:flush: the library sent it */
	/* The daemon copied an idle queue (mp_bpf__preload_pull): the library will still send
	 * it. Its frees of blocks whose samples are in it too are left for then: applied now,
	 * the samples sent later would be taken for new blocks. */
	MP_PL_BATCH_PULLED = 1,
};

struct mp_proc_event {
	struct mp_event_hdr h;
	__u32 other_pid;	/* FORK: the child; EXEC: the old pid if it changed */
	__u32 exit_code;	/* EXIT: the process' exit code (task->exit_code) */
	/* the current task's comm (FORK: the parent's, which the child has; EXEC: the new
	 * image's), for a process gone before the daemon could read /proc */
	char comm[16];
};

/*
 * Attach cookie of the entry program: where the function's arguments are (shape) and what it is
 * (enum mp_kind). Set by the loader from its probe table.
 */
enum mp_shape {
	MP_SHAPE_SIZE1 = 1,	/* size in arg 1 */
	MP_SHAPE_SIZE2,		/* size in arg 2 */
	MP_SHAPE_CALLOC,	/* n, size */
	MP_SHAPE_REALLOC,	/* ptr, size */
	MP_SHAPE_REALLOCARRAY,	/* ptr, n, size */
	MP_SHAPE_POSIX_MEMALIGN,	/* memptr, align, size */
	MP_SHAPE_MMAP,		/* addr, len, prot, flags */
	MP_SHAPE_FREE,		/* ptr (no return probe) */
	MP_SHAPE_DLSTATE,	/* ld.so's _dl_debug_state: emits MP_EV_MAP */
	MP_SHAPE_XALLOCX,	/* ptr, size, extra, flags; returns the block's real size */
	MP_SHAPE_HEAP_CALLOC,	/* heap, n, size (mimalloc's mi_heap_calloc) */
	MP_SHAPE_HEAP_REALLOC,	/* heap, ptr, size (mimalloc's mi_heap_realloc) */
	MP_SHAPE_PAGES,		/* size in arg 1, the block whole pages (pvalloc) */
	/* The loader's probes on its own process (daemon/probe/selfprobe.c), never on a target:
	 * SELFTEST checks uprobe session semantics, CALIBRATE measures the cost of a probe hit
	 * (kind 0: entry only, kind 1: entry and return). */
	MP_SHAPE_SELFTEST = 250,
	MP_SHAPE_CALIBRATE,
};

/* Map "selftest" (array of __u64), written by the SELFTEST/CALIBRATE probes. */
enum mp_selftest {
	MP_SELFTEST_ENTRIES,	/* SELFTEST entry hits */
	MP_SELFTEST_RETURNS,	/* SELFTEST/CALIBRATE return hits */
	MP_SELFTEST_CALIB,	/* CALIBRATE entry hits */
	MP_SELFTEST__MAX,
};

/*
 * Probe hits of a process (per-CPU hash "phits", key = tgid), for the overhead estimate:
 * entries = entry probe hits (every probed call), returns = return probe hits (every call with
 * a return probe; with uprobe sessions only the calls whose return half ran).
 */
struct mp_proc_hits {
	__u64 entries;
	__u64 returns;
};
/*
 * The sampled-address filter (global mp_sfilter[] of bpf/memprof.bpf.c, in .bss): per slot, a
 * count of the "sampled" entries that hash to it (never fewer). The loader decrements a slot,
 * atomically, for each entry it purges.
 */
#define MP_SFILTER_BITS		16
#define MP_SFILTER_SIZE		(1u << MP_SFILTER_BITS)
#define MP_SFILTER_SLOT(tgid, addr) \
	((__u32)((((__u64)(addr) >> 4) ^ ((__u64)(tgid) << 40)) * 0x9e3779b97f4a7c15ull >> \
		 (64 - MP_SFILTER_BITS)))

#define MP_COOKIE(shape, kind)	(((__u64)(shape) << 8) | (kind))
#define MP_COOKIE_SHAPE(c)	((__u32)((c) >> 8) & 0xff)
#define MP_COOKIE_KIND(c)	((__u32)(c) & 0xff)
/*
 * Set by the loader on probes in the C library (libc.so*) only:
 * MP_COOKIE_F_LEAF: malloc and calloc, which call no probed function but the C library's own
 *   mmap/munmap; with sessions an unsampled call of theirs need not remember its frame for
 *   nesting (no read of its return address): the nested mmap is recognised by MP_COOKIE_SEG.
 * MP_COOKIE_SEG(before, after): on mmap, the executable segment of the C library around the
 *   probe, in bytes (kept in 16-byte units, rounded inwards; 0, 0: none). An mmap returning
 *   into it is the C library's own (malloc growing or trimming a heap, a thread's stack), not
 *   an allocation of the program, and is not sampled.
 */
#define MP_COOKIE_F_LEAF		(1ull << 16)
#define MP_COOKIE_SEG_MAX		((1ull << 23) - 1)	/* in 16-byte units: 128 MiB */
#define MP_COOKIE_SEG(before, after)	((((__u64)(before) >> 4) << 17) | \
					 (((__u64)(after) >> 4) << 40))
#define MP_COOKIE_SEG_BEFORE(c)		((((c) >> 17) & MP_COOKIE_SEG_MAX) << 4)
#define MP_COOKIE_SEG_AFTER(c)		((((c) >> 40) & MP_COOKIE_SEG_MAX) << 4)

/* Per-process configuration, written by the daemon: map "procs", key = tgid. */
struct mp_proc_cfg {
	__u64 gap_k;		/* 32.32 fixed point K = ln 2 / -ln(1 - rate) (docs/sampling.md) */
	__u32 profile;		/* profile id, > 0 */
	__u32 gen;		/* bumped when the rate changes: threads redraw their countdown */
	__u32 flags;		/* MP_PROC_* */
	__u32 max_frames;	/* callstack size for this profile, <= MP_MAX_STACK */
	__u32 ustack_size;	/* bytes of user stack copied with each sampled alloc event
				 * (struct mp_ustack), <= MP_USTACK_MAX; 0 = none */
	__u32 _pad;
};

#define MP_PROC_SAMPLING	(1u << 0)	/* draw samples (cleared by stop) */
#define MP_PROC_FOLLOW_FORKS	(1u << 1)	/* children join the profile */
#define MP_PROC_RATE_ONE	(1u << 2)	/* rate 1: every word is sampled */
#define MP_PROC_DETACHED	(1u << 7)	/* probes being removed (over the overhead budget):
						 * probe hits do nothing; exit still reported */
#define MP_PROC_PRELOAD		(1u << 3)	/* profiled through libmemprof-preload (set by
						 * the loader): uprobe hits are ignored */
#define MP_PROC_NO_MMAP		(1u << 9)	/* a Go program (set by the loader): its mmaps
						 * are the Go runtime's, not sampled */
#define MP_PROC_PRIVILEGED	(1u << 8)	/* the profile's owner may profile any image
						 * (root): an exec that raises privileges
						 * goes on sampling */

/*
 * Targets beyond PIDs (daemon/engine/targets.c): the executables and v2 cgroups whose new
 * processes join a profile. Map "exewatch": key the executable's inode number, value the
 * profile id (the device is the daemon's to check: on overlayfs the inode an exec runs is the
 * overlay's, on another device than the file stat(2) describes, with the same number); map
 * "cgwatch": key the cgroup's id (its kernfs id: the inode of its directory in cgroup2fs),
 * value the profile id; a process in any descendant of a watched cgroup joins too.
 */
#define MP_MAX_WATCHES		256
#define MP_CG_MAX_DEPTH		16	/* ancestors looked at above a process' cgroup */

/* mp_proc_event.exit_code of an MP_EV_JOIN record */
enum mp_join_how {
	MP_JOIN_EXEC_EXE = 1,	/* exec'd a watched executable */
	MP_JOIN_EXEC_CGROUP,	/* exec'd in a watched cgroup */
	MP_JOIN_MOVED,		/* moved into a watched cgroup (comm: the mover's) */
};

/* mp_proc_event.exit_code of an MP_EV_EXEC record */
#define MP_EXEC_F_SECURE	(1u << 0)	/* the new image runs with other credentials or
						 * capabilities (set-id, file caps, AT_SECURE):
						 * without MP_PROC_PRIVILEGED, BPF marked the
						 * process MP_PROC_DETACHED at the exec */

/* Drop and activity counters: per-CPU array "stats", indexed by enum mp_stat. */
enum mp_stat {
	MP_STAT_CALLS,		/* probed allocator calls from profiled processes */
	MP_STAT_SAMPLED,	/* alloc events sent */
	MP_STAT_FREES,		/* free events sent */
	MP_STAT_RINGBUF_DROPS,	/* bpf_ringbuf_reserve failed */
	MP_STAT_TABLE_DROPS,	/* sampled-address table full */
	MP_STAT_MISSED_RETURNS,	/* a return probe found no call in progress (while entries ran) */
	MP_STAT_STACK_ERRORS,	/* bpf_get_stack failed */
	MP_STAT_FOREIGN_CALLS,	/* probe hits from a process without a "procs" entry (must stay 0:
				 * probes are pid-filtered, so other processes never trap) */
	MP_STAT_PROCS_FULL,	/* a followed fork found the "procs" map full */
	MP_STAT_NESTED,		/* allocator calls made inside another allocator call (ignored) */
	MP_STAT_USTACK_LOST,	/* sampled events sent without their user-stack copy (ring
				 * space for the larger record): their stacks are frame-pointer
				 * walks */
	MP_STAT_NO_TSTATE,	/* probed calls that found no thread state (task storage busy on
				 * the CPU, or no memory): counted, frees still matched, but the
				 * block was not exposed to sampling */
	MP_STAT__MAX,
};

/*
 * The sampled-address table (BPF map "sampled"), shared with the loader, which purges a
 * process' stale entries after exec and exit. incarnation = bpf_ktime_get_ns() when the process
 * image began to be tracked (first probe hit, fork or exec): an entry whose incarnation differs
 * from the process' current one belongs to an old image and never matches a free.
 */
struct mp_sampled_key {
	__u32 tgid;
	__u32 _pad;
	__u64 addr;
};

struct mp_sampled_val {
	__u64 incarnation;
	__u32 profile;
	__u32 kind;		/* enum mp_kind of the allocation */
};

/*
 * A process profiled through libmemprof-preload (map "pltargets", key = tgid, written by the
 * loader): the library's executable mapping, whose frames the USDT programs drop from the top
 * of a stack, and the config generation the daemon last wrote with the profile and procs flags
 * it was written for, and the one before it. A sample drawn under the current generation
 * belongs to the process' profile when it samples; one drawn under the previous generation
 * (reported after a stop or a new rate: a deferred queue, or a report racing the write)
 * belongs to the previous profile if that one sampled (the engine keeps it when it was drawn
 * before the stop); any other is dropped.
 */
struct mp_preload_target {
	__u64 lo, hi;		/* [lo, hi): the library's mappings */
	__u32 gen;		/* memprof_preload_config.generation written by the daemon */
	__u32 profile;		/* ... for this profile */
	__u32 flags;		/* ... with these mp_proc_cfg.flags */
	__u32 prev_gen;		/* the generation before it (0: none) */
	__u32 prev_profile;
	__u32 prev_flags;
};

#ifndef __bpf__
_Static_assert(sizeof(struct mp_event_hdr) == 24, "mp_event_hdr layout");
_Static_assert(sizeof(struct mp_alloc_event) == 24 + 40 + 8 * MP_MAX_STACK, "alloc layout");
_Static_assert(sizeof(struct mp_free_event) == 40, "free layout");
_Static_assert(sizeof(struct mp_proc_event) == 48, "proc layout");
_Static_assert(sizeof(struct mp_free_batch_event) == 32 + 8 * MP_FREE_BATCH_MAX, "batch layout");
_Static_assert(sizeof(struct mp_preload_alloc_head) == MP_PL_REC_FREE_IDS, "preload rec head");
_Static_assert(sizeof(struct mp_preload_queued_head) + 8 * MP_MAX_STACK == MP_PL_QUEUED_SIZE,
	       "preload queued record");
_Static_assert(sizeof(struct mp_preload_queue_head) == 16 &&
		       sizeof(struct mp_preload_batch_event) == 56, "preload batch layout");
_Static_assert(sizeof(struct mp_preload_target) == 40, "preload target layout");
_Static_assert(sizeof(struct mp_proc_cfg) == 32, "proc cfg layout");
_Static_assert(sizeof(struct mp_ustack) == 32, "ustack layout");
#endif

#endif /* MEMPROF_BPF_ABI_H */
