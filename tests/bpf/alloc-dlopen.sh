#!/bin/bash
# An allocator that appears after the profile started: wl_dlopen dlopens libwl_dlalloc.so, which
# brings libmimalloc into the process; ld.so's rendezvous (_dl_debug_state) makes the loader
# probe both, so mi_malloc/mi_calloc/mi_free calls from the new object are sampled and matched,
# as are glibc malloc calls made from code that was not mapped at start.
. "$(dirname "$0")/record.lib"

for f in "$WL/wl_dlopen" "$WL/libwl_dlalloc.so"; do
	[ -e "$f" ] || { fail "missing $f (make test-bins)"; exit 1; }
done
ok "libmimalloc is not mapped before dlopen" bash -c "! ldd '$WL/wl_dlopen' | grep -q mimalloc"
record dlopen -r 1e-3 --seed 777 -o "$T/dlopen.ctf" -- "$WL/wl_dlopen" "$WL/libwl_dlalloc.so" 1
ok "dlopen: exit status 0" [ "$rc" -eq 0 ]
ok "dlopen: no ring-buffer drop" grep -q "ringbuf=0 " <(context_of "$T/dlopen.ctf")
"$CHECK" sites "$T/dlopen.ctf" "$T/dlopen.out"
"$CHECK" strict "$T/dlopen.ctf"
exit 0
