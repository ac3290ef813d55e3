# memprofctl: the command-line front end. One file per command (cli/cmd_*.c).
CTL_SRCS	:= $(wildcard cli/*.c cli/record/*.c)
CTL_OBJS	:= $(CTL_SRCS:%.c=$(B)/%.o)
CTL_LIBS	:= $(B)/lib/libmemprof.a $(call pkglibs,libzstd)
# Other fragments may add objects and libraries memprofctl links (e.g. the in-process engine).
CTL_EXTRA_OBJS	?=
CTL_EXTRA_LIBS	?=

EXTRA_CFLAGS_cli := -DMP_VERSION='"$(VERSION)"'

$(B)/bin/memprofctl: $(CTL_OBJS) $$(CTL_EXTRA_OBJS) $(B)/lib/libmemprof.a
	$(call msg,LINK,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(CTL_OBJS) $(CTL_EXTRA_OBJS) $(CTL_LIBS) $(CTL_EXTRA_LIBS) -lm

BINS += $(B)/bin/memprofctl

# bpf tier: `memprofctl record` following forks and execs (tests/bpf/follow-*.sh).
$(B)/tests/workloads/follow_wl: tests/workloads/follow_wl.c
	$(call cc_prog,-std=gnu11 -O2 -g -fno-omit-frame-pointer -fno-ipa-icf -D_GNU_SOURCE \
		$(WARN),-pthread)

BPF_TESTS += $(B)/tests/workloads/follow_wl

# record's and status's summary (cli/summary.c) against the engine's, on synthetic records.
$(B)/tests/unit/test_summary: $(B)/tests/unit/test_summary.o $(B)/cli/summary.o $$(ENGINE_OBJS) \
			      $(B)/lib/libmemprof.a
	$(call msg,LINK,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(B)/tests/unit/test_summary.o $(B)/cli/summary.o \
		$(ENGINE_OBJS) $(ENGINE_LIBS)

UNIT_TESTS += $(B)/tests/unit/test_summary
