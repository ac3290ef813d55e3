#!/bin/bash
# Run the memtrace reader's libFuzzer target for 60 s, seeded with the upstream fixtures.
# Fails on any crash, leak, timeout or sanitizer report; skips only if the target was not built
# (make fuzz).
set -u
. "$(dirname "$0")/fuzz.inc"
seeds=${MP_TMP:-$(mktemp -d)}/seeds
mkdir -p "$seeds"
cp "$MP_SRC"/tests/fixtures/memtrace/*.ctf "$seeds"/
# A zstd seed so the decompressing path is explored too.
if command -v zstd >/dev/null; then
	zstd -q -c "$MP_SRC/tests/fixtures/memtrace/upstream-v2.ctf" >"$seeds/upstream-v2.ctf.zst"
fi
run_fuzzer "$MP_BUILD/fuzz/fuzz_reader" "$seeds" 70000
