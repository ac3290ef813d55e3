# bpf/: the BPF programs (bpf/memprof.bpf.c), their skeleton, and the user-space loader that
# attaches them (daemon/probe/: the loader, bpf_loader.h, and its helpers elf_syms.c, placement.c,
# uprobe_link.c, target_open.c, bpf_kernel.c).
# Exports BPF_LOADER_OBJS and BPF_LOADER_LIBS for the programs that link the loader (the
# engine, tests).
#
# vmlinux.h is dumped from the running kernel's BTF once per build directory.

BPF_CFLAGS	:= -target bpf -g -O2 -D__TARGET_ARCH_x86 -Wall -Werror -I $(B)/gen -I bpf -I .
# <bpf/usdt.bpf.h> (the libmemprof-preload USDT programs) includes <linux/errno.h> -> <asm/errno.h>
BPF_CFLAGS	+= -I /usr/include/$(shell $(CC) -dumpmachine)

$(B)/gen/vmlinux.h:
	$(call msg,GEN,$@)
	@mkdir -p $(@D)
	$(Q)$(BPFTOOL) btf dump file /sys/kernel/btf/vmlinux format c > $@.tmp && mv $@.tmp $@

$(B)/bpf/memprof.bpf.o: bpf/memprof.bpf.c $(B)/gen/vmlinux.h
	$(call msg,BPF,$@)
	@mkdir -p $(@D)
	$(Q)$(CLANG) $(BPF_CFLAGS) -MMD -MP -c $< -o $@

$(B)/gen/memprof.skel.h: $(B)/bpf/memprof.bpf.o
	$(call msg,GEN,$@)
	@mkdir -p $(@D)
	$(Q)$(BPFTOOL) gen skeleton $< name memprof_bpf > $@.tmp && mv $@.tmp $@

# Every file of the loader includes the skeleton (loader_internal.h).
BPF_LOADER_OWN_OBJS := $(addprefix $(B)/daemon/probe/,load.o discover.o attach.o ring.o maps.o \
		       reaper.o selfprobe.o preload_attach.o)
$(BPF_LOADER_OWN_OBJS): $(B)/gen/memprof.skel.h

EXTRA_CFLAGS_daemon += $(call pkgcflags,libbpf libelf)

BPF_LOADER_OBJS	:= $(BPF_LOADER_OWN_OBJS) $(B)/daemon/probe/elf_syms.o $(B)/daemon/probe/placement.o \
		   $(B)/daemon/probe/uprobe_link.o $(B)/daemon/probe/target_open.o $(B)/daemon/probe/bpf_kernel.o
BPF_LOADER_LIBS	:= -lbpf -lelf -lz -lcapstone -pthread

# Unit test of the geometric draw (bpf/gap.h), unprivileged.
$(B)/tests/unit/test_gap: $(B)/tests/unit/test_gap.o
	$(call msg,LINK,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ -lm

# Unit test of the probe placement rule (daemon/probe/placement.c) on hand-written code bytes.
$(B)/tests/unit/test_placement: $(B)/tests/unit/test_placement.o $(B)/daemon/probe/placement.o
	$(call msg,LINK,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ -lcapstone

# Unit test of the load-failure explanations (daemon/probe/bpf_kernel.c) on libbpf logs as 6.1 and
# 6.18 print them, and of the tracepoint prototype probe on the running kernel's BTF.
$(B)/tests/unit/test_bpf_kernel: $(B)/tests/unit/test_bpf_kernel.o $(B)/daemon/probe/bpf_kernel.o
	$(call msg,LINK,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ -lbpf -lelf -lz

UNIT_TESTS	+= $(B)/tests/unit/test_gap $(B)/tests/unit/test_placement \
		   $(B)/tests/unit/test_bpf_kernel

# bpf tier: the probe checker (tests/bpf/probe-*.sh drive it) and its workloads.
PROBE_WL_CFLAGS	:= -std=gnu11 -O2 -g -fno-omit-frame-pointer -D_GNU_SOURCE $(WARN)
PROBE_WL_DIR	:= $(B)/tests/workloads

$(PROBE_WL_DIR)/probe_wl: tests/workloads/probe_wl.c
	$(call cc_prog,$(PROBE_WL_CFLAGS),-pthread)

$(PROBE_WL_DIR)/probe_wl_cxx: tests/workloads/probe_wl_cxx.cc
	$(call msg,CXX,$@)
	@mkdir -p $(@D)
	$(Q)$(CXX) -std=gnu++17 -O2 -g -fno-omit-frame-pointer -Wall -Wextra -Werror \
		-fno-builtin -o $@ $<

# No libc, no allocator: mp_bpf__attach must say -ENOENT.
$(PROBE_WL_DIR)/probe_wl_nolibc: tests/workloads/probe_wl_nolibc.c
	$(call cc_prog,-O2 -g -static -nostdlib -fno-stack-protector -fno-pie -no-pie)

$(B)/tests/bpf/probe_check: $(B)/tests/bpf/probe_check.o $(BPF_LOADER_OBJS)
	$(call msg,LINK,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(BPF_LOADER_LIBS) -lm

BPF_TESTS	+= $(B)/tests/bpf/probe_check $(PROBE_WL_DIR)/probe_wl $(PROBE_WL_DIR)/probe_wl_cxx \
		   $(PROBE_WL_DIR)/probe_wl_nolibc

include bpf/allocators.mk

# bpf tier: overhead tests (tests/bpf/overhead-*.sh): probe placement on the real libc, the
# session fallback, overhead budgets.
$(PROBE_WL_DIR)/ovh_loop: tests/workloads/ovh_loop.c
	$(call cc_prog,$(PROBE_WL_CFLAGS))

$(B)/tests/bpf/overhead_check: $(B)/tests/bpf/overhead_check.o $(BPF_LOADER_OBJS)
	$(call msg,LINK,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(BPF_LOADER_LIBS) -ldl -lm

BPF_TESTS	+= $(B)/tests/bpf/overhead_check $(PROBE_WL_DIR)/ovh_loop
