#!/bin/bash
# memprofd under a real systemd (booted in a container with systemd-nspawn): `make install`
# into the container's root, `systemctl start memprofd` (Type=notify: returns after READY=1),
# attach to a process inside the container with memprofctl, `systemctl stop memprofd`
# completes the trace; then socket activation through memprofd.socket.
set -u
. "$(dirname "$0")/lib-nspawn.sh"
nspawn_available || exit 77
trap 'nspawn_teardown' EXIT

# --- install into the container's root with the project's own install rule ----------------
RF=$MP_TMP/rootfiles
nspawn_rootfiles "$RF" || exit 1
pass "make install-service DESTDIR=..."

nspawn_boot "$RF" || { echo "FAIL: boot a container"; exit 1; }
pass "systemd booted in a container"

check "systemd-analyze verify on the installed units" ncx systemd-analyze verify --man=no \
	/usr/local/lib/systemd/system/memprofd.service /usr/local/lib/systemd/system/memprofd.socket
check "systemctl start memprofd (waits for READY=1)" timeout 60 nsenter -t "$NSPAWN_PID1" -a systemctl start memprofd.service
check "memprofd.service is active" eval '[ "$(ncx systemctl is-active memprofd.service)" = active ]'
check "STATUS= reaches systemd" eval 'ncx systemctl show -p StatusText --value memprofd.service | grep -q "0 sampling"'
check "the journal has memprofd's notice (log level parsed)" eval \
	'ncx journalctl -u memprofd -p notice --no-pager -o cat | grep -q "memprofd .* ready"'

# The unit also registers org.memprofd on the system bus (policy from make install).
if ncx test -S /run/dbus/system_bus_socket; then
	check "org.memprofd on the container's system bus (busctl --system)" eval \
		"ncx busctl --system introspect org.memprofd /org/memprofd | grep -q '^\.ListProfiles'"
	check "  ... callable by any user (policy)" timeout 60 nsenter -t "$NSPAWN_PID1" -a \
		systemd-run --wait --pipe -q -p User=nobody busctl --system call org.memprofd \
		/org/memprofd org.memprofd.Manager1 ListProfiles
else
	echo "SKIP: no system bus in the container (dbus not installed)"
fi

# A workload as a transient unit of the container, its output in a file we can read.
ncx systemd-run --unit=svcwl -q -p StandardOutput=file:/run/svcwl.out \
	/usr/local/libexec/memprofd-tests/svc_phases 2000 4000
wait_until 10 eval 'ncx grep -q ready /run/svcwl.out'
WP=$(ncx awk '/^ready/ {print $2}' /run/svcwl.out)
check "workload runs in the container (pid $WP there)" [ -n "$WP" ]
ID=$(ncx memprofctl attach -r 0.01 "$WP" | awk '/^Profile/ {print $2}')
check "memprofctl attach inside the container" [ -n "$ID" ]
ncx kill -USR1 "$WP"
wait_until 10 eval 'ncx grep -q allocated /run/svcwl.out'
stat_of() { ncx memprofctl --json status | /usr/bin/python3 -c \
	'import json,sys; print(json.load(sys.stdin)["bpf"][sys.argv[1]])' "$1"; }
samples() { ncx memprofctl --json status "$ID" | /usr/bin/python3 -c \
	'import json,sys; print(json.load(sys.stdin)["processes"][0]["sampled_blocks"])'; }
wait_until 10 eval '[ "$(samples)" -gt 1500 ]'
N=$(samples)
# memprofd runs in the container's pid namespace: BPF must name processes by their pids there
# (bpf/memprof.bpf.c mp_current_ids()), else every call is foreign and nothing is sampled.
check "samples arrive from the container's process (${N:-none})" [ "${N:-0}" -gt 1500 ]
check "  ... no call counted as foreign (foreign_calls=$(stat_of foreign_calls))" \
	[ "$(stat_of foreign_calls)" = 0 ]
# Another user's process, through the unit's capability set (CAP_SYS_PTRACE for its /proc,
# CAP_CHOWN for its trace): root may profile it; the user may profile it and owns the trace.
ncx systemd-run --unit=svcwl3 -q -p User=nobody -p StandardOutput=file:/run/svcwl3.out \
	/usr/local/libexec/memprofd-tests/svc_phases 100 1000
wait_until 10 eval 'ncx grep -q ready /run/svcwl3.out'
WN=$(ncx awk '/^ready/ {print $2}' /run/svcwl3.out)
ncx memprofctl attach "$WN" > "$MP_TMP/nobody-root.out" 2>&1
RI=$(awk '/^Profile/ {print $2}' "$MP_TMP/nobody-root.out")
check "root profiles another user's process under the unit" [ -n "$RI" ]
ncx memprofctl stop "$RI" > /dev/null && ncx memprofctl discard "$RI" > /dev/null
NI=$(timeout 60 nsenter -t "$NSPAWN_PID1" -a systemd-run --wait --pipe -q -p User=nobody \
	memprofctl attach "$WN" | awk '/^Profile/ {print $2}')
check "nobody profiles its own process (systemd-run --pipe -p User=nobody)" [ -n "$NI" ]
check "  ... and owns its trace" eval \
	"[ \"\$(ncx stat -c %U /var/lib/memprofd/profiles/$NI/$WN-svc_phases.ctf)\" = nobody ]"
timeout 60 nsenter -t "$NSPAWN_PID1" -a systemd-run --wait --pipe -q -p User=nobody \
	memprofctl attach "$WP" > /dev/null 2> "$MP_TMP/err"
check "nobody cannot profile root's process" grep -q "Permission denied: process $WP" "$MP_TMP/err"
TRACE=/var/lib/memprofd/profiles/$ID/$WP-svc_phases.ctf
check "systemctl stop memprofd" timeout 60 nsenter -t "$NSPAWN_PID1" -a systemctl stop memprofd.service
check "memprofd stopped cleanly" eval '[ "$(ncx systemctl show -p Result --value memprofd.service)" = success ]'
check "stop completed the trace (strict reader)" eval \
	"[ \$(ncx memprofctl dump $TRACE | grep -c ' alloc ') -gt 1500 ]"
# Without CAP_SYS_ADMIN, /proc/PID/map_files is refused: objects are opened by their names in
# the process' root (daemon/probe/target_open.c), and still name the workload's function.
check "the trace's stacks are symbolized under the unit" eval \
	"ncx memprofctl report --by function $TRACE | grep -q ' main'"
# The estimate from the samples (n=) of the 2000 blocks of 4000 bytes (len=500 in the trace, 501
# words each with the header, rate 0.01) is within 5 standard deviations of the truth.
ncx memprofctl dump "$TRACE" > "$MP_TMP/svcwl.dump"
check "the trace's estimate for the workload's blocks is sane" /usr/bin/python3 -c '
import math, re, sys
W, lam = 2000 * 501, 0.01
n = sum(int(m.group(1)) for l in open(sys.argv[1]) if " alloc " in l and " len=500 " in l
        for m in [re.search(r" n=(\d+)", l)] if m)
z = (n - lam * W) / math.sqrt(lam * W * (1 - lam))
print("    samples %d, estimated words %d vs true %d (z = %.2f)" % (n, n / lam, W, z))
sys.exit(abs(z) >= 5)' "$MP_TMP/svcwl.dump"
check "the manifest says complete" eval \
	"ncx grep -Eq '\"complete\": ?true' /var/lib/memprofd/profiles/$ID/manifest.json"

# --- socket activation ---------------------------------------------------------------------
check "systemctl start memprofd.socket" ncx systemctl start memprofd.socket
check "  ... the service is not started yet" \
	eval '[ "$(ncx systemctl is-active memprofd.service)" = inactive ]'
check "  ... a connection activates memprofd" eval 'ncx memprofctl status | grep -q "^memprofd "'
check "  ... memprofd.service is active" eval '[ "$(ncx systemctl is-active memprofd.service)" = active ]'
check "  ... on the socket systemd passed" eval \
	'ncx journalctl -u memprofd --no-pager -o cat | grep -q "control socket from the service manager"'
check "  ... profile ids continue after the restart" eval \
	"ncx memprofctl attach $WP | grep -q '^Profile $((NI + 1)) sampling'"
check "  ... the socket survives a restart of the service" eval \
	'ncx systemctl restart memprofd.service && ncx memprofctl list > /dev/null'
check "systemctl stop memprofd.socket memprofd" ncx systemctl stop memprofd.socket memprofd.service
exit $((FAILS > 0))
