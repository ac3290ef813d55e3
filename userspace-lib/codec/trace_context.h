/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * What memprofd's traces say in their context string (memprof-trace(5)): the engine writes a
 * drops field that holds MP_CTX_DROPS_PENDING until the trace is completed, then patches it in
 * place with the final counts; a reader that still finds it reads a trace in progress (being
 * written, or whose writer died before completing it).
 *
 * Owner: the codec component. The engine writes these; report and dump read them.
 */
#ifndef MEMPROF_TRACE_CONTEXT_H
#define MEMPROF_TRACE_CONTEXT_H

#include <stdbool.h>
#include <string.h>

#define MP_CTX_DROPS_MARK	"; drops: "
#define MP_CTX_DROPS_PENDING	"pending (trace not completed)"

/* Is a trace with context @ctx (may be NULL) still in progress? */
static inline bool mp_ctx__in_progress(const char *ctx)
{
	return ctx && strstr(ctx, MP_CTX_DROPS_MARK MP_CTX_DROPS_PENDING) != NULL;
}

#endif
