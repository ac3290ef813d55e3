#!/bin/bash
# Probe-hit counting on the unsampled path: every probed call is counted (MP_STAT_CALLS) while
# the overhead estimate's per-process counters are fed in per-thread batches. memprofctl
# record's "allocator calls probed" must equal the number of probed calls the floor loader
# counts for the same deterministic workload (one thread, then two), in session mode, in the
# entry + return fallback, and at rate 1 (every call's return half runs).
. "$(dirname "$0")/record.lib"

FLOOR=$MP_BUILD/bench/floor
LOOP=$MP_BUILD/bench/allocbench
for f in "$FLOOR" "$LOOP"; do
	[ -x "$f" ] || { fail "missing $f (make bench-bins)"; exit 1; }
done

# Both runs without address-space randomisation: a second thread's arena is a 64 MiB-aligned
# heap that glibc carves out of a larger mapping with one or two munmap calls, depending on
# where that mapping landed, so the probed-call count of a randomised run varies by one.
NORAND=(setarch "$(uname -m)" -R)

# Probed calls of one run: entry hits of the empty floor programs (allocation entries + frees).
floor_calls() {
	"${NORAND[@]}" "$FLOOR" -c -- "$@" 2>&1 >/dev/null |
		awk '/^floor: hits_(alloc_entry|free) / { n += $3 } END { print n + 0 }'
}

recorded_calls() {	# NAME: the count in record's summary
	sed -n 's/^memprofctl record: \([0-9]*\) allocator calls probed.*/\1/p' "$T/$1.err"
}

for args in "1003 1" "1003 2"; do
	want=$(floor_calls $LOOP $args)
	ok "floor counted the calls of allocbench $args ($want)" [ "${want:-0}" -gt 2000 ]
	for mode in session fallback rate1; do
		name="calls-${args// /-}-$mode"
		case $mode in
		session) envs=() ; opts=(-r 1e-4) ;;
		fallback) envs=(MP_BPF_NO_SESSION=1) ; opts=(-r 1e-4) ;;
		rate1) envs=() ; opts=(-r 1) ;;
		esac
		"${NORAND[@]}" env "${envs[@]}" "$CTL" record --unwind fp "${opts[@]}" -o "$T/$name.ctf" -- \
			$LOOP $args >"$T/$name.out" 2>"$T/$name.err"
		ok "$name: exit status 0" [ $? -eq 0 ]
		got=$(recorded_calls "$name")
		ok "$name: record counts every probed call ($got, floor $want)" [ "$got" = "$want" ]
		ok "$name: no drop" grep -q "drops: none" "$T/$name.err"
	done
done
