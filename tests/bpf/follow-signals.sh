#!/bin/bash
# Under memprofctl record's ptrace, traced programs behave as without it: a SIGUSR1 handler runs,
# a child stopped with SIGSTOP is seen stopped by its parent and continues, a signal sent to
# memprofctl reaches CMD's handler, a killed child's status reaches its parent, exit statuses are
# unchanged.
. "$(dirname "$0")/follow.lib"

record sig -r 1 -o "$T/sig.ctf" -- "$FW" signals
expect "signals: exit status" 0 "$rc"
ok "signals: handler ran, stopped child seen and continued" grep -qx "signals ok" "$T/sig.out"

# A signal to memprofctl goes to CMD, whose trap handler exits 9. (SIGTERM: a background job of
# a non-interactive shell starts with SIGINT ignored.)
timeout -k 5 60 "$CTL" record -r 1e-3 -o "$T/int.ctf" -- sh -c "trap 'exit 9' TERM;
	echo \$\$ > '$T/int.pid'; while :; do sleep 0.05; done" >"$T/int.out" 2>"$T/int.err" &
ctl=$!
for _ in $(seq 1 200); do [ -s "$T/int.pid" ] && break; sleep 0.05; done
kill -TERM "$(pgrep -P $ctl -x memprofctl | head -1)"
wait $ctl
rc=$?
expect "signal forwarded to CMD's handler: exit status" 9 "$rc"

# job control from outside: SIGSTOP stops CMD (group-stop), SIGCONT resumes it. CMD waits for
# stop.go, made after the SIGSTOP, before its 0.5 s sleep: however late this script runs, CMD
# cannot exit before it is stopped, and if the stop did not hold it would exit before the check.
timeout -k 5 60 "$CTL" record -r 1e-3 -o "$T/stop.ctf" -- sh -c "echo \$\$ > '$T/stop.pid';
	while [ ! -e '$T/stop.go' ]; do sleep 0.05; done; sleep 0.5; exit 5" \
	>"$T/stop.out" 2>"$T/stop.err" &
ctl=$!
for _ in $(seq 1 200); do [ -s "$T/stop.pid" ] && break; sleep 0.05; done
pid=$(cat "$T/stop.pid")
kill -STOP "$pid"
touch "$T/stop.go"
sleep 0.8
ok "SIGSTOP from outside: CMD is still alive after its sleep" kill -0 "$pid"
ok "SIGSTOP from outside: memprofctl is still waiting" kill -0 "$ctl"
kill -CONT "$pid"
wait $ctl
rc=$?
expect "SIGCONT: CMD finishes, exit status" 5 "$rc"

# a child killed by SIGKILL: its parent sees it
record kill -r 1e-3 -o "$T/kill.ctf" -- sh -c "sleep 5 & kill -KILL \$!; wait \$!; exit \$?"
expect "killed child: status seen by its parent" 137 "$rc"

# exit statuses
record exit -r 1e-3 -o "$T/exit.ctf" -- "$FW" exit 42
expect "exit status of CMD" 42 "$rc"
record term -r 1e-3 -o "$T/term.ctf" -- sh -c 'kill -TERM $$'
expect "CMD killed by SIGTERM" 143 "$rc"
record grand -r 1e-3 -o "$T/grand.ctf" -- sh -c "sh -c 'exit 3'; exit \$((\$? + 1))"
expect "a grandchild's status reaches its parent" 4 "$rc"

"$CHECK" strict "$T"/*.ctf*
exit 0
