// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libFuzzer target for the memtrace reader: any input must end in a clean end of trace or an
 * error message, never a crash, leak, hang or sanitizer report. Both modes are exercised, and
 * locations are looked up as a consumer would.
 */
#include <stddef.h>
#include <stdint.h>

#include <memprof/trace.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	for (int strict = 0; strict >= -1; strict--) {
		struct memprof_reader_opts o = { .sz = sizeof(o), .strict = strict,
						 .report_locations = strict == 0 };
		struct memprof_reader *r = memprof_reader__new_buf(data, size, &o, NULL, 0);
		struct memprof_event ev;
		unsigned int n;
		int ret;

		if (!r)
			continue;
		while ((ret = memprof_reader__next(r, &ev)) > 0) {
			for (size_t i = 0; i < ev.backtrace_len; i++)
				(void)memprof_reader__lookup(r, ev.backtrace[i], &n);
			for (unsigned int i = 0; i < ev.nlocs; i++)
				(void)ev.locs[i].filename[0];
		}
		(void)memprof_reader__errmsg(r);
		memprof_reader__free(r);
	}
	return 0;
}
