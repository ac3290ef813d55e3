# libmemprof-preload: the cooperative fast path (in-process sampling, USDT hooks on samples),
# its test workloads, the USDT probe test loader and its benchmark.
# Included from userspace-lib/build.mk.

PL_DIR		:= userspace-lib/preload
PL_SRCS		:= $(addprefix $(PL_DIR)/,preload.c pl_cxx.c pl_sample.c pl_report.c pl_init.c \
				     pl_core.c pl_api.c pl_next.c)
PL_OBJDIR	:= $(B)/$(PL_DIR)/so
PL_OBJS		:= $(PL_SRCS:$(PL_DIR)/%.c=$(PL_OBJDIR)/%.o)
PL_LIB		:= $(B)/lib/libmemprof-preload.so
# Its SONAME: programs linked against it (-lmemprof-preload) need this name at run time, and
# `memprofctl record --preload` looks for it by this name (installed by the runtime package;
# libmemprof-preload.so is the link-time name, a symlink installed with the headers).
PL_SONAME	:= libmemprof-preload.so.0

# The library is never built with sanitizers (it would be loaded into arbitrary programs, and
# ASan's own allocator interposes the same symbols). -fexceptions: operator new's frames must
# let a new-handler's exception through. -fno-plt: the fast path tail-jumps through the GOT.
# -fno-crossjumping: malloc's and free's two tail jumps stay two (preload.c).
PL_CFLAGS	= $(filter-out -fsanitize=% -fno-sanitize-recover=%,$(BASE_CFLAGS)) $(CPPFLAGS) $(CFLAGS) \
		  -fvisibility=hidden -fno-plt -fno-crossjumping -fexceptions \
		  -ftls-model=initial-exec \
		  -fno-builtin-malloc -fno-builtin-calloc -fno-builtin-realloc -fno-builtin-free \
		  -MMD -MP

$(PL_OBJDIR)/%.o: $(PL_DIR)/%.c
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(PL_CFLAGS) -c $< -o $@

$(PL_LIB): $(PL_OBJS) $(PL_DIR)/libmemprof-preload.map
	$(call msg,LINK,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -shared -Wl,-soname,$(PL_SONAME) \
		-Wl,--version-script=$(PL_DIR)/libmemprof-preload.map \
		-Wl,-z,now -Wl,-z,relro -Wl,-z,defs -o $@ $(PL_OBJS) -lm

# The run-time name in the build tree, a target of its own so that any build makes it.
$(dir $(PL_LIB))$(PL_SONAME): $(PL_LIB)
	$(Q)ln -sf $(<F) $@

BINS += $(PL_LIB) $(dir $(PL_LIB))$(PL_SONAME)

.PHONY: install-preload
install-preload: $(PL_LIB)
	$(call msg,INSTALL,libmemprof-preload)
	$(Q)$(INSTALL) -d $(DESTDIR)$(libdir) $(DESTDIR)$(mandir)/man8
	$(Q)$(INSTALL) -m 755 $(PL_LIB) $(DESTDIR)$(libdir)/$(PL_SONAME)
	$(Q)ln -sf $(PL_SONAME) $(DESTDIR)$(libdir)/libmemprof-preload.so
	@# <memprof/preload.h> is one of libmemprof's headers (install-lib): installing it here
	@# too raced with that copy under make -j.
	$(Q)$(INSTALL) -m 644 man/libmemprof-preload.8 $(DESTDIR)$(mandir)/man8/

install: install-preload

# ---- tests ---------------------------------------------------------------------------------
# Unit test of the PRNG, draws and address table (no preload; also built with ASan/UBSan).
$(B)/tests/unit/test_preload_core: $(B)/tests/unit/test_preload_core.o $(B)/$(PL_DIR)/pl_core.o
	$(call msg,LINK,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ -lm -pthread

UNIT_TESTS += $(B)/tests/unit/test_preload_core

# The library built with UBSan (not ASan: ASan, TSan and valgrind's memcheck all replace
# malloc themselves, so the interposers would never run under them). The preload tests run
# their workloads under this variant too, so undefined behaviour in the real interposed
# paths (signal handlers, fork, threads) aborts the test.
PL_UBSAN_OBJDIR	:= $(B)/$(PL_DIR)/ubsan
PL_UBSAN_OBJS	:= $(PL_SRCS:$(PL_DIR)/%.c=$(PL_UBSAN_OBJDIR)/%.o)
PL_UBSAN_LIB	:= $(B)/tests/preload/libmemprof-preload-ubsan.so

$(PL_UBSAN_OBJDIR)/%.o: $(PL_DIR)/%.c
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(PL_CFLAGS) -fsanitize=undefined -fno-sanitize-recover=undefined -c $< -o $@

$(PL_UBSAN_LIB): $(PL_UBSAN_OBJS) $(PL_DIR)/libmemprof-preload.map
	$(call msg,LINK,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -shared -fsanitize=undefined \
		-Wl,--version-script=$(PL_DIR)/libmemprof-preload.map \
		-Wl,-z,now -o $@ $(PL_UBSAN_OBJS) -lm

BPF_TESTS += $(PL_UBSAN_LIB)

# Workloads run under LD_PRELOAD by tests/unit/preload-*.sh and tests/bpf/preload-usdt.sh,
# and the log checker. Never sanitized: they run under the preload (or valgrind).
PL_WL_DIR	:= $(B)/tests/preload
PL_WL_CFLAGS	= $(filter-out -fsanitize=% -fno-sanitize-recover=%,$(BASE_CFLAGS)) $(CFLAGS)
PL_WL_C		:= pl_stats pl_check pl_stress pl_signal pl_align pl_usdt pl_config pl_sigfree \
		   pl_ids pl_walk pl_batch
PL_WL_BINS	:= $(addprefix $(PL_WL_DIR)/,$(PL_WL_C) pl_kinds)

$(addprefix $(PL_WL_DIR)/,$(PL_WL_C)): $(PL_WL_DIR)/%: tests/workloads/%.c \
		userspace-lib/include/memprof/preload.h
	$(call cc_prog,$(PL_WL_CFLAGS),-lm -pthread -ldl)

# The same statistics workload linked against the library instead of preloaded ("linkable").
$(PL_WL_DIR)/pl_stats_linked: tests/workloads/pl_stats.c $(PL_LIB)
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(PL_WL_CFLAGS) -o $@ $< -L$(B)/lib -lmemprof-preload \
		-Wl,-rpath,$(abspath $(B)/lib) -pthread

PL_WL_BINS	+= $(PL_WL_DIR)/pl_stats_linked

# Programs linked with another allocator (tests/unit/preload-foreign.sh): the preload must
# forward to it, not to glibc. pl_foreign checks blocks with each allocator's own API;
# pl_stats_* is the statistics workload on top of that allocator.
PL_FOREIGN_je	:= -DPL_JE -ljemalloc
PL_FOREIGN_tc	:= -DPL_TC -ltcmalloc_minimal
PL_FOREIGN_mi	:= -DPL_MI -lmimalloc

# libpl_early.so: a constructor that mallocs before the preload's constructor has run.
$(PL_WL_DIR)/libpl_early.so: tests/workloads/pl_early.c
	$(call cc_prog,$(PL_WL_CFLAGS) -fPIC -shared)

$(PL_WL_DIR)/pl_foreign_%: tests/workloads/pl_foreign.c $(PL_WL_DIR)/libpl_early.so
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(PL_WL_CFLAGS) -o $@ $< $(PL_FOREIGN_$*) -L$(PL_WL_DIR) -lpl_early \
		-Wl,-rpath,$(abspath $(PL_WL_DIR)) -pthread

$(PL_WL_DIR)/pl_stats_%: tests/workloads/pl_stats.c
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(PL_WL_CFLAGS) -o $@ $< $(filter -l%,$(PL_FOREIGN_$*)) -pthread

PL_WL_BINS	+= $(foreach a,je tc mi,$(PL_WL_DIR)/pl_foreign_$(a) $(PL_WL_DIR)/pl_stats_$(a))

$(PL_WL_DIR)/pl_kinds: tests/workloads/pl_kinds.cc userspace-lib/include/memprof/preload.h
	$(call msg,CXX,$@)
	@mkdir -p $(@D)
	$(Q)$(CXX) $(filter-out -std=gnu11 -Wstrict-prototypes -Wmissing-prototypes,$(PL_WL_CFLAGS)) \
		-std=gnu++17 -o $@ $<

# USDT probe test: a tiny BPF program on memprof:alloc/free and its libbpf loader, built
# against bpf/'s vmlinux.h.
PL_VMLINUX	:= $(B)/gen/vmlinux.h

$(B)/gen/preload/usdt_check.bpf.o: tests/bpf/usdt_check.bpf.c tests/bpf/usdt_check.h $(PL_VMLINUX)
	$(call msg,BPF,$@)
	@mkdir -p $(@D)
	$(Q)$(CLANG) -g -O2 -target bpf -D__TARGET_ARCH_x86 -Wall -Werror \
		-I $(dir $(PL_VMLINUX)) -I . -I /usr/include/$(shell $(CC) -dumpmachine) \
		$(call pkgcflags,libbpf) -c $< -o $@

$(B)/gen/preload/usdt_check.skel.h: $(B)/gen/preload/usdt_check.bpf.o
	$(call msg,SKEL,$@)
	$(Q)$(BPFTOOL) gen skeleton $< name usdt_check_bpf > $@.tmp && mv $@.tmp $@

$(PL_WL_DIR)/usdt_check: tests/bpf/usdt_check.c tests/bpf/usdt_check.h \
		$(B)/gen/preload/usdt_check.skel.h
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(PL_WL_CFLAGS) -I $(B)/gen/preload $(call pkgcflags,libbpf) -o $@ $< \
		$(call pkglibs,libbpf)

BPF_TESTS += $(PL_WL_BINS) $(PL_WL_DIR)/usdt_check

# ---- benchmark (not a test) ----------------------------------------------------------------
$(B)/bench/preload_bench: bench/preload_bench.c
	$(call cc_prog,$(PL_WL_CFLAGS),-lm)

.PHONY: bench-preload
bench-preload: $(B)/bench/preload_bench $(PL_LIB)
	$(Q)BENCH_BUILD=$(abspath $(B)) bench/preload-bench.sh

bench: bench-preload
include userspace-lib/preload/fast.mk
