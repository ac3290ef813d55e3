/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Where to put a uprobe in an allocator function (x86-64), so that the kernel emulates the probed
 * instruction instead of single-stepping it out of line (docs/probe-costs.md: ~0.9 us a hit for an
 * emulated `push %rbp`, 12-16 us for a single-stepped `test %rdi,%rdi` or `endbr64`).
 *
 * The rule, applied to the function's code from its first byte:
 *  1. An instruction the kernel emulates is a probe point: push of a 64-bit register, `nop`,
 *     the 5-byte nop, jmp/call rel, jcc rel. The first one reached is chosen.
 *  2. Before it, only "transparent" instructions may be skipped: straight-line code that writes
 *     neither %rsp nor any argument register the probe reads (req.nargs of %rdi, %rsi, %rdx,
 *     %rcx, %r8, %r9) and transfers no control (endbr64, cmpb $0,hook(%rip), mov to a scratch
 *     register...). %rsp unchanged means the return address is still at (%rsp), so a uretprobe
 *     can share the moved point and the BPF nesting check sees the entry stack pointer.
 *  3. With req.skip_null_check (free-like functions, the pointer in %rdi), `test %rdi,%rdi`
 *     followed by je/jz is followed on its fall-through (non-NULL) path: free(NULL) is not an
 *     event, so it need not trap at all.
 *  4. No branch anywhere in the function may target the skipped bytes or the chosen instruction
 *     (else a call could reach the point twice or not at all).
 *  5. At most 16 instructions and the function's size are examined. Anything else keeps the
 *     entry (offset 0), with the reason in out->reason.
 *
 * Self-contained (capstone only) so that it can be benchmarked and tested on its own.
 */
#ifndef MEMPROFD_PLACEMENT_H
#define MEMPROFD_PLACEMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mp_placement_req {
	const uint8_t *code;	/* the function's bytes from its entry */
	size_t len;		/* bytes available in code (<= the function's size) */
	uint64_t addr;		/* address (or file offset) of code[0], for branch targets */
	unsigned int nargs;	/* argument registers the probe program reads, 0..6 */
	bool has_return;	/* a uretprobe shares the point */
	bool skip_null_check;	/* rule 3 applies (pointer argument in %rdi) */
};

struct mp_placement {
	uint64_t offset;	/* from the function's entry */
	bool emulated;		/* the instruction at offset is one the kernel emulates */
	char insn[192];		/* the probed instruction, e.g. "push rbp" */
	char reason[512];	/* why this offset, or why the entry was kept */
};

/* Choose the probe point. Returns 0 (out filled; offset 0 when the rule keeps the entry) or
 * -EINVAL / -ENOMEM (capstone could not start; out says offset 0). */
int mp_placement__choose(const struct mp_placement_req *req, struct mp_placement *out);

#endif
