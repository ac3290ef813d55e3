#!/bin/bash
# Debian's /usr/bin/python3 (no frame pointers in python3 nor in libc) running a known script
# (tests/workloads/stk_script.py): with --unwind=dwarf and auto, backtraces reach main's caller
# and _start, name CPython's own functions, and give file:line for libc's frames (libc6-dbg).
# python3's main() tail-calls Py_BytesMain, so Py_BytesMain is the frame above
# __libc_start_call_main. The frame-pointer walk gets none of it. With --preload, the same
# script's allocations are estimated alike.
. "$(dirname "$0")/stacks.lib"

PY=/usr/bin/python3
SCRIPT=$SRC/tests/workloads/stk_script.py
if [ ! -x $PY ]; then
	echo "no $PY"
	exit 77
fi
if ! ls /usr/lib/debug/.build-id/*/*.debug >/dev/null 2>&1; then
	echo "no detached debug info (libc6-dbg)"
	exit 77
fi

# Bursts of large reallocs (every one sampled) can outrun the daemon: their events keep the
# frame-pointer walk (counted as ustack_lost). A busy machine makes more of them: 75% suffice.
export STACKS_MIN_FRAC=0.75
for mode in dwarf auto; do
	record "py-$mode" --unwind=$mode -r 1e-3 -- $PY "$SCRIPT"
	ok "$mode: exit status 0" [ "$rc" -eq 0 ]
	# stack copies lost to bursts keep their (useless) frame-pointer walk: counted, tolerated
	check "$T/py-$mode.ctf" outermost _start
	check "$T/py-$mode.ctf" names Py_BytesMain Py_RunMain PyEval_EvalCode \
		_PyEval_EvalFrameDefault __libc_start_call_main __libc_start_main_impl
	check "$T/py-$mode.ctf" via _PyEval_EvalFrameDefault \
		"_start|__libc_start_main_impl|__libc_start_call_main|Py_BytesMain"
	summary "py-$mode" 'print("    stacks:", s, "drops:", {k: v for k, v in d["drops"].items() if v})'
	# A startup allocation under _Py_wgetcwd (a 16 KiB wchar_t buffer on its frame) is deeper
	# than the 16 KiB window: when it is sampled (about one run in ten) its stack is cut, and
	# counted as cut. Anything more than that is a bug.
	ok "$mode: most stacks unwound with DWARF, few cut by the window" \
		summary "py-$mode" 's["dwarf"] * 4 >= (s["fp"] + s["dwarf"]) * 3 and s["window_cut"] <= 2'
done
check "$T/py-dwarf.ctf" fileline __libc_start_call_main 'libc_start_call_main\.h$'
check "$T/py-dwarf.ctf" fileline __libc_start_main_impl 'libc-start\.c$'
# CPython's allocation entry points, named from python3's .dynsym
check "$T/py-dwarf.ctf" names PyMem_Malloc

# --preload: libmemprof-preload samples python3 in-process. Its trace passes the strict reader
# and estimates what the uprobe-mode run estimated (the same script allocates the same bytes;
# both estimates carry their standard errors).
record py-preload --preload -r 1e-3 -- $PY "$SCRIPT"
ok "preload: exit status 0" [ "$rc" -eq 0 ]
ok "preload: sampled in-process" summary py-preload 'p["mode"] == "preload" and p["sampled_blocks"] > 0'
"$MP_BUILD/tests/bpf/trace_check" strict "$T/py-preload.ctf"
ok "preload: allocated bytes agree with uprobe mode within 4.65 SE" /usr/bin/python3 -c '
import json, sys
a, b = (json.load(open(f))["processes"][0] for f in sys.argv[1:3])
d, se = abs(a["allocated_bytes"] - b["allocated_bytes"]), (a["allocated_bytes_se"] ** 2 + b["allocated_bytes_se"] ** 2) ** 0.5
print("    preload %.0f +/- %.0f, uprobe %.0f +/- %.0f: z = %.2f" % (a["allocated_bytes"], a["allocated_bytes_se"], b["allocated_bytes"], b["allocated_bytes_se"], d / se))
sys.exit(d > 4.65 * se)' "$T/py-preload.json" "$T/py-dwarf.json"

record py-fp --unwind=fp -r 1e-3 -- $PY "$SCRIPT"
n=$(check "$T/py-fp.ctf" count Py_BytesMain _PyEval_EvalFrameDefault)
echo "    fp: $n backtraces reach Py_BytesMain or _PyEval_EvalFrameDefault"
ok "fp: the frame-pointer walk does not unwind python3 (< 10%)" \
	summary py-fp "$n * 10 < p['sampled_blocks']"
exit 0
