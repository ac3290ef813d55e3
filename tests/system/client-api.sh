#!/bin/bash
# libmemprof's client API (<memprof/client.h>) against a real memprofd on a private socket,
# through examples/client_example: start with the trace going to the client's file, status
# (state, per-process counts), stop (frees still recorded), discard (trace complete: every
# sample and every free, strict reader), and the daemon's error messages (errmsg).
. "$(dirname "$0")/lib-service.sh"
CLIENT=$MP_BUILD/examples/client_example
svc_require
[ -x "$CLIENT" ] || { echo "FAIL: missing $CLIENT (make all test-bins)"; exit 1; }
svc_start --seed 7
cl() { "$CLIENT" -s "$SOCK" "$@"; }
field() {	# field ID NAME: a number from the first "process" line of status
	cl status "$1" | awk -v k="$2" '$1 == "process" { for (i = 4; i < NF; i++)
		if ($i == k) { print $(i + 1); exit } }'
}

W=$(phases_start -- 2000 4000)
OUT=$MP_TMP/client-api.ctf
ID=$(cl start "$W" "$OUT" 0.01 | awk '/^started/ {print $2}')
check "start returns a profile id" [ -n "$ID" ]
check "status: sampling, one process" eval "cl status $ID | grep -q '^state sampling rate 0.01 processes 1'"
check "status names the process and its mode" \
	eval "cl status $ID | grep -Eq '^process $W svc_phases mode (uprobe|preload) '"
phases_do "$W" USR1 allocated
wait_until 10 eval '[ "$(field "$ID" samples)" -gt 0 ]'
S=$(field "$ID" samples)
check "samples counted ($S of 2000 blocks of 4000 bytes at 0.01)" [ "${S:-0}" -gt 1500 ]
check "stop" cl stop "$ID"
check "status: stopped" eval "cl status $ID | grep -q '^state stopped'"
phases_do "$W" USR2 freed
wait_until 10 eval '[ "$(field "$ID" frees)" = "$S" ]'
check "frees after stop are recorded" [ "$(field "$ID" frees)" = "$S" ]
phases_do "$W" USR1 allocated
check "no samples after stop" [ "$(field "$ID" samples)" = "$S" ]
check "discard" cl discard "$ID"
read -r A C < <(trace_counts "$OUT")
check "trace in the client's file: every sample ($A) and free ($C)" [ "$A" = "$S" -a "$C" = "$S" ]

# Errors: -errno and the daemon's message.
cl stop 4242 > /dev/null 2> "$MP_TMP/err"
rc=$?
check "unknown id fails with the daemon's message" eval "[ $rc != 0 ] && grep -q '^stop failed: No such file or directory: .*4242' '$MP_TMP/err'"
cl start 999999999 "$MP_TMP/none.ctf" > /dev/null 2> "$MP_TMP/err"
rc=$?
check "no such process fails with a message" eval "[ $rc != 0 ] && grep -q '^start failed: No such process: ..*' '$MP_TMP/err'"
"$CLIENT" -s "$MP_TMP/nosuch" status 1 > /dev/null 2> "$MP_TMP/err"
check "connection failure names the socket" grep -q "nosuch" "$MP_TMP/err"

svc_stop
[ "$FAILS" = 0 ]
