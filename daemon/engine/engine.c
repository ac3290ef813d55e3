// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The sampling engine: its creation and end, the loop step the caller runs when its fd is
 * readable (ring records, the timer, exits seen through pidfds), and its global counters.
 * Data flow: BPF ring buffer record -> on_event() (events.c) -> per profile and process: the
 * sampler completes the multiplicity, the entry tables remember the block by address, the
 * symbolizer defines the stack's location codes, and the process' memtrace writer gets
 * alloc/collect events. See engine.h for the API and docs/DESIGN.md for the reasons.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "daemon/stacks/unwind.h"
#include "daemon/engine/engine_int.h"

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

/*
 * Alloc and free records wake the ring buffer's reader only each time another 256 KiB are
 * pending (bpf/memprof.bpf.c, data_wake_flags(): a wakeup costs the allocating thread more than
 * the sample); fork/exec/exit records wake it at once. While any process is profiled, the
 * timer also fires every MP_FLUSH_NS to deliver the rest, which bounds how late a record is
 * read and how stale the counters are. Whoever needs everything up to now (stop, discard,
 * status, sync_pid) calls mp_engine__process() first.
 */
#define MP_FLUSH_NS	50000000ull

static bool procs_live(const struct mp_engine *e)
{
	for (struct mp_profile *p = e->profiles; p; p = p->next)
		for (struct mp_proc *pr = p->state != MP_PROFILE_DISCARDED ? p->list : NULL; pr;
		     pr = pr->next)
			if (!pr->completed)
				return true;
	return false;
}

void arm_timer(struct mp_engine *e)
{
	struct itimerspec its = { 0 };
	uint64_t next = 0;

	if (procs_live(e) || e->closing)	/* the flush; the writers finishing files */
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
	if (e->opts.source) {
		e->src = e->opts.source;
		e->src_ctx = e->opts.source_ctx;
	} else {
		e->bpf = mp_bpf__open_log(on_event, e, e->opts.log, e->opts.log_ctx, e->opts.error,
					  e->opts.error_len);
		if (!e->bpf)
			goto fail_errno;
		e->src = &mp_engine_bpf_source;
		e->src_ctx = e->bpf;
	}
	e->epfd = epoll_create1(EPOLL_CLOEXEC);
	e->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (e->epfd < 0 || e->timerfd < 0)
		goto fail_errno;
	ev.data.u64 = MP_EP_RINGBUF;
	if (SRC(e, fd) >= 0 && epoll_ctl(e->epfd, EPOLL_CTL_ADD, SRC(e, fd), &ev))
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
 * A trace's writer keeps its events in a packet of up to 32 KiB until it is full (or spans 30 s):
 * a quiet process' events would reach the file that late. Once a second the pending packets of
 * running processes are written, so that a trace on disk (what `memprofctl top` and a crash
 * leave) is at most that old. A failed write is the writer's error, reported by the next event.
 */
#define MP_TRACE_FLUSH_NS	1000000000ull

static void flush_traces(struct mp_engine *e, uint64_t now)
{
	if (now - e->traces_flushed_ns < MP_TRACE_FLUSH_NS)
		return;
	e->traces_flushed_ns = now;
	for (struct mp_profile *p = e->profiles; p; p = p->next)
		for (struct mp_proc *pr = p->state != MP_PROFILE_DISCARDED ? p->list : NULL; pr;
		     pr = pr->next)
			if (pr->w && !pr->completed)
				memprof_writer__flush(pr->w);
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
	flush_traces(e, now);
	arm_timer(e);
}

/* Processes whose pidfd says they are gone (@evs[0..n) from the engine's epoll set): deliver
 * their exit event, or complete those processes without it (counted). */
static void check_exits(struct mp_engine *e, const struct epoll_event *evs, int n)
{
	for (int i = 0; i < n; i++) {
		struct mp_proc *pr = evs[i].data.ptr;

		if (evs[i].data.u64 == MP_EP_RINGBUF || evs[i].data.u64 == MP_EP_TIMER)
			continue;
		/* processes are freed by forget/free and by profiles_retire() after this loop,
		 * never while processing */
		if (pr->pidfd < 0)
			continue;
		mp_engine__reap(e, pr->pid);
		if (!pr->completed) {
			/* an older process of a reused pid */
			pr->exited = true;
			proc_complete(pr);
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
	int n = e->src->consume(e->src_ctx, e, max_ns);
	int nev = epoll_wait(e->epfd, evs, 32, 0);
	bool timer = false;

	for (int i = 0; i < nev; i++)
		if (evs[i].data.u64 == MP_EP_TIMER)
			timer = true;
	if (timer)
		check_deadlines(e);
	else if (!e->timer_next_ns && (procs_live(e) || e->closing))
		arm_timer(e);	/* the flush, for a process begun without one armed */
	check_exits(e, evs, nev);
	if (e->closing)
		reap_outputs(e);
	profiles_retire(e);
	return n;
}

int mp_engine__reap(struct mp_engine *e, pid_t pid)
{
	bool known = false;

	e->src->consume(e->src_ctx, e, 0);
	for (struct mp_profile *p = e->profiles; p; p = p->next) {
		struct mp_proc *pr = proc_find(p, pid);

		if (pr)
			known = true;
	}
	if (!known)
		return -ENOENT;
	if (proc_gone(e, pid))
		e->drops[MP_DROP_LOST_EXIT]++;
	return 0;
}

const char *mp_engine__mechanisms(const struct mp_engine *e)
{
	return SRC(e, mechanisms);
}

int mp_engine__stats(struct mp_engine *e, uint64_t *out, size_t n)
{
	uint64_t all[MP_STAT__MAX];
	int r = SRC(e, stats, all);

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

/* The names are the unwind option's (options.h), in the order of enum mp_unwind. */
const char *mp_unwind__name(enum mp_unwind u)
{
	return (unsigned int)u <= MP_UNWIND_DWARF ? mp_options[MP_OPT_UNWIND].names[u] : "?";
}

int mp_engine__drops(const struct mp_engine *e, uint64_t *out, size_t n)
{
	for (size_t i = 0; i < n && i < MP_DROP__MAX; i++)
		out[i] = e->drops[i];
	return MP_DROP__MAX;
}
