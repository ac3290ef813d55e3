// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The engine's event routing: each ring record (alloc, free, fork, exec, map, exit) to its
 * profile and process; joins and new cgroups go to targets.c.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "daemon/stacks/unwind.h"
#include "daemon/engine/engine_int.h"

static void collect(struct mp_proc *pr, uint64_t time_us, struct mp_entry *en)
{
	int r;

	if (en->id == MP_ENTRY_ID_UNWRITTEN)	/* its alloc was lost (counted then) */
		return;
	if (!pr->completed && (r = memprof_writer__collect(pr->w, time_us, en->id)) < 0)
		trace_write_failed(pr, r);
	pr->frees++;
	pr->live_nsamples -= en->nsamples;
	mp_est_sum__add(&pr->live_est, -(double)en->nsamples, mp_est_weight(en->len));
	if (!pr->live_nsamples)	/* exactly nothing live, not a rounding residue */
		pr->live_est = (struct mp_est_sum){ 0, 0 };
}

/* @en's block was freed at @time_us: collect it in its owner's trace and forget it. */
static void collect_remove(struct mp_engine *e, uint64_t time_us, struct mp_entry *en)
{
	collect(mp_entries__owner(e->entries, en), time_us, en);
	mp_entries__remove(e->entries, en);
}

/*
 * Whether @ev's image is gone: it was taken before an exec that had happened by the time the
 * engine read it (a lagging engine), so the maps snapshot shows the new image, where its
 * addresses (and its stack copy's CFI) mean nothing. Its block still counts; its frames are
 * left out rather than named after code that was not there.
 *
 * @pr remembers the last image found to be the snapshot's (or not knowable) with the snapshot's
 * generation: while both hold, an event costs one lookup without I/O (a process whose maps
 * cannot be read is not read again for each event).
 */
static bool image_gone(struct mp_engine *e, struct mp_proc *pr, const struct mp_alloc_event *ev)
{
	if (!ev->start_stack || !e->sym)
		return false;
	if (ev->start_stack == pr->image_seen &&
	    mp_symbolizer__generation(e->sym, pr->pid) == pr->image_gen)
		return false;
	if (!mp_symbolizer__image_is(e->sym, pr->pid, ev->start_stack, ev->h.time_ns))
		return true;
	pr->image_seen = ev->start_stack;
	pr->image_gen = mp_symbolizer__generation(e->sym, pr->pid);
	return false;
}

static void on_alloc(struct mp_engine *e, const struct mp_alloc_event *ev,
		     const struct mp_ustack *us)
{
	struct mp_profile *p = profile_by_id(e, ev->h.profile);
	uint64_t bt[MP_MAX_STACK], dw[MP_MAX_STACK], time_us, n, id, len = (ev->size + 7) / 8;
	const uint64_t *frames;
	unsigned int nfr, k = 0;
	struct mp_proc *pr;
	struct mp_entry *en;
	int r;

	if (!p || p->state == MP_PROFILE_DISCARDED) {
		e->drops[MP_DROP_NO_PROFILE]++;
		return;
	}
	/* Stopped: what was sampled before the stop still counts, nothing after. */
	if (p->state == MP_PROFILE_STOPPED && ev->h.time_ns > p->stop_ns)
		return;
	pr = proc_find(p, (pid_t)ev->h.pid);
	if (!pr || pr->completed) {
		/* A process detached over its budget: its probes' last hits, in flight when BPF
		 * was told to ignore it, are not a loss (its trace says it was detached). */
		if (!pr || !pr->detached_reason)
			e->drops[MP_DROP_NO_PROFILE]++;
		return;
	}
	time_us = mp_ktime_to_epoch_us(ev->h.time_ns);

	en = mp_entries__find(e->entries, pr->pid, ev->addr);
	/* A preload id is never handed out twice: this sample was taken already from the
	 * process' queue (pull_idle_queues), and is now reported by the library itself. */
	if (en && (ev->kind & MP_KIND_F_PRELOAD))
		return;
	if (en) {
		/* The allocator handed out a tracked address again: its free was lost. */
		struct mp_proc *owner = mp_entries__owner(e->entries, en);

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

	if (image_gone(e, pr, ev)) {
		nfr = 0;
		pr->image_gone++;
		e->sst.image_gone++;
	} else {
		nfr = stack_select(e, pr, ev, us, dw, &frames);
	}
	/* BPF and the unwinder give innermost first; memtrace wants outermost first. The
	 * frames the previous backtrace had at the same place are defined already. */
	for (unsigned int i = nfr; i-- > 0;) {
		uint64_t a = frames[i];

		if (!a || a >= (1ull << 62))
			continue;
		if ((k >= pr->live->prev_len || pr->live->prev_bt[k] != a) &&
		    define_location(pr, a) < 0)
			continue;
		bt[k++] = a;
	}
	memcpy(pr->live->prev_bt, bt, k * sizeof(bt[0]));
	pr->live->prev_len = k;

	en = mp_entries__insert(e->entries, pr->pid, (pid_t)ev->h.tid, ev->addr);
	if (!en) {
		/* Untracked, its free could not be matched: leave it out of the trace rather
		 * than show it live forever. */
		pr->table_full++;
		e->drops[MP_DROP_TABLE_FULL]++;
		return;
	}
	r = memprof_writer__alloc(pr->w, time_us, len, n, MEMPROF_SOURCE_EXTERNAL, bt, k, &id);
	if (r < 0) {
		trace_write_failed(pr, r);
		/* not in the trace: its free is neither written nor an unmatched free */
		if (mp_entries__set(e->entries, en, pr, MP_ENTRY_ID_UNWRITTEN, n))
			mp_entries__remove(e->entries, en);
		return;
	}
	if (mp_entries__set(e->entries, en, pr, id, n)) {
		/* Cannot be tracked (a multiplicity or id beyond the entry's fields, too many
		 * processes of one pid): collected at once rather than shown live forever. */
		r = memprof_writer__collect(pr->w, time_us, id);
		if (r < 0)
			trace_write_failed(pr, r);
		mp_entries__remove(e->entries, en);
		pr->table_full++;
		e->drops[MP_DROP_TABLE_FULL]++;
		return;
	}
	pr->samples++;
	pr->nsamples += n;
	pr->live_nsamples += n;
	/* live blocks weigh in at their length as the entry keeps it (clamped), so that their
	 * frees take off exactly what they added */
	en->len = len < MP_ENTRY_LEN_MAX ? len : MP_ENTRY_LEN_MAX;
	mp_est_sum__add(&pr->est, (double)n, mp_est_weight(len));
	mp_est_sum__add(&pr->live_est, (double)n, mp_est_weight(en->len));
	/* the library's counters, read now and then while the process lives */
	if (pr->mode == MP_PROC_MODE_PRELOAD && !(pr->samples & 255))
		proc_update_mode(pr);
}

static void on_free(struct mp_engine *e, const struct mp_free_event *ev)
{
	struct mp_entry *en = mp_entries__find(e->entries, (pid_t)ev->h.pid, ev->addr);
	struct mp_proc *pr;

	if (!en) {
		struct mp_profile *p = profile_by_id(e, ev->h.profile);

		/* libmemprof-preload reports frees of blocks sampled under an older generation
		 * or inherited across fork: not ours, not a loss */
		if (ev->kind & MP_KIND_F_PRELOAD)
			return;
		pr = p ? proc_find(p, (pid_t)ev->h.pid) : NULL;
		if (pr && pr->completed && pr->detached_reason)
			return;	/* detached: its entries went with its trace (on_alloc) */
		e->drops[MP_DROP_UNMATCHED_FREE]++;
		if (pr)
			pr->unmatched++;
		return;
	}
	collect_remove(e, mp_ktime_to_epoch_us(ev->h.time_ns), en);
}

/*
 * libmemprof-preload frees, by block id (the key its alloc records were entered under). Ids
 * the engine does not track (sampled under an older generation, inherited across fork) are
 * not ours, not a loss.
 */
void on_free_batch(struct mp_engine *e, const struct mp_free_batch_event *ev, size_t size)
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
	struct mp_proc *pr;
	char err[256];

	if (!p || p->state == MP_PROFILE_DISCARDED || p->opts.no_follow_forks || !child)
		return;
	pr = proc_find(p, child);
	if (pr && !pr->completed)
		return;
	pr = NULL;
	if (e->open_procs < e->max_procs)
		pr = proc_new(p, child, ev->comm, err, sizeof(err));
	if (!pr) {
		/* Not followed: BPF forgets it rather than sample into nothing. */
		e->drops[MP_DROP_PROCS_FULL]++;
		SRC(e, proc_del, child);
		return;
	}
	proc_cfg(p, &cfg);
	SRC(e, proc_set, child, &cfg);
	/* Probes are per process: the child needs its own. */
	SRC(e, attach, child, NULL, 0);
}

struct exec_collect_ctx {
	struct mp_engine *e;
	uint64_t time_us;
};

static void exec_collect_cb(void *ctx, struct mp_entry *en)
{
	struct exec_collect_ctx *c = ctx;
	struct mp_proc *pr = mp_entries__owner(c->e->entries, en);

	if (!pr)
		return;
	collect(pr, c->time_us, en);
	pr->exec_collects++;
}

/* Is @pid a process of a profile that still writes its trace? */
static bool maps_followed(const struct mp_engine *e, pid_t pid)
{
	for (struct mp_profile *p = e->profiles; p; p = p->next) {
		struct mp_proc *pr = proc_find(p, pid);

		if (pr && !pr->completed)
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
void maps_changed(struct mp_engine *e, pid_t pid)
{
	/* re-read while it lives; a process gone by now keeps the snapshot it had (the events
	 * still queued behind this one are resolved against it) */
	if (e->sym)
		mp_symbolizer__snapshot(e->sym, pid);
}

/*
 * ptrace's rule at exec: a profile whose owner is not root keeps a process only if the owner
 * may still profile it (same credentials, dumpable), and never into an image that raised its
 * privileges (@secure: BPF stopped sampling it at the exec already, so none of its samples are
 * in the ring). Otherwise its trace is completed and its probes go.
 */
static void exec_check(struct mp_engine *e, pid_t pid, bool secure)
{
	for (struct mp_profile *p = e->profiles; p; p = p->next) {
		struct mp_proc *pr = proc_find(p, pid);
		char why[512] = "";
		int r = 0;

		if (!pr || pr->completed || pr->detached_reason ||
		    p->state == MP_PROFILE_DISCARDED || !p->opts.owner_uid)
			continue;
		if (e->opts.exec_check)
			r = e->opts.exec_check(e->opts.exec_check_ctx, pid, p->opts.owner_uid,
					       p->opts.owner_gid, secure, why, sizeof(why));
		else if (secure)
			r = -EPERM;
		if (r >= 0)
			continue;
		if (!why[0])
			snprintf(why, sizeof(why), "process %d exec'd a program with more "
				 "privileges (set-id or file capabilities)", (int)pid);
		proc_detach(pr, why, "exec'd a program its profile's owner may not profile");
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
	/* the new image's name, for summaries (not the trace's): the kernel's, at the exec */
	if (ev->comm[0])
		snprintf(comm, sizeof(comm), "%.15s", ev->comm);
	else
		read_comm(pid, comm);
	for (struct mp_profile *p = e->profiles; p; p = p->next) {
		struct mp_proc *pr = proc_find(p, pid);

		if (pr && pr->live) {	/* another image: other code at those addresses */
			memset(pr->live->fp_ok, 0, sizeof(pr->live->fp_ok));
			pr->live->prev_len = 0;
		}
		if (pr) {
			if (strcmp(comm, "?"))
				memcpy(pr->comm, comm, sizeof(pr->comm));
			trace_restart_at_exec(pr);
		}
		if (pr && !pr->completed && p->state == MP_PROFILE_SAMPLING)
			attach = true;
	}
	if (attach)
		SRC(e, attach, pid, NULL, 0);
	else if (!maps_followed(e, pid))
		targets_exec_unheld(e, ev);
	/* the new image may (not) map libmemprof-preload: the loader decided again */
	for (struct mp_profile *p = e->profiles; p; p = p->next) {
		struct mp_proc *pr = proc_find(p, pid);

		if (pr && !pr->completed)
			proc_update_mode(pr);
	}
	arm_timer(e);	/* the flush */
}

int proc_gone(struct mp_engine *e, pid_t pid)
{
	int found = 0;

	for (struct mp_profile *p = e->profiles; p; p = p->next) {
		struct mp_proc *pr = proc_find(p, pid);

		if (!pr || pr->exited)
			continue;
		found = 1;
		pr->exited = true;
		if (!pr->detached_reason) { /* final count (the loader drops it next) */
			struct mp_proc_hits h;

			if (!SRC(e, proc_hits, pid, &h) && h.entries >= pr->hits.entries &&
			    h.returns >= pr->hits.returns)
				pr->hits = h;
		}
		proc_complete(pr);
		if (p->state != MP_PROFILE_DISCARDED)
			proc_release(p, pid, false);
		if (!pr->detached_reason) /* a detached process left nalive then */
			profile_proc_exited(p);
		p->retire_due = true;	/* profiles_retire(), when no process is held */
	}
	mp_entries__drain(e->entries, pid, NULL, NULL, NULL);
	mp_unwinder__forget(e->unw, pid);
	if (e->sym)
		mp_symbolizer__forget(e->sym, pid);
	return found;
}

void alloc_event(struct mp_engine *e, const struct mp_alloc_event *ev,
			const struct mp_ustack *us)
{
	/* clock reads cost as much as the rest of an event: time one in 16 */
	uint64_t t0 = e->sst.events & 15 ? 0 : now_mono_ns();

	on_alloc(e, ev, us);
	e->sst.events++;
	if (t0)
		e->sst.event_ns += 16 * (now_mono_ns() - t0);
}

int on_event(void *ctx, const void *data, size_t size)
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
		if (mp_preload_batch__expand(data, size, &engine_batch_ops, e, &e->batches))
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
	case MP_EV_EXEC:
	case MP_EV_JOIN:
		if (size < sizeof(struct mp_proc_event))
			break;
		if (h->type == MP_EV_FORK)
			on_fork(e, data);
		else if (h->type == MP_EV_EXEC)
			on_exec(e, data);
		else
			on_join(e, data);
		break;
	case MP_EV_CGROUP_NEW:
		on_cgroup_new(e);
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

int mp_engine__feed(struct mp_engine *e, const void *rec, size_t size)
{
	return on_event(e, rec, size);
}
