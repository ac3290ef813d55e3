#!/bin/bash
# libmemprof-preload under stress: threads allocating with every entry point and freeing each
# other's blocks, threads exiting and replaced, forks whose children allocate, free inherited
# blocks and exit; with sampling armed (MEMPROF_ARM, rate 1e-2, hook log checked) and
# disarmed (no probe: no hook may run). Also under the UBSan build of the library. A deadlock
# shows up as the timeout.
. "$(dirname "$0")/preload.inc"

UBSAN_LIB=$PL_BIN/libmemprof-preload-ubsan.so

stress() {	# name lib mode env...
	local name=$1 lib=$2 mode=$3; shift 3
	local out=$MP_TMP/$name.out
	if timeout 120 env LD_PRELOAD="$lib" "$@" "$PL_BIN/pl_stress" 3 6 "$mode" >"$out" 2>&1; then
		pass "$name: $(tr '\n' ' ' <"$out")"
	else
		fail "$name (exit $?)"
		cat "$out"
	fi
}

stress stress-disarmed "$PL_LIB" disarmed
stress stress-armed "$PL_LIB" armed MEMPROF_RATE=0.01 MEMPROF_TEST_LOG=3 3>"$MP_TMP/stress.log"
"$PL_BIN/pl_check" -n stress-armed -l "$MP_TMP/stress.log" -P -X -s ||
	pl_failures=$((pl_failures + 1))
# Children log too: their frees of blocks the parent sampled are the "inherited" ones, and
# each child must draw its own samples (its pid appears with alloc records).
check "stress-armed: forked children sampled on their own" test "$(od -An -v -t u4 -w48 \
	"$MP_TMP/stress.log" | awk '$1 == 1 {print $9}' | sort -u | wc -l)" -gt 1
stress stress-ubsan-armed "$UBSAN_LIB" armed MEMPROF_RATE=0.01 MEMPROF_ARM=1
stress stress-ubsan-disarmed "$UBSAN_LIB" disarmed
pl_exit
