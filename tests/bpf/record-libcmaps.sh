#!/bin/bash
# The C library's own mmaps are not allocations of the program and are never sampled: the
# mmap glibc's malloc makes for a big block (whether that malloc was sampled or not: at this
# rate about a quarter of them are not, and an unsampled malloc leaves no nesting state, see
# MP_COOKIE_F_LEAF), and the stacks pthread_create maps. The program's own mmaps are sampled.
# Each site's estimate is checked against its truth, and no sample may land anywhere else.
. "$(dirname "$0")/record.lib"

record libcmaps -r 1e-5 --seed 7 -o "$T/libcmaps.ctf" -- "$WL/wl_alloc" libcmaps 300
ok "libcmaps: exit status 0" [ "$rc" -eq 0 ]
"$CHECK" sites "$T/libcmaps.ctf" "$T/libcmaps.out"
"$CHECK" info "$T/libcmaps.ctf" >"$T/libcmaps.info"
ok "libcmaps: both program sites sampled" \
	[ "$(grep -c '^site wl_site_\(large\|mmap\) ' "$T/libcmaps.info")" -eq 2 ]
# Heap blocks that the C library itself takes with malloc or calloc (for the 8 threads, say)
# are allocations like any other and are sampled now and then (a calloc site failed one run):
# only the C library's mmaps must never be, and those show as sites of their own
others=$(grep '^site ' "$T/libcmaps.info" | grep -v '^site wl_site_' |
	grep -v '^site \(calloc\|malloc\) ' | tr '\n' ';')
ok "libcmaps: no sample outside the program's sites (${others:-none})" [ -z "$others" ]
"$CHECK" strict "$T/libcmaps.ctf"
exit 0
