#!/bin/bash
# libmemprof-preload's in-process frame walk (tests/workloads/pl_walk.c), armed without a probe:
#  - seccomp: a process whose seccomp filter kills it on process_vm_readv (a systemd service with
#    SystemCallFilter=@system-service) must survive the walk, and still get its frames walked;
#  - altstack: signal handlers allocating on alternate signal stacks (mapped elsewhere, or inside
#    the thread's own stack) in the main thread and in another: no fault, own-stack ones walked.
# Both with the release build and the UBSan one.
. "$(dirname "$0")/preload.inc"

run() {	# name lib mode [VAR=VALUE...]
	local name=$1 lib=$2 mode=$3 out rc
	shift 3
	out=$(timeout 60 env LD_PRELOAD="$lib" MEMPROF_ARM=1 MEMPROF_RATE=0.01 "$@" \
		"$PL_BIN/pl_walk" "$mode" 2>&1)
	rc=$?
	if [ "$rc" -eq 0 ]; then
		pass "$name: $out"
	elif [ "$rc" -eq 77 ]; then
		echo "SKIP: $name: not on this architecture"
	else
		fail "$name (exit $rc${out:+: $out})"
	fi
}

# immediate reports (MEMPROF_BATCH=1): every walked sample reaches the alloc hook
run walk-seccomp "$PL_LIB" seccomp MEMPROF_BATCH=1
run walk-seccomp-ubsan "$PL_BIN/libmemprof-preload-ubsan.so" seccomp MEMPROF_BATCH=1
run walk-altstack "$PL_LIB" altstack MEMPROF_BATCH=1
run walk-altstack-ubsan "$PL_BIN/libmemprof-preload-ubsan.so" altstack MEMPROF_BATCH=1
# the library's default: walked samples are queued (deferred reports), none hooked alone
out=$(timeout 60 env -u MEMPROF_BATCH LD_PRELOAD="$PL_LIB" MEMPROF_ARM=1 MEMPROF_RATE=0.01 \
	"$PL_BIN/pl_walk" seccomp 2>&1)
if [[ $out =~ ^hooks\ 0\ deferred\ [1-9][0-9]*\ unwalked\ 0$ ]]; then
	pass "default: walked samples queued for deferred reports ($out)"
else
	fail "default: walked samples queued for deferred reports ($out)"
fi
pl_exit
