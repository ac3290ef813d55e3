#!/bin/bash
# memprofctl top on memprofd's profiles: by profile ID and by PID, the live bytes of a real
# process (svc_phases keeps 2000 blocks of 4000 bytes at main) within 4 SE of the truth, read
# from the profile's own trace while it is written; a PID no profile holds is refused by name;
# a profile that no longer samples ends the view after one refresh.
. "$(dirname "$0")/lib-service.sh"
svc_require
svc_start --seed 7

# main_live FILE: "LIVE SE" of main's row in a plain top table
main_live() {
	/usr/bin/python3 - "$1" <<'PY'
import re, sys
unit = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}
for line in open(sys.argv[1]):
    if line.rstrip().endswith("  main"):
        (v, u), (s, su) = re.findall(r"([\d.]+) (\w+)", line)[:2]
        print(float(v) * unit[u], float(s) * unit[su])
        break
PY
}
near() { /usr/bin/python3 -c 'import sys; l, s = map(float, sys.argv[1:3]);
sys.exit(0 if s > 0 and abs(l - 8e6) <= 4 * s else 1)' "${1:-0}" "${2:-0}"; }

W=$(phases_start -- 2000 4000)
ID=$(ctl attach -r 0.01 "$W" | attach_id)
phases_do "$W" USR1 allocated
sleep 1.5	# the daemon writes pending packets once a second

ctl top -n 1 "$ID" > "$MP_TMP/by-id.txt" 2> "$MP_TMP/top.err"
check "top ID: exit status 0" [ $? = 0 ]
read -r live se < <(main_live "$MP_TMP/by-id.txt")
echo "    by id: main live ${live:-?} ± ${se:-?}"
check "top ID: main's live bytes within 4 SE of 8,000,000" near "$live" "$se"
ctl top -n 1 "$W" > "$MP_TMP/by-pid.txt" 2>> "$MP_TMP/top.err"
check "top PID: exit status 0" [ $? = 0 ]
read -r live se < <(main_live "$MP_TMP/by-pid.txt")
check "top PID: main's live bytes within 4 SE of 8,000,000" near "$live" "$se"
check "top PID: its one trace" grep -q ' - 1 trace, ' "$MP_TMP/by-pid.txt"

ctl top -n 1 999999999 > /dev/null 2> "$MP_TMP/err"
check "top of a pid no profile holds fails (exit 1)" [ $? = 1 ]
check "  ... naming it" grep -q "999999999 is neither a profile ID nor a process of a profile" \
	"$MP_TMP/err"

ctl stop "$ID" > /dev/null
timeout 20 "$MEMPROFCTL" --socket "$SOCK" top -n 5 -d 2 "$ID" > "$MP_TMP/stopped.txt" 2>&1
check "a stopped profile: one last refresh, then top ends" \
	[ "$(grep -c '^memprofctl top - ' "$MP_TMP/stopped.txt")" = 1 ]
check "  ... saying the profile no longer samples" \
	grep -q '(profile no longer sampling)' "$MP_TMP/stopped.txt"
ctl discard "$ID" > /dev/null
[ -s "$MP_TMP/top.err" ] && sed 's/^/    top: /' "$MP_TMP/top.err"
svc_stop
check "memprofd exits 0" [ $? = 0 ]
exit $((FAILS > 0))
