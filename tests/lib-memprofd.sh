# shellcheck shell=bash
# Helpers shared by the bpf and system tiers (sourced; not a test): bounded waits and a private
# memprofd. Needs MP_BUILD.

# Bounded wait for a condition (tests may poll; the daemon never does).
wait_until() {	# wait_until SECONDS COMMAND...
	local t=$1 i; shift
	for ((i = 0; i < t * 20; i++)); do
		"$@" && return 0
		sleep 0.05
	done
	return 1
}

# memprofd_up SOCKET STATE-DIR LOG [memprofd options...]: start a private memprofd (with an
# empty configuration file beside LOG, NAME.conf for NAME.log), its output appended to LOG, its
# pid in DPID; wait up to 20 s until it answers on SOCKET. Returns non-zero if it never does.
memprofd_up() {
	local sock=$1 state=$2 log=$3; shift 3
	: > "${log%.log}.conf"
	"$MP_BUILD/bin/memprofd" --socket "$sock" --state-dir "$state" --config "${log%.log}.conf" \
		"$@" >> "$log" 2>&1 &
	DPID=$!
	wait_until 20 "$MP_BUILD/bin/memprofctl" --socket "$sock" status >/dev/null 2>&1
}
