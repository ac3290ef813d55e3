/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Output files named by the user (a trace's -o, report's --flamegraph/--pprof), opened so that
 * a failure leaves what was there before:
 *  - a name that does not exist is created (O_EXCL), and removed again on abort;
 *  - an existing regular file (through any symlinks) that the caller may write is written as
 *    a new file beside it, renamed over it at commit: until then the old file is intact, and
 *    an abort removes only the new one. When its directory is not writable, the file is
 *    truncated and written in place instead (it cannot be kept);
 *  - anything else that exists (a device such as /dev/null, a FIFO, a terminal) is opened as
 *    it is, never truncated, created or removed.
 * Internal to memprofd and memprofctl (not exported by libmemprof.so).
 */
#ifndef MP_OUTFILE_H
#define MP_OUTFILE_H

#include <stdbool.h>
#include <sys/types.h>

struct mp_outfile {
	int fd;
	char *tmp;	/* written here, renamed over @final at commit; or NULL */
	char *final;	/* the regular file @tmp replaces (symlinks resolved) */
	char *created;	/* created under this name (removed on abort); or NULL */
};

/*
 * Open @path for writing; @rdwr: read-write (the trace writer patches its header), else
 * write-only. Returns 0 with o->fd set, or -errno with nothing left behind.
 */
int mp_outfile__open(struct mp_outfile *o, const char *path, bool rdwr, mode_t mode);

/*
 * The output is complete enough to replace what was there: rename it into place and forget
 * the names (an abort after it only closes o->fd). o->fd stays open (the caller closes it).
 * Returns 0 or -errno (the new file is removed then).
 */
int mp_outfile__commit(struct mp_outfile *o);

/* Give up: close o->fd (if >= 0) and remove what mp_outfile__open() created. */
void mp_outfile__abort(struct mp_outfile *o);

/*
 * Can @fd be a trace that memprofd writes (a descriptor a caller passes)? 0 for a regular file
 * open for writing without O_APPEND (the drop counts are patched in place at completion);
 * else -EINVAL (-EBADF for a bad descriptor) and a sentence in @err naming the problem: a
 * pipe, FIFO, socket or device is refused, since a reader that does not read would stall it.
 */
int mp_outfile__check_fd(int fd, char *err, size_t err_len);
/* The same for a path before it is opened (opening a FIFO or a device can block or act):
 * 0 when nothing exists there yet or a regular file does, through symlinks. */
int mp_outfile__check_path(const char *path, char *err, size_t err_len);

/* Forget the names without removing anything (o->fd is left to the caller). */
void mp_outfile__done(struct mp_outfile *o);

/* Write all @n bytes at @p to @fd, again after a signal or a short write. Returns 0 or -errno. */
int mp_write_all(int fd, const void *p, size_t n);

#endif
