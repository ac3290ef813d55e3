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

SEC("usdt")
int BPF_USDT(on_alloc, __u64 addr, __u64 size, __u64 nsamples, __u32 kind, __u32 gen)
{
	struct uc_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		__sync_fetch_and_add(&drops, 1);
		return 0;
	}
	e->type = UC_ALLOC;
	e->addr = addr;
	e->size = size;
	e->nsamples = nsamples;
	e->kind = kind;
	e->gen = gen;
	e->pid = bpf_get_current_pid_tgid() >> 32;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_free, __u64 addr, __u32 kind)
{
	struct uc_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		__sync_fetch_and_add(&drops, 1);
		return 0;
	}
	e->type = UC_FREE;
	e->addr = addr;
	e->size = 0;
	e->nsamples = 0;
	e->kind = kind;
	e->gen = 0;
	e->pid = bpf_get_current_pid_tgid() >> 32;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
