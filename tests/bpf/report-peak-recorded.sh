#!/bin/bash
# memprofctl report on a recorded workload with a known peak and known temporary allocations
# (tests/workloads/wl_peak.c): the estimated peak of the live heap is within 4.65 SE of the
# workload's, the site holding it is wl_peak_hold; with --temporary-threshold 100ms every
# block of wl_temp (freed at once) is temporary, within 4.65 SE, and none of wl_long's (held
# across a 300 ms sleep, a lower bound on any machine).
. "$(dirname "$0")/report.lib" wl_peak
rate=0.001
record_truth peak.ctf -r $rate -- "$wl"
"$ctl" report -q --json --top 100 --temporary-threshold 100ms "$tmp/peak.ctf" >"$tmp/r.json" \
	2>"$tmp/r.err" || { echo "FAIL: report"; cat "$tmp/r.err"; exit 1; }

RATE=$rate "$py" - "$tmp/r.json" "$tmp/truth" <<'EOF'
import json, math, os, sys
lam = float(os.environ["RATE"])
rep = json.load(open(sys.argv[1]))
truth, peak = {}, None
for line in open(sys.argv[2]):
    f = line.split()
    if f and f[0] == "TRUTH":
        truth[f[1]] = {k: int(v) for k, v in (x.split("=") for x in f[2:])}
    elif f and f[0] == "PEAK":
        peak = int(f[1].split("=")[1])
pk = rep["peak"]
# Σ (8 len)²/(len+1) (1-λ)/λ over the blocks held (docs/sampling.md §4), len = 512 words
se = math.sqrt(8 * peak * 512 / 513 * (1 - lam) / lam)
z = (pk["live_bytes"]["estimate"] - peak) / se
print("  peak %.0f ± %.0f (exact SE %.0f) truth %d z %+.2f at %.3f s, top site %s" % (
    pk["live_bytes"]["estimate"], pk["live_bytes"]["se"], se, peak, z, pk["t_s"], pk["sites"][0]["site"]))
ok = abs(z) <= 4.65 and pk["sites"][0]["site"] == "wl_peak_hold"
print("%s: recorded-peak" % ("PASS" if ok else "FAIL"))

sites = {s["site"]: s for s in rep["sites_by_bytes"]}
t = truth["wl_temp"]
w = t["words"] / t["blocks"]
p = -math.expm1(w * math.log1p(-lam))
est = sites["wl_temp"]["temporary_allocations"]["estimate"]
z = (est - t["blocks"]) / math.sqrt(t["blocks"] * (1 - p) / p)
long_temp = sites["wl_long"]["temporary_allocations"]["estimate"] if "wl_long" in sites else None
print("  wl_temp temporary %.0f truth %d z %+.2f; wl_long temporary %s" % (est, t["blocks"], z, long_temp))
ok = abs(z) <= 4.65 and long_temp == 0
print("%s: recorded-temporary" % ("PASS" if ok else "FAIL"))
EOF
