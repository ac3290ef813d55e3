// SPDX-License-Identifier: LGPL-2.1-or-later
/* `memprofctl record`'s summary, from the engine or from memprofd: see cli/summary.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "cli/summary.h"
#include "userspace-lib/estimate.h"
#include "userspace-lib/units.h"

#define PFX "memprofctl record: "


int ctl_summary__from_client(struct mp_summary *s, const struct memprof_client_profile *p)
{
	memset(s, 0, sizeof(*s));
	if (mp_summary__alloc_procs(s, p->nprocs) < 0)
		return -ENOMEM;
	s->rate = p->rate;
	s->daemon_profile = p->id;
	s->callstack_size = p->callstack_size;
	/* the processes, then the sums of the retired ones (if any) as one more */
	s->nretired = p->nretired;
	for (size_t i = 0; i < p->nprocs + (p->nretired > 0); i++) {
		const struct memprof_client_process *c = i < p->nprocs ? &p->procs[i] : &p->retired;
		struct mp_summary_proc *o = i < p->nprocs ? &s->procs[i] : &s->retired;

		*o = (struct mp_summary_proc){
			.pid = c->pid,
			.mode = c->mode,
			.exited = c->exited,
			.trace = c->trace && c->trace[0] ? c->trace : NULL,
			.sampled_blocks = c->samples,
			.samples = c->nsamples,
			.live_samples = c->live_nsamples,
			.freed_blocks = c->frees,
			.drops = c->drops,
			.allocated_bytes = c->est_alloc_bytes,
			/* the daemon sends the estimates only: their SE bounds */
			.allocated_bytes_se = mp_est_se_bound_bytes(p->rate, c->est_alloc_bytes),
			.live_bytes = c->est_live_bytes,
			.live_bytes_se = mp_est_se_bound_bytes(p->rate, c->est_live_bytes),
			.allocated_words = mp_est_words(p->rate, c->nsamples),
			.live_words = mp_est_words(p->rate, c->live_nsamples),
			.detached_reason = c->detached_reason,
			.write_error = c->write_error,
			.write_error_since_us = c->write_error_since_us,
			.lost_writes = c->lost_writes,
		};
		snprintf(o->comm, sizeof(o->comm), "%s", c->comm ? c->comm : "");
	}
	mp_summary__sum(s);
	return 0;
}

static void print_proc(const struct mp_summary_proc *c, FILE *f)
{
	char a[32], ase[32], l[32], lse[32];
	bool preload = c->mode && !strcmp(c->mode, "preload");

	fprintf(f, PFX "%s (pid %d): %" PRIu64 " samples in %" PRIu64 " blocks, %" PRIu64
		" freed; allocated %s +/- %s, live at exit %s +/- %s; trace '%s'\n", c->comm,
		(int)c->pid, c->samples, c->sampled_blocks, c->freed_blocks,
		mp_fmt_bytes(c->allocated_bytes, a, sizeof(a)),
		mp_fmt_bytes(c->allocated_bytes_se, ase, sizeof(ase)),
		mp_fmt_bytes(c->live_bytes, l, sizeof(l)),
		mp_fmt_bytes(c->live_bytes_se, lse, sizeof(lse)), c->trace ? c->trace : "(fd)");
	if (c->detached_reason)
		fprintf(f, PFX "%s (pid %d): DETACHED before it exited: %s; its trace ends there "
			"(blocks live then are not collected)\n", c->comm, (int)c->pid,
			c->detached_reason);
	if (!preload)
		return;
	if (!c->engine_counts) {	/* memprofd's: the library's counts are not sent */
		fprintf(f, PFX "%s (pid %d): sampled in-process by libmemprof-preload\n", c->comm,
			(int)c->pid);
		return;
	}
	fprintf(f, PFX "%s (pid %d): sampled in-process by libmemprof-preload (%" PRIu64
		" samples drawn, %" PRIu64 " lost in the library)\n", c->comm, (int)c->pid,
		c->preload_samples, c->preload_lost);
	/* queued in the library when the process was killed: its last batch */
	if (c->preload_samples > c->samples)
		fprintf(f, PFX "%s (pid %d): %" PRIu64 " of those samples never reached the trace "
			"(still queued in the library when the process ended without exit or "
			"_exit: a signal?)\n", c->comm, (int)c->pid, c->preload_samples - c->samples);
}

static void print_losses(const struct mp_summary *s, FILE *f)
{
	bool any = false;

	if (s->losses_daemon_wide) {
		/* the daemon's counters are of all its profiles: apart, named as such */
		if (s->total.drops)
			fprintf(f, PFX "drops: %" PRIu64 " events of these processes\n",
				s->total.drops);
		else
			fprintf(f, PFX "drops: none\n");
	} else {
		fprintf(f, PFX "drops:");
	}
	for (size_t i = 0; i < s->nlosses; i++) {
		if (!s->loss_values[i])
			continue;
		if (!any && s->losses_daemon_wide)
			fprintf(f, PFX "memprofd's losses while this ran, all its profiles "
				"together:");
		fprintf(f, " %s=%" PRIu64, s->loss_names[i], s->loss_values[i]);
		any = true;
	}
	if (any)
		fprintf(f, "\n");
	else if (!s->losses_daemon_wide)
		fprintf(f, " none\n");
}

void ctl_summary__print(const struct mp_summary *s, FILE *f)
{
	const struct mp_summary_proc *t = &s->total;

	for (size_t i = 0; i < s->nprocs; i++)
		print_proc(&s->procs[i], f);
	print_losses(s, f);
	if (s->has_stacks && t->truncated_stacks)
		fprintf(f, PFX "%" PRIu64 " stacks were truncated to --callstack-size %u frames\n",
			t->truncated_stacks, s->callstack_size);
	if (s->has_stacks && (t->dwarf_stacks || t->window_cut_stacks))
		fprintf(f, PFX "%" PRIu64 " stacks unwound with DWARF (--unwind %s), %" PRIu64
			" of them cut where the %d-byte stack copy ended\n", t->dwarf_stacks,
			s->unwind, t->window_cut_stacks, s->stack_copy_size);
	if (s->has_calls)
		fprintf(f, PFX "%" PRIu64 " allocator calls probed, %" PRIu64 " sampled\n",
			s->probed_calls, s->sampled_calls);
	fprintf(f, PFX "%zu process(es): %" PRIu64 " samples in %" PRIu64 " blocks, %" PRIu64
		" freed", s->nprocs, t->samples, t->sampled_blocks, t->freed_blocks);
	if (s->daemon_profile)
		fprintf(f, " (memprofd profile %" PRIu32 ")", s->daemon_profile);
	fprintf(f, "\n");
	if (s->mechanisms)
		fprintf(f, PFX "kernel mechanisms: %s%s\n", s->mechanisms,
			s->daemon_profile ? " (memprofd's)" : "");
}

void ctl_summary__print_json(const struct mp_summary *s, int status, FILE *f)
{
	struct json_object *o = mp_summary__json(s, status);

	if (!o) {
		fprintf(stderr, PFX "Out of memory for the JSON summary\n");
		return;
	}
	fprintf(f, "%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
							   JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
}
