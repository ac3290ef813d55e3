#!/bin/bash
# Overhead control: a process whose probes cost more than --max-overhead (percent of one CPU,
# averaged over 1 s) is detached, never silently: record's summary and --json name it with the
# reason, its trace is complete and its context says so; a light allocator user under the same
# budget is not detached, and without a budget nothing is.
. "$(dirname "$0")/record.lib"

LOOP=$WL/ovh_loop
[ -x "$LOOP" ] || { fail "missing $LOOP (make test-bins)"; exit 1; }

record_json() {	# as record(), with memprofctl's global --json (summary as JSON on stderr)
	local name=$1; shift
	"$CTL" --json record "$@" >"$T/$name.out" 2>"$T/$name.err"
	rc=$?
	sed "s/^/    [$name] /" "$T/$name.err"
}

# A hog: malloc/free as fast as it can for 3 s (hundreds of thousands of probe hits a second,
# each ~0.5-1 us: tens of percent of a CPU), budget 2%.
record hog --unwind fp --max-overhead 2 -o "$T/hog.ctf" -- "$LOOP" hog 3
ok "hog: exit status 0" [ "$rc" -eq 0 ]
ok "hog: the workload ran to its end" grep -q "^pairs " "$T/hog.out"
ok "hog: the summary says it was detached, with the reason" \
	grep -q "(pid [0-9]*): DETACHED before it exited: probe overhead .* exceeded the budget of 2%" \
	"$T/hog.err"
ok "hog: no drop reported (its probes' last hits are ignored, not foreign)" \
	grep -q "drops: none" "$T/hog.err"
ok "hog: the trace is complete and its context notes the detach" \
	grep -q "detached before exit: probe overhead .* exceeded the budget of 2%" \
	<(context_of "$T/hog.ctf")

record_json hog-json --unwind fp --max-overhead 2 -o "$T/hog-json.ctf" -- "$LOOP" hog 3
ok "hog --json: exit status 0" [ "$rc" -eq 0 ]
ok "hog --json: detached_reason names the budget" \
	grep -q '"detached_reason":"probe overhead [0-9.]*% of a CPU ([0-9]* probe hits in [0-9.]* s) exceeded the budget of 2%"' \
	"$T/hog-json.err"
ok "hog --json: probe hits counted" grep -q '"probe_hits":[1-9][0-9]*' "$T/hog-json.err"

# A light user (10 pairs every 10 ms: ~2000 hits/s, well under 1% of a CPU) under a 5% budget.
record_json paced --unwind fp --max-overhead 5 -o "$T/paced.ctf" -- "$LOOP" paced 2.5
ok "paced: exit status 0" [ "$rc" -eq 0 ]
ok "paced: not detached" grep -q '"detached_reason":null' "$T/paced.err"
ok "paced: its probe hits were counted" grep -q '"probe_hits":[1-9][0-9]*' "$T/paced.err"

# No budget: the hog keeps its probes to the end.
record_json nobudget --unwind fp -o "$T/nobudget.ctf" -- "$LOOP" hog 1.5
ok "no budget: exit status 0" [ "$rc" -eq 0 ]
ok "no budget: not detached" grep -q '"detached_reason":null' "$T/nobudget.err"
"$CHECK" info "$T/nobudget.ctf" >"$T/nobudget.info"
ok "no budget: complete trace, no detach in its context" \
	bash -c "grep -q '^context ' '$T/nobudget.info' && ! grep -q detached '$T/nobudget.info'"

# Bad budgets are refused.
record badbudget --max-overhead -1 -o "$T/bad.ctf" -- "$LOOP" pairs 10
ok "--max-overhead -1 is refused (exit 2)" [ "$rc" -eq 2 ]
record badbudget2 --max-overhead 5x -o "$T/bad.ctf" -- "$LOOP" pairs 10
ok "--max-overhead 5x is refused (exit 2)" [ "$rc" -eq 2 ]

# The service: a private memprofd; `memprofctl attach --max-overhead` and `status` show the
# detach with its reason (text and JSON), and the manifest records it.
MEMPROFD=$MP_BUILD/bin/memprofd
if [ -x "$MEMPROFD" ]; then
	S=$T/svc
	mkdir -p "$S"
	up=false
	memprofd_up "$S/bus" "$S/state" "$S/memprofd.log" --log-level debug && up=true
	ok "service: memprofd answers on a private socket" $up
	if $up; then
		"$LOOP" hog 4 >"$S/hog.out" &
		hpid=$!
		"$CTL" --socket "$S/bus" attach --max-overhead 2 "$hpid" >"$S/attach.out" 2>&1
		ok "service: attach --max-overhead 2" grep -q "^Profile [0-9]* sampling" "$S/attach.out"
		id=$(sed -n 's/^Profile \([0-9]*\) sampling.*/\1/p' "$S/attach.out")
		detached=false
		for _ in $(seq 60); do
			"$CTL" --socket "$S/bus" status "${id:-1}" >"$S/status.out" 2>&1
			grep -q "DETACHED" "$S/status.out" && { detached=true; break; }
			sleep 0.1
		done
		sed "s/^/    [status] /" "$S/status.out"
		ok "service: status shows the process DETACHED with the reason" \
			grep -q "^  $hpid *DETACHED: probe overhead .* exceeded the budget of 2%" \
			"$S/status.out"
		"$CTL" --socket "$S/bus" --json status "${id:-1}" >"$S/status.json" 2>&1
		ok "service: status --json has detached_reason" \
			grep -q '"detached_reason":"probe overhead .* exceeded the budget of 2%"' \
			"$S/status.json"
		ok "service: the manifest records the budget and the detach" \
			bash -c "grep -q '\"max_overhead\":2' '$S'/state/profiles/*/manifest.json &&
				 grep -q '\"detached_reason\":\"probe overhead' '$S'/state/profiles/*/manifest.json"
		wait "$hpid"
		ok "service: the detached workload ran to its end" grep -q "^pairs " "$S/hog.out"
		$detached || sed "s/^/    [memprofd] /" "$S/memprofd.log"
	fi
	kill -TERM "$DPID" 2>/dev/null
	wait "$DPID"
	ok "service: memprofd exits cleanly" [ $? -eq 0 ]
else
	echo "# no memprofd built: service part skipped"
fi
