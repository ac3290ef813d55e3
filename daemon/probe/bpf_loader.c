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
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <math.h>
#include <stddef.h>

#include <gelf.h>
#include <libelf.h>
#include <linux/perf_event.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <memprof/preload.h>

#include "bpf/gap.h"
#include "daemon/probe/bpf_kernel.h"
#include "daemon/probe/bpf_loader.h"
#include "daemon/probe/elf_syms.h"
#include "daemon/probe/placement.h"
#include "daemon/probe/target_open.h"
#include "daemon/probe/uprobe_link.h"
#include "memprof.skel.h"

#define MAX_OBJS_PER_PROC	512	/* executable objects scanned per process */
#define MAX_OBJ_CACHE		1024	/* objects whose allocator symbols are cached */

/* Probe cost when calibration fails (docs/probe-costs.md: an emulated entry 0.76-0.95 us,
 * a return probe on top of it +0.5-0.8 us). */
#define MP_DEFAULT_ENTRY_COST_NS	900
#define MP_DEFAULT_RETURN_COST_NS	700
#define MP_CALIB_CALLS			400	/* calls per timed batch */
#define MP_CALIB_BATCHES		7

struct probe_def {
	const char *sym;
	enum mp_kind kind;
	enum mp_shape shape;	/* where its arguments are (the entry program's cookie) */
	unsigned int nargs;	/* argument registers the entry program reads */
	bool ret;		/* a return probe too */
	bool optional;		/* may be missing from an object that defines malloc */
};

/* Optional entry points of other allocators (jemalloc, tcmalloc, mimalloc, C23). */
#define MP_ALLOC_DEF(s, k, sh, n)	{ s, k, sh, n, true, true }
#define MP_FREE_DEF(s)			{ s, MP_KIND_FREE, MP_SHAPE_FREE, 1, false, true }
#define MP_DELETE_DEF(s)		{ s, MP_KIND_DELETE, MP_SHAPE_FREE, 1, false, true }

/*
 * The allocator entry points, looked up in every executable object a process maps (.dynsym and
 * .symtab: an allocator linked into the executable is found too). Aliases (one address under
 * several names, as tcmalloc's tc_free = free = operator delete) are probed once, as the first
 * of their names in this table.
 */
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
	{ "pvalloc", MP_KIND_PVALLOC, MP_SHAPE_PAGES, 1, true, true },
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
	/* C23 sized frees, cfree */
	MP_FREE_DEF("free_sized"),
	MP_FREE_DEF("free_aligned_sized"),
	MP_FREE_DEF("cfree"),
	/*
	 * jemalloc's own API (libjemalloc.so.2 exports it beside malloc and friends), and the
	 * same with the je_ prefix of builds that keep the system allocator (redis' bundled
	 * copy, --with-jemalloc-prefix). nallocx and sallocx allocate nothing: not probed.
	 */
	MP_ALLOC_DEF("mallocx", MP_KIND_MALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("rallocx", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_ALLOC_DEF("xallocx", MP_KIND_XALLOCX, MP_SHAPE_XALLOCX, 2),
	MP_FREE_DEF("dallocx"),
	MP_FREE_DEF("sdallocx"),
	MP_ALLOC_DEF("je_malloc", MP_KIND_MALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("je_calloc", MP_KIND_CALLOC, MP_SHAPE_CALLOC, 2),
	MP_ALLOC_DEF("je_realloc", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_FREE_DEF("je_free"),
	MP_ALLOC_DEF("je_posix_memalign", MP_KIND_POSIX_MEMALIGN, MP_SHAPE_POSIX_MEMALIGN, 3),
	MP_ALLOC_DEF("je_aligned_alloc", MP_KIND_ALIGNED_ALLOC, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("je_memalign", MP_KIND_MEMALIGN, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("je_valloc", MP_KIND_VALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("je_mallocx", MP_KIND_MALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("je_rallocx", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_ALLOC_DEF("je_xallocx", MP_KIND_XALLOCX, MP_SHAPE_XALLOCX, 2),
	MP_FREE_DEF("je_dallocx"),
	MP_FREE_DEF("je_sdallocx"),
	/* gperftools' tcmalloc: tc_* (aliases of malloc & co. in Debian's build) */
	MP_ALLOC_DEF("tc_malloc", MP_KIND_MALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("tc_malloc_skip_new_handler", MP_KIND_MALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("tc_calloc", MP_KIND_CALLOC, MP_SHAPE_CALLOC, 2),
	MP_ALLOC_DEF("tc_realloc", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_ALLOC_DEF("tc_memalign", MP_KIND_MEMALIGN, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("tc_posix_memalign", MP_KIND_POSIX_MEMALIGN, MP_SHAPE_POSIX_MEMALIGN, 3),
	MP_ALLOC_DEF("tc_valloc", MP_KIND_VALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("tc_pvalloc", MP_KIND_PVALLOC, MP_SHAPE_PAGES, 1),
	MP_ALLOC_DEF("tc_new", MP_KIND_NEW, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("tc_newarray", MP_KIND_NEW, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("tc_new_nothrow", MP_KIND_NEW, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("tc_newarray_nothrow", MP_KIND_NEW, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("tc_new_aligned", MP_KIND_NEW, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("tc_newarray_aligned", MP_KIND_NEW, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("tc_new_aligned_nothrow", MP_KIND_NEW, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("tc_newarray_aligned_nothrow", MP_KIND_NEW, MP_SHAPE_SIZE1, 1),
	MP_FREE_DEF("tc_free"),
	MP_FREE_DEF("tc_free_sized"),
	MP_FREE_DEF("tc_cfree"),
	MP_DELETE_DEF("tc_delete"),
	MP_DELETE_DEF("tc_deletearray"),
	MP_DELETE_DEF("tc_delete_sized"),
	MP_DELETE_DEF("tc_deletearray_sized"),
	MP_DELETE_DEF("tc_delete_nothrow"),
	MP_DELETE_DEF("tc_deletearray_nothrow"),
	MP_DELETE_DEF("tc_delete_aligned"),
	MP_DELETE_DEF("tc_deletearray_aligned"),
	MP_DELETE_DEF("tc_delete_sized_aligned"),
	MP_DELETE_DEF("tc_deletearray_sized_aligned"),
	MP_DELETE_DEF("tc_delete_aligned_nothrow"),
	MP_DELETE_DEF("tc_deletearray_aligned_nothrow"),
	/*
	 * mimalloc's API. mi_expand(p, n) resizes in place or returns NULL leaving p alone:
	 * realloc semantics. mi_reallocf frees p when it fails (counted as a realloc that failed,
	 * p stays live). mi_heap_reallocn/recalloc (4 arguments) are not probed.
	 */
	MP_ALLOC_DEF("mi_malloc", MP_KIND_MALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_zalloc", MP_KIND_CALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_malloc_small", MP_KIND_MALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_zalloc_small", MP_KIND_CALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_calloc", MP_KIND_CALLOC, MP_SHAPE_CALLOC, 2),
	MP_ALLOC_DEF("mi_mallocn", MP_KIND_CALLOC, MP_SHAPE_CALLOC, 2),
	MP_ALLOC_DEF("mi_realloc", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_ALLOC_DEF("mi_reallocf", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_ALLOC_DEF("reallocf", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_ALLOC_DEF("mi_rezalloc", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_ALLOC_DEF("mi_expand", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_ALLOC_DEF("mi_reallocn", MP_KIND_REALLOCARRAY, MP_SHAPE_REALLOCARRAY, 3),
	MP_ALLOC_DEF("mi_recalloc", MP_KIND_REALLOCARRAY, MP_SHAPE_REALLOCARRAY, 3),
	MP_ALLOC_DEF("mi_reallocarray", MP_KIND_REALLOCARRAY, MP_SHAPE_REALLOCARRAY, 3),
	MP_ALLOC_DEF("mi_malloc_aligned", MP_KIND_ALIGNED_ALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_malloc_aligned_at", MP_KIND_ALIGNED_ALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_zalloc_aligned", MP_KIND_ALIGNED_ALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_zalloc_aligned_at", MP_KIND_ALIGNED_ALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_calloc_aligned", MP_KIND_CALLOC, MP_SHAPE_CALLOC, 2),
	MP_ALLOC_DEF("mi_calloc_aligned_at", MP_KIND_CALLOC, MP_SHAPE_CALLOC, 2),
	MP_ALLOC_DEF("mi_realloc_aligned", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_ALLOC_DEF("mi_realloc_aligned_at", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_ALLOC_DEF("mi_rezalloc_aligned", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_ALLOC_DEF("mi_rezalloc_aligned_at", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_ALLOC_DEF("mi_recalloc_aligned", MP_KIND_REALLOCARRAY, MP_SHAPE_REALLOCARRAY, 3),
	MP_ALLOC_DEF("mi_recalloc_aligned_at", MP_KIND_REALLOCARRAY, MP_SHAPE_REALLOCARRAY, 3),
	MP_ALLOC_DEF("mi_posix_memalign", MP_KIND_POSIX_MEMALIGN, MP_SHAPE_POSIX_MEMALIGN, 3),
	MP_ALLOC_DEF("mi_memalign", MP_KIND_MEMALIGN, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("mi_aligned_alloc", MP_KIND_ALIGNED_ALLOC, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("mi_valloc", MP_KIND_VALLOC, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_pvalloc", MP_KIND_PVALLOC, MP_SHAPE_PAGES, 1),
	MP_ALLOC_DEF("mi_new", MP_KIND_NEW, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_new_nothrow", MP_KIND_NEW, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_new_aligned", MP_KIND_NEW, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_new_aligned_nothrow", MP_KIND_NEW, MP_SHAPE_SIZE1, 1),
	MP_ALLOC_DEF("mi_new_n", MP_KIND_NEW, MP_SHAPE_CALLOC, 2),
	MP_ALLOC_DEF("mi_new_realloc", MP_KIND_REALLOC, MP_SHAPE_REALLOC, 2),
	MP_ALLOC_DEF("mi_new_reallocn", MP_KIND_REALLOCARRAY, MP_SHAPE_REALLOCARRAY, 3),
	MP_ALLOC_DEF("mi_heap_malloc", MP_KIND_MALLOC, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("mi_heap_zalloc", MP_KIND_CALLOC, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("mi_heap_malloc_small", MP_KIND_MALLOC, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("mi_heap_malloc_aligned", MP_KIND_ALIGNED_ALLOC, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("mi_heap_malloc_aligned_at", MP_KIND_ALIGNED_ALLOC, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("mi_heap_zalloc_aligned", MP_KIND_ALIGNED_ALLOC, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("mi_heap_zalloc_aligned_at", MP_KIND_ALIGNED_ALLOC, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("mi_heap_alloc_new", MP_KIND_NEW, MP_SHAPE_SIZE2, 2),
	MP_ALLOC_DEF("mi_heap_calloc", MP_KIND_CALLOC, MP_SHAPE_HEAP_CALLOC, 3),
	MP_ALLOC_DEF("mi_heap_mallocn", MP_KIND_CALLOC, MP_SHAPE_HEAP_CALLOC, 3),
	MP_ALLOC_DEF("mi_heap_calloc_aligned", MP_KIND_CALLOC, MP_SHAPE_HEAP_CALLOC, 3),
	MP_ALLOC_DEF("mi_heap_calloc_aligned_at", MP_KIND_CALLOC, MP_SHAPE_HEAP_CALLOC, 3),
	MP_ALLOC_DEF("mi_heap_alloc_new_n", MP_KIND_NEW, MP_SHAPE_HEAP_CALLOC, 3),
	MP_ALLOC_DEF("mi_heap_realloc", MP_KIND_REALLOC, MP_SHAPE_HEAP_REALLOC, 3),
	MP_ALLOC_DEF("mi_heap_reallocf", MP_KIND_REALLOC, MP_SHAPE_HEAP_REALLOC, 3),
	MP_ALLOC_DEF("mi_heap_rezalloc", MP_KIND_REALLOC, MP_SHAPE_HEAP_REALLOC, 3),
	MP_ALLOC_DEF("mi_heap_realloc_aligned", MP_KIND_REALLOC, MP_SHAPE_HEAP_REALLOC, 3),
	MP_ALLOC_DEF("mi_heap_realloc_aligned_at", MP_KIND_REALLOC, MP_SHAPE_HEAP_REALLOC, 3),
	MP_ALLOC_DEF("mi_heap_rezalloc_aligned", MP_KIND_REALLOC, MP_SHAPE_HEAP_REALLOC, 3),
	MP_ALLOC_DEF("mi_heap_rezalloc_aligned_at", MP_KIND_REALLOC, MP_SHAPE_HEAP_REALLOC, 3),
	MP_FREE_DEF("mi_free"),
	MP_FREE_DEF("mi_cfree"),
	MP_FREE_DEF("mi_free_size"),
	MP_FREE_DEF("mi_free_aligned"),
	MP_FREE_DEF("mi_free_size_aligned"),
	/* libraries mapped by ld.so (startup, dlopen): attach to them (MP_EV_MAP) */
	{ "_dl_debug_state", 0, MP_SHAPE_DLSTATE, 0, false, true },
};

#define N_PROBES (sizeof(probe_table) / sizeof(probe_table[0]))

/* One allocator symbol resolved in an object. */
struct resolved {
	unsigned int probe;	/* index in probe_table */
	uint64_t offset;	/* file offset of the probe point */
	uint64_t placed;	/* bytes after the symbol where placement put the probe */
	uint64_t seg_before;	/* bytes of its PT_LOAD segment before / after the probe point */
	uint64_t seg_after;
	uint64_t cookie;	/* MP_COOKIE(), with the C library's bits (cookie_libc()) */
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
	/* Profiled through libmemprof-preload (its USDT probes) instead of allocator uprobes. */
	bool preload;
	bool pl_recheck;	/* exec'd: decide the mode again at the next attach */
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

/* The first config bit of the uprobe PMU's format field @field ("config:N" or "config:N-M"). */
static int uprobe_format_bit(const char *field, int *bit)
{
	char path[128], buf[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/sys/bus/event_source/devices/uprobe/format/%s", field);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -EINVAL;
	buf[n] = 0;
	return sscanf(buf, "config:%d", bit) == 1 ? 0 : -EINVAL;
}

/*
 * The uprobe PMU: its type, the config bit that makes a uretprobe, and where a USDT
 * semaphore's offset goes (Linux 4.20+: "config:32-63"; without it, no preload mode).
 */
static int uprobe_pmu_init(struct mp_bpf *b)
{
	int err;

	err = read_int_file("/sys/bus/event_source/devices/uprobe/type", &b->uprobe_type);
	if (!err)
		err = uprobe_format_bit("retprobe", &b->retprobe_bit);
	if (!err && uprobe_format_bit("ref_ctr_offset", &b->ref_ctr_shift))
		b->ref_ctr_shift = -1;
	return err;
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

/*
 * Destroy the targets of list @t together: the links of all of them at once, so that their
 * closes share grace periods. One target at a time (a few links each) let a fork/exec storm's
 * exited processes pile up their links faster than ~25 a second went: 2800 fds in 20 s.
 */
static void targets_destroy(struct target *t)
{
	struct plink *all;
	struct target *next;
	size_t n = 0;

	for (struct target *i = t; i; i = i->next)
		n += i->nlinks;
	all = t && t->next ? calloc(n ? n : 1, sizeof(*all)) : NULL;
	if (all) {
		n = 0;
		for (struct target *i = t; i; i = i->next) {
			memcpy(all + n, i->links, i->nlinks * sizeof(*all));
			n += i->nlinks;
			i->nlinks = 0;
		}
		links_destroy(all, n);
		free(all);
	}
	for (; t; t = next) {
		next = t->next;
		target_destroy(t);
	}
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
		b->graveyard = NULL;
		b->reaping = true;
		pthread_mutex_unlock(&b->lock);
		targets_destroy(t);
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
	if (!b->reaper_started) {
		sigset_t all, old;

		/* The thread takes no signal: a process-directed one (SIGCHLD for a caller that
		 * reads them from a signalfd) must not be delivered to it and lost. */
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		b->reaper_started = !pthread_create(&b->reaper, NULL, reaper_run, b);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
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
static void sampled_purge(struct mp_bpf *b, pid_t pid, uint64_t before_ns)
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

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000 + (uint64_t)ts.tv_nsec;
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
		if (t) {
			/* The new image may (not) map libmemprof-preload, which ld.so maps after
			 * exec: decide now and at its next two rendezvous (RT_ADD, RT_CONSISTENT). */
			t->pl_recheck = true;
			t->pl_pending = 2;
		}
		err = mp_bpf__attach(b, h->pid, why, sizeof(why));
		if (err < 0 && err != -ESRCH && err != -ENOENT) {
			b->counters.auto_attach_errors++;
			logf_(b, 4, "Failed to attach to %u after exec: %s", h->pid, strerror(-err));
		}
		break;
	case MP_EV_MAP:
		/* only for processes probed already (the engine decides who is) */
		t = target_find(b, h->pid);
		if (!t)
			return 0;
		if (t->pl_pending) {
			t->pl_pending--;
			t->pl_recheck = true;
		}
		err = mp_bpf__attach(b, h->pid, why, sizeof(why));
		if (err < 0 && err != -ESRCH && err != -ENOENT) {
			b->counters.auto_attach_errors++;
			logf_(b, 4, "Failed to attach to objects newly mapped by %u: %s", h->pid,
			      strerror(-err));
		}
		break;	/* the engine snapshots the new mappings */
	case MP_EV_EXIT:
		t = target_find(b, h->pid);
		if (t && t->live)
			sampled_purge(b, h->pid, h->time_ns);
		mp_bpf__detach(b, h->pid);
		break;
	default:
		break;
	}
	err = b->fn ? b->fn(b->ctx, data, size) : 0;
	if (h->type == MP_EV_EXIT) /* after the callback, which may read the final count */
		mp_bpf__proc_hits_del(b, h->pid);
	if (err || !b->budget)
		return err;
	/* Lifecycle records cost up to milliseconds (attaching probes): look at the clock after
	 * each of them, and after every 256 others. */
	if (!--b->budget || ((h->type == MP_EV_FORK || h->type == MP_EV_EXEC || h->type == MP_EV_MAP ||
			      h->type == MP_EV_EXIT || !(b->budget & 255)) && mono_ns() >= b->until_ns)) {
		/* libbpf consumed this record already: it stops here, the rest stays queued */
		b->budget_spent = true;
		return -EAGAIN;
	}
	return 0;
}

static mp_bpf_log_fn libbpf_log_fn;
static void *libbpf_log_ctx;

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	char buf[512];
	size_t n;

	if (level == LIBBPF_DEBUG)
		return 0;
	if (mp_load_log__active()) { /* skel_load(): explained at once if it fails */
		mp_load_log__add(fmt, ap);
		return 0;
	}
	if (!libbpf_log_fn)
		return 0;
	vsnprintf(buf, sizeof(buf), fmt, ap);
	n = strlen(buf);
	while (n && buf[n - 1] == '\n')
		buf[--n] = 0;
	libbpf_log_fn(libbpf_log_ctx, level == LIBBPF_WARN ? 4 : 6, buf);
	return 0;
}

static int self_target(uintptr_t a, char *path, size_t len, uint64_t *off);
void mp_bpf_self_target(void);
void mp_bpf_selftest_target(void);
static int session_selftest(struct mp_bpf *b, const char *path, uint64_t off);
static void calibrate(struct mp_bpf *b, const char *path, uint64_t off);
static void self_keep(struct mp_bpf *b, const struct plink *links, size_t n);

/*
 * Our pid namespace: BPF reports and takes pids in it (mp_pidns_* in bpf/memprof.bpf.c), so
 * that a daemon in a container sees its own pids.
 */
struct pidns {
	bool nested;		/* not the initial pid namespace */
	uint64_t dev;		/* of /proc/self/ns/pid, in the kernel's encoding (MKDEV) */
	uint64_t ino;
};

#define MP_PROC_PID_INIT_INO	0xEFFFFFFCU	/* the initial pid namespace's inode (proc_ns.h) */

static int pidns_self(struct pidns *ns)
{
	struct stat st;

	if (stat("/proc/self/ns/pid", &st))
		return -errno;
	ns->dev = (uint64_t)major(st.st_dev) << 20 | minor(st.st_dev);
	ns->ino = st.st_ino;
	ns->nested = st.st_ino != MP_PROC_PID_INIT_INO;
	return 0;
}

/* Nested pid namespace: run mp_pidns_probe in our context to learn its level, and check that
 * BPF sees our own pid as getpid(). */
static int pidns_probe(struct memprof_bpf *skel)
{
	LIBBPF_OPTS(bpf_test_run_opts, opts);
	uint64_t self;

	if (bpf_prog_test_run_opts(bpf_program__fd(skel->progs.mp_pidns_probe), &opts))
		return -errno;
	self = skel->bss->mp_pidns_self;
	if ((pid_t)(self >> 32) != getpid() || (pid_t)(uint32_t)self != (pid_t)syscall(SYS_gettid))
		return -ENXIO;
	return 0;
}

/*
 * Open and load the programs: @multi uprobe_multi links, @session uprobe sessions, exit program
 * @exit_task (mp_exit_task instead of mp_exit). On failure @why says which program failed and
 * the kernel's reason (libbpf's messages are collected meanwhile).
 */
static struct memprof_bpf *skel_load(const struct pidns *ns, bool multi, bool session,
				     bool exit_task, char *why, size_t why_len)
{
	struct memprof_bpf *skel = memprof_bpf__open();
	char *log;
	int err;

	if (!skel) {
		snprintf(why, why_len, "cannot open the BPF object: %s", strerror(errno));
		return NULL;
	}
	skel->rodata->mp_session_mode = session;
	skel->rodata->mp_pidns_nested = ns->nested;
	skel->rodata->mp_pidns_dev = ns->dev;
	skel->rodata->mp_pidns_ino = ns->ino;
	bpf_program__set_autoload(skel->progs.mp_pidns_probe, ns->nested);
	bpf_program__set_autoload(skel->progs.mp_session, session);
	/* A session program is entry and return at once: the pair is never attached then, and
	 * not verifying it saves about 0.1 s of every start (a session self-test that fails
	 * reloads without sessions). */
	bpf_program__set_autoload(skel->progs.mp_entry, !session);
	bpf_program__set_autoload(skel->progs.mp_ret, !session);
	bpf_program__set_autoload(skel->progs.mp_exit, !exit_task);
	bpf_program__set_autoload(skel->progs.mp_exit_task, exit_task);
	/* test-only: a program every verifier rejects (tests/bpf/kernel-mechanisms.sh) */
	bpf_program__set_autoload(skel->progs.mp_test_reject, getenv("MP_BPF_TEST_REJECT") != NULL);
	if (session)
		bpf_program__set_expected_attach_type(skel->progs.mp_session,
						      MP_BPF_TRACE_UPROBE_SESSION);
	if (multi) {
		struct bpf_program *usdt[] = { skel->progs.mp_usdt_alloc, skel->progs.mp_usdt_free,
					       skel->progs.mp_usdt_free_batch,
					       skel->progs.mp_usdt_flush };

		bpf_program__set_expected_attach_type(skel->progs.mp_entry,
						      MP_BPF_TRACE_UPROBE_MULTI);
		bpf_program__set_expected_attach_type(skel->progs.mp_ret,
						      MP_BPF_TRACE_UPROBE_MULTI);
		/* pl_attach_probe(): one link per probe, with the semaphores */
		for (size_t i = 0; i < sizeof(usdt) / sizeof(usdt[0]); i++)
			bpf_program__set_expected_attach_type(usdt[i], MP_BPF_TRACE_UPROBE_MULTI);
	}
	mp_load_log__begin();
	err = memprof_bpf__load(skel) ? -errno : 0;
	log = mp_load_log__end();
	if (err)
		mp_load_explain(log, err, mp_kernel_bpf_capable(), why, why_len);
	free(log);
	if (!err && ns->nested && (err = pidns_probe(skel)))
		snprintf(why, why_len, "program 'mp_pidns_probe' could not learn our pid "
			 "namespace: %s", strerror(-err));
	if (err) {
		memprof_bpf__destroy(skel);
		errno = -err;
		return NULL;
	}
	return skel;
}

/* Can a link of @attach_type be created on our own function @off of @path? 0 or -errno; the
 * link is kept (closed now, its grace period would run into a short `record`'s exit). */
static int link_probe(struct mp_bpf *b, unsigned int attach_type, const char *path, uint64_t off)
{
	int prog = mp_kernel_probe_prog(attach_type);
	struct plink l = { .fd = -1 };

	if (prog < 0)
		return prog;
	l.fd = mp_uprobe_multi_link(prog, attach_type, getpid(), path, &off, NULL, NULL, 1, false);
	close(prog);	/* the link holds the program */
	if (l.fd < 0)
		return l.fd;
	self_keep(b, &l, 1);
	return 0;
}

/*
 * Can links of @attach_type (@what) be used? Not when @env is set or @missing says why not;
 * else a link is tried on our own function. @why gets the reason when not; the result is
 * logged once, with the @fallback used instead.
 */
static bool link_kind(struct mp_bpf *b, const char *what, const char *env, const char *missing,
		      unsigned int attach_type, const char *path, uint64_t off, char *why,
		      size_t len, const char *fallback)
{
	int err;

	if (getenv(env))
		snprintf(why, len, "disabled by %s", env);
	else if (missing)
		snprintf(why, len, "%s", missing);
	else if ((err = link_probe(b, attach_type, path, off)))
		snprintf(why, len, "a link on our own test function failed: %s", strerror(-err));
	else {
		logf_(b, 6, "Kernel: %s: yes", what);
		return true;
	}
	logf_(b, 6, "Kernel: %s: no (%s): %s", what, why, fallback);
	return false;
}

/*
 * Every kernel-dependent choice, probed on the running kernel and logged once: the exit
 * tracepoint's prototype (kernel BTF), uprobe_multi links and uprobe session links (a real link
 * on our own test function @path+@off; @path NULL: none found). Fills @exit_task, @multi,
 * @session. Returns 0, or -errno with @why when the kernel lacks something required.
 */
static int kernel_probe(struct mp_bpf *b, const char *path, uint64_t off, bool *exit_task,
			bool *multi, bool *session, char *multi_why, char *session_why,
			size_t len, char *why, size_t why_len)
{
	int n = mp_kernel_tp_nargs("sched_process_exit");

	if (n < 1) {
		snprintf(why, why_len, "cannot read the prototype of tracepoint sched_process_exit "
			 "from the kernel's BTF (/sys/kernel/btf/vmlinux): %s; memprofd needs a "
			 "kernel built with CONFIG_DEBUG_INFO_BTF", strerror(n < 0 ? -n : EPROTO));
		return n < 0 ? n : -EPROTO;
	}
	*exit_task = n < 2;
	logf_(b, 6, "Kernel: tracepoint sched_process_exit passes %s: exit program %s", n < 2 ?
	      "the task only" : "(task, group_dead)", n < 2 ? "mp_exit_task (group_dead from "
	      "signal->live)" : "mp_exit");
	*multi = link_kind(b, "uprobe_multi links", "MP_BPF_NO_UPROBE_MULTI",
			   path ? NULL : "no function of our own to try a link on",
			   MP_BPF_TRACE_UPROBE_MULTI, path, off, multi_why, len,
			   "perf-event uprobes");
	*session = link_kind(b, "uprobe session links", "MP_BPF_NO_SESSION",
			     *multi ? NULL : "needs uprobe_multi links",
			     MP_BPF_TRACE_UPROBE_SESSION, path, off, session_why, len,
			     "entry and return probes");
	return 0;
}

struct mp_bpf *mp_bpf__open(mp_bpf_event_fn fn, void *ctx)
{
	return mp_bpf__open_log(fn, ctx, NULL, NULL, NULL, 0);
}

struct mp_bpf *mp_bpf__open_log(mp_bpf_event_fn fn, void *ctx, mp_bpf_log_fn log,
				void *log_ctx, char *why, size_t why_len)
{
	struct mp_bpf *b = calloc(1, sizeof(*b));
	struct bpf_program *progs[3];
	char whybuf[1024], multi_why[128], session_why[128];
	bool exit_task, multi, session;
	struct pidns ns;
	int err;

	if (!why || !why_len) {
		why = whybuf;
		why_len = sizeof(whybuf);
	}
	why[0] = 0;
	if (!b)
		return NULL;
	b->fn = fn;
	b->ctx = ctx;
	if (log)
		mp_bpf__set_log(b, log, log_ctx);
	pthread_mutex_init(&b->lock, NULL);
	pthread_cond_init(&b->cond, NULL);
	libbpf_set_print(libbpf_print);
	if (elf_version(EV_CURRENT) == EV_NONE) {
		err = -EINVAL;
		snprintf(why, why_len, "libelf: %s", elf_errmsg(-1));
		goto fail;
	}
	err = uprobe_pmu_init(b);
	if (err) {
		snprintf(why, why_len, "no uprobe PMU (/sys/bus/event_source/devices/uprobe): %s",
			 strerror(-err));
		goto fail;
	}
	err = pidns_self(&ns);
	if (err) {
		snprintf(why, why_len, "cannot read /proc/self/ns/pid: %s", strerror(-err));
		goto fail;
	}
	/*
	 * uprobe session links when the kernel has them (6.13+): entry and return in one program
	 * whose entry skips the return half of unsampled calls; else uprobe_multi links (6.6+):
	 * one link, and one grace period when it is closed, per object instead of per probe;
	 * perf-event uprobes otherwise. Sessions must also pass a behavioural self-test on our own
	 * process (session_selftest()). MP_BPF_NO_SESSION=1 forces entry + return probes,
	 * MP_BPF_NO_UPROBE_MULTI=1 perf-event uprobes (tests, benchmarks).
	 */
	{
		char self[PATH_MAX];
		uint64_t self_off = 0;
		uint64_t test_off = 0;
		bool have_self = self_target((uintptr_t)mp_bpf_self_target, self, sizeof(self),
					     &self_off) == 0 &&
				 self_target((uintptr_t)mp_bpf_selftest_target, self, sizeof(self),
					     &test_off) == 0;

		err = kernel_probe(b, have_self ? self : NULL, test_off, &exit_task, &multi,
				   &session, multi_why, session_why, sizeof(multi_why), why,
				   why_len);
		if (err)
			goto fail;
		if (session) {
			b->skel = skel_load(&ns, true, true, exit_task, why, why_len);
			if (b->skel) {
				b->multi = b->session = true;
				if (session_selftest(b, self, test_off)) {
					memprof_bpf__destroy(b->skel);
					b->skel = NULL;
					b->multi = b->session = false;
					snprintf(session_why, sizeof(session_why),
						 "failed the self-test");
				}
			} else {
				snprintf(session_why, sizeof(session_why), "program rejected");
			}
		}
		if (!b->skel) {
			char *first = session && why[0] ? strdup(why) : NULL;

			b->skel = skel_load(&ns, multi, false, exit_task, why, why_len);
			if (b->skel && first)	/* only the session program was in the way */
				logf_(b, 4, "uprobe sessions unusable: %s: using entry and return "
				      "probes", first);
			free(first);
			if (!b->skel) {
				err = errno ? -errno : -EINVAL;
				goto fail;
			}
			b->multi = multi;
		}
		b->exit_prog = exit_task ? b->skel->progs.mp_exit_task : b->skel->progs.mp_exit;
		snprintf(b->mechanisms, sizeof(b->mechanisms),
			 "%s%s%s; %s%s%s; exit: tp_btf/sched_process_exit(%s)",
			 b->multi ? "uprobe_multi links" : "perf-event uprobes (no uprobe_multi: ",
			 b->multi ? "" : multi_why, b->multi ? "" : ")",
			 b->session ? "uprobe sessions" : "entry+return probes (no sessions: ",
			 b->session ? "" : session_why, b->session ? "" : ")",
			 exit_task ? "task" : "task, group_dead");
		logf_(b, 6, "Kernel mechanisms: %s", b->mechanisms);
		b->entry_cost_ns = MP_DEFAULT_ENTRY_COST_NS;
		b->return_cost_ns = MP_DEFAULT_RETURN_COST_NS;
		if (have_self)
			calibrate(b, self, self_off);
	}
	progs[0] = b->skel->progs.mp_fork;
	progs[1] = b->skel->progs.mp_exec;
	progs[2] = b->exit_prog;
	for (int i = 0; i < 3; i++) {
		b->lifecycle[i] = bpf_program__attach(progs[i]);
		if (!b->lifecycle[i]) {
			err = -errno;
			snprintf(why, why_len, "cannot attach program '%s' (%s): %s",
				 bpf_program__name(progs[i]), bpf_program__section_name(progs[i]),
				 strerror(-err));
			goto fail;
		}
	}
	b->rb = ring_buffer__new(bpf_map__fd(b->skel->maps.rb), rb_event, b, NULL);
	if (!b->rb) {
		err = -errno;
		snprintf(why, why_len, "cannot read the ring buffer: %s", strerror(-err));
		goto fail;
	}
	if (!epoch_offset_known)
		epoch_offset_init();
	return b;
fail:
	if (!why[0])
		snprintf(why, why_len, "%s", strerror(err < 0 ? -err : EINVAL));
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
	if (b->self)
		target_bury(b, b->self);
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

/* Everything pending now: the ring holds at most this many records (a header of 8 bytes and
 * a record of at least struct mp_event_hdr), so a drain ends even while its producers (the
 * caller's own allocations, if it were profiled) keep filling it. */
int mp_bpf__consume(struct mp_bpf *b)
{
	return mp_bpf__consume_max(b, MP_RINGBUF_SIZE / (8 + sizeof(struct mp_event_hdr)), 0);
}

int mp_bpf__consume_max(struct mp_bpf *b, unsigned int max, uint64_t max_ns)
{
	int n;

	b->budget = max;
	b->until_ns = max_ns ? mono_ns() + max_ns : UINT64_MAX;
	b->budget_spent = false;
	n = ring_buffer__consume(b->rb);
	b->budget = 0;
	return b->budget_spent ? 1 : n;
}

/* libmemprof-preload (at the end of this file) */
struct pl_found;
static int pl_attach(struct mp_bpf *b, struct target *t);
static int pl_sync(struct mp_bpf *b, struct target *t, const struct mp_proc_cfg *cfg,
		   const struct pl_found *pf);
static int pltargets_fd(struct mp_bpf *b);

static int procs_fd(struct mp_bpf *b)
{
	return bpf_map__fd(b->skel->maps.procs);
}

/* After each write of "procs": threads drop their copies of the entries (thread_cfg()). */
static void procs_changed(struct mp_bpf *b)
{
	__atomic_fetch_add(&b->skel->bss->mp_procs_epoch, 1, __ATOMIC_SEQ_CST);
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
	c.flags &= ~MP_PROC_PRELOAD;
	if (t && t->preload)
		c.flags |= MP_PROC_PRELOAD;
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

/* --- allocator discovery --- */

static int sym_index(const char *name, void *ctx)
{
	size_t len = strcspn(name, "@");

	for (size_t i = 0; i < N_PROBES; i++)
		if (strlen(probe_table[i].sym) == len && !strncmp(probe_table[i].sym, name, len))
			return (int)i;
	return -1;
}

/* MP_PLACEMENT=entry: probe every function at its first byte (tests, benchmarks). */
static bool placement_entry_only(void)
{
	const char *v = getenv("MP_PLACEMENT");

	return v && !strcmp(v, "entry");
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

	r->placed = 0;
	if (pd->shape == MP_SHAPE_DLSTATE)
		return; /* not an allocator, hit only when libraries are loaded */
	if (placement_entry_only()) {
		logf_(b, 7, "Probe on %s in '%s' at +0: MP_PLACEMENT=entry", pd->sym, path);
		return;
	}
	if (mp_elf_place(fd, &req, size, avail, &pl))
		return;
	r->placed = pl.offset;
	logf_(b, pl.emulated ? 7 : 6, "Probe on %s in '%s' at +%#" PRIx64 ": %s", pd->sym, path,
	      pl.offset, pl.reason);
}

/*
 * The C library's probes (MP_COOKIE_F_LEAF, MP_COOKIE_SEG): its malloc and calloc call no
 * probed function but its own mmap/munmap, and an mmap made by its own code (a heap, a thread
 * stack) is not the program's. Only for a shared C library: in a static executable the
 * program's own mmap calls come from the same segment.
 */
static bool is_libc(const char *path, const GElf_Ehdr *eh)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	return eh->e_type == ET_DYN && !strncmp(base, "libc.so", 7);
}

static void cookies_set(struct obj *o, bool libc)
{
	bool own_mmap = false;

	for (size_t i = 0; i < o->nres; i++)
		own_mmap |= probe_table[o->res[i].probe].kind == MP_KIND_MMAP;
	for (size_t i = 0; i < o->nres; i++) {
		struct resolved *r = &o->res[i];
		const struct probe_def *pd = &probe_table[r->probe];

		r->cookie = MP_COOKIE(pd->shape, pd->kind);
		if (!libc || !own_mmap)
			continue;
		if (pd->kind == MP_KIND_MALLOC || pd->kind == MP_KIND_CALLOC)
			r->cookie |= MP_COOKIE_F_LEAF;
		if (pd->kind == MP_KIND_MMAP && r->seg_before >> 4 <= MP_COOKIE_SEG_MAX &&
		    r->seg_after >> 4 <= MP_COOKIE_SEG_MAX)
			r->cookie |= MP_COOKIE_SEG(r->seg_before, r->seg_after);
	}
}

/* Find the allocator symbols of the object at @path, open as @fd (the caller's). */
static struct obj *obj_scan(struct mp_bpf *b, const char *path, const struct stat *st, int fd)
{
	struct mp_sym_found found[N_PROBES] = { 0 };
	GElf_Ehdr eh;
	struct obj *o;
	Elf *elf;

	o = calloc(1, sizeof(*o));
	if (!o)
		return NULL;
	o->dev = st->st_dev;
	o->ino = st->st_ino;
	o->mtime = st->st_mtim;
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF || !gelf_getehdr(elf, &eh) ||
	    eh.e_machine != EM_X86_64 || gelf_getclass(elf) != ELFCLASS64)
		goto out;
	mp_elf_find_funcs(elf, sym_index, NULL, found);
	for (size_t i = 0; i < N_PROBES; i++) {
		uint64_t off, avail, before;
		bool dup = false;

		if (!found[i].prio || mp_elf_vaddr_to_off(elf, found[i].value, &off, &avail, &before))
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
		o->res[o->nres].seg_before = before + o->res[o->nres].placed;
		o->res[o->nres].seg_after = avail - o->res[o->nres].placed;
		o->nres++;
	}
	cookies_set(o, is_libc(path, &eh));
	/* An object defining malloc is an allocator: say which of its usual companions it lacks. */
	if (found[0].prio) {
		for (size_t i = 1; i < N_PROBES; i++)
			if (!probe_table[i].optional && !found[i].prio)
				logf_(b, 4, "'%s' defines malloc but not %s: its %s calls are not seen",
				      path, probe_table[i].sym, probe_table[i].sym);
	}
out:
	elf_end(elf);
	return o;
}

static struct obj *obj_get(struct mp_bpf *b, const char *path, const struct stat *st, int fd)
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
	o = obj_scan(b, path, st, fd);
	if (!o)
		return NULL;
	o->next = b->objs;
	b->objs = o;
	b->nobjs++;
	return o;
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

static int attach_perf(struct mp_bpf *b, pid_t pid, const char *path, uint64_t off,
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
static int attach_multi(pid_t pid, const char *path, struct bpf_program *prog, bool retprobe,
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
	size_t shstrndx, nph;
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
	if (elf && elf_kind(elf) == ELF_K_ELF && !elf_getshdrstrndx(elf, &shstrndx)) {
		while ((scn = elf_nextscn(elf, scn))) {
			GElf_Shdr sh;
			const char *name;

			if (!gelf_getshdr(scn, &sh))
				continue;
			name = elf_strptr(elf, shstrndx, sh.sh_name);
			if (sh.sh_type == SHT_SYMTAB)
				symtab = true;
			if (name && (!strcmp(name, ".go.buildinfo") || !strcmp(name, ".gopclntab") ||
				     !strcmp(name, ".note.go.buildid")))
				go = true;
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
	}
	if (created || t->pl_recheck) {
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
	if (scanned == 0 && created) {
		free(t);
		return -ESRCH; /* a zombie or a kernel thread maps nothing */
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

const char *mp_bpf__mechanisms(const struct mp_bpf *b)
{
	return b->mechanisms;
}

void mp_bpf__counters(const struct mp_bpf *b, struct mp_bpf_counters *out)
{
	*out = b->counters;
	out->uprobe_multi = b->multi;
	out->uprobe_session = b->session;
	out->entry_cost_ns = b->entry_cost_ns;
	out->return_cost_ns = b->return_cost_ns;
	out->cost_calibrated = b->calibrated;
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

/* ---- probes on the loader's own process: session self-test, cost calibration ---- */

/*
 * Functions whose first instruction (push %rbp) the kernel emulates, like glibc's malloc: one
 * for calibrate(), one for the session self-test (its link stays, see mp_bpf.self, and must
 * not add its hits to the calibration's).
 */
#define MP_SELF_FN(name)							\
	__asm__(".pushsection .text\n"						\
		".globl " #name "\n"						\
		".hidden " #name "\n"						\
		".type " #name ", @function\n"					\
		#name ":\n"							\
		"\tpush %rbp\n"							\
		"\tmov %rsp, %rbp\n"						\
		"\tpop %rbp\n"							\
		"\tret\n"							\
		".size " #name ", .-" #name "\n"					\
		".popsection\n")
MP_SELF_FN(mp_bpf_self_target);
MP_SELF_FN(mp_bpf_selftest_target);

static void (*volatile self_target_fn)(void) = mp_bpf_self_target;
static void (*volatile selftest_target_fn)(void) = mp_bpf_selftest_target;

/* The file that maps our function at @a, and its offset there. */
static int self_target(uintptr_t a, char *path, size_t len, uint64_t *off)
{
	char line[PATH_MAX + 256];
	FILE *f = fopen("/proc/self/maps", "re");
	int err = -ENOENT;

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long lo, hi, foff;
		int n = 0;

		if (sscanf(line, "%llx-%llx %*s %llx %*x:%*x %*u %n", &lo, &hi, &foff, &n) < 3 ||
		    !n || a < lo || a >= hi || line[n] != '/')
			continue;
		line[n + strcspn(line + n, "\n")] = 0;
		snprintf(path, len, "%s", line + n);
		*off = a - lo + foff;
		err = 0;
		break;
	}
	fclose(f);
	return err;
}

static int self_attach(struct mp_bpf *b, const char *path, uint64_t off,
		       struct bpf_program *prog, bool retprobe, uint64_t cookie, struct plink *out)
{
	if (b->multi)
		return attach_multi(getpid(), path, prog, retprobe, &off, &cookie, NULL, 1, out);
	return attach_perf(b, getpid(), path, off, prog, retprobe, cookie, 0, out);
}

/* Keep links on ourselves until mp_bpf__free() (mp_bpf.self); destroyed at once if they
 * cannot be kept. */
static void self_keep(struct mp_bpf *b, const struct plink *links, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct plink l = links[i];

		if (!l.l && l.fd < 0)
			continue;
		if (!b->self && (b->self = calloc(1, sizeof(*b->self))))
			b->self->pid = getpid();
		if (!b->self || target_add_link(b->self, &l))
			plink_destroy(&l);
	}
}

/* Hand links on ourselves to the reaper (closing them waits for grace periods). */
static void self_bury(struct mp_bpf *b, const struct plink *links, size_t n)
{
	struct target *t = calloc(1, sizeof(*t));

	if (t)
		t->links = calloc(n, sizeof(*links));
	if (!t || !t->links) {
		free(t);
		for (size_t i = 0; i < n; i++) {
			struct plink l = links[i];

			plink_destroy(&l);
		}
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (links[i].l || links[i].fd >= 0)
			t->links[t->nlinks++] = links[i];
	t->pid = getpid();
	target_bury(b, t);
}

static uint64_t selftest_get(struct mp_bpf *b, uint32_t idx)
{
	uint64_t v = 0;

	bpf_map_lookup_elem(bpf_map__fd(b->skel->maps.selftest), &idx, &v);
	return v;
}

/*
 * Do uprobe sessions behave as mp_session expects? Two calls of our own mp_bpf_selftest_target
 * under a session link: the first entry returns 0 and must get its return half, the second
 * returns 1 and must not, and bpf_session_is_return() must tell them apart.
 */
static int session_selftest(struct mp_bpf *b, const char *path, uint64_t off)
{
	uint64_t cookie = MP_COOKIE(MP_SHAPE_SELFTEST, 0), e0, r0, e, r;
	struct plink l = { .fd = -1 };
	int err;

	e0 = selftest_get(b, MP_SELFTEST_ENTRIES);
	r0 = selftest_get(b, MP_SELFTEST_RETURNS);
	err = attach_multi(getpid(), path, b->skel->progs.mp_session, false, &off, &cookie, NULL, 1,
			   &l);
	if (err) {
		logf_(b, 6, "uprobe sessions unavailable (link on '%s'+%#" PRIx64 ": %s): using "
		      "entry and return probes", path, off, strerror(-err));
		return err;
	}
	if (e0 & 1) /* the next hit must be an odd one */
		selftest_target_fn();
	e0 = selftest_get(b, MP_SELFTEST_ENTRIES);
	r0 = selftest_get(b, MP_SELFTEST_RETURNS);
	selftest_target_fn();
	selftest_target_fn();
	e = selftest_get(b, MP_SELFTEST_ENTRIES) - e0;
	r = selftest_get(b, MP_SELFTEST_RETURNS) - r0;
	if (e != 2 || r != 1) {
		self_bury(b, &l, 1);	/* its programs go with the skeleton */
		logf_(b, 4, "uprobe sessions misbehave (2 calls: %" PRIu64 " entries, %" PRIu64
		      " returns, expected 2 and 1): using entry and return probes", e, r);
		return -EPROTO;
	}
	self_keep(b, &l, 1);
	return 0;
}

static uint64_t ns_between(const struct timespec *a, const struct timespec *z)
{
	return (uint64_t)((z->tv_sec - a->tv_sec) * 1000000000LL + (z->tv_nsec - a->tv_nsec));
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Median time of MP_CALIB_BATCHES batches of MP_CALIB_CALLS calls of the self target, ns. */
static uint64_t time_batches(void)
{
	uint64_t v[MP_CALIB_BATCHES];

	for (int i = 0; i < MP_CALIB_BATCHES; i++) {
		struct timespec a, z;

		clock_gettime(CLOCK_MONOTONIC, &a);
		for (int k = 0; k < MP_CALIB_CALLS; k++)
			self_target_fn();
		clock_gettime(CLOCK_MONOTONIC, &z);
		v[i] = ns_between(&a, &z);
	}
	qsort(v, MP_CALIB_BATCHES, sizeof(v[0]), cmp_u64);
	return v[MP_CALIB_BATCHES / 2];
}

/*
 * The cost of a probe hit on this machine, for the overhead estimate: time our own
 * mp_bpf_self_target without probes, with the entry program (CALIBRATE: about the work of an
 * unsampled allocator call), then with a return probe too, in the mode the targets get.
 * MP_PROBE_COST_NS="<entry>,<return>" sets both instead. Keeps the defaults on failure.
 */
static void calibrate(struct mp_bpf *b, const char *path, uint64_t off)
{
	struct plink l[2] = { { .fd = -1 }, { .fd = -1 } };
	const char *env = getenv("MP_PROBE_COST_NS");
	uint64_t t0, t1, t2, ce, cr;
	unsigned long long e, r;
	int err;

	if (env && sscanf(env, "%llu,%llu", &e, &r) == 2) {
		b->entry_cost_ns = e;
		b->return_cost_ns = r;
		return;
	}
	time_batches(); /* warm up: the first batches run cold */
	t0 = time_batches();
	err = self_attach(b, path, off, b->session ? b->skel->progs.mp_session :
			  b->skel->progs.mp_entry, false, MP_COOKIE(MP_SHAPE_CALIBRATE, 0), &l[0]);
	if (err)
		goto out;
	t1 = time_batches();
	/* Both halves on the same probe share its trap: the second link costs the return probe
	 * (sessions: a second session link whose entry keeps its return half). */
	err = self_attach(b, path, off, b->session ? b->skel->progs.mp_session :
			  b->skel->progs.mp_ret, !b->session, MP_COOKIE(MP_SHAPE_CALIBRATE, 1), &l[1]);
	if (err)
		goto out;
	t2 = time_batches();
	ce = t1 > t0 ? (t1 - t0) / MP_CALIB_CALLS : 0;
	cr = t2 > t1 ? (t2 - t1) / MP_CALIB_CALLS : 0;
	if (ce == 0 || cr == 0 || ce > 1000000 || cr > 1000000) {
		err = -ERANGE;
		goto out;
	}
	b->entry_cost_ns = ce;
	b->return_cost_ns = cr;
	b->calibrated = true;
out:
	if (err)
		logf_(b, 6, "Probe cost calibration failed (%s): assuming %" PRIu64 " ns per entry "
		      "and %" PRIu64 " ns per return probe hit", strerror(-err), b->entry_cost_ns,
		      b->return_cost_ns);
	if (err)
		self_bury(b, l, 2);
	else
		self_keep(b, l, 2);
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

/*
 * ---- libmemprof-preload: the cooperative fast path ----
 *
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

static int pltargets_fd(struct mp_bpf *b)
{
	return bpf_map__fd(b->skel->maps.pltargets);
}

/* Write the block from @t's "procs" entry and publish the generation to BPF. */
static int pl_sync(struct mp_bpf *b, struct target *t, const struct mp_proc_cfg *cfg,
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

/* Set or clear MP_PROC_PRELOAD in @pid's "procs" entry: the uprobe programs ignore it. */
static void pl_flag(struct mp_bpf *b, pid_t pid, bool on)
{
	struct mp_proc_cfg cfg;
	uint32_t key = (uint32_t)pid;

	if (bpf_map_lookup_elem(procs_fd(b), &key, &cfg))
		return;
	cfg.flags = on ? cfg.flags | MP_PROC_PRELOAD : cfg.flags & ~MP_PROC_PRELOAD;
	if (!bpf_map_update_elem(procs_fd(b), &key, &cfg, BPF_EXIST))
		procs_changed(b);
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
static int pl_attach(struct mp_bpf *b, struct target *t)
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
			pl_flag(b, t->pid, false);
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
	pl_flag(b, t->pid, true);
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
