#!/bin/bash
# How the loader attaches libmemprof-preload's USDT probes: one uprobe_multi link per probe,
# with the sites' semaphores as ref_ctr_offsets, when the kernel has uprobe_multi; perf-event
# uprobes (one per site) with MP_BPF_NO_UPROBE_MULTI=1. Opening a perf-event uprobe waits on
# the kernel's event_mutex, which closing one holds through a grace period: a `record --preload`
# started right after another waited up to ~1 s for the first one's links to be released.
# Both ways, the process is profiled in preload mode and samples arrive.
. "$(dirname "$0")/record.lib"
LIB=$MP_BUILD/lib/libmemprof-preload.so
[ -f "$LIB" ] || { echo "FAIL: missing $LIB (make all)"; exit 1; }
command -v bpftool >/dev/null || { echo "FAIL: bpftool missing"; exit 1; }

# "name type" of every link whose program is one of the USDT programs
usdt_links() {
	bpftool -j prog show >"$T/progs.json" && bpftool -j link show >"$T/links.json" &&
		/usr/bin/python3 - "$T/progs.json" "$T/links.json" <<'PY'
import json, sys
names = {p["id"]: p.get("name", "") for p in json.load(open(sys.argv[1]))}
for link in json.load(open(sys.argv[2])):
    name = names.get(link.get("prog_id"), "")
    if name.startswith("mp_usdt_"):
        # bpftool 7.1 prints link types newer than it as numbers: 12 is uprobe_multi
        print(name, {"12": "uprobe_multi"}.get(str(link.get("type")), link.get("type")))
PY
}

run() {	# name expected-type [env...]
	local name=$1 want=$2 pid n bad
	shift 2
	rm -f "$T/$name.pid"
	env "$@" "$CTL" record --preload -r 1e-3 -o "$T/$name.ctf" -- \
		"$WL/wl_alloc" spin "$T/$name.pid" >"$T/$name.out" 2>"$T/$name.err" &
	local ctl=$!
	wait_until 30 test -s "$T/$name.pid"
	pid=$(cat "$T/$name.pid" 2>/dev/null)
	usdt_links >"$T/$name.links"
	sed "s/^/    [$name] /" "$T/$name.links"
	n=$(grep -c " $want\$" "$T/$name.links")
	bad=$(grep -vc " $want\$" "$T/$name.links")
	ok "$name: the USDT programs are attached as $want ($n links)" [ "$n" -ge 4 -a "$bad" = 0 ]
	[ -n "$pid" ] && kill "$pid"
	wait "$ctl"
	sed "s/^/    [$name] /" "$T/$name.err"
	ok "$name: profiled in preload mode" grep -q " mode=preload;" <(context_of "$T/$name.ctf")
	ok "$name: samples arrived" \
		grep -Eq ": [1-9][0-9]* samples in [1-9][0-9]* blocks" "$T/$name.err"
}

# The kernel decides (memprofd(8), KERNELS): what the loader reports is what must be attached.
if "$CTL" record -o "$T/probe.ctf" -- true 2>&1 | grep -q "kernel mechanisms: uprobe_multi links"; then
	run links-multi uprobe_multi
else
	run links-default perf_event
fi
run links-perf perf_event MP_BPF_NO_UPROBE_MULTI=1
