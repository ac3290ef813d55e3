#!/bin/bash
# memprofd attaching again and again to a process that calls malloc and free without pause:
# every profile samples. With entry and return probes (no uprobe sessions: kernels before 6.13,
# forced here), an entry probe attached before its return probe saw calls whose return nobody
# saw; the thread's state then held the call as in progress, every later call counted as nested
# in it and none was sampled, for the whole profile and the ones after it (on 6.1 three
# `attach -d 3s` in four recorded nothing). Perf-event uprobes (6.1's) and uprobe_multi links
# (6.6 to 6.12) both.
. "$(dirname "$0")/record.lib"

LOOP=$WL/ovh_loop
[ -x "$LOOP" ] || LOOP=$MP_BUILD/tests/workloads/ovh_loop
[ -x "$LOOP" ] || { echo "FAIL: missing ovh_loop (make test-bins)"; exit 1; }
cd "$T" || exit 1

for mode in MP_BPF_NO_UPROBE_MULTI MP_BPF_NO_SESSION; do
	export "$mode=1"
	memprofd_up "$T/$mode.sock" "$T/$mode.state" "$T/$mode.log" ||
		{ fail "$mode: memprofd did not start: $(tail -n 3 "$T/$mode.log")"; continue; }
	unset "$mode"
	"$LOOP" hog 600 >/dev/null &
	hog=$!
	empty=0
	for i in 1 2 3 4 5 6; do
		"$CTL" --socket "$T/$mode.sock" --json attach -d 1s -w "$hog" >"$T/a.json" 2>&1
		n=$(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print(sum(p["sampled_blocks"] for p in d["processes"]))' "$T/a.json" 2>/dev/null)
		echo "    $mode: profile $i: ${n:-?} sampled blocks"
		[ "${n:-0}" -gt 0 ] || empty=$((empty + 1))
	done
	ok "$mode: every one of 6 profiles of a malloc loop sampled ($empty empty)" [ "$empty" -eq 0 ]
	kill "$hog"
	wait "$hog" 2>/dev/null
	kill "$DPID"
	wait "$DPID"
done
exit 0
