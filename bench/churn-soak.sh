#!/bin/bash
# bench-churn: what a profile of a process that starts short processes all day costs memprofd.
# A private memprofd (socket and state directory in a temporary directory) profiles, at rate
# 1e-3, a shell loop that runs /bin/true, /usr/bin/env true and sleep 0.02 (about 35 to 100
# short processes a second, as the host's CPUs allow), for DURATION seconds (default 900).
# Every INTERVAL seconds (default 60) it prints memprofd's RSS and anonymous RSS (KiB), open
# fds, CPU time (s), the files in the profile's directory, the lines of `memprofctl status` and
# the processes the loop started; then SIGTERM and the milliseconds memprofd took to exit. The
# last line is the growth per minute of RSS, fds and files over the second half of the run and
# the anonymous RSS per trace file made then; it goes to bench/results/churn-latest.txt
# (BENCH_OUT=FILE: there). Not a test; needs root.
set -eu
B=${BENCH_BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
DURATION=${DURATION:-900}
INTERVAL=${INTERVAL:-60}
OUT=${BENCH_OUT:-$(cd "$(dirname "$0")" && pwd)/results/churn-latest.txt}
[ "$(id -u)" = 0 ] || { echo "bench-churn: needs root" >&2; exit 1; }
for f in "$B/bin/memprofd" "$B/bin/memprofctl"; do
	[ -x "$f" ] || { echo "bench-churn: $f is not built (make all)" >&2; exit 1; }
done
tmp=$(mktemp -d)
dpid= lpid=
cleanup() {
	[ -n "$lpid" ] && kill "$lpid" 2> /dev/null
	[ -n "$dpid" ] && kill "$dpid" 2> /dev/null && wait "$dpid" 2> /dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
ctl() { "$B/bin/memprofctl" --socket "$tmp/bus" "$@"; }

"$B/bin/memprofd" --socket "$tmp/bus" --state-dir "$tmp/state" --log-level warning \
	> "$tmp/memprofd.log" 2>&1 &
dpid=$!
for _ in $(seq 100); do ctl list > /dev/null 2>&1 && break; sleep 0.1; done
if ! ctl list > /dev/null; then
	cat "$tmp/memprofd.log" >&2
	echo "bench-churn: memprofd did not come up" >&2
	exit 1
fi
bash -c 'n=0; while :; do /bin/true; /usr/bin/env true; sleep 0.02; n=$((n + 3));
	echo $n > '"$tmp"'/n; done' &
lpid=$!
ctl attach -r 1e-3 "$lpid" > /dev/null

tick=$(getconf CLK_TCK)
sample() {	# t rss_kib rss_anon_kib fds cpu_s files status_lines started
	local st
	st=($(awk '{print $14, $15}' "/proc/$dpid/stat"))
	echo "$1 $(awk '/^VmRSS|^RssAnon/ {printf "%s ", $2}' "/proc/$dpid/status")" \
		"$(ls "/proc/$dpid/fd" | wc -l)" \
		"$(( (st[0] + st[1]) / tick )) $(find "$tmp/state" -type f | wc -l)" \
		"$(ctl status 1 2> /dev/null | wc -l) $(cat "$tmp/n" 2> /dev/null || echo 0)"
}
echo "t_s rss_kib rss_anon_kib fds cpu_s files status_lines started"
: > "$tmp/samples"
for ((t = INTERVAL; t <= DURATION; t += INTERVAL)); do
	sleep "$INTERVAL"
	sample "$t" | tee -a "$tmp/samples"
done
kill "$lpid"
lpid=
t0=$(date +%s%N)
kill -TERM "$dpid"
wait "$dpid" || true
dpid=
stop=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "stop_ms $stop"
mkdir -p "$(dirname "$OUT")"
awk -v d="$DURATION" -v stop="$stop" '
	{ t[NR] = $1; r[NR] = $2; a[NR] = $3; f[NR] = $4; n[NR] = $6 }
	END {
		h = int((NR + 1) / 2); if (h < 1) h = 1
		m = (t[NR] - t[h]) / 60; if (m <= 0) m = 1
		np = n[NR] - n[h]; if (np <= 0) np = 1
		printf "churn %ds: second half per minute: rss_kib %+.0f (anon %+.0f) fds %+.1f " \
		       "files %+.0f; anon KiB per trace file %+.2f; rss_kib at end %d; " \
		       "stop_ms %d\n", d, (r[NR] - r[h]) / m, (a[NR] - a[h]) / m,
		       (f[NR] - f[h]) / m, np / m, (a[NR] - a[h]) / np, r[NR], stop
	}' "$tmp/samples" | tee "$OUT"
