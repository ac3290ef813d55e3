#!/bin/bash
# record --preload: the allocation that arms a thread is sampled as any other. Each of 8 threads
# allocates one 4 MiB block, its first allocation, and nothing else; at the default rate each
# block holds ~52 sample points, so the estimate must match (trace_check sites: within 4
# standard errors). The library used to start a thread's first gap after that block: 0 bytes.
. "$(dirname "$0")/record.lib"

record first --preload -o "$T/first.ctf" -- "$WL/wl_alloc" threads 8 1 4194304
ok "threads' first blocks: exit status 0" [ "$rc" -eq 0 ]
ok "threads' first blocks: sampled in-process" grep -q "sampled in-process" "$T/first.err"
"$CHECK" sites "$T/first.ctf" "$T/first.out"
