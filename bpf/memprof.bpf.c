// SPDX-License-Identifier: (LGPL-2.1-or-later OR BSD-2-Clause)
/*
 * memprofd's kernel side: allocator uprobes (entry) and uretprobes (return) attached pid-filtered
 * by daemon/probe/attach.c, plus fork/exec/exit tracepoints. The ABI is bpf/memprof.h.
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
 *
 * The programs are one object in four files: this one holds the maps, the per-thread state and
 * the helpers shared by all, and the allocator uprobe programs; alloc.bpf.h their entry and
 * return work, proc.bpf.h the process tracepoints, preload.bpf.h the libmemprof-preload USDT
 * programs.
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
#define MP_PROT_NONE		0	/* mmap(2)'s PROT_NONE */
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

/*
 * Alloc and free records leave the last MP_RINGBUF_RESERVE bytes of the ring to fork/exec/exit
 * records, so that a flood of samples the daemon cannot keep up with does not also cost it the
 * news that a process exited.
 */
#define MP_RINGBUF_RESERVE	(256 << 10)

/* Room for a data record of @size bytes, or NULL: the record is lost, and counted. */
static __always_inline void *data_reserve(__u64 size)
{
	void *e = NULL;

	if (bpf_ringbuf_query(&rb, BPF_RB_AVAIL_DATA) + size <=
	    MP_RINGBUF_SIZE - MP_RINGBUF_RESERVE)
		e = bpf_ringbuf_reserve(&rb, size, 0);
	if (!e)
		stat_inc(MP_STAT_RINGBUF_DROPS);
	return e;
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
	/* the record as the ring holds it: header, padding */
	__u64 len = (size + 8 + 7) & ~7ull;

	if (avail < len)	/* cannot be: see above */
		return BPF_RB_FORCE_WAKEUP;
	return (avail >> MP_DATA_WAKE_SHIFT) != ((avail - len) >> MP_DATA_WAKE_SHIFT) ?
		       BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
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

#include "alloc.bpf.h"

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

#include "proc.bpf.h"

#include "preload.bpf.h"
