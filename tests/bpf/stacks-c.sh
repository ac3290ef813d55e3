#!/bin/bash
# DWARF unwinding of a C program built with -fomit-frame-pointer -O2 -g (tests/workloads/stk_c.c):
# complete backtraces main > stk_level1 > stk_level2 > stk_site with file:line, the inlined
# helper as its own location of stk_site's frame (outermost first); --unwind=fp cannot walk it
# (the workload really has no frame pointers); --unwind=auto picks DWARF by itself;
# --callstack-size cuts DWARF stacks too and counts them; the copy never reaches the trace.
. "$(dirname "$0")/stacks.lib"

CHAIN="main|stk_level1|stk_level2|stk_site|stk_inline_alloc"

for mode in dwarf auto; do
	record "c-$mode" --unwind=$mode -r 1e-3 -- "$WL/stk_c" 2000 100
	ok "$mode: exit status 0" [ "$rc" -eq 0 ]
	check "$T/c-$mode.ctf" chain stk_inline_alloc "$CHAIN"
	ok "$mode: stacks unwound with DWARF, none cut by the window" \
		summary "c-$mode" 's["dwarf"] > 0 and s["window_cut"] == 0 and p["dwarf_stacks"] > 0'
done
check "$T/c-dwarf.ctf" inline stk_site stk_inline_alloc
check "$T/c-dwarf.ctf" fileline stk_level2 'tests/workloads/stk_c\.c$'
check "$T/c-dwarf.ctf" fileline stk_inline_alloc 'tests/workloads/stk_c\.c$'
check "$T/c-dwarf.ctf" fileline __libc_start_call_main 'libc_start_call_main\.h$'
check "$T/c-dwarf.ctf" outermost _start
ok "auto: no frame-pointer walk trusted in code without frame pointers" \
	summary c-auto 's["fp"] <= s["events"] - s["with_copy"]'
ok "context names the unwind mode and stack copy" \
	grep -q 'unwind=dwarf stack_copy=16384 ' <("$CTL" dump "$T/c-dwarf.ctf" | head -12)

# After an exec (sh -c 'exec ...'): the new image's libraries are in the snapshot from its
# first sample on, not only once a re-read is allowed (100 ms after the snapshot taken at exec).
record c-exec --unwind=auto -r 1e-3 -- sh -c "exec '$WL/stk_c' 2000 100"
ok "after exec: exit status 0" [ "$rc" -eq 0 ]
check "$T/c-exec.ctf" chain stk_inline_alloc "$CHAIN"
check "$T/c-exec.ctf" fileline __libc_start_call_main 'libc_start_call_main\.h$'
ok "after exec: no stack cut by the window" summary c-exec 's["window_cut"] == 0'
# Samples taken before an exec but read after it lose their frames (their image is gone); a
# recorder that keeps up reads them before: none here, nor in the runs without an exec.
ok "no stack of an image that is gone" summary c-dwarf 's["image_gone"] == 0'

# The negative control: frame pointers are not there to follow.
record c-fp --unwind=fp -r 1e-3 -- "$WL/stk_c" 1000 50
n=$(check "$T/c-fp.ctf" count stk_level1)
echo "    fp: $n backtraces reach stk_level1"
ok "fp: the frame-pointer walk cannot unwind it (< 10% reach stk_level1)" \
	summary c-fp "$n * 10 < p['sampled_blocks'] and s['with_copy'] == 0"

# --callstack-size bounds DWARF stacks, innermost kept, cut stacks counted in the context
record c-short --unwind=dwarf --callstack-size 2 -r 1e-3 -- "$WL/stk_c" 500 100
check "$T/c-short.ctf" chain stk_inline_alloc "stk_level2|stk_site|stk_inline_alloc"
ok "--callstack-size 2: nothing outer than stk_level2" \
	[ "$(check "$T/c-short.ctf" count stk_level1 main)" = 0 ]
ok "--callstack-size 2: cut stacks counted in the context" \
	grep -Eq 'truncated_stacks=[1-9]' <("$CTL" dump "$T/c-short.ctf" | head -12)

# A window too small for the stack: stacks cut where the copy ends, counted
record c-tiny --unwind=dwarf --stack-copy-size 16 -r 1e-3 -- "$WL/stk_c" 500 100
ok "--stack-copy-size 16: stacks cut by the window are counted" \
	summary c-tiny 's["window_cut"] > 0 and p["window_cut_stacks"] > 0'
ok "--stack-copy-size 16: window cuts in the context" \
	grep -Eq 'window_cut_stacks=[1-9]' <("$CTL" dump "$T/c-tiny.ctf" | head -12)

# The stack copy never reaches a trace: the environment strings sit at the top of the main
# thread's stack, a few KiB above these shallow frames, inside every 16 KiB copy.
ok "no stack bytes in the trace" bash -c '! grep -qF "$2" "$1"' _ "$T/c-dwarf.ctf" \
	"$(env | grep -m1 ^PATH=)"
exit 0
