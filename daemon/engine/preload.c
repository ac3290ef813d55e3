// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The engine's intake from libmemprof-preload processes: their batches of samples and frees,
 * and their queues read when they go idle or exit.
 */
#include <stdlib.h>

#include "daemon/engine/engine_int.h"

static void batch_alloc(void *ctx, const struct mp_alloc_event *ev)
{
	alloc_event(ctx, ev, NULL);
}

static void batch_frees(void *ctx, const struct mp_free_batch_event *ev, size_t size)
{
	on_free_batch(ctx, ev, size);
}

const struct mp_preload_batch_ops engine_batch_ops = {
	.alloc = batch_alloc,
	.frees = batch_frees,
};

/*
 * Deferred preload reports wait in the process until its next sample or free; a process that
 * goes idle would keep its last samples (and, in either mode, its last frees) from the profile
 * indefinitely. Every MP_PULL_NS, the queue of each preload-mode process that left it untouched
 * since the previous look is copied without a trap (the source's preload_pull) and handled as if it
 * had been sent; when the library sends it later, the engine ignores what it saw already.
 */
#define MP_PULL_NS	200000000ull
#define MP_PULL_BUF	(sizeof(struct mp_preload_batch_event) + MP_PL_QUEUE_SIZE)

/* Take @pid's queue (the source's preload_pull; @last: held at its exit) and handle it. */
static void pull_queue(struct mp_engine *e, pid_t pid, bool last)
{
	int n;

	if (!e->pull_buf && !(e->pull_buf = malloc(MP_PULL_BUF)))
		return;
	n = SRC(e, preload_pull, pid, e->pull_buf, MP_PULL_BUF, last);
	if (n > 0 &&
	    mp_preload_batch__expand(e->pull_buf, (size_t)n, &engine_batch_ops, e, &e->batches))
		e->drops[MP_DROP_MALFORMED]++;
}

void pull_idle_queues(struct mp_engine *e, uint64_t now)
{
	if (now < e->pull_next_ns)
		return;
	e->pull_next_ns = now + MP_PULL_NS;
	for (struct mp_profile *p = e->profiles; p; p = p->next) {
		if (p->state == MP_PROFILE_DISCARDED)
			continue;
		for (struct mp_proc *pr = p->list; pr; pr = pr->next) {
			if (pr->exited || pr->completed)
				continue;
			/* the same pid in a second profile finds the queue taken */
			pull_queue(e, pr->pid, false);
		}
	}
}

void mp_engine__exiting(struct mp_engine *e, pid_t pid)
{
	for (struct mp_profile *p = e->profiles; p; p = p->next) {
		struct mp_proc *pr = proc_find(p, pid);

		if (pr && !pr->completed && pr->mode == MP_PROC_MODE_PRELOAD) {
			proc_update_mode(pr);
			/* killed (no destructor, no _exit): what the library still queues */
			pull_queue(e, pid, true);
		}
	}
}
