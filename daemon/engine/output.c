// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The engine's trace files: where a process' trace is written, its trace-info and context,
 * write failures, and the writers still finishing completed traces.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "userspace-lib/codec/writer_async.h"
#include "daemon/engine/engine_int.h"

static void build_context(const struct mp_proc *pr, char *buf, size_t len)
{
	const struct mp_profile *p = pr->p;

	snprintf(buf, len,
		 "memprofd profile=%" PRIu32 " pid=%d comm=%s rate=%g callstack_size=%u "
		 "(deeper stacks keep their innermost frames) unwind=%s stack_copy=%d "
		 "sizes=words(ceil(bytes/8)) source=External threads=merged mode=%s%s%-*s",
		 p->id, (int)pr->pid, pr->comm, p->opts.rate, p->opts.callstack_size,
		 mp_unwind__name(p->opts.unwind),
		 p->opts.stack_copy_size > 0 ? p->opts.stack_copy_size : 0,
		 mp_proc_mode__name(pr->mode),
		 MP_CTX_DROPS_MARK, MP_CTX_DROPS_WIDTH,
		 /* a compressed stream cannot be patched in place */
		 p->opts.zstd_level > 0 ? "not recorded in compressed traces" :
					  MP_CTX_DROPS_PENDING);
}

static void final_drops(const struct mp_proc *pr, char *buf, size_t len)
{
	const struct mp_profile *p = pr->p;
	uint64_t now[MP_STAT__MAX] = { 0 }, d[MP_STAT__MAX] = { 0 };

	if (SRC(p->e, stats, now) >= 0)
		for (int i = 0; i < MP_STAT__MAX; i++)
			d[i] = now[i] - p->bpf_base[i];
	snprintf(buf, len,
		 "table_full=%" PRIu64 " unmatched_frees=%" PRIu64 " stale_blocks=%" PRIu64
		 " write_errors=%" PRIu64 " stalled_output=%" PRIu64 " truncated_stacks=%" PRIu64
		 " window_cut_stacks=%" PRIu64 " image_gone_stacks=%"
		 PRIu64 " exec_collects=%" PRIu64 "; all processes: ringbuf=%" PRIu64
		 " bpf_table=%" PRIu64 " missed_returns=%" PRIu64 " stack_errors=%" PRIu64
		 " ustack_lost=%" PRIu64 " bpf_procs_full=%" PRIu64,
		 pr->table_full, pr->unmatched, pr->stale, pr->write_errors, pr->stalled,
		 pr->truncated, pr->window_cut, pr->image_gone, pr->exec_collects,
		 d[MP_STAT_RINGBUF_DROPS],
		 d[MP_STAT_TABLE_DROPS], d[MP_STAT_MISSED_RETURNS], d[MP_STAT_STACK_ERRORS],
		 d[MP_STAT_USTACK_LOST], d[MP_STAT_PROCS_FULL]);
	if (pr->detached_reason && strlen(buf) + 1 < len)
		snprintf(buf + strlen(buf), len - strlen(buf), "; detached before exit: %s",
			 pr->detached_reason);
}

/*
 * A write into @pr's trace failed with @err (-errno): counted, the first error kept with its
 * time. -EAGAIN is an output that does not keep up (its queue is full): the event is not in
 * the trace, which stays whole, and counts as stalled.
 */
void trace_write_failed(struct mp_proc *pr, int err)
{
	if (err == -EAGAIN) {
		if (!pr->stalled++)
			pr->stalled_us = now_epoch_us();
		pr->p->e->drops[MP_DROP_STALLED]++;
		return;
	}
	if (!pr->write_err) {
		uint64_t since = 0;

		pr->write_err = err < 0 ? -err : EIO;
		/* the writer's thread saw it first, when it is the file's own error */
		if (!pr->w || mp_writer__output_error(pr->w, &since, NULL) != pr->write_err ||
		    !since)
			since = now_epoch_us();
		pr->write_err_us = since;
	}
	pr->write_errors++;
	pr->p->e->drops[MP_DROP_WRITE]++;
}

/*
 * The trace-info packet is written first, so the final drop counts cannot be known then: the
 * context ends in a fixed-width field that completion overwrites in place with the counts
 * (same length, so the packet stays valid). Plain traces on regular files only: the writer
 * does it after the last packet (on its thread for an asynchronous output).
 */
void patch_context(struct mp_proc *pr)
{
	char new[MP_CTX_DROPS_WIDTH + 1];
	int r;

	if (!pr->w || pr->p->opts.zstd_level > 0)
		return;
	final_drops(pr, new, sizeof(new));
	snprintf(new + strlen(new), sizeof(new) - strlen(new), "%-*s",
		 (int)(MP_CTX_DROPS_WIDTH - strlen(new)), "");
	r = mp_writer__patch_context_tail(pr->w, new, MP_CTX_DROPS_WIDTH);
	if (r < 0 && r != -ENOTSUP)
		trace_write_failed(pr, r);
}

/* What @fd is, for a message: its path as /proc shows it. */
const char *fd_name(int fd, char *buf, size_t len)
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

/* Undo @pr's file: what trace_open_file() made goes (never a device, or a file it replaces). */
void trace_unlink(struct mp_proc *pr, const char *path)
{
	if (pr->out.tmp)
		unlink(pr->out.tmp);
	else if (pr->own_file)
		unlink(path);
	pr->own_file = false;
	mp_outfile__done(&pr->out);
}

/* @pr's file takes the name the user gave it (a file there until now is replaced). */
int trace_commit(struct mp_proc *pr, char *err, size_t err_len)
{
	int r = mp_outfile__commit(&pr->out);

	if (r < 0) {
		pr->own_file = false;	/* the new file is gone, the old one left */
		snprintf(err, err_len, "Failed to rename the trace into '%s': %s", pr->path,
			 strerror(-r));
	}
	return r;
}

/*
 * The trace file of @pr at @path. In a directory of traces (the service's own, or record's
 * default) it is a new file (O_EXCL: -EEXIST when the name is taken), readable by its owner
 * only; a path the user named (-o) goes through mp_outfile: a file already there is replaced
 * only at trace_commit(), a device or FIFO is written as it is and never removed.
 */
int trace_open_file(struct mp_proc *pr, const char *path, bool user_named)
{
	struct mp_profile *p = pr->p;
	int fd, err;

	if (user_named) {
		err = mp_outfile__open(&pr->out, path, true, 0644);
		if (err)
			return err;
		fd = pr->out.fd;
		pr->own_file = pr->out.tmp || pr->out.created;
	} else {
		fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, MP_TRACE_MODE);
		if (fd < 0)
			return -errno;
		pr->own_file = true;
	}
	if (geteuid() == 0 && (p->opts.owner_uid || p->opts.owner_gid) &&
	    fchown(fd, p->opts.owner_uid, p->opts.owner_gid)) {
		err = -errno;
		close(fd);
		if (user_named)
			pr->out.fd = -1;
		trace_unlink(pr, path);
		return err;
	}
	return fd;
}

/*
 * Complete @w's file without waiting for it: its thread finishes the file; a writer not done
 * yet is kept in the engine's closing list (for @pr, or none) and closed by reap_outputs().
 * Returns the writer's error, or 0.
 */
int writer_release(struct mp_engine *e, struct memprof_writer *w, struct mp_proc *pr)
{
	struct mp_closing *c;
	int r;

	if (!w)
		return 0;
	r = mp_writer__finish(w);
	if (!mp_writer__done(w) && (c = calloc(1, sizeof(*c)))) {
		c->w = w;
		c->pr = pr;
		c->next = e->closing;
		e->closing = c;
		if (pr) {
			pr->closing = c;
			pr->p->nclosing++;
		}
		return r;
	}
	/* done (or out of memory: then waiting is all there is) */
	return memprof_writer__close(w) ?: r;
}

/* Close the writers that finished their files; a profile whose last one did is told. */
void reap_outputs(struct mp_engine *e)
{
	bool told = false;

	if (e->reaping)	/* from a state callback of the loop below */
		return;
	e->reaping = true;
	for (struct mp_closing **cp = &e->closing; *cp;) {
		struct mp_closing *c = *cp;
		struct mp_proc *pr = c->pr;
		uint64_t since;
		int r;

		if (!mp_writer__done(c->w)) {
			cp = &c->next;
			continue;
		}
		*cp = c->next;
		mp_writer__output_error(c->w, &since, NULL);
		r = memprof_writer__close(c->w);
		if (pr && r < 0) {
			if (!pr->write_err) {	/* the time the file failed, not now */
				pr->write_err = -r;
				pr->write_err_us = since ? since : now_epoch_us();
			}
			trace_write_failed(pr, r);
		}
		if (pr) {
			pr->closing = NULL;
			pr->p->retire_due = true;
			/* only a discarded profile waits for its files (its reply, its manifest's
			 * "complete"); telling a running one at each exit rewrote its manifest per
			 * exited process, O(processes) each time */
			if (!--pr->p->nclosing && pr->p->state == MP_PROFILE_DISCARDED)
				pr->p->tell_closed = true;
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

/* The trace-info of @pr: the process' image now. @exe and @ctx are the caller's buffers. */
static void trace_info(struct mp_proc *pr, struct memprof_trace_info *info, char *exe,
		       size_t exe_len, char *ctx, size_t ctx_len)
{
	struct mp_profile *p = pr->p;
	char path[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pr->pid);
	n = readlink(path, exe, exe_len - 1);
	if (n > 0)
		exe[n] = '\0';
	else
		snprintf(exe, exe_len, "%s", pr->comm);
	build_context(pr, ctx, ctx_len);
	*info = (struct memprof_trace_info){ 0 };
	info->sample_rate = p->opts.rate;
	info->word_size = 64;
	info->executable_name = exe;
	info->host_name = p->e->hostname;
	info->runtime_params = "memprofd " MP_ENGINE_VERSION;
	info->pid = (uint64_t)pr->pid;
	info->start_time_us = now_epoch_us();
	info->context = ctx;
}

/*
 * A writer on @pr's file, its trace-info packet written (queued, for an asynchronous output).
 * The writer owns the fd from now on, also on failure (pr->fd is -1 afterwards). NULL + errno.
 */
struct memprof_writer *trace_writer_new(struct mp_proc *pr)
{
	struct mp_profile *p = pr->p;
	struct memprof_trace_info info;
	struct memprof_writer_opts wo = { .sz = sizeof(wo) };
	char exe[4096], ctx[1024];
	int fd = pr->fd;

	trace_info(pr, &info, exe, sizeof(exe), ctx, sizeof(ctx));
	wo.version = p->opts.format_version;
	wo.zstd_level = p->opts.zstd_level;
	wo.real_verifier = 1;
	pr->fd = -1;
	return mp_writer__new_async(fd, p->e->opts.output_queue_bytes, &info, &wo);
}

/*
 * @pr's process exec'd before anything of it was written (a fork child that execs at once, as a
 * shell's do): its trace starts over, named after the new image, instead of keeping the
 * name it had at fork. Only a regular file can start over; a failure completes the trace.
 */
void trace_restart_at_exec(struct mp_proc *pr)
{
	struct memprof_trace_info info;
	char exe[4096], ctx[1024];
	int r;

	if (pr->completed || !pr->w || pr->samples || pr->frees || pr->unmatched ||
	    pr->write_errors || pr->stalled)
		return;
	trace_info(pr, &info, exe, sizeof(exe), ctx, sizeof(ctx));
	r = mp_writer__reset(pr->w, &info);
	if (r < 0 && r != -ENOTSUP && r != -EBUSY) {
		trace_write_failed(pr, r);
		proc_complete(pr);
	} else if (r >= 0) {
		proc_rename_for_image(pr);	/* the file too is the new image's */
	}
}

size_t mp_profile__write_failures(const struct mp_profile *p,
				  void (*fn)(void *ctx, const char *msg), void *ctx)
{
	char msg[4096 + 256];	/* proc_new()'s paths are at most 4096 */
	size_t n = 0;

	for (const struct mp_proc *pr = p->list; pr; pr = pr->next) {
		const char *where = pr->path ? pr->path : "the caller's file";

		if (pr->write_errors)
			snprintf(msg, sizeof(msg), "Failed to write the trace of %s (pid %d) to "
				 "'%s': %s; %" PRIu64 " writes lost, the trace is incomplete",
				 pr->comm, (int)pr->pid, where,
				 strerror(pr->write_err ? pr->write_err : EIO), pr->write_errors);
		else if (pr->stalled)
			snprintf(msg, sizeof(msg), "The output of the trace of %s (pid %d), "
				 "'%s', did not keep up: %" PRIu64 " events were not written",
				 pr->comm, (int)pr->pid, where, pr->stalled);
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

	for (struct mp_proc *pr = p->list; pr; pr = pr->next) {
		time_t sec;
		struct tm tm;

		if (!pr->write_err || pr->write_err_told)
			continue;
		pr->write_err_told = true;
		sec = (time_t)(pr->write_err_us / 1000000);
		localtime_r(&sec, &tm);
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
		snprintf(msg, sizeof(msg), "Failed to write the trace of %s (pid %d) to '%s' since "
			 "%s: %s; the trace ends there", pr->comm, (int)pr->pid,
			 pr->path ? pr->path : "the caller's file", when, strerror(pr->write_err));
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
			 "completed: its output is stuck", c->pr ? c->pr->comm : "?",
			 c->pr ? (int)c->pr->pid : 0,
			 c->pr && c->pr->path ? c->pr->path : "the caller's file");
		fn(ctx, msg);
	}
	return n;
}
