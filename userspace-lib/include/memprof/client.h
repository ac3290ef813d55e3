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

#ifdef __cplusplus
extern "C" {
#endif

#define MEMPROF_CLIENT_DEFAULT_SOCKET	"/run/memprofd/bus"

/* What a new profile asks for; zero values mean "the daemon's default". */
struct memprof_client_opts {
	double rate;			/* λ per word, (0, 1] */
	unsigned int callstack_size;	/* frames per sample */
	bool no_follow_forks;		/* do not profile children forked later */
	uint64_t duration_us;		/* stop after this long */
	uint16_t format_version;	/* memtrace format 2 or 3 */
	bool zstd;			/* compress the trace */
};

enum memprof_client_state {
	MEMPROF_CLIENT_UNKNOWN = 0,	/* a state this library does not know */
	MEMPROF_CLIENT_SAMPLING,
	MEMPROF_CLIENT_STOPPED,		/* no new samples; frees of sampled blocks still recorded */
	MEMPROF_CLIENT_DISCARDED,	/* traces complete */
};

struct memprof_client_proc {
	pid_t pid;
	char comm[32];
	char mode[16];			/* "uprobe", "preload" (in-process fast path), or "" */
	bool exited;
	uint64_t samples;		/* sampled blocks */
	uint64_t nsamples;		/* sum of their n_samples */
	uint64_t live_nsamples;		/* n_samples of sampled blocks not freed yet */
	uint64_t frees;			/* frees of sampled blocks */
	uint64_t drops;			/* events lost (every loss the daemon counts) */
	double est_alloc_bytes;		/* Σ n/λ words, in bytes */
	double est_live_bytes;
};

struct memprof_client_status {
	enum memprof_client_state state;
	char state_name[16];		/* as the daemon names it */
	double rate;
	unsigned int callstack_size;
	uint64_t start_us;		/* CLOCK_REALTIME µs */
	size_t nprocs;
	struct memprof_client_proc *procs;	/* nprocs; freed by memprof_client_status__done */
};

struct memprof_client;

/* Connect to memprofd at @socket (NULL: MEMPROF_CLIENT_DEFAULT_SOCKET). NULL + errno. */
struct memprof_client *memprof_client__open(const char *socket);

/*
 * Start one profile of @pids (@n >= 1). The first process' trace is written to @out_fd (the
 * descriptor is passed to the daemon) when @out_fd >= 0, else under the daemon's state
 * directory. @opts may be NULL. On success *@id is the profile id.
 */
int memprof_client__start(struct memprof_client *c, const pid_t *pids, size_t n,
			  const struct memprof_client_opts *opts, int out_fd, uint32_t *id);
/* Stop sampling (frees of sampled blocks are still recorded until discard). */
int memprof_client__stop(struct memprof_client *c, uint32_t id);
/* Drop the profile's state in the daemon; this completes its traces. */
int memprof_client__discard(struct memprof_client *c, uint32_t id);
/* Read the profile's state and per-process counts; -ENOENT if there is no such profile. */
int memprof_client__status(struct memprof_client *c, uint32_t id,
			   struct memprof_client_status *st);
/* Free what memprof_client__status() allocated. NULL-safe. */
void memprof_client_status__done(struct memprof_client_status *st);

/* The message of the last failure ("" if none). Valid until the next call on @c. */
const char *memprof_client__errmsg(const struct memprof_client *c);

/* Close the connection. NULL-safe. */
void memprof_client__free(struct memprof_client *c);

#ifdef __cplusplus
}
#endif

#endif /* MEMPROF_CLIENT_H */
