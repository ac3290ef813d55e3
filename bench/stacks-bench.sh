#!/bin/bash
# bench-stacks: what backtraces cost the daemon per sampled event, with frame-pointer walks
# (--unwind=fp: BPF's bpf_get_stack, nothing to unwind in the daemon) and DWARF unwinding of
# the stack copy (--unwind=dwarf; auto: dwarf after judging the objects), measured inside the
# engine (`memprofctl --json record`'s "stacks" figures: CLOCK_MONOTONIC around each alloc
# event's processing, and around the unwinding alone). Workloads: tests/workloads/stk_c
# (C, no frame pointers) and Debian's python3 running tests/workloads/stk_script.py. Then the
# stack-copy window: how many python3 stacks 30 Python calls deep each window size cuts.
# Not a test: prints tables. BENCH_BUILD (default build/), RUNS (default 3, medians shown).
set -eu
SRC=$(cd "$(dirname "$0")/.." && pwd)
B=${BENCH_BUILD:-$SRC/build}
CTL=$B/bin/memprofctl
STK_C=$B/tests/workloads/stk_c
PY=/usr/bin/python3
SCRIPT=$SRC/tests/workloads/stk_script.py
RUNS=${RUNS:-3}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

if [ "$(id -u)" -ne 0 ]; then
	echo "bench-stacks: needs root (BPF uprobes); skipped"
	exit 0
fi
for f in "$CTL" "$STK_C" "$PY"; do
	[ -x "$f" ] || { echo "bench-stacks: missing $f; skipped"; exit 0; }
done

run() {	# label record-options... -- CMD...: one JSON summary line per run in $T/label
	local label=$1; shift
	: >"$T/$label"
	for i in $(seq "$RUNS"); do
		"$CTL" --json record -o "$T/x.ctf" "$@" >/dev/null 2>"$T/err" || {
			echo "bench-stacks: '$label' failed:"; cat "$T/err"; return 1; }
		tail -1 "$T/err" >>"$T/$label"
	done
}

report() {	# label...: medians over the runs
	$PY - "$T" "$@" <<'PY'
import json, statistics, sys
d = sys.argv[1]
for label in sys.argv[2:]:
    runs = [json.loads(l) for l in open("%s/%s" % (d, label)) if l.strip()]
    def med(f):
        return statistics.median(f(r) for r in runs)
    ev = med(lambda r: r["stacks"]["events"])
    per_ev = med(lambda r: r["stacks"]["event_ns"] / max(1, r["stacks"]["events"]) / 1e3)
    dw = med(lambda r: r["stacks"]["dwarf"])
    per_uw = med(lambda r: r["stacks"]["unwind_ns"] / max(1, r["stacks"]["dwarf"]) / 1e3)
    lost = med(lambda r: r["drops"]["ustack_lost"])
    used = med(lambda r: r["stacks"]["max_stack_used_bytes"])
    print("%-22s %7d %11.1f %7d %11.1f %6d %10d" % (label, ev, per_ev, dw, per_uw, lost, used))
PY
}

echo "# the daemon's cost per sampled event (medians of $RUNS runs; us = microseconds)"
echo "# event us: all the engine does with an alloc event (unwinding, symbolizing new addresses,"
echo "# writing the trace); unwind us: DWARF unwinding (and auto's judgement) per DWARF stack"
printf "%-22s %7s %11s %7s %11s %6s %10s\n" config events "event us" dwarf "unwind us" lost \
	"stack used"
for mode in fp dwarf auto; do
	run "c-$mode" --unwind=$mode -r 1e-3 -- "$STK_C" 5000 50
	run "python3-$mode" --unwind=$mode -r 1e-3 -- $PY "$SCRIPT" 300
done
report c-fp c-dwarf c-auto python3-fp python3-dwarf python3-auto

echo
echo "# stack-copy window: python3 at 30 levels of Python recursion (stk_script.py 100 30)"
printf "%-22s %7s %11s %7s %11s %6s %10s\n" window events "event us" dwarf "unwind us" lost \
	"stack used"
for w in 4096 8192 16384 32768 65536; do
	run "window-$w" --unwind=dwarf --stack-copy-size $w -r 1e-3 -- $PY "$SCRIPT" 100 30
done
report window-4096 window-8192 window-16384 window-32768 window-65536
$PY - "$T" <<'PY'
import json, statistics, sys
for w in (4096, 8192, 16384, 32768, 65536):
    runs = [json.loads(l) for l in open("%s/window-%d" % (sys.argv[1], w)) if l.strip()]
    cut = statistics.median(r["stacks"]["window_cut"] / max(1, r["stacks"]["dwarf"]) for r in runs)
    print("window %5d bytes: %5.1f%% of DWARF stacks cut where the copy ended" % (w, 100 * cut))
PY
