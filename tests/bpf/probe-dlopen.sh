#!/bin/bash
# Real uprobes on a real workload through the loader: scenario 'dlopen' of tests/bpf/probe_check.c.
set -u
[ "$(id -u)" -eq 0 ] || { echo "needs root for BPF"; exit 77; }
exec "$MP_BUILD/tests/bpf/probe_check" "$MP_BUILD/tests/workloads" dlopen
