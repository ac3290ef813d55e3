#!/bin/bash
# The state directory under stress from users and crashes: a pid used again in one
# profile gets a trace of its own, the earlier one intact; a full disk is reported by name
# (ENOSPC) with the time it began in status (text and JSON, through the D-Bus property) and in
# the manifest, lost writes are not counted as unmatched frees, the manifest still reaches its
# final state, and the failure is logged once; after SIGKILL a restarted memprofd marks the
# profiles it finds unfinished as interrupted. The service answers `list` within 1 s throughout.
. "$(dirname "$0")/lib-service.sh"
svc_require
command -v setpriv > /dev/null || { echo "setpriv missing"; exit 77; }
SHARED=$(mktemp -d /tmp/memprofd-state.XXXXXX)
chmod 755 "$SHARED"
SOCK=$SHARED/bus
STATE=$SHARED/state
mkdir -m 0755 "$STATE"
mount -t tmpfs -o size=1m,mode=0755 memprof-state "$STATE" || { echo "cannot mount a tmpfs"; exit 77; }
trap 'svc_cleanup; umount "$STATE"; rm -rf "$SHARED"' EXIT
svc_start
FW=$MP_BUILD/tests/workloads/follow_wl
as_nobody() { "${NOBODY[@]}" "$MEMPROFCTL" --socket "$SOCK" "$@"; }
answers() { timeout 1 "$MEMPROFCTL" --socket "$SOCK" list > /dev/null; }
manifest() {	# manifest ID EXPR: a value of the manifest (python expression on m)
	/usr/bin/python3 -c 'import json,sys; m = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' \
		"$STATE/profiles/$1/manifest.json" "$2"
}

# --- a user fills the disk under the trace, as uid 65534 ----------------------------------
N=$(phases_start "${NOBODY[@]}" -- 200000 100)
ID=$(as_nobody attach -r 1 "$N" | attach_id)
phases_do "$N" USR1 allocated
wait_until 15 eval '[ "$(proc_field "$ID" write_error)" = ENOSPC ]'
check "status --json names the write error: ENOSPC" [ "$(proc_field "$ID" write_error)" = ENOSPC ]
since=$(proc_field "$ID" write_error_since_us)
now=$(( ($(date +%s) + 1) * 1000000))
check "  ... and when it began" eval "[ $since -gt $((now - 120000000)) ] && [ $since -le $now ]"
check "status names it too, with the time" \
	eval "ctl status $ID | grep -q 'WRITE ERROR: ENOSPC (No space left on device) since 20[0-9-]* [0-9:]*'"
check "the service answers list within 1 s" answers
phases_do "$N" USR2 freed
sleep 11	# two manifest flushes
check "the manifest names it" eval "[ \"\$(manifest $ID 'm[\"processes\"][0][\"write_error\"]')\" = ENOSPC ]"
check "frees of blocks whose allocs were lost are not unmatched frees" \
	eval "[ \"\$(manifest $ID 'm[\"processes\"][0][\"unmatched_frees\"]')\" = 0 ]"
as_nobody stop "$ID" > /dev/null && as_nobody discard "$ID" > /dev/null
wait_until 10 eval "[ \"\$(manifest $ID 'm[\"complete\"]')\" = True ]"
check "at discard the manifest reaches its final state" \
	eval "[ \"\$(manifest $ID 'm[\"state\"], m[\"complete\"]')\" = \"('discarded', True)\" ]"
TRACE=$STATE/profiles/$ID/$N-svc_phases.ctf
check "the trace is a readable prefix, its drops line patched: write errors, no unmatched frees" \
	eval "'$MEMPROFCTL' dump '$TRACE' 2>/dev/null |
	      grep -q '^info context.*unmatched_frees=0 stale_blocks=0 write_errors=[1-9]'"
check "the trace's failure is logged once when it begins" \
	[ "$(grep -c "Failed to write the trace of svc_phases (pid $N) .* since" "$MP_TMP/memprofd.log")" = 1 ]
check "  ... once with its count at the end" \
	[ "$(grep -c "Failed to write the trace of svc_phases (pid $N) .* writes lost" "$MP_TMP/memprofd.log")" = 1 ]
check "a failing manifest is not logged every 5 s" \
	[ "$(grep -c 'Failed to write manifest' "$MP_TMP/memprofd.log")" -le 1 ]
rm -f "$TRACE"

# --- a pid used again in a profile does not take (overwrite) the first trace's name ------
mkfifo "$MP_TMP/go"
cat > "$MP_TMP/reuse.sh" <<EOS
read -r go < "$MP_TMP/go"
( sleep 0.3; exec "$FW" alloc 300 1000 ) & P=\$!; wait \$P
for ((i = 0; i < 200; i++)); do
	echo \$((P - 1)) > /proc/sys/kernel/ns_last_pid
	( sleep 0.3; exec "$FW" alloc 300 1000 ) & Q=\$!; wait \$Q
	[ \$Q = \$P ] && break
done
echo "\$P \$Q" > "$MP_TMP/pids"
EOS
bash "$MP_TMP/reuse.sh" &
B=$!
IB=$(ctl attach -r 1 "$B" | attach_id)
echo go > "$MP_TMP/go"
wait "$B"
read -r P Q < "$MP_TMP/pids"
if [ "$P" != "$Q" ]; then
	echo "SKIP: pid $P was not handed out again (a busy host)"
else
	ctl stop "$IB" > /dev/null; ctl discard "$IB" > /dev/null
	mapfile -t T < <(ls "$STATE/profiles/$IB/" | grep "^$P-")
	check "a pid used twice in a profile: two traces (${T[*]})" [ "${#T[@]}" = 2 ]
	check "  ... the first one intact, each with its 300 blocks" eval "
		[ \$(trace_counts '$STATE/profiles/$IB/${T[0]}' | cut -d' ' -f1) -ge 300 ] &&
		[ \$(trace_counts '$STATE/profiles/$IB/${T[1]:-none}' | cut -d' ' -f1) -ge 300 ]"
	check "  ... the manifest lists both" \
		eval "[ \"\$(manifest $IB 'sum(1 for p in m[\"processes\"] if p[\"pid\"] == $P)')\" = 2 ]"
	rm -f "$STATE/profiles/$IB/"*.ctf
fi

# --- after SIGKILL, a restarted memprofd marks unfinished profiles interrupted -----------
R=$(phases_start -- 100 1000)
IK=$(ctl attach -r 0.01 "$R" | attach_id)
phases_do "$R" USR1 allocated
wait_until 10 eval "[ \"\$(manifest $IK 'm[\"processes\"][0][\"samples\"]')\" -gt 0 ]"
kill -KILL "$DPID"; wait "$DPID" 2>/dev/null; DPID=
check "after SIGKILL the manifest still says sampling" \
	[ "$(manifest "$IK" 'm["state"]')" = sampling ]
svc_start
check "restarted: the profile is marked interrupted" \
	[ "$(manifest "$IK" 'm["state"], m["complete"]')" = "('interrupted', False)" ]
check "  ... its traces marked incomplete (readable prefixes)" \
	[ "$(manifest "$IK" 'm["processes"][0]["trace_complete"]')" = False ]
check "  ... the trace reads as a prefix (strict reader)" \
	eval "'$MEMPROFCTL' dump '$STATE/profiles/$IK/$R-svc_phases.ctf' > /dev/null 2>&1"
check "  ... a profile discarded before is left as it was" \
	[ "$(manifest "$ID" 'm["state"]')" = discarded ]
check "  ... one log line says so" \
	[ "$(grep -c "profiles/$IK' was not completed .*marked interrupted" "$MP_TMP/memprofd.log")" = 1 ]
check "the restarted service answers list within 1 s" answers
svc_stop
check "memprofd exits 0" [ $? = 0 ]
[ "$FAILS" = 0 ]
