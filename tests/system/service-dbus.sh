#!/bin/bash
# External D-Bus clients: dbus-send on memprofd's private socket (peer to peer), and busctl
# against memprofd registered as org.memprofd on a private dbus-daemon.
. "$(dirname "$0")/lib-service.sh"
svc_require
for t in dbus-send dbus-daemon busctl; do
	command -v $t > /dev/null || { echo "$t missing (Debian package dbus/systemd)"; exit 77; }
done

BUSADDR=unix:path=$MP_TMP/dbus
dbus-daemon --session --address="$BUSADDR" --nopidfile --print-pid --fork > "$MP_TMP/dbus.pid"
echo "$(cat "$MP_TMP/dbus.pid")" >> "$MP_TMP/workload.pids"
svc_start --bus-address "$BUSADDR"

# --- dbus-send --peer on the private socket ------------------------------------------------
PEER=(dbus-send --peer="unix:path=$SOCK" --print-reply --reply-timeout=5000)
"${PEER[@]}" /org/memprofd org.freedesktop.DBus.Introspectable.Introspect > "$MP_TMP/intro"
check "dbus-send --peer: introspect /org/memprofd" \
	eval "grep -q 'interface name=\"org.memprofd.Manager1\"' $MP_TMP/intro && \
	      grep -q 'method name=\"Start\"' $MP_TMP/intro && grep -q 'node name=\"profile\"' $MP_TMP/intro"
W=$(phases_start -- 100 1000)
ID=$(ctl attach "$W" | attach_id)
"${PEER[@]}" /org/memprofd org.memprofd.Manager1.ListProfiles > "$MP_TMP/list"
check "dbus-send --peer: ListProfiles" \
	eval "grep -q 'uint32 $ID' $MP_TMP/list && grep -q 'string \"sampling\"' $MP_TMP/list && \
	      grep -q 'object path \"/org/memprofd/profile/$ID\"' $MP_TMP/list && grep -q 'uint32 $W' $MP_TMP/list"
check "dbus-send --peer: a profile's State property" \
	eval "\"\${PEER[@]}\" /org/memprofd/profile/$ID org.freedesktop.DBus.Properties.Get \
	      string:org.memprofd.Profile1 string:State | grep -q 'string \"sampling\"'"
check "dbus-send --peer: Stop" "${PEER[@]}" /org/memprofd org.memprofd.Manager1.Stop "uint32:$ID"
"${PEER[@]}" /org/memprofd org.memprofd.Manager1.Stop "uint32:$ID" > /dev/null 2> "$MP_TMP/err"
check "dbus-send --peer: errors are named D-Bus errors" \
	grep -q 'org.memprofd.Error.BadState: Profile [0-9]* is stopped, not sampling' "$MP_TMP/err"
"${PEER[@]}" /org/memprofd org.memprofd.Manager1.Discard uint32:999 > /dev/null 2> "$MP_TMP/err"
check "dbus-send --peer: unknown profile is org.memprofd.Error.NotFound" \
	grep -q 'org.memprofd.Error.NotFound: No profile 999' "$MP_TMP/err"
check "dbus-send --peer: Discard" "${PEER[@]}" /org/memprofd/profile/"$ID" org.memprofd.Profile1.Discard

# --- busctl on the bus ------------------------------------------------------------------------
BC=(busctl --address="$BUSADDR")
check "busctl: org.memprofd is on the bus" eval "\"\${BC[@]}\" list | grep -q '^org.memprofd '"
"${BC[@]}" introspect org.memprofd /org/memprofd > "$MP_TMP/bintro"
check "busctl: introspect" eval "grep -q '^\.Start *method *aia{sv} *o' $MP_TMP/bintro && \
	grep -q '^\.Stats *property *a(st)' $MP_TMP/bintro"
W2=$(phases_start -- 1000 2000)
P=$("${BC[@]}" call org.memprofd /org/memprofd org.memprofd.Manager1 Start 'aia{sv}' \
	1 "$W2" 3 rate d 0.01 callstack_size u 16 follow_forks b false)
check "busctl: Start with options returns a profile path ($P)" \
	eval "echo '$P' | grep -Eq '^o \"/org/memprofd/profile/[0-9]+\"\$'"
PP=$(echo "$P" | sed 's/^o "\(.*\)"$/\1/')
phases_do "$W2" USR1 allocated
"${BC[@]}" get-property org.memprofd "$PP" org.memprofd.Profile1 State Rate CallstackSize \
	FollowForks Owner > "$MP_TMP/props"
check "busctl: the profile's properties" \
	eval "[ \"\$(tr '\n' ' ' < $MP_TMP/props)\" = 's \"sampling\" d 0.01 u 16 b false u 0 ' ]"
check "busctl: Processes has per-process samples" wait_until 10 eval \
	"\"\${BC[@]}\" get-property org.memprofd $PP org.memprofd.Profile1 Processes | \
	 grep -Eq '^a\(usbttttddts\) 1 $W2 \"svc_phases\" false [1-9]'"
# ProcessStatus: the same figures by name, each with its type; nothing positional.
proc_status() {
	"${BC[@]}" --json=short get-property org.memprofd "$PP" org.memprofd.Profile1 \
		ProcessStatus | /usr/bin/python3 -c '
import json, sys
v = json.load(sys.stdin)
assert v["type"] == "aa{sv}", v["type"]
(p,) = v["data"]
want = {"pid": "u", "comm": "s", "exited": "b", "mode": "s", "sampled_blocks": "t",
        "samples": "t", "live_samples": "t", "freed_blocks": "t", "drops": "t",
        "est_alloc_bytes": "d", "est_live_bytes": "d", "trace": "s"}
assert {k: e["type"] for k, e in p.items()} == want, p
d = {k: e["data"] for k, e in p.items()}
assert d["pid"] == int(sys.argv[1]) and d["comm"] == "svc_phases" and not d["exited"], d
assert 0 < d["sampled_blocks"] <= d["samples"] and d["freed_blocks"] == 0, d
assert d["live_samples"] == d["samples"] and d["est_alloc_bytes"] > 0, d
assert d["trace"].endswith("/%s-svc_phases.ctf" % sys.argv[1]), d
' "$W2" 2> "$MP_TMP/procstatus.err"
}
check "busctl: ProcessStatus names each process' fields" wait_until 10 proc_status || cat "$MP_TMP/procstatus.err"
check "busctl: Stop on the profile object" \
	"${BC[@]}" call org.memprofd "$PP" org.memprofd.Profile1 Stop
check "busctl: State follows" eval "\"\${BC[@]}\" get-property org.memprofd $PP \
	org.memprofd.Profile1 State | grep -q stopped"
check "busctl: Discard through the manager" \
	"${BC[@]}" call org.memprofd /org/memprofd org.memprofd.Manager1 Discard u "${PP##*/}"
check "busctl: the trace is complete" \
	eval "\"$MEMPROFCTL\" dump $STATE/profiles/${PP##*/}/$W2-svc_phases.ctf > /dev/null"
"${BC[@]}" call org.memprofd /org/memprofd org.memprofd.Manager1 Start 'aia{sv}' 1 "$W2" \
	1 rate s fast > /dev/null 2> "$MP_TMP/err"
check "busctl: a mistyped option is refused clearly" \
	grep -q "Option 'rate' must be a variant of type 'd'" "$MP_TMP/err"
svc_stop
check "memprofd exits 0" [ $? = 0 ]
exit $((FAILS > 0))
