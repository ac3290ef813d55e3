// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Destroying links off the caller's thread: closing a uprobe perf event waits for RCU grace
 * periods, so a detached process' links go to a background thread (the reaper), which closes
 * them from many threads at once so that their closes share grace periods.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/probe/loader_internal.h"

void plink_destroy(struct plink *p)
{
	if (p->l)
		bpf_link__destroy(p->l);
	else if (p->fd >= 0)
		close(p->fd);
}

#define MAX_CLOSERS	32

struct closer {
	struct plink *links;
	size_t n, first, step;
};

static void *closer_run(void *arg)
{
	struct closer *c = arg;

	for (size_t i = c->first; i < c->n; i += c->step)
		plink_destroy(&c->links[i]);
	return NULL;
}

/*
 * Destroy @n links. Closing a uprobe perf event waits for an RCU-tasks-trace and an SRCU grace
 * period (~0.2 s each on 6.18), one close after the other: 60 probes took 13 s serially. Closes
 * from concurrent threads share grace periods, so the links are destroyed by up to 32 threads.
 */
void links_destroy(struct plink *links, size_t n)
{
	struct closer c[MAX_CLOSERS];
	pthread_t th[MAX_CLOSERS];
	bool started[MAX_CLOSERS] = { false };
	size_t nth = n < MAX_CLOSERS ? n : MAX_CLOSERS;

	for (size_t i = 0; i < nth; i++) {
		c[i] = (struct closer){ .links = links, .n = n, .first = i, .step = nth };
		started[i] = nth > 1 && !pthread_create(&th[i], NULL, closer_run, &c[i]);
		if (!started[i])
			closer_run(&c[i]);
	}
	for (size_t i = 0; i < nth; i++)
		if (started[i])
			pthread_join(th[i], NULL);
}

static void target_destroy(struct target *t)
{
	links_destroy(t->links, t->nlinks);
	free(t->links);
	free(t);
}

/*
 * Destroy the targets of list @t together: the links of all of them at once, so that their
 * closes share grace periods. One target at a time (a few links each) let a fork/exec storm's
 * exited processes pile up their links faster than ~25 a second went: 2800 fds in 20 s.
 */
static void targets_destroy(struct target *t)
{
	struct plink *all;
	struct target *next;
	size_t n = 0;

	for (struct target *i = t; i; i = i->next)
		n += i->nlinks;
	all = t && t->next ? calloc(n ? n : 1, sizeof(*all)) : NULL;
	if (all) {
		n = 0;
		for (struct target *i = t; i; i = i->next) {
			memcpy(all + n, i->links, i->nlinks * sizeof(*all));
			n += i->nlinks;
			i->nlinks = 0;
		}
		links_destroy(all, n);
		free(all);
	}
	for (; t; t = next) {
		next = t->next;
		target_destroy(t);
	}
}

static void *reaper_run(void *arg)
{
	struct mp_bpf *b = arg;
	struct target *t;

	pthread_mutex_lock(&b->lock);
	for (;;) {
		while (!b->graveyard && !b->reaper_stop)
			pthread_cond_wait(&b->cond, &b->lock);
		if (!b->graveyard)
			break;
		t = b->graveyard;
		b->graveyard = NULL;
		b->reaping = true;
		pthread_mutex_unlock(&b->lock);
		targets_destroy(t);
		pthread_mutex_lock(&b->lock);
		b->reaping = false;
		pthread_cond_broadcast(&b->cond);
	}
	pthread_mutex_unlock(&b->lock);
	return NULL;
}

/* Hand @t's links to the reaper thread (or destroy them here if it cannot start). */
void target_bury(struct mp_bpf *b, struct target *t)
{
	pthread_mutex_lock(&b->lock);
	if (!b->reaper_started) {
		sigset_t all, old;

		/* The thread takes no signal: a process-directed one (SIGCHLD for a caller that
		 * reads them from a signalfd) must not be delivered to it and lost. */
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		b->reaper_started = !pthread_create(&b->reaper, NULL, reaper_run, b);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	if (!b->reaper_started) {
		pthread_mutex_unlock(&b->lock);
		target_destroy(t);
		return;
	}
	t->next = b->graveyard;
	b->graveyard = t;
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);
}

void mp_bpf__quiesce(struct mp_bpf *b)
{
	pthread_mutex_lock(&b->lock);
	while (b->graveyard || b->reaping)
		pthread_cond_wait(&b->cond, &b->lock);
	pthread_mutex_unlock(&b->lock);
}
