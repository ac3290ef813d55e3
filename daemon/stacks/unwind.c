// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Unwinder of copied stacks with libdwfl.
 *
 * libdwfl unwinds a "process" made of reported modules at their runtime addresses plus three
 * callbacks: the initial registers, and memory reads. Here a session is one Dwfl per process,
 * built from the symbolizer's snapshot of its executable mappings (each object reported from
 * the symbolizer's open fd, so an exited process still unwinds), attached once with callbacks
 * that read the stack window of the event being unwound. Sessions are rebuilt when the
 * snapshot changes (dlopen) and evicted LRU beyond max_sessions; only processes whose stacks
 * need DWARF unwinding pay for one. For each step libdwfl uses .eh_frame, then .debug_frame,
 * then the x86_64 backend's frame-pointer step (code without CFI, JIT code).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <gelf.h>
#include <libelf.h>

#include "daemon/stacks/lru.h"
#include "daemon/stacks/unwind.h"

/* x86_64 DWARF register numbers */
#define DWARF_RBP	6
#define DWARF_RSP	7
#define DWARF_RIP	16

struct session {
	pid_t pid;
	Dwfl *dwfl;			/* NULL: no object could be reported, frame pointers only */
	uint64_t generation;		/* of the symbolizer's snapshot it was built from */
	struct mp_unwinder *u;
	struct lru_node lru;		/* in mp_unwinder.sessions */
};

/* The unwind in progress. */
struct request {
	const struct mp_regs *regs;
	const unsigned char *stack;
	size_t len;
	uint64_t *frames;
	unsigned int max, n;
	uint64_t last_sp;
	uint64_t max_used;		/* highest stack byte read, relative to sp */
	bool out_of_window;
	bool truncated;
};

/* Objects judged by mp_unwinder__frame_pointers(): open addressing on the key's hash. */
#define JUDGE_SLOTS		8192	/* power of two */
#define JUDGE_MAX		4096	/* entries before the table is cleared */
#define JUDGE_SAMPLES		256	/* addresses looked at per object */

struct judgement {
	char *key;			/* build-id, or "path:" + path; NULL = free slot */
	bool keeps_fp;
};

struct mp_unwinder {
	struct mp_symbolizer *s;
	struct judgement *judged;	/* JUDGE_SLOTS, allocated on first use */
	unsigned int njudged;
	struct mp_unwinder_opts opts;
	Dwfl_Callbacks cbs;
	char *debuginfo_path;
	struct lru_list sessions;	/* most recently used first */
	unsigned int nsessions;
	struct request *req;
	struct mp_unwinder_stats st;
};

static void session_free(struct mp_unwinder *u, struct session *se)
{
	lru_unlink(&u->sessions, &se->lru);
	if (se->dwfl)
		dwfl_end(se->dwfl);
	free(se);
	u->nsessions--;
}

/* ---------------------------------------------------------------------------------------------
 * libdwfl callbacks. dwfl_arg is the session.
 */
static pid_t cb_next_thread(Dwfl *dwfl, void *arg, void **thread_argp)
{
	struct session *se = arg;

	if (*thread_argp)
		return 0;
	*thread_argp = se;
	return se->pid;
}

static bool cb_get_thread(Dwfl *dwfl, pid_t tid, void *arg, void **thread_argp)
{
	*thread_argp = arg;
	return true;
}

/* The word at @addr of the copied stack window, if it is inside. */
static bool window_read(const struct request *rq, uint64_t addr, uint64_t *val)
{
	uint64_t sp = rq->regs->sp;

	if (addr < sp || addr - sp > rq->len || rq->len - (addr - sp) < sizeof(*val))
		return false;
	memcpy(val, rq->stack + (addr - sp), sizeof(*val));
	return true;
}

/* Only the copied window is readable: CFI reads the stack, never code or data (.eh_frame and
 * .debug_frame come from the files). */
static bool cb_memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg)
{
	struct session *se = arg;
	struct request *rq = se->u->req;
	uint64_t val, used = addr - rq->regs->sp + sizeof(val);

	if (!window_read(rq, addr, &val)) {
		rq->out_of_window = true;
		return false;
	}
	*result = val;
	if (used > rq->max_used)
		rq->max_used = used;
	return true;
}

static bool cb_set_initial_registers(Dwfl_Thread *thread, void *arg)
{
	struct session *se = arg;
	const struct mp_regs *regs = se->u->req->regs;
	Dwarf_Word bp_sp[2] = { regs->bp, regs->sp }, ip = regs->ip;

	/* The others (rbx, r12-r15...) are unknown: a rule that needs one fails that step. */
	if (!dwfl_thread_state_registers(thread, DWARF_RBP, 2, bp_sp) ||
	    !dwfl_thread_state_registers(thread, DWARF_RIP, 1, &ip))
		return false;
	dwfl_thread_state_register_pc(thread, ip);
	return true;
}

static const Dwfl_Thread_Callbacks thread_callbacks = {
	.next_thread = cb_next_thread,
	.get_thread = cb_get_thread,
	.memory_read = cb_memory_read,
	.set_initial_registers = cb_set_initial_registers,
};

static int cb_frame(Dwfl_Frame *state, void *arg)
{
	struct request *rq = arg;
	Dwarf_Addr pc;
	Dwarf_Word sp;

	if (!dwfl_frame_pc(state, &pc, NULL))
		return DWARF_CB_ABORT;
	/* A step that does not move up the stack would loop (corrupt stack, bogus rbp). */
	if (rq->n && (dwfl_frame_reg(state, DWARF_RSP, &sp) != 0 || sp <= rq->last_sp))
		return DWARF_CB_ABORT;
	if (!rq->n)
		sp = rq->regs->sp;
	rq->last_sp = sp;
	rq->frames[rq->n++] = pc;
	if (rq->n == rq->max) {
		rq->truncated = true;
		return DWARF_CB_ABORT;
	}
	return DWARF_CB_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Sessions
 */
static int report_mapping(void *ctx, const struct mp_mapping_info *mi)
{
	Dwfl *dwfl = ctx;
	const char *base;
	int fd;

	if (mi->fd < 0)
		return 0;
	fd = fcntl(mi->fd, F_DUPFD_CLOEXEC, 0);	/* consumed by libdwfl */
	if (fd < 0)
		return -errno;
	base = strrchr(mi->path, '/');
	/* add_p_vaddr: the object's addresses are its ELF vaddrs + bias */
	if (!dwfl_report_elf(dwfl, base ? base + 1 : mi->path, mi->path, fd, (GElf_Addr)mi->bias,
			     true))
		close(fd);	/* e.g. the same object twice: unwinding still works without */
	return 0;
}

static int session_build(struct mp_unwinder *u, struct session *se)
{
	Dwfl *dwfl;
	int r;

	if (se->dwfl) {
		dwfl_end(se->dwfl);
		se->dwfl = NULL;
	}
	dwfl = dwfl_begin(&u->cbs);
	if (!dwfl)
		return -ENOMEM;
	dwfl_report_begin(dwfl);
	r = mp_symbolizer__mappings(u->s, se->pid, report_mapping, dwfl, &se->generation);
	if (r) {
		dwfl_end(dwfl);
		return r;
	}
	/* With no module, dwfl_attach_state cannot tell the architecture: frame pointers only. */
	if (dwfl_report_end(dwfl, NULL, NULL) ||
	    !dwfl_attach_state(dwfl, NULL, se->pid, &thread_callbacks, se)) {
		dwfl_end(dwfl);
		return 0;
	}
	se->dwfl = dwfl;
	u->st.sessions_created++;
	return 0;
}

static struct session *session_get(struct mp_unwinder *u, pid_t pid, int *err)
{
	struct session *se;
	uint64_t gen;

	for (se = lru_entry(u->sessions.head, struct session); se;
	     se = lru_entry(se->lru.next, struct session))
		if (se->pid == pid)
			break;
	if (se) {
		lru_touch(&u->sessions, &se->lru);
		gen = mp_symbolizer__generation(u->s, pid);
		if (gen && gen != se->generation) {
			*err = session_build(u, se);
			if (*err) {
				session_free(u, se);
				return NULL;
			}
		}
		return se;
	}
	se = calloc(1, sizeof(*se));
	if (!se) {
		*err = -ENOMEM;
		return NULL;
	}
	se->pid = pid;
	se->u = u;
	lru_push(&u->sessions, &se->lru);
	u->nsessions++;
	*err = session_build(u, se);
	if (*err) {
		session_free(u, se);
		return NULL;
	}
	while (u->nsessions > u->opts.max_sessions && u->sessions.tail != &se->lru) {
		session_free(u, lru_entry(u->sessions.tail, struct session));
		u->st.sessions_evicted++;
	}
	return se;
}

/* ---------------------------------------------------------------------------------------------
 * Unwinding
 */
/* Without any object (all unopenable): follow the rbp chain inside the window. */
static void unwind_fp(struct request *rq)
{
	uint64_t bp = rq->regs->bp, next, ra;

	rq->frames[rq->n++] = rq->regs->ip;
	while (rq->n < rq->max) {
		if (!window_read(rq, bp, &next) || !window_read(rq, bp + 8, &ra)) {
			rq->out_of_window = true;
			return;
		}
		if (!ra)
			return;
		rq->frames[rq->n++] = ra;
		if (bp + 16 - rq->regs->sp > rq->max_used)
			rq->max_used = bp + 16 - rq->regs->sp;
		if (next <= bp)
			return;
		bp = next;
	}
	rq->truncated = true;
}

static bool frame_has_object(struct session *se, uint64_t pc)
{
	return dwfl_addrmodule(se->dwfl, pc) != NULL;
}

int mp_unwinder__unwind(struct mp_unwinder *u, pid_t pid, const struct mp_regs *regs,
			const void *stack, size_t stack_len, uint64_t *frames, unsigned int max,
			unsigned int *nframes)
{
	struct request rq;
	struct session *se;
	bool retried = false;
	int r = 0;

	*nframes = 0;
	if (!regs || (!stack && stack_len) || !frames || !max)
		return -EINVAL;
	u->st.unwinds++;
	se = session_get(u, pid, &r);
	if (!se)
		return r;
again:
	rq = (struct request){ .regs = regs, .stack = stack, .len = stack_len, .frames = frames,
			       .max = max };
	if (!se->dwfl) {
		u->st.fp_only++;
		unwind_fp(&rq);
	} else {
		u->req = &rq;
		r = dwfl_getthread_frames(se->dwfl, pid, cb_frame, &rq);
		u->req = NULL;
		if (!rq.n)
			rq.frames[rq.n++] = regs->ip;	/* not even the first frame: ip as is */
		/*
		 * A step that failed outside every object may be code mapped after the snapshot
		 * (dlopen): the symbolizer re-reads the maps once per unknown address; rebuild
		 * and retry once if they changed.
		 */
		if (r && !rq.truncated && !retried && !frame_has_object(se, frames[rq.n - 1])) {
			struct mp_mapping_info mi;
			uint64_t gen = se->generation;

			retried = true;
			if (!mp_symbolizer__mapping(u->s, pid, frames[rq.n - 1], &mi) &&
			    mp_symbolizer__generation(u->s, pid) != gen) {
				r = session_build(u, se);
				if (r)
					return r;
				goto again;
			}
		}
		if (r == 0)
			u->st.complete++;
	}
	if (rq.truncated)
		u->st.truncated++;
	else if (rq.out_of_window)
		u->st.out_of_window++;
	else if (r || !se->dwfl)
		u->st.failed++;
	u->st.last_stack_used = rq.max_used;
	u->st.last_out_of_window = !rq.truncated && rq.out_of_window;
	if (rq.max_used > u->st.max_stack_used)
		u->st.max_stack_used = rq.max_used;
	u->st.frames += rq.n;
	*nframes = rq.n;
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Frame-pointer judgement
 */

/* The CFA rule's register at ELF address @addr, or -1 if no CFI covers it or it is no
 * register + offset rule. */
static int cfa_register(Dwarf_CFI *cfi, Dwarf_Addr addr)
{
	Dwarf_Frame *frame = NULL;
	Dwarf_Op *ops;
	size_t nops;
	int reg = -1;

	if (dwarf_cfi_addrframe(cfi, addr, &frame) != 0)
		return -1;
	if (dwarf_frame_cfa(frame, &ops, &nops) == 0 && nops >= 1) {
		if (ops[0].atom == DW_OP_bregx)
			reg = (int)ops[0].number;
		else if (ops[0].atom >= DW_OP_breg0 && ops[0].atom <= DW_OP_breg31)
			reg = ops[0].atom - DW_OP_breg0;
	}
	free(frame);
	return reg;
}

/* Judge the object open at @fd (see mp_unwinder__frame_pointers()). */
static bool judge_object(int fd)
{
	uint64_t total = 0, at, covered = 0, rbp = 0;
	Dwarf_CFI *cfi = NULL;
	Dwarf *dw = NULL;
	Elf_Scn *scn = NULL;
	bool keeps = true;
	Elf *elf;

	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf)
		return true;
	cfi = dwarf_getcfi_elf(elf);	/* .eh_frame */
	if (!cfi) {
		dw = dwarf_begin_elf(elf, DWARF_C_READ, NULL);	/* .debug_frame */
		cfi = dw ? dwarf_getcfi(dw) : NULL;
	}
	if (!cfi)
		goto out;
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;

		if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_PROGBITS &&
		    (sh.sh_flags & SHF_EXECINSTR))
			total += sh.sh_size;
	}
	/* JUDGE_SAMPLES addresses evenly spread over the executable sections */
	for (unsigned int i = 0; total && i < JUDGE_SAMPLES; i++) {
		uint64_t want = total * (2 * i + 1) / (2 * JUDGE_SAMPLES);
		int reg = -1;

		at = 0;
		scn = NULL;
		while ((scn = elf_nextscn(elf, scn))) {
			GElf_Shdr sh;

			if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_PROGBITS ||
			    !(sh.sh_flags & SHF_EXECINSTR))
				continue;
			if (want < at + sh.sh_size) {
				reg = cfa_register(cfi, sh.sh_addr + (want - at));
				break;
			}
			at += sh.sh_size;
		}
		if (reg < 0)
			continue;
		covered++;
		if (reg == DWARF_RBP)
			rbp++;
	}
	if (covered)
		keeps = 2 * rbp >= covered;
out:
	if (dw)
		dwarf_end(dw);
	else if (cfi)
		dwarf_cfi_end(cfi);
	elf_end(elf);
	return keeps;
}

static uint64_t judge_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;	/* FNV-1a */

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

static void judge_clear(struct mp_unwinder *u)
{
	for (unsigned int i = 0; i < JUDGE_SLOTS; i++) {
		free(u->judged[i].key);
		u->judged[i].key = NULL;
	}
	u->njudged = 0;
}

int mp_unwinder__frame_pointers(struct mp_unwinder *u, pid_t pid, uint64_t addr)
{
	struct mp_mapping_info mi;
	char keybuf[4200];
	const char *key;
	unsigned int i;
	int r;

	r = mp_symbolizer__mapping(u->s, pid, addr, &mi);
	if (r == -ENOENT)
		return 0;
	if (r)
		return r;
	if (mi.fd < 0)
		return 1;
	if (mi.build_id) {
		key = mi.build_id;
	} else {
		snprintf(keybuf, sizeof(keybuf), "path:%s", mi.path);
		key = keybuf;
	}
	if (!u->judged) {
		u->judged = calloc(JUDGE_SLOTS, sizeof(*u->judged));
		if (!u->judged)
			return -ENOMEM;
	}
	for (i = judge_hash(key) & (JUDGE_SLOTS - 1); u->judged[i].key;
	     i = (i + 1) & (JUDGE_SLOTS - 1))
		if (!strcmp(u->judged[i].key, key))
			return u->judged[i].keeps_fp;
	if (u->njudged >= JUDGE_MAX) {
		judge_clear(u);
		u->st.judge_cache_resets++;
		for (i = judge_hash(key) & (JUDGE_SLOTS - 1); u->judged[i].key;
		     i = (i + 1) & (JUDGE_SLOTS - 1))
			;
	}
	u->judged[i].key = strdup(key);
	if (!u->judged[i].key)
		return -ENOMEM;
	u->judged[i].keeps_fp = judge_object(mi.fd);
	u->njudged++;
	u->st.objects_judged++;
	if (!u->judged[i].keeps_fp)
		u->st.objects_without_fp++;
	return u->judged[i].keeps_fp;
}

void mp_unwinder__forget(struct mp_unwinder *u, pid_t pid)
{
	struct session *se;

	if (!u)
		return;
	for (se = lru_entry(u->sessions.head, struct session); se;
	     se = lru_entry(se->lru.next, struct session)) {
		if (se->pid == pid) {
			session_free(u, se);
			return;
		}
	}
}

void mp_unwinder__stats(const struct mp_unwinder *u, struct mp_unwinder_stats *out)
{
	*out = u->st;
}

struct mp_unwinder *mp_unwinder__new(struct mp_symbolizer *s, const struct mp_unwinder_opts *opts)
{
	struct mp_unwinder *u;

	if (!s || (opts && opts->sz < sizeof(size_t))) {
		errno = EINVAL;
		return NULL;
	}
	u = calloc(1, sizeof(*u));
	if (!u)
		return NULL;
	u->s = s;
	if (opts)
		memcpy(&u->opts, opts, opts->sz < sizeof(u->opts) ? opts->sz : sizeof(u->opts));
	u->opts.sz = sizeof(u->opts);
	if (!u->opts.max_sessions)
		u->opts.max_sessions = 64;
	elf_version(EV_CURRENT);
	u->cbs.find_elf = dwfl_build_id_find_elf;
	u->cbs.find_debuginfo = mp_find_debuginfo;
	u->cbs.section_address = dwfl_offline_section_address;
	u->cbs.debuginfo_path = &u->debuginfo_path;
	return u;
}

void mp_unwinder__free(struct mp_unwinder *u)
{
	if (!u)
		return;
	while (u->sessions.head)
		session_free(u, lru_entry(u->sessions.head, struct session));
	if (u->judged) {
		judge_clear(u);
		free(u->judged);
	}
	free(u);
}
