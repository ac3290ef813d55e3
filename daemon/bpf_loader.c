// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The user-space side of bpf/memprof.bpf.c: loading, lifecycle programs, allocator discovery
 * with libelf, pid-filtered uprobes opened with perf_event_open on the uprobe PMU, ring buffer.
 *
 * Per process (struct target) we remember which objects (device, inode) were scanned and the
 * links attached, so mp_bpf__attach() is idempotent and only adds objects mapped since. The
 * symbol scan of an object is cached by (device, inode, mtime) across processes.
 *
 * Pid-filtered uprobes do not follow fork: the kernel's uprobe filter compares the event's
 * target mm, and a perf event opened with attr.inherit=1 is not delivered to the program for
 * the child either (checked on 6.18: the child's hits are filtered out and its breakpoints are
 * removed). So the loader attaches to a followed child itself when it sees the FORK record,
 * before handing the record on; calls the child makes before that are not seen. After exec the
 * perf events of the task stay valid (their target is the task, whose mm is the new one), so
 * objects of the new image with the same inode are probed from their first instruction; new
 * objects are attached when the EXEC record is seen.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <gelf.h>
#include <libelf.h>
#include <linux/perf_event.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "bpf/gap.h"
#include "daemon/bpf_loader.h"
#include "daemon/placement.h"
#include "memprof.skel.h"

#define MAX_OBJS_PER_PROC	512	/* executable objects scanned per process */
#define MAX_OBJ_CACHE		1024	/* objects whose allocator symbols are cached */
#define MAX_CODE_SCAN		65536	/* bytes of a function examined for placement */

/* Linux 6.6 UAPI, newer than Debian 12's headers. */
#define MP_BPF_TRACE_UPROBE_MULTI	48
#define MP_BPF_F_UPROBE_MULTI_RETURN	1

struct probe_def {
	const char *sym;
	enum mp_kind kind;
	enum mp_shape shape;	/* where its arguments are (the entry program's cookie) */
	unsigned int nargs;	/* argument registers the entry program reads */
	bool ret;		/* a return probe too */
	bool optional;		/* may be missing from an object that defines malloc */
};

/* The allocator entry points, looked up in every executable object a process maps. */
static const struct probe_def probe_table[] = {
	{ "malloc", MP_KIND_MALLOC, MP_SHAPE_SIZE1, 1, true, false },
	{ "calloc", MP_KIND_CALLOC, MP_SHAPE_CALLOC, 2, true, false },
	{ "realloc", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2, true, false },
	{ "free", MP_KIND_FREE, MP_SHAPE_FREE, 1, false, false },
	{ "reallocarray", MP_KIND_REALLOCARRAY, MP_SHAPE_REALLOCARRAY, 3, true, true },
	{ "posix_memalign", MP_KIND_POSIX_MEMALIGN, MP_SHAPE_POSIX_MEMALIGN, 3, true, true },
	/* glibc's aligned_alloc and memalign are one function: it reports as aligned_alloc */
	{ "aligned_alloc", MP_KIND_ALIGNED_ALLOC, MP_SHAPE_SIZE2, 2, true, true },
	{ "memalign", MP_KIND_MEMALIGN, MP_SHAPE_SIZE2, 2, true, true },
	{ "valloc", MP_KIND_VALLOC, MP_SHAPE_SIZE1, 1, true, true },
	{ "pvalloc", MP_KIND_PVALLOC, MP_SHAPE_SIZE1, 1, true, true },
	{ "_Znwm", MP_KIND_NEW, MP_SHAPE_SIZE1, 1, true, true },
	{ "_Znam", MP_KIND_NEW, MP_SHAPE_SIZE1, 1, true, true },
	{ "_ZnwmRKSt9nothrow_t", MP_KIND_NEW, MP_SHAPE_SIZE1, 1, true, true },
	{ "_ZnamRKSt9nothrow_t", MP_KIND_NEW, MP_SHAPE_SIZE1, 1, true, true },
	{ "_ZnwmSt11align_val_t", MP_KIND_NEW, MP_SHAPE_SIZE1, 1, true, true },
	{ "_ZnamSt11align_val_t", MP_KIND_NEW, MP_SHAPE_SIZE1, 1, true, true },
	{ "_ZnwmSt11align_val_tRKSt9nothrow_t", MP_KIND_NEW, MP_SHAPE_SIZE1, 1, true, true },
	{ "_ZnamSt11align_val_tRKSt9nothrow_t", MP_KIND_NEW, MP_SHAPE_SIZE1, 1, true, true },
	{ "_ZdlPv", MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true },
	{ "_ZdaPv", MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true },
	{ "_ZdlPvm", MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true },
	{ "_ZdaPvm", MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true },
	{ "_ZdlPvRKSt9nothrow_t", MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true },
	{ "_ZdaPvRKSt9nothrow_t", MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true },
	{ "_ZdlPvSt11align_val_t", MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true },
	{ "_ZdaPvSt11align_val_t", MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true },
	{ "_ZdlPvmSt11align_val_t", MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true },
	{ "_ZdaPvmSt11align_val_t", MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true },
	{ "_ZdlPvSt11align_val_tRKSt9nothrow_t", MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true },
	{ "_ZdaPvSt11align_val_tRKSt9nothrow_t", MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true },
	{ "mmap", MP_KIND_MMAP, MP_SHAPE_MMAP, 4, true, true },
	{ "mmap64", MP_KIND_MMAP, MP_SHAPE_MMAP, 4, true, true },
	{ "munmap", MP_KIND_MUNMAP, MP_SHAPE_FREE, 1, false, true },
	/* libraries mapped by ld.so (startup, dlopen): attach to them (MP_EV_MAP) */
	{ "_dl_debug_state", 0, MP_SHAPE_DLSTATE, 0, false, true },
};

#define N_PROBES (sizeof(probe_table) / sizeof(probe_table[0]))

/* One allocator symbol resolved in an object. */
struct resolved {
	unsigned int probe;	/* index in probe_table */
	uint64_t offset;	/* file offset of the probe point */
	uint64_t placed;	/* bytes after the symbol where placement put the probe */
};

/* An object's allocator symbols, cached by identity. */
struct obj {
	dev_t dev;
	ino_t ino;
	struct timespec mtime;
	size_t nres;
	struct resolved res[N_PROBES];
	struct obj *next;
};

struct obj_ref {
	dev_t dev;
	ino_t ino;
};

/* A link: a libbpf perf-event link, or the fd of a uprobe_multi link. */
struct plink {
	struct bpf_link *l;
	int fd;
};

static void plink_destroy(struct plink *p)
{
	if (p->l)
		bpf_link__destroy(p->l);
	else if (p->fd >= 0)
		close(p->fd);
}

/* A process with probes. */
struct target {
	pid_t pid;
	size_t nobjs;
	struct obj_ref objs[MAX_OBJS_PER_PROC];
	size_t nlinks, cap;
	size_t nalloc;		/* probes on allocator entry points */
	struct plink *links;
	uint64_t live;		/* sampled blocks seen minus frees seen (for purges) */
	struct target *next;
};

struct mp_bpf {
	struct memprof_bpf *skel;
	struct ring_buffer *rb;
	struct bpf_link *lifecycle[3];
	mp_bpf_event_fn fn;
	void *ctx;
	mp_bpf_log_fn log;
	void *log_ctx;
	struct target *targets;
	size_t ntargets;
	struct obj *objs;
	size_t nobjs;
	int uprobe_type;
	int retprobe_bit;
	bool multi;		/* uprobe_multi links (Linux 6.6+): one per object and program */
	struct mp_bpf_counters counters;
	/* Links of detached processes, destroyed by the reaper thread (closing a uprobe perf
	 * event waits for grace periods: ~0.1 s per probe, far too long for the event loop). */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t reaper;
	bool reaper_started, reaper_stop;
	struct target *graveyard;
	bool reaping;		/* the reaper is destroying a target it took */
};

static void logf_(struct mp_bpf *b, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void logf_(struct mp_bpf *b, int level, const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	if (!b->log)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	b->log(b->log_ctx, level, buf);
}

static int read_int_file(const char *path, int *out)
{
	char buf[64];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -EINVAL;
	buf[n] = 0;
	*out = atoi(buf);
	return 0;
}

/* The uprobe PMU: its type and the config bit that makes a uretprobe. */
static int uprobe_pmu_init(struct mp_bpf *b)
{
	char buf[64];
	ssize_t n;
	int fd, err;

	err = read_int_file("/sys/bus/event_source/devices/uprobe/type", &b->uprobe_type);
	if (err)
		return err;
	fd = open("/sys/bus/event_source/devices/uprobe/format/retprobe", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -EINVAL;
	buf[n] = 0;
	if (sscanf(buf, "config:%d", &b->retprobe_bit) != 1)
		return -EINVAL;
	return 0;
}

/* CLOCK_REALTIME - CLOCK_MONOTONIC, measured once (at the first mp_bpf__open). */
static int64_t epoch_offset_ns;
static bool epoch_offset_known;

static void epoch_offset_init(void)
{
	struct timespec m1, r, m2;
	int64_t best = INT64_MAX;

	/* the pair read in the shortest window */
	for (int i = 0; i < 5; i++) {
		int64_t w, mid;

		clock_gettime(CLOCK_MONOTONIC, &m1);
		clock_gettime(CLOCK_REALTIME, &r);
		clock_gettime(CLOCK_MONOTONIC, &m2);
		w = (m2.tv_sec - m1.tv_sec) * 1000000000LL + (m2.tv_nsec - m1.tv_nsec);
		if (w >= best)
			continue;
		best = w;
		mid = m1.tv_sec * 1000000000LL + m1.tv_nsec + w / 2;
		epoch_offset_ns = r.tv_sec * 1000000000LL + r.tv_nsec - mid;
	}
	epoch_offset_known = true;
}

static struct target *target_find(struct mp_bpf *b, pid_t pid)
{
	for (struct target *t = b->targets; t; t = t->next)
		if (t->pid == pid)
			return t;
	return NULL;
}

#define MAX_CLOSERS	32

struct closer {
	struct plink *links;
	size_t n, first, step;
};

static void *closer_run(void *arg)
{
	struct closer *c = arg;

	for (size_t i = c->first; i < c->n; i += c->step)
		plink_destroy(&c->links[i]);
	return NULL;
}

/*
 * Destroy @n links. Closing a uprobe perf event waits for an RCU-tasks-trace and an SRCU grace
 * period (~0.2 s each on 6.18), one close after the other: 60 probes took 13 s serially. Closes
 * from concurrent threads share grace periods, so the links are destroyed by up to 32 threads.
 */
static void links_destroy(struct plink *links, size_t n)
{
	struct closer c[MAX_CLOSERS];
	pthread_t th[MAX_CLOSERS];
	bool started[MAX_CLOSERS] = { false };
	size_t nth = n < MAX_CLOSERS ? n : MAX_CLOSERS;

	for (size_t i = 0; i < nth; i++) {
		c[i] = (struct closer){ .links = links, .n = n, .first = i, .step = nth };
		started[i] = nth > 1 && !pthread_create(&th[i], NULL, closer_run, &c[i]);
		if (!started[i])
			closer_run(&c[i]);
	}
	for (size_t i = 0; i < nth; i++)
		if (started[i])
			pthread_join(th[i], NULL);
}

static void target_destroy(struct target *t)
{
	links_destroy(t->links, t->nlinks);
	free(t->links);
	free(t);
}

static void *reaper_run(void *arg)
{
	struct mp_bpf *b = arg;
	struct target *t;

	pthread_mutex_lock(&b->lock);
	for (;;) {
		while (!b->graveyard && !b->reaper_stop)
			pthread_cond_wait(&b->cond, &b->lock);
		if (!b->graveyard)
			break;
		t = b->graveyard;
		b->graveyard = t->next;
		b->reaping = true;
		pthread_mutex_unlock(&b->lock);
		target_destroy(t);
		pthread_mutex_lock(&b->lock);
		b->reaping = false;
		pthread_cond_broadcast(&b->cond);
	}
	pthread_mutex_unlock(&b->lock);
	return NULL;
}

/* Hand @t's links to the reaper thread (or destroy them here if it cannot start). */
static void target_bury(struct mp_bpf *b, struct target *t)
{
	pthread_mutex_lock(&b->lock);
	if (!b->reaper_started)
		b->reaper_started = !pthread_create(&b->reaper, NULL, reaper_run, b);
	if (!b->reaper_started) {
		pthread_mutex_unlock(&b->lock);
		target_destroy(t);
		return;
	}
	t->next = b->graveyard;
	b->graveyard = t;
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);
}

void mp_bpf__quiesce(struct mp_bpf *b)
{
	pthread_mutex_lock(&b->lock);
	while (b->graveyard || b->reaping)
		pthread_cond_wait(&b->cond, &b->lock);
	pthread_mutex_unlock(&b->lock);
}

/*
 * Delete process @pid's entries of the sampled table that are older than @before_ns (the
 * process exited or exec'd at that time; later entries belong to its next image).
 */
static void sampled_purge(struct mp_bpf *b, pid_t pid, uint64_t before_ns)
{
	int fd = bpf_map__fd(b->skel->maps.sampled);
	struct mp_sampled_key key, next, *prev = NULL;
	struct mp_sampled_val val;
	uint64_t n = 0;

	while (!bpf_map_get_next_key(fd, prev, &next)) {
		key = next;
		prev = &key;
		if (key.tgid != (uint32_t)pid || bpf_map_lookup_elem(fd, &key, &val) ||
		    val.incarnation >= before_ns)
			continue;
		/* deleting the current key restarts the walk from the start */
		if (!bpf_map_delete_elem(fd, &key)) {
			n++;
			prev = NULL;
		}
	}
	b->counters.purged += n;
}

static int rb_event(void *ctx, void *data, size_t size)
{
	struct mp_bpf *b = ctx;
	const struct mp_event_hdr *h = data;
	const struct mp_proc_event *pe = data;
	struct target *t;
	char why[256];
	int err;

	if (size < sizeof(*h))
		return 0;
	switch (h->type) {
	case MP_EV_ALLOC:
		t = target_find(b, h->pid);
		if (t)
			t->live++;
		break;
	case MP_EV_FREE:
		t = target_find(b, h->pid);
		if (t && t->live)
			t->live--;
		break;
	case MP_EV_FORK:
		if (size < sizeof(*pe))
			break;
		/* The child is in "procs" (BPF put it there): probe it now. */
		err = mp_bpf__attach(b, pe->other_pid, why, sizeof(why));
		if (err < 0 && err != -ESRCH) {
			b->counters.auto_attach_errors++;
			logf_(b, 4, "Failed to attach to forked child %u of %u: %s", pe->other_pid,
			      h->pid, err == -ENOENT ? why : strerror(-err));
		}
		break;
	case MP_EV_EXEC:
		t = target_find(b, h->pid);
		if (t && t->live) {
			sampled_purge(b, h->pid, h->time_ns);
			t->live = 0;
		}
		err = mp_bpf__attach(b, h->pid, why, sizeof(why));
		if (err < 0 && err != -ESRCH && err != -ENOENT) {
			b->counters.auto_attach_errors++;
			logf_(b, 4, "Failed to attach to %u after exec: %s", h->pid, strerror(-err));
		}
		break;
	case MP_EV_MAP:
		/* only for processes probed already (the engine decides who is) */
		if (!target_find(b, h->pid))
			return 0;
		err = mp_bpf__attach(b, h->pid, why, sizeof(why));
		if (err < 0 && err != -ESRCH && err != -ENOENT) {
			b->counters.auto_attach_errors++;
			logf_(b, 4, "Failed to attach to objects newly mapped by %u: %s", h->pid,
			      strerror(-err));
		}
		return 0; /* internal */
	case MP_EV_EXIT:
		t = target_find(b, h->pid);
		if (t && t->live)
			sampled_purge(b, h->pid, h->time_ns);
		mp_bpf__detach(b, h->pid);
		break;
	default:
		break;
	}
	return b->fn ? b->fn(b->ctx, data, size) : 0;
}

static mp_bpf_log_fn libbpf_log_fn;
static void *libbpf_log_ctx;

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	char buf[512];
	size_t n;

	if (!libbpf_log_fn || level == LIBBPF_DEBUG)
		return 0;
	vsnprintf(buf, sizeof(buf), fmt, ap);
	n = strlen(buf);
	while (n && buf[n - 1] == '\n')
		buf[--n] = 0;
	libbpf_log_fn(libbpf_log_ctx, level == LIBBPF_WARN ? 4 : 6, buf);
	return 0;
}

struct mp_bpf *mp_bpf__open(mp_bpf_event_fn fn, void *ctx)
{
	struct mp_bpf *b = calloc(1, sizeof(*b));
	struct bpf_program *progs[3];
	int err;

	if (!b)
		return NULL;
	b->fn = fn;
	b->ctx = ctx;
	pthread_mutex_init(&b->lock, NULL);
	pthread_cond_init(&b->cond, NULL);
	libbpf_set_print(libbpf_print);
	if (elf_version(EV_CURRENT) == EV_NONE) {
		err = -EINVAL;
		goto fail;
	}
	err = uprobe_pmu_init(b);
	if (err)
		goto fail;
	/* uprobe_multi links when the kernel has them: one link, and one grace period when it is
	 * closed, per object instead of per probe; perf-event uprobes otherwise. */
	b->skel = memprof_bpf__open();
	if (!b->skel) {
		err = errno ? -errno : -EINVAL;
		goto fail;
	}
	/* MP_BPF_NO_UPROBE_MULTI=1 forces perf-event uprobes (tests, benchmarks) */
	if (!getenv("MP_BPF_NO_UPROBE_MULTI")) {
		bpf_program__set_expected_attach_type(b->skel->progs.mp_entry,
						      MP_BPF_TRACE_UPROBE_MULTI);
		bpf_program__set_expected_attach_type(b->skel->progs.mp_ret,
						      MP_BPF_TRACE_UPROBE_MULTI);
		b->multi = !memprof_bpf__load(b->skel);
	}
	if (!b->multi) {
		memprof_bpf__destroy(b->skel);
		b->skel = memprof_bpf__open_and_load();
		if (!b->skel) {
			err = errno ? -errno : -EINVAL;
			goto fail;
		}
	}
	progs[0] = b->skel->progs.mp_fork;
	progs[1] = b->skel->progs.mp_exec;
	progs[2] = b->skel->progs.mp_exit;
	for (int i = 0; i < 3; i++) {
		b->lifecycle[i] = bpf_program__attach(progs[i]);
		if (!b->lifecycle[i]) {
			err = -errno;
			goto fail;
		}
	}
	b->rb = ring_buffer__new(bpf_map__fd(b->skel->maps.rb), rb_event, b, NULL);
	if (!b->rb) {
		err = -errno;
		goto fail;
	}
	if (!epoch_offset_known)
		epoch_offset_init();
	return b;
fail:
	mp_bpf__free(b);
	errno = err < 0 ? -err : EINVAL;
	return NULL;
}

void mp_bpf__free(struct mp_bpf *b)
{
	struct target *t;
	struct obj *o;

	if (!b)
		return;
	while ((t = b->targets)) {
		b->targets = t->next;
		target_bury(b, t);
	}
	pthread_mutex_lock(&b->lock);
	b->reaper_stop = true;
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);
	if (b->reaper_started)
		pthread_join(b->reaper, NULL);
	pthread_mutex_destroy(&b->lock);
	pthread_cond_destroy(&b->cond);
	while ((o = b->objs)) {
		b->objs = o->next;
		free(o);
	}
	ring_buffer__free(b->rb);
	for (int i = 0; i < 3; i++)
		bpf_link__destroy(b->lifecycle[i]);
	memprof_bpf__destroy(b->skel);
	if (libbpf_log_fn == b->log && libbpf_log_ctx == b->log_ctx)
		libbpf_log_fn = NULL;
	free(b);
}

void mp_bpf__set_log(struct mp_bpf *b, mp_bpf_log_fn fn, void *ctx)
{
	b->log = fn;
	b->log_ctx = ctx;
	libbpf_log_fn = fn;
	libbpf_log_ctx = ctx;
}

int mp_bpf__fd(const struct mp_bpf *b)
{
	return ring_buffer__epoll_fd(b->rb);
}

int mp_bpf__consume(struct mp_bpf *b)
{
	return ring_buffer__consume(b->rb);
}

static int procs_fd(struct mp_bpf *b)
{
	return bpf_map__fd(b->skel->maps.procs);
}

int mp_bpf__proc_set(struct mp_bpf *b, pid_t pid, const struct mp_proc_cfg *cfg)
{
	uint32_t key = pid;

	if (pid <= 0 || !cfg || cfg->profile == 0 || cfg->max_frames > MP_MAX_STACK ||
	    (!(cfg->flags & MP_PROC_RATE_ONE) && cfg->gap_k == 0))
		return -EINVAL;
	if (bpf_map_update_elem(procs_fd(b), &key, cfg, BPF_ANY))
		return -errno;
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
	return 0;
}

/* --- allocator discovery --- */

struct sym_found {
	uint64_t value, size;
	int prio;		/* 0: none; 1: hidden version; 2: .symtab; 3: default .dynsym */
};

static int sym_index(const char *name)
{
	size_t len = strcspn(name, "@");

	for (size_t i = 0; i < N_PROBES; i++)
		if (strlen(probe_table[i].sym) == len && !strncmp(probe_table[i].sym, name, len))
			return (int)i;
	return -1;
}

static void scan_symtab(Elf *elf, Elf_Scn *scn, const GElf_Shdr *sh, Elf_Data *versym,
			struct sym_found *found)
{
	Elf_Data *data = elf_getdata(scn, NULL);
	size_t n;

	if (!data || sh->sh_entsize == 0)
		return;
	n = sh->sh_size / sh->sh_entsize;
	for (size_t i = 1; i < n; i++) {
		GElf_Sym sym;
		const char *name;
		int idx, prio, type;

		if (!gelf_getsym(data, (int)i, &sym))
			continue;
		type = GELF_ST_TYPE(sym.st_info);
		if (type != STT_FUNC || sym.st_shndx == SHN_UNDEF || sym.st_value == 0)
			continue;
		name = elf_strptr(elf, sh->sh_link, sym.st_name);
		if (!name || (idx = sym_index(name)) < 0)
			continue;
		if (sh->sh_type == SHT_DYNSYM) {
			GElf_Versym vs = 0;

			prio = 3;
			if (versym && gelf_getversym(versym, (int)i, &vs) && (vs & 0x8000))
				prio = 1;
		} else {
			prio = 2;
		}
		if (prio > found[idx].prio) {
			found[idx].prio = prio;
			found[idx].value = sym.st_value;
			found[idx].size = sym.st_size;
		}
	}
}

/* Virtual address -> file offset through the PT_LOAD segments. */
static int vaddr_to_off(Elf *elf, uint64_t v, uint64_t *off, uint64_t *avail)
{
	size_t n;

	if (elf_getphdrnum(elf, &n))
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD)
			continue;
		if (v >= ph.p_vaddr && v < ph.p_vaddr + ph.p_filesz) {
			*off = v - ph.p_vaddr + ph.p_offset;
			*avail = ph.p_vaddr + ph.p_filesz - v;
			return 0;
		}
	}
	return -ENOENT;
}

static void place(struct mp_bpf *b, int fd, const char *path, const struct probe_def *pd,
		  uint64_t off, uint64_t size, uint64_t avail, struct resolved *r)
{
	struct mp_placement_req req = {
		.addr = off,
		.nargs = pd->nargs,
		.has_return = pd->ret,
		.skip_null_check = pd->shape == MP_SHAPE_FREE,
	};
	struct mp_placement pl;
	uint8_t *code;
	size_t len = size ? size : 64;
	ssize_t got;

	r->placed = 0;
	if (pd->shape == MP_SHAPE_DLSTATE)
		return; /* not an allocator, hit only when libraries are loaded */
	if (len > avail)
		len = avail;
	if (len > MAX_CODE_SCAN)
		len = MAX_CODE_SCAN;
	code = malloc(len);
	if (!code)
		return;
	got = pread(fd, code, len, (off_t)off);
	if (got > 0) {
		req.code = code;
		req.len = (size_t)got;
		mp_placement__choose(&req, &pl);
		r->placed = pl.offset;
		if (pl.offset || !pl.emulated)
			logf_(b, pl.emulated ? 7 : 6, "Probe on %s in '%s' at +%#" PRIx64 ": %s",
			      pd->sym, path, pl.offset, pl.reason);
	}
	free(code);
}

/* Find the allocator symbols of the object at @path. */
static struct obj *obj_scan(struct mp_bpf *b, const char *path, const struct stat *st)
{
	struct sym_found found[N_PROBES] = { 0 };
	Elf_Data *versym = NULL;
	Elf_Scn *scn = NULL;
	GElf_Ehdr eh;
	struct obj *o;
	Elf *elf;
	int fd;

	o = calloc(1, sizeof(*o));
	if (!o)
		return NULL;
	o->dev = st->st_dev;
	o->ino = st->st_ino;
	o->mtime = st->st_mtim;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return o; /* nothing probe-able found in it */
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF || !gelf_getehdr(elf, &eh) ||
	    eh.e_machine != EM_X86_64 || gelf_getclass(elf) != ELFCLASS64)
		goto out;
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;

		if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_GNU_versym)
			versym = elf_getdata(scn, NULL);
	}
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;

		if (!gelf_getshdr(scn, &sh))
			continue;
		if (sh.sh_type == SHT_DYNSYM || sh.sh_type == SHT_SYMTAB)
			scan_symtab(elf, scn, &sh, sh.sh_type == SHT_DYNSYM ? versym : NULL, found);
	}
	for (size_t i = 0; i < N_PROBES; i++) {
		uint64_t off, avail;
		bool dup = false;

		if (!found[i].prio || vaddr_to_off(elf, found[i].value, &off, &avail))
			continue;
		/* aliases (memalign = aligned_alloc, mmap64 = mmap): the first entry wins */
		for (size_t j = 0; j < o->nres; j++)
			if (o->res[j].offset - o->res[j].placed == off)
				dup = true;
		if (dup)
			continue;
		o->res[o->nres].probe = (unsigned int)i;
		place(b, fd, path, &probe_table[i], off, found[i].size, avail, &o->res[o->nres]);
		o->res[o->nres].offset = off + o->res[o->nres].placed;
		o->nres++;
	}
	/* An object defining malloc is an allocator: say which of its usual companions it lacks. */
	if (found[0].prio) {
		for (size_t i = 1; i < N_PROBES; i++)
			if (!probe_table[i].optional && !found[i].prio)
				logf_(b, 4, "'%s' defines malloc but not %s: its %s calls are not seen",
				      path, probe_table[i].sym, probe_table[i].sym);
	}
out:
	elf_end(elf);
	close(fd);
	return o;
}

static struct obj *obj_get(struct mp_bpf *b, const char *path, const struct stat *st)
{
	struct obj *o, **pp;

	for (pp = &b->objs; (o = *pp); pp = &o->next) {
		if (o->dev == st->st_dev && o->ino == st->st_ino) {
			if (o->mtime.tv_sec == st->st_mtim.tv_sec &&
			    o->mtime.tv_nsec == st->st_mtim.tv_nsec)
				return o;
			*pp = o->next; /* the file changed in place: scan again */
			free(o);
			b->nobjs--;
			break;
		}
	}
	if (b->nobjs >= MAX_OBJ_CACHE) {
		/* drop the oldest (the list tail) */
		for (pp = &b->objs; (*pp)->next; pp = &(*pp)->next)
			;
		free(*pp);
		*pp = NULL;
		b->nobjs--;
	}
	o = obj_scan(b, path, st);
	if (!o)
		return NULL;
	o->next = b->objs;
	b->objs = o;
	b->nobjs++;
	return o;
}

static int perf_uprobe_open(struct mp_bpf *b, pid_t pid, const char *path, uint64_t off,
			    bool retprobe)
{
	struct perf_event_attr attr;
	int fd;

	memset(&attr, 0, sizeof(attr));
	attr.size = sizeof(attr);
	attr.type = (uint32_t)b->uprobe_type;
	attr.config = retprobe ? 1ULL << b->retprobe_bit : 0;
	attr.config1 = (uint64_t)(uintptr_t)path;	/* uprobe_path */
	attr.config2 = off;				/* probe_offset */
	fd = (int)syscall(__NR_perf_event_open, &attr, pid, -1, -1, PERF_FLAG_FD_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static int attach_perf(struct mp_bpf *b, pid_t pid, const char *path, uint64_t off,
		       struct bpf_program *prog, bool retprobe, uint64_t cookie, struct plink *out)
{
	LIBBPF_OPTS(bpf_perf_event_opts, opts, .bpf_cookie = cookie);
	int fd = perf_uprobe_open(b, pid, path, off, retprobe);
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

/* Layout of union bpf_attr's link_create.uprobe_multi (Linux 6.6), after 16 bytes. */
struct uprobe_multi_attr {
	uint64_t path, offsets, ref_ctr_offsets, cookies;
	uint32_t cnt, flags, pid, _pad;
};

static int attach_multi(pid_t pid, const char *path, struct bpf_program *prog, bool retprobe,
			const uint64_t *offs, const uint64_t *cookies, uint32_t cnt,
			struct plink *out)
{
	union bpf_attr attr;
	struct uprobe_multi_attr um = {
		.path = (uint64_t)(uintptr_t)path,
		.offsets = (uint64_t)(uintptr_t)offs,
		.cookies = (uint64_t)(uintptr_t)cookies,
		.cnt = cnt,
		.flags = retprobe ? MP_BPF_F_UPROBE_MULTI_RETURN : 0,
		.pid = (uint32_t)pid,
	};
	int fd;

	_Static_assert(sizeof(attr) >= 16 + sizeof(um), "bpf_attr too small");
	memset(&attr, 0, sizeof(attr));
	attr.link_create.prog_fd = (uint32_t)bpf_program__fd(prog);
	attr.link_create.attach_type = MP_BPF_TRACE_UPROBE_MULTI;
	memcpy((char *)&attr + 16, &um, sizeof(um));
	fd = (int)syscall(__NR_bpf, BPF_LINK_CREATE, &attr, sizeof(attr));
	if (fd < 0)
		return -errno;
	out->l = NULL;
	out->fd = fd;
	return 0;
}

static int target_add_link(struct target *t, const struct plink *l)
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
	const struct probe_def *pd = &probe_table[r->probe];

	return MP_COOKIE(pd->shape, pd->kind);
}

/* Probes of one symbol, entry and return together or not at all. */
static int attach_sym(struct mp_bpf *b, struct target *t, const struct resolved *r,
		      const char *path)
{
	const struct probe_def *pd = &probe_table[r->probe];
	uint64_t cookie = res_cookie(r);
	struct plink le = { .fd = -1 }, lr = { .fd = -1 };
	int err;

	if (b->multi) {
		err = attach_multi(t->pid, path, b->skel->progs.mp_entry, false, &r->offset,
				   &cookie, 1, &le);
		if (!err && pd->ret)
			err = attach_multi(t->pid, path, b->skel->progs.mp_ret, true, &r->offset,
					   &cookie, 1, &lr);
	} else {
		err = attach_perf(b, t->pid, path, r->offset, b->skel->progs.mp_entry, false, cookie,
				  &le);
		if (!err && pd->ret)
			err = attach_perf(b, t->pid, path, r->offset, b->skel->progs.mp_ret, true,
					  cookie, &lr);
	}
	if (!err && (err = target_add_link(t, &le)) == 0 && pd->ret &&
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
		int err = attach_multi(t->pid, path, b->skel->progs.mp_entry, false, offs, cookies,
				       n, &le);

		if (!err && nr)
			err = attach_multi(t->pid, path, b->skel->progs.mp_ret, true, roffs, rcookies,
					   nr, &lr);
		if (!err && (err = target_add_link(t, &le)) == 0 && nr &&
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
			logf_(b, 3, "Failed to attach uprobe to '%s' in '%s' (pid %d, offset %#" PRIx64
			      "): %s", pd->sym, shown, t->pid, o->res[i].offset, strerror(-err));
			b->counters.attach_errors++;
			continue;
		}
		probes += pd->ret ? 2 : 1;
		if (pd->kind)
			t->nalloc += pd->ret ? 2 : 1;
	}
	return probes;
}

int mp_bpf__attach(struct mp_bpf *b, pid_t pid, char *why, size_t why_len)
{
	char path[PATH_MAX + 64], maps[64], line[PATH_MAX + 256];
	struct target *t;
	size_t scanned = 0;
	bool created = false;
	int attached = 0;
	FILE *f;

	if (why && why_len)
		why[0] = 0;
	if (pid <= 0)
		return -EINVAL;
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
	}
	while (fgets(line, sizeof(line), f)) {
		char perms[8], *file;
		unsigned long long ino;
		struct obj *o;
		struct stat st;
		bool seen = false;
		int off = 0;

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
		if (stat(path, &st))
			continue;
		for (size_t i = 0; i < t->nobjs; i++)
			if (t->objs[i].dev == st.st_dev && t->objs[i].ino == st.st_ino)
				seen = true;
		if (seen)
			continue;
		if (t->nobjs >= MAX_OBJS_PER_PROC) {
			logf_(b, 4, "Process %d maps more than %d executable objects: '%s' is not probed",
			      pid, MAX_OBJS_PER_PROC, file);
			continue;
		}
		o = obj_get(b, path, &st);
		if (!o)
			continue;
		t->objs[t->nobjs].dev = st.st_dev;
		t->objs[t->nobjs].ino = st.st_ino;
		t->nobjs++;
		if (o->nres)
			attached += attach_obj(b, t, o, path, file);
	}
	fclose(f);
	if (scanned == 0 && created) {
		free(t);
		return -ESRCH; /* a zombie or a kernel thread maps nothing */
	}
	if (t->nalloc == 0) {
		if (created)
			target_bury(b, t); /* nothing to keep: drop the ld.so probe too */
		if (why && why_len)
			snprintf(why, why_len,
				 "process %d maps no allocator: none of malloc, calloc, realloc, free, "
				 "posix_memalign, aligned_alloc, memalign, valloc, pvalloc, "
				 "reallocarray, operator new/delete, mmap or munmap is defined in its "
				 "%zu executable object(s)", pid, scanned);
		return -ENOENT;
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
			*pp = t->next;
			b->ntargets--;
			target_bury(b, t);
			return 0;
		}
	}
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

void mp_bpf__counters(const struct mp_bpf *b, struct mp_bpf_counters *out)
{
	*out = b->counters;
	out->uprobe_multi = b->multi;
}

uint64_t mp_gap_k(double rate)
{
	return mp_gap_k_q32(rate);
}

uint64_t mp_ktime_to_epoch_us(uint64_t ktime_ns)
{
	if (!epoch_offset_known)
		epoch_offset_init();
	return (uint64_t)((int64_t)ktime_ns + epoch_offset_ns) / 1000;
}
