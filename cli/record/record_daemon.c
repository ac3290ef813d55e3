// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * `memprofctl record` through memprofd: see cli/record/record_daemon.h. The summary at exit
 * counts the processes of record's own profile only (its Profile1 properties); the daemon's
 * counters (Manager1.Stats) are of all its profiles together, so their growth during the
 * recording is shown apart, as such, and only when a loss counter grew (cli/summary.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/ctl_bus.h"
#include "cli/record/record_daemon.h"
#include "cli/summary.h"
#include "userspace-lib/client/client_int.h"
#include "userspace-lib/codec/outfile.h"

#define PFX "memprofctl record: "

struct record_daemon {
	struct memprof_client *c;
	struct record_sync sync;
	uint32_t id;			/* 0: no profile started */
	bool finished;
	pid_t root;
	char out_path[PATH_MAX];
	struct memprof_client_daemon *before;	/* counters at start */
	pid_t *forked;			/* children given a trace (pid reuse: a new name) */
	size_t nforked, forked_cap;
};

static bool unreachable(int r)
{
	return r == -ENOENT || r == -ECONNREFUSED || r == -EACCES || r == -ENOTDIR ||
	       r == -ECONNRESET;
}

int record_daemon__open(enum record_daemon_mode mode, bool has_seed, struct record_daemon **ret)
{
	struct memprof_client_daemon *d = NULL;
	struct record_daemon *rd;
	int r;

	*ret = NULL;
	if (mode == RECORD_DAEMON_NEVER)
		return 0;
	if (has_seed) {
		if (mode == RECORD_DAEMON_AUTO)
			return 0;	/* the daemon's PRNG is its own: in-process */
		fprintf(stderr, PFX "--seed needs the in-process engine; it cannot be used with "
			"--daemon\n");
		return -EINVAL;
	}
	rd = calloc(1, sizeof(*rd));
	if (!rd) {
		fprintf(stderr, PFX "Out of memory\n");
		return -ENOMEM;
	}
	r = memprof_client__connect(ctl.socket, &rd->c);
	if (r < 0) {
		free(rd);
		if (mode == RECORD_DAEMON_AUTO && unreachable(r))
			return 0;
		fprintf(stderr, PFX "Failed to connect to memprofd at '%s': %s%s\n", ctl.socket,
			strerror(-r), mode == RECORD_DAEMON_REQUIRE ?
			" (--daemon: is memprofd running? --no-daemon records in-process)" : "");
		return r;
	}
	/* Which daemon samples is never silent: the one at the default socket may be anyone's. */
	memprof_client__daemon(rd->c, &d);
	fprintf(stderr, PFX "recording through memprofd %s at '%s' (--no-daemon: in-process)\n",
		d && d->version ? d->version : "(version unknown)", ctl.socket);
	memprof_client_daemon__free(d);
	*ret = rd;
	return 0;
}

/*
 * Read-write: the daemon patches the drop counts into the header at completion. A file already
 * there is replaced only once the daemon accepted the profile (outfile.h).
 */
static int open_trace(struct mp_outfile *o, const char *path)
{
	return mp_outfile__open(o, path, true, 0644);
}

static int daemon_sync(void *ctx, pid_t pid, bool forked, char *err, size_t err_len)
{
	struct record_daemon *rd = ctx;
	struct mp_outfile o = { .fd = -1 };
	char path[PATH_MAX + 16];
	int r;

	err[0] = '\0';
	if (forked) {
		unsigned int k = 1;

		for (size_t i = 0; i < rd->nforked; i++)
			k += rd->forked[i] == pid;
		if (rd->nforked == rd->forked_cap) {
			size_t cap = rd->forked_cap ? rd->forked_cap * 2 : 16;
			pid_t *n = realloc(rd->forked, cap * sizeof(*n));

			if (!n) {
				snprintf(err, err_len, "Out of memory");
				return -ENOMEM;
			}
			rd->forked = n;
			rd->forked_cap = cap;
		}
		rd->forked[rd->nforked++] = pid;
		/* the engine's names (engine.c): FILE.PID, then FILE.PID.2, ... */
		snprintf(path, sizeof(path), k > 1 ? "%s.%d.%u" : "%s.%d", rd->out_path, (int)pid,
			 k);
		r = open_trace(&o, path);
		if (r < 0) {
			snprintf(err, err_len, "Failed to create trace '%s': %s", path,
				 strerror(-r));
			return r;
		}
	}
	r = memprof_client__add_process(rd->c, rd->id, pid, o.fd);
	if (r < 0)
		snprintf(err, err_len, "%s", memprof_client__errmsg(rd->c));
	if (o.fd < 0)
		return r;
	if (r <= 0) {
		mp_outfile__abort(&o);	/* not followed: no trace */
		return r;
	}
	r = mp_outfile__commit(&o);
	close(o.fd);
	if (r < 0)
		snprintf(err, err_len, "Failed to rename the trace into '%s': %s", path,
			 strerror(-r));
	return r < 0 ? r : 1;
}

int record_daemon__start(struct record_daemon *rd, const struct mp_opts *o, pid_t pid,
			 bool preload, const char *cmd0)
{
	const char *out_path = o->output.path;
	struct mp_opts so = *o;
	struct memprof_client_profile *p;
	struct mp_outfile out;
	char msg[256];
	int r;

	snprintf(rd->out_path, sizeof(rd->out_path), "%s", out_path);
	rd->root = pid;
	/* Counters before, for the summary's drops (a failure only leaves them out). */
	memprof_client__daemon(rd->c, &rd->before);
	r = mp_outfile__check_path(out_path, msg, sizeof(msg));
	if (r < 0) {
		fprintf(stderr, PFX "Failed to use '%s' with memprofd: %s (--no-daemon records "
			"to it)\n", out_path, msg);
		return r;
	}
	r = open_trace(&out, out_path);
	if (r < 0) {
		fprintf(stderr, PFX "Failed to create trace '%s': %s\n", out_path, strerror(-r));
		return r;
	}
	so.output.fd = out.fd;
	r = mp_client__start(rd->c, &pid, 1, &so, &rd->id);
	if (r < 0) {
		rd->id = 0;
		mp_outfile__abort(&out);	/* what was there stays */
		fprintf(stderr, PFX "%s\n", memprof_client__errmsg(rd->c));
		return r;
	}
	close(out.fd);
	r = mp_outfile__commit(&out);
	if (r < 0) {
		fprintf(stderr, PFX "Failed to rename the trace into '%s': %s\n", out_path,
			strerror(-r));
		return r;
	}
	rd->sync = (struct record_sync){ .sync_pid = daemon_sync, .fd = -1, .ctx = rd };
	if (preload && memprof_client__profile(rd->c, rd->id, &p) == 0) {
		if (p->nprocs && (!p->procs[0].mode || strcmp(p->procs[0].mode, "preload")))
			fprintf(stderr, PFX "'%s' did not load libmemprof-preload.so (static or "
				"set-user-ID executable?): profiling it with allocator uprobes\n",
				cmd0);
		memprof_client_profile__free(p);
	}
	return 0;
}

const struct record_sync *record_daemon__sync(struct record_daemon *rd)
{
	return &rd->sync;
}

/* Growth of counter @name since the start (0 when either side lacks it). */
static uint64_t grown(const struct memprof_client_daemon *before,
		      const struct memprof_client_daemon *after, const char *name)
{
	uint64_t b = 0, a = 0;

	for (size_t i = 0; before && i < before->nstats; i++)
		if (!strcmp(before->stat_names[i], name))
			b = before->stat_values[i];
	for (size_t i = 0; after && i < after->nstats; i++)
		if (!strcmp(after->stat_names[i], name))
			a = after->stat_values[i];
	return a > b ? a - b : 0;
}

/*
 * Record's profile as memprofd tells it, with the losses of the daemon's counters while it ran
 * (all its profiles together, so said) and the file of each trace written through a passed fd
 * (@paths: @p->nprocs of them).
 */
static int summary_of(const struct record_daemon *rd, const struct memprof_client_profile *p,
		      const struct memprof_client_daemon *after, struct mp_summary *s,
		      char (*paths)[PATH_MAX + 16])
{
	int r = ctl_summary__from_client(s, p);

	if (r < 0)
		return r;
	for (size_t i = 0; i < s->nprocs; i++) {
		if (s->procs[i].trace)
			continue;	/* written under the daemon's directory */
		if (s->procs[i].pid == rd->root)
			snprintf(paths[i], sizeof(paths[i]), "%s", rd->out_path);
		else
			snprintf(paths[i], sizeof(paths[i]), "%s.%d", rd->out_path,
				 (int)s->procs[i].pid);
		s->procs[i].trace = paths[i];
	}
	s->losses_daemon_wide = true;
	mp_summary__set_losses(s, NULL, NULL);
	for (size_t i = 0; i < s->nlosses; i++)
		s->loss_values[i] = grown(rd->before, after, s->loss_names[i]);
	s->mechanisms = after ? after->mechanisms : NULL;
	return 0;
}

int record_daemon__finish(struct record_daemon *rd, int status, const char *cmd0)
{
	struct memprof_client_daemon *after = NULL;
	struct memprof_client_profile *p = NULL;
	struct mp_summary s = { 0 };
	char (*paths)[PATH_MAX + 16];
	uint64_t lost;
	int r;

	rd->finished = true;
	/* The daemon delivers what is pending (CMD's exit among it) before it stops. */
	r = memprof_client__stop(rd->c, rd->id);
	if (r < 0 && r != -EINVAL) {
		fprintf(stderr, PFX "%s%s: the trace '%s' may be incomplete\n",
			memprof_client__errmsg(rd->c), r == -ECONNRESET || r == -ENOTCONN ||
			r == -EPIPE ? " (memprofd went away while CMD ran)" : "", rd->out_path);
		return r;
	}
	r = memprof_client__discard(rd->c, rd->id);
	if (r < 0) {
		fprintf(stderr, PFX "%s\n", memprof_client__errmsg(rd->c));
		return r;
	}
	r = memprof_client__profile(rd->c, rd->id, &p);
	if (r < 0) {
		fprintf(stderr, PFX "%s\n", memprof_client__errmsg(rd->c));
		return r;
	}
	memprof_client__daemon(rd->c, &after);
	/* the daemon's count: all of its profiles, but a full disk is everyone's */
	lost = grown(rd->before, after, mp_engine_drop__name(MP_DROP_WRITE));
	paths = calloc(p->nprocs ? p->nprocs : 1, sizeof(*paths));
	if (!paths || summary_of(rd, p, after, &s, paths) < 0) {
		fprintf(stderr, PFX "Out of memory for the summary\n");
	} else if (ctl.json) {
		ctl_summary__print_json(&s, status >= 0 ? (WIFEXITED(status) ?
					WEXITSTATUS(status) : 128 + WTERMSIG(status)) : -1, stderr);
	} else {
		ctl_summary__print(&s, stderr);
		if (status >= 0 && WIFSIGNALED(status))
			fprintf(stderr, PFX "'%s' was killed by signal %d (%s)\n", cmd0,
				WTERMSIG(status), strsignal(WTERMSIG(status)));
	}
	mp_summary__free(&s);
	free(paths);
	if (lost)
		fprintf(stderr, PFX "memprofd failed to write %" PRIu64 " events to traces while "
			"this ran (its log says which and why): '%s' may be incomplete\n", lost,
			rd->out_path);
	memprof_client_daemon__free(after);
	memprof_client_profile__free(p);
	return lost ? 1 : 0;
}

void record_daemon__free(struct record_daemon *rd)
{
	if (!rd)
		return;
	if (rd->id && !rd->finished) {
		/* A failure after the start: leave no sampling profile behind. */
		memprof_client__stop(rd->c, rd->id);
		memprof_client__discard(rd->c, rd->id);
	}
	memprof_client_daemon__free(rd->before);
	memprof_client__free(rd->c);
	free(rd->forked);
	free(rd);
}
