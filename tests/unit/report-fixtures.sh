#!/bin/bash
# memprofctl report on the upstream reference traces: the totals follow from what the upstream
# reader decoded (tests/fixtures/memtrace/*.expected): words as memtrace counts them
# (allocated_words) = Σ nsamples / rate, SE = sqrt((1 - rate) Σ nsamples) / rate, requested bytes
# below 8 words (no header words), every block collected, and merged traces add.
set -u
ctl=$MP_BUILD/bin/memprofctl
fx=$MP_SRC/tests/fixtures/memtrace
py=/usr/bin/python3
tmp=${MP_TMP:-$(mktemp -d)}

[ -x "$ctl" ] || { echo "FAIL: setup ($ctl is not built)"; exit 1; }

check() {	# name json expected-files...
	local name=$1 json=$2; shift 2
	if "$py" - "$json" "$@" <<'EOF'; then echo "PASS: $name"; else echo "FAIL: $name"; fi
import json, math, sys

rep = json.load(open(sys.argv[1]))
exp = []
for path in sys.argv[2:]:
    e = {}
    for line in open(path):
        f = line.split()
        if len(f) >= 3 and f[0] in ("info", "count", "sum"):
            e[f[0] + " " + f[1]] = f[2]
    exp.append(e)
ok = True

def eq(what, got, want, rel=1e-9):
    global ok
    good = abs(got - want) <= rel * max(1.0, abs(want))
    print("  %-28s %-22r %-22r %s" % (what, got, want, "ok" if good else "MISMATCH"))
    ok &= good

for t, e in zip(rep["traces"], exp):
    eq("sample_rate", t["sample_rate"], float(e["info sample_rate"]))
    eq("word_size", t["word_size"], int(e["info word_size"]))
    eq("pid", t["pid"], int(e["info pid"]))
    eq("start_time_us", t["start_time_us"], int(e["info start_time_us"]))
    eq("sampled_blocks", t["sampled_blocks"], int(e["count alloc"]))
    eq("freed_blocks", t["freed_blocks"], int(e["count collect"]))
    eq("promotes", t["promotes"], int(e["count promote"]))
    eq("samples", t["samples"], int(e["sum alloc.nsamples"]))
    eq("sum length words", t["sum_length_words"], int(e["sum alloc.len_words"]))

n = sum(int(e["sum alloc.nsamples"]) for e in exp)
lam = float(exp[0]["info sample_rate"])
wb = int(exp[0]["info word_size"]) / 8
tot = rep["totals"]
eq("words", tot["allocated_words"]["estimate"], n / lam)
eq("words se", tot["allocated_words"]["se"], math.sqrt((1 - lam) * n) / lam)
b = tot["bytes"]["estimate"]
good = n / lam * wb / 2 <= b < n / lam * wb
print("  %-28s %-22r %s" % ("bytes below header words'", b, "ok" if good else "MISMATCH"))
ok &= good
eq("sampled blocks", tot["sampled_blocks"], sum(int(e["count alloc"]) for e in exp))
eq("samples", tot["samples"], n)
# Every block was collected: nothing live, no leak suspects.
eq("live bytes", tot["live_bytes"]["estimate"], 0)
eq("leak suspects", len(rep["leak_suspects"]), 0)
eq("site bytes add up", sum(s["bytes"]["estimate"] for s in rep["sites_by_bytes"]),
   tot["bytes"]["estimate"])
sys.exit(0 if ok else 1)
EOF
}

for v in v2 v3; do
	if "$ctl" report -q --json --top 1000 "$fx/upstream-$v.ctf" >"$tmp/$v.json"; then
		check "fixture-$v" "$tmp/$v.json" "$fx/upstream-$v.expected"
	else
		echo "FAIL: fixture-$v (report failed)"
	fi
done
if "$ctl" report -q --json --top 1000 "$fx/upstream-v2.ctf" "$fx/upstream-v3.ctf" >"$tmp/both.json"; then
	check "fixture-merged" "$tmp/both.json" "$fx/upstream-v2.expected" "$fx/upstream-v3.expected"
else
	echo "FAIL: fixture-merged (report failed)"
fi

# The text report prints the same total: 4406 samples / 0.001 × 8 = 35248000 bytes.
if "$ctl" report -q "$fx/upstream-v2.ctf" >"$tmp/v2.txt" &&
   grep -Eq '^  allocated .*\(28157946 ± [0-9]+ bytes\)' "$tmp/v2.txt" &&
   grep -q 'Workload.small_lists$' "$tmp/v2.txt"; then
	echo "PASS: fixture-text"
else
	echo "FAIL: fixture-text"; cat "$tmp/v2.txt"
fi

# --since/--until accept 1.5s / 500ms / plain seconds; an empty window reports zero.
if "$ctl" report -q --json --since 0.5s --until 500ms "$fx/upstream-v2.ctf" >"$tmp/empty.json" &&
   "$py" -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r["totals"]["sampled_blocks"]==0 and r["sites_by_bytes"]==[] else 1)' "$tmp/empty.json" &&
   "$ctl" report -q --json --until 0.006 "$fx/upstream-v2.ctf" >"$tmp/half.json" &&
   "$py" -c 'import json,sys; r=json.load(open(sys.argv[1])); n=r["totals"]["sampled_blocks"]; sys.exit(0 if 0<n<4298 and r["traces"][0]["window_end_s"]==0.006 else 1)' "$tmp/half.json"; then
	echo "PASS: fixture-window"
else
	echo "FAIL: fixture-window"
fi
