/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * uprobe_multi and uprobe session links through raw bpf(BPF_LINK_CREATE): Debian's libbpf 1.1
 * has neither API. Shared by the loader (daemon/probe/attach.c) and the overhead floor
 * (bench/floor.c), so that the floor's session configuration uses memprofd's exact mechanism.
 */
#ifndef MEMPROFD_UPROBE_LINK_H
#define MEMPROFD_UPROBE_LINK_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* enum bpf_attach_type values newer than Debian 12's headers (Linux 6.6 and 6.13 UAPI). */
#define MP_BPF_TRACE_UPROBE_MULTI	48
#define MP_BPF_TRACE_UPROBE_SESSION	57	/* 57 in 6.18's BTF, checked by the self-test */
#define MP_BPF_F_UPROBE_MULTI_RETURN	1

/*
 * Attach program @prog_fd (loaded with expected attach type @attach_type, one of the two above)
 * to @cnt offsets of file @path, filtered to process @pid (0: every process), with one BPF
 * cookie per offset (@cookies may be NULL) and one USDT semaphore's file offset per offset,
 * which the kernel raises while the link exists (@ref_ctr_offs may be NULL: none). @retprobe:
 * return probes (uprobe_multi only). Returns the link's fd (O_CLOEXEC, as every bpf() fd) or
 * -errno.
 */
int mp_uprobe_multi_link(int prog_fd, unsigned int attach_type, pid_t pid, const char *path,
			 const uint64_t *offs, const uint64_t *cookies,
			 const uint64_t *ref_ctr_offs, uint32_t cnt, bool retprobe);

#endif
