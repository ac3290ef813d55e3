#!/bin/bash
# posix_memalign, aligned_alloc, memalign, valloc, pvalloc under libmemprof-preload keep
# glibc's exact contract: the transcript of results, errno values and alignments (valid and
# invalid alignments, zero and impossible sizes, a heavy random loop) is identical without
# the preload, with it disarmed, armed at rate 1 (every block sampled) and under UBSan.
. "$(dirname "$0")/preload.inc"

"$PL_BIN/pl_align" >"$MP_TMP/glibc.txt" || fail "pl_align without the preload"
check "transcript is not empty" grep -q "heavy loop: .* 0 failed" "$MP_TMP/glibc.txt"
for mode in disarmed armed-rate-1 ubsan; do
	case $mode in
	disarmed) env=(LD_PRELOAD="$PL_LIB") ;;
	armed-rate-1) env=(LD_PRELOAD="$PL_LIB" MEMPROF_RATE=1 MEMPROF_TEST_LOG=3) ;;
	ubsan) env=(LD_PRELOAD="$PL_BIN/libmemprof-preload-ubsan.so" MEMPROF_RATE=0.01
		    MEMPROF_ARM=1) ;;
	esac
	env "${env[@]}" "$PL_BIN/pl_align" >"$MP_TMP/$mode.txt" 3>"$MP_TMP/$mode.log"
	if diff -u "$MP_TMP/glibc.txt" "$MP_TMP/$mode.txt" >"$MP_TMP/diff"; then
		pass "align: $mode: same results and errno as glibc"
	else
		fail "align: $mode: differs from glibc"
		head -40 "$MP_TMP/diff"
	fi
done
# The armed run really went through the interposers: its blocks are in the hook log.
check "align: aligned allocations were sampled" test "$(od -An -v -t u4 -w48 \
	"$MP_TMP/armed-rate-1.log" | awk '$1 == 1 && $2 >= 5 && $2 <= 9' | wc -l)" -gt 1000
"$PL_BIN/pl_check" -n align -l "$MP_TMP/armed-rate-1.log" || pl_failures=$((pl_failures + 1))
pl_exit
