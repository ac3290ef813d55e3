#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The probe loader's log reaches its users in production: `memprofctl -vv record` prints on
# stderr where each probe of the real libc went and why (daemon/probe/placement.c's reasons),
# `-v` the kernel mechanisms and the probes left on a single-stepped entry, no -v only
# warnings; a real memprofd at --log-level debug writes the same placement lines to its log
# when it attaches to a process.
set -u
. "$(dirname "$0")/../system/lib-service.sh"
svc_require
WL_ALLOC=$MP_BUILD/tests/workloads/wl_alloc
[ -x "$WL_ALLOC" ] || { echo "FAIL: missing $WL_ALLOC (make test-bins)"; exit 1; }

# One placement line of free in the C library, with one of the rule's reasons.
free_re="Probe on free in '[^']*/libc\\.so\\.6' at \\+(0|0x[0-9a-f]+): "
reason_re="(moved past [0-9]+ instruction\\(s\\) the kernel would single-step to the emulated '[^']+' at \\+0x[0-9a-f]+|the first instruction '[^']+' is emulated|.* entry kept)$"

rec() {	# rec NAME [memprofctl options...]: record wl_alloc in-process, stderr to $MP_TMP/NAME
	local name=$1; shift
	"$MEMPROFCTL" "$@" record --no-daemon -r 0.01 -o "$MP_TMP/$name.ctf" -- \
		"$WL_ALLOC" sites 1 > /dev/null 2> "$MP_TMP/$name"
	check "record ${*:-without -v}: exit status 0" [ $? -eq 0 ]
}

rec vv -vv
check "record -vv: the placement of free in libc, with its reason" \
	grep -Eq "^memprofctl record: $free_re$reason_re" "$MP_TMP/vv"
libc_re="^memprofctl record: Probe on (malloc|calloc|realloc) in '[^']*/libc\\.so\\.6' at "
check "record -vv: malloc, calloc and realloc of libc placed" \
	eval "[ \$(grep -Ec \"\$libc_re\" '$MP_TMP/vv') -ge 3 ]"
check "record -vv: the kernel mechanisms probed" \
	grep -q "^memprofctl record: Kernel mechanisms: " "$MP_TMP/vv"

rec v -v
check "record -v: the kernel mechanisms, from the loader's log" \
	grep -q "^memprofctl record: Kernel: uprobe_multi links: " "$MP_TMP/v"
check "record -v: no debug-level placement (a probe on an emulated instruction)" \
	eval "! grep -Eq \"Probe on [^ ]+ in .*(is emulated|moved past)\" '$MP_TMP/v'"

rec quiet
check "record: without -v, no loader notes" eval "! grep -Eq 'Probe on|Kernel: ' '$MP_TMP/quiet'"

# memprofd: its journal (here its stderr) gets the loader's lines at its log level.
svc_start
W=$(phases_start -- 200 4000)
ctl attach -r 0.01 "$W" > /dev/null
check "memprofd attach" [ $? -eq 0 ]
wait_until 10 grep -Eq "^memprofd: $free_re" "$MP_TMP/memprofd.log"
check "memprofd --log-level debug: the placement of free in libc, with its reason" \
	grep -Eq "^memprofd: $free_re$reason_re" "$MP_TMP/memprofd.log"
check "memprofd: the kernel mechanisms at start" \
	grep -q "^memprofd: Kernel mechanisms: " "$MP_TMP/memprofd.log"

[ "$FAILS" -eq 0 ]
