#!/bin/bash
# libmemprof-preload in programs linked with another allocator (Debian's libjemalloc,
# libtcmalloc_minimal, libmimalloc): every interposed call must reach that allocator (the
# "next" definition), not glibc, or the allocator's own API (malloc_usable_size, sdallocx,
# tc_free, mi_free, ...) gets a glibc pointer. pl_foreign_* checks blocks both ways, with
# C++ new/delete and realloc chains, in 3 threads, disarmed, armed (MEMPROF_ARM) and logging
# (MEMPROF_TEST_LOG), also under the UBSan build of the library, and a block malloc'ed by a
# constructor that runs before the library's (lazy resolution); pl_stats_* gives the same
# statistics as with glibc (pl_check: within 4 SE, chi-square at a fixed seed).
. "$(dirname "$0")/preload.inc"

PL_UBSAN=$PL_BIN/libmemprof-preload-ubsan.so
for a in je tc mi; do
	wl=$PL_BIN/pl_foreign_$a
	if [ ! -x "$wl" ] || [ ! -x "$PL_BIN/pl_stats_$a" ]; then
		fail "foreign-$a: workloads not built (make test-bins)"
		continue
	fi
	check "foreign-$a: runs without the preload" "$wl" 3 50
	check "foreign-$a: preloaded, disarmed" env LD_PRELOAD="$PL_LIB" "$wl" 3 300
	check "foreign-$a: preloaded, armed at rate 0.01" \
		env LD_PRELOAD="$PL_LIB" MEMPROF_ARM=1 MEMPROF_RATE=0.01 MEMPROF_SEED=1 "$wl" 3 300
	check "foreign-$a: preloaded, armed at rate 1 (every block sampled)" \
		env LD_PRELOAD="$PL_LIB" MEMPROF_ARM=1 MEMPROF_RATE=1 MEMPROF_SEED=1 "$wl" 2 50
	if [ -e "$PL_UBSAN" ]; then
		check "foreign-$a: UBSan library, armed" \
			env LD_PRELOAD="$PL_UBSAN" MEMPROF_ARM=1 MEMPROF_RATE=0.05 "$wl" 3 100
	fi
	# The hook really runs (records in the log) while the blocks stay the allocator's.
	log=$MP_TMP/foreign-$a.log
	if env LD_PRELOAD="$PL_LIB" MEMPROF_RATE=0.01 MEMPROF_SEED=2 MEMPROF_TEST_LOG=3 \
		"$wl" 2 200 3>"$log" >/dev/null; then
		n=$(($(stat -c %s "$log") / 48))
		check "foreign-$a: test log has hook records ($n)" test "$n" -gt 100
	else
		fail "foreign-$a: workload with MEMPROF_TEST_LOG failed"
	fi

	# libpl_early.so's constructor mallocs 4242 bytes before the preload's constructor: at
	# rate 1 that block has no record (sampling starts with the constructor), every later one
	# has, and pl_foreign checked that the allocator owns it (the lazy resolution served it).
	log=$MP_TMP/early-$a.log
	if env LD_PRELOAD="$PL_LIB" MEMPROF_RATE=1 MEMPROF_TEST_LOG=3 "$wl" 1 2 3>"$log" \
		>/dev/null; then
		read -r n early < <(od -An -v -t u8 -w48 "$log" |
			awk '$3 == 4242 {e++} {n++} END {print n + 0, e + 0}')
		check "foreign-$a: a constructor's malloc before the preload's constructor" \
			test "$n" -gt 50 -a "$early" -eq 0
	else
		fail "foreign-$a: a constructor's malloc before the preload's constructor"
	fi

	# Statistics through the foreign allocator, as preload-stats.sh does through glibc's.
	for spec in "1 7 2008:20000,40:50000,16376:2000 -x 2008" "3 - 2008:10000,40:30000 -X"; do
		read -r threads seed classes extra <<<"$spec"
		name=stats-$a-t$threads
		seedenv=()
		[ "$seed" != - ] && seedenv=(MEMPROF_SEED="$seed")
		if env LD_PRELOAD="$PL_LIB" MEMPROF_RATE=0.01 MEMPROF_TEST_LOG=3 "${seedenv[@]}" \
			"$PL_BIN/pl_stats_$a" "$threads" 25 "$classes" 3>"$MP_TMP/$name.log" \
			>"$MP_TMP/$name.leaks"; then
			# shellcheck disable=SC2086
			"$PL_BIN/pl_check" -n "$name" -l "$MP_TMP/$name.log" -r 0.01 -T "$threads" \
				-c "$classes" -k "$MP_TMP/$name.leaks" -s $extra ||
				pl_failures=$((pl_failures + 1))
		else
			fail "$name: workload failed"
		fi
	done
done

# The reproducer of the bug: a plain C program linked with -ljemalloc, its
# malloc_usable_size(malloc(10)) under the preload (glibc's block crashed jemalloc).
if echo 'int main(void){return malloc_usable_size(malloc(10)) < 10;}' |
	cc -x c -include stdlib.h -include malloc.h -o "$MP_TMP/je3" - -ljemalloc 2>/dev/null; then
	check "reproducer: malloc_usable_size(malloc(10)) with -ljemalloc" \
		env LD_PRELOAD="$PL_LIB" "$MP_TMP/je3"
fi
pl_exit
