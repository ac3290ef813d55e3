#!/bin/bash
# Uprobe sessions (Linux 6.13+: the entry half skips the return half of unsampled calls) and
# the entry + uretprobe fallback (MP_BPF_NO_SESSION=1) give the same event semantics: the
# probe_check scenarios (every allocator kind, nesting new -> malloc and realloc -> malloc/free
# counted once, realloc's old block freed, threads) pass in both modes, and a recorded workload
# gives the same probed-call count and per-site estimates within their error.
. "$(dirname "$0")/record.lib"

PC=$MP_BUILD/tests/bpf/probe_check
[ -x "$PC" ] || { fail "missing $PC (make test-bins)"; exit 1; }

"$PC" "$WL" basic >"$T/probe-mode.out" 2>&1
if grep -q "^# probes: uprobe session links" "$T/probe-mode.out"; then
	session=1
	pass "sessions detected and used by default on this kernel ($(uname -r))"
else
	session=
	echo "# this kernel has no usable uprobe sessions: both runs use entry + return probes"
fi

calls=()
for mode in session fallback; do
	if [ $mode = session ]; then envs=(${session:+MP_EXPECT_SESSION=1}); else envs=(MP_BPF_NO_SESSION=1); fi
	for sc in basic cxx threads; do
		env "${envs[@]}" "$PC" "$WL" $sc >"$T/$mode-$sc.out" 2>"$T/$mode-$sc.err"
		r=$?
		n=$(grep -c "^PASS" "$T/$mode-$sc.out")
		if [ $r -eq 0 ] && ! grep -q "^FAIL" "$T/$mode-$sc.out" && [ "$n" -gt 0 ]; then
			pass "$mode: probe_check $sc ($n checks)"
		else
			fail "$mode: probe_check $sc (exit $r)"
			grep "^FAIL" "$T/$mode-$sc.out" | sed "s/^/    [$mode-$sc] /"
			grep -v "^loader: Probe on" "$T/$mode-$sc.err" | tail -n 5 | sed "s/^/    [$mode-$sc] /"
		fi
	done
	grep -h "^# probes" "$T/$mode-basic.out" | sed "s/^/# $mode: /"
	env "${envs[@]}" "$CTL" record --unwind fp -r 0.01 --seed 7 -o "$T/$mode.ctf" -- \
		"$WL/wl_alloc" sites 1 >"$T/$mode-sites.out" 2>"$T/$mode-sites.err"
	ok "$mode: record exit status 0" [ $? -eq 0 ]
	"$CHECK" sites "$T/$mode.ctf" "$T/$mode-sites.out" | sed "s/^\(PASS\|FAIL\): /\1: $mode: /"
	calls[${#calls[@]}]=$(sed -n 's/^memprofctl record: \([0-9]*\) allocator calls probed.*/\1/p' \
		"$T/$mode-sites.err")
done
ok "both modes probe the same allocator calls (${calls[0]:-?} vs ${calls[1]:-?})" \
	[ -n "${calls[0]}" ] && [ "${calls[0]}" = "${calls[1]}" ]
