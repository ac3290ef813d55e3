// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * userspace-lib/codec/outfile.c: what an output a user names leaves behind, committed or aborted,
 * for a new name, a regular file (also through a symlink), a FIFO, and a file in a directory
 * the caller cannot write to.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/unit/test.h"
#include "userspace-lib/codec/outfile.h"

static char dir[] = "/tmp/test_outfile.XXXXXX";

static char *at(const char *name)
{
	static char buf[4][256];
	static int k;

	k = (k + 1) % 4;
	snprintf(buf[k], sizeof(buf[k]), "%s/%s", dir, name);
	return buf[k];
}

static void put(const char *path, const char *s)
{
	FILE *f = fopen(path, "w");

	fputs(s, f);
	fclose(f);
}

static const char *get(const char *path)
{
	static char buf[256];
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return "(missing)";
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static int entries(void)
{
	char cmd[512];
	FILE *p;
	int n = -1;

	snprintf(cmd, sizeof(cmd), "ls -A '%s' | wc -l", dir);
	p = popen(cmd, "r");
	if (p && fscanf(p, "%d", &n) != 1)
		n = -1;
	if (p)
		pclose(p);
	return n;
}

/* Commit @o and close it, as the callers do. */
static void commit(struct mp_outfile *o)
{
	ASSERT_OK(mp_outfile__commit(o), "commit");
	close(o->fd);
}

static void test_new_name(void)
{
	struct mp_outfile o;

	ASSERT_OK(mp_outfile__open(&o, at("new"), true, 0644), "open a new name");
	ASSERT_TRUE(write(o.fd, "x", 1) == 1, "write");
	mp_outfile__abort(&o);
	ASSERT_EQ(access(at("new"), F_OK), -1, "an aborted new file is removed");

	ASSERT_OK(mp_outfile__open(&o, at("new"), true, 0644), "open it again");
	ASSERT_TRUE(write(o.fd, "x", 1) == 1, "write");
	commit(&o);
	ASSERT_STREQ(get(at("new")), "x", "the committed file");
	unlink(at("new"));
}

static void test_existing(void)
{
	struct mp_outfile o;
	struct stat st;

	put(at("old"), "old");
	chmod(at("old"), 0600);
	ASSERT_OK(mp_outfile__open(&o, at("old"), false, 0644), "open an existing file");
	ASSERT_TRUE(write(o.fd, "new", 3) == 3, "write");
	ASSERT_STREQ(get(at("old")), "old", "untouched until the commit");
	mp_outfile__abort(&o);
	ASSERT_STREQ(get(at("old")), "old", "untouched after an abort");
	ASSERT_EQ(entries(), 1, "nothing else left after an abort");

	ASSERT_OK(mp_outfile__open(&o, at("old"), false, 0644), "open it again");
	ASSERT_TRUE(write(o.fd, "new", 3) == 3, "write");
	commit(&o);
	ASSERT_STREQ(get(at("old")), "new", "replaced at the commit");
	ASSERT_OK(stat(at("old"), &st), "stat");
	ASSERT_EQ(st.st_mode & 07777, 0600, "the replaced file's mode is kept");
	ASSERT_EQ(entries(), 1, "no temporary file left");
	unlink(at("old"));
}

static void test_symlink(void)
{
	struct mp_outfile o;
	struct stat st;

	put(at("target"), "old");
	ASSERT_OK(symlink("target", at("link")), "symlink");
	ASSERT_OK(mp_outfile__open(&o, at("link"), false, 0644), "open through the link");
	ASSERT_TRUE(write(o.fd, "new", 3) == 3, "write");
	commit(&o);
	ASSERT_OK(lstat(at("link"), &st), "lstat");
	ASSERT_TRUE(S_ISLNK(st.st_mode), "the link stays a link");
	ASSERT_STREQ(get(at("target")), "new", "its target is replaced");

	unlink(at("target"));	/* dangling: written through, as open(2) would */
	ASSERT_OK(mp_outfile__open(&o, at("link"), false, 0644), "open a dangling link");
	ASSERT_TRUE(write(o.fd, "n", 1) == 1, "write");
	commit(&o);
	ASSERT_STREQ(get(at("target")), "n", "the link's target is created");
	unlink(at("target"));
	unlink(at("link"));
}

static void test_fifo(void)
{
	struct mp_outfile o;
	struct stat st;

	ASSERT_OK(mkfifo(at("fifo"), 0644), "mkfifo");
	ASSERT_OK(mp_outfile__open(&o, at("fifo"), true, 0644), "open a FIFO read-write");
	mp_outfile__abort(&o);
	ASSERT_OK(lstat(at("fifo"), &st), "lstat");
	ASSERT_TRUE(S_ISFIFO(st.st_mode), "an aborted FIFO is still there");
	unlink(at("fifo"));

	ASSERT_EQ(mp_outfile__open(&o, dir, false, 0644), -EISDIR, "a directory");
	ASSERT_EQ(o.fd, -1, "no descriptor on failure");
}

/* As nobody: a file it may not write, in a directory it may: refused, left as it was. */
static void test_not_writable(void)
{
	struct mp_outfile o;
	int st = 0;

	if (mkdir(at("rw"), 0777) || chmod(at("rw"), 0777) || (put(at("rw/f"), "old"), 0)) {
		ASSERT_TRUE(false, "set up rw/f");
		return;
	}
	chmod(at("rw/f"), 0644);
	if (fork() == 0) {
		if (setgid(65534) || setuid(65534))
			_exit(77);
		_exit(mp_outfile__open(&o, at("rw/f"), false, 0644) == -EACCES ? 0 : 1);
	}
	wait(&st);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
		printf("(not root: skipped the file it may not write)\n");
	else
		ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0, "refused with EACCES");
	ASSERT_STREQ(get(at("rw/f")), "old", "left as it was");
	unlink(at("rw/f"));
	rmdir(at("rw"));
}

/* A file its owner may write, in a directory it may not: written in place. */
static void test_unwritable_dir(void)
{
	struct mp_outfile o;

	if (mkdir(at("ro"), 0755) || (put(at("ro/f"), "old"), chmod(at("ro/f"), 0666))) {
		ASSERT_TRUE(false, "set up ro/f");
		return;
	}
	if (fork() == 0) {	/* as nobody: root writes any directory */
		int ok;

		if (setgid(65534) || setuid(65534))
			_exit(77);
		ok = mp_outfile__open(&o, at("ro/f"), false, 0644) == 0 && !o.tmp &&
		     write(o.fd, "new", 3) == 3 && mp_outfile__commit(&o) == 0;
		_exit(ok ? 0 : 1);
	} else {
		int st = 0;

		wait(&st);
		if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
			printf("(not root: skipped the unwritable directory)\n");
		else
			ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0,
				    "open in place, write, commit");
	}
	if (geteuid() == 0)
		ASSERT_STREQ(get(at("ro/f")), "new", "written in place");
	unlink(at("ro/f"));
	rmdir(at("ro"));
}

int main(void)
{
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	chmod(dir, 0755);
	RUN(test_new_name);
	RUN(test_existing);
	RUN(test_symlink);
	RUN(test_fifo);
	RUN(test_not_writable);
	RUN(test_unwritable_dir);
	rmdir(dir);
	return test_exit();
}
