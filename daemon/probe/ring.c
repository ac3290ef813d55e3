// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The ring buffer: each record is looked at before it is handed on (a followed child probed on
 * FORK, new objects on EXEC and MAP, a process' probes and sampled entries dropped on EXIT),
 * within the budget of mp_bpf__consume_max().
 */
#include <errno.h>
#include <string.h>

#include "daemon/probe/loader_internal.h"

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000 + (uint64_t)ts.tv_nsec;
}

int rb_event(void *ctx, void *data, size_t size)
{
	struct mp_bpf *b = ctx;
	const struct mp_event_hdr *h = data;
	const struct mp_proc_event *pe = data;
	struct target *t;
	char why[256];
	int err;

	if (size < sizeof(*h))
		return 0;
	switch (h->type) {
	case MP_EV_ALLOC:
		t = target_find(b, h->pid);
		if (t)
			t->live++;
		break;
	case MP_EV_FREE:
		t = target_find(b, h->pid);
		if (t && t->live)
			t->live--;
		break;
	case MP_EV_FORK:
		if (size < sizeof(*pe))
			break;
		/* The child is in "procs" (BPF put it there): probe it now. */
		err = mp_bpf__attach(b, pe->other_pid, why, sizeof(why));
		if (err < 0 && err != -ESRCH) {
			b->counters.auto_attach_errors++;
			logf_(b, 4, "Failed to attach to forked child %u of %u: %s", pe->other_pid,
			      h->pid, err == -ENOENT ? why : strerror(-err));
		}
		break;
	case MP_EV_EXEC:
		t = target_find(b, h->pid);
		if (t && t->live) {
			sampled_purge(b, h->pid, h->time_ns);
			t->live = 0;
		}
		if (t) {
			/* The new image may (not) map libmemprof-preload, which ld.so maps after
			 * exec: decide now and at its next two rendezvous (RT_ADD, RT_CONSISTENT). */
			t->pl_recheck = true;
			t->pl_pending = 2;
		}
		err = mp_bpf__attach(b, h->pid, why, sizeof(why));
		if (err < 0 && err != -ESRCH && err != -ENOENT) {
			b->counters.auto_attach_errors++;
			logf_(b, 4, "Failed to attach to %u after exec: %s", h->pid, strerror(-err));
		}
		break;
	case MP_EV_MAP:
		/* only for processes probed already (the engine decides who is) */
		t = target_find(b, h->pid);
		if (!t)
			return 0;
		if (t->pl_pending) {
			t->pl_pending--;
			t->pl_recheck = true;
		}
		err = mp_bpf__attach(b, h->pid, why, sizeof(why));
		if (err < 0 && err != -ESRCH && err != -ENOENT) {
			b->counters.auto_attach_errors++;
			logf_(b, 4, "Failed to attach to objects newly mapped by %u: %s", h->pid,
			      strerror(-err));
		}
		break;	/* the engine snapshots the new mappings */
	case MP_EV_EXIT:
		t = target_find(b, h->pid);
		if (t && t->live)
			sampled_purge(b, h->pid, h->time_ns);
		mp_bpf__detach(b, h->pid);
		break;
	default:
		break;
	}
	err = b->fn ? b->fn(b->ctx, data, size) : 0;
	if (h->type == MP_EV_EXIT) /* after the callback, which may read the final count */
		mp_bpf__proc_hits_del(b, h->pid);
	if (err || !b->budget)
		return err;
	/* Lifecycle records cost up to milliseconds (attaching probes): look at the clock after
	 * each of them, and after every 256 others. */
	if (!--b->budget || ((h->type == MP_EV_FORK || h->type == MP_EV_EXEC || h->type == MP_EV_MAP ||
			      h->type == MP_EV_EXIT || !(b->budget & 255)) && mono_ns() >= b->until_ns)) {
		/* libbpf consumed this record already: it stops here, the rest stays queued */
		b->budget_spent = true;
		return -EAGAIN;
	}
	return 0;
}

int mp_bpf__fd(const struct mp_bpf *b)
{
	return ring_buffer__epoll_fd(b->rb);
}

/* Everything pending now: the ring holds at most this many records (a header of 8 bytes and
 * a record of at least struct mp_event_hdr), so a drain ends even while its producers (the
 * caller's own allocations, if it were profiled) keep filling it. */
int mp_bpf__consume(struct mp_bpf *b)
{
	return mp_bpf__consume_max(b, MP_RINGBUF_SIZE / (8 + sizeof(struct mp_event_hdr)), 0);
}

int mp_bpf__consume_max(struct mp_bpf *b, unsigned int max, uint64_t max_ns)
{
	int n;

	b->budget = max;
	b->until_ns = max_ns ? mono_ns() + max_ns : UINT64_MAX;
	b->budget_spent = false;
	n = ring_buffer__consume(b->rb);
	b->budget = 0;
	return b->budget_spent ? 1 : n;
}
