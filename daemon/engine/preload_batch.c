// SPDX-License-Identifier: LGPL-2.1-or-later
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "daemon/engine/preload_batch.h"

/* The entry at @off of the queue's allocs[] (@bytes of them), or -EINVAL. */
static int entry_at(const uint8_t *allocs, uint32_t bytes, uint32_t off,
		    struct mp_preload_queued_head *qh)
{
	if (bytes - off < sizeof(*qh))
		return -EINVAL;
	memcpy(qh, allocs + off, sizeof(*qh));
	if (qh->r.nframes < 0 || qh->r.nframes > MP_MAX_STACK ||
	    bytes - off - sizeof(*qh) < 8 * (uint32_t)qh->r.nframes)
		return -EINVAL;
	return 0;
}

int mp_preload_batch__expand(const void *rec, size_t size, const struct mp_preload_batch_ops *ops,
			     void *ctx, struct mp_preload_batch_stats *st)
{
	const struct mp_preload_batch_event *b = rec;
	struct mp_preload_queue_head qh;
	struct mp_alloc_event ev;
	uint64_t ids[MP_PL_QUEUE_MAX];	/* of the samples in the queue */
	const uint8_t *allocs;
	uint32_t max_frames, bytes, off = 0, nids = 0;
	int err = 0;

	if (size < sizeof(*b) || b->size > size - sizeof(*b))
		goto malformed;
	if (b->size == 0)
		return 0;	/* BPF could not read the queue (counted there) */
	if (b->size < MP_PL_QUEUE_ALLOCS)
		goto malformed;
	memcpy(&qh, b->q, sizeof(qh));
	/* The process may have changed "bytes" after BPF sized the copy by it: the copy rules. */
	bytes = b->size - MP_PL_QUEUE_ALLOCS;
	if (qh.bytes < bytes)
		bytes = qh.bytes;
	if (qh.nalloc > MP_PL_QUEUE_MAX || qh.nfree > MP_FREE_BATCH_MAX)
		goto malformed;
	max_frames = b->max_frames >= 1 && b->max_frames <= MP_MAX_STACK ? b->max_frames :
									   MP_MAX_STACK;
	allocs = b->q + MP_PL_QUEUE_ALLOCS;
	memset(&ev.h, 0, sizeof(ev.h));
	ev.h.type = MP_EV_ALLOC;
	ev.h.pid = b->h.pid;
	ev.h.tid = b->h.tid;
	ev.start_stack = 0;	/* unknown: the queue may be read after the process exec'd */
	for (uint32_t i = 0; i < qh.nalloc; i++) {
		struct mp_preload_queued_head e;
		uint32_t nfr;

		if (entry_at(allocs, bytes, off, &e)) {
			st->malformed++;
			err = -EINVAL;	/* the rest cannot be found: the frees still go */
			break;
		}
		off += sizeof(e) + 8 * (uint32_t)e.r.nframes;
		ids[nids++] = e.r.id;
		/* the profile of the generation it was drawn under (struct mp_preload_target) */
		if (e.r.generation == b->gen && (b->flags & MP_PROC_SAMPLING))
			ev.h.profile = b->h.profile;
		else if (e.r.generation && e.r.generation == b->prev_gen &&
			 (b->prev_flags & MP_PROC_SAMPLING))
			ev.h.profile = b->prev_profile;
		else
			ev.h.profile = 0;
		if (!ev.h.profile || !e.r.addr || !e.r.nsamples || !e.r.id) {
			st->not_ours++;
			continue;
		}
		/* a trace's times only go forward: never later than the flush */
		ev.h.time_ns = e.time_ns && e.time_ns <= b->h.time_ns ? e.time_ns : b->h.time_ns;
		ev.addr = e.r.id;	/* keyed by id: see MP_KIND_F_PRELOAD */
		ev.size = e.r.size;
		ev.remaining = e.r.nsamples;	/* final */
		ev.kind = (e.r.kind & MP_KIND_MASK) | MP_KIND_F_PRELOAD;
		nfr = (uint32_t)e.r.nframes < max_frames ? (uint32_t)e.r.nframes : max_frames;
		memcpy(ev.stack, allocs + off - 8 * (uint32_t)e.r.nframes, 8 * (size_t)nfr);
		ev.nframes = nfr;
		ops->alloc(ctx, &ev);
		st->allocs++;
	}
	if (qh.nfree) {
		struct mp_free_batch_event fb;

		memset(&fb.h, 0, sizeof(fb.h));
		fb.h.type = MP_EV_FREE_BATCH;
		fb.h.pid = b->h.pid;
		fb.h.tid = b->h.tid;
		fb.h.profile = b->h.profile;
		fb.h.time_ns = b->h.time_ns;
		fb.kind = MP_KIND_FREE | MP_KIND_F_PRELOAD;
		fb.count = 0;
		for (uint32_t i = 0; i < qh.nfree; i++) {
			uint64_t id;
			bool queued = false;

			memcpy(&id, b->q + sizeof(qh) + 8 * (size_t)i, sizeof(id));
			/* see MP_PL_BATCH_PULLED */
			for (uint32_t k = 0; b->origin == MP_PL_BATCH_PULLED && k < nids; k++)
				queued |= ids[k] == id;
			if (!queued)
				fb.ids[fb.count++] = id;
		}
		if (fb.count) {
			ops->frees(ctx, &fb, offsetof(struct mp_free_batch_event, ids) +
						     8 * (size_t)fb.count);
			st->frees += fb.count;
		}
	}
	return err;
malformed:
	st->malformed++;
	return -EINVAL;
}
