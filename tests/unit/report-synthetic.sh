#!/bin/bash
# memprofctl report on synthetic traces with known truth (tests/unit/gen_trace.c simulates
# Gc.Memprof sampling of a known allocation program): every estimate is within 4 standard
# errors of the truth, rankings have no significant inversions, leak suspects are exactly the
# leaking sites (young blocks at the end excluded), windows and merged traces stay unbiased.
. "$(dirname "$0")/report.inc"

"$gen" -s 7 -r 0.001 "$tmp/a.ctf" "$tmp/a.json" || { echo "FAIL: gen_trace"; exit 1; }
"$gen" -s 11 -r 0.01 -n 100000 -v 3 "$tmp/b.ctf" "$tmp/b.json" ||
	{ echo "FAIL: gen_trace v3"; exit 1; }

run() {	# name expected-files... -- report args...
	local name=$1; shift
	local truths=()
	while [ "$1" != -- ]; do truths+=("$1"); shift; done
	shift
	if ! "$ctl" report -q --json --top 100 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"; then
		echo "FAIL: $name (report exited non-zero)"; cat "$tmp/$name.err"; return
	fi
	MODE=$name "$py" - "$tmp/$name.out" "${truths[@]}" <<'EOF'
import json, math, os, sys

mode = os.environ["MODE"]
rep = json.load(open(sys.argv[1]))
truths = [json.load(open(p)) for p in sys.argv[2:]]
ok = True

def fail(msg):
    global ok
    ok = False
    print("  " + msg)

def check(what, est, se, truth, var):
    # z against the exact standard error of the estimator (from the truth, so it holds even
    # where few or no blocks were sampled); the reported SE must estimate it.
    tse = math.sqrt(var)
    z = (est - truth) / tse if tse > 0 else (0 if abs(est - truth) < 1e-6 * max(1, truth) else 1e9)
    print("  %-36s est %13.1f truth %12d se %9.1f (exact %9.1f) z %+5.2f" % (what, est, truth, se, tse, z))
    if abs(z) > 4:
        fail("%s: estimate %.1f is %.1f SE from the truth %d" % (what, est, z, truth))
    # The data-based SE is itself noisy; require it near the exact one when there is data.
    if est > 0 and truth > 0 and tse > 0 and (est / tse) ** 2 >= 100 and not 0.6 < se / tse < 1.6:
        fail("%s: reported SE %.1f vs exact %.1f" % (what, se, tse))

half = mode == "window"
sites = {}
for t in truths:
    for s in t["sites"]:
        d = sites.setdefault(s["function"], dict(leak=s["leak"]))
        for k in ("bytes", "allocations", "live_bytes", "live_allocations"):
            src = k + "_half" if half and k in ("bytes", "live_bytes") else k
            d[k] = d.get(k, 0) + s[src]
            d["var_" + k] = d.get("var_" + k, 0) + s["var_" + src]

got = {s["site"]: s for s in rep["sites_by_bytes"]}
if set(got) != set(sites):
    fail("sites %s != %s" % (sorted(got), sorted(sites)))
keys = ("bytes", "live_bytes") if half else ("bytes", "allocations", "live_bytes")
for name, truth in sorted(sites.items()):
    if name not in got:
        continue
    for k in keys:
        check("%s %s" % (name, k), got[name][k]["estimate"], got[name][k]["se"], truth[k],
              truth["var_" + k])

tot = rep["totals"]
for k in keys:
    check("total " + k, tot[k]["estimate"], tot[k]["se"], sum(s[k] for s in sites.values()),
          sum(s["var_" + k] for s in sites.values()))

# Rankings: a site ranked above another never has significantly less truth.
for table, k in (("sites_by_bytes", "bytes"), ("sites_by_allocations", "allocations")):
    if half and k == "allocations":
        continue
    rows = rep[table]
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            a, b = rows[i], rows[j]
            ta, tb = sites[a["site"]][k], sites[b["site"]][k]
            if ta < tb - 4 * (a[k]["se"] + b[k]["se"]):
                fail("%s: %s ranked above %s but truth %d < %d" % (table, a["site"], b["site"], ta, tb))
    print("  %s: %s" % (table, " > ".join(r["site"] for r in rows)))

# Leak suspects: exactly the leaking sites (young blocks of freeing sites are excluded).
leaks = sorted(n for n, s in sites.items() if s["leak"])
suspects = sorted(s["site"] for s in rep["leak_suspects"])
print("  leak suspects: %s" % suspects)
if suspects != leaks:
    fail("leak suspects %s != leaking sites %s" % (suspects, leaks))
for s in rep["leak_suspects"]:
    if s["lifetime_median_s"] is not None or s["freed_sampled_blocks"] != 0:
        fail("%s: a leaking site reports frees" % s["site"])
    if not s["live_age_max_s"] > s["live_age_median_s"] > 0:
        fail("%s: live ages %s/%s" % (s["site"], s["live_age_median_s"], s["live_age_max_s"]))

# Live heap timeline: the leaks grow linearly; the last point is the live total.
tl = rep["live_heap"]
if len(tl) != 10:
    fail("live_heap has %d points" % len(tl))
elif mode.startswith("rate"):
    # One trace: the last point is at its end. (Merged traces of different lengths: a trace
    # that ended no longer contributes to later points.)
    last = tl[-1]["live_bytes"]
    if abs(last["estimate"] - tot["live_bytes"]["estimate"]) > 1e-6 * tot["live_bytes"]["estimate"]:
        fail("last live_heap point %.0f != live total %.0f" % (last["estimate"], tot["live_bytes"]["estimate"]))
    if not tl[0]["live_bytes"]["estimate"] < tl[4]["live_bytes"]["estimate"] < last["estimate"]:
        fail("live heap does not grow with the leaks")
for s in rep["sites_by_bytes"]:
    if s["function"] in ("malloc", "calloc") or s["function"].startswith("operator new"):
        fail("allocator frame %s reported as a site" % s["function"])
sys.exit(0 if ok else 1)
EOF
	if [ $? -eq 0 ]; then echo "PASS: $name"; else echo "FAIL: $name"; fi
}

run rate-1e-3 "$tmp/a.json" -- "$tmp/a.ctf"
run rate-1e-2-v3 "$tmp/b.json" -- "$tmp/b.ctf"
run merged "$tmp/a.json" "$tmp/b.json" -- "$tmp/a.ctf" "$tmp/b.ctf"
# gen_trace's window truth is for [0, T/2] with T = (300000 - 1) * 10 µs.
run window "$tmp/a.json" -- --until 1499995us "$tmp/a.ctf"

# --by line / object / stack: inlined frames expand, objects come from "lib+0x..." names.
"$ctl" report -q --json --by object "$tmp/a.ctf" >"$tmp/obj.json" &&
"$ctl" report -q --json --by function "$tmp/a.ctf" >"$tmp/fn.json" &&
"$ctl" report -q --json --by stack "$tmp/a.ctf" >"$tmp/st.json" &&
"$ctl" report -q --json --by line --until 1500ms "$tmp/a.ctf" >"$tmp/ln.json" &&
"$py" - "$tmp/obj.json" "$tmp/fn.json" "$tmp/st.json" "$tmp/ln.json" <<'EOF'
import json, sys
obj, fn, st, ln = (json.load(open(p)) for p in sys.argv[1:])
o = {s["site"]: s["bytes"]["estimate"] for s in obj["sites_by_bytes"]}
f = {s["site"]: s["bytes"]["estimate"] for s in fn["sites_by_bytes"]}
assert set(o) == {"synth-server", "libfoo.so.1"}, o
assert abs(o["libfoo.so.1"] - f["libfoo_alloc"]) < 1e-6 * f["libfoo_alloc"], (o, f)
assert abs(sum(o.values()) - sum(f.values())) < 1e-6 * sum(f.values())
stacks = [s["site"] for s in st["sites_by_bytes"]]
assert "parse_request <- handle_conn <- run_loop <- main" in stacks, stacks
lines = [s["site"] for s in ln["sites_by_bytes"]]
assert "parse_request parse.c:77" in lines and "build_index index.cc:130" in lines, lines
assert all(abs(t["window_end_s"] - 1.5) < 1e-9 for t in ln["traces"]), ln["traces"]
EOF
if [ $? -eq 0 ]; then echo "PASS: by-keys"; else echo "FAIL: by-keys"; fi

# Text output: the same totals, the leak section names the leaking sites only.
if "$ctl" report -q "$tmp/a.ctf" >"$tmp/a.txt" &&
   sed -n '/^Leak suspects/,/^$/p' "$tmp/a.txt" | grep -q ' cache_grow$' &&
   sed -n '/^Leak suspects/,/^$/p' "$tmp/a.txt" | grep -q ' leak_session$' &&
   [ "$(sed -n '/^Leak suspects/,/^$/p' "$tmp/a.txt" | grep -c '^ *[0-9]')" -eq 2 ] &&
   grep -q "^Top 7 sites by estimated bytes (by function)" "$tmp/a.txt"; then
	echo "PASS: text"
else
	echo "FAIL: text"; cat "$tmp/a.txt"
fi

# --tail 0 treats no block as young: freeing sites with blocks in flight at the end show up.
if "$ctl" report -q --json --tail 0 "$tmp/a.ctf" >"$tmp/t0.json" &&
   "$py" -c 'import json,sys; r=json.load(open(sys.argv[1])); s={x["site"] for x in r["leak_suspects"]}; sys.exit(0 if {"cache_grow","leak_session","recent_buffers"} <= s else 1)' "$tmp/t0.json"; then
	echo "PASS: tail-option"
else
	echo "FAIL: tail-option"
fi

# An empty window (--since = --until): one timeline point, in the text too, not ten equal ones.
"$ctl" report -q --json --since 0.5s --until 0.5s "$tmp/a.ctf" >"$tmp/w0.json" 2>&1
"$ctl" report --since 0.5s --until 0.5s "$tmp/a.ctf" 2>&1 |
	sed -n '/^Live heap over time/,/^$/p' | grep -c '^ *[0-9][0-9.]* ' >"$tmp/w0.rows"
if "$py" -c 'import json,sys; sys.exit(len(json.load(open(sys.argv[1]))["live_heap"]) != 1)' \
	"$tmp/w0.json" && [ "$(cat "$tmp/w0.rows")" = 1 ]; then
	echo "PASS: empty-window-timeline"
else
	echo "FAIL: empty-window-timeline ($(cat "$tmp/w0.rows") text rows)"
fi

# Usage errors exit 2.
rc=0
"$ctl" report -q --by nonsense "$tmp/a.ctf" >/dev/null 2>&1; [ $? -eq 2 ] || rc=1
"$ctl" report -q --since 1x "$tmp/a.ctf" >/dev/null 2>&1; [ $? -eq 2 ] || rc=1
"$ctl" report -q --tail 1.5 "$tmp/a.ctf" >/dev/null 2>&1; [ $? -eq 2 ] || rc=1
"$ctl" report -q >/dev/null 2>&1; [ $? -eq 2 ] || rc=1
if [ $rc -eq 0 ]; then echo "PASS: usage-errors"; else echo "FAIL: usage-errors"; fi
