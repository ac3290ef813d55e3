// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The engine's profiles: start, stop, discard and forget, and a process held by the caller
 * (sync_pid).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/engine/engine_int.h"

void notify_state(struct mp_profile *p)
{
	if (p->e->state_fn)
		p->e->state_fn(p->e->state_ctx, p, p->state);
}

int profile_stop(struct mp_profile *p)
{
	struct mp_proc_cfg cfg;

	if (p->state != MP_PROFILE_SAMPLING)
		return -EINVAL;
	p->state = MP_PROFILE_STOPPED;
	p->stop_ns = now_mono_ns();
	targets_unwatch(p);	/* no process joins a stopped profile */
	p->gen = ++p->e->gen;
	proc_cfg(p, &cfg);
	for (struct mp_proc *pr = p->list; pr; pr = pr->next) {
		struct mp_proc_cfg cur;

		if (pr->exited || !pr->in_table || pr->detached_reason)
			continue;
		/* Frees of sampled blocks keep coming; only sampling stops. */
		if (SRC(p->e, proc_get, pr->pid, &cur) == 0 && cur.profile == p->id)
			SRC(p->e, proc_set, pr->pid, &cfg);
		proc_update_mode(pr);	/* a preload process' counters, while it lives */
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
	for (struct mp_proc *pr = p->list; pr; pr = pr->next) {
		proc_release(p, pr->pid, true);
		proc_complete(pr);
	}
	return 0;
}

struct mp_profile *profile_by_id(const struct mp_engine *e, uint32_t id)
{
	for (struct mp_profile *p = e->profiles; p; p = p->next)
		if (p->id == id)
			return p;
	return NULL;
}

void profile_proc_exited(struct mp_profile *p)
{
	if (p->nalive)
		p->nalive--;
	if (!p->nalive && !p->ntargets && p->state == MP_PROFILE_SAMPLING) {
		/* Every process is gone: implicitly stopped, every process complete. (Targets
		 * may have new processes: only a stop ends their profile.) */
		profile_stop(p);
		notify_state(p);
	}
}

void profile_free(struct mp_profile *p)
{
	struct mp_proc *pr = p->list;

	while (pr) {
		struct mp_proc *next = pr->next;

		proc_free(pr);
		pr = next;
	}
	mp_htab__fini(&p->procs);
	targets_free(p);
	free(p->out_path);
	free(p->out_dir);
	free(p);
}

_Static_assert(MP_CALLSTACK_MAX == MP_MAX_STACK, "options.h: the frames BPF records");
_Static_assert(MP_STACK_COPY_MAX == MP_USTACK_MAX && MP_STACK_COPY_DEFAULT == MP_USTACK_DEFAULT,
	       "options.h: the stack copies BPF makes");

void mp_profile_opts__set(struct mp_profile_opts *po, const struct mp_opts *o)
{
	po->rate = o->rate;
	po->callstack_size = o->callstack_size;
	po->no_follow_forks = !o->follow_forks;
	po->duration_us = o->duration_us;
	po->format_version = (uint16_t)o->format_version;
	po->zstd_level = o->zstd ? 3 : 0;
	po->unwind = (enum mp_unwind)o->unwind;
	po->stack_copy_size = o->stack_copy_size ? (int)o->stack_copy_size : -1;
	po->max_overhead_pct = o->max_overhead;
	po->out_path = o->output.path;
	po->out_fd = o->output.fd;
	po->opt = *o;
}

bool pid_busy(const struct mp_engine *e, pid_t pid)
{
	for (struct mp_profile *p = e->profiles; p; p = p->next) {
		struct mp_proc *pr = p->state == MP_PROFILE_SAMPLING ? proc_find(p, pid) : NULL;

		if (pr && !pr->exited)
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
int refuse_self(pid_t pid, char *err, size_t err_len)
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

	r = SRC(p->e, attach, pid, why, sizeof(why));
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
	if (!opts || (!npids && !opts->ntargets) || (npids && !pids)) {
		snprintf(err, err_len, "A profile needs options and at least one process or "
			 "target");
		return -EINVAL;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		snprintf(err, err_len, "Out of memory");
		return -ENOMEM;
	}
	memcpy(&p->opts, opts, opts->sz && opts->sz < sizeof(p->opts) ? opts->sz : sizeof(p->opts));
	p->opts.sz = sizeof(p->opts);
	/* text options are the caller's (a message's): what is kept of them is the targets' */
	for (size_t i = 0; i < MP_OPT__COUNT; i++)
		if (mp_options[i].type == MP_OPT_T_STRING) {
			*(const char **)((char *)&p->opts.opt + mp_options[i].offset) = NULL;
			p->opts.opt.set &= ~(1u << i);
		}
	p->e = e;
	p->tail = &p->list;
	/* the sums of its retired processes: a record of no process, exited and complete */
	p->retired.p = p;
	p->retired.exited = p->retired.completed = true;
	p->state = MP_PROFILE_SAMPLING;
	if (p->opts.rate == 0)
		p->opts.rate = MP_RATE_DEFAULT;
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
			snprintf(err, err_len, "%d is a thread of process %d: profile %d (a "
				 "profile covers all of a process' threads)", (int)pids[i],
				 (int)tgid, (int)tgid);
			r = -EINVAL;
			goto fail;
		}
		if (e->open_procs + npids > e->max_procs) {
			snprintf(err, err_len, "Too many processes profiled at once (limit %zu)",
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
	SRC(e, stats, p->bpf_base);
	r = targets_start(p, err, err_len);
	if (r < 0) {
		if (!err[0])
			snprintf(err, err_len, "Failed to resolve the targets: %s", strerror(-r));
		goto fail;
	}

	p->starting = true;
	/* Probes first, then the process and its trace: its start time is when sampling begins
	 * (attaching takes a while: an RCU grace period per uprobe). */
	for (ndone = 0; ndone < npids; ndone++) {
		struct mp_proc_cfg cfg;
		pid_t pid = pids[ndone];

		proc_cfg(p, &cfg);
		r = SRC(e, proc_set, pid, &cfg);
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
		if (!proc_new(p, pid, NULL, err, err_len)) {
			r = -EIO;
			ndone++;
			goto fail_procs;
		}
	}
	for (struct mp_proc *pr = p->list; pr; pr = pr->next) {
		r = trace_commit(pr, err, err_len);
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
	/* watched since targets_start(): a process that exec'd meanwhile is found either way */
	targets_scan(p);
	arm_timer(e);
	if (out)
		*out = p;
	return 0;

fail_procs:
	/* Undo: the processes leave BPF, and the trace files made for them are removed. */
	for (size_t i = 0; i < ndone; i++) {
		SRC(e, proc_del, pids[i]);
		SRC(e, detach, pids[i]);
	}
	for (struct mp_proc *pr = p->list; pr; pr = pr->next) {
		mp_entries__drain(e->entries, pr->pid, pr, NULL, NULL);
		proc_complete(pr);
		if (pr->path)
			trace_unlink(pr, pr->path);
	}
fail:
	profile_free(p);
	return r;
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

/*
 * The trace of @pid was created from its FORK record before the caller said where it goes: it
 * holds its header only (the child is held before its first instruction). Start it again on
 * @out_fd and remove the file made for it.
 */
static int trace_redirect(struct mp_proc *pr, int out_fd, char *err, size_t err_len)
{
	struct mp_profile *p = pr->p;
	struct mp_engine *e = p->e;
	struct mp_proc **pp, *nt;

	if (pr->samples || pr->frees || pr->unmatched) {
		snprintf(err, err_len, "Process %d has run already: its trace stays in '%s'",
			 (int)pr->pid, pr->path);
		return -EBUSY;
	}
	e->sync_pid = pr->pid;
	e->sync_fd = out_fd;
	nt = proc_new(p, pr->pid, NULL, err, err_len);	/* takes t's place in the table */
	e->sync_pid = 0;
	if (!nt)
		return -EIO;
	proc_complete(pr);
	trace_unlink(pr, pr->path);
	for (pp = &p->list; *pp; pp = &(*pp)->next) {
		if (*pp != pr)
			continue;
		*pp = pr->next;
		if (p->tail == &pr->next)
			p->tail = pp;
		break;
	}
	p->nprocs--;
	if (p->nalive)
		p->nalive--;
	proc_free(pr);
	return 0;
}

/*
 * sync_pid, memprofd's and record's: deliver what is pending (@pid's FORK or EXEC record among
 * it; with @out_fd >= 0 a FORK record still pending creates the process on @out_fd directly),
 * then in @only (NULL: the first profile of all) that samples @pid: its trace moved to @out_fd
 * if it was begun elsewhere, its probes attached, the mode the loader chose read, and its
 * mappings read again (held at the consistent link map after an exec, its libraries are there).
 */
static int sync_proc(struct mp_engine *e, struct mp_profile *only, pid_t pid, int out_fd,
		     char *err, size_t err_len)
{
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
	e->sync_pid = out_fd >= 0 ? pid : 0;
	e->sync_fd = out_fd;
	r = mp_engine__process(e);
	e->sync_pid = 0;
	if (r < 0) {
		snprintf(err, err_len, "Failed to read events: %s", strerror(-r));
		return r;
	}
	for (struct mp_profile *p = only ? only : e->profiles; p; p = only ? NULL : p->next) {
		struct mp_proc *pr = proc_find(p, pid);

		if (!pr || pr->completed || pr->exited || p->state != MP_PROFILE_SAMPLING)
			continue;
		if (out_fd >= 0 && pr->path) {
			r = trace_redirect(pr, out_fd, err, err_len);
			if (r < 0)
				return r;
			pr = proc_find(p, pid);	/* the new one, on @out_fd */
		}
		r = attach_pid(p, pid, err, err_len);
		if (r >= 0)	/* the loader chose uprobes or preload: known now, not at exit */
			proc_update_mode(pr);
		maps_changed(e, pid);
		return r < 0 ? r : 1;
	}
	return 0;
}

int mp_engine__sync_pid(struct mp_engine *e, pid_t pid, char *err, size_t err_len)
{
	return sync_proc(e, NULL, pid, -1, err, err_len);
}

int mp_profile__sync_pid(struct mp_profile *p, pid_t pid, int out_fd, char *err, size_t err_len)
{
	return sync_proc(p->e, p, pid, out_fd, err, err_len);
}
