#!/bin/bash
# Smoke check of the benchmark suite (bench/run): one quick round of the mixed-size loop, plain,
# under the floor loader (empty BPF probes: perf-event entry + return, and uprobe session links
# where the kernel has them) and under memprofctl record, written to a private results
# directory. Checks that each ran and that the numbers have the shape they must have (the probes
# cost something; the floors' probes fired on every malloc and free; memprof is compared with
# the floor of its own mechanism; the interposition floor, libpassthrough.so, forwards at almost
# no cost, and the idle preload library is compared with it).
set -u
[ "$(id -u)" -eq 0 ] || { echo "needs root for BPF"; exit 77; }
for b in bench/allocbench bench/floor bench/libpassthrough.so bin/memprofctl; do
	[ -x "$MP_BUILD/$b" ] || { echo "FAIL: bench-quick: $MP_BUILD/$b is not built"; exit 1; }
done
out=$MP_TMP/results
/usr/bin/python3 "$MP_SRC/bench/run" --quick --pairs 1 --only mixed \
	--configs floor,floor-session,memprof,passthrough,preload-idle \
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
# the interposition floor: every call forwarded, nothing else (a crash or a missing library
# leaves no row). It costs a few ns per call, probes cost microseconds: its ratio stays far
# below the probe floor's measured in the same run. Not a speed target (one pair on a shared
# machine measured 1.51 for a true ~1.02): make bench holds those.
e = w["configs"].get("passthrough")
fl = w["configs"].get("floor")
good = (bool(e) and bool(fl) and e["ratio_median"] < min(3, fl["ratio_median"] / 3) and
        "idle_vs_passthrough" in w)
print(("PASS" if good else "FAIL") + ": bench-quick-passthrough" +
      ("" if e else " (%s)" % w["skipped"].get("passthrough")))
ok = ok and good
print(("PASS" if "memprof_vs_floor" in w else "FAIL") + ": bench-quick-vs-floor")
# sessions: the floor-session row exists, and the target compares with it
if "floor-session" in w["configs"]:
    good = (w["configs"]["floor-session"]["ratio_median"] > 2 and
            w.get("mechanism_floor") == "floor-session" and "memprof_vs_floor_session" in w)
    print(("PASS" if good else "FAIL") + ": bench-quick-vs-floor-session")
    ok = ok and good
else:
    print("# no floor-session row: %s" % w["skipped"].get("floor-session"))
    good = w.get("mechanism_floor") == "floor"
    print(("PASS" if good else "FAIL") + ": bench-quick-mechanism-floor")
    ok = ok and good
sys.exit(0 if ok else 1)
PY
# floor_hits NAME REGEX1 REGEX2 [floor options]: the floor's hit counts over allocbench 1000
floor_hits() {
	local name=$1 re1=$2 re2=$3 hits
	shift 3
	hits=$("$MP_BUILD/bench/floor" "$@" -c -- "$MP_BUILD/bench/allocbench" 1000 2>&1 >/dev/null)
	if grep -Eq "$re1" <<<"$hits" && grep -Eq "$re2" <<<"$hits"; then
		echo "PASS: $name"
	else
		echo "FAIL: $name"
		echo "$hits"
		exit 1
	fi
}
# The floor's probes fire on every call of the loop: 256 + OPS mallocs (and stdio's buffer),
# as many frees.
floor_hits bench-floor-hits '^floor: hits_alloc_entry 125[67]$' '^floor: hits_free 1256$'
# floor -s: one session program on every malloc and free (no return half): both counts.
if "$MP_BUILD/bench/floor" -q -s -- /bin/true 2>/dev/null; then
	floor_hits bench-floor-session-hits '^floor: hits_session 251[23]$' \
		'^floor: hits_alloc_return 0$' -s
else
	echo "# floor -s: no uprobe sessions on this kernel"
fi
