#!/bin/bash
# The cooperative fast path in programs linked with another allocator: libmemprof-preload must
# forward to it (the next malloc in the symbol search order), not to glibc. `memprofctl record
# --preload` on the jemalloc workload completes with the standard-API sites within 4 SE of the
# truth (the allocator's own API, mallocx & co., is not interposed by the library and so not in
# a preload trace), and Debian's redis-server (libjemalloc2) runs under the library: ping,
# a short redis-benchmark, shutdown, with the library armed by MEMPROF_ARM.
. "$(dirname "$0")/record.lib"
LIB=$MP_BUILD/lib/libmemprof-preload.so
[ -f "$LIB" ] || { echo "FAIL: missing $LIB (make all)"; exit 1; }
[ -x "$WL/wl_jemalloc" ] || { echo "FAIL: missing $WL/wl_jemalloc (make test-bins)"; exit 1; }

STD_SITES="wl_site_std_small wl_site_std_leak wl_site_std_calloc wl_site_std_realloc
	wl_site_std_memalign"
for rate in 1e-3 1e-2; do
	name=fast-jemalloc-$rate
	record "$name" --preload -r "$rate" --seed 4242 -o "$T/$name.ctf" -- \
		"$WL/wl_jemalloc" api 1
	ok "$name: exit status 0 (not 139: no glibc block handed to jemalloc)" [ "$rc" -eq 0 ]
	ok "$name: profiled in preload mode" grep -q " mode=preload;" <(context_of "$T/$name.ctf")
	ok "$name: no ring-buffer drop" grep -q "ringbuf=0 " <(context_of "$T/$name.ctf")
	# shellcheck disable=SC2086
	"$CHECK" sites "$T/$name.ctf" "$T/$name.out" $STD_SITES
done

# redis-server (jemalloc) under the library, armed: it serves and shuts down cleanly.
if command -v redis-server >/dev/null && command -v redis-cli >/dev/null &&
	command -v redis-benchmark >/dev/null; then
	RPID=
	trap '[ -n "$RPID" ] && kill -KILL "$RPID" 2>/dev/null' EXIT
	mkdir -p "$T/redis"
	up=false
	for try in 1 2 3 4 5; do
		PORT=$((20000 + ($$ * 11 + try * 137) % 20000))
		env LD_PRELOAD="$LIB" MEMPROF_ARM=1 MEMPROF_RATE=1e-3 redis-server \
			--bind 127.0.0.1 --port "$PORT" --save "" --appendonly no --dir "$T/redis" \
			--daemonize no --logfile "$T/redis/log" &
		RPID=$!
		if wait_until 20 eval "redis-cli -h 127.0.0.1 -p $PORT ping 2>/dev/null |
			grep -q PONG || ! kill -0 $RPID 2>/dev/null" &&
			kill -0 "$RPID" 2>/dev/null; then
			up=true
			break
		fi
		wait "$RPID" 2>/dev/null
		RPID=
	done
	ok "redis-server under the preload answers PING on 127.0.0.1:$PORT" $up
	if $up; then
		ok "redis-server maps jemalloc and the preload" bash -c \
			"grep -q libjemalloc /proc/$RPID/maps &&
			 grep -q libmemprof-preload /proc/$RPID/maps"
		timeout 120 redis-benchmark -h 127.0.0.1 -p "$PORT" -n 2000 -q \
			-t set,get,lpush,lpop,incr >"$T/bench.out" 2>&1
		ok "redis-benchmark -n 2000 completed" \
			grep -q "requests per second" <(tr '\r' '\n' <"$T/bench.out")
		redis-cli -h 127.0.0.1 -p "$PORT" shutdown nosave >/dev/null 2>&1
		wait "$RPID"
		rrc=$?
		RPID=
		ok "redis-server shut down cleanly (status $rrc)" [ "$rrc" -eq 0 ]
	else
		tail -n 5 "$T/redis/log"
	fi
else
	echo "redis-server/redis-tools not installed: redis part skipped (scripts/debian-packages)"
fi

"$CHECK" strict "$T"/fast-jemalloc-*.ctf
exit 0
