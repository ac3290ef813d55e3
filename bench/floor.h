/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Shared between bench/floor.bpf.c and bench/floor.c: indexes of the per-CPU "hits" counters. */
#ifndef MEMPROF_BENCH_FLOOR_H
#define MEMPROF_BENCH_FLOOR_H

enum floor_hit {
	FLOOR_HIT_ALLOC_ENTRY,
	FLOOR_HIT_ALLOC_RETURN,
	FLOOR_HIT_FREE,
	FLOOR_HIT_SESSION,	/* floor -s: every probed call */
	FLOOR_HIT__MAX,
};

#endif
