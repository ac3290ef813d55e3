#!/bin/bash
# A profile that follows a shell loop starting short processes (churn): every process the
# profile saw has its name, in status and in its trace's file name, even one that exited before
# memprofd read /proc (the kernel's records carry the name), a file begun at a fork is named
# after the image its child exec'd; memprofd's fds do not grow with the
# processes; status lists the last 64 exited processes and sums the others (Retired), so that
# listed and retired processes add up to every process seen and the sampled blocks to those
# in the traces; SIGTERM with the profile still sampling ends memprofd within 10 s.
. "$(dirname "$0")/lib-service.sh"
svc_require
svc_start

bash -c 'while :; do /bin/true; /usr/bin/env true; sleep 0.005; done' &
LOOP=$!
echo "$LOOP" >> "$MP_TMP/workload.pids"
id=$(ctl attach -r 1e-3 "$LOOP" | attach_id)
check "attach the loop" [ -n "$id" ]
anon() { awk '/^RssAnon/ {print $2}' "/proc/$DPID/status"; }
sleep 4
fds_mid=$(ls "/proc/$DPID/fd" | wc -l)
anon_mid=$(anon)
sleep 4
fds_end=$(ls "/proc/$DPID/fd" | wc -l)
anon_end=$(anon)
ctl --json status "$id" > "$MP_TMP/status.json"
read -r nlisted nexited nretired unnamed < <(/usr/bin/python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
ps = s["processes"]
print(len(ps), sum(1 for p in ps if p["exited"]), s.get("retired", {}).get("processes", 0),
      sum(1 for p in ps if p["comm"] in ("", "?")))' "$MP_TMP/status.json")
nproc=$((nlisted + nretired))
echo "churn: $nproc processes in the profile ($nlisted listed, $nretired retired);" \
	"memprofd fds $fds_mid then $fds_end"
check "churn: the profile saw at least 200 processes ($nproc)" [ "${nproc:-0}" -ge 200 ]
# 64 whose traces are written, and those whose writers are still finishing their files
check "churn: status lists about 64 exited processes ($nexited), sums the rest ($nretired)" \
	[ "$nexited" -le 80 -a "$nretired" -gt 0 ]
check "churn: every process in status has its name ($unnamed without)" [ "$unnamed" = 0 ]
files=$(ls "$STATE/profiles/$id" | grep -c '\.ctf$')
nameless=$(ls "$STATE/profiles/$id" | grep -c -- '-?\.\|-\.' || true)
check "churn: every trace file is named after its process ($nameless of $files not)" \
	[ "$files" -ge 200 -a "$nameless" = 0 ]
# The loop's children exec true, env and sleep at once: their files, begun at the fork as
# PID-bash.ctf, take the name of the image they hold (only the loop itself, and a child
# sampled before its exec, keep bash's).
forked=$(ls "$STATE/profiles/$id" | grep -c -- '-bash\(\.[0-9]*\)\?\.ctf$' || true)
check "churn: trace files are named after the image they hold ($forked of $files after bash)" \
	[ "$forked" -le $((files / 20 + 1)) ]
check "churn: memprofd's fds do not grow with the processes ($fds_mid, then $fds_end)" \
	[ "$fds_end" -le $((fds_mid + 16)) ]
# Before exited processes were retired, each kept about 7 KiB: 5 MB over this second half.
check "churn: memprofd's memory does not grow with the processes (anon RSS $anon_mid KiB, then $anon_end)" \
	[ "$anon_end" -le $((anon_mid + 2048)) ]

# Stopped and discarded: every trace complete; the listed and retired sampled blocks are the
# traces' allocs, one trace per process.
ctl stop "$id" > /dev/null && ctl discard "$id" > /dev/null
ctl --json status "$id" > "$MP_TMP/status.json"
read -r nprocs blocks < <(/usr/bin/python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
r = s.get("retired", {})
print(len(s["processes"]) + r.get("processes", 0),
      sum(p["sampled_blocks"] for p in s["processes"]) + r.get("sampled_blocks", 0))' \
	"$MP_TMP/status.json")
allocs=0
ntraces=0
for t in "$STATE/profiles/$id"/*.ctf; do
	read -r a _ < <(trace_counts "$t")
	allocs=$((allocs + a))
	ntraces=$((ntraces + 1))
done
check "churn: one trace per process, listed or retired ($ntraces traces, $nprocs processes)" \
	[ "$ntraces" = "$nprocs" ]
check "churn: their sampled blocks add up to the traces' allocs ($blocks, $allocs)" \
	[ "$blocks" = "$allocs" ]

# The loop again, in a new profile, for SIGTERM while it samples.
check "attach the loop again" eval "ctl attach -r 1e-3 $LOOP | grep -q '^Profile'"
sleep 2
t0=$(date +%s%N)
svc_stop
rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
check "churn: SIGTERM while sampling: exit status 0 ($rc)" [ "$rc" = 0 ]
check "churn: SIGTERM while sampling: memprofd ended within 10 s (${ms} ms)" [ "$ms" -lt 10000 ]
kill "$LOOP" 2> /dev/null
exit $((FAILS > 0))
