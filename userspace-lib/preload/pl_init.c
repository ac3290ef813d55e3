// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libmemprof-preload's life cycle: the settings (pl_g) and the exported configuration block,
 * the constructor that reads the environment (MEMPROF_RATE, _SEED, _ARM, _WALK, _BATCH,
 * _TEST_LOG), the fork handlers (a child's own random stream, its USDT sites repaired), and
 * the flush of what is pending at exit, _exit() included.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pl_core.h"
#include "pl_next.h"
#include "pl_state.h"

PL_HIDDEN struct pl_globals pl_g = {
	.env_rate = MEMPROF_PRELOAD_DEFAULT_RATE,
	.test_fd = -1,
	.batch = MEMPROF_PRELOAD_MAX_BATCH,
};

PL_EXPORT struct memprof_preload_config memprof_preload_config = {
	.magic = MEMPROF_PRELOAD_MAGIC,
	.version = MEMPROF_PRELOAD_VERSION,
	.size = sizeof(struct memprof_preload_config),
};

/* ---- initialisation and fork ---------------------------------------------------------- */

/*
 * Linux 6.18 optimises a uprobe on a 5-byte nop by rewriting it into a call to a per-mm
 * trampoline page ("[uprobes-trampoline]"). fork() copies the rewritten text into the child
 * but not the trampoline, so a child that reaches a probe site before it is probed itself
 * (a child nobody follows, or one memprofd attaches to a moment later) jumps to an unmapped
 * address. The child, still single-threaded in the fork handler, puts the nop back at a site
 * whose call target is not mapped; the kernel probes it afresh if the child is attached later.
 * The sites are found once, at load, when no probe can have been hit yet: the hooks run only
 * after pl_init().
 */
#define PL_USDT_SITES 4

static uint8_t *pl_usdt_site[PL_USDT_SITES];

static const uint8_t pl_nop5[5] = { 0x0f, 0x1f, 0x44, 0x00, 0x00 };

static uint8_t *pl_find_usdt_site(void *fn)
{
	uint8_t *code = fn;

	/* The site is the nop5 near the hook's start; an armed, unhit probe shows an int3. */
	for (int i = 0; i < 32; i++)
		if ((code[i] == 0x0f || code[i] == 0xcc) && !memcmp(code + i + 1, pl_nop5 + 1, 4))
			return code + i;
	return NULL;
}

static bool pl_page_mapped(uintptr_t addr)
{
	long page = sysconf(_SC_PAGESIZE);

	return msync((void *)(addr & ~(uintptr_t)(page - 1)), 1, MS_ASYNC) == 0 || errno != ENOMEM;
}

static void pl_usdt_repair_child(void)
{
	long page = sysconf(_SC_PAGESIZE);
	int saved = errno;

	for (int i = 0; i < PL_USDT_SITES; i++) {
		uint8_t *site = pl_usdt_site[i];
		uintptr_t start, end;
		int32_t rel;

		if (!site || site[0] != 0xe8)
			continue;
		memcpy(&rel, site + 1, sizeof(rel));
		if (pl_page_mapped((uintptr_t)site + 5 + (intptr_t)rel))
			continue;
		start = (uintptr_t)site & ~(uintptr_t)(page - 1);
		end = ((uintptr_t)site + 5 + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
		if (mprotect((void *)start, end - start, PROT_READ | PROT_WRITE | PROT_EXEC))
			continue;
		memcpy(site, pl_nop5, sizeof(pl_nop5));
		mprotect((void *)start, end - start, PROT_READ | PROT_EXEC);
		stat_add(MEMPROF_PRELOAD_STAT_FORK_REPAIRS, 1);
	}
	errno = saved;
}

static void pl_atfork_child(void)
{
	struct pl_thread *t = &pl_tls;
	uint64_t x;

	/*
	 * The child must not replay the parent's random stream: mix the child's pid and the
	 * parent stream's next value into a new base, and reseed the only thread. Counters
	 * start over for the new process; the table (and LIVE) is inherited with the heap.
	 */
	pl_g.pid = (pid_t)syscall(SYS_getpid);
	x = pl_g.seed_base ^ ((uint64_t)pl_g.pid << 32) ^ (t->seeded ? pl_rng_next(&t->rng) : 0);
	pl_g.seed_base = pl_splitmix64(&x);
	pl_g.threads = 0;
	pl_thread_seed(t);
	/* The parent reports its own pending frees; the lock may have been held by a thread
	 * that does not exist here. */
	pl_pending.q.nfree = 0;
	pl_pending.q.nalloc = 0;	/* deferred mode: the parent reports its samples */
	pl_pending.q.bytes = 0;
	t->nlate = 0;
	pl_pending.busy = 0;
	if (t->state == PL_T_ARMED && !t->in_slow)
		t->countdown = pl_draw_geom(&t->rng, t->log1m);
	for (int i = 0; i < MEMPROF_PRELOAD_STAT__SLOTS; i++)
		if (i != MEMPROF_PRELOAD_STAT_LIVE)
			memprof_preload_config.stats[i] = 0;
	pl_usdt_repair_child();
}

/* Deferred mode: what is queued goes out before fork, rather than waiting in the parent. */
static void pl_atfork_prepare(void)
{
	if (pl_g.batch && pl_g.ready)
		pl_pending_flush(false);
}

static bool parse_u64(const char *s, uint64_t *v)
{
	char *end;

	errno = 0;
	*v = strtoull(s, &end, 0);
	return !errno && end != s && !*end;
}

__attribute__((constructor)) static void pl_init(void)
{
	const char *s;
	uint64_t v;
	int saved = errno;

	if ((s = getenv("MEMPROF_RATE"))) {
		char *end;
		double rate = strtod(s, &end);

		if (end != s && !*end && rate > 0 && rate <= 1)
			pl_g.env_rate = rate;
	}
	if ((s = getenv("MEMPROF_SEED")) && parse_u64(s, &v)) {
		pl_g.seed_base = v;
	} else if (getrandom(&pl_g.seed_base, sizeof(pl_g.seed_base), GRND_NONBLOCK) !=
		   sizeof(pl_g.seed_base)) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		pl_g.seed_base = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
				 ((uint64_t)getpid() << 16);
	}
	if ((s = getenv("MEMPROF_ARM")) && !strcmp(s, "1"))
		pl_gate_set(PL_GATE_FORCE, true);
	if ((s = getenv("MEMPROF_WALK")) && !strcmp(s, "0"))
		pl_g.no_walk = true;
	if ((s = getenv("MEMPROF_BATCH")) && parse_u64(s, &v) && v >= 1 &&
	    v <= MEMPROF_PRELOAD_MAX_BATCH)
		pl_g.batch = v == 1 ? 0 : (uint32_t)v;	/* 1: each sample at once */
	if ((s = getenv("MEMPROF_TEST_LOG")) && parse_u64(s, &v) && v <= INT32_MAX) {
		pl_g.test_fd = (int)v;
		pl_gate_set(PL_GATE_FORCE, true);
	}
	pl_next_resolve();	/* if no allocation did it yet */
	pl_usdt_site[0] = pl_find_usdt_site((void *)memprof_preload_alloc_hook);
	pl_usdt_site[1] = pl_find_usdt_site((void *)memprof_preload_free_hook);
	pl_usdt_site[2] = pl_find_usdt_site((void *)memprof_preload_free_batch_hook);
	pl_usdt_site[3] = pl_find_usdt_site((void *)memprof_preload_flush_hook);
	pl_g.main_thread = pthread_self();
	pl_g.pid = (pid_t)syscall(SYS_getpid);
	memprof_preload_config.pending = (uintptr_t)&pl_pending;
	pthread_atfork(pl_atfork_prepare, NULL, pl_atfork_child);
	__atomic_store_n(&pl_g.ready, true, __ATOMIC_RELEASE);
	/* Allocations made before this constructor only polled: re-evaluate at the next one. */
	__atomic_store_n(&pl_tls.countdown, 0, __ATOMIC_RELAXED);
	pl_tls.state = PL_T_NEW;
	errno = saved;
}

/* At exit: report what is pending; later frees (other destructors) are reported one by one. */
static void pl_exit_flush(void)
{
	__atomic_store_n(&pl_g.exiting, true, __ATOMIC_RELEASE);
	/* Pairs with pl_free_report(): either it sees exiting, or this sees its id. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	pl_pending_flush(true);
}

__attribute__((destructor)) static void pl_fini(void)
{
	pl_exit_flush();
}

/*
 * _exit() and _Exit() run no destructor (a fork child's usual end, or a signal handler's): the
 * queued samples and frees are reported first, or they would be lost with the process. Not in
 * a vfork child: it runs on its parent's memory, so the queue is the parent's (its pid is not
 * the one recorded, since vfork runs no atfork handler). Async-signal-safe as _exit is: a
 * handler that interrupted this thread's own hold of the queue does not wait for it.
 */
PL_EXPORT void _exit(int status)
{
	if (__atomic_load_n(&pl_g.ready, __ATOMIC_ACQUIRE) &&
	    (pid_t)syscall(SYS_getpid) == pl_g.pid)
		pl_exit_flush();
	for (;;)
		syscall(SYS_exit_group, status);
}

PL_EXPORT void _Exit(int status) __attribute__((alias("_exit")));
