#!/bin/bash
# libmemprof-preload reports frees by block id, batched (memprofctl record --preload --batch 1:
# immediate reports, one trap per sample; real BPF):
#  - reuse: a block freed by another thread while its address is handed out again at once by
#    the allocating thread (the free still pending in the library's batch): keyed by id, each
#    free collects its own block; keyed by address, the second block would be collected and
#    the first left live. Estimates and live words at exit within their SE (rate 0.5).
#  - exitfree: a program that frees sampled blocks and exits without allocating again: the
#    frees still pending at exit are reported by the library's destructor, none shows live.
#  - remap: an anonymous mapping mapped over again at its own address (MAP_FIXED): the library
#    never saw the first one's end, so it must report the first id when the address comes back
#    and track the second under its own id; none shows live.
. "$(dirname "$0")/record.lib"
PL=$MP_BUILD/tests/preload/pl_ids
[ -x "$PL" ] || { echo "FAIL: missing $PL (make test-bins)"; exit 1; }

record ids-reuse --preload --batch 1 -r 0.5 --seed 3 -o "$T/ids-reuse.ctf" -- "$PL" reuse 3000
ok "reuse: exit status 0" [ "$rc" -eq 0 ]
ok "reuse: profiled in preload mode" grep -q " mode=preload;" <(context_of "$T/ids-reuse.ctf")
reused=$(sed -n 's/^REUSED //p' "$T/ids-reuse.out")
ok "reuse: addresses handed out again before their frees were reported (${reused:-0}/3000)" \
	[ "${reused:-0}" -ge 1500 ]
ctx=$(context_of "$T/ids-reuse.ctf")
ok "reuse: no ring-buffer drop" grep -q "ringbuf=0 " <<<"$ctx"
ok "reuse: no stale block" grep -q "stale_blocks=0 " <<<"$ctx"
"$CHECK" sites "$T/ids-reuse.ctf" "$T/ids-reuse.out" ids_site_first ids_site_second

record ids-exitfree --preload --batch 1 -r 0.5 --seed 3 -o "$T/ids-exitfree.ctf" -- "$PL" exitfree 100
ok "exitfree: exit status 0" [ "$rc" -eq 0 ]
pending=$(sed -n 's/.*PENDING //p' "$T/ids-exitfree.err")
ok "exitfree: frees were pending at exit (${pending:-none})" [ "${pending:-0}" -gt 0 ]
"$CHECK" sites "$T/ids-exitfree.ctf" "$T/ids-exitfree.out" ids_site_exit

record ids-remap --preload --batch 1 -r 0.5 --seed 3 -o "$T/ids-remap.ctf" -- "$PL" remap 200
ok "remap: exit status 0" [ "$rc" -eq 0 ]
"$CHECK" sites "$T/ids-remap.ctf" "$T/ids-remap.out" ids_site_remap

"$CHECK" strict "$T"/ids-*.ctf
exit 0
