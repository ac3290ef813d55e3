// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Probe placement on the real libc of this machine (tests/bpf/overhead-placement.sh).
 *
 *   overhead_check placement WORKLOAD
 *
 * Starts WORKLOAD ("ovh_loop wait"), attaches the loader's probes to it (daemon/probe/),
 * and reads from the loader's log where it put the probe of malloc, free, posix_memalign,
 * calloc and realloc. Then, independently of daemon/probe/placement.c, decodes with capstone the
 * instruction at that address in libc (the same file, mapped by this program) and checks:
 *  - it is one the kernel emulates (push of a 64-bit register, nop, 5-byte nop, jmp/call/jcc
 *    with an immediate target), so a hit costs a trap and no single step;
 *  - no instruction skipped before it writes %rsp or an argument register the probe reads.
 * Prints PASS:/FAIL: lines; exits 77 when BPF is not permitted.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <capstone/capstone.h>

#include "daemon/probe/bpf_loader.h"

struct sym_check {
	const char *sym;
	unsigned int nargs;	/* argument registers the entry program reads */
	bool required;
	bool seen;
	uint64_t off;
	char path[512];
};

static struct sym_check syms[] = {
	{ .sym = "malloc", .nargs = 1, .required = true },
	{ .sym = "free", .nargs = 1, .required = true },
	{ .sym = "posix_memalign", .nargs = 3, .required = true },
	{ .sym = "calloc", .nargs = 2 },
	{ .sym = "realloc", .nargs = 2 },
};

#define NSYMS (sizeof(syms) / sizeof(syms[0]))

static int failures;

static void check(bool ok, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void check(bool ok, const char *name, const char *fmt, ...)
{
	va_list ap;

	if (ok) {
		printf("PASS: %s\n", name);
		return;
	}
	failures++;
	printf("FAIL: %s: ", name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

/* Every symbol of libc the loader logged a probe on (one log line per probe placed). */
static char libc_probed[256][64];
static size_t n_libc_probed;

/* "Probe on free in '/proc/12/root/usr/lib/.../libc.so.6' at +0x9: moved past ..." */
static void on_log(void *ctx, int level, const char *msg)
{
	char sym[64], path[512];
	unsigned long long off;

	(void)ctx;
	if (level <= 6)
		fprintf(stderr, "loader: %s\n", msg);
	if (sscanf(msg, "Probe on %63s in '%511[^']' at +%llx", sym, path, &off) != 3)
		return;
	if (!strstr(path, "/libc.so"))
		return;
	if (n_libc_probed < sizeof(libc_probed) / sizeof(libc_probed[0]))
		snprintf(libc_probed[n_libc_probed++], sizeof(libc_probed[0]), "%s", sym);
	for (size_t i = 0; i < NSYMS; i++) {
		if (strcmp(syms[i].sym, sym))
			continue;
		syms[i].seen = true;
		syms[i].off = off;
		/* "/proc/<pid>/root/usr/lib/...": the workload is gone when this is read */
		snprintf(syms[i].path, sizeof(syms[i].path), "%s",
			 strncmp(path, "/proc/", 6) || !strstr(path, "/root/") ? path :
			 strstr(path, "/root/") + 5);
		printf("# %s: probe at %s+%#llx (%s)\n", sym, sym, off, msg);
	}
}

static int on_event(void *ctx, const void *data, size_t size)
{
	(void)ctx;
	(void)data;
	(void)size;
	return 0;
}

/* Independent of daemon/probe/placement.c: the instructions arch/x86/kernel/uprobes.c emulates. */
static bool emulated(const cs_insn *in)
{
	const cs_x86 *x = &in->detail->x86;

	switch (in->id) {
	case X86_INS_PUSH:
		return x->op_count == 1 && x->operands[0].type == X86_OP_REG && x->operands[0].size == 8;
	case X86_INS_NOP:
		return in->size == 1 || in->size == 5;
	case X86_INS_JMP:
	case X86_INS_CALL:
		return x->op_count == 1 && x->operands[0].type == X86_OP_IMM;
	default:
		/* jcc rel8/rel32 */
		for (uint8_t i = 0; i < in->detail->groups_count; i++)
			if (in->detail->groups[i] == CS_GRP_JUMP)
				return x->op_count == 1 && x->operands[0].type == X86_OP_IMM;
		return false;
	}
}

static bool writes_arg_or_sp(csh h, const cs_insn *in, unsigned int nargs, const char **which)
{
	static const x86_reg args[6][4] = {
		{ X86_REG_RDI, X86_REG_EDI, X86_REG_DI, X86_REG_DIL },
		{ X86_REG_RSI, X86_REG_ESI, X86_REG_SI, X86_REG_SIL },
		{ X86_REG_RDX, X86_REG_EDX, X86_REG_DX, X86_REG_DL },
		{ X86_REG_RCX, X86_REG_ECX, X86_REG_CX, X86_REG_CL },
		{ X86_REG_R8, X86_REG_R8D, X86_REG_R8W, X86_REG_R8B },
		{ X86_REG_R9, X86_REG_R9D, X86_REG_R9W, X86_REG_R9B },
	};
	cs_regs rd, wr;
	uint8_t nrd = 0, nwr = 0;

	if (cs_regs_access(h, in, rd, &nrd, wr, &nwr) != CS_ERR_OK) {
		*which = "(unknown)";
		return true;
	}
	for (uint8_t i = 0; i < nwr; i++) {
		if (wr[i] == X86_REG_RSP || wr[i] == X86_REG_ESP) {
			*which = "rsp";
			return true;
		}
		for (unsigned int a = 0; a < nargs && a < 6; a++)
			for (int k = 0; k < 4; k++)
				if (wr[i] == args[a][k]) {
					*which = cs_reg_name(h, wr[i]);
					return true;
				}
	}
	return false;
}

static int check_sym(csh h, struct sym_check *s)
{
	char name[128];
	const uint8_t *fn = dlsym(RTLD_DEFAULT, s->sym), *code;
	uint64_t addr;
	size_t size;
	struct stat st, libc_st;
	cs_insn *in;
	Dl_info di;
	bool ok_skip = true, found = false;

	snprintf(name, sizeof(name), "placement-%s-seen", s->sym);
	if (!s->seen) {
		if (s->required)
			check(false, name, "the loader logged no probe on %s in libc", s->sym);
		else
			printf("# %s: not probed in libc (optional)\n", s->sym);
		return 0;
	}
	check(true, name, "%s", "ok");
	snprintf(name, sizeof(name), "placement-%s-same-libc", s->sym);
	if (!fn || !dladdr(fn, &di) || stat(di.dli_fname, &st) || stat(s->path, &libc_st) ||
	    st.st_ino != libc_st.st_ino || st.st_dev != libc_st.st_dev) {
		check(false, name, "cannot find %s in the libc the workload maps", s->sym);
		return 0;
	}
	check(true, name, "%s", "ok");

	in = cs_malloc(h);
	code = fn;
	size = s->off + 16;
	addr = (uint64_t)(uintptr_t)fn;
	while (cs_disasm_iter(h, &code, &size, &addr, in)) {
		uint64_t at = in->address - (uint64_t)(uintptr_t)fn;
		const char *which = NULL;

		if (at == s->off) {
			found = true;
			printf("# %s+%#" PRIx64 ": %s %s\n", s->sym, at, in->mnemonic, in->op_str);
			snprintf(name, sizeof(name), "placement-%s-emulated", s->sym);
			check(emulated(in), name, "the probe of %s is on '%s %s' at +%#" PRIx64
			      ", which the kernel single-steps", s->sym, in->mnemonic, in->op_str, at);
			break;
		}
		if (at == 0 && !emulated(in))
			printf("# %s+0 is '%s %s' (single-stepped): the probe had to move\n", s->sym,
			       in->mnemonic, in->op_str);
		/* test %rdi,%rdi; je: the NULL check free's probe may skip (free(NULL) is no event) */
		if (writes_arg_or_sp(h, in, s->nargs, &which)) {
			snprintf(name, sizeof(name), "placement-%s-args-intact", s->sym);
			check(false, name, "'%s %s' at +%#" PRIx64 " (before the probe) writes %s",
			      in->mnemonic, in->op_str, at, which);
			ok_skip = false;
		}
		if (at > s->off)
			break;
	}
	cs_free(in, 1);
	snprintf(name, sizeof(name), "placement-%s-decoded", s->sym);
	check(found, name, "no instruction starts at %s+%#" PRIx64, s->sym, s->off);
	if (ok_skip) {
		snprintf(name, sizeof(name), "placement-%s-args-intact", s->sym);
		check(true, name, "%s", "ok");
	}
	return 0;
}

/*
 * One probe per address. glibc's aligned_alloc and memalign are one function (so are mmap and
 * mmap64, free and cfree): two probes on it make every call two hits. With uprobe sessions the
 * second hit of an unsampled call is not seen as nested (same function at the same stack
 * pointer: a loop, for nested_noret()) and draws again, so such blocks are sampled as if twice
 * their size: with the alias probed twice, memalign estimates came out ~1.6x the truth (z ~ 14
 * in alloc-libs). At rate 1 (probe_check) the second hit is nested in a sampled call and
 * nothing shows, hence this check on the probes themselves.
 */
static void check_aliases(void)
{
	bool memalign_family = false, dup = false;

	for (size_t i = 0; i < n_libc_probed; i++) {
		void *a = dlsym(RTLD_DEFAULT, libc_probed[i]);

		memalign_family |= !strcmp(libc_probed[i], "aligned_alloc") ||
				   !strcmp(libc_probed[i], "memalign");
		for (size_t j = 0; a && j < i; j++) {
			if (dlsym(RTLD_DEFAULT, libc_probed[j]) != a)
				continue;
			check(false, "placement-aliases-probed-once", "%s and %s (one function "
			      "at %p) are both probed", libc_probed[j], libc_probed[i], a);
			dup = true;
		}
	}
	if (!memalign_family)
		check(false, "placement-aliases-probed-once", "neither aligned_alloc nor "
		      "memalign probed in libc (%zu probes logged)", n_libc_probed);
	else if (!dup)
		check(true, "placement-aliases-probed-once", "%s", "ok");
}

static int placement(const char *wl)
{
	int in[2];
	pid_t pid;
	struct mp_bpf *b;
	csh h;
	int r, status;

	b = mp_bpf__open(on_event, NULL);
	if (!b) {
		fprintf(stderr, "mp_bpf__open: %s\n", strerror(errno));
		return errno == EPERM ? 77 : 1;
	}
	mp_bpf__set_log(b, on_log, NULL);
	if (pipe(in))
		return 1;
	pid = fork();
	if (pid == 0) {
		dup2(in[0], 0);
		close(in[0]);
		close(in[1]);
		execl(wl, wl, "wait", (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	/*
	 * The workload is in main once it has exec'd (the forked child maps our libc before
	 * exec, so libc in its maps proves nothing) and blocks in read(2) on its stdin.
	 */
	char *want = realpath(wl, NULL);

	for (int i = 0; i < 500; i++) {
		char p[64], exe[PATH_MAX], sc[64] = "";
		ssize_t n;
		FILE *f;

		snprintf(p, sizeof(p), "/proc/%d/exe", pid);
		n = readlink(p, exe, sizeof(exe) - 1);
		exe[n > 0 ? n : 0] = '\0';
		snprintf(p, sizeof(p), "/proc/%d/syscall", pid);
		f = fopen(p, "re");
		if (f && !fgets(sc, sizeof(sc), f))
			sc[0] = '\0';
		if (f)
			fclose(f);
		if (want && !strcmp(exe, want) && !strncmp(sc, "0 ", 2))
			break;
		usleep(10000);
	}
	free(want);
	r = mp_bpf__attach(b, pid, NULL, 0);
	check(r > 0, "placement-attached", "mp_bpf__attach: %s", strerror(-r));
	close(in[1]);
	waitpid(pid, &status, 0);

	if (cs_open(CS_ARCH_X86, CS_MODE_64, &h) != CS_ERR_OK)
		return 1;
	cs_option(h, CS_OPT_DETAIL, CS_OPT_ON);
	for (size_t i = 0; i < NSYMS; i++)
		check_sym(h, &syms[i]);
	cs_close(&h);
	check_aliases();
	mp_bpf__free(b);
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && !strcmp(argv[1], "placement"))
		return placement(argv[2]);
	fprintf(stderr, "usage: overhead_check placement WORKLOAD\n");
	return 2;
}
