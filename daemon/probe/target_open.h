/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Files read on a process' behalf (the symbolizer's JIT perf map, debug files an object names,
 * mapped files by name; the loader's objects): their names are the process' to choose, and
 * memprofd reads them as root. mp_target_open() opens such a name so that:
 *   - no symlink is followed anywhere in it (a user's /tmp/perf-PID.map -> /etc/shadow;
 *     fs.protected_symlinks does not cover a directory of the user's bind-mounted over /tmp
 *     in a mount namespace of their own), nor a magic link;
 *   - it is resolved inside the process' root ("/..." and ".." stay in it);
 *   - only a regular file that @ok accepts (on its fstat) is opened for reading, without
 *     blocking: the name is opened O_PATH first, so a FIFO or device node is never opened.
 * Kernels without openat2 (< 5.6) refuse only a symlink in the last component.
 *
 * Library-style: never logs.
 */
#ifndef MEMPROFD_TARGET_OPEN_H
#define MEMPROFD_TARGET_OPEN_H

#include <stdbool.h>
#include <sys/stat.h>
#include <sys/types.h>

typedef bool (*mp_file_ok_fn)(const struct stat *st, const void *arg);

/* @path as process @pid sees it (@pid 0: in our own namespace), read-only, O_CLOEXEC. The fd,
 * or -errno (-EACCES: not a regular file, or refused by @ok). */
int mp_target_open(pid_t pid, const char *path, mp_file_ok_fn ok, const void *arg);

/* @ok for a file a mapping shows in /proc/PID/maps: @arg points to its ino_t. The inode only:
 * the device /proc/PID/maps shows may differ from what stat says (btrfs subvolumes,
 * overlayfs). */
bool mp_same_inode(const struct stat *st, const void *arg);

#endif
