/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * MP_EV_PRELOAD_BATCH records (bpf/memprof.h): libmemprof-preload's deferred queue, as one
 * memprof:flush passed it, copied byte for byte from the process. Expanded here into the
 * MP_KIND_F_PRELOAD alloc records and the free batch it stands for, exactly as the BPF
 * program made them one by one before: the queue is the process' memory, so every length is
 * checked against the record.
 *
 * Owner: the engine component.
 */
#ifndef MEMPROFD_PRELOAD_BATCH_H
#define MEMPROFD_PRELOAD_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "bpf/memprof.h"

struct mp_preload_batch_ops {
	/* Each sample of the queue, in order, as a full-size alloc record of the flushing thread. */
	void (*alloc)(void *ctx, const struct mp_alloc_event *ev);
	/* Then the frees (count >= 1), @size bytes of record. */
	void (*frees)(void *ctx, const struct mp_free_batch_event *ev, size_t size);
};

struct mp_preload_batch_stats {
	uint64_t allocs;	/* passed to ops->alloc */
	uint64_t frees;		/* ids passed to ops->frees */
	uint64_t not_ours;	/* samples drawn under neither of the last two generations, or
				 * while not sampling */
	uint64_t malformed;	/* records or entries whose sizes do not hold together */
};

/*
 * Expand the @size-byte record @rec (a pulled one's frees of its own samples are left out: see
 * MP_PL_BATCH_PULLED). Returns 0, or -EINVAL when it is malformed: a record
 * whose header or counts do not hold together is dropped whole; after a malformed entry the
 * samples before it and the frees are still passed on. Adds to @st.
 */
int mp_preload_batch__expand(const void *rec, size_t size, const struct mp_preload_batch_ops *ops,
			     void *ctx, struct mp_preload_batch_stats *st);

#endif
