#!/bin/bash
# The cooperative fast path across processes (memprofctl record --preload): a forked child is
# profiled through the library too, in its own trace (its samplers are reseeded at fork; blocks
# it inherited are not its own); exec into the same preloaded image continues
# the trace in preload mode; an executable that cannot take LD_PRELOAD (static) falls back to
# uprobes and says so; a uprobe-mode recording running at the same time is unaffected.
. "$(dirname "$0")/record.lib"
LIB=$MP_BUILD/lib/libmemprof-preload.so
[ -f "$LIB" ] || { echo "FAIL: missing $LIB (make all)"; exit 1; }

mode_is() {	# name trace mode
	ok "$1: profiled in $3 mode" grep -q " mode=$3;" <(context_of "$2")
}

# fork: the child waits until its trace exists (its probes are attached by then).
WL_WAIT_TRACE=$T/fork.ctf record fork --preload -r 1e-4 --seed 3 -o "$T/fork.ctf" -- \
	"$WL/wl_alloc" fork
ok "fork: exit status 0" [ "$rc" -eq 0 ]
child=$(sed -n 's/^CHILD //p' "$T/fork.out")
ok "fork: child trace $T/fork.ctf.$child exists" [ -n "$child" -a -f "$T/fork.ctf.$child" ]
mode_is "fork: parent" "$T/fork.ctf" preload
mode_is "fork: child" "$T/fork.ctf.$child" preload
"$CHECK" sites "$T/fork.ctf" "$T/fork.out" wl_site_parent
"$CHECK" sites "$T/fork.ctf.$child" "$T/fork.out" wl_site_child
ok "fork: the parent's trace has no child allocation" \
	bash -c "! '$CHECK' info '$T/fork.ctf' | grep -q '^site wl_site_child'"
ok "fork: the child's trace has no parent allocation" \
	bash -c "! '$CHECK' info '$T/fork.ctf.$child' | grep -q '^site wl_site_parent'"
ok "fork: no unmatched free counted (inherited blocks are not losses)" \
	grep -q "unmatched_frees=0 " <(context_of "$T/fork.ctf.$child")

# --no-follow-forks: the child is never probed, yet it inherited the parent's armed library and
# its probe sites, which Linux 6.18 rewrote into calls to a trampoline the child does not have.
# The library's fork handler restores the nops; the child must run to completion unharmed.
record nofollow --preload --no-follow-forks -r 1e-2 --seed 3 -o "$T/nofollow.ctf" -- \
	"$WL/wl_alloc" fork
ok "no-follow-forks: exit status 0 (the unprobed child did not crash)" [ "$rc" -eq 0 ]
ok "no-follow-forks: no child trace" bash -c "! ls '$T'/nofollow.ctf.* 2>/dev/null | grep -q ."
"$CHECK" sites "$T/nofollow.ctf" "$T/nofollow.out" wl_site_parent

# exec: blocks of the old image are collected at exec; the new image (LD_PRELOAD inherited)
# goes on in the same trace, through the library again.
WL_SETTLE_MS=1000 record exec --preload -r 1e-4 --seed 3 -o "$T/exec.ctf" -- "$WL/wl_alloc" exec
ok "exec: exit status 0" [ "$rc" -eq 0 ]
mode_is "exec" "$T/exec.ctf" preload
"$CHECK" sites "$T/exec.ctf" "$T/exec.out"
ok "exec: the context counts the exec collects" \
	grep -Eq "exec_collects=[1-9]" <(context_of "$T/exec.ctf")
ok "exec: still sampled by the library after exec" \
	grep -q "sampled in-process by libmemprof-preload" "$T/exec.err"
ok "exec: no allocator uprobe fired" grep -q " 0 allocator calls probed" "$T/exec.err"

# --json: the summary names the mode
"$CTL" --json record --preload -r 1e-3 -o "$T/json.ctf" -- "$WL/wl_alloc" sites \
	>"$T/json.out" 2>"$T/json.err"
ok "--json: exit status 0" [ $? -eq 0 ]
ok "--json: mode preload" grep -q '"mode":"preload"' "$T/json.err"

# A preload recording and a uprobe recording at the same time: each in its own mode, both right.
record both-fast --preload -r 1e-3 --seed 3 -o "$T/both-fast.ctf" -- \
	"$WL/wl_alloc" threads 2 40000 300 &
fastpid=$!
record both-uprobe -r 1e-3 --seed 3 -o "$T/both-uprobe.ctf" -- "$WL/wl_alloc" threads 2 40000 300
ok "uprobe recording alongside: exit status 0" [ "$rc" -eq 0 ]
wait $fastpid
mode_is "alongside: preload recording" "$T/both-fast.ctf" preload
mode_is "alongside: uprobe recording" "$T/both-uprobe.ctf" uprobe
"$CHECK" sites "$T/both-fast.ctf" "$T/both-fast.out"
"$CHECK" sites "$T/both-uprobe.ctf" "$T/both-uprobe.out"
ok "alongside: the uprobe recording probed allocator calls" \
	grep -Eq " [1-9][0-9]* allocator calls probed" "$T/both-uprobe.err"

# A child that ends with _exit() runs no destructor: the library reports its queued samples
# in _exit itself. 10 blocks at rate 1 stay below a deferred batch (16), so without that none
# would reach the trace.
record exitq --preload -r 1 -o "$T/exitq.ctf" -- "$MP_BUILD/tests/workloads/follow_wl" fork 10 1000
ok "_exit: exit status 0" [ "$rc" -eq 0 ]
child=$(sed -n 's/^CHILD //p' "$T/exitq.out")
n=$("$CHECK" info "$T/exitq.ctf.$child" 2>/dev/null |
	sed -n 's/^site fw_site_child allocs=\([0-9]*\).*/\1/p')
ok "_exit: the child's 10 queued samples are in its trace (${n:-none})" [ "${n:-0}" = 10 ]

# Killed with samples queued (no destructor, no _exit): record holds it at its exit and takes
# the library's queue from its memory.
record killq --preload -r 1 -o "$T/killq.ctf" -- "$MP_BUILD/tests/workloads/follow_wl" kill 10 1000
ok "SIGKILL: exit status 137" [ "$rc" -eq 137 ]
n=$("$CHECK" info "$T/killq.ctf" 2>/dev/null |
	sed -n 's/^site fw_site_alloc allocs=\([0-9]*\).*/\1/p')
ok "SIGKILL: the 10 queued samples are in the trace (${n:-none})" [ "${n:-0}" = 10 ]
ok "SIGKILL: the summary counts none undelivered" eval "! grep -q 'never reached' '$T/killq.err'"

# A static executable ignores LD_PRELOAD: uprobes instead, and record says so.
if [ -x "$WL/wl_alloc_static" ]; then
	record static --preload -r 1e-3 -o "$T/static.ctf" -- "$WL/wl_alloc_static" sites
	ok "static: exit status 0" [ "$rc" -eq 0 ]
	ok "static: record says it fell back to uprobes" grep -q "did not load" "$T/static.err"
	mode_is "static" "$T/static.ctf" uprobe
	"$CHECK" sites "$T/static.ctf" "$T/static.out" wl_site_small wl_site_leak wl_site_realloc
fi

"$CHECK" strict "$T"/*.ctf "$T"/fork.ctf.* "$T"/exitq.ctf.*
exit 0
