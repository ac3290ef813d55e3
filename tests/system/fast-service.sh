#!/bin/bash
# memprofd and the cooperative fast path: a process started with LD_PRELOAD=libmemprof-preload.so
# is profiled through the library's USDT probes; `memprofctl status` (and --json) shows mode
# "preload" for it and "uprobe" for a plain process in the same profile; stop clears the
# library's sampling flag (no new samples) while frees of sampled blocks are still recorded;
# discard detaches, and a later profile of the same process works again; the trace is complete.
. "$(dirname "$0")/lib-service.sh"
svc_require
LIB=$MP_BUILD/lib/libmemprof-preload.so
[ -f "$LIB" ] || { echo "FAIL: missing $LIB (make all)"; exit 1; }
svc_start --seed 42

mode_of() {	# mode_of ID PID
	ctl --json status "$1" | /usr/bin/python3 -c '
import json, sys
for p in json.load(sys.stdin)["processes"]:
    if p["pid"] == int(sys.argv[1]):
        print(p["mode"])' "$2"
}
field_of() {	# field_of ID PID FIELD
	ctl --json status "$1" | /usr/bin/python3 -c '
import json, sys
for p in json.load(sys.stdin)["processes"]:
    if p["pid"] == int(sys.argv[1]):
        print(p[sys.argv[2]])' "$2" "$3"
}
F=$(phases_start env LD_PRELOAD="$LIB" -- 2000 4000)
U=$(phases_start -- 2000 4000)
out=$(ctl attach -r 0.01 "$F" "$U")
ID=$(echo "$out" | attach_id)
check "attach starts a profile of both processes" [ -n "$ID" ]
check "status --json: the preloaded process is in preload mode" [ "$(mode_of "$ID" "$F")" = preload ]
check "status --json: the plain process is in uprobe mode" [ "$(mode_of "$ID" "$U")" = uprobe ]
check "status shows the MODE column" \
	eval "ctl status $ID | grep -Eq '^ +$F +svc_phases +running +preload '"
check "status shows uprobe for the plain process" \
	eval "ctl status $ID | grep -Eq '^ +$U +svc_phases +running +uprobe '"

phases_do "$F" USR1 allocated
phases_do "$U" USR1 allocated
# 2000 blocks of 501 words at λ = 0.01: P(block unsampled) = 0.99^501 ≈ 0.0065.
check "preload: samples arrive while sampling" wait_until 10 \
	eval '[ "$(field_of "$ID" "$F" sampled_blocks)" -gt 1900 ]'
check "uprobe: samples arrive while sampling" wait_until 10 \
	eval '[ "$(field_of "$ID" "$U" sampled_blocks)" -gt 1900 ]'
# The library reports samples 16 at a time: the last ones of the now idle process reach the
# profile when memprofd takes its queue (within ~0.4 s). Wait until the count holds still.
settled() {	# settled ID PID FIELD: the same value twice, 0.6 s apart
	local a b
	a=$(field_of "$1" "$2" "$3")
	sleep 0.6
	b=$(field_of "$1" "$2" "$3")
	[ "$a" = "$b" ]
}
check "preload: the library's last samples arrive" wait_until 10 settled "$ID" "$F" samples
check "stop" eval "ctl stop $ID | grep -q 'Profile $ID stopped'"
SF=$(field_of "$ID" "$F" sampled_blocks)
phases_do "$F" USR2 freed
check "preload: frees of sampled blocks are recorded after stop" wait_until 10 \
	eval '[ "$(field_of "$ID" "$F" freed_blocks)" = "$SF" ]'
phases_do "$F" USR1 allocated
check "preload: allocations after stop are not sampled" \
	[ "$(field_of "$ID" "$F" sampled_blocks)" = "$SF" ]
discard_checked "$ID" "$F" "$SF" preload
check "the trace says mode=preload" eval "'$MEMPROFCTL' dump '$TRACE' | grep -q 'mode=preload'"

# After discard nothing is attached: a new profile of the same process works again.
out=$(ctl attach -r 0.01 "$F")
ID2=$(echo "$out" | attach_id)
check "re-attach after discard" [ -n "$ID2" ]
phases_do "$F" USR2 freed	# svc_phases allocates only up to COUNT kept blocks
phases_do "$F" USR1 allocated
check "re-attached: samples arrive" wait_until 10 \
	eval '[ "$(field_of "$ID2" "$F" sampled_blocks)" -gt 1900 ]'
check "re-attached: still preload mode" [ "$(mode_of "$ID2" "$F")" = preload ]
ctl stop "$ID2" >/dev/null
ctl discard "$ID2" >/dev/null
exit $((FAILS > 0))
