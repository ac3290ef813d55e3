/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The client API of memprofd (libmemprof, -lmemprof; it links libsystemd's sd-bus): start,
 * inspect, stop and discard profiles of other processes through the daemon's D-Bus control
 * API on its private socket. See memprof_client(3) and memprofd(8).
 *
 * Every function returns 0 or -errno; when the daemon refused a call, memprof_client__errmsg()
 * gives its message (the D-Bus error's text), otherwise a description of the local failure.
 * A client is one connection; use it from one thread at a time.
 */
#ifndef MEMPROF_CLIENT_H
#define MEMPROF_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <memprof/bus.h>

#ifdef __cplusplus
extern "C" {
#endif

enum memprof_client_state {
	MEMPROF_CLIENT_UNKNOWN = 0,	/* a state this library does not know */
	MEMPROF_CLIENT_SAMPLING,
	MEMPROF_CLIENT_STOPPED,		/* no new samples; frees of sampled blocks still recorded */
	MEMPROF_CLIENT_DISCARDED,	/* traces complete */
};

/* The client of one connection to memprofd. */
struct memprof_client;

/*
 * Connect to memprofd at @socket (NULL: MEMPROF_BUS_SOCKET, /run/memprofd/bus). Returns 0, or
 * -ECONNRESET when the daemon closed the connection at once (too many clients of this user),
 * -ENOENT / -ECONNREFUSED when nothing listens at @socket, -EACCES when the caller may not
 * connect.
 */
int memprof_client__connect(const char *socket, struct memprof_client **ret);

/* What a new profile asks for, extensible: set sz = sizeof(struct memprof_client_start_opts).
 * Zero values mean "the daemon's default". */
struct memprof_client_start_opts {
	size_t sz;
	double rate;			/* λ per word, (0, 1] */
	unsigned int callstack_size;	/* frames per sample */
	bool no_follow_forks;		/* do not profile children forked later */
	uint64_t duration_us;		/* stop after this long; 0: never */
	uint16_t format_version;	/* memtrace format 2 or 3 */
	bool zstd;			/* compress the traces */
	double max_overhead;		/* probe cost budget per process, % of a CPU; 0: none */
	const char *unwind;		/* "fp", "dwarf" or "auto"; NULL: the daemon's default */
	int stack_copy_size;		/* bytes of stack copied per sample; < 0: none */
};

/*
 * Start one profile of @pids (@n >= 1). The first process' trace is written to @out_fd (the
 * descriptor is passed to the daemon) when @out_fd >= 0, else under the daemon's state
 * directory. @opts may be NULL. On success *@id is the profile id.
 */
int memprof_client__start(struct memprof_client *c, const pid_t *pids, size_t n,
			  const struct memprof_client_start_opts *opts, int out_fd, uint32_t *id);
/* Stop sampling (frees of sampled blocks are still recorded until discard). */
int memprof_client__stop(struct memprof_client *c, uint32_t id);
/* Drop the profile's state in the daemon; this completes its traces. */
int memprof_client__discard(struct memprof_client *c, uint32_t id);

/*
 * Profile1.AddProcess: @pid, forked or exec'd by a process of profile @id and held stopped by
 * the caller (ptrace), is brought in sync before it runs: the daemon reads its pending events
 * and attaches its probes. With @out_fd >= 0 (a forked child) its trace is written there.
 * Returns 1 if the profile follows @pid, 0 if not (let it go), or -errno.
 */
int memprof_client__add_process(struct memprof_client *c, uint32_t id, pid_t pid, int out_fd);

/* One process of a profile, as memprof_client__profile() reads it (Profile1.ProcessStatus). */
struct memprof_client_process {
	pid_t pid;
	char *comm;
	char *mode;			/* "uprobe", "preload"; NULL: not told */
	bool exited;
	uint64_t samples;		/* sampled blocks */
	uint64_t nsamples;		/* samples: the sum of their multiplicities */
	uint64_t live_nsamples;		/* the same sum over sampled blocks not freed */
	uint64_t frees;			/* sampled blocks freed */
	uint64_t drops;			/* events lost */
	double est_alloc_bytes, est_live_bytes;	/* requested bytes (rounded up to words) */
	char *trace;			/* "" when written to a file the client passed */
	char *detached_reason;		/* over its overhead budget; NULL: not detached */
	char *write_error;		/* NULL, or the trace could not be written whole: the
					 * errno name of the first failed write ("ENOSPC"), or
					 * "stalled": the output did not keep up */
	uint64_t write_error_since_us;	/* when it began, CLOCK_REALTIME µs */
	uint64_t lost_writes;		/* events not written */
};

/* A target of a profile (Profile1.Targets). */
struct memprof_client_target {
	char *name;			/* "unit:cron.service", "cgroup:PATH", "exe:PATH" */
	char *path;			/* the executable, or the cgroup's v2 directory */
	bool present;			/* the cgroup exists now (an executable: true) */
	uint64_t joined;		/* processes that joined the profile through it */
	uint64_t skipped;		/* processes the owner may not profile: not profiled */
	uint64_t failed;		/* processes that could not be probed */
};

/* Every property of a profile (org.memprofd.Profile1). */
struct memprof_client_profile {
	uint32_t id;
	char *path;			/* its D-Bus object */
	enum memprof_client_state state;
	char *state_name;
	char *directory;
	uint32_t owner_uid;
	double rate;
	unsigned int callstack_size;
	bool follow_forks;
	uint64_t duration_us;
	uint16_t format_version;
	bool compressed;
	uint64_t start_us;		/* CLOCK_REALTIME µs */
	size_t nprocs;
	struct memprof_client_process *procs;
	/* Targets: every process of a unit, a cgroup, an executable (Profile1.Targets) */
	size_t ntargets;
	struct memprof_client_target *targets;
	char *standing;			/* its memprofd.conf [Profile] name; "" or NULL: none */
	/* The exited processes no longer in @procs (a profile lists its last 64 exited ones,
	 * Profile1.Retired): how many, and the sums of their counts and estimates in
	 * @retired (its pid 0, its strings NULL: their traces are in @directory). */
	uint64_t nretired;
	struct memprof_client_process retired;
};

/* Read profile @id: *@ret is freed with memprof_client_profile__free(). -ENOENT: no such. */
int memprof_client__profile(struct memprof_client *c, uint32_t id,
			    struct memprof_client_profile **ret);
void memprof_client_profile__free(struct memprof_client_profile *p);	/* NULL-safe */

/* One line of Manager1.ListProfiles. */
struct memprof_client_entry {
	uint32_t id;
	enum memprof_client_state state;
	char state_name[16];
	char path[64];
	uint32_t owner_uid;
	double rate;
	size_t npids;
	pid_t *pids;
};

/* Every profile the daemon lists (newest first); free with memprof_client_list__free(). */
int memprof_client__list(struct memprof_client *c, struct memprof_client_entry **ret,
			 size_t *n);
void memprof_client_list__free(struct memprof_client_entry *v, size_t n);	/* NULL-safe */

/* The daemon's own properties (org.memprofd.Manager1). */
struct memprof_client_daemon {
	char *version;
	char *state_dir;
	double default_rate;
	unsigned int default_callstack_size;
	unsigned int max_profiles;
	unsigned int clients;
	uint64_t refused_clients;
	size_t nstats;			/* BPF and engine counters (Stats) */
	char **stat_names;
	uint64_t *stat_values;
	/* The kernel mechanisms memprofd's probes use (Mechanisms: link kind, sessions or
	 * entry+return probes, exit tracepoint variant); NULL from a memprofd without it. */
	char *mechanisms;
};

int memprof_client__daemon(struct memprof_client *c, struct memprof_client_daemon **ret);
void memprof_client_daemon__free(struct memprof_client_daemon *d);	/* NULL-safe */

/*
 * Wait until profile @id no longer samples (its processes exited, its duration ran out, or it
 * was stopped), at most @timeout_us (UINT64_MAX: no limit). Returns 0, -ETIMEDOUT, -EINTR when
 * a signal interrupted the wait (a handler installed without SA_RESTART), or -errno.
 */
int memprof_client__wait(struct memprof_client *c, uint32_t id, uint64_t timeout_us);

/* The message of the last failure ("" if none). Valid until the next call on @c. */
const char *memprof_client__errmsg(const struct memprof_client *c);

/* Close the connection. NULL-safe. */
void memprof_client__free(struct memprof_client *c);

#ifdef __cplusplus
}
#endif

#endif /* MEMPROF_CLIENT_H */
