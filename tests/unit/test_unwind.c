// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Unwinding copied stacks: this process' own (a chain built without frame pointers, one built
 * without CFI), and Debian's /usr/bin/python3 (no frame pointers) stopped with ptrace at random
 * points of a workload, as BPF would copy it at a probe: registers ip/sp/bp and the stack
 * window from sp. Also measures how much stack reaching the outermost frame needs.
 */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon/stacks/symbolize.h"
#include "daemon/stacks/unwind.h"
#include "tests/unit/test.h"
#include "tests/unit/unwind_helper.h"

#define STACK_COPY	(512 * 1024)
#define MAX_FRAMES	128
#define DEEP_FRAMES	1024

struct mapping {
	unsigned long long lo, hi, off;
	char perms[8], file[4096];
};

/* @match's value for the first mapping of @pid for which it is not 0, or 0. */
static uint64_t maps_find(pid_t pid, uint64_t (*match)(const struct mapping *m, const char *arg),
			  const char *arg)
{
	char path[64], line[4200];
	uint64_t r = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "re");
	while (f && !r && fgets(line, sizeof(line), f)) {
		struct mapping m = { .file = "" };

		if (sscanf(line, "%llx-%llx %7s %llx %*s %*s %4095s", &m.lo, &m.hi, m.perms, &m.off,
			   m.file) >= 4)
			r = match(&m, arg);
	}
	if (f)
		fclose(f);
	return r;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);

	return n >= k && !strcmp(s + n - k, suffix);
}

static uint64_t end_if_stack(const struct mapping *m, const char *arg)
{
	(void)arg;
	return !strcmp(m->file, "[stack]") ? m->hi : 0;
}

static uint64_t base_if_object(const struct mapping *m, const char *suffix)
{
	return !m->off && ends_with(m->file, suffix) ? m->lo : 0;
}

static uint64_t middle_if_exec(const struct mapping *m, const char *suffix)
{
	return m->perms[2] == 'x' && ends_with(m->file, suffix) ? m->lo + (m->hi - m->lo) / 2 : 0;
}

/* End of the [stack] mapping of @pid. */
static uint64_t stack_end(pid_t pid)
{
	return maps_find(pid, end_if_stack, NULL);
}

/* Base address of the object mapped from a path ending in @suffix (offset 0) in @pid. */
static uint64_t object_base(pid_t pid, const char *suffix)
{
	return maps_find(pid, base_if_object, suffix);
}

/* The middle of @pid's first executable mapping of a path ending in @suffix, or 0. */
static uint64_t exec_mapping(pid_t pid, const char *suffix)
{
	return maps_find(pid, middle_if_exec, suffix);
}

struct symframe {
	const char *name;	/* innermost location's function */
	const char *file;
	unsigned int line;
};

/* Symbolize @n frames (frame 0 exact, the others return addresses), innermost first. */
static void symbolize(struct mp_symbolizer *s, pid_t pid, const uint64_t *frames, unsigned int n,
		      struct symframe *out, bool print)
{
	for (unsigned int i = 0; i < n; i++) {
		struct mp_frame f;

		out[i] = (struct symframe){ "?", "?", 0 };
		if (mp_symbolizer__resolve(s, pid, frames[i], i > 0, &f) || !f.nlocs)
			continue;
		out[i].name = f.locs[f.nlocs - 1].defname;
		out[i].file = f.locs[f.nlocs - 1].filename;
		out[i].line = f.locs[f.nlocs - 1].line;
		if (print)
			fprintf(stderr, "  #%-2u 0x%012" PRIx64 " %s (%s:%u)\n", i, frames[i],
				out[i].name, out[i].file, out[i].line);
	}
}

static int find_frame(const struct symframe *sf, unsigned int n, const char *name)
{
	for (unsigned int i = 0; i < n; i++)
		if (!strcmp(sf[i].name, name))
			return (int)i;
	return -1;
}

/*
 * UW_TEST(name) { body }: a test whose body gets a fresh symbolizer @s and unwinder @u, freed
 * after it returns. Not inlined: the chains' unwinds must reach main's own frame.
 */
typedef void uw_body_fn(struct mp_symbolizer *s, struct mp_unwinder *u);

static void with_unwinder(uw_body_fn *body)
{
	struct mp_symbolizer *s = mp_symbolizer__new();
	struct mp_unwinder *u = mp_unwinder__new(s, NULL);

	if (ASSERT_TRUE(s && u, "new"))
		body(s, u);
	mp_unwinder__free(u);
	mp_symbolizer__free(s);
}

#define UW_TEST(name)								\
	static uw_body_fn name##_body;						\
	__attribute__((noinline)) static void name(void)			\
	{									\
		with_unwinder(name##_body);					\
	}									\
	static void name##_body(struct mp_symbolizer *s, struct mp_unwinder *u)

static int (*volatile chain_cfi)(int) = mp_uw_f1;
static int (*volatile chain_fp)(int) = mp_uw_fp_f1;

/* Run @chain, which captures, then unwind and symbolize the copy. */
static unsigned int capture_and_unwind(struct mp_symbolizer *s, struct mp_unwinder *u,
				       int (*chain)(int), struct symframe *sf)
{
	uint64_t frames[MAX_FRAMES];
	unsigned int n = 0;
	struct mp_regs regs;

	mp_uw.len = 0;
	chain(1);
	if (!ASSERT_TRUE(mp_uw.len > 0, "stack copied"))
		return 0;
	regs = (struct mp_regs){ mp_uw.ip, mp_uw.sp, mp_uw.bp };
	if (!ASSERT_OK(mp_unwinder__unwind(u, getpid(), &regs, mp_uw.stack, mp_uw.len, frames,
					   MAX_FRAMES, &n), "unwind"))
		return 0;
	ASSERT_EQ(frames[0], mp_uw.ip, "frame 0 is ip");
	symbolize(s, getpid(), frames, n, sf, true);
	return n;
}

/* Run and unwind @chain: its frames #0 to #3 are @names, and main is reached. */
static bool unwind_chain(struct mp_symbolizer *s, struct mp_unwinder *u, int (*chain)(int),
			 const char *const names[4], struct symframe *sf)
{
	unsigned int n = capture_and_unwind(s, u, chain, sf);

	if (!ASSERT_TRUE(n >= 5, "frames"))
		return false;
	for (int i = 0; i < 4; i++)
		ASSERT_STREQ(sf[i].name, names[i], "frame #0 to #3");
	return ASSERT_TRUE(find_frame(sf, n, "main") > 3, "main reached");
}

/* f1 -> f2 -> f3 built -fomit-frame-pointer: CFI all the way to main. */
UW_TEST(test_cfi)
{
	static const char *const names[] = { "f3", "f2", "mp_uw_f1", "capture_and_unwind" };
	struct symframe sf[MAX_FRAMES];
	struct mp_unwinder_stats st;

	if (!unwind_chain(s, u, chain_cfi, names, sf))
		return;
	ASSERT_EQ(sf[0].line, mp_uw.line_f3, "#0 line");
	ASSERT_TRUE(strstr(sf[0].file, "unwind_helper.c") != NULL, "#0 file");
	ASSERT_EQ(sf[1].line, mp_uw.line_f2, "#1 line (call of f3)");
	ASSERT_EQ(sf[2].line, mp_uw.line_f1, "#2 line (call of f2)");
	mp_unwinder__stats(u, &st);
	ASSERT_EQ(st.complete, 1, "unwound to the outermost frame");
}

/* fp_f1 -> fp_f2 -> fp_f3 without any CFI: the frame-pointer fallback, then CFI again. */
UW_TEST(test_frame_pointers)
{
	static const char *const names[] = { "fp_f3", "fp_f2", "mp_uw_fp_f1",
					     "capture_and_unwind" };
	struct symframe sf[MAX_FRAMES];

	unwind_chain(s, u, chain_fp, names, sf);
}

/* A window too small for the whole stack: the frames inside it, counted as out of window;
 * a window of one frame's size: still frame 0 and its caller. */
UW_TEST(test_short_window)
{
	struct mp_unwinder_stats st;
	struct symframe sf[MAX_FRAMES];
	uint64_t frames[MAX_FRAMES];
	struct mp_regs regs;
	unsigned int n = 0;

	mp_uw.len = 0;
	chain_cfi(1);
	regs = (struct mp_regs){ mp_uw.ip, mp_uw.sp, mp_uw.bp };
	/* f3's frame is > 48 bytes: 256 bytes hold f3's and f2's return addresses */
	ASSERT_OK(mp_unwinder__unwind(u, getpid(), &regs, mp_uw.stack, 256, frames, MAX_FRAMES,
				      &n), "unwind 256 bytes");
	symbolize(s, getpid(), frames, n, sf, true);
	ASSERT_TRUE(n >= 2 && n < 6, "some frames");
	ASSERT_STREQ(sf[0].name, "f3", "#0");
	if (n >= 2)
		ASSERT_STREQ(sf[1].name, "f2", "#1");
	mp_unwinder__stats(u, &st);
	ASSERT_EQ(st.out_of_window, 1, "counted");
	/* @max */
	ASSERT_OK(mp_unwinder__unwind(u, getpid(), &regs, mp_uw.stack, mp_uw.len, frames, 2, &n),
		  "unwind max 2");
	ASSERT_EQ(n, 2, "max frames");
	mp_unwinder__stats(u, &st);
	ASSERT_EQ(st.truncated, 1, "truncated counted");
	ASSERT_EQ(mp_unwinder__unwind(u, getpid(), NULL, NULL, 0, frames, 2, &n), -EINVAL,
		  "no registers");
}

/*
 * Debian's python3 (built without frame pointers) running nested Python calls that allocate,
 * interrupted at random points: every sample must unwind to libc's __libc_start_call_main.
 */
static const char python_script[] =
	"import sys\n"
	"def leaf(n):\n"
	"    return [str(i) * 3 for i in range(n)]\n"
	"def mid(n):\n"
	"    return {i: leaf(n) for i in range(4)}\n"
	"def top(n):\n"
	"    return sorted(mid(n).items(), key=lambda kv: len(kv[1]))\n"
	"sys.stdout.write('ready\\n'); sys.stdout.flush()\n"
	"while True:\n"
	"    top(200)\n";

/* SIGKILL @pid and reap it, then close @fd (its stdout). */
static void stop_child(pid_t pid, int fd)
{
	int status;

	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	close(fd);
}

/*
 * Start python3 -c @script [@arg] with its stdout on a pipe; once it wrote its first byte,
 * seize it with ptrace if @seize. Returns its pid (*@fd the pipe) or -1, the child gone.
 */
static pid_t start_python(const char *script, const char *arg, bool seize, int *fd)
{
	int pipefd[2];
	pid_t pid;
	char c;

	if (!ASSERT_OK(pipe(pipefd), "pipe"))
		return -1;
	pid = fork();
	if (pid == 0) {
		dup2(pipefd[1], 1);
		close(pipefd[0]);
		execl("/usr/bin/python3", "python3", "-c", script, arg, (char *)NULL);
		_exit(127);
	}
	close(pipefd[1]);
	*fd = pipefd[0];
	if (pid > 0 && ASSERT_TRUE(read(pipefd[0], &c, 1) == 1, "python started") &&
	    (!seize || ASSERT_OK(ptrace(PTRACE_SEIZE, pid, 0, 0) ? -errno : 0, "PTRACE_SEIZE")))
		return pid;
	stop_child(pid, pipefd[0]);
	return -1;
}

/*
 * Copy @pid's stack from @ur's sp to the end of its [stack] mapping (at most STACK_COPY bytes)
 * into @stack, as BPF copies it at a probe; *@regs the registers that go with it. Returns the
 * bytes copied or a negative number.
 */
static ssize_t copy_stack(pid_t pid, const struct user_regs_struct *ur, unsigned char *stack,
			  struct mp_regs *regs)
{
	uint64_t end = stack_end(pid);
	ssize_t len = end > ur->rsp ? (ssize_t)(end - ur->rsp) : 0;
	struct iovec local, remote;

	*regs = (struct mp_regs){ ur->rip, ur->rsp, ur->rbp };
	if (len > STACK_COPY)
		len = STACK_COPY;
	local = (struct iovec){ stack, (size_t)len };
	remote = (struct iovec){ (void *)(uintptr_t)ur->rsp, (size_t)len };
	return process_vm_readv(pid, &local, 1, &remote, 1, 0);
}

UW_TEST(test_python)
{
	static unsigned char stack[STACK_COPY], last_stack[STACK_COPY];
	uint64_t used_max = 0, used_sum = 0, last[MAX_FRAMES], again[MAX_FRAMES];
	unsigned int ok = 0, samples = 0, nlast = 0, n2 = 0;
	struct mp_regs last_regs = { 0 };
	size_t last_len = 0;
	int fd, status, r;
	pid_t pid = start_python(python_script, NULL, true, &fd);

	if (pid < 0)
		return;
	for (int i = 0; i < 40; i++) {
		struct timespec ts = { 0, 2000000 + 137000 * i };	/* let it run a little */
		struct user_regs_struct ur;
		struct symframe sf[MAX_FRAMES];
		uint64_t frames[MAX_FRAMES];
		struct mp_unwinder_stats st;
		unsigned int n = 0;
		struct mp_regs regs;
		ssize_t len;

		nanosleep(&ts, NULL);
		if (ptrace(PTRACE_INTERRUPT, pid, 0, 0) || waitpid(pid, &status, 0) != pid)
			break;
		if (ptrace(PTRACE_GETREGS, pid, 0, &ur))
			break;
		len = copy_stack(pid, &ur, stack, &regs);
		if (len > 0 && !mp_unwinder__unwind(u, pid, &regs, stack, (size_t)len, frames,
						    MAX_FRAMES, &n)) {
			samples++;
			mp_unwinder__stats(u, &st);
			symbolize(s, pid, frames, n, sf, false);
			if (find_frame(sf, n, "__libc_start_call_main") > 0) {
				ok++;
				memcpy(last, frames, n * sizeof(frames[0]));
				nlast = n;
				last_regs = regs;
				last_len = (size_t)len;
				memcpy(last_stack, stack, last_len);
				used_sum += st.last_stack_used;
				if (st.last_stack_used > used_max)
					used_max = st.last_stack_used;
			} else {
				fprintf(stderr, "sample %d: not unwound to the start:\n", i);
				symbolize(s, pid, frames, n, sf, true);
			}
		}
		ptrace(PTRACE_CONT, pid, 0, 0);
	}
	fprintf(stderr, "python3: %u/%u samples unwound to __libc_start_call_main; stack needed: "
		"mean %" PRIu64 " max %" PRIu64 " bytes\n", ok, samples,
		ok ? used_sum / ok : 0, used_max);
	ASSERT_TRUE(samples >= 20, "samples taken");
	ASSERT_EQ(ok, samples, "all unwound");
	stop_child(pid, fd);
	/*
	 * Events are processed after the process exited: the last stack unwinds the same, with
	 * the session held and with a new one built from the symbolizer's snapshot.
	 */
	if (nlast && ok == samples) {
		for (int k = 0; k < 2; k++) {
			if (k == 1)
				mp_unwinder__forget(u, pid);
			r = mp_unwinder__unwind(u, pid, &last_regs, last_stack, last_len, again,
						MAX_FRAMES, &n2);
			if (!ASSERT_OK(r, "unwind after exit"))
				break;
			ASSERT_EQ(n2, nlast, "same frame count after exit");
			ASSERT_TRUE(!memcmp(again, last, nlast * sizeof(last[0])),
				    "same frames after exit");
		}
	}
}

/*
 * What a uprobe on malloc sees: Debian's python3 stopped by a breakpoint at libc's malloc entry
 * (registers at function entry), for scripts that allocate at several depths of Python and C
 * recursion. Every stop must unwind to __libc_start_call_main; prints the stack bytes needed.
 */
static const char python_deep_script[] =
	"import sys, json\n"
	"def rec(n):\n"
	"    if n == 0:\n"
	"        return [bytearray(600 + i) for i in range(8)]\n"
	"    return list(map(rec, [n - 1]))[0]\n"  /* each level goes through C (map, list) */
	"def walk(o, d):\n"
	"    return json.loads(json.dumps(o)) if d == 0 else walk([o], d - 1)\n"
	"sys.stdout.write('ready\\n'); sys.stdout.flush()\n"
	"while True:\n"
	"    rec(int(sys.argv[1]))\n"
	"    walk({'k': 'v' * 700}, 20)\n";

static void python_at_malloc(const char *depth, unsigned int want)
{
	struct mp_symbolizer *s = mp_symbolizer__new();
	struct mp_unwinder *u = mp_unwinder__new(s, NULL);
	static unsigned char stack[STACK_COPY];
	uint64_t used_max = 0, used_sum = 0, frames_max = 0, addr, my_malloc;
	unsigned int ok = 0, samples = 0;
	double unwind_s = 0;
	int fd, status;
	long orig;
	Dl_info dli;
	void *h;
	pid_t pid;

	h = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	my_malloc = (uintptr_t)(h ? dlsym(h, "malloc") : NULL);
	if (h)
		dlclose(h);
	if (!ASSERT_TRUE(s && u && my_malloc, "setup") ||
	    !ASSERT_TRUE(dladdr((void *)(uintptr_t)my_malloc, &dli), "dladdr malloc"))
		goto out;
	pid = start_python(python_deep_script, depth, true, &fd);
	if (pid < 0)
		goto out;
	if (ptrace(PTRACE_INTERRUPT, pid, 0, 0) || waitpid(pid, &status, 0) != pid)
		goto kill;
	/* the same libc file as ours: same offset of malloc */
	addr = object_base(pid, "/libc.so.6");
	if (!ASSERT_TRUE(addr, "libc base in python"))
		goto kill;
	addr += my_malloc - (uintptr_t)dli.dli_fbase;
	errno = 0;
	orig = ptrace(PTRACE_PEEKTEXT, pid, addr, 0);
	if (!ASSERT_OK(errno ? -errno : 0, "PEEKTEXT malloc"))
		goto kill;
	while (samples < want) {
		struct user_regs_struct ur;
		static struct symframe sf[DEEP_FRAMES];
		static uint64_t frames[DEEP_FRAMES];
		struct mp_unwinder_stats st;
		unsigned int n = 0;
		struct timespec t0, t1;
		struct mp_regs regs;
		ssize_t len;
		int r;

		if (ptrace(PTRACE_POKETEXT, pid, addr, (orig & ~0xffL) | 0xcc) ||
		    ptrace(PTRACE_CONT, pid, 0, 0) || waitpid(pid, &status, 0) != pid ||
		    !WIFSTOPPED(status) || WSTOPSIG(status) != SIGTRAP ||
		    ptrace(PTRACE_GETREGS, pid, 0, &ur) || ur.rip != addr + 1)
			break;
		ur.rip = addr;
		len = copy_stack(pid, &ur, stack, &regs);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		r = len > 0 ? mp_unwinder__unwind(u, pid, &regs, stack, (size_t)len, frames,
						  DEEP_FRAMES, &n) : -EIO;
		clock_gettime(CLOCK_MONOTONIC, &t1);
		unwind_s += (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
		if (!r) {
			samples++;
			mp_unwinder__stats(u, &st);
			symbolize(s, pid, frames, n, sf, false);
			if (find_frame(sf, n, "__libc_start_call_main") > 0 &&
			    strstr(sf[0].name, "malloc")) {
				ok++;
				used_sum += st.last_stack_used;
				if (st.last_stack_used > used_max)
					used_max = st.last_stack_used;
				if (n > frames_max)
					frames_max = n;
			} else {
				fprintf(stderr, "sample %u: not unwound to the start:\n", samples);
				symbolize(s, pid, frames, n, sf, true);
			}
		}
		/* step over the breakpoint with the original instruction */
		if (ptrace(PTRACE_SETREGS, pid, 0, &ur) ||
		    ptrace(PTRACE_POKETEXT, pid, addr, orig) ||
		    ptrace(PTRACE_SINGLESTEP, pid, 0, 0) || waitpid(pid, &status, 0) != pid)
			break;
	}
	fprintf(stderr, "python3 at malloc, recursion %s: %u/%u unwound to __libc_start_call_main;"
		" up to %" PRIu64 " frames; stack needed: mean %" PRIu64 " max %" PRIu64
		" bytes; %.1f us per unwind\n", depth, ok, samples, frames_max,
		ok ? used_sum / ok : 0, used_max, samples ? unwind_s / samples * 1e6 : 0.0);
	ASSERT_EQ(samples, want, "samples taken");
	ASSERT_EQ(ok, samples, "all unwound");
kill:
	stop_child(pid, fd);
out:
	mp_unwinder__free(u);
	mp_symbolizer__free(s);
}

static void test_python_malloc(void)
{
	python_at_malloc("1", 200);
	python_at_malloc("30", 200);
}

/* Whether this process may ptrace its children (Yama, seccomp, containers may forbid it). */
static bool can_ptrace_children(void)
{
	pid_t pid = fork();
	int status, r;

	if (pid == 0) {
		pause();
		_exit(0);
	}
	if (pid < 0)
		return false;
	r = ptrace(PTRACE_SEIZE, pid, 0, 0);
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return r == 0;
}

/*
 * AUTO's judgement (mp_unwinder__frame_pointers): this test program is built with frame
 * pointers (the Makefile's BASE_CFLAGS); Debian's libc and python3 are not; an address in no
 * mapping is what a frame-pointer walk through code without them finds.
 */
UW_TEST(test_fp_judgement)
{
	struct mp_unwinder_stats st;
	uint64_t libc = exec_mapping(getpid(), "/libc.so.6"), py;
	pid_t pid;
	int fd;

	ASSERT_EQ(mp_unwinder__frame_pointers(u, getpid(), (uint64_t)(uintptr_t)test_cfi), 1,
		  "this program keeps frame pointers");
	ASSERT_TRUE(libc != 0, "libc mapped");
	ASSERT_EQ(mp_unwinder__frame_pointers(u, getpid(), libc), 0, "libc does not");
	ASSERT_EQ(mp_unwinder__frame_pointers(u, getpid(), 0x10), 0, "no mapping: untrusted");
	ASSERT_EQ(mp_unwinder__frame_pointers(u, getpid(), libc), 0, "libc again (cached)");
	mp_unwinder__stats(u, &st);
	ASSERT_EQ(st.objects_judged, 2, "each object judged once");
	ASSERT_EQ(st.objects_without_fp, 1, "one without frame pointers");
	if (access("/usr/bin/python3", X_OK))
		return;
	pid = start_python("import sys, time; print('x', flush=True); time.sleep(10)", NULL,
			   false, &fd);
	if (pid < 0)
		return;
	py = exec_mapping(pid, "/python3.11");
	if (!py)
		py = exec_mapping(pid, "/python3");
	ASSERT_TRUE(py != 0, "python3 mapped");
	ASSERT_EQ(mp_unwinder__frame_pointers(u, pid, py), 0, "python3 does not");
	stop_child(pid, fd);
}

int main(void)
{
	mp_uw.stack = malloc(STACK_COPY);
	mp_uw.cap = mp_uw.stack ? STACK_COPY : 0;
	mp_uw_stack_end = stack_end(getpid());
	RUN(test_cfi);
	RUN(test_frame_pointers);
	RUN(test_short_window);
	RUN(test_fp_judgement);
	if (access("/usr/bin/python3", X_OK) || !can_ptrace_children()) {
		printf("SKIP: test_python (needs /usr/bin/python3 and ptrace)\n");
		printf("SKIP: test_python_malloc (needs /usr/bin/python3 and ptrace)\n");
	} else {
		RUN(test_python);
		RUN(test_python_malloc);
	}
	free(mp_uw.stack);
	return test_exit();
}
