#!/bin/bash
# memprofctl report --pprof: Go's pprof (Debian golang-go, offline on a local file) reads the
# profile and shows the same top functions and totals as the report, for all four sample
# types (alloc_objects, alloc_space, inuse_objects, inuse_space).
command -v go >/dev/null || { echo "go is not installed (scripts/install-deps)"; exit 77; }
. "$(dirname "$0")/report.inc"
export HOME=$tmp GOCACHE=$tmp/gocache GOPATH=$tmp/go GOPROXY=off GOFLAGS= GOTELEMETRY=off

"$gen" -s 5 -r 0.001 -n 100000 "$tmp/a.ctf" "$tmp/a.json" || { echo "FAIL: gen_trace"; exit 1; }

compare() {	# name report-args...
	local name=$1; shift
	if ! "$ctl" report -q --json --top 1000 --pprof "$tmp/$name.pb.gz" "$@" >"$tmp/$name.json"; then
		echo "FAIL: $name (report failed)"; return
	fi
	# Not a plain gzip stream: fail early with a clear message.
	gzip -t "$tmp/$name.pb.gz" || { echo "FAIL: $name (not gzip)"; return; }
	go tool pprof -raw "$tmp/$name.pb.gz" >"$tmp/$name.raw" 2>"$tmp/$name.err" || {
		echo "FAIL: $name (pprof -raw)"; cat "$tmp/$name.err"; return; }
	for t in alloc_space alloc_objects inuse_space; do
		go tool pprof -top -nodefraction=0 -nodecount=1000 -sample_index=$t -unit=B \
			"$tmp/$name.pb.gz" >"$tmp/$name.$t.top" 2>>"$tmp/$name.err" || {
			echo "FAIL: $name (pprof -top $t)"; cat "$tmp/$name.err"; return; }
	done
	if "$py" - "$tmp/$name" <<'EOF'; then echo "PASS: $name"; else echo "FAIL: $name"; fi
import json, re, sys
base = sys.argv[1]
rep = json.load(open(base + ".json"))
ok = True

def fail(msg):
    global ok
    ok = False
    print("  " + msg)

# -raw: sample types in order, then one line per sample: values ": location ids".
raw = open(base + ".raw").read().splitlines()
i = raw.index("Samples:")
types = [t.split("/")[0] for t in raw[i + 1].split()]
if types != ["alloc_objects", "alloc_space", "inuse_objects", "inuse_space"]:
    fail("sample types %s" % types)
sums = [0, 0, 0, 0]
nsamples = 0
for line in raw[i + 2:]:
    if not re.match(r"^\s+\d", line):
        break
    vals = [int(v) for v in line.split(":")[0].split()]
    sums = [a + b for a, b in zip(sums, vals)]
    nsamples += 1
tot = rep["totals"]
want = [tot["allocations"]["estimate"], tot["bytes"]["estimate"],
        tot["live_allocations"]["estimate"], tot["live_bytes"]["estimate"]]
for t, got, w in zip(types, sums, want):
    # Each sample's value is its estimate rounded: at most 0.5 off per sample.
    good = abs(got - w) <= 0.5 * nsamples + 1e-6 * w
    print("  total %-14s pprof %14d report %16.1f %s" % (t, got, w, "ok" if good else "MISMATCH"))
    ok &= good

# -top: flat values per function = the report's sites by function, same order.
def top(path):
    rows = []
    for line in open(path):
        m = re.match(r"^\s*(\d+)B\s+[\d.]+%\s+[\d.]+%\s+(\d+)B\s+[\d.]+%\s+(.*)$", line)
        if m and int(m.group(1)) > 0:
            rows.append((m.group(3).strip(), int(m.group(1))))
    return rows

for t, key, table in (("alloc_space", "bytes", "sites_by_bytes"),
                      ("alloc_objects", "allocations", "sites_by_allocations"),
                      ("inuse_space", "live_bytes", None)):
    rows = top(base + "." + t + ".top")
    sites = {s["site"]: s[key]["estimate"] for s in rep["sites_by_bytes"]}
    for name, flat in rows:
        if name not in sites:
            fail("%s: pprof function %s is not a report site" % (t, name))
        elif abs(flat - sites[name]) > 0.5 * 50 + 1e-6 * sites[name]:
            fail("%s: %s pprof %d report %.1f" % (t, name, flat, sites[name]))
    nonzero = {n for n, v in sites.items() if round(v) > 0}
    if {n for n, _ in rows} != nonzero:
        fail("%s: pprof functions %s != report sites %s" % (t, sorted(n for n, _ in rows), sorted(nonzero)))
    if table:
        order = [s["site"] for s in rep[table]][:5]
        if [n for n, _ in rows][:5] != order:
            fail("%s: pprof top %s != report top %s" % (t, [n for n, _ in rows][:5], order))
    print("  %-13s top: %s" % (t, ", ".join(n for n, _ in rows[:5])))
sys.exit(0 if ok else 1)
EOF
}

compare synthetic "$tmp/a.ctf"
compare fixture "$fx/upstream-v2.ctf"
compare merged "$fx/upstream-v2.ctf" "$fx/upstream-v3.ctf"

# The preferred sample type follows --live.
if "$ctl" report -q --live --pprof "$tmp/live.pb.gz" "$tmp/a.ctf" >/dev/null &&
   go tool pprof -raw "$tmp/live.pb.gz" 2>/dev/null | grep -q 'inuse_space/bytes\[dflt\]'; then
	echo "PASS: pprof-live-default"
else
	echo "FAIL: pprof-live-default"
fi
