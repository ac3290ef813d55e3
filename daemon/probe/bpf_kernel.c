// SPDX-License-Identifier: LGPL-2.1-or-later
/* Kernel feature probes and load-failure explanations: see daemon/probe/bpf_kernel.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

#include <linux/capability.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include "daemon/probe/bpf_kernel.h"

int mp_kernel_tp_nargs(const char *tp)
{
	char name[128];
	struct btf *btf;
	const struct btf_type *t;
	int id, n = -ENOENT;

	if (snprintf(name, sizeof(name), "btf_trace_%s", tp) >= (int)sizeof(name))
		return -ENAMETOOLONG;
	btf = btf__load_vmlinux_btf();
	if (!btf)
		return errno == ENOENT ? -EOPNOTSUPP : -errno;
	id = btf__find_by_name_kind(btf, name, BTF_KIND_TYPEDEF);
	t = id > 0 ? btf__type_by_id(btf, (__u32)id) : NULL;
	/* typedef -> pointer -> function prototype (void *__data, the tracepoint's arguments) */
	if (t)
		t = btf__type_by_id(btf, t->type);
	if (t && btf_is_ptr(t))
		t = btf__type_by_id(btf, t->type);
	if (t && btf_is_func_proto(t) && btf_vlen(t) >= 1)
		n = btf_vlen(t) - 1;
	else if (t)
		n = -EPROTO;
	btf__free(btf);
	return n;
}

int mp_kernel_probe_prog(unsigned int attach_type)
{
	struct bpf_insn insns[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = attach_type);
	int fd = bpf_prog_load(BPF_PROG_TYPE_KPROBE, "mp_link_probe", "GPL", insns, 2, &opts);

	return fd < 0 ? -errno : fd;
}

#ifndef CAP_PERFMON
#define CAP_PERFMON	38
#endif
#ifndef CAP_BPF
#define CAP_BPF		39
#endif

bool mp_kernel_bpf_capable(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];
	uint64_t eff;

	if (syscall(SYS_capget, &h, d))
		return geteuid() == 0;
	eff = (uint64_t)d[1].effective << 32 | d[0].effective;
	return (eff & (1ULL << CAP_SYS_ADMIN)) ||
	       ((eff & (1ULL << CAP_BPF)) && (eff & (1ULL << CAP_PERFMON)));
}

/* ---- libbpf's messages while loading ---- */

static char *load_log;
static size_t load_log_len;
static bool load_log_on;

void mp_load_log__begin(void)
{
	free(load_log);
	load_log = NULL;
	load_log_len = 0;
	load_log_on = true;
}

bool mp_load_log__active(void)
{
	return load_log_on;
}

#define MP_LOAD_LOG_MAX	(1U << 20)	/* the verifier's log can be megabytes; its end matters */

void mp_load_log__add(const char *fmt, va_list ap)
{
	char *s = NULL, *n;
	int len = vasprintf(&s, fmt, ap);

	if (len <= 0)
		return;
	/* Keep the end: drop the oldest half when full. */
	if (load_log_len + (size_t)len > MP_LOAD_LOG_MAX && load_log_len > MP_LOAD_LOG_MAX / 2) {
		size_t keep = MP_LOAD_LOG_MAX / 2;

		memmove(load_log, load_log + load_log_len - keep, keep);
		load_log_len = keep;
	}
	n = realloc(load_log, load_log_len + (size_t)len + 1);
	if (n) {
		memcpy(n + load_log_len, s, (size_t)len + 1);
		load_log = n;
		load_log_len += (size_t)len;
	}
	free(s);
}

char *mp_load_log__end(void)
{
	char *s = load_log;

	load_log = NULL;
	load_log_len = 0;
	load_log_on = false;
	return s;
}

/* ---- explaining a failure ---- */

#define BEGIN_LOG	"-- BEGIN PROG LOAD LOG --\n"
#define END_LOG		"-- END PROG LOAD LOG --"

/* The program a libbpf line "prog 'NAME': ..." names, into @out; false if none. */
static bool prog_named(const char *line, const char *end, char *out, size_t len)
{
	const char *p = memmem(line, (size_t)(end - line), "prog '", 6), *q;

	if (!p)
		return false;
	p += 6;
	q = memchr(p, '\'', (size_t)(end - p));
	if (!q || q == p)
		return false;
	snprintf(out, len, "%.*s", (int)(q - p), p);
	return true;
}

/* Verifier lines that are statistics, not the reason. */
static bool verifier_noise(const char *l, size_t n)
{
	static const char *const skip[] = { "processed ", "verification time", "stack depth",
					     "max_states_per_insn", "peak_states" };

	while (n && (l[n - 1] == ' ' || l[n - 1] == '\r'))
		n--;
	if (!n)
		return true;
	for (size_t i = 0; i < sizeof(skip) / sizeof(skip[0]); i++)
		if (n >= strlen(skip[i]) && !strncmp(l, skip[i], strlen(skip[i])))
			return true;
	return false;
}

/* The last (up to 3) lines of the verifier log [v, e) that say something, joined by "; ". */
static void verifier_reason(const char *v, const char *e, char *out, size_t len)
{
	const char *lines[3], *ends[3];
	int n = 0;
	size_t o = 0;

	while (e > v && n < 3) {
		const char *le = e, *ls;

		while (le > v && le[-1] == '\n')
			le--;
		ls = le;
		while (ls > v && ls[-1] != '\n')
			ls--;
		if (ls == le)
			break;
		if (!verifier_noise(ls, (size_t)(le - ls))) {
			lines[n] = ls;
			ends[n++] = le;
		}
		e = ls;
	}
	out[0] = 0;
	for (int i = n - 1; i >= 0 && o + 1 < len; i--) {
		int w = snprintf(out + o, len - o, "%s%.*s", o ? "; " : "",
				 (int)(ends[i] - lines[i]), lines[i]);

		if (w < 0)
			break;
		o += (size_t)w;
	}
}

/* libbpf lines that only repeat that something failed. */
static bool generic_line(const char *l, const char *e)
{
	static const char *const gen[] = { "failed to load object", "failed to load BPF skeleton",
					   "failed to load: ", "BPF program load failed",
					   "permission error while running as root", END_LOG };
	size_t n = (size_t)(e - l);

	for (size_t i = 0; i < sizeof(gen) / sizeof(gen[0]); i++)
		if (memmem(l, n, gen[i], strlen(gen[i])))
			return true;
	return false;
}

const char *mp_load_explain(const char *log, int err, bool capable, char *why, size_t len)
{
	char prog[64] = "", reason[768] = "", detail[384] = "";
	const char *b = log ? strstr(log, BEGIN_LOG) : NULL;

	if (err < 0)
		err = -err;
	if (b) {
		const char *ls = b;
		const char *e = strstr(b, END_LOG);

		/* the line holding BEGIN names the program */
		while (ls > log && ls[-1] != '\n')
			ls--;
		prog_named(ls, b, prog, sizeof(prog));
		b += strlen(BEGIN_LOG);
		verifier_reason(b, e ? e : b + strlen(b), reason, sizeof(reason));
	}
	if (reason[0]) {
		if (prog[0])
			snprintf(why, len, "the kernel's verifier rejected program '%s': %s", prog,
				 reason);
		else
			snprintf(why, len, "the kernel's verifier rejected a program: %s", reason);
		return why;
	}
	/* No verifier log: the first libbpf warning that says something specific. */
	for (const char *l = log; l && *l;) {
		const char *e = strchrnul(l, '\n');

		if (!prog[0])
			prog_named(l, e, prog, sizeof(prog));
		if (!detail[0] && !generic_line(l, e)) {
			const char *s = l;

			if (!strncmp(s, "libbpf: ", 8))
				s += 8;
			if (e > s)
				snprintf(detail, sizeof(detail), "%.*s", (int)(e - s), s);
		}
		l = *e ? e + 1 : e;
	}
	if ((err == EPERM || err == EACCES) && !capable) {
		snprintf(why, len, "%s: loading BPF programs and opening uprobes needs root, or "
			 "CAP_BPF and CAP_PERFMON", strerror(err));
		return why;
	}
	snprintf(why, len, "%s%s%s%s%s%s", prog[0] ? "program '" : "", prog,
		 prog[0] ? "' failed to load: " : "",
		 err == EACCES ? "refused by the kernel (EACCES)" : strerror(err),
		 detail[0] ? ": " : "", detail);
	return why;
}
