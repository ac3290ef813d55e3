// SPDX-License-Identifier: LGPL-2.1-or-later
/* The probe placement rule of daemon/probe/placement.c on code bytes copied from Debian 12's glibc 2.36
 * and libstdc++ (and hand-made counter-examples). */
#include <stdint.h>

#include "daemon/probe/placement.h"
#include "tests/unit/test.h"

static struct mp_placement place(const uint8_t *code, size_t len, unsigned int nargs, bool ret,
				 bool null_check)
{
	struct mp_placement_req req = { .code = code, .len = len, .addr = 0x1000, .nargs = nargs,
					.has_return = ret, .skip_null_check = null_check };
	struct mp_placement p;

	mp_placement__choose(&req, &p);
	return p;
}

/* free: test %rdi,%rdi; je +0xbf; push %rbp; lea -0x10(%rdi),%rsi; push %rbx; ret */
static const uint8_t free_code[] = { 0x48, 0x85, 0xff, 0x0f, 0x84, 0xbf, 0x00, 0x00, 0x00, 0x55,
				     0x48, 0x8d, 0x77, 0xf0, 0x53, 0xc3 };

/* A placement case: code, the request, and what the placement must be. */
struct place_case {
	const char *name;
	const uint8_t *code;
	size_t len;
	unsigned int nargs;
	bool ret, null_check;
	uint64_t offset;
	const char *insn;	/* the probed instruction, if given */
	bool emulated;		/* checked if true */
	const char *reason;	/* a word the reason holds, if given */
};

#define CODE(...) (const uint8_t[]){ __VA_ARGS__ }, sizeof((const uint8_t[]){ __VA_ARGS__ })

static const struct place_case cases[] = {
	{ "test_free_moves_to_push", free_code, sizeof(free_code), 1, false, true,
	  .offset = 9, .insn = "push rbp", .emulated = true },
	/* without rule 3 the je at +3 is the first emulated instruction */
	{ "test_free_without_null_rule_keeps_jcc", free_code, sizeof(free_code), 1, false, false,
	  .offset = 3 },
	/* _ZdlPv: endbr64; jmp rel32 */
	{ "test_endbr64_skipped", CODE(0xf3, 0x0f, 0x1e, 0xfa, 0xe9, 0x87, 0x2f, 0xff, 0xff, 0x90),
	  1, false, true, .offset = 4 },
	/* malloc: push %r12; push %rbp */
	{ "test_push_at_entry", CODE(0x41, 0x54, 0x55, 0xc3), 1, true, false,
	  .offset = 0, .emulated = true },
	/* posix_memalign: cmpb $0,0x140201(%rip); push %r12 */
	{ "test_hook_check_skipped",
	  CODE(0x80, 0x3d, 0x01, 0x02, 0x14, 0x00, 0x00, 0x41, 0x54, 0xc3), 3, true, false,
	  .offset = 7 },
	/* reallocarray: mov %rsi,%rax; mul %rdx; push %rbx */
	{ "test_arg_clobber_keeps_entry", CODE(0x48, 0x89, 0xf0, 0x48, 0xf7, 0xe2, 0x53, 0xc3), 3,
	  true, false, .offset = 0, .reason = "rdx" },
	/* endbr64; sub $8,%rsp; push %rbx */
	{ "test_rsp_change_keeps_entry",
	  CODE(0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x83, 0xec, 0x08, 0x53, 0xc3), 1, true, false,
	  .offset = 0 },
	/* endbr64; push %rbx; ...; jmp back to the push (+4) */
	{ "test_branch_into_prologue_keeps_entry",
	  CODE(0xf3, 0x0f, 0x1e, 0xfa, 0x53, 0x90, 0xeb, 0xfc), 1, false, false,
	  .offset = 0, .reason = "branch" },
};

static void check_case(const struct place_case *c)
{
	struct mp_placement p = place(c->code, c->len, c->nargs, c->ret, c->null_check);

	ASSERT_EQ(p.offset, c->offset, "offset");
	if (c->insn)
		ASSERT_STREQ(p.insn, c->insn, "probed instruction");
	if (c->emulated)
		ASSERT_TRUE(p.emulated, "emulated");
	if (c->reason)
		ASSERT_TRUE(strstr(p.reason, c->reason) != NULL, "reason names it");
}

int main(void)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		RUN_CASE(cases[i].name, check_case, &cases[i]);
	return test_exit();
}
