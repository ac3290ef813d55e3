#!/bin/bash
# bench-fast: the cost of profiling through the cooperative fast path. bench/fast_bench (a
# mixed-size malloc/free loop, 16..4096 bytes, 1 and 2 threads) under
#   memprofctl record --preload --interval 524288   (a sample every 512 KiB on average)
#   memprofctl record --preload                      (the default rate, 1e-4 per word: 80 KiB)
# against the same loop run plain (no preload, no profiler). Runs are paired, A then B, RUNS
# times (default 7); the ratio is taken pair by pair, reported as median (min-max), and the
# cost per sampled block (its alloc hook, its free's queued id and batched report, the BPF
# programs, the daemon's processing running concurrently) is (A - B) / blocks sampled, in µs,
# median over the pairs. Times are the loop's own (start-up and attaching are outside). Not a
# test: prints a table and writes bench/results/fast-latest.txt. The machine must be otherwise
# idle: other load shows up as noise in the ratio's min-max. THREADS="1" RATES="512KiB" select
# rows (short runs while iterating: RUNS=3 OPS=2000000). Each row is run twice: immediate
# reports (mode "immediate", --batch 1) and the deferred mode, --batch $BATCH (mode "batchN",
# record's default; BATCH=16 unless set; BATCH= leaves those rows out).
# PIN=1 runs the loop on the last CPUs (one per thread) and the profiler on the others, the
# plain loop on the same CPUs (modes get "+pin"; rows with as many threads as CPUs are left
# out): the cost of the fast path itself, without the scheduler ever putting the profiler's
# thread on the loop's CPU. Writes bench/results/fast-pinned-latest.txt instead (BENCH_OUT=FILE:
# there).
set -eu
B=${BENCH_BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
BIN=$B/bench/fast_bench
CTL=$B/bin/memprofctl
RUNS=${RUNS:-7}
OPS=${OPS:-4000000}
BATCH=${BATCH-16}
PIN=${PIN:-0}
OUT=${BENCH_OUT:-$(cd "$(dirname "$0")" && pwd)/results/fast-latest.txt}
[ "$PIN" = 1 ] && [ -z "${BENCH_OUT:-}" ] && OUT=${OUT%latest.txt}pinned-latest.txt
NCPU=$(nproc)
mkdir -p "$(dirname "$OUT")"

[ "$(id -u)" -eq 0 ] || { echo "bench-fast: needs root (BPF)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

elapsed() { awk '/^elapsed_ns/ {print $2}' "$1"; }

# PIN=1: taskset prefixes for the profiler ($1 = "ctl") and the loop ($1 = "loop") of $2 threads
pin() {
	[ "$PIN" = 1 ] || return 0
	if [ "$1" = ctl ]; then
		echo taskset -c "0-$((NCPU - $2 - 1))"
	else
		echo taskset -c "$((NCPU - $2))-$((NCPU - 1))"
	fi
}

run_a() {	# threads rate-args... -> "ns blocks"
	local th=$1; shift
	# shellcheck disable=SC2046 # word splitting of pin's output is the point
	$(pin ctl "$th") "$CTL" --json record --preload "$@" -o "$tmp/a.ctf" -- \
		$(pin loop "$th") "$BIN" "$th" "$OPS" >"$tmp/a.out" 2>"$tmp/a.err"
	echo "$(elapsed "$tmp/a.out") $(/usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1]):
    if l.startswith("{"):
        d = json.loads(l)
        assert d["processes"][0]["mode"] == "preload", d
        print(d["processes"][0]["sampled_blocks"])' "$tmp/a.err")"
}

run_b() {	# threads
	# shellcheck disable=SC2046
	$(pin loop "$1") "$BIN" "$1" "$OPS" >"$tmp/b.out"
	elapsed "$tmp/b.out"
}

summary() {	# pairs file ("a_ns blocks b_ns") -> table columns
	/usr/bin/python3 - "$1" "$OPS" "$2" <<'PY'
import statistics as st, sys
lines = [l.split() for l in open(sys.argv[1]) if l.strip()]
rows = [tuple(map(float, f)) for f in lines if len(f) == 3]
failed = len(lines) - len(rows)
if not rows:
    print("every run failed"); sys.exit(0)
ops = int(sys.argv[2]) * int(sys.argv[3])
ratio = [a / b for a, _, b in rows]
per = [(a - b) / n / 1000 for a, n, b in rows if n > 0]
a = st.median(r[0] for r in rows) / ops
b = st.median(r[2] for r in rows) / ops
print(f"{a:7.2f} {b:7.2f}  {st.median(ratio):.3f} ({min(ratio):.3f}-{max(ratio):.3f})"
      f"  {st.median(r[1] for r in rows):8.0f}  {st.median(per):6.2f}"
      + (f"  ({failed} failed runs left out)" if failed else ""))
PY
}

{
echo "bench-fast: $(date -u +%FT%TZ) $(uname -r), $RUNS paired runs of $OPS ops per thread$(
	[ "$PIN" = 1 ] && echo ", loop on the last CPU(s) of $NCPU, profiler on the others")"
printf '%-8s %-14s %-12s %7s %7s  %-21s %8s  %s\n' threads rate mode "A ns/op" "B ns/op" \
	"ratio A/B (min-max)" blocks "µs/sampled block (incl. free)"
for th in ${THREADS:-1 2}; do
	if [ "$PIN" = 1 ] && [ "$th" -ge "$NCPU" ]; then
		echo "($th threads: no CPU left for the profiler with PIN=1, left out)"
		continue
	fi
	for cfg in ${RATES:-512KiB default}; do
		case $cfg in
		512KiB) args=(--interval 524288) ;;
		default) args=() ;;
		esac
		for mode in immediate ${BATCH:+batch$BATCH}; do
			margs=("${args[@]}")
			if [ "$mode" = immediate ]; then
				margs+=(--batch 1)	# record's default is deferred
			else
				margs+=(--batch "$BATCH")
			fi
			run_a "$th" "${margs[@]}" >/dev/null	# warm-up
			: >"$tmp/pairs"
			for _ in $(seq "$RUNS"); do
				a=$(run_a "$th" "${margs[@]}" || echo failed)
				b=$(run_b "$th" || echo failed)
				echo "$a $b" >>"$tmp/pairs"
			done
			[ "$PIN" = 1 ] && mode+=+pin
			printf '%-8s %-14s %-12s %s\n' "$th" "$cfg" "$mode" \
				"$(summary "$tmp/pairs" "$th")"
		done
	done
done
} | tee "$OUT"
