// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The engine's per-process state: created when a profile starts or follows a process, completed
 * at its exit, its configuration in the source (BPF), detaching over the overhead budget, its
 * figures.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "daemon/stacks/unwind.h"
#include "userspace-lib/codec/writer_async.h"
#include "daemon/engine/engine_int.h"

/* The process (thread group) that task @tid belongs to, or -errno. */
pid_t proc_tgid(pid_t tid)
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

void read_comm(pid_t pid, char comm[16])
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

/* The @k-th name of a trace of @pid in @dir: PID-COMM.ctf, PID-COMM.2.ctf, ... */
static void trace_name(char *buf, size_t len, const char *dir, pid_t pid, const char *comm,
		       unsigned int k, const char *ext)
{
	if (k > 1)
		snprintf(buf, len, "%s/%d-%s.%u%s", dir, (int)pid, comm, k, ext);
	else
		snprintf(buf, len, "%s/%d-%s%s", dir, (int)pid, comm, ext);
}

/*
 * @pr's trace was started again at an exec before anything was written: its file, named by the
 * engine after the forked image, takes the name of the new one (pr->comm), the first free of
 * PID-COMM.ctf, PID-COMM.2.ctf... (renamed without replacing any file). Where the file system
 * cannot do that, or nothing is free, the name stays.
 */
void proc_rename_for_image(struct mp_proc *pr)
{
	const char *dir = pr->p->out_dir ? pr->p->out_dir : pr->p->e->default_dir;
	const char *ext = pr->p->opts.zstd_level > 0 ? ".ctf.zst" : ".ctf";
	char path[4096], comm[16];

	if (!pr->dir_named || !pr->path || !dir)
		return;
	memcpy(comm, pr->comm, sizeof(comm));
	comm[sizeof(comm) - 1] = '\0';
	sanitize(comm);
	for (unsigned int i = 0, k = pr->incarnation; i < MP_NAME_TRIES; i++, k++) {
		char *copy;

		trace_name(path, sizeof(path), dir, pr->pid, comm, k, ext);
		if (!strcmp(path, pr->path))
			return;	/* the image has the name it had */
		copy = strdup(path);
		if (!copy)
			return;
		if (renameat2(AT_FDCWD, pr->path, AT_FDCWD, path, RENAME_NOREPLACE) == 0) {
			free(pr->path);
			pr->path = copy;
			return;
		}
		free(copy);
		if (errno != EEXIST)
			return;
	}
}

/*
 * Watch the process through a pidfd in the engine's epoll set: if its exit event is lost
 * (ring buffer full), the pidfd still says it is gone and the trace gets completed.
 */
static void watch_exit(struct mp_engine *e, struct mp_proc *pr)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = pr };

	pr->pidfd = (int)syscall(SYS_pidfd_open, pr->pid, 0);
	if (pr->pidfd < 0)
		return;	/* gone already: its exit event is on its way */
	if (epoll_ctl(e->epfd, EPOLL_CTL_ADD, pr->pidfd, &ev)) {
		close(pr->pidfd);
		pr->pidfd = -1;
	}
}

static void unwatch_exit(struct mp_engine *e, struct mp_proc *pr)
{
	if (pr->pidfd < 0)
		return;
	/* explicitly: a forked copy of the fd would keep the registration alive */
	epoll_ctl(e->epfd, EPOLL_CTL_DEL, pr->pidfd, NULL);
	close(pr->pidfd);
	pr->pidfd = -1;
}

const char *mp_proc_mode__name(enum mp_proc_mode m)
{
	return m == MP_PROC_MODE_PRELOAD ? "preload" : "uprobe";
}

/* How the loader profiles the process; a preload one's library counters. */
void proc_update_mode(struct mp_proc *pr)
{
	struct mp_engine *e = pr->p->e;
	int mode = SRC(e, mode, pr->pid);

	if (mode == MP_PROC_MODE_PRELOAD) {
		pr->mode = MP_PROC_MODE_PRELOAD;
		SRC(e, preload_stats, pr->pid, pr->pl_stats, MEMPROF_PRELOAD_STAT__SLOTS);
	} else if (mode == MP_PROC_MODE_UPROBE) {
		pr->mode = MP_PROC_MODE_UPROBE;
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

/* Create the process @pid of @p: its trace is created and its trace-info packet written. */
struct mp_proc *proc_new(struct mp_profile *p, pid_t pid, const char *comm_hint, char *err,
			 size_t err_len)
{
	struct mp_engine *e = p->e;
	struct mp_proc *prev = proc_find(p, pid);	/* the pid's latest process, if any */
	struct mp_proc *pr = calloc(1, sizeof(*pr));
	struct mp_proc_live *live = calloc(1, sizeof(*live));
	const char *ext = p->opts.zstd_level > 0 ? ".ctf.zst" : ".ctf";
	bool first = p->nprocs == 0, user_named = false;
	char path[4096], comm[16], fdname[4096];
	struct mp_mapping_info mi;
	int r;

	if (!pr || !live) {
		snprintf(err, err_len, "Out of memory");
		free(live);
		free(pr);
		return NULL;
	}
	pr->live = live;
	pr->p = p;
	pr->pid = pid;
	pr->incarnation = prev ? prev->incarnation + 1 : 1;
	pr->fd = -1;
	pr->pidfd = -1;
	pr->node.key = (uint64_t)pid;
	read_comm(pid, pr->comm);
	if (!strcmp(pr->comm, "?") && comm_hint && comm_hint[0])	/* gone already */
		snprintf(pr->comm, sizeof(pr->comm), "%.15s", comm_hint);
	proc_update_mode(pr);
	memcpy(comm, pr->comm, sizeof(comm));
	sanitize(comm);

	if ((first && p->opts.out_fd >= 0) || (e->sync_pid == pid && e->sync_fd >= 0)) {
		int ofd = first && p->opts.out_fd >= 0 ? p->opts.out_fd : e->sync_fd;

		pr->fd = fcntl(ofd, F_DUPFD_CLOEXEC, 3);
		if (pr->fd < 0) {
			r = -errno;
			snprintf(err, err_len, "Failed to duplicate the output fd %d: %s", ofd,
				 strerror(-r));
			goto fail;
		}
		snprintf(path, sizeof(path), "%s", fd_name(pr->fd, fdname, sizeof(fdname)));
	} else {
		/* a pid this profile had before (pid reuse) never takes an earlier name */
		unsigned int k = pr->incarnation;

		if (first && p->out_path) {
			snprintf(path, sizeof(path), "%s", p->out_path);
			user_named = true;
		} else if (!p->out_dir && p->out_path) {
			snprintf(path, sizeof(path), k > 1 ? "%s.%d.%u" : "%s.%d", p->out_path,
				 (int)pid, k);
			user_named = true;
		}
		if (user_named) {
			pr->fd = trace_open_file(pr, path, true);
		} else {
			/* the first free one of PID-COMM.ctf, PID-COMM.2.ctf, ... (O_EXCL) */
			const char *dir = p->out_dir ? p->out_dir : e->default_dir;

			pr->fd = -EEXIST;
			for (unsigned int i = 0; pr->fd == -EEXIST && i < MP_NAME_TRIES; i++, k++) {
				trace_name(path, sizeof(path), dir, pid, comm, k, ext);
				pr->fd = trace_open_file(pr, path, false);
			}
			pr->dir_named = pr->fd >= 0;
		}
		if (pr->fd < 0) {
			snprintf(err, err_len, "Failed to create trace '%s': %s", path,
				 strerror(-pr->fd));
			pr->fd = -1;
			goto fail;
		}
		pr->path = strdup(path);
		if (!pr->path) {
			snprintf(err, err_len, "Out of memory");
			close(pr->fd);
			pr->fd = -1;
			trace_unlink(pr, path);
			goto fail;
		}
	}

	pr->w = trace_writer_new(pr);
	if (!pr->w) {
		r = -errno;
		snprintf(err, err_len, "Failed to start the trace of process %d in '%s': %s",
			 (int)pid, path, strerror(-r));
		goto fail;
	}
	/* mp_engine__start() renames its traces into place once every process is attached */
	if (!p->starting && trace_commit(pr, err, err_len) < 0)
		goto fail;
	/* Snapshot the process' mappings now, while it surely lives: its events may be
	 * processed after it exited. */
	if (e->sym) {
		mp_symbolizer__mapping(e->sym, pid, 1, &mi);
		prewarm(p, pid);
	}

	/* A pid that was a process of this profile before (pid reuse): the new one wins. */
	if (prev) {
		mp_htab__remove(&p->procs, &prev->node);
		prev->in_table = false;
	}
	if (mp_htab__insert(&p->procs, &pr->node)) {
		snprintf(err, err_len, "Out of memory");
		goto fail;
	}
	pr->in_table = true;
	watch_exit(e, pr);
	e->open_procs++;
	pr->in_list = true;
	*p->tail = pr;
	p->tail = &pr->next;
	p->nprocs++;
	p->nalive++;
	return pr;
fail:
	writer_release(e, pr->w, NULL);
	if (pr->fd >= 0)
		close(pr->fd);
	if (pr->path)
		trace_unlink(pr, pr->path);
	free(pr->path);
	free(pr->live);
	free(pr);
	return NULL;
}

struct mp_proc *proc_find(const struct mp_profile *p, pid_t pid)
{
	return (struct mp_proc *)mp_htab__find(&p->procs, (uint64_t)pid);
}

/* The process is complete: its writer is closed, its trace complete. Live entries stay
 * uncollected (live at exit). */
void proc_complete(struct mp_proc *pr)
{
	struct mp_engine *e = pr->p->e;
	int r;

	if (pr->completed)
		return;
	pr->completed = true;
	if (pr->in_list)
		e->open_procs--;
	unwatch_exit(e, pr);
	mp_entries__drain(e->entries, pr->pid, pr, NULL, NULL);
	patch_context(pr);
	r = writer_release(e, pr->w, pr);
	if (r < 0)
		trace_write_failed(pr, r);
	pr->w = NULL;
	if (pr->fd >= 0)
		close(pr->fd);
	pr->fd = -1;
	free(pr->live);
	pr->live = NULL;
}

void proc_free(struct mp_proc *pr)
{
	proc_complete(pr);
	if (pr->closing) {	/* its writer goes on alone */
		pr->closing->pr = NULL;
		/* the profile's files count as written without it: told at the next reap */
		if (!--pr->p->nclosing && pr->p->state == MP_PROFILE_DISCARDED)
			pr->p->tell_closed = true;
	}
	free(pr->detached_reason);
	mp_outfile__done(&pr->out);
	free(pr->path);
	free(pr);
}

void proc_cfg(const struct mp_profile *p, struct mp_proc_cfg *cfg)
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
void proc_release(struct mp_profile *p, pid_t pid, bool detach)
{
	struct mp_proc_cfg cfg;

	if (SRC(p->e, proc_get, pid, &cfg) == 0) {
		if (cfg.profile != p->id)
			return;
		SRC(p->e, proc_del, pid);
	}
	if (detach)
		SRC(p->e, detach, pid);
}

/*
 * Overhead control. Every MP_OVERHEAD_WINDOW_MS, each probed process' cost is estimated from
 * its probe hits in the window (BPF map "phits") times the cost of a hit the loader measured
 * at start (the source's hit_costs), as a percentage of one CPU. A process over its profile's
 * budget is detached: its probes are removed, its trace is completed (live blocks stay uncollected,
 * the context says why) and mp_proc_stats.detached_reason tells the user.
 */
void proc_detach(struct mp_proc *pr, const char *why, const char *fallback)
{
	struct mp_profile *p = pr->p;
	struct mp_proc_cfg cfg;

	pr->detached_reason = strdup(why);
	if (!pr->detached_reason)
		pr->detached_reason = strdup(fallback);
	if (!pr->detached_reason)
		return; /* overhead: try again at the next window */
	/* Probes go (their links close in the background, a while); until then BPF ignores the
	 * process' hits, and still reports its exit, when it leaves the "procs" map. */
	if (SRC(p->e, proc_get, pr->pid, &cfg) == 0 && cfg.profile == p->id) {
		cfg.flags &= ~(MP_PROC_SAMPLING | MP_PROC_FOLLOW_FORKS);
		cfg.flags |= MP_PROC_DETACHED;
		SRC(p->e, proc_set, pr->pid, &cfg);
	}
	SRC(p->e, detach, pr->pid);
	proc_complete(pr);
	profile_proc_exited(p);
}

static void overhead_detach(struct mp_proc *pr, double pct, uint64_t hits, uint64_t dt_ns)
{
	char why[256];

	snprintf(why, sizeof(why),
		 "probe overhead %.1f%% of a CPU (%" PRIu64 " probe hits in %.2f s) exceeded "
		 "the budget of %g%%", pct, hits, (double)dt_ns / 1e9,
		 pr->p->opts.max_overhead_pct);
	proc_detach(pr, why, "probe overhead exceeded the budget");
}

void check_overhead(struct mp_engine *e, uint64_t now)
{
	uint64_t window = (uint64_t)MP_OVERHEAD_WINDOW_MS * 1000000;
	uint64_t entry_ns, return_ns;
	bool any = false;

	if (!e->ovh_next_ns || now < e->ovh_next_ns)
		return;
	e->ovh_next_ns = 0;
	SRC(e, hit_costs, &entry_ns, &return_ns);
	for (struct mp_profile *p = e->profiles; p; p = p->next) {
		if (p->state == MP_PROFILE_DISCARDED)
			continue;
		for (struct mp_proc *pr = p->list; pr; pr = pr->next) {
			struct mp_proc_hits h;
			uint64_t de, dr, dt;

			if (pr->exited || pr->completed || pr->detached_reason)
				continue;
			any = true;
			if (SRC(e, proc_hits, pr->pid, &h))
				continue;
			if (!pr->win_start_ns || h.entries < pr->hits.entries ||
			    h.returns < pr->hits.returns) {
				/* first look (or the counters restarted): a window starts */
				pr->hits = h;
				pr->win_start_ns = now;
				continue;
			}
			dt = now - pr->win_start_ns;
			if (dt < window / 2)
				continue;
			de = h.entries - pr->hits.entries;
			dr = h.returns - pr->hits.returns;
			pr->overhead_pct = 100.0 * (double)(de * entry_ns + dr * return_ns) /
					   (double)dt;
			pr->hits = h;
			pr->win_start_ns = now;
			if (p->opts.max_overhead_pct > 0 &&
			    pr->overhead_pct > p->opts.max_overhead_pct)
				overhead_detach(pr, pr->overhead_pct, de + dr, dt);
		}
	}
	if (any)
		e->ovh_next_ns = now + window;
}

/* An exited process whose trace is written and whose figures say nothing a sum would lose (a
 * failed trace, a detach: those stay listed). */
static bool retirable(const struct mp_proc *pr)
{
	return pr->exited && pr->completed && !pr->closing && !pr->write_err &&
	       !pr->write_errors && !pr->stalled && !pr->detached_reason;
}

/* Add @pr's figures to the sums of retired processes @r (a process record of no process). */
static void retired_add(struct mp_proc *r, const struct mp_proc *pr)
{
	r->samples += pr->samples;
	r->nsamples += pr->nsamples;
	r->frees += pr->frees;
	r->live_nsamples += pr->live_nsamples;
	r->table_full += pr->table_full + pr->unmatched + pr->stale;	/* its drops */
	mp_est_sum__merge(&r->est, &pr->est);
	mp_est_sum__merge(&r->live_est, &pr->live_est);
}

/*
 * Keep at most mp_engine_opts.keep_exited retirable processes of @p listed: the oldest beyond
 * are added to @p's retired sums and freed, so that a profile that sees processes come and go
 * all day keeps its memory, status and manifest bounded. Their traces stay where they are.
 */
static void profile_retire(struct mp_profile *p)
{
	size_t keep = p->e->opts.keep_exited, n = 0;

	if (!keep)
		return;
	for (struct mp_proc *pr = p->list; pr; pr = pr->next)
		n += retirable(pr);
	for (struct mp_proc **pp = &p->list; *pp && n > keep;) {
		struct mp_proc *pr = *pp;

		if (!retirable(pr)) {
			pp = &pr->next;
			continue;
		}
		*pp = pr->next;
		if (p->tail == &pr->next)
			p->tail = pp;
		retired_add(&p->retired, pr);
		p->nretired++;
		if (pr->in_table)
			mp_htab__remove(&p->procs, &pr->node);
		p->nprocs--;
		proc_free(pr);
		n--;
	}
}

/* At the end of an engine step, where no caller holds a process (check_exits() does in it). */
void profiles_retire(struct mp_engine *e)
{
	for (struct mp_profile *p = e->profiles; p; p = p->next)
		if (p->retire_due) {
			p->retire_due = false;
			profile_retire(p);
		}
}

/* The figures of @first and the processes after it (@one: @first only) into @out[0..max). */
static void stats_of(struct mp_proc *first, bool one, double rate, struct mp_proc_stats *out,
		     size_t max)
{
	size_t i = 0;

	for (struct mp_proc *pr = first; pr; pr = one ? NULL : pr->next, i++) {
		struct mp_proc_stats *s;

		if (!out || i >= max)
			continue;
		s = &out[i];
		memset(s, 0, sizeof(*s));
		s->pid = pr->pid;
		memcpy(s->comm, pr->comm, sizeof(s->comm));
		s->exited = pr->exited;
		s->samples = pr->samples;
		s->nsamples = pr->nsamples;
		s->frees = pr->frees;
		s->est_alloc_bytes = mp_est_bytes(rate, &pr->est);
		s->est_live_bytes = mp_est_bytes(rate, &pr->live_est);
		s->se_alloc_bytes = mp_est_se_bytes(rate, &pr->est);
		s->se_live_bytes = mp_est_se_bytes(rate, &pr->live_est);
		s->drops = pr->table_full + pr->unmatched + pr->stale + pr->write_errors +
			   pr->stalled;
		s->trace_path = pr->path;
		s->write_errors = pr->write_errors;
		s->stalled = pr->stalled;
		s->stalled_us = pr->stalled_us;
		s->write_errno = pr->write_err;
		s->write_error_us = pr->write_err_us;
		if (!s->write_errno && pr->w)	/* the file failed; no event has met it yet */
			s->write_errno = mp_writer__output_error(pr->w, &s->write_error_us, NULL);
		s->trace_done = pr->completed && !pr->closing;
		s->live_nsamples = pr->live_nsamples;
		s->truncated_stacks = pr->truncated;
		s->exec_collects = pr->exec_collects;
		s->unmatched_frees = pr->unmatched;
		s->probe_hits = pr->hits.entries + pr->hits.returns;
		s->overhead_pct = pr->overhead_pct;
		s->detached_reason = pr->detached_reason;
		s->dwarf_stacks = pr->dwarf_stacks;
		s->window_cut_stacks = pr->window_cut;
		s->unwind_fallbacks = pr->unwind_fallbacks;
		s->image_gone_stacks = pr->image_gone;
		if (!pr->exited && !pr->completed)
			proc_update_mode(pr);
		s->mode = pr->mode;
		s->preload_samples = pr->pl_stats[MEMPROF_PRELOAD_STAT_SAMPLES];
		s->preload_lost = pr->pl_stats[MEMPROF_PRELOAD_STAT_TABLE_FULL] +
				  pr->pl_stats[MEMPROF_PRELOAD_STAT_STALE] +
				  pr->pl_stats[MEMPROF_PRELOAD_STAT_REALLOC_LOST];
	}
}

size_t mp_profile__retired(const struct mp_profile *p, struct mp_proc_stats *out)
{
	stats_of((struct mp_proc *)&p->retired, true, p->opts.rate, out, 1);
	return p->nretired;
}

size_t mp_profile__procs(const struct mp_profile *p, struct mp_proc_stats *out, size_t max)
{
	stats_of(p->list, false, p->opts.rate, out, max);
	return p->nprocs;
}
