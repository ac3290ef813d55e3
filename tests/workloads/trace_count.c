// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * trace_count TRACE: a program of a libmemprof user, built by the tests against an installed
 * libmemprof with `pkg-config --cflags --libs libmemprof` (tests/unit/install.sh: `make
 * install`; tests/system/package-deb.sh: the Debian packages), never by the Makefile. Reads
 * TRACE with the strict reader and prints "ALLOCS COLLECTS VERSION"; exits 1 on an error or
 * a warning (a truncated tail).
 */
#include <stdio.h>
#include <memprof/trace.h>

static int warnings;

static void on_warning(void *ctx, uint64_t offset, const char *msg)
{
	fprintf(stderr, "trace_count: '%s': warning at offset %llu: %s\n", (const char *)ctx,
		(unsigned long long)offset, msg);
	warnings++;
}

int main(int argc, char **argv)
{
	struct memprof_reader_opts o = { .sz = sizeof(o), .warn = on_warning };
	struct memprof_reader *r;
	struct memprof_event ev;
	long allocs = 0, collects = 0;
	char err[256];
	int ret;

	if (argc != 2) {
		fprintf(stderr, "usage: trace_count TRACE\n");
		return 2;
	}
	o.warn_ctx = argv[1];
	r = memprof_reader__open(argv[1], &o, err, sizeof(err));
	if (!r) {
		fprintf(stderr, "trace_count: '%s': %s\n", argv[1], err);
		return 1;
	}
	while ((ret = memprof_reader__next(r, &ev)) > 0) {
		allocs += ev.type == MEMPROF_EV_ALLOC;
		collects += ev.type == MEMPROF_EV_COLLECT;
	}
	if (ret < 0)
		fprintf(stderr, "trace_count: '%s': %s\n", argv[1], memprof_reader__errmsg(r));
	printf("%ld %ld %u\n", allocs, collects, memprof_reader__info(r)->version);
	memprof_reader__free(r);
	return ret < 0 || warnings;
}
