#!/bin/bash
# The cooperative fast path through the engine API (daemon/engine/engine.h), on real BPF: the checks of
# record-engine.sh (start errors, stop keeps recording frees of sampled blocks while the library
# stops sampling, a process moved to a second profile, implicit stop, duration, discard) with
# the workload running under LD_PRELOAD=libmemprof-preload.so, and the engine reports preload
# mode for it.
. "$(dirname "$0")/record.lib"
LIB=$MP_BUILD/lib/libmemprof-preload.so
[ -f "$LIB" ] || { echo "FAIL: missing $LIB (make all)"; exit 1; }
ENGINE_CHECK_PRELOAD=$LIB exec "$MP_BUILD/tests/bpf/engine_check" "$WL/wl_alloc" "$T"
