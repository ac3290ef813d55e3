// SPDX-License-Identifier: LGPL-2.1-or-later
/* uprobe_multi / uprobe session links by raw bpf(): see daemon/probe/uprobe_link.h. */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

#include <linux/bpf.h>

#include "daemon/probe/uprobe_link.h"

/* Layout of union bpf_attr's link_create.uprobe_multi (Linux 6.6), after 16 bytes. */
struct uprobe_multi_attr {
	uint64_t path, offsets, ref_ctr_offsets, cookies;
	uint32_t cnt, flags, pid, _pad;
};

int mp_uprobe_multi_link(int prog_fd, unsigned int attach_type, pid_t pid, const char *path,
			 const uint64_t *offs, const uint64_t *cookies,
			 const uint64_t *ref_ctr_offs, uint32_t cnt, bool retprobe)
{
	union bpf_attr attr;
	struct uprobe_multi_attr um = {
		.path = (uint64_t)(uintptr_t)path,
		.offsets = (uint64_t)(uintptr_t)offs,
		.ref_ctr_offsets = (uint64_t)(uintptr_t)ref_ctr_offs,
		.cookies = (uint64_t)(uintptr_t)cookies,
		.cnt = cnt,
		.flags = retprobe ? MP_BPF_F_UPROBE_MULTI_RETURN : 0,
		.pid = (uint32_t)pid,
	};
	int fd;

	_Static_assert(sizeof(attr) >= 16 + sizeof(um), "bpf_attr too small");
	memset(&attr, 0, sizeof(attr));
	attr.link_create.prog_fd = (uint32_t)prog_fd;
	attr.link_create.attach_type = attach_type;
	memcpy((char *)&attr + 16, &um, sizeof(um));
	fd = (int)syscall(__NR_bpf, BPF_LINK_CREATE, &attr, sizeof(attr));
	return fd < 0 ? -errno : fd;
}
