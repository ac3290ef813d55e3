// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The engine's targets (daemon/engine/targets.c) on synthetic records (test_engine.h): an
 * executable target takes the processes running it at the start (the test's own children run
 * the test's executable) and those its JOIN records name; one the owner may not profile is
 * skipped and counted; a stopped profile takes no process and leaves BPF's watch; a profile
 * with a target does not stop when its processes have exited; bad targets are refused.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* test_engine.h's fixture (a profile of one child by PID) is not what these tests start */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "tests/unit/test_engine.h"

static pid_t refused_pid;

static int join_check(void *ctx, pid_t pid, uid_t uid, gid_t gid, char *err, size_t err_len)
{
	(void)ctx;
	(void)uid;
	(void)gid;
	if (pid != refused_pid)
		return 0;
	snprintf(err, err_len, "Permission denied: process %d (test)", (int)pid);
	return -EPERM;
}

static struct mp_engine *engine_with_check(void)
{
	struct mp_engine_opts eo = { .sz = sizeof(eo), .seed = 1, .has_seed = true,
				     .source = &fake_source_ops, .join_check = join_check };

	struct mp_engine *e = engine_new();	/* resets the synthetic source */

	if (!e)
		return NULL;
	mp_engine__free(e);
	return mp_engine__new(&eo);
}

static bool in_profile(struct mp_profile *p, pid_t pid)
{
	struct mp_proc_stats s[FAKE_PROCS];
	size_t n = mp_profile__procs(p, s, FAKE_PROCS);

	for (size_t i = 0; i < n && i < FAKE_PROCS; i++)
		if (s[i].pid == pid)
			return true;
	return false;
}

static void test_exe_target(void)
{
	struct mp_profile_opts po = { .sz = sizeof(po), .rate = 1.0, .out_fd = -1,
				      .unwind = MP_UNWIND_FP };
	struct child a = { 0 }, b = { 0 }, c = { 0 }, d = { 0 };
	struct mp_target t = { .kind = MP_TARGET_EXE };
	struct mp_target_stats ts;
	struct mp_engine *e = NULL;
	struct mp_profile *p = NULL;
	char self[PATH_MAX], dir[4096], err[512] = "";
	struct stat st;
	int r;

	if (!ASSERT_TRUE(realpath("/proc/self/exe", self) && stat(self, &st) == 0, "own exe"))
		return;
	snprintf(dir, sizeof(dir), "%s", tmp_path("targets-exe"));
	mkdir(dir, 0755);
	t.path = self;
	po.out_dir = dir;
	po.targets = &t;
	po.ntargets = 1;
	po.owner_uid = getuid() ? getuid() : 65534;
	po.owner_gid = getgid() ? getgid() : 65534;
	e = engine_with_check();
	if (!ASSERT_TRUE(e != NULL, "engine") || !ASSERT_TRUE(child_start(&a), "child A") ||
	    !ASSERT_TRUE(child_start(&b), "child B"))
		goto out;
	refused_pid = b.pid;
	memset(&fake_watch_state, 0, sizeof(fake_watch_state));
	r = mp_engine__start(e, &po, NULL, 0, &p, err, sizeof(err));
	if (!ASSERT_OK(r, "start with a target and no PID")) {
		fprintf(stderr, "start: %s\n", err);
		goto out;
	}
	ASSERT_EQ(fake_watch_state.active, 1, "the executable is watched");
	ASSERT_EQ(fake_watch_state.kind, MP_TARGET_EXE, "... as an executable");
	ASSERT_TRUE(fake_watch_state.a == (uint64_t)st.st_dev &&
		    fake_watch_state.b == (uint64_t)st.st_ino, "... by its device and inode");
	ASSERT_EQ(fake_watch_state.profile, mp_profile__id(p), "... for the profile");
	ASSERT_TRUE(in_profile(p, a.pid), "A, running the executable, joined at the start");
	ASSERT_TRUE(!in_profile(p, b.pid), "B, which the owner may not profile, did not");
	ASSERT_TRUE(!in_profile(p, getpid()), "the profiler itself is never taken");
	ASSERT_EQ(mp_profile__targets(p, &ts, 1), 1, "one target");
	ASSERT_EQ(ts.joined, 1, "1 joined");
	ASSERT_EQ(ts.skipped, 1, "1 skipped");
	ASSERT_TRUE(ts.present && !strncmp(ts.label, "exe:", 4), "its name");

	if (!ASSERT_TRUE(child_start(&c), "child C"))
		goto out;
	queue_proc(MP_EV_JOIN, mp_profile__id(p), c.pid, c.pid, 0, MP_JOIN_EXEC_EXE);
	ASSERT_EQ(mp_engine__process(e), 1, "C's join consumed");
	ASSERT_TRUE(in_profile(p, c.pid), "C joined through its record");
	ASSERT_TRUE(fake_proc(c.pid, false) && fake_proc(c.pid, false)->has_cfg &&
		    fake_proc(c.pid, false)->attaches == 1, "... configured and probed");
	queue_proc(MP_EV_JOIN, mp_profile__id(p), c.pid, c.pid, 0, MP_JOIN_EXEC_EXE);
	ASSERT_EQ(mp_engine__process(e), 1, "a second record of C consumed");
	ASSERT_EQ(fake_proc(c.pid, false)->attaches, 1, "... changes nothing");

	queue_proc(MP_EV_EXIT, mp_profile__id(p), a.pid, a.pid, 0, 0);
	queue_proc(MP_EV_EXIT, mp_profile__id(p), c.pid, c.pid, 0, 0);
	ASSERT_EQ(mp_engine__process(e), 2, "exits consumed");
	ASSERT_EQ(mp_profile__state(p), MP_PROFILE_SAMPLING,
		  "its processes gone, the profile waits for new ones");

	ASSERT_OK(mp_profile__stop(p), "stop");
	ASSERT_EQ(fake_watch_state.active, 0, "stop ends the watch");
	if (!ASSERT_TRUE(child_start(&d), "child D"))
		goto out;
	queue_proc(MP_EV_JOIN, mp_profile__id(p), d.pid, d.pid, 0, MP_JOIN_EXEC_EXE);
	ASSERT_EQ(mp_engine__process(e), 1, "D's join consumed");
	ASSERT_TRUE(!in_profile(p, d.pid), "a stopped profile takes no process");
	ASSERT_OK(mp_profile__discard(p), "discard");
	ASSERT_OK(mp_engine__forget(e, p), "forget");
	p = NULL;
out:
	child_end(&a);
	child_end(&b);
	child_end(&c);
	child_end(&d);
	mp_engine__free(e);
}

/* start_bad(E, TARGET, N): mp_engine__start() with @n copies of @t; its result, err in @err. */
static int start_bad(struct mp_engine *e, const struct mp_target *t, size_t n, char *err,
		     size_t err_len)
{
	struct mp_profile_opts po = { .sz = sizeof(po), .rate = 1.0, .out_fd = -1,
				      .out_dir = "/tmp", .targets = t, .ntargets = n };
	struct mp_profile *p = NULL;

	err[0] = '\0';
	return mp_engine__start(e, &po, NULL, 0, &p, err, err_len);
}

static void test_bad_targets(void)
{
	struct mp_engine *e = engine_new();
	struct mp_target many[MP_MAX_TARGETS + 1], t;
	char err[512];
	int r;

	if (!ASSERT_TRUE(e != NULL, "engine"))
		return;
	t = (struct mp_target){ .kind = MP_TARGET_EXE, .path = "/nonexistent/prog" };
	r = start_bad(e, &t, 1, err, sizeof(err));
	ASSERT_EQ(r, -ENOENT, "an executable that does not exist");
	ASSERT_STREQ(err, "Executable '/nonexistent/prog' does not exist", "... says so");
	t.path = "/etc/passwd";
	ASSERT_EQ(start_bad(e, &t, 1, err, sizeof(err)), -EINVAL, "a file that is not executable");
	ASSERT_STREQ(err, "'/etc/passwd' is not an executable file", "... says so");
	t = (struct mp_target){ .kind = MP_TARGET_CGROUP, .path = "/tmp" };
	r = start_bad(e, &t, 1, err, sizeof(err));
	ASSERT_TRUE(r == -ENOENT || r == -EOPNOTSUPP, "a directory that is not a cgroup");
	ASSERT_TRUE(strstr(err, "'/tmp' is not a cgroup") || strstr(err, "No cgroup v2"),
		    "... says so");
	t.path = "system.slice";
	ASSERT_TRUE(start_bad(e, &t, 1, err, sizeof(err)) < 0, "a relative cgroup path");
	t.path = "";
	ASSERT_EQ(start_bad(e, &t, 1, err, sizeof(err)), -EINVAL, "an empty path");
	for (size_t i = 0; i <= MP_MAX_TARGETS; i++)
		many[i] = (struct mp_target){ .kind = MP_TARGET_EXE, .path = "/bin/true" };
	ASSERT_EQ(start_bad(e, many, MP_MAX_TARGETS + 1, err, sizeof(err)), -EINVAL,
		  "too many targets");
	ASSERT_EQ(start_bad(e, many, 2, err, sizeof(err)), -EINVAL, "a target named twice");
	ASSERT_TRUE(strstr(err, "named twice") != NULL, "... says so");
	ASSERT_EQ(start_bad(e, NULL, 0, err, sizeof(err)), -EINVAL, "no process and no target");
	ASSERT_EQ(mp_engine__next_profile(e, NULL), NULL, "no profile was made");
	ASSERT_EQ(fake_watch_state.active, 0, "and nothing is watched");
	mp_engine__free(e);
}

int main(void)
{
	RUN(test_exe_target);
	RUN(test_bad_targets);
	free(fake.queue);
	return test_exit();
}
