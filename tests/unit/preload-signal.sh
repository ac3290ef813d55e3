#!/bin/bash
# libmemprof-preload and signal handlers: SIGALRM every 20-50 µs while the main loop
# allocates; the handler allocates too (see tests/workloads/pl_signal.c for how the program
# stays correct with glibc's non-async-signal-safe malloc). Armed with the hook log (frees
# matched, no alloc at a live address), disarmed, and under the UBSan build. Then a free from a
# signal handler while the interrupted thread holds the pending-free buffer.
. "$(dirname "$0")/preload.inc"

sig() {	# name lib interval env...
	local name=$1 lib=$2 us=$3; shift 3
	local out=$MP_TMP/$name.out
	if timeout 60 env LD_PRELOAD="$lib" "$@" "$PL_BIN/pl_signal" 1 "$us" >"$out" 2>&1; then
		pass "$name: $(tr '\n' ' ' <"$out")"
	else
		fail "$name (exit $?)"
		cat "$out"
	fi
}

sig signal-disarmed "$PL_LIB" 20
sig signal-armed "$PL_LIB" 50 MEMPROF_RATE=0.001 MEMPROF_TEST_LOG=3 3>"$MP_TMP/signal.log"
"$PL_BIN/pl_check" -n signal-armed -l "$MP_TMP/signal.log" -s || pl_failures=$((pl_failures + 1))
sig signal-armed-rate-1e-2 "$PL_LIB" 20 MEMPROF_RATE=0.01 MEMPROF_ARM=1
sig signal-ubsan "$PL_BIN/libmemprof-preload-ubsan.so" 20 MEMPROF_RATE=0.01 MEMPROF_ARM=1

# A signal handler frees a sampled block while the thread it interrupted holds the pending-free
# buffer (blocked in the library's test-log write to a full FIFO): the handler's free must be
# reported at once, not wait for the buffer (pl_sigfree.c).
mkfifo "$MP_TMP/sigfree.fifo"
exec 8<>"$MP_TMP/sigfree.fifo"
if out=$(timeout 30 env LD_PRELOAD="$PL_LIB" MEMPROF_RATE=1 MEMPROF_TEST_LOG=8 MEMPROF_BATCH=1 \
	"$PL_BIN/pl_sigfree" 8 2>&1); then
	pass "signal-free-while-batch-held: 1 free reported at once, 1 queued ($out)"
else
	fail "signal-free-while-batch-held: exit $? ($out; expected 1 1 1 1 1)"
fi
exec 8<&-
pl_exit
