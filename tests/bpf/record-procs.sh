#!/bin/bash
# memprofctl record across processes: a forked child gets its own trace (<out>.<pid>), not with
# --no-follow-forks; an exec'd image continues the same trace after the old image's blocks are
# collected; a SIGKILLed target leaves a complete trace; CMD's exit status is ours.
. "$(dirname "$0")/record.lib"

# fork: the child waits until its trace exists (its probes are attached by then).
WL_WAIT_TRACE=$T/fork.ctf record fork -r 1e-4 -o "$T/fork.ctf" -- "$WL/wl_alloc" fork
ok "fork: exit status 0" [ "$rc" -eq 0 ]
child=$(sed -n 's/^CHILD //p' "$T/fork.out")
ok "fork: child trace $T/fork.ctf.$child exists" [ -n "$child" -a -f "$T/fork.ctf.$child" ]
"$CHECK" sites "$T/fork.ctf" "$T/fork.out" wl_site_parent
"$CHECK" sites "$T/fork.ctf.$child" "$T/fork.out" wl_site_child
ok "fork: the parent's trace has no child allocation" \
	bash -c "! '$CHECK' info '$T/fork.ctf' | grep -q '^site wl_site_child'"
ok "fork: the child's trace is of pid $child" \
	grep -qx "pid $child" <("$CHECK" info "$T/fork.ctf.$child")

# --no-follow-forks: no trace for the child
WL_SETTLE_MS=0 record nofollow --no-follow-forks -r 1e-4 -o "$T/nofollow.ctf" -- "$WL/wl_alloc" fork
child=$(sed -n 's/^CHILD //p' "$T/nofollow.out")
ok "--no-follow-forks: exit status 0" [ "$rc" -eq 0 ]
ok "--no-follow-forks: no child trace" [ -n "$child" -a ! -e "$T/nofollow.ctf.$child" ]
ok "--no-follow-forks: parent traced" \
	grep -q '^site wl_site_parent' <("$CHECK" info "$T/nofollow.ctf")

# exec: blocks of the old image are collected at exec; the new image goes on in the same trace.
WL_SETTLE_MS=1000 record exec -r 1e-4 -o "$T/exec.ctf" -- "$WL/wl_alloc" exec
ok "exec: exit status 0" [ "$rc" -eq 0 ]
"$CHECK" sites "$T/exec.ctf" "$T/exec.out"
ok "exec: the context counts the exec collects" \
	grep -Eq "exec_collects=[1-9]" <(context_of "$T/exec.ctf")

# SIGKILL of the target mid-run: exit status 128 + 9, the trace is complete and strict.
"$CTL" record -r 1e-3 -o "$T/kill.ctf" -- "$WL/wl_alloc" spin "$T/kill.pid" >"$T/kill.out" \
	2>"$T/kill.err" &
ctl=$!
for _ in $(seq 1 600); do [ -s "$T/kill.pid" ] && break; sleep 0.05; done
kill -KILL "$(cat "$T/kill.pid")"
wait $ctl
rc=$?
sed 's/^/    [kill] /' "$T/kill.err"
ok "SIGKILL: exit status 137" [ "$rc" -eq 137 ]
ok "SIGKILL: samples in the trace" \
	grep -Eq '^site wl_site_spin allocs=[1-9]' <("$CHECK" info "$T/kill.ctf")
ok "SIGKILL: trace completed (drops recorded)" grep -q "table_full=0" <(context_of "$T/kill.ctf")

# A signal to memprofctl goes to CMD; we end with its status.
"$CTL" record -o "$T/term.ctf" -- sleep 30 >"$T/term.out" 2>"$T/term.err" &
ctl=$!
for _ in $(seq 1 600); do [ -s "$T/term.ctf" ] && break; sleep 0.05; done
kill -TERM $ctl
wait $ctl
rc=$?
ok "SIGTERM to memprofctl is forwarded to CMD (exit 143)" [ "$rc" -eq 143 ]

# A static executable: the allocator is in the executable itself, probed at exec.
if [ -x "$WL/wl_alloc_static" ]; then
	record static -r 1e-3 -o "$T/static.ctf" -- "$WL/wl_alloc_static" sites
	ok "static executable: exit status 0" [ "$rc" -eq 0 ]
	"$CHECK" sites "$T/static.ctf" "$T/static.out" wl_site_small wl_site_leak wl_site_realloc
fi

# exit status
record status -o "$T/status.ctf" -- sh -c 'exit 3'
ok "exit status of CMD (3)" [ "$rc" -eq 3 ]
record signal -o "$T/signal.ctf" -- sh -c 'kill -TERM $$'
ok "CMD killed by SIGTERM: 143" [ "$rc" -eq 143 ]

"$CHECK" strict "$T"/*.ctf "$T"/fork.ctf.*
exit 0
