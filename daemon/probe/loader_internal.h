/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The BPF loader's internals, shared by its files (daemon/probe/): load.c opens and loads,
 * discover.c finds allocator symbols, attach.c attaches them, ring.c reads the ring buffer,
 * maps.c reads and writes the maps, reaper.c destroys links off the caller's thread,
 * selfprobe.c probes our own process at open, preload_attach.c drives libmemprof-preload.
 * The public API is daemon/probe/bpf_loader.h.
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
 *
 * Probe placement (daemon/probe/placement.h). A uprobe hit on an instruction the kernel emulates
 * (push of a 64-bit register, nop, the 5-byte nop, jmp/call/jcc rel) costs a trap, ~0.6-0.9 us
 * here; any other instruction is single-stepped out of line, 12-16 us (docs/probe-costs.md).
 * So each allocator's probe goes on the first emulated instruction that every call we care
 * about reaches, provided nothing before it writes %rsp or an argument register the entry
 * program reads (only "transparent" instructions are skipped), no branch lands in the skipped
 * bytes, and, for free-like functions, the `test %rdi,%rdi; je` NULL check is stepped over
 * (free(NULL) is no event). Otherwise the probe stays on the entry, and the log says why.
 * glibc 2.36: malloc, calloc, realloc start with an emulated push; free starts with
 * `test %rdi,%rdi` and is probed at free+9 (`push %rbp`), posix_memalign at +7 past a
 * `cmpb $0,...(%rip)`. Every placement is logged at debug level; MP_PLACEMENT=entry forces
 * entry probes (tests, benchmarks). tests/bpf/overhead-placement.sh checks the real libc.
 *
 * Return probes and uprobe sessions. The address of a block is only known at return. With
 * uprobe sessions (Linux 6.13+, attach type BPF_TRACE_UPROBE_SESSION: one program, entry and
 * return halves told apart by bpf_session_is_return()), the entry half returns 1 for a call
 * that holds no sample point, and the kernel then skips its return half; only sampled calls
 * (and reallocs of a sampled block) pay for a return probe. Sessions are used when a session
 * link can be created on our own function (kernel_probe()) and a self-test there behaves
 * (first entry returns 0 and gets its return half, second returns 1 and does not); otherwise
 * entry + return probes (uprobe_multi links of mp_entry and mp_ret, or perf-event uprobes).
 * MP_BPF_NO_SESSION=1 and MP_BPF_NO_UPROBE_MULTI=1 force the fallbacks. The nesting rule of bpf/memprof.bpf.c needs
 * care then: a skipped return leaves no depth to undo, so the entry remembers the call's frame
 * (stack pointer and the return address stored there) and a later call is nested only while
 * that frame still holds that return address (nested_noret()).
 *
 * Probe cost and overhead control. At open, the loader times its own mp_bpf_self_target (which
 * starts with an emulated push, like malloc) without probes, with the entry program and with a
 * return probe too, in the mode the targets get: mp_bpf_counters.entry_cost_ns and
 * return_cost_ns (MP_PROBE_COST_NS="E,R" sets them). BPF counts each profiled process' entry
 * and return hits (per-CPU hash "phits", mp_bpf__proc_hits(); added per thread in batches of
 * 64 and at thread exit, so a live process' counts lag by less than 64 per thread); the engine
 * multiplies the two to enforce mp_profile_opts.max_overhead_pct.
 *
 * State shared with the BPF programs through the mmap'ed .bss: mp_procs_epoch, bumped after
 * every write of "procs" (the programs keep a per-thread copy of their process' entry while it
 * is current), and the sampled-address filter mp_sfilter[], decremented for each entry
 * sampled_purge() deletes (bpf/memprof.h).
 */
#ifndef MEMPROFD_LOADER_INTERNAL_H
#define MEMPROFD_LOADER_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <bpf/libbpf.h>

#include "daemon/probe/bpf_loader.h"
#include "memprof.skel.h"

#define MAX_OBJS_PER_PROC	512	/* executable objects scanned per process */
#define MAX_OBJ_CACHE		1024	/* objects whose allocator symbols are cached */

/* Probe cost when calibration fails (docs/probe-costs.md: an emulated entry 0.76-0.95 us,
 * a return probe on top of it +0.5-0.8 us). */
#define MP_DEFAULT_ENTRY_COST_NS	900
#define MP_DEFAULT_RETURN_COST_NS	700
#define MP_CALIB_CALLS			400	/* calls per timed batch */
#define MP_CALIB_BATCHES		7

#define N_PROBES		149	/* entries of probe_table[] (discover.c) */

struct probe_def {
	const char *sym;
	enum mp_kind kind;
	enum mp_shape shape;	/* where its arguments are (the entry program's cookie) */
	unsigned int nargs;	/* argument registers the entry program reads */
	bool ret;		/* a return probe too */
	bool optional;		/* may be missing from an object that defines malloc */
};

/* The allocator entry points probed (discover.c). */
extern const struct probe_def probe_table[N_PROBES];

/* One allocator symbol resolved in an object. */
struct resolved {
	unsigned int probe;	/* index in probe_table */
	uint64_t offset;	/* file offset of the probe point */
	uint64_t placed;	/* bytes after the symbol where placement put the probe */
	uint64_t seg_before;	/* bytes of its PT_LOAD segment before / after the probe point */
	uint64_t seg_after;
	uint64_t cookie;	/* MP_COOKIE(), with the C library's bits (cookies_set()) */
};

/* An object's allocator symbols, cached by identity. */
struct obj {
	dev_t dev;
	ino_t ino;
	struct timespec mtime;
	bool go;		/* built by the Go toolchain (mp_elf_is_go()) */
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

/* A process with probes. */
struct target {
	pid_t pid;
	size_t nobjs;
	struct obj_ref objs[MAX_OBJS_PER_PROC];
	size_t nlinks, cap;
	size_t nalloc;		/* probes on allocator entry points */
	struct plink *links;
	uint64_t live;		/* sampled blocks seen minus frees seen (for purges) */
	/* Profiled through libmemprof-preload (its USDT probes) instead of allocator uprobes. */
	bool preload;
	bool pl_recheck;	/* exec'd: decide the mode again at the next attach */
	bool go;		/* a Go program: its mmaps are the runtime's (MP_PROC_NO_MMAP) */
	uint8_t pl_pending;	/* ld.so rendezvous after exec that may still map the library */
	dev_t pl_dev;		/* the library's file */
	ino_t pl_ino;
	uint64_t pl_cfg;	/* address of memprof_preload_config in the process */
	uint32_t pl_gen;	/* the config generation we wrote last */
	uint64_t pl_queue;	/* address of its struct memprof_preload_pending, 0: not read */
	uint64_t pl_seq;	/* its seq when last looked at (mp_bpf__preload_pull) */
	uint64_t pl_pulled;	/* its seq when last taken */
	bool pl_seq_valid, pl_pulled_valid;
	struct target *next;
};

struct mp_bpf {
	struct memprof_bpf *skel;
	struct ring_buffer *rb;
	struct bpf_link *lifecycle[3];
	/* cgroup_attach_task and cgroup_mkdir (cgroup targets); NULL where they could not be
	 * attached (then mp_bpf__watch() refuses cgroups) */
	struct bpf_link *cg_links[2];
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
	int ref_ctr_shift;	/* where a USDT semaphore's offset goes in the config, or -1 */
	bool multi;		/* uprobe_multi links (Linux 6.6+): one per object and program */
	bool session;		/* uprobe session links (Linux 6.13+): mp_session, no mp_ret */
	struct bpf_program *exit_prog;	/* mp_exit or mp_exit_task (kernel_probe()) */
	char mechanisms[400];	/* mp_bpf__mechanisms() */
	/* The first probe of the current mp_bpf__attach() that failed to attach, or 0. */
	int attach_err;
	char attach_err_what[PATH_MAX + 96];
	uint64_t entry_cost_ns, return_cost_ns;	/* cost of a probe hit (calibrate()) */
	bool calibrated;
	struct mp_bpf_counters counters;
	/* Links of detached processes, destroyed by the reaper thread (closing a uprobe perf
	 * event waits for grace periods: ~0.1 s per probe, far too long for the event loop). */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t reaper;
	bool reaper_started, reaper_stop;
	struct target *graveyard;
	bool reaping;		/* the reaper is destroying a target it took */
	/* Links on our own process (session self-test, calibration), kept open until
	 * mp_bpf__free(): closed at once, the grace periods they wait for would run into our
	 * exit (memprofctl record's, ~40 ms); kept, they are shared with record's helper by then
	 * and released after us. Nothing calls their functions again. */
	struct target *self;
	/* Records mp_bpf__consume_max() may still deliver (0: no limit), and until when. */
	unsigned int budget;
	uint64_t until_ns;
	bool budget_spent;
};

/* Through the log function, if any (mp_bpf__set_log()); @level is a syslog priority. */
void logf_(struct mp_bpf *b, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ring.c: libbpf's ring-buffer callback */
int rb_event(void *ctx, void *data, size_t size);

/* maps.c */
void sampled_purge(struct mp_bpf *b, pid_t pid, uint64_t before_ns);
int procs_fd(struct mp_bpf *b);
void procs_changed(struct mp_bpf *b);
void proc_flag(struct mp_bpf *b, pid_t pid, uint32_t flag, bool on);

/* discover.c: the allocator symbols of an object, cached */
struct obj *obj_get(struct mp_bpf *b, const char *path, const struct stat *st, int fd);
/* The cached object of that file, or NULL. */
const struct obj *obj_find(const struct mp_bpf *b, dev_t dev, ino_t ino);

/* attach.c */
struct target *target_find(struct mp_bpf *b, pid_t pid);
int attach_perf(struct mp_bpf *b, pid_t pid, const char *path, uint64_t off,
		struct bpf_program *prog, bool retprobe, uint64_t cookie,
		uint64_t ref_ctr_off, struct plink *out);
int attach_multi(pid_t pid, const char *path, struct bpf_program *prog, bool retprobe,
		 const uint64_t *offs, const uint64_t *cookies, const uint64_t *refs,
		 uint32_t cnt, struct plink *out);
int target_add_link(struct target *t, const struct plink *l);

/* reaper.c */
void plink_destroy(struct plink *p);
void links_destroy(struct plink *links, size_t n);
void target_bury(struct mp_bpf *b, struct target *t);

/* selfprobe.c: functions of our own to probe (they start with an emulated push) */
void mp_bpf_self_target(void);
void mp_bpf_selftest_target(void);
int self_target(uintptr_t a, char *path, size_t len, uint64_t *off);
void self_keep(struct mp_bpf *b, const struct plink *links, size_t n);
int session_selftest(struct mp_bpf *b, const char *path, uint64_t off);
void calibrate(struct mp_bpf *b, const char *path, uint64_t off);

/* preload_attach.c */
struct pl_found;
int pltargets_fd(struct mp_bpf *b);
int pl_sync(struct mp_bpf *b, struct target *t, const struct mp_proc_cfg *cfg,
	    const struct pl_found *pf);
int pl_attach(struct mp_bpf *b, struct target *t);

#endif
