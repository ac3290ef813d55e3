#!/bin/bash
# Smoke check of the benchmark suite (bench/run): one quick round of the mixed-size loop, plain,
# under the floor loader (empty BPF probes) and under memprofctl record, written to a private
# results directory. Checks that each ran and that the numbers have the shape they must have
# (the probes cost something; the floor's probes fired on every malloc and free).
set -u
[ "$(id -u)" -eq 0 ] || { echo "needs root for BPF"; exit 77; }
for b in bench/allocbench bench/floor bin/memprofctl; do
	[ -x "$MP_BUILD/$b" ] || { echo "FAIL: bench-quick: $MP_BUILD/$b is not built"; exit 1; }
done
out=$MP_TMP/results
/usr/bin/python3 "$MP_SRC/bench/run" --quick --pairs 1 --only mixed --configs floor,memprof \
	--no-daemon --build "$MP_BUILD" --results "$out" >"$MP_TMP/log" 2>&1
rc=$?
cat "$MP_TMP/log"
[ $rc -eq 0 ] || { echo "FAIL: bench-quick: bench/run exited $rc"; exit 1; }
/usr/bin/python3 - "$out/latest.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
w = r["workloads"]["mixed"]
ok = True
for c in ("floor", "memprof"):
    e = w["configs"].get(c)
    if not e:
        print("FAIL: bench-quick-%s: no result (%s)" % (c, w["skipped"].get(c)))
        ok = False
    elif not e["ratio_median"] > 2:
        print("FAIL: bench-quick-%s: ratio %.2f: probes on every call cannot be that cheap"
              % (c, e["ratio_median"]))
        ok = False
    else:
        print("PASS: bench-quick-%s" % c)
ok = ok and "memprof_vs_floor" in w
print(("PASS" if "memprof_vs_floor" in w else "FAIL") + ": bench-quick-vs-floor")
sys.exit(0 if ok else 1)
PY
# The floor's probes fire on every call of the loop: 256 + OPS mallocs (and stdio's buffer),
# as many frees.
hits=$("$MP_BUILD/bench/floor" -c -- "$MP_BUILD/bench/allocbench" 1000 2>&1 >/dev/null)
if grep -Eq '^floor: hits_alloc_entry 125[67]$' <<<"$hits" &&
   grep -q '^floor: hits_free 1256$' <<<"$hits"; then
	echo "PASS: bench-floor-hits"
else
	echo "FAIL: bench-floor-hits"
	echo "$hits"
	exit 1
fi
