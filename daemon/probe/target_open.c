// SPDX-License-Identifier: LGPL-2.1-or-later
/* Opening files on a process' behalf (see target_open.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/openat2.h>

#include "daemon/probe/target_open.h"

int mp_target_open(pid_t pid, const char *path, mp_file_ok_fn ok, const void *arg)
{
	struct open_how how = {
		.flags = O_PATH | O_CLOEXEC | O_NOFOLLOW,
		.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	int dirfd = AT_FDCWD, pfd, fd;
	struct stat st;
	char buf[64];

	if (pid > 0) {
		snprintf(buf, sizeof(buf), "/proc/%d/root", (int)pid);
		dirfd = open(buf, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (dirfd < 0)
			return -errno;
		how.resolve |= RESOLVE_IN_ROOT;
	}
	pfd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
	if (pfd < 0 && errno == ENOSYS)
		pfd = openat(dirfd, path, O_PATH | O_CLOEXEC | O_NOFOLLOW);
	fd = pfd < 0 ? -errno : 0;
	if (dirfd >= 0)
		close(dirfd);
	if (fd < 0)
		return fd;
	if (fstat(pfd, &st) || !S_ISREG(st.st_mode) || !ok(&st, arg)) {
		close(pfd);
		return -EACCES;
	}
	snprintf(buf, sizeof(buf), "/proc/self/fd/%d", pfd);
	fd = open(buf, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		fd = -errno;
	close(pfd);
	return fd;
}

bool mp_same_inode(const struct stat *st, const void *arg)
{
	return st->st_ino == *(const ino_t *)arg;
}
