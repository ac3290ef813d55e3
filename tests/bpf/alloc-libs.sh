#!/bin/bash
# memprofctl record on programs that use another allocator than glibc's: Debian's jemalloc,
# tcmalloc (full and minimal), mimalloc, and jemalloc linked statically into the executable.
# Each workload allocates through the standard API (interposed by the allocator, so glibc's
# malloc, probed too, must not count it again) and the allocator's own API (mallocx/rallocx/
# xallocx/sdallocx/dallocx, tc_*, mi_*). Same checks as record-stats.sh: estimated words per
# site within 4 SE of the truth at a fixed --seed, sampled blocks of freed sites all collected,
# leaked ones live at exit, no ring-buffer drop, strict decoding.
. "$(dirname "$0")/record.lib"

for wl in wl_jemalloc wl_jemalloc_static wl_tcmalloc wl_tcmalloc_minimal wl_mimalloc; do
	if [ ! -x "$WL/$wl" ]; then
		fail "missing $WL/$wl (make test-bins)"
		continue
	fi
	record "$wl" -r 1e-3 --seed 4242 -o "$T/$wl.ctf" -- "$WL/$wl" api 1
	ok "$wl: exit status 0" [ "$rc" -eq 0 ]
	ok "$wl: no ring-buffer drop" grep -q "ringbuf=0 " <(context_of "$T/$wl.ctf")
	"$CHECK" sites "$T/$wl.ctf" "$T/$wl.out"
done

# The statically linked copy is probed in the executable itself (its .symtab/.dynsym).
ok "static jemalloc: malloc and mallocx are the executable's" \
	bash -c "nm '$WL/wl_jemalloc_static' | grep -q ' T mallocx$' &&
		! ldd '$WL/wl_jemalloc_static' | grep -q jemalloc"

"$CHECK" strict "$T"/*.ctf
exit 0
