// SPDX-License-Identifier: LGPL-2.1-or-later
/* Output files that a failure does not destroy (outfile.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "userspace-lib/codec/outfile.h"

static int open_new(struct mp_outfile *o, const char *path, int acc, mode_t mode)
{
	int fd = open(path, acc | O_CREAT | O_EXCL, mode);

	if (fd < 0 && errno == EEXIST)	/* a dangling symlink, or created meanwhile */
		fd = open(path, acc | O_CREAT, mode);
	else if (fd >= 0 && !(o->created = strdup(path))) {
		close(fd);
		unlink(path);
		return -ENOMEM;
	}
	if (fd < 0)
		return -errno;
	o->fd = fd;
	return 0;
}

/* Beside the regular file @st at @path: a new one, renamed over it at commit. */
static int open_beside(struct mp_outfile *o, const char *path, const struct stat *st, int acc,
		       mode_t mode)
{
	int fd = -1, err;

	o->final = realpath(path, NULL);
	if (!o->final)
		return -errno;
	if (asprintf(&o->tmp, "%s.tmp.%d", o->final, (int)getpid()) < 0) {
		o->tmp = NULL;
		err = -ENOMEM;
		goto fail;
	}
	for (int tries = 0; tries < 2 && fd < 0; tries++) {
		/* O_EXCL: never through a link planted under that name */
		fd = open(o->tmp, acc | O_CREAT | O_EXCL, mode);
		if (fd < 0 && errno == EEXIST && tries == 0)
			unlink(o->tmp);	/* left by a crashed run of this pid */
		else if (fd < 0)
			break;
	}
	if (fd >= 0) {
		(void)fchmod(fd, st->st_mode & 07777);	/* as the file it replaces */
		o->fd = fd;
		return 0;
	}
	err = -errno;
	if (err == -EACCES || err == -EPERM || err == -EROFS) {
		/* The directory is not ours to write: the file itself may be. */
		free(o->tmp);
		o->tmp = NULL;
		free(o->final);
		o->final = NULL;
		fd = open(path, acc | O_TRUNC);
		if (fd >= 0) {
			o->fd = fd;
			return 0;
		}
		return -errno;
	}
fail:
	free(o->tmp);
	o->tmp = NULL;
	free(o->final);
	o->final = NULL;
	return err;
}

int mp_outfile__open(struct mp_outfile *o, const char *path, bool rdwr, mode_t mode)
{
	int acc = (rdwr ? O_RDWR : O_WRONLY) | O_CLOEXEC;
	struct stat st;
	int fd;

	*o = (struct mp_outfile){ .fd = -1 };
	if (stat(path, &st) < 0)
		return errno == ENOENT ? open_new(o, path, acc, mode) : -errno;
	/* replaced only if it could have been written: a rename needs only the directory */
	if (S_ISREG(st.st_mode))
		return access(path, W_OK) ? -errno : open_beside(o, path, &st, acc, mode);
	/* a device, FIFO or terminal as it is (a directory fails here: EISDIR) */
	fd = open(path, acc);
	if (fd < 0)
		return -errno;
	o->fd = fd;
	return 0;
}

int mp_outfile__commit(struct mp_outfile *o)
{
	int err = 0;

	if (o->tmp && rename(o->tmp, o->final) < 0) {
		err = -errno;
		unlink(o->tmp);
	}
	mp_outfile__done(o);
	return err;
}

void mp_outfile__abort(struct mp_outfile *o)
{
	if (o->fd >= 0)
		close(o->fd);
	o->fd = -1;
	if (o->tmp)
		unlink(o->tmp);
	else if (o->created)
		unlink(o->created);
	mp_outfile__done(o);
}

/* A trace goes to a regular file only; else a sentence naming what @mode is. */
static int check_type(mode_t mode, char *err, size_t err_len)
{
	if (S_ISREG(mode))
		return 0;
	snprintf(err, err_len, "The output is %s, not a regular file: traces are written to "
		 "regular files only (a reader that stops reading would stall the writer)",
		 S_ISFIFO(mode) ? "a pipe or FIFO" : S_ISSOCK(mode) ? "a socket" :
		 S_ISCHR(mode) || S_ISBLK(mode) ? "a device" : S_ISDIR(mode) ? "a directory" :
		 "not a file");
	return -EINVAL;
}

int mp_outfile__check_fd(int fd, char *err, size_t err_len)
{
	struct stat st;
	int fl, r;

	if (fstat(fd, &st) < 0 || (fl = fcntl(fd, F_GETFL)) < 0) {
		snprintf(err, err_len, "The output file descriptor is not usable: %s",
			 strerror(errno));
		return -EBADF;
	}
	r = check_type(st.st_mode, err, err_len);
	if (r < 0)
		return r;
	if ((fl & O_ACCMODE) == O_RDONLY) {
		snprintf(err, err_len, "The output file descriptor is not open for writing");
		return -EINVAL;
	}
	if (fl & O_APPEND) {
		snprintf(err, err_len, "The output file descriptor is open for appending "
			 "(O_APPEND): the trace's drop counts could not be written in place at "
			 "its start when it completes");
		return -EINVAL;
	}
	return 0;
}

int mp_outfile__check_path(const char *path, char *err, size_t err_len)
{
	struct stat st;

	if (stat(path, &st) < 0)
		return 0;	/* created (or refused) by mp_outfile__open() */
	return check_type(st.st_mode, err, err_len);
}

void mp_outfile__done(struct mp_outfile *o)
{
	free(o->tmp);
	o->tmp = NULL;
	free(o->final);
	o->final = NULL;
	free(o->created);
	o->created = NULL;
}

int mp_write_all(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n) {
		ssize_t r = write(fd, c, n);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		c += r;
		n -= (size_t)r;
	}
	return 0;
}
