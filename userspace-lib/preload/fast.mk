# The daemon half of the cooperative fast path: `memprofctl record --preload` finds the library
# in $(libdir) once installed, and its benchmark (bench-fast). Included from preload.mk.

EXTRA_CFLAGS_cli += -DMP_LIBDIR='"$(libdir)"'

$(B)/bench/fast_bench: bench/fast_bench.c
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(PL_WL_CFLAGS) -o $@ $< -lm -pthread

.PHONY: bench-fast
bench-fast: $(B)/bench/fast_bench $(PL_LIB) $(B)/bin/memprofctl
	$(Q)BENCH_BUILD=$(abspath $(B)) bench/fast-bench.sh

bench: bench-fast

.PHONY: install-preload-man
install-preload-man:
	$(call msg,INSTALL,libmemprof-preload.8)
	$(Q)$(INSTALL) -d $(DESTDIR)$(mandir)/man8
	$(Q)$(INSTALL) -m 644 man/libmemprof-preload.8 $(DESTDIR)$(mandir)/man8/

install: install-preload-man
