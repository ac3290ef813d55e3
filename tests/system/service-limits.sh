#!/bin/bash
# Limits against hostile unprivileged users: a client that pipelines calls and never
# reads its replies is held back, then disconnected (MaxQueuedCalls), without growing the daemon;
# one user cannot take all of MaxProfiles (MaxProfilesPerUser, RootReservedProfiles); a huge
# duration is refused instead of wrapping. `list` answers within 1 s throughout.
. "$(dirname "$0")/lib-service.sh"
svc_start_shared limits
as_uid() { local u=$1; shift; setpriv --reuid="$u" --regid="$u" --clear-groups "$@"; }
list_ok() { timeout 1 "$MEMPROFCTL" --socket "$SOCK" list > /dev/null; }
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$DPID/status"; }

# --- a client that pipelines calls and never reads its replies -----------------------------
RSS0=$(rss_kb)
"${NOBODY[@]}" /usr/bin/python3 "$RAW" flood "$SOCK" 100000 15 > "$MP_TMP/flood.out" 2>&1 &
FLOOD=$!
echo "$FLOOD" >> "$MP_TMP/workload.pids"
MAXRSS=$RSS0 LISTFAIL=0
while kill -0 "$FLOOD" 2> /dev/null; do
	list_ok || LISTFAIL=$((LISTFAIL + 1))
	r=$(rss_kb); [ "$r" -gt "$MAXRSS" ] && MAXRSS=$r
	sleep 0.2
done
wait "$FLOOD"
cat "$MP_TMP/flood.out"
check "a client that does not read is no longer read (it could not send all its calls)" \
	eval "grep -q '^sent' $MP_TMP/flood.out && ! grep -q '^sent 100000' $MP_TMP/flood.out"
check "  ... then it is disconnected" grep -q '^disconnected' "$MP_TMP/flood.out"
check "  ... with one log line" eval "[ \$(grep -c 'Disconnecting the control client of uid \
65534 .*MaxQueuedCalls=64' $MP_TMP/memprofd.log) = 1 ]"
check "  ... memprofd's RSS stayed bounded (${RSS0} -> ${MAXRSS} kB)" \
	[ $((MAXRSS - RSS0)) -lt 16384 ]
check "  ... and list answered within 1 s throughout" [ "$LISTFAIL" = 0 ]

# A well-behaved client that pipelines a few calls is served.
busy_clients() {
	local pids=() p rc=0
	for p in 1 2 3 4 5 6 7 8; do ctl list > /dev/null & pids+=($!); done
	for p in "${pids[@]}"; do wait "$p" || rc=1; done
	return $rc
}
check "busy but reading clients are served" busy_clients

# --- one user takes every profile slot: MaxProfiles shared, a reserve for root --------------
# MaxProfiles=4: each user may hold 1 (a quarter), and the last 1 (an eighth, at least 1) is
# root's.
printf 'MaxProfiles=4\n' > "$MP_TMP/memprofd.conf"
kill -HUP "$DPID"
check "reload: the derived limits are logged" wait_until 5 grep -q \
	'MaxProfiles=4 MaxProfilesPerUser=1 RootReservedProfiles=1' "$MP_TMP/memprofd.log"
N1=$(phases_start "${NOBODY[@]}" -- 10 10)
N2=$(phases_start "${NOBODY[@]}" -- 10 10)
A=$(phases_start setpriv --reuid=65533 --regid=65533 --clear-groups -- 10 10)
B=$(phases_start setpriv --reuid=65532 --regid=65532 --clear-groups -- 10 10)
C=$(phases_start setpriv --reuid=65531 --regid=65531 --clear-groups -- 10 10)
R=$(phases_start -- 10 10)
check "uid 65534 starts a profile" eval "as_uid 65534 $MEMPROFCTL --socket $SOCK attach $N1 > /dev/null"
as_uid 65534 "$MEMPROFCTL" --socket "$SOCK" attach "$N2" > /dev/null 2> "$MP_TMP/err"
check "  ... but not a second one: its share is used (LimitExceeded)" \
	grep -q 'Too many profiles of uid 65534: 1 are sampling or stopped (MaxProfilesPerUser=1)' \
	"$MP_TMP/err"
check "other users still get theirs" eval "as_uid 65533 $MEMPROFCTL --socket $SOCK attach $A > /dev/null && \
	as_uid 65532 $MEMPROFCTL --socket $SOCK attach $B > /dev/null"
as_uid 65531 "$MEMPROFCTL" --socket "$SOCK" attach "$C" > /dev/null 2> "$MP_TMP/err"
check "the profile kept for root is refused to other users" \
	grep -q 'the last 1 of MaxProfiles=4 are kept for root' "$MP_TMP/err"
check "root gets the reserved profile" eval "ctl attach $R > /dev/null"
check "  ... and list answers within 1 s" list_ok
printf 'MaxProfiles=4\nRootReservedProfiles=4\n' > "$MP_TMP/memprofd.conf"
kill -HUP "$DPID"
check "a reserve that leaves nothing to others is refused at reload" wait_until 5 grep -q \
	'RootReservedProfiles=4 leaves no profile to other users' "$MP_TMP/memprofd.log"
for id in $(ctl list | awk '$2 == "sampling" {print $1}'); do
	ctl stop "$id" > /dev/null && ctl discard "$id" > /dev/null
done

# --- a duration so large that it would wrap the daemon's clock ------------------------------
D=$(phases_start "${NOBODY[@]}" -- 10 10)
"${NOBODY[@]}" /usr/bin/python3 "$RAW" start "$SOCK" "$D" 18446744073709551000 > "$MP_TMP/start.out"
check "API: a duration near 2^64 us is InvalidArgs" grep -q \
	"^error org.memprofd.Error.InvalidArgs: Invalid duration '18446744073709551000us': from 1us to 366 days" \
	"$MP_TMP/start.out"
check "  ... and starts nothing" eval "! ctl list | grep -q ' $D\$'"
"${NOBODY[@]}" /usr/bin/python3 "$RAW" start "$SOCK" "$D" 31622400000000 > "$MP_TMP/start.out"
check "API: the maximum (366 days) is taken, and the profile samples" eval \
	"grep -q '^reply' $MP_TMP/start.out && sleep 0.5 && ctl list | grep -q 'sampling .* $D\$'"
as_uid 65534 "$MEMPROFCTL" --socket "$SOCK" attach --duration 8785h "$D" 2> "$MP_TMP/err"
check "CLI: a duration over 366 days is refused (exit 2)" eval "[ $? = 2 ] && \
	grep -q \"Invalid duration '8785h': from 1us to 366 days\" $MP_TMP/err"
check "list answers within 1 s at the end" list_ok
exit $((FAILS > 0))
