# bpf tier: workloads of the allocator tests (tests/bpf/alloc-*.sh). Included by bpf/build.mk.
# One source per purpose, linked with Debian's jemalloc, tcmalloc (full and minimal), mimalloc,
# jemalloc's static archive (the allocator inside the executable), and a dlopen'd object that
# brings in an allocator the process did not map before.
ALLOC_WL_DIR	:= $(B)/tests/workloads
ALLOC_WL_CFLAGS	:= -std=gnu11 -O2 -g -fno-omit-frame-pointer -fno-ipa-icf -D_GNU_SOURCE $(WARN)

$(ALLOC_WL_DIR)/wl_jemalloc: tests/workloads/wl_allocators.c tests/workloads/wl_truth.h
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALLOC_WL_CFLAGS) -DWL_JEMALLOC -o $@ $< -ljemalloc

$(ALLOC_WL_DIR)/wl_jemalloc_static: tests/workloads/wl_allocators.c tests/workloads/wl_truth.h
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALLOC_WL_CFLAGS) -DWL_JEMALLOC -o $@ $< \
		-Wl,-Bstatic -ljemalloc_pic -Wl,-Bdynamic -pthread -ldl -lm

$(ALLOC_WL_DIR)/wl_tcmalloc: tests/workloads/wl_allocators.c tests/workloads/wl_truth.h
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALLOC_WL_CFLAGS) -DWL_TCMALLOC -o $@ $< -ltcmalloc

$(ALLOC_WL_DIR)/wl_tcmalloc_minimal: tests/workloads/wl_allocators.c tests/workloads/wl_truth.h
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALLOC_WL_CFLAGS) -DWL_TCMALLOC -o $@ $< -ltcmalloc_minimal

$(ALLOC_WL_DIR)/wl_mimalloc: tests/workloads/wl_allocators.c tests/workloads/wl_truth.h
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALLOC_WL_CFLAGS) -DWL_MIMALLOC -o $@ $< -lmimalloc

$(ALLOC_WL_DIR)/libwl_dlalloc.so: tests/workloads/wl_dlalloc.c tests/workloads/wl_truth.h
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALLOC_WL_CFLAGS) -fPIC -shared -o $@ $< -lmimalloc

$(ALLOC_WL_DIR)/wl_dlopen: tests/workloads/wl_dlopen.c
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALLOC_WL_CFLAGS) -o $@ $< -ldl

BPF_TESTS	+= $(ALLOC_WL_DIR)/wl_jemalloc $(ALLOC_WL_DIR)/wl_jemalloc_static \
		   $(ALLOC_WL_DIR)/wl_tcmalloc $(ALLOC_WL_DIR)/wl_tcmalloc_minimal \
		   $(ALLOC_WL_DIR)/wl_mimalloc $(ALLOC_WL_DIR)/libwl_dlalloc.so \
		   $(ALLOC_WL_DIR)/wl_dlopen
