// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * daemon/engine/preload_batch.c: MP_EV_PRELOAD_BATCH records (libmemprof-preload's deferred queue,
 * copied from the process) expand into the alloc records and free batch they stand for, built
 * here the way the library packs its queue (<memprof/preload.h>); records whose sizes do not
 * hold together are refused without reading past them (run under ASan in make check).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <memprof/preload.h>

#include "daemon/engine/preload_batch.h"
#include "tests/unit/test.h"

#define GEN 7

struct seen {
	unsigned int nalloc, nfree_batches;
	struct mp_alloc_event allocs[MP_PL_QUEUE_MAX];
	uint64_t ids[MP_FREE_BATCH_MAX];
	uint32_t nids;
	uint64_t frees_time;
};

static void on_alloc(void *ctx, const struct mp_alloc_event *ev)
{
	struct seen *s = ctx;

	if (s->nalloc < MP_PL_QUEUE_MAX)
		s->allocs[s->nalloc] = *ev;
	s->nalloc++;
}

static void on_frees(void *ctx, const struct mp_free_batch_event *ev, size_t size)
{
	struct seen *s = ctx;

	s->nfree_batches++;
	if (size >= offsetof(struct mp_free_batch_event, ids) + 8 * (size_t)ev->count &&
	    ev->count <= MP_FREE_BATCH_MAX) {
		memcpy(s->ids, ev->ids, 8 * (size_t)ev->count);
		s->nids = ev->count;
	}
	s->frees_time = ev->h.time_ns;
}

static const struct mp_preload_batch_ops ops = { .alloc = on_alloc, .frees = on_frees };

/* A record as BPF makes it: the header, then the queue's first MP_PL_QUEUE_ALLOCS + bytes. */
/* The ids of the blocks the queue @q frees: @n of them, in order. */
#define Q_FREES(q, ...)								\
	do {									\
		const uint64_t ids_[] = { __VA_ARGS__ };			\
										\
		(q)->nfree = sizeof(ids_) / sizeof(ids_[0]);			\
		memcpy((q)->free_ids, ids_, sizeof(ids_));			\
	} while (0)

struct built {
	struct memprof_preload_queue q;
	size_t size;			/* of the record */
	uint8_t *rec;
};

static void q_add(struct memprof_preload_queue *q, uint64_t time, uint64_t id, uint32_t gen,
		  int32_t nframes)
{
	struct memprof_preload_queued_alloc *e =
		(struct memprof_preload_queued_alloc *)((char *)q->allocs + q->bytes);

	e->time_ns = time;
	e->addr = 0x10000 + id * 64;
	e->size = 100 + id;
	e->nsamples = id % 3 + 1;
	e->id = id;
	e->kind = MEMPROF_PRELOAD_MALLOC;
	e->generation = gen;
	e->nfree = 0;
	e->nframes = nframes;
	for (int i = 0; i < nframes; i++)
		e->frames[i] = 0x400000 + id * 0x1000 + (uint64_t)i;
	q->bytes += MEMPROF_PRELOAD_QUEUED_SIZE(nframes);
	q->nalloc++;
}

static void build_prev(struct built *b, uint32_t flags, uint32_t max_frames, uint32_t prev_gen,
		       uint32_t prev_profile, uint32_t prev_flags)
{
	struct mp_preload_batch_event h = { 0 };
	size_t qsize = MP_PL_QUEUE_ALLOCS + b->q.bytes;

	h.h.type = MP_EV_PRELOAD_BATCH;
	h.h.pid = 42;
	h.h.tid = 43;
	h.h.profile = 5;
	h.h.time_ns = 1000000;
	h.gen = GEN;
	h.max_frames = max_frames;
	h.flags = flags;
	h.size = (uint32_t)qsize;
	h.prev_gen = prev_gen;
	h.prev_profile = prev_profile;
	h.prev_flags = prev_flags;
	b->size = sizeof(h) + qsize;
	b->rec = malloc(b->size);	/* exactly the record: ASan sees any read past it */
	memcpy(b->rec, &h, sizeof(h));
	memcpy(b->rec + sizeof(h), &b->q, qsize);
}

static void build(struct built *b, uint32_t flags, uint32_t max_frames)
{
	build_prev(b, flags, max_frames, 0, 0, 0);
}

static void test_expand(void)
{
	struct built b = { 0 };
	struct seen s = { 0 };
	struct mp_preload_batch_stats st = { 0 };

	q_add(&b.q, 500, 1, GEN, 3);
	q_add(&b.q, 2000000, 2, GEN, 0);	/* later than the flush: clamped */
	q_add(&b.q, 600, 3, GEN - 1, 5);	/* another generation: not ours */
	q_add(&b.q, 700, 4, GEN, MP_MAX_STACK);
	Q_FREES(&b.q, 3, 1);
	build(&b, MP_PROC_SAMPLING, 64);
	ASSERT_OK(mp_preload_batch__expand(b.rec, b.size, &ops, &s, &st), "expand");
	ASSERT_EQ(s.nalloc, 3, "three samples of this generation");
	ASSERT_EQ(st.allocs, 3, "counted");
	ASSERT_EQ(st.not_ours, 1, "the other generation's is not ours");
	ASSERT_EQ(s.allocs[0].addr, 1, "keyed by id");
	ASSERT_EQ(s.allocs[0].size, 101, "size");
	ASSERT_EQ(s.allocs[0].remaining, 2, "multiplicity, final");
	ASSERT_EQ(s.allocs[0].kind, MP_KIND_MALLOC | MP_KIND_F_PRELOAD, "kind");
	ASSERT_EQ(s.allocs[0].h.type, MP_EV_ALLOC, "an alloc record");
	ASSERT_EQ(s.allocs[0].h.pid, 42, "pid");
	ASSERT_EQ(s.allocs[0].h.tid, 43, "the flushing thread");
	ASSERT_EQ(s.allocs[0].h.profile, 5, "profile");
	ASSERT_EQ(s.allocs[0].h.time_ns, 500, "sampled at");
	ASSERT_EQ(s.allocs[0].nframes, 3, "frames");
	ASSERT_EQ(s.allocs[0].stack[2], 0x401002, "its own frames");
	ASSERT_EQ(s.allocs[1].h.time_ns, 1000000, "never later than the flush");
	ASSERT_EQ(s.allocs[1].nframes, 0, "no frames");
	ASSERT_EQ(s.allocs[2].addr, 4, "after the skipped one");
	ASSERT_EQ(s.allocs[2].nframes, 64, "cut to the profile's callstack size");
	ASSERT_EQ(s.allocs[2].stack[63], 0x404000 + 63, "innermost kept");
	ASSERT_EQ(s.nfree_batches, 1, "one free batch, after the allocs");
	ASSERT_EQ(s.nids, 2, "its ids");
	ASSERT_EQ(s.ids[0], 3, "in order");
	ASSERT_EQ(s.frees_time, 1000000, "at the flush");
	free(b.rec);

	/* not sampling: frees still count, samples do not */
	memset(&s, 0, sizeof(s));
	build(&b, 0, 0);
	ASSERT_OK(mp_preload_batch__expand(b.rec, b.size, &ops, &s, &st), "expand, stopped");
	ASSERT_EQ(s.nalloc, 0, "no sample while not sampling");
	ASSERT_EQ(s.nids, 2, "frees after a stop");
	free(b.rec);

	/* after a stop (or a new rate): the previous generation's samples go to its profile */
	memset(&s, 0, sizeof(s));
	build_prev(&b, 0, 0, GEN - 1, 4, MP_PROC_SAMPLING);
	ASSERT_OK(mp_preload_batch__expand(b.rec, b.size, &ops, &s, &st), "expand, previous");
	ASSERT_EQ(s.nalloc, 1, "the previous generation's sample");
	ASSERT_EQ(s.allocs[0].addr, 3, "that one");
	ASSERT_EQ(s.allocs[0].h.profile, 4, "for the previous profile");
	free(b.rec);
	memset(&s, 0, sizeof(s));
	build_prev(&b, MP_PROC_SAMPLING, 0, GEN - 1, 4, 0);
	ASSERT_OK(mp_preload_batch__expand(b.rec, b.size, &ops, &s, &st), "expand, previous off");
	ASSERT_EQ(s.nalloc, 3, "the current generation's samples only");
	ASSERT_EQ(s.allocs[0].h.profile, 5, "for the current profile");
	free(b.rec);
}

static void test_malformed(void)
{
	struct mp_preload_batch_stats st = { 0 };
	struct built b = { 0 };
	struct seen s = { 0 };
	struct mp_preload_batch_event *h;

	q_add(&b.q, 500, 1, GEN, 4);
	q_add(&b.q, 500, 2, GEN, 4);
	Q_FREES(&b.q, 9);
	build(&b, MP_PROC_SAMPLING, 0);
	/* every truncation of the record: refused or parsed within it, never read past */
	for (size_t len = 0; len < b.size; len++) {
		uint8_t *cut = malloc(len ? len : 1);

		memcpy(cut, b.rec, len);
		mp_preload_batch__expand(cut, len, &ops, &s, &st);
		free(cut);
	}
	ASSERT_TRUE(st.malformed >= b.size - 1, "every truncated record is malformed");
	h = (struct mp_preload_batch_event *)b.rec;

	/* the record is whole but the queue's counts lie */
	memset(&s, 0, sizeof(s));
	((struct memprof_preload_queue *)h->q)->nalloc = 3;	/* one more than it holds */
	ASSERT_EQ(mp_preload_batch__expand(b.rec, b.size, &ops, &s, &st), -EINVAL, "nalloc lies");
	ASSERT_EQ(s.nalloc, 2, "the entries before the bad one go");
	ASSERT_EQ(s.nids, 1, "and the frees");
	((struct memprof_preload_queue *)h->q)->nalloc = 2;

	memset(&s, 0, sizeof(s));
	((struct memprof_preload_queue *)h->q)->bytes += 4096;	/* more than was copied */
	ASSERT_OK(mp_preload_batch__expand(b.rec, b.size, &ops, &s, &st), "the copy's size rules");
	ASSERT_EQ(s.nalloc, 2, "both entries");
	((struct memprof_preload_queue *)h->q)->bytes -= 4096;

	memset(&s, 0, sizeof(s));
	((struct memprof_preload_queued_alloc *)((struct memprof_preload_queue *)h->q)->allocs)
		->nframes = 1000;
	ASSERT_EQ(mp_preload_batch__expand(b.rec, b.size, &ops, &s, &st), -EINVAL, "nframes");
	ASSERT_EQ(s.nalloc, 0, "nothing from a bad first entry");
	((struct memprof_preload_queued_alloc *)((struct memprof_preload_queue *)h->q)->allocs)
		->nframes = -2;
	ASSERT_EQ(mp_preload_batch__expand(b.rec, b.size, &ops, &s, &st), -EINVAL, "negative");

	memset(&s, 0, sizeof(s));
	((struct memprof_preload_queue *)h->q)->nfree = MP_FREE_BATCH_MAX + 1;
	ASSERT_EQ(mp_preload_batch__expand(b.rec, b.size, &ops, &s, &st), -EINVAL, "nfree");
	ASSERT_EQ(s.nalloc + s.nfree_batches, 0, "dropped whole");

	h->size = (uint32_t)(b.size - sizeof(*h) + 1);
	ASSERT_EQ(mp_preload_batch__expand(b.rec, b.size, &ops, &s, &st), -EINVAL,
		  "size beyond the record");
	h->size = 0;
	ASSERT_OK(mp_preload_batch__expand(b.rec, b.size, &ops, &s, &st), "unread queue: empty");
	ASSERT_EQ(s.nalloc + s.nfree_batches, 0, "nothing from it");
	free(b.rec);
}

/* A queue the daemon copied (MP_PL_BATCH_PULLED): frees of its own samples wait for the flush. */
static void test_pulled(void)
{
	struct mp_preload_batch_stats st = { 0 };
	struct mp_preload_batch_event *h;
	struct built b = { 0 };
	struct seen s = { 0 };

	q_add(&b.q, 500, 1, GEN, 2);
	q_add(&b.q, 500, 2, GEN - 3, 2);	/* not ours, but queued all the same */
	Q_FREES(&b.q, 1, 9, 2);
	build(&b, MP_PROC_SAMPLING, 0);
	ASSERT_OK(mp_preload_batch__expand(b.rec, b.size, &ops, &s, &st), "flushed");
	ASSERT_EQ(s.nids, 3, "a flushed queue's frees all go, after its samples");
	memset(&s, 0, sizeof(s));
	h = (struct mp_preload_batch_event *)b.rec;
	h->origin = MP_PL_BATCH_PULLED;
	ASSERT_OK(mp_preload_batch__expand(b.rec, b.size, &ops, &s, &st), "pulled");
	ASSERT_EQ(s.nalloc, 1, "its sample");
	ASSERT_EQ(s.nids, 1, "a pulled queue's frees of its own samples wait");
	ASSERT_EQ(s.ids[0], 9, "the others go");
	memset(&s, 0, sizeof(s));
	b.q.nfree = 2;
	b.q.free_ids[1] = 2;
	free(b.rec);
	build(&b, MP_PROC_SAMPLING, 0);
	((struct mp_preload_batch_event *)b.rec)->origin = MP_PL_BATCH_PULLED;
	ASSERT_OK(mp_preload_batch__expand(b.rec, b.size, &ops, &s, &st), "pulled, own frees only");
	ASSERT_EQ(s.nfree_batches, 0, "no free batch at all");
	free(b.rec);
}

int main(void)
{
	RUN(test_expand);
	RUN(test_pulled);
	RUN(test_malformed);
	return test_exit();
}
