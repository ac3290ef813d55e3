#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# memprofctl errors that need a real memprofd (root, BPF) or another user: exactly ONE line on
# stderr naming the problem and the argument, nothing on stdout, exit 1, never a crash.
# Kernel threads and zombies are named as such (not "exited"); permission errors name the PID
# or file. tests/unit/cli-errors.sh has the cases that need neither.
. "$(dirname "$0")/../system/lib-service.sh"
# Another user must reach the socket.
svc_start_shared errors
DIR=$SHARED

expect() {	# expect NAME REGEX -- [PREFIX...] memprofctl-args...: exit 1, one line
	local name=$1 re=$2 rc lines pre=()
	shift 3
	while [ $# -gt 0 ] && [ "$1" != ctl ]; do pre+=("$1"); shift; done
	shift
	timeout 30 "${pre[@]}" "$MEMPROFCTL" --socket "$SOCK" "$@" >"$MP_TMP/out" 2>"$MP_TMP/err" \
		</dev/null
	rc=$?
	lines=$(wc -l <"$MP_TMP/err")
	if [ "$rc" -eq 1 ] && [ "$lines" -eq 1 ] && [ ! -s "$MP_TMP/out" ] &&
	   grep -Eq -- "$re" "$MP_TMP/err"; then
		pass "$name"
	else
		fail "$name: exit $rc (want 1), $lines stderr line(s): $(head -c 400 "$MP_TMP/err")"
	fi
}

# A kernel thread: kthreadd is pid 2 in the initial pid namespace.
if grep -q '^Name:.*kthreadd' /proc/2/status 2>/dev/null; then
	expect "attach a kernel thread" \
		"^memprofctl attach: Process 2 \(kthreadd\) is a kernel thread: it has no user-space allocator to probe$" \
		-- ctl attach 2
else
	echo "SKIP: attach a kernel thread (pid 2 is not kthreadd here)"
fi

# A zombie: a child nobody reaps (its parent exec'd sleep, which never waits). The child
# outlives the exec: a child that ended before it would be reaped by the subshell itself.
( /bin/sleep 0.5 & echo $! > "$MP_TMP/zombie"; exec sleep 60 ) &
echo $! >> "$MP_TMP/workload.pids"
wait_until 5 eval "[ -s '$MP_TMP/zombie' ] && grep -q '^State:.*Z' /proc/\$(cat '$MP_TMP/zombie')/status"
Z=$(cat "$MP_TMP/zombie")
expect "attach a zombie" "^memprofctl attach: Process $Z \(sleep\) is a zombie: " -- ctl attach "$Z"

# A PID no process has: past pid_max, so that no new process can take it meanwhile.
GONE=$(($(cat /proc/sys/kernel/pid_max) + 1))
expect "attach a PID that does not exist" "^memprofctl attach: Process $GONE does not exist$" \
	-- ctl attach "$GONE"

# Profiles that do not exist, or are in the wrong state.
expect "stop an unknown profile" "^memprofctl stop: No profile 4242$" -- ctl stop 4242
expect "discard an unknown profile" "^memprofctl discard: No profile 4242$" -- ctl discard 4242
expect "status of an unknown profile" "^memprofctl status: No profile 4242$" -- ctl status 4242
R=$(phases_start -- 100 1000)
ID=$(ctl attach "$R" | attach_id)
check "attach a root process" [ -n "$ID" ]
expect "discard a sampling profile" "^memprofctl discard: .*[Pp]rofile $ID.*sampling" \
	-- ctl discard "$ID"
expect "attach a process another profile samples" "^memprofctl attach: .*$R" -- ctl attach "$R"

# Another user.
expect "uid 65534 attaches a root process" \
	"^memprofctl attach: Permission denied: process $R runs as uid 0" \
	-- "${NOBODY[@]}" ctl attach "$R"
expect "uid 65534 stops root's profile" "^memprofctl stop: .*profile $ID belongs to uid 0" \
	-- "${NOBODY[@]}" ctl stop "$ID"
N=$(phases_start "${NOBODY[@]}" -- 100 1000)
mkdir -m 700 "$DIR/root-only"
expect "uid 65534 writes its trace where it may not" \
	"^memprofctl attach: Failed to open '$DIR/root-only/x.ctf': Permission denied$" \
	-- "${NOBODY[@]}" ctl attach -o "$DIR/root-only/x.ctf" "$N"
cp "$MP_SRC/tests/fixtures/memtrace/upstream-v2.ctf" "$DIR/root-only.ctf"
chmod 600 "$DIR/root-only.ctf"
expect "uid 65534 dumps a trace it may not read" \
	"^memprofctl dump: Failed to open trace '$DIR/root-only.ctf': Permission denied$" \
	-- "${NOBODY[@]}" ctl dump "$DIR/root-only.ctf"
expect "uid 65534 reports a trace it may not read" \
	"^memprofctl report: Failed to read '$DIR/root-only.ctf': Permission denied$" \
	-- "${NOBODY[@]}" ctl report "$DIR/root-only.ctf"

check "memprofd still answers" eval "ctl status > /dev/null"
[ "$FAILS" -eq 0 ]
