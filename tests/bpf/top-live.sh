#!/bin/bash
# memprofctl top on a trace being written: `memprofctl record` samples svc_phases, which keeps
# 2000 blocks of 4000 bytes live at main on SIGUSR1 and frees them on SIGUSR2. top's plain
# output (not a terminal) shows main's 8,000,000 live bytes within 4 SE while they are live, and
# none once they are freed, with no allocation over the last interval then; in a terminal
# (tmux) the view is drawn, 'r' sorts it by rate and 'q' quits and restores the screen.
set -u
[ "$(id -u)" -eq 0 ] || { echo "needs root for BPF"; exit 77; }
ctl=$MP_BUILD/bin/memprofctl
wl=$MP_BUILD/tests/workloads/svc_phases
tmp=${MP_TMP:-$(mktemp -d)}
py=/usr/bin/python3

for f in "$ctl" "$wl"; do
	[ -x "$f" ] || { echo "FAIL: setup ($f is not built)"; exit 1; }
done
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; }
ok() { local n=$1; shift; if "$@"; then pass "$n"; else fail "$n"; fi; }

mkfifo "$tmp/out"
"$ctl" record -r 0.01 --seed 3 -o "$tmp/top.ctf" -- "$wl" 2000 4000 >"$tmp/out" \
	2>"$tmp/record.err" &
rec=$!
exec 3<"$tmp/out"
line() {	# line WORD: wait for svc_phases' next line, which must start with WORD
	local l
	read -r -t 30 l <&3 && [ "${l%% *}" = "$1" ] && echo "$l"
}
ready=$(line ready) || { fail "setup: svc_phases did not start"; cat "$tmp/record.err"; exit 1; }
P=${ready#ready }
kill -USR1 "$P"
line allocated >/dev/null || { fail "setup: no allocation"; kill "$P"; exit 1; }
sleep 1.5	# the trace is flushed once a second

# main_row FILE: main's live bytes, their SE and its rate in bytes/s, from a plain table
main_row() {
	"$py" - "$1" <<'EOF'
import re, sys
unit = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}
def val(s):
    m = re.match(r"([\d.]+) (\w+)", s)
    return float(m.group(1)) * unit[m.group(2)]
for line in open(sys.argv[1]):
    if line.rstrip().endswith("  main"):
        cells = re.findall(r"([\d.]+ \w+)(?:/s)? ± ([\d.]+ \w+)", line)
        print(val(cells[0][0]), val(cells[0][1]), val(cells[2][0]))
        break
EOF
}

"$ctl" top -n 2 -d 0.5 "$tmp/top.ctf" >"$tmp/live.txt" 2>"$tmp/top.err"
ok "top -n 2: exit status 0" [ $? -eq 0 ]
ok "top -n 2: two refreshes, plain" [ "$(grep -c '^memprofctl top - ' "$tmp/live.txt")" = 2 ]
ok "top -n 2: no escape sequence when not a terminal" bash -c "! grep -q $'\e' '$tmp/live.txt'"
read -r live se rate < <(main_row "$tmp/live.txt")
echo "    main: live ${live:-?} ± ${se:-?} bytes, rate ${rate:-?} B/s"
ok "main's live bytes within 4 SE of 8,000,000" \
	"$py" -c "import sys; l, s = float(sys.argv[1]), float(sys.argv[2]);
sys.exit(0 if s > 0 and abs(l - 8e6) <= 4 * s else 1)" "${live:-0}" "${se:-0}"

# In a terminal: drawn in place; r sorts by rate; q quits.
if command -v tmux >/dev/null; then
	sock="$tmp/tmux.sock"
	tmux -S "$sock" new-session -d -x 150 -y 30 \
		"$ctl top -d 0.5 '$tmp/top.ctf'; echo EXITED \$?; sleep 30"
	sleep 2
	tmux -S "$sock" capture-pane -p > "$tmp/tty1.txt"
	ok "terminal: sorted by live, its column marked" \
		grep -q 'sorted by live' "$tmp/tty1.txt"
	ok "terminal: main's row drawn" grep -q '  main$' "$tmp/tty1.txt"
	tmux -S "$sock" send-keys r
	sleep 1.5
	tmux -S "$sock" capture-pane -p > "$tmp/tty2.txt"
	ok "terminal: r sorts by rate" grep -q 'sorted by rate.*' "$tmp/tty2.txt"
	ok "terminal: the rate column marked" grep -q 'RATE\*' "$tmp/tty2.txt"
	tmux -S "$sock" send-keys q
	sleep 1
	tmux -S "$sock" capture-pane -p > "$tmp/tty3.txt"
	ok "terminal: q quits with status 0" grep -q '^EXITED 0' "$tmp/tty3.txt"
	ok "terminal: the screen is restored (the view is gone)" \
		bash -c "! grep -q 'memprofctl top - ' '$tmp/tty3.txt'"
	tmux -S "$sock" kill-server 2>/dev/null
else
	echo "SKIP: terminal checks (no tmux)"
fi

# Freed: nothing live at main, no allocation over the last interval.
kill -USR2 "$P"
line freed >/dev/null || fail "setup: no free"
sleep 1.5
"$ctl" top -n 1 -d 1 "$tmp/top.ctf" >"$tmp/freed.txt" 2>>"$tmp/top.err"
read -r live se rate < <(main_row "$tmp/freed.txt")
echo "    main after the free: live ${live:-?} ± ${se:-?} bytes, rate ${rate:-?} B/s"
ok "freed: main's live bytes below 1% of what they were" \
	"$py" -c "import sys; sys.exit(0 if float(sys.argv[1]) < 8e4 else 1)" "${live:-1e9}"
ok "freed: no allocation over the last interval" \
	"$py" -c "import sys; sys.exit(0 if float(sys.argv[1]) == 0 else 1)" "${rate:-1}"

kill -TERM "$P"
wait "$rec"
ok "record: exit status 0" [ $? -eq 0 ]

ok "usage error: a bad --sort names the key" \
	bash -c "'$ctl' top -s size '$tmp/top.ctf' 2>&1 >/dev/null | grep -q \"unknown sort key 'size'\""
ok "an unreadable trace is named" \
	bash -c "'$ctl' top '$tmp/none.ctf' 2>&1 | grep -q \"Cannot read '$tmp/none.ctf'\""
[ -s "$tmp/top.err" ] && sed 's/^/    top: /' "$tmp/top.err"
exit 0
