// SPDX-License-Identifier: (LGPL-2.1-or-later OR BSD-2-Clause)
/*
 * memprofd's kernel side: allocator uprobes (entry) and uretprobes (return) attached pid-filtered
 * by the loader (daemon/probe/), plus fork/exec/exit tracepoints. The ABI is bpf/memprof.h.
 *
 * Per thread (task storage) we keep the countdown c of docs/sampling.md and the state of the
 * outermost allocator call in progress. An entry probe decides whether the block holds a sample
 * point (size is known there); the return probe emits the event (the address is known there) and
 * takes the user stack, which at return is complete: stack[0] is the return address into the
 * allocator's caller. Frees only become events when the address is in the "sampled" table.
 *
 * Nesting: an allocator call made while another one of the same thread is in progress (operator
 * new -> malloc, realloc(NULL, n) -> malloc, realloc(p, 0) -> free, malloc -> mmap) is ignored.
 * The outer call is recognised by its stack pointer: a nested call, or a tail call, runs at a
 * stack pointer <= the outer call's entry stack pointer. A stale state (a return we never saw)
 * is recognised by a call at a higher stack pointer and dropped.
 *
 * Sessions (mp_session, Linux 6.13+): one program for entry and return; the entry half skips the
 * return half of calls that hold no sample point, so such a call leaves no depth behind. Its
 * frame is remembered instead (noret_*): a later call is nested in it while its return address
 * is still at its entry stack pointer (nested_noret()).
 *
 * The unsampled call is the hot path (every malloc and free of a profiled process): one lookup
 * of the process' configuration, one of the thread's state, the countdown, and for frees a
 * look at the sampled-address filter (mp_sfilter) that spares the large sampled table's lookup
 * for nearly every block that was not sampled. Probe hits are counted per thread and added to
 * the per-process counters in batches (hits_count()).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "memprof.h"
#include "gap.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Keeps clang from turning the overflow check below into a 128-bit multiply (no BPF insn). */
static __always_inline bool mul_overflows(__u64 n, __u64 size)
{
	__u64 lim;

	if (!size)
		return false;
	lim = ~0ULL / size;
	asm volatile("" : "+r"(lim));
	return n > lim;
}

#define MAP_ANONYMOUS_FLAG	0x20
#define MAP_FAILED_ADDR		((__u64)-1)

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MP_MAX_PROCS);
	__type(key, __u32);
	__type(value, struct mp_proc_cfg);
} procs SEC(".maps");

/* Per-process incarnation (see struct mp_sampled_val), owned by BPF. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MP_MAX_PROCS);
	__type(key, __u32);
	__type(value, __u64);
} pstate SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MP_MAX_SAMPLED);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct mp_sampled_key);
	__type(value, struct mp_sampled_val);
} sampled SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MP_STAT__MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, MP_RINGBUF_SIZE);
} rb SEC(".maps");

/* Probe hits per process (overhead accounting, bpf/memprof.h struct mp_proc_hits). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, MP_MAX_PROCS);
	__type(key, __u32);
	__type(value, struct mp_proc_hits);
} phits SEC(".maps");

/* The loader's self-tests on its own process (enum mp_selftest). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MP_SELFTEST__MAX);
	__type(key, __u32);
	__type(value, __u64);
} selftest SEC(".maps");

/* Linux 6.13+: in a uprobe session program, true in the return half. */
extern bool bpf_session_is_return(void) __ksym __weak;

/* Set by the loader before load: the allocator probes are uprobe sessions (mp_session), so an
 * entry that skips its return half leaves no nesting depth behind (see nested_noret()). */
const volatile bool mp_session_mode = false;

/*
 * The daemon's pid namespace. Every pid that crosses the BPF/user-space boundary (map keys,
 * event pids) is a pid in that namespace. Set by the loader before load: mp_pidns_nested when it
 * is not the initial one (whose pids are the kernel's own: the verifier prunes the rest), and
 * dev/ino identifying it (/proc/self/ns/pid, dev in the kernel's encoding). Its level (depth) is
 * learnt at load by mp_pidns_probe, run in the loader's context.
 */
const volatile bool mp_pidns_nested = false;
const volatile __u64 mp_pidns_dev = 0;
const volatile __u64 mp_pidns_ino = 0;
__u32 mp_pidns_level = 0;
__u64 mp_pidns_self = 0;	/* the loader's ids, as mp_pidns_probe saw them */

#define MP_PIDNS_MAX_LEVEL	32	/* the kernel's MAX_PID_NS_LEVEL */

/* @pid's number in the daemon's pid namespace; 0 when it has none there. */
static __always_inline __u32 pid_nr_ns(struct pid *pid)
{
	__u32 lvl = mp_pidns_level;
	struct pid_namespace *ns;
	struct upid *up;

	if (!pid || lvl > MP_PIDNS_MAX_LEVEL || BPF_CORE_READ(pid, level) < lvl)
		return 0;
	up = (void *)pid + bpf_core_field_offset(struct pid, numbers) +
	     lvl * bpf_core_type_size(struct upid);
	ns = BPF_CORE_READ(up, ns);
	if (!ns || BPF_CORE_READ(ns, ns.inum) != mp_pidns_ino)
		return 0;
	return BPF_CORE_READ(up, nr);
}

/* @task's ids as (tgid << 32 | tid) in the daemon's pid namespace; 0 when it is not in it. */
static __always_inline __u64 mp_task_ids(struct task_struct *task)
{
	__u32 tid, tgid;

	if (!mp_pidns_nested)
		return (__u64)task->tgid << 32 | (__u32)task->pid;
	tid = pid_nr_ns(BPF_CORE_READ(task, thread_pid));
	tgid = pid_nr_ns(BPF_CORE_READ(task, group_leader, thread_pid));
	return tid && tgid ? (__u64)tgid << 32 | tid : 0;
}

/* Run once by the loader (BPF_PROG_TEST_RUN, in its context), only when mp_pidns_nested: learns
 * mp_pidns_level and checks that the helper knows the namespace by mp_pidns_dev/ino. */
SEC("raw_tp")
int mp_pidns_probe(void *ctx)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct bpf_pidns_info ns;

	if (bpf_get_ns_current_pid_tgid(mp_pidns_dev, mp_pidns_ino, &ns, sizeof(ns)))
		return 0;
	mp_pidns_level = BPF_CORE_READ(task, thread_pid, level);
	mp_pidns_self = (__u64)ns.tgid << 32 | ns.pid;
	return 0;
}

/* Per-thread state. */
struct tstate {
	__u64 countdown;	/* words up to and including the next sample point; 0 = draw */
	__u32 gen;		/* mp_proc_cfg.gen / profile the countdown was drawn for */
	__u32 profile;
	/* The outermost allocator call in progress (depth > 0). */
	__u64 outer_sp;		/* stack pointer at its entry probe */
	__u64 size;		/* requested bytes */
	__u64 remaining;	/* words after the first sample point, when sampled */
	__u64 arg;		/* posix_memalign: the out-pointer; realloc: the old block */
	__u64 old_incarnation;	/* realloc: the old block's sampled entry, if it had one */
	__u32 old_profile;	/* realloc: != 0 when the old block was sampled */
	__u32 old_kind;
	__u32 depth;		/* nesting depth of calls with a return probe */
	__u32 kind;
	__u32 sample_profile;	/* != 0: the block holds a sample point for this profile */
	__u32 _pad;
	/* Sessions (mp_session): the last outermost call whose return half was skipped, which
	 * may still be running (see nested_noret()). noret_sp == 0: none. */
	__u64 noret_sp;		/* its entry stack pointer (where its return address is) */
	__u64 noret_ret;	/* its return address, *(noret_sp) at entry */
	__u64 noret_ip;		/* its probe address */
	__u32 hit_entries;	/* probe hits not yet added to "phits" (hits_count(); */
	__u32 hit_returns;	/* flushed at thread exit too) */
	__u64 ns_ids;		/* mp_current_ids() (mp_thread_ids(); in a nested pid namespace,
				 * mp_current_ids() itself); 0: unknown */
	__u64 calib;		/* written by calibrate_entry() */
	/* The process' "procs" entry as thread_cfg() read it, valid while cfg_epoch is
	 * mp_procs_epoch + 1 (0: never read). */
	__u64 cfg_epoch;
	struct mp_proc_cfg cfg;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct tstate);
} tstates SEC(".maps");

/*
 * The sampled-address filter (bpf/memprof.h, MP_SFILTER_SLOT): a counter per slot, at least the
 * number of "sampled" entries whose key hashes to it. Incremented before an entry is inserted,
 * decremented after one is deleted (by BPF, or by the loader's purge, atomically through the
 * mmap'ed .bss): a zero slot proves the address was not sampled, so a free of an unsampled
 * block (nearly all of them) skips the lookup in the big table, whose million buckets miss the
 * cache. A lost decrement only makes the filter less selective, never wrong.
 */
__u32 mp_sfilter[MP_SFILTER_SIZE];

/*
 * Bumped after every write of "procs" (by the loader through the mmap'ed .bss, atomically, and
 * by mp_fork): a thread's copy of its process' entry (thread_cfg()) is good while the epoch it
 * was read under is current, which spares the unsampled path a hash lookup per call. A thread
 * that read the epoch just before a write acts on the old entry once, as if it ran before it.
 */
__u64 mp_procs_epoch;

static __always_inline void sfilter_add(__u32 tgid, __u64 addr, __s32 d)
{
	__sync_fetch_and_add(&mp_sfilter[MP_SFILTER_SLOT(tgid, addr)], d);
}

/*
 * Alloc and free records leave the last MP_RINGBUF_RESERVE bytes of the ring to fork/exec/exit
 * records, so that a flood of samples the daemon cannot keep up with does not also cost it the
 * news that a process exited.
 */
#define MP_RINGBUF_RESERVE	(256 << 10)

static __always_inline void *data_reserve(__u64 size)
{
	if (bpf_ringbuf_query(&rb, BPF_RB_AVAIL_DATA) + size > MP_RINGBUF_SIZE - MP_RINGBUF_RESERVE)
		return NULL;
	return bpf_ringbuf_reserve(&rb, size, 0);
}

/*
 * Waking the consumer costs the traced thread a self-IPI per record (irq_work: an APIC write,
 * a VM exit under a hypervisor; ~20 µs measured), more than the rest of a sample. Alloc and
 * free records therefore wake it only when the data pending in the ring (this record
 * included: it is reserved, so the reader cannot be past it) crosses a multiple of
 * MP_DATA_WAKE_BYTES; the engine's flush timer bounds the latency of the rest. One wakeup per
 * multiple, not one per record above it: a reader that is busy catching up is not woken again
 * for every record, and a crossing missed by two CPUs racing is caught at the next multiple.
 * Fork/exec/exit/map records always wake it (emit_proc: BPF_RB_FORCE_WAKEUP, since the
 * kernel's default only wakes a reader that had read everything before the record).
 */
#define MP_DATA_WAKE_SHIFT	18	/* 256 KiB: 1/32 of the ring */

static __always_inline __u64 data_wake_flags(__u64 size)
{
	__u64 avail = bpf_ringbuf_query(&rb, BPF_RB_AVAIL_DATA);
	__u64 len = (size + 8 + 7) & ~7ull;	/* the record as the ring holds it: header, padding */

	if (avail < len)	/* cannot be: see above */
		return BPF_RB_FORCE_WAKEUP;
	return (avail >> MP_DATA_WAKE_SHIFT) != ((avail - len) >> MP_DATA_WAKE_SHIFT) ?
		       BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

/*
 * Per-CPU counters, added to atomically: uprobe programs run with migration disabled but not
 * preemption, so another thread of the process can run the same program on this CPU between
 * a plain load and store, and an update would be lost (the counts are exact: tests compare
 * MP_STAT_CALLS with the workload's own count).
 */
static __always_inline void stat_add(__u32 idx, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &idx);

	if (v)
		__sync_fetch_and_add(v, n);
}

static __always_inline void stat_inc(__u32 idx)
{
	stat_add(idx, 1);
}

static __always_inline struct tstate *tstate_get(bool create)
{
	struct task_struct *task = bpf_get_current_task_btf();

	return bpf_task_storage_get(&tstates, task, 0, create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
}

/*
 * bpf_get_current_pid_tgid() in the daemon's pid namespace; 0 when current is not in it. Cached
 * per thread: the helper costs ~80 ns a probe hit, the cache ~10 (a thread's ids change only
 * when it execs as a non-leader thread: mp_exec() forgets them).
 */
static __always_inline __u64 mp_ids_lookup(void)
{
	struct bpf_pidns_info ns;

	if (!mp_pidns_nested)
		return bpf_get_current_pid_tgid();
	if (!bpf_get_ns_current_pid_tgid(mp_pidns_dev, mp_pidns_ino, &ns, sizeof(ns)))
		return (__u64)ns.tgid << 32 | ns.pid;
	/* not directly in it: in a namespace nested in it, or outside it */
	return mp_task_ids(bpf_get_current_task_btf());
}

static __always_inline __u64 mp_current_ids(void)
{
	struct tstate *st;
	__u64 ids;

	if (!mp_pidns_nested)
		return bpf_get_current_pid_tgid();
	st = tstate_get(false);
	if (st && st->ns_ids)
		return st->ns_ids;
	ids = mp_ids_lookup();
	if (st)
		st->ns_ids = ids;
	return ids;
}

/* mp_current_ids() of the thread whose state is @st, from its cache in any pid namespace: the
 * allocator probes spare a helper call per hit. */
static __always_inline __u64 mp_thread_ids(struct tstate *st)
{
	__u64 ids = st->ns_ids;

	if (!ids) {
		ids = mp_ids_lookup();
		st->ns_ids = ids;
	}
	return ids;
}

/* The incarnation of process @tgid's current image, created on first use. */
static __always_inline __u64 incarnation_get(__u32 tgid)
{
	__u64 *v = bpf_map_lookup_elem(&pstate, &tgid);
	__u64 now;

	if (v)
		return *v;
	now = bpf_ktime_get_ns();
	bpf_map_update_elem(&pstate, &tgid, &now, BPF_NOEXIST);
	v = bpf_map_lookup_elem(&pstate, &tgid);
	return v ? *v : now;
}

static __always_inline void hdr_fill(struct mp_event_hdr *h, __u32 type, __u64 pid_tgid,
				     __u32 profile)
{
	h->type = type;
	h->pid = pid_tgid >> 32;
	h->tid = (__u32)pid_tgid;
	h->profile = profile;
	h->time_ns = bpf_ktime_get_ns();
}

/*
 * The sampling decision for a block of @size bytes (docs/sampling.md): returns true when the
 * block holds the thread's next sample point, with *remaining = words after that point.
 */
static __always_inline bool sample_block(struct tstate *st, const struct mp_proc_cfg *cfg,
					 __u64 size, __u64 *remaining)
{
	__u64 w = mp_gap_words(size), c;

	if (cfg->flags & MP_PROC_RATE_ONE) {
		*remaining = w - 1;
		return true;
	}
	c = st->countdown;
	if (c == 0 || st->gen != cfg->gen || st->profile != cfg->profile) {
		c = mp_gap_draw(bpf_get_prandom_u32(), cfg->gap_k);
		st->gen = cfg->gen;
		st->profile = cfg->profile;
	}
	if (w < c) {
		st->countdown = c - w;
		return false;
	}
	*remaining = w - c;
	st->countdown = mp_gap_draw(bpf_get_prandom_u32(), cfg->gap_k);
	return true;
}

/* Is this call nested in an outer allocator call of the same thread? */
static __always_inline bool nested(const struct tstate *st, __u64 sp)
{
	return st->depth && sp <= st->outer_sp;
}

/*
 * Where the kernel points a return address it hijacked for a return probe in this process
 * (get_trampoline_vaddr(): the first slot of the [uprobes] area), or 0 before the first. A
 * call whose return half we skipped can still have its return hijacked: every session link on
 * the function is a consumer of the same uprobe, and the kernel asks for the return half of
 * any consumer whose entry returned 0, which a link filtered to another process does. So while
 * a second process is profiled (a forked child, another record), a running outer call's slot
 * holds the trampoline, not the return address we saw.
 */
static __always_inline __u64 uretprobe_trampoline(void)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct xol_area *area;

	/* BTF pointers: plain (fault-guarded) loads, no helper call per hop */
	if (!task->mm)
		return 0;
	area = task->mm->uprobes_state.xol_area;
	return area ? area->vaddr : 0;
}

/*
 * Sessions: is this call (stack pointer @sp, probe address @ip) nested in the last outermost
 * call whose return half was skipped? Without a return we do not know whether that call is
 * over, so its frame is checked instead: while it runs, its return address is still at its
 * entry stack pointer (or the uretprobe trampoline, if another consumer had it hijacked);
 * once it returned, the caller's next call or push overwrote that slot. The same function
 * entered again at the same stack pointer is the caller calling it again (a loop), not a tail
 * call (a tail call enters another function).
 */
static __always_inline bool nested_noret(const struct tstate *st, __u64 sp, __u64 ip)
{
	__u64 ret = 0;

	if (!st->noret_sp || sp > st->noret_sp || (sp == st->noret_sp && ip == st->noret_ip))
		return false;
	if (bpf_probe_read_user(&ret, sizeof(ret), (void *)st->noret_sp))
		return false;
	return ret == st->noret_ret || (ret && ret == uretprobe_trampoline());
}

/* Add thread @st's pending probe hits to process @tgid's counters ("phits"). */
static __always_inline void hits_flush(struct tstate *st, __u32 tgid)
{
	struct mp_proc_hits *h = bpf_map_lookup_elem(&phits, &tgid);

	if (!h) {
		struct mp_proc_hits zero = {};

		bpf_map_update_elem(&phits, &tgid, &zero, BPF_NOEXIST);
		h = bpf_map_lookup_elem(&phits, &tgid);
	}
	if (h) {
		/* shared by the process' threads on every CPU */
		__sync_fetch_and_add(&h->entries, st->hit_entries);
		__sync_fetch_and_add(&h->returns, st->hit_returns);
	}
	st->hit_entries = st->hit_returns = 0;
}

/*
 * Count a probe hit of the calling thread (@ret: a return half; an entry is also a probed call,
 * MP_STAT_CALLS, exact at any time: a per-CPU array slot, which the verifier inlines). The
 * per-process counters of the overhead estimate are shared by the process' threads and looked
 * up by hash, which cost about as much as the rest of an unsampled call: hits go to the thread's
 * state and reach "phits" every MP_HITS_BATCH hits and at the thread's exit (mp_exit), so a live
 * process' figures lag by less than MP_HITS_BATCH hits per thread.
 */
#define MP_HITS_BATCH	64

static __always_inline void hits_count(struct tstate *st, __u32 tgid, bool ret)
{
	if (ret) {
		st->hit_returns++;
	} else {
		st->hit_entries++;
		stat_inc(MP_STAT_CALLS);
	}
	if (st->hit_entries + st->hit_returns >= MP_HITS_BATCH)
		hits_flush(st, tgid);
}

/*
 * The configuration of process @tgid, whose thread @st is, when its allocator calls are ours to
 * probe (the caller counts the hit: hits_count()); NULL, counted as foreign, when it is not
 * profiled, and NULL when it is profiled through libmemprof-preload's USDT probes or detached
 * over its budget. Read from the thread's copy of the entry (struct tstate.cfg), looked up
 * again only when "procs" changed since (mp_procs_epoch).
 */
static __always_inline struct mp_proc_cfg *thread_cfg(struct tstate *st, __u32 tgid)
{
	__u64 epoch = *(volatile __u64 *)&mp_procs_epoch + 1;
	struct mp_proc_cfg *cfg;

	if (st->cfg_epoch != epoch) {
		cfg = bpf_map_lookup_elem(&procs, &tgid);
		if (!cfg) {
			stat_inc(MP_STAT_FOREIGN_CALLS);
			return NULL;
		}
		/* A new profile: a call still "in progress" from before is one whose return went
		 * unseen (its probes were detached, or attached in between); left, it would make
		 * every later call at or below its stack pointer nested, never sampled. */
		if (st->cfg.profile != cfg->profile || st->cfg.gen != cfg->gen)
			st->depth = 0;
		st->cfg = *cfg;
		st->cfg_epoch = epoch;
	}
	if (st->cfg.flags & (MP_PROC_PRELOAD | MP_PROC_DETACHED))
		return NULL;
	return &st->cfg;
}

/*
 * Is this call made by code of the probed function's own object (MP_COOKIE_SEG: the C
 * library's mmap called by the C library)? The probe is at the function's entry stack pointer
 * (placement never skips an instruction that moves it), so the return address is at *sp.
 */
static __always_inline bool own_call(struct pt_regs *ctx, __u64 cookie)
{
	__u64 before = MP_COOKIE_SEG_BEFORE(cookie), after = MP_COOKIE_SEG_AFTER(cookie);
	__u64 ip = PT_REGS_IP(ctx), ret = 0;

	if (!before && !after)
		return false;
	if (bpf_probe_read_user(&ret, sizeof(ret), (void *)PT_REGS_SP(ctx)))
		return false;
	return ret >= ip - before && ret < ip + after;
}

/*
 * A probed call of a thread whose state task storage would not give (it refuses while another
 * task-storage operation is in progress on this CPU, e.g. by a preempted task, or when memory
 * is short): the call is counted as usual from the process' own entry, and counted apart. It
 * cannot be sampled (the countdown is in the state), but a free is still matched.
 */
static __always_inline struct mp_proc_cfg *stateless_cfg(__u32 tgid)
{
	struct mp_proc_cfg *cfg = bpf_map_lookup_elem(&procs, &tgid);

	if (!cfg) {
		stat_inc(MP_STAT_FOREIGN_CALLS);
		return NULL;
	}
	if (cfg->flags & (MP_PROC_PRELOAD | MP_PROC_DETACHED))
		return NULL;
	stat_inc(MP_STAT_CALLS);
	stat_inc(MP_STAT_NO_TSTATE);
	return cfg;
}

/*
 * Entry of an allocator with a return probe. @size: requested bytes; @may_sample: false when
 * the call cannot allocate (realloc(p, 0), calloc overflow, file-backed mmap). Returns the
 * thread's state when this call is now the thread's outermost allocator call, else NULL.
 */
static __always_inline struct tstate *alloc_entry(struct pt_regs *ctx, __u32 kind, __u64 size,
						  bool may_sample, __u64 arg)
{
	struct tstate *st = tstate_get(true);
	__u64 sp = PT_REGS_SP(ctx), remaining = 0;
	struct mp_proc_cfg *cfg;
	__u32 tgid;

	if (!st) {
		stateless_cfg(mp_current_ids() >> 32);
		return NULL;
	}
	tgid = mp_thread_ids(st) >> 32;
	cfg = thread_cfg(st, tgid);
	if (!cfg)
		return NULL;
	hits_count(st, tgid, false);
	if (nested(st, sp) || (mp_session_mode && nested_noret(st, sp, PT_REGS_IP(ctx)))) {
		if (!mp_session_mode) /* sessions: a nested call has no return half */
			st->depth++;
		stat_inc(MP_STAT_NESTED);
		return NULL;
	}
	if (st->depth) /* an outer call whose return we never saw */
		stat_inc(MP_STAT_MISSED_RETURNS);
	st->depth = 1;
	st->outer_sp = sp;
	st->noret_sp = 0;
	st->kind = kind;
	st->size = size;
	st->arg = arg;
	st->old_profile = 0;
	st->sample_profile = 0;
	if (may_sample && (cfg->flags & MP_PROC_SAMPLING) && sample_block(st, cfg, size, &remaining)) {
		st->sample_profile = cfg->profile;
		st->remaining = remaining;
	}
	return st;
}

static __always_inline int emit_free(__u64 pid_tgid, __u32 profile, __u64 addr, __u32 kind)
{
	struct mp_free_event *e = data_reserve(sizeof(*e));

	if (!e) {
		stat_inc(MP_STAT_RINGBUF_DROPS);
		return 0;
	}
	hdr_fill(&e->h, MP_EV_FREE, pid_tgid, profile);
	e->addr = addr;
	e->kind = kind;
	e->_pad = 0;
	bpf_ringbuf_submit(e, data_wake_flags(sizeof(*e)));
	stat_inc(MP_STAT_FREES);
	return 0;
}

/*
 * Remove @addr of process @tgid from the sampled table. Returns the profile it was sampled for
 * (0: not sampled, or an entry of an old image, which is dropped).
 */
static __always_inline __u32 sampled_take(__u32 tgid, __u64 addr, __u32 *kind, __u64 *inc)
{
	struct mp_sampled_key key = { .tgid = tgid, .addr = addr };
	struct mp_sampled_val *v;
	__u32 profile;

	if (!mp_sfilter[MP_SFILTER_SLOT(tgid, addr)])
		return 0; /* never sampled: no entry hashes to the slot */
	v = bpf_map_lookup_elem(&sampled, &key);
	if (!v)
		return 0;
	profile = v->profile;
	*kind = v->kind;
	*inc = v->incarnation;
	if (bpf_map_delete_elem(&sampled, &key))
		return 0; /* a concurrent free of the same block took it */
	sfilter_add(tgid, addr, -1);
	if (*inc != incarnation_get(tgid))
		return 0;
	return profile;
}

static __always_inline void sampled_put(__u32 tgid, __u64 addr, __u32 profile, __u32 kind,
					__u64 inc)
{
	struct mp_sampled_key key = { .tgid = tgid, .addr = addr };
	struct mp_sampled_val v = { .incarnation = inc, .profile = profile, .kind = kind };

	sfilter_add(tgid, addr, 1);
	if (bpf_map_update_elem(&sampled, &key, &v, BPF_ANY)) {
		sfilter_add(tgid, addr, -1);
		stat_inc(MP_STAT_TABLE_DROPS);
	}
}

/* The fixed part of an alloc record: the block, and the frame-pointer walk of the stack. */
static __always_inline void alloc_fill(struct pt_regs *ctx, struct mp_alloc_event *e,
				       const struct tstate *st, const struct mp_proc_cfg *cfg,
				       __u64 pid_tgid, __u64 addr)
{
	__u32 max_frames = cfg->max_frames;
	long n;

	hdr_fill(&e->h, MP_EV_ALLOC, pid_tgid, st->sample_profile);
	e->addr = addr;
	e->size = st->size;
	e->remaining = st->remaining;
	e->kind = st->kind;
	if (max_frames == 0 || max_frames > MP_MAX_STACK)
		max_frames = MP_MAX_STACK;
	n = bpf_get_stack(ctx, e->stack, max_frames * sizeof(__u64), BPF_F_USER_STACK);
	if (n < 0) {
		stat_inc(MP_STAT_STACK_ERRORS);
		n = 0;
	}
	e->nframes = n / sizeof(__u64);
}

/*
 * User-stack copies (struct mp_ustack), for DWARF unwinding in the daemon. Taken at the
 * allocator's return: the registers are then the caller's (ip = the return address, sp after
 * the ret), its frames are intact above sp, and only blocks that were sampled and allocated pay
 * for a copy, which goes straight into the ring buffer record (nothing to keep per thread
 * between entry and return). bpf_probe_read_user() fails wholly when any byte of its range is
 * unreadable, so the copy is made of whole pages from sp's page upward: every read is a full
 * page at a constant offset of the record (what the verifier can bound), and the copy ends
 * cleanly at the top of the stack mapping. A page that cannot be read below a readable one is
 * a stack page never touched (a large local array only partly written: the kernel has not
 * faulted it in, and this program cannot): its content is zero, which is what a failed read
 * leaves in the record, so the copy goes on above it and ends after the last page read. Ring-buffer reservations need a constant size: the
 * record is reserved in one of five sizes (2, 3, 5, 9 or 17 pages of data, for windows up to
 * 4, 8, 16, 32 and 64 KiB whatever sp's offset in its page).
 */
#define MP_USTACK_RECORD(pages)	\
	(sizeof(struct mp_alloc_event) + sizeof(struct mp_ustack) + (pages) * MP_PAGE_SIZE)
/*
 * A copy is ~20 times the size of a record without one: copies only go while the ring is less
 * than 3/4 full (~300 copies of 16 KiB), so that a burst the daemon cannot keep up with costs
 * stack copies (the events keep their frame-pointer walk; counted as MP_STAT_USTACK_LOST), not
 * samples: the last quarter still holds thousands of records without one. (With half the
 * ring, python3's start-up under a busy test run lost a quarter of its copies.)
 */
#define MP_USTACK_RING_LIMIT	((MP_RINGBUF_SIZE - MP_RINGBUF_RESERVE) / 4 * 3)

static __always_inline int emit_ustack_pages(struct pt_regs *ctx, const struct tstate *st,
					     const struct mp_proc_cfg *cfg, __u64 pid_tgid,
					     __u64 addr, __u32 want, __u32 npages,
					     const __u32 cap)
{
	__u64 sp = PT_REGS_SP(ctx), base = sp & ~(__u64)(MP_PAGE_SIZE - 1), size;
	struct mp_alloc_event *e;
	struct mp_ustack *us;
	__u8 *data;
	__u32 i, got = 0;

	if (bpf_ringbuf_query(&rb, BPF_RB_AVAIL_DATA) + MP_USTACK_RECORD(cap) >
	    MP_USTACK_RING_LIMIT)
		return -1;
	e = bpf_ringbuf_reserve(&rb, MP_USTACK_RECORD(cap), 0);
	if (!e)
		return -1;
	alloc_fill(ctx, e, st, cfg, pid_tgid, addr);
	us = (void *)(e + 1);
	data = (void *)(us + 1);
	for (i = 0; i < cap; i++) {
		if (i >= npages)
			break;
		if (!bpf_probe_read_user(data + i * MP_PAGE_SIZE, MP_PAGE_SIZE,
					 (void *)(base + i * MP_PAGE_SIZE)))
			got = i + 1;
	}
	size = (__u64)got * MP_PAGE_SIZE;
	size = size > sp - base ? size - (sp - base) : 0;
	us->ip = PT_REGS_IP(ctx);
	us->sp = sp;
	us->bp = PT_REGS_FP(ctx);
	us->offset = sp - base;
	us->size = size < want ? size : want;
	bpf_ringbuf_submit(e, data_wake_flags(MP_USTACK_RECORD(cap)));
	return 0;
}

static __always_inline int emit_alloc_ustack(struct pt_regs *ctx, const struct tstate *st,
					     const struct mp_proc_cfg *cfg, __u64 pid_tgid,
					     __u64 addr)
{
	__u32 want = cfg->ustack_size, npages;

	if (want > MP_USTACK_MAX)
		want = MP_USTACK_MAX;
	npages = ((PT_REGS_SP(ctx) & (MP_PAGE_SIZE - 1)) + want + MP_PAGE_SIZE - 1) / MP_PAGE_SIZE;
	if (npages <= 2)
		return emit_ustack_pages(ctx, st, cfg, pid_tgid, addr, want, npages, 2);
	if (npages <= 3)
		return emit_ustack_pages(ctx, st, cfg, pid_tgid, addr, want, npages, 3);
	if (npages <= 5)
		return emit_ustack_pages(ctx, st, cfg, pid_tgid, addr, want, npages, 5);
	if (npages <= 9)
		return emit_ustack_pages(ctx, st, cfg, pid_tgid, addr, want, npages, 9);
	return emit_ustack_pages(ctx, st, cfg, pid_tgid, addr, want, npages, 17);
}

/*
 * Return of a realloc-like call whose old block (st->arg) was sampled: the block is gone
 * (@gone: a free event) or still there (back into the sampled table).
 */
static __always_inline void old_block_settle(struct tstate *st, __u64 pid_tgid, __u32 tgid,
					     bool gone)
{
	if (gone)
		emit_free(pid_tgid, st->old_profile, st->arg, st->kind);
	else
		sampled_put(tgid, st->arg, st->old_profile, st->old_kind, st->old_incarnation);
	st->old_profile = 0;
}

/* Return of an allocator: @ret is its return value. */
static __always_inline int alloc_return(struct pt_regs *ctx, __u64 ret)
{
	struct tstate *st = tstate_get(false);
	struct mp_sampled_key key = {};
	struct mp_sampled_val val = {};
	struct mp_alloc_event *e;
	struct mp_proc_cfg *cfg;
	__u64 addr = ret, pid_tgid;
	__u32 tgid;

	/*
	 * A return with no call in progress is a missed pairing only while this thread's entries
	 * run with the current configuration. Not before the thread's first entry, nor in the
	 * window where a profile's return probes are attached and its entry probes not yet
	 * (attach_sym()), nor once the process is detached (entries ignored, links closing).
	 */
	if (!st)
		return 0;
	pid_tgid = mp_thread_ids(st);	/* the entry half cached them */
	tgid = pid_tgid >> 32;
	hits_count(st, tgid, true);
	if (!st->depth) {
		if (st->cfg_epoch == *(volatile __u64 *)&mp_procs_epoch + 1 &&
		    !(st->cfg.flags & MP_PROC_DETACHED))
			stat_inc(MP_STAT_MISSED_RETURNS);
		return 0;
	}
	if (st->depth > 1) {
		st->depth--;
		return 0;
	}
	st->depth = 0;

	switch (st->kind) {
	case MP_KIND_POSIX_MEMALIGN:
		/* int posix_memalign(void **memptr, ...): the block comes through memptr */
		addr = 0;
		if ((int)ret == 0 && bpf_probe_read_user(&addr, sizeof(addr), (void *)st->arg))
			addr = 0;
		break;
	case MP_KIND_MMAP:
		if (ret == MAP_FAILED_ADDR)
			addr = 0;
		break;
	case MP_KIND_REALLOC:
	case MP_KIND_REALLOCARRAY:
		if (st->old_profile) {
			/* The old block is gone when realloc succeeded, or when it was
			 * realloc(p, 0), which frees p. A failed realloc leaves it alone. */
			old_block_settle(st, pid_tgid, tgid, addr || st->size == 0);
		}
		break;
	case MP_KIND_XALLOCX:
		/* size_t xallocx(ptr, size, extra, flags) returns the block's real size: the
		 * block was resized in place when that is at least size. Then the old block is
		 * collected and a block of size bytes allocated at the same address (as for a
		 * realloc that returns its argument); otherwise nothing changed. */
		addr = st->size && ret >= st->size ? st->arg : 0;
		if (st->old_profile)
			old_block_settle(st, pid_tgid, tgid, addr);
		break;
	default:
		break;
	}
	if (!st->sample_profile || !addr)
		return 0;

	cfg = bpf_map_lookup_elem(&procs, &tgid);
	if (!cfg || cfg->profile != st->sample_profile)
		return 0; /* the process left the profile meanwhile */

	key.tgid = tgid;
	key.addr = addr;
	val.incarnation = incarnation_get(tgid);
	val.profile = st->sample_profile;
	val.kind = st->kind;
	sfilter_add(tgid, addr, 1);
	if (bpf_map_update_elem(&sampled, &key, &val, BPF_ANY)) {
		sfilter_add(tgid, addr, -1);
		stat_inc(MP_STAT_TABLE_DROPS);
		return 0;
	}
	if (cfg->ustack_size) {
		if (!emit_alloc_ustack(ctx, st, cfg, pid_tgid, addr)) {
			stat_inc(MP_STAT_SAMPLED);
			return 0;
		}
		stat_inc(MP_STAT_USTACK_LOST);	/* the record without the copy may fit */
	}
	e = data_reserve(sizeof(*e));
	if (!e) {
		if (!bpf_map_delete_elem(&sampled, &key))
			sfilter_add(tgid, addr, -1);
		stat_inc(MP_STAT_RINGBUF_DROPS);
		return 0;
	}
	alloc_fill(ctx, e, st, cfg, pid_tgid, addr);
	bpf_ringbuf_submit(e, data_wake_flags(sizeof(*e)));
	stat_inc(MP_STAT_SAMPLED);
	return 0;
}

/* free, operator delete, munmap: entry probe only. */
static __always_inline int free_entry(struct pt_regs *ctx, __u32 kind, __u64 addr)
{
	struct tstate *st = tstate_get(true);
	__u32 tgid, profile, akind = 0;
	__u64 pid_tgid, inc = 0;

	if (st) {
		pid_tgid = mp_thread_ids(st);
		tgid = pid_tgid >> 32;
		if (!thread_cfg(st, tgid))
			return 0;
		hits_count(st, tgid, false);
	} else {	/* no nesting state either: as a free outside any allocator call */
		pid_tgid = mp_current_ids();
		tgid = pid_tgid >> 32;
		if (!stateless_cfg(tgid))
			return 0;
	}
	if (!addr)
		return 0; /* free(NULL) */
	/* Sessions need no nested_noret() here: a free nested in an allocator call whose return
	 * half was skipped (realloc of an unsampled block, operator delete -> free) cannot find a
	 * sampled block the outer call did not take first. */
	if (st && nested(st, PT_REGS_SP(ctx))) {
		stat_inc(MP_STAT_NESTED);
		return 0;
	}
	profile = sampled_take(tgid, addr, &akind, &inc);
	if (profile)
		emit_free(pid_tgid, profile, addr, kind);
	return 0;
}

static __always_inline int emit_proc(__u32 type, __u32 tgid, __u32 tid, __u32 profile,
				     __u32 other, __u32 code)
{
	struct mp_proc_event *e = bpf_ringbuf_reserve(&rb, sizeof(*e), 0);

	if (!e) {
		stat_inc(MP_STAT_RINGBUF_DROPS);
		return 0;
	}
	hdr_fill(&e->h, type, ((__u64)tgid << 32) | tid, profile);
	e->other_pid = other;
	e->exit_code = code;
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
	return 0;
}

static __always_inline struct tstate *realloc_entry(struct pt_regs *ctx, __u32 kind, __u64 old,
						    __u64 size, bool ovf)
{
	__u32 tgid, profile = 0, okind = 0;
	struct tstate *st;
	__u64 inc = 0;

	/* realloc(p, 0) frees p and allocates nothing */
	st = alloc_entry(ctx, kind, size, !ovf && !(old && size == 0), old);
	if (!st && old && !tstate_get(false)) {
		/* No thread state (stateless_cfg() counted the call): no return half to settle
		 * the old block either, so a sampled one ends here, as if freed. */
		__u64 pid_tgid = mp_current_ids();

		profile = sampled_take(pid_tgid >> 32, old, &okind, &inc);
		if (profile)
			emit_free(pid_tgid, profile, old, kind);
		return NULL;
	}
	if (!st || !old)
		return st;
	tgid = mp_thread_ids(st) >> 32;
	/* Take the old block out of the table now, so that a concurrent malloc returning the same
	 * address after realloc released it cannot be confused with it; restored on failure. */
	profile = sampled_take(tgid, old, &okind, &inc);
	st->old_profile = profile;
	st->old_kind = okind;
	st->old_incarnation = inc;
	return st;
}

/* ld.so's rendezvous: see MP_SHAPE_DLSTATE. */
static __always_inline int dlstate_entry(void)
{
	__u64 pid_tgid = mp_current_ids();
	__u32 tgid = pid_tgid >> 32;
	struct mp_proc_cfg *cfg = bpf_map_lookup_elem(&procs, &tgid);

	if (!cfg)
		return 0;
	return emit_proc(MP_EV_MAP, tgid, (__u32)pid_tgid, cfg->profile, 0, 0);
}

/*
 * Every entry probe. The attach cookie says which function this is: MP_COOKIE(shape, kind), the
 * shape telling where the arguments are (bpf/memprof.h).
 */
/* The loader's probes on itself (MP_SHAPE_SELFTEST, MP_SHAPE_CALIBRATE). Returns the count. */
static __always_inline __u64 selftest_hit(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&selftest, &idx);

	return v ? __sync_fetch_and_add(v, 1) + 1 : 0;
}

/* CALIBRATE entry: about the work of an unsampled allocator call. */
static __always_inline int calibrate_entry(void)
{
	__u32 tgid = mp_current_ids() >> 32;
	struct tstate *st;

	bpf_map_lookup_elem(&procs, &tgid);
	st = tstate_get(true);
	if (st)
		st->calib++;
	selftest_hit(MP_SELFTEST_CALIB);
	return 0;
}

/*
 * Every entry probe. The attach cookie says which function this is: MP_COOKIE(shape, kind), the
 * shape telling where the arguments are (bpf/memprof.h). Returns the thread's state when the
 * call is now the thread's outermost allocator call (its return half has work), else NULL.
 */
static __always_inline struct tstate *entry_dispatch(struct pt_regs *ctx, __u64 cookie)
{
	__u32 kind = MP_COOKIE_KIND(cookie);
	__u64 a1 = PT_REGS_PARM1(ctx), a2 = PT_REGS_PARM2(ctx), a3 = PT_REGS_PARM3(ctx);

	switch (MP_COOKIE_SHAPE(cookie)) {
	case MP_SHAPE_SIZE1:	/* malloc(size), operator new(size, ...), valloc */
		return alloc_entry(ctx, kind, a1, true, 0);
	case MP_SHAPE_PAGES:	/* pvalloc(size): the size rounded up to whole pages, one at least */
		if (a1 <= ~0ull - MP_PAGE_SIZE)
			a1 = a1 ? (a1 + MP_PAGE_SIZE - 1) & ~(__u64)(MP_PAGE_SIZE - 1) : MP_PAGE_SIZE;
		return alloc_entry(ctx, kind, a1, true, 0);
	case MP_SHAPE_SIZE2:	/* memalign(align, size), aligned_alloc(align, size) */
		return alloc_entry(ctx, kind, a2, true, 0);
	case MP_SHAPE_CALLOC: {	/* calloc(n, size): fails, allocating nothing, on overflow */
		bool ovf = mul_overflows(a1, a2);

		return alloc_entry(ctx, kind, ovf ? 0 : a1 * a2, !ovf, 0);
	}
	case MP_SHAPE_REALLOC:	/* realloc(ptr, size) */
		return realloc_entry(ctx, kind, a1, a2, false);
	case MP_SHAPE_REALLOCARRAY: {	/* reallocarray(ptr, n, size) */
		bool ovf = mul_overflows(a2, a3);

		return realloc_entry(ctx, kind, a1, ovf ? 0 : a2 * a3, ovf);
	}
	case MP_SHAPE_POSIX_MEMALIGN:	/* posix_memalign(memptr, align, size) */
		return alloc_entry(ctx, kind, a3, true, a1);
	case MP_SHAPE_MMAP:	/* mmap(addr, len, prot, flags, ...): anonymous ones only */
		return alloc_entry(ctx, kind, a2, (PT_REGS_PARM4(ctx) & MAP_ANONYMOUS_FLAG) &&
				   !own_call(ctx, cookie), 0);
	case MP_SHAPE_FREE:	/* free(ptr), operator delete(ptr, ...), munmap(addr, len) */
		free_entry(ctx, kind, a1);
		return NULL;
	case MP_SHAPE_DLSTATE:
		dlstate_entry();
		return NULL;
	case MP_SHAPE_SELFTEST:
		selftest_hit(MP_SELFTEST_ENTRIES);
		return NULL;
	case MP_SHAPE_CALIBRATE:
		calibrate_entry();
		return NULL;
	case MP_SHAPE_XALLOCX:	/* xallocx(ptr, size, extra, flags): see alloc_return() */
		return realloc_entry(ctx, kind, a1, a2, false);
	case MP_SHAPE_HEAP_CALLOC: {	/* mi_heap_calloc(heap, n, size) */
		bool ovf = mul_overflows(a2, a3);

		return alloc_entry(ctx, kind, ovf ? 0 : a2 * a3, !ovf, 0);
	}
	case MP_SHAPE_HEAP_REALLOC:	/* mi_heap_realloc(heap, ptr, size) */
		return realloc_entry(ctx, kind, a2, a3, false);
	default:
		return NULL;
	}
}

SEC("uprobe")
int BPF_KPROBE(mp_entry)
{
	entry_dispatch(ctx, bpf_get_attach_cookie(ctx));
	return 0;
}

/* Every allocator's return. */
SEC("uretprobe")
int BPF_KRETPROBE(mp_ret, __u64 ret)
{
	if (MP_COOKIE_SHAPE(bpf_get_attach_cookie(ctx)) >= MP_SHAPE_SELFTEST) {
		selftest_hit(MP_SELFTEST_RETURNS);
		return 0;
	}
	return alloc_return(ctx, ret);
}

/*
 * Linux 6.13+: entry and return of every allocator in one uprobe session program (attach type
 * BPF_TRACE_UPROBE_SESSION, loaded only when the kernel has them). Returning non-zero from the
 * entry half skips the return half: only calls that hold a sample point, or reallocs of a
 * sampled block, pay for a return probe (docs/probe-costs.md: -1.0 us per malloc+free pair).
 */
SEC("uprobe")
int BPF_KPROBE(mp_session)
{
	__u64 cookie = bpf_get_attach_cookie(ctx), sp = PT_REGS_SP(ctx);
	__u32 shape = MP_COOKIE_SHAPE(cookie);
	struct tstate *st;

	if (bpf_session_is_return()) {
		if (shape >= MP_SHAPE_SELFTEST) {
			selftest_hit(MP_SELFTEST_RETURNS);
			return 0;
		}
		return alloc_return(ctx, PT_REGS_RC(ctx));
	}
	if (shape == MP_SHAPE_SELFTEST) /* odd hits keep their return half, even ones skip it */
		return (selftest_hit(MP_SELFTEST_ENTRIES) & 1) ? 0 : 1;
	if (shape == MP_SHAPE_CALIBRATE)
		return calibrate_entry() || MP_COOKIE_KIND(cookie) ? 0 : 1;
	st = entry_dispatch(ctx, cookie);
	if (!st)
		return 1;	/* not an outermost allocator call: nothing to do at its return */
	if (st->sample_profile || st->old_profile)
		return 0;	/* the return half emits the block or settles the old one */
	/* Unsampled: no return half, so no nesting depth; remember the frame instead, if a call
	 * can be nested in it: mmap calls no probed function, and the C library's malloc and
	 * calloc only its own mmap, which own_call() recognises (MP_COOKIE_F_LEAF), so the
	 * common unsampled malloc reads no user memory. The return address is read into
	 * the stack, not into the task storage, which spares the usercopy hardening's heap-object
	 * check (about a third of the read's cost). */
	st->depth = 0;
	st->noret_sp = 0;
	if (MP_COOKIE_KIND(cookie) != MP_KIND_MMAP && !(cookie & MP_COOKIE_F_LEAF)) {
		__u64 ret;

		if (!bpf_probe_read_user(&ret, sizeof(ret), (void *)sp)) {
			st->noret_sp = sp;
			st->noret_ip = PT_REGS_IP(ctx);
			st->noret_ret = ret;
		}
	}
	return 1;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(mp_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid, ctgid = child->tgid, ptid = parent->pid;
	struct mp_proc_cfg *cfg, ccfg;
	__u64 now, ids;

	if (ptgid == ctgid)
		return 0; /* a new thread: joins through its own task storage */
	if (mp_pidns_nested) { /* the daemon's pids (0: a task it cannot see) */
		ids = mp_task_ids(parent);
		ptgid = ids >> 32;
		ptid = (__u32)ids;
	}
	cfg = bpf_map_lookup_elem(&procs, &ptgid);
	if (!cfg || !(cfg->flags & MP_PROC_FOLLOW_FORKS))
		return 0;
	if (mp_pidns_nested) {
		ctgid = mp_task_ids(child) >> 32;
		if (!ctgid)
			return 0;
	}
	ccfg = *cfg;
	if (bpf_map_update_elem(&procs, &ctgid, &ccfg, BPF_ANY)) {
		stat_inc(MP_STAT_PROCS_FULL);
		return 0;
	}
	__sync_fetch_and_add(&mp_procs_epoch, 1);	/* thread_cfg() */
	now = bpf_ktime_get_ns();
	bpf_map_update_elem(&pstate, &ctgid, &now, BPF_ANY);
	return emit_proc(MP_EV_FORK, ptgid, ptid, ccfg.profile, ctgid, 0);
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(mp_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u64 ids = mp_task_ids(p);
	__u32 tgid = ids >> 32, other = (__u32)old_pid != p->pid ? (__u32)old_pid : 0;
	struct mp_proc_cfg *cfg = bpf_map_lookup_elem(&procs, &tgid);
	struct tstate *st = bpf_task_storage_get(&tstates, p, 0, 0);
	struct mp_proc_cfg ccfg;
	__u64 now, secure;

	/* A non-leader thread took the leader's tid: forget its ids (mp_thread_ids()). No
	 * allocator call of the old image is in progress any more. */
	if (st) {
		st->ns_ids = 0;
		st->depth = 0;
	}
	/* old_pid is its global tid, whose struct pid is gone: unknown in our namespace */
	if (mp_pidns_nested)
		other = 0;
	if (!cfg)
		return 0;
	/* An image with more privileges than its profile's owner may see (ptrace's rule: a
	 * set-id or file-capability program, AT_SECURE): not one of its allocations is sampled,
	 * from here on, until the daemon has read this record and detached the process. */
	secure = BPF_CORE_READ_BITFIELD_PROBED(bprm, secureexec);
	if (secure && !(cfg->flags & MP_PROC_PRIVILEGED)) {
		ccfg = *cfg;
		ccfg.flags &= ~(MP_PROC_SAMPLING | MP_PROC_FOLLOW_FORKS);
		ccfg.flags |= MP_PROC_DETACHED;
		bpf_map_update_elem(&procs, &tgid, &ccfg, BPF_EXIST);
		__sync_fetch_and_add(&mp_procs_epoch, 1);	/* thread_cfg() */
	}
	/* A new image: sampled entries of the old one no longer match frees. The event's time is
	 * the new incarnation, so the loader purges entries older than it. */
	now = bpf_ktime_get_ns();
	bpf_map_update_elem(&pstate, &tgid, &now, BPF_ANY);
	return emit_proc(MP_EV_EXEC, tgid, (__u32)ids, cfg->profile, other,
			 secure ? MP_EXEC_F_SECURE : 0);
}

/*
 * Thread and process exit. @group_dead: the tracepoint's own argument (Linux 6.16+ pass it), or
 * -1 on kernels whose sched_process_exit passes the task only (Debian 12's 6.1): do_exit() has
 * already decremented signal->live then, so the group is dead when it reads 0. Two threads
 * exiting at once can both read 0 (a joined thread is still in do_exit() when its joiner ends
 * the process); only the one that removes the procs entry reports the exit, and the other's
 * thread exit is not reported (its blocks are the process' anyway, and it is ending).
 */
static __always_inline int exit_common(struct task_struct *p, int group_dead)
{
	__u64 ids = mp_task_ids(p);
	__u32 tgid = ids >> 32, tid = (__u32)ids, profile, code;
	struct mp_proc_cfg *cfg = bpf_map_lookup_elem(&procs, &tgid);
	struct tstate *st = bpf_task_storage_get(&tstates, p, 0, 0);
	unsigned int sflags;
	bool known = group_dead >= 0;

	if (st && cfg && (st->hit_entries | st->hit_returns))
		hits_flush(st, tgid);	/* the thread's last probe hits (hits_count()) */
	if (!cfg)
		return 0;
	profile = cfg->profile;
	if (!known)
		group_dead = BPF_CORE_READ(p, signal, live.counter) == 0;
	if (!group_dead)
		return emit_proc(MP_EV_THREAD_EXIT, tgid, tid, profile, 0, 0);
	/* wait(2)-style status: the group's exit code when the group was killed or exit_group'd */
	sflags = BPF_CORE_READ(p, signal, flags);
	code = (sflags & 0x00000004 /* SIGNAL_GROUP_EXIT */) ? BPF_CORE_READ(p, signal,
									       group_exit_code)
							       : p->exit_code;
	if (bpf_map_delete_elem(&procs, &tgid) && !known)
		return 0;	/* another thread of the group reported it */
	bpf_map_delete_elem(&pstate, &tgid);
	return emit_proc(MP_EV_EXIT, tgid, tid, profile, 0, code);
}

/*
 * Two variants of the exit program; the loader loads the one the running kernel's
 * sched_process_exit prototype (its BTF) has arguments for, and only that one.
 */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(mp_exit, struct task_struct *p, bool group_dead)
{
	return exit_common(p, group_dead);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(mp_exit_task, struct task_struct *p)
{
	return exit_common(p, -1);
}

/*
 * Test-only (MP_BPF_TEST_REJECT=1 in the loader's environment): reads an argument no kernel's
 * sched_process_exit has, so that the verifier rejects it, as 6.1 rejected mp_exit. It proves
 * that a load failure names the program and the verifier's reason (tests/bpf/kernel-mechanisms.sh).
 */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(mp_test_reject, struct task_struct *p, bool group_dead, long a2, long a3, long a4)
{
	return a4 == 1;
}

/*
 * ---- libmemprof-preload: the cooperative fast path ----
 *
 * A process that maps libmemprof-preload.so samples in-process and reaches a USDT probe only
 * for a sampled block (memprof:alloc, its multiplicity already final) and to report frees of
 * sampled blocks by id, mostly in batches (with the next memprof:alloc, or memprof:free_batch;
 * memprof:free for one that could not wait); <memprof/preload.h> is the ABI. The loader
 * attaches these three programs instead of allocator uprobes and keeps the process'
 * "pltargets" entry. They emit alloc records marked MP_KIND_F_PRELOAD, keyed by block id, and
 * MP_EV_FREE_BATCH records; the library's own table filters frees, so no "sampled" entry is
 * kept here. memprof:alloc passes one pointer: its record is read with one
 * bpf_probe_read_user() (each USDT argument costs a spec lookup and a register read, ~50 ns),
 * and so are the frames the library walked; only a record the library could not walk takes
 * bpf_get_stack() (a fault-tolerant copy per frame, ~700 ns) and the frame-skip loop.
 */
/* Attached by the loader as plain uprobes at the notes' sites, with their semaphores
 * (daemon/probe/preload_attach.c, pl_attach_probe()): no libbpf USDT spec is involved. */

#define MP_PL_MAX_SKIP		16	/* library frames dropped from the top of a stack */
#define MP_PL_HEAD_SIZE		offsetof(struct mp_alloc_event, stack)
/* Records wake the consumer as the uprobe programs' do: data_wake_flags(). */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MP_MAX_PROCS);
	__type(key, __u32);
	__type(value, struct mp_preload_target);
} pltargets SEC(".maps");

/*
 * The emitters are static noinline, one per record size (the verifier needs a constant size,
 * and inlined copies could be merged by the compiler into one path whose size is not).
 */

/* Emit @count ids read from the target's memory at @uids: one record of room for CAP ids. */
#define PL_EMIT_FREES(CAP)                                                                     \
static __noinline int pl_emit_frees_##CAP(__u64 pid_tgid, __u32 profile, __u64 uids,          \
					  __u64 count)                                         \
{                                                                                              \
	__u64 size = offsetof(struct mp_free_batch_event, ids) + 8 * (CAP);                    \
	struct mp_free_batch_event *e = data_reserve(size);                                    \
                                                                                               \
	if (!e) {                                                                              \
		stat_inc(MP_STAT_RINGBUF_DROPS);                                               \
		return 0;                                                                      \
	}                                                                                      \
	asm volatile("" : "+r"(count));	/* keep the clamp: the verifier needs it */  \
	if (count > (CAP))                                                                     \
		count = (CAP);                                                                 \
	hdr_fill(&e->h, MP_EV_FREE_BATCH, pid_tgid, profile);                                  \
	e->kind = MP_KIND_FREE | MP_KIND_F_PRELOAD;                                            \
	if (bpf_probe_read_user(e->ids, 8 * count, (void *)uids)) {                            \
		stat_inc(MP_STAT_STACK_ERRORS);                                                \
		count = 0;	/* the daemon ignores an empty batch */                        \
	}                                                                                      \
	e->count = count;                                                                      \
	bpf_ringbuf_submit(e, data_wake_flags(size));                                          \
	stat_add(MP_STAT_FREES, count);                                                        \
	return 0;                                                                              \
}
PL_EMIT_FREES(4)
PL_EMIT_FREES(64)

static __always_inline void pl_frees(__u64 pid_tgid, __u32 profile, __u64 uids, __u32 count)
{
	if (count == 0 || count > MP_FREE_BATCH_MAX)
		return;
	if (count <= 4)
		pl_emit_frees_4(pid_tgid, profile, uids, count);
	else
		pl_emit_frees_64(pid_tgid, profile, uids, count);
}

/* What the alloc emitters need. */
struct pl_alloc {
	struct mp_preload_alloc_head r;
	__u64 pid_tgid;
	__u64 frames;		/* its frames[] in the target */
	__u64 lo, hi;		/* the library's mapping */
	__u32 profile;
	__u32 max_frames;
};

/* An alloc record with the @nfr frames the library walked, room for CAP frames. */
#define PL_EMIT_WALKED(CAP)                                                                    \
static __noinline int pl_emit_walked_##CAP(struct pl_alloc *a, __u64 nfr)                     \
{                                                                                              \
	__u64 size = MP_PL_HEAD_SIZE + 8 * (CAP);                                              \
	struct mp_alloc_event *e = data_reserve(size);                                         \
                                                                                               \
	if (!e) {                                                                              \
		stat_inc(MP_STAT_RINGBUF_DROPS);                                               \
		return 0;                                                                      \
	}                                                                                      \
	asm volatile("" : "+r"(nfr));	/* keep the clamp: the verifier needs it */      \
	if (nfr > (CAP))                                                                       \
		nfr = (CAP);                                                                   \
	hdr_fill(&e->h, MP_EV_ALLOC, a->pid_tgid, a->profile);                                 \
	e->addr = a->r.id;	/* preload records are keyed by id: see MP_KIND_F_PRELOAD */  \
	e->size = a->r.size;                                                                   \
	e->remaining = a->r.nsamples;	/* final: see MP_KIND_F_PRELOAD */                     \
	e->kind = (a->r.kind & MP_KIND_MASK) | MP_KIND_F_PRELOAD;                              \
	if (bpf_probe_read_user(e->stack, 8 * nfr, (void *)a->frames)) {                       \
		stat_inc(MP_STAT_STACK_ERRORS);                                                \
		nfr = 0;                                                                       \
	}                                                                                      \
	e->nframes = nfr;                                                                      \
	bpf_ringbuf_submit(e, data_wake_flags(size));                                          \
	stat_inc(MP_STAT_SAMPLED);                                                             \
	return 0;                                                                              \
}
PL_EMIT_WALKED(16)
PL_EMIT_WALKED(32)
PL_EMIT_WALKED(127)
_Static_assert(MP_MAX_STACK == 127, "PL_EMIT_WALKED(MP_MAX_STACK)");

/* The part of @a that comes from the process' configuration and its preload target. */
static __always_inline void pl_alloc_target(struct pl_alloc *a, __u64 pid_tgid,
					    const struct mp_proc_cfg *cfg,
					    const struct mp_preload_target *pt)
{
	a->pid_tgid = pid_tgid;
	a->lo = pt->lo;
	a->hi = pt->hi;
	a->profile = cfg->profile;
	a->max_frames = cfg->max_frames;
	if (a->max_frames == 0 || a->max_frames > MP_MAX_STACK)
		a->max_frames = MP_MAX_STACK;
}

/* An alloc record with the frames the library walked (a->r.nframes >= 0). */
static __always_inline int pl_emit_walked(struct pl_alloc *a)
{
	__u32 nfr = (__u32)a->r.nframes < a->max_frames ? (__u32)a->r.nframes : a->max_frames;

	if (nfr <= 16)
		return pl_emit_walked_16(a, nfr);
	if (nfr <= 32)
		return pl_emit_walked_32(a, nfr);
	return pl_emit_walked_127(a, nfr);
}

/* An alloc record whose stack is walked here, from the probe (the library could not). */
static __noinline int pl_emit_unwalked(void *ctx, struct pl_alloc *a)
{
	struct mp_alloc_event *e = data_reserve(sizeof(*e));
	struct mp_preload_alloc_head *r = &a->r;
	__u32 skip, nfr;
	long n;

	if (!e) {
		stat_inc(MP_STAT_RINGBUF_DROPS);
		return 0;
	}
	hdr_fill(&e->h, MP_EV_ALLOC, a->pid_tgid, a->profile);
	e->addr = r->id;
	e->size = r->size;
	e->remaining = r->nsamples;
	e->kind = (r->kind & MP_KIND_MASK) | MP_KIND_F_PRELOAD;
	n = bpf_get_stack(ctx, e->stack, sizeof(e->stack), BPF_F_USER_STACK);
	if (n < 0) {
		stat_inc(MP_STAT_STACK_ERRORS);
		n = 0;
	}
	nfr = n / sizeof(__u64);
	/* The stack starts at the probe site, inside the library: drop its frames by walking
	 * again with them skipped (this path is rare: the library walks the stack itself when it
	 * can), which the verifier checks in a moment where a copy loop over MP_MAX_STACK frames
	 * took most of the program's load time. */
	for (skip = 0; skip < MP_PL_MAX_SKIP && skip < nfr; skip++)
		if (e->stack[skip] < a->lo || e->stack[skip] >= a->hi)
			break;
	if (skip) {
		n = bpf_get_stack(ctx, e->stack, sizeof(e->stack),
				  BPF_F_USER_STACK | (skip & BPF_F_SKIP_FIELD_MASK));
		nfr = n < 0 ? 0 : n / sizeof(__u64);
	}
	if (nfr > a->max_frames)
		nfr = a->max_frames;
	e->nframes = nfr;
	bpf_ringbuf_submit(e, data_wake_flags(sizeof(*e)));
	stat_inc(MP_STAT_SAMPLED);
	return 0;
}

/*
 * The probes' arguments are read from the registers the library pins them to on x86-64
 * (<memprof/preload.h>; tests/unit/preload-usdt-notes.sh checks the notes agree), not
 * through bpf_usdt_arg(): a spec lookup and a register read for each, ~50 ns.
 */
SEC("usdt")
int mp_usdt_alloc(struct pt_regs *ctx)
{
	__u64 rec = PT_REGS_PARM1(ctx);
	__u64 pid_tgid = mp_current_ids();
	__u32 tgid = pid_tgid >> 32;
	struct mp_proc_cfg *cfg = bpf_map_lookup_elem(&procs, &tgid);
	struct mp_preload_target *pt;
	struct pl_alloc a;

	if (!cfg) {
		stat_inc(MP_STAT_FOREIGN_CALLS);
		return 0;
	}
	pt = bpf_map_lookup_elem(&pltargets, &tgid);
	if (!pt || bpf_probe_read_user(&a.r, sizeof(a.r), (void *)rec))
		return 0;
	/* The frees that rode along happened before this alloc, whatever becomes of it. */
	pl_frees(pid_tgid, cfg->profile, rec + MP_PL_REC_FREE_IDS, a.r.nfree);
	if (!a.r.addr || !a.r.nsamples || !a.r.id)
		return 0;
	pl_alloc_target(&a, pid_tgid, cfg, pt);
	/* the profile of the generation it was drawn under (struct mp_preload_target) */
	if (a.r.generation == pt->gen && (cfg->flags & MP_PROC_SAMPLING))
		;
	else if (a.r.generation && a.r.generation == pt->prev_gen &&
		 (pt->prev_flags & MP_PROC_SAMPLING))
		a.profile = pt->prev_profile;
	else
		return 0;
	a.frames = rec + MP_PL_REC_FRAMES;
	if (a.r.nframes < 0)
		return pl_emit_unwalked(ctx, &a);
	return pl_emit_walked(&a);
}

/* Frees are reported after a stop too, as in uprobe mode. */
static __always_inline int pl_free_common(__u64 uids, __u32 count)
{
	__u64 pid_tgid = mp_current_ids();
	__u32 tgid = pid_tgid >> 32;
	struct mp_proc_cfg *cfg = bpf_map_lookup_elem(&procs, &tgid);

	if (!cfg) {
		stat_inc(MP_STAT_FOREIGN_CALLS);
		return 0;
	}
	if (bpf_map_lookup_elem(&pltargets, &tgid))
		pl_frees(pid_tgid, cfg->profile, uids, count);
	return 0;
}

/* One free that could not wait for a batch: its id is the first argument. */
SEC("usdt")
int mp_usdt_free(struct pt_regs *ctx)
{
	__u64 id = PT_REGS_PARM1(ctx);
	__u64 pid_tgid = mp_current_ids();
	__u32 tgid = pid_tgid >> 32;
	struct mp_proc_cfg *cfg = bpf_map_lookup_elem(&procs, &tgid);
	struct mp_free_batch_event *e;
	__u64 size = offsetof(struct mp_free_batch_event, ids) + 8 * 4;

	if (!cfg) {
		stat_inc(MP_STAT_FOREIGN_CALLS);
		return 0;
	}
	if (!id || !bpf_map_lookup_elem(&pltargets, &tgid))
		return 0;
	e = data_reserve(size);
	if (!e) {
		stat_inc(MP_STAT_RINGBUF_DROPS);
		return 0;
	}
	hdr_fill(&e->h, MP_EV_FREE_BATCH, pid_tgid, cfg->profile);
	e->kind = MP_KIND_FREE | MP_KIND_F_PRELOAD;
	e->count = 1;
	e->ids[0] = id;
	bpf_ringbuf_submit(e, data_wake_flags(size));
	stat_inc(MP_STAT_FREES);
	return 0;
}

SEC("usdt")
int mp_usdt_free_batch(struct pt_regs *ctx)
{
	return pl_free_common(PT_REGS_PARM1(ctx), (__u32)PT_REGS_PARM2(ctx));
}

/*
 * Deferred mode (MEMPROF_BATCH): memprof:flush passes the library's queue, struct
 * memprof_preload_queue: up to MP_PL_QUEUE_MAX walked samples packed at their length, each
 * stamped with the CLOCK_MONOTONIC time it was sampled at, then the queued frees, which may
 * name those samples. The queue goes out as it is, in one record made with one read
 * (MP_EV_PRELOAD_BATCH): a record per sample cost ~300 ns each in ring-buffer reservations and
 * commits whose cache lines the consumer on another CPU keeps taking back, several times the
 * trap's share of a sample. The daemon parses and checks it: nothing here trusts its contents
 * beyond the sizes that bound the copy.
 */
struct pl_queue {
	__u64 pid_tgid;
	__u64 q;		/* the queue in the target */
	__u32 size;		/* bytes to copy: MP_PL_QUEUE_ALLOCS + its "bytes" */
	__u32 profile, gen, max_frames, flags;
	__u32 prev_gen, prev_profile, prev_flags;
};

/* One MP_EV_PRELOAD_BATCH record of room for CAP bytes of queue. */
#define PL_EMIT_QUEUE(CAP)                                                                     \
static __noinline int pl_emit_queue_##CAP(struct pl_queue *a)                                 \
{                                                                                              \
	__u64 size = sizeof(struct mp_preload_batch_event) + (CAP), n = a->size;               \
	struct mp_preload_batch_event *e = data_reserve(size);                                 \
                                                                                               \
	if (!e) {                                                                              \
		stat_inc(MP_STAT_RINGBUF_DROPS);                                               \
		return 0;                                                                      \
	}                                                                                      \
	asm volatile("" : "+r"(n));	/* keep the clamp: the verifier needs it */           \
	if (n > (CAP))                                                                         \
		n = (CAP);                                                                     \
	hdr_fill(&e->h, MP_EV_PRELOAD_BATCH, a->pid_tgid, a->profile);                         \
	e->gen = a->gen;                                                                       \
	e->max_frames = a->max_frames;                                                         \
	e->flags = a->flags;                                                                   \
	e->prev_gen = a->prev_gen;                                                             \
	e->prev_profile = a->prev_profile;                                                     \
	e->prev_flags = a->prev_flags;                                                         \
	e->origin = MP_PL_BATCH_FLUSHED;                                                       \
	if (bpf_probe_read_user(e->q, n, (void *)a->q)) {                                      \
		stat_inc(MP_STAT_STACK_ERRORS);                                                \
		n = 0;	/* the daemon ignores an empty queue */                                \
	}                                                                                      \
	e->size = n;                                                                           \
	bpf_ringbuf_submit(e, data_wake_flags(size));                                          \
	return 0;                                                                              \
}
PL_EMIT_QUEUE(2048)
PL_EMIT_QUEUE(4096)
PL_EMIT_QUEUE(8192)
PL_EMIT_QUEUE(MP_PL_QUEUE_SIZE)

SEC("usdt")
int mp_usdt_flush(struct pt_regs *ctx)
{
	__u64 q = PT_REGS_PARM1(ctx);
	__u64 pid_tgid = mp_current_ids();
	__u32 tgid = pid_tgid >> 32;
	struct mp_proc_cfg *cfg = bpf_map_lookup_elem(&procs, &tgid);
	struct mp_preload_queue_head qh;
	struct mp_preload_target *pt;
	struct pl_queue a;

	if (!cfg) {
		stat_inc(MP_STAT_FOREIGN_CALLS);
		return 0;
	}
	pt = bpf_map_lookup_elem(&pltargets, &tgid);
	if (!pt || bpf_probe_read_user(&qh, sizeof(qh), (void *)q))
		return 0;
	if (qh.nfree > MP_FREE_BATCH_MAX || qh.nalloc > MP_PL_QUEUE_MAX ||
	    qh.bytes > MP_PL_QUEUE_SIZE - MP_PL_QUEUE_ALLOCS || (!qh.nfree && !qh.nalloc)) {
		stat_inc(MP_STAT_STACK_ERRORS);
		return 0;
	}
	a.pid_tgid = pid_tgid;
	a.q = q;
	a.size = MP_PL_QUEUE_ALLOCS + qh.bytes;
	a.profile = cfg->profile;
	a.gen = pt->gen;
	a.prev_gen = pt->prev_gen;
	a.prev_profile = pt->prev_profile;
	a.prev_flags = pt->prev_flags;
	a.max_frames = cfg->max_frames;
	if (a.max_frames == 0 || a.max_frames > MP_MAX_STACK)
		a.max_frames = MP_MAX_STACK;
	a.flags = cfg->flags;
	/* counted as sent; the daemon counts what it drops (generation, malformed) */
	stat_add(MP_STAT_SAMPLED, qh.nalloc);
	stat_add(MP_STAT_FREES, qh.nfree);
	if (a.size <= 2048)
		return pl_emit_queue_2048(&a);
	if (a.size <= 4096)
		return pl_emit_queue_4096(&a);
	if (a.size <= 8192)
		return pl_emit_queue_8192(&a);
	return pl_emit_queue_MP_PL_QUEUE_SIZE(&a);
}
