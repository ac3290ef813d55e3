# memprofd top-level Makefile: non-recursive. Each component lives in its folder and
# contributes a fragment (<dir>/build.mk) that this file includes; all outputs go under $(B).
#
#   make [all]        build everything into $(B) (default build/)
#   make check        install test dependencies, build, run every test tier (tests/run)
#   make demo         install dependencies, build, profile a real program, print a report
#   make bench        run the benchmark suite (bench/)
#   make fuzz         build the libFuzzer targets
#   make probe ...    one component's objects, their includes checked (see "Components" below:
#                     probe stacks engine service codec client preload report cli)
#   make install      install into $(DESTDIR)$(prefix)
#   make deb          the Debian packages (debian/), built out of tree, into $(B)/deb/
#   make clean
#
# V=1 shows the commands. SAN=1 builds with ASan+UBSan (make check does so in $(B)/asan).

.DELETE_ON_ERROR:
.SECONDEXPANSION:
.SUFFIXES:
.DEFAULT_GOAL := all

B		?= build
prefix		?= /usr/local
bindir		?= $(prefix)/bin
sbindir		?= $(prefix)/sbin
libdir		?= $(prefix)/lib
includedir	?= $(prefix)/include
mandir		?= $(prefix)/share/man
unitdir		?= $(prefix)/lib/systemd/system
pkgconfigdir	?= $(libdir)/pkgconfig
DESTDIR		?=

VERSION		:= 0.1.0

CC		?= gcc
CLANG		?= clang
BPFTOOL		?= bpftool
INSTALL		?= install

ifeq ($(V),1)
Q :=
msg :=
else
Q := @
msg = @printf '  %-8s %s\n' '$(1)' '$(2)';
endif

# A program built from one C source, its first prerequisite:
# $(call cc_prog,COMPILE FLAGS[,LINK FLAGS AND LIBRARIES])
define cc_prog
$(call msg,CC,$@)
@mkdir -p $(@D)
$(Q)$(CC) $(1) -o $@ $< $(2)
endef

WARN		:= -Wall -Wextra -Werror -Wno-unused-parameter -Wshadow -Wstrict-prototypes \
		   -Wmissing-prototypes -Wformat=2 -Wno-format-nonliteral
CFLAGS		?= -O2 -g
BASE_CFLAGS	:= -std=gnu11 -fno-omit-frame-pointer -fPIC -D_GNU_SOURCE $(WARN) \
		   -I userspace-lib/include -I $(B)/gen -I .
ifeq ($(SAN),1)
BASE_CFLAGS	+= -fsanitize=address,undefined -fno-sanitize-recover=undefined
SAN_LDFLAGS	:= -fsanitize=address,undefined
endif
ALL_CFLAGS	= $(BASE_CFLAGS) $(CPPFLAGS) $(CFLAGS) -MMD -MP
ALL_LDFLAGS	= $(SAN_LDFLAGS) $(LDFLAGS)

# Debian packages that provide pkg-config files.
PKG_LIBS	:= libbpf libelf libdw libzstd libsystemd json-c libprotobuf-c capstone
pkgcflags	= $(shell pkg-config --cflags $(1) 2>/dev/null)
pkglibs		= $(shell pkg-config --libs $(1) 2>/dev/null)

# Per-component fragments append to these.
BINS		:=	# programs installed to bindir/sbindir
UNIT_TESTS	:=	# unprivileged unit test executables (also run under ASan/UBSan)
BPF_TESTS	:=	# executables and helper programs the bpf/system tiers need
CLEAN_EXTRA	:=

# Compile rule for every C object: $(B)/<path>.o from <path>.c, with the flags of its component
# (EXTRA_CFLAGS_<top folder>: what is under daemon/ gets EXTRA_CFLAGS_daemon).
component	= $(firstword $(subst /, ,$(1)))

$(B)/%.o: %.c
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_CFLAGS) $(EXTRA_CFLAGS_$(call component,$(<D))) -c $< -o $@

$(B)/%.o: %.cc
	$(call msg,CXX,$@)
	@mkdir -p $(@D)
	$(Q)$(CXX) $(filter-out -std=gnu11 -Wstrict-prototypes -Wmissing-prototypes,$(ALL_CFLAGS)) \
		-std=gnu++17 -c $< -o $@

include $(sort $(wildcard */build.mk))

# Components. `make NAME` builds one component's objects and checks (scripts/check-includes,
# on their dependency files) that they include only their own folder's headers, the public
# ones (userspace-lib/include/memprof/, the BPF ABI bpf/*.h, the generated $(B)/gen/), the
# library's shared helpers (userspace-lib/*.h, header-only) and the interface headers
# (COMP_API_*) of the components they use (COMP_USES_*); `make check-includes` checks every
# component's objects built so far. The edges:
#   component  folder                   uses (their interface headers, COMP_API_*)
#   probe      daemon/probe/            -  (the BPF loader)
#   stacks     daemon/stacks/           probe (target_open.h: a mapped file opened by inode)
#   engine     daemon/engine/           probe, stacks, codec
#   service    daemon/service/          engine, codec, client (memprofd)
#   codec      userspace-lib/codec/     -  (the trace format)
#   client     userspace-lib/client/    codec (memprofd's client library)
#   preload    userspace-lib/preload/   -  (libmemprof-preload)
#   report     report/                  codec
#   cli        cli/                     engine, report, codec, client (memprofctl)
COMPONENTS	:= probe stacks engine service codec client preload report cli

COMP_OBJS_probe		= $(BPF_LOADER_OBJS)
COMP_OBJS_stacks	= $(filter $(B)/daemon/stacks/%,$(SYMBOLIZE_OBJS))
COMP_OBJS_engine	= $(ENGINE_OWN_OBJS)
COMP_OBJS_service	= $(SVC_OBJS)
COMP_OBJS_codec		= $(filter $(B)/userspace-lib/codec/%,$(LIB_OBJS))
COMP_OBJS_client	= $(filter $(B)/userspace-lib/client/%,$(LIB_OBJS))
COMP_OBJS_preload	= $(PL_OBJS)
COMP_OBJS_report	= $(REPORT_OBJS)
COMP_OBJS_cli		= $(CTL_OBJS)

COMP_DIR_probe		:= daemon/probe/
COMP_DIR_stacks		:= daemon/stacks/
COMP_DIR_engine		:= daemon/engine/
COMP_DIR_service	:= daemon/service/
COMP_DIR_codec		:= userspace-lib/codec/
COMP_DIR_client		:= userspace-lib/client/
COMP_DIR_preload	:= userspace-lib/preload/
COMP_DIR_report		:= report/ $(B)/gen/report/
COMP_DIR_cli		:= cli/

COMP_API_probe		:= daemon/probe/bpf_loader.h daemon/probe/target_open.h
COMP_API_stacks		:= daemon/stacks/symbolize.h daemon/stacks/unwind.h
COMP_API_engine		:= daemon/engine/engine.h daemon/engine/summary.h
COMP_API_codec		:= userspace-lib/codec/outfile.h userspace-lib/codec/writer_async.h \
			   userspace-lib/codec/trace_context.h
COMP_API_client		:= userspace-lib/client/bus_dict.h userspace-lib/client/client_int.h
COMP_API_report		:= report/report.h

COMP_USES_stacks	:= probe
COMP_USES_engine	:= probe stacks codec
COMP_USES_client	:= codec
COMP_USES_service	:= engine codec client
COMP_USES_report	:= codec
COMP_USES_cli		:= engine report codec client

COMP_PUBLIC	= userspace-lib/include/memprof/ $(wildcard bpf/*.h) $(wildcard userspace-lib/*.h) \
		  $(B)/gen/memprof.skel.h $(B)/gen/vmlinux.h
comp_allowed	= $(COMP_DIR_$(1)) $(COMP_PUBLIC) $(foreach u,$(COMP_USES_$(1)),$(COMP_API_$(u)))
comp_check	= CHECK_INCLUDES_BUILD=$(abspath $(B)) scripts/check-includes $(1) \
		  '$(call comp_allowed,$(1))' \
		  $(wildcard $(patsubst %.o,%.d,$(COMP_OBJS_$(1))))

$(COMPONENTS): %: $$(COMP_OBJS_%)
	$(call msg,INCLUDES,$@)
	$(Q)$(call comp_check,$@)

check-includes:
	$(Q)$(foreach c,$(COMPONENTS),$(call comp_check,$(c)) &&) true

.PHONY: all check demo demo-run bench fuzz install clean deps unit-tests test-bins deb \
	$(COMPONENTS) check-includes

all: $(BINS)

test-bins: $(UNIT_TESTS) $(BPF_TESTS)

deps:
	$(Q)scripts/install-deps

# make check: dependencies, a warnings-as-errors build, the sanitizer build of the unit tier
# and of memprofctl (tests/bpf/record-sanitizers.sh), the Debian packages (installed, upgraded
# and purged by tests/system/package-deb.sh), then every tier through one runner with one
# closing line.
check: deps
	$(Q)$(MAKE) --no-print-directory all test-bins
	$(Q)$(MAKE) --no-print-directory B=$(B)/asan SAN=1 unit-tests $(B)/asan/bin/memprofctl
	$(Q)$(MAKE) --no-print-directory fuzz
	$(Q)$(MAKE) --no-print-directory deb
	$(Q)MP_BUILD=$(abspath $(B)) MP_ASAN_BUILD=$(abspath $(B)/asan) tests/run

unit-tests: $(UNIT_TESTS)

# make demo: dependencies first; the rest in a new make, whose pkg-config calls see them.
demo: deps
	$(Q)$(MAKE) --no-print-directory demo-run

# make deb: dpkg-buildpackage on a copy of this checkout (scripts/build-deb); the source tree
# and its build/ are left as they are.
deb:
	$(Q)scripts/build-deb $(abspath $(B)/deb)

clean:
	$(call msg,CLEAN,$(B))
	$(Q)rm -rf $(B) $(CLEAN_EXTRA)

-include $(shell find $(B) -name '*.d' 2>/dev/null)
