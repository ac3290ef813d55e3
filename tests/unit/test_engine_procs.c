// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The engine's processes driven by synthetic ring records (tests/unit/test_engine.h), without
 * root: a forked child followed (its own trace, its probes attached) or not (--no-follow-forks),
 * an exec collecting the old image's blocks, exits ending the profile, and sync_pid (memprofd's
 * and record's) on a child held before it runs: probes attached again, the mode the loader chose
 * known before the process exits, and its trace moved to the caller's file.
 */
#include <sys/stat.h>

#include "tests/unit/test_engine.h"

/* A forks B (both are the test's children; the records say B is A's), B allocates and frees;
 * A execs with a block live; B exits, then A: the profile stops when the last one is gone. */
static void test_fork_exec_exit(void)
{
	struct fixture fx;
	struct mp_proc_stats s;
	struct fake_proc *fb, *fa;
	char bpath[4096];
	struct trace_read t;

	if (!fixture_start(&fx, "fork.ctf", false, 1))
		goto out;
	queue_proc(MP_EV_FORK, fx.id, fx.a.pid, fx.a.pid, fx.b.pid, 0);
	ASSERT_EQ(mp_engine__process(fx.e), 1, "fork consumed");
	ASSERT_EQ(mp_profile__procs(fx.p, NULL, 0), 2, "the child is followed");
	fb = fake_proc(fx.b.pid, false);
	ASSERT_TRUE(fb && fb->has_cfg && fb->cfg.profile == fx.id, "the child is configured");
	ASSERT_EQ(fb ? fb->attaches : 0, 1, "the child's probes attached");
	snprintf(bpath, sizeof(bpath), "%s.%d", fx.path, (int)fx.b.pid);
	ASSERT_TRUE(proc_stats(fx.p, fx.b.pid, &s) && s.trace_path && !strcmp(s.trace_path, bpath),
		    "the child's trace is next to the first");

	queue_block(&fx, &fx.b, 0, 0);
	queue_block(&fx, &fx.b, 1, 0);
	queue_free(fx.id, fx.b.pid, fx.b.pid, fx.b.addr[1]);
	queue_block(&fx, &fx.a, 0, 3);
	queue_proc(MP_EV_EXEC, fx.id, fx.a.pid, fx.a.pid, 0, 0);
	ASSERT_EQ(mp_engine__process(fx.e), 5, "records consumed");
	ASSERT_TRUE(proc_stats(fx.p, fx.a.pid, &s), "A's figures");
	ASSERT_EQ(s.samples, 1, "A's samples");
	ASSERT_EQ(s.exec_collects, 1, "A's block freed by its exec");
	ASSERT_EQ(s.frees, 1, "... and collected");
	ASSERT_EQ(s.live_nsamples, 0, "nothing of A live");
	fa = fake_proc(fx.a.pid, false);
	ASSERT_EQ(fa ? fa->attaches : 0, 2, "the new image probed");
	ASSERT_TRUE(proc_stats(fx.p, fx.b.pid, &s), "B's figures");
	ASSERT_EQ(s.samples, 2, "B's samples");
	ASSERT_EQ(s.frees, 1, "B's free");
	ASSERT_EQ(s.live_nsamples, 1, "B's other block live");

	queue_proc(MP_EV_EXIT, fx.id, fx.b.pid, fx.b.pid, 0, 0);
	ASSERT_EQ(mp_engine__process(fx.e), 1, "B's exit consumed");
	ASSERT_EQ(mp_profile__state(fx.p), MP_PROFILE_SAMPLING, "A still runs");
	ASSERT_TRUE(proc_stats(fx.p, fx.b.pid, &s) && s.exited && s.trace_done, "B is complete");
	queue_proc(MP_EV_EXIT, fx.id, fx.a.pid, fx.a.pid, 0, 0);
	ASSERT_EQ(mp_engine__process(fx.e), 1, "A's exit consumed");
	ASSERT_EQ(mp_profile__state(fx.p), MP_PROFILE_STOPPED, "all gone: stopped");
	ASSERT_OK(mp_profile__discard(fx.p), "discard");

	if (trace_read(fx.path, &t)) {
		ASSERT_EQ(t.pid, fx.a.pid, "A's trace pid");
		ASSERT_EQ(t.allocs, 1, "A's allocs");
		ASSERT_EQ(t.nsamples, 4, "A's multiplicity");
		ASSERT_EQ(t.collects, 1, "A's exec collect");
	}
	if (trace_read(bpath, &t)) {
		ASSERT_EQ(t.pid, fx.b.pid, "B's trace pid");
		ASSERT_EQ(t.allocs, 2, "B's allocs");
		ASSERT_EQ(t.nsamples, 2, "B's multiplicities");
		ASSERT_EQ(t.collects, 1, "B's free; its other block live at exit");
		ASSERT_EQ(t.collect_ids[0], t.alloc_ids[1], "the free collects B's second block");
	}
out:
	fixture_end(&fx);
}

/*
 * keep_exited 1: of two exited children, the older is retired from the list into the profile's
 * sums (its samples, frees and estimate), the newer stays listed, as does A, still running.
 */
static void test_retire(void)
{
	struct fixture fx;
	struct mp_proc_stats s, r;
	double b_alloc = 0;

	fake_keep_exited = 1;
	if (!fixture_start(&fx, "retire.ctf", false, 2))
		goto out;
	queue_proc(MP_EV_FORK, fx.id, fx.a.pid, fx.a.pid, fx.b.pid, 0);
	queue_proc(MP_EV_FORK, fx.id, fx.a.pid, fx.a.pid, fx.c.pid, 0);
	queue_block(&fx, &fx.b, 0, 0);
	queue_block(&fx, &fx.b, 1, 2);
	queue_free(fx.id, fx.b.pid, fx.b.pid, fx.b.addr[1]);
	queue_block(&fx, &fx.c, 0, 0);
	ASSERT_EQ(mp_engine__process(fx.e), 6, "forks and blocks consumed");
	if (ASSERT_TRUE(proc_stats(fx.p, fx.b.pid, &s), "B's figures"))
		b_alloc = s.est_alloc_bytes;
	queue_proc(MP_EV_EXIT, fx.id, fx.b.pid, fx.b.pid, 0, 0);
	ASSERT_EQ(mp_engine__process(fx.e), 1, "B's exit consumed");
	ASSERT_EQ(mp_profile__procs(fx.p, NULL, 0), 3, "one exited: nothing retired");
	ASSERT_EQ(mp_profile__retired(fx.p, &r), 0, "no retired process");
	queue_proc(MP_EV_EXIT, fx.id, fx.c.pid, fx.c.pid, 0, 0);
	ASSERT_EQ(mp_engine__process(fx.e), 1, "C's exit consumed");
	ASSERT_EQ(mp_profile__procs(fx.p, NULL, 0), 2, "two exited: the older retired");
	ASSERT_TRUE(!proc_stats(fx.p, fx.b.pid, &s), "B is no longer listed");
	ASSERT_TRUE(proc_stats(fx.p, fx.c.pid, &s) && proc_stats(fx.p, fx.a.pid, &s),
		    "C and A are");
	ASSERT_EQ(mp_profile__retired(fx.p, &r), 1, "one retired process");
	ASSERT_EQ(r.samples, 2, "its sampled blocks");
	ASSERT_EQ(r.nsamples, 1 + 3, "its samples");
	ASSERT_EQ(r.frees, 1, "its free");
	ASSERT_EQ(r.live_nsamples, 1, "its block live at exit");
	ASSERT_TRUE(r.est_alloc_bytes == b_alloc && b_alloc > 0, "its estimate, summed");
	ASSERT_TRUE(r.exited && !r.pid && !r.trace_path, "a sum, not a process");
	ASSERT_EQ(mp_profile__state(fx.p), MP_PROFILE_SAMPLING, "A still runs");
out:
	fixture_end(&fx);
	fake_keep_exited = 0;
}

/* --no-follow-forks: a FORK record adds no process and configures nothing. */
static void test_no_follow(void)
{
	struct fixture fx;

	if (!fixture_start(&fx, "nofollow.ctf", true, 1))
		goto out;
	ASSERT_TRUE(fake_proc(fx.a.pid, false) && !(fake_proc(fx.a.pid, false)->cfg.flags &
						  MP_PROC_FOLLOW_FORKS), "BPF told not to follow");
	queue_proc(MP_EV_FORK, fx.id, fx.a.pid, fx.a.pid, fx.b.pid, 0);
	ASSERT_EQ(mp_engine__process(fx.e), 1, "fork consumed");
	ASSERT_EQ(mp_profile__procs(fx.p, NULL, 0), 1, "the child is not followed");
	ASSERT_TRUE(!fake_proc(fx.b.pid, false), "nothing asked of the source for it");
	ASSERT_EQ(mp_engine__sync_pid(fx.e, fx.b.pid, NULL, 0), 0, "sync_pid: no profile holds it");
out:
	fixture_end(&fx);
}

/*
 * A child held before it runs, its FORK record still in the ring: sync_pid delivers it, probes
 * the child again, and knows the mode the loader chose at its attach (here preload) before it
 * exits: memprofd's mp_profile__sync_pid and record's mp_engine__sync_pid alike.
 */
static void test_sync_pid_mode(void)
{
	struct fixture fx;
	struct mp_proc_stats s;
	char err[512] = "";

	if (!fixture_start(&fx, "sync.ctf", false, 2))
		goto out;
	fake.attach_mode = MP_PROC_MODE_PRELOAD;	/* the children map libmemprof-preload */

	queue_proc(MP_EV_FORK, fx.id, fx.a.pid, fx.a.pid, fx.b.pid, 0);
	ASSERT_EQ(mp_profile__sync_pid(fx.p, fx.b.pid, -1, err, sizeof(err)), 1,
		  "memprofd's sync_pid follows B");
	ASSERT_EQ(fake_proc(fx.b.pid, false) ? fake_proc(fx.b.pid, false)->attaches : 0, 2,
		  "B probed at its fork and again when held");
	queue_proc(MP_EV_FORK, fx.id, fx.a.pid, fx.a.pid, fx.c.pid, 0);
	ASSERT_EQ(mp_engine__sync_pid(fx.e, fx.c.pid, err, sizeof(err)), 1,
		  "record's sync_pid follows C");
	ASSERT_EQ(fake_proc(fx.c.pid, false) ? fake_proc(fx.c.pid, false)->attaches : 0, 2,
		  "C probed at its fork and again when held");

	/* gone before anything reads the mode again: what sync_pid learnt is what stays */
	queue_proc(MP_EV_EXIT, fx.id, fx.b.pid, fx.b.pid, 0, 0);
	queue_proc(MP_EV_EXIT, fx.id, fx.c.pid, fx.c.pid, 0, 0);
	ASSERT_EQ(mp_engine__process(fx.e), 2, "exits consumed");
	ASSERT_TRUE(proc_stats(fx.p, fx.b.pid, &s) && s.exited, "B exited");
	ASSERT_EQ(s.mode, MP_PROC_MODE_PRELOAD, "B's mode, through memprofd's path");
	ASSERT_TRUE(proc_stats(fx.p, fx.c.pid, &s) && s.exited, "C exited");
	ASSERT_EQ(s.mode, MP_PROC_MODE_PRELOAD, "C's mode, through record's path");
	ASSERT_TRUE(proc_stats(fx.p, fx.a.pid, &s) && !s.exited, "A runs");
	ASSERT_EQ(s.mode, MP_PROC_MODE_UPROBE, "A's mode");
out:
	fixture_end(&fx);
}

/* memprofd's AddProcess with the caller's file: the child's trace, begun at its FORK record,
 * starts over in that file and the file made for it goes. */
static void test_sync_pid_redirect(void)
{
	struct fixture fx;
	const char *own = tmp_path("redirect-own.ctf");
	struct mp_proc_stats s;
	struct trace_read t;
	char bpath[4096], err[512] = "";
	int fd;

	if (!fixture_start(&fx, "redirect.ctf", false, 1))
		goto out;
	snprintf(bpath, sizeof(bpath), "%s.%d", fx.path, (int)fx.b.pid);
	fd = open(own, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ASSERT_TRUE(fd >= 0, "the caller's file");
	queue_proc(MP_EV_FORK, fx.id, fx.a.pid, fx.a.pid, fx.b.pid, 0);
	mp_engine__process(fx.e);
	ASSERT_TRUE(access(bpath, F_OK) == 0, "B's trace begun at its fork");
	ASSERT_EQ(mp_profile__sync_pid(fx.p, fx.b.pid, fd, err, sizeof(err)), 1,
		  "sync_pid follows B");
	ASSERT_TRUE(access(bpath, F_OK) != 0, "the file made for B is gone");
	ASSERT_EQ(mp_profile__procs(fx.p, NULL, 0), 2, "A and B");
	ASSERT_TRUE(proc_stats(fx.p, fx.b.pid, &s) && !s.exited, "B runs");
	queue_block(&fx, &fx.b, 5, 1);
	queue_proc(MP_EV_EXIT, fx.id, fx.b.pid, fx.b.pid, 0, 0);
	ASSERT_EQ(mp_engine__process(fx.e), 2, "records consumed");
	ASSERT_OK(mp_profile__stop(fx.p), "stop");
	ASSERT_OK(mp_profile__discard(fx.p), "discard");
	if (fd >= 0)
		close(fd);
	if (trace_read(own, &t)) {
		ASSERT_EQ(t.pid, fx.b.pid, "B's trace in the caller's file");
		ASSERT_EQ(t.allocs, 1, "B's alloc");
		ASSERT_EQ(t.nsamples, 2, "its multiplicity");
		ASSERT_EQ(t.words, (fx.b.size[5] + 7) / 8, "its length");
	}
out:
	fixture_end(&fx);
}

int main(void)
{
	RUN(test_fork_exec_exit);
	RUN(test_no_follow);
	RUN(test_retire);
	RUN(test_sync_pid_mode);
	RUN(test_sync_pid_redirect);
	free(fake.queue);
	return test_exit();
}
