#!/bin/bash
# Run the control API's libFuzzer target (tests/fuzz/fuzz_bus.c: D-Bus byte streams through a
# real connection to memprofd's own bus handlers, in-process, without BPF) for 60 s, seeded
# with tests/fuzz/corpus-bus (tests/fuzz/gen-bus-corpus.py). Fails on any crash, leak, timeout
# or sanitizer report; skips only if the target was not built (make fuzz).
set -u
. "$(dirname "$0")/fuzz.inc"
run_fuzzer "$MP_BUILD/fuzz/fuzz_bus" "$MP_SRC/tests/fuzz/corpus-bus" 8192
