/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The narrow interface between the interposers' sampler (pl_sample.c) and the in-process
 * profiling API (pl_api.c, <memprof/memprof.h>). The sampler calls in only on slow paths:
 * when a thread re-reads its sampling parameters, when a block was sampled, and when a sampled
 * block is released. pl_api.c calls back to park the calling thread's countdown while a
 * callback runs.
 */
#ifndef MP_PL_API_H
#define MP_PL_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pl_core.h"

/* Generations of API profiles carry this bit; profiler-written generations never do. */
#define PL_API_GEN_BIT	0x80000000u

/* Nonzero while some API profile exists (sampling or stopped): frees must call pl_api_free. */
PL_HIDDEN extern int pl_api_live;

/* True if an API profile samples: its generation (PL_API_GEN_BIT set) and rate. */
PL_HIDDEN bool pl_api_params(uint32_t *gen, double *rate);

enum pl_api_track {
	PL_API_TRACKED,		/* in the free table: its release will be seen */
	PL_API_UNTRACKED,	/* free table full */
};

/* A block was sampled under generation @gen (PL_API_GEN_BIT set). Called on its thread. */
PL_HIDDEN void pl_api_alloc(uint32_t gen, void *p, size_t size, uint64_t n, uint32_t kind,
			    enum pl_api_track track);
/* A sampled block is being released. */
PL_HIDDEN void pl_api_free(uintptr_t p);

/* Park this thread's countdown (nothing it allocates is sampled) and give it back. */
PL_HIDDEN int64_t pl_sampling_suspend(void);
PL_HIDDEN void pl_sampling_resume(int64_t saved);
/* Make this thread re-read its parameters at its next allocation (unless parked). */
PL_HIDDEN void pl_sampling_kick(void);
/*
 * Open the allocation fast paths' gate for an in-process profile (@on), or close our part of
 * it: while it is closed no thread looks at its countdown, so no profile can arm.
 */
PL_HIDDEN void pl_gate_api(bool on);

#endif
