/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The kernel side of memprofd, as user space sees it: loads bpf/memprof.bpf.c, attaches the
 * lifecycle programs, resolves allocator symbols in a process' mapped objects and attaches
 * pid-filtered uprobes to them, and delivers ring-buffer records (bpf/memprof.h) to a callback.
 *
 * Where probes go (emulated instructions, never single-stepped ones when avoidable), uprobe
 * sessions versus entry + return probes, and the probe cost calibration behind the overhead
 * budget: see the comment at the top of daemon/probe/loader_internal.h.
 *
 * Owner: the BPF/probes component. The engine (daemon/engine/engine.c) is its only user.
 */
#ifndef MEMPROFD_BPF_LOADER_H
#define MEMPROFD_BPF_LOADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bpf/memprof.h"

struct mp_bpf;

/* Called for each ring-buffer record; @data starts with struct mp_event_hdr. Return 0 to go on. */
typedef int (*mp_bpf_event_fn)(void *ctx, const void *data, size_t size);

/* Load and verify the programs, attach the lifecycle (fork/exec/exit) programs, create the ring
 * buffer. Returns NULL with errno set (EPERM: no permission for BPF). */
struct mp_bpf *mp_bpf__open(mp_bpf_event_fn fn, void *ctx);
/*
 * The same, logging through @log (may be NULL) from the start: each kernel probe's result once
 * (the exit tracepoint's prototype, uprobe_multi and session links tried on a function of our
 * own), then the mechanisms chosen. On failure @why (may be NULL) gets one sentence: the
 * program and the verifier's or kernel's reason; "permission" only for a missing capability.
 * MP_BPF_TEST_REJECT=1 in the environment also loads a program every verifier rejects (tests).
 */
struct mp_bpf *mp_bpf__open_log(mp_bpf_event_fn fn, void *ctx, void (*log)(void *, int,
				const char *), void *log_ctx, char *why, size_t why_len);
/*
 * The kernel mechanisms in use, for logs and status: "uprobe_multi links" or "perf-event uprobes
 * (no uprobe_multi: REASON)"; "uprobe sessions" or "entry+return probes (no sessions: REASON)";
 * "exit: tp_btf/sched_process_exit(task, group_dead)" or "...(task)".
 */
const char *mp_bpf__mechanisms(const struct mp_bpf *b);
void mp_bpf__free(struct mp_bpf *b);	/* detaches everything; NULL-safe */

/* An fd that becomes readable when records are pending (for poll/epoll/sd-event). */
int mp_bpf__fd(const struct mp_bpf *b);
/* Deliver every record pending now to the callback (not those submitted meanwhile beyond a
 * ringful). Returns the number delivered or -errno. */
int mp_bpf__consume(struct mp_bpf *b);
/* Deliver at most @max pending records (0: all) for about @max_ns at most (0: no limit), so
 * that a caller with other work to serve (an event loop) is never held for long by a ring
 * that keeps filling or by records that are slow to handle. Returns the number delivered,
 * at least 1 when the budget ran out first, or -errno. */
int mp_bpf__consume_max(struct mp_bpf *b, unsigned int max, uint64_t max_ns);

/* Put process @pid under @cfg (insert or update the "procs" map entry). */
int mp_bpf__proc_set(struct mp_bpf *b, pid_t pid, const struct mp_proc_cfg *cfg);
int mp_bpf__proc_get(struct mp_bpf *b, pid_t pid, struct mp_proc_cfg *cfg);
int mp_bpf__proc_del(struct mp_bpf *b, pid_t pid);

/*
 * Find the allocator entry points in every object @pid maps and attach pid-filtered probes.
 * Returns the number of probes attached, -ENOENT when the process maps no probe-able allocator
 * (then @why, if not NULL, gets a sentence naming what was looked for), -ESRCH when it is gone,
 * the kernel's -errno when it has allocator symbols but every probe failed to attach (then @why
 * names the first that failed and the link kind and programs).
 * Calling it again attaches only to objects not yet probed (after dlopen or exec).
 */
int mp_bpf__attach(struct mp_bpf *b, pid_t pid, char *why, size_t why_len);
/*
 * The same for a process that has just exec'd (a target's new process, whose record the caller
 * read): its libraries are not mapped yet, so a process whose image maps only ld.so keeps ld.so's
 * rendezvous probe (0), which probes them as they are mapped, and its mode (preload or not) is
 * decided again at its next two rendezvous.
 */
int mp_bpf__attach_exec(struct mp_bpf *b, pid_t pid, char *why, size_t why_len);
/* Detach every probe of @pid. */
int mp_bpf__detach(struct mp_bpf *b, pid_t pid);

/*
 * Targets: the processes that exec an executable (MP_WATCH_EXE: @a its st_dev, @b its st_ino;
 * BPF compares the inode number only, the caller checks the device)
 * or exec in, or move into, a v2 cgroup or one below it (MP_WATCH_CGROUP: @a the cgroup's id,
 * the st_ino of its directory) without a "procs" entry get an MP_EV_JOIN record for @profile;
 * while a cgroup is watched, every v2 cgroup made gets an MP_EV_CGROUP_NEW record. @profile 0:
 * stop watching it. Returns 0, -EBUSY (another profile watches it), -ENOENT (not watched),
 * -EOPNOTSUPP (cgroups: the kernel's cgroup tracepoints could not be attached), -errno.
 */
enum mp_watch_kind {
	MP_WATCH_EXE = 1,
	MP_WATCH_CGROUP,
};
int mp_bpf__watch(struct mp_bpf *b, enum mp_watch_kind kind, uint64_t a, uint64_t bb,
		  uint32_t profile);

/* Sum of the per-CPU counters of bpf/memprof.h's enum mp_stat. */
int mp_bpf__stats(struct mp_bpf *b, uint64_t out[MP_STAT__MAX]);

/*
 * Logging: the loader never prints. With a log function set, it reports each probe that failed
 * to attach ("Failed to attach uprobe to 'free' in '/usr/lib/.../libc.so.6' (pid 12, offset
 * 0x98ef9): ..."), each probe moved by the placement rule (daemon/probe/placement.h), each failed
 * automatic attach, and libbpf's warnings. @level is a syslog priority (3 err .. 7 debug).
 */
typedef void (*mp_bpf_log_fn)(void *ctx, int level, const char *msg);
void mp_bpf__set_log(struct mp_bpf *b, mp_bpf_log_fn fn, void *ctx);

/*
 * Detached probes (mp_bpf__detach, EXIT) are released by a background thread: closing a uprobe
 * perf event waits for RCU grace periods (~0.1-0.2 s each on 6.18), far too long for an event
 * loop. A process forked by the caller inherits copies of those fds until its exec, and would pay
 * the grace periods itself if the thread closed the originals meanwhile: call mp_bpf__quiesce()
 * (waits until the thread has nothing left) before forking a child that will exec.
 */
void mp_bpf__quiesce(struct mp_bpf *b);

/*
 * How a process is profiled. A process that maps libmemprof-preload.so when its probes are
 * first attached (or when it exec's) is profiled through the library's USDT probes
 * (memprof:alloc/free): its configuration block mirrors the "procs" entry (rate, profile,
 * sampling flag; rewritten by mp_bpf__proc_set) and its alloc records carry MP_KIND_F_PRELOAD.
 * Any other process gets allocator uprobes.
 */
enum mp_bpf_mode {
	MP_BPF_MODE_UPROBE = 1,
	MP_BPF_MODE_PRELOAD,
};
/* The mode of @pid, or -ENOENT when it has no probes. */
int mp_bpf__mode(struct mp_bpf *b, pid_t pid);
/* Read a preload-mode process' library counters (enum memprof_preload_stat) into @out[0..n).
 * Returns how many were read, -ENOENT unless @pid is in preload mode, or -errno. */
int mp_bpf__preload_stats(struct mp_bpf *b, pid_t pid, uint64_t *out, size_t n);
/*
 * A preload-mode process that left its library's queue (<memprof/preload.h>, struct
 * memprof_preload_pending) untouched since the previous call: copy it, without a trap, into
 * @buf as an MP_EV_PRELOAD_BATCH record (bpf/memprof.h) of this moment, as if it had been
 * flushed. The library still reports it later: its samples and frees are then seen twice (the
 * engine ignores a preload id it tracks already, and a free of one it does not). Returns the
 * record's size, 0 when there is nothing to take (yet), -ENOENT unless @pid is in preload mode,
 * -EINVAL if @len is below sizeof(struct mp_preload_batch_event) + MP_PL_QUEUE_SIZE, -errno.
 * @last: the process is held at its exit (it will not send the queue): take it whenever it is
 * not in use, without waiting for a second look.
 */
int mp_bpf__preload_pull(struct mp_bpf *b, pid_t pid, void *buf, size_t len, bool last);

/* User-space counters of the loader. */
struct mp_bpf_counters {
	uint64_t attach_errors;		/* probes that failed to attach */
	uint64_t auto_attach_errors;	/* followed children / exec'd images that could not be probed */
	uint64_t purged;		/* stale sampled-table entries deleted after exec/exit */
	uint64_t uprobe_multi;		/* 1: probes are uprobe_multi links, 0: perf-event uprobes */
	uint64_t uprobe_session;	/* 1: uprobe sessions (return half on sampled calls only) */
	uint64_t entry_cost_ns;		/* cost of an entry probe hit */
	uint64_t return_cost_ns;	/* added cost of a return probe hit */
	uint64_t cost_calibrated;	/* 1: both measured at open, 0: defaults */
};
void mp_bpf__counters(const struct mp_bpf *b, struct mp_bpf_counters *out);

/* Probe hits of @pid so far (0 when it has none). The count is kept until the EXIT record of
 * @pid has been delivered, or until mp_bpf__proc_hits_del(). */
int mp_bpf__proc_hits(struct mp_bpf *b, pid_t pid, struct mp_proc_hits *out);
int mp_bpf__proc_hits_del(struct mp_bpf *b, pid_t pid);

/* 32.32 fixed-point K = ln 2 / -ln(1 - rate) for struct mp_proc_cfg.gap_k (rate in (0, 1)). */
uint64_t mp_gap_k(double rate);

/* Convert a bpf_ktime_get_ns() timestamp to µs since the Unix epoch. */
uint64_t mp_ktime_to_epoch_us(uint64_t ktime_ns);

#endif
