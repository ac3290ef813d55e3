#!/bin/bash
# Smoke check of bench-fast (bench/fast-bench.sh): one pair of the 1-thread 512 KiB rows, as
# `make bench` runs them, unpinned and with PIN=1 (the loop on the last CPU, the profiler on
# the others). Checks that every row has a ratio and a sampled-block count, i.e. that record
# --preload ran the loop in preload mode (the script asserts the mode) and sampled it.
set -u
[ "$(id -u)" -eq 0 ] || { echo "needs root for BPF"; exit 77; }
for b in bench/fast_bench lib/libmemprof-preload.so bin/memprofctl; do
	[ -x "$MP_BUILD/$b" ] || { echo "FAIL: bench-fast-quick: $MP_BUILD/$b is not built"; exit 1; }
done
# row MODE FILE: the row's ratio is a number and it sampled blocks
row() {
	awk -v m="$1" '$1 == 1 && $2 == "512KiB" && $3 == m {
		ok = $6 ~ /^[0-9]+\.[0-9]+$/ && $8 + 0 > 0 } END { exit !ok }' "$2"
}
check() {	# NAME PIN MODES...
	local name=$1 pin=$2 out=$MP_TMP/$1.txt
	shift 2
	BENCH_BUILD=$MP_BUILD BENCH_OUT=$out PIN=$pin THREADS=1 RATES=512KiB RUNS=1 \
		OPS=300000 "$MP_SRC/bench/fast-bench.sh" >"$MP_TMP/$name.log" 2>&1
	local rc=$? good=1
	[ $rc -eq 0 ] || good=0
	for m in "$@"; do
		row "$m" "$out" || good=0
	done
	if [ $good = 1 ]; then
		echo "PASS: $name"
	else
		echo "FAIL: $name (exit $rc)"
		cat "$MP_TMP/$name.log"
		failed=1
	fi
}
failed=0
check bench-fast-quick 0 immediate batch16
if [ "$(nproc)" -ge 2 ]; then
	check bench-fast-quick-pinned 1 immediate+pin batch16+pin
else
	echo "# one CPU: PIN=1 has no CPU for the profiler"
fi
exit $failed
