// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The asynchronous writer (userspace-lib/codec/writer_async.h), as memprofd writes its traces: an
 * output nobody drains (a pipe whose reader stops) never makes a call wait; once its queue is
 * full the calls say -EAGAIN and leave the trace as it was, so the trace the file finally
 * gets holds exactly the events that were accepted. A failing output (/dev/full: ENOSPC) is
 * named with the time it began, the drop counts are patched into the context in place at the
 * end (also on a write-only descriptor), and a reset starts the file over. Plain and zstd.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <memprof/trace.h>

#include "tests/unit/test.h"
#include "userspace-lib/codec/writer_async.h"

#define QUEUE	(256u * 1024)
#define PAD	"pending                         "	/* the context's patchable tail */

static char *tmp_path(const char *name)
{
	static char buf[4096];
	const char *tmp = getenv("MP_TMP");

	snprintf(buf, sizeof(buf), "%s/%s", tmp ? tmp : "/tmp", name);
	return buf;
}

static struct memprof_trace_info info = { .sample_rate = 0.5, .word_size = 64, .pid = 42,
					  .executable_name = "w", .start_time_us = 1000000,
					  .context = "test; drops: " PAD };

/* One alloc with a new location each 16th event (the location table grows too). */
static int one_event(struct memprof_writer *w, uint64_t i)
{
	uint64_t code = 0x1000 + (i / 16) % 4096, bt[2] = { 0x999, code }, id;
	struct memprof_location l = { "f.c", "fn", (uint32_t)code, 1, 2 };
	struct memprof_location top = { "main.c", "main", 1, 1, 2 };
	int r;

	r = memprof_writer__location(w, 0x999, &top, 1);
	if (!r)
		r = memprof_writer__location(w, code, &l, 1);
	if (!r)
		r = memprof_writer__alloc(w, 1000000 + i, 1 + i % 300, 1 + i % 3,
					  MEMPROF_SOURCE_EXTERNAL, bt, 2, &id);
	return r;
}

/* Every event of the trace at @buf: returns the allocs, or -1 when it does not read. */
static long count_allocs(const void *buf, size_t len, char *ctx, size_t ctx_len)
{
	struct memprof_reader *r = memprof_reader__new_buf(buf, len, NULL, NULL, 0);
	struct memprof_event ev;
	long n = 0;
	int k;

	if (!r)
		return -1;
	if (ctx)
		snprintf(ctx, ctx_len, "%s", memprof_reader__info(r)->context);
	while ((k = memprof_reader__next(r, &ev)) > 0)
		n += ev.type == MEMPROF_EV_ALLOC;
	memprof_reader__free(r);
	return k < 0 ? -1 : n;
}

struct drain {
	int fd;
	uint8_t *buf;
	size_t len, cap;
};

static void *drain_pipe(void *arg)
{
	struct drain *d = arg;
	ssize_t n;

	for (;;) {
		if (d->len == d->cap) {
			d->cap = d->cap ? d->cap * 2 : 1 << 20;
			d->buf = realloc(d->buf, d->cap);
		}
		n = read(d->fd, d->buf + d->len, d->cap - d->len);
		if (n <= 0)
			break;
		d->len += (size_t)n;
	}
	return NULL;
}

static void stuck_output(int zstd)
{
	struct memprof_writer_opts o = { .sz = sizeof(o), .zstd_level = zstd ? 3 : 0 };
	struct drain d = { 0 };
	uint64_t accepted = 0, refused = 0, i;
	struct memprof_writer *w;
	pthread_t th;
	int p[2];

	if (!ASSERT_OK(pipe2(p, O_CLOEXEC), "pipe"))
		return;
	w = mp_writer__new_async(p[1], QUEUE, &info, &o);
	if (!ASSERT_TRUE(w != NULL, "new"))
		return;
	/* Nobody reads: the pipe fills, the thread blocks in write(), the queue fills. The
	 * calls go on returning (the alarm would end a call that waits). */
	alarm(60);
	for (i = 0; i < 2000000 && refused < 1000; i++) {
		int r = one_event(w, i);

		if (r == 0)
			accepted++;
		else if (ASSERT_EQ(r, -EAGAIN, "a full queue is -EAGAIN"))
			refused++;
		else
			break;
	}
	ASSERT_TRUE(refused >= 1000, "the stuck output's queue filled");
	ASSERT_TRUE(memprof_writer__bytes(w) < QUEUE + 64 * 1024 + 65536 + 32768,
		    "queued bytes stay bounded");
	ASSERT_EQ(mp_writer__output_error(w, NULL, NULL), 0, "stuck is not an error");
	/* The reader comes back: the queue drains, and writing resumes. */
	d.fd = p[0];
	pthread_create(&th, NULL, drain_pipe, &d);
	for (int tries = 0; tries < 100000; tries++) {
		int r = one_event(w, i);

		if (r == 0) {
			accepted++;
			i++;
			break;
		}
		usleep(100);
	}
	for (uint64_t k = 0; k < 1000; k++, i++) {
		if (one_event(w, i) == 0)
			accepted++;
	}
	ASSERT_OK(mp_writer__finish(w), "finish");
	ASSERT_OK(memprof_writer__close(w), "close");
	pthread_join(th, NULL);
	alarm(0);
	close(p[0]);
	ASSERT_EQ(count_allocs(d.buf, d.len, NULL, 0), (long)accepted,
		  "the trace holds exactly the accepted events");
	free(d.buf);
}

static void test_stuck_plain(void)
{
	stuck_output(0);
}

static void test_stuck_zstd(void)
{
	stuck_output(1);
}

/* ENOSPC: named with its time; later calls fail with it; the file stays what it was. */
static void test_enospc(void)
{
	struct memprof_writer *w;
	uint64_t since = 0, lost = 0, t0 = (uint64_t)time(NULL) * 1000000;
	int fd = open("/dev/full", O_WRONLY | O_CLOEXEC), r = 0;

	if (!ASSERT_TRUE(fd >= 0, "/dev/full"))
		return;
	w = mp_writer__new_async(fd, QUEUE, &info, NULL);
	if (!ASSERT_TRUE(w != NULL, "new"))
		return;
	for (uint64_t i = 0; i < 1000000 && !r; i++) {
		r = one_event(w, i);
		if (r == -EAGAIN) {
			usleep(100);
			r = 0;
		}
	}
	ASSERT_EQ(r, -ENOSPC, "the calls fail with the file's error");
	ASSERT_EQ(mp_writer__output_error(w, &since, &lost), ENOSPC, "ENOSPC named");
	ASSERT_TRUE(since >= t0 && since < t0 + 120000000, "since when");
	ASSERT_TRUE(lost > 0, "bytes lost counted");
	ASSERT_EQ(memprof_writer__close(w), -ENOSPC, "close says so");
}

/* The context's tail is patched in place at the end, on a write-only fd, sync and async. */
static void patch(bool async)
{
	const char *path = tmp_path(async ? "patch-async.ctf" : "patch-sync.ctf");
	char ctx[256], want[256], *buf;
	struct memprof_writer *w;
	struct stat st;
	long n;
	int fd;

	unlink(path);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (!ASSERT_TRUE(fd >= 0, "create"))
		return;
	w = mp_writer__new_async(fd, async ? QUEUE : 0, &info, NULL);
	if (!ASSERT_TRUE(w != NULL, "new"))
		return;
	for (uint64_t i = 0; i < 5000; i++)
		if (!ASSERT_OK(one_event(w, i), "event"))
			break;
	ASSERT_OK(mp_writer__patch_context_tail(w, "lost=7", 6), "patch");
	ASSERT_EQ(mp_writer__patch_context_tail(w, "x", 1000), -EINVAL, "longer than the context");
	ASSERT_OK(memprof_writer__close(w), "close");
	stat(path, &st);
	buf = malloc((size_t)st.st_size);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	ASSERT_EQ(read(fd, buf, (size_t)st.st_size), st.st_size, "read");
	close(fd);
	n = count_allocs(buf, (size_t)st.st_size, ctx, sizeof(ctx));
	ASSERT_EQ(n, 5000, "every event");
	snprintf(want, sizeof(want), "%s", info.context);
	memcpy(want + strlen(want) - 6, "lost=7", 6);
	ASSERT_STREQ(ctx, want, "patched in place");
	free(buf);
}

static void test_patch_sync(void)
{
	patch(false);
}

static void test_patch_async(void)
{
	patch(true);
}

/* Reset: the file starts over with the new trace-info; refused once an event was written. */
static void test_reset(void)
{
	const char *path = tmp_path("reset.ctf");
	struct memprof_trace_info again = info;
	struct memprof_writer *w;
	struct memprof_reader *r;
	char err[256];
	int fd;

	unlink(path);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	w = mp_writer__new_async(fd, QUEUE, &info, NULL);
	if (!ASSERT_TRUE(w != NULL, "new"))
		return;
	again.executable_name = "a-much-longer-name-after-exec";
	again.pid = 43;
	ASSERT_OK(mp_writer__reset(w, &again), "reset");
	ASSERT_OK(one_event(w, 1), "event");
	ASSERT_EQ(mp_writer__reset(w, &info), -EBUSY, "no reset after an event");
	ASSERT_OK(memprof_writer__close(w), "close");
	r = memprof_reader__open(path, NULL, err, sizeof(err));
	if (!ASSERT_TRUE(r != NULL, err))
		return;
	ASSERT_STREQ(memprof_reader__info(r)->executable_name, again.executable_name, "new info");
	ASSERT_EQ(memprof_reader__info(r)->pid, 43, "new pid");
	memprof_reader__free(r);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	RUN(test_stuck_plain);
	RUN(test_stuck_zstd);
	RUN(test_enospc);
	RUN(test_patch_sync);
	RUN(test_patch_async);
	RUN(test_reset);
	return test_exit();
}
