#!/bin/bash
# libmemprof-preload's USDT probes with a real BPF consumer (root): usdt_check attaches
# uprobes to memprof:alloc and memprof:free in a process running under the preload, through
# libbpf's bpf_program__attach_usdt (semaphore armed by the kernel via ref_ctr_offset), and
# checks the events against the library's counters; without an attached probe the library
# must stay disarmed and no hook may run.
. "$(dirname "$0")/../unit/preload.inc"

if [ "$(id -u)" -ne 0 ]; then
	echo "needs root for BPF"
	exit 77
fi
"$PL_BIN/usdt_check" "$PL_LIB" "$PL_BIN/pl_usdt" || pl_failures=$((pl_failures + 1))
"$PL_BIN/usdt_check" --no-attach "$PL_LIB" "$PL_BIN/pl_usdt" || pl_failures=$((pl_failures + 1))
pl_exit
