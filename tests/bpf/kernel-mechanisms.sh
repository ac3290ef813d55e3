#!/bin/bash
# The kernel-dependent choices are the running kernel's, and say so; a load failure names the
# program and the verifier's reason, and does not blame permissions.
#  - record's summary and memprofd (log, `status`, D-Bus Mechanisms) name the mechanisms; the
#    exit program variant matches the prototype of sched_process_exit in this kernel's BTF
#    (read here with bpftool, independently of the loader); the uprobe_multi and session
#    fallbacks are reported with their reason.
#  - MP_BPF_TEST_REJECT=1 loads a program that no verifier accepts: record and memprofd fail
#    naming it and the verifier's words.
. "$(dirname "$0")/record.lib"

cd "$T" || exit 1
BPFTOOL=$(command -v bpftool || command -v /usr/sbin/bpftool || true)

# The tracepoint's argument count from BTF: typedef -> pointer -> prototype (vlen - 1).
tp_args=""
if [ -n "$BPFTOOL" ]; then
	"$BPFTOOL" btf dump file /sys/kernel/btf/vmlinux >"$T/btf.txt" 2>/dev/null
	td=$(sed -n "s/^\[[0-9]*\] TYPEDEF 'btf_trace_sched_process_exit' type_id=\([0-9]*\)$/\1/p" \
		"$T/btf.txt")
	ptr=$(sed -n "s/^\[$td\] PTR '(anon)' type_id=\([0-9]*\)$/\1/p" "$T/btf.txt")
	vlen=$(sed -n "s/^\[$ptr\] FUNC_PROTO '(anon)' ret_type_id=[0-9]* vlen=\([0-9]*\)$/\1/p" \
		"$T/btf.txt")
	[ -n "$vlen" ] && tp_args=$((vlen - 1))
fi
case $tp_args in
1) want_exit="tp_btf/sched_process_exit(task)" ;;
"") want_exit="" ;;
*) want_exit="tp_btf/sched_process_exit(task, group_dead)" ;;
esac

record default -o "$T/a.ctf" -- "$WL/wl_alloc" equal 20000 100
mech=$(sed -n 's/^memprofctl record: kernel mechanisms: //p' "$T/default.err")
ok "record: exit status 0" [ "$rc" -eq 0 ]
ok "record's summary names the mechanisms ($mech)" [ -n "$mech" ]
if [ -n "$want_exit" ]; then
	ok "exit program for a sched_process_exit of $tp_args argument(s) (BTF)" \
		grep -qF "exit: $want_exit" <<<"$mech"
else
	echo "SKIP: exit program variant (no bpftool to read the BTF)"
fi
"$CHECK" strict "$T/a.ctf"

ok "MP_BPF_NO_SESSION: entry and return probes, saying why" \
	grep -q "entry+return probes (no sessions: disabled by MP_BPF_NO_SESSION)" \
	<(MP_BPF_NO_SESSION=1 "$CTL" record -o "$T/b.ctf" -- "$WL/wl_alloc" equal 20000 100 2>&1)
ok "MP_BPF_NO_UPROBE_MULTI: perf-event uprobes, saying why" \
	grep -q "perf-event uprobes (no uprobe_multi: disabled by MP_BPF_NO_UPROBE_MULTI)" \
	<(MP_BPF_NO_UPROBE_MULTI=1 "$CTL" record -o "$T/c.ctf" -- "$WL/wl_alloc" equal 20000 100 2>&1)

# A rejected program.
MP_BPF_TEST_REJECT=1 "$CTL" record -o "$T/r.ctf" -- true >"$T/r.out" 2>"$T/r.err"
rc=$?
sed 's/^/    [reject] /' "$T/r.err"
ok "rejected program: record exits 1" [ "$rc" -eq 1 ]
ok "rejected program: the error names it" grep -q "program 'mp_test_reject'" "$T/r.err"
ok "rejected program: the error gives the verifier's reason" \
	grep -Eq "sched_process_exit' doesn't have [0-9]+-th argument" "$T/r.err"
ok "rejected program: no word of permissions" bash -c "! grep -qi permission '$T/r.err'"
ok "rejected program: one line" [ "$(wc -l <"$T/r.err")" -eq 1 ]

: >"$T/r.conf"
MP_BPF_TEST_REJECT=1 timeout 60 "$MP_BUILD/bin/memprofd" --socket "$T/rsock" \
	--state-dir "$T/rstate" --config "$T/r.conf" >"$T/rd.log" 2>&1
rc=$?
sed 's/^/    [memprofd reject] /' "$T/rd.log"
ok "rejected program: memprofd exits non-zero ($rc)" bash -c "[ $rc -ne 0 ] && [ $rc -ne 124 ]"
ok "rejected program: memprofd's log names it and the verifier's reason" \
	grep -Eq "Failed to load the BPF programs: .*program 'mp_test_reject'.*[0-9]+-th argument" \
	"$T/rd.log"

# memprofd: its log, status and the D-Bus property say the same.
if memprofd_up "$T/sock" "$T/state" "$T/d.log"; then
	"$CTL" --socket "$T/sock" status >"$T/status.out" 2>&1
	"$CTL" --socket "$T/sock" status --json >"$T/status.json" 2>&1
	dmech=$(sed -n 's/^memprofd: Kernel mechanisms: //p' "$T/d.log")
	ok "memprofd logs each kernel probe once" \
		[ "$(grep -c '^memprofd: Kernel: ' "$T/d.log")" -eq 3 ]
	ok "memprofd logs the mechanisms ($dmech)" [ -n "$dmech" ]
	ok "status prints them" grep -qF "  Kernel:    $dmech" "$T/status.out"
	ok "status --json has them" \
		python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(d["mechanisms"] != sys.argv[2])' \
		"$T/status.json" "$dmech"
	if command -v dbus-send >/dev/null; then
		dbus-send --peer="unix:path=$T/sock" --print-reply --reply-timeout=5000 \
			/org/memprofd org.freedesktop.DBus.Properties.Get \
			string:org.memprofd.Manager1 string:Mechanisms >"$T/prop" 2>&1
		ok "D-Bus Manager1.Mechanisms: the same" grep -qF "string \"$dmech\"" "$T/prop"
	fi
	[ -n "$want_exit" ] && ok "memprofd: the exit program of this kernel" \
		grep -qF "exit: $want_exit" <<<"$dmech"
	kill "$DPID"
	wait "$DPID"
else
	fail "memprofd did not start: $(tail -n 5 "$T/d.log")"
fi
exit 0
