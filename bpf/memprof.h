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
	MP_KIND__MAX,
};

enum mp_event_type {
	MP_EV_ALLOC = 1,	/* a block that holds a sample point: struct mp_alloc_event */
	MP_EV_FREE,		/* a sampled block was freed: struct mp_free_event */
	MP_EV_FORK,		/* a profiled process forked: struct mp_proc_event */
	MP_EV_EXEC,		/* a profiled process exec'd: struct mp_proc_event */
	MP_EV_EXIT,		/* a profiled process exited (last thread): struct mp_proc_event */
	MP_EV_THREAD_EXIT,	/* a thread (not the last) of a profiled process exited */
	/* Internal to daemon/bpf_loader.c, never delivered to its callback: ld.so of a profiled
	 * process reached _dl_debug_state (libraries mapped, dlopen): struct mp_proc_event. */
	MP_EV_MAP = 100,
};

struct mp_event_hdr {
	__u32 type;		/* enum mp_event_type */
	__u32 pid;		/* tgid, as seen from the initial pid namespace */
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
	__u64 stack[MP_MAX_STACK];
};

struct mp_free_event {
	struct mp_event_hdr h;
	__u64 addr;
	__u32 kind;		/* enum mp_kind */
	__u32 _pad;
};

struct mp_proc_event {
	struct mp_event_hdr h;
	__u32 other_pid;	/* FORK: the child; EXEC: the old pid if it changed */
	__u32 exit_code;	/* EXIT: the process' exit code (task->exit_code) */
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
};
#define MP_COOKIE(shape, kind)	(((__u64)(shape) << 8) | (kind))
#define MP_COOKIE_SHAPE(c)	((__u32)((c) >> 8) & 0xff)
#define MP_COOKIE_KIND(c)	((__u32)(c) & 0xff)

/* Per-process configuration, written by the daemon: map "procs", key = tgid. */
struct mp_proc_cfg {
	__u64 gap_k;		/* 32.32 fixed point K = ln 2 / -ln(1 - rate) (sampling-math.md) */
	__u32 profile;		/* profile id, > 0 */
	__u32 gen;		/* bumped when the rate changes: threads redraw their countdown */
	__u32 flags;		/* MP_PROC_* */
	__u32 max_frames;	/* callstack size for this profile, <= MP_MAX_STACK */
};

#define MP_PROC_SAMPLING	(1u << 0)	/* draw samples (cleared by stop) */
#define MP_PROC_FOLLOW_FORKS	(1u << 1)	/* children join the profile */
#define MP_PROC_RATE_ONE	(1u << 2)	/* rate 1: every word is sampled */

/* Drop and activity counters: per-CPU array "stats", indexed by enum mp_stat. */
enum mp_stat {
	MP_STAT_CALLS,		/* probed allocator calls from profiled processes */
	MP_STAT_SAMPLED,	/* alloc events sent */
	MP_STAT_FREES,		/* free events sent */
	MP_STAT_RINGBUF_DROPS,	/* bpf_ringbuf_reserve failed */
	MP_STAT_TABLE_DROPS,	/* sampled-address table full */
	MP_STAT_MISSED_RETURNS,	/* a return probe found no matching entry state */
	MP_STAT_STACK_ERRORS,	/* bpf_get_stack failed */
	MP_STAT_FOREIGN_CALLS,	/* probe hits from a process without a "procs" entry (must stay 0:
				 * probes are pid-filtered, so other processes never trap) */
	MP_STAT_PROCS_FULL,	/* a followed fork found the "procs" map full */
	MP_STAT_NESTED,		/* allocator calls made inside another allocator call (ignored) */
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

#ifndef __bpf__
_Static_assert(sizeof(struct mp_event_hdr) == 24, "mp_event_hdr layout");
_Static_assert(sizeof(struct mp_alloc_event) == 24 + 32 + 8 * MP_MAX_STACK, "alloc layout");
_Static_assert(sizeof(struct mp_free_event) == 40, "free layout");
_Static_assert(sizeof(struct mp_proc_event) == 32, "proc layout");
_Static_assert(sizeof(struct mp_proc_cfg) == 24, "proc cfg layout");
#endif

#endif /* MEMPROF_BPF_ABI_H */
