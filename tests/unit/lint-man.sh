#!/bin/bash
# Every man page must be clean under mandoc's linter at warning level.
set -u
command -v mandoc >/dev/null || { echo "mandoc not installed"; exit 77; }
shopt -s nullglob
pages=("$MP_SRC"/man/*.[0-9])
[ ${#pages[@]} -gt 0 ] || { echo "no man pages in $MP_SRC/man"; exit 1; }
fail=0
for p in "${pages[@]}"; do
	out=$(mandoc -Tlint -Wwarning "$p" 2>&1)
	if [ -n "$out" ]; then
		echo "FAIL: lint-man $(basename "$p")"
		echo "$out"
		fail=1
	else
		echo "PASS: lint-man $(basename "$p")"
	fi
done
exit $fail
