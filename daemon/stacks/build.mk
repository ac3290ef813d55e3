# Stacks and symbols: the symbolizer (daemon/stacks/symbolize.c with objects.c, lookup.c and
# procmaps.c) and the DWARF unwinder of copied stacks (daemon/stacks/unwind.c). Included from
# daemon/build.mk; the engine links $(SYMBOLIZE_OBJS) with $(SYMBOLIZE_LIBS). libstdc++ provides
# __cxa_demangle.
SYMBOLIZE_SRCS	:= symbolize.c objects.c lookup.c procmaps.c unwind.c
SYMBOLIZE_OBJS	:= $(SYMBOLIZE_SRCS:%.c=$(B)/daemon/stacks/%.o) $(B)/daemon/probe/target_open.o \
		   $(B)/userspace-lib/hashmap.o
SYMBOLIZE_LIBS	:= $(call pkglibs,libdw) $(call pkglibs,libelf) $(call pkglibs,zlib) -lstdc++

# Unit tests. Helper objects are built with the default -O2 -g so that inlining and CFI are
# what a real optimized program has; the unwinding helpers drop frame pointers, or CFI.
SYMBOLIZE_TEST_OBJS := $(B)/tests/unit/test_symbolize.o $(B)/tests/unit/symbolize_helper.o \
		       $(B)/tests/unit/symbolize_cxx.o
UNWIND_TEST_OBJS := $(B)/tests/unit/test_unwind.o $(B)/tests/unit/unwind_helper.o \
		    $(B)/tests/unit/unwind_fp.o

$(B)/tests/unit/unwind_helper.o: override CFLAGS += -fomit-frame-pointer
$(B)/tests/unit/unwind_fp.o: override CFLAGS += -g0 -fno-omit-frame-pointer \
	-fno-asynchronous-unwind-tables -fno-unwind-tables

# A stripped program with MiniDebugInfo, the recipe of Fedora's find-debuginfo: the function
# symbols of .symtab, without debug sections, xz-compressed into .gnu_debugdata.
OBJCOPY		?= objcopy
STRIP		?= strip
XZ		?= xz

$(B)/tests/unit/symbolize_minidebug: $(B)/tests/unit/symbolize_minidebug.o
	$(call msg,MINIDBG,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@.full $^
	$(Q)$(OBJCOPY) --only-keep-debug $@.full $@.dbg
	$(Q)$(OBJCOPY) -S --remove-section .gdb_index --remove-section .comment \
		-K mp_minidebug_static_function -K main $@.dbg $@.mini
	$(Q)rm -f $@.mini.xz && $(XZ) -q $@.mini
	$(Q)$(STRIP) --strip-all -o $@.tmp $@.full
	$(Q)$(OBJCOPY) --add-section .gnu_debugdata=$@.mini.xz $@.tmp
	$(Q)mv $@.tmp $@ && rm -f $@.full $@.dbg $@.mini.xz

$(B)/tests/unit/test_symbolize: $(SYMBOLIZE_TEST_OBJS) $(SYMBOLIZE_OBJS) | \
				$(B)/tests/unit/symbolize_minidebug
	$(call msg,LINK,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(SYMBOLIZE_LIBS) -ldl

$(B)/tests/unit/test_unwind: $(UNWIND_TEST_OBJS) $(SYMBOLIZE_OBJS)
	$(call msg,LINK,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(SYMBOLIZE_LIBS)

# Includes the symbolizer's sources to reach its internal tables.
$(B)/tests/unit/test_symbolize_tables: $(B)/tests/unit/test_symbolize_tables.o \
				       $(B)/daemon/probe/target_open.o $(B)/userspace-lib/hashmap.o
	$(call msg,LINK,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(SYMBOLIZE_LIBS)

UNIT_TESTS += $(B)/tests/unit/test_symbolize $(B)/tests/unit/test_symbolize_tables \
	      $(B)/tests/unit/test_unwind

# bpf tier (tests/bpf/stacks-*.sh): workloads built WITHOUT frame pointers, as distributions
# build (the symbols stay: -g), whose backtraces only DWARF unwinding can give.
STK_WL_DIR	:= $(B)/tests/workloads

$(STK_WL_DIR)/stk_c: tests/workloads/stk_c.c
	$(call cc_prog,-std=gnu11 -O2 -g -fomit-frame-pointer -fno-stack-clash-protection \
		-D_GNU_SOURCE $(WARN))

$(STK_WL_DIR)/stk_cxx: tests/workloads/stk_cxx.cc
	$(call msg,CXX,$@)
	@mkdir -p $(@D)
	$(Q)$(CXX) -std=gnu++17 -O2 -g -fomit-frame-pointer -Wall -Wextra -Werror -o $@ $<

BPF_TESTS	+= $(STK_WL_DIR)/stk_c $(STK_WL_DIR)/stk_cxx
