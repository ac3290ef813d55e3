// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * daemon/probe/bpf_kernel.c: load failures explained from libbpf's messages as libbpf 1.1 prints
 * them (the verifier's log of Debian 12's 6.1 rejecting the two-argument exit program, a
 * missing kfunc, a missing capability), and the tracepoint prototype probe on this kernel's BTF.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>

#include "daemon/probe/bpf_kernel.h"
#include "test.h"

/* What libbpf 1.1 printed on 6.1.0-57-amd64 for mp_exit (reading group_dead). */
static const char log_61[] =
	"libbpf: prog 'mp_exit': BPF program load failed: Permission denied\n"
	"libbpf: prog 'mp_exit': -- BEGIN PROG LOAD LOG --\n"
	"reg type unsupported for arg#0 function mp_exit#123\n"
	"0: R1=ctx(off=0,imm=0) R10=fp0\n"
	"; int BPF_PROG(mp_exit, struct task_struct *p, bool group_dead)\n"
	"0: (79) r7 = *(u64 *)(r1 +0)\n"
	"func 'sched_process_exit' doesn't have 2-th argument\n"
	"invalid bpf_context access off=8 size=8\n"
	"processed 1 insns (limit 1000000) max_states_per_insn 0 total_states 0 peak_states 0 "
	"mark_read 0\n"
	"-- END PROG LOAD LOG --\n"
	"libbpf: prog 'mp_exit': failed to load: -13\n"
	"libbpf: failed to load object 'memprof_bpf'\n"
	"libbpf: failed to load BPF skeleton 'memprof_bpf': -13\n";

static bool test_verifier_reason(void)
{
	char why[512];

	mp_load_explain(log_61, -EACCES, true, why, sizeof(why));
	ASSERT_STREQ(why, "the kernel's verifier rejected program 'mp_exit': 0: (79) r7 = *(u64 *)"
		     "(r1 +0); func 'sched_process_exit' doesn't have 2-th argument; invalid "
		     "bpf_context access off=8 size=8", "6.1 exit");
	/* a verifier log is never called a permission problem, capable or not */
	mp_load_explain(log_61, -EACCES, false, why, sizeof(why));
	ASSERT_TRUE(!strstr(why, "ermission"), "no permission");
	return true;
}

static bool test_no_verifier_log(void)
{
	static const char kfunc[] =
		"libbpf: extern (func ksym) 'bpf_session_is_return': not found in kernel or module "
		"BTFs\n"
		"libbpf: failed to load object 'memprof_bpf'\n"
		"libbpf: failed to load BPF skeleton 'memprof_bpf': -22\n";
	static const char perm[] =
		"libbpf: prog 'mp_entry': BPF program load failed: Operation not permitted\n"
		"libbpf: prog 'mp_entry': failed to load: -1\n"
		"libbpf: failed to load object 'memprof_bpf'\n";
	char why[512];

	mp_load_explain(kfunc, -EINVAL, true, why, sizeof(why));
	ASSERT_STREQ(why, "Invalid argument: extern (func ksym) 'bpf_session_is_return': not "
		     "found in kernel or module BTFs", "kfunc");
	mp_load_explain(perm, -EPERM, false, why, sizeof(why));
	ASSERT_STREQ(why, "Operation not permitted: loading BPF programs and opening uprobes "
		     "needs root, or CAP_BPF and CAP_PERFMON", "no capability");
	/* capable: not a capability problem, so no advice about permissions */
	mp_load_explain(perm, -EPERM, true, why, sizeof(why));
	ASSERT_STREQ(why, "program 'mp_entry' failed to load: Operation not permitted", "capable");
	mp_load_explain(NULL, -EACCES, true, why, sizeof(why));
	ASSERT_TRUE(!strstr(why, "ermission"), "EACCES while capable");
	return true;
}

static void add(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	mp_load_log__add(fmt, ap);
	va_end(ap);
}

static bool test_capture(void)
{
	char *log, why[512];

	mp_load_log__begin();
	ASSERT_TRUE(mp_load_log__active(), "active");
	add("libbpf: prog '%s': BPF program load failed: %s\n", "mp_x", "Invalid argument");
	add("libbpf: prog '%s': -- BEGIN PROG LOAD LOG --\n%s-- END PROG LOAD LOG --\n", "mp_x",
	    "R1 invalid mem access 'scalar'\nprocessed 3 insns\n");
	log = mp_load_log__end();
	ASSERT_TRUE(!mp_load_log__active(), "stopped");
	ASSERT_TRUE(log != NULL, "collected");
	mp_load_explain(log, -EINVAL, true, why, sizeof(why));
	ASSERT_STREQ(why, "the kernel's verifier rejected program 'mp_x': R1 invalid mem access "
		     "'scalar'", "captured");
	free(log);
	return true;
}

/* This kernel's sched_process_exit (6.18) passes (task, group_dead); fork (parent, child). */
static bool test_tp_nargs(void)
{
	int n = mp_kernel_tp_nargs("sched_process_fork");

	if (n == -EOPNOTSUPP) {
		printf("SKIP: test_tp_nargs (no kernel BTF)\n");
		return true;
	}
	ASSERT_EQ(n, 2, "sched_process_fork");
	ASSERT_EQ(mp_kernel_tp_nargs("sched_process_exec"), 3, "sched_process_exec");
	ASSERT_TRUE(mp_kernel_tp_nargs("sched_process_exit") >= 1, "sched_process_exit");
	ASSERT_EQ(mp_kernel_tp_nargs("no_such_tracepoint_here"), -ENOENT, "missing");
	return true;
}

int main(void)
{
	RUN(test_verifier_reason);
	RUN(test_no_verifier_log);
	RUN(test_capture);
	RUN(test_tp_nargs);
	return test_exit();
}
