/* SPDX-License-Identifier: (LGPL-2.1-or-later OR BSD-2-Clause) */
/*
 * The process lifecycle tracepoints: fork (a followed child inherits its parent's
 * configuration), exec (a new image, or a process joining a watched executable or cgroup),
 * exit, and cgroup moves and creation (targets), each reported to the daemon as a process
 * record; and the program the loader uses to test that the kernel rejects a bad prototype.
 * Included once, by memprof.bpf.c, after the maps and the helpers it uses: the programs are
 * one BPF object and one skeleton.
 */

/* Targets (bpf/memprof.h, MP_MAX_WATCHES): executables and v2 cgroups, each a profile's. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MP_MAX_WATCHES);
	__type(key, __u64);
	__type(value, __u32);
} exewatch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MP_MAX_WATCHES);
	__type(key, __u64);
	__type(value, __u32);
} cgwatch SEC(".maps");

/* Entries in exewatch and cgwatch, kept by the loader: 0 spares an exec, a cgroup move and a
 * mkdir every lookup. */
__u32 mp_exe_watches;
__u32 mp_cg_watches;

/* The profile watching @cg or one of its ancestors (up to MP_CG_MAX_DEPTH levels), or 0. A
 * cgroup's parent is its self css' parent: struct cgroup begins with that css. */
static __always_inline __u32 cg_watched(struct cgroup *cg)
{
	for (int i = 0; i < MP_CG_MAX_DEPTH && cg; i++) {
		__u64 id = BPF_CORE_READ(cg, kn, id);
		__u32 *profile = bpf_map_lookup_elem(&cgwatch, &id);

		if (profile)
			return *profile;
		cg = (struct cgroup *)BPF_CORE_READ(cg, self.parent);
	}
	return 0;
}

/* The profile that watches the image @bprm runs (its file's inode number) or the cgroup @p
 * runs in, or 0; @how says which. */
static __always_inline __u32 exec_watched(struct task_struct *p, struct linux_binprm *bprm,
					  __u32 *how)
{
	__u32 *profile;
	__u64 ino;

	if (mp_exe_watches) {
		ino = BPF_CORE_READ(bprm, file, f_inode, i_ino);
		profile = bpf_map_lookup_elem(&exewatch, &ino);
		if (profile) {
			*how = MP_JOIN_EXEC_EXE;
			return *profile;
		}
	}
	if (mp_cg_watches) {
		*how = MP_JOIN_EXEC_CGROUP;
		return cg_watched(BPF_CORE_READ(p, cgroups, dfl_cgrp));
	}
	return 0;
}

/* A task moved into a cgroup of the v2 hierarchy (the default one, whose root the task's
 * default cgroup shares; a v1 hierarchy's ids are another numbering) under a watched one. */
SEC("tp_btf/cgroup_attach_task")
int BPF_PROG(mp_cg_attach, struct cgroup *dst, const char *path, struct task_struct *task,
	     bool threadgroup)
{
	__u32 tgid, profile;

	if (!mp_cg_watches)
		return 0;
	if (BPF_CORE_READ(dst, root) != BPF_CORE_READ(task, cgroups, dfl_cgrp, root))
		return 0;
	tgid = mp_task_ids(task) >> 32;
	if (!tgid || bpf_map_lookup_elem(&procs, &tgid))
		return 0;
	profile = cg_watched(dst);
	if (!profile)
		return 0;
	return emit_proc(MP_EV_JOIN, tgid, tgid, profile, 0, MP_JOIN_MOVED);
}

/* A cgroup made in the v2 hierarchy while cgroups are watched: the daemon looks again at the
 * paths it watches (a unit that restarts gets a new cgroup of the same path). */
SEC("tp_btf/cgroup_mkdir")
int BPF_PROG(mp_cg_mkdir, struct cgroup *cg, const char *path)
{
	struct task_struct *cur = (struct task_struct *)bpf_get_current_task();

	if (!mp_cg_watches)
		return 0;
	if (BPF_CORE_READ(cg, root) != BPF_CORE_READ(cur, cgroups, dfl_cgrp, root))
		return 0;
	return emit_proc(MP_EV_CGROUP_NEW, 0, 0, 0, 0, 0);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(mp_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid, ctgid = child->tgid, ptid = parent->pid;
	struct mp_proc_cfg *cfg, ccfg;
	__u64 now, ids;

	if (ptgid == ctgid)
		return 0; /* a new thread: joins through its own task storage */
	if (mp_pidns_nested) { /* the daemon's pids (0: a task it cannot see) */
		ids = mp_task_ids(parent);
		ptgid = ids >> 32;
		ptid = (__u32)ids;
	}
	cfg = bpf_map_lookup_elem(&procs, &ptgid);
	if (!cfg || !(cfg->flags & MP_PROC_FOLLOW_FORKS))
		return 0;
	if (mp_pidns_nested) {
		ctgid = mp_task_ids(child) >> 32;
		if (!ctgid)
			return 0;
	}
	ccfg = *cfg;
	if (bpf_map_update_elem(&procs, &ctgid, &ccfg, BPF_ANY)) {
		stat_inc(MP_STAT_PROCS_FULL);
		return 0;
	}
	__sync_fetch_and_add(&mp_procs_epoch, 1);	/* thread_cfg() */
	now = bpf_ktime_get_ns();
	bpf_map_update_elem(&pstate, &ctgid, &now, BPF_ANY);
	return emit_proc(MP_EV_FORK, ptgid, ptid, ccfg.profile, ctgid, 0);
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(mp_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u64 ids = mp_task_ids(p);
	__u32 tgid = ids >> 32, other = (__u32)old_pid != p->pid ? (__u32)old_pid : 0;
	struct mp_proc_cfg *cfg = bpf_map_lookup_elem(&procs, &tgid);
	struct tstate *st = bpf_task_storage_get(&tstates, p, 0, 0);
	struct mp_proc_cfg ccfg;
	__u64 now, secure;

	/* A non-leader thread took the leader's tid: forget its ids (mp_thread_ids()). No
	 * allocator call of the old image is in progress any more. */
	if (st) {
		st->ns_ids = 0;
		st->depth = 0;
	}
	/* old_pid is its global tid, whose struct pid is gone: unknown in our namespace */
	if (mp_pidns_nested)
		other = 0;
	if (!cfg) {
		__u32 how = 0, profile = 0;

		if (mp_exe_watches || mp_cg_watches)
			profile = exec_watched(p, bprm, &how);
		if (profile && tgid)
			return emit_proc(MP_EV_JOIN, tgid, (__u32)ids, profile, 0, how);
		return 0;
	}
	/* An image with more privileges than its profile's owner may see (ptrace's rule: a
	 * set-id or file-capability program, AT_SECURE): not one of its allocations is sampled,
	 * from here on, until the daemon has read this record and detached the process. */
	secure = BPF_CORE_READ_BITFIELD_PROBED(bprm, secureexec);
	if (secure && !(cfg->flags & MP_PROC_PRIVILEGED)) {
		ccfg = *cfg;
		ccfg.flags &= ~(MP_PROC_SAMPLING | MP_PROC_FOLLOW_FORKS);
		ccfg.flags |= MP_PROC_DETACHED;
		bpf_map_update_elem(&procs, &tgid, &ccfg, BPF_EXIST);
		__sync_fetch_and_add(&mp_procs_epoch, 1);	/* thread_cfg() */
	}
	/* A new image: sampled entries of the old one no longer match frees. The event's time is
	 * the new incarnation, so the loader purges entries older than it. */
	now = bpf_ktime_get_ns();
	bpf_map_update_elem(&pstate, &tgid, &now, BPF_ANY);
	return emit_proc(MP_EV_EXEC, tgid, (__u32)ids, cfg->profile, other,
			 secure ? MP_EXEC_F_SECURE : 0);
}

/*
 * Thread and process exit. @group_dead: the tracepoint's own argument (Linux 6.16+ pass it), or
 * -1 on kernels whose sched_process_exit passes the task only (Debian 12's 6.1): do_exit() has
 * already decremented signal->live then, so the group is dead when it reads 0. Two threads
 * exiting at once can both read 0 (a joined thread is still in do_exit() when its joiner ends
 * the process); only the one that removes the procs entry reports the exit, and the other's
 * thread exit is not reported (its blocks are the process' anyway, and it is ending).
 */
static __always_inline int exit_common(struct task_struct *p, int group_dead)
{
	__u64 ids = mp_task_ids(p);
	__u32 tgid = ids >> 32, tid = (__u32)ids, profile, code;
	struct mp_proc_cfg *cfg = bpf_map_lookup_elem(&procs, &tgid);
	struct tstate *st = bpf_task_storage_get(&tstates, p, 0, 0);
	unsigned int sflags;
	bool known = group_dead >= 0;

	if (st && cfg && (st->hit_entries | st->hit_returns))
		hits_flush(st, tgid);	/* the thread's last probe hits (hits_count()) */
	if (!cfg)
		return 0;
	profile = cfg->profile;
	if (!known)
		group_dead = BPF_CORE_READ(p, signal, live.counter) == 0;
	if (!group_dead)
		return emit_proc(MP_EV_THREAD_EXIT, tgid, tid, profile, 0, 0);
	/* wait(2)-style status: the group's exit code when the group was killed or exit_group'd */
	sflags = BPF_CORE_READ(p, signal, flags);
	code = (sflags & 0x00000004 /* SIGNAL_GROUP_EXIT */) ? BPF_CORE_READ(p, signal,
									       group_exit_code)
							       : p->exit_code;
	if (bpf_map_delete_elem(&procs, &tgid) && !known)
		return 0;	/* another thread of the group reported it */
	bpf_map_delete_elem(&pstate, &tgid);
	return emit_proc(MP_EV_EXIT, tgid, tid, profile, 0, code);
}

/*
 * Two variants of the exit program; the loader loads the one the running kernel's
 * sched_process_exit prototype (its BTF) has arguments for, and only that one.
 */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(mp_exit, struct task_struct *p, bool group_dead)
{
	return exit_common(p, group_dead);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(mp_exit_task, struct task_struct *p)
{
	return exit_common(p, -1);
}

/*
 * Test-only (MP_BPF_TEST_REJECT=1 in the loader's environment): reads an argument no kernel's
 * sched_process_exit has, so that the verifier rejects it, as 6.1 rejected mp_exit. It proves
 * that a load failure names the program and the verifier's reason (tests/bpf/kernel-mechanisms.sh).
 */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(mp_test_reject, struct task_struct *p, bool group_dead, long a2, long a3, long a4)
{
	return a4 == 1;
}
