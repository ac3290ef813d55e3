#!/bin/bash
# memprofctl record, statistics on real uprobes: n_samples ~ Binomial(words, λ) (chi-square),
# estimated bytes per known site within 4 SE at rates 1e-4 and 1e-2, leaks live at exit and
# freed blocks collected, C++ new/delete, cross-thread frees.
. "$(dirname "$0")/record.lib"

# Chi-square of n_samples, n = 0 included (blocks BPF did not send), for blocks on both sides
# of the mean gap. BPF's countdown is not seeded; the daemon's binomial completion is (--seed).
# The workload pauses every few hundred blocks so the ring buffer never overflows (a lost
# event would count as n = 0); the trace's context must show no ring-buffer drop.
hist() {	# name rate blocks size pause
	record "$1" -r "$2" --seed 12345 -o "$T/$1.ctf" -- "$WL/wl_alloc" equal "$3" "$4" "$5"
	ok "$1: exit status 0" [ "$rc" -eq 0 ]
	ok "$1: no ring-buffer drop" grep -q "ringbuf=0 " <(context_of "$T/$1.ctf")
	"$CHECK" hist "$T/$1.ctf" wl_site_equal "$3" "$4"
}
hist hist-101w 0.01 8000 800 400
hist hist-4w 0.1 12000 24 400

# Totals per site at two rates, sizes on both sides of 1/λ.
record sites-1e-4 -r 1e-4 -o "$T/sites-1e-4.ctf" -- "$WL/wl_alloc" sites 2
ok "sites at 1e-4: exit status 0" [ "$rc" -eq 0 ]
"$CHECK" sites "$T/sites-1e-4.ctf" "$T/sites-1e-4.out"

record sites-1e-2 -r 1e-2 -o "$T/sites-1e-2.ctf" -- "$WL/wl_alloc" sites 1
ok "sites at 1e-2: exit status 0" [ "$rc" -eq 0 ]
"$CHECK" sites "$T/sites-1e-2.ctf" "$T/sites-1e-2.out"
ok "sites at 1e-2: no ring-buffer drop" grep -q "ringbuf=0 " <(context_of "$T/sites-1e-2.ctf")

# Requested bytes (docs/sampling.md §4) of blocks of 16 B to 1 MiB, at two rates (record.lib)
bytes_check bytes-1e-4 1e-4
bytes_check bytes-1e-2 1e-2

# --interval: 8 / 800 = 1e-2 per word
record cxx --interval 800 -o "$T/cxx.ctf" -- "$WL/wl_cxx"
ok "C++: exit status 0" [ "$rc" -eq 0 ]
ok "--interval 800 is rate 0.01" grep -qx "rate 0.01" <("$CHECK" info "$T/cxx.ctf")
"$CHECK" sites "$T/cxx.ctf" "$T/cxx.out"

# Four threads allocate, main frees everything after they exited (orphans, cross-thread).
record threads -r 1e-3 -o "$T/threads.ctf" -- "$WL/wl_alloc" threads 4 20000 500
ok "threads: exit status 0" [ "$rc" -eq 0 ]
"$CHECK" sites "$T/threads.ctf" "$T/threads.out"

"$CHECK" strict "$T"/*.ctf
exit 0
