#!/bin/bash
# memprofd refuses to profile itself: its own allocations would feed the ring buffer it drains,
# each record read making more (it used to spin at 100 % CPU, deaf to calls and SIGTERM).
. "$(dirname "$0")/lib-service.sh"
svc_require
svc_start

ctl attach -r 1 "$DPID" > "$MP_TMP/out" 2> "$MP_TMP/err"
check "attaching memprofd to itself fails (exit 1)" [ $? = 1 ]
check "  ... saying why" grep -q "Process $DPID is the profiler itself" "$MP_TMP/err"
check "  ... and starts nothing" eval "[ \$(ctl --json list | grep -c '\"id\"') = 0 ]"
check "memprofd answers list within 1 s after it" timeout 1 "$MEMPROFCTL" --socket "$SOCK" list
W=$(phases_start -- 100 1000)
ctl attach -r 1 "$W" "$DPID" > /dev/null 2> "$MP_TMP/err"
check "one of several processes being memprofd refuses the request" \
	grep -q "Process $DPID is the profiler itself" "$MP_TMP/err"
check "  ... and starts nothing" eval "[ \$(ctl --json list | grep -c '\"id\"') = 0 ]"
svc_stop
check "SIGTERM ends memprofd (exit 0)" [ $? = 0 ]
exit $((FAILS > 0))
