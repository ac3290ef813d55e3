#!/bin/bash
# memprofctl record -p PID: a process that is running already, sampled in this process (no
# memprofd) on real uprobes. Ended by SIGINT (Ctrl-C), by --duration, or by the process' exit;
# each way the trace is complete (strict reader) and the summary's estimates of requested bytes
# are within 4 SE of the truth. Wrong uses fail with a message that names them.
. "$(dirname "$0")/record.lib"

# A gated workload: "ready", waits for a line, allocates (BYTES lines), waits for EOF.
gated_start() {	# name
	mkfifo "$T/$1.gate"
	"$WL/wl_alloc" sizes 2 gate <"$T/$1.gate" >"$T/$1.out" &
	GATED=$!
	exec 9>"$T/$1.gate"
	wait_until 10 grep -q '^ready' "$T/$1.out"
}
attached() { grep -q '^memprofctl record: sampling ' "$1"; }
bytes_done() { [ "$(grep -c '^BYTES' "$1")" = 2 ]; }

# --- Ctrl-C: the process runs on, its trace and summary are complete
gated_start int
"$CTL" --json record -r 1e-2 -p "$GATED" -o "$T/int.ctf" 2>"$T/int.err" 9>&- &
REC=$!
ok "SIGINT: attached" wait_until 30 attached "$T/int.err"
echo go >&9
ok "SIGINT: the workload allocated" wait_until 60 bytes_done "$T/int.out"
# the trace reaches its file once a second: report and dump read it while it grows
in_progress() { "$CTL" report -q --json "$1" 2>/dev/null | grep -q '"in_progress":true'; }
ok "while recording: report reads the trace, in progress" wait_until 10 in_progress "$T/int.ctf"
"$CTL" report "$T/int.ctf" 2>&1 | grep -m1 "^  int.ctf: " >"$T/int.live"
ok "  ... and says so" grep -q ", in progress (still being written" "$T/int.live"
"$CTL" dump "$T/int.ctf" 2>&1 >/dev/null | grep -m1 . >"$T/int.dump"
ok "  ... so does dump" grep -q "^memprofctl dump: '$T/int.ctf' is in progress" "$T/int.dump"
sleep 0.5	# the last events reach the engine (not a timing claim: the estimates say)
kill -INT "$REC"
wait "$REC"
ok "SIGINT: exit status 0" [ $? -eq 0 ]
ok "SIGINT: the trace is complete, not in progress" eval '! in_progress "$T/int.ctf"'
ok "SIGINT: the process was left running" kill -0 "$GATED"
exec 9>&-
wait "$GATED"
ok "SIGINT: the process' own exit status is 0" [ $? -eq 0 ]
/usr/bin/python3 "$SRC/tests/bpf/bytes_check.py" 1e-2 "$T/int.out" "$T/int.err" ||
	fail "SIGINT: bytes_check.py"
ok "SIGINT: the summary names the process" /usr/bin/python3 -c '
import json, sys
d = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])
assert [p["pid"] for p in d["processes"]] == [int(sys.argv[2])], d["processes"]' \
	"$T/int.err" "$GATED"
"$CTL" report -q "$T/int.ctf" >"$T/int.report" 2>&1
ok "SIGINT: report reads the trace" grep -q wl_site_ "$T/int.report"

# --- the process exits first: the recording ends with it
gated_start exit
"$CTL" record -r 1e-2 -p "$GATED" -o "$T/exit.ctf" 2>"$T/exit.err" 9>&- &
REC=$!
ok "exit: attached" wait_until 30 attached "$T/exit.err"
echo go >&9
exec 9>&-
wait "$GATED"
ok "exit: record ends when its process does" wait_until 60 eval '! kill -0 '"$REC"' 2>/dev/null'
wait "$REC"
ok "exit: exit status 0" [ $? -eq 0 ]
"$CHECK" sites "$T/exit.ctf" "$T/exit.out" || fail "exit: the sites' words within 4 SE"

# --- --duration: a process that never stops allocating
"$WL/wl_alloc" spin "$T/spin.pid" >/dev/null &
SPIN=$!
wait_until 10 test -s "$T/spin.pid"
"$CTL" record -r 1e-3 -p "$SPIN" -d 1s -o "$T/dur.ctf" 2>"$T/dur.err"
ok "--duration: ends by itself, exit status 0" [ $? -eq 0 ]
ok "--duration: the process runs on" kill -0 "$SPIN"
kill "$SPIN"
wait "$SPIN" 2>/dev/null
ok "--duration: the summary counts samples" grep -Eq '[1-9][0-9]* samples in [1-9]' "$T/dur.err"

"$CHECK" strict "$T/int.ctf" "$T/exit.ctf" "$T/dur.ctf"

# --- wrong uses
sleep 60 &
IDLE=$!
"$CTL" record -p 4194304 -o "$T/none.ctf" 2>"$T/none.err"
rc=$?
ok "no process with that pid: exit status 1" [ "$rc" -eq 1 ]
ok "  ... the message names the pid" grep -q "no process 4194304" "$T/none.err"
"$CTL" record -p "$IDLE" -- true 2>"$T/both.err"
rc=$?
ok "-p with CMD: exit 2, saying why" eval "[ $rc -eq 2 ] && grep -q \"does not take a command\" $T/both.err"
"$CTL" record -p "$IDLE" --preload 2>"$T/pre.err"
rc=$?
ok "-p with --preload: exit 2, saying why" eval "[ $rc -eq 2 ] && grep -q \"cannot be preloaded\" $T/pre.err"
"$CTL" record -d 1s -- true 2>"$T/dur2.err"
rc=$?
ok "--duration without -p: exit 2, saying why" eval "[ $rc -eq 2 ] && grep -q \"needs -p\" $T/dur2.err"
"$CTL" record -p "$IDLE,x" 2>"$T/bad.err"
rc=$?
ok "a malformed pid list: exit 2, naming it" eval "[ $rc -eq 2 ] && grep -q \"invalid pid .x.\" $T/bad.err"
# uid 65534: refused on root's process by the ptrace rule, naming the pid; on its own, past the
# rule, stopped by the BPF programs' privileges. Never a trace.
as_nobody() { setpriv --reuid 65534 --regid 65534 --clear-groups "$@"; }
NOBODY_OUT=/tmp/memprof-nobody-$$.ctf	# where uid 65534 could write, were it let
rm -f "$NOBODY_OUT"
setpriv --reuid 65534 --regid 65534 --clear-groups sleep 60 &	# not a function: $! is sleep
OWN=$!
for target in "$IDLE:root's process:not allowed to profile process $IDLE: " \
	"$OWN:its own process:Failed to load the BPF programs"; do
	IFS=: read -r pid what msg <<<"$target"
	as_nobody "$CTL" record -p "$pid" -o "$NOBODY_OUT" 2>"$T/nobody.err"
	rc=$?
	ok "uid 65534 on $what: exit status 1 ($rc)" [ "$rc" -eq 1 ]
	ok "  ... saying '$msg'" grep -q "^memprofctl record: $msg" "$T/nobody.err"
	ok "  ... and no trace" [ ! -e "$NOBODY_OUT" ]
done
kill "$OWN"
wait "$OWN" 2>/dev/null
kill "$IDLE"
wait "$IDLE" 2>/dev/null
exit 0
