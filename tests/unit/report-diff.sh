#!/bin/bash
# memprofctl report --base OLD NEW on two known runs (tests/unit/gen_trace.c: the new run is
# longer, one site allocates less, one leaks more): every site's change of allocated and live
# bytes is within 4 SE of the true change, with the SE of the difference (variances add);
# sites are ranked by the size of the change; a set of base traces is their sum; the pprof
# difference equals `go tool pprof -diff_base`; the flame graph colours growth and shrinkage.
. "$(dirname "$0")/report.inc"
"$gen" -s 21 -r 0.005 -n 40000 "$tmp/old.ctf" "$tmp/old.json" &&
	"$gen" -s 22 -r 0.005 -n 60000 -W tiny_nodes=3 -W leak_session=20 "$tmp/new.ctf" \
		"$tmp/new.json" &&
	"$gen" -s 23 -r 0.005 -n 20000 -p 77 "$tmp/old2.ctf" "$tmp/old2.json" ||
	{ echo "FAIL: gen_trace"; exit 1; }

if ! "$ctl" report -q --json --top 100 --flamegraph "$tmp/d.svg" --pprof "$tmp/d.pb.gz" \
	--base "$tmp/old.ctf" "$tmp/new.ctf" >"$tmp/d.json" 2>"$tmp/d.err"; then
	echo "FAIL: report --base"; cat "$tmp/d.err"; exit 1
fi
"$ctl" report -q --json --top 100 --base "$tmp/old.ctf" --base "$tmp/old2.ctf" "$tmp/new.ctf" \
	>"$tmp/set.json" 2>&1 || echo "FAIL: report with two --base"
"$ctl" report -q --json --top 100 "$tmp/old2.ctf" >"$tmp/old2r.json" 2>&1 ||
	echo "FAIL: report old2"

"$py" - "$tmp" <<'EOF'
import json, math, sys
tmp = sys.argv[1]
rep = json.load(open(tmp + "/d.json"))
old, new = (json.load(open("%s/%s.json" % (tmp, n))) for n in ("old", "new"))
d = rep["diff"]
truth = {}
for sign, t in ((-1, old), (1, new)):
    for s in t["sites"]:
        e = truth.setdefault(s["function"], {"bytes": 0, "live_bytes": 0, "var_bytes": 0, "var_live_bytes": 0})
        for k in ("bytes", "live_bytes"):
            e[k] += sign * s[k]
            e["var_" + k] += s["var_" + k]
bad = []
sites = {s["site"]: s for s in d["sites_by_change_bytes"]}
for name, t in sorted(truth.items()):
    s = sites.get(name)
    if not s:
        bad.append("no site " + name)
        continue
    for k in ("bytes", "live_bytes"):
        ch = s[k]["change"]
        tse = math.sqrt(t["var_" + k])
        z = (ch["estimate"] - t[k]) / tse if tse else 0
        print("  %-15s %-10s change %12.0f truth %10d se %8.0f (exact %8.0f) z %+5.2f" % (name, k, ch["estimate"], t[k], ch["se"], tse, z))
        if abs(z) > 4:
            bad.append("%s %s z %.2f" % (name, k, z))
        # the SE of the difference: both sides' variances added
        want = math.hypot(s[k]["base"]["se"], s[k]["new"]["se"])
        if abs(ch["se"] - want) > 1e-6 * max(1, want):
            bad.append("%s %s se %.3f, not hypot(base, new) %.3f" % (name, k, ch["se"], want))
        if tse > 0 and abs(t[k]) > 10 * tse and not 0.6 < ch["se"] / tse < 1.6:
            bad.append("%s %s se %.1f vs exact %.1f" % (name, k, ch["se"], tse))
print("%s: diff-estimates%s" % ("FAIL" if bad else "PASS", " (" + "; ".join(bad) + ")" if bad else ""))

ok = True
for key, field in (("sites_by_change_bytes", "bytes"), ("sites_by_change_live_bytes", "live_bytes")):
    ch = [abs(s[field]["change"]["estimate"]) for s in d[key]]
    ok &= ch == sorted(ch, reverse=True)
ok &= sites["tiny_nodes"]["bytes"]["change"]["estimate"] < 0 < sites["leak_session"]["live_bytes"]["change"]["estimate"]
print("%s: diff-ranking" % ("PASS" if ok else "FAIL"))

st = json.load(open(tmp + "/set.json"))["diff"]["totals"]
o2 = json.load(open(tmp + "/old2r.json"))["totals"]
base = d["totals"]["bytes"]["base"]["estimate"] + o2["bytes"]["estimate"]
ok = abs(st["bytes"]["base"]["estimate"] - base) < 1e-6 * base and \
    abs(st["bytes"]["new"]["estimate"] - d["totals"]["bytes"]["new"]["estimate"]) < 1e-6 * base
print("%s: diff-base-set" % ("PASS" if ok else "FAIL"))
EOF

"$ctl" report -q --top 5 --base "$tmp/old.ctf" "$tmp/new.ctf" >"$tmp/d.txt" 2>&1
if grep -q "^Change from the base (new - base" "$tmp/d.txt" &&
   grep -q "^Top 5 sites by change in allocated bytes" "$tmp/d.txt" &&
   grep -q "^Top 5 sites by change in live bytes" "$tmp/d.txt" &&
   grep -q "^  base old.ctf: " "$tmp/d.txt"; then
	echo "PASS: diff-text"
else
	echo "FAIL: diff-text"; cat "$tmp/d.txt"
fi

# The flame graph: red where a frame grew, blue where it shrank.
if xmllint --noout "$tmp/d.svg" &&
   grep -q '<title>tiny_nodes [^<]*change -[^<]*</title><rect [^>]*fill="rgb([0-9]*,[0-9]*,255)"' "$tmp/d.svg" &&
   grep -q '<title>leak_session [^<]*change +[^<]*</title><rect [^>]*fill="rgb(255,[0-9]*,[0-9]*)"' "$tmp/d.svg"; then
	echo "PASS: diff-flamegraph"
else
	echo "FAIL: diff-flamegraph"
fi

# pprof: our difference reads as pprof's own -diff_base of the two profiles.
if command -v go >/dev/null; then
	export HOME=$tmp GOCACHE=$tmp/gocache GOPROXY=off GOTELEMETRY=off
	"$ctl" report -q --pprof "$tmp/old.pb.gz" "$tmp/old.ctf" >/dev/null 2>&1
	"$ctl" report -q --pprof "$tmp/new.pb.gz" "$tmp/new.ctf" >/dev/null 2>&1
	ours=$(go tool pprof -top -nodefraction=0 -sample_index=alloc_space "$tmp/d.pb.gz" 2>/dev/null |
	       sed -n '/flat%/,$p')
	theirs=$(go tool pprof -top -nodefraction=0 -sample_index=alloc_space -diff_base "$tmp/old.pb.gz" \
		 "$tmp/new.pb.gz" 2>/dev/null | sed -n '/flat%/,$p')
	if [ -n "$ours" ] && [ "$ours" = "$theirs" ] && grep -q -- ' -[0-9.]*[kMG]*B .*tiny_nodes$' <<<"$ours"; then
		echo "PASS: diff-pprof"
	else
		echo "FAIL: diff-pprof"; echo "$ours"; echo "--- pprof -diff_base:"; echo "$theirs"
	fi
else
	echo "SKIP: diff-pprof (go is not installed)"
fi
