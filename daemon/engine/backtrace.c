// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The backtrace of a sampled block: the frame-pointer walk BPF made or the DWARF unwinding of its
 * stack copy, as the profile's unwind mode says, and its location codes in the trace.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "daemon/stacks/unwind.h"
#include "daemon/engine/engine_int.h"

/* Define the location code @addr (a return address) in @pr's trace unless it is. */
int define_location(struct mp_proc *pr, uint64_t addr)
{
	struct mp_engine *e = pr->p->e;
	struct memprof_location fallback;
	struct mp_frame fr;
	char name[32];
	int r = -ENOENT;

	if (memprof_writer__has_location(pr->w, addr))
		return 0;
	if (e->sym)
		r = mp_symbolizer__resolve(e->sym, pr->pid, addr, 1, &fr);
	if (r == 0 && fr.nlocs > 0) {
		r = memprof_writer__location(pr->w, addr, fr.locs, fr.nlocs > 255 ? 255 : fr.nlocs);
		if (r == 0)
			return 0;
	}
	snprintf(name, sizeof(name), "0x%" PRIx64, addr);
	fallback = (struct memprof_location){ .filename = "??", .defname = name };
	return memprof_writer__location(pr->w, addr, &fallback, 1);
}

/*
 * AUTO's rule (enum mp_unwind): the frame-pointer walk @fp[0..n) is trustworthy when every
 * frame it read its caller from (all but the outermost) is in code that keeps frame pointers,
 * and the outermost is in a mapped object. A walk through code without them reads whatever
 * rbp holds there: it ends early or goes on with garbage.
 */
/*
 * Each answer costs a mapping and an object lookup, for every frame of every event: @pr remembers
 * the positive ones (a return address in code that keeps frame pointers, an outermost frame in a
 * mapped object), which hold until the process execs; negative ones (code without them, an
 * address not mapped yet) are asked again.
 */
static bool fp_trustworthy(struct mp_engine *e, struct mp_proc *pr, const uint64_t *fp,
			   unsigned int n)
{
	struct mp_mapping_info mi;

	if (!n)
		return false;
	for (unsigned int i = 0; i < n; i++) {
		bool inner = i + 1 < n || n == 1;
		uint64_t key = fp[i] << 1 | inner;	/* fp[i] < 2^62 */
		unsigned int slot = (unsigned int)((key * 0x9e3779b97f4a7c15ull) >> 56);

		if (!fp[i] || fp[i] >= (1ull << 62))
			return false;
		if (pr->live->fp_ok[slot] == key)
			continue;
		if (inner) {
			if (mp_unwinder__frame_pointers(e->unw, pr->pid, fp[i]) <= 0)
				return false;
		} else if (mp_symbolizer__mapping(e->sym, pr->pid, fp[i], &mi)) {
			return false;
		}
		pr->live->fp_ok[slot] = key;
	}
	return true;
}

/*
 * AUTO copies the stack (16 KiB by default) of every sampled block in case the frame-pointer
 * walk is not trustworthy, and that copy is half of what a sample costs the allocating thread once
 * wakeups are batched (bench: 4.7 against 2.4 us per sampled block on allocbench). A process
 * whose walks are all trustworthy does not need it: after MP_COPY_OFF_AFTER << copy_backoff
 * trustworthy walks in a row, BPF stops copying for it (its mp_proc_cfg.ustack_size = 0); the
 * first walk that is not (which keeps its frame-pointer stack: an unwind fallback) turns the
 * copies back on and doubles the streak needed next time, so a process that needs DWARF now and
 * then loses it on a handful of samples in all.
 */
#define MP_COPY_OFF_AFTER	64u
#define MP_COPY_BACKOFF_MAX	10

static void copy_adapt(struct mp_engine *e, struct mp_proc *pr, bool fp_ok)
{
	struct mp_proc_cfg cfg;

	if (fp_ok) {
		if (pr->copy_off || ++pr->fp_streak < (MP_COPY_OFF_AFTER << pr->copy_backoff))
			return;
	} else {
		pr->fp_streak = 0;
		if (!pr->copy_off)
			return;
		if (pr->copy_backoff < MP_COPY_BACKOFF_MAX)
			pr->copy_backoff++;
	}
	if (pr->exited || !pr->in_table || pr->detached_reason ||
	    SRC(e, proc_get, pr->pid, &cfg) || cfg.profile != pr->p->id)
		return;
	cfg.ustack_size = fp_ok ? 0 : (uint32_t)pr->p->opts.stack_copy_size;
	if (SRC(e, proc_set, pr->pid, &cfg) == 0)
		pr->copy_off = fp_ok;
}

/*
 * The backtrace of @ev, innermost first, in *@out: the frame-pointer walk BPF made, or the DWARF
 * unwinding of its stack copy @us (NULL if none) into @buf, as the profile's unwind mode says.
 * Returns its length, at most callstack_size, and counts cut stacks.
 */
unsigned int stack_select(struct mp_engine *e, struct mp_proc *pr,
				 const struct mp_alloc_event *ev, const struct mp_ustack *us,
				 uint64_t *buf, const uint64_t **out)
{
	const struct mp_profile *p = pr->p;
	unsigned int max = p->opts.callstack_size, n = 0;
	unsigned int nfp = ev->nframes < MP_MAX_STACK ? ev->nframes : MP_MAX_STACK;
	bool dwarf = false;
	uint64_t t0;
	int r;

	*out = (const uint64_t *)ev->stack;
	if (us)
		e->sst.with_copy++;
	if (p->opts.unwind != MP_UNWIND_FP && p->opts.stack_copy_size > 0 && e->unw) {
		if (!us && p->opts.unwind == MP_UNWIND_AUTO && pr->copy_off) {
			bool ok = fp_trustworthy(e, pr, *out, nfp);

			if (!ok)
				pr->unwind_fallbacks++;	/* no copy asked: see copy_adapt() */
			copy_adapt(e, pr, ok);
		} else if (!us) {
			pr->unwind_fallbacks++;	/* the copy was lost (ring space) */
		} else if (p->opts.unwind == MP_UNWIND_DWARF) {
			dwarf = true;
		} else {
			dwarf = !fp_trustworthy(e, pr, *out, nfp);
			copy_adapt(e, pr, !dwarf);
		}
		if (dwarf) {
			struct mp_regs regs = { .ip = us->ip, .sp = us->sp, .bp = us->bp };
			const uint8_t *stack = (const uint8_t *)(us + 1) + us->offset;
			struct mp_unwinder_stats ust;

			t0 = now_mono_ns();
			/* one frame more than kept, to know whether it was cut */
			r = mp_unwinder__unwind(e->unw, pr->pid, &regs, stack, us->size, buf,
						max < MP_MAX_STACK ? max + 1 : max, &n);
			if (r == 0 && n > 0) {
				*out = buf;
				nfp = n;
				pr->dwarf_stacks++;
				e->sst.dwarf_stacks++;
				mp_unwinder__stats(e->unw, &ust);
				if (ust.last_out_of_window) {
					pr->window_cut++;
					e->sst.window_cut++;
				}
			} else {
				pr->unwind_fallbacks++;
				dwarf = false;
			}
			e->sst.unwind_ns += now_mono_ns() - t0;
		}
	}
	if (!dwarf)
		e->sst.fp_stacks++;
	/* more than kept, or BPF's limit reached (then it cannot tell) */
	if (nfp > max || nfp == MP_MAX_STACK) {
		pr->truncated++;
		nfp = nfp > max ? max : nfp;
	}
	return nfp;
}
