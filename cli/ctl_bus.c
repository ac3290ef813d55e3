// SPDX-License-Identifier: LGPL-2.1-or-later
/* memprofctl's client of memprofd's D-Bus control API (peer-to-peer on ctl.socket). */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include "cli/commands.h"
#include "cli/ctl_bus.h"
#include "daemon/engine.h"

#define BUS_PATH		"/org/memprofd"
#define BUS_PROFILE_PREFIX	"/org/memprofd/profile"
#define BUS_MANAGER		"org.memprofd.Manager1"
#define BUS_PROFILE		"org.memprofd.Profile1"

int ctl_fail(const char *cmd, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (ctl.json) {
		struct json_object *o = json_object_new_object();

		json_object_object_add(o, "error", json_object_new_string(buf));
		printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
							       JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(o);
	}
	fprintf(stderr, "memprofctl %s: %s\n", cmd, buf);
	return 1;
}

int ctl_fail_bus(const char *cmd, const char *what, const sd_bus_error *e, int r)
{
	if (e && sd_bus_error_is_set(e) && e->message)
		return ctl_fail(cmd, "%s", e->message);
	return ctl_fail(cmd, "%s: %s", what, strerror(r < 0 ? -r : r));
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

int ctl_bus_connect(sd_bus **ret, bool quiet)
{
	char addr[4096] = "unix:path=";
	sd_bus *bus = NULL;
	int r;

	r = escape_address(ctl.socket, addr + strlen(addr), sizeof(addr) - strlen(addr));
	if (r >= 0)
		r = sd_bus_new(&bus);
	if (r >= 0)
		r = sd_bus_set_address(bus, addr);
	if (r >= 0)
		r = sd_bus_negotiate_fds(bus, 1);
	if (r >= 0)
		r = sd_bus_start(bus);
	/* Finish the handshake now: a refusal shows here, not as an odd failure later. */
	if (r >= 0)
		r = sd_bus_call_method(bus, NULL, BUS_PATH, "org.freedesktop.DBus.Peer", "Ping",
				       NULL, NULL, "");
	if (r == -ECONNRESET || r == -ENOTCONN || r == -EPIPE) {
		if (!quiet)
			ctl_fail("connect", "memprofd at '%s' closed the connection (too many "
				 "clients of this user?)", ctl.socket);
		sd_bus_unref(bus);
		return -ECONNREFUSED;
	}
	if (r < 0) {
		if (!quiet)
			ctl_fail("connect", "Failed to connect to memprofd at '%s': %s%s", ctl.socket,
				 strerror(-r), r == -ENOENT || r == -ECONNREFUSED ?
				 " (is memprofd running?)" : "");
		sd_bus_unref(bus);
		return r;
	}
	*ret = bus;
	return 0;
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

int ctl_bus_start(sd_bus *bus, const char *cmd, const pid_t *pids, size_t npids,
		  const struct ctl_start_opts *o, uint32_t *ret_id)
{
	sd_bus_error error = SD_BUS_ERROR_NULL;
	sd_bus_message *m = NULL, *reply = NULL;
	int32_t *p32;
	const char *path;
	int r;

	p32 = calloc(npids ? npids : 1, sizeof(*p32));
	if (!p32)
		return -ENOMEM;
	for (size_t i = 0; i < npids; i++)
		p32[i] = (int32_t)pids[i];
	r = sd_bus_message_new_method_call(bus, &m, NULL, BUS_PATH, BUS_MANAGER, "Start");
	if (r >= 0)
		r = sd_bus_message_append_array(m, 'i', p32, npids * sizeof(*p32));
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
		r = append_opt(m, "format_version", "q", (uint16_t)o->format_version);
	if (r >= 0 && o->zstd)
		r = append_opt(m, "zstd", "b", 1);
	if (r >= 0 && o->max_overhead > 0)
		r = append_opt(m, "max_overhead", "d", o->max_overhead);
	if (r >= 0 && o->out_fd >= 0)
		r = append_opt(m, "output", "h", o->out_fd);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	free(p32);
	if (r < 0) {
		sd_bus_message_unref(m);
		ctl_fail(cmd, "Failed to build the request: %s", strerror(-r));
		return r;
	}
	r = sd_bus_call(bus, m, 0, &error, &reply);
	sd_bus_message_unref(m);
	if (r >= 0)
		r = sd_bus_message_read(reply, "o", &path);
	if (r >= 0 && sscanf(path, BUS_PROFILE_PREFIX "/%" SCNu32, ret_id) != 1)
		r = -EBADMSG;
	if (r < 0)
		ctl_fail_bus(cmd, "Failed to start profiling", &error, r);
	sd_bus_error_free(&error);
	sd_bus_message_unref(reply);
	return r < 0 ? r : 0;
}

static int call_id(sd_bus *bus, const char *cmd, const char *method, uint32_t id)
{
	sd_bus_error error = SD_BUS_ERROR_NULL;
	int r;

	r = sd_bus_call_method(bus, NULL, BUS_PATH, BUS_MANAGER, method, &error, NULL, "u", id);
	if (r < 0)
		ctl_fail_bus(cmd, method, &error, r);
	sd_bus_error_free(&error);
	return r < 0 ? r : 0;
}

int ctl_bus_stop(sd_bus *bus, const char *cmd, uint32_t id)
{
	return call_id(bus, cmd, "Stop", id);
}

int ctl_bus_discard(sd_bus *bus, const char *cmd, uint32_t id)
{
	return call_id(bus, cmd, "Discard", id);
}

void ctl_profile_done(struct ctl_profile *p)
{
	free(p->path);
	free(p->state);
	free(p->directory);
	for (size_t i = 0; i < p->nprocs; i++) {
		free(p->procs[i].comm);
		free(p->procs[i].trace);
		free(p->procs[i].mode);
		free(p->procs[i].detached_reason);
	}
	free(p->procs);
	memset(p, 0, sizeof(*p));
}

/* ProcessModes (after Processes): each process' mode, "uprobe" or "preload". */
static int read_modes(sd_bus_message *m, struct ctl_profile *p)
{
	const char *mode;
	uint32_t pid;
	int r;

	r = sd_bus_message_enter_container(m, 'v', "a(us)");
	if (r >= 0)
		r = sd_bus_message_enter_container(m, 'a', "(us)");
	while (r >= 0 && (r = sd_bus_message_read(m, "(us)", &pid, &mode)) > 0) {
		for (size_t i = 0; i < p->nprocs; i++) {
			if (p->procs[i].pid != pid || p->procs[i].mode)
				continue;
			p->procs[i].mode = strdup(mode);
			if (!p->procs[i].mode)
				return -ENOMEM;
		}
	}
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	return r;
}

/* ProcessDetached (after Processes): processes detached over their overhead budget. */
static int read_detached(sd_bus_message *m, struct ctl_profile *p)
{
	const char *why;
	uint32_t pid;
	int r;

	r = sd_bus_message_enter_container(m, 'v', "a(us)");
	if (r >= 0)
		r = sd_bus_message_enter_container(m, 'a', "(us)");
	while (r >= 0 && (r = sd_bus_message_read(m, "(us)", &pid, &why)) > 0) {
		for (size_t i = 0; i < p->nprocs; i++) {
			if (p->procs[i].pid != pid || p->procs[i].detached_reason)
				continue;
			p->procs[i].detached_reason = strdup(why);
			if (!p->procs[i].detached_reason)
				return -ENOMEM;
		}
	}
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	return r;
}

static int read_procs(sd_bus_message *m, struct ctl_profile *p)
{
	size_t cap = 0;
	int r;

	r = sd_bus_message_enter_container(m, 'v', "a(usbttttddts)");
	if (r >= 0)
		r = sd_bus_message_enter_container(m, 'a', "(usbttttddts)");
	while (r >= 0) {
		struct ctl_proc c = { 0 };
		const char *comm, *trace;
		int exited;

		r = sd_bus_message_read(m, "(usbttttddts)", &c.pid, &comm, &exited, &c.samples,
					&c.nsamples, &c.live_nsamples, &c.frees, &c.est_alloc_bytes,
					&c.est_live_bytes, &c.drops, &trace);
		if (r <= 0)
			break;
		if (p->nprocs == cap) {
			struct ctl_proc *n = realloc(p->procs, (cap = cap ? cap * 2 : 8) * sizeof(*n));

			if (!n)
				return -ENOMEM;
			p->procs = n;
		}
		c.exited = exited;
		c.comm = strdup(comm);
		c.trace = strdup(trace);
		p->procs[p->nprocs++] = c;
		if (!c.comm || !c.trace)
			return -ENOMEM;
	}
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	return r;
}

static int read_str(sd_bus_message *m, char **out)
{
	const char *s;
	int r = sd_bus_message_read(m, "v", "s", &s);

	if (r < 0)
		return r;
	free(*out);
	*out = strdup(s);
	return *out ? 0 : -ENOMEM;
}

int ctl_bus_get_profile(sd_bus *bus, const char *cmd, uint32_t id, struct ctl_profile *p)
{
	sd_bus_error error = SD_BUS_ERROR_NULL;
	sd_bus_message *reply = NULL;
	char path[128];
	int r, b;

	memset(p, 0, sizeof(*p));
	snprintf(path, sizeof(path), BUS_PROFILE_PREFIX "/%" PRIu32, id);
	r = sd_bus_call_method(bus, NULL, path, "org.freedesktop.DBus.Properties", "GetAll",
			       &error, &reply, "s", BUS_PROFILE);
	if (r < 0) {
		if (sd_bus_error_has_name(&error, SD_BUS_ERROR_UNKNOWN_OBJECT) ||
		    sd_bus_error_has_name(&error, SD_BUS_ERROR_UNKNOWN_INTERFACE))
			ctl_fail(cmd, "No profile %" PRIu32, id);
		else
			ctl_fail_bus(cmd, "Failed to read the profile", &error, r);
		sd_bus_error_free(&error);
		return r;
	}
	p->path = strdup(path);
	r = p->path ? sd_bus_message_enter_container(reply, 'a', "{sv}") : -ENOMEM;
	while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'e', "sv")) > 0) {
		const char *k;

		r = sd_bus_message_read(reply, "s", &k);
		if (r < 0)
			break;
		if (!strcmp(k, "Id"))
			r = sd_bus_message_read(reply, "v", "u", &p->id);
		else if (!strcmp(k, "State"))
			r = read_str(reply, &p->state);
		else if (!strcmp(k, "Directory"))
			r = read_str(reply, &p->directory);
		else if (!strcmp(k, "Owner"))
			r = sd_bus_message_read(reply, "v", "u", &p->owner);
		else if (!strcmp(k, "Rate"))
			r = sd_bus_message_read(reply, "v", "d", &p->rate);
		else if (!strcmp(k, "CallstackSize"))
			r = sd_bus_message_read(reply, "v", "u", &p->callstack_size);
		else if (!strcmp(k, "FollowForks")) {
			r = sd_bus_message_read(reply, "v", "b", &b);
			p->follow_forks = b;
		} else if (!strcmp(k, "DurationUSec"))
			r = sd_bus_message_read(reply, "v", "t", &p->duration_us);
		else if (!strcmp(k, "FormatVersion"))
			r = sd_bus_message_read(reply, "v", "q", &p->format_version);
		else if (!strcmp(k, "Compressed")) {
			r = sd_bus_message_read(reply, "v", "b", &b);
			p->compressed = b;
		} else if (!strcmp(k, "StartTimestamp"))
			r = sd_bus_message_read(reply, "v", "t", &p->start_us);
		else if (!strcmp(k, "Processes"))
			r = read_procs(reply, p);
		else if (!strcmp(k, "ProcessModes"))
			r = read_modes(reply, p);
		else if (!strcmp(k, "ProcessDetached"))
			r = read_detached(reply, p);
		else
			r = sd_bus_message_skip(reply, "v");
		if (r >= 0)
			r = sd_bus_message_exit_container(reply);
	}
	sd_bus_message_unref(reply);
	if (r >= 0 && (!p->state || !p->directory))
		r = -EBADMSG;
	if (r < 0) {
		ctl_profile_done(p);
		ctl_fail(cmd, "Failed to parse profile %" PRIu32 "'s properties: %s", id,
			 strerror(-r));
		return r;
	}
	return 0;
}

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
	interrupted = sig;
}

static int on_changed(sd_bus_message *m, void *userdata, sd_bus_error *error)
{
	bool *changed = userdata;

	*changed = true;
	return 0;
}

static int get_state(sd_bus *bus, const char *cmd, const char *path, char **state)
{
	sd_bus_error error = SD_BUS_ERROR_NULL;
	int r;

	free(*state);
	*state = NULL;
	r = sd_bus_get_property_string(bus, NULL, path, BUS_PROFILE, "State", &error, state);
	if (r < 0)
		ctl_fail_bus(cmd, "Failed to read the profile's state", &error, r);
	sd_bus_error_free(&error);
	return r;
}

int ctl_bus_wait_stopped(sd_bus *bus, const char *cmd, uint32_t id, bool interrupt)
{
	struct sigaction sa = { .sa_handler = on_interrupt }, old_int, old_term;
	sd_bus_slot *slot = NULL;
	bool changed = true, stop_sent = false;
	char path[128], *state = NULL;
	int r;

	snprintf(path, sizeof(path), BUS_PROFILE_PREFIX "/%" PRIu32, id);
	/* Subscribe first, then read: no state change can fall in between. */
	r = sd_bus_match_signal(bus, &slot, NULL, path, "org.freedesktop.DBus.Properties",
				"PropertiesChanged", on_changed, &changed);
	if (r < 0) {
		ctl_fail(cmd, "Failed to watch profile %" PRIu32 ": %s", id, strerror(-r));
		return r;
	}
	if (interrupt) {
		/* No SA_RESTART: sd_bus_wait() returns -EINTR. */
		sigaction(SIGINT, &sa, &old_int);
		sigaction(SIGTERM, &sa, &old_term);
	}
	for (;;) {
		if (interrupted && !stop_sent) {
			stop_sent = true;
			r = ctl_bus_stop(bus, cmd, id);
			if (r < 0 && r != -EINVAL)
				break;
			changed = true;
		}
		if (changed) {
			changed = false;
			r = get_state(bus, cmd, path, &state);
			if (r < 0)
				break;
			if (strcmp(state, "sampling")) {
				r = 0;
				break;
			}
		}
		r = sd_bus_process(bus, NULL);
		if (r > 0)
			continue;
		if (r < 0) {
			ctl_fail(cmd, "Lost the connection to memprofd: %s", strerror(-r));
			break;
		}
		r = sd_bus_wait(bus, UINT64_MAX);
		if (r < 0 && r != -EINTR) {
			ctl_fail(cmd, "Failed to wait for memprofd: %s", strerror(-r));
			break;
		}
	}
	if (interrupt) {
		sigaction(SIGINT, &old_int, NULL);
		sigaction(SIGTERM, &old_term, NULL);
	}
	free(state);
	sd_bus_slot_unref(slot);
	return r;
}

static void human_bytes(double b, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	unsigned int u = 0;

	while (b >= 1024 && u < 4) {
		b /= 1024;
		u++;
	}
	snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", b, units[u]);
}

void ctl_print_profile(const struct ctl_profile *p)
{
	if (ctl.json) {
		struct json_object *o = json_object_new_object(), *a = json_object_new_array();

		json_object_object_add(o, "id", json_object_new_int64(p->id));
		json_object_object_add(o, "path", json_object_new_string(p->path));
		json_object_object_add(o, "state", json_object_new_string(p->state));
		json_object_object_add(o, "owner_uid", json_object_new_int64(p->owner));
		json_object_object_add(o, "rate", json_object_new_double(p->rate));
		json_object_object_add(o, "callstack_size",
				       json_object_new_int64(p->callstack_size));
		json_object_object_add(o, "follow_forks", json_object_new_boolean(p->follow_forks));
		json_object_object_add(o, "duration_us", json_object_new_uint64(p->duration_us));
		json_object_object_add(o, "format_version", json_object_new_int(p->format_version));
		json_object_object_add(o, "zstd", json_object_new_boolean(p->compressed));
		json_object_object_add(o, "start_time_us", json_object_new_uint64(p->start_us));
		json_object_object_add(o, "directory", json_object_new_string(p->directory));
		for (size_t i = 0; i < p->nprocs; i++) {
			const struct ctl_proc *c = &p->procs[i];
			struct json_object *j = json_object_new_object();

			json_object_object_add(j, "pid", json_object_new_int64(c->pid));
			json_object_object_add(j, "comm", json_object_new_string(c->comm));
			json_object_object_add(j, "exited", json_object_new_boolean(c->exited));
			json_object_object_add(j, "mode", c->mode ? json_object_new_string(c->mode) :
								    NULL);
			json_object_object_add(j, "samples", json_object_new_uint64(c->samples));
			json_object_object_add(j, "nsamples", json_object_new_uint64(c->nsamples));
			json_object_object_add(j, "frees", json_object_new_uint64(c->frees));
			json_object_object_add(j, "est_alloc_bytes",
					       json_object_new_double(c->est_alloc_bytes));
			json_object_object_add(j, "est_live_bytes",
					       json_object_new_double(c->est_live_bytes));
			json_object_object_add(j, "live_nsamples",
					       json_object_new_uint64(c->live_nsamples));
			json_object_object_add(j, "est_alloc_se_bytes", json_object_new_double(
					       mp_estimate_se_bytes(p->rate, c->nsamples)));
			json_object_object_add(j, "est_live_se_bytes", json_object_new_double(
					       mp_estimate_se_bytes(p->rate, c->live_nsamples)));
			json_object_object_add(j, "drops", json_object_new_uint64(c->drops));
			json_object_object_add(j, "detached_reason", c->detached_reason ?
					       json_object_new_string(c->detached_reason) : NULL);
			json_object_object_add(j, "trace", c->trace[0] ?
					       json_object_new_string(c->trace) : NULL);
			json_object_array_add(a, j);
		}
		json_object_object_add(o, "processes", a);
		printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
							       JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(o);
		return;
	}
	printf("Profile %" PRIu32 ": %s\n", p->id, p->state);
	printf("  Owner:      uid %" PRIu32 "\n", p->owner);
	printf("  Rate:       %g per word; callstack %" PRIu32 " frames; forks %s\n", p->rate,
	       p->callstack_size, p->follow_forks ? "followed" : "not followed");
	if (p->duration_us)
		printf("  Duration:   %.3f s\n", p->duration_us / 1e6);
	printf("  Format:     memtrace v%u%s\n", p->format_version, p->compressed ? ", zstd" : "");
	printf("  Directory:  %s\n", p->directory);
	printf("  %-8s %-16s %-7s %-7s %9s %9s %21s %21s %7s  %s\n", "PID", "COMM", "STATE",
	       "MODE", "SAMPLES", "FREES", "ALLOCATED", "LIVE", "DROPS", "TRACE");
	for (size_t i = 0; i < p->nprocs; i++) {
		const struct ctl_proc *c = &p->procs[i];
		char alloc[32], live[32], se[32], a[72], l[72];

		/* Estimates with their standard error (the binomial sampling's). */
		human_bytes(c->est_alloc_bytes, alloc, sizeof(alloc));
		human_bytes(mp_estimate_se_bytes(p->rate, c->nsamples), se, sizeof(se));
		snprintf(a, sizeof(a), "%s ±%s", alloc, se);
		human_bytes(c->est_live_bytes, live, sizeof(live));
		human_bytes(mp_estimate_se_bytes(p->rate, c->live_nsamples), se, sizeof(se));
		snprintf(l, sizeof(l), "%s ±%s", live, se);
		printf("  %-8" PRIu32 " %-16s %-7s %-7s %9" PRIu64 " %9" PRIu64 " %21s %21s %7"
		       PRIu64 "  %s\n", c->pid, c->comm, c->exited ? "exited" : "running",
		       c->mode ? c->mode : "?", c->samples,
		       c->frees, a, l, c->drops, c->trace[0] ? c->trace : "(client's file)");
		if (c->detached_reason)
			printf("  %-8" PRIu32 " DETACHED: %s; its trace ends there\n", c->pid,
			       c->detached_reason);
	}
}

int ctl_bus_record(pid_t pid, const struct ctl_start_opts *o, sd_bus **ret_bus,
		   uint32_t *ret_id)
{
	sd_bus *bus = NULL;
	int r;

	r = ctl_bus_connect(&bus, true);
	if (r < 0)
		return r;
	r = ctl_bus_start(bus, "record", &pid, 1, o, ret_id);
	if (r < 0) {
		sd_bus_flush_close_unref(bus);
		/* Printed already; make it distinct from "not reachable". */
		return r == -ECONNREFUSED || r == -ENOENT || r == -EACCES ? -EIO : r;
	}
	*ret_bus = bus;
	return 0;
}

int ctl_bus_record_finish(sd_bus *bus, uint32_t id)
{
	int r;

	r = ctl_bus_wait_stopped(bus, "record", id, true);
	if (r >= 0)
		r = ctl_bus_discard(bus, "record", id);
	sd_bus_flush_close_unref(bus);
	return r;
}

int ctl_parse_duration(const char *s, uint64_t *us)
{
	static const struct {
		const char *suffix;
		double mult;
	} units[] = {
		{ "", 1e6 }, { "s", 1e6 }, { "ms", 1e3 }, { "us", 1 }, { "m", 60e6 }, { "min", 60e6 },
		{ "h", 3600e6 },
	};
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || !(v > 0))
		return -EINVAL;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (!strcmp(end, units[i].suffix)) {
			double x = v * units[i].mult;

			if (x < 1 || x > 1e18)
				return -ERANGE;
			*us = (uint64_t)x;
			return 0;
		}
	}
	return -EINVAL;
}
