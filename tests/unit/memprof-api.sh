#!/bin/bash
# The in-process API (<memprof/memprof.h>): the C test linked against libmemprof-preload (not
# an ASan test: ASan's allocator would replace the interposers), with a fixed seed, and the
# leak-finder example, which must name the leaking function first.
set -u
MP_BUILD=${MP_BUILD:-$(cd "$(dirname "$0")/../.." && pwd)/build}
T=$MP_BUILD/tests/preload/test_memprof_api
EX=$MP_BUILD/examples/memprof_api_example
for f in "$T" "$EX"; do
	[ -x "$f" ] || { echo "FAIL: memprof-api: '$f' is not built (make all test-bins)"; exit 1; }
done
rc=0
MEMPROF_SEED=12345 "$T" || rc=1
out=$(MEMPROF_SEED=7 "$EX" 1e-3) || rc=1
echo "$out" | sed 's/^/# /'
if echo "$out" | awk 'NR == 3 { exit !($3 ~ /^leak_cache_entry\+/) }'; then
	echo "PASS: memprof-api-example names the leak"
else
	echo "FAIL: memprof-api-example names the leak"
	rc=1
fi
exit $rc
