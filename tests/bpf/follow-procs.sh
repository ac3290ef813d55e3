#!/bin/bash
# memprofctl record follows the process tree exactly (ptrace): a child that allocates right
# after fork, a fork made by a second thread, a shell pipeline, an exec chain and a posix_spawn
# (CLONE_VFORK) child: each process' trace holds every one of its allocations (-r 1: every block
# is sampled). With --no-follow-forks a child is let go untraced.
. "$(dirname "$0")/follow.lib"

# fork: 100 blocks of 100 KiB right after fork
record fork -r 1 -o "$T/fork.ctf" -- "$FW" fork 100 102400
child=$(sed -n 's/^CHILD //p' "$T/fork.out")
expect "fork: exit status" 0 "$rc"
ok "fork: child trace exists" [ -n "$child" -a -f "$T/fork.ctf.$child" ]
expect "fork: child's immediate allocations" 100 "$(allocs child "$T/fork.ctf.$child")"
expect "fork: none in the parent's trace" 0 "$(allocs child "$T/fork.ctf")"

# the same at a rate where most blocks of 100 KiB are sampled (λ = 1e-2: 1 - (1-λ)^12801 ≈ 1)
record fork2 -r 1e-2 -o "$T/fork2.ctf" -- "$FW" fork 100 102400
child=$(sed -n 's/^CHILD //p' "$T/fork2.out")
expect "fork at rate 1e-2: child's allocations" 100 "$(allocs child "$T/fork2.ctf.$child")"

# a fork from a thread other than the main one (ptrace options are per task)
record tfork -r 1 -o "$T/tfork.ctf" -- "$FW" thread-fork 40 1000
child=$(sed -n 's/^CHILD //p' "$T/tfork.out")
expect "thread fork: exit status" 0 "$rc"
expect "thread fork: child's allocations" 40 "$(allocs child "$T/tfork.ctf.$child")"

# a pipeline: one trace per process (sh and the two commands), complete counts
record pipe -r 1 -o "$T/pipe.ctf" -- sh -c "'$FW' alloc 100 1000 | '$FW' alloc 50 2000"
expect "pipeline: exit status" 0 "$rc"
expect "pipeline: one trace per process" 3 "$(ls "$T"/pipe.ctf* | wc -l)"
counts=$(for f in "$T"/pipe.ctf.*; do allocs alloc "$f"; done | sort -n | tr '\n' ' ')
expect "pipeline: both commands' allocations" "50 100 " "$counts"
expect "pipeline: none in sh's trace" 0 "$(allocs alloc "$T/pipe.ctf")"

# a shell's children exec at once: their traces start over at the exec, named after the
# image they run (rate 1e-6: no sample before the exec, which would keep the fork's header)
record names -r 1e-6 -o "$T/names.ctf" -- sh -c "'$FW' alloc 10 1000; '$FW' alloc 10 1000"
expect "shell children: exit status" 0 "$rc"
exes=$(for f in "$T"/names.ctf.*; do "$CHECK" info "$f" | sed -n 's/^exe //p'; done | sort -u)
expect "shell children: their traces name the exec'd image" "$FW" "$exes"
ok "shell children: strict reads" "$CHECK" strict "$T"/names.ctf.*

# an exec chain: the new image is profiled from its first allocation, in the same trace
record exec -r 1 -o "$T/exec.ctf" -- sh -c "exec '$FW' alloc 77 1000"
expect "exec chain: exit status" 0 "$rc"
expect "exec chain: one trace" 1 "$(ls "$T"/exec.ctf* | wc -l)"
expect "exec chain: the new image's allocations" 77 "$(allocs alloc "$T/exec.ctf")"

# posix_spawn (clone with CLONE_VFORK, then exec)
record spawn -r 1 -o "$T/spawn.ctf" -- "$FW" spawn 60 1000
child=$(sed -n 's/^CHILD //p' "$T/spawn.out")
expect "posix_spawn: exit status" 0 "$rc"
expect "posix_spawn: child's allocations" 60 "$(allocs alloc "$T/spawn.ctf.$child")"

# --no-follow-forks: the child is not followed but runs normally
record nofollow --no-follow-forks -r 1 -o "$T/nofollow.ctf" -- "$FW" fork 10 1000
child=$(sed -n 's/^CHILD //p' "$T/nofollow.out")
expect "--no-follow-forks: exit status (the child's)" 0 "$rc"
ok "--no-follow-forks: no child trace" [ -n "$child" -a ! -e "$T/nofollow.ctf.$child" ]

# a process still running when CMD exits is let go, not left stopped or traced
record bg -r 1e-3 -o "$T/bg.ctf" -- sh -c "sleep 120 & echo \$! > '$T/bg.pid'"
expect "background child: exit status" 0 "$rc"
bg=$(cat "$T/bg.pid")
ok "background child survives, untraced and not stopped" \
	bash -c "grep -q '^TracerPid:[[:space:]]*0$' /proc/$bg/status && \
		 ! grep -q '^State:[[:space:]]*[tT]' /proc/$bg/status"
kill "$bg" 2>/dev/null

"$CHECK" strict "$T"/*.ctf*
exit 0
