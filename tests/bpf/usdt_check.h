/* SPDX-License-Identifier: (LGPL-2.1-or-later OR BSD-2-Clause) */
/* Events of tests/bpf/usdt_check.bpf.c: what the memprof:alloc/free/free_batch probes passed. */
#ifndef MP_USDT_CHECK_H
#define MP_USDT_CHECK_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

enum {
	UC_ALLOC = 1,
	UC_FREE = 2,		/* memprof:free: one free at once */
	UC_BATCHED = 3,		/* one id of memprof:free_batch or of an alloc's free_ids[] */
};

struct uc_event {
	__u64 addr;		/* alloc, free */
	__u64 size;		/* alloc only */
	__u64 nsamples;		/* alloc only */
	__u64 id;
	__u32 type;		/* UC_* */
	__u32 kind;		/* alloc, free */
	__u32 gen;		/* alloc only */
	__u32 pid;
	__s32 nframes;		/* alloc only */
	__u32 _pad;
};

/* The head of struct memprof_preload_alloc_rec (<memprof/preload.h>). */
struct uc_alloc_head {
	__u64 addr, size, nsamples, id;
	__u32 kind, generation, nfree;
	__s32 nframes;
};

#define UC_FREE_IDS_OFF	48	/* offsetof(struct memprof_preload_alloc_rec, free_ids) */

#endif
