#!/bin/bash
# Two processes profiled at once, each by its own `memprofctl record`: the estimates of one are
# those it gets alone. A session link filtered to another process still has the kernel hijack
# the return address of every call to its function (the kernel asks for the return half of a
# consumer whose entry did not decline it), and the nesting check of a call whose return half
# we skipped must see the uretprobe trampoline in its slot as the call still running: else
# operator new's malloc, realloc's malloc and the memalign family's inner calls count twice.
. "$(dirname "$0")/record.lib"

# The bystander: a C++ process (libc and libstdc++ probed) that allocates nothing and waits.
mkfifo "$T/hold"
"$CTL" record -r 1e-2 -o "$T/bystander.ctf" -- "$WL/wl_cxx" wait < "$T/hold" \
	> "$T/bystander.out" 2> "$T/bystander.err" &
BPID=$!
exec 3> "$T/hold"	# its stdin stays open until we close it
trap 'exec 3>&-; kill "$BPID" 2>/dev/null' EXIT
# its trace is created once its probes are attached
ok "the bystander is profiled" wait_until 20 [ -s "$T/bystander.ctf" ]

record cxx -r 1e-2 -o "$T/cxx.ctf" -- "$WL/wl_cxx"
ok "cxx beside a bystander: exit status 0" [ "$rc" -eq 0 ]
"$CHECK" sites "$T/cxx.ctf" "$T/cxx.out"
record sites -r 1e-2 -o "$T/sites.ctf" -- "$WL/wl_alloc" sites 1
ok "sites beside a bystander: exit status 0" [ "$rc" -eq 0 ]
"$CHECK" sites "$T/sites.ctf" "$T/sites.out"

exec 3>&-
wait "$BPID"
ok "the bystander ends with its stdin: exit status 0" [ $? -eq 0 ]
ok "the bystander's trace has no allocation of its own beyond start-up" \
	eval "[ \"\$('$CHECK' info '$T/bystander.ctf' | sed -n 's/^allocs //p')\" -lt 100 ]"
