// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The symbolizer on real processes: this one (built -O2 -g with an inlined helper and a C++
 * method) and a forked child, stopped, then gone. libc symbols and libc's file:line come from
 * Debian's libc6-dbg (build-id under /usr/lib/debug).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon/stacks/symbolize.h"
#include "tests/unit/symbolize_helper.h"
#include "tests/unit/test.h"

static bool ends_with(const char *s, const char *suffix)
{
	size_t a = s ? strlen(s) : 0, b = strlen(suffix);

	return s && a >= b && !strcmp(s + a - b, suffix);
}

static void print_frame(const char *what, const struct mp_frame *f)
{
	fprintf(stderr, "%s: object %s build-id %s\n", what, f->object ? f->object : "-",
		f->build_id ? f->build_id : "-");
	for (unsigned int i = 0; i < f->nlocs; i++)
		fprintf(stderr, "  [%u] %s@%s:%u:%u\n", i, f->locs[i].defname, f->locs[i].filename,
			f->locs[i].line, f->locs[i].start_char);
}

/* Resolve @addr (a return address if @ra) in @pid into @f, printed as @what; false if not. */
static bool resolve(struct mp_symbolizer *s, pid_t pid, uint64_t addr, int ra, const char *what,
		    struct mp_frame *f)
{
	if (!ASSERT_OK(mp_symbolizer__resolve(s, pid, addr, ra, f), what))
		return false;
	print_frame(what, f);
	return true;
}

static uint64_t capture_plain(void)
{
	mp_plain_function(1);
	return (uint64_t)(uintptr_t)mp_captured_ra;
}

static uint64_t capture_inlined(void)
{
	mp_outer_function(2);
	return (uint64_t)(uintptr_t)mp_captured_ra;
}

static uint64_t capture_cxx(void)
{
	mp_call_cxx(3);
	return (uint64_t)(uintptr_t)mp_captured_ra;
}

/* libc's own malloc, not an interposer's (ASan). */
static uint64_t libc_malloc(void)
{
	void *h = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	void *p = h ? dlsym(h, "malloc") : NULL;

	if (h)
		dlclose(h);
	return (uint64_t)(uintptr_t)p;
}

/* Location @l is @defname's, at @line of a file whose path ends in @file (@what says which). */
static void check_loc(const struct memprof_location *l, const char *defname, const char *file,
		      unsigned int line, const char *what)
{
	ASSERT_STREQ(l->defname, defname, what);
	ASSERT_TRUE(ends_with(l->filename, file), what);
	ASSERT_EQ(l->line, line, what);
}

static bool check_plain(struct mp_symbolizer *s, pid_t pid, uint64_t ra)
{
	struct mp_frame f;
	char exe[4096];
	ssize_t n;

	if (!resolve(s, pid, ra, 1, "plain", &f))
		return false;
	ASSERT_EQ(f.nlocs, 1, "plain: one location");
	check_loc(&f.locs[0], "mp_plain_function", "tests/unit/symbolize_helper.c", mp_line_plain,
		  "plain: function, file and line");
	ASSERT_TRUE(f.locs[0].start_char > 0, "plain: column");
	ASSERT_TRUE(f.build_id && strlen(f.build_id) == 40, "plain: build-id");
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (ASSERT_TRUE(n > 0, "readlink /proc/self/exe")) {
		exe[n] = 0;
		ASSERT_STREQ(f.object, exe, "plain: object");
	}
	return test_ok;
}

static bool check_inlined(struct mp_symbolizer *s, pid_t pid, uint64_t ra)
{
	struct mp_frame f;

	if (!resolve(s, pid, ra, 1, "inlined", &f))
		return false;
	if (!ASSERT_EQ(f.nlocs, 2, "inlined: caller and inlined callee"))
		return false;
	check_loc(&f.locs[0], "mp_outer_function", "symbolize_helper.c", mp_line_outer,
		  "inlined: the caller first, at the call site");
	check_loc(&f.locs[1], "inlined_helper", "symbolize_helper.c", mp_line_inner,
		  "inlined: the callee last");
	return test_ok;
}

static bool check_cxx(struct mp_symbolizer *s, pid_t pid, uint64_t ra)
{
	struct mp_frame f;

	if (!resolve(s, pid, ra, 1, "c++", &f))
		return false;
	ASSERT_EQ(f.nlocs, 1, "c++: one location");
	check_loc(&f.locs[0], "ns::Class::method(int)", "symbolize_cxx.cc", mp_line_cxx,
		  "c++: demangled name, file and line");
	return test_ok;
}

static bool check_malloc(struct mp_symbolizer *s, pid_t pid, uint64_t addr)
{
	struct mp_frame f;
	const char *name;

	if (!ASSERT_TRUE(addr, "dlsym(libc, malloc)"))
		return false;
	if (!resolve(s, pid, addr, 0, "malloc", &f))
		return false;
	if (!ASSERT_TRUE(f.nlocs >= 1, "malloc: locations"))
		return false;
	name = f.locs[f.nlocs - 1].defname;
	ASSERT_TRUE(!strcmp(name, "malloc") || !strcmp(name, "__libc_malloc"), "malloc: name");
	ASSERT_TRUE(f.object && strstr(f.object, "libc.so"), "malloc: object");
	/* libc6-dbg: DWARF from /usr/lib/debug/.build-id */
	ASSERT_TRUE(ends_with(f.locs[f.nlocs - 1].filename, "malloc/malloc.c"), "malloc: file");
	ASSERT_TRUE(f.locs[f.nlocs - 1].line > 0, "malloc: line");
	return test_ok;
}

static void test_self(void)
{
	struct mp_symbolizer *s = mp_symbolizer__new();
	struct mp_symbolizer_stats st1, st2;
	struct mp_frame f1, f2;
	uint64_t ra;

	if (!ASSERT_TRUE(s, "mp_symbolizer__new"))
		return;
	ra = capture_plain();
	check_plain(s, getpid(), ra);
	check_inlined(s, getpid(), capture_inlined());
	check_cxx(s, getpid(), capture_cxx());
	check_malloc(s, getpid(), libc_malloc());

	/* A repeated address is answered from the process' cache: the same storage. */
	mp_symbolizer__stats(s, &st1);
	ASSERT_OK(mp_symbolizer__resolve(s, getpid(), ra, 1, &f1), "resolve again");
	ASSERT_OK(mp_symbolizer__resolve(s, getpid(), ra, 1, &f2), "resolve again");
	ASSERT_TRUE(f1.locs == f2.locs, "repeat: same result");
	mp_symbolizer__stats(s, &st2);
	ASSERT_EQ(st2.addr_hits, st1.addr_hits + 2, "repeat: address cache hits");
	ASSERT_EQ(st2.lookups, st1.lookups, "repeat: no new lookup");
	mp_symbolizer__free(s);
}

/* A library without debug information (Debian strips libelf; no -dbg package installed): the
 * function's name from .dynsym, the object's basename for the file, no line. */
static void test_no_debuginfo(void)
{
	struct mp_symbolizer *s = mp_symbolizer__new();
	void *h = dlopen("libelf.so.1", RTLD_NOW | RTLD_NOLOAD);
	void *fn = h ? dlsym(h, "elf_begin") : NULL;
	struct mp_frame f;

	if (h)
		dlclose(h);
	if (!ASSERT_TRUE(s && fn, "setup"))
		goto out;
	if (resolve(s, getpid(), (uintptr_t)fn + 4, 0, "elf_begin", &f)) {
		ASSERT_EQ(f.nlocs, 1, "one location");
		ASSERT_STREQ(f.locs[0].defname, "elf_begin", "name from .dynsym");
		ASSERT_TRUE(f.build_id && f.object && strstr(f.object, "/libelf"), "object");
		if (f.object)
			ASSERT_STREQ(f.locs[0].filename, strrchr(f.object, '/') + 1,
				     "object basename as file");
		ASSERT_EQ(f.locs[0].line, 0, "no line");
	}
out:
	mp_symbolizer__free(s);
}

/*
 * A stripped program with MiniDebugInfo (.gnu_debugdata, built by daemon/stacks/build.mk): a static
 * function, in no .dynsym, is named from the compressed symbol table.
 */
static void test_minidebuginfo(void)
{
	struct mp_symbolizer *s = mp_symbolizer__new();
	char exe[4096], line[64], *slash;
	unsigned long long addr = 0;
	int pipefd[2] = { -1, -1 }, status;
	struct mp_frame f;
	FILE *in = NULL;
	pid_t pid;
	ssize_t n;

	n = readlink("/proc/self/exe", exe, sizeof(exe) - 32);
	if (!ASSERT_TRUE(s && n > 0, "setup"))
		goto out;
	exe[n] = 0;
	slash = strrchr(exe, '/');
	strcpy(slash + 1, "symbolize_minidebug");
	if (!ASSERT_OK(pipe2(pipefd, O_CLOEXEC), "pipe"))
		goto out;
	pid = fork();
	if (pid == 0) {
		dup2(pipefd[1], 1);
		execl(exe, exe, (char *)NULL);
		_exit(127);
	}
	close(pipefd[1]);
	in = fdopen(pipefd[0], "r");
	if (!in)
		close(pipefd[0]);
	if (!ASSERT_TRUE(in && fgets(line, sizeof(line), in) && sscanf(line, "%llx", &addr) == 1,
			 "address from symbolize_minidebug"))
		goto kill;
	if (resolve(s, pid, addr + 1, 0, "minidebuginfo", &f)) {
		ASSERT_STREQ(f.locs[0].defname, "mp_minidebug_static_function", "name");
		ASSERT_STREQ(f.locs[0].filename, "symbolize_minidebug", "file");
	}
kill:
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	if (in)
		fclose(in);
out:
	mp_symbolizer__free(s);
}

static bool check_anon(struct mp_symbolizer *s, uint64_t addr, const char *defname)
{
	struct mp_frame f;

	if (!resolve(s, getpid(), addr, 0, "anon", &f))
		return false;
	ASSERT_EQ(f.nlocs, 1, "anon: one location");
	ASSERT_STREQ(f.locs[0].defname, defname, "anon: name");
	ASSERT_TRUE(!f.object && !f.build_id, "anon: no object");
	return test_ok;
}

/*
 * An address in anonymous executable memory (JIT) mapped after the snapshot: found by a re-read
 * on the miss, unless one happened less than reread_ms ago (then "0x...", not cached), or by an
 * explicit new snapshot. Then an address mapped nowhere.
 */
static void test_anonymous(void)
{
	struct mp_symbolizer_opts opts = { .sz = sizeof(opts), .reread_ms = 3600 * 1000 };
	struct mp_symbolizer *s = mp_symbolizer__new_opts(&opts), *s2 = NULL;
	struct mp_symbolizer_stats st;
	long page = sysconf(_SC_PAGESIZE);
	char *code = MAP_FAILED, want[32];
	struct timespec ts = { 0, 3000000 };
	struct mp_frame f;
	uint64_t addr;

	opts.reread_ms = 1;
	s2 = mp_symbolizer__new_opts(&opts);
	if (!ASSERT_TRUE(s && s2, "mp_symbolizer__new_opts"))
		goto out;
	ASSERT_OK(mp_symbolizer__snapshot(s, getpid()), "snapshot");
	ASSERT_OK(mp_symbolizer__snapshot(s2, getpid()), "snapshot");
	code = mmap(NULL, 4 * page, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (!ASSERT_TRUE(code != MAP_FAILED, "mmap PROT_EXEC"))
		goto out;
	addr = (uintptr_t)code + (uint64_t)page + 0x10;
	snprintf(want, sizeof(want), "0x%" PRIx64, addr);

	/* within reread_ms of the snapshot: unknown for now */
	check_anon(s, addr, want);
	mp_symbolizer__stats(s, &st);
	ASSERT_EQ(st.rereads_skipped, 1, "re-read skipped");
	/* a new snapshot finds it */
	ASSERT_OK(mp_symbolizer__snapshot(s, getpid()), "snapshot");
	check_anon(s, addr, "[anon]+0x1010");

	/* after reread_ms, the miss itself re-reads */
	nanosleep(&ts, NULL);
	check_anon(s2, addr, "[anon]+0x1010");
	mp_symbolizer__stats(s2, &st);
	ASSERT_EQ(st.maps_reads, 2, "re-read on the miss");

	munmap(code, 4 * page);
	code = MAP_FAILED;
	nanosleep(&ts, NULL);
	if (ASSERT_OK(mp_symbolizer__resolve(s2, getpid(), 0x10, 0, &f), "resolve unmapped")) {
		ASSERT_STREQ(f.locs[0].defname, "0x10", "unmapped: address");
		ASSERT_STREQ(f.locs[0].filename, "[unknown]", "unmapped: file");
	}
	/* the same bogus address again: no new re-read */
	nanosleep(&ts, NULL);
	ASSERT_OK(mp_symbolizer__resolve(s2, getpid(), 0x10, 0, &f), "resolve unmapped again");
	mp_symbolizer__stats(s2, &st);
	ASSERT_EQ(st.maps_reads, 3, "one re-read per bogus address");
out:
	if (code != MAP_FAILED)
		munmap(code, 4 * page);
	mp_symbolizer__free(s);
	mp_symbolizer__free(s2);
}

/* A JIT's perf map names code in anonymous memory; lines appended later are read too. */
static void test_perfmap(void)
{
	struct mp_symbolizer *s = NULL;
	long page = sysconf(_SC_PAGESIZE);
	char path[64], want[64];
	uint64_t code;
	void *mem;
	FILE *f;

	mem = mmap(NULL, 2 * page, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (!ASSERT_TRUE(mem != MAP_FAILED, "mmap PROT_EXEC"))
		return;
	code = (uintptr_t)mem;
	snprintf(path, sizeof(path), "/tmp/perf-%d.map", (int)getpid());
	f = fopen(path, "we");
	if (!ASSERT_TRUE(f, "create the perf map"))
		goto out;
	fprintf(f, "%" PRIx64 " 80 jit_function_one\n", code + 0x100);
	fprintf(f, "0x%" PRIx64 " 0x40 py::leaf:/srv/app.py\n", code + 0x200);
	fflush(f);
	s = mp_symbolizer__new();
	if (!ASSERT_TRUE(s, "new"))
		goto out;
	check_anon(s, code + 0x120, "jit_function_one");
	check_anon(s, code + 0x23f, "py::leaf:/srv/app.py");
	snprintf(want, sizeof(want), "[anon]+0x%x", 0x240);
	check_anon(s, code + 0x240, want);	/* past the symbol */
	/* written after the snapshot */
	fprintf(f, "%" PRIx64 " 10 jit_function_late\n", code + 0x300);
	fflush(f);
	check_anon(s, code + 0x305, "jit_function_late");
	{
		struct mp_frame fr;

		if (ASSERT_OK(mp_symbolizer__resolve(s, getpid(), code + 0x305, 0, &fr), "resolve"))
			ASSERT_STREQ(fr.locs[0].filename, "[jit]", "file");
	}
out:
	if (f) {
		fclose(f);
		unlink(path);
	}
	mp_symbolizer__free(s);
	munmap(mem, 2 * page);
}

/*
 * A perf map is read only if it is the process' own regular file, reached without symlinks:
 * pointed elsewhere (a symlink), not its owner's, or a FIFO, it is not read (the daemon reads
 * it as root on the process' behalf).
 */
static void test_perfmap_rules(void)
{
	long page = sysconf(_SC_PAGESIZE);
	char path[64], other[64], want[64];
	uint64_t code;
	void *mem;
	FILE *f;

	mem = mmap(NULL, page, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (!ASSERT_TRUE(mem != MAP_FAILED, "mmap PROT_EXEC"))
		return;
	code = (uintptr_t)mem;
	snprintf(path, sizeof(path), "/tmp/perf-%d.map", (int)getpid());
	snprintf(other, sizeof(other), "/tmp/perf-%d.map.target", (int)getpid());
	snprintf(want, sizeof(want), "[anon]+0x%x", 0x10);
	f = fopen(other, "we");
	if (!ASSERT_TRUE(f, "create the symlink's target"))
		goto out;
	fprintf(f, "%" PRIx64 " 80 not_through_a_symlink\n", code);
	fclose(f);
	for (int i = 0; i < 3; i++) {
		struct mp_symbolizer *s;

		unlink(path);
		if (i == 0 && !ASSERT_OK(symlink(other, path), "symlink"))
			continue;
		if (i == 1 && !ASSERT_OK(mkfifo(path, 0600), "mkfifo"))
			continue;
		if (i == 2) {	/* a file of another uid's (root can make one) */
			if (geteuid() != 0)
				continue;
			f = fopen(path, "we");
			if (!ASSERT_TRUE(f, "create the perf map"))
				continue;
			fprintf(f, "%" PRIx64 " 80 not_of_another_uid\n", code);
			fclose(f);
			ASSERT_OK(chown(path, 65534, 65534), "chown");
		}
		s = mp_symbolizer__new();
		if (ASSERT_TRUE(s, "new"))
			check_anon(s, code + 0x10, want);
		mp_symbolizer__free(s);
	}
out:
	unlink(path);
	unlink(other);
	munmap(mem, page);
}

/* File offset of @addr in this process' mappings (-1 if unmapped). */
static int64_t file_offset(uint64_t addr)
{
	unsigned long long lo, hi, off;
	int64_t r = -1;
	char line[512];
	FILE *f = fopen("/proc/self/maps", "re");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "%llx-%llx %*s %llx", &lo, &hi, &off) == 3 && addr >= lo &&
		    addr < hi) {
			r = (int64_t)(addr - lo + off);
			break;
		}
	if (f)
		fclose(f);
	return r;
}

static int run(const char *cmd)
{
	int r = system(cmd);

	return r == 0 ? 0 : -1;
}

/*
 * A separate debug file named by an object's .gnu_debuglink (which whoever built the object
 * chose): used if it is a regular file, readable by everyone, reached without symlinks; a
 * FIFO there must not block the symbolizer, and a symlink or a private file is not read.
 * The object is a copy of this executable, its DWARF moved to DIR/obj.dbg and its build-id
 * removed.
 */
static void test_debuglink(void)
{
	char dir[] = "/tmp/mp-debuglink.XXXXXX", cmd[1024], obj[64], dbg[64], real[64];
	uint64_t ra = capture_plain();
	int64_t off = file_offset(ra);
	long page = sysconf(_SC_PAGESIZE);
	const char *what[] = { "regular", "fifo", "symlink", "private" };

	if (!ASSERT_TRUE(off >= 0, "offset of the captured pc") || !ASSERT_TRUE(mkdtemp(dir), "mkdtemp"))
		return;
	snprintf(obj, sizeof(obj), "%s/obj", dir);
	snprintf(dbg, sizeof(dbg), "%s/obj.dbg", dir);
	snprintf(real, sizeof(real), "%s/real.dbg", dir);
	/* without its build-id, the copy is an object of its own (the CRC names its DWARF) */
	snprintf(cmd, sizeof(cmd), "objcopy -R .note.gnu.build-id --only-keep-debug /proc/%d/exe %s "
		 "&& objcopy -R .note.gnu.build-id --strip-debug --add-gnu-debuglink=%s /proc/%d/exe "
		 "%s && cp %s %s && chmod 644 %s %s", (int)getpid(), dbg, dbg, (int)getpid(), obj,
		 dbg, real, dbg, real);
	chmod(dir, 0755);
	if (!ASSERT_OK(run(cmd), "objcopy"))
		goto out;
	alarm(30);	/* a symbolizer blocked in open() fails the test */
	for (int i = 0; i < 4; i++) {
		struct mp_symbolizer *s = NULL;
		struct mp_frame f;
		void *map = MAP_FAILED;
		int fd;

		unlink(dbg);
		if (i == 0)
			ASSERT_OK(link(real, dbg), "link");
		else if (i == 1)
			ASSERT_OK(mkfifo(dbg, 0644), "mkfifo");
		else if (i == 2)
			ASSERT_OK(symlink(real, dbg), "symlink");
		else if (ASSERT_OK(link(real, dbg), "link"))
			chmod(dbg, 0600);
		fd = open(obj, O_RDONLY | O_CLOEXEC);
		if (fd >= 0)
			map = mmap(NULL, (size_t)(off / page + 1) * page, PROT_READ | PROT_EXEC,
				   MAP_PRIVATE, fd, 0);
		if (fd >= 0)
			close(fd);
		if (!ASSERT_TRUE(map != MAP_FAILED, "map the stripped copy"))
			continue;
		s = mp_symbolizer__new();
		if (ASSERT_TRUE(s, "new") &&
		    ASSERT_OK(mp_symbolizer__resolve(s, getpid(), (uintptr_t)map + (uint64_t)off, 1,
						     &f), "resolve in the stripped copy")) {
			print_frame(what[i], &f);
			ASSERT_STREQ(f.locs[f.nlocs - 1].defname, "mp_plain_function",
				     "named from .symtab or DWARF");
			if (i == 0)
				ASSERT_EQ(f.locs[0].line, mp_line_plain, "a plain debug file is used");
			else
				ASSERT_EQ(f.locs[0].line, 0, "a FIFO, symlink or private file is not");
		}
		mp_symbolizer__free(s);
		munmap(map, (size_t)(off / page + 1) * page);
		chmod(real, 0644);
	}
	alarm(0);
out:
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	run(cmd);
}

/* Another process: stopped while resolved, then gone (resolved from the snapshot), then
 * forgotten. Results are shared with this process (same objects). */
static void test_child(void)
{
	struct mp_symbolizer *s = mp_symbolizer__new();
	struct mp_symbolizer_stats st1, st2;
	uint64_t plain = capture_plain(), inl = capture_inlined(), cxx = capture_cxx();
	uint64_t mal = libc_malloc();
	struct mp_frame f;
	int status;
	pid_t pid;

	if (!ASSERT_TRUE(s, "mp_symbolizer__new"))
		return;
	pid = fork();
	if (pid == 0) {
		/* same image as the parent: the captured addresses are valid here too */
		raise(SIGSTOP);
		_exit(0);
	}
	if (!ASSERT_TRUE(pid > 0, "fork")) {
		mp_symbolizer__free(s);
		return;
	}
	waitpid(pid, &status, WUNTRACED);
	ASSERT_TRUE(WIFSTOPPED(status), "child stopped");
	ASSERT_OK(mp_symbolizer__snapshot(s, pid), "snapshot");

	check_plain(s, pid, plain);
	check_inlined(s, pid, inl);
	mp_symbolizer__stats(s, &st1);
	ASSERT_EQ(st1.maps_reads, 1, "one maps read");

	/* The same object in this process: answered from the shared results. */
	mp_symbolizer__stats(s, &st1);
	check_plain(s, getpid(), plain);
	mp_symbolizer__stats(s, &st2);
	ASSERT_EQ(st2.result_hits, st1.result_hits + 1, "shared result across processes");
	ASSERT_EQ(st2.lookups, st1.lookups, "no second lookup for the same object");

	/* The child exits: addresses not asked before still resolve from the snapshot. */
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	ASSERT_TRUE(kill(pid, 0) < 0 && errno == ESRCH, "child gone");
	check_cxx(s, pid, cxx);
	check_malloc(s, pid, mal);

	/* Forgotten: the pid is unknown now. */
	mp_symbolizer__forget(s, pid);
	ASSERT_EQ(mp_symbolizer__resolve(s, pid, plain, 1, &f), -ESRCH, "forgotten exited pid");
	mp_symbolizer__free(s);
}

/* Number of open fds without FD_CLOEXEC. */
static int count_inheritable_fds(void)
{
	int n = 0;

	for (int fd = 0; fd < 1024; fd++) {
		int fl = fcntl(fd, F_GETFD);

		if (fl >= 0 && !(fl & FD_CLOEXEC))
			n++;
	}
	return n;
}

/* Objects and debug files held open must not leak into programs the daemon starts. */
static void test_cloexec(void)
{
	int before = count_inheritable_fds();
	struct mp_symbolizer *s = mp_symbolizer__new();

	if (!ASSERT_TRUE(s, "new"))
		return;
	check_malloc(s, getpid(), libc_malloc());	/* opens libc's separate debug file */
	check_plain(s, getpid(), capture_plain());
	ASSERT_EQ(count_inheritable_fds(), before, "no inheritable fd opened");
	mp_symbolizer__free(s);
}

/* A pid that never was: -ESRCH, nothing cached. */
static void test_no_process(void)
{
	struct mp_symbolizer *s = mp_symbolizer__new();
	struct mp_symbolizer_stats st;
	struct mp_frame f;
	int status;
	pid_t pid = fork();

	if (pid == 0)
		_exit(0);
	waitpid(pid, &status, 0);
	ASSERT_EQ(mp_symbolizer__resolve(s, pid, capture_plain(), 1, &f), -ESRCH, "exited pid");
	mp_symbolizer__stats(s, &st);
	ASSERT_EQ(st.procs, 0, "nothing kept");
	mp_symbolizer__free(s);
}

/* Limits: one loaded object at a time still gives the right answers; a byte budget is enforced
 * with -ENOSPC and counted. */
static void test_limits(void)
{
	struct mp_symbolizer_opts opts = { .sz = sizeof(opts), .max_modules = 1 };
	struct mp_symbolizer *s = mp_symbolizer__new_opts(&opts);
	struct mp_symbolizer_stats st;
	uint64_t plain = capture_plain();
	struct mp_frame f;
	int r = 0, i;

	if (!ASSERT_TRUE(s, "mp_symbolizer__new_opts"))
		return;
	check_malloc(s, getpid(), libc_malloc());
	check_plain(s, getpid(), plain);
	check_inlined(s, getpid(), capture_inlined());
	mp_symbolizer__stats(s, &st);
	ASSERT_TRUE(st.modules_unloaded >= 1, "libc unloaded for the executable");
	mp_symbolizer__free(s);

	opts = (struct mp_symbolizer_opts){ .sz = sizeof(opts), .max_bytes = 1 };
	s = mp_symbolizer__new_opts(&opts);
	if (!ASSERT_TRUE(s, "mp_symbolizer__new_opts"))
		return;
	/* The first result goes over the budget; any new address after it fails. */
	for (i = 0; i < 3 && r == 0; i++)
		r = mp_symbolizer__resolve(s, getpid(), plain + (uint64_t)i, 0, &f);
	ASSERT_EQ(r, -ENOSPC, "over budget");
	mp_symbolizer__stats(s, &st);
	ASSERT_EQ(st.nospace, 1, "counted");
	mp_symbolizer__free(s);
}

int main(void)
{
	RUN(test_self);
	RUN(test_no_debuginfo);
	RUN(test_minidebuginfo);
	RUN(test_anonymous);
	RUN(test_perfmap);
	RUN(test_perfmap_rules);
	RUN(test_debuglink);
	RUN(test_child);
	RUN(test_no_process);
	RUN(test_cloexec);
	RUN(test_limits);
	return test_exit();
}
