#!/bin/bash
# Run the memtrace reader's libFuzzer target for 60 s, seeded with the upstream fixtures.
# Fails on any crash, leak, timeout or sanitizer report; skips only if the target was not built
# (make fuzz).
set -u
bin=$MP_BUILD/fuzz/fuzz_reader
if [ ! -x "$bin" ]; then
	echo "fuzz target $bin not built (make fuzz)"
	exit 77
fi
tmp=${MP_TMP:-$(mktemp -d)}
corpus=$tmp/corpus
mkdir -p "$corpus" "$tmp/artifacts"
cp "$MP_SRC"/tests/fixtures/memtrace/*.ctf "$corpus"/
# A zstd seed so the decompressing path is explored too.
if command -v zstd >/dev/null; then
	zstd -q -c "$MP_SRC/tests/fixtures/memtrace/upstream-v2.ctf" >"$corpus/upstream-v2.ctf.zst"
fi
"$bin" -max_total_time="${MP_FUZZ_SECONDS:-60}" -timeout=10 -rss_limit_mb=2048 \
	-max_len=70000 -print_final_stats=1 -artifact_prefix="$tmp/artifacts/" \
	"$corpus" >"$tmp/fuzz.log" 2>&1
rc=$?
tail -n 15 "$tmp/fuzz.log"
if [ $rc -ne 0 ] || ls "$tmp"/artifacts/* >/dev/null 2>&1; then
	echo "fuzz_reader failed (exit $rc); artifacts:"
	ls -l "$tmp"/artifacts/
	exit 1
fi
grep -q 'Done [0-9]* runs' "$tmp/fuzz.log" || { echo "fuzzer did not finish its run"; exit 1; }
exit 0
