#!/bin/bash
# memprofctl report on several traces (tests/unit/gen_trace.c, known truth): one time axis from
# the earliest trace's start (--since on it, the window stated per trace when they differ), a
# trace given twice counted once with a warning, "live at end" equal to the timeline's last
# point, --live tables showing the value they rank by, objects without symbols named once at
# the end with their build-id and Debian -dbgsym package, the CPython pymalloc note, and a
# one-line summary instead of the text report when the outputs are files.
. "$(dirname "$0")/report.inc"
"$gen" -s 3 -r 0.01 -n 50000 "$tmp/a.ctf" "$tmp/a.json" &&
	"$gen" -s 4 -r 0.01 -n 20000 -p 99 -t 2000000 -o libz.so.1 "$tmp/b.ctf" "$tmp/b.json" &&
	"$gen" -s 5 -r 0.01 -n 2000 -e /usr/bin/python3.11 "$tmp/py.ctf" "$tmp/py.json" &&
	cp "$tmp/a.ctf" "$tmp/a-copy.ctf" || { echo "FAIL: gen_trace"; exit 1; }

json() {	# name args...: the report as JSON into $tmp/name.json, stderr into name.err
	local name=$1; shift
	"$ctl" report -q --json --top 100 "$@" >"$tmp/$name.json" 2>"$tmp/$name.err" ||
		{ echo "FAIL: $name (report exited non-zero)"; cat "$tmp/$name.err"; return 1; }
}

# The same trace twice (another name): counted once, with a warning naming both.
if json one "$tmp/a.ctf" && json dup "$tmp/a.ctf" "$tmp/a-copy.ctf" &&
   grep -q "a-copy.ctf' is the same trace as '.*a.ctf'.*counted once" "$tmp/dup.err" &&
   "$py" - "$tmp/one.json" "$tmp/dup.json" <<'EOF'
import json, sys
one, dup = (json.load(open(p)) for p in sys.argv[1:])
assert len(dup["traces"]) == 1 and dup["duplicate_traces"] == 1, (len(dup["traces"]), dup["duplicate_traces"])
assert dup["totals"] == one["totals"], (dup["totals"], one["totals"])
EOF
then echo "PASS: duplicate-counted-once"; else echo "FAIL: duplicate-counted-once"; cat "$tmp/dup.err"; fi

# Two traces 2 s apart: b's times are 2 s later on the axis; its window, and --since 2.1s,
# are on that axis; live at end is the last timeline point (a ended first: its live blocks
# stay counted), and the sum of both traces' truths.
if json two --points 7 "$tmp/a.ctf" "$tmp/b.ctf" && json since --since 2.1s "$tmp/a.ctf" "$tmp/b.ctf" &&
   "$py" - "$tmp/two.json" "$tmp/since.json" "$tmp/a.json" "$tmp/b.json" <<'EOF'
import json, math, sys
two, since, ta, tb = (json.load(open(p)) for p in sys.argv[1:])
a, b = two["traces"]
assert abs(b["axis_offset_s"] - 2.0) < 1e-9 and a["axis_offset_s"] == 0, (a, b)
last = two["live_heap"][-1]
assert abs(last["t_s"] - (2.0 + b["window_end_s"])) < 1e-6, last
assert last["live_bytes"] == two["totals"]["live_bytes"], (last, two["totals"])
truth = sum(s["live_bytes"] for t in (ta, tb) for s in t["sites"])
var = sum(s["var_live_bytes"] for t in (ta, tb) for s in t["sites"])
z = (last["live_bytes"]["estimate"] - truth) / math.sqrt(var)
print("  live at end %.0f truth %d z %+.2f" % (last["live_bytes"]["estimate"], truth, z))
assert abs(z) <= 4
sa, sb = since["traces"]
assert sa["window_start_s"] >= sa["duration_s"], sa	# a ends before 2.1 s: nothing of it
assert abs(sb["window_start_s"] - 0.1) < 1e-6, sb	# b's window opens 0.1 s into it
EOF
then echo "PASS: one-time-axis"; else echo "FAIL: one-time-axis"; fi

"$ctl" report -q --top 3 "$tmp/a.ctf" "$tmp/b.ctf" >"$tmp/two.txt" 2>&1
if grep -q "^Times: seconds from .* (the earliest trace's start)" "$tmp/two.txt" &&
   grep -q "^  b.ctf: .* 2.000 .. 2.200 s, window 2.000 .. 2.200 s" "$tmp/two.txt" &&
   grep -q "^Window: per trace" "$tmp/two.txt"; then
	echo "PASS: window-per-trace"
else
	echo "FAIL: window-per-trace"; cat "$tmp/two.txt"
fi
"$ctl" report -q --top 3 "$tmp/a.ctf" >"$tmp/one.txt" 2>&1
if grep -q "^Window: 0.000 s .. 0.500 s; sites by function" "$tmp/one.txt"; then
	echo "PASS: window-one-trace"
else
	echo "FAIL: window-one-trace"; cat "$tmp/one.txt"
fi

# --live: each table's first column is what it is ranked by, and it is sorted by it.
"$ctl" report -q --live --top 7 "$tmp/a.ctf" >"$tmp/live.txt" 2>&1
if "$py" - "$tmp/live.txt" "$tmp/one.json" <<'EOF'
import json, re, sys
text = open(sys.argv[1]).read()
rep = json.load(open(sys.argv[2]))
units = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}
def val(s):
    n, u = s.split()
    return float(n) * units[u]
for title, col, key in (("live bytes", "live bytes", "live_bytes"), ("live blocks", "live blocks", "live_allocations")):
    m = re.search(r"Top \d+ sites by estimated %s .*\n +# +%s .*\n((?:  +\d+ .*\n)+)" % (title, col), text)
    assert m, "no table ranked by " + title
    est = {s["site"]: s[key]["estimate"] for s in rep["sites_by_bytes"]}
    prev = None
    for line in m.group(1).splitlines():
        site = line.split()[-1]
        cell = line[5:17].strip()
        v = val(cell) if key == "live_bytes" else float(cell)
        assert abs(v - est[site]) <= max(0.051 * est[site], 1), (title, site, v, est[site])
        assert prev is None or v <= prev * 1.06, (title, line)
        prev = v
EOF
then echo "PASS: live-tables-show-their-key"; else echo "FAIL: live-tables-show-their-key"; cat "$tmp/live.txt"; fi

# Objects without symbols: named once at the end, with the build-id and the package.
n=$(grep -c "libz.so.1" "$tmp/two.txt")
want="libz.so.1 (/usr/lib/x86_64-linux-gnu/libz.so.1, build-id [0-9a-f]*: debug file /usr/lib/debug/.build-id/"
if [ "$(sed -n '/^Objects without symbols/,$p' "$tmp/two.txt" | grep -c "^  $want.*: install zlib1g-dbgsym$")" = 1 ] &&
   grep -q DEBUGINFOD_URLS "$tmp/two.txt" && ! grep -q "^Objects without symbols" "$tmp/one.txt" &&
   ! grep -q "^CPython" "$tmp/two.txt"; then
	echo "PASS: stripped-objects ($n lines name libz.so.1)"
else
	echo "FAIL: stripped-objects"; cat "$tmp/two.txt"
fi
"$ctl" report -q --top 3 "$tmp/py.ctf" >"$tmp/py.txt" 2>&1
if grep -q "^CPython: pymalloc serves objects of 512 bytes or less" "$tmp/py.txt" &&
   grep -q "PYTHONMALLOC=malloc" "$tmp/py.txt"; then
	echo "PASS: pymalloc-note"
else
	echo "FAIL: pymalloc-note"; cat "$tmp/py.txt"
fi

# --flamegraph/--pprof to files: one summary line instead of the text report; -t asks for it.
"$ctl" report -q -f "$tmp/s.svg" -p "$tmp/s.pb.gz" "$tmp/a.ctf" "$tmp/b.ctf" >"$tmp/sum.txt" 2>&1
"$ctl" report -q -t -f "$tmp/t.svg" "$tmp/a.ctf" >"$tmp/sum-t.txt" 2>&1
"$ctl" report -q -f - "$tmp/a.ctf" >"$tmp/stdout.svg" 2>"$tmp/stdout.err"
if [ "$(wc -l <"$tmp/sum.txt")" = 1 ] &&
   grep -q "^Wrote flame graph '$tmp/s.svg' and pprof profile '$tmp/s.pb.gz': 2 traces, .* allocated, .* live at end, [0-9]* sites$" "$tmp/sum.txt" &&
   [ -s "$tmp/s.svg" ] && [ -s "$tmp/s.pb.gz" ] &&
   grep -q "^Top [0-9]* sites by estimated bytes" "$tmp/sum-t.txt" && ! grep -q "^Wrote" "$tmp/sum-t.txt" &&
   xmllint --noout "$tmp/stdout.svg" && [ ! -s "$tmp/stdout.err" ]; then
	echo "PASS: export-summary-line"
else
	echo "FAIL: export-summary-line"; cat "$tmp/sum.txt"
fi
