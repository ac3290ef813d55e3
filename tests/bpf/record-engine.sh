#!/bin/bash
# The sampling engine's API (daemon/engine/engine.h) on real BPF: start errors, stop, moving a process
# to a second profile, implicit stop, duration, output to a passed fd, discard.
. "$(dirname "$0")/record.lib"
exec "$MP_BUILD/tests/bpf/engine_check" "$WL/wl_alloc" "$T"
