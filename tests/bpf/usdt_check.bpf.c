// SPDX-License-Identifier: (LGPL-2.1-or-later OR BSD-2-Clause)
/* A minimal consumer of libmemprof-preload's USDT probes, for tests/bpf/preload-usdt.sh. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>

#include "tests/bpf/usdt_check.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} events SEC(".maps");

__u64 drops;
__u64 read_errors;

static __always_inline struct uc_event *ev_new(__u32 type)
{
	struct uc_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		__sync_fetch_and_add(&drops, 1);
		return NULL;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->type = type;
	e->pid = bpf_get_current_pid_tgid() >> 32;
	return e;
}

/* One UC_BATCHED event per id at @uids. */
static __always_inline void batched(__u64 uids, __u32 count)
{
	for (__u32 i = 0; i < 64 && i < count; i++) {
		struct uc_event *e;
		__u64 id;

		if (bpf_probe_read_user(&id, sizeof(id), (void *)(uids + 8 * i))) {
			__sync_fetch_and_add(&read_errors, 1);
			return;
		}
		e = ev_new(UC_BATCHED);
		if (!e)
			return;
		e->id = id;
		bpf_ringbuf_submit(e, 0);
	}
}

SEC("usdt")
int BPF_USDT(on_alloc, __u64 rec)
{
	struct uc_alloc_head h;
	struct uc_event *e;

	if (bpf_probe_read_user(&h, sizeof(h), (void *)rec)) {
		__sync_fetch_and_add(&read_errors, 1);
		return 0;
	}
	batched(rec + UC_FREE_IDS_OFF, h.nfree);
	e = ev_new(UC_ALLOC);
	if (!e)
		return 0;
	e->addr = h.addr;
	e->size = h.size;
	e->nsamples = h.nsamples;
	e->id = h.id;
	e->kind = h.kind;
	e->gen = h.generation;
	e->nframes = h.nframes;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_free, __u64 id, __u64 addr, __u32 kind)
{
	struct uc_event *e = ev_new(UC_FREE);

	if (!e)
		return 0;
	e->id = id;
	e->addr = addr;
	e->kind = kind;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_free_batch, __u64 ids, __u32 count)
{
	batched(ids, count);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
