#!/usr/bin/python3
# Requested bytes against the truth of `wl_alloc sizes` (its BYTES lines), docs/sampling.md §4:
#   bytes_check.py RATE OUT SUMMARY_JSON [REPORT_JSON]
# PASS/FAIL lines: record's --json summary, or memprofd's manifest.json or `status --json` (the
# process' allocated and live bytes) and, given a
# report --json of the trace, each site's, within 4 SE of the bytes asked for rounded up to
# whole words (no header words); the summary's allocated_words is Σ n/λ.
import json
import sys

# the summary is the JSON line of memprofctl's stderr (other lines are messages)
r, out = sys.argv[1], sys.argv[2]
text = open(sys.argv[3]).read()
try:
    summ = json.loads(text)
except ValueError:
    summ = json.loads([x for x in text.splitlines() if x.startswith("{")][-1])
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
# one set of names: record's --json summary, memprofd's manifest, status --json
what = "manifest" if "settings" in summ else "summary" if "status" in summ else "status"
k = ("allocated_bytes", "allocated_bytes_se", "live_bytes", "live_bytes_se", "allocated_words",
     "samples")
check("%s %s" % (what, k[0]), p[k[0]], p[k[1]], rnd)
check("%s %s" % (what, k[2]), p[k[2]], p[k[3]], live)
good = abs(p[k[4]] - p[k[5]] / lam) <= 1
print("%s: rate %s %s %s is Σ n/λ" % ("PASS" if good else "FAIL", r, what, k[4]))
