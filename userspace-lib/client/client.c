// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * memprofd's client API (<memprof/client.h>): sd-bus, peer-to-peer on the daemon's private
 * socket. Manager1.Start/Stop/Discard/ListProfiles and Properties.GetAll on /org/memprofd,
 * Profile1.AddProcess and Properties.GetAll on /org/memprofd/profile/<id> (see memprofd(8)).
 * memprofctl's daemon commands are built on it.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <time.h>

#include <systemd/sd-bus.h>

#include <memprof/client.h>

#define BUS_PATH		"/org/memprofd"
#define BUS_PROFILE_PREFIX	"/org/memprofd/profile"
#define BUS_MANAGER		"org.memprofd.Manager1"
#define BUS_PROFILE		"org.memprofd.Profile1"
#define PROC_SIG		"(usbttttddts)"

/* memprofd's errors (daemon/service/bus.h) as errno values; sd-bus maps unknown names to EIO. */
static const sd_bus_error_map memprof_errors[] = {
	SD_BUS_ERROR_MAP("org.memprofd.Error.Busy", EBUSY),
	SD_BUS_ERROR_MAP("org.memprofd.Error.NotFound", ENOENT),
	SD_BUS_ERROR_MAP("org.memprofd.Error.NoSuchProcess", ESRCH),
	SD_BUS_ERROR_MAP("org.memprofd.Error.NoAllocator", ENOEXEC),
	SD_BUS_ERROR_MAP("org.memprofd.Error.PermissionDenied", EACCES),
	SD_BUS_ERROR_MAP("org.memprofd.Error.InvalidArgs", EINVAL),
	SD_BUS_ERROR_MAP("org.memprofd.Error.BadState", EINVAL),
	SD_BUS_ERROR_MAP("org.memprofd.Error.LimitExceeded", ENOSPC),
	SD_BUS_ERROR_MAP("org.memprofd.Error.Failed", EIO),
	SD_BUS_ERROR_MAP_END
};

struct memprof_client {
	sd_bus *bus;
	char errmsg[512];
};

static int set_err(struct memprof_client *c, int r, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int set_err(struct memprof_client *c, int r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->errmsg, sizeof(c->errmsg), fmt, ap);
	va_end(ap);
	return r;
}

/* The daemon's message when it sent an error, else "what: strerror". Returns r. */
static int bus_err(struct memprof_client *c, int r, const char *what, const sd_bus_error *e)
{
	if (e && sd_bus_error_is_set(e) && e->message)
		return set_err(c, r, "%s", e->message);
	return set_err(c, r, "%s: %s", what, strerror(-r));
}

/* D-Bus address values escape every byte outside [-0-9A-Za-z_/.\*] as %XX. */
static int escape_address(const char *path, char *out, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;

	for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
		bool plain = (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') ||
			     (*p >= 'A' && *p <= 'Z') || strchr("-_/.\\*", *p);

		if (o + 4 >= len)
			return -ENAMETOOLONG;
		if (plain) {
			out[o++] = (char)*p;
		} else {
			out[o++] = '%';
			out[o++] = hex[*p >> 4];
			out[o++] = hex[*p & 15];
		}
	}
	out[o] = '\0';
	return 0;
}

int memprof_client__connect(const char *socket, struct memprof_client **ret)
{
	char addr[4096] = "unix:path=";
	struct memprof_client *c;
	int r;

	*ret = NULL;
	if (!socket)
		socket = MEMPROF_CLIENT_DEFAULT_SOCKET;
	/* sd-bus says E2BIG for a path that does not fit a socket address */
	if (strlen(socket) >= sizeof(((struct sockaddr_un *)NULL)->sun_path))
		return -ENAMETOOLONG;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	r = sd_bus_error_add_map(memprof_errors);
	if (r >= 0)
		r = escape_address(socket, addr + strlen(addr), sizeof(addr) - strlen(addr));
	if (r >= 0)
		r = sd_bus_new(&c->bus);
	if (r >= 0)
		r = sd_bus_set_address(c->bus, addr);
	if (r >= 0)
		r = sd_bus_negotiate_fds(c->bus, 1);
	if (r >= 0)
		r = sd_bus_start(c->bus);
	/* Finish the handshake now: a refusal shows here, not as an odd failure later. */
	if (r >= 0)
		r = sd_bus_call_method(c->bus, NULL, BUS_PATH, "org.freedesktop.DBus.Peer", "Ping",
				       NULL, NULL, "");
	if (r == -ENOTCONN || r == -EPIPE)
		r = -ECONNRESET;	/* the daemon closed it: too many clients of this user */
	if (r < 0) {
		memprof_client__free(c);
		return r;
	}
	*ret = c;
	return 0;
}

struct memprof_client *memprof_client__open(const char *socket)
{
	struct memprof_client *c;
	int r = memprof_client__connect(socket, &c);

	if (r < 0) {
		errno = r == -ECONNRESET ? ECONNREFUSED : -r;
		return NULL;
	}
	return c;
}

void memprof_client__free(struct memprof_client *c)
{
	if (!c)
		return;
	sd_bus_flush_close_unref(c->bus);
	free(c);
}

const char *memprof_client__errmsg(const struct memprof_client *c)
{
	return c ? c->errmsg : "";
}

static int append_opt(sd_bus_message *m, const char *key, const char *type, ...)
{
	va_list ap;
	int r;

	r = sd_bus_message_open_container(m, 'e', "sv");
	if (r >= 0)
		r = sd_bus_message_append(m, "s", key);
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'v', type);
	if (r >= 0) {
		va_start(ap, type);
		r = sd_bus_message_appendv(m, type, ap);
		va_end(ap);
	}
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	return r;
}

/* A field of a caller's struct, or 0 when the caller's struct is older (shorter). */
#define OPT(o, field) \
	((o)->sz >= offsetof(__typeof__(*(o)), field) + sizeof((o)->field) ? (o)->field : 0)

int memprof_client__start_ex(struct memprof_client *c, const pid_t *pids, size_t n,
			     const struct memprof_client_start_opts *opts, int out_fd,
			     uint32_t *id)
{
	static const struct memprof_client_start_opts none = { .sz = sizeof(none) };
	sd_bus_error error = SD_BUS_ERROR_NULL;
	sd_bus_message *m = NULL, *reply = NULL;
	const struct memprof_client_start_opts *o = opts ? opts : &none;
	const char *path, *unwind = OPT(o, unwind);
	int stack_copy = OPT(o, stack_copy_size);
	int32_t *p32;
	int r;

	c->errmsg[0] = '\0';
	if (!pids || !n || !id)
		return set_err(c, -EINVAL, "No process to profile");
	p32 = calloc(n, sizeof(*p32));
	if (!p32)
		return set_err(c, -ENOMEM, "Out of memory");
	for (size_t i = 0; i < n; i++)
		p32[i] = (int32_t)pids[i];
	r = sd_bus_message_new_method_call(c->bus, &m, NULL, BUS_PATH, BUS_MANAGER, "Start");
	if (r >= 0)
		r = sd_bus_message_append_array(m, 'i', p32, n * sizeof(*p32));
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "{sv}");
	if (r >= 0 && OPT(o, rate) > 0)
		r = append_opt(m, "rate", "d", o->rate);
	if (r >= 0 && OPT(o, callstack_size))
		r = append_opt(m, "callstack_size", "u", (uint32_t)o->callstack_size);
	if (r >= 0 && OPT(o, no_follow_forks))
		r = append_opt(m, "follow_forks", "b", 0);
	if (r >= 0 && OPT(o, duration_us))
		r = append_opt(m, "duration_us", "t", o->duration_us);
	if (r >= 0 && OPT(o, format_version))
		r = append_opt(m, "format_version", "q", o->format_version);
	if (r >= 0 && OPT(o, zstd))
		r = append_opt(m, "zstd", "b", 1);
	if (r >= 0 && OPT(o, max_overhead) > 0)
		r = append_opt(m, "max_overhead", "d", o->max_overhead);
	if (r >= 0 && unwind)
		r = append_opt(m, "unwind", "s", unwind);
	if (r >= 0 && stack_copy)
		r = append_opt(m, "stack_copy_size", "u", (uint32_t)(stack_copy < 0 ? 0 : stack_copy));
	if (r >= 0 && out_fd >= 0)
		r = append_opt(m, "output", "h", out_fd);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	free(p32);
	if (r < 0) {
		sd_bus_message_unref(m);
		return set_err(c, r, "Failed to build the Start request: %s", strerror(-r));
	}
	r = sd_bus_call(c->bus, m, 0, &error, &reply);
	sd_bus_message_unref(m);
	if (r >= 0)
		r = sd_bus_message_read(reply, "o", &path);
	if (r >= 0 && sscanf(path, BUS_PROFILE_PREFIX "/%" SCNu32, id) != 1)
		r = -EBADMSG;
	if (r < 0)
		bus_err(c, r, "Failed to start profiling", &error);
	sd_bus_error_free(&error);
	sd_bus_message_unref(reply);
	return r < 0 ? r : 0;
}

int memprof_client__start(struct memprof_client *c, const pid_t *pids, size_t n,
			  const struct memprof_client_opts *opts, int out_fd, uint32_t *id)
{
	struct memprof_client_start_opts o = { .sz = sizeof(o) };

	if (opts) {
		o.rate = opts->rate;
		o.callstack_size = opts->callstack_size;
		o.no_follow_forks = opts->no_follow_forks;
		o.duration_us = opts->duration_us;
		o.format_version = opts->format_version;
		o.zstd = opts->zstd;
	}
	return memprof_client__start_ex(c, pids, n, &o, out_fd, id);
}

static int call_id(struct memprof_client *c, const char *method, uint32_t id)
{
	sd_bus_error error = SD_BUS_ERROR_NULL;
	int r;

	c->errmsg[0] = '\0';
	r = sd_bus_call_method(c->bus, NULL, BUS_PATH, BUS_MANAGER, method, &error, NULL, "u", id);
	if (r < 0)
		bus_err(c, r, method, &error);
	sd_bus_error_free(&error);
	return r < 0 ? r : 0;
}

int memprof_client__stop(struct memprof_client *c, uint32_t id)
{
	return call_id(c, "Stop", id);
}

int memprof_client__discard(struct memprof_client *c, uint32_t id)
{
	return call_id(c, "Discard", id);
}

int memprof_client__add_process(struct memprof_client *c, uint32_t id, pid_t pid, int out_fd)
{
	sd_bus_error error = SD_BUS_ERROR_NULL;
	sd_bus_message *m = NULL, *reply = NULL;
	char path[128];
	int r, followed = 0;

	c->errmsg[0] = '\0';
	snprintf(path, sizeof(path), BUS_PROFILE_PREFIX "/%" PRIu32, id);
	r = sd_bus_message_new_method_call(c->bus, &m, NULL, path, BUS_PROFILE, "AddProcess");
	if (r >= 0)
		r = sd_bus_message_append(m, "u", (uint32_t)pid);
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "{sv}");
	if (r >= 0 && out_fd >= 0)
		r = append_opt(m, "output", "h", out_fd);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	if (r < 0) {
		sd_bus_message_unref(m);
		return set_err(c, r, "Failed to build the AddProcess request: %s", strerror(-r));
	}
	r = sd_bus_call(c->bus, m, 0, &error, &reply);
	sd_bus_message_unref(m);
	if (r >= 0)
		r = sd_bus_message_read(reply, "b", &followed);
	if (r < 0)
		bus_err(c, r, "Failed to add the process", &error);
	sd_bus_error_free(&error);
	sd_bus_message_unref(reply);
	return r < 0 ? r : !!followed;
}

/* ---- properties ---- */

static enum memprof_client_state parse_state(const char *s)
{
	if (!strcmp(s, "sampling"))
		return MEMPROF_CLIENT_SAMPLING;
	if (!strcmp(s, "stopped"))
		return MEMPROF_CLIENT_STOPPED;
	if (!strcmp(s, "discarded"))
		return MEMPROF_CLIENT_DISCARDED;
	return MEMPROF_CLIENT_UNKNOWN;
}

static int dup_str(char **out, const char *s)
{
	free(*out);
	*out = strdup(s);
	return *out ? 0 : -ENOMEM;
}

static int read_str(sd_bus_message *m, char **out)
{
	const char *s;
	int r = sd_bus_message_read(m, "v", "s", &s);

	return r < 0 ? r : dup_str(out, s);
}

static int read_bool(sd_bus_message *m, bool *out)
{
	int b, r = sd_bus_message_read(m, "v", "b", &b);

	*out = b;
	return r;
}

/* After reading a property's array (r: the last read's result): leave the array and variant. */
static int leave_variant_array(sd_bus_message *m, int r)
{
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	return r;
}

/* A Properties.GetAll reply: each (name, variant) through @fn, which reads or skips the value. */
static int parse_all(sd_bus_message *reply,
		     int (*fn)(sd_bus_message *m, const char *key, void *ctx), void *ctx)
{
	int r = sd_bus_message_enter_container(reply, 'a', "{sv}");

	while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'e', "sv")) > 0) {
		const char *k;

		r = sd_bus_message_read(reply, "s", &k);
		if (r >= 0)
			r = fn(reply, k, ctx);
		if (r >= 0)
			r = sd_bus_message_exit_container(reply);
	}
	return r;
}

void memprof_client_profile__free(struct memprof_client_profile *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->nprocs; i++) {
		free(p->procs[i].comm);
		free(p->procs[i].mode);
		free(p->procs[i].trace);
		free(p->procs[i].detached_reason);
	}
	free(p->procs);
	for (size_t i = 0; i < p->nwrite_errors; i++)
		free(p->write_errors[i].error);
	free(p->write_errors);
	free(p->path);
	free(p->state_name);
	free(p->directory);
	free(p);
}

static int read_procs(sd_bus_message *m, struct memprof_client_profile *p)
{
	size_t cap = 0;
	int r;

	r = sd_bus_message_enter_container(m, 'v', "a" PROC_SIG);
	if (r >= 0)
		r = sd_bus_message_enter_container(m, 'a', PROC_SIG);
	while (r >= 0) {
		struct memprof_client_process c = { 0 };
		const char *comm, *trace;
		uint32_t pid;
		int exited;

		r = sd_bus_message_read(m, PROC_SIG, &pid, &comm, &exited, &c.samples, &c.nsamples,
					&c.live_nsamples, &c.frees, &c.est_alloc_bytes,
					&c.est_live_bytes, &c.drops, &trace);
		if (r <= 0)
			break;
		if (p->nprocs == cap) {
			struct memprof_client_process *np;

			cap = cap ? cap * 2 : 8;
			np = realloc(p->procs, cap * sizeof(*np));
			if (!np)
				return -ENOMEM;
			p->procs = np;
		}
		c.pid = (pid_t)pid;
		c.exited = exited;
		c.comm = strdup(comm);
		c.trace = strdup(trace);
		p->procs[p->nprocs++] = c;
		if (!c.comm || !c.trace)
			return -ENOMEM;
	}
	return leave_variant_array(m, r);
}

/* ProcessModes / ProcessDetached (after Processes): a(us), a string per pid. */
static int read_pid_strings(sd_bus_message *m, struct memprof_client_profile *p, bool detached)
{
	const char *s;
	uint32_t pid;
	int r;

	r = sd_bus_message_enter_container(m, 'v', "a(us)");
	if (r >= 0)
		r = sd_bus_message_enter_container(m, 'a', "(us)");
	while (r >= 0 && (r = sd_bus_message_read(m, "(us)", &pid, &s)) > 0) {
		for (size_t i = 0; i < p->nprocs; i++) {
			char **f = detached ? &p->procs[i].detached_reason : &p->procs[i].mode;

			if (p->procs[i].pid != (pid_t)pid || *f)
				continue;
			*f = strdup(s);
			if (!*f)
				return -ENOMEM;
		}
	}
	return leave_variant_array(m, r);
}

/* ProcessWriteErrors: a(ustt), (pid, error, since, lost). */
static int read_write_errors(sd_bus_message *m, struct memprof_client_profile *p)
{
	struct memprof_client_write_error we;
	const char *name;
	size_t cap = 0;
	uint32_t pid;
	int r;

	r = sd_bus_message_enter_container(m, 'v', "a(ustt)");
	if (r >= 0)
		r = sd_bus_message_enter_container(m, 'a', "(ustt)");
	while (r >= 0 && (r = sd_bus_message_read(m, "(ustt)", &pid, &name, &we.since_us,
						  &we.lost)) > 0) {
		if (p->nwrite_errors == cap) {
			struct memprof_client_write_error *n;

			cap = cap ? cap * 2 : 4;
			n = realloc(p->write_errors, cap * sizeof(*n));
			if (!n)
				return -ENOMEM;
			p->write_errors = n;
		}
		we.pid = (pid_t)pid;
		we.error = strdup(name);
		if (!we.error)
			return -ENOMEM;
		p->write_errors[p->nwrite_errors++] = we;
	}
	return leave_variant_array(m, r);
}

static int read_profile_prop(sd_bus_message *reply, const char *k, void *ctx)
{
	struct memprof_client_profile *p = ctx;
	uint32_t u;
	int r;

	if (!strcmp(k, "Id"))
		return sd_bus_message_read(reply, "v", "u", &p->id);
	if (!strcmp(k, "State")) {
		r = read_str(reply, &p->state_name);
		if (r >= 0)
			p->state = parse_state(p->state_name);
		return r;
	}
	if (!strcmp(k, "Directory"))
		return read_str(reply, &p->directory);
	if (!strcmp(k, "Owner"))
		return sd_bus_message_read(reply, "v", "u", &p->owner_uid);
	if (!strcmp(k, "Rate"))
		return sd_bus_message_read(reply, "v", "d", &p->rate);
	if (!strcmp(k, "CallstackSize")) {
		r = sd_bus_message_read(reply, "v", "u", &u);
		p->callstack_size = u;
		return r;
	}
	if (!strcmp(k, "FollowForks"))
		return read_bool(reply, &p->follow_forks);
	if (!strcmp(k, "DurationUSec"))
		return sd_bus_message_read(reply, "v", "t", &p->duration_us);
	if (!strcmp(k, "FormatVersion"))
		return sd_bus_message_read(reply, "v", "q", &p->format_version);
	if (!strcmp(k, "Compressed"))
		return read_bool(reply, &p->compressed);
	if (!strcmp(k, "StartTimestamp"))
		return sd_bus_message_read(reply, "v", "t", &p->start_us);
	if (!strcmp(k, "Processes"))
		return read_procs(reply, p);
	if (!strcmp(k, "ProcessModes"))
		return read_pid_strings(reply, p, false);
	if (!strcmp(k, "ProcessDetached"))
		return read_pid_strings(reply, p, true);
	if (!strcmp(k, "ProcessWriteErrors"))
		return read_write_errors(reply, p);
	return sd_bus_message_skip(reply, "v");
}

int memprof_client__profile(struct memprof_client *c, uint32_t id,
			    struct memprof_client_profile **ret)
{
	sd_bus_error error = SD_BUS_ERROR_NULL;
	sd_bus_message *reply = NULL;
	struct memprof_client_profile *p;
	char path[128];
	int r;

	c->errmsg[0] = '\0';
	*ret = NULL;
	snprintf(path, sizeof(path), BUS_PROFILE_PREFIX "/%" PRIu32, id);
	r = sd_bus_call_method(c->bus, NULL, path, "org.freedesktop.DBus.Properties", "GetAll",
			       &error, &reply, "s", BUS_PROFILE);
	if (r < 0) {
		if (sd_bus_error_has_name(&error, SD_BUS_ERROR_UNKNOWN_OBJECT) ||
		    sd_bus_error_has_name(&error, SD_BUS_ERROR_UNKNOWN_INTERFACE))
			r = set_err(c, -ENOENT, "No profile %" PRIu32, id);
		else
			bus_err(c, r, "Failed to read the profile", &error);
		sd_bus_error_free(&error);
		return r;
	}
	p = calloc(1, sizeof(*p));
	r = p ? dup_str(&p->path, path) : -ENOMEM;
	if (r >= 0)
		r = parse_all(reply, read_profile_prop, p);
	sd_bus_message_unref(reply);
	if (r >= 0 && (!p->state_name || !p->directory))
		r = -EBADMSG;
	if (r < 0) {
		memprof_client_profile__free(p);
		return set_err(c, r, "Failed to parse profile %" PRIu32 "'s properties: %s", id,
			       strerror(-r));
	}
	*ret = p;
	return 0;
}

void memprof_client_status__done(struct memprof_client_status *st)
{
	if (!st)
		return;
	free(st->procs);
	memset(st, 0, sizeof(*st));
}

int memprof_client__status(struct memprof_client *c, uint32_t id,
			   struct memprof_client_status *st)
{
	struct memprof_client_profile *p;
	int r;

	memset(st, 0, sizeof(*st));
	r = memprof_client__profile(c, id, &p);
	if (r < 0)
		return r;
	st->procs = calloc(p->nprocs ? p->nprocs : 1, sizeof(*st->procs));
	if (!st->procs) {
		memprof_client_profile__free(p);
		return set_err(c, -ENOMEM, "Out of memory");
	}
	st->state = p->state;
	snprintf(st->state_name, sizeof(st->state_name), "%s", p->state_name);
	st->rate = p->rate;
	st->callstack_size = p->callstack_size;
	st->start_us = p->start_us;
	st->nprocs = p->nprocs;
	for (size_t i = 0; i < p->nprocs; i++) {
		const struct memprof_client_process *s = &p->procs[i];
		struct memprof_client_proc *d = &st->procs[i];

		d->pid = s->pid;
		snprintf(d->comm, sizeof(d->comm), "%s", s->comm);
		snprintf(d->mode, sizeof(d->mode), "%s", s->mode ? s->mode : "");
		d->exited = s->exited;
		d->samples = s->samples;
		d->nsamples = s->nsamples;
		d->live_nsamples = s->live_nsamples;
		d->frees = s->frees;
		d->drops = s->drops;
		d->est_alloc_bytes = s->est_alloc_bytes;
		d->est_live_bytes = s->est_live_bytes;
	}
	memprof_client_profile__free(p);
	return 0;
}

void memprof_client_list__free(struct memprof_client_entry *v, size_t n)
{
	if (!v)
		return;
	for (size_t i = 0; i < n; i++)
		free(v[i].pids);
	free(v);
}

/* One (usoudau) of ListProfiles. */
static int read_entry(sd_bus_message *m, struct memprof_client_entry *e)
{
	const char *state, *path;
	size_t cap = 0;
	uint32_t pid;
	int r;

	r = sd_bus_message_read(m, "usoud", &e->id, &state, &path, &e->owner_uid, &e->rate);
	if (r < 0)
		return r;
	snprintf(e->state_name, sizeof(e->state_name), "%s", state);
	snprintf(e->path, sizeof(e->path), "%s", path);
	e->state = parse_state(state);
	r = sd_bus_message_enter_container(m, 'a', "u");
	while (r >= 0 && (r = sd_bus_message_read(m, "u", &pid)) > 0) {
		if (e->npids == cap) {
			pid_t *np = realloc(e->pids, (cap = cap ? cap * 2 : 8) * sizeof(*np));

			if (!np)
				return -ENOMEM;
			e->pids = np;
		}
		e->pids[e->npids++] = (pid_t)pid;
	}
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	return r;
}

int memprof_client__list(struct memprof_client *c, struct memprof_client_entry **ret,
			 size_t *n)
{
	sd_bus_error error = SD_BUS_ERROR_NULL;
	sd_bus_message *reply = NULL;
	struct memprof_client_entry *v = NULL;
	size_t cnt = 0, cap = 0;
	int r;

	c->errmsg[0] = '\0';
	*ret = NULL;
	*n = 0;
	r = sd_bus_call_method(c->bus, NULL, BUS_PATH, BUS_MANAGER, "ListProfiles", &error,
			       &reply, "");
	if (r < 0) {
		bus_err(c, r, "Failed to list profiles", &error);
		sd_bus_error_free(&error);
		return r;
	}
	r = sd_bus_message_enter_container(reply, 'a', "(usoudau)");
	while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'r', "usoudau")) > 0) {
		if (cnt == cap) {
			struct memprof_client_entry *nv;

			cap = cap ? cap * 2 : 8;
			nv = realloc(v, cap * sizeof(*nv));
			if (!nv) {
				r = -ENOMEM;
				break;
			}
			v = nv;
		}
		memset(&v[cnt], 0, sizeof(v[cnt]));
		r = read_entry(reply, &v[cnt++]);
		if (r >= 0)
			r = sd_bus_message_exit_container(reply);
	}
	sd_bus_message_unref(reply);
	if (r < 0) {
		memprof_client_list__free(v, cnt);
		return set_err(c, r, "Failed to parse the list of profiles: %s", strerror(-r));
	}
	*ret = v;
	*n = cnt;
	return 0;
}

void memprof_client_daemon__free(struct memprof_client_daemon *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < d->nstats; i++)
		free(d->stat_names[i]);
	free(d->stat_names);
	free(d->stat_values);
	free(d->version);
	free(d->state_dir);
	free(d->mechanisms);
	free(d);
}

#define MAX_STATS 256	/* counters read from Stats; more are ignored */

static int read_stats(sd_bus_message *m, struct memprof_client_daemon *d)
{
	const char *name;
	uint64_t v;
	int r;

	d->stat_names = calloc(MAX_STATS, sizeof(*d->stat_names));
	d->stat_values = calloc(MAX_STATS, sizeof(*d->stat_values));
	if (!d->stat_names || !d->stat_values)
		return -ENOMEM;
	r = sd_bus_message_enter_container(m, 'v', "a(st)");
	if (r >= 0)
		r = sd_bus_message_enter_container(m, 'a', "(st)");
	while (r >= 0 && (r = sd_bus_message_read(m, "(st)", &name, &v)) > 0) {
		if (d->nstats >= MAX_STATS)
			continue;
		d->stat_names[d->nstats] = strdup(name);
		if (!d->stat_names[d->nstats])
			return -ENOMEM;
		d->stat_values[d->nstats++] = v;
	}
	return leave_variant_array(m, r);
}

static int read_daemon_prop(sd_bus_message *reply, const char *k, void *ctx)
{
	struct memprof_client_daemon *d = ctx;
	uint32_t u;
	int r;

	if (!strcmp(k, "Version"))
		return read_str(reply, &d->version);
	if (!strcmp(k, "StateDirectory"))
		return read_str(reply, &d->state_dir);
	if (!strcmp(k, "Mechanisms"))
		return read_str(reply, &d->mechanisms);
	if (!strcmp(k, "DefaultRate"))
		return sd_bus_message_read(reply, "v", "d", &d->default_rate);
	if (!strcmp(k, "RefusedClients"))
		return sd_bus_message_read(reply, "v", "t", &d->refused_clients);
	if (!strcmp(k, "Stats"))
		return read_stats(reply, d);
	if (strcmp(k, "DefaultCallstackSize") && strcmp(k, "MaxProfiles") && strcmp(k, "Clients"))
		return sd_bus_message_skip(reply, "v");
	r = sd_bus_message_read(reply, "v", "u", &u);
	if (k[0] == 'D')
		d->default_callstack_size = u;
	else if (k[0] == 'M')
		d->max_profiles = u;
	else
		d->clients = u;
	return r;
}

int memprof_client__daemon(struct memprof_client *c, struct memprof_client_daemon **ret)
{
	sd_bus_error error = SD_BUS_ERROR_NULL;
	sd_bus_message *reply = NULL;
	struct memprof_client_daemon *d;
	int r;

	c->errmsg[0] = '\0';
	*ret = NULL;
	r = sd_bus_call_method(c->bus, NULL, BUS_PATH, "org.freedesktop.DBus.Properties", "GetAll",
			       &error, &reply, "s", BUS_MANAGER);
	if (r < 0) {
		bus_err(c, r, "Failed to read memprofd's state", &error);
		sd_bus_error_free(&error);
		return r;
	}
	d = calloc(1, sizeof(*d));
	r = d ? parse_all(reply, read_daemon_prop, d) : -ENOMEM;
	sd_bus_message_unref(reply);
	if (r >= 0 && (!d->version || !d->state_dir))
		r = -EBADMSG;
	if (r < 0) {
		memprof_client_daemon__free(d);
		return set_err(c, r, "Failed to parse memprofd's state: %s", strerror(-r));
	}
	*ret = d;
	return 0;
}

/* ---- waiting ---- */

static int on_changed(sd_bus_message *m, void *userdata, sd_bus_error *error)
{
	bool *changed = userdata;

	*changed = true;
	return 0;
}

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

int memprof_client__wait(struct memprof_client *c, uint32_t id, uint64_t timeout_us)
{
	sd_bus_error error = SD_BUS_ERROR_NULL;
	uint64_t end = timeout_us == UINT64_MAX ? UINT64_MAX : now_us() + timeout_us;
	sd_bus_slot *slot = NULL;
	bool changed = true;
	char path[128], *state = NULL;
	int r;

	c->errmsg[0] = '\0';
	snprintf(path, sizeof(path), BUS_PROFILE_PREFIX "/%" PRIu32, id);
	/* Subscribe first, then read: no state change can fall in between. */
	r = sd_bus_match_signal(c->bus, &slot, NULL, path, "org.freedesktop.DBus.Properties",
				"PropertiesChanged", on_changed, &changed);
	if (r < 0)
		return set_err(c, r, "Failed to watch profile %" PRIu32 ": %s", id, strerror(-r));
	for (;;) {
		uint64_t now;

		if (changed) {
			changed = false;
			free(state);
			state = NULL;
			r = sd_bus_get_property_string(c->bus, NULL, path, BUS_PROFILE, "State",
						       &error, &state);
			if (r < 0) {
				if (sd_bus_error_has_name(&error, SD_BUS_ERROR_UNKNOWN_OBJECT))
					r = set_err(c, -ENOENT, "No profile %" PRIu32, id);
				else
					bus_err(c, r, "Failed to read the profile's state", &error);
				break;
			}
			if (strcmp(state, "sampling")) {
				r = 0;
				break;
			}
		}
		r = sd_bus_process(c->bus, NULL);
		if (r > 0)
			continue;
		if (r < 0) {
			set_err(c, r, "Lost the connection to memprofd: %s", strerror(-r));
			break;
		}
		now = now_us();
		if (now >= end) {
			r = set_err(c, -ETIMEDOUT, "Profile %" PRIu32 " still samples", id);
			break;
		}
		r = sd_bus_wait(c->bus, end == UINT64_MAX ? UINT64_MAX : end - now);
		if (r == -EINTR) {
			set_err(c, r, "Interrupted");
			break;
		}
		if (r < 0) {
			set_err(c, r, "Failed to wait for memprofd: %s", strerror(-r));
			break;
		}
	}
	sd_bus_error_free(&error);
	free(state);
	sd_bus_slot_unref(slot);
	return r;
}
