/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * What the running kernel offers the loader (daemon/probe/load.c), probed, never assumed from
 * its version, and why a load failed, in words. Kept apart from the loader so that the parsing
 * of libbpf's log is unit-tested (tests/unit/test_bpf_kernel.c) without BPF.
 *
 * Owner: the BPF/probes component.
 */
#ifndef MEMPROFD_BPF_KERNEL_H
#define MEMPROFD_BPF_KERNEL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

/*
 * Arguments the running kernel's tracepoint @tp passes to a tp_btf program, from the kernel's
 * BTF: the prototype behind its typedef btf_trace_<tp>, less the tracepoint's private data
 * pointer. 6.1's sched_process_exit passes 1 (the task), 6.16+'s 2 (task, group_dead).
 * Returns the count or -errno (-ENOENT: no such tracepoint, -EOPNOTSUPP: no kernel BTF).
 */
int mp_kernel_tp_nargs(const char *tp);

/* A minimal program of type kprobe (uprobes are kprobe programs) that returns 0, loaded with
 * expected attach type @attach_type, to try a link kind on. Returns its fd or -errno. */
int mp_kernel_probe_prog(unsigned int attach_type);

/* Whether this process may load BPF programs and open uprobe perf events as far as its
 * capabilities go (CAP_SYS_ADMIN, or CAP_BPF and CAP_PERFMON, effective). */
bool mp_kernel_bpf_capable(void);

/*
 * Collect libbpf's messages while the programs load (the loader's libbpf print callback feeds
 * mp_load_log__add() between begin and end), then explain a failure from them.
 */
void mp_load_log__begin(void);
bool mp_load_log__active(void);
void mp_load_log__add(const char *fmt, va_list ap);
/* Stop collecting; returns what was collected (the caller frees it), never NULL on success of
 * the allocation, NULL when nothing was. */
char *mp_load_log__end(void);

/*
 * One sentence saying why loading failed with -@err, from libbpf's messages @log (may be NULL):
 * the program libbpf named and the last lines of the verifier's log (its reason), or the last
 * libbpf warning that says something specific. "Permission" is said only when @err is EPERM
 * or EACCES, no verifier log explains it and @capable is false. Returns @why.
 */
const char *mp_load_explain(const char *log, int err, bool capable, char *why, size_t len);

#endif
