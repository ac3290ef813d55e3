// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Targets beyond PIDs (engine.h, struct mp_target): the executables and cgroups whose processes
 * join a profile, now and later. At the start a target is resolved (an executable to its device
 * and inode, a cgroup to its directory and id in the v2 hierarchy), given to BPF to watch, and
 * its processes running already are joined; after that BPF reports each process that execs
 * the executable, or execs in or moves into the cgroup or one below it (MP_EV_JOIN), and each
 * cgroup made in the v2 hierarchy (MP_EV_CGROUP_NEW: a unit that restarts gets a new cgroup of
 * the same path, whose processes are joined once it is watched). A process joins the way a
 * PID attach takes it: the owner's access is checked (a process the owner may not profile is
 * skipped and counted), then it is configured, probed and given its trace.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "daemon/engine/engine_int.h"

#define CG_MAX_MOUNTS	32
#define CG_SCAN_DEPTH	32	/* levels of sub-cgroups a scan descends */

static void tlog(struct mp_engine *e, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void tlog(struct mp_engine *e, int level, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	if (!e->opts.log)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	e->opts.log(e->opts.log_ctx, level, msg);
}

/*
 * One process joins @p through @t (the rule of a PID attach, see the top). @since_ns: the
 * CLOCK_MONOTONIC time of its exec or move (the record's), 0 when a scan found it. Refusals and
 * failures are counted per target and logged once each: a target of a whole host's cgroup
 * must not fill the journal.
 */
static void target_join(struct mp_profile *p, struct mp_target_state *t, pid_t pid,
			bool at_exec, const char *comm_hint, uint64_t since_ns)
{
	struct mp_engine *e = p->e;
	char err[512] = "", why[512] = "";
	struct mp_proc_cfg cfg, cur;
	struct mp_proc *pr;
	int r;

	if (p->state != MP_PROFILE_SAMPLING || pid <= 0 || pid == getpid())
		return;
	pr = proc_find(p, pid);
	if ((pr && !pr->completed) || pid_busy(e, pid))
		return;
	/* still another (stopped) profile's: its frees go on being matched there */
	if (SRC(e, proc_get, pid, &cur) == 0 && cur.profile != p->id)
		return;
	if (p->opts.owner_uid) {
		r = e->opts.join_check ? e->opts.join_check(e->opts.exec_check_ctx, pid,
							     p->opts.owner_uid, p->opts.owner_gid,
							     err, sizeof(err))
				       : -EPERM;
		if (r == -ESRCH)
			return;	/* gone already */
		if (r < 0) {
			if (!t->skipped++)
				tlog(e, 5, "Process %d of %s not profiled: %s (further processes "
				     "the owner may not profile are counted in its status)",
				     (int)pid, t->label, err[0] ? err : strerror(-r));
			return;
		}
	}
	if (e->open_procs >= e->max_procs) {
		e->drops[MP_DROP_PROCS_FULL]++;
		t->failed++;
		return;
	}
	proc_cfg(p, &cfg);
	r = SRC(e, proc_set, pid, &cfg);
	if (r < 0) {
		t->failed++;
		tlog(e, 4, "Failed to configure process %d of %s: %s", (int)pid, t->label,
		     strerror(-r));
		return;
	}
	r = at_exec ? SRC(e, attach_exec, pid, why, sizeof(why))
		    : SRC(e, attach, pid, why, sizeof(why));
	if (r >= 0) {
		pr = proc_new(p, pid, comm_hint, err, sizeof(err));
		if (pr) {
			t->joined++;
			if (since_ns)
				tlog(e, 7, "Process %d (%s) joined %s %.3f ms after its %s",
				     (int)pid, pr->comm, t->label,
				     (double)(now_mono_ns() - since_ns) / 1e6,
				     at_exec ? "exec" : "move");
			else
				tlog(e, 7, "Process %d (%s) joined %s", (int)pid, pr->comm,
				     t->label);
			arm_timer(e);
			return;
		}
	}
	SRC(e, proc_del, pid);
	SRC(e, detach, pid);
	if (r == -ESRCH)
		return;	/* exited before it could be probed: never a process of the profile */
	if (t->failed++)
		return;
	if (r < 0)
		tlog(e, 5, "Process %d of %s could not be probed: %s (further failures are "
		     "counted in its status)", (int)pid, t->label, why[0] ? why : strerror(-r));
	else
		tlog(e, 4, "Process %d of %s not profiled: %s (further failures are counted in "
		     "its status)", (int)pid, t->label, err);
}

/* ---- executables */

static int exe_resolve(struct mp_target_state *t, const char *in, char *err, size_t err_len)
{
	char real[PATH_MAX];
	struct stat st;

	if (!realpath(in, real) || stat(real, &st) < 0) {
		int r = -errno;

		snprintf(err, err_len, r == -ENOENT ? "Executable '%s' does not exist"
						    : "Cannot read executable '%s': %s", in,
			 strerror(-r));
		return r;
	}
	if (!S_ISREG(st.st_mode) || !(st.st_mode & 0111)) {
		snprintf(err, err_len, "'%s' is not an executable file", in);
		return -EINVAL;
	}
	t->path = strdup(real);
	t->a = (uint64_t)st.st_dev;
	t->b = (uint64_t)st.st_ino;
	return t->path ? 0 : -ENOMEM;
}

static bool is_pid_name(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return false;
	return true;
}

/* Whether process @pid runs @t's executable (/proc/PID/exe: the same file, as stat(2) sees
 * it). */
static bool exe_is(const struct mp_target_state *t, pid_t pid)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	return stat(path, &st) == 0 && (uint64_t)st.st_dev == t->a && (uint64_t)st.st_ino == t->b;
}

/* The processes running @t's executable now. */
static void exe_scan(struct mp_profile *p, struct mp_target_state *t)
{
	DIR *d = opendir("/proc");
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		if (!is_pid_name(de->d_name) || strlen(de->d_name) > 10)
			continue;
		if (exe_is(t, (pid_t)atoi(de->d_name)))
			target_join(p, t, (pid_t)atoi(de->d_name), false, NULL, 0);
	}
	closedir(d);
}

/* ---- cgroups */

struct cg_mount {
	char dir[PATH_MAX];	/* where it is mounted */
	char root[PATH_MAX];	/* the hierarchy's directory mounted there ("/" mostly) */
	bool v2;
};

/* The cgroup hierarchies mounted (/proc/self/mountinfo): how many, or -errno. */
static int cg_mounts(struct cg_mount *m, int max)
{
	static const char v2name[] = "cgroup2";
	const size_t base = sizeof(v2name) - 2;
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096];
	int n = 0;

	if (!f)
		return -errno;
	while (n < max && fgets(line, sizeof(line), f)) {
		char root[PATH_MAX], dir[PATH_MAX], fstype[64];
		const char *sep = strstr(line, " - ");

		if (!sep || sscanf(line, "%*s %*s %*s %4095s %4095s", root, dir) != 2 ||
		    sscanf(sep + 3, "%63s", fstype) != 1)
			continue;
		/* "cgroup2" (v2) or "cgroup" (v1): the v2 name without its 2 */
		if (strncmp(fstype, v2name, base) || (fstype[base] && strcmp(fstype + base, "2")))
			continue;
		m[n].v2 = fstype[base] == '2';
		snprintf(m[n].dir, sizeof(m[n].dir), "%s", dir);
		snprintf(m[n].root, sizeof(m[n].root), "%s", strcmp(root, "/") ? root : "");
		n++;
	}
	fclose(f);
	return n;
}

/* @s below (or at) @prefix: what follows it ("" or "/..."), else NULL. */
static const char *below(const char *s, const char *prefix)
{
	size_t n = strlen(prefix);

	if (strncmp(s, prefix, n) || (s[n] && s[n] != '/'))
		return NULL;
	return s + n;
}

/* "/a//b/" -> "/a/b"; -EINVAL for a relative path or one with "." or ".." components. */
static int path_clean(const char *in, char *out, size_t len)
{
	size_t o = 0;

	if (in[0] != '/')
		return -EINVAL;
	for (const char *s = in; *s;) {
		size_t n;

		while (*s == '/')
			s++;
		n = strcspn(s, "/");
		if (!n)
			break;
		if ((n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
			return -EINVAL;
		if (o + 1 + n >= len)
			return -ENAMETOOLONG;
		out[o++] = '/';
		memcpy(out + o, s, n);
		o += n;
		s += n;
	}
	out[o] = '\0';
	return 0;
}

/*
 * @in: a cgroup's directory under any mounted hierarchy (a v1 one: the same path in the v2
 * hierarchy, where systemd mirrors its units on hybrid hosts), or its path in the hierarchy
 * itself ("/system.slice/cron.service"). @t->path gets its v2 directory, @t->a its id (0: it
 * does not exist, allowed only with @may_be_absent).
 */
static int cg_resolve(struct mp_target_state *t, const char *in, bool may_be_absent, char *err,
		      size_t err_len)
{
	struct cg_mount m[CG_MAX_MOUNTS];
	const struct cg_mount *v2 = NULL, *via = NULL;
	char clean[PATH_MAX], rel[PATH_MAX], dir[2 * PATH_MAX];
	const char *rest = NULL, *tail;
	struct stat st;
	int n = cg_mounts(m, CG_MAX_MOUNTS);

	if (n < 0) {
		snprintf(err, err_len, "Cannot read /proc/self/mountinfo: %s", strerror(-n));
		return n;
	}
	for (int i = 0; i < n && !v2; i++)
		if (m[i].v2)
			v2 = &m[i];
	if (!v2) {
		snprintf(err, err_len, "No cgroup v2 hierarchy is mounted: memprofd follows "
			 "cgroups in v2");
		return -EOPNOTSUPP;
	}
	if (path_clean(in, clean, sizeof(clean)) < 0) {
		snprintf(err, err_len, "Invalid cgroup path '%s': an absolute path without '.' or "
			 "'..'", in);
		return -EINVAL;
	}
	/* the deepest mount it is under (v1 controllers are mounted below /sys/fs/cgroup) */
	for (int i = 0; i < n; i++) {
		const char *r = below(clean, m[i].dir);

		if (r && (!via || strlen(m[i].dir) > strlen(via->dir))) {
			via = &m[i];
			rest = r;
		}
	}
	if (via)
		snprintf(rel, sizeof(rel), "%.2047s%.2047s", via->root, rest);
	else
		snprintf(rel, sizeof(rel), "%s", clean);
	tail = v2->root[0] ? below(rel, v2->root) : rel;
	if (!tail) {
		snprintf(err, err_len, "Cgroup '%s' is outside the part of the v2 hierarchy "
			 "mounted at %s", in, v2->dir);
		return -EINVAL;
	}
	snprintf(dir, sizeof(dir), "%s%s", v2->dir, tail);
	errno = 0;
	if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
		t->a = (uint64_t)st.st_ino;
	else if (may_be_absent && errno == ENOENT)
		t->a = 0;
	else if (via && !via->v2) {
		snprintf(err, err_len, "Cgroup '%s' is in the v1 hierarchy mounted at %s, and the "
			 "v2 hierarchy has no '%s': memprofd follows cgroups in v2 (where systemd "
			 "mirrors its units on hybrid hosts)", in, via->dir, dir);
		return -ENOENT;
	} else if (via) {
		snprintf(err, err_len, "No cgroup '%s'", in);
		return -ENOENT;
	} else {
		snprintf(err, err_len, "'%s' is not a cgroup: give a directory under %s, or a path "
			 "in the hierarchy such as /system.slice/cron.service", in, v2->dir);
		return -ENOENT;
	}
	t->path = strdup(dir);
	return t->path ? 0 : -ENOMEM;
}

/* The processes of the cgroup at @dir and those below it, @depth levels at most. */
static void cg_scan_dir(struct mp_profile *p, struct mp_target_state *t, const char *dir,
			int depth)
{
	char path[PATH_MAX + 32];
	struct dirent *de;
	FILE *f;
	DIR *d;
	int pid;

	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	f = fopen(path, "re");
	if (f) {
		while (fscanf(f, "%d", &pid) == 1)
			target_join(p, t, (pid_t)pid, false, NULL, 0);
		fclose(f);
	}
	if (depth <= 0 || !(d = opendir(dir)))
		return;
	while ((de = readdir(d))) {
		if (de->d_type != DT_DIR || de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		cg_scan_dir(p, t, path, depth - 1);
	}
	closedir(d);
}

/* ---- the profile's targets */

static int target_watch(struct mp_profile *p, struct mp_target_state *t, char *err,
			size_t err_len)
{
	int r;

	if (t->watched || (t->kind == MP_TARGET_CGROUP && !t->a))
		return 0;
	r = SRC(p->e, watch, t->kind, t->a, t->b, p->id);
	if (r < 0) {
		if (r == -EBUSY)
			snprintf(err, err_len, "%s is a target of another profile already",
				 t->label);
		else if (r == -EOPNOTSUPP)
			snprintf(err, err_len, "Cannot follow %s: this kernel's cgroup tracepoints "
				 "could not be attached (see memprofd's log)", t->label);
		else
			snprintf(err, err_len, "Cannot watch %s: %s", t->label, strerror(-r));
		return r;
	}
	t->watched = true;
	return 0;
}

static void target_unwatch(struct mp_profile *p, struct mp_target_state *t)
{
	if (t->watched)
		SRC(p->e, watch, t->kind, t->a, t->b, 0);
	t->watched = false;
}

int targets_start(struct mp_profile *p, char *err, size_t err_len)
{
	const struct mp_profile_opts *o = &p->opts;
	int r;

	if (o->ntargets > MP_MAX_TARGETS) {
		snprintf(err, err_len, "A profile has at most %d targets, got %zu", MP_MAX_TARGETS,
			 o->ntargets);
		return -EINVAL;
	}
	p->targets = calloc(o->ntargets ? o->ntargets : 1, sizeof(*p->targets));
	if (!p->targets)
		return -ENOMEM;
	for (size_t i = 0; i < o->ntargets; i++) {
		const struct mp_target *in = &o->targets[i];
		struct mp_target_state *t = &p->targets[i];
		char label[PATH_MAX + 16];

		if (!in->path || !in->path[0] ||
		    (in->kind != MP_TARGET_EXE && in->kind != MP_TARGET_CGROUP)) {
			snprintf(err, err_len, "Invalid target %zu: a kind and a path", i + 1);
			return -EINVAL;
		}
		t->kind = in->kind;
		p->ntargets = i + 1;
		r = in->kind == MP_TARGET_EXE ? exe_resolve(t, in->path, err, err_len)
					      : cg_resolve(t, in->path, in->may_be_absent, err,
							   err_len);
		if (r < 0)
			return r;
		snprintf(label, sizeof(label), "%s%s",
			 in->kind == MP_TARGET_EXE ? "exe:" : "cgroup:", in->path);
		t->label = strdup(in->label ? in->label : label);
		if (!t->label)
			return -ENOMEM;
		for (size_t j = 0; j < i; j++)
			if (p->targets[j].kind == t->kind && !strcmp(p->targets[j].path, t->path)) {
				snprintf(err, err_len, "%s is named twice", t->label);
				return -EINVAL;
			}
	}
	p->opts.targets = NULL;	/* the caller's: p->targets has what is kept */
	for (size_t i = 0; i < p->ntargets; i++) {
		r = target_watch(p, &p->targets[i], err, err_len);
		if (r < 0)
			return r;
	}
	return 0;
}

void targets_scan(struct mp_profile *p)
{
	for (size_t i = 0; i < p->ntargets; i++) {
		struct mp_target_state *t = &p->targets[i];

		if (!t->watched)
			continue;
		if (t->kind == MP_TARGET_EXE)
			exe_scan(p, t);
		else
			cg_scan_dir(p, t, t->path, CG_SCAN_DEPTH);
	}
}

void targets_unwatch(struct mp_profile *p)
{
	for (size_t i = 0; i < p->ntargets; i++)
		target_unwatch(p, &p->targets[i]);
}

void targets_free(struct mp_profile *p)
{
	targets_unwatch(p);
	for (size_t i = 0; i < p->ntargets; i++) {
		free(p->targets[i].label);
		free(p->targets[i].path);
	}
	free(p->targets);
	p->targets = NULL;
	p->ntargets = 0;
}

void on_join(struct mp_engine *e, const struct mp_proc_event *ev)
{
	struct mp_profile *p = profile_by_id(e, ev->h.profile);
	pid_t pid = (pid_t)ev->h.pid;

	if (!p || p->state != MP_PROFILE_SAMPLING)
		return;
	for (size_t i = 0; i < p->ntargets; i++) {
		struct mp_target_state *t = &p->targets[i];
		bool exe = ev->exit_code == MP_JOIN_EXEC_EXE;

		if (!t->watched || (t->kind == MP_TARGET_EXE) != exe)
			continue;
		/* BPF matched the inode number: the file is the target's if its device is too */
		if (exe && !exe_is(t, pid))
			continue;
		/* which of several cgroups it is in matters for the counts only: the first */
		target_join(p, t, pid, ev->exit_code != MP_JOIN_MOVED,
			    ev->exit_code == MP_JOIN_MOVED ? NULL : ev->comm, ev->h.time_ns);
		return;
	}
}

/*
 * An EXEC record of a process that no profile holds, under @ev's profile: a process that
 * joined while it exec'd (moved into a cgroup just before): configured by target_join(), it
 * could not be probed then (its maps are empty during the exec), and BPF reported its exec,
 * not a join. It joins now, as at an exec.
 */
void targets_exec_unheld(struct mp_engine *e, const struct mp_proc_event *ev)
{
	struct mp_profile *p = profile_by_id(e, ev->h.profile);

	if (!p || p->state != MP_PROFILE_SAMPLING)
		return;
	for (size_t i = 0; i < p->ntargets; i++)
		if (p->targets[i].watched) {
			target_join(p, &p->targets[i], (pid_t)ev->h.pid, true, ev->comm,
				    ev->h.time_ns);
			return;
		}
}

/* A v2 cgroup was made: the watched paths that have a new cgroup now are watched again, and
 * their processes (moved there before the watch) joined. */
void on_cgroup_new(struct mp_engine *e)
{
	for (struct mp_profile *p = e->profiles; p; p = p->next) {
		if (p->state != MP_PROFILE_SAMPLING)
			continue;
		for (size_t i = 0; i < p->ntargets; i++) {
			struct mp_target_state *t = &p->targets[i];
			char err[512];
			struct stat st;

			if (t->kind != MP_TARGET_CGROUP || stat(t->path, &st) < 0 ||
			    (uint64_t)st.st_ino == t->a)
				continue;
			target_unwatch(p, t);
			t->a = (uint64_t)st.st_ino;
			if (target_watch(p, t, err, sizeof(err)) < 0) {
				tlog(e, 4, "%s", err);
				continue;
			}
			tlog(e, 6, "%s has a new cgroup (id %llu)", t->label,
			     (unsigned long long)t->a);
			cg_scan_dir(p, t, t->path, CG_SCAN_DEPTH);
		}
	}
}

size_t mp_profile__targets(const struct mp_profile *p, struct mp_target_stats *out, size_t max)
{
	for (size_t i = 0; i < p->ntargets && i < max; i++) {
		const struct mp_target_state *t = &p->targets[i];
		struct stat st;

		out[i] = (struct mp_target_stats){
			.label = t->label,
			.path = t->path,
			.present = t->kind == MP_TARGET_EXE ||
				   (t->a && stat(t->path, &st) == 0 && (uint64_t)st.st_ino == t->a),
			.joined = t->joined,
			.skipped = t->skipped,
			.failed = t->failed,
		};
	}
	return p->ntargets;
}
