/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * `memprofctl record` through memprofd (cli/record/record_daemon.c). memprofctl stays CMD's parent
 * and tracer and does the ptrace part (cli/record/record_trace.c); the daemon samples. CMD's profile
 * is started when CMD reaches its consistent link map (Manager1.Start with the output fd this
 * process opened), and every process forked or exec'd in the tree is brought in sync before it
 * runs (Profile1.AddProcess; a forked child's trace goes to "<output>.<pid>", opened here).
 *
 * Owner: the record command.
 */
#ifndef MEMPROFCTL_RECORD_DAEMON_H
#define MEMPROFCTL_RECORD_DAEMON_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "cli/record/record_trace.h"
#include "daemon/engine/engine.h"

struct record_daemon;

/* --daemon / --no-daemon / neither */
enum record_daemon_mode {
	RECORD_DAEMON_AUTO = 0,
	RECORD_DAEMON_REQUIRE,
	RECORD_DAEMON_NEVER,
};

/*
 * Connect to memprofd at ctl.socket unless @mode is RECORD_DAEMON_NEVER. Returns 0 with *@ret
 * set (record through the daemon) or NULL (record in-process: no daemon reachable, or options
 * only the in-process engine has, such as @has_seed), or -errno after printing one line
 * (RECORD_DAEMON_REQUIRE and no daemon).
 */
int record_daemon__open(enum record_daemon_mode mode, bool has_seed, struct record_daemon **ret);

/*
 * Start the profile of @pid (stopped at its link map) with @o; its trace goes to o->output.path,
 * created here. Prints one line and returns -errno on failure. With @preload, says so when
 * CMD (@cmd0) did not load libmemprof-preload.
 */
int record_daemon__start(struct record_daemon *rd, const struct mp_opts *o, pid_t pid,
			 bool preload, const char *cmd0);

/* What record_trace__run_sync() uses. */
const struct record_sync *record_daemon__sync(struct record_daemon *rd);

/*
 * CMD ended (@status: its wait status, or -1 if unknown): stop and discard the profile (this
 * completes the traces) and print the summary, as in-process recording does. Returns 0, 1 when
 * memprofd failed to write events meanwhile (said on stderr), or -errno after printing one
 * line (the traces may not be complete then either).
 */
int record_daemon__finish(struct record_daemon *rd, int status, const char *cmd0);

/* Close the connection (discarding the profile if finish did not run). NULL-safe. */
void record_daemon__free(struct record_daemon *rd);

#endif
