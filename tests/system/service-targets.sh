#!/bin/bash
# Targets beyond PIDs: `memprofctl attach --exe PATH` profiles every process that runs the
# executable (three runs after the attach give three traces, each sampled and strictly
# readable), `--cgroup PATH` every process that execs in the cgroup or below it, or is moved
# there, now and later; what a stopped profile no longer takes; a process the owner may not
# profile is skipped and counted; bad targets are refused with a sentence naming them.
# (--unit under a real systemd: tests/system/service-nspawn.sh.)
. "$(dirname "$0")/lib-service.sh"
svc_start_shared targets

WL=$MP_BUILD/tests/workloads/wl_alloc
# A copy of the executable of its own: --exe matches by device and inode.
EXE=$SHARED/wl_exe
cp "$WL" "$EXE"
chmod 755 "$EXE"
as_nobody() { "${NOBODY[@]}" "$MEMPROFCTL" --socket "$SOCK" "$@"; }
# procs ID: "PID COMM SAMPLED_BLOCKS TRACE" per process of profile ID
procs() {
	ctl --json status "$1" | /usr/bin/python3 -c '
import json, sys
for p in json.load(sys.stdin)["processes"]:
    print(p["pid"], p["comm"], p["sampled_blocks"], p.get("trace", ""))'
}
# run_gated EXE ID: run EXE (`wl_alloc sizes 1 gate`, about 11 MiB of blocks of 16 B to 1 MiB),
# let it allocate once profile ID has it (however slowly memprofd probes it: an emulated
# kernel), and wait for it.
run_gated() {
	local exe=$1 id=$2 fifo pid
	fifo=$(mktemp -u "$MP_TMP/gate.XXXXXX")
	mkfifo "$fifo"
	"$exe" sizes 1 gate < "$fifo" > /dev/null &
	pid=$!
	exec 3> "$fifo"
	wait_until 60 eval "procs $id | grep -q '^$pid '"
	echo go >&3
	exec 3>&-
	wait "$pid"
	rm -f "$fifo"
}
target_field() {	# target_field ID FIELD: the first target's FIELD
	ctl --json status "$1" | /usr/bin/python3 -c \
		'import json,sys; print(json.load(sys.stdin)["targets"][0][sys.argv[1]])' "$2"
}

# --- bad targets: each refused, naming it ----------------------------------------------------
refused() {	# refused NAME EXPECTED-TEXT ATTACH-ARGS...
	local name=$1 want=$2
	shift 2
	ctl attach "$@" > /dev/null 2> "$MP_TMP/err"
	check "$name (exit 1)" [ $? = 1 ]
	check "  ... says: $want" grep -qF "$want" "$MP_TMP/err" ||
		cat "$MP_TMP/err"
}
refused "--exe of a file that does not exist" "Executable '/nonexistent/prog' does not exist" \
	--exe /nonexistent/prog
refused "--exe of a file that is not executable" "is not an executable file" --exe /etc/passwd
refused "--cgroup outside any cgroup hierarchy" "'/tmp' is not a cgroup" --cgroup /tmp
refused "--cgroup that does not exist" "No cgroup" \
	--cgroup "$(awk '$3 == "cgroup2" {print $2; exit}' /proc/mounts)/memprofd-no-such-group"
refused "--cgroup with '..'" "Invalid cgroup path" --cgroup /sys/fs/cgroup/../etc
if [ -d /sys/fs/cgroup/systemd ] && [ -d /sys/fs/cgroup/unified ]; then
	mkdir -p "/sys/fs/cgroup/systemd/memprofd-v1only-$$"
	refused "--cgroup of the v1 hierarchy without a v2 counterpart" \
		"is in the v1 hierarchy mounted at /sys/fs/cgroup/systemd" \
		--cgroup "/sys/fs/cgroup/systemd/memprofd-v1only-$$"
	rmdir "/sys/fs/cgroup/systemd/memprofd-v1only-$$"
fi
if [ ! -S /run/systemd/private ] && [ ! -S /run/dbus/system_bus_socket ]; then
	refused "--unit without a service manager" "Cannot ask systemd about unit cron.service" \
		--unit cron
fi
refused "--unit of a unit type without processes" "Invalid unit name 'timers.target'" \
	--unit timers.target
ctl attach > /dev/null 2> "$MP_TMP/err"
check "attach with neither PID nor target (exit 2)" [ $? = 2 ]
check "--exe is not an option of record" eval \
	"! ctl record --exe /bin/true -- /bin/true > /dev/null 2>&1"

# --- --exe: three runs after the attach, three traces -----------------------------------------
ID=$(ctl attach -r 0.01 --exe "$EXE" | attach_id)
check "attach --exe without a PID" [ -n "$ID" ]
check "  ... status names the target" eval "ctl status $ID | grep -q 'Target: *exe:$EXE'"
ctl attach --exe "$EXE" > /dev/null 2> "$MP_TMP/err"
check "a second profile of the same executable is refused" \
	grep -q "exe:$EXE is a target of another profile already" "$MP_TMP/err"
for i in 1 2 3; do
	run_gated "$EXE" "$ID"
done
wait_until 10 eval '[ "$(target_field "$ID" joined)" = 3 ]'
check "three runs joined the profile ($(target_field "$ID" joined))" \
	[ "$(target_field "$ID" joined)" = 3 ]
procs "$ID" > "$MP_TMP/exe.procs"
check "  ... three processes, each sampled" \
	eval "[ \$(awk '\$3 > 500' '$MP_TMP/exe.procs' | wc -l) = 3 ]" || cat "$MP_TMP/exe.procs"
"$WL" equal 2000 64 > /dev/null
check "  ... another executable (the same program, another file) is not taken" \
	[ "$(procs "$ID" | wc -l)" = 3 ]
check "  ... the profile goes on after its processes exited" \
	eval "ctl status $ID | grep -q '^Profile $ID: sampling'"
ctl stop "$ID" > /dev/null
"$EXE" equal 2000 64 > /dev/null
check "a stopped profile takes no new process" [ "$(procs "$ID" | wc -l)" = 3 ]
ctl discard "$ID" > /dev/null
n=0
while read -r pid comm blocks trace; do
	read -r a c < <(trace_counts "$trace")
	[ "$a" = "$blocks" ] && [ "$c" -gt 0 ] && [ "$c" -lt "$a" ] && n=$((n + 1))
done < "$MP_TMP/exe.procs"
check "  ... its three traces hold their samples, frees and leaks (strict reader)" [ "$n" = 3 ]

# --- --cgroup: exec in a sub-cgroup, a running process moved in -----------------------------
V2=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/mounts)
if [ -z "$V2" ]; then
	echo "SKIP: no cgroup v2 hierarchy mounted"
else
	CG=$V2/memprofd-test-$$
	mkdir -p "$CG/sub"
	trap 'svc_cleanup; rm -rf "$SHARED"; rmdir "$CG/sub" "$CG" 2> /dev/null' EXIT
	P0=$(phases_start -- 200 1000)
	echo "$P0" > "$CG/cgroup.procs"
	ID=$(ctl attach -r 0.01 --cgroup "$CG" | attach_id)
	check "attach --cgroup: the process in the cgroup joins at once" \
		eval "procs $ID | grep -q '^$P0 svc_phases'"
	sh -c "echo \$\$ > '$CG/sub/cgroup.procs'; exec '$WL' equal 20000 64 200" > /dev/null
	wait_until 10 eval "procs $ID | grep -q ' wl_alloc '"
	check "a process that execs in a sub-cgroup joins, sampled" \
		eval "procs $ID | awk '\$2 == \"wl_alloc\" && \$3 > 500' | grep -q ."
	P1=$(phases_start -- 200 1000)
	echo "$P1" > "$CG/sub/cgroup.procs"
	wait_until 10 eval "procs $ID | grep -q '^$P1 '"
	check "a running process moved into the cgroup joins" eval "procs $ID | grep -q '^$P1 '"
	phases_do "$P1" USR1 allocated
	wait_until 10 eval "[ \$(procs $ID | awk '\$1 == $P1 {print \$3}') -gt 50 ]"
	check "  ... and is sampled" eval "[ \$(procs $ID | awk '\$1 == $P1 {print \$3}') -gt 50 ]"
	P2=$(phases_start -- 200 1000)
	check "a process outside the cgroup is not taken" eval "! procs $ID | grep -q '^$P2 '"
	# Another user's profile of the same cgroup's processes: root's are skipped, counted.
	ctl stop "$ID" > /dev/null && ctl discard "$ID" > /dev/null
	NID=$(as_nobody attach --cgroup "$CG" | attach_id)
	check "uid 65534 may attach --cgroup" [ -n "$NID" ]
	check "  ... root's processes in it are skipped and counted ($(target_field "$NID" skipped))" \
		eval "[ \$(target_field $NID skipped) -ge 2 ]"
	check "  ... and never profiled" eval "[ \$(procs $NID | wc -l) = 0 ]"
	N3=$(phases_start "${NOBODY[@]}" -- 200 1000)
	echo "$N3" > "$CG/cgroup.procs"
	wait_until 10 eval "procs $NID | grep -q '^$N3 '"
	check "  ... its own process moved in joins" eval "procs $NID | grep -q '^$N3 '"
	ctl stop "$NID" > /dev/null && ctl discard "$NID" > /dev/null
	for p in $(cat "$CG/sub/cgroup.procs" "$CG/cgroup.procs"); do
		echo "$p" > "$V2/cgroup.procs"
	done
fi

check "memprofd is still running" kill -0 "$DPID"
exit $((FAILS > 0))
