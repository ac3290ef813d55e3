// SPDX-License-Identifier: LGPL-2.1-or-later
/* memprofctl's client of memprofd's control API, on libmemprof's <memprof/client.h>. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "userspace-lib/estimate.h"
#include "cli/commands.h"
#include "cli/ctl_bus.h"
#include "daemon/engine/engine.h"

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

int ctl_fail_client(const char *cmd, const struct memprof_client *c, int r)
{
	const char *msg = memprof_client__errmsg(c);

	if (msg[0])
		return ctl_fail(cmd, "%s", msg);
	return ctl_fail(cmd, "%s", strerror(r < 0 ? -r : r));
}

int ctl_bus_connect(struct memprof_client **ret, bool quiet)
{
	int r = memprof_client__connect(ctl.socket, ret);

	if (r == -ECONNRESET) {
		if (!quiet)
			ctl_fail(ctl.cmd, "memprofd at '%s' closed the connection (too many "
				 "clients of this user?)", ctl.socket);
		return -ECONNREFUSED;
	}
	if (r < 0 && !quiet)
		ctl_fail(ctl.cmd, "Failed to connect to memprofd at '%s': %s%s", ctl.socket,
			 strerror(-r), r == -ENOENT || r == -ECONNREFUSED ?
			 " (is memprofd running?)" : "");
	return r;
}

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
	interrupted = sig;
}

int ctl_wait_stopped(struct memprof_client *c, const char *cmd, uint32_t id, bool interrupt)
{
	struct sigaction sa = { .sa_handler = on_interrupt }, old_int, old_term;
	bool stop_sent = false;
	int r;

	if (interrupt) {
		/* No SA_RESTART: the wait returns -EINTR. */
		sigaction(SIGINT, &sa, &old_int);
		sigaction(SIGTERM, &sa, &old_term);
	}
	for (;;) {
		if (interrupted && !stop_sent) {
			stop_sent = true;
			r = memprof_client__stop(c, id);
			if (r < 0 && r != -EINVAL) {
				ctl_fail_client(cmd, c, r);
				break;
			}
		}
		r = memprof_client__wait(c, id, UINT64_MAX);
		if (r == -EINTR)
			continue;
		if (r < 0)
			ctl_fail_client(cmd, c, r);
		break;
	}
	if (interrupt) {
		sigaction(SIGINT, &old_int, NULL);
		sigaction(SIGTERM, &old_term, NULL);
	}
	return r;
}

void ctl_human_bytes(double b, int decimals, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	unsigned int u = 0;

	while (fabs(b) >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		b /= 1024;
		u++;
	}
	snprintf(buf, len, "%.*f %s", u ? decimals : 0, b, units[u]);
}

/* strerror() of an errno name ("ENOSPC"), for a person. */
static const char *describe_errno(const char *name)
{
	for (int e = 1; e < 4096; e++) {	/* errno values, as the kernel's are bounded */
		const char *n = strerrorname_np(e);

		if (n && !strcmp(n, name))
			return strerror(e);
	}
	return "unknown error";
}

void ctl_print_profile(const struct memprof_client_profile *p)
{
	if (ctl.json) {
		struct json_object *o = json_object_new_object(), *a = json_object_new_array();

		json_object_object_add(o, "id", json_object_new_int64(p->id));
		json_object_object_add(o, "path", json_object_new_string(p->path));
		json_object_object_add(o, "state", json_object_new_string(p->state_name));
		json_object_object_add(o, "owner_uid", json_object_new_int64(p->owner_uid));
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
			const struct memprof_client_process *c = &p->procs[i];
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
					       mp_est_se_bound_bytes(p->rate, c->est_alloc_bytes)));
			json_object_object_add(j, "est_live_se_bytes", json_object_new_double(
					       mp_est_se_bound_bytes(p->rate, c->est_live_bytes)));
			json_object_object_add(j, "est_alloc_words", json_object_new_double(
					       mp_est_words(p->rate, c->nsamples)));
			json_object_object_add(j, "est_live_words", json_object_new_double(
					       mp_est_words(p->rate, c->live_nsamples)));
			json_object_object_add(j, "drops", json_object_new_uint64(c->drops));
			json_object_object_add(j, "detached_reason", c->detached_reason ?
					       json_object_new_string(c->detached_reason) : NULL);
			json_object_object_add(j, "write_error", c->write_error ?
					       json_object_new_string(c->write_error) : NULL);
			json_object_object_add(j, "write_error_since_us", c->write_error ?
					       json_object_new_uint64(c->write_error_since_us) :
					       NULL);
			json_object_object_add(j, "lost_writes",
					       json_object_new_uint64(c->lost_writes));
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
	printf("Profile %" PRIu32 ": %s\n", p->id, p->state_name);
	printf("  Owner:      uid %" PRIu32 "\n", p->owner_uid);
	printf("  Rate:       %g per word; callstack %" PRIu32 " frames; forks %s\n", p->rate,
	       p->callstack_size, p->follow_forks ? "followed" : "not followed");
	if (p->duration_us)
		printf("  Duration:   %.3f s\n", p->duration_us / 1e6);
	printf("  Format:     memtrace v%u%s\n", p->format_version, p->compressed ? ", zstd" : "");
	printf("  Directory:  %s\n", p->directory);
	printf("  %-8s %-16s %-7s %-7s %9s %9s %21s %21s %7s  %s\n", "PID", "COMM", "STATE",
	       "MODE", "SAMPLES", "FREES", "ALLOCATED", "LIVE", "DROPS", "TRACE");
	for (size_t i = 0; i < p->nprocs; i++) {
		const struct memprof_client_process *c = &p->procs[i];
		char alloc[32], live[32], se[32], a[72], l[72];

		/* Estimates with their standard error (the binomial sampling's). */
		ctl_human_bytes(c->est_alloc_bytes, 1, alloc, sizeof(alloc));
		ctl_human_bytes(mp_est_se_bound_bytes(p->rate, c->est_alloc_bytes), 1, se, sizeof(se));
		snprintf(a, sizeof(a), "%s ±%s", alloc, se);
		ctl_human_bytes(c->est_live_bytes, 1, live, sizeof(live));
		ctl_human_bytes(mp_est_se_bound_bytes(p->rate, c->est_live_bytes), 1, se,
				sizeof(se));
		snprintf(l, sizeof(l), "%s ±%s", live, se);
		printf("  %-8" PRIu32 " %-16s %-7s %-7s %9" PRIu64 " %9" PRIu64 " %21s %21s %7"
		       PRIu64 "  %s\n", (uint32_t)c->pid, c->comm, c->exited ? "exited" : "running",
		       c->mode ? c->mode : "?", c->samples,
		       c->frees, a, l, c->drops, c->trace[0] ? c->trace : "(client's file)");
		if (c->detached_reason)
			printf("  %-8" PRIu32 " DETACHED: %s; its trace ends there\n", (uint32_t)c->pid,
			       c->detached_reason);
		if (c->write_error) {
			time_t sec = (time_t)(c->write_error_since_us / 1000000);
			char when[64];
			struct tm tm;

			localtime_r(&sec, &tm);
			strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
			if (strcmp(c->write_error, "stalled"))
				printf("  %-8" PRIu32 " WRITE ERROR: %s (%s) since %s: %" PRIu64
				       " events not written; the trace ends there\n",
				       (uint32_t)c->pid, c->write_error,
				       describe_errno(c->write_error), when, c->lost_writes);
			else
				printf("  %-8" PRIu32 " OUTPUT STALLED since %s: %" PRIu64
				       " events not written (the file did not keep up)\n",
				       (uint32_t)c->pid, when, c->lost_writes);
		}
	}
}
