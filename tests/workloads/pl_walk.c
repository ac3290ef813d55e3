// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The library's in-process frame walk in awkward places (tests/unit/preload-walk.sh), under
 * LD_PRELOAD with MEMPROF_ARM=1 and a high MEMPROF_RATE:
 *
 *	pl_walk seccomp		a seccomp filter kills the process on process_vm_readv and
 *				process_vm_writev, as SystemCallFilter=@system-service does;
 *				then the main thread (deeper than before, so the library checks
 *				more of its stack) and a new thread allocate. The walk must
 *				neither kill the process nor give up: prints "hooks H deferred D
 *				unwalked U" (walked samples reported at once, or queued: the
 *				library's default), fails unless H + D > 0 and U == 0.
 *	pl_walk altstack	signal handlers allocate on alternate signal stacks: one mapped
 *				anywhere (the walk may give up, must not fault) and one inside the
 *				thread's own stack (walked), in the main thread and in a new one.
 *				Fails unless hooks ran and the second kind never gave up.
 */
#include <dlfcn.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <memprof/preload.h>

static void *volatile sink;
static volatile struct memprof_preload_config *cfg;

static uint64_t stat_of(enum memprof_preload_stat s)
{
	return __atomic_load_n(&cfg->stats[s], __ATOMIC_RELAXED);
}

static void churn(int n)
{
	for (int i = 0; i < n; i++) {
		sink = malloc(512);
		free(sink);
	}
}

/* Allocate @depth frames (4 KiB each) below the caller. */
static __attribute__((noinline)) void deep(int depth)
{
	volatile char pad[4096];

	pad[0] = (char)depth;
	if (depth > 0)
		deep(depth - 1);
	else
		churn(2000);
	pad[1] = pad[0];
}

static void *thread_deep(void *arg)
{
	(void)arg;
	deep(32);
	return NULL;
}

static int seccomp_mode(void)
{
#if defined(__x86_64__)
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 1, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_writev, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };
	uint64_t hooks0 = stat_of(MEMPROF_PRELOAD_STAT_ALLOC_HOOKS);
	uint64_t deferred0 = stat_of(MEMPROF_PRELOAD_STAT_DEFERRED), deferred;
	uint64_t unwalked0 = stat_of(MEMPROF_PRELOAD_STAT_UNWALKED), hooks, unwalked;
	pthread_t th;

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
		perror("pl_walk: seccomp");
		return 1;
	}
	deep(64);
	if (pthread_create(&th, NULL, thread_deep, NULL) || pthread_join(th, NULL))
		return 1;
	hooks = stat_of(MEMPROF_PRELOAD_STAT_ALLOC_HOOKS) - hooks0;
	deferred = stat_of(MEMPROF_PRELOAD_STAT_DEFERRED) - deferred0;
	unwalked = stat_of(MEMPROF_PRELOAD_STAT_UNWALKED) - unwalked0;
	printf("hooks %llu deferred %llu unwalked %llu\n", (unsigned long long)hooks,
	       (unsigned long long)deferred, (unsigned long long)unwalked);
	return hooks + deferred > 0 && unwalked == 0 ? 0 : 1;
#else
	return 77;
#endif
}

static void on_usr1(int sig)
{
	(void)sig;
	churn(300);	/* raised synchronously: malloc is not interrupted */
}

/* Handle SIGUSR1 on @stack (@size bytes), raise it a few times; returns the walks given up. */
static uint64_t on_altstack(void *stack, size_t size)
{
	stack_t ss = { .ss_sp = stack, .ss_size = size }, old;
	uint64_t u = stat_of(MEMPROF_PRELOAD_STAT_UNWALKED);

	if (sigaltstack(&ss, &old))
		abort();
	for (int i = 0; i < 4; i++)
		raise(SIGUSR1);
	ss.ss_flags = SS_DISABLE;
	if (sigaltstack(&ss, NULL))
		abort();
	return stat_of(MEMPROF_PRELOAD_STAT_UNWALKED) - u;
}

static __attribute__((noinline)) uint64_t altstacks(void)
{
	static const size_t len = 256 << 10;
	char own[64 << 10] __attribute__((aligned(16)));	/* on this thread's stack */
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t own_unwalked;

	if (m == MAP_FAILED)
		abort();
	on_altstack(m, len);
	own_unwalked = on_altstack(own, sizeof(own));
	munmap(m, len);
	return own_unwalked;
}

static void *thread_alt(void *arg)
{
	*(uint64_t *)arg = altstacks();
	return NULL;
}

static int altstack_mode(void)
{
	struct sigaction sa = { .sa_handler = on_usr1, .sa_flags = SA_ONSTACK };
	uint64_t hooks0 = stat_of(MEMPROF_PRELOAD_STAT_ALLOC_HOOKS), main_u, thread_u = 0;
	pthread_t th;

	if (sigaction(SIGUSR1, &sa, NULL))
		return 1;
	main_u = altstacks();
	if (pthread_create(&th, NULL, thread_alt, &thread_u) || pthread_join(th, NULL))
		return 1;
	printf("hooks %llu own-stack unwalked main %llu thread %llu\n",
	       (unsigned long long)(stat_of(MEMPROF_PRELOAD_STAT_ALLOC_HOOKS) - hooks0),
	       (unsigned long long)main_u, (unsigned long long)thread_u);
	return stat_of(MEMPROF_PRELOAD_STAT_ALLOC_HOOKS) > hooks0 && !main_u && !thread_u ? 0 : 1;
}

int main(int argc, char **argv)
{
	cfg = dlsym(RTLD_DEFAULT, "memprof_preload_config");
	if (argc != 2 || !cfg) {
		fprintf(stderr, "usage: pl_walk seccomp|altstack (under libmemprof-preload)\n");
		return 2;
	}
	if (!strcmp(argv[1], "seccomp"))
		return seccomp_mode();
	if (!strcmp(argv[1], "altstack"))
		return altstack_mode();
	fprintf(stderr, "pl_walk: unknown mode '%s'\n", argv[1]);
	return 2;
}
