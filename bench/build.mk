# bench/: the overhead benchmark suite. `make bench` builds the workloads, the floor loader and
# whatever the other components have built, then runs bench/run (root for the BPF parts).
# Other components add their own bench targets as prerequisites of `bench` in their fragments.

BENCH_DIR	:= $(B)/bench
BENCH_WL_CFLAGS	:= -std=gnu11 -O2 -g -fno-omit-frame-pointer -D_GNU_SOURCE $(WARN)
BENCH_WL_CXXFLAGS := -std=gnu++17 -O2 -g -fno-omit-frame-pointer -Wall -Wextra -Werror

BENCH_WORKLOADS	:= $(BENCH_DIR)/allocbench $(BENCH_DIR)/allocbench_small $(BENCH_DIR)/newdelete \
		   $(BENCH_DIR)/leak $(BENCH_DIR)/paced
BENCH_BINS	:= $(BENCH_WORKLOADS) $(BENCH_DIR)/floor $(BENCH_DIR)/libpassthrough.so

$(BENCH_DIR)/allocbench: bench/workloads/allocbench.c
	$(call cc_prog,$(BENCH_WL_CFLAGS),-pthread)

$(BENCH_DIR)/allocbench_small: bench/workloads/allocbench.c
	$(call cc_prog,$(BENCH_WL_CFLAGS) -DMAXSZ=256,-pthread)

$(BENCH_DIR)/leak: bench/workloads/leak.c
	$(call cc_prog,$(BENCH_WL_CFLAGS))

$(BENCH_DIR)/paced: bench/workloads/paced.c
	$(call cc_prog,$(BENCH_WL_CFLAGS),-pthread)

# The floor of interposition itself (bench/passthrough.c): built as libmemprof-preload is, so
# the two differ only in what their functions do.
$(BENCH_DIR)/libpassthrough.so: bench/passthrough.c
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(BENCH_WL_CFLAGS) -fPIC -shared -fvisibility=hidden -fno-plt \
		-fno-builtin-malloc -fno-builtin-free -fno-builtin-calloc -fno-builtin-realloc \
		-Wl,-z,now -Wl,-z,defs -o $@ $<

$(BENCH_DIR)/newdelete: bench/workloads/newdelete.cc
	$(call msg,CXX,$@)
	@mkdir -p $(@D)
	$(Q)$(CXX) $(BENCH_WL_CXXFLAGS) -o $@ $<

# vmlinux.h: bpf/'s copy when its fragment makes one, else our own.
ifneq ($(shell grep -s -l 'gen/vmlinux.h' bpf/build.mk),)
BENCH_VMLINUX	:= $(B)/gen/vmlinux.h
else
BENCH_VMLINUX	:= $(B)/gen/bench/vmlinux.h
$(B)/gen/bench/vmlinux.h:
	$(call msg,GEN,$@)
	@mkdir -p $(@D)
	$(Q)$(BPFTOOL) btf dump file /sys/kernel/btf/vmlinux format c > $@
endif

$(B)/gen/bench/floor.bpf.o: bench/floor.bpf.c bench/floor.h $(BENCH_VMLINUX)
	$(call msg,BPF,$@)
	@mkdir -p $(@D)
	$(Q)$(CLANG) -g -O2 -target bpf -D__TARGET_ARCH_x86 -Wall -Werror \
		-I $(dir $(BENCH_VMLINUX)) -I . $(call pkgcflags,libbpf) -c $< -o $@

$(B)/gen/bench/floor.skel.h: $(B)/gen/bench/floor.bpf.o
	$(call msg,SKEL,$@)
	$(Q)$(BPFTOOL) gen skeleton $< name floor_bpf > $@

# The floor probes what memprofd probes: its probe table, read from the loader's source.
$(B)/gen/bench/floor_probes.h: daemon/probe/discover.c bench/gen-floor-probes
	$(call msg,GEN,$@)
	@mkdir -p $(@D)
	$(Q)bench/gen-floor-probes $< > $@.tmp && mv $@.tmp $@

$(B)/bench/floor.o: $(B)/gen/bench/floor.skel.h $(B)/gen/bench/floor_probes.h
EXTRA_CFLAGS_bench := $(call pkgcflags,libbpf libelf)

# Symbol resolution, probe placement and uprobe_multi/session links are memprofd's own
# (daemon/probe/elf_syms.c, placement.c, uprobe_link.c).
$(BENCH_DIR)/floor: $(B)/bench/floor.o $(B)/daemon/probe/elf_syms.o $(B)/daemon/probe/placement.o \
		  $(B)/daemon/probe/uprobe_link.o
	$(call msg,LINK,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(call pkglibs,libbpf libelf capstone)

BPF_TESTS	+= $(BENCH_BINS)

.PHONY: bench-suite bench-bins
bench-bins: $(BENCH_BINS)

# The suite runs whatever exists: memprofctl, the preload library and memprofd are built by
# `all`; bench/run prints a line for each part it skips because a component is missing.
bench-suite: bench-bins all
	$(Q)BENCH_BUILD=$(abspath $(B)) bench/run $(BENCH_ARGS)

bench: bench-suite

# What probe placement saves: placed probes against every probe at its function's entry
# (bench/placement-bench.sh; tests/bpf/overhead-placement.sh asserts only a margin any CPU keeps).
.PHONY: bench-placement
bench-placement: $(B)/bin/memprofctl $(B)/tests/workloads/ovh_loop
	$(Q)BENCH_BUILD=$(abspath $(B)) bench/placement-bench.sh

bench: bench-placement

# A profile of a process that starts short processes all day: memprofd's RSS, fds, files and
# stop time (bench/churn-soak.sh; DURATION=900 seconds by default).
.PHONY: bench-churn
bench-churn: $(B)/bin/memprofd $(B)/bin/memprofctl
	$(Q)BENCH_BUILD=$(abspath $(B)) bench/churn-soak.sh

bench: bench-churn

# How long after its exec a process of a target (--exe, --cgroup) is profiled
# (bench/join-latency.sh; RUNS=50 runs of each by default).
.PHONY: bench-join
bench-join: $(B)/bin/memprofd $(B)/bin/memprofctl $(B)/tests/workloads/wl_alloc
	$(Q)BENCH_BUILD=$(abspath $(B)) bench/join-latency.sh

bench: bench-join

# Benchmarks measure time: two must never run at once, even under make -j. When bench is a goal,
# this make runs one recipe at a time (GNU make 4.3 has no per-target .NOTPARALLEL).
ifneq ($(filter bench bench-suite bench-placement bench-churn bench-join,$(MAKECMDGOALS)),)
.NOTPARALLEL:
endif
include bench/stacks.mk
