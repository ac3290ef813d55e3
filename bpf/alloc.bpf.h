/* SPDX-License-Identifier: (LGPL-2.1-or-later OR BSD-2-Clause) */
/*
 * The allocator probes' work: the entry half (the sampling decision, nesting, realloc's and
 * mmap's special cases, the self-test and calibration entries, entry_dispatch() by cookie)
 * and the return half (the alloc record with its user stack, the free of a sampled block).
 * Included once, by memprof.bpf.c, after the maps and the helpers it uses: the programs are
 * one BPF object and one skeleton.
 */

/*
 * Entry of an allocator with a return probe. @size: requested bytes; @may_sample: false when
 * the call cannot allocate (realloc(p, 0), calloc overflow, file-backed mmap). Returns the
 * thread's state when this call is now the thread's outermost allocator call, else NULL.
 */
static __always_inline struct tstate *alloc_entry(struct pt_regs *ctx, __u32 kind, __u64 size,
						  bool may_sample, __u64 arg)
{
	struct tstate *st = tstate_get(true);
	__u64 sp = PT_REGS_SP(ctx), remaining = 0;
	struct mp_proc_cfg *cfg;
	__u32 tgid;

	if (!st) {
		stateless_cfg(mp_current_ids() >> 32);
		return NULL;
	}
	tgid = mp_thread_ids(st) >> 32;
	cfg = thread_cfg(st, tgid);
	if (!cfg)
		return NULL;
	hits_count(st, tgid, false);
	if (nested(st, sp) || (mp_session_mode && nested_noret(st, sp, PT_REGS_IP(ctx)))) {
		if (!mp_session_mode) /* sessions: a nested call has no return half */
			st->depth++;
		stat_inc(MP_STAT_NESTED);
		return NULL;
	}
	if (st->depth) /* an outer call whose return we never saw */
		stat_inc(MP_STAT_MISSED_RETURNS);
	st->depth = 1;
	st->outer_sp = sp;
	st->noret_sp = 0;
	st->kind = kind;
	st->size = size;
	st->arg = arg;
	st->old_profile = 0;
	st->sample_profile = 0;
	if (kind == MP_KIND_MMAP && (cfg->flags & MP_PROC_NO_MMAP))
		may_sample = false;
	if (may_sample && (cfg->flags & MP_PROC_SAMPLING) &&
	    sample_block(st, cfg, size, &remaining)) {
		st->sample_profile = cfg->profile;
		st->remaining = remaining;
	}
	return st;
}

static __always_inline int emit_free(__u64 pid_tgid, __u32 profile, __u64 addr, __u32 kind)
{
	struct mp_free_event *e = data_reserve(sizeof(*e));

	if (!e)
		return 0;
	hdr_fill(&e->h, MP_EV_FREE, pid_tgid, profile);
	e->addr = addr;
	e->kind = kind;
	e->_pad = 0;
	bpf_ringbuf_submit(e, data_wake_flags(sizeof(*e)));
	stat_inc(MP_STAT_FREES);
	return 0;
}

/*
 * Remove @addr of process @tgid from the sampled table. Returns the profile it was sampled for
 * (0: not sampled, or an entry of an old image, which is dropped).
 */
static __always_inline __u32 sampled_take(__u32 tgid, __u64 addr, __u32 *kind, __u64 *inc)
{
	struct mp_sampled_key key = { .tgid = tgid, .addr = addr };
	struct mp_sampled_val *v;
	__u32 profile;

	if (!mp_sfilter[MP_SFILTER_SLOT(tgid, addr)])
		return 0; /* never sampled: no entry hashes to the slot */
	v = bpf_map_lookup_elem(&sampled, &key);
	if (!v)
		return 0;
	profile = v->profile;
	*kind = v->kind;
	*inc = v->incarnation;
	if (bpf_map_delete_elem(&sampled, &key))
		return 0; /* a concurrent free of the same block took it */
	sfilter_add(tgid, addr, -1);
	if (*inc != incarnation_get(tgid))
		return 0;
	return profile;
}

static __always_inline void sampled_put(__u32 tgid, __u64 addr, __u32 profile, __u32 kind,
					__u64 inc)
{
	struct mp_sampled_key key = { .tgid = tgid, .addr = addr };
	struct mp_sampled_val v = { .incarnation = inc, .profile = profile, .kind = kind };

	sfilter_add(tgid, addr, 1);
	if (bpf_map_update_elem(&sampled, &key, &v, BPF_ANY)) {
		sfilter_add(tgid, addr, -1);
		stat_inc(MP_STAT_TABLE_DROPS);
	}
}

/*
 * The current image's mm->start_stack (mp_alloc_event.start_stack): direct BTF loads, no helper
 * call per hop (as uretprobe_trampoline() reads the mm).
 */
static __always_inline __u64 image_start_stack(void)
{
	struct mm_struct *mm = bpf_get_current_task_btf()->mm;

	return mm ? mm->start_stack : 0;
}

/* The fixed part of an alloc record: the block, and the frame-pointer walk of the stack. */
static __always_inline void alloc_fill(struct pt_regs *ctx, struct mp_alloc_event *e,
				       const struct tstate *st, const struct mp_proc_cfg *cfg,
				       __u64 pid_tgid, __u64 addr)
{
	__u32 max_frames = cfg->max_frames;
	long n;

	hdr_fill(&e->h, MP_EV_ALLOC, pid_tgid, st->sample_profile);
	e->addr = addr;
	e->size = st->size;
	e->remaining = st->remaining;
	e->kind = st->kind;
	e->start_stack = image_start_stack();
	if (max_frames == 0 || max_frames > MP_MAX_STACK)
		max_frames = MP_MAX_STACK;
	n = bpf_get_stack(ctx, e->stack, max_frames * sizeof(__u64), BPF_F_USER_STACK);
	if (n < 0) {
		stat_inc(MP_STAT_STACK_ERRORS);
		n = 0;
	}
	e->nframes = n / sizeof(__u64);
}

/*
 * User-stack copies (struct mp_ustack), for DWARF unwinding in the daemon. Taken at the
 * allocator's return: the registers are then the caller's (ip = the return address, sp after
 * the ret), its frames are intact above sp, and only blocks that were sampled and allocated pay
 * for a copy, which goes straight into the ring buffer record (nothing to keep per thread
 * between entry and return). bpf_probe_read_user() fails wholly when any byte of its range is
 * unreadable, so the copy is made of whole pages from sp's page upward: every read is a full
 * page at a constant offset of the record (what the verifier can bound), and the copy ends
 * cleanly at the top of the stack mapping. A page that cannot be read below a readable one is
 * a stack page never touched (a large local array only partly written: the kernel has not
 * faulted it in, and this program cannot): its content is zero, which is what a failed read
 * leaves in the record, so the copy goes on above it and ends after the last page read.
 * Ring-buffer reservations need a constant size: the record is reserved in one of five sizes
 * (2, 3, 5, 9 or 17 pages of data, for windows up to 4, 8, 16, 32 and 64 KiB whatever sp's
 * offset in its page).
 */
#define MP_USTACK_RECORD(pages)	\
	(sizeof(struct mp_alloc_event) + sizeof(struct mp_ustack) + (pages) * MP_PAGE_SIZE)
/*
 * A copy is ~20 times the size of a record without one: copies only go while the ring is less
 * than 3/4 full (~300 copies of 16 KiB), so that a burst the daemon cannot keep up with costs
 * stack copies (the events keep their frame-pointer walk; counted as MP_STAT_USTACK_LOST), not
 * samples: the last quarter still holds thousands of records without one. (With half the
 * ring, python3's start-up under a busy test run lost a quarter of its copies.)
 */
#define MP_USTACK_RING_LIMIT	((MP_RINGBUF_SIZE - MP_RINGBUF_RESERVE) / 4 * 3)

static __always_inline int emit_ustack_pages(struct pt_regs *ctx, const struct tstate *st,
					     const struct mp_proc_cfg *cfg, __u64 pid_tgid,
					     __u64 addr, __u32 want, __u32 npages,
					     const __u32 cap)
{
	__u64 sp = PT_REGS_SP(ctx), base = sp & ~(__u64)(MP_PAGE_SIZE - 1), size;
	struct mp_alloc_event *e;
	struct mp_ustack *us;
	__u8 *data;
	__u32 i, got = 0;

	if (bpf_ringbuf_query(&rb, BPF_RB_AVAIL_DATA) + MP_USTACK_RECORD(cap) >
	    MP_USTACK_RING_LIMIT)
		return -1;
	e = bpf_ringbuf_reserve(&rb, MP_USTACK_RECORD(cap), 0);
	if (!e)
		return -1;
	alloc_fill(ctx, e, st, cfg, pid_tgid, addr);
	us = (void *)(e + 1);
	data = (void *)(us + 1);
	for (i = 0; i < cap; i++) {
		if (i >= npages)
			break;
		if (!bpf_probe_read_user(data + i * MP_PAGE_SIZE, MP_PAGE_SIZE,
					 (void *)(base + i * MP_PAGE_SIZE)))
			got = i + 1;
	}
	size = (__u64)got * MP_PAGE_SIZE;
	size = size > sp - base ? size - (sp - base) : 0;
	us->ip = PT_REGS_IP(ctx);
	us->sp = sp;
	us->bp = PT_REGS_FP(ctx);
	us->offset = sp - base;
	us->size = size < want ? size : want;
	bpf_ringbuf_submit(e, data_wake_flags(MP_USTACK_RECORD(cap)));
	return 0;
}

static __always_inline int emit_alloc_ustack(struct pt_regs *ctx, const struct tstate *st,
					     const struct mp_proc_cfg *cfg, __u64 pid_tgid,
					     __u64 addr)
{
	__u32 want = cfg->ustack_size, npages;

	if (want > MP_USTACK_MAX)
		want = MP_USTACK_MAX;
	npages = ((PT_REGS_SP(ctx) & (MP_PAGE_SIZE - 1)) + want + MP_PAGE_SIZE - 1) / MP_PAGE_SIZE;
	if (npages <= 2)
		return emit_ustack_pages(ctx, st, cfg, pid_tgid, addr, want, npages, 2);
	if (npages <= 3)
		return emit_ustack_pages(ctx, st, cfg, pid_tgid, addr, want, npages, 3);
	if (npages <= 5)
		return emit_ustack_pages(ctx, st, cfg, pid_tgid, addr, want, npages, 5);
	if (npages <= 9)
		return emit_ustack_pages(ctx, st, cfg, pid_tgid, addr, want, npages, 9);
	return emit_ustack_pages(ctx, st, cfg, pid_tgid, addr, want, npages, 17);
}

/*
 * Return of a realloc-like call whose old block (st->arg) was sampled: the block is gone
 * (@gone: a free event) or still there (back into the sampled table).
 */
static __always_inline void old_block_settle(struct tstate *st, __u64 pid_tgid, __u32 tgid,
					     bool gone)
{
	if (gone)
		emit_free(pid_tgid, st->old_profile, st->arg, st->kind);
	else
		sampled_put(tgid, st->arg, st->old_profile, st->old_kind, st->old_incarnation);
	st->old_profile = 0;
}

/* Return of an allocator: @ret is its return value. */
static __always_inline int alloc_return(struct pt_regs *ctx, __u64 ret)
{
	struct tstate *st = tstate_get(false);
	struct mp_sampled_key key = {};
	struct mp_sampled_val val = {};
	struct mp_alloc_event *e;
	struct mp_proc_cfg *cfg;
	__u64 addr = ret, pid_tgid;
	__u32 tgid;

	/*
	 * A return with no call in progress is a missed pairing only while this thread's entries
	 * run with the current configuration. Not before the thread's first entry, nor in the
	 * window where a profile's return probes are attached and its entry probes not yet
	 * (attach_sym()), nor once the process is detached (entries ignored, links closing).
	 */
	if (!st)
		return 0;
	pid_tgid = mp_thread_ids(st);	/* the entry half cached them */
	tgid = pid_tgid >> 32;
	hits_count(st, tgid, true);
	if (!st->depth) {
		if (st->cfg_epoch == *(volatile __u64 *)&mp_procs_epoch + 1 &&
		    !(st->cfg.flags & MP_PROC_DETACHED))
			stat_inc(MP_STAT_MISSED_RETURNS);
		return 0;
	}
	if (st->depth > 1) {
		st->depth--;
		return 0;
	}
	st->depth = 0;

	switch (st->kind) {
	case MP_KIND_POSIX_MEMALIGN:
		/* int posix_memalign(void **memptr, ...): the block comes through memptr */
		addr = 0;
		if ((int)ret == 0 && bpf_probe_read_user(&addr, sizeof(addr), (void *)st->arg))
			addr = 0;
		break;
	case MP_KIND_MMAP:
		if (ret == MAP_FAILED_ADDR)
			addr = 0;
		break;
	case MP_KIND_REALLOC:
	case MP_KIND_REALLOCARRAY:
		if (st->old_profile) {
			/* The old block is gone when realloc succeeded, or when it was
			 * realloc(p, 0), which frees p. A failed realloc leaves it alone. */
			old_block_settle(st, pid_tgid, tgid, addr || st->size == 0);
		}
		break;
	case MP_KIND_XALLOCX:
		/* size_t xallocx(ptr, size, extra, flags) returns the block's real size: the
		 * block was resized in place when that is at least size. Then the old block is
		 * collected and a block of size bytes allocated at the same address (as for a
		 * realloc that returns its argument); otherwise nothing changed. */
		addr = st->size && ret >= st->size ? st->arg : 0;
		if (st->old_profile)
			old_block_settle(st, pid_tgid, tgid, addr);
		break;
	default:
		break;
	}
	if (!st->sample_profile || !addr)
		return 0;

	cfg = bpf_map_lookup_elem(&procs, &tgid);
	if (!cfg || cfg->profile != st->sample_profile)
		return 0; /* the process left the profile meanwhile */

	key.tgid = tgid;
	key.addr = addr;
	val.incarnation = incarnation_get(tgid);
	val.profile = st->sample_profile;
	val.kind = st->kind;
	sfilter_add(tgid, addr, 1);
	if (bpf_map_update_elem(&sampled, &key, &val, BPF_ANY)) {
		sfilter_add(tgid, addr, -1);
		stat_inc(MP_STAT_TABLE_DROPS);
		return 0;
	}
	if (cfg->ustack_size) {
		if (!emit_alloc_ustack(ctx, st, cfg, pid_tgid, addr)) {
			stat_inc(MP_STAT_SAMPLED);
			return 0;
		}
		stat_inc(MP_STAT_USTACK_LOST);	/* the record without the copy may fit */
	}
	e = data_reserve(sizeof(*e));
	if (!e) {
		if (!bpf_map_delete_elem(&sampled, &key))
			sfilter_add(tgid, addr, -1);
		return 0;
	}
	alloc_fill(ctx, e, st, cfg, pid_tgid, addr);
	bpf_ringbuf_submit(e, data_wake_flags(sizeof(*e)));
	stat_inc(MP_STAT_SAMPLED);
	return 0;
}

/* free, operator delete, munmap: entry probe only. */
static __always_inline int free_entry(struct pt_regs *ctx, __u32 kind, __u64 addr)
{
	struct tstate *st = tstate_get(true);
	__u32 tgid, profile, akind = 0;
	__u64 pid_tgid, inc = 0;

	if (st) {
		pid_tgid = mp_thread_ids(st);
		tgid = pid_tgid >> 32;
		if (!thread_cfg(st, tgid))
			return 0;
		hits_count(st, tgid, false);
	} else {	/* no nesting state either: as a free outside any allocator call */
		pid_tgid = mp_current_ids();
		tgid = pid_tgid >> 32;
		if (!stateless_cfg(tgid))
			return 0;
	}
	if (!addr)
		return 0; /* free(NULL) */
	/* Sessions need no nested_noret() here: a free nested in an allocator call whose return
	 * half was skipped (realloc of an unsampled block, operator delete -> free) cannot find a
	 * sampled block the outer call did not take first. */
	if (st && nested(st, PT_REGS_SP(ctx))) {
		stat_inc(MP_STAT_NESTED);
		return 0;
	}
	profile = sampled_take(tgid, addr, &akind, &inc);
	if (profile)
		emit_free(pid_tgid, profile, addr, kind);
	return 0;
}

static __always_inline int emit_proc(__u32 type, __u32 tgid, __u32 tid, __u32 profile,
				     __u32 other, __u32 code)
{
	struct mp_proc_event *e = bpf_ringbuf_reserve(&rb, sizeof(*e), 0);

	if (!e) {
		stat_inc(MP_STAT_RINGBUF_DROPS);
		return 0;
	}
	hdr_fill(&e->h, type, ((__u64)tgid << 32) | tid, profile);
	e->other_pid = other;
	e->exit_code = code;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
	return 0;
}

static __always_inline struct tstate *realloc_entry(struct pt_regs *ctx, __u32 kind, __u64 old,
						    __u64 size, bool ovf)
{
	__u32 tgid, profile = 0, okind = 0;
	struct tstate *st;
	__u64 inc = 0;

	/* realloc(p, 0) frees p and allocates nothing */
	st = alloc_entry(ctx, kind, size, !ovf && !(old && size == 0), old);
	if (!st && old && !tstate_get(false)) {
		/* No thread state (stateless_cfg() counted the call): no return half to settle
		 * the old block either, so a sampled one ends here, as if freed. */
		__u64 pid_tgid = mp_current_ids();

		profile = sampled_take(pid_tgid >> 32, old, &okind, &inc);
		if (profile)
			emit_free(pid_tgid, profile, old, kind);
		return NULL;
	}
	if (!st || !old)
		return st;
	tgid = mp_thread_ids(st) >> 32;
	/* Take the old block out of the table now, so that a concurrent malloc returning the same
	 * address after realloc released it cannot be confused with it; restored on failure. */
	profile = sampled_take(tgid, old, &okind, &inc);
	st->old_profile = profile;
	st->old_kind = okind;
	st->old_incarnation = inc;
	return st;
}

/* ld.so's rendezvous: see MP_SHAPE_DLSTATE. */
static __always_inline int dlstate_entry(void)
{
	__u64 pid_tgid = mp_current_ids();
	__u32 tgid = pid_tgid >> 32;
	struct mp_proc_cfg *cfg = bpf_map_lookup_elem(&procs, &tgid);

	if (!cfg)
		return 0;
	return emit_proc(MP_EV_MAP, tgid, (__u32)pid_tgid, cfg->profile, 0, 0);
}

/*
 * Every entry probe. The attach cookie says which function this is: MP_COOKIE(shape, kind), the
 * shape telling where the arguments are (bpf/memprof.h).
 */
/* The loader's probes on itself (MP_SHAPE_SELFTEST, MP_SHAPE_CALIBRATE). Returns the count. */
static __always_inline __u64 selftest_hit(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&selftest, &idx);

	return v ? __sync_fetch_and_add(v, 1) + 1 : 0;
}

/* CALIBRATE entry: about the work of an unsampled allocator call. */
static __always_inline int calibrate_entry(void)
{
	__u32 tgid = mp_current_ids() >> 32;
	struct tstate *st;

	bpf_map_lookup_elem(&procs, &tgid);
	st = tstate_get(true);
	if (st)
		st->calib++;
	selftest_hit(MP_SELFTEST_CALIB);
	return 0;
}

/*
 * Every entry probe. The attach cookie says which function this is: MP_COOKIE(shape, kind), the
 * shape telling where the arguments are (bpf/memprof.h). Returns the thread's state when the
 * call is now the thread's outermost allocator call (its return half has work), else NULL.
 */
static __always_inline struct tstate *entry_dispatch(struct pt_regs *ctx, __u64 cookie)
{
	__u32 kind = MP_COOKIE_KIND(cookie);
	__u64 a1 = PT_REGS_PARM1(ctx), a2 = PT_REGS_PARM2(ctx), a3 = PT_REGS_PARM3(ctx);

	switch (MP_COOKIE_SHAPE(cookie)) {
	case MP_SHAPE_SIZE1:	/* malloc(size), operator new(size, ...), valloc */
		return alloc_entry(ctx, kind, a1, true, 0);
	case MP_SHAPE_PAGES:	/* pvalloc(size): rounded up to whole pages, one at least */
		if (a1 <= ~0ull - MP_PAGE_SIZE)
			a1 = a1 ? (a1 + MP_PAGE_SIZE - 1) & ~(__u64)(MP_PAGE_SIZE - 1) :
				  MP_PAGE_SIZE;
		return alloc_entry(ctx, kind, a1, true, 0);
	case MP_SHAPE_SIZE2:	/* memalign(align, size), aligned_alloc(align, size) */
		return alloc_entry(ctx, kind, a2, true, 0);
	case MP_SHAPE_CALLOC: {	/* calloc(n, size): fails, allocating nothing, on overflow */
		bool ovf = mul_overflows(a1, a2);

		return alloc_entry(ctx, kind, ovf ? 0 : a1 * a2, !ovf, 0);
	}
	case MP_SHAPE_REALLOC:	/* realloc(ptr, size) */
		return realloc_entry(ctx, kind, a1, a2, false);
	case MP_SHAPE_REALLOCARRAY: {	/* reallocarray(ptr, n, size) */
		bool ovf = mul_overflows(a2, a3);

		return realloc_entry(ctx, kind, a1, ovf ? 0 : a2 * a3, ovf);
	}
	case MP_SHAPE_POSIX_MEMALIGN:	/* posix_memalign(memptr, align, size) */
		return alloc_entry(ctx, kind, a3, true, a1);
	case MP_SHAPE_MMAP:
		/* mmap(addr, len, prot, flags, ...): anonymous ones only, and not PROT_NONE ones:
		 * those reserve address space (Go's arenas, glibc's thread heaps), no memory */
		return alloc_entry(ctx, kind, a2, (PT_REGS_PARM4(ctx) & MAP_ANONYMOUS_FLAG) &&
				   a3 != MP_PROT_NONE && !own_call(ctx, cookie), 0);
	case MP_SHAPE_FREE:	/* free(ptr), operator delete(ptr, ...), munmap(addr, len) */
		free_entry(ctx, kind, a1);
		return NULL;
	case MP_SHAPE_DLSTATE:
		dlstate_entry();
		return NULL;
	case MP_SHAPE_SELFTEST:
		selftest_hit(MP_SELFTEST_ENTRIES);
		return NULL;
	case MP_SHAPE_CALIBRATE:
		calibrate_entry();
		return NULL;
	case MP_SHAPE_XALLOCX:	/* xallocx(ptr, size, extra, flags): see alloc_return() */
		return realloc_entry(ctx, kind, a1, a2, false);
	case MP_SHAPE_HEAP_CALLOC: {	/* mi_heap_calloc(heap, n, size) */
		bool ovf = mul_overflows(a2, a3);

		return alloc_entry(ctx, kind, ovf ? 0 : a2 * a3, !ovf, 0);
	}
	case MP_SHAPE_HEAP_REALLOC:	/* mi_heap_realloc(heap, ptr, size) */
		return realloc_entry(ctx, kind, a2, a3, false);
	default:
		return NULL;
	}
}
