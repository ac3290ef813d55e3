// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libmemprof-preload: in-process sampling of allocated words, traps only on samples.
 * The ABI (USDT probes, semaphores, config block, environment) is documented in
 * <memprof/preload.h>; the statistics are those of docs/sampling.md: every word, including
 * one header word per block, is a sample point with probability λ.
 *
 * Per thread we keep c = words left up to and including the next sample point, in
 * initial-exec TLS. An allocation of w = ceil(size/8) + 1 words does "c -= w" with one
 * read-modify-write instruction (atomic with respect to signal handlers on the same thread)
 * and goes to the slow path only when c <= 0: then the block holds a sample point and
 * r = -c words of it follow that point. The slow path draws n = 1 + Binomial(r, λ) and the
 * next countdown, records the address and the block's id for frees, walks the stack, and
 * queues the sample for the next memprof:flush (deferred reports, the default) or calls the
 * noinline hook with the memprof:alloc USDT probe site. Before any of that, each allocation
 * reads a gate (pl_gate: memprof:alloc's USDT semaphore, which the kernel raises while a
 * probe is attached, and our own bits for MEMPROF_ARM and in-process profiles): while it is 0
 * the call goes straight to the allocator and the countdown is never touched. While the gate
 * is open but sampling is not armed (a stopped profile), the countdown is a poll interval and
 * the slow path only re-checks arming. Frees look at the filter of sampled addresses only once
 * something was ever sampled.
 *
 * Every call forwards to the allocator the process would have used without us: the next
 * definition in the symbol search order (pl_next.c), glibc's in most programs, libjemalloc's
 * in one linked with -ljemalloc. So the blocks are that allocator's own: malloc_usable_size,
 * malloc_trim, sdallocx, tc_free, mi_free (which we do not interpose) keep working on them.
 * The forwarding is a tail jump through a resolved pointer, the same one memory-indirect jmp
 * the -fno-plt GOT call to __libc_malloc was; glibc's own internal calls (memalign ->
 * _int_memalign) never come back through us, so nothing is counted twice.
 *
 * This file holds the C entry points (the malloc family, mmap, munmap); pl_cxx.c C++'s
 * operators new and delete; pl_sample.c the slow path that arms, draws and walks; pl_report.c
 * the USDT hooks and the queues of pending reports; pl_init.c the environment, fork and exit;
 * pl_state.h what they share.
 */
#include <errno.h>
#include <malloc.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/param.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pl_next.h"
#include "pl_state.h"

/* ---- malloc family -------------------------------------------------------------------- */

static __attribute__((noinline)) void *pl_malloc_slow(size_t size, uint32_t kind)
{
	int64_t r = pl_cross_begin(pl_words(size));
	void *p = pl_next.malloc(size);

	pl_cross_finish(r, p, size, kind);
	return p;
}

/*
 * malloc and free, the hottest, spell out their idle path: the gate (the table) closed, one
 * tail jump of its own. The armed path is laid out straight (no taken branch before its own
 * tail jump); the barrier and -fno-crossjumping (preload.mk) keep GCC from merging the two
 * tail jumps into one, which would put a taken branch back on one of the paths.
 */
PL_EXPORT void *malloc(size_t size)
{
	if (unlikely(!pl_gate_open()))
		return pl_next.malloc(size);
	if (unlikely(pl_countdown_sub(pl_words(size))))
		return pl_malloc_slow(size, MEMPROF_PRELOAD_MALLOC);
	__asm__ volatile("" ::: "memory");
	return pl_next.malloc(size);
}

static __attribute__((noinline)) void pl_free_slow(void *p, uint32_t kind)
{
	pl_release(p, kind);
	pl_next.free(p);
}

PL_EXPORT void free(void *p)
{
	if (unlikely(!pl_table_used(&pl_table)))
		return pl_next.free(p);
	if (unlikely(pl_filter_hit(&pl_table, p)))
		return pl_free_slow(p, MEMPROF_PRELOAD_FREE);
	__asm__ volatile("" ::: "memory");
	pl_next.free(p);
}

static __attribute__((noinline)) void *pl_calloc_slow(size_t n, size_t size, size_t total)
{
	int64_t r = pl_cross_begin(pl_words(total));
	void *p = pl_next.calloc(n, size);

	pl_cross_finish(r, p, total, MEMPROF_PRELOAD_CALLOC);
	return p;
}

PL_EXPORT void *calloc(size_t n, size_t size)
{
	size_t total;

	if (unlikely(__builtin_mul_overflow(n, size, &total)))
		return pl_next.calloc(n, size);	/* fails with ENOMEM, as the allocator does */
	if (unlikely(pl_sample_due(pl_words(total))))
		return pl_calloc_slow(n, size, total);
	return pl_next.calloc(n, size);
}

static __attribute__((noinline)) void *pl_realloc_slow(void *old, size_t size, bool expired,
						       uint32_t kind)
{
	int64_t r = expired ? pl_cross_begin(pl_words(size)) : -1;
	bool was_sampled = old && pl_table_maybe(&pl_table, old) && pl_release(old, kind);
	void *p;

	/*
	 * The free of a sampled block is queued (or reported) by id before the allocator can hand
	 * the address out again. If the realloc then fails, the block lives on untracked
	 * (counted).
	 */
	p = pl_next.realloc(old, size);
	if (!p && size && was_sampled)
		stat_add(MEMPROF_PRELOAD_STAT_REALLOC_LOST, 1);
	pl_cross_finish(r, p, size, kind);
	return p;
}

PL_EXPORT void *realloc(void *old, size_t size)
{
	bool expired = pl_sample_due(pl_words(size));

	if (unlikely(expired || pl_table_maybe(&pl_table, old)))
		return pl_realloc_slow(old, size, expired, MEMPROF_PRELOAD_REALLOC);
	return pl_next.realloc(old, size);
}

PL_EXPORT void *reallocarray(void *old, size_t n, size_t size)
{
	size_t total;
	bool expired;

	if (__builtin_mul_overflow(n, size, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	expired = pl_sample_due(pl_words(total));
	if (unlikely(expired || pl_table_maybe(&pl_table, old)))
		return pl_realloc_slow(old, total, expired, MEMPROF_PRELOAD_REALLOCARRAY);
	return pl_next.realloc(old, total);
}

/* Each forwards to the next definition of the same function: its contract is the host's. */
static __attribute__((noinline)) void *pl_memalign_slow(size_t alignment, size_t size,
							uint32_t kind)
{
	int64_t r = pl_cross_begin(pl_words(size));
	void *p;

	switch (kind) {
	case MEMPROF_PRELOAD_VALLOC:
		p = pl_next.valloc(size);
		break;
	case MEMPROF_PRELOAD_PVALLOC:
		p = pl_next.pvalloc(size);
		break;
	case MEMPROF_PRELOAD_ALIGNED_ALLOC:
		p = pl_next.aligned_alloc(alignment, size);
		break;
	default:
		p = pl_next.memalign(alignment, size);
		break;
	}
	pl_cross_finish(r, p, size, kind);
	return p;
}

static __attribute__((noinline)) int pl_posix_memalign_slow(void **memptr, size_t alignment,
							    size_t size)
{
	int64_t r = pl_cross_begin(pl_words(size));
	void *p = NULL;
	int err = pl_next.posix_memalign(&p, alignment, size);

	pl_cross_finish(r, err ? NULL : p, size, MEMPROF_PRELOAD_POSIX_MEMALIGN);
	if (!err)
		*memptr = p;
	return err;
}

PL_EXPORT int posix_memalign(void **memptr, size_t alignment, size_t size)
{
	/* POSIX: a power-of-two multiple of sizeof(void *), else EINVAL (nothing sampled). */
	if (alignment % sizeof(void *) != 0 || !powerof2(alignment / sizeof(void *)) ||
	    alignment == 0)
		return EINVAL;
	if (unlikely(pl_sample_due(pl_words(size))))
		return pl_posix_memalign_slow(memptr, alignment, size);
	return pl_next.posix_memalign(memptr, alignment, size);
}

PL_EXPORT void *aligned_alloc(size_t alignment, size_t size)
{
	if (unlikely(pl_sample_due(pl_words(size))))
		return pl_memalign_slow(alignment, size, MEMPROF_PRELOAD_ALIGNED_ALLOC);
	return pl_next.aligned_alloc(alignment, size);
}

PL_EXPORT void *memalign(size_t alignment, size_t size)
{
	if (unlikely(pl_sample_due(pl_words(size))))
		return pl_memalign_slow(alignment, size, MEMPROF_PRELOAD_MEMALIGN);
	return pl_next.memalign(alignment, size);
}

PL_EXPORT void *valloc(size_t size)
{
	if (unlikely(pl_sample_due(pl_words(size))))
		return pl_memalign_slow(0, size, MEMPROF_PRELOAD_VALLOC);
	return pl_next.valloc(size);
}

PL_EXPORT void *pvalloc(size_t size)
{
	/* the block is whole pages: its size rounded up to them, at least one (as uprobe mode) */
	size_t pages = size > SIZE_MAX - PL_PAGE ? size :
		       size ? (size + PL_PAGE - 1) & ~(size_t)(PL_PAGE - 1) : PL_PAGE;

	if (unlikely(pl_sample_due(pl_words(pages))))
		return pl_memalign_slow(0, pages, MEMPROF_PRELOAD_PVALLOC);
	return pl_next.pvalloc(size);
}

/* ---- anonymous mmap ------------------------------------------------------------------- */

/* glibc's __mmap is GLIBC_PRIVATE; the syscall is what it does on x86-64 anyway. */
static void *pl_sys_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

static __attribute__((noinline)) void *pl_mmap_slow(void *addr, size_t len, int prot, int flags,
						    int fd, off_t off)
{
	int64_t r = pl_cross_begin(pl_words(len));
	void *p = pl_sys_mmap(addr, len, prot, flags, fd, off);

	pl_cross_finish(r, p == MAP_FAILED ? NULL : p, len, MEMPROF_PRELOAD_MMAP);
	return p;
}

/*
 * Anonymous mappings of the program; not those an allocator carves its blocks from (a foreign
 * allocator's, the Go runtime's), nor PROT_NONE ones, which reserve address space, no memory.
 */
PL_EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if ((flags & MAP_ANONYMOUS) && prot != PROT_NONE &&
	    !pl_next_from_allocator(__builtin_return_address(0)) &&
	    unlikely(pl_sample_due(pl_words(len))))
		return pl_mmap_slow(addr, len, prot, flags, fd, off);
	return pl_sys_mmap(addr, len, prot, flags, fd, off);
}

PL_EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
	__attribute__((alias("mmap")));

PL_EXPORT int munmap(void *addr, size_t len)
{
	/* Only the start of a sampled mapping is known: unmapping its middle is not seen. */
	if (unlikely(pl_table_maybe(&pl_table, addr)))
		pl_release(addr, MEMPROF_PRELOAD_MUNMAP);
	return (int)syscall(SYS_munmap, addr, len);
}
