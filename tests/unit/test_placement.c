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

static void test_free_moves_to_push(void)
{
	struct mp_placement p = place(free_code, sizeof(free_code), 1, false, true);

	ASSERT_EQ(p.offset, 9, "free+9");
	ASSERT_STREQ(p.insn, "push rbp", "probed instruction");
	ASSERT_TRUE(p.emulated, "emulated");
}

static void test_free_without_null_rule_keeps_jcc(void)
{
	/* without rule 3 the je at +3 is the first emulated instruction */
	struct mp_placement p = place(free_code, sizeof(free_code), 1, false, false);

	ASSERT_EQ(p.offset, 3, "je at +3");
}

static void test_endbr64_skipped(void)
{
	/* _ZdlPv: endbr64; jmp rel32 */
	static const uint8_t c[] = { 0xf3, 0x0f, 0x1e, 0xfa, 0xe9, 0x87, 0x2f, 0xff, 0xff, 0x90 };
	struct mp_placement p = place(c, sizeof(c), 1, false, true);

	ASSERT_EQ(p.offset, 4, "past endbr64");
}

static void test_push_at_entry(void)
{
	/* malloc: push %r12; push %rbp */
	static const uint8_t c[] = { 0x41, 0x54, 0x55, 0xc3 };
	struct mp_placement p = place(c, sizeof(c), 1, true, false);

	ASSERT_EQ(p.offset, 0, "entry");
	ASSERT_TRUE(p.emulated, "emulated");
}

static void test_hook_check_skipped(void)
{
	/* posix_memalign: cmpb $0,0x140201(%rip); push %r12 */
	static const uint8_t c[] = { 0x80, 0x3d, 0x01, 0x02, 0x14, 0x00, 0x00, 0x41, 0x54, 0xc3 };
	struct mp_placement p = place(c, sizeof(c), 3, true, false);

	ASSERT_EQ(p.offset, 7, "past the hook check");
}

static void test_arg_clobber_keeps_entry(void)
{
	/* reallocarray: mov %rsi,%rax; mul %rdx; push %rbx */
	static const uint8_t c[] = { 0x48, 0x89, 0xf0, 0x48, 0xf7, 0xe2, 0x53, 0xc3 };
	struct mp_placement p = place(c, sizeof(c), 3, true, false);

	ASSERT_EQ(p.offset, 0, "entry kept");
	ASSERT_TRUE(strstr(p.reason, "rdx") != NULL, "reason names the register");
}

static void test_rsp_change_keeps_entry(void)
{
	/* endbr64; sub $8,%rsp; push %rbx */
	static const uint8_t c[] = { 0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x83, 0xec, 0x08, 0x53, 0xc3 };
	struct mp_placement p = place(c, sizeof(c), 1, true, false);

	ASSERT_EQ(p.offset, 0, "entry kept");
}

static void test_branch_into_prologue_keeps_entry(void)
{
	/* endbr64; push %rbx; ...; jmp back to the push (+4) */
	static const uint8_t c[] = { 0xf3, 0x0f, 0x1e, 0xfa, 0x53, 0x90, 0xeb, 0xfc };
	struct mp_placement p = place(c, sizeof(c), 1, false, false);

	ASSERT_EQ(p.offset, 0, "entry kept");
	ASSERT_TRUE(strstr(p.reason, "branch") != NULL, "reason names the branch");
}

int main(void)
{
	RUN(test_free_moves_to_push);
	RUN(test_free_without_null_rule_keeps_jcc);
	RUN(test_endbr64_skipped);
	RUN(test_push_at_entry);
	RUN(test_hook_check_skipped);
	RUN(test_arg_clobber_keeps_entry);
	RUN(test_rsp_change_keeps_entry);
	RUN(test_branch_into_prologue_keeps_entry);
	return test_exit();
}
