#!/bin/bash
# memprofctl built with ASan+UBSan ($MP_ASAN_BUILD, made by `make check`) records real
# workloads: threads with cross-thread frees, fork and exec followed, every block sampled
# (entry tables growing and shrinking), C++ with DWARF unwinding, and Debian's python3 (no
# frame pointers: stack copies, libdw unwinding, symbolization with inlined frames), and
# forks on the fast path (libmemprof-preload's USDT links attached and destroyed). Any
# sanitizer report fails the run (UBSan does not recover in that build); each trace must read
# back strictly.
. "$(dirname "$0")/record.lib"

CTL=$MP_ASAN_BUILD/bin/memprofctl
if [ ! -x "$CTL" ]; then
	echo "SKIP: no sanitizer build of memprofctl in $MP_ASAN_BUILD (make check makes one)"
	exit 77
fi
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1

clean() { ! grep -q "ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|runtime error:" "$1"; }

san() {	# name record-args...
	local name=$1; shift
	record "$name" "$@"
	ok "$name: exit status 0 under ASan+UBSan (was $rc)" [ "$rc" -eq 0 ]
	ok "$name: no sanitizer report" clean "$T/$name.err"
}

san threads -r 1e-3 -o "$T/threads.ctf" -- "$WL/wl_alloc" threads 4 20000 500
san fork -r 1e-3 -o "$T/fork.ctf" -- "$WL/wl_alloc" fork
san exec -r 1e-3 -o "$T/exec.ctf" -- "$WL/wl_alloc" exec
san rate1 -r 1 -o "$T/rate1.ctf" -- "$WL/wl_alloc" equal 100000 24
san cxx -r 1e-2 --unwind dwarf -o "$T/cxx.ctf" -- "$WL/wl_cxx"
san python -r 1e-2 -o "$T/python.ctf" -- /usr/bin/python3 "$MP_SRC/bench/scripts/alloc.py" 4
# The fast path across a fork: each process' USDT links are destroyed by concurrent threads
# when it exits (libbpf's USDT bookkeeping, shared by all of them, was freed twice this way in
# one run of ~10 under ASan; tests/unit/loader-no-libbpf-usdt.sh is the deterministic check).
for i in 1 2 3 4 5; do
	san "preload-fork-$i" --preload="$MP_BUILD/lib/libmemprof-preload.so" -r 1e-4 \
		-o "$T/plfork$i.ctf" -- "$WL/wl_alloc" fork
done
for f in "$T"/*.ctf*; do
	[ -f "$f" ] && "$CHECK" strict "$f"
done
exit 0
