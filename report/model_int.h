/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * What the files of the report model share beyond report.h: growing arrays and the interned
 * tables of model.c, which load.c (frames, stacks) and analyze.c (sites) add to.
 */
#ifndef MP_REPORT_MODEL_INT_H
#define MP_REPORT_MODEL_INT_H

#include <stddef.h>
#include <stdint.h>

#include "report/report.h"

#include "userspace-lib/array.h"

/* Grow the typed array @arr of capacity @cap to hold @need (from 64). 0 or -ENOMEM. */
#define GROW(arr, cap, need) MP_ARRAY_RESERVE(arr, cap, need, 64)

/* Free the sites and the views over them (rp_model__analyze() builds them again). */
void rp_sites_free(struct rp_model *m);
void rp_trace_free(struct rp_trace *t);

/*
 * Intern a frame, a stack of frame ids, or the site of stack @si under --by: the index of the
 * existing entry or of the one added, or -ENOMEM.
 */
int64_t rp_frame_intern(struct rp_model *m, const char *func, const char *file, uint32_t line,
			uint64_t code, const char *exe);
int64_t rp_stack_intern(struct rp_model *m, const uint32_t *frames, uint32_t len);
int64_t rp_site_intern(struct rp_model *m, uint32_t si);

#endif
