#!/bin/bash
# `memprofctl record` through memprofd (private socket): the daemon samples, memprofctl keeps
# CMD under ptrace and has every fork/exec synced (Profile1.AddProcess) before it runs. The same
# accuracy as in-process (estimates per site within 4 SE, frees matched, leaks live; trace_check
# as in tests/bpf/record-stats.sh), the profile listed while CMD runs, a fork child's complete
# trace in OUT.<pid> (as tests/bpf/follow-procs.sh), fallback to in-process with the daemon
# stopped, --daemon without a daemon fails clearly, --no-daemon stays in-process.
. "$(dirname "$0")/lib-service.sh"
svc_require
CHECK=$MP_BUILD/tests/bpf/trace_check
WL=$MP_BUILD/tests/workloads
for f in "$CHECK" "$WL/wl_alloc" "$WL/follow_wl"; do
	[ -x "$f" ] || { echo "FAIL: missing $f (make all test-bins)"; exit 1; }
done
svc_start
T=$MP_TMP

rec() {	# rec NAME [record options] -- CMD...: $rc, $T/NAME.out, $T/NAME.err
	local name=$1; shift
	timeout -k 5 120 "$MEMPROFCTL" --socket "$SOCK" record "$@" >"$T/$name.out" 2>"$T/$name.err"
	rc=$?
	sed "s/^/    [$name] /" "$T/$name.err"
}
via_daemon() { grep -q '(memprofd profile [0-9]*)' "$T/$1.err"; }
allocs() {	# allocs SITE TRACE: blocks of fw_site_SITE in TRACE
	local n
	n=$("$CHECK" info "$2" | sed -n "s/^site fw_site_$1 allocs=\([0-9]*\).*/\1/p")
	echo "${n:-0}"
}
sites() {	# sites NAME: trace_check's per-site verdicts as PASS/FAIL lines
	local out
	out=$("$CHECK" sites "$T/$1.ctf" "$T/$1.out")
	echo "$out" | sed "s/^\(PASS\|FAIL\): /\1: $1: /"
}

# --- accuracy: the same checks as in-process recording
rec sites2 -r 1e-2 -o "$T/sites2.ctf" -- "$WL/wl_alloc" sites 1
check "sites at 1e-2: exit status 0" [ "$rc" = 0 ]
check "sites at 1e-2: recorded through memprofd" via_daemon sites2
check "the summary names memprofd's kernel mechanisms" \
	grep -q "^memprofctl record: kernel mechanisms: .*exit: tp_btf/sched_process_exit(.*) (memprofd's)$" \
	"$T/sites2.err"
sites sites2
check "sites at 1e-2: no ring-buffer drop" \
	eval "'$CHECK' info '$T/sites2.ctf' | grep -q 'ringbuf=0 '"
rec sites4 -r 1e-4 -o "$T/sites4.ctf" -- "$WL/wl_alloc" sites 2
check "sites at 1e-4: exit status 0" [ "$rc" = 0 ]
sites sites4
rec threads -r 1e-3 -o "$T/threads.ctf" -- "$WL/wl_alloc" threads 4 20000 500
check "threads: exit status 0" [ "$rc" = 0 ]
sites threads
# requested bytes through the daemon (its bus carries the estimates; the SE is bounded from them)
# and in its manifest
for r in 1e-2 1e-4; do
	timeout -k 5 120 "$MEMPROFCTL" --socket "$SOCK" --json record -r $r -o "$T/bytes$r.ctf" \
		-- "$WL/wl_alloc" sizes 2 >"$T/bytes$r.out" 2>"$T/bytes$r.err"
	check "sizes at $r through memprofd: exit status 0" [ $? = 0 ]
	check "sizes at $r: recorded through memprofd" grep -q '"daemon_profile"' "$T/bytes$r.err"
	/usr/bin/python3 "$MP_SRC/tests/bpf/bytes_check.py" $r "$T/bytes$r.out" "$T/bytes$r.err" ||
		echo "FAIL: sizes at $r: bytes_check.py"
	# the daemon's manifest of that profile: its own estimates, with exact standard errors
	id=$(sed -n 's/.*"daemon_profile":\([0-9]*\).*/\1/p' "$T/bytes$r.err")
	/usr/bin/python3 "$MP_SRC/tests/bpf/bytes_check.py" $r "$T/bytes$r.out" \
		"$STATE/profiles/$id/manifest.json" || echo "FAIL: sizes at $r: manifest of profile $id"
done
check "traces written to the caller's files only (none under the state directory)" \
	eval "[ -z \"\$(find '$STATE/profiles' -name '*.ctf*')\" ]"

# status --json of a running process, attached to before it allocates (the SE bounded)
mkfifo "$T/gate"
"$WL/wl_alloc" sizes 2 gate <"$T/gate" >"$T/gated.out" &
GATED=$!
exec 9>"$T/gate"
wait_until 10 grep -q '^ready' "$T/gated.out"
GID=$(ctl attach -r 1e-2 "$GATED" | attach_id)
echo go >&9
wait_until 60 eval "[ \$(grep -c '^BYTES' '$T/gated.out') = 2 ]"
# the daemon has read every event once two reads 200 ms apart agree
prev=-1
for ((k = 0; k < 50; k++)); do
	n=$(proc_field "$GID" samples)
	[ "$n" = "$prev" ] && break
	prev=$n
	sleep 0.2
done
ctl --json status "$GID" >"$T/gated.json"
/usr/bin/python3 "$MP_SRC/tests/bpf/bytes_check.py" 1e-2 "$T/gated.out" "$T/gated.json" ||
	echo "FAIL: status: bytes_check.py"
exec 9>&-
wait "$GATED"
ctl discard "$GID" >/dev/null

# --- record says which daemon it used, and its summary counts only CMD's processes, even while
# another profile of the same daemon samples a busy process.
FOREIGN=$(phases_start -- 20000 1000)
FID=$(ctl attach -r 1 "$FOREIGN" | attach_id)
rec busy -r 1 -o "$T/busy.ctf" -- sh -c "kill -USR1 $FOREIGN; sleep 1; exec '$WL/follow_wl' alloc 77 1000"
check "record names the daemon it records through" \
	grep -q "^memprofctl record: recording through memprofd [0-9.]* at '$SOCK'" "$T/busy.err"
blocks_sum() { sed -n 's/^memprofctl record: .* (pid [0-9]*): [0-9]* samples in \([0-9]*\) blocks.*/\1/p' "$1" |
	awk '{s += $1} END {print s + 0}'; }
total=$(sed -n 's/^memprofctl record: [0-9]* process(es): [0-9]* samples in \([0-9]*\) blocks.*/\1/p' \
	"$T/busy.err")
check "summary: its total ($total blocks) is the sum of its processes' ($(blocks_sum "$T/busy.err"))" \
	eval "[ -n '$total' ] && [ '$total' = '$(blocks_sum "$T/busy.err")' ]"
check "  ... not the other profile's 20000 blocks" [ "${total:-99999}" -lt 20000 ]
# (half of its 20000 blocks at least: on a loaded host a full ring may drop some, counted)
check "  ... which sampled meanwhile" wait_until 10 eval '[ "$(proc_field "$FID" sampled_blocks)" -ge 10000 ]'
"$MEMPROFCTL" --socket "$SOCK" --json record -r 1 -o "$T/busyj.ctf" -- \
	sh -c "kill -USR2 $FOREIGN; sleep 0.5; kill -USR1 $FOREIGN; sleep 1; exec '$WL/follow_wl' alloc 77 1000" \
	2> "$T/busyj.err" > /dev/null
check "--json summary: sampled_blocks is its processes' blocks" /usr/bin/python3 -c '
import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
assert d["sampled_blocks"] == sum(p["sampled_blocks"] for p in d["processes"]) < 20000, d' "$T/busyj.err"
ctl stop "$FID" > /dev/null && ctl discard "$FID" > /dev/null

# --- listed while running; exit status is CMD's
timeout -k 5 60 "$MEMPROFCTL" --socket "$SOCK" record -r 1e-3 -o "$T/running.ctf" -- \
	sh -c 'sleep 2; exit 7' 2> "$T/running.err" &
RPID=$!
check "the profile is listed (sampling) while CMD runs" \
	wait_until 10 eval "ctl list | grep -Eq '^[0-9]+ +sampling '"
wait "$RPID"
rc=$?
check "exit status is CMD's (7)" [ "$rc" = 7 ]
check "after CMD exited the profile is discarded" \
	eval "! ctl list | grep -Eq '^[0-9]+ +(sampling|stopped) '"

# --- fork: the child's own, complete trace, in OUT.<pid>
rec fork -r 1 -o "$T/fork.ctf" -- "$WL/follow_wl" fork 100 102400
child=$(sed -n 's/^CHILD //p' "$T/fork.out")
check "fork: exit status 0" [ "$rc" = 0 ]
check "fork: recorded through memprofd" via_daemon fork
check "fork: child trace OUT.$child exists" [ -n "$child" -a -f "$T/fork.ctf.$child" ]
check "fork: all 100 of the child's immediate allocations" \
	[ "$(allocs child "$T/fork.ctf.$child")" = 100 ]
check "fork: none in the parent's trace" [ "$(allocs child "$T/fork.ctf")" = 0 ]
rec exec -r 1 -o "$T/exec.ctf" -- sh -c "exec '$WL/follow_wl' alloc 77 1000"
check "exec: the new image's allocations in the same trace" \
	[ "$(allocs alloc "$T/exec.ctf")" = 77 ]
rec nofollow --no-follow-forks -r 1 -o "$T/nofollow.ctf" -- "$WL/follow_wl" fork 10 1000
child=$(sed -n 's/^CHILD //p' "$T/nofollow.out")
check "--no-follow-forks: no child trace" [ -n "$child" -a ! -e "$T/nofollow.ctf.$child" ]
check "summary names the child's trace" grep -q "trace '$T/fork.ctf.[0-9]*'" "$T/fork.err"
"$CHECK" strict "$T"/sites2.ctf "$T"/fork.ctf* "$T"/exec.ctf | sed 's/^/    /' | tail -n 3
check "traces pass the strict reader" "$CHECK" strict "$T"/sites2.ctf "$T"/fork.ctf* "$T"/exec.ctf

# --- --no-daemon and --seed stay in-process while the daemon runs
n=$(ctl list | grep -c '^[0-9]')
rec nodaemon --no-daemon -r 1e-2 -o "$T/nodaemon.ctf" -- "$WL/wl_alloc" sites 1
check "--no-daemon: in-process" eval "[ $rc = 0 ] && ! via_daemon nodaemon"
rec seeded --seed 3 -r 1e-2 -o "$T/seeded.ctf" -- "$WL/wl_alloc" sites 1
check "--seed: in-process" eval "[ $rc = 0 ] && ! via_daemon seeded"
check "no profile added by them" [ "$(ctl list | grep -c '^[0-9]')" = "$n" ]
rec seeddaemon --daemon --seed 3 -o "$T/x.ctf" -- true
check "--daemon --seed is refused" eval "[ $rc != 0 ] && grep -q -- '--seed' '$T/seeddaemon.err'"

# --- the daemon stopped: fallback, and --daemon fails
svc_stop
rec fallback -r 1e-2 -o "$T/fallback.ctf" -- "$WL/wl_alloc" sites 1
check "no daemon: record falls back to in-process" eval "[ $rc = 0 ] && ! via_daemon fallback"
check "no daemon: no note at default verbosity" eval "! grep -qi 'memprofd' '$T/fallback.err'"
sites fallback
rec required --daemon -r 1e-2 -o "$T/required.ctf" -- "$WL/wl_alloc" sites 1
check "--daemon without a daemon fails clearly" eval "[ $rc = 1 ] && \
	grep -q \"Failed to connect to memprofd at '$SOCK'\" '$T/required.err' && \
	[ ! -e '$T/required.ctf' ]"
[ "$FAILS" = 0 ]
