// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The end of the text report: which objects had no symbols (their frames read
 * "object+0xoffset") and how to get them, and what a CPython trace cannot show.
 *
 * The trace names an object by its base name only, so the object is looked for on this
 * machine (the profiled executable's path, then the usual library and binary directories); its
 * build-id, read with libdw, gives the debug file's name under /usr/lib/debug/.build-id, and
 * the Debian package owning the object (dpkg-query -S) gives the debug package's name,
 * PACKAGE-dbgsym (Debian's automatic debug packages).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <elfutils/libdwelf.h>
#include <libelf.h>

#include "report/report.h"

#define MAX_LISTED 32

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s ? s + 1 : path;
}

/* A frame that names only its object and offset: "libz.so.1+0x1234". */
static bool unsymbolized(const struct rp_frame *f)
{
	size_t n = strlen(f->object);

	return !strncmp(f->func, f->object, n) && !strncmp(f->func + n, "+0x", 3);
}

/* The objects without symbols in stacks that have estimates, at most @max, into @out. */
static size_t stripped_objects(const struct rp_model *m, const char **out, size_t max)
{
	size_t n = 0;

	for (size_t si = 0; si < m->nstacks && n < max; si++) {
		const struct rp_stack *st = &m->stacks[si];

		if (!m->stack_vals || m->stack_vals[si].bytes <= 0)
			continue;
		for (uint32_t i = 0; i < st->len && n < max; i++) {
			const struct rp_frame *f = &m->frames[m->stack_frames[st->off + i]];
			size_t k;

			if (!unsymbolized(f))
				continue;
			for (k = 0; k < n && strcmp(out[k], f->object); k++)
				;
			if (k == n)
				out[n++] = f->object;
		}
	}
	return n;
}

/* Where @object is on this machine: @path (PATH_MAX) or false. */
static bool find_object(const struct rp_model *m, const char *object, char *path)
{
	static const char *const dirs[] = {
		"/usr/lib/x86_64-linux-gnu", "/usr/lib", "/usr/lib64", "/usr/bin", "/usr/sbin",
		"/usr/local/lib", "/usr/local/bin", "/usr/libexec",
	};

	for (size_t i = 0; i < m->ntraces; i++) {
		const char *exe = m->traces[i].executable;

		if (exe[0] == '/' && !strcmp(base_name(exe), object) && !access(exe, R_OK)) {
			snprintf(path, PATH_MAX, "%s", exe);
			return true;
		}
	}
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(path, PATH_MAX, "%s/%s", dirs[i], object);
		if (!access(path, R_OK))
			return true;
	}
	return false;
}

/* The GNU build-id of the ELF file @path in hex into @hex (at least 129 bytes), or false. */
static bool build_id(const char *path, char *hex)
{
	const unsigned char *id;
	bool ok = false;
	ssize_t n;
	Elf *elf;
	int fd;

	if (elf_version(EV_CURRENT) == EV_NONE)
		return false;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (elf) {
		n = dwelf_elf_gnu_build_id(elf, (const void **)&id);
		if (n > 0 && n <= 64) {
			for (ssize_t i = 0; i < n; i++)
				sprintf(hex + 2 * i, "%02x", id[i]);
			ok = true;
		}
		elf_end(elf);
	}
	close(fd);
	return ok;
}

/*
 * The Debian binary package that installed @path (or its real path) into @pkg, or false:
 * `dpkg-query -S`, dpkg's own interface to its database ("zlib1g:amd64: /lib/.../libz.so.1").
 */
static bool owner_package(const char *path, char *pkg, size_t len)
{
	char real[PATH_MAX], out[1024];
	const char *argv[8] = { "dpkg-query", "-S", "--", path };
	size_t argc = 4, got = 0;
	int fds[2], status;
	ssize_t n;
	pid_t pid;

	if (realpath(path, real) && strcmp(real, path))
		argv[argc++] = real;
	/* With a merged /usr, dpkg lists /lib/x/libz.so.1 for /usr/lib/x/libz.so.1. */
	for (size_t i = 3, e = argc; i < e; i++)
		if (!strncmp(argv[i], "/usr/", 5))
			argv[argc++] = argv[i] + 4;
	argv[argc] = NULL;
	if (pipe2(fds, O_CLOEXEC) < 0)
		return false;
	pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		dup2(fds[1], STDOUT_FILENO);
		if (null >= 0)
			dup2(null, STDERR_FILENO);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(fds[1]);
	while (pid > 0 && got < sizeof(out) - 1 &&
	       (n = read(fds[0], out + got, sizeof(out) - 1 - got)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		got += (size_t)n;
	}
	close(fds[0]);
	if (pid < 0)
		return false;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	out[got] = '\0';
	/* the first line's package: up to ":arch" or ": " */
	n = (ssize_t)strcspn(out, ":,\n");
	if (!n || out[n] == '\n' || out[n] == '\0')
		return false;
	snprintf(pkg, len, "%.*s", (int)n, out);
	return true;
}

static bool is_python(const char *name)
{
	const char *b = base_name(name);

	return !strncmp(b, "python", 6) || !strncmp(b, "libpython", 9);
}

void rp_print_notes(const struct rp_model *m, FILE *f)
{
	const char *objs[MAX_LISTED];
	size_t n = stripped_objects(m, objs, MAX_LISTED);
	bool python = false;

	if (n) {
		fprintf(f, "\nObjects without symbols (their frames read object+0xoffset):\n");
		for (size_t i = 0; i < n; i++) {
			char path[PATH_MAX], hex[160], pkg[256];

			fprintf(f, "  %s", objs[i]);
			if (!find_object(m, objs[i], path)) {
				fprintf(f, ": not found on this machine\n");
				continue;
			}
			fprintf(f, " (%s", path);
			if (build_id(path, hex))
				fprintf(f, ", build-id %s: debug file "
					"/usr/lib/debug/.build-id/%.2s/%s.debug", hex, hex,
					hex + 2);
			fputc(')', f);
			if (owner_package(path, pkg, sizeof(pkg)))
				fprintf(f, ": install %s-dbgsym", pkg);
			fputc('\n', f);
		}
		fprintf(f, "  Symbols are resolved when recording: install the debug packages "
			"(Debian's PACKAGE-dbgsym,\n  from the debian-debug archive) or set "
			"DEBUGINFOD_URLS (e.g. https://debuginfod.debian.net)\n  for memprofd or "
			"memprofctl record, then record again.\n");
	}
	for (size_t i = 0; i < m->ntraces && !python; i++)
		python = is_python(m->traces[i].executable);
	for (size_t i = 0; i < n && !python; i++)
		python = is_python(objs[i]);
	if (python)
		fprintf(f, "\nCPython: pymalloc serves objects of 512 bytes or less from its own "
			"arenas, so only the\narenas' allocations appear here; run the program "
			"with PYTHONMALLOC=malloc to see each\nobject's allocation.\n");
}
