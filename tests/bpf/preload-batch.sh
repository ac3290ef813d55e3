#!/bin/bash
# libmemprof-preload's deferred mode (memprofctl record --preload --batch N, MEMPROF_BATCH):
# walked samples are queued and reported N per memprof:flush trap, frees after the allocs they
# may name. On real probes:
#  - accuracy: n_samples ~ Binomial (chi-square), estimates per site within their SE at 1e-2,
#    frees matched (no unmatched free, every sampled block collected), C++ new/delete;
#  - exit: samples still queued when the program exits are all reported (live at exit), also
#    after full batches went out;
#  - freepending: blocks freed (by the same thread or another) while their alloc was still
#    queued arrive alloc-then-free: all collected, no unmatched free;
#  - fork: the child's trace has none of the parent's queued samples;
#  - signal: allocations and frees in signal handlers (pl_signal) with the queue held by the
#    interrupted thread: exit 0, frees matched; and with the hook log, no free before its alloc.
. "$(dirname "$0")/record.lib"
PL=$MP_BUILD/tests/preload
for f in "$PL/pl_batch" "$PL/pl_signal" "$PL/pl_check" "$MP_BUILD/lib/libmemprof-preload.so"; do
	[ -e "$f" ] || { echo "FAIL: missing $f (make all test-bins)"; exit 1; }
done

preload_mode() {	# name trace
	ok "$1: profiled in preload mode" grep -q " mode=preload;" <(context_of "$2")
}
clean() {	# name trace: no unmatched free, no stale block, no ring-buffer drop
	local ctx
	ctx=$(context_of "$2")
	ok "$1: no unmatched free, no stale block" grep -q "unmatched_frees=0 stale_blocks=0 " <<<"$ctx"
	ok "$1: no ring-buffer drop" grep -q "ringbuf=0 " <<<"$ctx"
}
allocs_at() {	# trace site -> allocs at site (0 if none)
	"$CHECK" info "$1" | awk -v s="$2" '$1 == "site" && $2 == s {
		sub("allocs=", "", $3); n = $3 } END { print n + 0 }'
}

# The flush probe: a note with its semaphore, its argument in %rdi, a 5-byte nop site.
notes=$(readelf -n "$MP_BUILD/lib/libmemprof-preload.so" | grep -A2 "Name: flush\$")
ok "usdt: memprof:flush note, argument 8@%rdi" grep -Eq "Arguments: 8@%rdi\$" <<<"$notes"
ok "usdt: memprof:flush has a semaphore" grep -Eq "Semaphore: 0x0*[1-9a-f]" <<<"$notes"

"$CTL" record --batch 4 -o "$T/nopreload.ctf" -- true 2>"$T/nopreload.err"
ok "--batch without --preload is refused (exit 2)" [ $? -eq 2 ]
"$CTL" record --preload --batch 17 -o "$T/b17.ctf" -- true 2>"$T/b17.err"
ok "--batch 17 is refused (exit 2)" [ $? -eq 2 ]
"$CTL" record --preload --batch 0 -o "$T/b0.ctf" -- true 2>"$T/b0.err"
ok "--batch 0 is refused (exit 2)" [ $? -eq 2 ]
# record --preload leaves the batch to the library (16) unless told; 1 is immediate reports
env -u MEMPROF_BATCH "$CTL" record --preload -o "$T/envdef.ctf" -- env >"$T/envdef.out" 2>/dev/null
ok "record --preload: MEMPROF_BATCH left to the library" \
	eval "! grep -q '^MEMPROF_BATCH=' '$T/envdef.out'"
"$CTL" record --preload --batch 1 -o "$T/env1.ctf" -- env >"$T/env1.out" 2>/dev/null
ok "record --preload --batch 1: MEMPROF_BATCH=1" grep -qx MEMPROF_BATCH=1 "$T/env1.out"

# Accuracy, as fast-stats.sh, in deferred mode.
record batch-hist --preload --batch 8 -r 0.01 --seed 12345 -o "$T/batch-hist.ctf" -- \
	"$WL/wl_alloc" equal 8000 800 400
ok "hist: exit status 0" [ "$rc" -eq 0 ]
preload_mode hist "$T/batch-hist.ctf"
clean hist "$T/batch-hist.ctf"
"$CHECK" hist "$T/batch-hist.ctf" wl_site_equal 8000 800

record batch-sites --preload --batch 16 -r 1e-2 --seed 7 -o "$T/batch-sites.ctf" -- \
	"$WL/wl_alloc" sites 1
ok "sites: exit status 0" [ "$rc" -eq 0 ]
preload_mode sites "$T/batch-sites.ctf"
clean sites "$T/batch-sites.ctf"
"$CHECK" sites "$T/batch-sites.ctf" "$T/batch-sites.out"

record batch-cxx --preload --batch 4 --interval 800 --seed 7 -o "$T/batch-cxx.ctf" -- "$WL/wl_cxx"
ok "C++: exit status 0" [ "$rc" -eq 0 ]
clean C++ "$T/batch-cxx.ctf"
"$CHECK" sites "$T/batch-cxx.ctf" "$T/batch-cxx.out"

# Queued at exit: 5 samples < the batch of 16; then 21 = one batch of 16 out, 5 queued.
for n in 5 21; do
	record "batch-exit-$n" --preload --batch 16 -r 0.5 --seed 3 -o "$T/batch-exit-$n.ctf" -- \
		"$PL/pl_batch" exit "$n"
	ok "exit $n: exit status 0" [ "$rc" -eq 0 ]
	got=$(allocs_at "$T/batch-exit-$n.ctf" batch_site_exit)
	ok "exit $n: every sample reported, the queued ones by the destructor ($got of $n)" \
		[ "$got" -eq "$n" ]
	"$CHECK" sites "$T/batch-exit-$n.ctf" "$T/batch-exit-$n.out" batch_site_exit
done

# Freed while queued: alloc then free, never an unmatched free.
record batch-fp --preload --batch 16 -r 0.5 --seed 3 -o "$T/batch-fp.ctf" -- \
	"$PL/pl_batch" freepending 400
ok "freepending: exit status 0" [ "$rc" -eq 0 ]
clean freepending "$T/batch-fp.ctf"
got=$(allocs_at "$T/batch-fp.ctf" batch_site_fp)
ok "freepending: every sample reported ($got of 400)" [ "$got" -eq 400 ]
"$CHECK" sites "$T/batch-fp.ctf" "$T/batch-fp.out" batch_site_fp

# Fork: the parent's queued samples are the parent's.
record batch-fork --preload --batch 16 -r 0.5 --seed 3 -o "$T/batch-fork.ctf" -- \
	"$PL/pl_batch" fork 5
ok "fork: exit status 0" [ "$rc" -eq 0 ]
got=$(allocs_at "$T/batch-fork.ctf" batch_site_parent)
ok "fork: the parent's samples in the parent's trace ($got of 5)" [ "$got" -eq 5 ]
child=$(ls "$T"/batch-fork.ctf.* 2>/dev/null | head -1)
ok "fork: the child has a trace" [ -n "$child" ]
if [ -n "$child" ]; then
	got=$(allocs_at "$child" batch_site_parent)
	ok "fork: none of the parent's samples in the child's trace ($got)" [ "$got" -eq 0 ]
	got=$(allocs_at "$child" batch_site_child)
	# the child's first allocation re-arms at the child's own generation: not sampled
	ok "fork: the child's own samples ($got of 4 or 5)" [ "$got" -ge 4 ]
fi

# Signal handlers allocate and free while the main loop holds the queue (every 200 µs: with
# probes attached, at 20 µs the handlers take all the time and the loop never ends).
record batch-signal --preload --batch 4 -r 0.01 --seed 5 -o "$T/batch-signal.ctf" -- \
	"$PL/pl_signal" 1 200
ok "signal: exit status 0" [ "$rc" -eq 0 ]
clean signal "$T/batch-signal.ctf"
# Without BPF, with the hook log: every free after its alloc, no alloc at a live address.
if timeout 60 env LD_PRELOAD="$MP_BUILD/lib/libmemprof-preload.so" MEMPROF_BATCH=4 \
	MEMPROF_RATE=0.001 MEMPROF_TEST_LOG=3 "$PL/pl_signal" 1 50 >"$T/sig-log.out" 2>&1 \
	3>"$T/sig.log"; then
	pass "signal (hook log): $(tr '\n' ' ' <"$T/sig-log.out")"
	"$PL/pl_check" -n batch-signal-log -l "$T/sig.log" -s
else
	fail "signal (hook log): exit $?"
fi

"$CHECK" strict "$T"/batch-*.ctf
exit 0
