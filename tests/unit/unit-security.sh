#!/bin/bash
# systemd/memprofd.service must stay at or below the exposure `systemd-analyze security` gave it
# when issue #15 was filed: 2.1 (of 10), checked offline on the unit file as shipped. A copy
# with PrivateNetwork=no must exceed it, so that the check can tell a weaker unit.
set -u
MAX=2.1
command -v systemd-analyze >/dev/null || { echo "systemd-analyze missing (Debian package systemd)"; exit 77; }
unit=$MP_SRC/systemd/memprofd.service
tmp=${MP_TMP:-$(mktemp -d)}
exposure() {	# exposure UNIT-FILE: the overall exposure level
	systemd-analyze security --offline=true "$1" 2>&1 |
		sed -n 's/^.*Overall exposure level for [^:]*: \([0-9.]*\) .*/\1/p'
}
fail=0
e=$(exposure "$unit")
if [ -n "$e" ] && awk -v e="$e" -v m="$MAX" 'BEGIN { exit !(e <= m) }'; then
	echo "PASS: memprofd.service exposure $e <= $MAX"
else
	echo "FAIL: memprofd.service exposure '${e:-none}' is above $MAX:"
	systemd-analyze security --offline=true "$unit" 2>&1 | grep '✗' | head -n 40
	fail=1
fi
sed 's/^PrivateNetwork=yes$/PrivateNetwork=no/' "$unit" > "$tmp/memprofd.service"
w=$(exposure "$tmp/memprofd.service")
if [ -n "$w" ] && awk -v e="$w" -v m="$MAX" 'BEGIN { exit !(e > m) }'; then
	echo "PASS: a weaker copy (PrivateNetwork=no) is caught: $w > $MAX"
else
	echo "FAIL: a copy with PrivateNetwork=no scores '${w:-none}', not above $MAX"
	fail=1
fi
exit $fail
