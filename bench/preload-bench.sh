#!/bin/bash
# Overhead of libmemprof-preload's fast path with no profile attached: paired runs, A (under
# the preload) and B (plain) in turn, ratio taken pair by pair (median, min-max) and added ns
# (median of A-B), as in docs/probe-costs.md. Configurations:
#   disarmed    LD_PRELOAD only: the countdown polls every 512 KiB, no hook is reached
#   armed-512k  MEMPROF_ARM=1, rate 1/65536 (a sample every 512 KiB on average): the hook runs
#               on samples but no probe is attached (its nop5 costs nothing)
# Not a test: prints a table. BENCH_BUILD (default build/) and RUNS (default 9).
set -eu
B=${BENCH_BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
BIN=$B/bench/preload_bench
LIB=$B/lib/libmemprof-preload.so
RUNS=${RUNS:-9}
MIXED_N=${MIXED_N:-5000000}

stat_of() {	# mode env... -> the statistic of one run
	local mode=$1; shift
	# the median window of the run
	if [ "$mode" = isolated ]; then
		env "$@" "$BIN" isolated | awk '{print $4}'
	else
		env "$@" "$BIN" mixed "$MIXED_N" | awk '{print $4}'
	fi
}

summary() {	# file with "a b" lines -> "A-median B-median ratio(min-max) added"
	/usr/bin/python3 - "$1" <<'PY'
import statistics, sys
rows = [tuple(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
a = [r[0] for r in rows]; b = [r[1] for r in rows]
ratio = [x / y for x, y in rows]; added = [x - y for x, y in rows]
print(f"{statistics.median(a):8.2f} {statistics.median(b):8.2f} "
      f"{statistics.median(ratio):5.3f} ({min(ratio):.3f}-{max(ratio):.3f}) "
      f"{statistics.median(added):+6.2f}")
PY
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-10s %-11s %8s %8s %-20s %s\n' loop config "A ns" "B ns" "ratio A/B (min-max)" \
	"added ns/pair"
for mode in isolated mixed; do
	for cfg in disarmed armed-512k; do
		case $cfg in
		disarmed) envA=(LD_PRELOAD="$LIB") ;;
		armed-512k) envA=(LD_PRELOAD="$LIB" MEMPROF_ARM=1 MEMPROF_RATE=1.52587890625e-05) ;;
		esac
		stat_of "$mode" "${envA[@]}" >/dev/null	# warm-up
		: >"$tmp/pairs"
		for _ in $(seq "$RUNS"); do
			a=$(stat_of "$mode" "${envA[@]}")
			b=$(stat_of "$mode" MEMPROF_BENCH_BASELINE=1)
			echo "$a $b" >>"$tmp/pairs"
		done
		printf '%-10s %-11s %s\n' "$mode" "$cfg" "$(summary "$tmp/pairs")"
	done
done
