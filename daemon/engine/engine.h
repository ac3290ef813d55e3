/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The sampling engine: profiles, processes and threads, the sampler that completes each sampled
 * block's multiplicity, the entry tables that match frees, and one memtrace trace per
 * (profile, process). Used in-process by `memprofctl record` and by memprofd.
 * It has no event loop of its own: the caller watches mp_engine__fd() and calls
 * mp_engine__process() when it is readable.
 *
 * Owner: the engine component. memprofd (daemon/service/memprofd.c, the service) and cli/cmd_record.c
 * are its users.
 */
#ifndef MEMPROFD_ENGINE_H
#define MEMPROFD_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bpf/memprof.h"
#include "userspace-lib/options.h"

struct mp_engine;
struct mp_profile;

/*
 * The engine's event source: where its ring records (bpf/memprof.h: alloc, free, fork, exec,
 * map, exit...) come from, and the control of the processes they describe. The BPF loader
 * (daemon/probe/bpf_loader.h) is the source when mp_engine_opts.source is NULL: its records
 * reach the engine straight from libbpf's callback. Another source (a test's synthetic records)
 * hands each record to mp_engine__feed() from its consume(). Every operation is required; @ctx
 * is mp_engine_opts.source_ctx.
 */
struct mp_engine_source {
	/* Deliver the records pending now, for about @max_ns at most (0: no limit). Returns how
	 * many, or -errno. */
	int (*consume)(void *ctx, struct mp_engine *e, uint64_t max_ns);
	/* An fd readable while records are pending (in mp_engine__fd()'s set), or -1. */
	int (*fd)(void *ctx);
	/* Process @pid's configuration (struct mp_proc_cfg: profile, rate, flags): set, get (0,
	 * or -ENOENT when it has none), forget. */
	int (*proc_set)(void *ctx, pid_t pid, const struct mp_proc_cfg *cfg);
	int (*proc_get)(void *ctx, pid_t pid, struct mp_proc_cfg *cfg);
	int (*proc_del)(void *ctx, pid_t pid);
	/* Probe @pid (again: what is not probed yet). >= 0, or -ENOENT (nothing to probe),
	 * -ESRCH (gone), -errno; then @why (may be NULL) gets a sentence. */
	int (*attach)(void *ctx, pid_t pid, char *why, size_t why_len);
	/* The same for a process that has just exec'd and joined a target: its libraries are
	 * probed as ld.so maps them (mp_bpf__attach_exec()). */
	int (*attach_exec)(void *ctx, pid_t pid, char *why, size_t why_len);
	int (*detach)(void *ctx, pid_t pid);
	/* How @pid is profiled (enum mp_proc_mode), or -ENOENT when it is not probed. */
	int (*mode)(void *ctx, pid_t pid);
	/* A preload-mode process' library counters (enum memprof_preload_stat) into @out[0..n):
	 * how many, or -errno. */
	int (*preload_stats)(void *ctx, pid_t pid, uint64_t *out, size_t n);
	/* A preload-mode process' queue as an MP_EV_PRELOAD_BATCH record in @buf: its size, 0
	 * when there is nothing to take, or -errno (daemon/probe/bpf_loader.h). */
	int (*preload_pull)(void *ctx, pid_t pid, void *buf, size_t len, bool last);
	/* @pid's probe hits so far: 0, or -errno. */
	int (*proc_hits)(void *ctx, pid_t pid, struct mp_proc_hits *out);
	/* What a probe hit costs the profiled thread, entry and return, in ns. */
	void (*hit_costs)(void *ctx, uint64_t *entry_ns, uint64_t *return_ns);
	/* The counters of enum mp_stat, all processes: 0, or -errno. */
	int (*stats)(void *ctx, uint64_t out[MP_STAT__MAX]);
	/* The mechanisms in use, for logs and status. */
	const char *(*mechanisms)(void *ctx);
	/* Targets: report the processes that exec @kind's object (MP_TARGET_EXE: @a its st_dev,
	 * @b its st_ino) or exec in, or move into, cgroup @a (MP_TARGET_CGROUP: its id) or one
	 * below it, as MP_EV_JOIN records for @profile; @profile 0: stop. 0, or -errno
	 * (-EBUSY: another profile watches it). */
	int (*watch)(void *ctx, int kind, uint64_t a, uint64_t b, uint32_t profile);
};

enum mp_profile_state {
	MP_PROFILE_SAMPLING = 1,
	MP_PROFILE_STOPPED,	/* no new samples; frees of sampled blocks still recorded */
	MP_PROFILE_DISCARDED,	/* traces complete, no more tracking */
};

struct mp_engine_opts {
	size_t sz;
	uint64_t seed;		/* PRNG seed for multiplicities (with has_seed) */
	bool has_seed;
	size_t max_entries;	/* live sampled blocks tracked, all processes; 0 = default */
	size_t max_procs;	/* processes tracked; 0 = default */
	/* where traces go when a profile names neither out_path nor out_dir;
	 * NULL = the current directory. */
	const char *default_dir;
	/* may the owner (@uid, @gid) of a profile other than root's go on profiling
	 * process @pid, which has just exec'd (@secure: into an image with other credentials or
	 * capabilities, MP_EXEC_F_SECURE)? 0, or -errno with a message in @err: the process is
	 * detached, its trace completed, the message its mp_proc_stats.detached_reason. NULL:
	 * only @secure execs are refused. */
	int (*exec_check)(void *ctx, pid_t pid, uid_t uid, gid_t gid, bool secure, char *err,
			  size_t err_len);
	void *exec_check_ctx;
	/* may the owner (@uid, @gid, not root) of a profile with targets profile process @pid,
	 * which has just joined one of them? The rule of a PID attach: 0, or -errno with a
	 * message in @err (the process is skipped, counted in mp_target_stats.skipped). NULL:
	 * every process of a non-root owner's targets is skipped. Its context: exec_check_ctx. */
	int (*join_check)(void *ctx, pid_t pid, uid_t uid, gid_t gid, char *err, size_t err_len);
	/* > 0: each trace's file is written by a thread of its own through a queue of at
	 * most this many bytes (userspace-lib/codec/writer_async.h), so that no output, however slow
	 * or stuck, makes the engine wait; an event that finds the queue full is not written
	 * (MP_DROP_STALLED). 0: traces are written in the caller's thread. */
	size_t output_queue_bytes;
	/* the loader's messages (each kernel probe's result and the
	 * mechanisms chosen, once at start; probes that failed to attach), @level a syslog
	 * priority; NULL: none. */
	void (*log)(void *ctx, int level, const char *msg);
	void *log_ctx;
	/* When mp_engine__new() fails to load the BPF programs: one sentence naming the program
	 * and the verifier's or the kernel's reason ("permission" only for a missing
	 * capability). NULL: not wanted. */
	char *error;
	size_t error_len;
	/* > 0: each profile lists at most this many exited processes whose traces are written
	 * (and that lost nothing); older ones are retired into the profile's sums
	 * (mp_profile__retired()) and freed. 0: every process stays listed until the profile
	 * is forgotten. */
	size_t keep_exited;
	/* Where records come from (struct mp_engine_source, with its @source_ctx); NULL: the BPF
	 * loader, opened by mp_engine__new() (then log and error above apply). */
	const struct mp_engine_source *source;
	void *source_ctx;
};

/*
 * Backtraces (stacks component, docs/DESIGN.md). BPF always walks the frame-pointer chain; with
 * a stack copy (mp_profile_opts.stack_copy_size) the daemon can unwind with DWARF CFI instead
 * (daemon/stacks/unwind.h), which code built without frame pointers needs.
 *	FP:	the frame-pointer walk; no stack copy.
 *	DWARF:	DWARF unwinding of every sampled event's stack copy (the frame-pointer walk when
 *		an event lost its copy).
 *	AUTO:	the frame-pointer walk when it is trustworthy: every frame whose caller it read
 *		from rbp (all but the outermost) is in an object that keeps frame pointers
 *		(mp_unwinder__frame_pointers(), judged once per object from its CFI); else DWARF.
 */
enum mp_unwind {
	MP_UNWIND_AUTO = 0,
	MP_UNWIND_FP,
	MP_UNWIND_DWARF,
};
const char *mp_unwind__name(enum mp_unwind u);		/* "auto", "fp", "dwarf" */

/*
 * Targets beyond PIDs (daemon/engine/targets.c): every process that runs an executable, or runs
 * in a cgroup or below it, now and later (it execs there, or is moved there; a forked child of
 * a followed process is followed anyway). A process joins when BPF sees its exec or its move,
 * the daemon checks the owner's access and probes it: what it allocates before that (the
 * dynamic loader's work, a few milliseconds) is not sampled.
 */
enum mp_target_kind {
	MP_TARGET_EXE = 1,	/* @path: an executable file, matched by device and inode */
	MP_TARGET_CGROUP,	/* @path: a cgroup's directory in any mounted hierarchy, or its
				 * path in the v2 hierarchy ("/system.slice/x.service") */
};
#define MP_MAX_TARGETS		8	/* per profile */

struct mp_target {
	enum mp_target_kind kind;
	const char *path;
	/* how status names it ("unit:cron.service"); NULL: "exe:PATH", "cgroup:PATH" */
	const char *label;
	/* a cgroup that need not exist yet (a unit not running): watched from its creation */
	bool may_be_absent;
};

/* A target of a profile, as status shows it. */
struct mp_target_stats {
	const char *label;	/* "exe:/usr/bin/python3", "unit:cron.service" */
	const char *path;	/* the executable, or the cgroup's v2 directory */
	bool present;		/* a cgroup that exists now (an executable: always) */
	uint64_t joined;	/* processes that joined the profile through it */
	uint64_t skipped;	/* processes the owner may not profile: never profiled */
	uint64_t failed;	/* processes that could not be probed (no allocator, gone) */
};
/* Fills up to @max entries; returns how many targets @p has. */
size_t mp_profile__targets(const struct mp_profile *p, struct mp_target_stats *out, size_t max);

struct mp_profile_opts {
	size_t sz;
	double rate;		/* λ per word, [MP_RATE_MIN, 1]; 0 = MP_RATE_DEFAULT */
	unsigned int callstack_size;	/* frames; 0 = the maximum */
	bool no_follow_forks;
	uint64_t duration_us;	/* stop automatically after this long; 0 = never */
	/*
	 * Where traces go. out_fd >= 0: the first process' trace is written there (the fd is
	 * dup'd); other processes (forked children) get out_dir/<pid>-<comm>.ctf if out_dir is
	 * set, else are written next to out_path, else under the engine's default directory.
	 * out_path: "<out_path>" for the first process, "<out_path>.<pid>" for others.
	 */
	int out_fd;
	const char *out_path;
	const char *out_dir;
	uid_t owner_uid;	/* files created by the engine are chowned to this uid/gid */
	gid_t owner_gid;
	uint16_t format_version;	/* 2 (default) or 3 */
	int zstd_level;		/* > 0: write .ctf.zst */
	/* how backtraces are unwound; see enum mp_unwind. */
	enum mp_unwind unwind;
	int stack_copy_size;	/* bytes of user stack BPF copies with each sampled event for
				 * DWARF unwinding: 0 = MP_USTACK_DEFAULT, < 0 = none (then
				 * every stack is a frame-pointer walk); at most MP_USTACK_MAX */
	/* budget of the probes' cost per process, in percent of one
	 * CPU, averaged over MP_OVERHEAD_WINDOW_MS; a process over it is detached (its trace
	 * completed, mp_proc_stats.detached_reason says why). 0 = unlimited. */
	double max_overhead_pct;
	/* Targets besides the PIDs given to mp_engine__start() (copied). A profile with targets
	 * may start with no process, and does not stop when its processes have exited. */
	const struct mp_target *targets;
	size_t ntargets;
	/* The options as the user gave them (options.h); mp_profile_opts__set() derives the
	 * fields above from them. An option without a field above is read from here. */
	struct mp_opts opt;
};

/* Set @po's fields from the options @o (checked: mp_opts__check()), @po->opt to @o. */
void mp_profile_opts__set(struct mp_profile_opts *po, const struct mp_opts *o);

#define MP_OVERHEAD_WINDOW_MS	1000

/* How a process is profiled (daemon/probe/bpf_loader.h): allocator uprobes, or the cooperative fast
 * path of libmemprof-preload (in-process sampling, USDT probes on samples only). */
enum mp_proc_mode {
	MP_PROC_MODE_UPROBE = 0,
	MP_PROC_MODE_PRELOAD,
};
const char *mp_proc_mode__name(enum mp_proc_mode m);	/* "uprobe", "preload" */

/* Per-process figures of a profile. */
struct mp_proc_stats {
	pid_t pid;
	char comm[16];
	bool exited;
	uint64_t samples;		/* alloc events (sampled blocks) */
	uint64_t nsamples;		/* sum of multiplicities */
	uint64_t frees;			/* collects written */
	double est_alloc_bytes;		/* requested bytes (rounded to words): estimate.h */
	double est_live_bytes;		/* same over blocks not freed */
	uint64_t drops;			/* events lost for this process (ring full, table full...) */
	const char *trace_path;		/* may be NULL when written to a passed fd */
	uint64_t write_errors;		/* events (and header patches) not written to the trace */
	uint64_t live_nsamples;		/* Σ n over blocks not freed (at exit: live at exit) */
	uint64_t truncated_stacks;	/* samples whose stack reached callstack_size */
	uint64_t exec_collects;		/* blocks collected because the process exec'd */
	uint64_t unmatched_frees;	/* free events no entry matched (attributed by pid) */
	enum mp_proc_mode mode;
	uint64_t preload_samples;	/* library's count of samples drawn (its stats, last read
					 * while the process lived) */
	uint64_t preload_lost;		/* library's losses: table_full + stale + realloc_lost */
	uint64_t dwarf_stacks;		/* samples whose backtrace was unwound with DWARF */
	uint64_t window_cut_stacks;	/* ... cut short where the stack copy ended (a larger
					 * stack_copy_size would have gone further) */
	uint64_t unwind_fallbacks;	/* samples that wanted DWARF but had no stack copy, or
					 * whose unwinding failed: frame-pointer walk kept */
	uint64_t image_gone_stacks;	/* samples taken before an exec that the engine read
					 * after it: their frames left out (their image is gone) */
	uint64_t probe_hits;		/* entry + return probe hits (while probed) */
	double overhead_pct;		/* estimated probe cost over the last window, % of a CPU */
	const char *detached_reason;	/* NULL, or why probing stopped before the process
					 * exited (over its overhead budget) */
	int write_errno;		/* the first failed write to the trace (ENOSPC...), or 0 */
	uint64_t write_error_us;	/* when it happened, CLOCK_REALTIME µs */
	uint64_t stalled;		/* events not written: the output's queue was full */
	uint64_t stalled_us;		/* when that first happened, CLOCK_REALTIME µs */
	bool trace_done;		/* the trace is complete and its file written and closed */
	/* standard errors of est_alloc_bytes and est_live_bytes */
	double se_alloc_bytes, se_live_bytes;
};

typedef void (*mp_profile_state_fn)(void *ctx, struct mp_profile *p, enum mp_profile_state st);

struct mp_engine *mp_engine__new(const struct mp_engine_opts *opts);
/* Completes and closes every trace (as discard would), then frees. NULL-safe. */
void mp_engine__free(struct mp_engine *e);

int mp_engine__fd(const struct mp_engine *e);
/* One ring record of @size bytes (starting with struct mp_event_hdr), as the source delivers it:
 * from a source's consume(). Returns 0. */
int mp_engine__feed(struct mp_engine *e, const void *rec, size_t size);
/* Consume the events pending now (mp_bpf__consume()). Returns the number processed or -errno. */
int mp_engine__process(struct mp_engine *e);
/* The same for about @max_ns at most (0: as above): an event loop calls this when the fd is
 * readable and comes back while it stays readable, serving its other sources between the
 * rounds however fast the ring fills; a read-only call (status) that wants current counts
 * without waiting long for them too. */
int mp_engine__process_max(struct mp_engine *e, uint64_t max_ns);
/* Called whenever a profile changes state by itself (all processes exited, duration ran out). */
void mp_engine__on_state(struct mp_engine *e, mp_profile_state_fn fn, void *ctx);

/*
 * Start a profile sampling @pids (none: @opts has targets) and the processes of @opts' targets.
 * Fails with -EBUSY if one of the PIDs already samples for a profile, or a target is another
 * profile's, -ESRCH if one does not exist, -ENOENT if one has no probe-able allocator, or a
 * target does not exist, -EINVAL for a bad option or target. On failure @err (if not NULL)
 * gets a sentence naming the PID or the target and the reason. Profile ids count from 1.
 */
int mp_engine__start(struct mp_engine *e, const struct mp_profile_opts *opts, const pid_t *pids,
		     size_t npids, struct mp_profile **out, char *err, size_t err_len);

struct mp_profile *mp_engine__profile(struct mp_engine *e, uint32_t id);
/* Iterate: first with prev == NULL. */
struct mp_profile *mp_engine__next_profile(struct mp_engine *e, struct mp_profile *prev);

uint32_t mp_profile__id(const struct mp_profile *p);
enum mp_profile_state mp_profile__state(const struct mp_profile *p);
const struct mp_profile_opts *mp_profile__opts(const struct mp_profile *p);
/* -EINVAL unless sampling. */
int mp_profile__stop(struct mp_profile *p);
/* Completes every trace of the profile; -EINVAL if it is still sampling (stop it first). The
 * profile stays listed as discarded until mp_engine__forget(). */
int mp_profile__discard(struct mp_profile *p);
/* Per-process figures: fills up to @max entries, returns how many processes there are. */
size_t mp_profile__procs(const struct mp_profile *p, struct mp_proc_stats *out, size_t max);
/* The processes retired from that list (mp_engine_opts.keep_exited): how many, and the sums of
 * their figures in @out (pid 0, no trace path: theirs are in the profile's directory): sampled
 * blocks, samples, frees, live samples, drops and the estimates; not the engine's own counts. */
size_t mp_profile__retired(const struct mp_profile *p, struct mp_proc_stats *out);

/*
 * For each trace of @p that could not be written whole (a full disk), @fn gets a line saying
 * which, why (the first failure's errno) and how much was lost. Returns how many there were.
 */
size_t mp_profile__write_failures(const struct mp_profile *p,
				  void (*fn)(void *ctx, const char *msg), void *ctx);
/* The same, while @p runs, for the traces whose first failure was not reported yet (each is
 * reported once). */
size_t mp_profile__new_write_failures(struct mp_profile *p,
				      void (*fn)(void *ctx, const char *msg), void *ctx);
/* Traces of @p completed whose files are still being written (asynchronous outputs). */
unsigned int mp_profile__closing(const struct mp_profile *p);
/*
 * Wait at most @timeout_ms for the writers of completed traces to finish their files (all
 * profiles). Returns how many are still writing: their outputs are stuck. For @fn, a line
 * naming each of those.
 */
size_t mp_engine__wait_outputs(struct mp_engine *e, unsigned int timeout_ms,
			       void (*fn)(void *ctx, const char *msg), void *ctx);
/* The kernel mechanisms the probes use (daemon/probe/bpf_loader.h mp_bpf__mechanisms()). */
const char *mp_engine__mechanisms(const struct mp_engine *e);
/* Global drop/activity counters from BPF (enum mp_stat order). */
int mp_engine__stats(struct mp_engine *e, uint64_t *out, size_t n);

/* Losses the engine itself counts (user-space side), all profiles together. */
enum mp_engine_drop {
	MP_DROP_UNMATCHED_FREE,	/* a free event for a block no table holds */
	MP_DROP_TABLE_FULL,	/* sampled block not tracked: entry table limit */
	MP_DROP_STALE,		/* address allocated again before its free arrived: the old
				 * block is collected then (its free event was lost) */
	MP_DROP_NO_PROFILE,	/* event of a profile or process the engine does not know */
	MP_DROP_WRITE,		/* trace write failed */
	MP_DROP_LOST_EXIT,	/* process gone without an exit event (mp_engine__reap) */
	MP_DROP_PROCS_FULL,	/* forked child not followed: max_procs processes open, or its
				 * trace could not be created */
	MP_DROP_MALFORMED,	/* a preload queue record (or part) whose sizes do not hold
				 * together: the process' memory was overwritten */
	MP_DROP_STALLED,	/* event not written: its trace's output did not keep up (its
				 * queue was full, mp_engine_opts.output_queue_bytes) */
	MP_DROP__MAX,
};

/* Fill @out[0..n) with the enum mp_engine_drop counters; returns MP_DROP__MAX. */
int mp_engine__drops(const struct mp_engine *e, uint64_t *out, size_t n);

/* Backtraces, all profiles together (stacks component): what unwinding costs the engine. */
struct mp_engine_stack_stats {
	uint64_t events;		/* alloc events turned into trace allocations */
	uint64_t event_ns;		/* time spent on them (CLOCK_MONOTONIC): unwinding,
					 * symbolization, trace writing; estimated from every
					 * 16th event (x 16) */
	uint64_t with_copy;		/* events that carried a user-stack copy */
	uint64_t fp_stacks;		/* backtraces taken from the frame-pointer walk */
	uint64_t dwarf_stacks;		/* backtraces unwound with DWARF */
	uint64_t unwind_ns;		/* time spent in DWARF unwinding (AUTO's judgement of the
					 * frame-pointer walk, cached per address, not included) */
	uint64_t window_cut;		/* DWARF unwinds cut where the stack copy ended */
	uint64_t image_gone;		/* backtraces left out: read after their image's exec */
	uint64_t max_stack_used;	/* most stack bytes above sp a DWARF unwind read */
};
void mp_engine__stack_stats(const struct mp_engine *e, struct mp_engine_stack_stats *out);
/* Name of a drop cause, of a BPF stat (enum mp_stat), for summaries. */
const char *mp_engine_drop__name(enum mp_engine_drop d);
const char *mp_stat__name(enum mp_stat s);

/*
 * @pid has been reaped (its parent saw it exit). Deliver what is pending; if the engine
 * has not seen its exit event, complete its traces now (counted as MP_DROP_LOST_EXIT).
 * Returns 0, or -ENOENT if no profile holds @pid.
 */
int mp_engine__reap(struct mp_engine *e, pid_t pid);

/*
 * @pid is held at its exit (ptrace's PTRACE_EVENT_EXIT: its memory still readable): read the
 * counters of a libmemprof-preload process one last time, so that its summary has them all
 * (they are otherwise read every 256 samples). Nothing for other processes or threads.
 */
void mp_engine__exiting(struct mp_engine *e, pid_t pid);

/* Free a discarded profile (its traces are complete); -EINVAL unless discarded. @p is invalid
 * afterwards. */
int mp_engine__forget(struct mp_engine *e, struct mp_profile *p);

/*
 * @pid was just forked by, or just exec'd in, a profiled process and is held stopped by the
 * caller (ptrace) before it runs code of its own: deliver the pending events (its FORK or EXEC
 * record among them, so the engine follows it as it would have) and attach its probes now, so
 * that none of its allocations is missed; then read again how the loader profiles it
 * (mp_proc_stats.mode) and its mappings (held at exec, its libraries are mapped now). Returns 1
 * if a sampling profile holds @pid (probes attached), 0 if none does (not followed: the caller
 * may let it go), or -errno (then @err, if not NULL, says why: -ENOENT when it maps no
 * probe-able allocator, -ESRCH when it is gone).
 */
int mp_engine__sync_pid(struct mp_engine *e, pid_t pid, char *err, size_t err_len);

/*
 * The same for one profile (memprofd's Profile1.AddProcess), by the same path: 1 if @p follows
 * @pid (probes attached), 0 if not. With @out_fd >= 0 (a forked child's), its trace is written
 * to @out_fd (dup'd) instead of where @p's options put it; a trace already begun from the FORK
 * record (header only) is started again there and its file removed.
 */
int mp_profile__sync_pid(struct mp_profile *p, pid_t pid, int out_fd, char *err, size_t err_len);


#endif
