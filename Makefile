# memprofd top-level Makefile: non-recursive. Each component lives in its folder and
# contributes a fragment (<dir>/build.mk) that this file includes; all outputs go under $(B).
#
#   make [all]        build everything into $(B) (default build/)
#   make check        install test dependencies, build, run every test tier (tests/run)
#   make demo         install dependencies, build, profile a real program, print a report
#   make bench        run the benchmark suite (bench/)
#   make fuzz         build the libFuzzer targets
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

.PHONY: all check demo demo-run bench fuzz install clean deps unit-tests test-bins deb

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
