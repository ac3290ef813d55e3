#!/bin/bash
# Descriptors: the probe links of processes that exited are released (a fork/exec storm under
# a followed profile used to pile them up, 54 -> 1865 fds in 20 s), and a memprofd out of
# descriptors stops polling its socket for a while instead of failing accept() in a busy
# loop (781 log lines in 5 s), and answers again once descriptors are free.
. "$(dirname "$0")/lib-service.sh"
svc_require
svc_start

fds() { ls "/proc/$DPID/fd" | wc -l; }
links() { ls -l "/proc/$DPID/fd" | grep -c 'anon_inode:bpf_link'; }
check "memprofd raised its soft limit of open files to the hard one" \
	eval "[ \"\$(awk '/^Max open files/ {print \$4 == \$5}' /proc/$DPID/limits)\" = 1 ]"
BASE=$(fds)
BASE_LINKS=$(links)

# --- a fork/exec storm under a followed profile ----------------------------------------------
mkfifo "$MP_TMP/go"
cat > "$MP_TMP/storm.sh" <<'EOS'
read -r _ < "$1"
end=$((SECONDS + $2))
while [ $SECONDS -lt $end ]; do /bin/true; /bin/true; /bin/true; /bin/true; done
EOS
bash "$MP_TMP/storm.sh" "$MP_TMP/go" 15 &
STORM=$!
echo "$STORM" >> "$MP_TMP/workload.pids"
ID=$(ctl attach -r 0.001 "$STORM" | attach_id)
echo go > "$MP_TMP/go"
MAX=0 SLOW=0
while kill -0 "$STORM" 2>/dev/null; do
	n=$(fds)
	[ "$n" -gt "$MAX" ] && MAX=$n
	timeout 1 "$MEMPROFCTL" --socket "$SOCK" list > /dev/null || SLOW=$((SLOW + 1))
	sleep 0.5
done
NTRACES=$(ls "$STATE/profiles/$ID" | grep -c '\.ctf$')
echo "storm: $NTRACES processes profiled, at most $MAX descriptors (base $BASE)"
check "the storm ran many processes" [ "$NTRACES" -gt 500 ]
# Each profiled process held its links (two per probed object) while it lived: a handful at a
# time. Released only slowly, they made thousands.
check "memprofd's descriptors stay below the usual soft limit (1024) during the storm" \
	[ "$MAX" -lt 1024 ]
check "memprofd answered list within 1 s throughout the storm" [ "$SLOW" = 0 ]
check "once every process exited, their links are released (back to the base count)" \
	wait_until 20 eval "[ \$(links) -le $BASE_LINKS ]"
ctl stop "$ID" > /dev/null; ctl discard "$ID" > /dev/null
svc_stop

# --- out of descriptors ------------------------------------------------------------------------
# A hard limit memprofd cannot raise, a little above what it holds idle; root's connections
# (never refused by MaxClients) take the rest.
: > "$MP_TMP/memprofd.log"
(ulimit -n $((BASE + 24)); exec "$MEMPROFD" --socket "$SOCK" --state-dir "$STATE" \
	--config "$MP_TMP/memprofd.conf" >> "$MP_TMP/memprofd.log" 2>&1) &
DPID=$!
wait_until 20 "$MEMPROFCTL" --socket "$SOCK" status > /dev/null 2>&1
/usr/bin/python3 -c '
import socket, sys, time
held = []
for i in range(64):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sys.argv[1])
    held.append(s)
print("connected", flush=True)
time.sleep(float(sys.argv[2]))
' "$SOCK" 5 > "$MP_TMP/hog.out" 2>&1 &
HOG=$!
wait "$HOG"
LINES=$(grep -c 'Failed to accept a control connection' "$MP_TMP/memprofd.log")
echo "accept failures logged: $LINES"
check "out of descriptors for 5 s: memprofd says so" [ "$LINES" -ge 1 ]
check "  ... in a bounded number of lines (at most one per 10 s)" [ "$LINES" -le 2 ]
check "once the connections are gone, memprofd answers list within 1 s" \
	wait_until 5 timeout 1 "$MEMPROFCTL" --socket "$SOCK" list
svc_stop
check "SIGTERM ends it (exit 0)" [ $? = 0 ]
exit $((FAILS > 0))
