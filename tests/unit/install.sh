#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# `make install DESTDIR=...` puts everything a user needs in place: programs, the library
# (shared, static, pkg-config), every public header, every man page in its section, the
# systemd units pointing at the installed memprofd, the D-Bus policy, and the preload library
# where the installed memprofctl looks for it. A program built against the installed tree with
# pkg-config reads a trace. Runs on the existing build (the libdir it was built for, so that
# nothing is rebuilt); no root needed.
set -u

src=${MP_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
build=${MP_BUILD:-$src/build}
tmp=${MP_TMP:-$(mktemp -d)}
root=$tmp/root
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
check() { local n=$1; shift; if "$@"; then pass "$n"; else fail "$n"; fi; }

[ -x "$build/bin/memprofctl" ] || { echo "FAIL: missing $build/bin/memprofctl (make all)"; exit 1; }
command -v pkg-config >/dev/null || { echo "needs pkg-config"; exit 77; }

prefix=/usr/local
libdir=$prefix/lib
[ -s "$build/gen/cli/libdir.stamp" ] && libdir=$(cat "$build/gen/cli/libdir.stamp")
if ! make -C "$src" --no-print-directory -s B="$build" DESTDIR="$root" prefix="$prefix" \
	libdir="$libdir" install > "$tmp/install.log" 2>&1; then
	cat "$tmp/install.log"
	fail "make install DESTDIR=... prefix=$prefix"
	exit 1
fi
pass "make install DESTDIR=... prefix=$prefix"

have() { [ -e "$root$1" ] || { echo "missing $1"; return 1; }; }
installed_all() {
	local ok=0 f
	for f in "$prefix/bin/memprofctl" "$prefix/sbin/memprofd" "$libdir/libmemprof.a" \
		"$libdir/libmemprof.so" "$libdir/libmemprof.so.0" "$libdir/libmemprof-preload.so" \
		"$libdir/libmemprof-preload.so.0" \
		"$libdir/pkgconfig/libmemprof.pc"; do
		have "$f" || ok=1
	done
	for f in "$src"/userspace-lib/include/memprof/*.h; do
		have "$prefix/include/memprof/${f##*/}" || ok=1
	done
	for f in "$src"/man/*.[1-8]; do
		have "$prefix/share/man/man${f##*.}/${f##*/}" || ok=1
	done
	for f in "$src"/systemd/*.service "$src"/systemd/*.socket; do
		have "$prefix/lib/systemd/system/${f##*/}" || ok=1
	done
	have /etc/dbus-1/system.d/org.memprofd.conf || ok=1
	return $ok
}
check "programs, libraries, headers, man pages, units and D-Bus policy installed" installed_all

check "installed programs are executable" \
	test -x "$root$prefix/bin/memprofctl" -a -x "$root$prefix/sbin/memprofd"
check "memprofd.service runs the installed memprofd" \
	grep -q "^ExecStart=$prefix/sbin/memprofd " "$root$prefix/lib/systemd/system/memprofd.service"
check "the installed memprofd runs" "$root$prefix/sbin/memprofd" --version
check "the installed memprofctl runs" "$root$prefix/bin/memprofctl" --version

# `record --preload` looks next to the executable (../lib), then in the libdir compiled in.
preload_found() {
	[ -r "$root$prefix/bin/../lib/libmemprof-preload.so.0" ] && return 0
	strings "$root$prefix/bin/memprofctl" | grep -qx "$libdir"
}
check "the installed memprofctl finds libmemprof-preload.so.0 ($libdir)" preload_found

# A program built with pkg-config against the installed tree reads a trace.
build_reader() {
	local pc
	pc=$(PKG_CONFIG_PATH="$root$libdir/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$root" \
		pkg-config --cflags --libs libmemprof) || return 1
	# shellcheck disable=SC2086
	cc -o "$tmp/reader" "$src/tests/workloads/trace_count.c" $pc
}
check "a program builds with pkg-config --cflags --libs libmemprof" build_reader
check "it runs on the installed libmemprof.so and reads a trace" \
	env LD_LIBRARY_PATH="$root$libdir" "$tmp/reader" "$src/tests/fixtures/memtrace/upstream-v2.ctf"
check "it links the installed shared library" \
	eval "LD_LIBRARY_PATH='$root$libdir' ldd '$tmp/reader' | grep -q '$root$libdir/libmemprof.so.0'"

[ "$fails" -eq 0 ]
