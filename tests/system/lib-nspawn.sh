# shellcheck shell=bash
# Boot a throw-away systemd in a container (systemd-nspawn) on a host whose PID 1 is not
# systemd, to test memprofd's units for real. Sourced by tests; executed only as its own
# private stage (`bash lib-nspawn.sh __stage ...`, inside `unshare -m`).
#
#   nspawn_rootfiles DIR      memprofd installed into DIR (make install-service, the build's
#                             binaries) and svc_phases in DIR$NSPAWN_LX, for nspawn_boot
#   nspawn_boot ROOTFILES     boot; ROOTFILES is copied onto the container's root first
#   ncx CMD...                run CMD in the container (all its namespaces, root)
#   nspawn_teardown           poweroff, wait, remove the cgroup (also on EXIT)
#
# The root is an overlay with a tmpfs upper layer over the host's /, in a private mount
# namespace: nothing the container writes reaches the host. nspawn needs: --register=no
# --keep-unit (no host system bus), a private tmpfs on /run (the host's /run is on disk and
# nspawn will not clean it), bpf and perf_event_open allowed by its seccomp filter, and
# CAP_BPF/CAP_PERFMON, which it drops by default. --private-network and basic.target keep
# the host's enabled services from starting inside.

nspawn_join_cgroup() {	# move this shell into a fresh cgroup, so nspawn's groups land there
	local cg=$1 h
	if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
		mkdir -p "/sys/fs/cgroup/$cg" && echo $$ > "/sys/fs/cgroup/$cg/cgroup.procs"
	else
		for h in unified systemd; do
			[ -d "/sys/fs/cgroup/$h" ] || continue
			mkdir -p "/sys/fs/cgroup/$h/$cg" && echo $$ > "/sys/fs/cgroup/$h/$cg/cgroup.procs"
		done
	fi
}

if [ "${1:-}" = __stage ]; then	# __stage WORKDIR CGROUP ROOTFILES -- nspawn args
	W=$2 CG=$3 RF=$4
	shift 5
	set -e
	nspawn_join_cgroup "$CG"
	mkdir -p "$W/ov" "$W/root"
	mount -t tmpfs -o mode=755,size=2G tmpfs "$W/ov"
	mkdir -p "$W/ov/upper" "$W/ov/work"
	mount -t overlay overlay -o "lowerdir=/,upperdir=$W/ov/upper,workdir=$W/ov/work" "$W/root"
	rm -f "$W/root/dev/console"	# a stray regular file in this image; nspawn wants a node
	systemd-id128 new > "$W/root/etc/machine-id"
	cp -a "$RF/." "$W/root/"
	mount -t tmpfs -o mode=755 tmpfs /run
	exec systemd-nspawn -D "$W/root" --register=no --keep-unit --private-network \
		--console=read-only --machine="$CG" "$@"
fi

NSPAWN_PID=
NSPAWN_PID1=
NSPAWN_CG=
NSPAWN_W=
# A test that sources this file also runs on its own: the tree, the build and a scratch
# directory then default to this checkout's.
MP_SRC=${MP_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
MP_BUILD=${MP_BUILD:-$MP_SRC/build}
MP_TMP=${MP_TMP:-$(mktemp -d)}

NSPAWN_LX=/usr/local/libexec/memprofd-tests

nspawn_rootfiles() {	# nspawn_rootfiles DIR: prints FAIL lines and returns 1 on failure
	local rf=$1 f
	for f in bin/memprofd bin/memprofctl tests/workloads/svc_phases; do
		[ -x "$MP_BUILD/$f" ] || { echo "FAIL: missing $MP_BUILD/$f (make all test-bins)"; return 1; }
	done
	mkdir -p "$rf$NSPAWN_LX"
	# -o: install what is built, never rebuild from a test.
	if ! make -C "$MP_SRC" --no-print-directory -s B="$MP_BUILD" DESTDIR="$rf" \
		prefix=/usr/local -o "$MP_BUILD/bin/memprofd" -o "$MP_BUILD/bin/memprofctl" \
		install-service > "$MP_TMP/install.log" 2>&1; then
		cat "$MP_TMP/install.log"
		echo "FAIL: make install-service"
		return 1
	fi
	cp "$MP_BUILD/tests/workloads/svc_phases" "$rf$NSPAWN_LX/"
}

nspawn_available() {
	[ "$(id -u)" = 0 ] || { echo "needs root"; return 1; }
	local t
	for t in systemd-nspawn nsenter unshare systemd-id128; do
		command -v "$t" > /dev/null || { echo "$t missing (Debian systemd-container)"; return 1; }
	done
	[ -x /lib/systemd/systemd ] || { echo "no systemd to boot"; return 1; }
}

ncx() { nsenter -t "$NSPAWN_PID1" -a "$@"; }

nspawn_boot() {	# nspawn_boot ROOTFILES [WORKDIR]
	local rf=$1 i p
	NSPAWN_W=${2:-$(mktemp -d /tmp/memprofd-nspawn.XXXXXX)}
	NSPAWN_CG=memprofd-test-$$-$RANDOM
	setsid unshare -m --propagation private bash "${BASH_SOURCE[0]}" __stage "$NSPAWN_W" \
		"$NSPAWN_CG" "$rf" -- --capability=CAP_BPF,CAP_PERFMON \
		--system-call-filter='bpf perf_event_open' -b systemd.unit=basic.target \
		> "$NSPAWN_W/console.log" 2>&1 < /dev/null &
	NSPAWN_PID=$!
	# Wait until the container's PID 1 is systemd and listens on its private socket.
	for ((i = 0; i < 600; i++)); do
		if ! kill -0 "$NSPAWN_PID" 2> /dev/null; then
			cat "$NSPAWN_W/console.log"
			echo "container died during boot"
			return 1
		fi
		p=$(pgrep -P "$NSPAWN_PID" | head -n 1)
		if [ -n "$p" ] && [ "$(cat "/proc/$p/comm" 2> /dev/null)" = systemd ] &&
		   nsenter -t "$p" -m test -S /run/systemd/private 2> /dev/null; then
			NSPAWN_PID1=$p
			break
		fi
		sleep 0.1
	done
	[ -n "$NSPAWN_PID1" ] || { cat "$NSPAWN_W/console.log"; echo "systemd did not come up"; return 1; }
	local state
	state=$(timeout 120 nsenter -t "$NSPAWN_PID1" -a systemctl is-system-running --wait 2>&1)
	case $state in
	running|degraded) return 0 ;;
	*) ncx journalctl -b --no-pager -n 50; echo "boot state: $state"; return 1 ;;
	esac
}

nspawn_teardown() {
	local i base
	if [ -n "$NSPAWN_PID" ]; then
		kill -TERM "$NSPAWN_PID" 2> /dev/null	# nspawn: clean poweroff of the container
		for ((i = 0; i < 150; i++)); do
			kill -0 "$NSPAWN_PID" 2> /dev/null || break
			sleep 0.1
		done
		kill -0 "$NSPAWN_PID" 2> /dev/null && kill -KILL "$NSPAWN_PID"
		wait "$NSPAWN_PID" 2> /dev/null
		NSPAWN_PID=
	fi
	if [ -n "$NSPAWN_CG" ]; then
		for base in /sys/fs/cgroup/unified /sys/fs/cgroup/systemd /sys/fs/cgroup; do
			[ -d "$base/$NSPAWN_CG" ] &&
				find "$base/$NSPAWN_CG" -depth -type d -exec rmdir {} \; 2> /dev/null
		done
		NSPAWN_CG=
	fi
	[ -n "$NSPAWN_W" ] && rm -rf "$NSPAWN_W"
	NSPAWN_W=
}

# Result lines for tests/run, and wait_until, for the tests that boot a container.
FAILS=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
check() { local n=$1; shift; if "$@"; then pass "$n"; else fail "$n"; fi; }
. "$(dirname "${BASH_SOURCE[0]}")/../lib-memprofd.sh"
