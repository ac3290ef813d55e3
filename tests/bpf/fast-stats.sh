#!/bin/bash
# The cooperative fast path (memprofctl record --preload: libmemprof-preload samples in-process,
# BPF sees only sampled blocks and their frees through its USDT probes), statistics on real
# probes: the checks of record-stats.sh. n_samples ~ Binomial(words, λ) (chi-square; the
# library's samplers are seeded by --seed through MEMPROF_SEED, so each run is reproducible),
# estimated bytes per known site within 4 SE at rates 1e-4 and 1e-2, leaks live at exit and
# freed blocks collected, C++ new/delete, cross-thread frees. Every trace says mode=preload.
# Immediate reports (--batch 1, a trap per sample); preload-batch.sh runs the same
# accuracy checks with deferred ones (the default).
. "$(dirname "$0")/record.lib"
LIB=$MP_BUILD/lib/libmemprof-preload.so
[ -f "$LIB" ] || { echo "FAIL: missing $LIB (make all)"; exit 1; }

preload_mode() {	# name trace
	ok "$1: profiled in preload mode" grep -q " mode=preload;" <(context_of "$2")
}

# Chi-square of n_samples, n = 0 included (blocks never reported). The workload pauses every few
# hundred blocks so the ring buffer never overflows (a lost event would count as n = 0).
hist() {	# name rate blocks size pause
	record "$1" --preload --batch 1 -r "$2" --seed 12345 -o "$T/$1.ctf" -- \
		"$WL/wl_alloc" equal "$3" "$4" "$5"
	ok "$1: exit status 0" [ "$rc" -eq 0 ]
	ok "$1: no ring-buffer drop" grep -q "ringbuf=0 " <(context_of "$T/$1.ctf")
	preload_mode "$1" "$T/$1.ctf"
	"$CHECK" hist "$T/$1.ctf" wl_site_equal "$3" "$4"
}
hist fast-hist-101w 0.01 8000 800 400
hist fast-hist-4w 0.1 12000 24 400

# Requested bytes of blocks of 16 B to 1 MiB (record.lib)
bytes_check fast-bytes-1e-4 1e-4 --preload --batch 1
bytes_check fast-bytes-1e-2 1e-2 --preload --batch 1

# Totals per site at two rates, sizes on both sides of 1/λ.
record fast-sites-1e-4 --preload --batch 1 -r 1e-4 --seed 7 -o "$T/sites-1e-4.ctf" -- "$WL/wl_alloc" sites 2
ok "sites at 1e-4: exit status 0" [ "$rc" -eq 0 ]
preload_mode "sites at 1e-4" "$T/sites-1e-4.ctf"
"$CHECK" sites "$T/sites-1e-4.ctf" "$T/fast-sites-1e-4.out"
# The summary's library counters are read when the process stops at its exit, so they count
# every sample the trace has (they were otherwise last read at the 256th sampled block).
drawn_all() {	# name: "N samples in M blocks" and "(N samples drawn" agree, N > 0
	local n d
	n=$(sed -n 's/^memprofctl record: .* (pid [0-9]*): \([0-9]*\) samples in .*/\1/p' \
		"$T/$1.err")
	d=$(sed -n 's/.*libmemprof-preload (\([0-9]*\) samples drawn.*/\1/p' "$T/$1.err")
	ok "$1: the library drew the trace's $n samples (says $d)" [ -n "$n" -a "$n" != 0 -a "$n" = "$d" ]
}
drawn_all fast-sites-1e-4

record fast-sites-1e-2 --preload --batch 1 -r 1e-2 --seed 7 -o "$T/sites-1e-2.ctf" -- "$WL/wl_alloc" sites 1
ok "sites at 1e-2: exit status 0" [ "$rc" -eq 0 ]
preload_mode "sites at 1e-2" "$T/sites-1e-2.ctf"
"$CHECK" sites "$T/sites-1e-2.ctf" "$T/fast-sites-1e-2.out"
ok "sites at 1e-2: no ring-buffer drop" grep -q "ringbuf=0 " <(context_of "$T/sites-1e-2.ctf")
ok "sites at 1e-2: no unmatched free, no stale block" \
	grep -q "unmatched_frees=0 stale_blocks=0 " <(context_of "$T/sites-1e-2.ctf")
ok "sites at 1e-2: the summary says the library sampled" \
	grep -q "sampled in-process by libmemprof-preload" "$T/fast-sites-1e-2.err"

# --interval: 8 / 800 = 1e-2 per word; C++ new/delete go through the library's operators.
record fast-cxx --preload --batch 1 --interval 800 --seed 7 -o "$T/cxx.ctf" -- "$WL/wl_cxx"
ok "C++: exit status 0" [ "$rc" -eq 0 ]
preload_mode "C++" "$T/cxx.ctf"
ok "--interval 800 is rate 0.01" grep -qx "rate 0.01" <("$CHECK" info "$T/cxx.ctf")
"$CHECK" sites "$T/cxx.ctf" "$T/fast-cxx.out"

# Four threads allocate, main frees everything after they exited (orphans, cross-thread).
record fast-threads --preload --batch 1 -r 1e-3 --seed 7 -o "$T/threads.ctf" -- \
	"$WL/wl_alloc" threads 4 20000 500
ok "threads: exit status 0" [ "$rc" -eq 0 ]
preload_mode "threads" "$T/threads.ctf"
"$CHECK" sites "$T/threads.ctf" "$T/fast-threads.out"
# threads stop at no exit of theirs; the process' leader does, after them
drawn_all fast-threads

# The stack starts in the caller: no frame of the library is left on top.
record fast-deep --preload --batch 1 -r 1 -o "$T/deep.ctf" -- "$WL/wl_alloc" deep
ok "deep: exit status 0" [ "$rc" -eq 0 ]
ok "deep: innermost frames are the workload's (library frames skipped)" \
	grep -Eq "wl_deep_a wl_deep_b wl_site_deep$" <("$CHECK" frames "$T/deep.ctf" wl_site_deep)

# The library walks frame pointers in-process; MEMPROF_WALK=0 leaves the walk to BPF
# (bpf_get_stack from the probe). Both give the same stacks, on the main thread's stack and on
# threads' stacks.
MEMPROF_WALK=0 record fast-deep-bpfwalk --preload --batch 1 -r 1 -o "$T/deep-bpfwalk.ctf" -- \
	"$WL/wl_alloc" deep
ok "deep, walked by BPF: exit status 0" [ "$rc" -eq 0 ]
ok "deep: the library's walk and BPF's give the same frames" \
	cmp -s <("$CHECK" frames "$T/deep.ctf" wl_site_deep) \
	<("$CHECK" frames "$T/deep-bpfwalk.ctf" wl_site_deep)
MEMPROF_WALK=0 record fast-threads-bpfwalk --preload --batch 1 -r 1e-3 --seed 7 \
	-o "$T/threads-bpfwalk.ctf" -- "$WL/wl_alloc" threads 4 20000 500
ok "threads, walked by BPF: exit status 0" [ "$rc" -eq 0 ]
frames_thread() { "$CHECK" frames "$1" wl_site_thread; }
ok "threads: the library's and BPF's walks agree ($(frames_thread "$T/threads.ctf"))" \
	cmp -s <(frames_thread "$T/threads.ctf") <(frames_thread "$T/threads-bpfwalk.ctf")

"$CHECK" strict "$T"/*.ctf
exit 0
