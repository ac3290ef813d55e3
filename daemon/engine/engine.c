// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The sampling engine. Data flow: BPF ring buffer record -> on_event() -> per profile and
 * process: the sampler completes the multiplicity, the entry tables remember the block by
 * address, the symbolizer defines the stack's location codes, and the process' memtrace writer
 * gets alloc/collect events. See engine.h for the API and docs/DESIGN.md for the reasons.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <memprof/preload.h>
#include <memprof/trace.h>

#include "daemon/probe/bpf_loader.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/entries.h"
#include "daemon/engine/preload_batch.h"
#include "daemon/engine/sampler.h"
#include "daemon/stacks/symbolize.h"
#include "daemon/stacks/unwind.h"
#include "userspace-lib/estimate.h"
#include "userspace-lib/codec/outfile.h"
#include "userspace-lib/codec/writer_async.h"

#define MP_DEFAULT_RATE		1e-4
#define MP_DEFAULT_MAX_ENTRIES	(1u << 20)
#define MP_DEFAULT_MAX_PROCS	4096
#define MP_CTX_DROPS_WIDTH	480	/* fixed width of the drops field in the context (drops
					 * and, when it happened, the overhead detach) */
#define MP_CTX_DROPS_MARK	"; drops: "
#define MP_CTX_DROPS_PENDING	"pending (trace not completed)"
/* epoll data of the engine's fds; anything else is a struct mp_ptrace * (its pidfd) */
#define MP_EP_RINGBUF		1
#define MP_EP_TIMER		2

#define MP_FPC_SLOTS	256
#define MP_TRACE_MODE	0600	/* traces in a directory of traces: their owner's */
#define MP_NAME_TRIES	1000	/* names tried: PID-COMM.ctf, PID-COMM.2.ctf, ... */
/* an entry whose alloc could not be written: its free is neither written nor unmatched */
#define MP_ENTRY_ID_UNWRITTEN	((1ull << MP_ENTRY_ID_BITS) - 1)

struct mp_ptrace;

/* A completed trace whose writer's thread is still writing (asynchronous outputs). */
struct mp_closing {
	struct memprof_writer *w;
	struct mp_ptrace *t;		/* NULL once the trace was freed */
	struct mp_closing *next;
};

/* One trace: a (profile, process) pair. */
struct mp_ptrace {
	struct mp_hnode node;		/* key: pid, in the profile's table */
	struct mp_profile *p;
	struct mp_ptrace *next;		/* the profile's list, in creation order */
	pid_t pid;
	char comm[16];
	char *path;			/* NULL when written to a passed fd */
	struct mp_outfile out;		/* a user-named path: renamed into place at commit */
	bool own_file;			/* @path is a file this trace made: undo removes it */
	int fd;
	int pidfd;			/* in the engine's epoll set until completion, or -1 */
	struct memprof_writer *w;
	bool completed;			/* writer closed */
	bool in_list;			/* counted in the engine's open traces */
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
	uint64_t win_start_ns;		/* CLOCK_MONOTONIC start of that window, 0: none yet */
	double overhead_pct;		/* estimate over the last complete window */
	char *detached_reason;		/* probes removed over budget: why (NULL: not) */
	uint64_t dwarf_stacks, window_cut, unwind_fallbacks;	/* stacks component */
	/* AUTO: BPF's stack copies are off while the frame-pointer walk does (copy_adapt()) */
	bool copy_off;
	unsigned int fp_streak, copy_backoff;
	/* fp_trustworthy()'s verdicts that hold (see there): direct-mapped, 0 = none */
	uint64_t fp_ok[MP_FPC_SLOTS];
	/* the last backtrace written (outermost first): its locations are defined */
	uint64_t prev_bt[MP_MAX_STACK];
	unsigned int prev_len;
	enum mp_proc_mode mode;		/* uprobes, or libmemprof-preload's USDT probes */
	/* preload mode: the library's counters, as last read */
	uint64_t pl_stats[MEMPROF_PRELOAD_STAT__SLOTS];
};

struct mp_profile {
	struct mp_engine *e;
	struct mp_profile *next;
	uint32_t id;
	enum mp_profile_state state;
	struct mp_profile_opts opts;	/* strings point to the copies below */
	char *out_path, *out_dir;
	struct mp_sampler sampler;
	struct mp_htab traces;		/* current trace of each pid */
	struct mp_ptrace *list, **tail;
	size_t ntraces;
	bool starting;			/* in mp_engine__start(): traces not renamed into place yet */
	unsigned int nclosing;		/* traces whose writers still finish their files */
	bool tell_closed;		/* its last closing writer finished: tell the caller */
	unsigned int nalive;		/* processes not exited */
	uint64_t stop_ns;		/* CLOCK_MONOTONIC of stop (events after it are ignored) */
	uint64_t deadline_ns;		/* duration: stop at this CLOCK_MONOTONIC time, or 0 */
	uint64_t bpf_base[MP_STAT__MAX];	/* BPF counters at start */
	uint32_t gen;
};

struct mp_engine {
	struct mp_engine_opts opts;
	char *default_dir;
	struct mp_bpf *bpf;
	struct mp_symbolizer *sym;
	struct mp_unwinder *unw;	/* DWARF unwinding of stack copies (daemon/stacks/unwind.h) */
	struct mp_engine_stack_stats sst;
	struct mp_entries *entries;
	int epfd, timerfd;
	struct mp_profile *profiles;	/* newest first */
	uint32_t next_id;
	uint32_t gen;
	size_t open_traces;		/* traces not completed, all profiles */
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
	/* mp_profile__sync_pid(): the trace of sync_pid (> 0) goes to sync_fd (service) */
	pid_t sync_pid;
	int sync_fd;
	struct mp_closing *closing;	/* writers finishing completed traces */
	bool reaping;			/* in reap_outputs() */
};

static uint64_t now_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t now_epoch_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000ull + (uint64_t)ts.tv_nsec / 1000;
}

static const char *const drop_names[MP_DROP__MAX] = {
	[MP_DROP_UNMATCHED_FREE] = "unmatched_frees",
	[MP_DROP_TABLE_FULL] = "table_full",
	[MP_DROP_STALE] = "stale_blocks",
	[MP_DROP_NO_PROFILE] = "unknown_profile",
	[MP_DROP_WRITE] = "write_errors",
	[MP_DROP_LOST_EXIT] = "lost_exits",
	[MP_DROP_PROCS_FULL] = "unfollowed_children",
	[MP_DROP_MALFORMED] = "malformed_records",
	[MP_DROP_STALLED] = "stalled_output",
};

static const char *const stat_names[MP_STAT__MAX] = {
	[MP_STAT_CALLS] = "calls",
	[MP_STAT_SAMPLED] = "sampled",
	[MP_STAT_FREES] = "frees",
	[MP_STAT_RINGBUF_DROPS] = "ringbuf_drops",
	[MP_STAT_TABLE_DROPS] = "bpf_table_drops",
	[MP_STAT_MISSED_RETURNS] = "missed_returns",
	[MP_STAT_STACK_ERRORS] = "stack_errors",
	[MP_STAT_FOREIGN_CALLS] = "foreign_calls",
	[MP_STAT_PROCS_FULL] = "bpf_procs_full",
	[MP_STAT_NESTED] = "nested_calls",
	[MP_STAT_USTACK_LOST] = "ustack_lost",
	[MP_STAT_NO_TSTATE] = "no_thread_state",
};

const char *mp_engine_drop__name(enum mp_engine_drop d)
{
	return (unsigned int)d < MP_DROP__MAX ? drop_names[d] : "?";
}

const char *mp_stat__name(enum mp_stat s)
{
	return (unsigned int)s < MP_STAT__MAX && stat_names[s] ? stat_names[s] : "?";
}

/* ---- traces ---- */

/* The process (thread group) that task @tid belongs to, or -errno. */
static pid_t proc_tgid(pid_t tid)
{
	char path[64], line[256];
	pid_t tgid = -ESRCH;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Tgid: %d", &tgid) == 1)
			break;
	fclose(f);
	return tgid;
}

static void read_comm(pid_t pid, char comm[16])
{
	char path[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	strcpy(comm, "?");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, comm, 15);
	close(fd);
	if (n <= 0) {
		strcpy(comm, "?");
		return;
	}
	comm[n] = '\0';
	comm[strcspn(comm, "\n")] = '\0';
}

/* A file name part made of the comm: no '/', nothing unprintable. */
static void sanitize(char *s)
{
	for (; *s; s++)
		if (*s == '/' || *s <= ' ' || *s == 127)
			*s = '_';
}

static void build_context(const struct mp_ptrace *t, char *buf, size_t len)
{
	const struct mp_profile *p = t->p;

	snprintf(buf, len,
		 "memprofd profile=%" PRIu32 " pid=%d comm=%s rate=%g callstack_size=%u "
		 "(deeper stacks keep their innermost frames) unwind=%s stack_copy=%d "
		 "sizes=words(ceil(bytes/8)) source=External threads=merged mode=%s%s%-*s",
		 p->id, (int)t->pid, t->comm, p->opts.rate, p->opts.callstack_size,
		 mp_unwind__name(p->opts.unwind),
		 p->opts.stack_copy_size > 0 ? p->opts.stack_copy_size : 0,
		 mp_proc_mode__name(t->mode),
		 MP_CTX_DROPS_MARK, MP_CTX_DROPS_WIDTH,
		 /* a compressed stream cannot be patched in place */
		 p->opts.zstd_level > 0 ? "not recorded in compressed traces" :
					  MP_CTX_DROPS_PENDING);
}

static void final_drops(const struct mp_ptrace *t, char *buf, size_t len)
{
	const struct mp_profile *p = t->p;
	uint64_t now[MP_STAT__MAX] = { 0 }, d[MP_STAT__MAX] = { 0 };

	if (p->e->bpf && mp_bpf__stats(p->e->bpf, now) >= 0)
		for (int i = 0; i < MP_STAT__MAX; i++)
			d[i] = now[i] - p->bpf_base[i];
	snprintf(buf, len,
		 "table_full=%" PRIu64 " unmatched_frees=%" PRIu64 " stale_blocks=%" PRIu64
		 " write_errors=%" PRIu64 " stalled_output=%" PRIu64 " truncated_stacks=%" PRIu64
		 " window_cut_stacks=%"
		 PRIu64 " exec_collects=%" PRIu64 "; all processes: ringbuf=%" PRIu64
		 " bpf_table=%" PRIu64 " missed_returns=%" PRIu64 " stack_errors=%" PRIu64
		 " ustack_lost=%" PRIu64 " bpf_procs_full=%" PRIu64,
		 t->table_full, t->unmatched, t->stale, t->write_errors, t->stalled, t->truncated,
		 t->window_cut, t->exec_collects, d[MP_STAT_RINGBUF_DROPS],
		 d[MP_STAT_TABLE_DROPS], d[MP_STAT_MISSED_RETURNS], d[MP_STAT_STACK_ERRORS],
		 d[MP_STAT_USTACK_LOST], d[MP_STAT_PROCS_FULL]);
	if (t->detached_reason && strlen(buf) + 1 < len)
		snprintf(buf + strlen(buf), len - strlen(buf), "; detached before exit: %s",
			 t->detached_reason);
}

/*
 * A write into @t's trace failed with @err (-errno): counted, the first error kept with its
 * time. -EAGAIN is an output that does not keep up (its queue is full): the event is not in
 * the trace, which stays whole, and counts as stalled.
 */
static void trace_write_failed(struct mp_ptrace *t, int err)
{
	if (err == -EAGAIN) {
		if (!t->stalled++)
			t->stalled_us = now_epoch_us();
		t->p->e->drops[MP_DROP_STALLED]++;
		return;
	}
	if (!t->write_err) {
		uint64_t since = 0;

		t->write_err = err < 0 ? -err : EIO;
		/* the writer's thread saw it first, when it is the file's own error */
		if (!t->w || mp_writer__output_error(t->w, &since, NULL) != t->write_err || !since)
			since = now_epoch_us();
		t->write_err_us = since;
	}
	t->write_errors++;
	t->p->e->drops[MP_DROP_WRITE]++;
}

/*
 * The trace-info packet is written first, so the final drop counts cannot be known then: the
 * context ends in a fixed-width field that completion overwrites in place with the counts
 * (same length, so the packet stays valid). Plain traces on regular files only: the writer
 * does it after the last packet (on its thread for an asynchronous output).
 */
static void patch_context(struct mp_ptrace *t)
{
	char new[MP_CTX_DROPS_WIDTH + 1];
	int r;

	if (!t->w || t->p->opts.zstd_level > 0)
		return;
	final_drops(t, new, sizeof(new));
	snprintf(new + strlen(new), sizeof(new) - strlen(new), "%-*s",
		 (int)(MP_CTX_DROPS_WIDTH - strlen(new)), "");
	r = mp_writer__patch_context_tail(t->w, new, MP_CTX_DROPS_WIDTH);
	if (r < 0 && r != -ENOTSUP)
		trace_write_failed(t, r);
}

/* What @fd is, for a message: its path as /proc shows it. */
static const char *fd_name(int fd, char *buf, size_t len)
{
	char link[64];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = fd >= 0 ? readlink(link, buf, len - 1) : -1;
	if (n <= 0)
		return "the passed file descriptor";
	buf[n] = '\0';
	return buf;
}

/* Undo @t's file: what trace_open_file() made goes (never a device, or a file it replaces). */
static void trace_unlink(struct mp_ptrace *t, const char *path)
{
	if (t->out.tmp)
		unlink(t->out.tmp);
	else if (t->own_file)
		unlink(path);
	t->own_file = false;
	mp_outfile__done(&t->out);
}

/* @t's file takes the name the user gave it (a file there until now is replaced). */
static int trace_commit(struct mp_ptrace *t, char *err, size_t err_len)
{
	int r = mp_outfile__commit(&t->out);

	if (r < 0) {
		t->own_file = false;	/* the new file is gone, the old one left */
		snprintf(err, err_len, "Failed to rename the trace into '%s': %s", t->path,
			 strerror(-r));
	}
	return r;
}

/*
 * The trace file of @t at @path. In a directory of traces (the service's own, or record's
 * default) it is a new file (O_EXCL: -EEXIST when the name is taken), readable by its owner
 * only; a path the user named (-o) goes through mp_outfile: a file already there is replaced
 * only at trace_commit(), a device or FIFO is written as it is and never removed.
 */
static int trace_open_file(struct mp_ptrace *t, const char *path, bool user_named)
{
	struct mp_profile *p = t->p;
	int fd, err;

	if (user_named) {
		err = mp_outfile__open(&t->out, path, true, 0644);
		if (err)
			return err;
		fd = t->out.fd;
		t->own_file = t->out.tmp || t->out.created;
	} else {
		fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, MP_TRACE_MODE);
		if (fd < 0)
			return -errno;
		t->own_file = true;
	}
	if (geteuid() == 0 && (p->opts.owner_uid || p->opts.owner_gid) &&
	    fchown(fd, p->opts.owner_uid, p->opts.owner_gid)) {
		err = -errno;
		close(fd);
		if (user_named)
			t->out.fd = -1;
		trace_unlink(t, path);
		return err;
	}
	return fd;
}

/*
 * Watch the process through a pidfd in the engine's epoll set: if its exit event is lost
 * (ring buffer full), the pidfd still says it is gone and the trace gets completed.
 */
static void watch_exit(struct mp_engine *e, struct mp_ptrace *t)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = t };

	t->pidfd = (int)syscall(SYS_pidfd_open, t->pid, 0);
	if (t->pidfd < 0)
		return;	/* gone already: its exit event is on its way */
	if (epoll_ctl(e->epfd, EPOLL_CTL_ADD, t->pidfd, &ev)) {
		close(t->pidfd);
		t->pidfd = -1;
	}
}

static void unwatch_exit(struct mp_engine *e, struct mp_ptrace *t)
{
	if (t->pidfd < 0)
		return;
	/* explicitly: a forked copy of the fd would keep the registration alive */
	epoll_ctl(e->epfd, EPOLL_CTL_DEL, t->pidfd, NULL);
	close(t->pidfd);
	t->pidfd = -1;
}

const char *mp_proc_mode__name(enum mp_proc_mode m)
{
	return m == MP_PROC_MODE_PRELOAD ? "preload" : "uprobe";
}

/* How the loader profiles the trace's process; a preload one's library counters. */
static void trace_update_mode(struct mp_ptrace *t)
{
	struct mp_bpf *b = t->p->e->bpf;
	int mode = b ? mp_bpf__mode(b, t->pid) : -ENOENT;

	if (mode == MP_BPF_MODE_PRELOAD) {
		t->mode = MP_PROC_MODE_PRELOAD;
		mp_bpf__preload_stats(b, t->pid, t->pl_stats, MEMPROF_PRELOAD_STAT__SLOTS);
	} else if (mode == MP_BPF_MODE_UPROBE) {
		t->mode = MP_PROC_MODE_UPROBE;
	}
}

#define MP_PREWARM_MAX	64

struct prewarm_ctx {
	uint64_t addr[MP_PREWARM_MAX];
	unsigned int n;
};

static int prewarm_collect(void *ctx, const struct mp_mapping_info *m)
{
	struct prewarm_ctx *c = ctx;

	if (m->fd >= 0 && c->n < MP_PREWARM_MAX)
		c->addr[c->n++] = m->start;
	return 0;
}

/*
 * Load the symbols and DWARF of @pid's objects now (one lookup in each, at most 64), and with
 * AUTO unwinding judge whether they keep frame pointers: the first lookup in an object reads
 * and decompresses its debug information, tens of milliseconds for libc's, and a judgement
 * costs a few. Paid here, before `memprofctl record` lets the command run, rather than while
 * the first sampled events (and their stack copies) pile up in the ring buffer. Preload-mode
 * processes too, though their samples come walked: skipped for them, record --preload reached
 * main() ~60 ms sooner, but at rate 0.01 a C++ program's first samples then overflowed the
 * ring while libstdc++'s debug information was read (tests/bpf/preload-batch.sh).
 */
static void prewarm(struct mp_profile *p, pid_t pid)
{
	struct prewarm_ctx c = { .n = 0 };
	struct mp_engine *e = p->e;
	struct mp_frame fr;

	mp_symbolizer__mappings(e->sym, pid, prewarm_collect, &c, NULL);
	for (unsigned int i = 0; i < c.n; i++) {
		mp_symbolizer__resolve(e->sym, pid, c.addr[i], 0, &fr);
		if (p->opts.unwind == MP_UNWIND_AUTO && p->opts.stack_copy_size > 0 && e->unw)
			mp_unwinder__frame_pointers(e->unw, pid, c.addr[i]);
	}
}

/*
 * Complete @w's file without waiting for it: its thread finishes the file; a writer not done
 * yet is kept in the engine's closing list (for @t, or none) and closed by reap_outputs().
 * Returns the writer's error, or 0.
 */
static int writer_release(struct mp_engine *e, struct memprof_writer *w, struct mp_ptrace *t)
{
	struct mp_closing *c;
	int r;

	if (!w)
		return 0;
	r = mp_writer__finish(w);
	if (!mp_writer__done(w) && (c = calloc(1, sizeof(*c)))) {
		c->w = w;
		c->t = t;
		c->next = e->closing;
		e->closing = c;
		if (t) {
			t->closing = c;
			t->p->nclosing++;
		}
		return r;
	}
	/* done (or out of memory: then waiting is all there is) */
	return memprof_writer__close(w) ?: r;
}

/* Close the writers that finished their files; a profile whose last one did is told. */
static void reap_outputs(struct mp_engine *e)
{
	bool told = false;

	if (e->reaping)	/* from a state callback of the loop below */
		return;
	e->reaping = true;
	for (struct mp_closing **cp = &e->closing; *cp;) {
		struct mp_closing *c = *cp;
		struct mp_ptrace *t = c->t;
		uint64_t since;
		int r;

		if (!mp_writer__done(c->w)) {
			cp = &c->next;
			continue;
		}
		*cp = c->next;
		mp_writer__output_error(c->w, &since, NULL);
		r = memprof_writer__close(c->w);
		if (t && r < 0) {
			if (!t->write_err) {	/* the time the file failed, not now */
				t->write_err = -r;
				t->write_err_us = since ? since : now_epoch_us();
			}
			trace_write_failed(t, r);
		}
		if (t) {
			t->closing = NULL;
			/* only a discarded profile waits for its files (its reply, its manifest's
			 * "complete"); telling a running one at each exit rewrote its manifest per
			 * exited process, O(processes) each time */
			if (!--t->p->nclosing && t->p->state == MP_PROFILE_DISCARDED)
				t->p->tell_closed = true;
		}
		free(c);
	}
	/* its files are complete now: told once the list is consistent */
	for (struct mp_profile *p = e->profiles; p; p = p->next)
		told |= p->tell_closed;
	for (struct mp_profile *p = told ? e->profiles : NULL; p; p = p->next) {
		if (p->tell_closed && e->state_fn)
			e->state_fn(e->state_ctx, p, p->state);
		p->tell_closed = false;
	}
	e->reaping = false;
}

/* The trace-info of @t: the process' image now. @exe and @ctx are the caller's buffers. */
static void trace_info(struct mp_ptrace *t, struct memprof_trace_info *info, char *exe,
		       size_t exe_len, char *ctx, size_t ctx_len)
{
	struct mp_profile *p = t->p;
	char path[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/exe", (int)t->pid);
	n = readlink(path, exe, exe_len - 1);
	if (n > 0)
		exe[n] = '\0';
	else
		snprintf(exe, exe_len, "%s", t->comm);
	build_context(t, ctx, ctx_len);
	*info = (struct memprof_trace_info){ 0 };
	info->sample_rate = p->opts.rate;
	info->word_size = 64;
	info->executable_name = exe;
	info->host_name = p->e->hostname;
	info->runtime_params = "memprofd " MP_ENGINE_VERSION;
	info->pid = (uint64_t)t->pid;
	info->start_time_us = now_epoch_us();
	info->context = ctx;
}

/*
 * A writer on @t's file, its trace-info packet written (queued, for an asynchronous output).
 * The writer owns the fd from now on, also on failure (t->fd is -1 afterwards). NULL + errno.
 */
static struct memprof_writer *trace_writer_new(struct mp_ptrace *t)
{
	struct mp_profile *p = t->p;
	struct memprof_trace_info info;
	struct memprof_writer_opts wo = { .sz = sizeof(wo) };
	char exe[4096], ctx[1024];
	int fd = t->fd;

	trace_info(t, &info, exe, sizeof(exe), ctx, sizeof(ctx));
	wo.version = p->opts.format_version;
	wo.zstd_level = p->opts.zstd_level;
	wo.real_verifier = 1;
	t->fd = -1;
	return mp_writer__new_async(fd, p->e->opts.output_queue_bytes, &info, &wo);
}

/* Create the trace of @pid in @p and write its trace-info packet. */
static struct mp_ptrace *trace_new(struct mp_profile *p, pid_t pid, char *err, size_t err_len)
{
	struct mp_engine *e = p->e;
	struct mp_ptrace *t = calloc(1, sizeof(*t));
	const char *ext = p->opts.zstd_level > 0 ? ".ctf.zst" : ".ctf";
	bool first = p->ntraces == 0, user_named = false;
	char path[4096], comm[16], fdname[4096];
	struct mp_mapping_info mi;
	int r;

	if (!t) {
		snprintf(err, err_len, "Out of memory");
		return NULL;
	}
	t->p = p;
	t->pid = pid;
	t->fd = -1;
	t->pidfd = -1;
	t->node.key = (uint64_t)pid;
	read_comm(pid, t->comm);
	trace_update_mode(t);
	memcpy(comm, t->comm, sizeof(comm));
	sanitize(comm);

	if ((first && p->opts.out_fd >= 0) || (e->sync_pid == pid && e->sync_fd >= 0)) {
		int ofd = first && p->opts.out_fd >= 0 ? p->opts.out_fd : e->sync_fd;

		t->fd = fcntl(ofd, F_DUPFD_CLOEXEC, 3);
		if (t->fd < 0) {
			r = -errno;
			snprintf(err, err_len, "Failed to duplicate the output fd %d: %s", ofd,
				 strerror(-r));
			goto fail;
		}
		snprintf(path, sizeof(path), "%s", fd_name(t->fd, fdname, sizeof(fdname)));
	} else {
		/* a pid traced before in this profile (pid reuse) never takes an earlier name */
		unsigned int k = 1;

		for (struct mp_ptrace *o = p->list; o; o = o->next)
			k += o->pid == pid;
		if (first && p->out_path) {
			snprintf(path, sizeof(path), "%s", p->out_path);
			user_named = true;
		} else if (!p->out_dir && p->out_path) {
			snprintf(path, sizeof(path), k > 1 ? "%s.%d.%u" : "%s.%d", p->out_path,
				 (int)pid, k);
			user_named = true;
		}
		if (user_named) {
			t->fd = trace_open_file(t, path, true);
		} else {
			/* the first free one of PID-COMM.ctf, PID-COMM.2.ctf, ... (O_EXCL) */
			const char *dir = p->out_dir ? p->out_dir : e->default_dir;

			t->fd = -EEXIST;
			for (unsigned int i = 0; t->fd == -EEXIST && i < MP_NAME_TRIES; i++, k++) {
				if (k > 1)
					snprintf(path, sizeof(path), "%s/%d-%s.%u%s", dir, (int)pid,
						 comm, k, ext);
				else
					snprintf(path, sizeof(path), "%s/%d-%s%s", dir, (int)pid,
						 comm, ext);
				t->fd = trace_open_file(t, path, false);
			}
		}
		if (t->fd < 0) {
			snprintf(err, err_len, "Failed to create trace '%s': %s", path,
				 strerror(-t->fd));
			t->fd = -1;
			goto fail;
		}
		t->path = strdup(path);
		if (!t->path) {
			snprintf(err, err_len, "Out of memory");
			close(t->fd);
			t->fd = -1;
			trace_unlink(t, path);
			goto fail;
		}
	}

	t->w = trace_writer_new(t);
	if (!t->w) {
		r = -errno;
		snprintf(err, err_len, "Failed to start the trace of process %d in '%s': %s",
			 (int)pid, path, strerror(-r));
		goto fail;
	}
	/* mp_engine__start() renames its traces into place once every process is attached */
	if (!p->starting && trace_commit(t, err, err_len) < 0)
		goto fail;
	/* Snapshot the process' mappings now, while it surely lives: its events may be
	 * processed after it exited. */
	if (e->sym) {
		mp_symbolizer__mapping(e->sym, pid, 1, &mi);
		prewarm(p, pid);
	}

	/* A pid that was traced before in this profile (pid reuse): the new trace wins. */
	{
		struct mp_ptrace *old = (struct mp_ptrace *)mp_htab__find(&p->traces,
									 (uint64_t)pid);

		if (old) {
			mp_htab__remove(&p->traces, &old->node);
			old->in_table = false;
		}
	}
	if (mp_htab__insert(&p->traces, &t->node)) {
		snprintf(err, err_len, "Out of memory");
		goto fail;
	}
	t->in_table = true;
	watch_exit(e, t);
	e->open_traces++;
	t->in_list = true;
	*p->tail = t;
	p->tail = &t->next;
	p->ntraces++;
	p->nalive++;
	return t;
fail:
	writer_release(e, t->w, NULL);
	if (t->fd >= 0)
		close(t->fd);
	if (t->path)
		trace_unlink(t, t->path);
	free(t->path);
	free(t);
	return NULL;
}

static struct mp_ptrace *trace_find(const struct mp_profile *p, pid_t pid)
{
	return (struct mp_ptrace *)mp_htab__find(&p->traces, (uint64_t)pid);
}

/* Close the writer: the trace is complete. Live entries stay uncollected (live at exit). */
static void trace_complete(struct mp_ptrace *t)
{
	struct mp_engine *e = t->p->e;
	int r;

	if (t->completed)
		return;
	t->completed = true;
	if (t->in_list)
		e->open_traces--;
	unwatch_exit(e, t);
	mp_entries__drain(e->entries, t->pid, t, NULL, NULL);
	patch_context(t);
	r = writer_release(e, t->w, t);
	if (r < 0)
		trace_write_failed(t, r);
	t->w = NULL;
	if (t->fd >= 0)
		close(t->fd);
	t->fd = -1;
}

static void trace_free(struct mp_ptrace *t)
{
	trace_complete(t);
	if (t->closing) {	/* its writer goes on alone */
		t->closing->t = NULL;
		/* the profile's files count as written without it: told at the next reap */
		if (!--t->p->nclosing && t->p->state == MP_PROFILE_DISCARDED)
			t->p->tell_closed = true;
	}
	free(t->detached_reason);
	mp_outfile__done(&t->out);
	free(t->path);
	free(t);
}

/* ---- BPF per-process configuration ---- */

static void proc_cfg(const struct mp_profile *p, struct mp_proc_cfg *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->profile = p->id;
	cfg->gen = p->gen;
	/* one frame more than kept, so that a cut stack is known to be cut */
	cfg->max_frames = p->opts.callstack_size < MP_MAX_STACK ? p->opts.callstack_size + 1 :
								  MP_MAX_STACK;
	/* normalized by mp_engine__start: > 0 only when DWARF unwinding may be used */
	cfg->ustack_size = p->opts.stack_copy_size > 0 ? (uint32_t)p->opts.stack_copy_size : 0;
	if (p->opts.rate >= 1.0)
		cfg->flags |= MP_PROC_RATE_ONE;
	else
		cfg->gap_k = mp_gap_k(p->opts.rate);
	if (p->state == MP_PROFILE_SAMPLING)
		cfg->flags |= MP_PROC_SAMPLING;
	if (!p->opts.no_follow_forks)
		cfg->flags |= MP_PROC_FOLLOW_FORKS;
	if (!p->opts.owner_uid)
		cfg->flags |= MP_PROC_PRIVILEGED;	/* root's: exec_check() lets it through */
}

/*
 * The process left this profile: BPF forgets it (unless another profile took it). With
 * @detach, its probes go too. Destroying a uprobe perf link waits for an RCU tasks-trace grace
 * period (~250 ms each on 6.18, ~20 links per process), so an exited process keeps its (inert)
 * probes until its profile is discarded rather than stall the event loop at every exit.
 */
static void proc_release(struct mp_profile *p, pid_t pid, bool detach)
{
	struct mp_proc_cfg cfg;

	if (!p->e->bpf)
		return;
	if (mp_bpf__proc_get(p->e->bpf, pid, &cfg) == 0) {
		if (cfg.profile != p->id)
			return;
		mp_bpf__proc_del(p->e->bpf, pid);
	}
	if (detach)
		mp_bpf__detach(p->e->bpf, pid);
}

/* ---- profile state ---- */

static void notify_state(struct mp_profile *p)
{
	if (p->e->state_fn)
		p->e->state_fn(p->e->state_ctx, p, p->state);
}

/*
 * Alloc and free records wake the ring buffer's reader only each time another 256 KiB are
 * pending (bpf/memprof.bpf.c, data_wake_flags(): a wakeup costs the traced thread more than
 * the sample); fork/exec/exit records wake it at once. While any process is profiled, the
 * timer also fires every MP_FLUSH_NS to deliver the rest, which bounds how late a record is
 * read and how stale the counters are. Whoever needs everything up to now (stop, discard,
 * status, sync_pid) calls mp_engine__process() first.
 */
#define MP_FLUSH_NS	50000000ull

static bool traces_live(const struct mp_engine *e)
{
	for (struct mp_profile *p = e->profiles; p; p = p->next)
		for (struct mp_ptrace *t = p->state != MP_PROFILE_DISCARDED ? p->list : NULL; t;
		     t = t->next)
			if (!t->completed)
				return true;
	return false;
}

static void arm_timer(struct mp_engine *e)
{
	struct itimerspec its = { 0 };
	uint64_t next = 0;

	if (traces_live(e) || e->closing)	/* the flush; the writers finishing files */
		next = now_mono_ns() + MP_FLUSH_NS;

	for (struct mp_profile *p = e->profiles; p; p = p->next)
		if (p->state == MP_PROFILE_SAMPLING && p->deadline_ns &&
		    (!next || p->deadline_ns < next))
			next = p->deadline_ns;
	if (e->ovh_next_ns && (!next || e->ovh_next_ns < next))
		next = e->ovh_next_ns;
	its.it_value.tv_sec = (time_t)(next / 1000000000ull);
	its.it_value.tv_nsec = (long)(next % 1000000000ull);
	if (timerfd_settime(e->timerfd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
		e->timer_next_ns = next;
}

static int profile_stop(struct mp_profile *p)
{
	struct mp_proc_cfg cfg;

	if (p->state != MP_PROFILE_SAMPLING)
		return -EINVAL;
	p->state = MP_PROFILE_STOPPED;
	p->stop_ns = now_mono_ns();
	p->gen = ++p->e->gen;
	proc_cfg(p, &cfg);
	for (struct mp_ptrace *t = p->list; t; t = t->next) {
		struct mp_proc_cfg cur;

		if (t->exited || !t->in_table || !p->e->bpf || t->detached_reason)
			continue;
		/* Frees of sampled blocks keep coming; only sampling stops. */
		if (mp_bpf__proc_get(p->e->bpf, t->pid, &cur) == 0 && cur.profile == p->id)
			mp_bpf__proc_set(p->e->bpf, t->pid, &cfg);
		trace_update_mode(t);	/* a preload process' counters, while it lives */
	}
	arm_timer(p->e);
	return 0;
}

int mp_profile__stop(struct mp_profile *p)
{
	return profile_stop(p);
}

int mp_profile__discard(struct mp_profile *p)
{
	if (p->state != MP_PROFILE_STOPPED)
		return -EINVAL;
	p->state = MP_PROFILE_DISCARDED;
	for (struct mp_ptrace *t = p->list; t; t = t->next) {
		proc_release(p, t->pid, true);
		trace_complete(t);
	}
	return 0;
}

/* ---- events ---- */

static struct mp_profile *profile_by_id(const struct mp_engine *e, uint32_t id)
{
	for (struct mp_profile *p = e->profiles; p; p = p->next)
		if (p->id == id)
			return p;
	return NULL;
}

/* Define the location code @addr (a return address) in @t's trace unless it is. */
static int define_location(struct mp_ptrace *t, uint64_t addr)
{
	struct mp_engine *e = t->p->e;
	struct memprof_location fallback;
	struct mp_frame fr;
	char name[32];
	int r = -ENOENT;

	if (memprof_writer__has_location(t->w, addr))
		return 0;
	if (e->sym)
		r = mp_symbolizer__resolve(e->sym, t->pid, addr, 1, &fr);
	if (r == 0 && fr.nlocs > 0) {
		r = memprof_writer__location(t->w, addr, fr.locs, fr.nlocs > 255 ? 255 : fr.nlocs);
		if (r == 0)
			return 0;
	}
	snprintf(name, sizeof(name), "0x%" PRIx64, addr);
	fallback = (struct memprof_location){ .filename = "??", .defname = name };
	return memprof_writer__location(t->w, addr, &fallback, 1);
}

static void collect(struct mp_ptrace *t, uint64_t time_us, struct mp_entry *en)
{
	int r;

	if (en->id == MP_ENTRY_ID_UNWRITTEN)	/* its alloc was lost (counted then) */
		return;
	if (!t->completed && (r = memprof_writer__collect(t->w, time_us, en->id)) < 0)
		trace_write_failed(t, r);
	t->frees++;
	t->live_nsamples -= en->nsamples;
	mp_est_sum__add(&t->live_est, -(double)en->nsamples, mp_est_weight(en->len));
	if (!t->live_nsamples)	/* exactly nothing live, not a rounding residue */
		t->live_est = (struct mp_est_sum){ 0, 0 };
}

/* @en's block was freed at @time_us: collect it in its owner's trace and forget it. */
static void collect_remove(struct mp_engine *e, uint64_t time_us, struct mp_entry *en)
{
	collect(mp_entries__owner(e->entries, en), time_us, en);
	mp_entries__remove(e->entries, en);
}

/*
 * AUTO's rule (enum mp_unwind): the frame-pointer walk @fp[0..n) is trustworthy when every
 * frame it read its caller from (all but the outermost) is in code that keeps frame pointers,
 * and the outermost is in a mapped object. A walk through code without them reads whatever
 * rbp holds there: it ends early or goes on with garbage.
 */
/*
 * Each answer costs a mapping and an object lookup, for every frame of every event: @t remembers
 * the positive ones (a return address in code that keeps frame pointers, an outermost frame in a
 * mapped object), which hold until the process execs; negative ones (code without them, an
 * address not mapped yet) are asked again.
 */
static bool fp_trustworthy(struct mp_engine *e, struct mp_ptrace *t, const uint64_t *fp,
			   unsigned int n)
{
	struct mp_mapping_info mi;

	if (!n)
		return false;
	for (unsigned int i = 0; i < n; i++) {
		bool inner = i + 1 < n || n == 1;
		uint64_t key = fp[i] << 1 | inner;	/* fp[i] < 2^62 */
		unsigned int slot = (unsigned int)((key * 0x9e3779b97f4a7c15ull) >> 56);

		if (!fp[i] || fp[i] >= (1ull << 62))
			return false;
		if (t->fp_ok[slot] == key)
			continue;
		if (inner) {
			if (mp_unwinder__frame_pointers(e->unw, t->pid, fp[i]) <= 0)
				return false;
		} else if (mp_symbolizer__mapping(e->sym, t->pid, fp[i], &mi)) {
			return false;
		}
		t->fp_ok[slot] = key;
	}
	return true;
}

/*
 * AUTO copies the stack (16 KiB by default) of every sampled block in case the frame-pointer
 * walk is not trustworthy, and that copy is half of what a sample costs the traced thread once
 * wakeups are batched (bench: 4.7 against 2.4 us per sampled block on allocbench). A process
 * whose walks are all trustworthy does not need it: after MP_COPY_OFF_AFTER << copy_backoff
 * trustworthy walks in a row, BPF stops copying for it (its mp_proc_cfg.ustack_size = 0); the
 * first walk that is not (which keeps its frame-pointer stack: an unwind fallback) turns the
 * copies back on and doubles the streak needed next time, so a process that needs DWARF now and
 * then loses it on a handful of samples in all.
 */
#define MP_COPY_OFF_AFTER	64u
#define MP_COPY_BACKOFF_MAX	10

static void copy_adapt(struct mp_engine *e, struct mp_ptrace *t, bool fp_ok)
{
	struct mp_proc_cfg cfg;

	if (fp_ok) {
		if (t->copy_off || ++t->fp_streak < (MP_COPY_OFF_AFTER << t->copy_backoff))
			return;
	} else {
		t->fp_streak = 0;
		if (!t->copy_off)
			return;
		if (t->copy_backoff < MP_COPY_BACKOFF_MAX)
			t->copy_backoff++;
	}
	if (!e->bpf || t->exited || !t->in_table || t->detached_reason ||
	    mp_bpf__proc_get(e->bpf, t->pid, &cfg) || cfg.profile != t->p->id)
		return;
	cfg.ustack_size = fp_ok ? 0 : (uint32_t)t->p->opts.stack_copy_size;
	if (mp_bpf__proc_set(e->bpf, t->pid, &cfg) == 0)
		t->copy_off = fp_ok;
}

/*
 * The backtrace of @ev, innermost first, in *@out: the frame-pointer walk BPF made, or the DWARF
 * unwinding of its stack copy @us (NULL if none) into @buf, as the profile's unwind mode says.
 * Returns its length, at most callstack_size, and counts cut stacks.
 */
static unsigned int stack_select(struct mp_engine *e, struct mp_ptrace *t,
				 const struct mp_alloc_event *ev, const struct mp_ustack *us,
				 uint64_t *buf, const uint64_t **out)
{
	const struct mp_profile *p = t->p;
	unsigned int max = p->opts.callstack_size, n = 0;
	unsigned int nfp = ev->nframes < MP_MAX_STACK ? ev->nframes : MP_MAX_STACK;
	bool dwarf = false;
	uint64_t t0;
	int r;

	*out = (const uint64_t *)ev->stack;
	if (us)
		e->sst.with_copy++;
	if (p->opts.unwind != MP_UNWIND_FP && p->opts.stack_copy_size > 0 && e->unw) {
		if (!us && p->opts.unwind == MP_UNWIND_AUTO && t->copy_off) {
			bool ok = fp_trustworthy(e, t, *out, nfp);

			if (!ok)
				t->unwind_fallbacks++;	/* no copy asked for: see copy_adapt() */
			copy_adapt(e, t, ok);
		} else if (!us) {
			t->unwind_fallbacks++;	/* the copy was lost (ring space) */
		} else if (p->opts.unwind == MP_UNWIND_DWARF) {
			dwarf = true;
		} else {
			dwarf = !fp_trustworthy(e, t, *out, nfp);
			copy_adapt(e, t, !dwarf);
		}
		if (dwarf) {
			struct mp_regs regs = { .ip = us->ip, .sp = us->sp, .bp = us->bp };
			const uint8_t *stack = (const uint8_t *)(us + 1) + us->offset;
			struct mp_unwinder_stats ust;

			t0 = now_mono_ns();
			/* one frame more than kept, to know whether it was cut */
			r = mp_unwinder__unwind(e->unw, t->pid, &regs, stack, us->size, buf,
						max < MP_MAX_STACK ? max + 1 : max, &n);
			if (r == 0 && n > 0) {
				*out = buf;
				nfp = n;
				t->dwarf_stacks++;
				e->sst.dwarf_stacks++;
				mp_unwinder__stats(e->unw, &ust);
				if (ust.last_out_of_window) {
					t->window_cut++;
					e->sst.window_cut++;
				}
			} else {
				t->unwind_fallbacks++;
				dwarf = false;
			}
			e->sst.unwind_ns += now_mono_ns() - t0;
		}
	}
	if (!dwarf)
		e->sst.fp_stacks++;
	/* more than kept, or BPF's limit reached (then it cannot tell) */
	if (nfp > max || nfp == MP_MAX_STACK) {
		t->truncated++;
		nfp = nfp > max ? max : nfp;
	}
	return nfp;
}

static void on_alloc(struct mp_engine *e, const struct mp_alloc_event *ev,
		     const struct mp_ustack *us)
{
	struct mp_profile *p = profile_by_id(e, ev->h.profile);
	uint64_t bt[MP_MAX_STACK], dw[MP_MAX_STACK], time_us, n, id, len = (ev->size + 7) / 8;
	const uint64_t *frames;
	unsigned int nfr, k = 0;
	struct mp_ptrace *t;
	struct mp_entry *en;
	int r;

	if (!p || p->state == MP_PROFILE_DISCARDED) {
		e->drops[MP_DROP_NO_PROFILE]++;
		return;
	}
	/* Stopped: what was sampled before the stop still counts, nothing after. */
	if (p->state == MP_PROFILE_STOPPED && ev->h.time_ns > p->stop_ns)
		return;
	t = trace_find(p, (pid_t)ev->h.pid);
	if (!t || t->completed) {
		/* A process detached over its budget: its probes' last hits, in flight when BPF
		 * was told to ignore it, are not a loss (its trace says it was detached). */
		if (!t || !t->detached_reason)
			e->drops[MP_DROP_NO_PROFILE]++;
		return;
	}
	time_us = mp_ktime_to_epoch_us(ev->h.time_ns);

	en = mp_entries__find(e->entries, t->pid, ev->addr);
	/* A preload id is never handed out twice: this sample was taken already from the
	 * process' queue (pull_idle_queues), and is now reported by the library itself. */
	if (en && (ev->kind & MP_KIND_F_PRELOAD))
		return;
	if (en) {
		/* The allocator handed out a tracked address again: its free was lost. */
		struct mp_ptrace *owner = mp_entries__owner(e->entries, en);

		collect(owner, time_us, en);
		owner->stale++;
		e->drops[MP_DROP_STALE]++;
		mp_entries__remove(e->entries, en);
	}
	/* libmemprof-preload drew the multiplicity in-process already */
	if (ev->kind & MP_KIND_F_PRELOAD)
		n = ev->remaining;
	else
		n = mp_sampler__nsamples(&p->sampler, ev->remaining);

	nfr = stack_select(e, t, ev, us, dw, &frames);
	/* BPF and the unwinder give innermost first; memtrace wants outermost first. The
	 * frames the previous backtrace had at the same place are defined already. */
	for (unsigned int i = nfr; i-- > 0;) {
		uint64_t a = frames[i];

		if (!a || a >= (1ull << 62))
			continue;
		if ((k >= t->prev_len || t->prev_bt[k] != a) && define_location(t, a) < 0)
			continue;
		bt[k++] = a;
	}
	memcpy(t->prev_bt, bt, k * sizeof(bt[0]));
	t->prev_len = k;

	en = mp_entries__insert(e->entries, t->pid, (pid_t)ev->h.tid, ev->addr);
	if (!en) {
		/* Untracked, its free could not be matched: leave it out of the trace rather
		 * than show it live forever. */
		t->table_full++;
		e->drops[MP_DROP_TABLE_FULL]++;
		return;
	}
	r = memprof_writer__alloc(t->w, time_us, len, n, MEMPROF_SOURCE_EXTERNAL, bt, k, &id);
	if (r < 0) {
		trace_write_failed(t, r);
		/* not in the trace: its free is neither written nor an unmatched free */
		if (mp_entries__set(e->entries, en, t, MP_ENTRY_ID_UNWRITTEN, n))
			mp_entries__remove(e->entries, en);
		return;
	}
	if (mp_entries__set(e->entries, en, t, id, n)) {
		/* Cannot be tracked (a multiplicity or id beyond the entry's fields, too many
		 * traces of one pid): collected at once rather than shown live forever. */
		r = memprof_writer__collect(t->w, time_us, id);
		if (r < 0)
			trace_write_failed(t, r);
		mp_entries__remove(e->entries, en);
		t->table_full++;
		e->drops[MP_DROP_TABLE_FULL]++;
		return;
	}
	t->samples++;
	t->nsamples += n;
	t->live_nsamples += n;
	/* live blocks weigh in at their length as the entry keeps it (clamped), so that their
	 * frees take off exactly what they added */
	en->len = len < MP_ENTRY_LEN_MAX ? len : MP_ENTRY_LEN_MAX;
	mp_est_sum__add(&t->est, (double)n, mp_est_weight(len));
	mp_est_sum__add(&t->live_est, (double)n, mp_est_weight(en->len));
	/* the library's counters, read now and then while the process lives */
	if (t->mode == MP_PROC_MODE_PRELOAD && !(t->samples & 255))
		trace_update_mode(t);
}

static void on_free(struct mp_engine *e, const struct mp_free_event *ev)
{
	struct mp_entry *en = mp_entries__find(e->entries, (pid_t)ev->h.pid, ev->addr);
	struct mp_ptrace *t;

	if (!en) {
		struct mp_profile *p = profile_by_id(e, ev->h.profile);

		/* libmemprof-preload reports frees of blocks sampled under an older generation
		 * or inherited across fork: not ours, not a loss */
		if (ev->kind & MP_KIND_F_PRELOAD)
			return;
		t = p ? trace_find(p, (pid_t)ev->h.pid) : NULL;
		if (t && t->completed && t->detached_reason)
			return;	/* detached: its entries went with its trace (on_alloc) */
		e->drops[MP_DROP_UNMATCHED_FREE]++;
		if (t)
			t->unmatched++;
		return;
	}
	collect_remove(e, mp_ktime_to_epoch_us(ev->h.time_ns), en);
}

/*
 * libmemprof-preload frees, by block id (the key its alloc records were entered under). Ids
 * the engine does not track (sampled under an older generation, inherited across fork) are
 * not ours, not a loss.
 */
static void on_free_batch(struct mp_engine *e, const struct mp_free_batch_event *ev, size_t size)
{
	uint32_t n = ev->count;
	uint64_t time_us;

	if (n > MP_FREE_BATCH_MAX || size < offsetof(struct mp_free_batch_event, ids) + 8 * n)
		return;
	time_us = mp_ktime_to_epoch_us(ev->h.time_ns);
	for (uint32_t i = 0; i < n; i++) {
		struct mp_entry *en = mp_entries__find(e->entries, (pid_t)ev->h.pid, ev->ids[i]);

		if (en)
			collect_remove(e, time_us, en);
	}
}

static void on_fork(struct mp_engine *e, const struct mp_proc_event *ev)
{
	struct mp_profile *p = profile_by_id(e, ev->h.profile);
	pid_t child = (pid_t)ev->other_pid;
	struct mp_proc_cfg cfg;
	struct mp_ptrace *t;
	char err[256];

	if (!p || p->state == MP_PROFILE_DISCARDED || p->opts.no_follow_forks || !child)
		return;
	t = trace_find(p, child);
	if (t && !t->completed)
		return;
	t = NULL;
	if (e->open_traces < e->max_procs)
		t = trace_new(p, child, err, sizeof(err));
	if (!t) {
		/* Not followed: BPF forgets it rather than sample into nothing. */
		e->drops[MP_DROP_PROCS_FULL]++;
		if (e->bpf)
			mp_bpf__proc_del(e->bpf, child);
		return;
	}
	proc_cfg(p, &cfg);
	if (e->bpf) {
		mp_bpf__proc_set(e->bpf, child, &cfg);
		/* Probes are per process: the child needs its own. */
		mp_bpf__attach(e->bpf, child, NULL, 0);
	}
}

struct exec_collect_ctx {
	struct mp_engine *e;
	uint64_t time_us;
};

static void exec_collect_cb(void *ctx, struct mp_entry *en)
{
	struct exec_collect_ctx *c = ctx;
	struct mp_ptrace *t = mp_entries__owner(c->e->entries, en);

	if (!t)
		return;
	collect(t, c->time_us, en);
	t->exec_collects++;
}

/*
 * @t's process exec'd before anything of it was written (a fork child that execs at once, as a
 * shell's do): its trace starts over, named after the new image, instead of keeping the
 * name it had at fork. Only a regular file can start over; a failure completes the trace.
 */
static void trace_restart_at_exec(struct mp_ptrace *t)
{
	struct memprof_trace_info info;
	char exe[4096], ctx[1024];
	int r;

	if (t->completed || !t->w || t->samples || t->frees || t->unmatched || t->write_errors ||
	    t->stalled)
		return;
	trace_info(t, &info, exe, sizeof(exe), ctx, sizeof(ctx));
	r = mp_writer__reset(t->w, &info);
	if (r < 0 && r != -ENOTSUP && r != -EBUSY) {
		trace_write_failed(t, r);
		trace_complete(t);
	}
}

/* Is @pid traced by a profile that still writes its trace? */
static bool maps_followed(const struct mp_engine *e, pid_t pid)
{
	for (struct mp_profile *p = e->profiles; p; p = p->next) {
		struct mp_ptrace *t = trace_find(p, pid);

		if (t && !t->completed)
			return true;
	}
	return false;
}

/*
 * @pid mapped objects (ld.so's link map changed: the libraries of a new image, dlopen): its
 * mappings are snapshotted again now. The symbolizer would re-read them on a miss, but not
 * within 100 ms of its last read, and the snapshot taken at exec holds no library yet: a short
 * program's samples in libc would all miss. (The unwinder follows the snapshot's generation.)
 */
static void maps_changed(struct mp_engine *e, pid_t pid)
{
	/* re-read while it lives; a process gone by now keeps the snapshot it had (the events
	 * still queued behind this one are resolved against it) */
	if (e->sym)
		mp_symbolizer__snapshot(e->sym, pid);
}

static void proc_detach(struct mp_ptrace *t, const char *why, const char *fallback);

/*
 * ptrace's rule at exec: a profile whose owner is not root keeps a process only if the owner
 * may still profile it (same credentials, dumpable), and never into an image that raised its
 * privileges (@secure: BPF stopped sampling it at the exec already, so none of its samples are
 * in the ring). Otherwise its trace is completed and its probes go.
 */
static void exec_check(struct mp_engine *e, pid_t pid, bool secure)
{
	for (struct mp_profile *p = e->profiles; p; p = p->next) {
		struct mp_ptrace *t = trace_find(p, pid);
		char why[512] = "";
		int r = 0;

		if (!t || t->completed || t->detached_reason || p->state == MP_PROFILE_DISCARDED ||
		    !p->opts.owner_uid)
			continue;
		if (e->opts.exec_check)
			r = e->opts.exec_check(e->opts.exec_check_ctx, pid, p->opts.owner_uid,
					       p->opts.owner_gid, secure, why, sizeof(why));
		else if (secure)
			r = -EPERM;
		if (r >= 0)
			continue;
		if (!why[0])
			snprintf(why, sizeof(why), "process %d exec'd a program with more privileges "
				 "(set-id or file capabilities)", (int)pid);
		proc_detach(t, why, "exec'd a program its profile's owner may not profile");
	}
}

static void on_exec(struct mp_engine *e, const struct mp_proc_event *ev)
{
	pid_t pid = (pid_t)ev->h.pid;
	struct exec_collect_ctx c = { .e = e, .time_us = mp_ktime_to_epoch_us(ev->h.time_ns) };
	bool attach = false;
	char comm[16];

	/* The old image's blocks are gone: collect them ("freed by exec"), in every profile
	 * that holds some. The trace goes on with the new image. */
	mp_entries__drain(e->entries, pid, NULL, exec_collect_cb, &c);
	exec_check(e, pid, ev->exit_code & MP_EXEC_F_SECURE);
	if (e->sym) {
		struct mp_mapping_info mi;

		/* the new image's mappings, while the process (hopefully) lives */
		mp_unwinder__forget(e->unw, pid);
		mp_symbolizer__forget(e->sym, pid);
		mp_symbolizer__mapping(e->sym, pid, 1, &mi);
	}
	read_comm(pid, comm);	/* the new image's name, for summaries (not the trace's) */
	for (struct mp_profile *p = e->profiles; p; p = p->next) {
		struct mp_ptrace *t = trace_find(p, pid);

		if (t) {	/* another image: other code at those addresses */
			memset(t->fp_ok, 0, sizeof(t->fp_ok));
			t->prev_len = 0;
			if (strcmp(comm, "?"))
				memcpy(t->comm, comm, sizeof(t->comm));
			trace_restart_at_exec(t);
		}
		if (t && !t->completed && p->state == MP_PROFILE_SAMPLING)
			attach = true;
	}
	if (attach && e->bpf)
		mp_bpf__attach(e->bpf, pid, NULL, 0);
	/* the new image may (not) map libmemprof-preload: the loader decided again */
	for (struct mp_profile *p = e->profiles; p; p = p->next) {
		struct mp_ptrace *t = trace_find(p, pid);

		if (t && !t->completed)
			trace_update_mode(t);
	}
	arm_timer(e);	/* the flush */
}

static void profile_proc_exited(struct mp_profile *p)
{
	if (p->nalive)
		p->nalive--;
	if (!p->nalive && p->state == MP_PROFILE_SAMPLING) {
		/* Every process is gone: implicitly stopped, every trace complete. */
		profile_stop(p);
		notify_state(p);
	}
}

static int proc_gone(struct mp_engine *e, pid_t pid)
{
	int found = 0;

	for (struct mp_profile *p = e->profiles; p; p = p->next) {
		struct mp_ptrace *t = trace_find(p, pid);

		if (!t || t->exited)
			continue;
		found = 1;
		t->exited = true;
		if (e->bpf && !t->detached_reason) { /* final count (the loader drops it next) */
			struct mp_proc_hits h;

			if (!mp_bpf__proc_hits(e->bpf, pid, &h) && h.entries >= t->hits.entries &&
			    h.returns >= t->hits.returns)
				t->hits = h;
		}
		trace_complete(t);
		if (p->state != MP_PROFILE_DISCARDED)
			proc_release(p, pid, false);
		if (!t->detached_reason) /* a detached process left nalive then */
			profile_proc_exited(p);
	}
	mp_entries__drain(e->entries, pid, NULL, NULL, NULL);
	mp_unwinder__forget(e->unw, pid);
	if (e->sym)
		mp_symbolizer__forget(e->sym, pid);
	return found;
}

static void alloc_event(struct mp_engine *e, const struct mp_alloc_event *ev,
			const struct mp_ustack *us)
{
	/* clock reads cost as much as the rest of an event: time one in 16 */
	uint64_t t0 = e->sst.events & 15 ? 0 : now_mono_ns();

	on_alloc(e, ev, us);
	e->sst.events++;
	if (t0)
		e->sst.event_ns += 16 * (now_mono_ns() - t0);
}

static void batch_alloc(void *ctx, const struct mp_alloc_event *ev)
{
	alloc_event(ctx, ev, NULL);
}

static void batch_frees(void *ctx, const struct mp_free_batch_event *ev, size_t size)
{
	on_free_batch(ctx, ev, size);
}

static const struct mp_preload_batch_ops batch_ops = {
	.alloc = batch_alloc,
	.frees = batch_frees,
};

static int on_event(void *ctx, const void *data, size_t size)
{
	struct mp_engine *e = ctx;
	const struct mp_event_hdr *h = data;

	if (size < sizeof(*h))
		return 0;
	switch (h->type) {
	case MP_EV_ALLOC:
		if (size >= offsetof(struct mp_alloc_event, stack)) {
			const struct mp_alloc_event *ev = data;
			const struct mp_ustack *us = NULL;

			/* a user-stack copy follows the full-size record (bpf/memprof.h) */
			if (size >= sizeof(*ev) + sizeof(*us)) {
				size_t room = size - sizeof(*ev) - sizeof(*us);

				us = (const struct mp_ustack *)(ev + 1);
				if (us->offset >= MP_PAGE_SIZE ||
				    (size_t)us->offset + us->size > room)
					us = NULL;
			}
			/* the record may carry only the valid frames */
			if (size >= offsetof(struct mp_alloc_event, stack) +
					    8 * (size_t)(ev->nframes < MP_MAX_STACK ?
								 ev->nframes : MP_MAX_STACK))
				alloc_event(e, ev, us);
		}
		break;
	case MP_EV_PRELOAD_BATCH:
		if (mp_preload_batch__expand(data, size, &batch_ops, e, &e->batches))
			e->drops[MP_DROP_MALFORMED]++;
		break;
	case MP_EV_FREE:
		if (size >= sizeof(struct mp_free_event))
			on_free(e, data);
		break;
	case MP_EV_FREE_BATCH:
		if (size >= offsetof(struct mp_free_batch_event, ids))
			on_free_batch(e, data, size);
		break;
	case MP_EV_FORK:
		if (size >= sizeof(struct mp_proc_event))
			on_fork(e, data);
		break;
	case MP_EV_EXEC:
		if (size >= sizeof(struct mp_proc_event))
			on_exec(e, data);
		break;
	case MP_EV_MAP:	/* ld.so mapped objects (the loader probed them already) */
		if (maps_followed(e, (pid_t)h->pid))
			maps_changed(e, (pid_t)h->pid);
		break;
	case MP_EV_EXIT:
		proc_gone(e, (pid_t)h->pid);
		break;
	case MP_EV_THREAD_EXIT:
		mp_entries__thread_exit(e->entries, (pid_t)h->pid, (pid_t)h->tid);
		break;
	default:
		break;
	}
	return 0;
}

/* ---- engine ---- */

struct mp_engine *mp_engine__new(const struct mp_engine_opts *opts)
{
	struct mp_engine *e = calloc(1, sizeof(*e));
	struct mp_entries_opts eo = { 0 };
	struct epoll_event ev = { .events = EPOLLIN };
	int err;

	if (!e)
		return NULL;
	e->epfd = e->timerfd = -1;
	if (opts)
		memcpy(&e->opts, opts, opts->sz && opts->sz < sizeof(e->opts) ? opts->sz :
								      sizeof(e->opts));
	e->opts.sz = sizeof(e->opts);
	if (e->opts.error && e->opts.error_len)
		e->opts.error[0] = 0;
	e->next_id = 1;
	e->default_dir = strdup(e->opts.default_dir ? e->opts.default_dir : ".");
	e->opts.default_dir = NULL;
	if (!e->default_dir)
		goto fail_errno;
	if (e->opts.has_seed)
		e->seed = e->opts.seed;
	else if (getrandom(&e->seed, sizeof(e->seed), 0) != sizeof(e->seed))
		e->seed = now_mono_ns() ^ ((uint64_t)getpid() << 32);
	if (gethostname(e->hostname, sizeof(e->hostname) - 1))
		strcpy(e->hostname, "localhost");

	eo.max_entries = e->opts.max_entries ? e->opts.max_entries : MP_DEFAULT_MAX_ENTRIES;
	eo.max_procs = e->opts.max_procs ? e->opts.max_procs : MP_DEFAULT_MAX_PROCS;
	e->max_procs = eo.max_procs;
	e->entries = mp_entries__new(&eo);
	if (!e->entries)
		goto fail_errno;
	e->sym = mp_symbolizer__new();
	if (!e->sym)
		goto fail_errno;
	e->unw = mp_unwinder__new(e->sym, NULL);
	if (!e->unw)
		goto fail_errno;
	e->bpf = mp_bpf__open_log(on_event, e, e->opts.log, e->opts.log_ctx, e->opts.error,
				  e->opts.error_len);
	if (!e->bpf)
		goto fail_errno;
	e->epfd = epoll_create1(EPOLL_CLOEXEC);
	e->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (e->epfd < 0 || e->timerfd < 0)
		goto fail_errno;
	ev.data.u64 = MP_EP_RINGBUF;
	if (epoll_ctl(e->epfd, EPOLL_CTL_ADD, mp_bpf__fd(e->bpf), &ev))
		goto fail_errno;
	ev.data.u64 = MP_EP_TIMER;
	if (epoll_ctl(e->epfd, EPOLL_CTL_ADD, e->timerfd, &ev))
		goto fail_errno;
	return e;
fail_errno:
	err = errno ? errno : ENOMEM;
	if (e->opts.error && e->opts.error_len && !e->opts.error[0])
		snprintf(e->opts.error, e->opts.error_len, "%s", strerror(err));
	mp_engine__free(e);
	errno = err;
	return NULL;
}

static void profile_free(struct mp_profile *p)
{
	struct mp_ptrace *t = p->list;

	while (t) {
		struct mp_ptrace *next = t->next;

		trace_free(t);
		t = next;
	}
	mp_htab__fini(&p->traces);
	free(p->out_path);
	free(p->out_dir);
	free(p);
}

void mp_engine__free(struct mp_engine *e)
{
	if (!e)
		return;
	for (struct mp_profile *p = e->profiles; p; p = p->next) {
		if (p->state == MP_PROFILE_SAMPLING)
			profile_stop(p);
		if (p->state == MP_PROFILE_STOPPED)
			mp_profile__discard(p);
	}
	while (e->profiles) {
		struct mp_profile *p = e->profiles;

		e->profiles = p->next;
		profile_free(p);
	}
	/* Synchronous outputs are closed already. A writer whose output is stuck is left to
	 * its thread (the process' exit ends it): closing it would wait for ever. */
	reap_outputs(e);
	while (e->closing) {
		struct mp_closing *c = e->closing;

		e->closing = c->next;
		free(c);
	}
	mp_bpf__free(e->bpf);
	mp_unwinder__free(e->unw);
	mp_symbolizer__free(e->sym);
	mp_entries__free(e->entries);
	if (e->epfd >= 0)
		close(e->epfd);
	if (e->timerfd >= 0)
		close(e->timerfd);
	free(e->pull_buf);
	free(e->default_dir);
	free(e);
}

int mp_engine__fd(const struct mp_engine *e)
{
	return e->epfd;
}

void mp_engine__on_state(struct mp_engine *e, mp_profile_state_fn fn, void *ctx)
{
	e->state_fn = fn;
	e->state_ctx = ctx;
}

/*
 * Overhead control. Every MP_OVERHEAD_WINDOW_MS, each probed process' cost is estimated from
 * its probe hits in the window (BPF map "phits") times the cost of a hit the loader measured
 * at start (mp_bpf_counters), as a percentage of one CPU. A process over its profile's budget
 * is detached: its probes are removed, its trace is completed (live blocks stay uncollected,
 * the context says why) and mp_proc_stats.detached_reason tells the user.
 */
static void proc_detach(struct mp_ptrace *t, const char *why, const char *fallback)
{
	struct mp_profile *p = t->p;

	t->detached_reason = strdup(why);
	if (!t->detached_reason)
		t->detached_reason = strdup(fallback);
	if (!t->detached_reason)
		return; /* overhead: try again at the next window */
	/* Probes go (their links close in the background, a while); until then BPF ignores the
	 * process' hits, and still reports its exit, when it leaves the "procs" map. */
	if (p->e->bpf) {
		struct mp_proc_cfg cfg;

		if (mp_bpf__proc_get(p->e->bpf, t->pid, &cfg) == 0 && cfg.profile == p->id) {
			cfg.flags &= ~(MP_PROC_SAMPLING | MP_PROC_FOLLOW_FORKS);
			cfg.flags |= MP_PROC_DETACHED;
			mp_bpf__proc_set(p->e->bpf, t->pid, &cfg);
		}
		mp_bpf__detach(p->e->bpf, t->pid);
	}
	trace_complete(t);
	profile_proc_exited(p);
}

static void overhead_detach(struct mp_ptrace *t, double pct, uint64_t hits, uint64_t dt_ns)
{
	char why[256];

	snprintf(why, sizeof(why),
		 "probe overhead %.1f%% of a CPU (%" PRIu64 " probe hits in %.2f s) exceeded "
		 "the budget of %g%%", pct, hits, (double)dt_ns / 1e9, t->p->opts.max_overhead_pct);
	proc_detach(t, why, "probe overhead exceeded the budget");
}

static void check_overhead(struct mp_engine *e, uint64_t now)
{
	uint64_t window = (uint64_t)MP_OVERHEAD_WINDOW_MS * 1000000;
	struct mp_bpf_counters c;
	bool any = false;

	if (!e->ovh_next_ns || now < e->ovh_next_ns || !e->bpf)
		return;
	e->ovh_next_ns = 0;
	mp_bpf__counters(e->bpf, &c);
	for (struct mp_profile *p = e->profiles; p; p = p->next) {
		if (p->state == MP_PROFILE_DISCARDED)
			continue;
		for (struct mp_ptrace *t = p->list; t; t = t->next) {
			struct mp_proc_hits h;
			uint64_t de, dr, dt;

			if (t->exited || t->completed || t->detached_reason)
				continue;
			any = true;
			if (mp_bpf__proc_hits(e->bpf, t->pid, &h))
				continue;
			if (!t->win_start_ns || h.entries < t->hits.entries ||
			    h.returns < t->hits.returns) {
				/* first look (or the counters restarted): a window starts */
				t->hits = h;
				t->win_start_ns = now;
				continue;
			}
			dt = now - t->win_start_ns;
			if (dt < window / 2)
				continue;
			de = h.entries - t->hits.entries;
			dr = h.returns - t->hits.returns;
			t->overhead_pct = 100.0 * (double)(de * c.entry_cost_ns +
							   dr * c.return_cost_ns) / (double)dt;
			t->hits = h;
			t->win_start_ns = now;
			if (p->opts.max_overhead_pct > 0 && t->overhead_pct > p->opts.max_overhead_pct)
				overhead_detach(t, t->overhead_pct, de + dr, dt);
		}
	}
	if (any)
		e->ovh_next_ns = now + window;
}

/*
 * Deferred preload reports wait in the process until its next sample or free; a process that
 * goes idle would keep its last samples (and, in either mode, its last frees) from the profile
 * indefinitely. Every MP_PULL_NS, the queue of each preload-mode process that left it untouched
 * since the previous look is copied without a trap (mp_bpf__preload_pull) and handled as if it
 * had been sent; when the library sends it later, the engine ignores what it saw already.
 */
#define MP_PULL_NS	200000000ull
#define MP_PULL_BUF	(sizeof(struct mp_preload_batch_event) + MP_PL_QUEUE_SIZE)

/* Take @pid's queue (mp_bpf__preload_pull(); @last: held at its exit) and handle it. */
static void pull_queue(struct mp_engine *e, pid_t pid, bool last)
{
	int n;

	if (!e->pull_buf && !(e->pull_buf = malloc(MP_PULL_BUF)))
		return;
	n = mp_bpf__preload_pull(e->bpf, pid, e->pull_buf, MP_PULL_BUF, last);
	if (n > 0 && mp_preload_batch__expand(e->pull_buf, (size_t)n, &batch_ops, e, &e->batches))
		e->drops[MP_DROP_MALFORMED]++;
}

static void pull_idle_queues(struct mp_engine *e, uint64_t now)
{
	if (!e->bpf || now < e->pull_next_ns)
		return;
	e->pull_next_ns = now + MP_PULL_NS;
	for (struct mp_profile *p = e->profiles; p; p = p->next) {
		if (p->state == MP_PROFILE_DISCARDED)
			continue;
		for (struct mp_ptrace *t = p->list; t; t = t->next) {
			if (t->exited || t->completed)
				continue;
			/* a second trace of the same process finds the queue taken */
			pull_queue(e, t->pid, false);
		}
	}
}

static void check_deadlines(struct mp_engine *e)
{
	uint64_t expirations, now = now_mono_ns();

	e->timer_next_ns = 0;
	if (read(e->timerfd, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN)
		return;
	for (struct mp_profile *p = e->profiles; p; p = p->next) {
		if (p->state == MP_PROFILE_SAMPLING && p->deadline_ns && p->deadline_ns <= now) {
			profile_stop(p);
			notify_state(p);
		}
	}
	check_overhead(e, now);
	pull_idle_queues(e, now);
	arm_timer(e);
}

/* Processes whose pidfd says they are gone (@evs[0..n) from the engine's epoll set): deliver
 * their exit event, or complete their traces without it (counted). */
static void check_exits(struct mp_engine *e, const struct epoll_event *evs, int n)
{
	for (int i = 0; i < n; i++) {
		struct mp_ptrace *t = evs[i].data.ptr;

		if (evs[i].data.u64 == MP_EP_RINGBUF || evs[i].data.u64 == MP_EP_TIMER)
			continue;
		/* traces are only freed by forget/free, never while processing */
		if (t->pidfd < 0)
			continue;
		mp_engine__reap(e, t->pid);
		if (!t->completed) {
			/* an older trace of a reused pid */
			t->exited = true;
			trace_complete(t);
			e->drops[MP_DROP_LOST_EXIT]++;
		}
	}
}

/*
 * One epoll_wait() says what else is due: the timer (deadlines, overhead windows, the flush) and
 * the pidfds of processes gone. Nothing else costs a system call here, however often the caller
 * comes (every batch of ring-buffer records).
 */
int mp_engine__process(struct mp_engine *e)
{
	return mp_engine__process_max(e, 0);
}

int mp_engine__process_max(struct mp_engine *e, uint64_t max_ns)
{
	struct epoll_event evs[32];
	int n = max_ns ? mp_bpf__consume_max(e->bpf, UINT_MAX, max_ns) : mp_bpf__consume(e->bpf);
	int nev = epoll_wait(e->epfd, evs, 32, 0);
	bool timer = false;

	for (int i = 0; i < nev; i++)
		if (evs[i].data.u64 == MP_EP_TIMER)
			timer = true;
	if (timer)
		check_deadlines(e);
	else if (!e->timer_next_ns && (traces_live(e) || e->closing))
		arm_timer(e);	/* the flush, for a trace begun without one armed */
	check_exits(e, evs, nev);
	if (e->closing)
		reap_outputs(e);
	return n;
}

int mp_engine__reap(struct mp_engine *e, pid_t pid)
{
	bool known = false;

	mp_bpf__consume(e->bpf);
	for (struct mp_profile *p = e->profiles; p; p = p->next) {
		struct mp_ptrace *t = trace_find(p, pid);

		if (t)
			known = true;
	}
	if (!known)
		return -ENOENT;
	if (proc_gone(e, pid))
		e->drops[MP_DROP_LOST_EXIT]++;
	return 0;
}

static bool pid_busy(const struct mp_engine *e, pid_t pid)
{
	for (struct mp_profile *p = e->profiles; p; p = p->next) {
		struct mp_ptrace *t = p->state == MP_PROFILE_SAMPLING ? trace_find(p, pid) : NULL;

		if (t && !t->exited)
			return true;
	}
	return false;
}

/* Why a process that still exists maps no memory: "a kernel thread", "a zombie", or NULL. */
static const char *unmapped_kind(pid_t pid)
{
	char path[64], buf[512], *s, state;
	unsigned long flags;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return NULL;
	buf[n] = '\0';
	/* After "pid (comm) ": state ppid pgrp session tty_nr tpgid flags */
	s = strrchr(buf, ')');
	if (!s || sscanf(s + 1, " %c %*d %*d %*d %*d %*d %lu", &state, &flags) != 2)
		return NULL;
	if (flags & 0x00200000)	/* PF_KTHREAD */
		return "a kernel thread";
	return state == 'Z' ? "a zombie" : NULL;
}

/* The engine's own process: its allocations would feed the ring it drains, each record read
 * making more (a livelock). memprofd's, or memprofctl record's. */
static int refuse_self(pid_t pid, char *err, size_t err_len)
{
	if (pid != getpid())
		return 0;
	snprintf(err, err_len, "Process %d is the profiler itself: its allocations would feed the "
		 "events it reads", (int)pid);
	return -EPERM;
}

static int attach_pid(struct mp_profile *p, pid_t pid, char *err, size_t err_len)
{
	const char *kind = NULL;
	char why[512] = "";
	char comm[16];
	int r;

	r = mp_bpf__attach(p->e->bpf, pid, why, sizeof(why));
	if (r >= 0)
		return 0;
	read_comm(pid, comm);
	if (r == -ESRCH)
		kind = unmapped_kind(pid);
	if (r == -ENOENT)
		snprintf(err, err_len, "Process %d (%s) has no allocator memprofd can probe%s%s",
			 (int)pid, comm, why[0] ? ": " : "", why);
	else if (kind)
		snprintf(err, err_len, "Process %d (%s) is %s: it has no user-space allocator to "
			 "probe", (int)pid, comm, kind);
	else if (r == -ESRCH)
		snprintf(err, err_len, "Process %d exited before it could be probed", (int)pid);
	else
		snprintf(err, err_len, "Failed to attach probes to process %d (%s): %s%s%s",
			 (int)pid, comm, strerror(-r), why[0] ? ": " : "", why);
	return r;
}

int mp_engine__start(struct mp_engine *e, const struct mp_profile_opts *opts, const pid_t *pids,
		     size_t npids, struct mp_profile **out, char *err, size_t err_len)
{
	struct mp_profile *p;
	char dummy[8];
	size_t ndone = 0;
	int r = 0;

	if (!err) {
		err = dummy;
		err_len = sizeof(dummy);
	}
	err[0] = '\0';
	if (!opts || !npids || !pids) {
		snprintf(err, err_len, "A profile needs options and at least one process");
		return -EINVAL;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		snprintf(err, err_len, "Out of memory");
		return -ENOMEM;
	}
	memcpy(&p->opts, opts, opts->sz && opts->sz < sizeof(p->opts) ? opts->sz : sizeof(p->opts));
	p->opts.sz = sizeof(p->opts);
	p->e = e;
	p->tail = &p->list;
	p->state = MP_PROFILE_SAMPLING;
	if (p->opts.rate == 0)
		p->opts.rate = MP_DEFAULT_RATE;
	if (!p->opts.callstack_size || p->opts.callstack_size > MP_MAX_STACK)
		p->opts.callstack_size = MP_MAX_STACK;
	if (!p->opts.format_version)
		p->opts.format_version = 2;
	if (!(p->opts.rate > 0 && p->opts.rate <= 1)) {
		snprintf(err, err_len, "Invalid sampling rate %g: it must be in (0, 1]",
			 opts->rate);
		r = -EINVAL;
		goto fail;
	}
	if (p->opts.format_version != 2 && p->opts.format_version != 3) {
		snprintf(err, err_len, "Invalid format version %u: 2 or 3",
			 (unsigned int)p->opts.format_version);
		r = -EINVAL;
		goto fail;
	}
	if ((unsigned int)p->opts.unwind > MP_UNWIND_DWARF) {
		snprintf(err, err_len, "Invalid unwind mode %d: auto, fp or dwarf",
			 (int)p->opts.unwind);
		r = -EINVAL;
		goto fail;
	}
	if (p->opts.stack_copy_size > MP_USTACK_MAX) {
		snprintf(err, err_len, "Invalid stack copy size %d: at most %d bytes",
			 p->opts.stack_copy_size, MP_USTACK_MAX);
		r = -EINVAL;
		goto fail;
	}
	/* stack_copy_size > 0 from here on means: BPF copies that much (proc_cfg) */
	if (p->opts.unwind == MP_UNWIND_FP || p->opts.stack_copy_size < 0)
		p->opts.stack_copy_size = -1;
	else if (!p->opts.stack_copy_size)
		p->opts.stack_copy_size = MP_USTACK_DEFAULT;
	p->out_path = opts->out_path ? strdup(opts->out_path) : NULL;
	p->out_dir = opts->out_dir ? strdup(opts->out_dir) : NULL;
	if ((opts->out_path && !p->out_path) || (opts->out_dir && !p->out_dir)) {
		snprintf(err, err_len, "Out of memory");
		r = -ENOMEM;
		goto fail;
	}
	p->opts.out_path = p->out_path;
	p->opts.out_dir = p->out_dir;
	for (size_t i = 0; i < npids; i++) {
		char path[64];
		pid_t tgid;

		snprintf(path, sizeof(path), "/proc/%d", (int)pids[i]);
		if (pids[i] <= 0 || access(path, F_OK)) {
			snprintf(err, err_len, "No process %d", (int)pids[i]);
			r = -ESRCH;
			goto fail;
		}
		tgid = proc_tgid(pids[i]);
		r = refuse_self(tgid > 0 ? tgid : pids[i], err, err_len);
		if (r < 0)
			goto fail;
		if (tgid > 0 && tgid != pids[i]) {
			/* /proc/TID exists too, unlisted: a thread id from top -H or a log */
			snprintf(err, err_len, "%d is a thread of process %d: profile %d (a profile "
				 "covers all of a process' threads)", (int)pids[i], (int)tgid,
				 (int)tgid);
			r = -EINVAL;
			goto fail;
		}
		if (e->open_traces + npids > e->max_procs) {
			snprintf(err, err_len, "Too many processes traced at once (limit %zu)",
				 e->max_procs);
			r = -ENOSPC;
			goto fail;
		}
		if (pid_busy(e, pids[i])) {
			snprintf(err, err_len, "Process %d already samples for another profile",
				 (int)pids[i]);
			r = -EBUSY;
			goto fail;
		}
	}
	p->id = e->next_id;
	p->gen = ++e->gen;
	r = mp_sampler__init(&p->sampler, p->opts.rate,
			     e->seed + 0x9e3779b97f4a7c15ull * (uint64_t)p->id);
	if (r)
		goto fail;
	mp_bpf__stats(e->bpf, p->bpf_base);

	p->starting = true;
	/* Probes first, then the trace: its start time is when sampling begins (attaching
	 * takes a while: an RCU grace period per uprobe). */
	for (ndone = 0; ndone < npids; ndone++) {
		struct mp_proc_cfg cfg;
		pid_t pid = pids[ndone];

		proc_cfg(p, &cfg);
		r = mp_bpf__proc_set(e->bpf, pid, &cfg);
		if (r < 0) {
			snprintf(err, err_len, "Failed to configure process %d for sampling: %s",
				 (int)pid, strerror(-r));
			goto fail_procs;
		}
		r = attach_pid(p, pid, err, err_len);
		if (r < 0) {
			ndone++;
			goto fail_procs;
		}
		if (!trace_new(p, pid, err, err_len)) {
			r = -EIO;
			ndone++;
			goto fail_procs;
		}
	}
	for (struct mp_ptrace *t = p->list; t; t = t->next) {
		r = trace_commit(t, err, err_len);
		if (r < 0)
			goto fail_procs;
	}
	p->starting = false;
	if (p->opts.duration_us) {
		p->deadline_ns = now_mono_ns() + p->opts.duration_us * 1000;
	}
	e->next_id++;
	p->next = e->profiles;
	e->profiles = p;
	if (!e->ovh_next_ns) /* first window: the hit counters' baselines */
		e->ovh_next_ns = now_mono_ns() + 1;
	arm_timer(e);
	if (out)
		*out = p;
	return 0;

fail_procs:
	/* Undo: the processes leave BPF, and the traces we created are removed. */
	for (size_t i = 0; i < ndone; i++) {
		mp_bpf__proc_del(e->bpf, pids[i]);
		mp_bpf__detach(e->bpf, pids[i]);
	}
	for (struct mp_ptrace *t = p->list; t; t = t->next) {
		mp_entries__drain(e->entries, t->pid, t, NULL, NULL);
		trace_complete(t);
		if (t->path)
			trace_unlink(t, t->path);
	}
fail:
	profile_free(p);
	return r;
}

size_t mp_profile__write_failures(const struct mp_profile *p,
				  void (*fn)(void *ctx, const char *msg), void *ctx)
{
	char msg[4096 + 256];	/* trace_new()'s paths are at most 4096 */
	size_t n = 0;

	for (const struct mp_ptrace *t = p->list; t; t = t->next) {
		const char *where = t->path ? t->path : "the caller's file";

		if (t->write_errors)
			snprintf(msg, sizeof(msg), "Failed to write the trace of %s (pid %d) to "
				 "'%s': %s; %" PRIu64 " writes lost, the trace is incomplete",
				 t->comm, (int)t->pid, where,
				 strerror(t->write_err ? t->write_err : EIO), t->write_errors);
		else if (t->stalled)
			snprintf(msg, sizeof(msg), "The output of the trace of %s (pid %d), "
				 "'%s', did not keep up: %" PRIu64 " events were not written",
				 t->comm, (int)t->pid, where, t->stalled);
		else
			continue;
		fn(ctx, msg);
		n++;
	}
	return n;
}

size_t mp_profile__new_write_failures(struct mp_profile *p,
				      void (*fn)(void *ctx, const char *msg), void *ctx)
{
	char msg[4096 + 256], when[64];
	size_t n = 0;

	for (struct mp_ptrace *t = p->list; t; t = t->next) {
		time_t sec;
		struct tm tm;

		if (!t->write_err || t->write_err_told)
			continue;
		t->write_err_told = true;
		sec = (time_t)(t->write_err_us / 1000000);
		localtime_r(&sec, &tm);
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
		snprintf(msg, sizeof(msg), "Failed to write the trace of %s (pid %d) to '%s' since "
			 "%s: %s; the trace ends there", t->comm, (int)t->pid,
			 t->path ? t->path : "the caller's file", when, strerror(t->write_err));
		fn(ctx, msg);
		n++;
	}
	return n;
}

unsigned int mp_profile__closing(const struct mp_profile *p)
{
	return p->nclosing;
}

size_t mp_engine__wait_outputs(struct mp_engine *e, unsigned int timeout_ms,
			       void (*fn)(void *ctx, const char *msg), void *ctx)
{
	uint64_t end = now_mono_ns() + (uint64_t)timeout_ms * 1000000;
	struct timespec pause = { 0, 10 * 1000 * 1000 };
	char msg[4096 + 256];
	size_t n = 0;

	reap_outputs(e);
	while (e->closing && now_mono_ns() < end) {
		nanosleep(&pause, NULL);
		reap_outputs(e);
	}
	for (struct mp_closing *c = e->closing; c; c = c->next, n++) {
		if (!fn)
			continue;
		snprintf(msg, sizeof(msg), "The trace of %s (pid %d) in '%s' could not be "
			 "completed: its output is stuck", c->t ? c->t->comm : "?",
			 c->t ? (int)c->t->pid : 0,
			 c->t && c->t->path ? c->t->path : "the caller's file");
		fn(ctx, msg);
	}
	return n;
}

int mp_engine__forget(struct mp_engine *e, struct mp_profile *p)
{
	if (p->state != MP_PROFILE_DISCARDED)
		return -EINVAL;
	for (struct mp_profile **pp = &e->profiles; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			profile_free(p);
			return 0;
		}
	}
	return -ENOENT;
}

struct mp_profile *mp_engine__profile(struct mp_engine *e, uint32_t id)
{
	return profile_by_id(e, id);
}

struct mp_profile *mp_engine__next_profile(struct mp_engine *e, struct mp_profile *prev)
{
	return prev ? prev->next : e->profiles;
}

uint32_t mp_profile__id(const struct mp_profile *p)
{
	return p->id;
}

enum mp_profile_state mp_profile__state(const struct mp_profile *p)
{
	return p->state;
}

const struct mp_profile_opts *mp_profile__opts(const struct mp_profile *p)
{
	return &p->opts;
}

size_t mp_profile__procs(const struct mp_profile *p, struct mp_proc_stats *out, size_t max)
{
	size_t i = 0;
	double rate = p->opts.rate;

	for (struct mp_ptrace *t = p->list; t; t = t->next, i++) {
		struct mp_proc_stats *s;

		if (!out || i >= max)
			continue;
		s = &out[i];
		memset(s, 0, sizeof(*s));
		s->pid = t->pid;
		memcpy(s->comm, t->comm, sizeof(s->comm));
		s->exited = t->exited;
		s->samples = t->samples;
		s->nsamples = t->nsamples;
		s->frees = t->frees;
		s->est_alloc_bytes = mp_est_bytes(rate, &t->est);
		s->est_live_bytes = mp_est_bytes(rate, &t->live_est);
		s->se_alloc_bytes = mp_est_se_bytes(rate, &t->est);
		s->se_live_bytes = mp_est_se_bytes(rate, &t->live_est);
		s->drops = t->table_full + t->unmatched + t->stale + t->write_errors + t->stalled;
		s->trace_path = t->path;
		s->write_errors = t->write_errors;
		s->stalled = t->stalled;
		s->stalled_us = t->stalled_us;
		s->write_errno = t->write_err;
		s->write_error_us = t->write_err_us;
		if (!s->write_errno && t->w) {	/* the file failed; no event has met it yet */
			s->write_errno = mp_writer__output_error(t->w, &s->write_error_us, NULL);
		}
		s->trace_done = t->completed && !t->closing;
		s->live_nsamples = t->live_nsamples;
		s->truncated_stacks = t->truncated;
		s->exec_collects = t->exec_collects;
		s->unmatched_frees = t->unmatched;
		s->probe_hits = t->hits.entries + t->hits.returns;
		s->overhead_pct = t->overhead_pct;
		s->detached_reason = t->detached_reason;
		s->dwarf_stacks = t->dwarf_stacks;
		s->window_cut_stacks = t->window_cut;
		s->unwind_fallbacks = t->unwind_fallbacks;
		if (!t->exited && !t->completed)
			trace_update_mode(t);
		s->mode = t->mode;
		s->preload_samples = t->pl_stats[MEMPROF_PRELOAD_STAT_SAMPLES];
		s->preload_lost = t->pl_stats[MEMPROF_PRELOAD_STAT_TABLE_FULL] +
				  t->pl_stats[MEMPROF_PRELOAD_STAT_STALE] +
				  t->pl_stats[MEMPROF_PRELOAD_STAT_REALLOC_LOST];
	}
	return p->ntraces;
}

const char *mp_engine__mechanisms(const struct mp_engine *e)
{
	return mp_bpf__mechanisms(e->bpf);
}

int mp_engine__stats(struct mp_engine *e, uint64_t *out, size_t n)
{
	uint64_t all[MP_STAT__MAX];
	int r = mp_bpf__stats(e->bpf, all);

	if (r < 0)
		return r;
	for (size_t i = 0; i < n && i < MP_STAT__MAX; i++)
		out[i] = all[i];
	return MP_STAT__MAX;
}

void mp_engine__stack_stats(const struct mp_engine *e, struct mp_engine_stack_stats *out)
{
	struct mp_unwinder_stats ust;

	*out = e->sst;
	/* the engine's unwinder unwinds its events only */
	if (e->unw) {
		mp_unwinder__stats(e->unw, &ust);
		out->max_stack_used = ust.max_stack_used;
	}
}

static const char *const unwind_names[] = {
	[MP_UNWIND_AUTO] = "auto",
	[MP_UNWIND_FP] = "fp",
	[MP_UNWIND_DWARF] = "dwarf",
};

const char *mp_unwind__name(enum mp_unwind u)
{
	return (unsigned int)u <= MP_UNWIND_DWARF ? unwind_names[u] : "?";
}

int mp_unwind__parse(const char *s, enum mp_unwind *out)
{
	for (unsigned int i = 0; i <= MP_UNWIND_DWARF; i++) {
		if (!strcmp(s, unwind_names[i])) {
			*out = (enum mp_unwind)i;
			return 0;
		}
	}
	return -EINVAL;
}

int mp_engine__drops(const struct mp_engine *e, uint64_t *out, size_t n)
{
	for (size_t i = 0; i < n && i < MP_DROP__MAX; i++)
		out[i] = e->drops[i];
	return MP_DROP__MAX;
}

void mp_engine__exiting(struct mp_engine *e, pid_t pid)
{
	for (struct mp_profile *p = e->profiles; p; p = p->next) {
		struct mp_ptrace *t = trace_find(p, pid);

		if (t && !t->completed && t->mode == MP_PROC_MODE_PRELOAD) {
			trace_update_mode(t);
			/* killed (no destructor, no _exit): what the library still queues */
			if (e->bpf)
				pull_queue(e, pid, true);
		}
	}
}

int mp_engine__sync_pid(struct mp_engine *e, pid_t pid, char *err, size_t err_len)
{
	char dummy[8];
	int r;

	if (!err) {
		err = dummy;
		err_len = sizeof(dummy);
	}
	err[0] = '\0';
	/* its FORK or EXEC record is in the ring already: the engine follows it from there */
	r = mp_engine__process(e);
	if (r < 0) {
		snprintf(err, err_len, "Failed to read events: %s", strerror(-r));
		return r;
	}
	for (struct mp_profile *p = e->profiles; p; p = p->next) {
		struct mp_ptrace *t = trace_find(p, pid);

		if (!t || t->completed || t->exited || p->state != MP_PROFILE_SAMPLING)
			continue;
		r = attach_pid(p, pid, err, err_len);
		if (r >= 0)	/* the loader chose uprobes or preload: known now, not at exit */
			trace_update_mode(t);
		/* held at the consistent link map after an exec: its libraries are there now */
		maps_changed(e, pid);
		return r < 0 ? r : 1;
	}
	return 0;
}

/*
 * The trace of @pid was created from its FORK record before the caller said where it goes: it
 * holds its header only (the child is held before its first instruction). Start it again on
 * @out_fd and remove the file made for it.
 */
static int trace_redirect(struct mp_ptrace *t, int out_fd, char *err, size_t err_len)
{
	struct mp_profile *p = t->p;
	struct mp_engine *e = p->e;
	struct mp_ptrace **pp, *nt;

	if (t->samples || t->frees || t->unmatched) {
		snprintf(err, err_len, "Process %d has run already: its trace stays in '%s'",
			 (int)t->pid, t->path);
		return -EBUSY;
	}
	e->sync_pid = t->pid;
	e->sync_fd = out_fd;
	nt = trace_new(p, t->pid, err, err_len);	/* takes t's place in the table */
	e->sync_pid = 0;
	if (!nt)
		return -EIO;
	trace_complete(t);
	trace_unlink(t, t->path);
	for (pp = &p->list; *pp; pp = &(*pp)->next) {
		if (*pp != t)
			continue;
		*pp = t->next;
		if (p->tail == &t->next)
			p->tail = pp;
		break;
	}
	p->ntraces--;
	if (p->nalive)
		p->nalive--;
	trace_free(t);
	return 0;
}

int mp_profile__sync_pid(struct mp_profile *p, pid_t pid, int out_fd, char *err, size_t err_len)
{
	struct mp_engine *e = p->e;
	struct mp_ptrace *t;
	char dummy[8];
	int r;

	if (!err) {
		err = dummy;
		err_len = sizeof(dummy);
	}
	err[0] = '\0';
	r = refuse_self(pid, err, err_len);
	if (r < 0)
		return r;
	/* its FORK record, if still pending, creates its trace on @out_fd directly */
	e->sync_pid = out_fd >= 0 ? pid : 0;
	e->sync_fd = out_fd;
	r = mp_engine__process(e);
	e->sync_pid = 0;
	if (r < 0) {
		snprintf(err, err_len, "Failed to read events: %s", strerror(-r));
		return r;
	}
	t = trace_find(p, pid);
	if (!t || t->completed || t->exited || p->state != MP_PROFILE_SAMPLING)
		return 0;
	if (out_fd >= 0 && t->path) {
		r = trace_redirect(t, out_fd, err, err_len);
		if (r < 0)
			return r;
	}
	r = attach_pid(p, pid, err, err_len);
	return r < 0 ? r : 1;
}
