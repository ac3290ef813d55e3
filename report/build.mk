# report/: offline analysis for `memprofctl report` (estimates per site, leaks, live heap,
# text/JSON, SVG flame graph, pprof export). Linked into memprofctl.
REPORT_SRCS	:= $(wildcard report/*.c)
REPORT_OBJS	:= $(REPORT_SRCS:%.c=$(B)/%.o) $(B)/report/profile.pb-c.o
REPORT_LIBS	:= $(call pkglibs,json-c) $(call pkglibs,libprotobuf-c) $(call pkglibs,zlib) \
		   $(call pkglibs,libdw) $(call pkglibs,libelf)

EXTRA_CFLAGS_report := $(call pkgcflags,json-c) $(call pkgcflags,libprotobuf-c) \
		       $(call pkgcflags,zlib) $(call pkgcflags,libdw)

CTL_EXTRA_OBJS	+= $(REPORT_OBJS)
CTL_EXTRA_LIBS	+= $(REPORT_LIBS)

# pprof's profile.proto -> protobuf-c code, generated into $(B)/gen at build time.
$(B)/gen/report/%.pb-c.c $(B)/gen/report/%.pb-c.h: report/%.proto
	$(call msg,PROTOC,$@)
	@mkdir -p $(@D)
	$(Q)protoc-c --c_out=$(@D) --proto_path=report $<

# Generated code: our warning set is not its contract.
$(B)/report/profile.pb-c.o: $(B)/gen/report/profile.pb-c.c $(B)/gen/report/profile.pb-c.h
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_CFLAGS) -w $(call pkgcflags,libprotobuf-c) -c $< -o $@

$(B)/report/pprof.o: $(B)/gen/report/profile.pb-c.h

# Test helper: simulates Gc.Memprof sampling of a known allocation program into a trace.
$(B)/tests/unit/gen_trace: $(B)/tests/unit/gen_trace.o $(B)/lib/libmemprof.a
	$(call msg,LINK,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(B)/lib/libmemprof.a $(call pkglibs,libzstd) -lm

BPF_TESTS	+= $(B)/tests/unit/gen_trace

.PHONY: install-report-man
install-report-man:
	$(call msg,INSTALL,memprofctl-report.1)
	$(Q)$(INSTALL) -d $(DESTDIR)$(mandir)/man1
	$(Q)$(INSTALL) -m 644 man/memprofctl-report.1 $(DESTDIR)$(mandir)/man1/

install: install-report-man

# Unit tests of the model (also built and run under ASan/UBSan).
$(B)/tests/unit/test_report: $(B)/tests/unit/test_report.o $(REPORT_OBJS) $(B)/lib/libmemprof.a
	$(call msg,LINK,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(REPORT_OBJS) $(B)/lib/libmemprof.a $(REPORT_LIBS) \
		$(call pkglibs,libzstd) -lm

UNIT_TESTS	+= $(B)/tests/unit/test_report

# bpf tier: a C++ workload whose allocations all go through the standard library
# (tests/bpf/report-cxx.sh).
$(B)/tests/workloads/wl_vector: tests/workloads/wl_vector.cc
	$(call msg,CXX,$@)
	@mkdir -p $(@D)
	$(Q)$(CXX) -std=gnu++17 -O2 -g -fno-omit-frame-pointer -fno-ipa-icf -Wall -Wextra -Werror \
		-o $@ $<

BPF_TESTS	+= $(B)/tests/workloads/wl_vector

# bpf tier: a workload with a known peak and known temporary allocations (report-peak-recorded).
$(B)/tests/workloads/wl_peak: tests/workloads/wl_peak.c tests/workloads/wl_truth.h
	$(call cc_prog,-std=gnu11 -O2 -g -fno-omit-frame-pointer -fno-ipa-icf -D_GNU_SOURCE $(WARN))

BPF_TESTS	+= $(B)/tests/workloads/wl_peak
