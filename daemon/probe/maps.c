// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The BPF maps user space writes and reads: "procs" (who is profiled, how), the sampled-block
 * table and its filter (purged after exec and exit), the per-CPU counters "stats" and the
 * per-process probe hits "phits", and the targets' "exewatch" and "cgwatch".
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/bpf.h>

#include "daemon/probe/loader_internal.h"

/* Delete one entry of the sampled table (it is counted in the filter: bpf/memprof.h). */
static bool sampled_delete(struct mp_bpf *b, int fd, const struct mp_sampled_key *key)
{
	if (bpf_map_delete_elem(fd, key))
		return false;
	__atomic_fetch_sub(&b->skel->bss->mp_sfilter[MP_SFILTER_SLOT(key->tgid, key->addr)], 1,
			   __ATOMIC_SEQ_CST);
	return true;
}

/*
 * Delete process @pid's entries of the sampled table that are older than @before_ns (the
 * process exited or exec'd at that time; later entries belong to its next image). The walk
 * collects them and deletes them after it: deleting the key a walk stands on sends the next
 * step back to the first bucket, and a walk restarted at every deletion costs the table's
 * size per entry (a process that exits with 70,000 sampled blocks live took 30 s).
 */
void sampled_purge(struct mp_bpf *b, pid_t pid, uint64_t before_ns)
{
	int fd = bpf_map__fd(b->skel->maps.sampled);
	struct mp_sampled_key key, next, *prev = NULL, *del = NULL;
	struct mp_sampled_val val;
	size_t ndel = 0, cap = 0;
	uint64_t n = 0;

	while (!bpf_map_get_next_key(fd, prev, &next)) {
		key = next;
		prev = &key;
		if (key.tgid != (uint32_t)pid || bpf_map_lookup_elem(fd, &key, &val) ||
		    val.incarnation >= before_ns)
			continue;
		if (ndel == cap) {
			size_t ncap = cap ? 2 * cap : 1024;
			struct mp_sampled_key *d = realloc(del, ncap * sizeof(*d));

			if (!d) {
				/* out of memory: this one now, and the walk from the start */
				n += sampled_delete(b, fd, &key);
				prev = NULL;
				continue;
			}
			del = d;
			cap = ncap;
		}
		del[ndel++] = key;
	}
	for (size_t i = 0; i < ndel; i++)
		n += sampled_delete(b, fd, &del[i]);
	free(del);
	b->counters.purged += n;
}

int procs_fd(struct mp_bpf *b)
{
	return bpf_map__fd(b->skel->maps.procs);
}

/* After each write of "procs": threads drop their copies of the entries (thread_cfg()). */
void procs_changed(struct mp_bpf *b)
{
	__atomic_fetch_add(&b->skel->bss->mp_procs_epoch, 1, __ATOMIC_SEQ_CST);
}

/* Set or clear a flag the loader owns (MP_PROC_PRELOAD, MP_PROC_NO_MMAP) in @pid's "procs"
 * entry, if it has one. */
void proc_flag(struct mp_bpf *b, pid_t pid, uint32_t flag, bool on)
{
	struct mp_proc_cfg cfg;
	uint32_t key = (uint32_t)pid;

	if (bpf_map_lookup_elem(procs_fd(b), &key, &cfg))
		return;
	cfg.flags = on ? cfg.flags | flag : cfg.flags & ~flag;
	if (!bpf_map_update_elem(procs_fd(b), &key, &cfg, BPF_EXIST))
		procs_changed(b);
}

int mp_bpf__proc_set(struct mp_bpf *b, pid_t pid, const struct mp_proc_cfg *cfg)
{
	uint32_t key = pid;
	struct mp_proc_cfg c;
	struct target *t;

	if (pid <= 0 || !cfg || cfg->profile == 0 || cfg->max_frames > MP_MAX_STACK ||
	    (!(cfg->flags & MP_PROC_RATE_ONE) && cfg->gap_k == 0))
		return -EINVAL;
	t = target_find(b, pid);
	c = *cfg;
	c.flags &= ~(MP_PROC_PRELOAD | MP_PROC_NO_MMAP);
	if (t && t->preload)
		c.flags |= MP_PROC_PRELOAD;
	if (t && t->go)
		c.flags |= MP_PROC_NO_MMAP;
	if (bpf_map_update_elem(procs_fd(b), &key, &c, BPF_ANY))
		return -errno;
	procs_changed(b);
	if (t && t->preload) {
		/* profiled through libmemprof-preload: its config block follows (stop) */
		int err = pl_sync(b, t, cfg, NULL);

		if (err) {
			logf_(b, 3, "Failed to configure libmemprof-preload in process %d: %s", pid,
			      strerror(-err));
			return err;
		}
	}
	return 0;
}

int mp_bpf__proc_get(struct mp_bpf *b, pid_t pid, struct mp_proc_cfg *cfg)
{
	uint32_t key = pid;

	if (bpf_map_lookup_elem(procs_fd(b), &key, cfg))
		return -errno;
	return 0;
}

int mp_bpf__proc_del(struct mp_bpf *b, pid_t pid)
{
	uint32_t key = pid;

	if (bpf_map_delete_elem(procs_fd(b), &key) && errno != ENOENT)
		return -errno;
	procs_changed(b);
	return 0;
}

int mp_bpf__stats(struct mp_bpf *b, uint64_t out[MP_STAT__MAX])
{
	int ncpu = libbpf_num_possible_cpus(), fd = bpf_map__fd(b->skel->maps.stats);
	uint64_t *vals;

	if (ncpu <= 0)
		return ncpu ? ncpu : -EINVAL;
	vals = calloc((size_t)ncpu, sizeof(*vals));
	if (!vals)
		return -ENOMEM;
	for (uint32_t i = 0; i < MP_STAT__MAX; i++) {
		out[i] = 0;
		if (bpf_map_lookup_elem(fd, &i, vals)) {
			int err = -errno;

			free(vals);
			return err;
		}
		for (int c = 0; c < ncpu; c++)
			out[i] += vals[c];
	}
	free(vals);
	return 0;
}

int mp_bpf__proc_hits(struct mp_bpf *b, pid_t pid, struct mp_proc_hits *out)
{
	int ncpu = libbpf_num_possible_cpus(), fd = bpf_map__fd(b->skel->maps.phits);
	struct mp_proc_hits *vals;
	uint32_t key = pid;

	memset(out, 0, sizeof(*out));
	if (ncpu <= 0)
		return ncpu ? ncpu : -EINVAL;
	vals = calloc((size_t)ncpu, sizeof(*vals));
	if (!vals)
		return -ENOMEM;
	if (bpf_map_lookup_elem(fd, &key, vals)) {
		int err = errno == ENOENT ? 0 : -errno; /* no hit yet */

		free(vals);
		return err;
	}
	for (int c = 0; c < ncpu; c++) {
		out->entries += vals[c].entries;
		out->returns += vals[c].returns;
	}
	free(vals);
	return 0;
}

int mp_bpf__proc_hits_del(struct mp_bpf *b, pid_t pid)
{
	uint32_t key = pid;

	if (bpf_map_delete_elem(bpf_map__fd(b->skel->maps.phits), &key) && errno != ENOENT)
		return -errno;
	return 0;
}

/*
 * Watch (@profile > 0) or stop watching (0) a target: an executable (@kind MP_WATCH_EXE, @a its
 * device as stat(2) gives it, @b its inode) or a v2 cgroup (MP_WATCH_CGROUP, @a its id). The
 * counters BPF tests first follow the maps' contents.
 */
int mp_bpf__watch(struct mp_bpf *b, enum mp_watch_kind kind, uint64_t a, uint64_t bb,
		  uint32_t profile)
{
	bool exe = kind == MP_WATCH_EXE;
	uint32_t *count = exe ? &b->skel->bss->mp_exe_watches : &b->skel->bss->mp_cg_watches;
	int fd = exe ? bpf_map__fd(b->skel->maps.exewatch) : bpf_map__fd(b->skel->maps.cgwatch);
	const void *key = exe ? (const void *)&bb : (const void *)&a;
	uint32_t cur;
	bool had;

	if (kind != MP_WATCH_EXE && kind != MP_WATCH_CGROUP)
		return -EINVAL;
	if (!exe && !b->cg_links[1])
		return -EOPNOTSUPP;
	had = bpf_map_lookup_elem(fd, key, &cur) == 0;
	if (profile) {
		if (had && cur != profile)
			return -EBUSY;
		if (bpf_map_update_elem(fd, key, &profile, BPF_ANY))
			return -errno;
		if (!had)
			__atomic_fetch_add(count, 1, __ATOMIC_SEQ_CST);
		return 0;
	}
	if (!had)
		return -ENOENT;
	if (bpf_map_delete_elem(fd, key))
		return -errno;
	__atomic_fetch_sub(count, 1, __ATOMIC_SEQ_CST);
	return 0;
}
