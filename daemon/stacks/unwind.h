/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * DWARF unwinding of a copied user stack, for code built without frame pointers (Debian's
 * python3, most distribution binaries): BPF copies the registers and a window of the stack at
 * the probe; this walks it with libdwfl's unwinder (CFI from .eh_frame, else .debug_frame, else
 * frame pointers via the x86_64 backend) over the objects of the symbolizer's snapshot of the
 * process, so it also works after the process has exited.
 *
 * Owner: the stacks/symbols component. The engine is its user.
 */
#ifndef MEMPROFD_UNWIND_H
#define MEMPROFD_UNWIND_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/stacks/symbolize.h"

/* Registers at the probe (struct pt_regs: ip, sp, bp). */
struct mp_regs {
	uint64_t ip;
	uint64_t sp;
	uint64_t bp;
};

struct mp_unwinder;

struct mp_unwinder_opts {
	size_t sz;			/* sizeof(struct mp_unwinder_opts) */
	unsigned int max_sessions;	/* processes with a live libdwfl session; 0 = 64 (LRU) */
};

/* Uses (does not own) @s, which must outlive the unwinder. */
struct mp_unwinder *mp_unwinder__new(struct mp_symbolizer *s, const struct mp_unwinder_opts *opts);
void mp_unwinder__free(struct mp_unwinder *u);	/* NULL-safe */

/*
 * Unwind the stack of a thread of @pid whose registers were @regs and whose stack from
 * @regs->sp upward was copied to @stack (@stack_len bytes). Stores up to @max frames, innermost
 * first, in @frames: frames[0] = @regs->ip (an exact instruction pointer), the others return
 * addresses (resolve them with is_return_addr set), and their number in *@nframes.
 * Unwinding stops at the outermost frame, at @max, or where the window or CFI ends; what was
 * found until then is returned. Returns 0, or -errno (-ESRCH: @pid gone and never seen,
 * -EINVAL: bad arguments).
 */
int mp_unwinder__unwind(struct mp_unwinder *u, pid_t pid, const struct mp_regs *regs,
			const void *stack, size_t stack_len, uint64_t *frames, unsigned int max,
			unsigned int *nframes);

/*
 * Does the code at @addr in @pid keep frame pointers, i.e. is a frame-pointer walk through a
 * frame of that code trustworthy? Judged once per object (by build-id, else path) from its
 * CFI: at 256 addresses spread over its executable sections, is the CFA defined from rbp (code
 * built with frame pointers: everywhere but the first and last instructions of a function) or
 * from rsp (without: everywhere but functions that realign the stack or use alloca)? The
 * object keeps frame pointers when at least half of the covered addresses use rbp.
 * Returns 1 (keeps them; also for code without CFI, which DWARF unwinding walks with frame
 * pointers too, and anonymous or unopenable code), 0 (does not; also for an address in no
 * executable mapping, which a frame-pointer walk only finds by reading garbage), or -errno
 * (-ESRCH: @pid gone and never seen).
 */
int mp_unwinder__frame_pointers(struct mp_unwinder *u, pid_t pid, uint64_t addr);

/* Drop @pid's session (exec, exit: with mp_symbolizer__forget). */
void mp_unwinder__forget(struct mp_unwinder *u, pid_t pid);

struct mp_unwinder_stats {
	uint64_t unwinds;		/* calls */
	uint64_t frames;		/* frames returned */
	uint64_t complete;		/* reached the outermost frame (return address undefined) */
	uint64_t truncated;		/* stopped by @max */
	uint64_t out_of_window;		/* stopped reading outside the copied stack */
	uint64_t failed;		/* stopped otherwise (no CFI and no frame pointer) */
	uint64_t fp_only;		/* no libdwfl session possible: frame-pointer walk */
	uint64_t sessions_created;
	uint64_t sessions_evicted;
	uint64_t max_stack_used;	/* most bytes above sp any unwind needed */
	uint64_t last_stack_used;	/* bytes above sp the last unwind read */
	/* which objects keep frame pointers */
	uint64_t objects_judged;	/* objects judged by mp_unwinder__frame_pointers() */
	uint64_t objects_without_fp;	/* ... that do not keep frame pointers */
	uint64_t judge_cache_resets;	/* judgement cache cleared at its limit (4096) */
	uint64_t last_out_of_window;	/* 1: the last unwind stopped at the window's end */
};

void mp_unwinder__stats(const struct mp_unwinder *u, struct mp_unwinder_stats *out);

#endif
