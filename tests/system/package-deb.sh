#!/bin/bash
# The Debian packages (debian/, built by `make deb` into $MP_BUILD/deb: `make check` builds
# them before the tiers run) as an operator meets them. First the packages themselves: their
# files and modes, the dependencies dh_shlibdeps computed, SONAMEs, the symbols files against
# the version scripts and the libraries' exports, lintian. Then in a real systemd booted in a
# container (lib-nspawn.sh) on a root where nothing of memprofd is installed: dpkg -i enables
# and starts memprofd.socket only; a user attaches to its process through it and reads its
# trace; a program built against libmemprof-dev with pkg-config reads it too; installing the
# packages again while a profile samples is an upgrade that restarts memprofd, whose old
# daemon completes that profile's trace (strict reader) and whose new one serves, with the
# operator's edit of the configuration kept; removal stops memprofd and keeps the traces;
# apt purge leaves the root as it was before the install.
set -u
. "$(dirname "$0")/lib-nspawn.sh"
nspawn_available || exit 77
for t in dpkg-deb dpkg-parsechangelog lintian readelf; do
	command -v "$t" > /dev/null || { echo "$t missing (scripts/install-deps)"; exit 77; }
done
DEB=$MP_BUILD/deb
VER=$(dpkg-parsechangelog -l "$MP_SRC/debian/changelog" -S Version)
ARCH=$(dpkg --print-architecture)
MA=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
PKGS="memprofd libmemprof0 libmemprof-preload0 libmemprof-dev"
for p in $PKGS; do
	[ -f "$DEB/${p}_${VER}_$ARCH.deb" ] ||
		{ echo "FAIL: missing $DEB/${p}_${VER}_$ARCH.deb (make deb)"; exit 1; }
done
for f in tests/workloads/svc_phases tests/workloads/ovh_loop; do
	[ -x "$MP_BUILD/$f" ] || { echo "FAIL: missing $MP_BUILD/$f (make test-bins)"; exit 1; }
done
trap 'nspawn_teardown' EXIT

deb() { echo "$DEB/${1}_${VER}_$ARCH.deb"; }
X=$MP_TMP/x
for p in $PKGS; do
	mkdir -p "$X/$p"
	dpkg-deb -x "$(deb "$p")" "$X/$p" && dpkg-deb -e "$(deb "$p")" "$X/$p/DEBIAN"
done

# --- files and modes ---------------------------------------------------------------------
# Every file and symlink with its mode and owner, but the documentation and the manual pages
# (checked below against man/).
listing() {
	dpkg-deb -c "$(deb "$1")" | awk '$1 !~ /^d/ && $6 !~ /^\.\/usr\/share\/(doc|man)\// {
		print $1, $2, $6 ($7 == "->" ? " -> " $8 : "") }' | sort
}
expect_listing() {	# expect_listing PACKAGE < expected lines
	sort > "$MP_TMP/expected.$1"
	listing "$1" > "$MP_TMP/listing.$1"
	diff -u "$MP_TMP/expected.$1" "$MP_TMP/listing.$1"
}
L=./usr/lib/$MA
check "memprofd: daemon, CLI, units, D-Bus policy, configuration (modes, root-owned)" \
	expect_listing memprofd <<EOF
-rwxr-xr-x root/root ./usr/sbin/memprofd
-rwxr-xr-x root/root ./usr/bin/memprofctl
-rw-r--r-- root/root ./lib/systemd/system/memprofd.service
-rw-r--r-- root/root ./lib/systemd/system/memprofd.socket
-rw-r--r-- root/root ./usr/share/dbus-1/system.d/org.memprofd.conf
-rw-r--r-- root/root ./etc/memprofd.conf
EOF
check "libmemprof0: the shared library under its SONAME" expect_listing libmemprof0 <<EOF
-rw-r--r-- root/root $L/libmemprof.so.0.1.0
lrwxrwxrwx root/root $L/libmemprof.so.0 -> libmemprof.so.0.1.0
EOF
check "libmemprof-preload0: the fast-path library under its SONAME" \
	expect_listing libmemprof-preload0 <<EOF
-rw-r--r-- root/root $L/libmemprof-preload.so.0
EOF
{
	for h in "$MP_SRC"/userspace-lib/include/memprof/*.h; do
		echo "-rw-r--r-- root/root ./usr/include/memprof/${h##*/}"
	done
	echo "-rw-r--r-- root/root $L/libmemprof.a"
	echo "-rw-r--r-- root/root $L/pkgconfig/libmemprof.pc"
	echo "lrwxrwxrwx root/root $L/libmemprof.so -> libmemprof.so.0"
	echo "lrwxrwxrwx root/root $L/libmemprof-preload.so -> libmemprof-preload.so.0"
} > "$MP_TMP/dev.expected"
check "libmemprof-dev: every public header, static library, link symlinks, pkg-config" \
	expect_listing libmemprof-dev < "$MP_TMP/dev.expected"
man_shipped() {	# each page of man/ in exactly one package, compressed, mode 0644
	local m ok=0 n p
	for p in $PKGS; do dpkg-deb -c "$(deb "$p")"; done > "$MP_TMP/all.contents"
	for m in "$MP_SRC"/man/*.[1-8]; do
		n=$(grep -c "^-rw-r--r-- root/root .* \./usr/share/man/man${m##*.}/${m##*/}\.gz$" \
			"$MP_TMP/all.contents")
		[ "$n" = 1 ] || { echo "    ${m##*/}: shipped $n times"; ok=1; }
	done
	return $ok
}
check "every manual page of man/ is shipped once" man_shipped
check "each package has its copyright and changelog" eval \
	'for p in $PKGS; do [ -s "$X/$p/usr/share/doc/$p/copyright" ] &&
		[ -s "$X/$p/usr/share/doc/$p/changelog.gz" ] || exit 1; done'
check "memprofd.service runs /usr/sbin/memprofd" \
	grep -q '^ExecStart=/usr/sbin/memprofd ' "$X/memprofd/lib/systemd/system/memprofd.service"
check "/etc/memprofd.conf is a conffile" grep -qx /etc/memprofd.conf "$X/memprofd/DEBIAN/conffiles"
conf_complete() {	# every setting of memprofd(8) CONFIGURATION is in the shipped file
	local k ok=0
	for k in $(sed -n '/^\.SH CONFIGURATION/,/^\.SH /s/^\.BI \([A-Za-z]*\)= .*/\1/p' \
			"$MP_SRC/man/memprofd.8"); do
		grep -q "^#$k=" "$X/memprofd/etc/memprofd.conf" || { echo "    no $k"; ok=1; }
	done
	return $ok
}
check "/etc/memprofd.conf shows every setting of memprofd(8)" conf_complete
check "memprofctl looks for libmemprof-preload.so.0 in the package's libdir" eval \
	"strings '$X/memprofd/usr/bin/memprofctl' | grep -qx '/usr/lib/$MA'"

# --- dependencies computed by dh_shlibdeps -------------------------------------------------
field() { dpkg-deb -f "$(deb "$1")" "$2"; }
# The Debian package that ships the library named NEEDED, where the dynamic linker finds it.
owner() {
	local path p
	path=$(ldconfig -p | awk -v l="$1" '$1 == l && /x86-64/ { print $NF; exit }')
	[ -n "$path" ] || return 1
	for p in "$path" "$(realpath "$path")" "/usr${path#/usr}" "${path#/usr}"; do
		dpkg-query -S "$p" 2>/dev/null | sed -n '1s/:.*//p' | grep . && return 0
	done
	return 1
}
deps_cover_needed() {	# deps_cover_needed PACKAGE: each NEEDED library's package is a Depends
	local p=$1 f lib o ok=0 deps
	deps=$(field "$p" Depends)
	while read -r f; do
		for lib in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
			o=$(owner "$lib")
			[ -n "$o" ] || { echo "    $f: no package ships $lib"; ok=1; continue; }
			echo "$deps" | tr ',|' '\n\n' | awk '{ print $1 }' | grep -qxF "$o" ||
				{ echo "    $f needs $lib ($o), not in Depends: $deps"; ok=1; }
		done
	done < <(find "$X/$p" -path "$X/$p/DEBIAN" -prune -o -type f -print |
		 while read -r f; do readelf -h "$f" > /dev/null 2>&1 && echo "$f"; done)
	return $ok
}
for p in memprofd libmemprof0 libmemprof-preload0; do
	check "$p: Depends has the package of every library its ELF files need" deps_cover_needed "$p"
done
check "  ... with versions (memprofd: $(field memprofd Depends | grep -o 'libbpf1 ([^)]*)'))" \
	eval 'field memprofd Depends | grep -Eq "libbpf1 \(>= [^)]+\)"'
check "no substitution variable left in any control file" eval \
	'! grep -l "\${" $X/*/DEBIAN/control'
check "libmemprof-dev depends on both libraries at this version, and the -dev packages" eval \
	'field libmemprof-dev Depends | tr -d " " | tr , "\n" | sort | tr "\n" , |
	 grep -qx "libmemprof-preload0(=$VER),libmemprof0(=$VER),libsystemd-dev,libzstd-dev,"'

# --- SONAMEs, shlibs, symbols ----------------------------------------------------------------
soname() { readelf -d "$1" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p'; }
# What the library exports: NAME@VERSION of each defined dynamic symbol (Base: unversioned)
# and NODE@NODE of each version node it defines, the form of deb-symbols(5).
exports() {
	{
		readelf -W --dyn-syms "$1" | awk '$7 != "UND" && ($5 == "GLOBAL" || $5 == "WEAK") &&
			$8 != "" { n = $8; sub(/@@?/, "@", n)
				# the symbol of a version node (ABS), else unversioned
				if (n !~ /@/) n = n "@" ($7 == "ABS" ? n : "Base"); print n }'
		readelf -V "$1" | awk '/Index: .* Name: / && !/Flags: BASE/ { print $NF "@" $NF }'
	} | sort -u
}
symbols_of() { awk '/^ / { print $1 }' "$X/$1/DEBIAN/symbols" | sort; }
SYMVER_libmemprof0=$(sed -n 's/^SYMVER_libmemprof0[[:space:]]*:=//p' "$MP_SRC/debian/rules")
SYMVER_libmemprof_preload0=$(sed -n 's/^SYMVER_libmemprof-preload0[[:space:]]*:=//p' \
	"$MP_SRC/debian/rules")
lib_checks() {	# lib_checks PACKAGE SONAME MAP SYMVERS
	local p=$1 so=$2 map=$3 vers=$4 f=$X/$1/usr/lib/$MA/$2 stem=${2%.so.*}
	check "$p: $so is the SONAME of the library it ships" eval "[ \"\$(soname '$f')\" = '$so' ]"
	check "  ... the package is named after it" [ "$p" = "${stem}${so##*.so.}" ]
	check "  ... shlibs: '$stem ${so##*.so.} $p (>= $VER)'" \
		grep -qx "$stem ${so##*.so.} $p (>= $VER)" "$X/$p/DEBIAN/shlibs"
	check "  ... ldconfig runs on install and removal (trigger)" \
		grep -qx 'activate-noawait ldconfig' "$X/$p/DEBIAN/triggers"
	# shellcheck disable=SC2086
	"$MP_SRC/debian/gen-symbols" "$MP_SRC/$map" "$so" "$p" libmemprof-dev $vers \
		> "$MP_TMP/$p.symbols.expected"
	check "  ... its symbols file is the one generated from $map" \
		diff -u "$MP_TMP/$p.symbols.expected" "$X/$p/DEBIAN/symbols"
	exports "$f" > "$MP_TMP/$p.exports"
	check "  ... and lists exactly what the library exports ($(wc -l < "$MP_TMP/$p.exports"))" \
		diff -u <(symbols_of "$p") "$MP_TMP/$p.exports"
	check "  ... at versions no newer than this one" eval \
		"awk '/^ / {print \$2}' '$X/$p/DEBIAN/symbols' | sort -u | while read -r v; do
			dpkg --compare-versions \"\$v\" le '$VER' || exit 1; done"
}
lib_checks libmemprof0 libmemprof.so.0 userspace-lib/libmemprof.map "$SYMVER_libmemprof0"
lib_checks libmemprof-preload0 libmemprof-preload.so.0 \
	userspace-lib/preload/libmemprof-preload.map "$SYMVER_libmemprof_preload0"
NODE=LIBMEMPROF_$(echo "$VER" | cut -d. -f1,2)
check "libmemprof's symbols carry the version node of its version $VER ($NODE)" \
	grep -q "^ memprof_client__connect@$NODE " "$X/libmemprof0/DEBIAN/symbols"
check "  ... and no other node" eval "[ \"\$(awk '/^ / { sub(/.*@/, \"\", \$1); print \$1 }' \
	'$X/libmemprof0/DEBIAN/symbols' | sort -u)\" = '$NODE' ]"

# --- lintian ---------------------------------------------------------------------------------
# Errors and warnings fail; each override in debian/ says why, on the comment line above it.
lintian --fail-on error,warning "$DEB/memprofd_${VER}_$ARCH.changes" "$DEB/memprofd_$VER.dsc" \
	> "$MP_TMP/lintian.out" 2>&1
LRC=$?
grep -E '^[EW]: ' "$MP_TMP/lintian.out" | sed 's/^/    /'
check "lintian: no error, no warning (binary and source packages)" eval \
	"[ $LRC = 0 ] && ! grep -Eq '^[EW]: ' '$MP_TMP/lintian.out'"
overrides_explained() {
	local f ok=0
	for f in "$MP_SRC"/debian/source/lintian-overrides "$MP_SRC"/debian/*.lintian-overrides; do
		[ -f "$f" ] || continue
		awk -v f="${f#"$MP_SRC"/}" '/^[^#]/ && prev !~ /^#/ {
			print "    " f ": no reason above: " $0; bad = 1 } { prev = $0 }
			END { exit bad }' "$f" || ok=1
	done
	return $ok
}
check "  ... every lintian override has its reason" overrides_explained

# --- a clean root in a booted systemd -------------------------------------------------------
RF=$MP_TMP/rootfiles
LX=/usr/local/libexec/memprofd-tests
mkdir -p "$RF/var/cache/memprofd-test" "$RF$LX"
for p in $PKGS; do cp "$(deb "$p")" "$RF/var/cache/memprofd-test/"; done
cp "$MP_BUILD/tests/workloads/svc_phases" "$MP_BUILD/tests/workloads/ovh_loop" \
	"$MP_SRC/tests/workloads/trace_count.c" "$RF$LX/"
DEBS=$(for p in $PKGS; do printf "%s " "/var/cache/memprofd-test/${p}_${VER}_$ARCH.deb"; done)
nspawn_boot "$RF" || { echo "FAIL: boot a container"; exit 1; }
pass "systemd booted in a container"
ncxt() { timeout 120 nsenter -t "$NSPAWN_PID1" -a "$@"; }
as_nobody() { ncxt systemd-run --wait --pipe -q -p User=nobody "$@"; }

# What the packages and their scripts may touch, listed before the install and after the purge
# (the package database, logs and caches aside; /run, /tmp are mounts of their own).
# (The rest of the root is this machine's, where other work goes on.) Also aside: what apt's
# PackageKit hook records of the transaction, and systemd's own state (logind's linger).
snapshot() {
	ncx find /etc /usr /var /opt /srv -xdev \( -path /var/lib/dpkg -o -path /var/log \
		-o -path /var/cache -o -path /var/lib/apt -o -path /var/tmp \
		-o -path /var/lib/PackageKit -o -path /var/lib/systemd/timers \
		-o -path /var/lib/systemd/linger \) -prune -o -print | sort
}
# The root is this machine's image, whose policy-rc.d (a container image's) forbids every
# service start and stop from maintainer scripts; a host has none. Gone from the container's
# copy only.
ncx rm -f /usr/sbin/policy-rc.d
snapshot > "$MP_TMP/before"
check "clean root: no memprofd package, no state" eval \
	'! ncx dpkg-query -W memprofd > /dev/null 2>&1 && ! ncx test -e /var/lib/memprofd &&
	 ! ncx test -e /lib/systemd/system/memprofd.socket'

# --- install -----------------------------------------------------------------------------------
# shellcheck disable=SC2086
check "dpkg -i the four packages" eval "ncxt dpkg -i $DEBS > '$MP_TMP/install.log' 2>&1 ||
	{ cat '$MP_TMP/install.log'; false; }"
ncx dpkg -L $PKGS | sort -u > "$MP_TMP/installed"
check "memprofd.socket is enabled" eval '[ "$(ncx systemctl is-enabled memprofd.socket)" = enabled ]'
check "memprofd.socket is active" eval '[ "$(ncx systemctl is-active memprofd.socket)" = active ]'
check "  ... listening on /run/memprofd/bus" ncx test -S /run/memprofd/bus
check "memprofd.service is neither enabled nor started (socket activation)" eval \
	'[ "$(ncx systemctl is-enabled memprofd.service)" = disabled ] &&
	 [ "$(ncx systemctl is-active memprofd.service)" = inactive ]'
check "systemd-analyze verify on the installed units" ncxt systemd-analyze verify --man=no \
	/lib/systemd/system/memprofd.service /lib/systemd/system/memprofd.socket

# --- a user attaches to its process and gets a trace -------------------------------------------
ncx systemd-run --unit=pkgwl -q -p User=nobody -p StandardOutput=file:/run/pkgwl.out \
	"$LX/svc_phases" 2000 4000
wait_until 10 eval 'ncx grep -q ready /run/pkgwl.out'
WP=$(ncx awk '/^ready/ {print $2}' /run/pkgwl.out)
NI=$(as_nobody memprofctl attach -r 0.01 "$WP" | awk '/^Profile/ {print $2}')
check "user nobody attaches to its process (pid ${WP:-none}): profile ${NI:-none}" [ -n "$NI" ]
check "  ... the connection started memprofd.service" eval \
	'[ "$(ncx systemctl is-active memprofd.service)" = active ]'
ncx kill -USR1 "$WP"
wait_until 10 eval 'ncx grep -q allocated /run/pkgwl.out'
samples() { ncx memprofctl --json status "$1" | /usr/bin/python3 -c \
	'import json,sys; print(json.load(sys.stdin)["processes"][0]["sampled_blocks"])'; }
wait_until 10 eval '[ "$(samples "$NI")" -gt 1500 ]'
check "  ... samples arrive ($(samples "$NI"))" [ "$(samples "$NI")" -gt 1500 ]
as_nobody memprofctl stop "$NI" > /dev/null
as_nobody memprofctl discard "$NI" > /dev/null
UT=/var/lib/memprofd/profiles/$NI/$WP-svc_phases.ctf
check "  ... the trace is the user's" eval "[ \"\$(ncx stat -c %U $UT)\" = nobody ]"
UA=$(as_nobody memprofctl dump "$UT" | grep -c ' alloc ')
check "  ... and the user reads it with the strict reader ($UA allocs)" [ "${UA:-0}" -gt 1500 ]

# --- a program built against libmemprof-dev ----------------------------------------------------
check "pkg-config finds the packaged libmemprof" eval \
	"[ \"\$(ncx pkg-config --variable=libdir libmemprof)\" = /usr/lib/$MA ]"
check "a program builds with pkg-config --cflags --libs libmemprof" ncxt sh -c \
	"cc -o /run/trace_count $LX/trace_count.c \$(pkg-config --cflags --libs libmemprof)"
check "  ... it runs on the packaged libmemprof.so.0" eval \
	"ncx ldd /run/trace_count | grep -Eq '=> (/usr)?/lib/$MA/libmemprof.so.0 '"
read -r TA _ _ < <(as_nobody /run/trace_count "$UT")
check "  ... and reads the user's trace: the same $UA allocs" [ "${TA:-x}" = "$UA" ]
check "memprofctl record --preload runs CMD with the packaged libmemprof-preload.so.0" eval \
	"ncxt memprofctl record --preload -o /run/rec.ctf -- $LX/ovh_loop paced 1 2>&1 |
	 grep -q 'sampled in-process by libmemprof-preload'"

# --- upgrade while a profile samples ----------------------------------------------------------
# The operator's edit of the conffile survives the upgrade and applies to the new daemon.
ncx sed -i 's/^#DefaultRate=.*/DefaultRate=0.02/' /etc/memprofd.conf
ncx systemd-run --unit=pkgloop -q -p StandardOutput=file:/run/pkgloop.out "$LX/ovh_loop" paced 600
wait_until 10 eval '[ "$(ncx systemctl show -p MainPID --value pkgloop)" -gt 0 ]'
LP=$(ncx systemctl show -p MainPID --value pkgloop)
UI=$(ncx memprofctl attach -r 0.5 "$LP" | awk '/^Profile/ {print $2}')
check "a profile samples a process that keeps allocating (profile ${UI:-none})" [ -n "$UI" ]
wait_until 10 eval '[ "$(samples "$UI")" -gt 200 ]'
OLD=$(ncx systemctl show -p MainPID --value memprofd.service)
N0=$(samples "$UI")
# shellcheck disable=SC2086
check "dpkg -i the same packages again (an upgrade: $N0 samples so far)" eval \
	"ncxt dpkg -i $DEBS > '$MP_TMP/upgrade.log' 2>&1 || { cat '$MP_TMP/upgrade.log'; false; }"
check "  ... dpkg upgraded memprofd $VER over $VER" \
	ncx grep -q " upgrade memprofd:$ARCH $VER $VER\$" /var/log/dpkg.log
NEW=$(ncx systemctl show -p MainPID --value memprofd.service)
check "  ... memprofd was restarted (pid $OLD, now ${NEW:-none})" \
	eval '[ -n "$NEW" ] && [ "$NEW" != 0 ] && [ "$NEW" != "$OLD" ]'
check "  ... the old daemon completed its traces on SIGTERM" eval \
	"ncx journalctl -u memprofd _PID=$OLD --no-pager -o cat | grep -q 'All traces complete'"
LT=/var/lib/memprofd/profiles/$UI/$LP-ovh_loop.ctf
ncx memprofctl dump "$LT" > "$MP_TMP/upgrade.dump" 2> "$MP_TMP/upgrade.err"
DRC=$?
LA=$(grep -c ' alloc ' "$MP_TMP/upgrade.dump")
check "  ... the profile's trace is whole: the strict reader, no warning ($LA allocs)" eval \
	"[ $DRC = 0 ] && [ ! -s '$MP_TMP/upgrade.err' ] && [ '$LA' -gt 0 ]"
check "  ... it has the samples taken during the upgrade ($LA > $N0)" [ "$LA" -gt "$N0" ]
check "  ... its manifest says complete" eval \
	"ncx grep -Eq '\"complete\": ?true' /var/lib/memprofd/profiles/$UI/manifest.json"
check "  ... the profiled process lives on" ncx kill -0 "$LP"
check "  ... memprofd.socket is still enabled and active" eval \
	'[ "$(ncx systemctl is-enabled memprofd.socket)" = enabled ] &&
	 [ "$(ncx systemctl is-active memprofd.socket)" = active ]'
check "  ... the operator's DefaultRate=0.02 is kept" \
	ncx grep -qx 'DefaultRate=0.02' /etc/memprofd.conf
ncx memprofctl attach "$LP" > "$MP_TMP/reattach.out" 2>&1
RI=$(awk '/^Profile/ {print $2}' "$MP_TMP/reattach.out")
check "the new daemon profiles the process again (profile ${RI:-none} after $UI)" \
	eval '[ -n "$RI" ] && [ "$RI" -gt "$UI" ]'
RR=$(ncx memprofctl --json status "$RI" | /usr/bin/python3 -c \
	'import json,sys; print(json.load(sys.stdin)["rate"])')
check "  ... at the configured default rate ($RR)" [ "$RR" = 0.02 ]

# --- removal, purge ---------------------------------------------------------------------------
check "dpkg -r memprofd" eval "ncxt dpkg -r memprofd > '$MP_TMP/remove.log' 2>&1 ||
	{ cat '$MP_TMP/remove.log'; false; }"
check "  ... stopped memprofd.service and memprofd.socket" eval \
	'[ "$(ncx systemctl is-active memprofd.service)" != active ] &&
	 [ "$(ncx systemctl is-active memprofd.socket)" != active ]'
check "  ... the traces stay until a purge" ncx test -s "$LT"
check "  ... and so does the configuration" ncx test -s /etc/memprofd.conf
ncx systemctl stop pkgloop pkgwl 2> /dev/null
check "apt purge the packages" eval "ncxt apt-get purge -y $PKGS > '$MP_TMP/purge.log' 2>&1 ||
	{ cat '$MP_TMP/purge.log'; false; }"
check "  ... none is left in dpkg's database" eval \
	"! ncx dpkg-query -W -f '\${db:Status-Abbrev} \${Package}\n' $PKGS 2>/dev/null | grep -v '^un '"
check "  ... the state directory and the configuration are gone" eval \
	'! ncx test -e /var/lib/memprofd && ! ncx test -e /etc/memprofd.conf &&
	 ! ncx test -e /run/memprofd'
gone() {
	local f ok=0
	while read -r f; do
		ncx test -d "$f" && continue	# directories other packages share
		if ncx test -e "$f" || ncx test -L "$f"; then echo "    left: $f"; ok=1; fi
	done < "$MP_TMP/installed"
	return $ok
}
check "  ... every file the packages installed is gone" gone
snapshot > "$MP_TMP/after"
check "  ... the root is as before the install (nothing created is left)" \
	diff -u "$MP_TMP/before" "$MP_TMP/after"
exit $((FAILS > 0))
