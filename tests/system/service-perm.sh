#!/bin/bash
# Authorization: a caller other than root may profile only processes it could ptrace (same
# uid and gid, dumpable), gets a permission error naming the PID otherwise, may control only
# its own profiles, and owns the traces of its profiles.
. "$(dirname "$0")/lib-service.sh"
# Another user must reach the socket and the traces.
svc_start_shared perm
PERMDIR=$SHARED

OTHER=(setpriv --reuid=65533 --regid=65533 --clear-groups)
as_nobody() { "${NOBODY[@]}" "$MEMPROFCTL" --socket "$SOCK" "$@"; }

R=$(phases_start -- 100 1000)
O=$(phases_start "${OTHER[@]}" -- 100 1000)
N=$(phases_start "${NOBODY[@]}" -- 1000 1000)
ND=$(SVC_PHASES_NONDUMPABLE=1 phases_start "${NOBODY[@]}" -- 10 10)

as_nobody attach "$R" > /dev/null 2> "$MP_TMP/err"
check "uid 65534 cannot profile a root process (exit 1)" [ $? = 1 ]
check "  ... permission error naming the PID" \
	grep -q "Permission denied: process $R runs as uid 0" "$MP_TMP/err"
as_nobody attach "$O" > /dev/null 2> "$MP_TMP/err"
check "uid 65534 cannot profile another user's process" \
	grep -q "Permission denied: process $O runs as uid 65533" "$MP_TMP/err"
as_nobody attach "$ND" > /dev/null 2> "$MP_TMP/err"
check "uid 65534 cannot profile its own non-dumpable process" \
	grep -q "Permission denied: process $ND is not dumpable" "$MP_TMP/err"
as_nobody attach "$N" "$R" > /dev/null 2> "$MP_TMP/err"
check "one forbidden PID refuses the whole request" grep -q "process $R" "$MP_TMP/err"
check "  ... and starts nothing" eval "[ \$(ctl --json list | grep -c '\"id\"') = 0 ]"

ID=$(as_nobody attach -r 0.01 "$N" | attach_id)
check "uid 65534 can profile its own process" [ -n "$ID" ]
check "  ... the profile belongs to uid 65534" \
	eval "ctl status $ID | grep -q 'Owner: *uid 65534'"
RID=$(ctl attach "$R" | attach_id)
as_nobody stop "$RID" 2> "$MP_TMP/err"
check "uid 65534 cannot stop root's profile" \
	grep -q "profile $RID belongs to uid 0; uid 65534 may not stop it" "$MP_TMP/err"
check "root may stop anyone's profile" eval "ctl stop $ID > /dev/null"
phases_do "$N" USR1 allocated
as_nobody discard "$ID" > /dev/null
check "uid 65534 may discard its own profile" [ $? = 0 ]
TRACE=$STATE/profiles/$ID/$N-svc_phases.ctf
check "the trace belongs to uid 65534" [ "$(stat -c %u:%g "$TRACE")" = 65534:65534 ]
check "the manifest belongs to uid 65534" \
	[ "$(stat -c %u "$STATE/profiles/$ID/manifest.json")" = 65534 ]
check "the profile directory belongs to memprofd (no planted symlinks)" \
	[ "$(stat -c %u "$STATE/profiles/$ID")" = 0 ]
check "uid 65534 reads its trace with the strict reader" \
	eval "\"\${NOBODY[@]}\" \"$MEMPROFCTL\" dump \"$TRACE\" > /dev/null"

# -o FILE: opened by the client with its own rights; memprofd only gets the descriptor.
mkdir -m 0777 "$PERMDIR/out"
N2=$(phases_start "${NOBODY[@]}" -- 500 1000)
ID2=$(as_nobody attach -r 0.01 -o "$PERMDIR/out/mine.ctf" "$N2" | attach_id)
phases_do "$N2" USR1 allocated
wait_until 10 eval '[ "$(proc_field "$ID2" sampled_blocks)" -gt 0 ]'
as_nobody stop "$ID2" > /dev/null && as_nobody discard "$ID2" > /dev/null
check "a trace to the client's file is written and belongs to the client" \
	eval "[ \$(stat -c %u $PERMDIR/out/mine.ctf) = 65534 ] && \
	      [ \$(trace_counts $PERMDIR/out/mine.ctf | cut -d' ' -f1) -gt 200 ]"
as_nobody attach -o /etc/memprofd-test.ctf "$N2" 2> "$MP_TMP/err"
check "a client cannot make memprofd write where it may not" \
	eval "[ ! -e /etc/memprofd-test.ctf ] && grep -q \"Failed to open '/etc/memprofd-test.ctf'\" $MP_TMP/err"

# MaxClients: one user holds at most a quarter of the connections; root always gets in.
printf 'MaxClients=4\n' > "$MP_TMP/memprofd.conf"
kill -HUP "$DPID"
wait_until 5 grep -q 'MaxClients=4' "$MP_TMP/memprofd.log"
N3=$(phases_start "${NOBODY[@]}" -- 10 10)
"${NOBODY[@]}" "$MEMPROFCTL" --socket "$SOCK" attach --wait "$N3" > "$MP_TMP/held.out" 2>&1 &
HELD=$!
wait_until 5 eval "ctl list | grep -q ' $N3\$'"
as_nobody list > /dev/null 2> "$MP_TMP/err"
check "a user over its share of MaxClients is refused (exit 1)" [ $? = 1 ]
check "  ... with one line" eval "[ \$(wc -l < $MP_TMP/err) = 1 ] && grep -q 'closed the connection' $MP_TMP/err || { cat $MP_TMP/err; false; }"
check "  ... while root still gets in" eval "ctl list > /dev/null"
check "  ... and the refusal is counted" eval "ctl status | grep -q 'connected, 1 refused'"
ctl stop "$(ctl list | awk -v p="$N3" '$NF == p {print $1}')" > /dev/null
wait "$HELD"
check "attach --wait ends when its profile is stopped, and discards it" \
	grep -q '^Profile [0-9]*: discarded' "$MP_TMP/held.out"
exit $((FAILS > 0))
