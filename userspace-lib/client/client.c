// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * memprofd's client API (<memprof/client.h>): sd-bus, peer-to-peer on the daemon's private
 * socket, speaking <memprof/bus.h>: Manager1.Start/Stop/Discard/ListProfiles and
 * Properties.GetAll on the manager, Profile1.AddProcess and Properties.GetAll on a profile
 * (see memprofd(8)). memprofctl's daemon commands are built on it.
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

#include <memprof/bus.h>
#include <memprof/client.h>

#include "userspace-lib/client/bus_dict.h"
#include "userspace-lib/client/client_int.h"

/* memprofd's errors as errno values (<memprof/bus.h>); sd-bus maps unknown names to EIO. */
static const sd_bus_error_map memprof_errors[] = {
	SD_BUS_ERROR_MAP(MEMPROF_BUS_ERR_BUSY, EBUSY),
	SD_BUS_ERROR_MAP(MEMPROF_BUS_ERR_NOT_FOUND, ENOENT),
	SD_BUS_ERROR_MAP(MEMPROF_BUS_ERR_NO_PROCESS, ESRCH),
	SD_BUS_ERROR_MAP(MEMPROF_BUS_ERR_NO_ALLOCATOR, ENOEXEC),
	SD_BUS_ERROR_MAP(MEMPROF_BUS_ERR_PERMISSION, EACCES),
	SD_BUS_ERROR_MAP(MEMPROF_BUS_ERR_INVALID, EINVAL),
	SD_BUS_ERROR_MAP(MEMPROF_BUS_ERR_BAD_STATE, EINVAL),
	SD_BUS_ERROR_MAP(MEMPROF_BUS_ERR_LIMIT, ENOSPC),
	SD_BUS_ERROR_MAP(MEMPROF_BUS_ERR_FAILED, EIO),
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

/*
 * Send method call @m, built with the result @r (< 0: building it failed), and wait for its
 * reply in *@reply (the caller unrefs it). @m is freed. On failure (-errno), c's message is
 * the daemon's, or says that @what failed.
 */
static int call(struct memprof_client *c, sd_bus_message *m, int r, const char *what,
		sd_bus_message **reply)
{
	sd_bus_error error = SD_BUS_ERROR_NULL;

	*reply = NULL;
	if (r < 0) {
		sd_bus_message_unref(m);
		return set_err(c, r, "Failed to build the request to %s: %s", what, strerror(-r));
	}
	r = sd_bus_call(c->bus, m, 0, &error, reply);
	sd_bus_message_unref(m);
	if (r < 0) {
		char msg[128];

		snprintf(msg, sizeof(msg), "Failed to %s", what);
		bus_err(c, r, msg, &error);
	}
	sd_bus_error_free(&error);
	return r;
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
		socket = MEMPROF_BUS_SOCKET;
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
		r = sd_bus_call_method(c->bus, NULL, MEMPROF_BUS_PATH, "org.freedesktop.DBus.Peer",
				       "Ping",
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

/* A field of a caller's struct, or 0 when the caller's struct is older (shorter). */
#define OPT(o, field) \
	((o)->sz >= offsetof(__typeof__(*(o)), field) + sizeof((o)->field) ? (o)->field : 0)

/*
 * The public options as the table's: a field of the caller's left 0 is not set. A bad value is
 * -EINVAL with the validator's sentence in @err.
 */
static int start_opts(const struct memprof_client_start_opts *o, int out_fd, struct mp_opts *v,
		      char *err, size_t err_len)
{
	const char *unwind = OPT(o, unwind);
	int stack_copy = OPT(o, stack_copy_size);

	mp_opts__init(v);
#define SET(ID, field, value) do { v->field = (value); v->set |= 1u << MP_OPT_##ID; } while (0)
	if (OPT(o, rate) > 0)
		SET(RATE, rate, o->rate);
	if (OPT(o, callstack_size))
		SET(CALLSTACK_SIZE, callstack_size, o->callstack_size);
	if (OPT(o, no_follow_forks))
		SET(FOLLOW_FORKS, follow_forks, false);
	if (OPT(o, duration_us))
		SET(DURATION, duration_us, o->duration_us);
	if (OPT(o, format_version))
		SET(FORMAT_VERSION, format_version, o->format_version);
	if (OPT(o, zstd))
		SET(ZSTD, zstd, true);
	if (OPT(o, max_overhead) > 0)
		SET(MAX_OVERHEAD, max_overhead, o->max_overhead);
	if (stack_copy)
		SET(STACK_COPY_SIZE, stack_copy_size, stack_copy < 0 ? 0 : (uint32_t)stack_copy);
#undef SET
	v->output.fd = out_fd;
	if (unwind)
		return mp_option__parse(&mp_options[MP_OPT_UNWIND], unwind, v, err, err_len);
	return 0;
}

int memprof_client__start(struct memprof_client *c, const pid_t *pids, size_t n,
			  const struct memprof_client_start_opts *opts, int out_fd, uint32_t *id)
{
	static const struct memprof_client_start_opts none = { .sz = sizeof(none) };
	struct mp_opts v;
	char err[256];

	c->errmsg[0] = '\0';
	if (start_opts(opts ? opts : &none, out_fd, &v, err, sizeof(err)) < 0)
		return set_err(c, -EINVAL, "%s", err);
	return mp_client__start(c, pids, n, &v, id);
}

int mp_client__start(struct memprof_client *c, const pid_t *pids, size_t n,
		     const struct mp_opts *o, uint32_t *id)
{
	sd_bus_message *m = NULL, *reply = NULL;
	const char *path;
	int32_t *p32;
	int r;

	c->errmsg[0] = '\0';
	/* no process: the options name targets, or memprofd says what is missing */
	if ((!pids && n) || !id)
		return set_err(c, -EINVAL, "No process to profile");
	p32 = calloc(n ? n : 1, sizeof(*p32));
	if (!p32)
		return set_err(c, -ENOMEM, "Out of memory");
	for (size_t i = 0; i < n; i++)
		p32[i] = (int32_t)pids[i];
	r = sd_bus_message_new_method_call(c->bus, &m, NULL, MEMPROF_BUS_PATH,
					   MEMPROF_BUS_MANAGER_IFACE, MEMPROF_BUS_START);
	if (r >= 0)
		r = sd_bus_message_append_array(m, 'i', p32, n * sizeof(*p32));
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "{sv}");
	if (r >= 0)
		r = mp_opts__append_bus(m, o);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	free(p32);
	r = call(c, m, r, "start profiling", &reply);
	if (r < 0)
		return r;
	r = sd_bus_message_read(reply, MEMPROF_BUS_SIG_PATH, &path);
	if (r >= 0 && sscanf(path, MEMPROF_BUS_PROFILE_PREFIX "/%" SCNu32, id) != 1)
		r = -EBADMSG;
	if (r < 0)
		set_err(c, r, "Failed to read the reply to Start: %s", strerror(-r));
	sd_bus_message_unref(reply);
	return r < 0 ? r : 0;
}

static int call_id(struct memprof_client *c, const char *method, uint32_t id)
{
	sd_bus_error error = SD_BUS_ERROR_NULL;
	int r;

	c->errmsg[0] = '\0';
	r = sd_bus_call_method(c->bus, NULL, MEMPROF_BUS_PATH, MEMPROF_BUS_MANAGER_IFACE, method,
			       &error, NULL, MEMPROF_BUS_SIG_ID, id);
	if (r < 0)
		bus_err(c, r, method, &error);
	sd_bus_error_free(&error);
	return r < 0 ? r : 0;
}

int memprof_client__stop(struct memprof_client *c, uint32_t id)
{
	return call_id(c, MEMPROF_BUS_STOP, id);
}

int memprof_client__discard(struct memprof_client *c, uint32_t id)
{
	return call_id(c, MEMPROF_BUS_DISCARD, id);
}

/* The object of profile @id. */
static void profile_path(uint32_t id, char *path, size_t len)
{
	snprintf(path, len, MEMPROF_BUS_PROFILE_PREFIX "/%" PRIu32, id);
}

int memprof_client__add_process(struct memprof_client *c, uint32_t id, pid_t pid, int out_fd)
{
	sd_bus_message *m = NULL, *reply = NULL;
	char path[128];
	int r, followed = 0;

	c->errmsg[0] = '\0';
	profile_path(id, path, sizeof(path));
	r = sd_bus_message_new_method_call(c->bus, &m, NULL, path, MEMPROF_BUS_PROFILE_IFACE,
					   MEMPROF_BUS_ADD_PROCESS);
	if (r >= 0)
		r = sd_bus_message_append(m, MEMPROF_BUS_SIG_PID, (uint32_t)pid);
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "{sv}");
	if (r >= 0 && out_fd >= 0)
		r = MP_BUS_DICT_PUT(m, MEMPROF_BUS_OPT_OUTPUT, out_fd);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	r = call(c, m, r, "add the process", &reply);
	if (r < 0)
		return r;
	r = sd_bus_message_read(reply, MEMPROF_BUS_SIG_FOLLOWED, &followed);
	if (r < 0)
		set_err(c, r, "Failed to read the reply to AddProcess: %s", strerror(-r));
	sd_bus_message_unref(reply);
	return r < 0 ? r : !!followed;
}

/* ---- properties and dictionaries, read by name ---- */

static enum memprof_client_state parse_state(const char *s)
{
	if (!strcmp(s, MEMPROF_BUS_STATE_SAMPLING))
		return MEMPROF_CLIENT_SAMPLING;
	if (!strcmp(s, MEMPROF_BUS_STATE_STOPPED))
		return MEMPROF_CLIENT_STOPPED;
	if (!strcmp(s, MEMPROF_BUS_STATE_DISCARDED))
		return MEMPROF_CLIENT_DISCARDED;
	return MEMPROF_CLIENT_UNKNOWN;
}

static int dup_str(char **out, const char *s)
{
	free(*out);
	*out = strdup(s);
	return *out ? 0 : -ENOMEM;
}

/*
 * One named value of a dictionary (a{sv}: a Properties.GetAll reply, a process' status): its
 * name, the signature of its value, and where it goes in the caller's struct, or @read for a
 * value that is not a plain one.
 */
struct field {
	const char *key;
	char type;			/* 'u', 't', 'q', 'd', 'b' or 's' (a strdup'ed char *) */
	size_t off;
	int (*read)(sd_bus_message *m, void *base);
};

/* The field @member of struct @st holding @key, of the one-letter signature key##_SIG. */
#define FIELD(st, key, member) { key, key##_SIG[0], offsetof(struct st, member), NULL }

/* Read the variant of @f into the struct at @base. */
static int read_field(sd_bus_message *m, const struct field *f, void *base)
{
	char *p = (char *)base + f->off, type[2] = { f->type, '\0' };
	const char *str;
	int b, r;

	if (f->read)
		return f->read(m, base);
	switch (f->type) {
	case 'b':
		r = sd_bus_message_read(m, "v", "b", &b);
		if (r >= 0)
			*(bool *)p = b;
		return r;
	case 's':
		r = sd_bus_message_read(m, "v", "s", &str);
		return r < 0 ? r : dup_str((char **)p, str);
	default:
		return sd_bus_message_read(m, "v", type, p);
	}
}

/* An a{sv}: each value whose name is in @fields (@n of them) read into @base, others skipped. */
static int read_dict(sd_bus_message *m, const struct field *fields, size_t n, void *base)
{
	int r = sd_bus_message_enter_container(m, 'a', "{sv}");

	while (r >= 0 && (r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
		const struct field *f = NULL;
		const char *k;

		r = sd_bus_message_read(m, "s", &k);
		for (size_t i = 0; r >= 0 && !f && i < n; i++)
			if (!strcmp(k, fields[i].key))
				f = &fields[i];
		if (r >= 0)
			r = f ? read_field(m, f, base) : sd_bus_message_skip(m, "v");
		if (r >= 0)
			r = sd_bus_message_exit_container(m);
	}
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	return r;
}

/* Append an element of @size bytes, zeroed, to the array *@v of *@n (capacity *@cap). */
static void *grow(void *v, size_t *n, size_t *cap, size_t size)
{
	char *a;

	memcpy(&a, v, sizeof(a));
	if (*n == *cap) {
		size_t ncap = *cap ? *cap * 2 : 8;

		a = realloc(a, ncap * size);
		if (!a)
			return NULL;
		memcpy(v, &a, sizeof(a));
		*cap = ncap;
	}
	memset(a + *n * size, 0, size);
	return a + (*n)++ * size;
}

static const struct field process_fields[] = {
	FIELD(memprof_client_process, MEMPROF_PROC_PID, pid),
	FIELD(memprof_client_process, MEMPROF_PROC_COMM, comm),
	FIELD(memprof_client_process, MEMPROF_PROC_EXITED, exited),
	FIELD(memprof_client_process, MEMPROF_PROC_MODE, mode),
	FIELD(memprof_client_process, MEMPROF_PROC_SAMPLED_BLOCKS, samples),
	FIELD(memprof_client_process, MEMPROF_PROC_SAMPLES, nsamples),
	FIELD(memprof_client_process, MEMPROF_PROC_LIVE_SAMPLES, live_nsamples),
	FIELD(memprof_client_process, MEMPROF_PROC_FREED_BLOCKS, frees),
	FIELD(memprof_client_process, MEMPROF_PROC_DROPS, drops),
	FIELD(memprof_client_process, MEMPROF_PROC_EST_ALLOC_BYTES, est_alloc_bytes),
	FIELD(memprof_client_process, MEMPROF_PROC_EST_LIVE_BYTES, est_live_bytes),
	FIELD(memprof_client_process, MEMPROF_PROC_TRACE, trace),
	FIELD(memprof_client_process, MEMPROF_PROC_DETACHED_REASON, detached_reason),
	FIELD(memprof_client_process, MEMPROF_PROC_WRITE_ERROR, write_error),
	FIELD(memprof_client_process, MEMPROF_PROC_WRITE_ERROR_SINCE, write_error_since_us),
	FIELD(memprof_client_process, MEMPROF_PROC_LOST_WRITES, lost_writes),
};

#define NFIELDS(a) (sizeof(a) / sizeof((a)[0]))

/* A property that is an array (in its variant, of type @sig): @elem reads each element. */
static int read_array(sd_bus_message *m, const char *sig, void *base,
		      int (*elem)(sd_bus_message *m, void *base, size_t *cap))
{
	size_t cap = 0;
	int r;

	r = sd_bus_message_enter_container(m, 'v', sig);
	if (r >= 0)
		r = sd_bus_message_enter_container(m, 'a', sig + 1);
	while (r >= 0 && (r = sd_bus_message_at_end(m, false)) == 0)
		r = elem(m, base, &cap);
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	return r;
}

/* ProcessStatus: aa{sv}, one process each. */
static int read_process(sd_bus_message *m, void *base, size_t *cap)
{
	struct memprof_client_profile *p = base;
	struct memprof_client_process *c = grow(&p->procs, &p->nprocs, cap, sizeof(*c));
	int r;

	if (!c)
		return -ENOMEM;
	r = read_dict(m, process_fields, NFIELDS(process_fields), c);
	/* a name the daemon does not have: no trace of its own, an unnamed command */
	if (r >= 0 && !c->trace)
		r = dup_str(&c->trace, "");
	if (r >= 0 && !c->comm)
		r = dup_str(&c->comm, "");
	return r;
}

static int read_processes(sd_bus_message *m, void *base)
{
	return read_array(m, MEMPROF_BUS_PROCESS_STATUS_SIG, base, read_process);
}

/* Targets: a(ssbttt). */
static int read_target(sd_bus_message *m, void *base, size_t *cap)
{
	struct memprof_client_profile *p = base;
	struct memprof_client_target *t = grow(&p->targets, &p->ntargets, cap, sizeof(*t));
	const char *name, *path;
	int present, r;

	if (!t)
		return -ENOMEM;
	r = sd_bus_message_read(m, "(" MEMPROF_BUS_TARGETS_ENTRY ")", &name, &path, &present,
				&t->joined, &t->skipped, &t->failed);
	t->present = present;
	if (r >= 0)
		r = dup_str(&t->name, name);
	if (r >= 0)
		r = dup_str(&t->path, path);
	return r;
}

/* Retired: a{sv}, the sums of the processes no longer listed. */
static const struct field retired_fields[] = {
	FIELD(memprof_client_profile, MEMPROF_RETIRED_PROCESSES, nretired),
	FIELD(memprof_client_profile, MEMPROF_PROC_SAMPLED_BLOCKS, retired.samples),
	FIELD(memprof_client_profile, MEMPROF_PROC_SAMPLES, retired.nsamples),
	FIELD(memprof_client_profile, MEMPROF_PROC_LIVE_SAMPLES, retired.live_nsamples),
	FIELD(memprof_client_profile, MEMPROF_PROC_FREED_BLOCKS, retired.frees),
	FIELD(memprof_client_profile, MEMPROF_PROC_DROPS, retired.drops),
	FIELD(memprof_client_profile, MEMPROF_PROC_EST_ALLOC_BYTES, retired.est_alloc_bytes),
	FIELD(memprof_client_profile, MEMPROF_PROC_EST_LIVE_BYTES, retired.est_live_bytes),
};

static int read_retired(sd_bus_message *m, void *base)
{
	int r = sd_bus_message_enter_container(m, 'v', MEMPROF_BUS_RETIRED_SIG);

	if (r >= 0)
		r = read_dict(m, retired_fields, NFIELDS(retired_fields), base);
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	return r;
}

static int read_targets(sd_bus_message *m, void *base)
{
	return read_array(m, MEMPROF_BUS_TARGETS_SIG, base, read_target);
}

void memprof_client_profile__free(struct memprof_client_profile *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->ntargets; i++) {
		free(p->targets[i].name);
		free(p->targets[i].path);
	}
	free(p->targets);
	for (size_t i = 0; i < p->nprocs; i++) {
		free(p->procs[i].comm);
		free(p->procs[i].mode);
		free(p->procs[i].trace);
		free(p->procs[i].detached_reason);
		free(p->procs[i].write_error);
	}
	free(p->procs);
	free(p->path);
	free(p->state_name);
	free(p->directory);
	free(p->standing);
	free(p);
}

static const struct field profile_fields[] = {
	FIELD(memprof_client_profile, MEMPROF_BUS_ID, id),
	FIELD(memprof_client_profile, MEMPROF_BUS_STATE, state_name),
	FIELD(memprof_client_profile, MEMPROF_BUS_DIRECTORY, directory),
	FIELD(memprof_client_profile, MEMPROF_BUS_OWNER, owner_uid),
	FIELD(memprof_client_profile, MEMPROF_BUS_RATE, rate),
	FIELD(memprof_client_profile, MEMPROF_BUS_CALLSTACK_SIZE, callstack_size),
	FIELD(memprof_client_profile, MEMPROF_BUS_FOLLOW_FORKS, follow_forks),
	FIELD(memprof_client_profile, MEMPROF_BUS_DURATION, duration_us),
	FIELD(memprof_client_profile, MEMPROF_BUS_FORMAT_VERSION, format_version),
	FIELD(memprof_client_profile, MEMPROF_BUS_COMPRESSED, compressed),
	FIELD(memprof_client_profile, MEMPROF_BUS_START_TIMESTAMP, start_us),
	FIELD(memprof_client_profile, MEMPROF_BUS_STANDING, standing),
	{ MEMPROF_BUS_PROCESS_STATUS, 0, 0, read_processes },
	{ MEMPROF_BUS_TARGETS, 0, 0, read_targets },
	{ MEMPROF_BUS_RETIRED, 0, 0, read_retired },
};

/* Properties.GetAll of @iface at @path into @base, by @fields. */
static int get_all(struct memprof_client *c, const char *path, const char *iface,
		   const struct field *fields, size_t n, void *base, sd_bus_error *error)
{
	sd_bus_message *reply = NULL;
	int r;

	r = sd_bus_call_method(c->bus, NULL, path, "org.freedesktop.DBus.Properties", "GetAll",
			       error, &reply, "s", iface);
	if (r >= 0)
		r = read_dict(reply, fields, n, base);
	sd_bus_message_unref(reply);
	return r;
}

int memprof_client__profile(struct memprof_client *c, uint32_t id,
			    struct memprof_client_profile **ret)
{
	sd_bus_error error = SD_BUS_ERROR_NULL;
	struct memprof_client_profile *p;
	char path[128];
	int r;

	c->errmsg[0] = '\0';
	*ret = NULL;
	profile_path(id, path, sizeof(path));
	p = calloc(1, sizeof(*p));
	r = p ? dup_str(&p->path, path) : -ENOMEM;
	if (r >= 0)
		r = get_all(c, path, MEMPROF_BUS_PROFILE_IFACE, profile_fields,
			    NFIELDS(profile_fields), p, &error);
	if (r >= 0 && (!p->state_name || !p->directory))
		r = -EBADMSG;
	if (r < 0) {
		memprof_client_profile__free(p);
		if (sd_bus_error_has_name(&error, SD_BUS_ERROR_UNKNOWN_OBJECT) ||
		    sd_bus_error_has_name(&error, SD_BUS_ERROR_UNKNOWN_INTERFACE))
			r = set_err(c, -ENOENT, "No profile %" PRIu32, id);
		else if (sd_bus_error_is_set(&error))
			bus_err(c, r, "Failed to read the profile", &error);
		else
			set_err(c, r, "Failed to parse profile %" PRIu32 "'s properties: %s", id,
				strerror(-r));
		sd_bus_error_free(&error);
		return r;
	}
	p->state = parse_state(p->state_name);
	*ret = p;
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

/* One entry of ListProfiles (MEMPROF_BUS_PROFILE_LIST_ENTRY). */
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
		pid_t *slot = grow(&e->pids, &e->npids, &cap, sizeof(*slot));

		if (!slot)
			return -ENOMEM;
		*slot = (pid_t)pid;
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
	r = sd_bus_call_method(c->bus, NULL, MEMPROF_BUS_PATH, MEMPROF_BUS_MANAGER_IFACE,
			       MEMPROF_BUS_LIST_PROFILES, &error, &reply, "");
	if (r < 0) {
		bus_err(c, r, "Failed to list profiles", &error);
		sd_bus_error_free(&error);
		return r;
	}
	r = sd_bus_message_enter_container(reply, 'a', "(" MEMPROF_BUS_PROFILE_LIST_ENTRY ")");
	while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'r',
							     MEMPROF_BUS_PROFILE_LIST_ENTRY)) > 0) {
		struct memprof_client_entry *e = grow(&v, &cnt, &cap, sizeof(*e));

		r = e ? read_entry(reply, e) : -ENOMEM;
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

static int read_stats(sd_bus_message *m, void *base)
{
	struct memprof_client_daemon *d = base;
	const char *name;
	uint64_t v;
	int r;

	d->stat_names = calloc(MAX_STATS, sizeof(*d->stat_names));
	d->stat_values = calloc(MAX_STATS, sizeof(*d->stat_values));
	if (!d->stat_names || !d->stat_values)
		return -ENOMEM;
	r = sd_bus_message_enter_container(m, 'v', MEMPROF_BUS_STATS_SIG);
	if (r >= 0)
		r = sd_bus_message_enter_container(m, 'a', "(" MEMPROF_BUS_STATS_ENTRY ")");
	while (r >= 0 && (r = sd_bus_message_read(m, "(" MEMPROF_BUS_STATS_ENTRY ")", &name,
						  &v)) > 0) {
		if (d->nstats >= MAX_STATS)
			continue;
		d->stat_names[d->nstats] = strdup(name);
		if (!d->stat_names[d->nstats])
			return -ENOMEM;
		d->stat_values[d->nstats++] = v;
	}
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	return r;
}

static const struct field daemon_fields[] = {
	FIELD(memprof_client_daemon, MEMPROF_BUS_VERSION, version),
	FIELD(memprof_client_daemon, MEMPROF_BUS_STATE_DIRECTORY, state_dir),
	FIELD(memprof_client_daemon, MEMPROF_BUS_MECHANISMS, mechanisms),
	FIELD(memprof_client_daemon, MEMPROF_BUS_DEFAULT_RATE, default_rate),
	FIELD(memprof_client_daemon, MEMPROF_BUS_DEFAULT_CALLSTACK, default_callstack_size),
	FIELD(memprof_client_daemon, MEMPROF_BUS_MAX_PROFILES, max_profiles),
	FIELD(memprof_client_daemon, MEMPROF_BUS_CLIENTS, clients),
	FIELD(memprof_client_daemon, MEMPROF_BUS_REFUSED_CLIENTS, refused_clients),
	{ MEMPROF_BUS_STATS, 0, 0, read_stats },
};

int memprof_client__daemon(struct memprof_client *c, struct memprof_client_daemon **ret)
{
	sd_bus_error error = SD_BUS_ERROR_NULL;
	struct memprof_client_daemon *d;
	int r;

	c->errmsg[0] = '\0';
	*ret = NULL;
	d = calloc(1, sizeof(*d));
	r = d ? get_all(c, MEMPROF_BUS_PATH, MEMPROF_BUS_MANAGER_IFACE, daemon_fields,
			NFIELDS(daemon_fields), d, &error) : -ENOMEM;
	if (r >= 0 && (!d->version || !d->state_dir))
		r = -EBADMSG;
	if (r < 0) {
		memprof_client_daemon__free(d);
		if (sd_bus_error_is_set(&error))
			bus_err(c, r, "Failed to read memprofd's state", &error);
		else
			set_err(c, r, "Failed to parse memprofd's state: %s", strerror(-r));
		sd_bus_error_free(&error);
		return r;
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
	profile_path(id, path, sizeof(path));
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
			r = sd_bus_get_property_string(c->bus, NULL, path,
						       MEMPROF_BUS_PROFILE_IFACE, MEMPROF_BUS_STATE,
						       &error, &state);
			if (r < 0) {
				if (sd_bus_error_has_name(&error, SD_BUS_ERROR_UNKNOWN_OBJECT))
					r = set_err(c, -ENOENT, "No profile %" PRIu32, id);
				else
					bus_err(c, r, "Failed to read the profile's state", &error);
				break;
			}
			if (strcmp(state, MEMPROF_BUS_STATE_SAMPLING)) {
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
