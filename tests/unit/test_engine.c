// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The engine driven by synthetic ring records (tests/unit/test_engine.h), without root: samples
 * and their multiplicities, frees matched to sampled blocks, stale addresses, thread exits,
 * stop and discard, lost records and exits; each trace read back with the library's reader.
 * Every count checked is the one the records fed imply.
 */
#include <math.h>

#include "tests/unit/test_engine.h"

static unsigned int state_calls;
static enum mp_profile_state last_state;

static void on_state(void *ctx, struct mp_profile *p, enum mp_profile_state st)
{
	(void)ctx;
	(void)p;
	state_calls++;
	last_state = st;
}

static uint64_t drop(struct mp_engine *e, enum mp_engine_drop d)
{
	uint64_t drops[MP_DROP__MAX];

	mp_engine__drops(e, drops, MP_DROP__MAX);
	return drops[d];
}

/* Five sampled blocks, two freed, one free of a block never sampled; then the exit. */
static void test_samples_and_frees(void)
{
	struct fixture fx;
	uint64_t nsamples = 0, words = 0, live = 0;
	double est = 0;
	struct mp_proc_stats s;
	struct fake_proc *f;
	struct trace_read t;

	if (!fixture_start(&fx, "samples.ctf", false, 0))
		goto out;
	mp_engine__on_state(fx.e, on_state, NULL);
	state_calls = 0;
	f = fake_proc(fx.a.pid, false);
	ASSERT_TRUE(f && f->has_cfg, "the source configured the process");
	ASSERT_EQ(f ? f->cfg.profile : 0, fx.id, "its profile");
	ASSERT_EQ(f ? f->cfg.flags & (MP_PROC_SAMPLING | MP_PROC_FOLLOW_FORKS | MP_PROC_RATE_ONE) :
		      0, MP_PROC_SAMPLING | MP_PROC_FOLLOW_FORKS | MP_PROC_RATE_ONE, "its flags");
	ASSERT_EQ(f ? f->attaches : 0, 1, "probes attached once");

	fx.frame = child_frame();
	for (unsigned int i = 0; i < 5; i++) {
		uint64_t len = (fx.a.size[i] + 7) / 8, n = i + 2;	/* rate 1: 1 + remaining */

		queue_block(&fx, &fx.a, i, i + 1);
		nsamples += n;
		words += len;
		est += (double)n * 8.0 * (double)len / (double)(len + 1);
		if (i != 1 && i != 3)
			live += n;
	}
	queue_free(fx.id, fx.a.pid, fx.a.pid, fx.a.addr[1]);
	queue_free(fx.id, fx.a.pid, fx.a.pid, fx.a.addr[3]);
	queue_free(fx.id, fx.a.pid, fx.a.pid, fx.a.addr[6]);	/* never sampled */
	ASSERT_EQ(mp_engine__process(fx.e), 8, "records consumed");
	ASSERT_TRUE(proc_stats(fx.p, fx.a.pid, &s), "the process' figures");
	ASSERT_EQ(s.samples, 5, "samples");
	ASSERT_EQ(s.nsamples, nsamples, "multiplicities");
	ASSERT_EQ(s.frees, 2, "frees matched to sampled blocks");
	ASSERT_EQ(s.live_nsamples, live, "live multiplicities");
	ASSERT_EQ(s.unmatched_frees, 1, "unmatched free");
	ASSERT_EQ(drop(fx.e, MP_DROP_UNMATCHED_FREE), 1, "unmatched frees, engine");
	ASSERT_TRUE(fabs(s.est_alloc_bytes - est) < 1e-6 * est, "estimated allocated bytes");
	ASSERT_TRUE(!s.exited && !s.trace_done, "still running");
	ASSERT_EQ(state_calls, 0, "no state change yet");

	queue_proc(MP_EV_EXIT, fx.id, fx.a.pid, fx.a.pid, 0, 0);
	ASSERT_EQ(mp_engine__process(fx.e), 1, "exit consumed");
	ASSERT_EQ(state_calls, 1, "the profile stopped by itself");
	ASSERT_EQ(last_state, MP_PROFILE_STOPPED, "stopped");
	ASSERT_EQ(mp_profile__state(fx.p), MP_PROFILE_STOPPED, "state");
	ASSERT_TRUE(proc_stats(fx.p, fx.a.pid, &s) && s.exited && s.trace_done, "exited, done");
	ASSERT_TRUE(f && !f->has_cfg, "the source forgot the process");
	ASSERT_OK(mp_profile__discard(fx.p), "discard");

	if (trace_read(fx.path, &t)) {
		ASSERT_EQ(t.pid, fx.a.pid, "trace pid");
		ASSERT_EQ(t.allocs, 5, "allocs in the trace");
		ASSERT_EQ(t.nsamples, nsamples, "nsamples in the trace");
		ASSERT_EQ(t.words, words, "lengths in words");
		ASSERT_EQ(t.collects, 2, "collects in the trace");
		ASSERT_EQ(t.collect_ids[0], t.alloc_ids[1], "the first free collects block 1");
		ASSERT_EQ(t.collect_ids[1], t.alloc_ids[3], "the second free collects block 3");
		ASSERT_STREQ(t.first_frame, "child_allocate", "the frame's function");
		ASSERT_TRUE(strstr(t.context, "unmatched_frees=1 ") != NULL, "context's drops");
	}
	ASSERT_OK(mp_engine__forget(fx.e, fx.p), "forget");
out:
	fixture_end(&fx);
}

/* An address handed out again before its free arrived; a thread's blocks after its exit. */
static void test_stale_and_threads(void)
{
	struct fixture fx;
	pid_t t2 = 1 << 22;	/* a thread id of the child: any number the tables key by */
	struct mp_proc_stats s;
	struct trace_read t;

	if (!fixture_start(&fx, "stale.ctf", false, 0))
		goto out;
	queue_block(&fx, &fx.a, 0, 0);
	queue_block(&fx, &fx.a, 0, 2);	/* its free lost */
	queue_alloc(fx.id, fx.a.pid, t2, fx.a.addr[2], fx.a.size[2], 1, &fx.frame, 1);
	queue_proc(MP_EV_THREAD_EXIT, fx.id, fx.a.pid, t2, 0, 0);
	queue_free(fx.id, fx.a.pid, fx.a.pid, fx.a.addr[2]);	/* another thread frees it */
	queue_alloc(fx.id + 99, fx.a.pid, fx.a.pid, fx.a.addr[4], fx.a.size[4], 0, &fx.frame, 1);
	ASSERT_EQ(mp_engine__process(fx.e), 6, "records consumed");
	ASSERT_TRUE(proc_stats(fx.p, fx.a.pid, &s), "the process' figures");
	ASSERT_EQ(s.samples, 3, "samples");
	ASSERT_EQ(s.nsamples, 1 + 3 + 2, "multiplicities");
	ASSERT_EQ(s.frees, 2, "the stale block and the exited thread's block collected");
	ASSERT_EQ(s.live_nsamples, 3, "the block allocated again is live");
	ASSERT_EQ(s.unmatched_frees, 0, "no unmatched free");
	ASSERT_EQ(drop(fx.e, MP_DROP_STALE), 1, "stale blocks");
	ASSERT_EQ(drop(fx.e, MP_DROP_NO_PROFILE), 1, "an alloc of an unknown profile");

	ASSERT_OK(mp_profile__stop(fx.p), "stop");
	ASSERT_OK(mp_profile__discard(fx.p), "discard");
	if (trace_read(fx.path, &t)) {
		ASSERT_EQ(t.allocs, 3, "allocs in the trace");
		ASSERT_EQ(t.collects, 2, "collects in the trace");
		ASSERT_EQ(t.collect_ids[0], t.alloc_ids[0], "the stale block is collected first");
		ASSERT_EQ(t.collect_ids[1], t.alloc_ids[2], "then the exited thread's block");
		ASSERT_TRUE(strstr(t.context, "stale_blocks=1 ") != NULL, "context's drops");
	}
out:
	fixture_end(&fx);
}

/* Stop: samples after it are not taken, frees of sampled blocks still are; discard: the
 * source forgets the process and its probes go; records after that are of no profile. */
static void test_stop_discard(void)
{
	struct fixture fx;
	struct mp_proc_stats s;
	struct fake_proc *f;
	struct trace_read t;

	if (!fixture_start(&fx, "stop.ctf", false, 0))
		goto out;
	queue_block(&fx, &fx.a, 0, 4);
	ASSERT_EQ(mp_engine__process(fx.e), 1, "alloc consumed");
	ASSERT_OK(mp_profile__stop(fx.p), "stop");
	ASSERT_EQ(mp_profile__stop(fx.p), -EINVAL, "stop twice");
	f = fake_proc(fx.a.pid, false);
	ASSERT_TRUE(f && f->has_cfg && !(f->cfg.flags & MP_PROC_SAMPLING),
		    "the source samples no more");
	queue_block(&fx, &fx.a, 1, 0);	/* after the stop */
	queue_free(fx.id, fx.a.pid, fx.a.pid, fx.a.addr[0]);
	ASSERT_EQ(mp_engine__process(fx.e), 2, "records consumed");
	ASSERT_TRUE(proc_stats(fx.p, fx.a.pid, &s), "the process' figures");
	ASSERT_EQ(s.samples, 1, "no sample after the stop");
	ASSERT_EQ(s.frees, 1, "the free after the stop");
	ASSERT_EQ(s.live_nsamples, 0, "nothing live");

	ASSERT_OK(mp_profile__discard(fx.p), "discard");
	ASSERT_TRUE(f && !f->has_cfg && f->detaches == 1, "the source forgot and detached it");
	queue_block(&fx, &fx.a, 2, 0);
	mp_engine__process(fx.e);
	ASSERT_EQ(drop(fx.e, MP_DROP_NO_PROFILE), 1, "an alloc of a discarded profile");
	if (trace_read(fx.path, &t)) {
		ASSERT_EQ(t.allocs, 1, "allocs in the trace");
		ASSERT_EQ(t.nsamples, 5, "its multiplicity");
		ASSERT_EQ(t.collects, 1, "collects in the trace");
	}
out:
	fixture_end(&fx);
}

/* Records the source lost (its ring's drops) and an exit without its record. */
static void test_lost(void)
{
	struct fixture fx;
	struct mp_proc_stats s;
	struct trace_read t;
	int status;

	fake.stats[MP_STAT_RINGBUF_DROPS] = 10;	/* before the profile: not its losses */
	if (!fixture_start(&fx, "lost.ctf", false, 0))
		goto out;
	mp_engine__on_state(fx.e, on_state, NULL);
	state_calls = 0;
	queue_block(&fx, &fx.a, 0, 0);
	ASSERT_EQ(mp_engine__process(fx.e), 1, "alloc consumed");
	fake.stats[MP_STAT_RINGBUF_DROPS] = 17;
	fake.stats[MP_STAT_USTACK_LOST] = 3;
	/* gone without an exit record: its pidfd says so */
	kill(fx.a.pid, SIGKILL);
	waitpid(fx.a.pid, &status, 0);
	close(fx.a.wait_fd);
	fx.a.pid = 0;
	mp_engine__process(fx.e);
	ASSERT_EQ(drop(fx.e, MP_DROP_LOST_EXIT), 1, "lost exits");
	ASSERT_EQ(state_calls, 1, "the profile stopped by itself");
	ASSERT_TRUE(mp_profile__procs(fx.p, &s, 1) == 1 && s.exited && s.trace_done,
		    "exited, trace done");
	ASSERT_EQ(s.live_nsamples, 1, "live at exit");
	ASSERT_OK(mp_profile__discard(fx.p), "discard");
	if (trace_read(fx.path, &t)) {
		ASSERT_EQ(t.allocs, 1, "allocs in the trace");
		ASSERT_EQ(t.collects, 0, "live at exit: no collect");
		ASSERT_TRUE(strstr(t.context, "ringbuf=7 ") != NULL, "the ring's losses");
		ASSERT_TRUE(strstr(t.context, "ustack_lost=3 ") != NULL, "lost stack copies");
	}
out:
	fixture_end(&fx);
}

/* Field 28 of /proc/PID/stat: the image's mm->start_stack. */
static uint64_t image_of(pid_t pid)
{
	unsigned long long v = 0;
	char path[64], buf[1024], *q;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	/* after "comm) ": fields 3 to 27 skipped */
	if (fgets(buf, sizeof(buf), f) && (q = strrchr(buf, ')')))
		sscanf(q + 2, "%*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s "
			      "%*s %*s %*s %*s %*s %*s %*s %*s %llu", &v);
	fclose(f);
	return v;
}

/*
 * Blocks sampled in an image that is gone by the time the engine reads them (taken before an
 * exec, read after it): counted, their frames left out, not named after the new image's code.
 */
static void test_image_gone(void)
{
	struct mp_proc_stats s;
	struct trace_read t;
	struct fixture fx;
	uint64_t image;

	if (!fixture_start(&fx, "image.ctf", false, 0))
		goto out;
	image = image_of(fx.a.pid);
	if (!ASSERT_TRUE(image != 0, "the child's start_stack"))
		goto out;
	queue_image = image;		/* this image */
	queue_block(&fx, &fx.a, 0, 0);
	queue_image = image + 4096;	/* another one, before an exec */
	queue_block(&fx, &fx.a, 1, 0);
	queue_image = 0;		/* unknown: taken as this one */
	queue_block(&fx, &fx.a, 2, 0);
	ASSERT_EQ(mp_engine__process(fx.e), 3, "records consumed");
	ASSERT_TRUE(proc_stats(fx.p, fx.a.pid, &s), "the process' figures");
	ASSERT_EQ(s.samples, 3, "every block counts");
	ASSERT_EQ(s.image_gone_stacks, 1, "one stack of an image that is gone");
	queue_proc(MP_EV_EXIT, fx.id, fx.a.pid, fx.a.pid, 0, 0);
	ASSERT_EQ(mp_engine__process(fx.e), 1, "exit consumed");
	ASSERT_OK(mp_profile__discard(fx.p), "discard");
	if (trace_read(fx.path, &t)) {
		ASSERT_EQ(t.allocs, 3, "allocs in the trace");
		ASSERT_EQ(t.no_frames, 1, "one without frames");
		ASSERT_STREQ(t.first_frame, "child_allocate", "this image's frame resolved");
		ASSERT_TRUE(strstr(t.context, "image_gone_stacks=1 ") != NULL, "context counts it");
	}
	ASSERT_OK(mp_engine__forget(fx.e, fx.p), "forget");
out:
	fixture_end(&fx);
}

/*
 * The other way round: the snapshot is older than the sample, of the image before an exec
 * whose record never came (lost in a full ring). The maps are read again, and the new image's
 * sample keeps its frames.
 */
static void test_image_newer(void)
{
	uint64_t image, image2 = 0;
	struct mp_proc_stats s;
	struct fixture fx;

	if (!fixture_start(&fx, "image-newer.ctf", false, 0))
		goto out;
	image = image_of(fx.a.pid);
	queue_image = image;
	queue_block(&fx, &fx.a, 0, 0);
	ASSERT_EQ(mp_engine__process(fx.e), 1, "a sample of the first image");
	if (!ASSERT_TRUE(write(fx.a.wait_fd, "x", 1) == 1, "the child told to exec"))
		goto out;
	fx.a.exec_d = true;
	/* During an exec startstack is 0, then a first value, then its last: the same twice
	 * 20 ms apart, in /bin/sleep, is the new image's */
	for (int i = 0, stable = 0; i < 500 && stable < 2; i++) {
		uint64_t v;

		usleep(20000);
		v = image_of(fx.a.pid);
		stable = v && v != image && v == image2 ? stable + 1 : 0;
		image2 = v;
	}
	if (!ASSERT_TRUE(image2 && image2 != image, "the child exec'd /bin/sleep"))
		goto out;
	queue_image = image2;	/* taken after the exec: no EXEC record between */
	queue_block(&fx, &fx.a, 1, 0);
	ASSERT_EQ(mp_engine__process(fx.e), 1, "a sample of the new image");
	ASSERT_TRUE(proc_stats(fx.p, fx.a.pid, &s), "the process' figures");
	ASSERT_EQ(s.image_gone_stacks, 0, "not taken for a gone image");
	queue_image = image;	/* one of the first image, read late: that one is gone */
	queue_block(&fx, &fx.a, 2, 0);
	ASSERT_EQ(mp_engine__process(fx.e), 1, "a late sample of the first image");
	ASSERT_TRUE(proc_stats(fx.p, fx.a.pid, &s), "the process' figures");
	ASSERT_EQ(s.image_gone_stacks, 1, "that one is");
	queue_proc(MP_EV_EXIT, fx.id, fx.a.pid, fx.a.pid, 0, 0);
	ASSERT_EQ(mp_engine__process(fx.e), 1, "exit consumed");
	ASSERT_OK(mp_profile__discard(fx.p), "discard");
	ASSERT_OK(mp_engine__forget(fx.e, fx.p), "forget");
out:
	fixture_end(&fx);
}

int main(void)
{
	RUN(test_samples_and_frees);
	RUN(test_stale_and_threads);
	RUN(test_stop_discard);
	RUN(test_lost);
	RUN(test_image_gone);
	RUN(test_image_newer);
	free(fake.queue);
	return test_exit();
}
