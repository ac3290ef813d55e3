/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * memprofd, the service: the one context struct every service module gets, the configuration,
 * the log functions, and the daemon's table of profiles (what the control API shows).
 *
 * Owner: the service component (daemon/service/memprofd.c, daemon/service/svc_profile.c, daemon/service/bus.c).
 * The engine (daemon/engine/engine.h) does the sampling; this layer adds identity, authorization,
 * where traces go, manifests and the control API.
 */
#ifndef MEMPROFD_SERVICE_H
#define MEMPROFD_SERVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "daemon/engine/engine.h"

#define MP_DEFAULT_CONFIG	"/etc/memprofd.conf"
#define MP_DEFAULT_STATE_DIR	"/var/lib/memprofd"
#define MP_DEFAULT_MAX_PROFILES	16
#define MP_HARD_MAX_PROFILES	1024
#define MP_DEFAULT_MAX_CLIENTS	64
#define MP_HARD_MAX_CLIENTS	4096
/* Per connection: calls read and replies not written; bytes of its socket's send buffer. */
#define MP_DEFAULT_MAX_QUEUED_CALLS	64
#define MP_HARD_MAX_QUEUED_CALLS	65536
#define MP_DEFAULT_MAX_QUEUED_BYTES	(1U << 20)
#define MP_MIN_QUEUED_BYTES		(64U << 10)
#define MP_HARD_MAX_QUEUED_BYTES	(64U << 20)
#define MP_STALL_TIMEOUT_US	(5ULL * 1000000)	/* a client over them is cut off after */
#define MP_MAX_START_PIDS	256	/* pids in one Start call */
#define MP_KEEP_DISCARDED	32	/* discarded profiles kept listed */
#define MP_FLUSH_INTERVAL_US	(5ULL * 1000000)	/* manifests and STATUS= refresh */
/* Time given to ring-buffer records per wakeup of the loop, and before the answer to a
 * read-only call, before signals, calls and timers get their turn. */
#define MP_RING_SLICE_NS	(20 * 1000000ULL)
#define MP_OUTPUT_QUEUE_BYTES	(4u << 20)	/* queued per trace while its file is slow */
/* exited processes a profile lists (status, manifest); older ones are summed (Retired) */
#define MP_KEEP_EXITED		64
#define MP_SHUTDOWN_WAIT_MS	10000	/* at exit, for traces still being written */
#define MP_DISCARD_WAIT_US	(2ULL * 1000000)	/* a Discard's reply, for the same */

/* /etc/memprofd.conf, see memprofd(8). Command-line options override it. */
/* A [Profile] section of the configuration (svc_standing.c). */
struct mp_standing {
	char name[65];			/* Name=, or "profile<N>" (its place in the file) */
	unsigned int line;		/* of its header */
	char *text;			/* its settings as written, "Key=Value\n" each */
	struct mp_opts opts;		/* its options; the targets' texts in @strs */
	char *strs[3];			/* Target=unit:, cgroup:, exe: */
};

struct mp_config {
	double default_rate;
	unsigned int callstack_size;	/* default for profiles that do not ask */
	char *state_dir;
	unsigned int max_profiles;	/* sampling + stopped profiles at once */
	/* One uid's share of them, and how many only root may take; -1: derived from
	 * max_profiles (svc_profile__limits()). */
	int max_profiles_per_user;
	int root_profiles;
	unsigned int max_clients;	/* control connections at once */
	unsigned int max_queued_calls;	/* per connection, see MP_DEFAULT_MAX_QUEUED_CALLS */
	unsigned int max_queued_bytes;
	struct mp_standing *standing;	/* standing profiles, in file order */
	size_t nstanding;
};

/* One profile as the service sees it. */
struct svc_profile {
	uint32_t id;			/* the service's id: /org/memprofd/profile/<id> */
	struct memprofd *d;
	struct mp_profile *p;		/* the engine's profile */
	uid_t owner_uid;		/* who started it */
	gid_t owner_gid;
	char *dir;			/* <state dir>/profiles/<id> */
	char *object_path;
	uint64_t start_realtime_us;
	bool to_fd;			/* first trace goes to a client's fd */
	enum mp_profile_state last_state;
	bool failures_logged;		/* the traces' write failures, counted, at the end */
	unsigned int manifest_failures;	/* manifest writes failed in a row (logged once) */
	sd_bus_message *discard_call;	/* a Discard, answered once the files are written */
	sd_event_source *discard_timer;	/* ... or after MP_DISCARD_WAIT_US */
	char *standing;			/* a standing profile: its section's name, else NULL */
	char *standing_text;		/* ... and the settings it was started with */
	struct svc_profile *next;
};

struct mp_bus_server;

struct memprofd {
	sd_event *event;
	/* NULL only in a service without BPF (the control API's fuzzer): a Start then fails
	 * as a failed load would, and there are no profiles. */
	struct mp_engine *engine;
	sd_event_source *engine_src;
	sd_event_source *flush_timer;
	struct mp_bus_server *bus;

	struct mp_config cfg;
	const char *config_path;
	bool config_given;		/* -c: the file must exist, at start and on reload */
	/* Set on the command line: they win over the configuration file on reload. */
	const char *opt_state_dir;
	const char *socket_path;
	const char *bus_address;
	bool system_bus;
	bool has_seed;
	uint64_t seed;

	struct svc_profile *profiles;	/* newest first */
	uint32_t next_id;
	bool stopping;
};

/* ---- logging (daemon/service/memprofd.c): syslog levels, "<N>" prefixes under journald ---- */
void mp_log_setup(int level, bool journal_prefix);
int mp_log_level_parse(const char *s);
void mp_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define log_error(...)	mp_log(3, __VA_ARGS__)
#define log_warning(...) mp_log(4, __VA_ARGS__)
#define log_notice(...)	mp_log(5, __VA_ARGS__)
#define log_info(...)	mp_log(6, __VA_ARGS__)
#define log_debug(...)	mp_log(7, __VA_ARGS__)

/* ---- configuration (daemon/service/memprofd.c) ---- */
void mp_config__defaults(struct mp_config *c);
/* Parse @path into @c. -ENOENT when the file does not exist (c unchanged); other errors fill
 * @err with "path:line: reason". */
int mp_config__load(struct mp_config *c, const char *path, char *err, size_t err_len);
void mp_config__done(struct mp_config *c);
/* svc_standing.c: a [Profile] section begins at @line; its setting @k=@v (0, or -errno with
 * the reason in @err); every section complete and named once (else @line is the one at
 * fault); freed. */
int mp_standing__section(struct mp_config *c, unsigned int line, char *err, size_t err_len);
int mp_standing__set(struct mp_config *c, const char *k, const char *v, char *err,
		     size_t err_len);
int mp_standing__check(const struct mp_config *c, char *err, size_t err_len, unsigned int *line);
void mp_standing__free_all(struct mp_config *c);
/* Start the standing profiles of the configuration that do not run, after completing those
 * whose section is gone or changed (at start and after each reload). */
void svc_standing__apply(struct memprofd *d);

/* Recompute STATUS= for the service manager. */
void memprofd__update_status(struct memprofd *d);

/* ---- profiles (daemon/service/svc_profile.c) ---- */

/* What a Start request asks for, after parsing and before authorization. */
struct svc_start_req {
	const pid_t *pids;
	size_t npids;
	uid_t uid;			/* caller */
	gid_t gid;
	/* Start's options; rate and callstack_size not set: the configuration's defaults. The
	 * output's descriptor (-1: traces under the profile's directory) is the message's. */
	struct mp_opts opts;
};

/*
 * Error classes the control API maps to D-Bus error names. Each function that can fail
 * returns -errno and writes one sentence to @err naming what failed (and the PID).
 */
int svc_check_access(pid_t pid, uid_t uid, gid_t gid, char *err, size_t err_len);
/* mp_engine_opts.join_check: svc_check_access() of each process that joins a target. */
int svc_join_check(void *ctx, pid_t pid, uid_t uid, gid_t gid, char *err, size_t err_len);
/* mp_engine_opts.exec_check: svc_check_access() again at every exec of a process profiled for
 * another user than root, refusing set-id images outright; logs what it refuses. */
int svc_exec_check(void *ctx, pid_t pid, uid_t uid, gid_t gid, bool secure, char *err,
		   size_t err_len);
int svc_profile__start(struct memprofd *d, const struct svc_start_req *req,
		       struct svc_profile **out, char *err, size_t err_len);
/*
 * svc_unit.c: the cgroup of systemd unit @name (".service" added to a name without a type), as
 * systemd names it in its hierarchy ("/system.slice/cron.service"); for a unit not running,
 * the one systemd will make. 0, or -errno with a sentence in @err (-ENOENT: systemd does not
 * know the unit, -EINVAL: not a unit with processes).
 */
int svc_unit_cgroup(const char *name, char *out, size_t out_len, char *err, size_t err_len);
/*
 * Profile1.AddProcess: @pid, forked or exec'd in @sp's tree and held stopped by the caller
 * (ptrace), is brought in sync: pending events delivered, probes attached, and with @out_fd >= 0
 * its trace written there. The caller (@uid, @gid) must be allowed to profile @pid. Returns 1
 * (followed), 0 (the profile does not follow it) or -errno.
 */
int svc_profile__add_process(struct memprofd *d, struct svc_profile *sp, pid_t pid, int out_fd,
			     uid_t uid, gid_t gid, char *err, size_t err_len);
int svc_profile__stop(struct memprofd *d, struct svc_profile *sp, char *err, size_t err_len);
int svc_profile__discard(struct memprofd *d, struct svc_profile *sp, char *err, size_t err_len);
struct svc_profile *svc_profile__find(struct memprofd *d, uint32_t id);
struct svc_profile *svc_profile__by_engine(struct memprofd *d, const struct mp_profile *p);
/* Write <dir>/manifest.json (atomically: temporary name, then rename). */
int svc_profile__write_manifest(struct memprofd *d, struct svc_profile *sp);
/*
 * Discard @m of @sp succeeded: keep its reply until the profile's trace files are written and
 * closed (at most MP_DISCARD_WAIT_US), so that a caller reads complete files. Returns 1 when
 * the reply is kept (sent later), 0 when the files are complete already (reply now).
 */
int svc_profile__defer_reply(struct memprofd *d, struct svc_profile *sp, sd_bus_message *m);
/* Log the traces' write failures: each when first seen, and with their counts once the
 * profile's files are complete. */
void svc_profile__log_write_failures(struct svc_profile *sp);
/* The engine changed @sp's state by itself or through us: manifest, signals, status. */
void svc_profile__state_changed(struct memprofd *d, struct svc_profile *sp);
void svc_profile__free_all(struct memprofd *d);
/*
 * At start: mark "interrupted" the manifests under <state dir>/profiles of profiles that a
 * previous memprofd did not complete (SIGKILL, a crash), so that no collector waits for them.
 * Returns how many.
 */
unsigned int svc_profile__mark_interrupted(const char *state_dir);
/* Highest profile id found under <state dir>/profiles, so ids stay unique across restarts. */
uint32_t svc_profile__scan_ids(const char *state_dir);
const char *svc_state_name(enum mp_profile_state st);
/* The BPF counters (enum mp_stat) then the engine's drop counters (enum mp_engine_drop),
 * named as the API and the manifests show them. Returns how many, or -errno. */
#define SVC_MAX_COUNTERS	64
int svc_counters(struct memprofd *d, const char **names, uint64_t *values, size_t max);
/* The effective per-uid share and root's reserve of MaxProfiles under @c. */
void svc_profile__limits(const struct mp_config *c, unsigned int *per_user,
			 unsigned int *root_reserve);
/* May @uid act on @sp (stop, discard)? root and the owner may. */
bool svc_profile__may_control(const struct svc_profile *sp, uid_t uid);
/* A snapshot of @sp's processes in a new array *@out (NULL when there are none; free() it).
 * Returns how many, or -ENOMEM. */
int svc_profile__procs(const struct svc_profile *sp, struct mp_proc_stats **out);

#endif
