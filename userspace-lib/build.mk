# libmemprof: the memtrace trace codec (userspace-lib/), its tests, fuzz target and benchmark.
LIB_SRCS	:= $(wildcard userspace-lib/*.c userspace-lib/codec/*.c userspace-lib/client/*.c)
LIB_OBJS	:= $(LIB_SRCS:%.c=$(B)/%.o)
LIB_HDRS	:= $(wildcard userspace-lib/include/memprof/*.h)
LIB_SONAME	:= libmemprof.so.0
LIB_REAL	:= libmemprof.so.$(VERSION)
LIB_LIBS	:= $(call pkglibs,libzstd libsystemd) -lm
EXTRA_CFLAGS_userspace-lib := $(call pkgcflags,libzstd libsystemd)

$(B)/lib/libmemprof.a: $(LIB_OBJS)
	$(call msg,AR,$@)
	@mkdir -p $(@D)
	$(Q)rm -f $@ && $(AR) rcs $@ $^

$(B)/lib/$(LIB_REAL): $(LIB_OBJS) userspace-lib/libmemprof.map
	$(call msg,LINK,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) -shared -Wl,-soname,$(LIB_SONAME) \
		-Wl,--version-script=userspace-lib/libmemprof.map -Wl,-z,defs \
		-o $@ $(LIB_OBJS) $(LIB_LIBS)

$(B)/lib/$(LIB_SONAME) $(B)/lib/libmemprof.so: $(B)/lib/$(LIB_REAL)
	$(Q)ln -sf $(LIB_REAL) $@

LIB_PC_SED	= sed -e 's|@prefix@|$(prefix)|' -e 's|@libdir@|$(libdir)|' \
		      -e 's|@includedir@|$(includedir)|' -e 's|@VERSION@|$(VERSION)|'

$(B)/lib/pkgconfig/libmemprof.pc: userspace-lib/libmemprof.pc.in Makefile
	$(call msg,GEN,$@)
	@mkdir -p $(@D)
	$(Q)$(LIB_PC_SED) $< > $@

BINS += $(B)/lib/libmemprof.a $(B)/lib/libmemprof.so $(B)/lib/$(LIB_SONAME) \
	$(B)/lib/pkgconfig/libmemprof.pc

.PHONY: install-lib bench-codec
install-lib: $(B)/lib/libmemprof.a $(B)/lib/$(LIB_REAL) $(B)/lib/pkgconfig/libmemprof.pc
	$(call msg,INSTALL,libmemprof)
	$(Q)$(INSTALL) -d $(DESTDIR)$(libdir) $(DESTDIR)$(includedir)/memprof \
		$(DESTDIR)$(pkgconfigdir) $(DESTDIR)$(mandir)/man3 $(DESTDIR)$(mandir)/man5
	$(Q)$(INSTALL) -m 644 $(B)/lib/libmemprof.a $(DESTDIR)$(libdir)/
	$(Q)$(INSTALL) -m 755 $(B)/lib/$(LIB_REAL) $(DESTDIR)$(libdir)/
	$(Q)ln -sf $(LIB_REAL) $(DESTDIR)$(libdir)/$(LIB_SONAME)
	$(Q)ln -sf $(LIB_SONAME) $(DESTDIR)$(libdir)/libmemprof.so
	$(Q)$(INSTALL) -m 644 $(LIB_HDRS) $(DESTDIR)$(includedir)/memprof/
	@# Generated again: prefix and libdir given to 'make install' win over the build's.
	$(Q)$(LIB_PC_SED) userspace-lib/libmemprof.pc.in > $(DESTDIR)$(pkgconfigdir)/libmemprof.pc
	$(Q)chmod 644 $(DESTDIR)$(pkgconfigdir)/libmemprof.pc
	$(Q)$(INSTALL) -m 644 man/libmemprof.3 man/memprof_start.3 man/memprof_client.3 \
		$(DESTDIR)$(mandir)/man3/
	$(Q)$(INSTALL) -m 644 man/memprof-trace.5 $(DESTDIR)$(mandir)/man5/

install: install-lib

# Unit tests of the codec.
CODEC_TESTS	:= $(patsubst tests/unit/%.c,$(B)/tests/unit/%,$(wildcard tests/unit/test_codec_*.c))

$(CODEC_TESTS): $(B)/tests/unit/%: $(B)/tests/unit/%.o $(B)/lib/libmemprof.a
	$(call msg,LINK,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(B)/lib/libmemprof.a $(LIB_LIBS) -lm

UNIT_TESTS += $(CODEC_TESTS)

# The outputs a user names (outfile.h).
$(B)/tests/unit/test_outfile: $(B)/tests/unit/test_outfile.o $(B)/lib/libmemprof.a
	$(call msg,LINK,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(B)/lib/libmemprof.a $(LIB_LIBS)

UNIT_TESTS += $(B)/tests/unit/test_outfile

# The hash map of the codec, the symbolizer and the report model.
$(B)/tests/unit/test_hashmap: $(B)/tests/unit/test_hashmap.o $(B)/userspace-lib/hashmap.o
	$(call msg,LINK,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^

UNIT_TESTS += $(B)/tests/unit/test_hashmap

# The options table and its validator (options.h); tests/unit/options-table.sh reads its
# --table.
$(B)/tests/unit/test_options: $(B)/tests/unit/test_options.o $(B)/lib/libmemprof.a
	$(call msg,LINK,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(B)/lib/libmemprof.a $(LIB_LIBS) -lm

UNIT_TESTS += $(B)/tests/unit/test_options

# The client reads memprofd's protocol by name (a peer of its own serves it).
$(B)/tests/unit/test_client_protocol: $(B)/tests/unit/test_client_protocol.o \
		$(B)/lib/libmemprof.a
	$(call msg,LINK,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(B)/lib/libmemprof.a $(LIB_LIBS)

UNIT_TESTS += $(B)/tests/unit/test_client_protocol

# libFuzzer target: built with clang from the sources, independent of $(CC) and SAN.
FUZZ_CFLAGS	:= -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined \
		   -fno-sanitize-recover=undefined -D_GNU_SOURCE -I userspace-lib/include -I .

$(B)/fuzz/fuzz_reader: tests/fuzz/fuzz_reader.c $(LIB_SRCS) $(wildcard userspace-lib/*.h userspace-lib/codec/*.h) $(LIB_HDRS)
	$(call msg,FUZZ,$@)
	@mkdir -p $(@D)
	$(Q)$(CLANG) $(FUZZ_CFLAGS) $(WARN) -o $@ tests/fuzz/fuzz_reader.c $(LIB_SRCS) $(LIB_LIBS)

fuzz: $(B)/fuzz/fuzz_reader

# Codec throughput (not a test).
$(B)/bench/codec_bench: $(B)/bench/codec_bench.o $(B)/lib/libmemprof.a
	$(call msg,LINK,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(B)/lib/libmemprof.a $(LIB_LIBS) -lm

bench-codec: $(B)/bench/codec_bench
	$(Q)$(B)/bench/codec_bench

bench: bench-codec
include userspace-lib/preload/preload.mk
include userspace-lib/api.mk

# The duration parser and byte formatter of memprofctl and its reports (units.h).
$(B)/tests/unit/test_units: $(B)/tests/unit/test_units.o
	$(call msg,LINK,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< -lm

UNIT_TESTS += $(B)/tests/unit/test_units
