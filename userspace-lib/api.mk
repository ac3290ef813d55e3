# The two public APIs beyond the codec: the in-process profiling API of libmemprof-preload
# (<memprof/memprof.h>, userspace-lib/preload/pl_api.c) and the memprofd client API of
# libmemprof (<memprof/client.h>, userspace-lib/client/client.c); their tests and examples.
# Included from userspace-lib/build.mk.

# Callbacks run inside malloc and free: the compiler must not assume they touch no globals.
API_NOBUILTIN	:= -fno-builtin-malloc -fno-builtin-calloc -fno-builtin-realloc -fno-builtin-free

# In-process API test: linked against the preload library (never sanitized: ASan would replace
# the interposers). Run by tests/unit/memprof-api.sh.
$(PL_WL_DIR)/test_memprof_api: tests/unit/test_memprof_api.c tests/unit/test.h \
		tests/unit/chisq.h userspace-lib/include/memprof/memprof.h $(PL_LIB)
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(PL_WL_CFLAGS) $(API_NOBUILTIN) -I userspace-lib/include -o $@ $< -L$(B)/lib \
		-lmemprof-preload -Wl,-rpath,$(abspath $(B)/lib) -lm -pthread

# Examples: an in-process leak finder and a memprofd client.
$(B)/examples/memprof_api_example: examples/memprof_api_example.c \
		userspace-lib/include/memprof/memprof.h $(PL_LIB)
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(PL_WL_CFLAGS) $(API_NOBUILTIN) -I userspace-lib/include -o $@ $< -L$(B)/lib \
		-lmemprof-preload -Wl,-rpath,$(abspath $(B)/lib) -rdynamic -ldl -pthread

$(B)/examples/client_example: $(B)/examples/client_example.o $(B)/lib/libmemprof.a
	$(call msg,LINK,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(B)/lib/libmemprof.a $(LIB_LIBS) -lm

BPF_TESTS += $(PL_WL_DIR)/test_memprof_api $(B)/examples/memprof_api_example \
	     $(B)/examples/client_example
