#!/bin/bash
# memprofctl report's peak, temporary allocations and sizes on a synthetic trace with known
# truth (tests/unit/gen_trace.c computes the exact peak of the live heap over all blocks, the
# blocks freed within a threshold, and each site's fixed size): the estimated peak is within
# 4 SE of the true peak, the sites live at the peak add up to it and are what --until at that
# time calls live; temporary allocations per site (--temporary-threshold) and allocations per
# size class are within 4 SE of the truth.
. "$(dirname "$0")/report.inc"
"$gen" -s 31 -r 0.01 -n 60000 -T 2000 "$tmp/p.ctf" "$tmp/p.json" &&
	"$gen" -s 31 -r 0.01 -n 60000 "$tmp/p1.ctf" "$tmp/p1.json" ||
	{ echo "FAIL: gen_trace"; exit 1; }
"$ctl" report -q --json --top 100 --temporary-threshold 2ms "$tmp/p.ctf" >"$tmp/r.json" \
	2>"$tmp/r.err" || { echo "FAIL: report"; cat "$tmp/r.err"; exit 1; }
"$ctl" report -q --json --top 100 "$tmp/p1.ctf" >"$tmp/r1.json" 2>"$tmp/r1.err" ||
	{ echo "FAIL: report (default threshold)"; cat "$tmp/r1.err"; exit 1; }
t=$("$py" -c 'import json,sys; print("%.6f" % json.load(open(sys.argv[1]))["peak"]["t_s"])' "$tmp/r.json")
"$ctl" report -q --json --top 100 --until "$t" "$tmp/p.ctf" >"$tmp/until.json" 2>&1 ||
	echo "FAIL: report --until $t"

"$py" - "$tmp" <<'EOF'
import json, math, sys
tmp = sys.argv[1]
rep, truth = json.load(open(tmp + "/r.json")), json.load(open(tmp + "/p.json"))
rep1, truth1 = json.load(open(tmp + "/r1.json")), json.load(open(tmp + "/p1.json"))
until = json.load(open(tmp + "/until.json"))

def z(est, se, t):
    return (est - t) / se if se > 0 else (0 if est == t else 1e9)

pk = rep["peak"]
zz = z(pk["live_bytes"]["estimate"], pk["live_bytes"]["se"], truth["peak_live_bytes"])
print("  peak %.0f ± %.0f at %.3f s; truth %d at %.3f s; z %+.2f" % (pk["live_bytes"]["estimate"], pk["live_bytes"]["se"], pk["t_s"], truth["peak_live_bytes"], truth["peak_t_s"], zz))
total = sum(s["peak_live_bytes"]["estimate"] for s in pk["sites"])
at = {s["site"]: s["live_bytes"]["estimate"] for s in until["sites_by_bytes"]}
same = all(abs(s["peak_live_bytes"]["estimate"] - at.get(s["site"], 0)) <= 1e-6 * max(1, at.get(s["site"], 0)) for s in pk["sites"])
ok = abs(zz) <= 4 and abs(total - pk["live_bytes"]["estimate"]) <= 1e-6 * total and same and \
    [s["peak_live_bytes"]["estimate"] for s in pk["sites"]] == sorted((s["peak_live_bytes"]["estimate"] for s in pk["sites"]), reverse=True)
print("%s: peak" % ("PASS" if ok else "FAIL"))

def temporaries(rep, truth, name):
    bad = []
    sites = {s["site"]: s for s in rep["sites_by_bytes"]}
    for t in truth["sites"]:
        s = sites[t["function"]]
        for k in ("allocations", "bytes"):
            est = s["temporary_" + k]["estimate"]
            tse = math.sqrt(t["var_temporary_" + k])
            zz = z(est, tse, t["temporary_" + k])
            print("  %-15s temporary %-11s %10.0f truth %8d z %+5.2f" % (t["function"], k, est, t["temporary_" + k], zz))
            if abs(zz) > 4:
                bad.append("%s %s z %.2f" % (t["function"], k, zz))
    print("%s: %s%s" % ("FAIL" if bad else "PASS", name, " (" + "; ".join(bad) + ")" if bad else ""))
temporaries(rep, truth, "temporary-2ms")
temporaries(rep1, truth1, "temporary-default-1ms")
ok = rep["temporary"]["threshold_s"] == 0.002 and rep1["temporary"]["threshold_s"] == 0.001
print("%s: temporary-threshold" % ("PASS" if ok else "FAIL"))

def size_class(payload):	# <= 8 B, <= 16 B, ... as the report's classes
    k, top = 0, 8
    while payload > top:
        k, top = k + 1, top * 2
    return top
bad = []
sites = {s["site"]: s for s in rep["sites_by_bytes"]}
overall = {}
for t in truth["sites"]:
    top = size_class((t["size"] + 7) // 8 * 8)
    o = overall.setdefault(top, [0, 0.0])
    o[0] += t["allocations"]
    o[1] += t["var_allocations"]
    cls = sites[t["function"]]["sizes"]
    if [c["max_bytes"] for c in cls] != [top]:
        bad.append("%s in classes %s, not <= %d" % (t["function"], [c["max_bytes"] for c in cls], top))
        continue
    zz = z(cls[0]["allocations"]["estimate"], math.sqrt(t["var_allocations"]), t["allocations"])
    if abs(zz) > 4:
        bad.append("%s size class z %.2f" % (t["function"], zz))
for c in rep["sizes"]:
    n, v = overall.pop(c["max_bytes"], (0, 0))
    zz = z(c["allocations"]["estimate"], math.sqrt(v), n)
    print("  <= %8d B allocations %9.0f truth %8d z %+5.2f" % (c["max_bytes"], c["allocations"]["estimate"], n, zz))
    if abs(zz) > 4:
        bad.append("class %d z %.2f" % (c["max_bytes"], zz))
if overall:
    bad.append("classes missing: %s" % sorted(overall))
print("%s: sizes%s" % ("FAIL" if bad else "PASS", " (" + "; ".join(bad) + ")" if bad else ""))
EOF

"$ctl" report -q --top 3 "$tmp/p1.ctf" >"$tmp/r.txt" 2>&1
if grep -q "^Peak of the live heap: .* at [0-9.]* s" "$tmp/r.txt" &&
   grep -q "^Temporary allocations (freed within 1.000 ms): " "$tmp/r.txt" &&
   grep -q "^Allocations by size" "$tmp/r.txt" && grep -q "^  *<= 64.0 KiB " "$tmp/r.txt"; then
	echo "PASS: text"
else
	echo "FAIL: text"; cat "$tmp/r.txt"
fi
