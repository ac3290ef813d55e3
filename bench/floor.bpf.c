// SPDX-License-Identifier: GPL-2.0-only
/*
 * The overhead floor: empty BPF programs for the probe points memprofd uses (allocator entry and
 * return, free at its emulated placement). bench/floor.c attaches them pid-filtered to a workload;
 * the time they add is what any design that traps on every allocator call must pay.
 *
 * floor_session is the floor of memprofd's own mechanism (floor -s): an empty uprobe session
 * program (attach type BPF_TRACE_UPROBE_SESSION, Linux 6.13+) on uprobe_multi session links,
 * one per object, as memprofd attaches mp_session. Its entry returns 1, so the kernel skips the
 * return half, as mp_session does for every unsampled call.
 *
 * With count_hits set (floor -c) each program bumps a per-CPU counter, to check that the probes
 * fire and to count allocator calls; left false, the verifier removes that code and the programs
 * are empty.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "bench/floor.h"

const volatile bool count_hits = false;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FLOOR_HIT__MAX);
	__type(key, __u32);
	__type(value, __u64);
} hits SEC(".maps");

static __always_inline void hit(__u32 what)
{
	__u64 *v;

	if (!count_hits)
		return;
	v = bpf_map_lookup_elem(&hits, &what);
	if (v)
		(*v)++;
}

SEC("uprobe")
int BPF_KPROBE(floor_alloc_entry)
{
	hit(FLOOR_HIT_ALLOC_ENTRY);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(floor_alloc_return)
{
	hit(FLOOR_HIT_ALLOC_RETURN);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(floor_free)
{
	hit(FLOOR_HIT_FREE);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(floor_session)
{
	hit(FLOOR_HIT_SESSION);
	return 1;	/* no return half */
}

char LICENSE[] SEC("license") = "GPL";
