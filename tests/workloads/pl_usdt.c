// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Workload for tests/bpf/preload-usdt.sh, run by tests/bpf/usdt_check under the preload.
 * Writes 'R' on fd 4 once started (the library is mapped), waits for a byte on fd 3 (the
 * loader attached its probes, or not), then mallocs COUNT blocks of 3000 and of 50000 bytes,
 * frees 9 of 10, and writes the library's counters on fd 4:
 *	alloc_hooks free_hooks samples armings live frees_queued unwalked
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <memprof/preload.h>

#define COUNT 4000

static void *blocks[2 * COUNT];

int main(void)
{
	struct memprof_preload_config *cfg = dlsym(RTLD_DEFAULT, "memprof_preload_config");
	char c = 'R';

	if (!cfg) {
		fprintf(stderr, "pl_usdt: not running under libmemprof-preload\n");
		return 1;
	}
	if (write(4, &c, 1) != 1 || read(3, &c, 1) != 1)
		return 1;
	for (int i = 0; i < COUNT; i++) {
		blocks[2 * i] = malloc(3000);
		blocks[2 * i + 1] = malloc(50000);
		if (!blocks[2 * i] || !blocks[2 * i + 1])
			return 1;
		((volatile char *)blocks[2 * i])[0] = 1;
		((volatile char *)blocks[2 * i + 1])[0] = 1;
	}
	for (int i = 0; i < 2 * COUNT; i++)
		if (i % 10)
			free(blocks[i]);
	/* snprintf into the stack and write(): dprintf would malloc (and be sampled) */
	char buf[160];
	int n = snprintf(buf, sizeof(buf), "%lu %lu %lu %lu %lu %lu %lu",
		(unsigned long)cfg->stats[MEMPROF_PRELOAD_STAT_ALLOC_HOOKS],
		(unsigned long)cfg->stats[MEMPROF_PRELOAD_STAT_FREE_HOOKS],
		(unsigned long)cfg->stats[MEMPROF_PRELOAD_STAT_SAMPLES],
		(unsigned long)cfg->stats[MEMPROF_PRELOAD_STAT_ARMINGS],
		(unsigned long)cfg->stats[MEMPROF_PRELOAD_STAT_LIVE],
		(unsigned long)cfg->stats[MEMPROF_PRELOAD_STAT_FREES_QUEUED],
		(unsigned long)cfg->stats[MEMPROF_PRELOAD_STAT_UNWALKED]);

	return write(4, buf, (size_t)n) == n ? 0 : 1;
}
