#!/bin/bash
# Standing profiles: the [Profile] sections of memprofd.conf start with memprofd, as root's
# profiles of their targets, with their settings; SIGHUP (systemctl reload) completes the
# traces of a section removed or changed and starts the new ones, leaves an unchanged one
# running, and keeps everything when the file is malformed (its line named); a target that
# cannot be resolved is logged and the others still start; a restart of memprofd starts them
# again. (At boot under systemd, of a unit: tests/system/service-unit-targets.sh.)
. "$(dirname "$0")/lib-service.sh"
svc_require
WL=$MP_BUILD/tests/workloads/wl_alloc
EXE=$MP_TMP/wl_standing
cp "$WL" "$EXE"
V2=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/mounts)
[ -n "$V2" ] || { echo "no cgroup v2 hierarchy mounted"; exit 77; }
CG=$V2/memprofd-standing-$$
mkdir -p "$CG"
trap 'svc_cleanup; rmdir "$CG" 2> /dev/null' EXIT
CONF=$MP_TMP/standing.conf

# profile_of NAME: the id of the standing profile NAME that is not discarded
profile_of() {
	local id
	for id in $(ctl --json list | /usr/bin/python3 -c '
import json, sys
for p in json.load(sys.stdin):
    if p["state"] != "discarded":
        print(p["id"])'); do
		ctl --json status "$id" | /usr/bin/python3 -c '
import json, sys
sys.exit(json.load(sys.stdin).get("standing") != sys.argv[1])' "$1" && { echo "$id"; return; }
	done
}
field() {	# field ID KEY
	ctl --json status "$1" | /usr/bin/python3 -c \
		'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$2"
}
nprocs() { ctl --json status "$1" | /usr/bin/python3 -c \
	'import json,sys; print(len(json.load(sys.stdin)["processes"]))'; }
reload() {	# reload: SIGHUP, wait until memprofd logged the outcome
	local n
	n=$(grep -c "Reloaded configuration\|Failed to reload" "$MP_TMP/memprofd.log")
	kill -HUP "$DPID"
	wait_until 20 eval "[ \$(grep -c 'Reloaded configuration\|Failed to reload' \
		'$MP_TMP/memprofd.log') -gt $n ]"
}

section() {	# section NAME KEY=VALUE...: a [Profile] section's lines
	printf '[Profile]\nName=%s\n' "$1"
	shift
	printf '%s\n' "$@"
}
{
	printf '# two standing profiles\n[memprofd]\nDefaultRate=0.001\n'
	section exe-prof "Target=exe:$EXE" Rate=0.01
	section cg-prof "Target=cgroup:$CG" CallstackSize=32
	section broken Target=exe:/nonexistent/prog
} > "$CONF"
svc_start --config "$CONF"
E=$(profile_of exe-prof)
C=$(profile_of cg-prof)
check "[Profile] exe-prof started with memprofd ($E)" [ -n "$E" ]
check "[Profile] cg-prof too ($C)" [ -n "$C" ]
check "  ... with its settings: Rate=0.01" [ "$(field "$E" rate)" = 0.01 ]
check "  ... CallstackSize=32, the configuration's DefaultRate" \
	eval "[ \$(field $C callstack_size) = 32 ] && [ \$(field $C rate) = 0.001 ]"
check "  ... owned by root" [ "$(field "$E" owner_uid)" = 0 ]
check "  ... status names its section" \
	eval "ctl status $E | grep -q 'Standing: *\[Profile\] exe-prof'"
check "  ... and the manifest" eval \
	"grep -q '\"standing\": *\"exe-prof\"' '$STATE/profiles/$E/manifest.json'"
check "a section whose target does not resolve is logged, with its line" grep -q \
	"Standing profile broken ($CONF:12) not started: Executable '/nonexistent/prog' does not" \
	"$MP_TMP/memprofd.log"
"$EXE" equal 20000 64 20 > /dev/null &
W=$!
wait_until 20 eval "[ \$(nprocs $E) = 1 ]"
wait "$W"
check "a process of its target joined the standing profile" [ "$(nprocs "$E")" = 1 ]

# --- reload: exe-prof removed, cg-prof changed, new-prof added ---------------------------------
{
	section cg-prof "Target=cgroup:$CG" CallstackSize=16
	section new-prof "Target=exe:$EXE"
} > "$CONF"
reload
check "SIGHUP: the removed section's profile is discarded" \
	eval "ctl status $E | grep -q '^Profile $E: discarded'"
TRACE=$(ctl --json status "$E" | /usr/bin/python3 -c \
	'import json,sys; print(json.load(sys.stdin)["processes"][0]["trace"])')
check "  ... its trace complete (strict reader)" eval "'$MEMPROFCTL' dump '$TRACE' > /dev/null"
C2=$(profile_of cg-prof)
check "  ... the changed section's profile is a new one ($C -> $C2)" \
	eval "[ -n '$C2' ] && [ '$C2' != '$C' ]"
check "  ... with the new setting" [ "$(field "$C2" callstack_size)" = 16 ]
check "  ... and the old one discarded" eval "ctl status $C | grep -q '^Profile $C: discarded'"
N=$(profile_of new-prof)
check "  ... the added section started ($N)" [ -n "$N" ]

section bad "Target=exe:$EXE" Rate=abc >> "$CONF"
reload
check "a malformed file is refused, its line named" grep -q \
	"keeping the current one: $CONF:11: Invalid sampling rate 'abc'" "$MP_TMP/memprofd.log"
check "  ... and the profiles go on" \
	eval "[ '$(profile_of cg-prof)' = '$C2' ] && [ '$(profile_of new-prof)' = '$N' ]"
head -n 7 "$CONF" > "$CONF.new" && mv "$CONF.new" "$CONF"
reload
check "an unchanged section's profile goes on across a reload" \
	eval "[ '$(profile_of cg-prof)' = '$C2' ] && [ '$(profile_of new-prof)' = '$N' ]"

# --- memprofd restarted: they start again -----------------------------------------------------
svc_stop
svc_start --config "$CONF"
check "after a restart of memprofd, the standing profiles run again" \
	eval "[ -n '$(profile_of cg-prof)' ] && [ -n '$(profile_of new-prof)' ]"

printf '[Profile]\nName=x\nTarget=exe:%s\nFoo=1\n' "$EXE" > "$MP_TMP/bad.conf"
"$MEMPROFD" --socket "$MP_TMP/bus2" --state-dir "$MP_TMP/state2" --config "$MP_TMP/bad.conf" \
	> "$MP_TMP/bad.log" 2>&1
check "memprofd refuses a configuration with an unknown [Profile] setting (exit $?)" \
	grep -q "bad.conf:4: unknown setting 'Foo' in a \[Profile\] section" "$MP_TMP/bad.log"
printf '[Profile]\nName=x\nRate=0.1\n' > "$MP_TMP/bad.conf"
"$MEMPROFD" --socket "$MP_TMP/bus2" --state-dir "$MP_TMP/state2" --config "$MP_TMP/bad.conf" \
	> "$MP_TMP/bad.log" 2>&1
check "  ... and a [Profile] without a Target=" \
	grep -q "bad.conf:1: \[Profile\] x has no Target=" "$MP_TMP/bad.log"
exit $((FAILS > 0))
