/* SPDX-License-Identifier: (LGPL-2.1-or-later OR BSD-2-Clause) */
/* Events of tests/bpf/usdt_check.bpf.c: what the memprof:alloc/free USDT probes passed. */
#ifndef MP_USDT_CHECK_H
#define MP_USDT_CHECK_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

enum { UC_ALLOC = 1, UC_FREE = 2 };

struct uc_event {
	__u64 addr;
	__u64 size;		/* alloc only */
	__u64 nsamples;		/* alloc only */
	__u32 type;		/* UC_ALLOC / UC_FREE */
	__u32 kind;
	__u32 gen;		/* alloc only */
	__u32 pid;
};

#endif
