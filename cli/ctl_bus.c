// SPDX-License-Identifier: LGPL-2.1-or-later
/* memprofctl's client of memprofd's control API, on libmemprof's <memprof/client.h>. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "userspace-lib/units.h"
#include "cli/commands.h"
#include "cli/ctl_bus.h"
#include "cli/summary.h"
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

/* A process' write error, as a line of `status`. */
static void print_write_error(const struct mp_summary_proc *c)
{
	time_t sec = (time_t)(c->write_error_since_us / 1000000);
	char when[64];
	struct tm tm;

	localtime_r(&sec, &tm);
	strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
	if (strcmp(c->write_error, "stalled"))
		printf("  %-8" PRIu32 " WRITE ERROR: %s (%s) since %s: %" PRIu64 " events not "
		       "written; the trace ends there\n", (uint32_t)c->pid, c->write_error,
		       describe_errno(c->write_error), when, c->lost_writes);
	else
		printf("  %-8" PRIu32 " OUTPUT STALLED since %s: %" PRIu64 " events not written "
		       "(the file did not keep up)\n", (uint32_t)c->pid, when, c->lost_writes);
}

void ctl_profile_json_head(struct json_object *o, uint32_t id, const char *state,
			   const char *path, uint32_t owner_uid, double rate)
{
	json_object_object_add(o, "id", json_object_new_int64(id));
	json_object_object_add(o, "state", json_object_new_string(state));
	json_object_object_add(o, "path", json_object_new_string(path));
	json_object_object_add(o, "owner_uid", json_object_new_int64(owner_uid));
	json_object_object_add(o, "rate", json_object_new_double(rate));
}

static struct json_object *targets_json(const struct memprof_client_profile *p)
{
	struct json_object *ts = json_object_new_array();

	for (size_t i = 0; i < p->ntargets; i++) {
		const struct memprof_client_target *t = &p->targets[i];
		const struct {
			const char *key;
			uint64_t n;
		} counts[] = { { "joined", t->joined }, { "skipped", t->skipped },
			       { "failed", t->failed } };
		struct json_object *j = json_object_new_object();

		json_object_object_add(j, "name", json_object_new_string(t->name));
		json_object_object_add(j, "path", json_object_new_string(t->path));
		json_object_object_add(j, "present", json_object_new_boolean(t->present));
		for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
			json_object_object_add(j, counts[k].key, json_object_new_uint64(counts[k].n));
		json_object_array_add(ts, j);
	}
	return ts;
}

static void print_profile_json(const struct memprof_client_profile *p, const struct mp_summary *s)
{
	struct json_object *o = json_object_new_object();

	ctl_profile_json_head(o, p->id, p->state_name, p->path, p->owner_uid, p->rate);
	json_object_object_add(o, "callstack_size", json_object_new_int64(p->callstack_size));
	json_object_object_add(o, "follow_forks", json_object_new_boolean(p->follow_forks));
	json_object_object_add(o, "duration_us", json_object_new_uint64(p->duration_us));
	json_object_object_add(o, "format_version", json_object_new_int(p->format_version));
	json_object_object_add(o, "zstd", json_object_new_boolean(p->compressed));
	json_object_object_add(o, "start_time_us", json_object_new_uint64(p->start_us));
	json_object_object_add(o, "directory", json_object_new_string(p->directory));
	json_object_object_add(o, "processes", mp_summary__procs_json(s));
	if (s->nretired)
		json_object_object_add(o, "retired", mp_summary__retired_json(s));
	if (p->ntargets)
		json_object_object_add(o, "targets", targets_json(p));
	if (p->standing && p->standing[0])
		json_object_object_add(o, "standing", json_object_new_string(p->standing));
	printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
						       JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
}

/* One line of status' table: estimates with their standard error (the binomial sampling's). */
static void print_row(const struct mp_summary_proc *c, const char *pid, const char *comm,
		      const char *state, const char *mode, const char *trace)
{
	char alloc[32], live[32], se[32], a[72], l[72];

	mp_fmt_bytes(c->allocated_bytes_se, se, sizeof(se));
	snprintf(a, sizeof(a), "%s ±%s", mp_fmt_bytes(c->allocated_bytes, alloc, sizeof(alloc)),
		 se);
	mp_fmt_bytes(c->live_bytes_se, se, sizeof(se));
	snprintf(l, sizeof(l), "%s ±%s", mp_fmt_bytes(c->live_bytes, live, sizeof(live)), se);
	printf("  %-8s %-16s %-7s %-7s %9" PRIu64 " %9" PRIu64 " %21s %21s %7" PRIu64 "  %s\n",
	       pid, comm, state, mode, c->sampled_blocks, c->freed_blocks, a, l, c->drops, trace);
}

void ctl_print_profile(const struct memprof_client_profile *p)
{
	struct mp_summary s;

	if (ctl_summary__from_client(&s, p) < 0) {
		ctl_fail(ctl.cmd, "Out of memory");
		return;
	}
	if (ctl.json) {
		print_profile_json(p, &s);
		mp_summary__free(&s);
		return;
	}
	printf("Profile %" PRIu32 ": %s\n", p->id, p->state_name);
	if (p->standing && p->standing[0])
		printf("  Standing:   [Profile] %s of memprofd's configuration\n", p->standing);
	printf("  Owner:      uid %" PRIu32 "\n", p->owner_uid);
	printf("  Rate:       %g per word; callstack %" PRIu32 " frames; forks %s\n", p->rate,
	       p->callstack_size, p->follow_forks ? "followed" : "not followed");
	if (p->duration_us)
		printf("  Duration:   %.3f s\n", p->duration_us / 1e6);
	printf("  Format:     memtrace v%u%s\n", p->format_version, p->compressed ? ", zstd" : "");
	printf("  Directory:  %s\n", p->directory);
	for (size_t i = 0; i < p->ntargets; i++) {
		const struct memprof_client_target *t = &p->targets[i];

		printf("  Target:     %s (%s%s): %" PRIu64 " joined, %" PRIu64 " skipped (not the "
		       "owner's), %" PRIu64 " not probed\n", t->name, t->path,
		       t->present ? "" : ", absent now", t->joined, t->skipped, t->failed);
	}
	printf("  %-8s %-16s %-7s %-7s %9s %9s %21s %21s %7s  %s\n", "PID", "COMM", "STATE",
	       "MODE", "BLOCKS", "FREED", "ALLOCATED", "LIVE", "DROPS", "TRACE");
	for (size_t i = 0; i < s.nprocs; i++) {
		const struct mp_summary_proc *c = &s.procs[i];
		char pid[16];

		snprintf(pid, sizeof(pid), "%" PRIu32, (uint32_t)c->pid);
		print_row(c, pid, c->comm, c->exited ? "exited" : "running", c->mode ? c->mode : "?",
			  c->trace ? c->trace : "(client's file)");
		if (c->detached_reason)
			printf("  %-8" PRIu32 " DETACHED: %s; its trace ends there\n", (uint32_t)c->pid,
			       c->detached_reason);
		if (c->write_error)
			print_write_error(c);
	}
	if (s.nretired) {
		char n[32];

		snprintf(n, sizeof(n), "(%" PRIu64 " more)", s.nretired);
		print_row(&s.retired, "-", n, "exited", "-",
			  "(earlier processes: their traces are in the directory)");
	}
	mp_summary__free(&s);
}
