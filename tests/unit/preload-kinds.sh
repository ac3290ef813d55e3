#!/bin/bash
# Every interposed entry point of libmemprof-preload reports the right kind, size, address
# and nsamples (= w at rate 1), exactly once (no double counting of operator new/memalign
# with malloc); realloc is collect + alloc; file mmaps are not sampled; operator new throws
# std::bad_alloc through the C interposer. See tests/workloads/pl_kinds.cc.
. "$(dirname "$0")/preload.inc"

log=$MP_TMP/kinds.log
: >"$log"
env LD_PRELOAD="$PL_LIB" MEMPROF_RATE=1 MEMPROF_TEST_LOG=3 "$PL_BIN/pl_kinds" "$log" 3>"$log" ||
	pl_failures=$((pl_failures + 1))
"$PL_BIN/pl_check" -n kinds -l "$log" || pl_failures=$((pl_failures + 1))
# Without a probe, MEMPROF_ARM or the test log, the library stays disarmed: nothing is logged
# even at rate 1 (the log fd is open but the variable that would enable it is absent).
: >"$log"
env LD_PRELOAD="$PL_LIB" MEMPROF_RATE=1 "$PL_BIN/pl_align" >/dev/null 3>"$log"
check "kinds: disarmed library reaches no hook" test ! -s "$log"
pl_exit
