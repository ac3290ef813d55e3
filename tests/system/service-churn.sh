#!/bin/bash
# A profile that follows a shell loop starting short processes (churn): every process the
# profile saw has its name, in status and in its trace's file name, even one that exited before
# memprofd read /proc (the kernel's records carry the name); memprofd's fds do not grow with the
# processes; SIGTERM with the profile still sampling ends memprofd within 10 s.
. "$(dirname "$0")/lib-service.sh"
svc_require
svc_start

bash -c 'while :; do /bin/true; /usr/bin/env true; sleep 0.005; done' &
LOOP=$!
echo "$LOOP" >> "$MP_TMP/workload.pids"
id=$(ctl attach -r 1e-3 "$LOOP" | attach_id)
check "attach the loop" [ -n "$id" ]
sleep 4
fds_mid=$(ls "/proc/$DPID/fd" | wc -l)
sleep 4
fds_end=$(ls "/proc/$DPID/fd" | wc -l)
ctl --json status "$id" > "$MP_TMP/status.json"
read -r nproc unnamed < <(/usr/bin/python3 -c '
import json, sys
ps = json.load(open(sys.argv[1]))["processes"]
print(len(ps), sum(1 for p in ps if p["comm"] in ("", "?")))' "$MP_TMP/status.json")
echo "churn: $nproc processes in the profile; memprofd fds $fds_mid then $fds_end"
check "churn: the profile saw at least 200 processes ($nproc)" [ "${nproc:-0}" -ge 200 ]
check "churn: every process in status has its name ($unnamed without)" [ "$unnamed" = 0 ]
files=$(ls "$STATE/profiles/$id" | grep -c '\.ctf$')
nameless=$(ls "$STATE/profiles/$id" | grep -c -- '-?\.\|-\.' || true)
check "churn: every trace file is named after its process ($nameless of $files not)" \
	[ "$files" -ge 200 -a "$nameless" = 0 ]
check "churn: memprofd's fds do not grow with the processes ($fds_mid, then $fds_end)" \
	[ "$fds_end" -le $((fds_mid + 16)) ]

t0=$(date +%s%N)
svc_stop
rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
check "churn: SIGTERM while sampling: exit status 0 ($rc)" [ "$rc" = 0 ]
check "churn: SIGTERM while sampling: memprofd ended within 10 s (${ms} ms)" [ "$ms" -lt 10000 ]
kill "$LOOP" 2> /dev/null
exit $((FAILS > 0))
