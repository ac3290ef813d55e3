#!/bin/bash
# ptrace's rule at exec: a user profiling their own process does not follow it into a set-id
# program (it used to: the user's trace held the privileged program's allocations and
# stacks). The process is detached at the exec, its trace completed, the reason in status, the
# manifest and the log. Root's profiles go on across the same exec.
. "$(dirname "$0")/lib-service.sh"
svc_start_shared setuid
# A set-uid-root copy of the workload, where nobody may run it (not on a nosuid mount).
SUID=$SHARED/suid_phases
cp "$PHASES" "$SUID"
chown 0:0 "$SUID"
chmod 4755 "$SUID"
if findmnt -no OPTIONS -T "$SUID" | grep -qw nosuid; then echo "$SHARED is nosuid"; exit 77; fi

# shell_start [PREFIX...]: a shell (as PREFIX runs it) that waits on a FIFO, then execs $SUID;
# prints its pid.
shell_start() {
	local fifo out
	fifo=$(mktemp -u "$SHARED/go.XXXXXX")
	mkfifo -m 666 "$fifo"
	out=$(mktemp "$MP_TMP/shell.XXXXXX")
	chmod 666 "$out"
	"$@" /bin/bash -c 'echo "shell $$"; read -r _ < "$1"; exec "$2" 100 1000' sh "$fifo" \
		"$SUID" > "$out" 2>&1 &
	echo $! >> "$MP_TMP/workload.pids"
	wait_until 10 grep -q '^shell' "$out"
	pid=$(awk '/^shell/ {print $2}' "$out")
	ln -sf "$fifo" "$MP_TMP/fifo.$pid"
	ln -sf "$out" "$MP_TMP/phases.$pid"
	echo "$pid"
}
# exec_and_allocate PID: let the shell exec the set-uid workload and make it allocate
exec_and_allocate() {
	echo go > "$MP_TMP/fifo.$1"
	wait_until 10 grep -q '^ready' "$MP_TMP/phases.$1" || { cat "$MP_TMP/phases.$1"; return 1; }
	phases_do "$1" USR1 allocated
}
# allocs_of_1000 TRACE: the trace's allocations of the workload's 1000-byte blocks (125 words)
allocs_of_1000() {
	"$MEMPROFCTL" dump "$1" | awk '$2 == "alloc" && / len=125 / {n++} END {print n + 0}'
}

S=$(shell_start "${NOBODY[@]}")
ID=$("${NOBODY[@]}" "$MEMPROFCTL" --socket "$SOCK" attach -r 1 "$S" | attach_id)
check "uid 65534 profiles its own shell" [ -n "$ID" ]
exec_and_allocate "$S"
check "the shell exec'd the set-uid program, which allocated" \
	grep -q '^allocated 100' "$MP_TMP/phases.$S"
check "memprofd answers list within 1 s" timeout 1 "$MEMPROFCTL" --socket "$SOCK" list
check "status says why the process is no longer profiled" \
	eval "ctl status $ID | grep -q 'exec.d a program with more privileges'"
check "  ... so does the manifest" \
	grep -q 'more privileges' "$STATE/profiles/$ID/manifest.json"
check "  ... and the log" grep -q "No longer profiling process $S for uid 65534" \
	"$MP_TMP/memprofd.log"
check "the profile ended with its only process" \
	wait_until 10 eval "ctl status $ID | grep -q '^Profile $ID: stopped'"
ctl stop "$ID" > /dev/null 2>&1; ctl discard "$ID" > /dev/null	# (stopped already)
TRACE=$(ls "$STATE/profiles/$ID/"*.ctf)
check "the trace is complete and readable" eval "\"$MEMPROFCTL\" dump \"$TRACE\" > /dev/null"
N=$(allocs_of_1000 "$TRACE")
check "the trace holds none of the set-uid program's allocations ($N)" [ "$N" = 0 ]
kill -TERM "$S"

# Root's profile of the same: goes on across the exec.
S=$(shell_start "${NOBODY[@]}")
ID=$(ctl attach -r 1 "$S" | attach_id)
exec_and_allocate "$S"
wait_until 10 eval '[ "$(proc_field "$ID" sampled_blocks)" -ge 100 ]'
ctl stop "$ID" > /dev/null; ctl discard "$ID" > /dev/null
TRACE=$(ls "$STATE/profiles/$ID/"*.ctf)
N=$(allocs_of_1000 "$TRACE")
check "root's profile of the same holds the set-uid program's 100 allocations ($N)" \
	[ "$N" -ge 100 ]
check "  ... and no reason to stop" eval "! grep -q 'more privileges' $STATE/profiles/$ID/manifest.json"
kill -TERM "$S"
exit $((FAILS > 0))
