# bpf tier: workloads of the allocator tests (tests/bpf/alloc-*.sh). Included by bpf/build.mk.
# One source per purpose, linked with Debian's jemalloc, tcmalloc (full and minimal), mimalloc,
# jemalloc's static archive (the allocator inside the executable), and a dlopen'd object that
# brings in an allocator the process did not map before.
ALLOC_WL_DIR	:= $(B)/tests/workloads
ALLOC_WL_CFLAGS	:= -std=gnu11 -O2 -g -fno-omit-frame-pointer -fno-ipa-icf -D_GNU_SOURCE $(WARN)

# Each allocator workload: its allocator (WL_*, wl_allocators.c) and how it is linked.
ALLOC_WL_LINKED	:= wl_jemalloc wl_jemalloc_static wl_tcmalloc wl_tcmalloc_minimal wl_mimalloc
ALLOC_WL_DEF_wl_jemalloc		:= -DWL_JEMALLOC
ALLOC_WL_LIB_wl_jemalloc		:= -ljemalloc
ALLOC_WL_DEF_wl_jemalloc_static		:= -DWL_JEMALLOC
ALLOC_WL_LIB_wl_jemalloc_static		:= -Wl,-Bstatic -ljemalloc_pic -Wl,-Bdynamic -pthread -ldl -lm
ALLOC_WL_DEF_wl_tcmalloc		:= -DWL_TCMALLOC
ALLOC_WL_LIB_wl_tcmalloc		:= -ltcmalloc
ALLOC_WL_DEF_wl_tcmalloc_minimal	:= -DWL_TCMALLOC
ALLOC_WL_LIB_wl_tcmalloc_minimal	:= -ltcmalloc_minimal
ALLOC_WL_DEF_wl_mimalloc		:= -DWL_MIMALLOC
ALLOC_WL_LIB_wl_mimalloc		:= -lmimalloc

$(addprefix $(ALLOC_WL_DIR)/,$(ALLOC_WL_LINKED)): $(ALLOC_WL_DIR)/%: tests/workloads/wl_allocators.c \
						  tests/workloads/wl_truth.h
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALLOC_WL_CFLAGS) $(ALLOC_WL_DEF_$*) -o $@ $< $(ALLOC_WL_LIB_$*)

$(ALLOC_WL_DIR)/libwl_dlalloc.so: tests/workloads/wl_dlalloc.c tests/workloads/wl_truth.h
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALLOC_WL_CFLAGS) -fPIC -shared -o $@ $< -lmimalloc

$(ALLOC_WL_DIR)/wl_dlopen: tests/workloads/wl_dlopen.c
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALLOC_WL_CFLAGS) -o $@ $< -ldl

BPF_TESTS	+= $(addprefix $(ALLOC_WL_DIR)/,$(ALLOC_WL_LINKED)) \
		   $(ALLOC_WL_DIR)/libwl_dlalloc.so $(ALLOC_WL_DIR)/wl_dlopen
