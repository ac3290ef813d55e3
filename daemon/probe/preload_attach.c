// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libmemprof-preload, the cooperative fast path.
 * A process that maps libmemprof-preload.so when its mode is decided (first attach, exec) is
 * profiled through the library's USDT probes instead of allocator uprobes: the library samples
 * in-process and traps only on samples (<memprof/preload.h>). Its configuration block mirrors
 * the process' "procs" entry: rate, profile, and the sampling flag, written with
 * process_vm_writev() before the probes are attached (attaching raises the semaphore that arms
 * the library), and again whenever mp_bpf__proc_set() changes the entry (stop). Each write
 * bumps the generation; "pltargets" tells the USDT programs which generation is current and
 * where the library's frames are. A library dlopen'd later interposes nothing (the allocator
 * symbols are bound already), so dlopen never changes a process' mode; exec may.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include <gelf.h>
#include <libelf.h>
#include <bpf/bpf.h>

#include <memprof/preload.h>

#include "daemon/probe/elf_syms.h"
#include "daemon/probe/loader_internal.h"
#include "daemon/probe/target_open.h"

#define PL_LIB_PREFIX	"libmemprof-preload"
#define PL_CFG_SYM	"memprof_preload_config"

struct pl_found {
	char path[PATH_MAX + 64];	/* /proc/PID/root/<file> */
	char file[PATH_MAX];		/* <file>, in the process' root */
	pid_t pid;
	uint64_t lo, hi;		/* span of the library's mappings */
	uint64_t base;			/* start of its mapping at file offset 0 */
	dev_t dev;
	ino_t ino;
};

/* Find the library in @pid's mappings: 0, -ENOENT (not mapped), -ESRCH, -errno. */
static int pl_find(pid_t pid, struct pl_found *pf)
{
	char maps[64], line[PATH_MAX + 256], file[PATH_MAX] = "";
	bool found = false;
	FILE *f;

	snprintf(maps, sizeof(maps), "/proc/%d/maps", pid);
	f = fopen(maps, "re");
	if (!f)
		return errno == ENOENT ? -ESRCH : -errno;
	memset(pf, 0, sizeof(*pf));
	while (fgets(line, sizeof(line), f)) {
		unsigned long long lo, hi, off, ino;
		const char *name, *base;
		int pos = 0;

		if (sscanf(line, "%llx-%llx %*s %llx %*x:%*x %llu %n", &lo, &hi, &off, &ino,
			   &pos) < 4 || !pos || line[pos] != '/' || ino == 0)
			continue;
		name = line + pos;
		line[strcspn(line, "\n")] = 0;
		base = strrchr(name, '/') + 1;
		if (strncmp(base, PL_LIB_PREFIX, strlen(PL_LIB_PREFIX)) ||
		    strstr(name, " (deleted)"))
			continue;
		if (!found) {
			snprintf(file, sizeof(file), "%s", name);
			pf->lo = lo;
			pf->hi = hi;
			pf->ino = (ino_t)ino;
			found = true;
		} else if (strcmp(file, name)) {
			continue;	/* a second copy: the first one mapped interposes */
		}
		if (lo < pf->lo)
			pf->lo = lo;
		if (hi > pf->hi)
			pf->hi = hi;
		if (off == 0 && !pf->base)
			pf->base = lo;
	}
	fclose(f);
	if (!found || !pf->base)
		return -ENOENT;
	snprintf(pf->path, sizeof(pf->path), "/proc/%d/root%s", pid, file);
	snprintf(pf->file, sizeof(pf->file), "%s", file);
	pf->pid = pid;
	return 0;
}

/* The run-time address of memprof_preload_config in the library @pf (@elf). */
static int pl_cfg_addr(const struct pl_found *pf, Elf *elf, uint64_t *addr)
{
	uint64_t vaddr0 = UINT64_MAX;
	GElf_Sym sym;
	size_t nph;

	if (elf_getphdrnum(elf, &nph))
		return -ENOENT;
	for (size_t i = 0; i < nph; i++) {
		GElf_Phdr ph;

		if (gelf_getphdr(elf, (int)i, &ph) && ph.p_type == PT_LOAD && ph.p_offset == 0)
			vaddr0 = ph.p_vaddr & ~0xfffull;
	}
	if (vaddr0 == UINT64_MAX ||
	    mp_elf_find_sym(elf, SHT_DYNSYM, STT_OBJECT, PL_CFG_SYM, &sym) || !sym.st_value)
		return -ENOENT;
	*addr = pf->base - vaddr0 + sym.st_value;
	return 0;
}

/*
 * What the loader needs from the library file @pf: its config block's run-time address and
 * its USDT probe sites, memprof:<names[i]> into sites[i] (nsites[i] of them, 0 when the
 * library lacks that probe). The probes are attached as plain uprobes with their semaphores
 * (pl_attach_probe()), not through libbpf's USDT support: its bookkeeping of spec ids is
 * shared by every USDT link of the object, and links are destroyed by concurrent threads
 * (links_destroy()) while others are attached; the programs read their arguments from fixed
 * registers and need no spec.
 */
static int pl_read_lib(struct mp_bpf *b, const struct pl_found *pf, const char *const names[4],
		       uint64_t *cfg_addr, struct mp_usdt_site sites[4][MP_USDT_MAX_SITES],
		       int nsites[4])
{
	int fd, r;
	Elf *elf;

	fd = mp_target_open(pf->pid, pf->file, mp_same_inode, &pf->ino);	/* the mapped file */
	if (fd < 0)
		return fd;
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF) {
		r = -EINVAL;
		logf_(b, 3, "'%s' is not an ELF object", pf->path);
	} else if ((r = pl_cfg_addr(pf, elf, cfg_addr)) != 0) {
		logf_(b, 4, "'%s' has no usable " PL_CFG_SYM " symbol: %s", pf->path,
		      strerror(-r));
	} else if ((r = mp_elf_usdt_sites(elf, "memprof", names, 4, sites, nsites)) != 0) {
		logf_(b, 3, "Failed to read the USDT notes of '%s': %s", pf->path, strerror(-r));
	}
	elf_end(elf);
	close(fd);
	return r;
}

/*
 * Mirror @cfg into the configuration block at @addr in @pid: check magic, version and size,
 * write rate, profile and flags, then generation + 1 (the library's seqlock). Returns the new
 * generation in *@gen.
 */
static int pl_config_write(pid_t pid, uint64_t addr, const struct mp_proc_cfg *cfg, uint32_t *gen)
{
	struct memprof_preload_config c;
	struct {
		double rate;
		uint32_t profile, flags;
	} w;
	struct iovec lv, rv;
	uint32_t g;
	ssize_t n;

	_Static_assert(sizeof(w) == offsetof(struct memprof_preload_config, generation) -
					   offsetof(struct memprof_preload_config, rate),
		       "config block layout");
	lv = (struct iovec){ &c, offsetof(struct memprof_preload_config, stats) };
	rv = (struct iovec){ (void *)(uintptr_t)addr, lv.iov_len };
	n = process_vm_readv(pid, &lv, 1, &rv, 1, 0);
	if (n < 0)
		return -errno;
	if ((size_t)n != lv.iov_len || c.magic != MEMPROF_PRELOAD_MAGIC ||
	    c.version != MEMPROF_PRELOAD_VERSION || c.size < sizeof(c))
		return -EPROTO;
	if (cfg->flags & MP_PROC_RATE_ONE)
		w.rate = 1.0;
	else	/* the inverse of mp_gap_k(): exact to ~1e-10 relative */
		w.rate = -expm1(-M_LN2 * 4294967296.0 / (double)cfg->gap_k);
	w.profile = cfg->profile;
	w.flags = (cfg->flags & MP_PROC_SAMPLING) ? MEMPROF_PRELOAD_F_SAMPLING : 0;
	lv = (struct iovec){ &w, sizeof(w) };
	rv = (struct iovec){ (void *)(uintptr_t)(addr + offsetof(struct memprof_preload_config,
								  rate)), sizeof(w) };
	if (process_vm_writev(pid, &lv, 1, &rv, 1, 0) != (ssize_t)sizeof(w))
		return errno ? -errno : -EIO;
	g = c.generation + 1 ? c.generation + 1 : 1;
	lv = (struct iovec){ &g, sizeof(g) };
	rv = (struct iovec){ (void *)(uintptr_t)(addr + offsetof(struct memprof_preload_config,
								  generation)), sizeof(g) };
	if (process_vm_writev(pid, &lv, 1, &rv, 1, 0) != (ssize_t)sizeof(g))
		return errno ? -errno : -EIO;
	*gen = g;
	return 0;
}

int pltargets_fd(struct mp_bpf *b)
{
	return bpf_map__fd(b->skel->maps.pltargets);
}

/* Write the block from @t's "procs" entry and publish the generation to BPF. */
int pl_sync(struct mp_bpf *b, struct target *t, const struct mp_proc_cfg *cfg,
	    const struct pl_found *pf)
{
	struct mp_preload_target pt = { 0 };
	uint32_t key = (uint32_t)t->pid;
	int err;

	if (bpf_map_lookup_elem(pltargets_fd(b), &key, &pt) && !pf)
		return -ENOENT;
	if (pf) {
		pt.lo = pf->lo;
		pt.hi = pf->hi;
	}
	/* samples drawn under the generation written last may still arrive: see bpf/memprof.h */
	pt.prev_gen = pt.gen;
	pt.prev_profile = pt.profile;
	pt.prev_flags = pt.flags;
	err = pl_config_write(t->pid, t->pl_cfg, cfg, &pt.gen);
	if (err)
		return err;
	pt.profile = cfg->profile;
	pt.flags = cfg->flags;
	t->pl_gen = pt.gen;
	if (bpf_map_update_elem(pltargets_fd(b), &key, &pt, BPF_ANY))
		return -errno;
	return 0;
}

/* Move @t's links to the reaper (mode change at exec): the old probes would fire twice. */
static void pl_retire_links(struct mp_bpf *b, struct target *t)
{
	struct target *g = calloc(1, sizeof(*g));

	if (g) {
		g->pid = t->pid;
		g->links = t->links;
		g->nlinks = t->nlinks;
		g->cap = t->cap;
		target_bury(b, g);
	} else {
		links_destroy(t->links, t->nlinks);
		free(t->links);
	}
	t->links = NULL;
	t->nlinks = t->cap = 0;
	t->nobjs = 0;
	t->nalloc = 0;
}

/*
 * Attach @prog to the @n sites of one of the library's USDT probes in @path, for process @pid:
 * one uprobe_multi link with every site's semaphore when the kernel has them, else a
 * perf-event uprobe per site. Not perf events when it can: opening one waits on the kernel's
 * event_mutex, which closing one holds through a grace period, so a `memprofctl record
 * --preload` started right after another waited up to ~1 s for the first one's links to go.
 */
static int pl_attach_probe(struct mp_bpf *b, struct target *t, const char *path,
			   struct bpf_program *prog, const struct mp_usdt_site *sites, int n)
{
	uint64_t offs[MP_USDT_MAX_SITES], refs[MP_USDT_MAX_SITES];
	int err = 0;

	for (int k = 0; k < n; k++) {
		offs[k] = sites[k].ip_off;
		refs[k] = sites[k].sema_off;
	}
	for (int k = 0; k < (b->multi ? 1 : n) && !err; k++) {
		struct plink l = { .fd = -1 };

		err = b->multi ? attach_multi(t->pid, path, prog, false, offs, NULL, refs,
					      (uint32_t)n, &l) :
				 attach_perf(b, t->pid, path, offs[k], prog, false, 0, refs[k], &l);
		if (!err && (err = target_add_link(t, &l)) != 0)
			plink_destroy(&l);
	}
	return err;
}

/*
 * Decide whether @t is profiled through the library (first attach, or after exec) and set it
 * up. Returns the number of probes attached (> 0: preload mode; also when already set up
 * after an exec into the same library), 0 when @t is in uprobe mode, or -errno.
 */
int pl_attach(struct mp_bpf *b, struct target *t)
{
	/* "flush" (deferred mode, MEMPROF_BATCH) last: a library without it is fine. */
	static const char *const names[4] = { "alloc", "free", "free_batch", "flush" };
	struct bpf_program *progs[4] = { b->skel->progs.mp_usdt_alloc,
					 b->skel->progs.mp_usdt_free,
					 b->skel->progs.mp_usdt_free_batch,
					 b->skel->progs.mp_usdt_flush };
	struct mp_usdt_site sites[4][MP_USDT_MAX_SITES];
	int nsites[4];
	struct mp_proc_cfg cfg;
	struct pl_found pf;
	struct stat st;
	uint32_t key = (uint32_t)t->pid;
	int err;

	err = pl_find(t->pid, &pf);
	if (err == -ENOENT) {
		if (t->preload && t->pl_pending)
			return 0;	/* after exec, before ld.so mapped the preloads */
		if (t->preload) {	/* exec'd into an image without the library */
			pl_retire_links(b, t);
			t->preload = false;
			bpf_map_delete_elem(pltargets_fd(b), &key);
			proc_flag(b, t->pid, MP_PROC_PRELOAD, false);
		}
		return 0;
	}
	if (err)
		return err;
	if (stat(pf.path, &st))
		return -errno;
	if (mp_bpf__proc_get(b, t->pid, &cfg))
		return -ENOENT;	/* not configured: nothing to mirror */
	if (t->preload && (st.st_dev != t->pl_dev || st.st_ino != t->pl_ino))
		pl_retire_links(b, t);
	else if (!t->preload && t->nlinks)
		pl_retire_links(b, t);	/* uprobe mode before exec */
	t->pl_queue = 0;	/* a new image: its own queue */
	t->pl_seq_valid = t->pl_pulled_valid = false;
	err = pl_read_lib(b, &pf, names, &t->pl_cfg, sites, nsites);
	if (err)
		return err;
	bpf_map_delete_elem(pltargets_fd(b), &key);
	err = pl_sync(b, t, &cfg, &pf);
	if (err) {
		logf_(b, 3, "Failed to configure libmemprof-preload in process %d ('%s'): %s",
		      t->pid, pf.path, strerror(-err));
		return err;
	}
	if (t->preload && t->nlinks) {
		t->pl_pending = 0;
		return (int)t->nlinks;	/* exec'd into the same library: the probes stay */
	}
	for (int i = 0; i < 4 && !err; i++) {
		if (!nsites[i] && i == 3)
			continue;	/* an older library: no deferred mode */
		if (!nsites[i]) {
			err = -ENOENT;
			logf_(b, 3, "'%s' (pid %d) has no USDT probe memprof:%s", pf.path, t->pid,
			      names[i]);
		}
		if (!err && (err = pl_attach_probe(b, t, pf.path, progs[i], sites[i],
						   nsites[i])) != 0)
			logf_(b, 3, "Failed to attach USDT probe memprof:%s in '%s'+%#" PRIx64
			      " (pid %d): %s", names[i], pf.path, sites[i][0].ip_off, t->pid,
			      strerror(-err));
	}
	if (err) {
		b->counters.attach_errors++;
		pl_retire_links(b, t);
		bpf_map_delete_elem(pltargets_fd(b), &key);
		return err;
	}
	t->preload = true;
	t->pl_dev = st.st_dev;
	t->pl_ino = st.st_ino;
	proc_flag(b, t->pid, MP_PROC_PRELOAD, true);
	return (int)t->nlinks;
}

int mp_bpf__mode(struct mp_bpf *b, pid_t pid)
{
	struct target *t = target_find(b, pid);

	if (!t)
		return -ENOENT;
	return t->preload ? MP_BPF_MODE_PRELOAD : MP_BPF_MODE_UPROBE;
}

/* Copy @len bytes at @addr of @pid's memory: 0, or -errno (-EIO: short). */
static int pl_read(pid_t pid, uint64_t addr, void *buf, size_t len)
{
	struct iovec lv = { buf, len }, rv = { (void *)(uintptr_t)addr, len };
	ssize_t n = process_vm_readv(pid, &lv, 1, &rv, 1, 0);

	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EIO;
}

int mp_bpf__preload_pull(struct mp_bpf *b, pid_t pid, void *buf, size_t len, bool last)
{
	struct target *t = target_find(b, pid);
	struct mp_preload_batch_event *e = buf;
	struct {
		uint64_t busy, seq;
		struct mp_preload_queue_head qh;
	} before, after;
	struct mp_preload_target pt;
	struct mp_proc_cfg cfg;
	uint32_t key = (uint32_t)pid;
	struct timespec ts;
	uint8_t *q;
	int err;

	if (!t || !t->preload)
		return -ENOENT;
	if (len < sizeof(*e) + MP_PL_QUEUE_SIZE)
		return -EINVAL;
	if (!t->pl_queue) {
		err = pl_read(pid, t->pl_cfg + offsetof(struct memprof_preload_config, pending),
			      &t->pl_queue, sizeof(t->pl_queue));
		if (err || !t->pl_queue)
			return err;	/* 0: its constructor has not run yet */
	}
	err = pl_read(pid, t->pl_queue, &before, sizeof(before));
	if (err)
		return err;
	/* Only a queue left as it was since the last look (a busy process sends its own), or
	 * any queue not in use when this is the last look, and not taken already. */
	if (!last && (!t->pl_seq_valid || before.seq != t->pl_seq || before.busy)) {
		t->pl_seq = before.seq;
		t->pl_seq_valid = !before.busy;
		return 0;
	}
	if (before.busy || (!before.qh.nalloc && !before.qh.nfree) ||
	    (t->pl_pulled_valid && t->pl_pulled == before.seq))
		return 0;
	if (before.qh.nalloc > MP_PL_QUEUE_MAX || before.qh.nfree > MP_FREE_BATCH_MAX ||
	    before.qh.bytes > MP_PL_QUEUE_SIZE - MP_PL_QUEUE_ALLOCS)
		return -EPROTO;
	q = e->q;
	err = pl_read(pid, t->pl_queue + offsetof(struct memprof_preload_pending, q), q,
		      MP_PL_QUEUE_ALLOCS + before.qh.bytes);
	if (err)
		return err;
	err = pl_read(pid, t->pl_queue, &after, sizeof(after));
	if (err)
		return err;
	if (after.busy || after.seq != before.seq || memcmp(q, &before.qh, sizeof(before.qh)))
		return 0;	/* changed meanwhile: it is being sent */
	t->pl_pulled = before.seq;
	t->pl_pulled_valid = true;
	if (bpf_map_lookup_elem(procs_fd(b), &key, &cfg) ||
	    bpf_map_lookup_elem(pltargets_fd(b), &key, &pt))
		return -ENOENT;
	memset(e, 0, sizeof(*e));
	e->h.type = MP_EV_PRELOAD_BATCH;
	e->h.pid = (uint32_t)pid;
	e->h.tid = (uint32_t)pid;
	e->h.profile = cfg.profile;
	clock_gettime(CLOCK_MONOTONIC, &ts);	/* bpf_ktime_get_ns()'s clock */
	e->h.time_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	e->gen = pt.gen;
	e->max_frames = cfg.max_frames;
	e->flags = cfg.flags;
	e->size = MP_PL_QUEUE_ALLOCS + before.qh.bytes;
	e->prev_gen = pt.prev_gen;
	e->prev_profile = pt.prev_profile;
	e->prev_flags = pt.prev_flags;
	e->origin = MP_PL_BATCH_PULLED;
	return (int)(sizeof(*e) + e->size);
}

int mp_bpf__preload_stats(struct mp_bpf *b, pid_t pid, uint64_t *out, size_t n)
{
	struct target *t = target_find(b, pid);
	struct iovec lv, rv;

	if (!t || !t->preload)
		return -ENOENT;
	if (n > MEMPROF_PRELOAD_STAT__SLOTS)
		n = MEMPROF_PRELOAD_STAT__SLOTS;
	lv = (struct iovec){ out, n * sizeof(*out) };
	rv = (struct iovec){ (void *)(uintptr_t)(t->pl_cfg + offsetof(struct memprof_preload_config,
								       stats)), lv.iov_len };
	if (process_vm_readv(pid, &lv, 1, &rv, 1, 0) != (ssize_t)lv.iov_len)
		return errno ? -errno : -EIO;
	return (int)n;
}
