#!/bin/bash
# memprofctl built with ASan+UBSan ($MP_ASAN_BUILD, made by `make check`) records real
# workloads: threads with cross-thread frees, fork and exec followed, every block sampled
# (entry tables growing and shrinking), C++ with DWARF unwinding, and Debian's python3 (no
# frame pointers: stack copies, libdw unwinding, symbolization with inlined frames). Any
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
for f in "$T"/*.ctf*; do
	[ -f "$f" ] && "$CHECK" strict "$f"
done
exit 0
