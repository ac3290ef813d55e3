/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The engine's internals, shared by its files (engine.c, profile.c, proc.c, events.c,
 * backtrace.c, preload.c, output.c, targets.c); engine.h is its interface.
 */
#ifndef MEMPROFD_ENGINE_INT_H
#define MEMPROFD_ENGINE_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <memprof/preload.h>
#include <memprof/trace.h>

#include "daemon/probe/bpf_loader.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/entries.h"
#include "daemon/engine/preload_batch.h"
#include "daemon/engine/sampler.h"
#include "userspace-lib/estimate.h"
#include "userspace-lib/codec/outfile.h"
#include "userspace-lib/codec/trace_context.h"

#define MP_DEFAULT_MAX_ENTRIES	(1u << 20)
#define MP_DEFAULT_MAX_PROCS	4096
#define MP_CTX_DROPS_WIDTH	480	/* fixed width of the drops field in the context (drops
					 * and, when it happened, the overhead detach) */
/* epoll data of the engine's fds; anything else is a struct mp_proc * (its pidfd) */
#define MP_EP_RINGBUF		1
#define MP_EP_TIMER		2

#define MP_FPC_SLOTS	256
#define MP_TRACE_MODE	0600	/* traces in a directory of traces: their owner's */
#define MP_NAME_TRIES	1000	/* names tried: PID-COMM.ctf, PID-COMM.2.ctf, ... */
/* an entry whose alloc could not be written: its free is neither written nor unmatched */
#define MP_ENTRY_ID_UNWRITTEN	((1ull << MP_ENTRY_ID_BITS) - 1)

struct mp_proc;

/* A completed trace whose writer's thread is still writing (asynchronous outputs). */
struct mp_closing {
	struct memprof_writer *w;
	struct mp_proc *pr;		/* NULL once the process was freed */
	struct mp_closing *next;
};

/* What only a process whose trace is being written needs (3 KiB): freed at its completion, so
 * that the many processes a profile saw exit cost it their figures only. */
struct mp_proc_live {
	/* fp_trustworthy()'s verdicts that hold (see there): direct-mapped, 0 = none */
	uint64_t fp_ok[MP_FPC_SLOTS];
	/* the last backtrace written (outermost first): its locations are defined */
	uint64_t prev_bt[MP_MAX_STACK];
	unsigned int prev_len;
};

/* A process of a profile: what the engine knows of it, and its trace. */
struct mp_proc {
	struct mp_hnode node;		/* key: pid, in the profile's table */
	struct mp_profile *p;
	struct mp_proc *next;		/* the profile's list, in creation order */
	pid_t pid;
	char comm[16];
	char *path;			/* NULL when written to a passed fd */
	struct mp_outfile out;		/* a user-named path: renamed into place at commit */
	bool own_file;			/* @path is a file this trace made: undo removes it */
	bool dir_named;			/* ... named by the engine, PID-COMM.ctf in a directory */
	int fd;
	int pidfd;			/* in the engine's epoll set until completion, or -1 */
	struct memprof_writer *w;
	bool completed;			/* writer closed */
	bool in_list;			/* counted in the engine's open processes */
	bool exited;
	bool in_table;
	uint64_t samples, nsamples, frees, live_nsamples, truncated, exec_collects;
	struct mp_est_sum est, live_est;	/* requested words' estimators (estimate.h) */
	uint64_t unmatched, stale, table_full, write_errors;
	uint64_t stalled;		/* events not written: the output's queue was full */
	uint64_t stalled_us;		/* the first of them (CLOCK_REALTIME µs) */
	int write_err;			/* errno of the first failed write, or 0 */
	uint64_t write_err_us;		/* when it happened (CLOCK_REALTIME µs) */
	bool write_err_told;		/* mp_profile__new_write_failures() reported it */
	struct mp_closing *closing;	/* its writer still finishes the file, or NULL */
	/* overhead control (check_overhead()) */
	struct mp_proc_hits hits;	/* probe hits at the start of the current window */
	uint64_t win_start_ns;		/* CLOCK_MONOTONIC start of that window, 0: none */
	double overhead_pct;		/* estimate over the last complete window */
	char *detached_reason;		/* probes removed over budget: why (NULL: not) */
	uint64_t dwarf_stacks, window_cut, unwind_fallbacks;	/* stacks component */
	uint64_t image_gone;		/* stacks left out: their image was gone (image_gone()) */
	uint64_t image_seen, image_gen;	/* image_gone()'s last verdict that it was not */
	/* AUTO: BPF's stack copies are off while the frame-pointer walk does (copy_adapt()) */
	bool copy_off;
	unsigned int fp_streak, copy_backoff;
	struct mp_proc_live *live;	/* until completed, then NULL */
	unsigned int incarnation;	/* 1 for the profile's first process of this pid, 2... */
	enum mp_proc_mode mode;		/* uprobes, or libmemprof-preload's USDT probes */
	/* preload mode: the library's counters, as last read */
	uint64_t pl_stats[MEMPROF_PRELOAD_STAT__SLOTS];
};

/* A target of a profile (targets.c). */
struct mp_target_state {
	enum mp_target_kind kind;
	char *label;		/* "exe:PATH", "cgroup:PATH", or the caller's ("unit:NAME") */
	char *path;		/* the executable, or the cgroup's directory in the v2 hierarchy */
	uint64_t a, b;		/* exe: st_dev, st_ino; cgroup: its id (0: absent now) */
	bool watched;		/* BPF reports its processes (source's watch) */
	uint64_t joined, skipped, failed;
};

struct mp_profile {
	struct mp_engine *e;
	struct mp_profile *next;
	uint32_t id;
	enum mp_profile_state state;
	struct mp_profile_opts opts;	/* strings point to the copies below */
	char *out_path, *out_dir;
	struct mp_sampler sampler;
	struct mp_htab procs;		/* the current process of each pid */
	struct mp_proc *list, **tail;
	size_t nprocs;
	bool starting;			/* in mp_engine__start(): traces not renamed into place */
	unsigned int nclosing;		/* traces whose writers still finish their files */
	bool tell_closed;		/* its last closing writer finished: tell the caller */
	unsigned int nalive;		/* processes not exited */
	uint64_t stop_ns;		/* CLOCK_MONOTONIC of stop (events after it are ignored) */
	uint64_t deadline_ns;		/* duration: stop at this CLOCK_MONOTONIC time, or 0 */
	uint64_t bpf_base[MP_STAT__MAX];	/* BPF counters at start */
	uint32_t gen;
	struct mp_target_state *targets;
	size_t ntargets;
	/* exited processes no longer listed: how many, their figures summed (profile_retire()) */
	uint64_t nretired;
	struct mp_proc retired;
	bool retire_due;		/* a process exited or its trace's file was finished:
					 * profiles_retire() looks at its list */
};

struct mp_engine {
	struct mp_engine_opts opts;
	char *default_dir;
	struct mp_bpf *bpf;		/* the loader, when it is the source (no opts.source) */
	const struct mp_engine_source *src;	/* where records come from (engine.h) */
	void *src_ctx;
	struct mp_symbolizer *sym;
	struct mp_unwinder *unw;	/* unwinds stack copies (daemon/stacks/unwind.h) */
	struct mp_engine_stack_stats sst;
	struct mp_entries *entries;
	int epfd, timerfd;
	struct mp_profile *profiles;	/* newest first */
	uint32_t next_id;
	uint32_t gen;
	size_t open_procs;		/* processes not completed, all profiles */
	size_t max_procs;
	uint64_t seed;
	mp_profile_state_fn state_fn;
	void *state_ctx;
	char hostname[256];
	uint64_t drops[MP_DROP__MAX];
	struct mp_preload_batch_stats batches;	/* MP_EV_PRELOAD_BATCH records */
	uint64_t pull_next_ns;		/* next look at idle preload queues (pull_idle_queues) */
	void *pull_buf;			/* one MP_EV_PRELOAD_BATCH record, for them */
	uint64_t ovh_next_ns;		/* next overhead check (CLOCK_MONOTONIC), 0: none due */
	uint64_t timer_next_ns;		/* when the timerfd fires (arm_timer), 0: disarmed */
	uint64_t traces_flushed_ns;	/* flush_traces() last wrote pending packets */
	/* sync_proc() (profile.c): the trace of sync_pid (> 0) goes to sync_fd (service) */
	pid_t sync_pid;
	int sync_fd;
	struct mp_closing *closing;	/* writers finishing completed traces */
	bool reaping;			/* in reap_outputs() */
};

static inline uint64_t now_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t now_epoch_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000ull + (uint64_t)ts.tv_nsec / 1000;
}

/* A call of the engine's source: SRC(e, attach, pid, why, len). */
#define SRC(e, op, ...)	((e)->src->op((e)->src_ctx, ##__VA_ARGS__))

/* source_bpf.c: the BPF loader as the engine's source (its ctx: the struct mp_bpf) */
extern const struct mp_engine_source mp_engine_bpf_source;

/* engine.c */
void arm_timer(struct mp_engine *e);

/* output.c */
void trace_write_failed(struct mp_proc *pr, int err);
void patch_context(struct mp_proc *pr);
const char *fd_name(int fd, char *buf, size_t len);
void trace_unlink(struct mp_proc *pr, const char *path);
int trace_commit(struct mp_proc *pr, char *err, size_t err_len);
int trace_open_file(struct mp_proc *pr, const char *path, bool user_named);
int writer_release(struct mp_engine *e, struct memprof_writer *w, struct mp_proc *pr);
void reap_outputs(struct mp_engine *e);
struct memprof_writer *trace_writer_new(struct mp_proc *pr);
void trace_restart_at_exec(struct mp_proc *pr);

/* proc.c */
pid_t proc_tgid(pid_t tid);
void read_comm(pid_t pid, char comm[16]);
void proc_update_mode(struct mp_proc *pr);
void proc_rename_for_image(struct mp_proc *pr);
/* @comm_hint: the process' name when /proc has none (it is gone already), or NULL. */
struct mp_proc *proc_new(struct mp_profile *p, pid_t pid, const char *comm_hint, char *err,
			 size_t err_len);
struct mp_proc *proc_find(const struct mp_profile *p, pid_t pid);
void proc_complete(struct mp_proc *pr);
void proc_free(struct mp_proc *pr);
void proc_cfg(const struct mp_profile *p, struct mp_proc_cfg *cfg);
void proc_release(struct mp_profile *p, pid_t pid, bool detach);
void proc_detach(struct mp_proc *pr, const char *why, const char *fallback);
void check_overhead(struct mp_engine *e, uint64_t now);
void profiles_retire(struct mp_engine *e);

/* backtrace.c */
int define_location(struct mp_proc *pr, uint64_t addr);
unsigned int stack_select(struct mp_engine *e, struct mp_proc *pr,
			  const struct mp_alloc_event *ev, const struct mp_ustack *us,
			  uint64_t *buf, const uint64_t **out);

/* events.c */
void on_free_batch(struct mp_engine *e, const struct mp_free_batch_event *ev, size_t size);
void maps_changed(struct mp_engine *e, pid_t pid);
int proc_gone(struct mp_engine *e, pid_t pid);
void alloc_event(struct mp_engine *e, const struct mp_alloc_event *ev,
		 const struct mp_ustack *us);
int on_event(void *ctx, const void *data, size_t size);

/* preload.c */
extern const struct mp_preload_batch_ops engine_batch_ops;
void pull_idle_queues(struct mp_engine *e, uint64_t now);

/* targets.c */
int targets_start(struct mp_profile *p, char *err, size_t err_len);
void targets_scan(struct mp_profile *p);
void targets_unwatch(struct mp_profile *p);
void targets_free(struct mp_profile *p);
void on_join(struct mp_engine *e, const struct mp_proc_event *ev);
void targets_exec_unheld(struct mp_engine *e, const struct mp_proc_event *ev);
void on_cgroup_new(struct mp_engine *e);

/* profile.c */
bool pid_busy(const struct mp_engine *e, pid_t pid);
int refuse_self(pid_t pid, char *err, size_t err_len);
void notify_state(struct mp_profile *p);
int profile_stop(struct mp_profile *p);
struct mp_profile *profile_by_id(const struct mp_engine *e, uint32_t id);
void profile_proc_exited(struct mp_profile *p);
void profile_free(struct mp_profile *p);

#endif
