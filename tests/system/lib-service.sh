# shellcheck shell=bash
# Helpers for the service tests (sourced): a private memprofd on $MP_TMP, memprofctl against
# it, the svc_phases workload, PASS/FAIL lines for tests/run.
set -u

MP_BUILD=${MP_BUILD:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/build}
MP_TMP=${MP_TMP:-$(mktemp -d)}
MEMPROFD=$MP_BUILD/bin/memprofd
MEMPROFCTL=$MP_BUILD/bin/memprofctl
PHASES=$MP_BUILD/tests/workloads/svc_phases
SOCK=$MP_TMP/bus
STATE=$MP_TMP/state
FAILS=0
DPID=

pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
check() {	# check NAME COMMAND... : PASS if the command succeeds
	local name=$1; shift
	if "$@"; then pass "$name"; else fail "$name"; fi
}

svc_require() {
	[ "$(id -u)" = 0 ] || { echo "needs root"; exit 77; }
	local f
	for f in "$MEMPROFD" "$MEMPROFCTL" "$PHASES"; do
		[ -x "$f" ] || { echo "FAIL: missing $f (make all test-bins)"; exit 1; }
	done
}

ctl() { "$MEMPROFCTL" --socket "$SOCK" "$@"; }

# wait_until, memprofd_up
. "$(dirname "${BASH_SOURCE[0]}")/../lib-memprofd.sh"

svc_start() {	# svc_start [memprofd options...]: start memprofd, wait until it answers
	if ! memprofd_up "$SOCK" "$STATE" "$MP_TMP/memprofd.log" --log-level debug "$@"; then
		cat "$MP_TMP/memprofd.log"
		echo "FAIL: memprofd did not come up"
		exit 1
	fi
}

# "${NOBODY[@]}" COMMAND...: run COMMAND as uid and gid 65534.
NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups)

# svc_start_shared NAME [memprofd options...]: like svc_require + svc_start, but with the socket
# and state directory in a world-traversable $SHARED=/tmp/memprofd-NAME.XXXXXX so that other
# users (via "${NOBODY[@]}") reach them; removed on exit. Skips without setpriv. The tests' raw
# D-Bus clients are copied there too ($BUSCALL, $RAW), and the build's programs when uid 65534
# cannot reach them ($MP_BUILD then names the copy): the checkout may sit in a directory only
# root can enter (a clone in `mktemp -d`).
svc_start_shared() {
	local name=$1; shift
	svc_require
	command -v setpriv > /dev/null || { echo "setpriv missing"; exit 77; }
	SHARED=$(mktemp -d "/tmp/memprofd-$name.XXXXXX")
	chmod 755 "$SHARED"
	SOCK=$SHARED/bus
	STATE=$SHARED/state
	trap 'svc_cleanup; rm -rf "$SHARED"' EXIT
	install -m 0644 "$MP_SRC/tests/system/bus_call.py" "$MP_SRC/tests/system/dbus_raw.py" \
		"$SHARED/"
	BUSCALL=$SHARED/bus_call.py
	RAW=$SHARED/dbus_raw.py
	# The same for the programs uid 65534 runs, when it cannot reach the build directory.
	if ! "${NOBODY[@]}" test -x "$MEMPROFCTL"; then
		mkdir -p "$SHARED/build/tests"
		cp -a "$MP_BUILD/bin" "$MP_BUILD/lib" "$SHARED/build/"
		cp -a "$MP_BUILD/tests/workloads" "$SHARED/build/tests/"
		MP_BUILD=$SHARED/build
		MEMPROFCTL=$MP_BUILD/bin/memprofctl
		PHASES=$MP_BUILD/tests/workloads/svc_phases
	fi
	svc_start "$@"
}

svc_stop() {	# SIGTERM memprofd and wait; returns its exit status
	local rc=0
	[ -n "$DPID" ] || return 0
	kill -TERM "$DPID" 2>/dev/null
	wait "$DPID" || rc=$?
	DPID=
	return $rc
}

# Start svc_phases [COUNT SIZE] (optionally under a prefix command, e.g. setpriv), print its
# pid once it waits for signals. Output goes to $MP_TMP/phases.<pid>.
phases_start() {	# phases_start [PREFIX...] -- [COUNT [SIZE]]
	local pre=() out
	while [ $# -gt 0 ] && [ "$1" != -- ]; do pre+=("$1"); shift; done
	[ $# -gt 0 ] && shift
	out=$(mktemp "$MP_TMP/phases.XXXXXX")
	chmod 666 "$out"
	"${pre[@]}" "$PHASES" "$@" > "$out" 2>&1 &
	# Called as $(phases_start ...): remember the pid in a file, not in a variable.
	echo $! >> "$MP_TMP/workload.pids"
	wait_until 10 grep -q '^ready' "$out" || { echo "FAIL: workload did not start"; cat "$out"; }
	# The pid in "ready PID" is the workload's even under a prefix command that forks.
	awk '/^ready/ {print $2; exit}' "$out"
	ln -sf "$out" "$MP_TMP/phases.$(awk '/^ready/ {print $2; exit}' "$out")"
}

phases_do() {	# phases_do PID SIGNAL EXPECTED-LINE-PREFIX: signal and wait for the line
	local pid=$1 sig=$2 want=$3 n
	n=$(grep -c "^$want" "$MP_TMP/phases.$pid")
	kill "-$sig" "$pid"
	wait_until 20 eval "[ \$(grep -c '^$want' '$MP_TMP/phases.$pid') -gt $n ]"
}

# Profile id from `memprofctl attach` output ("Profile N sampling ...").
attach_id() { awk '/^Profile [0-9]+ / {print $2; exit}'; }

# One field of a profile's first process from `status --json`.
proc_field() {	# proc_field ID FIELD
	ctl --json status "$1" | /usr/bin/python3 -c \
		'import json,sys; print(json.load(sys.stdin)["processes"][0][sys.argv[1]])' "$2"
}

# Count event kinds in a trace with the strict reader: prints "ALLOCS COLLECTS".
trace_counts() {
	"$MEMPROFCTL" dump "$1" | awk '$2 == "alloc" {a++} $2 == "collect" {c++}
		END {print a + 0, c + 0}'
}

# discard_checked ID PID BLOCKS [WHAT]: discard profile ID; PID's trace in the state directory
# holds BLOCKS allocs and BLOCKS frees (strict reader). Sets $TRACE.
discard_checked() {
	local id=$1 pid=$2 n=$3 what=${4:+$4 } a c
	check "discard" eval "ctl discard $id | grep -q 'Profile $id discarded'"
	TRACE=$STATE/profiles/$id/$pid-svc_phases.ctf
	check "${what}trace under the state directory" [ -s "$TRACE" ]
	read -r a c < <(trace_counts "$TRACE")
	check "${what}trace holds every sample ($a) and every free ($c) (strict reader)" \
		[ "$a" = "$n" -a "$c" = "$n" ]
}

svc_cleanup() {
	local p
	if [ -f "$MP_TMP/workload.pids" ]; then
		while read -r p; do kill -KILL "$p" 2>/dev/null; done < "$MP_TMP/workload.pids"
	fi
	if [ -n "$DPID" ]; then kill -TERM "$DPID" 2>/dev/null; wait "$DPID" 2>/dev/null; fi
	if [ "$FAILS" -gt 0 ] && [ -f "$MP_TMP/memprofd.log" ]; then
		echo "--- memprofd log"; tail -n 40 "$MP_TMP/memprofd.log"
	fi
}
trap svc_cleanup EXIT
