# bpf tier: workloads of the allocator tests (tests/bpf/alloc-*.sh). Included by bpf/build.mk.
# One source per purpose, linked with Debian's jemalloc, tcmalloc (full and minimal), mimalloc,
# jemalloc's static archive (the allocator inside the executable), and a dlopen'd object that
# brings in an allocator the process did not map before.
ALLOC_WL_DIR	:= $(B)/tests/workloads
ALLOC_WL_CFLAGS	:= -std=gnu11 -O2 -g -fno-omit-frame-pointer -fno-ipa-icf -D_GNU_SOURCE $(WARN)

# Each allocator's build of the one source: the define naming it, then what it links.
ALLOC_WL_jemalloc		:= -DWL_JEMALLOC -ljemalloc
ALLOC_WL_jemalloc_static	:= -DWL_JEMALLOC -Wl,-Bstatic -ljemalloc_pic -Wl,-Bdynamic \
				   -pthread -ldl -lm
ALLOC_WL_tcmalloc		:= -DWL_TCMALLOC -ltcmalloc
ALLOC_WL_tcmalloc_minimal	:= -DWL_TCMALLOC -ltcmalloc_minimal
ALLOC_WL_mimalloc		:= -DWL_MIMALLOC -lmimalloc
ALLOC_WL_BINS	:= $(addprefix $(ALLOC_WL_DIR)/wl_,jemalloc jemalloc_static tcmalloc \
		   tcmalloc_minimal mimalloc)

$(ALLOC_WL_BINS): $(ALLOC_WL_DIR)/wl_%: tests/workloads/wl_allocators.c tests/workloads/wl_truth.h
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALLOC_WL_CFLAGS) $(filter -D%,$(ALLOC_WL_$*)) -o $@ $< \
		$(filter-out -D%,$(ALLOC_WL_$*))

$(ALLOC_WL_DIR)/libwl_dlalloc.so: tests/workloads/wl_dlalloc.c tests/workloads/wl_truth.h
	$(call cc_prog,$(ALLOC_WL_CFLAGS) -fPIC -shared,-lmimalloc)

$(ALLOC_WL_DIR)/wl_dlopen: tests/workloads/wl_dlopen.c
	$(call cc_prog,$(ALLOC_WL_CFLAGS),-ldl)

BPF_TESTS	+= $(ALLOC_WL_BINS) $(ALLOC_WL_DIR)/libwl_dlalloc.so $(ALLOC_WL_DIR)/wl_dlopen
