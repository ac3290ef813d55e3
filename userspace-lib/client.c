// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * memprofd's client API (<memprof/client.h>): sd-bus, peer-to-peer on the daemon's private
 * socket. Manager1.Start/Stop/Discard on /org/memprofd, Properties.GetAll on
 * /org/memprofd/profile/<id> (see memprofd(8)).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-bus.h>

#include <memprof/client.h>

#define BUS_PATH		"/org/memprofd"
#define BUS_PROFILE_PREFIX	"/org/memprofd/profile"
#define BUS_MANAGER		"org.memprofd.Manager1"
#define BUS_PROFILE		"org.memprofd.Profile1"
#define PROC_SIG		"(usbttttddts)"

/* memprofd's errors (daemon/bus.h) as errno values; sd-bus maps unknown names to EIO. */
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

struct memprof_client *memprof_client__open(const char *socket)
{
	char addr[4096] = "unix:path=";
	struct memprof_client *c;
	int r;

	if (!socket)
		socket = MEMPROF_CLIENT_DEFAULT_SOCKET;
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
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
	if (r == -ECONNRESET || r == -ENOTCONN || r == -EPIPE)
		r = -ECONNREFUSED;	/* the daemon closed it: too many clients of this user */
	if (r < 0) {
		memprof_client__free(c);
		errno = -r;
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

int memprof_client__start(struct memprof_client *c, const pid_t *pids, size_t n,
			  const struct memprof_client_opts *opts, int out_fd, uint32_t *id)
{
	static const struct memprof_client_opts none;
	sd_bus_error error = SD_BUS_ERROR_NULL;
	sd_bus_message *m = NULL, *reply = NULL;
	const struct memprof_client_opts *o = opts ? opts : &none;
	const char *path;
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
	if (r >= 0 && o->rate > 0)
		r = append_opt(m, "rate", "d", o->rate);
	if (r >= 0 && o->callstack_size)
		r = append_opt(m, "callstack_size", "u", (uint32_t)o->callstack_size);
	if (r >= 0 && o->no_follow_forks)
		r = append_opt(m, "follow_forks", "b", 0);
	if (r >= 0 && o->duration_us)
		r = append_opt(m, "duration_us", "t", o->duration_us);
	if (r >= 0 && o->format_version)
		r = append_opt(m, "format_version", "q", o->format_version);
	if (r >= 0 && o->zstd)
		r = append_opt(m, "zstd", "b", 1);
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

void memprof_client_status__done(struct memprof_client_status *st)
{
	if (!st)
		return;
	free(st->procs);
	memset(st, 0, sizeof(*st));
}

static int read_procs(sd_bus_message *m, struct memprof_client_status *st)
{
	size_t cap = 0;
	int r;

	r = sd_bus_message_enter_container(m, 'v', "a" PROC_SIG);
	if (r >= 0)
		r = sd_bus_message_enter_container(m, 'a', PROC_SIG);
	while (r >= 0) {
		struct memprof_client_proc p = { 0 };
		const char *comm, *trace;
		uint32_t pid;
		int exited;

		r = sd_bus_message_read(m, PROC_SIG, &pid, &comm, &exited, &p.samples, &p.nsamples,
					&p.live_nsamples, &p.frees, &p.est_alloc_bytes,
					&p.est_live_bytes, &p.drops, &trace);
		if (r <= 0)
			break;
		if (st->nprocs == cap) {
			struct memprof_client_proc *np;

			cap = cap ? cap * 2 : 8;
			np = realloc(st->procs, cap * sizeof(*np));
			if (!np)
				return -ENOMEM;
			st->procs = np;
		}
		p.pid = (pid_t)pid;
		p.exited = exited;
		snprintf(p.comm, sizeof(p.comm), "%s", comm);
		st->procs[st->nprocs++] = p;
	}
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	return r;
}

/* ProcessModes (newer daemons): a(us), each process' sampling mode. */
static int read_modes(sd_bus_message *m, struct memprof_client_status *st)
{
	const char *mode;
	uint32_t pid;
	int r;

	r = sd_bus_message_enter_container(m, 'v', "a(us)");
	if (r >= 0)
		r = sd_bus_message_enter_container(m, 'a', "(us)");
	while (r >= 0 && (r = sd_bus_message_read(m, "(us)", &pid, &mode)) > 0)
		for (size_t i = 0; i < st->nprocs; i++)
			if (st->procs[i].pid == (pid_t)pid)
				snprintf(st->procs[i].mode, sizeof(st->procs[i].mode), "%s", mode);
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	return r;
}

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

int memprof_client__status(struct memprof_client *c, uint32_t id,
			   struct memprof_client_status *st)
{
	sd_bus_error error = SD_BUS_ERROR_NULL;
	sd_bus_message *reply = NULL;
	bool have_state = false;
	char path[128];
	int r;

	c->errmsg[0] = '\0';
	memset(st, 0, sizeof(*st));
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
	r = sd_bus_message_enter_container(reply, 'a', "{sv}");
	while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'e', "sv")) > 0) {
		const char *k, *s;

		r = sd_bus_message_read(reply, "s", &k);
		if (r < 0)
			break;
		if (!strcmp(k, "State")) {
			r = sd_bus_message_read(reply, "v", "s", &s);
			if (r >= 0) {
				snprintf(st->state_name, sizeof(st->state_name), "%s", s);
				st->state = parse_state(s);
				have_state = true;
			}
		} else if (!strcmp(k, "Rate")) {
			r = sd_bus_message_read(reply, "v", "d", &st->rate);
		} else if (!strcmp(k, "CallstackSize")) {
			uint32_t u;

			r = sd_bus_message_read(reply, "v", "u", &u);
			st->callstack_size = u;
		} else if (!strcmp(k, "StartTimestamp")) {
			r = sd_bus_message_read(reply, "v", "t", &st->start_us);
		} else if (!strcmp(k, "Processes")) {
			r = read_procs(reply, st);
		} else if (!strcmp(k, "ProcessModes")) {
			r = read_modes(reply, st);
		} else {
			r = sd_bus_message_skip(reply, "v");
		}
		if (r >= 0)
			r = sd_bus_message_exit_container(reply);
	}
	sd_bus_message_unref(reply);
	if (r >= 0 && !have_state)
		r = -EBADMSG;
	if (r < 0) {
		memprof_client_status__done(st);
		return set_err(c, r, "Failed to parse profile %" PRIu32 "'s properties: %s", id,
			       strerror(-r));
	}
	return 0;
}
