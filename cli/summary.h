/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * memprofctl's side of a profile's figures (daemon/engine/summary.h): reading them from
 * memprofd's answer, and the text of `memprofctl record`'s summary. Their JSON form is
 * mp_summary__json(), whoever counted them.
 */
#ifndef MEMPROFCTL_SUMMARY_H
#define MEMPROFCTL_SUMMARY_H

#include <stdio.h>

#include <memprof/client.h>

#include "daemon/engine/summary.h"

/*
 * Profile @p as memprofd told it: @s borrows its strings (free @p after @s). The engine's own
 * counts are not in the D-Bus API: they stay unknown. Returns 0 or -ENOMEM.
 */
int ctl_summary__from_client(struct mp_summary *s, const struct memprof_client_profile *p);

/*
 * `memprofctl record`'s summary, lines on @f: each process' figures, then the losses, the
 * stacks, the probes' counts and the kernel mechanisms, as far as they are known.
 */
void ctl_summary__print(const struct mp_summary *s, FILE *f);

/* The same as one JSON document on one line (@status: CMD's exit status, -1: not known). */
void ctl_summary__print_json(const struct mp_summary *s, int status, FILE *f);

#endif
