#!/bin/bash
# libmemprof-preload statistics, in-process (no BPF): run pl_stats under the preload with
# MEMPROF_TEST_LOG and check the hook's records with pl_check: samples per block ~ Binomial(w,
# rate) by chi-square (fixed seed), allocated and live (leaked) words within 4 SE at two rates
# for sizes on both sides of 1/rate, every free matched to its block (cross-thread frees
# included), and several threads giving the same statistics as one.
. "$(dirname "$0")/preload.inc"

run() {	# name rate threads seed classes chi_size [extra pl_check args]
	local name=$1 rate=$2 threads=$3 seed=$4 classes=$5 chi=$6; shift 6
	local log=$MP_TMP/$name.log leaks=$MP_TMP/$name.leaks
	local seedenv=()
	[ "$seed" != - ] && seedenv=(MEMPROF_SEED="$seed")
	if ! env LD_PRELOAD="$PL_LIB" MEMPROF_RATE="$rate" MEMPROF_TEST_LOG=3 "${seedenv[@]}" \
		"$PL_BIN/pl_stats" "$threads" 25 "$classes" 3>"$log" >"$leaks"; then
		fail "$name: workload failed"
		return
	fi
	local chiarg=()
	[ "$chi" != - ] && chiarg=(-x "$chi")
	"$PL_BIN/pl_check" -n "$name" -l "$log" -r "$rate" -T "$threads" -c "$classes" \
		-k "$leaks" "${chiarg[@]}" -s "$@" || pl_failures=$((pl_failures + 1))
}

# rate 1e-2 (1/rate = 100 words): 6, 252 and 2048 words per block
run stats-1e-2 0.01 1 7 2008:20000,40:50000,16376:2000 2008
# rate 1e-4 (1/rate = 10^4 words): 6, 25001 and 162501 words per block
run stats-1e-4 1e-4 1 11 200000:4000,40:300000,1300000:100 200000
# threads: same pattern in 4 threads, frees mostly by another thread
run threads-1e-2 0.01 4 - 2008:10000,40:30000,16376:2000 - -X
run threads-1e-4 1e-4 4 - 200000:1000,40:100000,1300000:30 - -X

# Linked (DT_NEEDED) instead of preloaded: the interposers win over glibc's just the same.
if env MEMPROF_RATE=0.01 MEMPROF_SEED=3 MEMPROF_TEST_LOG=3 "$PL_BIN/pl_stats_linked" 2 25 \
	2008:10000 3>"$MP_TMP/linked.log" >"$MP_TMP/linked.leaks"; then
	"$PL_BIN/pl_check" -n linked -l "$MP_TMP/linked.log" -r 0.01 -T 2 -c 2008:10000 \
		-k "$MP_TMP/linked.leaks" -X || pl_failures=$((pl_failures + 1))
else
	fail "linked: workload failed"
fi

# A fixed seed reproduces the same samples; another seed does not.
for s in 5 5 6; do
	env LD_PRELOAD="$PL_LIB" MEMPROF_RATE=0.01 MEMPROF_SEED=$s MEMPROF_TEST_LOG=3 \
		"$PL_BIN/pl_stats" 1 0 2008:3000 3>"$MP_TMP/seed.log" >/dev/null
	# addresses differ run to run (ASLR); sizes and sample counts do not
	od -An -v -t u8 -w48 "$MP_TMP/seed.log" | awk '{print $3, $4}' | md5sum
done >"$MP_TMP/seeds"
check "MEMPROF_SEED reproduces the sample sequence" \
	test "$(sed -n 1p "$MP_TMP/seeds")" = "$(sed -n 2p "$MP_TMP/seeds")"
check "a different seed gives different samples" \
	test "$(sed -n 1p "$MP_TMP/seeds")" != "$(sed -n 3p "$MP_TMP/seeds")"
pl_exit
