#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Each component builds on its own (the Makefile's component targets): `make B=TMP codec client
# stacks` compiles just those into an empty build directory and checks their includes; every
# other component target resolves (make -n); the full build's objects include only what the
# Makefile's "Components" edges allow (make check-includes); and a component that includes a
# header of a component it does not use is refused (stacks without its edge to probe).
set -u
src=${MP_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
pass() { echo "PASS: component-build: $*"; }
bad() { echo "FAIL: component-build: $*"; sed 's/^/    /' "$tmp/out" | tail -n 20; fail=1; }

if make -s -C "$src" --no-print-directory B="$tmp/b" codec client stacks > "$tmp/out" 2>&1; then
	pass "codec, client and stacks build alone into an empty build directory"
else
	bad "make codec client stacks"
fi
objs=$(cd "$tmp/b" && find . -name '*.o' | sed 's|^\./||' | sort)
others=$(echo "$objs" | grep -Ev '^(userspace-lib/codec|userspace-lib/client|daemon/stacks)/')
if [ -n "$others" ]; then
	echo "$others" > "$tmp/out"; bad "objects of other components were built"
elif (for d in userspace-lib/codec userspace-lib/client daemon/stacks; do
	echo "$objs" | grep -q "^$d/" || exit 1; done); then
	pass "only their own objects, one folder each"
else
	echo "$objs" > "$tmp/out"; bad "a component built no object"
fi

if make -n -C "$src" --no-print-directory B="$tmp/dry" probe engine service preload report cli \
	> "$tmp/out" 2>&1; then
	pass "probe, engine, service, preload, report and cli targets resolve (make -n)"
else
	bad "make -n of the other component targets"
fi

if [ -n "${MP_BUILD:-}" ] && [ -d "$MP_BUILD" ]; then
	if make -s -C "$src" --no-print-directory B="$MP_BUILD" check-includes > "$tmp/out" 2>&1
	then
		pass "every component of the build includes only what its edges allow"
	else
		bad "make check-includes on $MP_BUILD"
	fi
fi

# The check can fail: stacks' one edge (probe's target_open.h) taken away.
if make -s -C "$src" --no-print-directory B="$tmp/b" COMP_USES_stacks= stacks > "$tmp/out" 2>&1
then
	bad "stacks without its edge to probe passed the include check"
elif grep -q "component 'stacks': .*includes 'daemon/probe/target_open.h'" "$tmp/out"; then
	pass "an include across a missing edge is refused, naming the header"
else
	bad "stacks without its edge failed for another reason"
fi
# A generated header of another component, included by its absolute path in a build directory
# outside the tree, is checked too; a system header is not.
printf 'x.o: x.c %s /usr/include/stdio.h\n' "$tmp/b/gen/report/profile.pb-c.h" > "$tmp/x.d"
if (cd "$src" && CHECK_INCLUDES_BUILD="$tmp/b" scripts/check-includes stacks 'daemon/stacks/' \
	"$tmp/x.d") > "$tmp/out" 2>&1; then
	bad "a build directory's header of another component passed the include check"
elif grep -q "includes '$tmp/b/gen/report/profile.pb-c.h'" "$tmp/out" &&
     ! grep -q stdio.h "$tmp/out"; then
	pass "an absolute include from the build directory is checked, a system header is not"
else
	bad "the absolute-path include check failed for another reason"
	cat "$tmp/out"
fi
exit $fail
