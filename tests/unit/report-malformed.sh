#!/bin/bash
# memprofctl report on malformed input: the reader's message (offset and rule) on stderr, exit
# status 1, nothing on stdout, never a crash. A trace cut inside a later packet is the
# readable prefix a dying process leaves: reported with a warning, exit 0.
set -u
ctl=$MP_BUILD/bin/memprofctl
fx=$MP_SRC/tests/fixtures/memtrace/upstream-v2.ctf
tmp=${MP_TMP:-$(mktemp -d)}

[ -x "$ctl" ] || { echo "FAIL: setup ($ctl is not built)"; exit 1; }

bad() {	# name file regexp-of-message [extra args]
	local name=$1 file=$2 re=$3; shift 3
	"$ctl" report -q "$@" "$file" >"$tmp/out" 2>"$tmp/err"
	local rc=$?
	if [ $rc -eq 1 ] && [ ! -s "$tmp/out" ] &&
	   grep -Eq "^memprofctl report: Failed to read '.*': $re" "$tmp/err"; then
		echo "PASS: $name"
	else
		echo "FAIL: $name (exit $rc)"; cat "$tmp/err"; head -c 300 "$tmp/out"
	fi
}

: >"$tmp/empty.ctf"
head -c 10 "$fx" >"$tmp/short.ctf"
head -c 100 "$fx" >"$tmp/info.ctf"
head -c 4096 /dev/urandom >"$tmp/garbage.ctf"
printf 'not a trace at all\n' >"$tmp/text.ctf"
# Valid start, garbage in the middle of the first event packet.
{ head -c 5000 "$fx"; head -c 3000 /dev/zero | tr '\0' '\173'; tail -c +8001 "$fx"; } \
	>"$tmp/corrupt.ctf"

bad empty "$tmp/empty.ctf" 'offset 0: '
bad truncated-header "$tmp/short.ctf" 'offset 0: .*truncated'
bad truncated-info "$tmp/info.ctf" 'offset 0: .*truncated'
bad garbage "$tmp/garbage.ctf" 'offset 0: .*magic'
bad text "$tmp/text.ctf" 'offset 0: '
bad corrupt "$tmp/corrupt.ctf" 'offset [0-9]+: '
bad corrupt-json "$tmp/corrupt.ctf" 'offset [0-9]+: ' --json --flamegraph "$tmp/f.svg"
bad missing "$tmp/does-not-exist.ctf" '.*No such file'
[ -e "$tmp/f.svg" ] && echo "FAIL: no-output-on-error (flame graph written)" ||
	echo "PASS: no-output-on-error"

# A good trace then a bad one: still an error (no partial merged report).
"$ctl" report -q "$fx" "$tmp/garbage.ctf" >"$tmp/out" 2>"$tmp/err"
if [ $? -eq 1 ] && [ ! -s "$tmp/out" ] && grep -q "garbage.ctf" "$tmp/err"; then
	echo "PASS: good-then-bad"
else
	echo "FAIL: good-then-bad"
fi

# Cut inside a later packet: a warning naming the offset, the prefix is reported.
head -c 30000 "$fx" >"$tmp/prefix.ctf"
"$ctl" report -q --json "$tmp/prefix.ctf" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -eq 0 ] && grep -q "warning: .* at offset [0-9]*:" "$tmp/err" &&
   /usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); t=r["traces"][0]; sys.exit(0 if 0 < t["sampled_blocks"] < 4298 and t["warnings"] >= 1 else 1)' "$tmp/out"; then
	echo "PASS: truncated-tail"
else
	echo "FAIL: truncated-tail (exit $rc)"; cat "$tmp/err"
fi

# Every prefix length and random byte flips: exit 0 or 1, never a signal.
crashes=0
size=$(stat -c %s "$fx")
for n in $(seq 0 97 "$size"); do
	head -c "$n" "$fx" >"$tmp/p.ctf"
	"$ctl" report -q "$tmp/p.ctf" >/dev/null 2>&1
	rc=$?
	[ $rc -le 1 ] || { echo "  prefix $n: exit $rc"; crashes=$((crashes + 1)); }
done
for seed in $(seq 1 40); do
	/usr/bin/python3 - "$fx" "$tmp/flip.ctf" "$seed" <<'EOF'
import random, sys
data = bytearray(open(sys.argv[1], "rb").read())
rnd = random.Random(int(sys.argv[3]))
for _ in range(rnd.randint(1, 8)):
    data[rnd.randrange(len(data))] = rnd.randrange(256)
open(sys.argv[2], "wb").write(data)
EOF
	"$ctl" report -q --flamegraph "$tmp/flip.svg" --pprof "$tmp/flip.pb.gz" "$tmp/flip.ctf" \
		>/dev/null 2>&1
	rc=$?
	[ $rc -le 1 ] || { echo "  flip seed $seed: exit $rc"; crashes=$((crashes + 1)); }
done
if [ $crashes -eq 0 ]; then echo "PASS: no-crash"; else echo "FAIL: no-crash ($crashes)"; fi
