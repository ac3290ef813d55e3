#!/bin/bash
# memprofctl record inside its own pid namespace (unshare --pid --fork --mount-proc): BPF must
# key processes and report pids in the profiler's namespace (bpf/memprof.bpf.c mp_current_ids()),
# else every call counts as foreign and no sample arrives. Checks samples with sane estimates,
# that the trace's pid is the namespace pid the workload sees (getpid() inside), the fork child's
# trace (tracepoint path), a SIGKILLed target's exit, and a process in a nested pid namespace.
. "$(dirname "$0")/record.lib"

if ! command -v unshare >/dev/null; then
	echo "unshare (util-linux) not installed"
	exit 77
fi
# inns NAME SCRIPT: runs bash SCRIPT in a new pid namespace, output to $T/NAME.{out,err}; sets $rc
inns() {
	local name=$1; shift
	unshare --pid --fork --mount-proc bash -c "$1" >"$T/$name.out" 2>"$T/$name.err"
	rc=$?
	sed "s/^/    [$name] /" "$T/$name.err"
}

# Samples with sane estimates per site; no call counted as foreign.
inns sites "exec '$CTL' record -r 1e-3 -o '$T/sites.ctf' -- '$WL/wl_alloc' sites"
ok "sites: exit status 0" [ "$rc" -eq 0 ]
"$CHECK" sites "$T/sites.ctf" "$T/sites.out"
ok "sites: no foreign calls" bash -c "! grep -q 'foreign_calls=' '$T/sites.err'"
ok "sites: the summary counts the sampled calls" \
	grep -Eq 'allocator calls probed, [1-9][0-9]* sampled' "$T/sites.err"

# The trace's pid is the namespace pid: the workload writes its getpid() once it has allocated,
# is SIGKILLed from inside the namespace, and its trace must be complete.
inns spin "
'$CTL' record -r 1e-3 -o '$T/spin.ctf' -- '$WL/wl_alloc' spin '$T/spin.pid' &
ctl=\$!
for _ in \$(seq 1 600); do [ -s '$T/spin.pid' ] && break; sleep 0.05; done
kill -KILL \"\$(cat '$T/spin.pid')\"
wait \$ctl"
nspid=$(cat "$T/spin.pid" 2>/dev/null)
ok "spin: SIGKILL exit status 137" [ "$rc" -eq 137 ]
ok "spin: the workload sees a small namespace pid ($nspid)" \
	bash -c "[ -n '$nspid' ] && [ '$nspid' -lt 100 ]"
ok "spin: the trace's pid is the namespace pid $nspid" \
	grep -qx "pid $nspid" <("$CHECK" info "$T/spin.ctf")
ok "spin: samples in the trace" \
	grep -Eq '^site wl_site_spin allocs=[1-9]' <("$CHECK" info "$T/spin.ctf")
ok "spin: the trace was completed at the exit" \
	grep -q "table_full=0" <("$CHECK" info "$T/spin.ctf" | sed -n 's/^context //p')

# fork: the child (sched_process_fork, read with CO-RE in the namespace) gets its own trace,
# named with its namespace pid.
inns fork "WL_WAIT_TRACE='$T/fork.ctf' exec '$CTL' record -r 1e-4 -o '$T/fork.ctf' -- \
	'$WL/wl_alloc' fork"
child=$(sed -n 's/^CHILD //p' "$T/fork.out")
ok "fork: exit status 0" [ "$rc" -eq 0 ]
ok "fork: child trace $T/fork.ctf.$child exists" [ -n "$child" -a -f "$T/fork.ctf.$child" ]
ok "fork: the child's trace is of namespace pid $child" \
	grep -qx "pid $child" <("$CHECK" info "$T/fork.ctf.$child")
"$CHECK" sites "$T/fork.ctf.$child" "$T/fork.out" wl_site_child
"$CHECK" sites "$T/fork.ctf" "$T/fork.out" wl_site_parent

# A process in a pid namespace nested in the profiler's (CMD = unshare --pid --fork ...): BPF
# names it by its pid at the profiler's level (the workload itself sees pid 1), through the
# fork child's CO-RE read and, for its probes, the fallback of mp_current_ids().
inns nested "WL_SETTLE_MS=1000 exec '$CTL' record -r 1e-4 -o '$T/nested.ctf' -- \
	unshare --pid --fork '$WL/wl_alloc' post-exec"
ok "nested: exit status 0" [ "$rc" -eq 0 ]
nested=$(cd "$T" && ls nested.ctf.* 2>/dev/null | sed -n 's/^nested\.ctf\.//p')
ok "nested: one child trace, named with a pid of the profiler's namespace ($nested)" \
	bash -c "[ -n '$nested' ] && [ '$nested' -gt 1 ] && [ '$nested' -lt 100 ]"
ok "nested: the trace's pid is $nested" \
	grep -qx "pid $nested" <("$CHECK" info "$T/nested.ctf.$nested")
"$CHECK" sites "$T/nested.ctf.$nested" "$T/nested.out" wl_site_post_exec
