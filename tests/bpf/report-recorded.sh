#!/bin/bash
# memprofctl report on a real recorded trace: `memprofctl record` samples the known workload
# tests/workloads/wl_alloc (it prints its exact truth per site), and the report's estimates of
# bytes, allocations and live bytes per site are within 4 SE of that truth; the leaking site
# is a leak suspect and no freeing site is; the pprof export and flame graph agree.
. "$(dirname "$0")/report.lib" wl_alloc
rate=0.01
record_truth rec.ctf -r $rate --seed 5 -- "$wl" sites 2

# --tail 0.02: a leak suspect is a site with live blocks older than the last F of the run. The
# leak phase of "wl_alloc sites" ends 5 to 14% of the run before its end (9 runs; the 200000
# small pairs before it take most of the time): at the default 0.1 it was all young in 2 of 9.
if ! "$ctl" report -q --json --top 100 --tail 0.02 --flamegraph "$tmp/rec.svg" \
	--pprof "$tmp/rec.pb.gz" "$tmp/rec.ctf" >"$tmp/rep.json" 2>"$tmp/report.err"; then
	echo "FAIL: report"; cat "$tmp/report.err"; exit 1
fi

RATE=$rate "$py" - "$tmp/rep.json" "$tmp/truth" <<'EOF'
import json, math, os, sys
lam = float(os.environ["RATE"])
rep = json.load(open(sys.argv[1]))
truth = {}
for line in open(sys.argv[2]):
    f = line.split()
    if f and f[0] == "TRUTH":
        truth[f[1]] = {k: int(v) for k, v in (x.split("=") for x in f[2:])}
sites = {s["site"]: s for s in rep["sites_by_bytes"]}
ok = True

def check(what, est, truth_v, var):
    global ok
    se = math.sqrt(var)
    z = (est - truth_v) / se if se > 0 else (0 if abs(est - truth_v) < 1e-6 * max(1, truth_v) else 1e9)
    good = abs(z) <= 4
    print("  %-30s est %13.1f truth %12d se %9.1f z %+6.2f %s" % (what, est, truth_v, se, z, "" if good else "FAIL"))
    ok &= good

for name, t in sorted(truth.items()):
    if t["words"] == 0:    # not an allocation (a PROT_NONE reservation): no site
        if name in sites:
            print("FAIL: site %s is not an allocation but is in the report" % name)
            ok = False
        continue
    if name not in sites:
        print("FAIL: site %s missing from the report" % name)
        ok = False
        continue
    s = sites[name]
    w, live, blocks = t["words"], t["live_words"], t["blocks"]
    # Requested bytes: the truth's words less one header word per block (a site leaks all its
    # blocks or none). Variances from the truth (docs/sampling.md §4): N (8 l)²/(l+1) (1-λ)/λ
    # for N blocks of l = W/N - 1 words (sites with varying sizes: mean size, approximate);
    # blocks N (1-p)/p with p = 1 - (1-λ)^(W/N).
    if live not in (0, w):
        print("FAIL: %s leaks %d of %d words: not all or none" % (name, live, w))
        ok = False
    l = w / blocks - 1
    v = blocks * (8 * l) ** 2 / (l + 1) * (1 - lam) / lam
    check(name + " bytes", s["bytes"]["estimate"], 8 * (w - blocks), v)
    check(name + " live_bytes", s["live_bytes"]["estimate"], 8 * (live - blocks) if live else 0,
          v if live else 0)
    if name != "wl_site_realloc":
        p = -math.expm1((w / blocks) * math.log1p(-lam))
        check(name + " allocations", s["allocations"]["estimate"], blocks, blocks * (1 - p) / p)
suspects = {s["site"] for s in rep["leak_suspects"]}
leaking = {n for n, t in truth.items() if t["live_words"] > 0}
print("  leak suspects: %s" % sorted(suspects))
if not leaking <= suspects or (suspects & set(truth)) != leaking:
    print("FAIL: leak suspects %s, leaking sites %s" % (sorted(suspects), sorted(leaking)))
    ok = False
print("%s: recorded-estimates" % ("PASS" if ok else "FAIL"))
EOF

if command -v go >/dev/null; then
	export HOME=$tmp GOCACHE=$tmp/gocache GOPROXY=off GOTELEMETRY=off
	top=$(go tool pprof -top -sample_index=alloc_space "$tmp/rec.pb.gz" 2>/dev/null |
	      awk 'hdr { print $NF; exit } /flat%/ { hdr = 1 }')
	want=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["sites_by_bytes"][0]["site"])' "$tmp/rep.json")
	if [ -n "$top" ] && [ "$top" = "$want" ]; then
		echo "PASS: recorded-pprof"
	else
		echo "FAIL: recorded-pprof (pprof top '$top', report top '$want')"
	fi
else
	echo "SKIP: recorded-pprof (go is not installed)"
fi
if command -v xmllint >/dev/null && xmllint --noout "$tmp/rec.svg" &&
   grep -q '<title>wl_site_leak ' "$tmp/rec.svg"; then
	echo "PASS: recorded-flamegraph"
else
	echo "FAIL: recorded-flamegraph"
fi
