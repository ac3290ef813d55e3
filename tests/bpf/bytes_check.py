#!/usr/bin/python3
# Requested bytes against the truth of `wl_alloc sizes` (its BYTES lines), docs/sampling.md §4:
#   bytes_check.py RATE OUT SUMMARY_JSON [REPORT_JSON]
# PASS/FAIL lines: record's --json summary (the process' allocated and live bytes) and, given a
# report --json of the trace, each site's, within 4 SE of the bytes asked for rounded up to
# whole words (no header words); the summary's allocated_words is Σ n/λ.
import json
import sys

# the summary is the JSON line of memprofctl's stderr (other lines are messages)
r, out = sys.argv[1], sys.argv[2]
summ = json.loads([x for x in open(sys.argv[3]) if x.startswith("{")][-1])
rep = json.load(open(sys.argv[4])) if len(sys.argv) > 4 else None
lam = float(r)
truth, rnd, live = {}, 0, 0
for line in open(out):
    f = line.split()
    if f and f[0] == "BYTES":
        truth[f[1]] = {k: int(v) for k, v in (x.split("=") for x in f[2:])}
if not truth:
    print("FAIL: rate %s: no BYTES lines in %s" % (r, out))


def check(what, est, se, want):
    z = (est - want) / se if se > 0 else float("inf")
    print("%s: rate %s %s %.0f ± %.0f, truth %d, z %+.2f" %
          ("PASS" if abs(z) <= 4 else "FAIL", r, what, est, se, want, z))


for name, t in sorted(truth.items()):
    rnd += t["rounded"]
    live += t["live"]
    if rep is None:
        continue
    s = next((s for s in rep["sites_by_bytes"] if s["function"] == name), None)
    if s is None:
        print("FAIL: rate %s: site %s in the report" % (r, name))
        continue
    check("report %s bytes" % name, s["bytes"]["estimate"], s["bytes"]["se"], t["rounded"])
    check("report %s live bytes" % name, s["live_bytes"]["estimate"], s["live_bytes"]["se"],
          t["live"])
p = summ["processes"][0]
check("summary allocated_bytes", p["allocated_bytes"], p["allocated_bytes_se"], rnd)
check("summary live_bytes", p["live_bytes"], p["live_bytes_se"], live)
good = abs(p["allocated_words"] - p["samples"] / lam) <= 1
print("%s: rate %s summary allocated_words is Σ n/λ" % ("PASS" if good else "FAIL", r))
