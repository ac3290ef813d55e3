#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Bad input to memprofd and every memprofctl command: exactly ONE line on stderr that names
# the problem and the argument, nothing on stdout (never the help), the documented exit status
# (2 for a usage error, 1 for a failure), never a crash. Cases that need no privileges and no
# daemon; tests/bpf/cli-errors-root.sh has those that do.
set -u

src=${MP_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
build=${MP_BUILD:-$src/build}
tmp=${MP_TMP:-$(mktemp -d)}
CTL=$build/bin/memprofctl
DAEMON=$build/bin/memprofd
fails=0
for f in "$CTL" "$DAEMON"; do
	[ -x "$f" ] || { echo "FAIL: missing $f (make all)"; exit 1; }
done
# Nothing listens there: no case may reach a real memprofd.
export MEMPROFD_SOCKET=$tmp/no-daemon-here
cd "$tmp" || exit 1

# expect NAME STATUS REGEX -- PROGRAM ARGS...: one stderr line matching REGEX (extended).
expect() {
	local name=$1 want=$2 re=$3 rc lines
	shift 4
	timeout 20 "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
	rc=$?
	lines=$(wc -l <"$tmp/err")
	if [ "$rc" -eq "$want" ] && [ "$lines" -eq 1 ] && [ ! -s "$tmp/out" ] &&
	   grep -Eq -- "$re" "$tmp/err"; then
		echo "PASS: $name"
	else
		fails=$((fails + 1))
		echo "FAIL: $name: exit $rc (want $want), $lines stderr line(s), stdout $(wc -c <"$tmp/out") bytes"
		sed 's/^/    stderr: /' "$tmp/err" | head -n 5
		head -n 3 "$tmp/out" | sed 's/^/    stdout: /'
	fi
}

# ---- memprofctl's own options and the command name ---------------------------------------------
expect "no command" 2 "^memprofctl: no command given" -- "$CTL"
expect "unknown global option" 2 "^memprofctl: unrecognized option '--bogus'$" -- "$CTL" --bogus
expect "unknown global short option" 2 "^memprofctl: invalid option -- 'x'$" -- "$CTL" -x
expect "--socket without its path" 2 "^memprofctl: option '--socket' requires an argument$" \
	-- "$CTL" --socket
expect "unknown command" 2 "^memprofctl: unknown or ambiguous command 'bogus'" -- "$CTL" bogus
expect "ambiguous command prefix" 2 "^memprofctl: unknown or ambiguous command 's'" -- "$CTL" s

# Every command (from `memprofctl --help`): getopt's errors, as one line naming the command.
cmds=$("$CTL" --help | awk '/^Commands:/ {on = 1; next} on && /^  [a-z]/ {print $1}')
[ -n "$cmds" ] || { echo "FAIL: no commands in memprofctl --help"; exit 1; }
for c in $cmds; do
	expect "$c: unknown option" 2 "^memprofctl $c: unrecognized option '--bogus'$" \
		-- "$CTL" "$c" --bogus
	expect "$c: unknown short option" 2 "^memprofctl $c: invalid option -- '%'$" \
		-- "$CTL" "$c" -%
	expect "$c: argument to --help" 2 "^memprofctl $c: option '--help' doesn't allow an argument$" \
		-- "$CTL" "$c" --help=x
	expect "$c: abbreviated command" 2 "^memprofctl $c: unrecognized option '--bogus'$" \
		-- "$CTL" "${c:0:4}" --bogus
done
expect "ambiguous option" 2 "^memprofctl record: option '--no' is ambiguous" \
	-- "$CTL" record --no -- true

# ---- attach ------------------------------------------------------------------------------------
expect "attach: no PID" 2 "^memprofctl attach: no PID, --unit, --cgroup or --exe given" -- "$CTL" attach
expect "attach: PID not a number" 2 "^memprofctl attach: invalid PID 'abc'$" -- "$CTL" attach abc
expect "attach: PID 0" 2 "^memprofctl attach: invalid PID '0'$" -- "$CTL" attach 0
expect "attach: PID too large" 2 "^memprofctl attach: invalid PID '99999999999'$" \
	-- "$CTL" attach 99999999999
expect "attach: --rate without value" 2 "^memprofctl attach: option '--rate' requires an argument$" \
	-- "$CTL" attach --rate
expect "attach: rate 2" 2 "^memprofctl attach: Invalid sampling rate '2': in \[1e-9, 1\]$" \
	-- "$CTL" attach --rate 2 1
expect "attach: rate 1e-300, below the minimum" 2 \
	"^memprofctl attach: Invalid sampling rate '1e-300': in \[1e-9, 1\]$" \
	-- "$CTL" attach --rate 1e-300 1
expect "attach: rate not a number" 2 "^memprofctl attach: Invalid sampling rate 'abc': in \[1e-9, 1\]$" \
	-- "$CTL" attach -r abc 1
expect "attach: bad duration" 2 "^memprofctl attach: Invalid duration '60x'" \
	-- "$CTL" attach --duration 60x 1
expect "attach: duration over 366 days" 2 \
	"^memprofctl attach: Invalid duration '18446744073709551s': from 1us to 366 days" \
	-- "$CTL" attach --duration 18446744073709551s 1
expect "attach: callstack size 0" 2 "^memprofctl attach: Invalid callstack size '0': 1 to 127$" \
	-- "$CTL" attach --callstack-size 0 1
expect "attach: format version 4" 2 "^memprofctl attach: Invalid format version '4': 2 or 3$" \
	-- "$CTL" attach --format-version 4 1
expect "attach: negative overhead budget" 2 "^memprofctl attach: Invalid overhead budget '-1': in \[0, 1e6\]$" \
	-- "$CTL" attach --max-overhead -1 1
expect "attach: no daemon" 1 \
	"^memprofctl attach: Failed to connect to memprofd at '$tmp/no-daemon-here': No such file or directory" \
	-- "$CTL" attach 1
expect "attach: --socket names the socket" 1 "memprofd at '/nonexistent/bus': " \
	-- "$CTL" --socket /nonexistent/bus attach 1

# ---- stop, discard, status, list ---------------------------------------------------------------
for c in stop discard; do
	expect "$c: no ID" 2 "^memprofctl $c: expected one profile ID" -- "$CTL" "$c"
	expect "$c: two IDs" 2 "^memprofctl $c: expected one profile ID" -- "$CTL" "$c" 1 2
	expect "$c: ID not a number" 2 "^memprofctl $c: invalid profile id 'abc'$" \
		-- "$CTL" "$c" abc
	expect "$c: ID 0" 2 "^memprofctl $c: invalid profile id '0'$" -- "$CTL" "$c" 0
	expect "$c: no daemon" 1 "^memprofctl $c: Failed to connect to memprofd at " -- "$CTL" "$c" 1
done
expect "status: ID not a number" 2 "^memprofctl status: invalid profile id 'x1'$" \
	-- "$CTL" status x1
expect "status: two IDs" 2 "^memprofctl status: expected at most one profile ID" \
	-- "$CTL" status 1 2
expect "status: no daemon" 1 "^memprofctl status: Failed to connect to memprofd at " -- "$CTL" status
expect "list: no daemon" 1 "^memprofctl list: Failed to connect to memprofd at " -- "$CTL" list
expect "list: stray argument" 2 "^memprofctl list: unexpected argument 'extra'$" \
	-- "$CTL" list extra

# ---- dump and report: missing, unreadable, malformed files --------------------------------------
printf 'not a trace\n' >"$tmp/text.ctf"
expect "dump: no TRACE" 2 "^memprofctl dump: expected one TRACE argument" -- "$CTL" dump
expect "dump: two TRACEs" 2 "^memprofctl dump: expected one TRACE argument" \
	-- "$CTL" dump a.ctf b.ctf
expect "dump: missing file named once" 1 \
	"^memprofctl dump: Failed to open trace '$tmp/nope.ctf': No such file or directory$" \
	-- "$CTL" dump "$tmp/nope.ctf"
expect "dump: a directory" 1 "^memprofctl dump: Failed to open trace '$tmp': " \
	-- "$CTL" dump "$tmp"
expect "dump: not a trace" 1 "^memprofctl dump: Failed to open trace '$tmp/text.ctf': offset 0: " \
	-- "$CTL" dump "$tmp/text.ctf"
expect "report: no TRACE" 2 "^memprofctl report: no trace given" -- "$CTL" report
expect "report: missing file named once" 1 \
	"^memprofctl report: Failed to read '$tmp/nope.ctf': No such file or directory$" \
	-- "$CTL" report "$tmp/nope.ctf"
expect "report: bad --top" 2 "^memprofctl report: invalid --top 'x'" -- "$CTL" report --top x f
expect "report: bad --by" 2 "^memprofctl report: invalid --by 'size'" -- "$CTL" report --by size f
expect "report: bad --points" 2 "^memprofctl report: invalid --points '0'" \
	-- "$CTL" report --points 0 f
expect "report: bad --since" 2 "^memprofctl report: invalid time 'soon'" \
	-- "$CTL" report --since soon f
expect "report: bad --tail" 2 "^memprofctl report: invalid --tail '2'" -- "$CTL" report --tail 2 f
expect "report: --until before --since" 2 "^memprofctl report: --until is before --since" \
	-- "$CTL" report --since 2s --until 1s f

# ---- record: arguments (parsed before anything runs) ----------------------------------------------
expect "record: no command" 2 "^memprofctl record: no command given" -- "$CTL" record
expect "record: --rate then --interval" 2 "^memprofctl record: --rate and --interval exclude each other" \
	-- "$CTL" record --rate 0.1 --interval 64 -- true
expect "record: --interval then --rate" 2 "^memprofctl record: --rate and --interval exclude each other" \
	-- "$CTL" record --interval 64 --rate 0.1 -- true
expect "record: rate 0" 2 "^memprofctl record: Invalid sampling rate '0': in \[1e-9, 1\]$" \
	-- "$CTL" record -r 0 -- true
expect "record: rate 1e-300, below the minimum" 2 \
	"^memprofctl record: Invalid sampling rate '1e-300': in \[1e-9, 1\]$" \
	-- "$CTL" record -r 1e-300 -- true
expect "record: an interval beyond the minimum rate" 2 \
	"^memprofctl record: invalid interval '80000000000': its rate 1e-10 is not in \[1e-9, 1\]$" \
	-- "$CTL" record --interval 80000000000 -- true
expect "record: bad unwind mode" 2 "^memprofctl record: Invalid unwind mode 'lbr': auto, fp or dwarf$" \
	-- "$CTL" record --unwind lbr -- true
expect "record: stack copy too large" 2 "^memprofctl record: Invalid stack copy size '99999999': 0 to 65536$" \
	-- "$CTL" record --stack-copy-size 99999999 -- true
expect "record: bad seed" 2 "^memprofctl record: invalid seed 'x'" -- "$CTL" record --seed x -- true
expect "record: bad overhead budget" 2 "^memprofctl record: Invalid overhead budget 'lots': in \[0, 1e6\]$" \
	-- "$CTL" record --max-overhead lots -- true
expect "record: -p with an empty pid list" 2 "^memprofctl record: invalid pid list ',,': no pid in it$" \
	-- "$CTL" record -p ,,
expect "record: -p with 65 pids" 2 "^memprofctl record: more than 64 pids$" \
	-- "$CTL" record -p "$(seq -s, 1 65)"
expect "record: -p and CMD" 2 "^memprofctl record: -p does not take a command" \
	-- "$CTL" record -p 1 -- true
# the fast path follows frame pointers only: DWARF unwinding is refused there, not ignored
expect "record: --preload --unwind dwarf" 2 \
	"^memprofctl record: --preload takes no --unwind dwarf: libmemprof-preload follows frame pointers only" \
	-- "$CTL" record --preload --unwind dwarf -- true
expect "record: --preload --unwind auto" 2 "^memprofctl record: --preload takes no --unwind auto: " \
	-- "$CTL" record --unwind auto --preload -- true
expect "record: --preload --stack-copy-size" 2 \
	"^memprofctl record: --preload takes no --stack-copy-size: libmemprof-preload copies no stack" \
	-- "$CTL" record --preload --stack-copy-size 4096 -- true

# ---- memprofd (all refused before it loads BPF or binds anything) --------------------------------
expect "memprofd: unknown option" 2 "^memprofd: unrecognized option '--bogus'$" -- "$DAEMON" --bogus
expect "memprofd: unknown short option" 2 "^memprofd: invalid option -- 'x'$" -- "$DAEMON" -x
expect "memprofd: --socket without path" 2 "^memprofd: option '--socket' requires an argument$" \
	-- "$DAEMON" --socket
expect "memprofd: bad log level" 2 "^memprofd: invalid log level 'loud': err, warning" \
	-- "$DAEMON" --log-level loud
expect "memprofd: bad seed" 2 "^memprofd: invalid seed 'abc'$" -- "$DAEMON" --seed abc
expect "memprofd: stray argument" 2 "^memprofd: unexpected argument 'extra'" -- "$DAEMON" extra
expect "memprofd: relative state dir" 2 "^memprofd: --state-dir needs an absolute path, not 'rel'$" \
	-- "$DAEMON" --state-dir rel
expect "memprofd: missing config file" 1 "^memprofd: Configuration file '$tmp/nope.conf' does not exist$" \
	-- "$DAEMON" --config "$tmp/nope.conf" --socket "$tmp/bus"
printf 'DefaultRate=7\n' >"$tmp/bad.conf"
expect "memprofd: invalid config value" 1 "^memprofd: Failed to load the configuration: $tmp/bad.conf:1: invalid value '7' for DefaultRate$" \
	-- "$DAEMON" --config "$tmp/bad.conf" --socket "$tmp/bus"

[ "$fails" -eq 0 ]
