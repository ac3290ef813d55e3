// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The service's table of profiles: who may profile what (ptrace-like rules), where traces go
 * (<state dir>/profiles/<id>/, a directory the daemon owns so a caller cannot plant symlinks
 * where the daemon writes as root), and the manifest next to the traces.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "bpf/memprof.h"
#include "daemon/engine/summary.h"
#include "daemon/service/bus.h"
#include "daemon/service/memprofd.h"
#include "userspace-lib/estimate.h"

static int write_owned(const char *tmp, const char *final, const char *text, uid_t uid,
		       gid_t gid);

const char *svc_state_name(enum mp_profile_state st)
{
	switch (st) {
	case MP_PROFILE_SAMPLING:
		return MEMPROF_BUS_STATE_SAMPLING;
	case MP_PROFILE_STOPPED:
		return MEMPROF_BUS_STATE_STOPPED;
	case MP_PROFILE_DISCARDED:
		return MEMPROF_BUS_STATE_DISCARDED;
	}
	return "unknown";
}

static uint64_t now_realtime_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* "Uid:\t0\t0\t0\t0" -> the first three ids (real, effective, saved). */
static int parse_ids(const char *line, unsigned long ids[3])
{
	return sscanf(line, "%*s %lu %lu %lu", &ids[0], &ids[1], &ids[2]) == 3 ? 0 : -EINVAL;
}

/*
 * The rule of ptrace_may_access() without capabilities: the caller's uid must equal the real,
 * effective and saved uid of the target, likewise for gids, and the target must be dumpable
 * (a non-dumpable process' /proc/PID belongs to root). Root may profile anything.
 */
int svc_check_access(pid_t pid, uid_t uid, gid_t gid, char *err, size_t err_len)
{
	char path[64], line[256];
	unsigned long uids[3] = { 0 }, gids[3] = { 0 };
	bool have_uid = false, have_gid = false;
	struct stat st;
	FILE *f;

	if (pid <= 0) {
		snprintf(err, err_len, "Invalid process id %d", (int)pid);
		return -EINVAL;
	}
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f) {
		int r = -errno;

		if (r == -ENOENT) {
			snprintf(err, err_len, "Process %d does not exist", (int)pid);
			return -ESRCH;
		}
		snprintf(err, err_len, "Failed to read '%s': %s", path, strerror(-r));
		return r;
	}
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "Uid:", 4))
			have_uid = parse_ids(line, uids) == 0;
		else if (!strncmp(line, "Gid:", 4))
			have_gid = parse_ids(line, gids) == 0;
	}
	fclose(f);
	if (!have_uid || !have_gid) {
		snprintf(err, err_len, "Failed to parse the credentials of process %d", (int)pid);
		return -EIO;
	}
	if (uid == 0)
		return 0;
	for (int i = 0; i < 3; i++) {
		if (uids[i] != uid) {
			snprintf(err, err_len,
				 "Permission denied: process %d runs as uid %lu, the caller is uid %u "
				 "(only root may profile other users' processes)",
				 (int)pid, uids[i], (unsigned int)uid);
			return -EPERM;
		}
		if (gids[i] != gid) {
			snprintf(err, err_len,
				 "Permission denied: process %d runs with gid %lu, the caller has gid %u",
				 (int)pid, gids[i], (unsigned int)gid);
			return -EPERM;
		}
	}
	/* /proc/PID/stat follows dumpability on every access (the directory itself may not). */
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (stat(path, &st) < 0) {
		snprintf(err, err_len, "Process %d does not exist", (int)pid);
		return -ESRCH;
	}
	if (st.st_uid != uid) {
		snprintf(err, err_len,
			 "Permission denied: process %d is not dumpable (set-id program or "
			 "PR_SET_DUMPABLE 0); only root may profile it", (int)pid);
		return -EPERM;
	}
	return 0;
}

int svc_join_check(void *ctx, pid_t pid, uid_t uid, gid_t gid, char *err, size_t err_len)
{
	(void)ctx;
	return svc_check_access(pid, uid, gid, err, err_len);
}

int svc_exec_check(void *ctx, pid_t pid, uid_t uid, gid_t gid, bool secure, char *err,
		   size_t err_len)
{
	int r = -EPERM;

	(void)ctx;
	if (secure)
		snprintf(err, err_len, "process %d exec'd a program with more privileges (set-id "
			 "or file capabilities); only root may profile it", (int)pid);
	else
		r = svc_check_access(pid, uid, gid, err, err_len);
	if (r == -ESRCH)
		return 0;	/* gone: its exit completes the trace */
	if (r < 0)
		log_notice("No longer profiling process %d for uid %u after its exec: %s", (int)pid,
			   (unsigned int)uid, err);
	return r;
}

struct svc_profile *svc_profile__find(struct memprofd *d, uint32_t id)
{
	for (struct svc_profile *sp = d->profiles; sp; sp = sp->next)
		if (sp->id == id)
			return sp;
	return NULL;
}

struct svc_profile *svc_profile__by_engine(struct memprofd *d, const struct mp_profile *p)
{
	for (struct svc_profile *sp = d->profiles; sp; sp = sp->next)
		if (sp->p == p)
			return sp;
	return NULL;
}

bool svc_profile__may_control(const struct svc_profile *sp, uid_t uid)
{
	return uid == 0 || uid == sp->owner_uid;
}

/*
 * Call @fn(id, dir, ctx) for each <state_dir>/profiles/<id> whose name is a profile id (a
 * decimal number below UINT32_MAX); the sum of what @fn returned.
 */
static uint64_t foreach_profile_dir(const char *state_dir,
				    uint64_t (*fn)(uint32_t id, const char *dir, void *ctx), void *ctx)
{
	char path[4096], dir[4400];
	struct dirent *de;
	uint64_t sum = 0;
	DIR *d;

	snprintf(path, sizeof(path), "%s/profiles", state_dir);
	d = opendir(path);
	if (!d)
		return 0;
	while ((de = readdir(d))) {
		char *end;
		unsigned long v;

		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		errno = 0;
		v = strtoul(de->d_name, &end, 10);
		if (errno || *end || v > UINT32_MAX - 1)
			continue;
		snprintf(dir, sizeof(dir), "%s/%s", path, de->d_name);
		sum += fn((uint32_t)v, dir, ctx);
	}
	closedir(d);
	return sum;
}

static uint64_t note_max_id(uint32_t id, const char *dir, void *ctx)
{
	uint32_t *max = ctx;

	if (id > *max)
		*max = id;
	return 0;
}

uint32_t svc_profile__scan_ids(const char *state_dir)
{
	uint32_t max = 0;

	foreach_profile_dir(state_dir, note_max_id, &max);
	return max;
}

/*
 * <dir>/manifest.json of a profile a previous memprofd did not complete (it was killed or
 * crashed): state "interrupted", its traces readable prefixes; @ctx points to the time. Returns
 * 1 if it was marked.
 */
static uint64_t mark_interrupted(uint32_t id, const char *dir, void *ctx)
{
	uint64_t now_us = *(const uint64_t *)ctx;
	char path[4500], tmp[4500];
	struct json_object *root, *v, *procs;
	const char *state;
	uid_t uid = 0;
	gid_t gid = 0;
	int r = 0;

	snprintf(path, sizeof(path), "%s/manifest.json", dir);
	snprintf(tmp, sizeof(tmp), "%s/.manifest.json.tmp", dir);
	root = json_object_from_file(path);
	if (!root)
		return 0;	/* none (a profile refused at start), or not ours to read */
	state = json_object_object_get_ex(root, "state", &v) ? json_object_get_string(v) : NULL;
	if ((json_object_object_get_ex(root, "complete", &v) && json_object_get_boolean(v)) ||
	    !state || !strcmp(state, "interrupted"))
		goto out;
	if (json_object_object_get_ex(root, "owner_uid", &v))
		uid = (uid_t)json_object_get_int64(v);
	if (json_object_object_get_ex(root, "owner_gid", &v))
		gid = (gid_t)json_object_get_int64(v);
	json_object_object_add(root, "state", json_object_new_string("interrupted"));
	json_object_object_add(root, "complete", json_object_new_boolean(false));
	json_object_object_add(root, "interrupted_us", json_object_new_uint64(now_us));
	if (json_object_object_get_ex(root, "processes", &procs) &&
	    json_object_is_type(procs, json_type_array))
		for (size_t i = 0; i < json_object_array_length(procs); i++) {
			struct json_object *pj = json_object_array_get_idx(procs, i), *done;

			if (!json_object_object_get_ex(pj, "trace_complete", &done) ||
			    !json_object_get_boolean(done))
				json_object_object_add(pj, "trace_complete",
						       json_object_new_boolean(false));
		}
	r = write_owned(tmp, path, json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
							       JSON_C_TO_STRING_NOSLASHESCAPE),
			uid, gid);
	if (r < 0)
		log_error("Failed to mark the interrupted profile in '%s': %s", path,
			  strerror(-r));
	else
		log_notice("Profile in '%s' was not completed (%s when memprofd ended): marked "
			   "interrupted, its traces are readable prefixes", dir, state);
	r = r < 0 ? 0 : 1;
out:
	json_object_put(root);
	return r;
}

unsigned int svc_profile__mark_interrupted(const char *state_dir)
{
	uint64_t now = now_realtime_us();

	return (unsigned int)foreach_profile_dir(state_dir, mark_interrupted, &now);
}

/* The kept reply of a Discard: sent now (the files are complete, or the wait is over). */
static void reply_discard(struct svc_profile *sp)
{
	int r;

	if (!sp->discard_call)
		return;
	r = sd_bus_reply_method_return(sp->discard_call, "");
	if (r < 0 && r != -ENOTCONN)
		log_debug("Failed to answer the discard of profile %" PRIu32 ": %s", sp->id,
			  strerror(-r));
	sp->discard_call = sd_bus_message_unref(sp->discard_call);
	sp->discard_timer = sd_event_source_disable_unref(sp->discard_timer);
}

static int on_discard_wait(sd_event_source *es, uint64_t usec, void *userdata)
{
	struct svc_profile *sp = userdata;

	log_info("Profile %" PRIu32 ": traces still being written after %llu s; Discard answered",
		 sp->id, MP_DISCARD_WAIT_US / 1000000);
	reply_discard(sp);
	return 0;
}

int svc_profile__defer_reply(struct memprofd *d, struct svc_profile *sp, sd_bus_message *m)
{
	if (!mp_profile__closing(sp->p) || sp->discard_call)
		return 0;
	if (sd_event_add_time_relative(d->event, &sp->discard_timer, CLOCK_MONOTONIC,
				       MP_DISCARD_WAIT_US, 0, on_discard_wait, sp) < 0)
		return 0;
	sp->discard_call = sd_bus_message_ref(m);
	return 1;
}

static void svc_profile__free(struct svc_profile *sp)
{
	if (!sp)
		return;
	reply_discard(sp);
	free(sp->dir);
	free(sp->object_path);
	free(sp->standing);
	free(sp->standing_text);
	free(sp);
}

void svc_profile__free_all(struct memprofd *d)
{
	while (d->profiles) {
		struct svc_profile *sp = d->profiles;

		d->profiles = sp->next;
		svc_profile__free(sp);
	}
}

/* Profiles sampling or stopped, all of them and those of @uid. */
static unsigned int count_active(struct memprofd *d, uid_t uid, unsigned int *of_uid)
{
	unsigned int n = 0;

	*of_uid = 0;
	for (struct svc_profile *sp = d->profiles; sp; sp = sp->next)
		if (mp_profile__state(sp->p) != MP_PROFILE_DISCARDED) {
			n++;
			if (sp->owner_uid == uid)
				(*of_uid)++;
		}
	return n;
}

/*
 * As with MaxClients, one user may hold a quarter of MaxProfiles (at least one), and an eighth
 * (at least one, none when MaxProfiles is 1) is kept for root, so that no user can lock out
 * the others or the administrator.
 */
void svc_profile__limits(const struct mp_config *c, unsigned int *per_user,
			 unsigned int *root_reserve)
{
	unsigned int max = c->max_profiles;

	if (c->max_profiles_per_user >= 0)
		*per_user = (unsigned int)c->max_profiles_per_user;
	else
		*per_user = max / 4 ? max / 4 : 1;
	if (c->root_profiles >= 0)
		*root_reserve = (unsigned int)c->root_profiles;
	else
		*root_reserve = max > 1 ? (max / 8 ? max / 8 : 1) : 0;
	if (*root_reserve >= max)
		*root_reserve = max - 1;
}

/* May @uid start one more profile? 0, or -ENOSPC with the limit it hit in @err. */
static int check_profile_limits(struct memprofd *d, uid_t uid, char *err, size_t err_len)
{
	unsigned int per_user, reserve, mine, n = count_active(d, uid, &mine);

	svc_profile__limits(&d->cfg, &per_user, &reserve);
	if (n >= d->cfg.max_profiles) {
		snprintf(err, err_len, "Too many profiles: %u are sampling or stopped "
			 "(MaxProfiles=%u); discard one first", n, d->cfg.max_profiles);
		return -ENOSPC;
	}
	if (uid == 0)
		return 0;
	if (mine >= per_user) {
		snprintf(err, err_len, "Too many profiles of uid %u: %u are sampling or stopped "
			 "(MaxProfilesPerUser=%u); discard one first", (unsigned int)uid, mine,
			 per_user);
		return -ENOSPC;
	}
	if (n >= d->cfg.max_profiles - reserve) {
		snprintf(err, err_len, "Too many profiles: %u are sampling or stopped and the "
			 "last %u of MaxProfiles=%u are kept for root (RootReservedProfiles)", n,
			 reserve, d->cfg.max_profiles);
		return -ENOSPC;
	}
	return 0;
}

/* Keep the newest MP_KEEP_DISCARDED discarded profiles listed; forget older ones. */
static void prune_discarded(struct memprofd *d)
{
	struct svc_profile **pp = &d->profiles;
	unsigned int seen = 0;

	while (*pp) {
		struct svc_profile *sp = *pp;

		if (mp_profile__state(sp->p) == MP_PROFILE_DISCARDED && ++seen > MP_KEEP_DISCARDED) {
			*pp = sp->next;
				svc_profile__free(sp);
			continue;
		}
		pp = &sp->next;
	}
}

static int mkdir_p_owned(const char *path, mode_t mode)
{
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* Create <state>/profiles/<id> for a new profile: a fresh directory, never an existing one. */
static int make_profile_dir(struct memprofd *d, uint32_t *id, char **out, char *err,
			    size_t err_len)
{
	char base[4096], path[4200];
	int r;

	r = mkdir_p_owned(d->cfg.state_dir, 0755);
	if (r < 0) {
		snprintf(err, err_len, "Failed to create state directory '%s': %s",
			 d->cfg.state_dir, strerror(-r));
		return r;
	}
	snprintf(base, sizeof(base), "%s/profiles", d->cfg.state_dir);
	r = mkdir_p_owned(base, 0755);
	if (r < 0) {
		snprintf(err, err_len, "Failed to create '%s': %s", base, strerror(-r));
		return r;
	}
	/* Ids stay unique across restarts (scan at start); skip any directory made meanwhile. */
	for (int tries = 0; tries < 1000; tries++, (*id)++) {
		snprintf(path, sizeof(path), "%s/%" PRIu32, base, *id);
		/* Owned by the daemon, world-readable: the traces inside belong to the caller. */
		if (mkdir(path, 0755) == 0) {
			*out = strdup(path);
			return *out ? 0 : -ENOMEM;
		}
		if (errno != EEXIST) {
			r = -errno;
			snprintf(err, err_len, "Failed to create '%s': %s", path, strerror(-r));
			return r;
		}
	}
	snprintf(err, err_len, "Failed to find a free profile directory under '%s'", base);
	return -EEXIST;
}

int svc_profile__start(struct memprofd *d, const struct svc_start_req *req,
		       struct svc_profile **out, char *err, size_t err_len)
{
	struct mp_profile_opts opts = { .sz = sizeof(opts), .out_fd = -1 };
	char unit_cg[PATH_MAX], unit_label[MP_OPT_STRING_MAX + 8];
	struct mp_target targets[3];
	size_t ntargets;
	struct svc_profile *sp = NULL;
	struct mp_opts o;
	struct mp_profile *p = NULL;
	char path[128];
	uint32_t id;
	int r;

	if (d->stopping) {
		snprintf(err, err_len, "memprofd is shutting down");
		return -ESHUTDOWN;
	}
	o = req->opts;
	ntargets = 0;
	if (MP_OPT_IS_SET(&o, UNIT)) {
		r = svc_unit_cgroup(o.unit, unit_cg, sizeof(unit_cg), err, err_len);
		if (r < 0)
			return r;
		snprintf(unit_label, sizeof(unit_label), "unit:%s", o.unit);
		targets[ntargets++] = (struct mp_target){ .kind = MP_TARGET_CGROUP,
							  .path = unit_cg, .label = unit_label,
							  .may_be_absent = true };
	}
	if (MP_OPT_IS_SET(&o, CGROUP))
		targets[ntargets++] = (struct mp_target){ .kind = MP_TARGET_CGROUP,
							  .path = o.cgroup };
	if (MP_OPT_IS_SET(&o, EXE))
		targets[ntargets++] = (struct mp_target){ .kind = MP_TARGET_EXE, .path = o.exe };
	if ((req->npids == 0 && !ntargets) || req->npids > MP_MAX_START_PIDS) {
		snprintf(err, err_len, "A profile needs between 1 and %d processes, or a target "
			 "(unit, cgroup, exe), got %zu processes", MP_MAX_START_PIDS, req->npids);
		return -EINVAL;
	}
	for (size_t i = 0; i < req->npids; i++)
		for (size_t j = 0; j < i; j++)
			if (req->pids[i] == req->pids[j]) {
				snprintf(err, err_len, "Process %d is named twice", (int)req->pids[i]);
				return -EINVAL;
			}
	if (!MP_OPT_IS_SET(&o, RATE))
		o.rate = d->cfg.default_rate;
	if (!MP_OPT_IS_SET(&o, CALLSTACK_SIZE))
		o.callstack_size = d->cfg.callstack_size;
	r = mp_opts__check(&o, err, err_len);
	if (r < 0)
		return r;
	mp_profile_opts__set(&opts, &o);
	opts.targets = targets;
	opts.ntargets = ntargets;
	r = check_profile_limits(d, req->uid, err, err_len);
	if (r < 0)
		return r;
	for (size_t i = 0; i < req->npids; i++) {
		r = svc_check_access(req->pids[i], req->uid, req->gid, err, err_len);
		if (r < 0)
			return r;
	}

	id = d->next_id;
	sp = calloc(1, sizeof(*sp));
	if (!sp) {
		snprintf(err, err_len, "Out of memory");
		return -ENOMEM;
	}
	r = make_profile_dir(d, &id, &sp->dir, err, err_len);
	if (r < 0)
		goto err_free;

	opts.out_dir = sp->dir;
	opts.owner_uid = req->uid;
	opts.owner_gid = req->gid;
	if (!d->engine) {	/* a service without BPF (tests/fuzz/fuzz_bus.c) */
		snprintf(err, err_len, "Failed to start profiling: the BPF programs are not "
			 "loaded");
		r = -ENODEV;
		goto err_rmdir;
	}
	err[0] = '\0';
	r = mp_engine__start(d->engine, &opts, req->pids, req->npids, &p, err, err_len);
	if (r < 0) {
		if (!err[0])
			snprintf(err, err_len, "Failed to start profiling: %s", strerror(-r));
		goto err_rmdir;
	}

	snprintf(path, sizeof(path), MEMPROF_BUS_PROFILE_PREFIX "/%" PRIu32, id);
	sp->object_path = strdup(path);
	if (!sp->object_path) {
		/* The engine profile exists: finish it rather than leak it unreachable. */
		mp_profile__stop(p);
		mp_profile__discard(p);
		snprintf(err, err_len, "Out of memory");
		r = -ENOMEM;
		goto err_free;
	}
	sp->id = id;
	sp->d = d;
	sp->p = p;
	sp->owner_uid = req->uid;
	sp->owner_gid = req->gid;
	sp->start_realtime_us = now_realtime_us();
	sp->to_fd = o.output.fd >= 0;
	sp->last_state = mp_profile__state(p);
	sp->next = d->profiles;
	d->profiles = sp;
	d->next_id = id + 1;

	if (req->npids)
		log_notice("Profile %" PRIu32 " started by uid %u: %zu process(es) from %d, rate %g, "
			   "traces %s", id, (unsigned int)req->uid, req->npids, (int)req->pids[0],
			   opts.rate, sp->to_fd ? "to the caller's file" : sp->dir);
	for (size_t i = 0; i < ntargets; i++)
		log_notice("Profile %" PRIu32 " started by uid %u: every process of %s, rate %g, "
			   "traces %s", id, (unsigned int)req->uid,
			   targets[i].label ? targets[i].label : targets[i].path, opts.rate,
			   sp->to_fd ? "to the caller's file" : sp->dir);
	svc_profile__write_manifest(d, sp);
	memprofd__update_status(d);
	*out = sp;
	return 0;

err_rmdir:
	rmdir(sp->dir);
err_free:
	svc_profile__free(sp);
	return r;
}

int svc_profile__add_process(struct memprofd *d, struct svc_profile *sp, pid_t pid, int out_fd,
			     uid_t uid, gid_t gid, char *err, size_t err_len)
{
	int r;

	r = svc_check_access(pid, uid, gid, err, err_len);
	if (r < 0)
		return r;
	if (mp_profile__state(sp->p) != MP_PROFILE_SAMPLING) {
		snprintf(err, err_len, "Profile %" PRIu32 " is %s, not sampling", sp->id,
			 svc_state_name(mp_profile__state(sp->p)));
		return -EINVAL;
	}
	err[0] = '\0';
	r = mp_profile__sync_pid(sp->p, pid, out_fd, err, err_len);
	if (r < 0 && !err[0])
		snprintf(err, err_len, "Failed to add process %d to profile %" PRIu32 ": %s",
			 (int)pid, sp->id, strerror(-r));
	if (r > 0)
		log_debug("Profile %" PRIu32 ": process %d in sync%s", sp->id, (int)pid,
			  out_fd >= 0 ? ", its trace to the caller's file" : "");
	return r;
}

/*
 * Stop (from sampling) or discard (from stopped) @sp. What happened before the request (an exit
 * the caller saw, frees made before it) counts: the engine delivers it first.
 */
static int profile_transition(struct memprofd *d, struct svc_profile *sp, bool discard, char *err,
			      size_t err_len)
{
	enum mp_profile_state from = discard ? MP_PROFILE_STOPPED : MP_PROFILE_SAMPLING;
	enum mp_profile_state st;
	int r;

	mp_engine__process(d->engine);
	st = mp_profile__state(sp->p);
	if (st != from) {
		if (discard)
			snprintf(err, err_len, "Profile %" PRIu32 " is %s; only a stopped profile "
				 "can be discarded%s", sp->id, svc_state_name(st),
				 st == MP_PROFILE_SAMPLING ? " (stop it first)" : "");
		else
			snprintf(err, err_len, "Profile %" PRIu32 " is %s, not sampling", sp->id,
				 svc_state_name(st));
		return -EINVAL;
	}
	r = discard ? mp_profile__discard(sp->p) : mp_profile__stop(sp->p);
	if (r < 0) {
		snprintf(err, err_len, "Failed to %s profile %" PRIu32 ": %s",
			 discard ? "discard" : "stop", sp->id, strerror(-r));
		return r;
	}
	svc_profile__state_changed(d, sp);
	return 0;
}

int svc_profile__stop(struct memprofd *d, struct svc_profile *sp, char *err, size_t err_len)
{
	return profile_transition(d, sp, false, err, err_len);
}

int svc_profile__discard(struct memprofd *d, struct svc_profile *sp, char *err, size_t err_len)
{
	return profile_transition(d, sp, true, err, err_len);
}

/* A trace that could not be written whole (a full disk), logged once it is complete. */
static void log_write_failure(void *ctx, const char *msg)
{
	const struct svc_profile *sp = ctx;

	log_error("Profile %" PRIu32 ": %s", sp->id, msg);
}

/* A trace whose writes began to fail: one line when it is noticed; the count at the end. */
void svc_profile__log_write_failures(struct svc_profile *sp)
{
	mp_profile__new_write_failures(sp->p, log_write_failure, sp);
	if (!sp->failures_logged && mp_profile__state(sp->p) == MP_PROFILE_DISCARDED &&
	    !mp_profile__closing(sp->p)) {
		sp->failures_logged = true;
		mp_profile__write_failures(sp->p, log_write_failure, sp);
	}
}

void svc_profile__state_changed(struct memprofd *d, struct svc_profile *sp)
{
	enum mp_profile_state st = mp_profile__state(sp->p);
	bool changed = st != sp->last_state;

	if (changed)
		log_notice("Profile %" PRIu32 ": %s", sp->id, svc_state_name(st));
	svc_profile__log_write_failures(sp);
	if (st == MP_PROFILE_DISCARDED && !mp_profile__closing(sp->p))
		reply_discard(sp);
	sp->last_state = st;
	svc_profile__write_manifest(d, sp);
	mp_bus_server__profile_changed(d->bus, sp);
	/* Not when the engine says the files are written (the same state): that may come from
	 * within a walk of the profiles (a manifest's counts read the engine's events). */
	if (st == MP_PROFILE_DISCARDED && changed)
		prune_discarded(d);
	memprofd__update_status(d);
}

int svc_counters(struct memprofd *d, const char **names, uint64_t *values, size_t max)
{
	uint64_t bpf[MP_STAT__MAX], drops[MP_DROP__MAX];
	size_t n = 0;
	int r;

	if (!d->engine)
		return -ENODEV;
	/* records not yet read, as in svc_profile__procs() */
	mp_engine__process_max(d->engine, MP_RING_SLICE_NS);
	r = mp_engine__stats(d->engine, bpf, MP_STAT__MAX);
	if (r < 0)
		return r;
	mp_engine__drops(d->engine, drops, MP_DROP__MAX);
	for (unsigned int i = 0; i < MP_STAT__MAX && n < max; i++, n++) {
		names[n] = mp_stat__name(i);
		values[n] = bpf[i];
	}
	for (unsigned int i = 0; i < MP_DROP__MAX && n < max; i++, n++) {
		names[n] = mp_engine_drop__name(i);
		values[n] = drops[i];
	}
	return (int)n;
}

int svc_profile__procs(const struct svc_profile *sp, struct mp_proc_stats **out)
{
	size_t n, m;

	/* alloc/free records wake the engine in batches (engine.c, MP_FLUSH_NS): read them, for a
	 * while at most (a storm of forks, each attached, must not hold the answer) */
	mp_engine__process_max(sp->d->engine, MP_RING_SLICE_NS);
	n = mp_profile__procs(sp->p, NULL, 0);
	*out = NULL;
	if (!n)
		return 0;
	*out = calloc(n, sizeof(**out));
	if (!*out)
		return -ENOMEM;
	m = mp_profile__procs(sp->p, *out, n);
	return (int)(m < n ? m : n);
}

/* The manifest's "retired": the processes no longer listed (MP_KEEP_EXITED), summed; NULL when
 * there are none. */
static struct json_object *retired_json(const struct mp_profile *p, double rate)
{
	struct mp_summary_proc sum;
	struct mp_proc_stats rs;
	struct json_object *j;
	uint64_t n = mp_profile__retired(p, &rs);

	if (!n)
		return NULL;
	mp_summary_proc__from_stats(&sum, &rs, rate);
	j = mp_summary_proc__json(&sum);
	if (j)
		json_object_object_add(j, "processes", json_object_new_uint64(n));
	return j;
}

/* The manifest's "targets": name, path and counts of each. */
static struct json_object *targets_json(const struct mp_profile *p)
{
	struct mp_target_stats ts[MP_MAX_TARGETS];
	size_t n = mp_profile__targets(p, ts, MP_MAX_TARGETS);
	struct json_object *a = json_object_new_array();

	for (size_t i = 0; i < n && i < MP_MAX_TARGETS; i++) {
		struct json_object *j = json_object_new_object();

		json_object_object_add(j, "name", json_object_new_string(ts[i].label));
		json_object_object_add(j, "path", json_object_new_string(ts[i].path));
		json_object_object_add(j, "joined", json_object_new_uint64(ts[i].joined));
		json_object_object_add(j, "skipped", json_object_new_uint64(ts[i].skipped));
		json_object_object_add(j, "failed", json_object_new_uint64(ts[i].failed));
		json_object_array_add(a, j);
	}
	return a;
}

/* The manifest's "settings": every option of the table by its key, as the profile has it. */
static struct json_object *settings_json(const struct mp_opts *o)
{
	struct json_object *set = json_object_new_object();

	for (size_t i = 0; i < MP_OPT__COUNT; i++) {
		const struct mp_option *opt = &mp_options[i];
		const void *v = (const char *)o + opt->offset;
		struct json_object *j;
		char text[64];

		switch (opt->type) {
		case MP_OPT_T_DOUBLE:
			j = json_object_new_double(*(const double *)v);
			break;
		case MP_OPT_T_UINT:
			j = json_object_new_int64(*(const uint32_t *)v);
			break;
		case MP_OPT_T_BOOL:
			j = json_object_new_boolean(*(const bool *)v);
			break;
		case MP_OPT_T_DURATION:
			j = json_object_new_uint64(*(const uint64_t *)v);
			break;
		case MP_OPT_T_ENUM:
			mp_option__format(opt, o, text, sizeof(text));
			j = json_object_new_string(text);
			break;
		case MP_OPT_T_STRING:
			if (!((o->set >> i) & 1))
				continue;
			j = json_object_new_string(*(const char *const *)v);
			break;
		default:
			continue;	/* a file: the manifest names the traces */
		}
		json_object_object_add(set, opt->key, j);
	}
	return set;
}

static struct json_object *manifest_json(struct memprofd *d, struct svc_profile *sp)
{
	const struct mp_profile_opts *o = mp_profile__opts(sp->p);
	enum mp_profile_state st = mp_profile__state(sp->p);
	struct json_object *root = json_object_new_object(), *set, *procs, *stats, *retired;
	struct mp_proc_stats *ps = NULL;
	uint64_t counters[SVC_MAX_COUNTERS];
	const char *names[SVC_MAX_COUNTERS];
	int n, nc;

	json_object_object_add(root, "id", json_object_new_int64(sp->id));
	json_object_object_add(root, "state", json_object_new_string(svc_state_name(st)));
	/* complete: every trace completed and its file written and closed */
	json_object_object_add(root, "complete", json_object_new_boolean(
			       st == MP_PROFILE_DISCARDED && !mp_profile__closing(sp->p)));
	json_object_object_add(root, "owner_uid", json_object_new_int64(sp->owner_uid));
	json_object_object_add(root, "owner_gid", json_object_new_int64(sp->owner_gid));
	json_object_object_add(root, "start_time_us", json_object_new_uint64(sp->start_realtime_us));
	json_object_object_add(root, "updated_us", json_object_new_uint64(now_realtime_us()));
	json_object_object_add(root, "directory", json_object_new_string(sp->dir));
	json_object_object_add(root, "first_trace_to_fd", json_object_new_boolean(sp->to_fd));

	set = settings_json(&o->opt);
	json_object_object_add(root, "settings", set);
	if (sp->standing)
		json_object_object_add(root, "standing", json_object_new_string(sp->standing));
	json_object_object_add(root, "targets", targets_json(sp->p));

	procs = json_object_new_array();
	n = svc_profile__procs(sp, &ps);
	for (int i = 0; ps && i < n; i++) {
		struct mp_summary_proc sum;

		mp_summary_proc__from_stats(&sum, &ps[i], o->rate);
		json_object_array_add(procs, mp_summary_proc__json(&sum));
	}
	free(ps);
	json_object_object_add(root, "processes", procs);
	retired = retired_json(sp->p, o->rate);
	if (retired)
		json_object_object_add(root, "retired", retired);

	nc = svc_counters(d, names, counters, SVC_MAX_COUNTERS);
	if (nc >= 0) {
		stats = json_object_new_object();
		for (int i = 0; i < nc; i++)
			json_object_object_add(stats, names[i], json_object_new_uint64(counters[i]));
		json_object_object_add(root, "engine_stats", stats);
	}
	return root;
}

/* Slack a manifest keeps past its text (trailing white space, which JSON allows), so that a
 * later, slightly longer version still fits in its blocks when a full disk forces an in-place
 * rewrite: the file is padded to a page boundary at least this far past its text. */
#define MANIFEST_SLACK	256
#define MANIFEST_PAGE	4096

/* Write @text (@len bytes) at offset 0 of @fd, then a newline and spaces up to @size. */
static int write_padded(int fd, const char *text, size_t len, size_t size)
{
	char pad[512];
	size_t off = 0;

	while (off < size) {
		const char *src = text + off;
		size_t n = len - off;
		ssize_t w;

		if (off >= len) {	/* the padding: "\n" first, then spaces */
			n = size - off < sizeof(pad) ? size - off : sizeof(pad);
			memset(pad, ' ', n);
			if (off == len)
				pad[0] = '\n';
			src = pad;
		}
		w = pwrite(fd, src, n, (off_t)off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -ENOSPC;
		off += (size_t)w;
	}
	return 0;
}

/*
 * Write @text to @final as the owner's (uid, gid), mode 0640: atomically through @tmp and a
 * rename, or, when that fails (a full disk has no room for a second copy), in place over the
 * old file without giving its blocks back first: the text, then white space over what is left
 * of the old one (every copy is padded, MANIFEST_SLACK). Returns 0 or -errno.
 */
static int write_owned(const char *tmp, const char *final, const char *text, uid_t uid,
		       gid_t gid)
{
	size_t len = strlen(text);
	size_t size = (len + MANIFEST_SLACK + MANIFEST_PAGE - 1) / MANIFEST_PAGE * MANIFEST_PAGE;
	int r = 0;

	for (int in_place = 0; in_place < 2; in_place++) {
		const char *path = in_place ? final : tmp;
		int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW |
			      (in_place ? 0 : O_TRUNC), 0640);
		struct stat st;

		if (fd < 0) {
			r = -errno;
			continue;
		}
		r = 0;
		if (fchown(fd, uid, gid) < 0 && errno != EPERM)
			r = -errno;
		/* in place: keep the old size when it is larger, so no block is needed */
		if (!r && in_place && fstat(fd, &st) == 0 && (size_t)st.st_size > size)
			size = (size_t)st.st_size;
		if (!r)
			r = write_padded(fd, text, len, size);
		if (!r && in_place && ftruncate(fd, (off_t)size) < 0)
			r = -errno;
		if (close(fd) < 0 && !r)
			r = -errno;
		if (!r && !in_place && rename(tmp, final) < 0)
			r = -errno;
		if (!in_place && r)
			unlink(tmp);
		if (!r)
			return 0;
	}
	return r;
}

int svc_profile__write_manifest(struct memprofd *d, struct svc_profile *sp)
{
	char tmp[4200], final[4200];
	struct json_object *root;
	int r;

	snprintf(tmp, sizeof(tmp), "%s/.manifest.json.tmp", sp->dir);
	snprintf(final, sizeof(final), "%s/manifest.json", sp->dir);
	for (int pass = 0;; pass++) {
		struct json_object *v;
		bool complete;

		root = manifest_json(d, sp);
		complete = json_object_object_get_ex(root, "complete", &v) &&
			   json_object_get_boolean(v);
		r = write_owned(tmp, final, json_object_to_json_string_ext(root,
				JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE),
				sp->owner_uid, sp->owner_gid);
		/* Building it reads the engine's pending events, which may complete the profile's
		 * files, and the final manifest written from that callback would be overwritten
		 * by this older one: write the final state once more. */
		if (r < 0 || complete || pass || mp_profile__state(sp->p) != MP_PROFILE_DISCARDED ||
		    mp_profile__closing(sp->p))
			break;
		json_object_put(root);
	}
	/* once when it begins to fail, once when it works again: not every 5 s */
	if (r < 0 && !sp->manifest_failures++)
		log_error("Failed to write manifest '%s': %s (retried every %llu s)", final,
			  strerror(-r), MP_FLUSH_INTERVAL_US / 1000000);
	else if (!r && sp->manifest_failures) {
		log_notice("Wrote manifest '%s' again, after %u failed attempts", final,
			   sp->manifest_failures);
		sp->manifest_failures = 0;
	}
	json_object_put(root);
	return r;
}
