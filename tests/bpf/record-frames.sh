#!/bin/bash
# memprofctl record: backtraces name the workload's own functions, outermost first and the
# allocation site last; --callstack-size truncates to the innermost frames and says so in the
# trace's context; format version 3 and zstd traces read strictly.
. "$(dirname "$0")/record.lib"

record deep -r 1e-3 -o "$T/deep.ctf" -- "$WL/wl_alloc" deep
ok "deep: exit status 0" [ "$rc" -eq 0 ]
frames=$("$CHECK" frames "$T/deep.ctf" wl_site_deep)
echo "    frames: $frames"
ok "backtrace ends main wl_deep_a wl_deep_b wl_site_deep" \
	grep -Eq '(^| )main wl_deep_a wl_deep_b wl_site_deep$' <<<"$frames"
"$CHECK" sites "$T/deep.ctf" "$T/deep.out"

record short -r 1e-3 --callstack-size 2 -o "$T/short.ctf" -- "$WL/wl_alloc" deep
frames=$("$CHECK" frames "$T/short.ctf" wl_site_deep)
ok "--callstack-size 2 keeps the innermost two frames" [ "$frames" = "wl_deep_b wl_site_deep" ]
ok "truncation noted in the context" grep -q "callstack_size=2 " <(context_of "$T/short.ctf")
ok "truncated stacks counted in the context" \
	grep -Eq "truncated_stacks=[1-9]" <(context_of "$T/short.ctf")

record v3 -r 1e-3 --format-version 3 -o "$T/v3.ctf" -- "$WL/wl_alloc" deep
ok "--format-version 3 writes version 3" grep -qx "version 3" <("$CHECK" info "$T/v3.ctf")

record zstd -r 1e-3 --zstd -o "$T/z.ctf.zst" -- "$WL/wl_alloc" deep
magic=$(head -c 4 "$T/z.ctf.zst" | od -An -tx1 | tr -d ' ')
ok "--zstd writes a zstd stream" [ "$magic" = 28b52ffd ]
"$CHECK" sites "$T/z.ctf.zst" "$T/zstd.out"

# the trace-info packet
info=$("$CHECK" info "$T/deep.ctf")
ok "trace-info: executable" grep -qx "exe $(readlink -f "$WL/wl_alloc")" <<<"$info"
ok "trace-info: word size 64" grep -qx "word_size 64" <<<"$info"
ok "trace-info: rate" grep -qx "rate 0.001" <<<"$info"

# --json: the summary is one JSON document (on stderr; stdout is CMD's)
"$CTL" --json record -r 1e-3 -o "$T/json.ctf" -- "$WL/wl_alloc" deep >/dev/null 2>"$T/json.err"
ok "--json summary: status, trace, samples" /usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
p = d["processes"][0]
assert d["status"] == 0 and p["trace"] == sys.argv[2] and p["samples"] >= p["sampled_blocks"] > 0
assert p["live_bytes"] == p["allocated_bytes"] and d["drops"]["ringbuf_drops"] == 0
' "$T/json.err" "$T/json.ctf"

"$CHECK" strict "$T"/*.ctf "$T"/z.ctf.zst
exit 0
