#!/bin/bash
# bench-join: how long after its exec a process of a target is profiled. A private memprofd
# profiles `--exe` a copy of wl_alloc (uprobe mode) and, in a second profile, `--cgroup` a
# v2 cgroup that a shell moves itself into before it execs the same program; each is run RUNS
# times (default 50). memprofd's debug log says, for each process that joins, how long after
# its exec (the BPF record's time) its probes and trace were in place. Prints the median,
# 90th percentile and maximum per target kind, and what the processes allocated before that
# (the estimate's shortfall against the 20,000 x 64-byte blocks each run allocates); the
# result goes to bench/results/join-latest.txt (BENCH_OUT=FILE: there). Not a test; needs root.
set -eu
B=${BENCH_BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
RUNS=${RUNS:-50}
OUT=${BENCH_OUT:-$(cd "$(dirname "$0")" && pwd)/results/join-latest.txt}
[ "$(id -u)" = 0 ] || { echo "bench-join: needs root" >&2; exit 1; }
WL=$B/tests/workloads/wl_alloc
for f in "$B/bin/memprofd" "$B/bin/memprofctl" "$WL"; do
	[ -x "$f" ] || { echo "bench-join: $f is not built (make all test-bins)" >&2; exit 1; }
done
V2=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/mounts)
[ -n "$V2" ] || { echo "bench-join: no cgroup v2 hierarchy mounted" >&2; exit 1; }
tmp=$(mktemp -d)
CG=$V2/memprofd-bench-join-$$
dpid=
cleanup() {
	[ -n "$dpid" ] && kill "$dpid" 2> /dev/null && wait "$dpid" 2> /dev/null
	rmdir "$CG" 2> /dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
ctl() { "$B/bin/memprofctl" --socket "$tmp/bus" "$@"; }
mkdir -p "$CG"
cp "$WL" "$tmp/wl_exe"
cp "$WL" "$tmp/wl_cg"

"$B/bin/memprofd" --socket "$tmp/bus" --state-dir "$tmp/state" --log-level debug \
	> "$tmp/memprofd.log" 2>&1 &
dpid=$!
for _ in $(seq 100); do ctl list > /dev/null 2>&1 && break; sleep 0.1; done
ctl list > /dev/null || { cat "$tmp/memprofd.log" >&2; exit 1; }
E=$(ctl attach -r 0.01 --exe "$tmp/wl_exe" | awk '{print $2}')
C=$(ctl attach -r 0.01 --cgroup "$CG" | awk '{print $2}')
for _ in $(seq "$RUNS"); do
	"$tmp/wl_exe" equal 20000 64 200 > /dev/null
	sh -c "echo \$\$ > '$CG/cgroup.procs'; exec '$tmp/wl_cg' equal 20000 64 200" > /dev/null
done
sleep 1
for id in "$E" "$C"; do
	ctl --json status "$id" > "$tmp/status.$id"
done
kill "$dpid"
wait "$dpid" 2> /dev/null || true
dpid=

/usr/bin/python3 - "$tmp/memprofd.log" "$tmp/status.$E" "$tmp/status.$C" "$RUNS" \
	> "$tmp/out" <<'EOF'
import json, re, statistics, sys
log, runs = open(sys.argv[1]).read(), int(sys.argv[4])
truth = 20000 * 64
for kind, st in (("exe", sys.argv[2]), ("cgroup", sys.argv[3])):
    ms = sorted(float(m.group(1)) for m in re.finditer(
        r"joined %s:\S+ ([0-9.]+) ms after its (?:exec|move)" % kind, log))
    procs = json.load(open(st))["processes"]
    est = [p["allocated_bytes"] for p in procs if "allocated_bytes" in p]
    if not ms:
        print("%-7s no process joined" % kind)
        continue
    p90 = ms[min(len(ms) - 1, int(0.9 * len(ms)))]
    short = 1 - statistics.mean(est) / truth if est else float("nan")
    print("%-7s %d of %d runs joined; exec (or move) -> profiled: median %.2f ms, p90 %.2f ms, max "
          "%.2f ms; allocated bytes estimated %.1f%% below the truth (mean of %d)"
          % (kind, len(ms), runs, statistics.median(ms), p90, ms[-1], 100 * short, len(est)))
EOF
cat "$tmp/out"
mkdir -p "$(dirname "$OUT")"
cp "$tmp/out" "$OUT"
