/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * memprofctl's side of memprofd's control API: the D-Bus calls themselves are libmemprof's
 * client (<memprof/client.h>); this adds connecting to ctl.socket with memprofctl's messages,
 * error lines, waiting with Ctrl-C handling, and printing profiles as text or JSON.
 *
 * Owner: the service component. `memprofctl record` goes through the daemon in
 * cli/record/record_daemon.c when memprofd is reachable.
 */
#ifndef MEMPROFCTL_CTL_BUS_H
#define MEMPROFCTL_CTL_BUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <memprof/client.h>

/*
 * Connect to memprofd at ctl.socket (libmemprof's client). Returns 0, or -errno (-ENOENT,
 * -ECONNREFUSED: nothing listens; -EACCES; -ECONNRESET: the daemon closed the connection);
 * unless @quiet an error line naming the socket is printed first.
 */
int ctl_bus_connect(struct memprof_client **ret, bool quiet);

/* Print one error line for @cmd (on stdout as JSON with --json). Returns 1. */
int ctl_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print the last failure of @c (memprof_client__errmsg(), else strerror(-r)). Returns 1. */
int ctl_fail_client(const char *cmd, const struct memprof_client *c, int r);

/*
 * Wait until profile @id no longer samples (its processes exited or its duration ran out).
 * When @interrupt is set and SIGINT/SIGTERM arrives, stop the profile first. Returns 0 or
 * -errno after printing one line.
 */
int ctl_wait_stopped(struct memprof_client *c, const char *cmd, uint32_t id, bool interrupt);
struct json_object;
/* The members of a profile that `list` and `status` both print: id, state, path, owner, rate. */
void ctl_profile_json_head(struct json_object *o, uint32_t id, const char *state,
			   const char *path, uint32_t owner_uid, double rate);
/* Print a profile: a block of text, or one JSON object. */
void ctl_print_profile(const struct memprof_client_profile *p);

/* Parse a profile id argument (1..2^32-1); prints one line on error. */
int ctl_parse_id(const char *cmd, const char *s, uint32_t *id);
/* The body of `stop ID` and `discard ID`. */
int ctl_stop_or_discard(int argc, char **argv, bool discard);

/*
 * Call ListProfiles; print it (text or JSON) when @print; count sampling/stopped/discarded
 * profiles into @counts if not NULL. Returns the number of profiles or -errno after one line.
 */
int ctl_list_profiles(struct memprof_client *c, const char *cmd, bool print,
		      unsigned int counts[3]);

#endif
