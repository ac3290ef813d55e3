# The daemon half of the cooperative fast path: `memprofctl record --preload` finds the library
# in $(libdir) once installed, and its benchmark (bench-fast). Included from preload.mk.

EXTRA_CFLAGS_cli += -DMP_LIBDIR='"$(libdir)"'

# The objects are rebuilt when libdir changes (`make install prefix=/usr` after a plain `make`),
# so an installed memprofctl looks where the library was installed. The stamp holds the libdir
# it was built for and is rewritten only when that differs.
.PHONY: mp-libdir-check
mp-libdir-check:
$(B)/gen/cli/libdir.stamp: mp-libdir-check
	@mkdir -p $(@D)
	$(Q)[ "$$(cat $@ 2>/dev/null)" = '$(libdir)' ] || echo '$(libdir)' > $@
$(CTL_OBJS): $(B)/gen/cli/libdir.stamp

$(B)/bench/fast_bench: bench/fast_bench.c
	$(call cc_prog,$(PL_WL_CFLAGS),-lm -pthread)

# tests/bpf/bench-fast-quick.sh runs bench-fast's script on it
BPF_TESTS += $(B)/bench/fast_bench

.PHONY: bench-fast
# Then the 1-thread 512 KiB rows again, the target's (the fast path at most 1.05x): 61 pairs as the
# scheduler places them (a median over 7 moves by +-1.5 % on a 2-vCPU guest, over 61 by
# +-0.5 %), and 21 with the loop and the profiler on CPUs of their own (PIN=1): the fast path's
# cost without the scheduler's placement in it.
bench-fast: $(B)/bench/fast_bench $(PL_LIB) $(B)/bin/memprofctl
	$(Q)BENCH_BUILD=$(abspath $(B)) bench/fast-bench.sh
	$(Q)BENCH_BUILD=$(abspath $(B)) THREADS=1 RATES=512KiB RUNS=61 \
		BENCH_OUT=$(abspath bench/results)/fast-target-latest.txt bench/fast-bench.sh
	$(Q)BENCH_BUILD=$(abspath $(B)) PIN=1 THREADS=1 RATES=512KiB RUNS=21 bench/fast-bench.sh

bench: bench-fast
