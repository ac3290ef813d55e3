// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * engine_check: the engine API as memprofd uses it, on real BPF and a real running process
 * (tests/workloads/wl_alloc ctl, driven through its stdin): start errors (ESRCH, EBUSY,
 * EINVAL), stop keeps recording frees of sampled blocks, a process moved to a second profile
 * keeps its old blocks in the first one, implicit stop when every process exited, duration,
 * output to a passed fd, discard. Usage: engine_check WL_ALLOC_PATH TMPDIR (root).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <memprof/preload.h>
#include <memprof/trace.h>

#include "daemon/engine/engine.h"
#include "tests/unit/test.h"

static const char *wl_path, *tmpdir;
/* ENGINE_CHECK_PRELOAD=LIB (tests/bpf/fast-engine.sh): the workloads run with LD_PRELOAD=LIB,
 * so the same checks cover the cooperative fast path (preload mode). */
static const char *preload_lib;
/* MEMPROF_BATCH for the next child_spawn() (preload mode), or NULL */
static const char *child_batch;
static struct mp_engine *eng;

struct child {
	pid_t pid;
	FILE *in, *out;
};

/* The last state change each profile reported by itself. */
static enum mp_profile_state last_state[16];
static unsigned int state_calls;

static void on_state(void *ctx, struct mp_profile *p, enum mp_profile_state st)
{
	(void)ctx;
	if (mp_profile__id(p) < 16)
		last_state[mp_profile__id(p)] = st;
	state_calls++;
}

static int child_spawn(struct child *c)
{
	int in[2], out[2];
	char line[64];

	if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC))
		return -errno;
	c->pid = fork();
	if (c->pid < 0)
		return -errno;
	if (c->pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		if (preload_lib)
			setenv("LD_PRELOAD", preload_lib, 1);
		if (child_batch)
			setenv("MEMPROF_BATCH", child_batch, 1);
		execl(wl_path, wl_path, "ctl", (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	c->in = fdopen(in[1], "w");
	c->out = fdopen(out[0], "r");
	if (!c->in || !c->out || !fgets(line, sizeof(line), c->out) || strcmp(line, "ready\n"))
		return -EIO;
	return 0;
}

/* Send a command and wait for "done": its probe events are in the ring buffer then. */
static int child_cmd(struct child *c, const char *cmd)
{
	char line[64];

	fprintf(c->in, "%s\n", cmd);
	fflush(c->in);
	if (!strcmp(cmd, "exit"))
		return 0;
	if (!fgets(line, sizeof(line), c->out) || strcmp(line, "done\n"))
		return -EIO;
	return 0;
}

static int child_exit(struct child *c)
{
	int st = 0;

	child_cmd(c, "exit");
	fclose(c->in);
	fclose(c->out);
	if (waitpid(c->pid, &st, 0) != c->pid)
		return -errno;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -ECHILD;
}

static void drain(void)
{
	while (mp_engine__process(eng) > 0)
		;
}

static struct mp_proc_stats stats_of(struct mp_profile *p)
{
	struct mp_proc_stats s = { 0 };

	mp_profile__procs(p, &s, 1);
	return s;
}

static struct mp_profile_opts popts(const char *name)
{
	static char paths[8][512];
	static int next;
	struct mp_profile_opts o = { .sz = sizeof(o), .rate = 1e-2, .out_fd = -1 };
	char *path = paths[next++ % 8];

	snprintf(path, 512, "%s/%s.ctf", tmpdir, name);
	o.out_path = path;
	return o;
}

/* Count allocs and collects in a trace through the strict reader; -1 if it does not read. */
static int read_trace(const char *path, uint64_t *allocs, uint64_t *collects)
{
	struct memprof_reader_opts o = { .sz = sizeof(o), .strict = 1 };
	struct memprof_reader *r = memprof_reader__open(path, &o, NULL, 0);
	struct memprof_event ev;
	int res;

	*allocs = *collects = 0;
	if (!r)
		return -1;
	while ((res = memprof_reader__next(r, &ev)) > 0) {
		*allocs += ev.type == MEMPROF_EV_ALLOC;
		*collects += ev.type == MEMPROF_EV_COLLECT;
	}
	memprof_reader__free(r);
	return res < 0 ? -1 : 0;
}

/* Drain the engine for up to @ms while @p's stats do not satisfy @done; the last stats. */
static struct mp_proc_stats wait_stats(struct mp_profile *p, int ms,
				       bool (*done)(const struct mp_proc_stats *s))
{
	struct mp_proc_stats s;

	for (int waited = 0;; waited += 20) {
		drain();
		s = stats_of(p);
		if (done(&s) || waited >= ms)
			return s;
		usleep(20000);
	}
}

/* Preload mode: the engine has every sample the library drew (none still queued in it). */
static bool all_samples_seen(const struct mp_proc_stats *s)
{
	return s->samples > 0 && s->nsamples == s->preload_samples;
}

static bool library_queue_seen(const struct mp_proc_stats *s)
{
	return !preload_lib || all_samples_seen(s);
}

static bool all_freed(const struct mp_proc_stats *s)
{
	return s->frees == s->samples;
}

static struct mp_profile *pa, *pb;

static void test_start_errors(void)
{
	struct mp_profile_opts o = popts("never");
	struct child c;
	struct mp_profile *p = NULL;
	pid_t nobody = 0x3ffffff0;
	char err[256];

	ASSERT_OK(child_spawn(&c), "spawn");
	ASSERT_EQ(mp_engine__start(eng, &o, &nobody, 1, &p, err, sizeof(err)), -ESRCH, "no pid");
	ASSERT_TRUE(strstr(err, "1073741808") != NULL, "error names the pid");
	o.rate = 2;
	ASSERT_EQ(mp_engine__start(eng, &o, &c.pid, 1, &p, err, sizeof(err)), -EINVAL, "rate 2");
	ASSERT_TRUE(strstr(err, "rate") != NULL, "error names the rate");
	o = popts("never");
	o.format_version = 5;
	ASSERT_EQ(mp_engine__start(eng, &o, &c.pid, 1, &p, err, sizeof(err)), -EINVAL, "v5");
	ASSERT_TRUE(access(o.out_path, F_OK) != 0, "no file left by failed starts");

	o = popts("a");
	if (!ASSERT_OK(mp_engine__start(eng, &o, &c.pid, 1, &pa, err, sizeof(err)), err))
		return;
	ASSERT_EQ(mp_profile__id(pa), 1, "profile ids count from 1");
	ASSERT_EQ(mp_profile__state(pa), MP_PROFILE_SAMPLING, "sampling");
	ASSERT_TRUE(mp_engine__profile(eng, 1) == pa, "lookup by id");
	o = popts("b");
	ASSERT_EQ(mp_engine__start(eng, &o, &c.pid, 1, &pb, err, sizeof(err)), -EBUSY,
		  "second profile on a sampling process");
	ASSERT_TRUE(strstr(err, "already") != NULL, "EBUSY message");
	ASSERT_EQ(mp_profile__discard(pa), -EINVAL, "discard needs a stopped profile");

	/* Phase 1: A samples. Preload mode: the library reports its last samples late (deferred
	 * reports), with the engine's look at its idle queue at the latest. */
	ASSERT_OK(child_cmd(&c, "leak 3000"), "leak");
	struct mp_proc_stats s1 = wait_stats(pa, 2000, library_queue_seen);
	ASSERT_TRUE(s1.samples > 1000, "A sampled the leaks");
	ASSERT_EQ(s1.pid, c.pid, "stats pid");
	ASSERT_EQ(s1.mode, preload_lib ? MP_PROC_MODE_PRELOAD : MP_PROC_MODE_UPROBE,
		  preload_lib ? "profiled through libmemprof-preload" : "profiled with uprobes");

	/* Phase 2: A stopped: no new samples. */
	ASSERT_OK(mp_profile__stop(pa), "stop A");
	ASSERT_EQ(mp_profile__stop(pa), -EINVAL, "stop twice");
	ASSERT_OK(child_cmd(&c, "leak 3000"), "leak");
	drain();
	struct mp_proc_stats s2 = stats_of(pa);
	ASSERT_EQ(s2.samples, s1.samples, "no samples after stop");

	/* Phase 3: the process moves to B; its old blocks stay A's. */
	o = popts("b");
	if (!ASSERT_OK(mp_engine__start(eng, &o, &c.pid, 1, &pb, err, sizeof(err)), err))
		return;
	ASSERT_EQ(mp_profile__id(pb), 2, "second id");
	ASSERT_OK(child_cmd(&c, "leak 3000"), "leak");
	drain();
	struct mp_proc_stats sb = stats_of(pb);
	ASSERT_TRUE(sb.samples > 1000, "B samples");
	ASSERT_EQ(stats_of(pa).samples, s1.samples, "A still has no new samples");

	/* Phase 4: free everything: each profile collects its own blocks. */
	ASSERT_OK(child_cmd(&c, "free"), "free");
	drain();
	s2 = stats_of(pa);
	sb = stats_of(pb);
	if (!preload_lib) {
		ASSERT_EQ(s2.frees, s2.samples, "stopped A still records frees of its blocks");
		ASSERT_EQ(sb.frees, sb.samples, "B records frees of its blocks");
		ASSERT_TRUE(s2.est_live_bytes == 0 && sb.est_live_bytes == 0, "nothing live");
	} else {
		/* The library batches frees of sampled blocks: the last ones (fewer than a batch,
		 * MEMPROF_PRELOAD_FREE_BATCH) go out with its next sample, or at exit (below). */
		ASSERT_TRUE(s2.frees + sb.frees + MEMPROF_PRELOAD_FREE_BATCH >
				    s2.samples + sb.samples,
			    "A and B record the frees of their blocks, a batch at most pending");
	}
	/* The checks above need every allocator call of the workload to be a command's: one more
	 * (stdio's stdin buffer, malloc'ed by the first fgets() while A was attaching) was an
	 * almost surely sampled block that lives until exit, one free short in A. 3 x 3000
	 * mallocs, 9000 frees (uprobe mode: preload mode's calls never reach BPF). */
	if (!preload_lib) {
		uint64_t st[MP_STAT__MAX] = { 0 };

		mp_engine__stats(eng, st, MP_STAT__MAX);
		ASSERT_EQ(st[MP_STAT_CALLS], 18000, "no allocator calls but the commands'");
	}

	/* Phase 5: the process exits: B (sampling) stops by itself. */
	state_calls = 0;
	ASSERT_OK(child_exit(&c), "child exit");
	drain();
	ASSERT_EQ(mp_profile__state(pb), MP_PROFILE_STOPPED, "B implicitly stopped");
	ASSERT_EQ(last_state[2], MP_PROFILE_STOPPED, "B reported its stop");
	ASSERT_TRUE(stats_of(pb).exited && stats_of(pa).exited, "exited");
	ASSERT_OK(mp_profile__discard(pa), "discard A");
	ASSERT_OK(mp_profile__discard(pb), "discard B");
	ASSERT_EQ(mp_profile__state(pa), MP_PROFILE_DISCARDED, "discarded");

	uint64_t allocs, collects;

	ASSERT_OK(read_trace(mp_profile__opts(pa)->out_path, &allocs, &collects), "read A");
	/* Preload mode: the frees still pending in the library were reported at its exit. */
	ASSERT_EQ(allocs, s1.samples, "A's trace: allocs");
	ASSERT_EQ(collects, preload_lib ? s1.samples : s2.frees, "A's trace: collects");
	ASSERT_OK(read_trace(mp_profile__opts(pb)->out_path, &allocs, &collects), "read B");
	ASSERT_EQ(allocs, sb.samples, "B's trace: allocs");
	ASSERT_EQ(collects, preload_lib ? sb.samples : sb.frees, "B's trace: collects");
}

/* A ctl workload with MEMPROF_BATCH=@batch, profiled at rate 1 (every block sampled once the
 * library arms, within its first 64 KiB): its profile, or NULL (failed, reported). */
static struct mp_profile *start_rate1(struct child *c, const char *name, const char *batch)
{
	struct mp_profile_opts o = popts(name);
	struct mp_profile *p = NULL;
	char err[256];
	int r;

	child_batch = batch;
	r = child_spawn(c);
	child_batch = NULL;
	if (!ASSERT_OK(r, "spawn"))
		return NULL;
	o.rate = 1;
	if (!ASSERT_OK(mp_engine__start(eng, &o, &c->pid, 1, &p, err, sizeof(err)), err))
		return NULL;
	return p;
}

/*
 * Preload mode, deferred reports (MEMPROF_BATCH=16): the samples still queued in the process
 * when its profile stops were drawn under the generation before the stop; they reach the
 * daemon with the library's next call, which sees the stop, and the stopped profile keeps them.
 * Before, they were dropped with their generation (all but a multiple of 16 of them).
 * Preload mode only: deferred reports are the library's.
 */
static void test_deferred_stop(void)
{
	struct mp_proc_stats s;
	struct mp_profile *p;
	uint64_t allocs, collects;
	struct child c;

	if (!(p = start_rate1(&c, "deferred", "16")))
		return;
	ASSERT_OK(child_cmd(&c, "leak 300"), "leak");
	drain();
	ASSERT_OK(mp_profile__stop(p), "stop");
	ASSERT_OK(child_cmd(&c, "leak 1"), "one call after the stop");
	drain();
	s = stats_of(p);
	ASSERT_TRUE(s.samples > 100, "sampled");
	ASSERT_EQ(s.nsamples, s.preload_samples,
		  "every sample the library drew before the stop is the stopped profile's");
	ASSERT_OK(child_exit(&c), "child exit");
	drain();
	ASSERT_OK(mp_profile__discard(p), "discard");
	ASSERT_OK(read_trace(mp_profile__opts(p)->out_path, &allocs, &collects), "read");
	ASSERT_EQ(allocs, s.samples, "and its trace has them");
}

/*
 * Preload mode, a process that goes idle with samples (deferred reports) or frees (both
 * modes) still queued in its library: the engine takes the queue itself within a second
 * (pull_idle_queues), so the profile shows every sample and every free; what the library
 * sends later (at exit) is not counted twice.
 */
static void idle_queue(const char *batch)
{
	uint64_t drops[MP_DROP__MAX] = { 0 }, stale, allocs, collects;
	struct mp_proc_stats s;
	struct mp_profile *p;
	struct child c;

	if (!(p = start_rate1(&c, strcmp(batch, "1") ? "idle-deferred" : "idle-immediate", batch)))
		return;
	mp_engine__drops(eng, drops, MP_DROP__MAX);
	stale = drops[MP_DROP_STALE];
	ASSERT_OK(child_cmd(&c, "leak 300"), "leak");
	s = wait_stats(p, 2000, all_samples_seen);
	ASSERT_TRUE(s.samples > 100, "sampled");
	ASSERT_EQ(s.nsamples, s.preload_samples, "an idle process' queued samples are taken");
	ASSERT_OK(child_cmd(&c, "free"), "free");
	s = wait_stats(p, 2000, all_freed);
	ASSERT_EQ(s.frees, s.samples, "and its queued frees");
	ASSERT_TRUE(s.est_live_bytes == 0, "nothing shows live");
	/* Samples freed at once (within the library's 10 ms), so that the queue holds them and
	 * their frees, taken from the idle queue: the frees wait for the library's own report
	 * (at exit here), or the samples it sends then would count again. */
	ASSERT_OK(child_cmd(&c, "leak 5"), "leak 5");
	ASSERT_OK(child_cmd(&c, "free"), "free 5");
	s = wait_stats(p, 2000, all_samples_seen);
	ASSERT_EQ(s.nsamples, s.preload_samples, "five more taken");
	ASSERT_OK(child_exit(&c), "child exit");
	drain();
	s = stats_of(p);
	ASSERT_EQ(s.nsamples, s.preload_samples, "what the library sent at exit was not counted again");
	ASSERT_EQ(s.frees, s.samples, "nor collected twice");
	mp_engine__drops(eng, drops, MP_DROP__MAX);
	ASSERT_EQ(drops[MP_DROP_STALE], stale, "no sample taken for a stale block");
	ASSERT_OK(mp_profile__discard(p), "discard");
	ASSERT_OK(read_trace(mp_profile__opts(p)->out_path, &allocs, &collects), "read");
	ASSERT_EQ(allocs, s.samples, "its trace: allocs");
	ASSERT_EQ(collects, s.samples, "its trace: collects");
}

static void test_idle_queue_deferred(void)
{
	idle_queue("16");
}

static void test_idle_queue_immediate(void)
{
	idle_queue("1");
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void test_duration_and_fd(void)
{
	struct mp_profile_opts o = popts("unused");
	char path[512], err[256];
	struct mp_profile *p = NULL;
	struct child c;
	uint64_t t0, allocs, collects;
	int fd;

	snprintf(path, sizeof(path), "%s/fd.ctf", tmpdir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ASSERT_TRUE(fd >= 0, "open");
	ASSERT_OK(child_spawn(&c), "spawn");
	o.out_path = NULL;
	o.out_fd = fd;
	o.duration_us = 300 * 1000;
	if (!ASSERT_OK(mp_engine__start(eng, &o, &c.pid, 1, &p, err, sizeof(err)), err))
		return;
	close(fd);	/* the engine has its own copy */
	ASSERT_OK(child_cmd(&c, "leak 1000"), "leak");
	t0 = now_ms();
	while (mp_profile__state(p) == MP_PROFILE_SAMPLING && now_ms() - t0 < 5000) {
		struct pollfd pfd = { .fd = mp_engine__fd(eng), .events = POLLIN };

		if (poll(&pfd, 1, 1000) > 0)
			mp_engine__process(eng);
	}
	ASSERT_EQ(mp_profile__state(p), MP_PROFILE_STOPPED, "stopped when the duration ran out");
	ASSERT_EQ(last_state[mp_profile__id(p)], MP_PROFILE_STOPPED, "and said so");
	ASSERT_TRUE(stats_of(p).samples > 0, "sampled before");
	ASSERT_TRUE(stats_of(p).trace_path == NULL, "no path for a passed fd");
	ASSERT_OK(child_exit(&c), "child exit");
	drain();
	ASSERT_OK(mp_profile__discard(p), "discard");
	ASSERT_OK(read_trace(path, &allocs, &collects), "read the fd's trace");
	ASSERT_EQ(allocs, stats_of(p).samples, "fd trace: allocs");
	ASSERT_TRUE(mp_engine__next_profile(eng, NULL) == p, "newest profile listed first");
	ASSERT_OK(mp_engine__forget(eng, p), "forget a discarded profile");
	ASSERT_TRUE(mp_engine__next_profile(eng, NULL) == pb, "forgotten profile unlisted");
	ASSERT_EQ(mp_engine__forget(eng, pb) == 0, 1, "forget B");
	ASSERT_TRUE(mp_engine__profile(eng, 2) == NULL, "B gone");
}

static void test_stats(void)
{
	uint64_t st[MP_STAT__MAX] = { 0 }, drops[MP_DROP__MAX];

	ASSERT_EQ(mp_engine__stats(eng, st, MP_STAT__MAX), MP_STAT__MAX, "stats");
	/* preload mode: allocator calls never reach BPF, only samples do */
	ASSERT_TRUE((preload_lib || st[MP_STAT_CALLS] > 0) && st[MP_STAT_SAMPLED] > 0,
		    "BPF counted calls");
	ASSERT_EQ(mp_engine__drops(eng, drops, MP_DROP__MAX), MP_DROP__MAX, "drops");
	ASSERT_EQ(drops[MP_DROP_UNMATCHED_FREE], 0, "no unmatched free");
	ASSERT_EQ(drops[MP_DROP_STALE], 0, "no stale block");
	/* every exit arrived as an event before its pidfd said so */
	ASSERT_EQ(drops[MP_DROP_LOST_EXIT], 0, "no exit completed by pidfd");
}

int main(int argc, char **argv)
{
	struct mp_engine_opts eo = { .sz = sizeof(eo), .seed = 1, .has_seed = true };

	if (argc != 3) {
		fprintf(stderr, "usage: engine_check WL_ALLOC TMPDIR\n");
		return 2;
	}
	wl_path = argv[1];
	tmpdir = argv[2];
	preload_lib = getenv("ENGINE_CHECK_PRELOAD");
	signal(SIGPIPE, SIG_IGN);
	eng = mp_engine__new(&eo);
	if (!eng) {
		fprintf(stderr, "engine_check: mp_engine__new: %s\n", strerror(errno));
		return errno == EPERM ? 77 : 1;
	}
	mp_engine__on_state(eng, on_state, NULL);
	RUN(test_start_errors);
	RUN(test_duration_and_fd);
	RUN(test_stats);
	if (preload_lib) {
		RUN(test_deferred_stop);
		RUN(test_idle_queue_deferred);
		RUN(test_idle_queue_immediate);
	}
	mp_engine__free(eng);
	return test_exit();
}
