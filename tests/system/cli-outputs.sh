#!/bin/bash
# What the CLI leaves on disk and says when things go wrong around its outputs, through a
# private memprofd and in-process:
#  - a refused profile leaves a file, FIFO or symlink already at -o as it was (record --daemon,
#    attach -o); an accepted one replaces the symlink's target, not the link;
#  - a full disk: record names the trace and the cause and exits 1 (both ways), memprofd logs it;
#  - a process that exits with ~70,000 sampled blocks live is recorded through memprofd without
#    its calls timing out (the purge of its BPF entries walked the table once per entry);
#  - report --pprof/--flamegraph write through a FIFO, "-" is standard output, and a full
#    standard output is reported as such;
#  - memprofd -s does not remove a file that is not a socket; attach to a thread id names its
#    process; record's numbers are decimal; dump takes options after the trace;
#  - memprofd killed while record --daemon runs: record says so and exits 1.
. "$(dirname "$0")/lib-service.sh"
svc_require
WL=$MP_BUILD/tests/workloads
for f in "$WL/wl_nolibc" "$WL/wl_alloc"; do
	[ -x "$f" ] || { echo "FAIL: missing $f (make all test-bins)"; exit 1; }
done
T=$MP_TMP
cleanup() {
	local m

	for m in "$T"/small-*; do
		mountpoint -q "$m" && umount -l "$m"
	done
	[ -n "${HOLD:-}" ] && kill "$HOLD" 2>/dev/null
	svc_cleanup
}
trap cleanup EXIT
svc_start

rec() {	# rec NAME [record options] -- CMD...: $rc, $T/NAME.err
	local name=$1; shift
	timeout -k 5 120 "$MEMPROFCTL" --socket "$SOCK" record "$@" >"$T/$name.out" 2>"$T/$name.err"
	rc=$?
	sed "s/^/    [$name] /" "$T/$name.err"
}

# --- a refused profile leaves what was at -o
echo precious > "$T/keep.ctf"
rec refused --daemon -o "$T/keep.ctf" -- "$WL/wl_nolibc"
check "refused record --daemon: exit 1" [ "$rc" = 1 ]
check "refused record --daemon: the file at -o is unchanged" \
	eval "[ \"\$(cat '$T/keep.ctf')\" = precious ]"
mkfifo "$T/fifo"
rec refused-fifo --daemon -o "$T/fifo" -- "$WL/wl_nolibc"
check "refused record --daemon: a FIFO at -o is still there" [ -p "$T/fifo" ]
ctl attach -o "$T/keep.ctf" 999999 > /dev/null 2> "$T/attach.err"
check "refused attach -o: exit 1" [ $? = 1 ]
check "refused attach -o: the file is unchanged" eval "[ \"\$(cat '$T/keep.ctf')\" = precious ]"

# --- an accepted one replaces the file (through a symlink: its target)
ln -s keep.ctf "$T/link.ctf"
rec linked --daemon -r 1e-2 -o "$T/link.ctf" -- "$WL/wl_alloc" equal 2000 1000
check "record -o SYMLINK: exit 0" [ "$rc" = 0 ]
check "record -o SYMLINK: the link is still a link" [ -L "$T/link.ctf" ]
check "record -o SYMLINK: its target holds the trace" \
	eval "'$MEMPROFCTL' report -q '$T/keep.ctf' > /dev/null"
check "record -o SYMLINK: no temporary file left" \
	eval "[ -z \"\$(ls '$T' | grep '\\.tmp\\.')\" ]"

# --- a full disk
for mode in --no-daemon --daemon; do
	# a file system of its own each time: a closed trace's space comes back asynchronously
	SMALL=$T/small$mode
	mkdir -p "$SMALL"
	mount -t tmpfs -o size=64k memprof-test "$SMALL" || { fail "cannot mount a tmpfs"; break; }
	rec "full$mode" "$mode" -r 1e-2 -o "$SMALL/full.ctf" -- "$WL/wl_alloc" equal 200000 1000
	check "full disk ($mode): exit 1 although CMD exited 0" [ "$rc" = 1 ]
	check "full disk ($mode): the error names the trace" \
		grep -q "full.ctf.*\\(No space left on device\\|may be incomplete\\)" \
		"$T/full$mode.err"
done
check "full disk: memprofd's log names the trace and the cause" \
	grep -q "Failed to write the trace of .*No space left on device" \
	"$MP_TMP/memprofd.log"

# --- exit with many sampled blocks live
printf 'leak 10000\n%.0s' $(seq 10) > "$T/leak.in"
echo exit >> "$T/leak.in"
rec leak --daemon -r 1e-2 -o "$T/leak.ctf" -- sh -c "'$WL/wl_alloc' ctl < '$T/leak.in'"
check "70,000 blocks live at exit, through memprofd: exit 0" [ "$rc" = 0 ]
check "70,000 blocks live at exit: no call timed out" eval "! grep -qi 'timed out' '$T/leak.err'"
check "70,000 blocks live at exit: they are live in the report" \
	eval "'$MEMPROFCTL' report -q --json '$T'/leak.ctf* | /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)
sys.exit(0 if d[\"totals\"][\"live_allocations\"][\"estimate\"] > 90000 else 1)'"

# --- report's outputs
cat "$T/fifo" > "$T/fifo.out" &
HOLD=$!
"$MEMPROFCTL" report -q --pprof "$T/fifo" "$T/leak.ctf" > /dev/null
check "report --pprof FIFO: exit 0" [ $? = 0 ]
wait "$HOLD"
HOLD=
check "report --pprof FIFO: the FIFO is still one" [ -p "$T/fifo" ]
check "report --pprof FIFO: the reader got a gzip stream" \
	eval "gzip -t < '$T/fifo.out'"
check "report --flamegraph -: the SVG on standard output, no report" \
	eval "'$MEMPROFCTL' report -q --flamegraph - '$T/leak.ctf' | head -n 1 | grep -q '^<?xml'"
check "report --pprof - --flamegraph -: usage error" \
	eval "! '$MEMPROFCTL' report -q --pprof - --flamegraph - '$T/leak.ctf' 2>/dev/null"
check "report --json --pprof -: usage error" \
	eval "! '$MEMPROFCTL' report -q --json --pprof - '$T/leak.ctf' > /dev/null 2>&1"
mknod "$T/full" c 1 7	# the full device of its own: /dev/full is the machine's
"$MEMPROFCTL" report -q "$T/leak.ctf" > "$T/full" 2> "$T/full-stdout.err"
check "report > a full device: exit 1" [ $? = 1 ]
check "report > a full device: says the device is full" \
	grep -q "No space left on device" "$T/full-stdout.err"
check "report --top 0: usage error" \
	eval "! '$MEMPROFCTL' report -q --top 0 '$T/leak.ctf' > /dev/null 2>&1"

# --- memprofd -s PATH with a file there
echo notasocket > "$T/plain"
timeout -k 5 20 "$MEMPROFD" --socket "$T/plain" --state-dir "$T/state2" \
	--config "$MP_TMP/memprofd.conf" > "$T/plain.log" 2>&1
check "memprofd -s FILE: exits with an error (not serving)" [ $? = 1 ]
check "memprofd -s FILE: the file is untouched" eval "[ \"\$(cat '$T/plain')\" = notasocket ]"
check "memprofd -s FILE: says it is not a socket" grep -q "not a socket" "$T/plain.log"

# --- attach to a thread id
/usr/bin/python3 -c 'import threading, time
threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
time.sleep(30)' &
WPID=$!
TID=
for _ in $(seq 100); do
	TID=$(ls "/proc/$WPID/task" 2>/dev/null | grep -vx "$WPID" | head -n 1)
	[ -n "$TID" ] && break
	sleep 0.05
done
if [ -n "$TID" ]; then
	ctl attach "$TID" > /dev/null 2> "$T/tid.err"
	check "attach TID: exit 1" [ $? = 1 ]
	check "attach TID: names the process" grep -q "thread of process $WPID" "$T/tid.err"
else
	fail "attach TID: python3 started no thread"
fi
kill "$WPID" 2>/dev/null
wait "$WPID" 2>/dev/null

# --- memprofd killed while record --daemon runs: an error and exit 1, not 0
"$MEMPROFD" --socket "$T/bus2" --state-dir "$T/state3" --config "$MP_TMP/memprofd.conf" \
	> "$T/killed.log" 2>&1 &
KPID=$!
wait_until 20 "$MEMPROFCTL" --socket "$T/bus2" status > /dev/null 2>&1
timeout -k 5 60 "$MEMPROFCTL" --socket "$T/bus2" record --daemon -o "$T/killed.ctf" -- \
	sh -c 'sleep 2' > /dev/null 2> "$T/killed.err" &
RPID=$!
sleep 1
kill -KILL "$KPID"
wait "$KPID" 2>/dev/null
wait "$RPID"
rc=$?
sed 's/^/    [killed] /' "$T/killed.err"
check "memprofd killed during record --daemon: exit 1" [ "$rc" = 1 ]
check "memprofd killed during record --daemon: says so and names the trace" \
	grep -q "memprofd went away.*killed.ctf" "$T/killed.err"

# --- numbers and option order
rec decimal --no-daemon --interval 0100 -o "$T/dec.ctf" -- true
check "--interval 0100 is a hundred bytes (rate 0.08)" \
	eval "'$MEMPROFCTL' dump '$T/dec.ctf' --json | head -n 1 | grep -q '\"sample_rate\":0.08,'"

exit $((FAILS > 0))
