#!/bin/bash
# Probe placement on the REAL libc of this machine: the probes of malloc, free, posix_memalign
# (and calloc, realloc) sit on instructions the kernel emulates (decoded with capstone by
# tests/bpf/overhead_check.c, independently of daemon/probe/placement.c). When free's first
# instruction is one the kernel single-steps (glibc 2.36: `test %rdi,%rdi`), forcing every probe
# onto the function's first instruction (MP_PLACEMENT=entry) must be measurably slower than the
# placed probes: more than 1.3x per malloc+free pair, best of 3 runs each (bench/placement-bench.sh
# with RUNS=3). A single-step costs 2.7x to 5x an emulated trap on the hosts seen so far; the
# per-pair cost and the 3x figure of this host are `make bench`'s (bench-placement), since they
# depend on the CPU.
. "$(dirname "$0")/record.lib"

OC=$MP_BUILD/tests/bpf/overhead_check
LOOP=$WL/ovh_loop
[ -x "$OC" ] && [ -x "$LOOP" ] || { fail "missing $OC or $LOOP (make test-bins)"; exit 1; }

"$OC" placement "$LOOP" 2>"$T/placement.err" | tee "$T/placement.out"
if ! grep -q "^# free+0 is .*single-stepped" "$T/placement.out"; then
	echo "# free's first instruction is emulated on this libc: no entry comparison"
	exit 0
fi
BENCH_BUILD=$MP_BUILD BENCH_OUT=$T/placement.txt RUNS=3 "$MP_SRC/bench/placement-bench.sh" \
	> "$T/bench.out" 2>&1
rc=$?
sed 's/^/    /' "$T/bench.out"
ok "placed and entry probes: the workload ran under record" [ "$rc" = 0 ]
placed= entry= ratio=
[ -f "$T/placement.txt" ] && read -r _ placed _ entry _ ratio _ < "$T/placement.txt"
ok "entry placement is measurably slower than placed probes (${entry:-?} vs ${placed:-?} ns: ${ratio:-?}x > 1.3x)" \
	awk -v p="${placed:-0}" -v e="${entry:-0}" 'BEGIN { exit !(p > 0 && e > 1.3 * p) }'
