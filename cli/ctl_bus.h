/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * memprofctl's side of memprofd's control API (D-Bus, peer-to-peer on ctl.socket): connect,
 * start/stop/discard profiles, read their properties, print them as text or JSON.
 *
 * Owner: the service component. `memprofctl record` (cli/cmd_record.c) goes through the daemon
 * with ctl_bus_record() / ctl_bus_record_finish() when memprofd is reachable.
 */
#ifndef MEMPROFCTL_CTL_BUS_H
#define MEMPROFCTL_CTL_BUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <systemd/sd-bus.h>

/* What a new profile asks for; zero values mean "the daemon's default". */
struct ctl_start_opts {
	double rate;			/* λ per word, (0, 1] */
	unsigned int callstack_size;	/* frames */
	bool no_follow_forks;
	uint64_t duration_us;		/* stop after this long */
	uint16_t format_version;	/* 2 or 3 */
	bool zstd;
	double max_overhead;		/* probe cost budget per process, % of a CPU; 0: none */
	int out_fd;			/* >= 0: the first process' trace goes there (must be set:
					 * -1 for "under the daemon's state directory") */
};

struct ctl_proc {
	uint32_t pid;
	char *comm;
	bool exited;
	uint64_t samples, nsamples, live_nsamples, frees, drops;
	double est_alloc_bytes, est_live_bytes;
	char *trace;			/* "" when written to a client's file */
	char *mode;			/* "uprobe" or "preload" (ProcessModes); NULL: unknown */
	char *detached_reason;		/* over its overhead budget (ProcessDetached); NULL: not */
};

struct ctl_profile {
	uint32_t id;
	char *path;
	char *state;
	char *directory;
	uint32_t owner;
	double rate;
	uint32_t callstack_size;
	bool follow_forks;
	uint64_t duration_us;
	uint16_t format_version;
	bool compressed;
	uint64_t start_us;
	struct ctl_proc *procs;
	size_t nprocs;
};

/*
 * Connect to memprofd at ctl.socket. Returns 0, or -errno; unless @quiet an error line naming
 * the socket is printed first.
 */
int ctl_bus_connect(sd_bus **ret, bool quiet);

/* Print one error line for @cmd (on stdout as JSON with --json). Returns 1. */
int ctl_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int ctl_fail_bus(const char *cmd, const char *what, const sd_bus_error *e, int r);

/* Start a profile. On failure prints one line and returns -errno. */
int ctl_bus_start(sd_bus *bus, const char *cmd, const pid_t *pids, size_t npids,
		  const struct ctl_start_opts *o, uint32_t *ret_id);
/* Manager Stop/Discard. On failure prints one line and returns -errno. */
int ctl_bus_stop(sd_bus *bus, const char *cmd, uint32_t id);
int ctl_bus_discard(sd_bus *bus, const char *cmd, uint32_t id);
/* Read profile @id's properties. On failure prints one line and returns -errno. */
int ctl_bus_get_profile(sd_bus *bus, const char *cmd, uint32_t id, struct ctl_profile *p);
void ctl_profile_done(struct ctl_profile *p);
/*
 * Wait until profile @id no longer samples (its processes exited or its duration ran out).
 * When @interrupt is set and SIGINT/SIGTERM arrives, stop the profile first. Returns 0 or
 * -errno after printing one line.
 */
int ctl_bus_wait_stopped(sd_bus *bus, const char *cmd, uint32_t id, bool interrupt);
/* Print a profile: a block of text, or one JSON object. */
void ctl_print_profile(const struct ctl_profile *p);

/*
 * `memprofctl record` through memprofd: connect quietly, start a profile of @pid (typically
 * a child forked and held before exec; the engine follows the exec) with @o. Returns 0 with
 * *ret_bus and *ret_id set; -ECONNREFUSED, -ENOENT or -EACCES (nothing printed) when no
 * memprofd is reachable at ctl.socket, so that the caller can profile in-process instead;
 * another -errno after printing one error line.
 */
int ctl_bus_record(pid_t pid, const struct ctl_start_opts *o, sd_bus **ret_bus,
		   uint32_t *ret_id);
/*
 * After the recorded processes exited: wait until the profile stops, discard it (this
 * completes the traces) and close @bus. Returns 0 or -errno after printing one line.
 */
int ctl_bus_record_finish(sd_bus *bus, uint32_t id);

/* Parse a profile id argument (1..2^32-1); prints one line on error. */
int ctl_parse_id(const char *cmd, const char *s, uint32_t *id);
/* The body of `stop ID` and `discard ID`. */
int ctl_stop_or_discard(int argc, char **argv, bool discard);

/*
 * Call ListProfiles; print it (text or JSON) when @print; count sampling/stopped/discarded
 * profiles into @counts if not NULL. Returns the number of profiles or -errno after one line.
 */
int ctl_list_profiles(sd_bus *bus, const char *cmd, bool print, unsigned int counts[3]);

/* Parse "10", "10s", "500ms", "2m", "1h" into µs. */
int ctl_parse_duration(const char *s, uint64_t *us);

#endif
