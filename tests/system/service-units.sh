#!/bin/bash
# The unit files pass `systemd-analyze verify` (offline, with a private tmpfs on /run since
# it writes there), a broken copy does not, and the hardening's exposure stays at or below 2.1.
set -u
MP_SRC=${MP_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
MP_BUILD=${MP_BUILD:-$MP_SRC/build}
MP_TMP=${MP_TMP:-$(mktemp -d)}
[ "$(id -u)" = 0 ] || { echo "needs root (unshare -m)"; exit 77; }
command -v systemd-analyze > /dev/null || { echo "no systemd-analyze"; exit 77; }
[ -x "$MP_BUILD/bin/memprofd" ] || { echo "FAIL: no $MP_BUILD/bin/memprofd"; exit 1; }
FAILS=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }

# verify checks that ExecStart= exists: point it at the built daemon, as `make install` does
# with its own sbindir.
U=$MP_TMP/units
mkdir -p "$U"
sed "s|/usr/local/sbin/memprofd|$MP_BUILD/bin/memprofd|" "$MP_SRC/systemd/memprofd.service" \
	> "$U/memprofd.service"
cp "$MP_SRC/systemd/memprofd.socket" "$U/"
offline() { unshare -m --propagation private sh -c 'mount -t tmpfs tmpfs /run && "$@"' sh "$@"; }

if out=$(cd "$U" && offline env SYSTEMD_LOG_LEVEL=warning systemd-analyze verify --man=no \
		./memprofd.socket ./memprofd.service 2>&1) && [ -z "$out" ]; then
	pass "systemd-analyze verify memprofd.service memprofd.socket"
else
	echo "$out"
	fail "systemd-analyze verify memprofd.service memprofd.socket"
fi
sed 's|^ExecStart=.*|ExecStart=relative/memprofd|' "$U/memprofd.service" > "$U/broken.service"
if (cd "$U" && offline systemd-analyze verify --man=no ./broken.service) > /dev/null 2>&1; then
	fail "systemd-analyze verify rejects a broken copy"
else
	pass "systemd-analyze verify rejects a broken copy"
fi
# The exposure may not grow past the hardened unit's (2.1), so that a sandbox directive dropped
# by mistake is caught; a copy with PrivateNetwork=no (2.5) must fail the bound, so that the
# check can tell a weaker unit.
MAX_EXPOSURE=2.1
exposure() {	# exposure UNIT-FILE (in $U)
	(cd "$U" && offline systemd-analyze security --offline=true --no-pager "./$1" 2>&1) |
		sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\) .*/\1/p'
}
at_most() { [ -n "$1" ] && awk -v s="$1" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(s <= m) }'; }
score=$(exposure memprofd.service)
if at_most "$score"; then
	pass "hardening: exposure $score (<= $MAX_EXPOSURE)"
else
	fail "hardening: exposure '${score:-?}' (want <= $MAX_EXPOSURE)"
fi
sed 's/^PrivateNetwork=yes$/PrivateNetwork=no/' "$U/memprofd.service" > "$U/weaker.service"
score=$(exposure weaker.service)
if [ -n "$score" ] && ! at_most "$score"; then
	pass "hardening: a weaker copy (PrivateNetwork=no) is over the bound ($score)"
else
	fail "hardening: a weaker copy (PrivateNetwork=no) scores '${score:-?}', not over $MAX_EXPOSURE"
fi
exit $((FAILS > 0))
