#!/bin/bash
# memprofd's life cycle: READY=1 only once the socket listens, STATUS=, STOPPING=1; SIGTERM
# while profiles sample completes every trace; SIGKILL leaves readable prefixes and a restart
# recovers; a target killed mid-profile ends its profile and its trace; socket activation.
. "$(dirname "$0")/lib-service.sh"
svc_require

# A datagram socket standing in for the service manager's NOTIFY_SOCKET.
NOTIFY=$MP_TMP/notify
/usr/bin/python3 -u -c '
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
print("listening", flush=True)
while True:
    for line in s.recv(65536).decode().split("\n"):
        if line == "READY=1":
            line += " socket=%s" % os.path.exists(sys.argv[2])
        if line:
            print(line, flush=True)
' "$NOTIFY" "$SOCK" > "$MP_TMP/notify.log" 2>&1 &
NPID=$!
echo "$NPID" >> "$MP_TMP/workload.pids"
wait_until 5 grep -q listening "$MP_TMP/notify.log"

NOTIFY_SOCKET=$NOTIFY svc_start
# memprofd answering does not mean the listener has printed what it received: wait for the line.
wait_until 5 grep -q '^READY=1' "$MP_TMP/notify.log"
check "READY=1 is sent once the control socket listens" grep -q '^READY=1 socket=True' "$MP_TMP/notify.log"
check "STATUS= tells the profile counts" \
	wait_until 5 grep -q '^STATUS=0 sampling, 0 stopped' "$MP_TMP/notify.log"

# --- SIGTERM while two profiles sample ------------------------------------------------------
W1=$(phases_start -- 1000 2000)
W2=$(phases_start -- 1000 2000)
I1=$(ctl attach -r 0.01 "$W1" | attach_id)
I2=$(ctl attach -r 0.01 -o "$MP_TMP/w2.ctf" "$W2" | attach_id)
phases_do "$W1" USR1 allocated
phases_do "$W2" USR1 allocated
wait_until 10 eval '[ "$(proc_field "$I1" sampled_blocks)" -gt 0 ] && [ "$(proc_field "$I2" sampled_blocks)" -gt 0 ]'
check "STATUS= follows the profiles" wait_until 10 grep -q '^STATUS=2 sampling' "$MP_TMP/notify.log"
svc_stop
check "SIGTERM with profiles sampling: memprofd exits 0" [ $? = 0 ]
check "STOPPING=1 is sent" grep -q '^STOPPING=1' "$MP_TMP/notify.log"
T1=$STATE/profiles/$I1/$W1-svc_phases.ctf
read -r A1 C1 < <(trace_counts "$T1")
read -r A2 C2 < <(trace_counts "$MP_TMP/w2.ctf")
check "the traces are complete and valid (strict reader: $A1 and $A2 allocs)" \
	[ "${A1:-0}" -gt 500 -a "${A2:-0}" -gt 500 ]
check "the manifests say complete" eval "grep -Eq '\"complete\": ?true' $STATE/profiles/$I1/manifest.json && \
	grep -Eq '\"complete\": ?true' $STATE/profiles/$I2/manifest.json"
check "memprofd removed its socket" [ ! -e "$SOCK" ]

# --- SIGKILL: readable prefixes; a restart recovers the socket, ids stay unique -----------
svc_start
W3=$(phases_start -- 2000 2000)
I3=$(ctl attach -r 0.01 "$W3" | attach_id)
check "profile ids stay unique across restarts ($I3 after $I2)" [ "$I3" -gt "$I2" ]
phases_do "$W3" USR1 allocated
wait_until 10 eval '[ "$(proc_field "$I3" sampled_blocks)" -gt 1000 ]'
sleep 1	# the engine writes whole packets as they fill; give it a moment to write some
kill -KILL "$DPID"; wait "$DPID" 2>/dev/null; DPID=
T3=$STATE/profiles/$I3/$W3-svc_phases.ctf
check "after SIGKILL the trace is a readable prefix (strict reader)" \
	eval "\"$MEMPROFCTL\" dump \"$T3\" > /dev/null"
check "the profiled process lives on" kill -0 "$W3"
svc_start
check "a restart recovers the stale socket" eval "ctl list > /dev/null"

# --- a target killed mid-profile ------------------------------------------------------------
W4=$(phases_start -- 1000 2000)
I4=$(ctl attach -r 0.01 "$W4" | attach_id)
phases_do "$W4" USR1 allocated
wait_until 10 eval '[ "$(proc_field "$I4" sampled_blocks)" -gt 0 ]'
kill -KILL "$W4"
check "a profile whose processes all exited stops by itself" wait_until 10 \
	eval "ctl status $I4 | grep -q '^Profile $I4: stopped'"
check "  ... its process shows as exited" eval "ctl status $I4 | grep -q ' exited '"
ctl discard "$I4" > /dev/null
read -r A4 C4 < <(trace_counts "$STATE/profiles/$I4/$W4-svc_phases.ctf")
check "  ... and its trace is complete ($A4 allocs)" [ "${A4:-0}" -gt 500 ]
svc_stop

# --- socket activation (sd_listen_fds), without a service manager --------------------------
if command -v systemd-socket-activate > /dev/null; then
	SA=$MP_TMP/activated
	systemd-socket-activate -l "$SA" "$MEMPROFD" --state-dir "$STATE" \
		--config "$MP_TMP/memprofd.conf" >> "$MP_TMP/memprofd.log" 2>&1 &
	DPID=$!
	wait_until 5 test -S "$SA"
	check "socket activation: the first connection starts memprofd" \
		eval "\"$MEMPROFCTL\" --socket \"$SA\" status | grep -q '^memprofd '"
	check "  ... which serves the socket it was given" \
		grep -q 'control socket from the service manager' "$MP_TMP/memprofd.log"
	svc_stop
	check "  ... and leaves that socket alone when it exits" [ -S "$SA" ]
else
	echo "SKIP: socket activation (no systemd-socket-activate)"
fi
exit $((FAILS > 0))
