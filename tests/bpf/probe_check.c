// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * probe_check: drives the loader (daemon/probe/) against the workloads of tests/workloads/probe_wl*
 * with real uprobes and checks exactly which events arrive.
 *
 *   probe_check WLDIR SCENARIO
 *
 * Scenarios: basic, cxx, fork, exec, dlopen, threads, foreign, overflow, nolibc, sampling.
 * With MP_BPF_NO_UPROBE_MULTI=1 in the environment the loader uses perf-event uprobes. Each prints
 * "PASS: probe-<scenario>-<check>" / "FAIL: ..." lines (tests/run counts them).
 *
 * A workload is started with fd 3 (it writes one byte at each sync point) and fd 4 (it waits for
 * one byte there): the checker attaches at the first sync point and releases it.
 */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/wait.h>

#include "daemon/probe/bpf_loader.h"

static const char *wldir;
static const char *scenario;
static int failures;

static void check(bool ok, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void check(bool ok, const char *name, const char *fmt, ...)
{
	va_list ap;

	if (!ok) {
		fprintf(stdout, "  %s: ", name);
		va_start(ap, fmt);
		vfprintf(stdout, fmt, ap);
		va_end(ap);
		fputc('\n', stdout);
		failures++;
	}
	printf("%s: probe-%s-%s\n", ok ? "PASS" : "FAIL", scenario, name);
	fflush(stdout);
}

/* --- recorded events --- */

struct ev {
	uint32_t type, pid, tid, kind, nframes, other, code;
	uint64_t addr, size, remaining, time;
	uint64_t stack[8];
};

static struct ev *evs;
static size_t nevs, evcap;

static int on_event(void *ctx, const void *data, size_t size)
{
	const struct mp_event_hdr *h = data;
	struct ev e = { .type = h->type, .pid = h->pid, .tid = h->tid, .time = h->time_ns };

	if (h->type == MP_EV_ALLOC && size >= sizeof(struct mp_alloc_event)) {
		const struct mp_alloc_event *a = data;

		e.addr = a->addr;
		e.size = a->size;
		e.remaining = a->remaining;
		e.kind = a->kind;
		e.nframes = a->nframes;
		for (unsigned int i = 0; i < 8 && i < a->nframes; i++)
			e.stack[i] = a->stack[i];
	} else if (h->type == MP_EV_FREE && size >= sizeof(struct mp_free_event)) {
		const struct mp_free_event *f = data;

		e.addr = f->addr;
		e.kind = f->kind;
	} else if (size >= sizeof(struct mp_proc_event)) {
		const struct mp_proc_event *p = data;

		e.other = p->other_pid;
		e.code = p->exit_code;
	}
	if (nevs == evcap) {
		evcap = evcap ? evcap * 2 : 4096;
		evs = realloc(evs, evcap * sizeof(*evs));
		if (!evs)
			abort();
	}
	evs[nevs++] = e;
	return 0;
}

static void on_log(void *ctx, int level, const char *msg)
{
	if (level <= 6)
		fprintf(stderr, "loader: %s\n", msg);
}

static struct mp_bpf *B;

/* --- workloads --- */

struct wl {
	pid_t pid;
	int ready;	/* read end of fd 3 */
	int go;		/* write end of fd 4 */
};

/* Start @argv with the sync fds; with @hold_exec the child waits for a byte before exec. */
static int wl_start(struct wl *w, char *const argv[], bool hold_exec)
{
	int r[2], g[2];

	if (pipe2(r, O_CLOEXEC) || pipe2(g, O_CLOEXEC))
		return -errno;
	if (B)
		mp_bpf__quiesce(B);
	w->pid = fork();
	if (w->pid < 0)
		return -errno;
	if (w->pid == 0) {
		char c;

		/* via fds above 9: dup2(fd, fd) would keep O_CLOEXEC, and 3/4 may be taken */
		int wr = fcntl(r[1], F_DUPFD, 10), rd = fcntl(g[0], F_DUPFD, 10);

		if (wr < 0 || rd < 0 || dup2(wr, 3) < 0 || dup2(rd, 4) < 0)
			_exit(91);
		close(wr);
		close(rd);
		if (hold_exec && read(4, &c, 1) != 1)
			_exit(92);
		execv(argv[0], argv);
		_exit(93);
	}
	close(r[1]);
	close(g[0]);
	w->ready = r[0];
	w->go = g[1];
	return 0;
}

static bool wl_wait_ready(struct wl *w)
{
	struct pollfd p = { .fd = w->ready, .events = POLLIN };
	char c;

	return poll(&p, 1, 10000) == 1 && read(w->ready, &c, 1) == 1;
}

/* The workload's next sync point; a failed check @name if it does not come. */
static bool wl_next_sync(struct wl *w, const char *name)
{
	if (wl_wait_ready(w))
		return true;
	check(false, name, "the workload did not reach its next sync point");
	return false;
}

static void wl_release(struct wl *w)
{
	char c = 'g';

	if (write(w->go, &c, 1) != 1)
		perror("release");
}

static void wl_end(struct wl *w)
{
	close(w->ready);
	close(w->go);
	waitpid(w->pid, NULL, 0);
}

/* Consume events until an EXIT record of @pid arrived (10 s at most). */
static bool consume_until_exit(pid_t pid)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN };
	time_t end = time(NULL) + 10;
	bool done = false;

	epoll_ctl(ep, EPOLL_CTL_ADD, mp_bpf__fd(B), &ev);
	while (!done && time(NULL) < end) {
		size_t from = nevs;

		epoll_wait(ep, &ev, 1, 200);
		mp_bpf__consume(B);
		for (size_t i = from; i < nevs; i++)
			if (evs[i].type == MP_EV_EXIT && evs[i].pid == (uint32_t)pid)
				done = true;
	}
	close(ep);
	return done;
}

static struct mp_proc_cfg cfg_rate_one(uint32_t flags)
{
	struct mp_proc_cfg c = {
		.profile = 1,
		.gen = 1,
		.flags = MP_PROC_SAMPLING | MP_PROC_RATE_ONE | flags,
		.max_frames = 32,
	};

	return c;
}

static void load_funcs(pid_t pid, const char *exe);

/* Start a probe_wl-family workload, put it under @cfg, attach, release. */
/*
 * Start @argv held before its exec, attach to it with @cfg (a check "attach-before-exec"),
 * then let it exec. The exec'd image's objects are probed as the loader sees them mapped.
 */
static bool attach_then_exec(struct wl *w, char *const argv[], const struct mp_proc_cfg *cfg)
{
	char why[256];
	int n;

	if (wl_start(w, argv, true))
		return false;
	mp_bpf__proc_set(B, w->pid, cfg);
	n = mp_bpf__attach(B, w->pid, why, sizeof(why));
	check(n > 0, "attach-before-exec", "mp_bpf__attach: %d %s", n, why);
	wl_release(w);		/* exec */
	return true;
}

/* The workload's events up to its EXIT (checked), then its end. */
static void wl_finish(struct wl *w)
{
	check(consume_until_exit(w->pid), "exit", "no EXIT event");
	wl_end(w);
}

static bool start_profiled(struct wl *w, char *const argv[], const struct mp_proc_cfg *cfg)
{
	char why[512];
	int n;

	if (wl_start(w, argv, false) || !wl_wait_ready(w)) {
		check(false, "start", "workload %s did not start", argv[0]);
		return false;
	}
	if (mp_bpf__proc_set(B, w->pid, cfg)) {
		check(false, "proc-set", "mp_bpf__proc_set failed");
		return false;
	}
	n = mp_bpf__attach(B, w->pid, why, sizeof(why));
	if (n <= 0) {
		check(false, "attach", "mp_bpf__attach: %d (%s)", n, why);
		return false;
	}
	load_funcs(w->pid, argv[0]);
	wl_release(w);
	return true;
}

/* --- symbols of the workload, for stack checks --- */

struct func {
	char name[64];
	uint64_t lo, hi;	/* runtime addresses */
};

static struct func funcs[4096];
static size_t nfuncs;

/* Load the FUNC symbols named wl_* / main of @exe mapped by @pid. */
static void load_funcs(pid_t pid, const char *exe)
{
	char maps[64], line[1024], real[4096];
	uint64_t base = 0;
	bool have = false;
	Elf_Scn *scn = NULL;
	Elf *elf;
	FILE *f;
	int fd;

	nfuncs = 0;
	if (!realpath(exe, real))
		return;
	snprintf(maps, sizeof(maps), "/proc/%d/maps", pid);
	f = fopen(maps, "re");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long lo, off;
		char *p = strchr(line, '/');

		if (!p)
			continue;
		p[strcspn(p, "\n")] = 0;
		if (strcmp(p, real) || sscanf(line, "%llx-%*x %*s %llx", &lo, &off) != 2)
			continue;
		if (off == 0) {
			base = lo;
			have = true;
			break;
		}
	}
	fclose(f);
	if (!have)
		return;
	elf_version(EV_CURRENT);
	fd = open(exe, O_RDONLY | O_CLOEXEC);
	elf = elf_begin(fd, ELF_C_READ, NULL);
	while (elf && (scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_SYMTAB || !(d = elf_getdata(scn, NULL)))
			continue;
		for (size_t i = 0; i < sh.sh_size / sh.sh_entsize && nfuncs < 4096; i++) {
			GElf_Sym s;
			const char *n;

			if (!gelf_getsym(d, (int)i, &s) || GELF_ST_TYPE(s.st_info) != STT_FUNC)
				continue;
			n = elf_strptr(elf, sh.sh_link, s.st_name);
			if (!n || (strncmp(n, "wl_", 3) && strcmp(n, "main") && strncmp(n, "_Z", 2)))
				continue;
			snprintf(funcs[nfuncs].name, sizeof(funcs[nfuncs].name), "%s", n);
			funcs[nfuncs].lo = base + s.st_value;
			funcs[nfuncs].hi = base + s.st_value + s.st_size;
			nfuncs++;
		}
	}
	elf_end(elf);
	close(fd);
}

/* The workload function containing return address @ra (a return address points after the
 * call, so ra - 1 is inside the caller). */
static const char *func_of(uint64_t ra)
{
	for (size_t i = 0; i < nfuncs; i++)
		if (ra - 1 >= funcs[i].lo && ra - 1 < funcs[i].hi)
			return funcs[i].name;
	return "?";
}

static bool func_is(uint64_t ra, const char *name)
{
	const char *f = func_of(ra);

	return !strcmp(f, name) || (strstr(f, name) && !strncmp(f, "_Z", 2));
}

/* --- helpers over recorded events --- */

static size_t count(uint32_t type, uint32_t pid, uint64_t size, uint32_t kind)
{
	size_t n = 0;

	for (size_t i = 0; i < nevs; i++)
		if (evs[i].type == type && (!pid || evs[i].pid == pid) &&
		    (!size || evs[i].size == size) && (!kind || evs[i].kind == kind))
			n++;
	return n;
}

static const struct ev *find_alloc(uint32_t pid, uint64_t size)
{
	for (size_t i = 0; i < nevs; i++)
		if (evs[i].type == MP_EV_ALLOC && evs[i].pid == pid && evs[i].size == size)
			return &evs[i];
	return NULL;
}

/* Was the block allocated by @a freed afterwards (a FREE of its address, after it)? */
static const struct ev *freed(const struct ev *a)
{
	for (size_t i = (size_t)(a - evs) + 1; i < nevs; i++) {
		if (evs[i].pid != a->pid || evs[i].addr != a->addr)
			continue;
		if (evs[i].type == MP_EV_FREE)
			return &evs[i];
		if (evs[i].type == MP_EV_ALLOC)
			return NULL;
	}
	return NULL;
}

static uint64_t stat_of(enum mp_stat s)
{
	uint64_t st[MP_STAT__MAX];

	return mp_bpf__stats(B, st) ? 0 : st[s];
}

static char wl_path[4096], wl_cxx_path[4096], wl_nolibc_path[4096];

/* --- scenarios --- */

static void expect_alloc(uint32_t pid, uint64_t size, uint32_t kind, uint32_t kind2,
			 const char *caller, bool want_freed, uint32_t free_kind, const char *name)
{
	const struct ev *a = find_alloc(pid, size), *f;
	char n[96];

	snprintf(n, sizeof(n), "%s-seen", name);
	if (!a) {
		check(false, n, "no alloc event of %" PRIu64 " bytes", size);
		return;
	}
	check(count(MP_EV_ALLOC, pid, size, 0) == 1 && (a->kind == kind || a->kind == kind2), n,
	      "%zu events of %" PRIu64 " bytes, kind %u (want 1, kind %u)",
	      count(MP_EV_ALLOC, pid, size, 0), size, a->kind, kind);
	snprintf(n, sizeof(n), "%s-remaining", name);
	check(a->remaining == (size + 7) / 8, n, "remaining %" PRIu64 " want %" PRIu64,
	      a->remaining, (size + 7) / 8);
	if (caller) {
		snprintf(n, sizeof(n), "%s-stack", name);
		check(a->nframes >= 2 && func_is(a->stack[0], caller), n,
		      "stack[0] %#" PRIx64 " is in %s, want %s (%u frames)", a->stack[0],
		      func_of(a->stack[0]), caller, a->nframes);
	}
	f = freed(a);
	snprintf(n, sizeof(n), "%s-free", name);
	check(want_freed ? (f && f->kind == free_kind) : !f, n, "%s (kind %u, want %u)",
	      want_freed ? (f ? "freed with another kind" : "no free event") : "unexpected free",
	      f ? f->kind : 0, free_kind);
}

static int scenario_basic(void)
{
	char *argv[] = { wl_path, "basic", NULL };
	struct mp_proc_cfg cfg = cfg_rate_one(0);
	struct wl w;
	uint32_t pid;
	char n[32];

	if (!start_profiled(&w, argv, &cfg))
		return 1;
	pid = w.pid;
	/* second sync point: stop sampling; frees must still come */
	if (!wl_next_sync(&w, "stop-sync"))
		return 1;
	cfg.flags &= ~MP_PROC_SAMPLING;
	mp_bpf__proc_set(B, w.pid, &cfg);
	wl_release(&w);
	wl_finish(&w);

	for (int i = 0; i < 10; i++) {
		const struct ev *a = find_alloc(pid, 10001 + i);

		snprintf(n, sizeof(n), "malloc-%d", 10001 + i);
		expect_alloc(pid, 10001 + i, MP_KIND_MALLOC, 0, "wl_small", true, MP_KIND_FREE, n);
		if (i == 0 && a)
			check(func_is(a->stack[1], "basic") || func_is(a->stack[1], "main"),
			      "stack1", "stack[1] in %s, want the caller of wl_small",
			      func_of(a->stack[1]));
	}
	expect_alloc(pid, 10020, MP_KIND_CALLOC, 0, "wl_family", true, MP_KIND_FREE, "calloc");
	expect_alloc(pid, 10030, MP_KIND_MALLOC, 0, "wl_family", true, MP_KIND_REALLOC,
		     "realloc-old");
	expect_alloc(pid, 10040, MP_KIND_REALLOC, 0, "wl_family", true, MP_KIND_FREE, "realloc-new");
	expect_alloc(pid, 10050, MP_KIND_REALLOC, 0, "wl_family", true, MP_KIND_FREE,
		     "realloc-null");
	expect_alloc(pid, 10060, MP_KIND_MALLOC, 0, "wl_family", true, MP_KIND_REALLOC,
		     "realloc-zero");
	expect_alloc(pid, 10070, MP_KIND_POSIX_MEMALIGN, 0, "wl_family", true, MP_KIND_FREE,
		     "posix-memalign");
	expect_alloc(pid, 10112, MP_KIND_ALIGNED_ALLOC, 0, "wl_family", true, MP_KIND_FREE,
		     "aligned-alloc");
	/* glibc's memalign is aligned_alloc's alias: one probe, reported as aligned_alloc */
	expect_alloc(pid, 10120, MP_KIND_MEMALIGN, MP_KIND_ALIGNED_ALLOC, "wl_family", true,
		     MP_KIND_FREE, "memalign");
	expect_alloc(pid, 10130, MP_KIND_VALLOC, 0, "wl_family", true, MP_KIND_FREE, "valloc");
	/* pvalloc(10140): whole pages, 3 of them */
	expect_alloc(pid, 12288, MP_KIND_PVALLOC, 0, "wl_family", true, MP_KIND_FREE, "pvalloc");
	expect_alloc(pid, 10150, MP_KIND_REALLOCARRAY, 0, "wl_family", true, MP_KIND_FREE,
		     "reallocarray");
	expect_alloc(pid, (3u << 20) + 7 * 4096, MP_KIND_MMAP, 0, "wl_maps", true, MP_KIND_MUNMAP,
		     "mmap");
	check(count(MP_EV_ALLOC, pid, 8192, MP_KIND_MMAP) == 0, "mmap-file",
	      "a file-backed mmap was reported");
	check(count(MP_EV_ALLOC, pid, 0, 0) == count(MP_EV_ALLOC, pid, 0, 0) &&
	      !find_alloc(pid, (uint64_t)(SIZE_MAX / 2) * 4), "overflow",
	      "a calloc/reallocarray overflow was reported");
	check(count(MP_EV_ALLOC, pid, 10301, 0) == 0, "stopped",
	      "%zu allocations sampled after MP_PROC_SAMPLING was cleared",
	      count(MP_EV_ALLOC, pid, 10301, 0));
	/* every free event matches an earlier allocation of the same address */
	for (size_t i = 0; i < nevs; i++) {
		bool ok = false;

		if (evs[i].type != MP_EV_FREE || evs[i].pid != pid)
			continue;
		for (size_t j = i; j-- > 0;) {
			if (evs[j].pid == pid && evs[j].addr == evs[i].addr &&
			    (evs[j].type == MP_EV_ALLOC || evs[j].type == MP_EV_FREE)) {
				ok = evs[j].type == MP_EV_ALLOC;
				break;
			}
		}
		if (!ok) {
			check(false, "frees-matched", "free of %#" PRIx64 " matches no live block",
			      evs[i].addr);
			return 1;
		}
	}
	check(true, "frees-matched", " ");
	check(stat_of(MP_STAT_MISSED_RETURNS) == 0, "no-missed-returns", "%" PRIu64 " missed",
	      stat_of(MP_STAT_MISSED_RETURNS));
	return 0;
}

static int scenario_cxx(void)
{
	char *argv[] = { wl_cxx_path, NULL };
	struct mp_proc_cfg cfg = cfg_rate_one(0);
	struct wl w;
	uint32_t pid;

	if (!start_profiled(&w, argv, &cfg))
		return 1;
	pid = w.pid;
	wl_finish(&w);
	expect_alloc(pid, 20001, MP_KIND_NEW, 0, "wl_news", true, MP_KIND_DELETE, "new");
	expect_alloc(pid, 20002, MP_KIND_NEW, 0, "wl_news", true, MP_KIND_DELETE, "new-array");
	expect_alloc(pid, 20003, MP_KIND_NEW, 0, "wl_news", true, MP_KIND_DELETE, "new-nothrow");
	expect_alloc(pid, 20004, MP_KIND_NEW, 0, "wl_news", true, MP_KIND_DELETE,
		     "new-array-nothrow");
	expect_alloc(pid, 20005, MP_KIND_NEW, 0, "wl_news", true, MP_KIND_DELETE, "new-aligned");
	expect_alloc(pid, 20032, MP_KIND_NEW, 0, "wl_news", true, MP_KIND_DELETE, "new-type");
	expect_alloc(pid, 20006, MP_KIND_NEW, 0, "wl_news", false, 0, "new-leaked");
	check(stat_of(MP_STAT_NESTED) > 0, "nested-counted", "no nested call was seen");
	return 0;
}

static int scenario_fork(void)
{
	char *argv[] = { wl_path, "fork", NULL };
	struct mp_proc_cfg cfg = cfg_rate_one(MP_PROC_FOLLOW_FORKS);
	uint32_t pid, child = 0, code = 0;
	struct wl w;
	bool child_exit = false;

	if (!start_profiled(&w, argv, &cfg))
		return 1;
	pid = w.pid;
	wl_finish(&w);
	for (size_t i = 0; i < nevs; i++) {
		if (evs[i].type == MP_EV_FORK && evs[i].pid == pid)
			child = evs[i].other;
		if (evs[i].type == MP_EV_EXIT && child && evs[i].pid == child) {
			child_exit = true;
			code = evs[i].code;
		}
	}
	check(child != 0, "fork-event", "no FORK event from %u", pid);
	check(count(MP_EV_ALLOC, pid, 11000, MP_KIND_MALLOC) == 1, "parent-alloc",
	      "parent's malloc(11000) not seen once");
	check(count(MP_EV_ALLOC, child, 11002, MP_KIND_MALLOC) == 50, "child-allocs",
	      "%zu of the child's 50 late malloc(11002) seen", count(MP_EV_ALLOC, child, 11002, 0));
	check(count(MP_EV_ALLOC, pid, 11002, 0) == 0, "child-pid",
	      "child's allocations reported under the parent's pid");
	check(child_exit && code == (7 << 8), "child-exit", "child EXIT %s, code %#x (want 0x700)",
	      child_exit ? "seen" : "missing", code);
	/* Calls of the child before the loader attached to it are not seen: measured, not hidden */
	printf("# fork: %zu of the child's 100 immediate malloc(11001) seen (attach after FORK)\n",
	       count(MP_EV_ALLOC, child, 11001, 0));
	return 0;
}

static int scenario_exec(void)
{
	char *argv[] = { wl_path, "loop", "200", NULL };
	struct mp_proc_cfg cfg = cfg_rate_one(0);
	struct wl w;
	bool exec_seen = false;

	/* attach before exec: the new image's libc is the checker's, so it is probed at once */
	if (!attach_then_exec(&w, argv, &cfg))
		return 1;
	if (wl_wait_ready(&w))
		wl_release(&w);	/* the workload's own sync point */
	wl_finish(&w);
	for (size_t i = 0; i < nevs; i++)
		if (evs[i].type == MP_EV_EXEC && evs[i].pid == (uint32_t)w.pid)
			exec_seen = true;
	check(exec_seen, "exec-event", "no EXEC event");
	check(count(MP_EV_ALLOC, w.pid, 12001, MP_KIND_MALLOC) == 200, "allocs-after-exec",
	      "%zu of 200", count(MP_EV_ALLOC, w.pid, 12001, 0));
	return 0;
}

/* Threads join the profile through their own countdown; frees cross nothing. */
static int scenario_threads(void)
{
	char *argv[] = { wl_path, "threads", NULL };
	struct mp_proc_cfg cfg = cfg_rate_one(0);
	uint32_t tids[4] = { 0 };
	size_t texits = 0;
	struct wl w;
	bool one_tid = true;
	char why[64];

	if (!start_profiled(&w, argv, &cfg))
		return 1;
	check(mp_bpf__attach(B, w.pid, why, sizeof(why)) == 0, "attach-idempotent",
	      "a second mp_bpf__attach attached more probes");
	wl_finish(&w);
	for (int t = 0; t < 4; t++) {
		for (size_t i = 0; i < nevs; i++) {
			if (evs[i].type != MP_EV_ALLOC || evs[i].pid != (uint32_t)w.pid ||
			    evs[i].size != 13001u + t)
				continue;
			if (!tids[t])
				tids[t] = evs[i].tid;
			one_tid &= evs[i].tid == tids[t] && evs[i].tid != (uint32_t)w.pid;
			if (!freed(&evs[i]))
				one_tid = false;
		}
		if (count(MP_EV_ALLOC, w.pid, 13001 + t, MP_KIND_MALLOC) != 100) {
			check(false, "thread-allocs", "thread %d: %zu of 100", t,
			      count(MP_EV_ALLOC, w.pid, 13001 + t, 0));
			return 1;
		}
	}
	check(true, "thread-allocs", " ");
	check(one_tid, "thread-ids-and-frees",
	      "a thread's blocks came with another tid, or were not freed");
	for (size_t i = 0; i < nevs; i++)
		if (evs[i].type == MP_EV_THREAD_EXIT && evs[i].pid == (uint32_t)w.pid)
			texits++;
	check(texits == 4, "thread-exits", "%zu THREAD_EXIT events, want 4", texits);
	return 0;
}

/* Consume what is pending (the loader acts on EXEC and ld.so's rendezvous meanwhile). */
static void consume_pending(void)
{
	struct pollfd p = { .fd = mp_bpf__fd(B), .events = POLLIN };

	while (poll(&p, 1, 200) == 1)
		mp_bpf__consume(B);
}

/* Objects loaded after attach: ld.so's rendezvous makes the loader probe them. */
static int scenario_dlopen(void)
{
	char *argv[] = { wl_path, "dlopen", NULL };
	char *cxx_argv[] = { wl_cxx_path, NULL };
	struct mp_proc_cfg cfg = cfg_rate_one(0);
	struct wl w;

	/* dlopen after attach */
	if (!start_profiled(&w, argv, &cfg))
		return 1;
	if (!wl_next_sync(&w, "dlopen-sync"))
		return 1;
	consume_pending();
	wl_release(&w);
	wl_finish(&w);
	check(count(MP_EV_ALLOC, w.pid, 20777, MP_KIND_NEW) == 1, "dlopened-new",
	      "%zu events for operator new(20777) from a dlopen'd libstdc++",
	      count(MP_EV_ALLOC, w.pid, 20777, 0));

	/* exec of a C++ program after attach: libstdc++ is new in the exec'd image */
	if (!attach_then_exec(&w, cxx_argv, &cfg))
		return 1;
	if (!wl_wait_ready(&w)) {
		int st = 0;
		pid_t r = waitpid(w.pid, &st, WNOHANG);

		check(false, "exec-sync", "the C++ workload did not start (waitpid %d, status %#x)",
		      r, st);
		return 1;
	}
	consume_pending();
	wl_release(&w);
	check(consume_until_exit(w.pid), "exec-exit", "no EXIT event");
	wl_end(&w);
	check(count(MP_EV_ALLOC, w.pid, 20001, MP_KIND_NEW) == 1, "exec-new",
	      "%zu events for operator new(20001) after exec",
	      count(MP_EV_ALLOC, w.pid, 20001, 0));
	return 0;
}

static int scenario_foreign(void)
{
	char *argv[] = { wl_path, "loop", "2000", NULL };
	struct mp_proc_cfg cfg = cfg_rate_one(0);
	struct wl w, other;
	uint64_t calls0 = stat_of(MP_STAT_FOREIGN_CALLS);

	if (wl_start(&other, argv, false) || !wl_wait_ready(&other))
		return 1;
	if (!start_profiled(&w, argv, &cfg))
		return 1;
	wl_release(&other);
	wl_finish(&w);
	wl_end(&other);
	mp_bpf__consume(B);
	check(count(MP_EV_ALLOC, w.pid, 12001, MP_KIND_MALLOC) == 2000, "profiled-allocs",
	      "%zu of 2000", count(MP_EV_ALLOC, w.pid, 12001, 0));
	check(count(MP_EV_FREE, w.pid, 0, MP_KIND_FREE) >= 2000, "profiled-frees",
	      "%zu frees", count(MP_EV_FREE, w.pid, 0, 0));
	for (size_t i = 0; i < nevs; i++)
		if (evs[i].pid == (uint32_t)other.pid) {
			check(false, "no-foreign-events", "event type %u from the unprofiled %d",
			      evs[i].type, other.pid);
			return 1;
		}
	check(true, "no-foreign-events", " ");
	check(stat_of(MP_STAT_FOREIGN_CALLS) == calls0, "no-foreign-calls",
	      "%" PRIu64 " probe hits from processes without a procs entry",
	      stat_of(MP_STAT_FOREIGN_CALLS) - calls0);
	return 0;
}

static int scenario_overflow(void)
{
	char *argv[] = { wl_path, "burst", "30000", NULL };
	struct mp_proc_cfg cfg = cfg_rate_one(0);
	struct wl w;
	uint64_t drops0 = stat_of(MP_STAT_RINGBUF_DROPS), drops;
	size_t got;

	if (!start_profiled(&w, argv, &cfg))
		return 1;
	wl_end(&w);	/* waits for its exit without consuming anything */
	/* alloc/free records leave room for lifecycle records: the EXIT arrives */
	check(consume_until_exit(w.pid), "exit-kept", "the EXIT record was lost in the overflow");
	drops = stat_of(MP_STAT_RINGBUF_DROPS) - drops0;
	got = count(MP_EV_ALLOC, w.pid, 64, MP_KIND_MALLOC);
	check(drops > 0, "drops-counted", "no ring buffer drop counted (%zu events arrived)", got);
	check(got < 30000 && got > 0, "partial", "%zu of 30000 allocations arrived", got);
	printf("# overflow: %zu alloc events arrived, %" PRIu64 " records dropped\n", got, drops);
	return 0;
}

static int scenario_nolibc(void)
{
	char *argv[] = { wl_nolibc_path, NULL };
	struct mp_proc_cfg cfg = cfg_rate_one(0);
	char why[512] = "";
	struct wl w;
	int n;

	if (wl_start(&w, argv, false) || !wl_wait_ready(&w))
		return 1;
	mp_bpf__proc_set(B, w.pid, &cfg);
	n = mp_bpf__attach(B, w.pid, why, sizeof(why));
	wl_release(&w);
	wl_end(&w);
	check(n == -ENOENT, "enoent", "mp_bpf__attach returned %d, want -ENOENT", n);
	check(strstr(why, "no allocator") != NULL, "reason", "reason: '%s'", why);
	printf("# nolibc: %s\n", why);
	mp_bpf__detach(B, w.pid);
	mp_bpf__proc_del(B, w.pid);
	return 0;
}

/* The BPF countdown: each block of w words is sampled with probability 1 - (1 - rate)^w. */
static int sampling_run(double rate, long n, long size)
{
	char sn[32], ss[32];
	char *argv[] = { wl_path, "same", sn, ss, NULL };
	struct mp_proc_cfg cfg = {
		.gap_k = mp_gap_k(rate), .profile = 2, .gen = 1,
		.flags = MP_PROC_SAMPLING, .max_frames = 4,
	};
	double w = ceil(size / 8.0) + 1, p = 1 - pow(1 - rate, w), z, mean_r = 0;
	size_t k;
	struct wl w_;
	char name[64];

	snprintf(sn, sizeof(sn), "%ld", n);
	snprintf(ss, sizeof(ss), "%ld", size);
	if (!start_profiled(&w_, argv, &cfg))
		return 1;
	check(consume_until_exit(w_.pid), "exit", "no EXIT event");
	wl_end(&w_);
	k = count(MP_EV_ALLOC, w_.pid, (uint64_t)size, MP_KIND_MALLOC);
	z = ((double)k - n * p) / sqrt(n * p * (1 - p));
	snprintf(name, sizeof(name), "blocks-rate-%g-size-%ld", rate, size);
	check(fabs(z) < 4, name, "%zu of %ld blocks sampled, expected %.1f (z = %.2f)", k, n,
	      n * p, z);
	/* remaining = w - c, with c the first sample point in the block: E[c | c <= w] */
	for (size_t i = 0; i < nevs; i++)
		if (evs[i].type == MP_EV_ALLOC && evs[i].pid == (uint32_t)w_.pid &&
		    evs[i].size == (uint64_t)size)
			mean_r += evs[i].remaining;
	printf("# sampling rate %g size %ld: %zu/%ld sampled (z %.2f), mean remaining %.1f\n",
	       rate, size, k, n, z, k ? mean_r / k : 0);
	snprintf(name, sizeof(name), "remaining-rate-%g", rate);
	{
		/* E[c | c <= w] for c ~ Geometric(rate) */
		double q = 1 - rate, ec = 0, pc = 0;

		for (int c = 1; c <= (int)w; c++) {
			double pr = pow(q, c - 1) * rate;

			ec += c * pr;
			pc += pr;
		}
		ec /= pc;
		check(k == 0 || fabs(mean_r / k - (w - ec)) < 4 * w / sqrt((double)k), name,
		      "mean remaining %.2f, expected %.2f", mean_r / k, w - ec);
	}
	return 0;
}

static int scenario_sampling(void)
{
	sampling_run(0.01, 20000, 1000);
	sampling_run(0.001, 20000, 1000);
	return 0;
}


static const struct {
	const char *name;
	int (*run)(void);
} scenarios[] = {
	{ "basic", scenario_basic },
	{ "cxx", scenario_cxx },
	{ "fork", scenario_fork },
	{ "exec", scenario_exec },
	{ "threads", scenario_threads },
	{ "dlopen", scenario_dlopen },
	{ "foreign", scenario_foreign },
	{ "overflow", scenario_overflow },
	{ "nolibc", scenario_nolibc },
	{ "sampling", scenario_sampling },
};

int main(int argc, char **argv)
{
	bool found;
	int ret;

	if (argc != 3) {
		fprintf(stderr, "usage: probe_check WLDIR SCENARIO\n");
		return 2;
	}
	wldir = argv[1];
	scenario = argv[2];
	snprintf(wl_path, sizeof(wl_path), "%s/probe_wl", wldir);
	snprintf(wl_cxx_path, sizeof(wl_cxx_path), "%s/probe_wl_cxx", wldir);
	snprintf(wl_nolibc_path, sizeof(wl_nolibc_path), "%s/probe_wl_nolibc", wldir);
	B = mp_bpf__open(on_event, NULL);
	if (!B) {
		fprintf(stderr, "mp_bpf__open: %s\n", strerror(errno));
		return errno == EPERM ? 77 : 1;
	}
	mp_bpf__set_log(B, on_log, NULL);
	{
		struct mp_bpf_counters c;

		mp_bpf__counters(B, &c);
		printf("# probes: %s\n", c.uprobe_session ? "uprobe session links" :
		       c.uprobe_multi ? "uprobe_multi links" : "perf-event uprobes");
		printf("# probe cost: %" PRIu64 " ns per entry, %" PRIu64 " ns per return (%s)\n",
		       c.entry_cost_ns, c.return_cost_ns, c.cost_calibrated ? "calibrated" : "default");
		if (getenv("MP_BPF_NO_UPROBE_MULTI"))
			check(!c.uprobe_multi, "perf-mode", "uprobe_multi used although disabled");
		if (getenv("MP_BPF_NO_SESSION"))
			check(!c.uprobe_session, "no-session-mode", "sessions used although disabled");
		if (getenv("MP_EXPECT_SESSION") && !getenv("MP_BPF_NO_UPROBE_MULTI"))
			check(c.uprobe_session, "session-mode", "uprobe sessions not used");
	}
	ret = 2;
	found = false;
	for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]) && !found; i++) {
		found = !strcmp(scenario, scenarios[i].name);
		if (found)
			ret = scenarios[i].run();
	}
	if (!found)
		fprintf(stderr, "unknown scenario '%s'\n", scenario);
	mp_bpf__free(B);
	return ret || failures ? 1 : 0;
}
