/* SPDX-License-Identifier: (LGPL-2.1-or-later OR BSD-2-Clause) */
/*
 * ---- libmemprof-preload: the cooperative fast path ----
 *
 * A process that maps libmemprof-preload.so samples in-process and reaches a USDT probe only
 * for a sampled block (memprof:alloc, its multiplicity already final) and to report frees of
 * sampled blocks by id, mostly in batches (with the next memprof:alloc, or memprof:free_batch;
 * memprof:free for one that could not wait); <memprof/preload.h> is the ABI. The loader
 * attaches these three programs instead of allocator uprobes and keeps the process'
 * "pltargets" entry. They emit alloc records marked MP_KIND_F_PRELOAD, keyed by block id, and
 * MP_EV_FREE_BATCH records; the library's own table filters frees, so no "sampled" entry is
 * kept here. memprof:alloc passes one pointer: its record is read with one
 * bpf_probe_read_user() (each USDT argument costs a spec lookup and a register read, ~50 ns),
 * and so are the frames the library walked; only a record the library could not walk takes
 * bpf_get_stack() (a fault-tolerant copy per frame, ~700 ns) and the frame-skip loop.
 *
 * Included once, by memprof.bpf.c, after the maps and the helpers it uses: the programs are
 * one BPF object and one skeleton.
 */
/* Attached by the loader as plain uprobes at the notes' sites, with their semaphores
 * (daemon/probe/preload_attach.c, pl_attach_probe()): no libbpf USDT spec is involved. */

#define MP_PL_MAX_SKIP		16	/* library frames dropped from the top of a stack */
#define MP_PL_HEAD_SIZE		offsetof(struct mp_alloc_event, stack)
/* Records wake the consumer as the uprobe programs' do: data_wake_flags(). */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MP_MAX_PROCS);
	__type(key, __u32);
	__type(value, struct mp_preload_target);
} pltargets SEC(".maps");

/*
 * The emitters are static noinline, one per record size (the verifier needs a constant size,
 * and inlined copies could be merged by the compiler into one path whose size is not).
 */

/* Emit @count ids read from the target's memory at @uids: one record of room for CAP ids. */
#define PL_EMIT_FREES(CAP)                                                                     \
static __noinline int pl_emit_frees_##CAP(__u64 pid_tgid, __u32 profile, __u64 uids,          \
					  __u64 count)                                         \
{                                                                                              \
	__u64 size = offsetof(struct mp_free_batch_event, ids) + 8 * (CAP);                    \
	struct mp_free_batch_event *e = data_reserve(size);                                    \
                                                                                               \
	if (!e)                                                                                \
		return 0;                                                                      \
	asm volatile("" : "+r"(count));	/* keep the clamp: the verifier needs it */  \
	if (count > (CAP))                                                                     \
		count = (CAP);                                                                 \
	hdr_fill(&e->h, MP_EV_FREE_BATCH, pid_tgid, profile);                                  \
	e->kind = MP_KIND_FREE | MP_KIND_F_PRELOAD;                                            \
	if (bpf_probe_read_user(e->ids, 8 * count, (void *)uids)) {                            \
		stat_inc(MP_STAT_STACK_ERRORS);                                                \
		count = 0;	/* the daemon ignores an empty batch */                        \
	}                                                                                      \
	e->count = count;                                                                      \
	bpf_ringbuf_submit(e, data_wake_flags(size));                                          \
	stat_add(MP_STAT_FREES, count);                                                        \
	return 0;                                                                              \
}
PL_EMIT_FREES(4)
PL_EMIT_FREES(64)

static __always_inline void pl_frees(__u64 pid_tgid, __u32 profile, __u64 uids, __u32 count)
{
	if (count == 0 || count > MP_FREE_BATCH_MAX)
		return;
	if (count <= 4)
		pl_emit_frees_4(pid_tgid, profile, uids, count);
	else
		pl_emit_frees_64(pid_tgid, profile, uids, count);
}

/* What the alloc emitters need. */
struct pl_alloc {
	struct mp_preload_alloc_head r;
	__u64 pid_tgid;
	__u64 frames;		/* its frames[] in the target */
	__u64 lo, hi;		/* the library's mapping */
	__u32 profile;
	__u32 max_frames;
};

/* An alloc record with the @nfr frames the library walked, room for CAP frames. */
#define PL_EMIT_WALKED(CAP)                                                                    \
static __noinline int pl_emit_walked_##CAP(struct pl_alloc *a, __u64 nfr)                     \
{                                                                                              \
	__u64 size = MP_PL_HEAD_SIZE + 8 * (CAP);                                              \
	struct mp_alloc_event *e = data_reserve(size);                                         \
                                                                                               \
	if (!e)                                                                                \
		return 0;                                                                      \
	asm volatile("" : "+r"(nfr));	/* keep the clamp: the verifier needs it */      \
	if (nfr > (CAP))                                                                       \
		nfr = (CAP);                                                                   \
	hdr_fill(&e->h, MP_EV_ALLOC, a->pid_tgid, a->profile);                                 \
	e->addr = a->r.id;	/* preload records are keyed by id: see MP_KIND_F_PRELOAD */  \
	e->size = a->r.size;                                                                   \
	e->remaining = a->r.nsamples;	/* final: see MP_KIND_F_PRELOAD */                     \
	e->kind = (a->r.kind & MP_KIND_MASK) | MP_KIND_F_PRELOAD;                              \
	e->start_stack = image_start_stack();                                                  \
	if (bpf_probe_read_user(e->stack, 8 * nfr, (void *)a->frames)) {                       \
		stat_inc(MP_STAT_STACK_ERRORS);                                                \
		nfr = 0;                                                                       \
	}                                                                                      \
	e->nframes = nfr;                                                                      \
	bpf_ringbuf_submit(e, data_wake_flags(size));                                          \
	stat_inc(MP_STAT_SAMPLED);                                                             \
	return 0;                                                                              \
}
PL_EMIT_WALKED(16)
PL_EMIT_WALKED(32)
PL_EMIT_WALKED(127)
_Static_assert(MP_MAX_STACK == 127, "PL_EMIT_WALKED(MP_MAX_STACK)");

/* The part of @a that comes from the process' configuration and its preload target. */
static __always_inline void pl_alloc_target(struct pl_alloc *a, __u64 pid_tgid,
					    const struct mp_proc_cfg *cfg,
					    const struct mp_preload_target *pt)
{
	a->pid_tgid = pid_tgid;
	a->lo = pt->lo;
	a->hi = pt->hi;
	a->profile = cfg->profile;
	a->max_frames = cfg->max_frames;
	if (a->max_frames == 0 || a->max_frames > MP_MAX_STACK)
		a->max_frames = MP_MAX_STACK;
}

/* An alloc record with the frames the library walked (a->r.nframes >= 0). */
static __always_inline int pl_emit_walked(struct pl_alloc *a)
{
	__u32 nfr = (__u32)a->r.nframes < a->max_frames ? (__u32)a->r.nframes : a->max_frames;

	if (nfr <= 16)
		return pl_emit_walked_16(a, nfr);
	if (nfr <= 32)
		return pl_emit_walked_32(a, nfr);
	return pl_emit_walked_127(a, nfr);
}

/* An alloc record whose stack is walked here, from the probe (the library could not). */
static __noinline int pl_emit_unwalked(void *ctx, struct pl_alloc *a)
{
	struct mp_alloc_event *e = data_reserve(sizeof(*e));
	struct mp_preload_alloc_head *r = &a->r;
	__u32 skip, nfr;
	long n;

	if (!e)
		return 0;
	hdr_fill(&e->h, MP_EV_ALLOC, a->pid_tgid, a->profile);
	e->addr = r->id;
	e->size = r->size;
	e->remaining = r->nsamples;
	e->kind = (r->kind & MP_KIND_MASK) | MP_KIND_F_PRELOAD;
	e->start_stack = image_start_stack();
	n = bpf_get_stack(ctx, e->stack, sizeof(e->stack), BPF_F_USER_STACK);
	if (n < 0) {
		stat_inc(MP_STAT_STACK_ERRORS);
		n = 0;
	}
	nfr = n / sizeof(__u64);
	/* The stack starts at the probe site, inside the library: drop its frames by walking
	 * again with them skipped (this path is rare: the library walks the stack itself when it
	 * can), which the verifier checks in a moment where a copy loop over MP_MAX_STACK frames
	 * took most of the program's load time. */
	for (skip = 0; skip < MP_PL_MAX_SKIP && skip < nfr; skip++)
		if (e->stack[skip] < a->lo || e->stack[skip] >= a->hi)
			break;
	if (skip) {
		n = bpf_get_stack(ctx, e->stack, sizeof(e->stack),
				  BPF_F_USER_STACK | (skip & BPF_F_SKIP_FIELD_MASK));
		nfr = n < 0 ? 0 : n / sizeof(__u64);
	}
	if (nfr > a->max_frames)
		nfr = a->max_frames;
	e->nframes = nfr;
	bpf_ringbuf_submit(e, data_wake_flags(sizeof(*e)));
	stat_inc(MP_STAT_SAMPLED);
	return 0;
}

/*
 * The calling process' configuration, or NULL when it is not profiled (a foreign call,
 * counted); *@pt: its preload target entry, NULL when the loader keeps none.
 */
static __always_inline struct mp_proc_cfg *pl_target(__u64 pid_tgid, struct mp_preload_target **pt)
{
	__u32 tgid = pid_tgid >> 32;
	struct mp_proc_cfg *cfg = bpf_map_lookup_elem(&procs, &tgid);

	if (!cfg) {
		stat_inc(MP_STAT_FOREIGN_CALLS);
		return NULL;
	}
	*pt = bpf_map_lookup_elem(&pltargets, &tgid);
	return cfg;
}

/*
 * The probes' arguments are read from the registers the library pins them to on x86-64
 * (<memprof/preload.h>; tests/unit/preload-usdt-notes.sh checks the notes agree), not
 * through bpf_usdt_arg(): a spec lookup and a register read for each, ~50 ns.
 */
SEC("usdt")
int mp_usdt_alloc(struct pt_regs *ctx)
{
	__u64 rec = PT_REGS_PARM1(ctx);
	__u64 pid_tgid = mp_current_ids();
	struct mp_preload_target *pt;
	struct mp_proc_cfg *cfg = pl_target(pid_tgid, &pt);
	struct pl_alloc a;

	if (!cfg || !pt || bpf_probe_read_user(&a.r, sizeof(a.r), (void *)rec))
		return 0;
	/* The frees that rode along happened before this alloc, whatever becomes of it. */
	pl_frees(pid_tgid, cfg->profile, rec + MP_PL_REC_FREE_IDS, a.r.nfree);
	if (!a.r.addr || !a.r.nsamples || !a.r.id)
		return 0;
	pl_alloc_target(&a, pid_tgid, cfg, pt);
	/* the profile of the generation it was drawn under (struct mp_preload_target) */
	if (a.r.generation == pt->gen && (cfg->flags & MP_PROC_SAMPLING))
		;
	else if (a.r.generation && a.r.generation == pt->prev_gen &&
		 (pt->prev_flags & MP_PROC_SAMPLING))
		a.profile = pt->prev_profile;
	else
		return 0;
	a.frames = rec + MP_PL_REC_FRAMES;
	if (a.r.nframes < 0)
		return pl_emit_unwalked(ctx, &a);
	return pl_emit_walked(&a);
}

/* Frees are reported after a stop too, as in uprobe mode. */
static __always_inline int pl_free_common(__u64 uids, __u32 count)
{
	__u64 pid_tgid = mp_current_ids();
	struct mp_preload_target *pt;
	struct mp_proc_cfg *cfg = pl_target(pid_tgid, &pt);

	if (cfg && pt)
		pl_frees(pid_tgid, cfg->profile, uids, count);
	return 0;
}

/* One free that could not wait for a batch: its id is the first argument. */
SEC("usdt")
int mp_usdt_free(struct pt_regs *ctx)
{
	__u64 id = PT_REGS_PARM1(ctx);
	__u64 pid_tgid = mp_current_ids();
	__u64 size = offsetof(struct mp_free_batch_event, ids) + 8 * 4;
	struct mp_preload_target *pt;
	struct mp_proc_cfg *cfg;
	struct mp_free_batch_event *e;

	if (!id)
		return 0;
	cfg = pl_target(pid_tgid, &pt);
	if (!cfg || !pt)
		return 0;
	e = data_reserve(size);
	if (!e)
		return 0;
	hdr_fill(&e->h, MP_EV_FREE_BATCH, pid_tgid, cfg->profile);
	e->kind = MP_KIND_FREE | MP_KIND_F_PRELOAD;
	e->count = 1;
	e->ids[0] = id;
	bpf_ringbuf_submit(e, data_wake_flags(size));
	stat_inc(MP_STAT_FREES);
	return 0;
}

SEC("usdt")
int mp_usdt_free_batch(struct pt_regs *ctx)
{
	return pl_free_common(PT_REGS_PARM1(ctx), (__u32)PT_REGS_PARM2(ctx));
}

/*
 * Deferred mode (MEMPROF_BATCH): memprof:flush passes the library's queue, struct
 * memprof_preload_queue: up to MP_PL_QUEUE_MAX walked samples packed at their length, each
 * stamped with the CLOCK_MONOTONIC time it was sampled at, then the queued frees, which may
 * name those samples. The queue goes out as it is, in one record made with one read
 * (MP_EV_PRELOAD_BATCH): a record per sample cost ~300 ns each in ring-buffer reservations and
 * commits whose cache lines the consumer on another CPU keeps taking back, several times the
 * trap's share of a sample. The daemon parses and checks it: nothing here trusts its contents
 * beyond the sizes that bound the copy.
 */
struct pl_queue {
	__u64 pid_tgid;
	__u64 q;		/* the queue in the target */
	__u32 size;		/* bytes to copy: MP_PL_QUEUE_ALLOCS + its "bytes" */
	__u32 profile, gen, max_frames, flags;
	__u32 prev_gen, prev_profile, prev_flags;
};

/* One MP_EV_PRELOAD_BATCH record of room for CAP bytes of queue. */
#define PL_EMIT_QUEUE(CAP)                                                                     \
static __noinline int pl_emit_queue_##CAP(struct pl_queue *a)                                 \
{                                                                                              \
	__u64 size = sizeof(struct mp_preload_batch_event) + (CAP), n = a->size;               \
	struct mp_preload_batch_event *e = data_reserve(size);                                 \
                                                                                               \
	if (!e)                                                                                \
		return 0;                                                                      \
	asm volatile("" : "+r"(n));	/* keep the clamp: the verifier needs it */           \
	if (n > (CAP))                                                                         \
		n = (CAP);                                                                     \
	hdr_fill(&e->h, MP_EV_PRELOAD_BATCH, a->pid_tgid, a->profile);                         \
	e->gen = a->gen;                                                                       \
	e->max_frames = a->max_frames;                                                         \
	e->flags = a->flags;                                                                   \
	e->prev_gen = a->prev_gen;                                                             \
	e->prev_profile = a->prev_profile;                                                     \
	e->prev_flags = a->prev_flags;                                                         \
	e->origin = MP_PL_BATCH_FLUSHED;                                                       \
	if (bpf_probe_read_user(e->q, n, (void *)a->q)) {                                      \
		stat_inc(MP_STAT_STACK_ERRORS);                                                \
		n = 0;	/* the daemon ignores an empty queue */                                \
	}                                                                                      \
	e->size = n;                                                                           \
	bpf_ringbuf_submit(e, data_wake_flags(size));                                          \
	return 0;                                                                              \
}
PL_EMIT_QUEUE(2048)
PL_EMIT_QUEUE(4096)
PL_EMIT_QUEUE(8192)
PL_EMIT_QUEUE(MP_PL_QUEUE_SIZE)

SEC("usdt")
int mp_usdt_flush(struct pt_regs *ctx)
{
	__u64 q = PT_REGS_PARM1(ctx);
	__u64 pid_tgid = mp_current_ids();
	struct mp_preload_queue_head qh;
	struct mp_preload_target *pt;
	struct mp_proc_cfg *cfg = pl_target(pid_tgid, &pt);
	struct pl_queue a;

	if (!cfg || !pt || bpf_probe_read_user(&qh, sizeof(qh), (void *)q))
		return 0;
	if (qh.nfree > MP_FREE_BATCH_MAX || qh.nalloc > MP_PL_QUEUE_MAX ||
	    qh.bytes > MP_PL_QUEUE_SIZE - MP_PL_QUEUE_ALLOCS || (!qh.nfree && !qh.nalloc)) {
		stat_inc(MP_STAT_STACK_ERRORS);
		return 0;
	}
	a.pid_tgid = pid_tgid;
	a.q = q;
	a.size = MP_PL_QUEUE_ALLOCS + qh.bytes;
	a.profile = cfg->profile;
	a.gen = pt->gen;
	a.prev_gen = pt->prev_gen;
	a.prev_profile = pt->prev_profile;
	a.prev_flags = pt->prev_flags;
	a.max_frames = cfg->max_frames;
	if (a.max_frames == 0 || a.max_frames > MP_MAX_STACK)
		a.max_frames = MP_MAX_STACK;
	a.flags = cfg->flags;
	/* counted as sent; the daemon counts what it drops (generation, malformed) */
	stat_add(MP_STAT_SAMPLED, qh.nalloc);
	stat_add(MP_STAT_FREES, qh.nfree);
	if (a.size <= 2048)
		return pl_emit_queue_2048(&a);
	if (a.size <= 4096)
		return pl_emit_queue_4096(&a);
	if (a.size <= 8192)
		return pl_emit_queue_8192(&a);
	return pl_emit_queue_MP_PL_QUEUE_SIZE(&a);
}
