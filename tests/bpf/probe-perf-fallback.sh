#!/bin/bash
# The loader's fallback for kernels without uprobe_multi: perf-event uprobes, one per probe.
# Scenario 'basic' of tests/bpf/probe_check.c with MP_BPF_NO_UPROBE_MULTI=1. Slower: closing each
# perf-event uprobe waits for grace periods.
set -u
[ "$(id -u)" -eq 0 ] || { echo "needs root for BPF"; exit 77; }
MP_BPF_NO_UPROBE_MULTI=1 "$MP_BUILD/tests/bpf/probe_check" "$MP_BUILD/tests/workloads" basic |
	sed 's/probe-basic-/probe-perf-basic-/'
exit "${PIPESTATUS[0]}"
