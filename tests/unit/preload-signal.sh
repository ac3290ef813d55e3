#!/bin/bash
# libmemprof-preload and signal handlers: SIGALRM every 20-50 µs while the main loop
# allocates; the handler allocates too (see tests/workloads/pl_signal.c for how the program
# stays correct with glibc's non-async-signal-safe malloc). Armed with the hook log (frees
# matched, no alloc at a live address), disarmed, and under the UBSan build.
. "$(dirname "$0")/preload.inc"

sig() {	# name lib interval env...
	local name=$1 lib=$2 us=$3; shift 3
	local out=$MP_TMP/$name.out
	if timeout 60 env LD_PRELOAD="$lib" "$@" "$PL_BIN/pl_signal" 1 "$us" >"$out" 2>&1; then
		pass "$name: $(tr '\n' ' ' <"$out")"
	else
		fail "$name (exit $?)"
		cat "$out"
	fi
}

sig signal-disarmed "$PL_LIB" 20
sig signal-armed "$PL_LIB" 50 MEMPROF_RATE=0.001 MEMPROF_TEST_LOG=3 3>"$MP_TMP/signal.log"
"$PL_BIN/pl_check" -n signal-armed -l "$MP_TMP/signal.log" -s || pl_failures=$((pl_failures + 1))
sig signal-armed-rate-1e-2 "$PL_LIB" 20 MEMPROF_RATE=0.01 MEMPROF_ARM=1
sig signal-ubsan "$PL_BIN/libmemprof-preload-ubsan.so" 20 MEMPROF_RATE=0.01 MEMPROF_ARM=1
pl_exit
