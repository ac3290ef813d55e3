/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A synthetic event source for the engine's unit tests (tests/unit/test_engine*.c): ring records
 * built here are queued and handed to mp_engine__feed() when the engine consumes; the per-process
 * control the engine asks of its source is kept in a small table the tests read back. The
 * processes named are real ones, children of the test that really allocate the blocks the
 * records describe, so the engine reads their /proc entries and maps as it would the real ones'.
 */
#ifndef MP_TEST_ENGINE_H
#define MP_TEST_ENGINE_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <memprof/trace.h>

#include "daemon/engine/engine.h"
#include "tests/unit/test.h"

#define FAKE_PROCS	16
#define FAKE_QUEUE	(1 << 20)
#define CHILD_BLOCKS	8

struct fake_proc {
	pid_t pid;
	bool has_cfg;
	struct mp_proc_cfg cfg;
	unsigned int attaches, detaches;
	int mode;			/* enum mp_proc_mode once attached, else -ENOENT */
};

struct fake_source {
	struct fake_proc procs[FAKE_PROCS];
	unsigned int nprocs;
	int attach_mode;		/* the mode an attach gives a process */
	uint8_t *queue;
	size_t qlen;
	uint64_t stats[MP_STAT__MAX];
	unsigned int consumed;		/* records delivered, all rounds */
};

static struct fake_source fake;

static struct fake_proc *fake_proc(pid_t pid, bool create)
{
	for (unsigned int i = 0; i < fake.nprocs; i++)
		if (fake.procs[i].pid == pid)
			return &fake.procs[i];
	if (!create || fake.nprocs == FAKE_PROCS)
		return NULL;
	fake.procs[fake.nprocs] = (struct fake_proc){ .pid = pid, .mode = -ENOENT };
	return &fake.procs[fake.nprocs++];
}

static int fake_consume(void *ctx, struct mp_engine *e, uint64_t max_ns)
{
	size_t off = 0;
	int n = 0;

	(void)ctx;
	(void)max_ns;
	while (off < fake.qlen) {
		size_t size;

		memcpy(&size, fake.queue + off, sizeof(size));
		mp_engine__feed(e, fake.queue + off + sizeof(size), size);
		off += sizeof(size) + ((size + 7) & ~(size_t)7);
		n++;
	}
	fake.qlen = 0;
	fake.consumed += (unsigned int)n;
	return n;
}

static int fake_fd(void *ctx)
{
	(void)ctx;
	return -1;
}

static int fake_proc_set(void *ctx, pid_t pid, const struct mp_proc_cfg *cfg)
{
	struct fake_proc *f = fake_proc(pid, true);

	(void)ctx;
	if (!f)
		return -ENOSPC;
	f->cfg = *cfg;
	f->has_cfg = true;
	return 0;
}

static int fake_proc_get(void *ctx, pid_t pid, struct mp_proc_cfg *cfg)
{
	struct fake_proc *f = fake_proc(pid, false);

	(void)ctx;
	if (!f || !f->has_cfg)
		return -ENOENT;
	*cfg = f->cfg;
	return 0;
}

static int fake_proc_del(void *ctx, pid_t pid)
{
	struct fake_proc *f = fake_proc(pid, false);

	(void)ctx;
	if (!f || !f->has_cfg)
		return -ENOENT;
	f->has_cfg = false;
	return 0;
}

/* Like the loader: a process that does not exist cannot be probed. */
static int fake_attach(void *ctx, pid_t pid, char *why, size_t why_len)
{
	char path[64];
	struct fake_proc *f;

	(void)ctx;
	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	if (access(path, F_OK)) {
		if (why)
			snprintf(why, why_len, "no process %d", (int)pid);
		return -ESRCH;
	}
	f = fake_proc(pid, true);
	if (!f)
		return -ENOSPC;
	f->attaches++;
	f->mode = fake.attach_mode;
	return 1;
}

static int fake_attach_exec(void *ctx, pid_t pid, char *why, size_t why_len)
{
	return fake_attach(ctx, pid, why, why_len);
}

/* Targets the engine watches: the last call's arguments, and the watches in place. */
static struct {
	int kind;
	uint64_t a, b;
	uint32_t profile;
	unsigned int calls, active;
} fake_watch_state;

static int fake_watch(void *ctx, int kind, uint64_t a, uint64_t b, uint32_t profile)
{
	(void)ctx;
	fake_watch_state.kind = kind;
	fake_watch_state.a = a;
	fake_watch_state.b = b;
	fake_watch_state.profile = profile;
	fake_watch_state.calls++;
	if (profile)
		fake_watch_state.active++;
	else if (fake_watch_state.active)
		fake_watch_state.active--;
	return 0;
}

static int fake_detach(void *ctx, pid_t pid)
{
	struct fake_proc *f = fake_proc(pid, false);

	(void)ctx;
	if (f)
		f->detaches++;
	return 0;
}

static int fake_mode(void *ctx, pid_t pid)
{
	struct fake_proc *f = fake_proc(pid, false);

	(void)ctx;
	return f ? f->mode : -ENOENT;
}

static int fake_preload_stats(void *ctx, pid_t pid, uint64_t *out, size_t n)
{
	(void)ctx;
	(void)pid;
	memset(out, 0, n * sizeof(*out));
	return (int)n;
}

static int fake_preload_pull(void *ctx, pid_t pid, void *buf, size_t len, bool last)
{
	(void)ctx;
	(void)pid;
	(void)buf;
	(void)len;
	(void)last;
	return 0;
}

static int fake_proc_hits(void *ctx, pid_t pid, struct mp_proc_hits *out)
{
	(void)ctx;
	(void)pid;
	memset(out, 0, sizeof(*out));
	return 0;
}

static void fake_hit_costs(void *ctx, uint64_t *entry_ns, uint64_t *return_ns)
{
	(void)ctx;
	*entry_ns = 500;
	*return_ns = 300;
}

static int fake_stats(void *ctx, uint64_t out[MP_STAT__MAX])
{
	(void)ctx;
	memcpy(out, fake.stats, sizeof(fake.stats));
	return 0;
}

static const char *fake_mechanisms(void *ctx)
{
	(void)ctx;
	return "synthetic records";
}

static const struct mp_engine_source fake_source_ops = {
	.consume = fake_consume,
	.fd = fake_fd,
	.proc_set = fake_proc_set,
	.proc_get = fake_proc_get,
	.proc_del = fake_proc_del,
	.attach = fake_attach,
	.attach_exec = fake_attach_exec,
	.detach = fake_detach,
	.mode = fake_mode,
	.preload_stats = fake_preload_stats,
	.preload_pull = fake_preload_pull,
	.proc_hits = fake_proc_hits,
	.hit_costs = fake_hit_costs,
	.stats = fake_stats,
	.mechanisms = fake_mechanisms,
	.watch = fake_watch,
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void queue_record(const void *rec, size_t size)
{
	if (fake.qlen + sizeof(size) + size + 8 > FAKE_QUEUE) {
		fprintf(stderr, "synthetic record queue full\n");
		abort();
	}
	memcpy(fake.queue + fake.qlen, &size, sizeof(size));
	memcpy(fake.queue + fake.qlen + sizeof(size), rec, size);
	fake.qlen += sizeof(size) + ((size + 7) & ~(size_t)7);
}

static struct mp_event_hdr hdr(uint32_t type, uint32_t profile, pid_t pid, pid_t tid)
{
	return (struct mp_event_hdr){ .type = type, .pid = (uint32_t)pid, .tid = (uint32_t)tid,
				      .profile = profile, .time_ns = mono_ns() };
}

/* The image alloc records say they were taken in (mp_alloc_event.start_stack), 0: unknown. */
static uint64_t queue_image;

/* An alloc record as the return probe sends it: only the valid frames. */
static void queue_alloc(uint32_t profile, pid_t pid, pid_t tid, uint64_t addr, uint64_t size,
			uint64_t remaining, const uint64_t *frames, unsigned int nframes)
{
	struct mp_alloc_event ev = { .h = hdr(MP_EV_ALLOC, profile, pid, tid), .addr = addr,
				     .size = size, .remaining = remaining, .kind = MP_KIND_MALLOC,
				     .nframes = nframes, .start_stack = queue_image };

	memcpy(ev.stack, frames, nframes * sizeof(frames[0]));
	queue_record(&ev, offsetof(struct mp_alloc_event, stack) + 8 * (size_t)nframes);
}

static void queue_free(uint32_t profile, pid_t pid, pid_t tid, uint64_t addr)
{
	struct mp_free_event ev = { .h = hdr(MP_EV_FREE, profile, pid, tid), .addr = addr,
				    .kind = MP_KIND_FREE };

	queue_record(&ev, sizeof(ev));
}

static void queue_proc(uint32_t type, uint32_t profile, pid_t pid, pid_t tid, pid_t other,
		       uint32_t code)
{
	struct mp_proc_event ev = { .h = hdr(type, profile, pid, tid),
				    .other_pid = (uint32_t)other, .exit_code = code };

	queue_record(&ev, sizeof(ev));
}

/*
 * A child of the test that really allocates: CHILD_BLOCKS blocks of sizes 24, 24 + 40, ...,
 * stored in a volatile sink, their addresses sent to the test, then it waits for the test to
 * close its pipe (or kill it).
 */
struct child {
	pid_t pid;
	int wait_fd;			/* the test's end: closing it lets the child exit, 'x'
					 * makes it exec /bin/sleep */
	bool exec_d;			/* it did: child_end() kills it */
	uint64_t addr[CHILD_BLOCKS];
	uint64_t size[CHILD_BLOCKS];
};

static void *volatile child_sink[CHILD_BLOCKS];

static __attribute__((noinline)) void child_allocate(int out)
{
	uint64_t addr[CHILD_BLOCKS];

	for (unsigned int i = 0; i < CHILD_BLOCKS; i++) {
		size_t size = 24 + 40 * i;
		char *b = malloc(size);

		if (!b)
			_exit(2);
		memset(b, (int)i, size);
		child_sink[i] = b;
		addr[i] = (uint64_t)(uintptr_t)b;
	}
	if (write(out, addr, sizeof(addr)) != (ssize_t)sizeof(addr))
		_exit(3);
}

/* A return address inside child_allocate(), as a frame of its allocations. */
static uint64_t child_frame(void)
{
	return (uint64_t)(uintptr_t)child_allocate + 16;
}

static bool child_start(struct child *c)
{
	int up[2], down[2];
	char b;

	if (pipe2(up, O_CLOEXEC) || pipe2(down, O_CLOEXEC))
		return false;
	c->pid = fork();
	if (c->pid < 0)
		return false;
	if (c->pid == 0) {
		/* none of the test's other pipes: another child waits for their end */
		for (int fd = 3; fd < 1024; fd++)
			if (fd != up[1] && fd != down[0])
				close(fd);
		child_allocate(up[1]);
		while (read(down[0], &b, 1) > 0)
			if (b == 'x')	/* another image (test_image_gone) */
				execl("/bin/sleep", "sleep", "60", (char *)NULL);
		for (unsigned int i = 0; i < CHILD_BLOCKS; i++)
			free(child_sink[i]);
		_exit(0);
	}
	close(up[1]);
	close(down[0]);
	c->wait_fd = down[1];
	for (unsigned int i = 0; i < CHILD_BLOCKS; i++)
		c->size[i] = 24 + 40 * i;
	if (read(up[0], c->addr, sizeof(c->addr)) != (ssize_t)sizeof(c->addr)) {
		close(up[0]);
		return false;
	}
	close(up[0]);
	return true;
}

/* Let the child exit and reap it. */
static void child_end(struct child *c)
{
	int status;

	if (c->pid <= 0)
		return;
	if (c->exec_d)
		kill(c->pid, SIGKILL);
	close(c->wait_fd);
	waitpid(c->pid, &status, 0);
	c->pid = 0;
}

/* mp_engine_opts.keep_exited of the next engine_new() (0: every process stays listed). */
static size_t fake_keep_exited;

/* A new engine on the synthetic source; the source's counters (fake.stats) are the test's. */
static struct mp_engine *engine_new(void)
{
	struct mp_engine_opts eo = { .sz = sizeof(eo), .seed = 1, .has_seed = true,
				     .source = &fake_source_ops, .keep_exited = fake_keep_exited };

	memset(fake.procs, 0, sizeof(fake.procs));
	fake.nprocs = 0;
	fake.qlen = 0;
	fake.consumed = 0;
	fake.attach_mode = MP_PROC_MODE_UPROBE;
	if (!fake.queue)
		fake.queue = malloc(FAKE_QUEUE);
	return fake.queue ? mp_engine__new(&eo) : NULL;
}

static char *tmp_path(const char *name)
{
	static char buf[4][4096];
	static unsigned int k;
	const char *tmp = getenv("MP_TMP");
	char *b = buf[k++ % 4];

	snprintf(b, sizeof(buf[0]), "%s/%s", tmp ? tmp : "/tmp", name);
	return b;
}

/* A test's engine on the synthetic source, its child A and a profile of A. */
struct fixture {
	struct mp_engine *e;
	struct mp_profile *p;
	struct child a;
	uint32_t id;			/* the profile's */
	uint64_t frame;			/* child_frame() */
	char path[1024];		/* A's trace */
	struct child b, c;		/* more children, when asked for */
};

/*
 * The profile: rate 1 (every block's multiplicity is 1 + its remaining words, exactly),
 * frame-pointer backtraces, A's trace in $MP_TMP/@name, forked children followed unless
 * @no_follow_forks; @more children (B, C) of the test besides.
 */
static bool fixture_start(struct fixture *fx, const char *name, bool no_follow_forks,
			  unsigned int more)
{
	struct mp_profile_opts po = { .sz = sizeof(po), .rate = 1.0, .out_fd = -1,
				      .unwind = MP_UNWIND_FP, .no_follow_forks = no_follow_forks };
	char err[512] = "";
	int r;

	memset(fx, 0, sizeof(*fx));
	snprintf(fx->path, sizeof(fx->path), "%s", tmp_path(name));
	po.out_path = fx->path;
	fx->e = engine_new();
	if (!ASSERT_TRUE(fx->e != NULL, "engine") || !ASSERT_TRUE(child_start(&fx->a), "child A") ||
	    (more > 0 && !ASSERT_TRUE(child_start(&fx->b), "child B")) ||
	    (more > 1 && !ASSERT_TRUE(child_start(&fx->c), "child C")))
		return false;
	r = mp_engine__start(fx->e, &po, &fx->a.pid, 1, &fx->p, err, sizeof(err));
	if (!ASSERT_OK(r, "start")) {
		fprintf(stderr, "start: %s\n", err);
		return false;
	}
	fx->id = mp_profile__id(fx->p);
	fx->frame = child_frame();
	return true;
}

/* An alloc record of child @c's block @i from its main thread, at the fixture's frame. */
static void queue_block(const struct fixture *fx, const struct child *c, unsigned int i,
			uint64_t remaining)
{
	queue_alloc(fx->id, c->pid, c->pid, c->addr[i], c->size[i], remaining, &fx->frame, 1);
}

/* Ends the children and the engine; the source's counters are reset for the next test. */
static void fixture_end(struct fixture *fx)
{
	child_end(&fx->c);
	child_end(&fx->b);
	child_end(&fx->a);
	mp_engine__free(fx->e);
	memset(fake.stats, 0, sizeof(fake.stats));
	queue_image = 0;
}

static bool proc_stats(struct mp_profile *p, pid_t pid, struct mp_proc_stats *out)
{
	struct mp_proc_stats s[8];
	size_t n = mp_profile__procs(p, s, 8);

	for (size_t i = 0; i < n && i < 8; i++)
		if (s[i].pid == pid) {
			*out = s[i];
			return true;
		}
	return false;
}

/* What a trace holds, read back with the library's reader. */
struct trace_read {
	unsigned int allocs, collects;
	uint64_t nsamples;		/* Σ over allocs */
	uint64_t words;			/* Σ length over allocs */
	uint64_t alloc_ids[64];
	uint64_t collect_ids[64];
	char first_frame[128];		/* the function of the first alloc's innermost frame */
	unsigned int no_frames;		/* allocs with an empty backtrace */
	char context[1024];
	int64_t pid;
};

static bool trace_read(const char *path, struct trace_read *t)
{
	struct memprof_reader_opts ro = { .sz = sizeof(ro) };
	struct memprof_event ev;
	struct memprof_reader *r;
	char err[256];
	int k;

	memset(t, 0, sizeof(*t));
	r = memprof_reader__open(path, &ro, err, sizeof(err));
	if (!ASSERT_TRUE(r != NULL, "trace opens"))
		return false;
	snprintf(t->context, sizeof(t->context), "%s", memprof_reader__info(r)->context);
	t->pid = (int64_t)memprof_reader__info(r)->pid;
	while ((k = memprof_reader__next(r, &ev)) > 0) {
		if (ev.type == MEMPROF_EV_ALLOC) {
			if (!t->allocs && ev.backtrace_len) {
				unsigned int nl;
				const struct memprof_location *l = memprof_reader__lookup(
					r, ev.backtrace[ev.backtrace_len - 1], &nl);

				if (l && nl)
					snprintf(t->first_frame, sizeof(t->first_frame), "%s",
						 l[nl - 1].defname);
			}
			if (!ev.backtrace_len)
				t->no_frames++;
			if (t->allocs < 64)
				t->alloc_ids[t->allocs] = ev.id;
			t->allocs++;
			t->nsamples += ev.nsamples;
			t->words += ev.length;
		} else if (ev.type == MEMPROF_EV_COLLECT) {
			if (t->collects < 64)
				t->collect_ids[t->collects] = ev.id;
			t->collects++;
		}
	}
	ASSERT_EQ(k, 0, "trace decodes to its end");
	memprof_reader__free(r);
	return k == 0;
}

#endif
