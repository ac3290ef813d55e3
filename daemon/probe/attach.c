// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Attaching a process' probes: the objects it maps, scanned (discover.c) and attached with
 * uprobe_multi or uprobe session links, or perf-event uprobes, entry and return together;
 * why a process has nothing to probe; detaching.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <gelf.h>
#include <libelf.h>
#include <linux/perf_event.h>
#include <bpf/bpf.h>

#include "daemon/probe/elf_syms.h"
#include "daemon/probe/loader_internal.h"
#include "daemon/probe/target_open.h"
#include "daemon/probe/uprobe_link.h"

struct target *target_find(struct mp_bpf *b, pid_t pid)
{
	for (struct target *t = b->targets; t; t = t->next)
		if (t->pid == pid)
			return t;
	return NULL;
}

/* @ref_ctr_off: file offset of a USDT semaphore the kernel raises while the probe is on, or 0. */
static int perf_uprobe_open(struct mp_bpf *b, pid_t pid, const char *path, uint64_t off,
			    bool retprobe, uint64_t ref_ctr_off)
{
	struct perf_event_attr attr;
	int fd;

	if (ref_ctr_off && (b->ref_ctr_shift < 0 || ref_ctr_off >> (64 - b->ref_ctr_shift)))
		return -EOPNOTSUPP;
	memset(&attr, 0, sizeof(attr));
	attr.size = sizeof(attr);
	attr.type = (uint32_t)b->uprobe_type;
	attr.config = retprobe ? 1ULL << b->retprobe_bit : 0;
	if (ref_ctr_off)
		attr.config |= ref_ctr_off << b->ref_ctr_shift;
	attr.config1 = (uint64_t)(uintptr_t)path;	/* uprobe_path */
	attr.config2 = off;				/* probe_offset */
	fd = (int)syscall(__NR_perf_event_open, &attr, pid, -1, -1, PERF_FLAG_FD_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

int attach_perf(struct mp_bpf *b, pid_t pid, const char *path, uint64_t off,
		struct bpf_program *prog, bool retprobe, uint64_t cookie,
		uint64_t ref_ctr_off, struct plink *out)
{
	LIBBPF_OPTS(bpf_perf_event_opts, opts, .bpf_cookie = cookie);
	int fd = perf_uprobe_open(b, pid, path, off, retprobe, ref_ctr_off);
	struct bpf_link *l;

	if (fd < 0)
		return fd;
	l = bpf_program__attach_perf_event_opts(prog, fd, &opts);
	if (!l) {
		int err = -errno;

		close(fd);
		return err;
	}
	out->l = l;
	out->fd = -1;
	return 0;
}

/* @refs: the USDT semaphore of each offset (file offsets), or NULL: none. */
int attach_multi(pid_t pid, const char *path, struct bpf_program *prog, bool retprobe,
		 const uint64_t *offs, const uint64_t *cookies, const uint64_t *refs,
		 uint32_t cnt, struct plink *out)
{
	/* MP_BPF_TRACE_UPROBE_MULTI, or MP_BPF_TRACE_UPROBE_SESSION for mp_session */
	int fd = mp_uprobe_multi_link(bpf_program__fd(prog),
				      (unsigned int)bpf_program__expected_attach_type(prog), pid, path,
				      offs, cookies, refs, cnt, retprobe);

	if (fd < 0)
		return fd;
	out->l = NULL;
	out->fd = fd;
	return 0;
}

int target_add_link(struct target *t, const struct plink *l)
{
	if (t->nlinks == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 16;
		struct plink *n = realloc(t->links, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		t->links = n;
		t->cap = cap;
	}
	t->links[t->nlinks++] = *l;
	return 0;
}

static uint64_t res_cookie(const struct resolved *r)
{
	return r->cookie;
}

/* Probes of one symbol, entry and return together or not at all. */
static int attach_sym(struct mp_bpf *b, struct target *t, const struct resolved *r,
		      const char *path)
{
	const struct probe_def *pd = &probe_table[r->probe];
	uint64_t cookie = res_cookie(r);
	struct plink le = { .fd = -1 }, lr = { .fd = -1 };
	int err;

	/*
	 * The return probe goes first. An entry probe live before its return probe sees calls
	 * whose returns nobody sees: the thread's state keeps the call as in progress, and
	 * every later call at or below its stack pointer counts as nested in it, never sampled
	 * (on 6.1, where each perf-event uprobe takes a while to attach, that was often the
	 * whole profile). A return without its entry is only counted (missed_returns).
	 */
	if (b->session) {
		err = attach_multi(t->pid, path, b->skel->progs.mp_session, false, &r->offset,
				   &cookie, NULL, 1, &le);
	} else if (b->multi) {
		err = pd->ret ? attach_multi(t->pid, path, b->skel->progs.mp_ret, true, &r->offset,
					     &cookie, NULL, 1, &lr) : 0;
		if (!err)
			err = attach_multi(t->pid, path, b->skel->progs.mp_entry, false, &r->offset,
					   &cookie, NULL, 1, &le);
	} else {
		err = pd->ret ? attach_perf(b, t->pid, path, r->offset, b->skel->progs.mp_ret, true,
					    cookie, 0, &lr) : 0;
		if (!err)
			err = attach_perf(b, t->pid, path, r->offset, b->skel->progs.mp_entry,
					  false, cookie, 0, &le);
	}
	if (!err && (err = target_add_link(t, &le)) == 0 && pd->ret && !b->session &&
	    (err = target_add_link(t, &lr)) != 0)
		t->nlinks--;
	if (err) {
		plink_destroy(&le);
		plink_destroy(&lr);
	}
	return err;
}

/*
 * Attach the probes of object @o (file @path, @shown in messages) for @t. With uprobe_multi,
 * one entry and one return link cover the whole object; if that fails, symbols are attached
 * one by one so that each failure is reported on its own. Returns the number of probes.
 */
static int attach_obj(struct mp_bpf *b, struct target *t, const struct obj *o, const char *path,
		      const char *shown)
{
	uint64_t offs[N_PROBES], cookies[N_PROBES], roffs[N_PROBES], rcookies[N_PROBES];
	uint32_t n = 0, nr = 0, nalloc = 0;
	int probes = 0;

	for (size_t i = 0; i < o->nres; i++) {
		const struct probe_def *pd = &probe_table[o->res[i].probe];

		offs[n] = o->res[i].offset;
		cookies[n++] = res_cookie(&o->res[i]);
		if (pd->ret) {
			roffs[nr] = o->res[i].offset;
			rcookies[nr++] = res_cookie(&o->res[i]);
		}
		if (pd->kind)
			nalloc += pd->ret ? 2 : 1;
	}
	if (b->multi && n) {
		struct plink le = { .fd = -1 }, lr = { .fd = -1 };
		int err = 0;

		/* returns first (a session link has both halves): see attach_sym() */
		if (nr && !b->session)
			err = attach_multi(t->pid, path, b->skel->progs.mp_ret, true, roffs, rcookies,
					   NULL, nr, &lr);
		if (!err)
			err = attach_multi(t->pid, path, b->session ? b->skel->progs.mp_session :
					   b->skel->progs.mp_entry, false, offs, cookies, NULL, n,
					   &le);
		if (!err && (err = target_add_link(t, &le)) == 0 && nr && !b->session &&
		    (err = target_add_link(t, &lr)) != 0)
			t->nlinks--;
		if (!err) {
			t->nalloc += nalloc;
			return (int)(n + nr);
		}
		plink_destroy(&le);
		plink_destroy(&lr);
	}
	for (size_t i = 0; i < o->nres; i++) {
		const struct probe_def *pd = &probe_table[o->res[i].probe];
		int err = attach_sym(b, t, &o->res[i], path);

		if (err) {
			const char *kind =
				b->session ? "uprobe session link of program 'mp_session'" :
				b->multi ? "uprobe_multi links of programs 'mp_entry'/'mp_ret'" :
				"perf-event uprobes of programs 'mp_entry'/'mp_ret'";

			logf_(b, 3, "Failed to attach uprobe to '%s' in '%s' (pid %d, offset %#" PRIx64
			      ", %s): %s", pd->sym, shown, t->pid, o->res[i].offset, kind,
			      strerror(-err));
			b->counters.attach_errors++;
			if (!b->attach_err) {
				b->attach_err = err;
				snprintf(b->attach_err_what, sizeof(b->attach_err_what),
					 "'%s' in %s (%s)", pd->sym, shown, kind);
			}
			continue;
		}
		probes += pd->ret ? 2 : 1;
		if (pd->kind)
			t->nalloc += pd->ret ? 2 : 1;
	}
	return probes;
}

/*
 * Why process @pid has nothing to probe, naming its executable: a Go program (its runtime
 * allocates without malloc), a static executable without symbols (stripped), or none of the
 * allocator families in its objects.
 */
static void explain_no_alloc(pid_t pid, size_t scanned, char *why, size_t why_len)
{
	char link[64], exe[PATH_MAX];
	bool go = false, symtab = false, interp = false;
	Elf_Scn *scn = NULL;
	size_t nph;
	Elf *elf = NULL;
	ssize_t n;
	int fd;

	snprintf(link, sizeof(link), "/proc/%d/exe", pid);
	n = readlink(link, exe, sizeof(exe) - 1);
	if (n <= 0)
		snprintf(exe, sizeof(exe), "process %d's executable", pid);
	else
		exe[n] = 0;
	fd = open(link, O_RDONLY | O_CLOEXEC);
	if (fd >= 0)
		elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (elf && elf_kind(elf) == ELF_K_ELF) {
		go = mp_elf_is_go(elf);
		while ((scn = elf_nextscn(elf, scn))) {
			GElf_Shdr sh;

			if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_SYMTAB)
				symtab = true;
		}
		if (!elf_getphdrnum(elf, &nph)) {
			for (size_t i = 0; i < nph; i++) {
				GElf_Phdr ph;

				if (gelf_getphdr(elf, (int)i, &ph) && ph.p_type == PT_INTERP)
					interp = true;
			}
		}
	}
	elf_end(elf);
	if (fd >= 0)
		close(fd);
	if (go)
		snprintf(why, why_len,
			 "no allocator symbols found in %s (a Go program: the Go runtime's allocator "
			 "is not probed, only malloc & co. of cgo code)", exe);
	else if (!interp && !symtab)
		snprintf(why, why_len,
			 "no allocator symbols found in %s (statically linked and stripped?)", exe);
	else
		snprintf(why, why_len,
			 "no allocator symbols found in %s or the %zu executable object(s) it maps: "
			 "none of malloc, calloc, realloc, free, operator new/delete, mmap, "
			 "jemalloc's mallocx, tcmalloc's tc_malloc or mimalloc's mi_malloc families "
			 "(stripped?)", exe, scanned);
}

/*
 * A Go program's mmaps are its runtime's (MP_PROC_NO_MMAP), decided again after each exec from
 * its executable's object, which discover.c scanned once (cached by inode).
 */
static void target_set_go(struct mp_bpf *b, struct target *t)
{
	const struct obj *o = NULL;
	char link[64];
	struct stat st;

	snprintf(link, sizeof(link), "/proc/%d/exe", (int)t->pid);
	if (!stat(link, &st))
		o = obj_find(b, st.st_dev, st.st_ino);
	t->go = o && o->go;
	proc_flag(b, t->pid, MP_PROC_NO_MMAP, t->go);
}

/* mp_bpf__attach(); @at_exec: mp_bpf__attach_exec(). */
static int attach_pid(struct mp_bpf *b, pid_t pid, bool at_exec, char *why, size_t why_len)
{
	char path[PATH_MAX + 64], maps[64], line[PATH_MAX + 256];
	struct target *t;
	size_t scanned = 0;
	bool created = false, decide;
	int attached = 0;
	FILE *f;

	if (why && why_len)
		why[0] = 0;
	if (pid <= 0)
		return -EINVAL;
	b->attach_err = 0;
	snprintf(maps, sizeof(maps), "/proc/%d/maps", pid);
	f = fopen(maps, "re");
	if (!f)
		return errno == ENOENT ? -ESRCH : -errno;
	t = target_find(b, pid);
	if (!t) {
		if (b->ntargets >= MP_MAX_PROCS) {
			fclose(f);
			return -ENOSPC;
		}
		t = calloc(1, sizeof(*t));
		if (!t) {
			fclose(f);
			return -ENOMEM;
		}
		t->pid = pid;
		created = true;
		if (at_exec) {	/* as ring.c does at a followed process' exec */
			t->pl_recheck = true;
			t->pl_pending = 2;
		}
	}
	decide = created || t->pl_recheck;
	if (decide) {
		/* Profiled through libmemprof-preload if the process maps it (not after dlopen:
		 * then it interposes nothing); after exec the mode is decided again. */
		int r = pl_attach(b, t);

		t->pl_recheck = false;
		if (r > 0) {
			fclose(f);
			if (created) {
				t->next = b->targets;
				b->targets = t;
				b->ntargets++;
			}
			return r;
		}
		if (r < 0 && r != -ENOENT && r != -ESRCH) {
			b->counters.auto_attach_errors++;
			logf_(b, 4, "Process %d: libmemprof-preload unusable (%s): allocator uprobes "
			      "instead", pid, strerror(-r));
		}
	} else if (t->preload) {
		fclose(f);
		return 0;
	}
	while (fgets(line, sizeof(line), f)) {
		char perms[8], *file;
		unsigned long long ino;
		struct obj *o;
		struct stat st;
		bool seen = false;
		int off = 0, fd;
		ino_t mino;

		if (sscanf(line, "%*x-%*x %7s %*x %*x:%*x %llu %n", perms, &ino, &off) < 2 || !off)
			continue;
		file = line + off;
		file[strcspn(file, "\n")] = 0;
		if (perms[2] != 'x' || file[0] != '/' || ino == 0)
			continue;
		if (strstr(file, " (deleted)"))
			continue;
		scanned++;
		snprintf(path, sizeof(path), "/proc/%d/root%s", pid, file);
		/* the name is the process' to change: read only the file it maps (a FIFO put in
		 * its place would block us, a symlink lead to a file of someone else's) */
		mino = (ino_t)ino;
		fd = mp_target_open(pid, file, mp_same_inode, &mino);
		if (fd < 0)
			continue;
		if (fstat(fd, &st)) {
			close(fd);
			continue;
		}
		for (size_t i = 0; i < t->nobjs; i++)
			if (t->objs[i].dev == st.st_dev && t->objs[i].ino == st.st_ino)
				seen = true;
		if (seen) {
			close(fd);
			continue;
		}
		if (t->nobjs >= MAX_OBJS_PER_PROC) {
			logf_(b, 4, "Process %d maps more than %d executable objects: '%s' is not probed",
			      pid, MAX_OBJS_PER_PROC, file);
			close(fd);
			continue;
		}
		o = obj_get(b, path, &st, fd);
		close(fd);
		if (!o)
			continue;
		t->objs[t->nobjs].dev = st.st_dev;
		t->objs[t->nobjs].ino = st.st_ino;
		t->nobjs++;
		if (o->nres)
			attached += attach_obj(b, t, o, path, file);
	}
	fclose(f);
	if (decide)
		target_set_go(b, t);
	if (scanned == 0 && created) {
		free(t);
		return -ESRCH; /* a zombie or a kernel thread maps nothing */
	}
	if (t->nalloc == 0 && at_exec && t->nlinks) {
		int r;

		/* only ld.so so far: its rendezvous probe reports the libraries it maps from now
		 * on; those it mapped before the probe was there are in the maps now */
		if (created) {
			t->next = b->targets;
			b->targets = t;
			b->ntargets++;
		}
		r = attach_pid(b, pid, false, NULL, 0);
		return r > 0 ? r : 0;
	}
	if (t->nalloc == 0) {
		if (created)
			target_bury(b, t); /* nothing to keep: drop the ld.so probe too */
		if (why && why_len && b->attach_err) /* symbols found: the kernel refused */
			snprintf(why, why_len, "allocator symbols found, but the kernel refused "
				 "every probe (first: %s)", b->attach_err_what);
		else if (why && why_len)
			explain_no_alloc(pid, scanned, why, why_len);
		return b->attach_err ? b->attach_err : -ENOENT;
	}
	if (created) {
		t->next = b->targets;
		b->targets = t;
		b->ntargets++;
	}
	return attached;
}

int mp_bpf__detach(struct mp_bpf *b, pid_t pid)
{
	struct target **pp, *t;

	for (pp = &b->targets; (t = *pp); pp = &t->next) {
		if (t->pid == pid) {
			uint32_t key = (uint32_t)pid;

			*pp = t->next;
			b->ntargets--;
			if (t->preload)
				bpf_map_delete_elem(pltargets_fd(b), &key);
			target_bury(b, t);
			return 0;
		}
	}
	return 0;
}

int mp_bpf__attach(struct mp_bpf *b, pid_t pid, char *why, size_t why_len)
{
	return attach_pid(b, pid, false, why, why_len);
}

int mp_bpf__attach_exec(struct mp_bpf *b, pid_t pid, char *why, size_t why_len)
{
	return attach_pid(b, pid, true, why, why_len);
}
