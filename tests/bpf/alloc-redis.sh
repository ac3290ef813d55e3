#!/bin/bash
# A real multi-threaded service from Debian, attached while it runs: redis-server (jemalloc,
# Debian's libjemalloc2) on a loopback port, no persistence, profiled by a private memprofd
# through `memprofctl attach` while redis-benchmark sends a bounded number of requests
# (-n 20000, 127.0.0.1 only). The trace decodes strictly, holds samples and frees, and its top
# allocation sites (memprofctl report) are named functions of redis, not addresses.
. "$(dirname "$0")/record.lib"

MEMPROFD=$MP_BUILD/bin/memprofd
for c in redis-server redis-cli redis-benchmark; do
	command -v "$c" >/dev/null || { echo "$c not installed (scripts/debian-packages)"; exit 77; }
done
[ -x "$MEMPROFD" ] || { fail "missing $MEMPROFD (make all)"; exit 1; }

SOCK=$T/bus
DPID= RPID=
cleanup() {
	[ -n "$RPID" ] && kill -KILL "$RPID" 2>/dev/null && wait "$RPID" 2>/dev/null
	[ -n "$DPID" ] && kill -TERM "$DPID" 2>/dev/null && wait "$DPID" 2>/dev/null
}
trap cleanup EXIT
ctl() { "$CTL" --socket "$SOCK" "$@"; }

if ! memprofd_up "$SOCK" "$T/state" "$T/memprofd.log" --seed 99; then
	fail "memprofd did not come up"
	cat "$T/memprofd.log"
	exit 1
fi

mkdir -p "$T/redis"
# A free loopback port: a few tries, in case another test holds one.
up=false
for try in 1 2 3 4 5; do
	PORT=$((20000 + ($$ * 7 + try * 131) % 20000))
	redis-server --bind 127.0.0.1 --port "$PORT" --save "" --appendonly no --dir "$T/redis" \
		--daemonize no --io-threads 2 --logfile "$T/redis/log" &
	RPID=$!
	if wait_until 20 eval "redis-cli -h 127.0.0.1 -p $PORT ping 2>/dev/null | grep -q PONG ||
		! kill -0 $RPID 2>/dev/null"; then
		kill -0 "$RPID" 2>/dev/null && { up=true; break; }
	fi
	kill -KILL "$RPID" 2>/dev/null; wait "$RPID" 2>/dev/null; RPID=
done
ok "redis-server answers on 127.0.0.1:$PORT" $up
$up || { tail -n 5 "$T/redis/log"; exit 1; }
ok "redis-server uses jemalloc" grep -q libjemalloc "/proc/$RPID/maps"
ok "redis-server runs several threads" [ "$(ls "/proc/$RPID/task" | wc -l)" -gt 1 ]

out=$(ctl attach -r 1e-3 "$RPID" 2>"$T/attach.err")
ID=$(echo "$out" | awk '/^Profile [0-9]+ / {print $2; exit}')
ok "attach to the running redis-server ($out $(cat "$T/attach.err"))" [ -n "$ID" ]

timeout 120 redis-benchmark -h 127.0.0.1 -p "$PORT" -n 20000 -c 8 -d 256 -q \
	-t set,get,lpush,lpop,sadd,hset,mset >"$T/bench.out" 2>&1
brc=$?
ok "redis-benchmark completed ($(tr '\r' '\n' < "$T/bench.out" | grep -c 'requests per second') tests)" \
	[ "$brc" -eq 0 ]
# some keys stay live
redis-cli -h 127.0.0.1 -p "$PORT" dbsize >"$T/dbsize" 2>&1

ok "stop" eval "ctl stop $ID | grep -q 'Profile $ID stopped'"
ok "discard" eval "ctl discard $ID | grep -q 'Profile $ID discarded'"
TRACE=$T/state/profiles/$ID/$RPID-redis-server.ctf
ok "trace written under the state directory" [ -s "$TRACE" ]
"$CHECK" strict "$TRACE"
read -r A C < <("$CTL" dump "$TRACE" | awk '$2 == "alloc" {a++} $2 == "collect" {c++}
	END {print a + 0, c + 0}')
ok "the trace holds samples ($A) and frees ($C)" [ "${A:-0}" -gt 200 ] && [ "${C:-0}" -gt 50 ]

"$CTL" report -q -n 10 "$TRACE" >"$T/report.out" 2>&1
table=$(sed -n '/^Top [0-9]* sites by estimated bytes/,/^$/p' "$T/report.out")
sed 's/^/    /' <<< "$table"
# The three biggest sites (last column of the table): named functions, not addresses
# ("lib.so+0x..."), and redis' own allocation wrappers (zmalloc, zrealloc_usable, sds*, ...).
top=$(awk 'NR > 2 && NF {print $NF}' <<< "$table" | head -n 3)
ok "the top sites are named: $(echo $top)" \
	bash -c "[ \$(wc -l <<< '$top') -eq 3 ] && ! grep -Eq '(^0x[0-9a-f]+|\+0x[0-9a-f]+|^\?)$' <<< '$top'"
ok "the top sites are redis functions" \
	bash -c "[ \$(grep -Ec '^(z(try)?(malloc|calloc|realloc)|sds|createObject|createStringObject|dict|_dict|list|quicklist|lp|createClient|_addReply)' <<< '$top') -ge 2 ]"
exit 0
