// SPDX-License-Identifier: LGPL-2.1-or-later
/* Probe placement for x86-64 allocator functions: see daemon/probe/placement.h for the rule. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <capstone/capstone.h>

#include "daemon/probe/placement.h"

#define MAX_INSNS	16

/* The 64-bit register a (sub-)register belongs to, for the ones the rule cares about. */
static x86_reg reg64(unsigned int r)
{
	switch (r) {
	case X86_REG_RDI: case X86_REG_EDI: case X86_REG_DI: case X86_REG_DIL:
		return X86_REG_RDI;
	case X86_REG_RSI: case X86_REG_ESI: case X86_REG_SI: case X86_REG_SIL:
		return X86_REG_RSI;
	case X86_REG_RDX: case X86_REG_EDX: case X86_REG_DX: case X86_REG_DL: case X86_REG_DH:
		return X86_REG_RDX;
	case X86_REG_RCX: case X86_REG_ECX: case X86_REG_CX: case X86_REG_CL: case X86_REG_CH:
		return X86_REG_RCX;
	case X86_REG_R8: case X86_REG_R8D: case X86_REG_R8W: case X86_REG_R8B:
		return X86_REG_R8;
	case X86_REG_R9: case X86_REG_R9D: case X86_REG_R9W: case X86_REG_R9B:
		return X86_REG_R9;
	case X86_REG_RSP: case X86_REG_ESP: case X86_REG_SP: case X86_REG_SPL:
		return X86_REG_RSP;
	default:
		return X86_REG_INVALID;
	}
}

static const x86_reg arg_regs[6] = { X86_REG_RDI, X86_REG_RSI, X86_REG_RDX,
				     X86_REG_RCX, X86_REG_R8, X86_REG_R9 };

/* Instructions arch/x86/kernel/uprobes.c emulates (no single-step out of line). */
static bool is_emulated(const cs_insn *in)
{
	const uint8_t *b = in->bytes;

	switch (in->size) {
	case 1:
		return (b[0] >= 0x50 && b[0] <= 0x57) || b[0] == 0x90;	/* push r64, nop */
	case 2:
		return (b[0] == 0x41 && b[1] >= 0x50 && b[1] <= 0x57) ||	/* push r8-r15 */
		       b[0] == 0xeb || (b[0] >= 0x70 && b[0] <= 0x7f);	/* jmp rel8, jcc rel8 */
	case 5:
		return b[0] == 0xe9 || b[0] == 0xe8 ||				/* jmp, call rel32 */
		       (b[0] == 0x0f && b[1] == 0x1f && b[2] == 0x44 && b[3] == 0 && b[4] == 0);
	case 6:
		return b[0] == 0x0f && b[1] >= 0x80 && b[1] <= 0x8f;		/* jcc rel32 */
	default:
		return false;
	}
}

static bool in_group(const cs_insn *in, uint8_t grp)
{
	for (unsigned int i = 0; i < in->detail->groups_count; i++)
		if (in->detail->groups[i] == grp)
			return true;
	return false;
}

static bool is_control(const cs_insn *in)
{
	return in_group(in, CS_GRP_JUMP) || in_group(in, CS_GRP_CALL) || in_group(in, CS_GRP_RET) ||
	       in_group(in, CS_GRP_INT) || in_group(in, CS_GRP_IRET) || in_group(in, X86_GRP_INT) ||
	       in->id == X86_INS_SYSCALL || in->id == X86_INS_SYSENTER || in->id == X86_INS_UD2 ||
	       in->id == X86_INS_HLT;
}

/* The register among @nargs arguments and %rsp that @in writes, or X86_REG_INVALID. */
static x86_reg writes_preserved(csh h, const cs_insn *in, unsigned int nargs)
{
	cs_regs rd, wr;
	uint8_t nrd = 0, nwr = 0;

	if (cs_regs_access(h, in, rd, &nrd, wr, &nwr) != CS_ERR_OK)
		return X86_REG_RSP; /* unknown: treat as clobbering */
	for (unsigned int i = 0; i < nwr; i++) {
		x86_reg r = reg64(wr[i]);

		if (r == X86_REG_RSP)
			return r;
		for (unsigned int a = 0; a < nargs && a < 6; a++)
			if (r == arg_regs[a])
				return r;
	}
	return X86_REG_INVALID;
}

static bool is_test_rdi(const cs_insn *in)
{
	const cs_x86 *x = &in->detail->x86;

	return in->id == X86_INS_TEST && x->op_count == 2 && x->operands[0].type == X86_OP_REG &&
	       x->operands[1].type == X86_OP_REG && x->operands[0].reg == X86_REG_RDI &&
	       x->operands[1].reg == X86_REG_RDI;
}

static bool branch_target(const cs_insn *in, uint64_t *target)
{
	const cs_x86 *x = &in->detail->x86;

	if (!(in_group(in, CS_GRP_JUMP) || in_group(in, CS_GRP_CALL)) || x->op_count != 1 ||
	    x->operands[0].type != X86_OP_IMM)
		return false;
	*target = (uint64_t)x->operands[0].imm;
	return true;
}

/* Rule 4: does any branch of the function land in (entry, entry + off]? */
static bool branched_into(csh h, const struct mp_placement_req *req, uint64_t off,
			  uint64_t *from, uint64_t *to)
{
	const uint8_t *code = req->code;
	size_t size = req->len;
	uint64_t addr = req->addr, t;
	cs_insn *in = cs_malloc(h);
	bool hit = false;

	if (!in)
		return true;
	while (size > 0 && !hit) {
		if (!cs_disasm_iter(h, &code, &size, &addr, in)) {
			code++; /* not code (padding, data): step over one byte */
			size--;
			addr++;
			continue;
		}
		if (branch_target(in, &t) && t > req->addr && t <= req->addr + off) {
			*from = in->address - req->addr;
			*to = t - req->addr;
			hit = true;
		}
	}
	cs_free(in, 1);
	return hit;
}

static void insn_text(const cs_insn *in, char *buf, size_t len)
{
	snprintf(buf, len, "%.31s%s%.150s", in->mnemonic, in->op_str[0] ? " " : "", in->op_str);
}

static const char *reg_name(csh h, x86_reg r)
{
	const char *n = cs_reg_name(h, r);

	return n ? n : "?";
}

int mp_placement__choose(const struct mp_placement_req *req, struct mp_placement *out)
{
	const uint8_t *code = req->code;
	size_t size = req->len;
	uint64_t addr = req->addr, off = 0, from = 0, to = 0;
	bool null_tested = false;
	unsigned int n = 0, skipped = 0;
	char text[192];
	cs_insn *in;
	csh h;
	int err = 0;

	memset(out, 0, sizeof(*out));
	if (cs_open(CS_ARCH_X86, CS_MODE_64, &h) != CS_ERR_OK) {
		snprintf(out->reason, sizeof(out->reason), "capstone failed to start: entry kept");
		return -EINVAL;
	}
	cs_option(h, CS_OPT_DETAIL, CS_OPT_ON);
	in = cs_malloc(h);
	if (!in) {
		cs_close(&h);
		snprintf(out->reason, sizeof(out->reason), "out of memory: entry kept");
		return -ENOMEM;
	}

	for (;;) {
		x86_reg w;

		if (n++ >= MAX_INSNS || size == 0) {
			snprintf(out->reason, sizeof(out->reason),
				 "no emulated instruction in the first %u instructions: entry kept",
				 n - 1);
			goto keep_entry;
		}
		off = addr - req->addr;
		if (!cs_disasm_iter(h, &code, &size, &addr, in)) {
			snprintf(out->reason, sizeof(out->reason),
				 "cannot decode the instruction at +%#llx: entry kept",
				 (unsigned long long)off);
			goto keep_entry;
		}
		if (req->skip_null_check && is_test_rdi(in)) {
			null_tested = true;
			skipped++;
			continue;
		}
		if (null_tested && (in->id == X86_INS_JE) && is_emulated(in)) {
			/* the taken branch is free(NULL): follow the fall-through */
			null_tested = false;
			skipped++;
			continue;
		}
		null_tested = false;
		if (is_emulated(in))
			break;
		insn_text(in, text, sizeof(text));
		if (is_control(in)) {
			snprintf(out->reason, sizeof(out->reason),
				 "'%s' at +%#llx transfers control before any emulated "
				 "instruction: entry kept", text, (unsigned long long)off);
			goto keep_entry;
		}
		w = writes_preserved(h, in, req->nargs);
		if (w != X86_REG_INVALID) {
			snprintf(out->reason, sizeof(out->reason),
				 "'%s' at +%#llx writes %%%s before any emulated instruction: "
				 "entry kept", text, (unsigned long long)off, reg_name(h, w));
			goto keep_entry;
		}
		skipped++;
	}

	insn_text(in, out->insn, sizeof(out->insn));
	if (off > 0 && branched_into(h, req, off, &from, &to)) {
		snprintf(out->reason, sizeof(out->reason),
			 "the branch at +%#llx targets +%#llx, within the %llu skipped bytes: "
			 "entry kept", (unsigned long long)from, (unsigned long long)to,
			 (unsigned long long)off);
		goto keep_entry;
	}
	out->offset = off;
	out->emulated = true;
	if (off == 0)
		snprintf(out->reason, sizeof(out->reason), "the first instruction '%s' is emulated",
			 out->insn);
	else
		snprintf(out->reason, sizeof(out->reason),
			 "moved past %u instruction(s) the kernel would single-step to the emulated "
			 "'%s' at +%#llx", skipped, out->insn, (unsigned long long)off);
	goto out;

keep_entry:
	out->offset = 0;
	out->emulated = false;
	code = req->code;
	size = req->len;
	addr = req->addr;
	if (cs_disasm_iter(h, &code, &size, &addr, in))
		insn_text(in, out->insn, sizeof(out->insn));
	out->emulated = out->insn[0] && in->address == req->addr && is_emulated(in);
out:
	cs_free(in, 1);
	cs_close(&h);
	return err;
}
