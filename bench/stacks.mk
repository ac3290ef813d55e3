# bench-stacks (stacks component): the daemon's cost per sampled event with frame-pointer and
# DWARF unwinding, and what each stack-copy window cuts (bench/stacks-bench.sh; root).
.PHONY: bench-stacks
bench-stacks: all $(B)/tests/workloads/stk_c
	$(Q)BENCH_BUILD=$(abspath $(B)) bench/stacks-bench.sh

bench: bench-stacks
