# memprofd, the service (daemon/service/memprofd.c, svc_profile.c, svc_unit.c,
# svc_standing.c, bus.c, bus_server.c), its
# systemd units, its man pages, and the memprofctl commands that talk to it. Included from
# daemon/build.mk. Links the engine through ENGINE_OBJS / ENGINE_LIBS (daemon/build.mk).
SVC_OBJS	:= $(B)/daemon/service/memprofd.o $(B)/daemon/service/svc_profile.o \
		   $(B)/daemon/service/svc_unit.o $(B)/daemon/service/svc_standing.o \
		   $(B)/daemon/service/bus.o $(B)/daemon/service/bus_server.o
SVC_LIBS	:= $(call pkglibs,libsystemd) $(call pkglibs,json-c)
SVC_UNITS	:= systemd/memprofd.service systemd/memprofd.socket
SVC_MAN		:= man/memprofd.8 man/memprofctl.1
# dbus-daemon reads policies from /usr/share/dbus-1/system.d and /etc/dbus-1/system.d only.
dbuspolicydir	?= $(if $(filter /usr,$(prefix)),/usr/share/dbus-1/system.d,/etc/dbus-1/system.d)

$(SVC_OBJS): EXTRA_CFLAGS_daemon += -DMP_VERSION='"$(VERSION)"' $(call pkgcflags,libsystemd)

# memprofctl's client commands (cli/cmd_attach.c ..., cli/ctl_bus.c) use sd-bus and json-c.
CTL_EXTRA_LIBS	+= $(SVC_LIBS)

$(B)/bin/memprofd: $(SVC_OBJS) $$(ENGINE_OBJS) $$(filter %.a,$$(ENGINE_LIBS))
	$(call msg,LINK,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(SVC_OBJS) $(ENGINE_OBJS) $(ENGINE_LIBS) $(SVC_LIBS) -lm

# The daemon links only once the engine exists; until then its objects are still compiled.
ifneq ($(wildcard daemon/engine/engine.c),)
BINS		+= $(B)/bin/memprofd
else
all: $(SVC_OBJS)
endif

# Workloads the system tests profile (tests/workloads/svc_*.c): plain -O1 programs with frame
# pointers, as an operator's program would be.
SVC_WORKLOADS	:= $(patsubst tests/workloads/%.c,$(B)/tests/workloads/%,\
		   $(wildcard tests/workloads/svc_*.c))
$(B)/tests/workloads/svc_%: tests/workloads/svc_%.c
	$(call cc_prog,-O1 -g -fno-omit-frame-pointer -Wall -Wextra -Werror)
BPF_TESTS	+= $(SVC_WORKLOADS)

.PHONY: install-service lint-man-service verify-units
install: install-service
install-service: $(B)/bin/memprofd $(B)/bin/memprofctl
	$(INSTALL) -d $(DESTDIR)$(sbindir) $(DESTDIR)$(bindir) $(DESTDIR)$(unitdir) \
		$(DESTDIR)$(mandir)/man1 $(DESTDIR)$(mandir)/man8 $(DESTDIR)$(dbuspolicydir)
	$(INSTALL) -m 0755 $(B)/bin/memprofd $(DESTDIR)$(sbindir)/memprofd
	$(INSTALL) -m 0755 $(B)/bin/memprofctl $(DESTDIR)$(bindir)/memprofctl
	sed 's|/usr/local/sbin/memprofd|$(sbindir)/memprofd|' systemd/memprofd.service \
		> $(DESTDIR)$(unitdir)/memprofd.service
	$(INSTALL) -m 0644 systemd/memprofd.socket $(DESTDIR)$(unitdir)/memprofd.socket
	chmod 0644 $(DESTDIR)$(unitdir)/memprofd.service
	$(INSTALL) -m 0644 systemd/org.memprofd.conf $(DESTDIR)$(dbuspolicydir)/org.memprofd.conf
	$(INSTALL) -m 0644 man/memprofd.8 $(DESTDIR)$(mandir)/man8/memprofd.8
	$(INSTALL) -m 0644 man/memprofctl.1 $(DESTDIR)$(mandir)/man1/memprofctl.1

lint-man: lint-man-service
lint-man-service:
	$(Q)mandoc -Tlint -Wwarning $(SVC_MAN)

# The control API's libFuzzer target (tests/fuzz/fuzz_bus.c, tests/unit/fuzz-bus.sh): the
# service's own sources built with clang and the fuzzer's instrumentation (memprofd.c's main
# renamed: libFuzzer has its own), linked with the engine's objects as the daemon is (never
# called: the fuzzed service has no engine, so it needs neither root nor BPF).
FUZZ_SVC_SRCS	:= $(patsubst $(B)/%.o,%.c,$(SVC_OBJS))
$(B)/fuzz/fuzz_bus: tests/fuzz/fuzz_bus.c $(FUZZ_SVC_SRCS) $(wildcard daemon/*.h) \
		    $$(ENGINE_OBJS) $$(filter %.a,$$(ENGINE_LIBS))
	$(call msg,FUZZ,$@)
	@mkdir -p $(@D)
	$(Q)$(CLANG) $(FUZZ_CFLAGS) $(WARN) -Wno-missing-prototypes -Dmain=memprofd_main \
		-DMP_VERSION='"$(VERSION)"' -I $(B)/gen $(call pkgcflags,libsystemd) -o $@ \
		tests/fuzz/fuzz_bus.c $(FUZZ_SVC_SRCS) $(ENGINE_OBJS) $(ENGINE_LIBS) $(SVC_LIBS) -lm

fuzz: $(B)/fuzz/fuzz_bus
