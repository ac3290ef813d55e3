// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The control API over D-Bus (sd-bus). Peer-to-peer connections on the private socket carry
 * no sender name: the caller is whoever is at the other end of the socket (SO_PEERCRED). On a
 * bus, the bus daemon vouches for the sender (sd_bus_query_sender_creds).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-daemon.h>

#include "bpf/memprof.h"
#include "daemon/service/bus.h"
#include "daemon/service/bus_internal.h"
#include "daemon/engine/summary.h"
#include "daemon/service/memprofd.h"
#include "userspace-lib/client/bus_dict.h"
#include "userspace-lib/codec/outfile.h"

/* A property's value, of its protocol signature (<memprof/bus.h>: NAME_SIG). */
#define APPEND(reply, name, ...) sd_bus_message_append(reply, name##_SIG, __VA_ARGS__)
#define PROPERTY(name, get, flags) SD_BUS_PROPERTY(name, name##_SIG, get, 0, flags)

/* ------------------------------------------------------------------ callers and errors */

struct caller {
	uid_t uid;
	gid_t gid;
};

static int get_caller(struct mp_bus_server *s, sd_bus_message *m, struct caller *c,
		      sd_bus_error *error)
{
	sd_bus *bus = sd_bus_message_get_bus(m);
	sd_bus_creds *creds = NULL;
	int r;

	if (!s->bus_conn || bus != s->bus_conn->bus) {
		/* Peer-to-peer: the kernel says who connected. */
		struct ucred uc;
		socklen_t len = sizeof(uc);
		int fd = sd_bus_get_fd(bus);

		if (fd < 0 || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0)
			return sd_bus_error_setf(error, MEMPROF_BUS_ERR_PERMISSION,
						 "Failed to get the caller's credentials: %s",
						 strerror(fd < 0 ? -fd : errno));
		c->uid = uc.uid;
		c->gid = uc.gid;
		return 0;
	}
	/*
	 * dbus-daemon vouches for the uid (and pid) but reports no primary gid; AUGMENT lets
	 * sd-bus read the missing gid from /proc/<pid>, the bus' fields taking precedence.
	 */
	r = sd_bus_query_sender_creds(m, SD_BUS_CREDS_UID | SD_BUS_CREDS_EUID | SD_BUS_CREDS_GID |
				      SD_BUS_CREDS_EGID | SD_BUS_CREDS_PID | SD_BUS_CREDS_AUGMENT,
				      &creds);
	if (r < 0)
		return sd_bus_error_setf(error, MEMPROF_BUS_ERR_PERMISSION,
					 "Failed to get the caller's credentials: %s", strerror(-r));
	if (sd_bus_creds_get_euid(creds, &c->uid) < 0 && sd_bus_creds_get_uid(creds, &c->uid) < 0)
		r = -ENODATA;
	else if (sd_bus_creds_get_egid(creds, &c->gid) < 0 &&
		 sd_bus_creds_get_gid(creds, &c->gid) < 0)
		r = -ENODATA;
	sd_bus_creds_unref(creds);
	if (r < 0)
		return sd_bus_error_setf(error, MEMPROF_BUS_ERR_PERMISSION,
					 "The bus did not tell the caller's uid and gid");
	return 0;
}

static int set_error(sd_bus_error *error, int r, bool state_op, const char *msg)
{
	const char *name;

	switch (-r) {
	case EBUSY:
		name = MEMPROF_BUS_ERR_BUSY;
		break;
	case ESRCH:
		name = MEMPROF_BUS_ERR_NO_PROCESS;
		break;
	case ENOENT:
		name = MEMPROF_BUS_ERR_NO_ALLOCATOR;
		break;
	case EPERM:
	case EACCES:
		name = MEMPROF_BUS_ERR_PERMISSION;
		break;
	case EINVAL:
		name = state_op ? MEMPROF_BUS_ERR_BAD_STATE : MEMPROF_BUS_ERR_INVALID;
		break;
	case ENOSPC:
		name = MEMPROF_BUS_ERR_LIMIT;
		break;
	default:
		name = MEMPROF_BUS_ERR_FAILED;
		break;
	}
	return sd_bus_error_setf(error, name, "%s", msg);
}

/* ------------------------------------------------------------------ org.memprofd.Manager1 */

/*
 * An a{sv} of profile options into @o (options.h checks each one). @only: a key other than it
 * is refused, naming it (NULL: every option of the table).
 */
static int parse_options(sd_bus_message *m, struct mp_opts *o, const char *only,
			 sd_bus_error *error)
{
	int r;

	mp_opts__init(o);
	r = sd_bus_message_enter_container(m, 'a', "{sv}");
	if (r < 0)
		return sd_bus_error_setf(error, MEMPROF_BUS_ERR_INVALID,
					 "Expected options of type a{sv}");
	while ((r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
		const char *key;
		char msg[512];

		r = sd_bus_message_read(m, "s", &key);
		if (r < 0)
			return r;
		if (only && strcmp(key, only))
			return sd_bus_error_setf(error, MEMPROF_BUS_ERR_INVALID,
						 "Unknown option '%s' (known: %s)", key, only);
		r = mp_opts__read_bus(m, key, o, msg, sizeof(msg));
		if (r == -EINVAL || r == -ENOENT)
			return sd_bus_error_set(error, MEMPROF_BUS_ERR_INVALID, msg);
		if (r < 0)
			return r;
		r = sd_bus_message_exit_container(m);
		if (r < 0)
			return r;
	}
	if (r < 0)
		return r;
	return sd_bus_message_exit_container(m);
}

static int method_start(sd_bus_message *m, void *userdata, sd_bus_error *error)
{
	struct mp_bus_server *s = userdata;
	struct svc_start_req req = { 0 };
	struct svc_profile *sp;
	struct caller c;
	const void *pids;
	size_t size;
	char err[512];
	int r;

	r = get_caller(s, m, &c, error);
	if (r < 0)
		return r;
	r = sd_bus_message_read_array(m, 'i', &pids, &size);
	if (r < 0)
		return sd_bus_error_setf(error, MEMPROF_BUS_ERR_INVALID,
					 "Expected process ids of type ai");
	req.pids = pids;
	req.npids = size / sizeof(int32_t);
	r = parse_options(m, &req.opts, NULL, error);
	if (r < 0)
		return r;
	req.uid = c.uid;
	req.gid = c.gid;
	r = svc_profile__start(s->d, &req, &sp, err, sizeof(err));
	if (r < 0) {
		log_info("Start request of uid %u refused: %s", (unsigned int)c.uid, err);
		return set_error(error, r, false, err);
	}
	return sd_bus_reply_method_return(m, MEMPROF_BUS_SIG_PATH, sp->object_path);
}

static int append_pids(sd_bus_message *reply, const struct svc_profile *sp)
{
	struct mp_proc_stats *ps;
	int n = svc_profile__procs(sp, &ps), r;

	if (n < 0)
		return n;
	r = sd_bus_message_open_container(reply, 'a', "u");
	for (int i = 0; r >= 0 && i < n; i++)
		r = sd_bus_message_append(reply, "u", (uint32_t)ps[i].pid);
	if (r >= 0)
		r = sd_bus_message_close_container(reply);
	free(ps);
	return r;
}

static int method_list(sd_bus_message *m, void *userdata, sd_bus_error *error)
{
	struct mp_bus_server *s = userdata;
	sd_bus_message *reply = NULL;
	int r;

	r = sd_bus_message_new_method_return(m, &reply);
	if (r < 0)
		return r;
	r = sd_bus_message_open_container(reply, 'a', "(" MEMPROF_BUS_PROFILE_LIST_ENTRY ")");
	for (struct svc_profile *sp = s->d->profiles; r >= 0 && sp; sp = sp->next) {
		r = sd_bus_message_open_container(reply, 'r', MEMPROF_BUS_PROFILE_LIST_ENTRY);
		if (r >= 0)
			r = sd_bus_message_append(reply, "usoud", sp->id,
						  svc_state_name(mp_profile__state(sp->p)),
						  sp->object_path, (uint32_t)sp->owner_uid,
						  mp_profile__opts(sp->p)->rate);
		if (r >= 0)
			r = append_pids(reply, sp);
		if (r >= 0)
			r = sd_bus_message_close_container(reply);
	}
	if (r >= 0)
		r = sd_bus_message_close_container(reply);
	if (r >= 0)
		r = sd_bus_send(NULL, reply, NULL);
	sd_bus_message_unref(reply);
	return r;
}

/* Stop or Discard (the member of @m) profile @sp, @id (NULL: there is no such profile). */
static int profile_op(struct mp_bus_server *s, sd_bus_message *m, struct svc_profile *sp,
		      uint32_t id, sd_bus_error *error)
{
	bool discard = sd_bus_message_is_method_call(m, NULL, MEMPROF_BUS_DISCARD) > 0;
	const char *what = discard ? "discard" : "stop";
	struct caller c;
	char err[512];
	int r;

	r = get_caller(s, m, &c, error);
	if (r < 0)
		return r;
	if (!sp)
		return sd_bus_error_setf(error, MEMPROF_BUS_ERR_NOT_FOUND, "No profile %" PRIu32,
					 id);
	if (!svc_profile__may_control(sp, c.uid))
		return sd_bus_error_setf(error, MEMPROF_BUS_ERR_PERMISSION,
					 "Permission denied: profile %" PRIu32 " belongs to uid %u; "
					 "uid %u may not %s it", sp->id, (unsigned int)sp->owner_uid,
					 (unsigned int)c.uid, what);
	r = discard ? svc_profile__discard(s->d, sp, err, sizeof(err)) :
		      svc_profile__stop(s->d, sp, err, sizeof(err));
	if (r < 0)
		return set_error(error, r, true, err);
	/* a discard is answered once its trace files are written (bounded) */
	if (discard && svc_profile__defer_reply(s->d, sp, m) > 0)
		return 1;
	return sd_bus_reply_method_return(m, "");
}

/* Manager1.Stop(u id), Manager1.Discard(u id) */
static int manager_profile_op(sd_bus_message *m, void *userdata, sd_bus_error *error)
{
	struct mp_bus_server *s = userdata;
	uint32_t id;
	int r = sd_bus_message_read(m, MEMPROF_BUS_SIG_ID, &id);

	if (r < 0)
		return r;
	return profile_op(s, m, svc_profile__find(s->d, id), id, error);
}

static int prop_version(sd_bus *bus, const char *path, const char *iface, const char *prop,
			sd_bus_message *reply, void *userdata, sd_bus_error *error)
{
	return APPEND(reply, MEMPROF_BUS_VERSION, MP_VERSION);
}

static int prop_manager(sd_bus *bus, const char *path, const char *iface, const char *prop,
			sd_bus_message *reply, void *userdata, sd_bus_error *error)
{
	struct mp_bus_server *s = userdata;
	struct memprofd *d = s->d;

	if (!strcmp(prop, MEMPROF_BUS_DEFAULT_RATE))
		return APPEND(reply, MEMPROF_BUS_DEFAULT_RATE, d->cfg.default_rate);
	if (!strcmp(prop, MEMPROF_BUS_DEFAULT_CALLSTACK))
		return APPEND(reply, MEMPROF_BUS_DEFAULT_CALLSTACK, d->cfg.callstack_size);
	if (!strcmp(prop, MEMPROF_BUS_STATE_DIRECTORY))
		return APPEND(reply, MEMPROF_BUS_STATE_DIRECTORY, d->cfg.state_dir);
	if (!strcmp(prop, MEMPROF_BUS_MAX_PROFILES))
		return APPEND(reply, MEMPROF_BUS_MAX_PROFILES, d->cfg.max_profiles);
	if (!strcmp(prop, MEMPROF_BUS_CLIENTS))
		return APPEND(reply, MEMPROF_BUS_CLIENTS, s->nclients);
	if (!strcmp(prop, MEMPROF_BUS_REFUSED_CLIENTS))
		return APPEND(reply, MEMPROF_BUS_REFUSED_CLIENTS, s->refused);
	if (!strcmp(prop, MEMPROF_BUS_MECHANISMS))
		return APPEND(reply, MEMPROF_BUS_MECHANISMS, mp_engine__mechanisms(d->engine));
	return -ENOENT;
}

static int prop_stats(sd_bus *bus, const char *path, const char *iface, const char *prop,
		      sd_bus_message *reply, void *userdata, sd_bus_error *error)
{
	struct mp_bus_server *s = userdata;
	uint64_t values[SVC_MAX_COUNTERS];
	const char *names[SVC_MAX_COUNTERS];
	int n, r;

	n = svc_counters(s->d, names, values, SVC_MAX_COUNTERS);
	if (n < 0)
		return sd_bus_error_setf(error, MEMPROF_BUS_ERR_FAILED,
					 "Failed to read the counters: %s", strerror(-n));
	r = sd_bus_message_open_container(reply, 'a', "(" MEMPROF_BUS_STATS_ENTRY ")");
	for (int i = 0; r >= 0 && i < n; i++)
		r = sd_bus_message_append(reply, "(" MEMPROF_BUS_STATS_ENTRY ")", names[i],
					  values[i]);
	if (r >= 0)
		r = sd_bus_message_close_container(reply);
	return r;
}

static const sd_bus_vtable manager_vtable[] = {
	SD_BUS_VTABLE_START(0),
	PROPERTY(MEMPROF_BUS_VERSION, prop_version, SD_BUS_VTABLE_PROPERTY_CONST),
	PROPERTY(MEMPROF_BUS_DEFAULT_RATE, prop_manager, 0),
	PROPERTY(MEMPROF_BUS_DEFAULT_CALLSTACK, prop_manager, 0),
	PROPERTY(MEMPROF_BUS_STATE_DIRECTORY, prop_manager, 0),
	PROPERTY(MEMPROF_BUS_MAX_PROFILES, prop_manager, 0),
	PROPERTY(MEMPROF_BUS_CLIENTS, prop_manager, 0),
	PROPERTY(MEMPROF_BUS_REFUSED_CLIENTS, prop_manager, 0),
	PROPERTY(MEMPROF_BUS_STATS, prop_stats, 0),
	PROPERTY(MEMPROF_BUS_MECHANISMS, prop_manager, SD_BUS_VTABLE_PROPERTY_CONST),
	SD_BUS_METHOD_WITH_ARGS(MEMPROF_BUS_START,
				SD_BUS_ARGS(MEMPROF_BUS_SIG_PIDS, pids, MEMPROF_BUS_SIG_OPTIONS,
					    options),
				SD_BUS_RESULT(MEMPROF_BUS_SIG_PATH, profile), method_start,
				SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_ARGS(MEMPROF_BUS_LIST_PROFILES, SD_BUS_NO_ARGS,
				SD_BUS_RESULT(MEMPROF_BUS_SIG_PROFILE_LIST, profiles), method_list,
				SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_ARGS(MEMPROF_BUS_STOP, SD_BUS_ARGS(MEMPROF_BUS_SIG_ID, id),
				SD_BUS_NO_RESULT, manager_profile_op, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_ARGS(MEMPROF_BUS_DISCARD, SD_BUS_ARGS(MEMPROF_BUS_SIG_ID, id),
				SD_BUS_NO_RESULT, manager_profile_op, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_VTABLE_END
};

/* ------------------------------------------------------------------ org.memprofd.Profile1 */

static int prop_profile(sd_bus *bus, const char *path, const char *iface, const char *prop,
			sd_bus_message *reply, void *userdata, sd_bus_error *error)
{
	struct svc_profile *sp = userdata;
	const struct mp_profile_opts *o = mp_profile__opts(sp->p);

	if (!strcmp(prop, MEMPROF_BUS_ID))
		return APPEND(reply, MEMPROF_BUS_ID, sp->id);
	if (!strcmp(prop, MEMPROF_BUS_STATE))
		return APPEND(reply, MEMPROF_BUS_STATE, svc_state_name(mp_profile__state(sp->p)));
	if (!strcmp(prop, MEMPROF_BUS_OWNER))
		return APPEND(reply, MEMPROF_BUS_OWNER, (uint32_t)sp->owner_uid);
	if (!strcmp(prop, MEMPROF_BUS_RATE))
		return APPEND(reply, MEMPROF_BUS_RATE, o->rate);
	if (!strcmp(prop, MEMPROF_BUS_CALLSTACK_SIZE))
		return APPEND(reply, MEMPROF_BUS_CALLSTACK_SIZE, o->callstack_size);
	if (!strcmp(prop, MEMPROF_BUS_FOLLOW_FORKS))
		return APPEND(reply, MEMPROF_BUS_FOLLOW_FORKS, !o->no_follow_forks);
	if (!strcmp(prop, MEMPROF_BUS_DURATION))
		return APPEND(reply, MEMPROF_BUS_DURATION, o->duration_us);
	if (!strcmp(prop, MEMPROF_BUS_FORMAT_VERSION))
		return APPEND(reply, MEMPROF_BUS_FORMAT_VERSION,
			      (uint16_t)(o->format_version ? o->format_version : 2));
	if (!strcmp(prop, MEMPROF_BUS_COMPRESSED))
		return APPEND(reply, MEMPROF_BUS_COMPRESSED, o->zstd_level > 0);
	if (!strcmp(prop, MEMPROF_BUS_DIRECTORY))
		return APPEND(reply, MEMPROF_BUS_DIRECTORY, sp->dir);
	if (!strcmp(prop, MEMPROF_BUS_START_TIMESTAMP))
		return APPEND(reply, MEMPROF_BUS_START_TIMESTAMP, sp->start_realtime_us);
	if (!strcmp(prop, MEMPROF_BUS_STANDING))
		return APPEND(reply, MEMPROF_BUS_STANDING, sp->standing ? sp->standing : "");
	return -ENOENT;
}

/*
 * The per-process properties: an array of @sig, one element per process of @sp that @item
 * appends, from one snapshot of the profile's processes.
 */
static int append_procs(sd_bus_message *reply, struct svc_profile *sp, const char *sig,
			int (*item)(sd_bus_message *reply, const char *sig,
				    const struct mp_proc_stats *ps))
{
	struct mp_proc_stats *ps;
	int n = svc_profile__procs(sp, &ps), r;

	if (n < 0)
		return n;
	r = sd_bus_message_open_container(reply, 'a', sig);
	for (int i = 0; r >= 0 && i < n; i++)
		r = item(reply, sig, &ps[i]);
	if (r >= 0)
		r = sd_bus_message_close_container(reply);
	free(ps);
	return r;
}

/*
 * ProcessStatus: one a{sv} per process, its fields by name (<memprof/bus.h>). The mode, the
 * trace, a detach and a write error are there only when the process has them; the write
 * error is the errno name of the first failed write (ENOSPC...) or "stalled" for an output
 * that did not keep up, with its CLOCK_REALTIME time and the events not written (write
 * errors and stalls together).
 */
/* The figures of @ps that add up across processes (ProcessStatus and Retired share them). */
static int append_figures(sd_bus_message *reply, const struct mp_proc_stats *ps)
{
	const struct {
		const char *key;
		uint64_t value;
	} counts[] = {	/* all of signature "t" */
		{ MEMPROF_PROC_SAMPLED_BLOCKS, ps->samples },
		{ MEMPROF_PROC_SAMPLES, ps->nsamples },
		{ MEMPROF_PROC_LIVE_SAMPLES, ps->live_nsamples },
		{ MEMPROF_PROC_FREED_BLOCKS, ps->frees },
		{ MEMPROF_PROC_DROPS, ps->drops },
	};
	int r = 0;

	for (size_t i = 0; r >= 0 && i < sizeof(counts) / sizeof(counts[0]); i++)
		r = mp_bus_dict_append(reply, counts[i].key, "t", counts[i].value);
	if (r >= 0)
		r = MP_BUS_DICT_PUT(reply, MEMPROF_PROC_EST_ALLOC_BYTES, ps->est_alloc_bytes);
	if (r >= 0)
		r = MP_BUS_DICT_PUT(reply, MEMPROF_PROC_EST_LIVE_BYTES, ps->est_live_bytes);
	return r;
}

static int process_status_item(sd_bus_message *reply, const char *sig,
			       const struct mp_proc_stats *ps)
{
	const char *mode = mp_proc_mode__name(ps->mode);
	uint64_t since;
	const char *werr = mp_proc_stats__write_error(ps, &since);
	int r;

	r = sd_bus_message_open_container(reply, 'a', "{sv}");
	if (r >= 0)
		r = MP_BUS_DICT_PUT(reply, MEMPROF_PROC_PID, (uint32_t)ps->pid);
	if (r >= 0)
		r = MP_BUS_DICT_PUT(reply, MEMPROF_PROC_COMM, ps->comm);
	if (r >= 0)
		r = MP_BUS_DICT_PUT(reply, MEMPROF_PROC_EXITED, (int)ps->exited);
	if (r >= 0 && mode)
		r = MP_BUS_DICT_PUT(reply, MEMPROF_PROC_MODE, mode);
	if (r >= 0)
		r = append_figures(reply, ps);
	if (r >= 0 && ps->trace_path)
		r = MP_BUS_DICT_PUT(reply, MEMPROF_PROC_TRACE, ps->trace_path);
	if (r >= 0 && ps->detached_reason)
		r = MP_BUS_DICT_PUT(reply, MEMPROF_PROC_DETACHED_REASON,
				    ps->detached_reason);
	if (r >= 0 && werr)
		r = MP_BUS_DICT_PUT(reply, MEMPROF_PROC_WRITE_ERROR, werr);
	if (r >= 0 && werr)
		r = MP_BUS_DICT_PUT(reply, MEMPROF_PROC_WRITE_ERROR_SINCE, since);
	if (r >= 0 && werr)
		r = MP_BUS_DICT_PUT(reply, MEMPROF_PROC_LOST_WRITES,
				    ps->write_errors + ps->stalled);
	if (r >= 0)
		r = sd_bus_message_close_container(reply);
	return r;
}

/* Retired: the sums of the processes retired from ProcessStatus (<memprof/bus.h>). */
static int prop_retired(sd_bus *bus, const char *path, const char *iface, const char *prop,
			sd_bus_message *reply, void *userdata, sd_bus_error *error)
{
	struct svc_profile *sp = userdata;
	struct mp_proc_stats ps;
	uint64_t n = mp_profile__retired(sp->p, &ps);
	int r;

	r = sd_bus_message_open_container(reply, 'a', "{sv}");
	if (r >= 0)
		r = MP_BUS_DICT_PUT(reply, MEMPROF_RETIRED_PROCESSES, n);
	if (r >= 0)
		r = append_figures(reply, &ps);
	if (r >= 0)
		r = sd_bus_message_close_container(reply);
	return r;
}

static int prop_process_status(sd_bus *bus, const char *path, const char *iface,
			       const char *prop, sd_bus_message *reply, void *userdata,
			       sd_bus_error *error)
{
	return append_procs(reply, userdata, MEMPROF_BUS_PROCESS_STATUS_ENTRY, process_status_item);
}

/* Processes: the positional form of the same figures (<memprof/bus.h>). */
static int process_tuple_item(sd_bus_message *reply, const char *sig,
			      const struct mp_proc_stats *ps)
{
	return sd_bus_message_append(reply, sig, (uint32_t)ps->pid, ps->comm, (int)ps->exited,
				     ps->samples, ps->nsamples, ps->live_nsamples, ps->frees,
				     ps->est_alloc_bytes, ps->est_live_bytes, ps->drops,
				     ps->trace_path ? ps->trace_path : "");
}

static int prop_processes(sd_bus *bus, const char *path, const char *iface, const char *prop,
			  sd_bus_message *reply, void *userdata, sd_bus_error *error)
{
	return append_procs(reply, userdata, "(" MEMPROF_BUS_PROCESSES_ENTRY ")",
			    process_tuple_item);
}

/* Targets: a(ssbttt) (<memprof/bus.h>). */
static int prop_targets(sd_bus *bus, const char *path, const char *iface, const char *prop,
			sd_bus_message *reply, void *userdata, sd_bus_error *error)
{
	struct svc_profile *sp = userdata;
	struct mp_target_stats ts[MP_MAX_TARGETS];
	size_t n = mp_profile__targets(sp->p, ts, MP_MAX_TARGETS);
	int r;

	r = sd_bus_message_open_container(reply, 'a', "(" MEMPROF_BUS_TARGETS_ENTRY ")");
	for (size_t i = 0; r >= 0 && i < n && i < MP_MAX_TARGETS; i++)
		r = sd_bus_message_append(reply, "(" MEMPROF_BUS_TARGETS_ENTRY ")", ts[i].label,
					  ts[i].path, (int)ts[i].present, ts[i].joined,
					  ts[i].skipped, ts[i].failed);
	if (r >= 0)
		r = sd_bus_message_close_container(reply);
	return r;
}

/* Profile1.Stop(), Profile1.Discard() */
static int profile_method_op(sd_bus_message *m, void *userdata, sd_bus_error *error)
{
	struct svc_profile *sp = userdata;

	return profile_op(sp->d->bus, m, sp, sp->id, error);
}

/* AddProcess(u pid, a{sv} options) -> (b followed); options: "output" (h). */
static int profile_add_process(sd_bus_message *m, void *userdata, sd_bus_error *error)
{
	struct svc_profile *sp = userdata;
	struct mp_bus_server *s = sp->d->bus;
	struct caller c;
	uint32_t pid;
	struct mp_opts o;
	char err[512];
	int r, out_fd;

	r = get_caller(s, m, &c, error);
	if (r < 0)
		return r;
	r = sd_bus_message_read(m, MEMPROF_BUS_SIG_PID, &pid);
	if (r < 0 || pid == 0 || pid > INT32_MAX)
		return sd_bus_error_setf(error, MEMPROF_BUS_ERR_INVALID, "Expected a process id");
	r = parse_options(m, &o, MEMPROF_BUS_OPT_OUTPUT, error);
	if (r < 0)
		return r;
	out_fd = o.output.fd;
	if (!svc_profile__may_control(sp, c.uid))
		return sd_bus_error_setf(error, MEMPROF_BUS_ERR_PERMISSION,
					 "Permission denied: profile %" PRIu32 " belongs to uid %u",
					 sp->id, (unsigned int)sp->owner_uid);
	r = svc_profile__add_process(s->d, sp, (pid_t)pid, out_fd, c.uid, c.gid, err, sizeof(err));
	if (r < 0)
		return set_error(error, r, r == -EINVAL, err);
	return sd_bus_reply_method_return(m, MEMPROF_BUS_SIG_FOLLOWED, r > 0);
}

static const sd_bus_vtable profile_vtable[] = {
	SD_BUS_VTABLE_START(0),
	PROPERTY(MEMPROF_BUS_ID, prop_profile, SD_BUS_VTABLE_PROPERTY_CONST),
	PROPERTY(MEMPROF_BUS_STATE, prop_profile, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
	PROPERTY(MEMPROF_BUS_OWNER, prop_profile, SD_BUS_VTABLE_PROPERTY_CONST),
	PROPERTY(MEMPROF_BUS_RATE, prop_profile, SD_BUS_VTABLE_PROPERTY_CONST),
	PROPERTY(MEMPROF_BUS_CALLSTACK_SIZE, prop_profile, SD_BUS_VTABLE_PROPERTY_CONST),
	PROPERTY(MEMPROF_BUS_FOLLOW_FORKS, prop_profile, SD_BUS_VTABLE_PROPERTY_CONST),
	PROPERTY(MEMPROF_BUS_DURATION, prop_profile, SD_BUS_VTABLE_PROPERTY_CONST),
	PROPERTY(MEMPROF_BUS_FORMAT_VERSION, prop_profile, SD_BUS_VTABLE_PROPERTY_CONST),
	PROPERTY(MEMPROF_BUS_COMPRESSED, prop_profile, SD_BUS_VTABLE_PROPERTY_CONST),
	PROPERTY(MEMPROF_BUS_DIRECTORY, prop_profile, SD_BUS_VTABLE_PROPERTY_CONST),
	PROPERTY(MEMPROF_BUS_START_TIMESTAMP, prop_profile, SD_BUS_VTABLE_PROPERTY_CONST),
	PROPERTY(MEMPROF_BUS_STANDING, prop_profile, SD_BUS_VTABLE_PROPERTY_CONST),
	PROPERTY(MEMPROF_BUS_PROCESS_STATUS, prop_process_status, 0),
	PROPERTY(MEMPROF_BUS_PROCESSES, prop_processes, 0),
	PROPERTY(MEMPROF_BUS_TARGETS, prop_targets, 0),
	PROPERTY(MEMPROF_BUS_RETIRED, prop_retired, 0),
	SD_BUS_METHOD(MEMPROF_BUS_STOP, "", "", profile_method_op, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD(MEMPROF_BUS_DISCARD, "", "", profile_method_op, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_ARGS(MEMPROF_BUS_ADD_PROCESS,
				SD_BUS_ARGS(MEMPROF_BUS_SIG_PID, pid, MEMPROF_BUS_SIG_OPTIONS,
					    options),
				SD_BUS_RESULT(MEMPROF_BUS_SIG_FOLLOWED, followed),
				profile_add_process, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_VTABLE_END
};

static struct svc_profile *profile_from_path(struct memprofd *d, const char *path)
{
	const char *p = path + strlen(MEMPROF_BUS_PROFILE_PREFIX);
	unsigned long id;
	char *end;

	if (strncmp(path, MEMPROF_BUS_PROFILE_PREFIX "/", strlen(MEMPROF_BUS_PROFILE_PREFIX) + 1))
		return NULL;
	p++;
	errno = 0;
	id = strtoul(p, &end, 10);
	if (errno || *end || end == p || *p == '0' || id > UINT32_MAX)
		return NULL;
	return svc_profile__find(d, (uint32_t)id);
}

static int profile_find(sd_bus *bus, const char *path, const char *iface, void *userdata,
			void **found, sd_bus_error *error)
{
	struct mp_bus_server *s = userdata;
	struct svc_profile *sp = profile_from_path(s->d, path);

	if (!sp)
		return 0;
	*found = sp;
	return 1;
}

static int profile_enumerate(sd_bus *bus, const char *prefix, void *userdata, char ***nodes,
			     sd_bus_error *error)
{
	struct mp_bus_server *s = userdata;
	size_t n = 0, i = 0;
	char **v;

	for (struct svc_profile *sp = s->d->profiles; sp; sp = sp->next)
		n++;
	v = calloc(n + 1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (struct svc_profile *sp = s->d->profiles; sp; sp = sp->next) {
		v[i] = strdup(sp->object_path);
		if (!v[i]) {
			while (i)
				free(v[--i]);
			free(v);
			return -ENOMEM;
		}
		i++;
	}
	*nodes = v;
	return 0;
}

/* ------------------------------------------------------------------ objects */

int bus_add_objects(struct mp_bus_server *s, sd_bus *bus)
{
	int r;

	r = sd_bus_add_object_vtable(bus, NULL, MEMPROF_BUS_PATH, MEMPROF_BUS_MANAGER_IFACE,
				     manager_vtable, s);
	if (r >= 0)
		r = sd_bus_add_fallback_vtable(bus, NULL, MEMPROF_BUS_PROFILE_PREFIX,
					       MEMPROF_BUS_PROFILE_IFACE, profile_vtable,
					       profile_find, s);
	if (r >= 0)
		r = sd_bus_add_node_enumerator(bus, NULL, MEMPROF_BUS_PROFILE_PREFIX,
					       profile_enumerate, s);
	return r;
}
