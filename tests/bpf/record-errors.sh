#!/bin/bash
# memprofctl record: bad input gives one clear error line and a non-zero exit.
. "$(dirname "$0")/record.lib"

expect() {	# name status pattern -- args...
	local name=$1 want=$2 pat=$3
	shift 4
	"$CTL" record "$@" >"$T/out" 2>"$T/err"
	local got=$?
	if [ "$got" -eq "$want" ] && grep -Eq "$pat" "$T/err"; then
		pass "$name (exit $got: $(head -n 1 "$T/err"))"
	else
		fail "$name: exit $got (want $want), stderr: $(cat "$T/err")"
	fi
}

cd "$T" || exit 1
expect "nonexistent command" 127 "Failed to execute '/nonexistent/cmd': No such file" -- \
	-o "$T/a.ctf" -- /nonexistent/cmd
expect "command not on PATH" 127 "Failed to execute 'no-such-command-xyz'" -- \
	-o "$T/a.ctf" -- no-such-command-xyz
expect "rate 0" 2 "Invalid sampling rate '0': in \\[1e-9, 1\\]" -- -r 0 -- true
expect "rate 2" 2 "Invalid sampling rate '2': in \\[1e-9, 1\\]" -- -r 2 -- true
expect "rate not a number" 2 "Invalid sampling rate '1e-4x'" -- -r 1e-4x -- true
expect "interval below a word" 2 "invalid interval '4'" -- --interval 4 -- true
expect "callstack size 0" 2 "Invalid callstack size '0'" -- --callstack-size 0 -- true
expect "callstack size 500" 2 "Invalid callstack size '500'" -- --callstack-size 500 -- true
expect "format version 4" 2 "Invalid format version '4'" -- --format-version 4 -- true
expect "no command" 2 "no command given" --
expect "unknown option" 2 "unrecognized option" -- --bogus -- true
expect "process without allocator" 1 \
	"Process [0-9]+ \(wl_nolibc\) has no allocator memprofd can probe" -- \
	-o "$T/n.ctf" -- "$WL/wl_nolibc"
ok "no trace left for a process never profiled" [ ! -e "$T/n.ctf" ]
expect "unwritable output" 1 "Failed to create trace '/nonexistent-dir/x.ctf'" -- \
	-o /nonexistent-dir/x.ctf -- true
if command -v setpriv >/dev/null; then
	setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all \
		"$CTL" record -o /tmp/never.ctf -- true >"$T/out" 2>"$T/err"
	got=$?
	ok "no BPF permission: exit 1 with a clear message ($(cat "$T/err"))" \
		bash -c "[ $got -eq 1 ] && grep -q 'Failed to load the BPF programs: .*needs root, or CAP_BPF' '$T/err'"
fi
exit 0
