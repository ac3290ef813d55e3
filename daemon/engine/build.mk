# The sampling engine (daemon/engine/: engine.c, profile.c, proc.c, events.c, backtrace.c,
# preload.c, output.c, source_bpf.c, sampler.c, entries.c, preload_batch.c, summary.c,
# targets.c), used
# in-process by `memprofctl record` and by memprofd. Exports ENGINE_OBJS / ENGINE_LIBS.
ENGINE_OWN_OBJS	:= $(addprefix $(B)/daemon/engine/,engine.o profile.o proc.o events.o \
		     backtrace.o preload.o output.o source_bpf.o sampler.o entries.o \
		     preload_batch.o summary.o targets.o)
ENGINE_OBJS	= $(ENGINE_OWN_OBJS) $(BPF_LOADER_OBJS) $(filter-out $(BPF_LOADER_OBJS),$(SYMBOLIZE_OBJS))
ENGINE_LIBS	= $(BPF_LOADER_LIBS) $(SYMBOLIZE_LIBS) $(B)/lib/libmemprof.a \
		  $(call pkglibs,libzstd) $(call pkglibs,json-c) -lm

CTL_EXTRA_OBJS	+= $(ENGINE_OBJS)
CTL_EXTRA_LIBS	+= $(ENGINE_LIBS)

# Unit tests of the engine's own parts.
$(B)/tests/unit/test_sampler: $(B)/tests/unit/test_sampler.o $(B)/daemon/engine/sampler.o
	$(call msg,LINK,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ -lm

$(B)/tests/unit/test_entries: $(B)/tests/unit/test_entries.o $(B)/daemon/engine/entries.o
	$(call msg,LINK,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^

$(B)/tests/unit/test_preload_batch: $(B)/tests/unit/test_preload_batch.o \
				     $(B)/daemon/engine/preload_batch.o
	$(call msg,LINK,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^

# The USDT note reader on the built libmemprof-preload.so.
$(B)/tests/unit/test_usdt_sites: $(B)/tests/unit/test_usdt_sites.o $(B)/daemon/probe/elf_syms.o \
				  $(B)/daemon/probe/placement.o
	$(call msg,LINK,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ -lelf -lcapstone

UNIT_TESTS += $(B)/tests/unit/test_sampler $(B)/tests/unit/test_entries \
	      $(B)/tests/unit/test_preload_batch $(B)/tests/unit/test_usdt_sites

$(B)/daemon/engine/output.o: CFLAGS += -DMP_ENGINE_VERSION='"$(VERSION)"'

# bpf tier: `memprofctl record` tests (tests/bpf/record-*.sh), their workloads and checker.
REC_WL_DIR	:= $(B)/tests/workloads
REC_WL_CFLAGS	:= -std=gnu11 -O2 -g -fno-omit-frame-pointer -fno-ipa-icf -D_GNU_SOURCE $(WARN)

$(REC_WL_DIR)/wl_alloc: tests/workloads/wl_alloc.c tests/workloads/wl_truth.h
	$(call cc_prog,$(REC_WL_CFLAGS),-pthread)

$(REC_WL_DIR)/wl_cxx: tests/workloads/wl_cxx.cc
	$(call msg,CXX,$@)
	@mkdir -p $(@D)
	$(Q)$(CXX) -std=gnu++17 -O2 -g -fno-omit-frame-pointer -fno-ipa-icf -Wall -Wextra -Werror \
		-o $@ $<

$(B)/tests/bpf/trace_check: $(B)/tests/bpf/trace_check.o $(B)/lib/libmemprof.a
	$(call msg,LINK,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(call pkglibs,libzstd) -lm

BPF_TESTS	+= $(REC_WL_DIR)/wl_alloc $(REC_WL_DIR)/wl_cxx $(B)/tests/bpf/trace_check

$(REC_WL_DIR)/wl_nolibc: tests/workloads/wl_nolibc.c
	$(call cc_prog,-O2 -static -nostdlib -fno-stack-protector -fno-pie -no-pie)

BPF_TESTS	+= $(REC_WL_DIR)/wl_nolibc

# make demo (top Makefile: deps first, then this in a fresh make that sees the new packages):
# record Debian's python3 running an allocation-heavy script, then report the top
# allocation sites by estimated bytes (with standard errors) from the trace $(B)/demo.ctf.
DEMO_PYTHON	?= /usr/bin/python3
DEMO_RATE	?= 1e-3

demo-run: all
	$(Q)if [ "$$(id -u)" -ne 0 ]; then \
		echo "make demo: recording needs root (BPF uprobes); try: sudo make demo" >&2; \
		exit 1; fi
	@echo "== memprofctl record -r $(DEMO_RATE) -o $(B)/demo.ctf -- $(DEMO_PYTHON)" \
		"examples/demo_alloc.py"
	$(Q)$(B)/bin/memprofctl record -r $(DEMO_RATE) -o $(B)/demo.ctf -- \
		$(DEMO_PYTHON) examples/demo_alloc.py
	@echo "== memprofctl report -n 10 $(B)/demo.ctf"
	$(Q)$(B)/bin/memprofctl report -n 10 $(B)/demo.ctf

# The engine API as memprofd uses it, on real BPF (tests/bpf/record-engine.sh).
$(B)/tests/bpf/engine_check: $(B)/tests/bpf/engine_check.o $$(ENGINE_OBJS) $(B)/lib/libmemprof.a
	$(call msg,LINK,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(B)/tests/bpf/engine_check.o $(ENGINE_OBJS) $(ENGINE_LIBS)

BPF_TESTS	+= $(B)/tests/bpf/engine_check

# The same workload linked statically: its allocator is in the executable, probed at exec.
$(REC_WL_DIR)/wl_alloc_static: tests/workloads/wl_alloc.c tests/workloads/wl_truth.h
	$(call cc_prog,$(REC_WL_CFLAGS) -static,-pthread)

BPF_TESTS	+= $(REC_WL_DIR)/wl_alloc_static

# The engine driven by synthetic records (tests/unit/test_engine.h), unprivileged.
$(B)/tests/unit/test_engine: $(B)/tests/unit/test_engine.o $$(ENGINE_OBJS) $(B)/lib/libmemprof.a
	$(call msg,LINK,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(B)/tests/unit/test_engine.o $(ENGINE_OBJS) $(ENGINE_LIBS)

$(B)/tests/unit/test_engine_procs: $(B)/tests/unit/test_engine_procs.o $$(ENGINE_OBJS) \
				   $(B)/lib/libmemprof.a
	$(call msg,LINK,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(B)/tests/unit/test_engine_procs.o $(ENGINE_OBJS) \
		$(ENGINE_LIBS)

$(B)/tests/unit/test_engine_targets: $(B)/tests/unit/test_engine_targets.o $$(ENGINE_OBJS) \
				     $(B)/lib/libmemprof.a
	$(call msg,LINK,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(B)/tests/unit/test_engine_targets.o $(ENGINE_OBJS) \
		$(ENGINE_LIBS)

UNIT_TESTS += $(B)/tests/unit/test_engine $(B)/tests/unit/test_engine_procs \
	      $(B)/tests/unit/test_engine_targets
