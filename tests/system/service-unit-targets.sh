#!/bin/bash
# `memprofctl attach --unit` under a real systemd (booted in a container with systemd-nspawn,
# memprofd installed and started as its unit): a unit with two processes is profiled by its
# name; restarted, its new processes (a new cgroup of the same path) join the profile; a unit
# attached before it starts is taken when it starts; unknown units are refused by name; a
# standing profile of /etc/memprofd.conf ([Profile] Target=unit:...) starts at boot.
set -u
. "$(dirname "$0")/lib-nspawn.sh"
nspawn_available || exit 77
trap 'nspawn_teardown' EXIT

RF=$MP_TMP/rootfiles
LX=$NSPAWN_LX
nspawn_rootfiles "$RF" || exit 1
mkdir -p "$RF/etc/systemd/system"
# Two processes: a helper in the background, the main process exec'd by the shell.
for u in mp-two mp-later mp-boot; do
	cat > "$RF/etc/systemd/system/$u.service" <<EOF
[Service]
ExecStart=/bin/sh -c '$LX/svc_phases 300 1000 > /run/$u.helper & exec $LX/svc_phases 300 1000 > /run/$u.main'
EOF
done

# At boot (the container boots basic.target): memprofd with a standing profile of mp-boot.
mkdir -p "$RF/etc/systemd/system/basic.target.wants"
ln -s /usr/local/lib/systemd/system/memprofd.service "$RF/etc/systemd/system/basic.target.wants/"
ln -s /etc/systemd/system/mp-boot.service "$RF/etc/systemd/system/basic.target.wants/"
printf '[Profile]\nName=at-boot\nTarget=unit:mp-boot\nRate=0.01\n' > "$RF/etc/memprofd.conf"

nspawn_boot "$RF" || { echo "FAIL: boot a container"; exit 1; }
pass "systemd booted in a container"
check "systemctl start memprofd" \
	timeout 60 nsenter -t "$NSPAWN_PID1" -a systemctl start memprofd.service
check "systemctl start mp-two (two processes)" ncx systemctl start mp-two.service
wait_until 10 eval 'ncx grep -q ready /run/mp-two.main && ncx grep -q ready /run/mp-two.helper'

# procs ID: "PID COMM EXITED BLOCKS" per process of profile ID
procs() {
	ncx memprofctl --json status "$1" | /usr/bin/python3 -c '
import json, sys
for p in json.load(sys.stdin)["processes"]:
    print(p["pid"], p["comm"], p["exited"], p["sampled_blocks"])'
}
pids_of() { ncx cat "/sys/fs/cgroup/$1/cgroup.procs" 2> /dev/null ||
	    ncx cat "/sys/fs/cgroup/unified/$1/cgroup.procs"; }

check "memprofd started at boot" eval '[ "$(ncx systemctl is-active memprofd.service)" = active ]'
BID=$(ncx memprofctl --json list | /usr/bin/python3 -c '
import json, sys
print(" ".join(str(p["id"]) for p in json.load(sys.stdin)))')
BID=${BID%% *}
check "  ... with the standing profile of memprofd.conf" \
	eval "ncx memprofctl status $BID | grep -q 'Standing: *\[Profile\] at-boot'"
wait_until 20 eval "[ \$(procs $BID | grep -c ' svc_phases ') = 2 ]"
check "  ... holding the two processes of unit mp-boot, started at boot too" \
	eval "[ \$(procs $BID | grep -c ' svc_phases ') = 2 ]"

ID=$(ncx memprofctl attach -r 0.01 --unit mp-two | awk '/^Profile/ {print $2}')
check "memprofctl attach --unit mp-two (no PID)" [ -n "$ID" ]
check "  ... status names the unit's target" eval \
	"ncx memprofctl status $ID | grep -q 'Target: *unit:mp-two '"
UNITPIDS=$(pids_of system.slice/mp-two.service | sort -n | tr '\n' ' ')
check "  ... its two processes joined ($UNITPIDS)" \
	eval "[ \$(procs $ID | grep -c ' svc_phases ') = 2 ]"
MAIN=$(ncx systemctl show -p MainPID --value mp-two.service)
ncx kill -USR1 "$MAIN"
wait_until 10 eval "[ \$(procs $ID | awk '\$1 == $MAIN {print \$4}') -gt 100 ]"
check "  ... the main process is sampled" \
	eval "[ \$(procs $ID | awk '\$1 == $MAIN {print \$4}') -gt 100 ]"

check "systemctl restart mp-two" ncx systemctl restart mp-two.service
wait_until 10 eval 'ncx grep -q ready /run/mp-two.main'
MAIN2=$(ncx systemctl show -p MainPID --value mp-two.service)
wait_until 10 eval "procs $ID | grep -q '^$MAIN2 '"
check "the unit's next main process joined after the restart ($MAIN -> $MAIN2)" \
	eval "procs $ID | grep -q '^$MAIN2 svc_phases False'"
check "  ... and so did its helper (4 processes in all)" \
	eval "[ \$(procs $ID | grep -c ' svc_phases ') = 4 ]"
check "  ... the old ones exited" eval "[ \$(procs $ID | grep -c ' True ') = 2 ]"
check "  ... the profile is still sampling" \
	eval "ncx memprofctl status $ID | grep -q '^Profile $ID: sampling'"
ncx kill -USR1 "$MAIN2"
wait_until 10 eval "[ \$(procs $ID | awk '\$1 == $MAIN2 {print \$4}') -gt 100 ]"
check "  ... the new main process is sampled" \
	eval "[ \$(procs $ID | awk '\$1 == $MAIN2 {print \$4}') -gt 100 ]"

LID=$(ncx memprofctl attach -r 0.01 --unit mp-later.service | awk '/^Profile/ {print $2}')
check "attach --unit of a unit not running" [ -n "$LID" ]
check "  ... its cgroup is absent for now" eval "ncx memprofctl status $LID | grep -q 'absent now'"
check "systemctl start mp-later" ncx systemctl start mp-later.service
wait_until 10 eval "[ \$(procs $LID | grep -c ' svc_phases ') = 2 ]"
check "  ... its two processes joined when it started" \
	eval "[ \$(procs $LID | grep -c ' svc_phases ') = 2 ]"

ncx memprofctl attach --unit no-such-unit > /dev/null 2> "$MP_TMP/err"
check "attach --unit of a unit systemd does not know is refused" \
	grep -q "Unit no-such-unit.service is not known to systemd" "$MP_TMP/err" || cat "$MP_TMP/err"

for p in $ID $LID; do
	ncx memprofctl stop "$p" > /dev/null && ncx memprofctl discard "$p" > /dev/null
done
n=0
for t in $(ncx sh -c "ls /var/lib/memprofd/profiles/$ID/*.ctf"); do
	ncx memprofctl dump "$t" > /dev/null && n=$((n + 1))
done
check "the four traces of the unit's processes read strictly ($n)" [ "$n" = 4 ]
exit $((FAILS > 0))
