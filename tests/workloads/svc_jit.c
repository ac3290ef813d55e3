// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * svc_jit: a "JIT" for the service tests: a few bytes of machine code in anonymous executable
 * memory that call an allocating function, so that sampled stacks hold a frame that only a
 * JIT perf map (/tmp/perf-PID.map) can name.
 *   SIGUSR1  run the code COUNT times, each allocating 1000 bytes and keeping the block
 *            ("allocated N" on stdout)
 *   SIGTERM  exit 0
 * Usage: svc_jit [COUNT [own | map FILE]]   (default 100). Prints "code ADDR SIZE" (hex) and
 * "ready PID" once it waits for signals; with "own" it first writes its perf map, naming the
 * code "jit_own_function"; with "map FILE" it maps FILE executable too (a test may then put
 * something else under its name).
 */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CODE_SIZE	32

static void *volatile *blocks;
static volatile long nblocks;

__attribute__((noinline)) static void jit_alloc(int size)
{
	blocks[nblocks] = malloc((size_t)size);
	if (blocks[nblocks])
		memset(blocks[nblocks], 1, 8);
	nblocks++;
}

/* push %rbp; mov %rsp,%rbp; mov $1000,%edi; movabs $jit_alloc,%rax; call *%rax; pop %rbp; ret */
static void (*make_code(void))(void)
{
	static const uint8_t head[] = { 0x55, 0x48, 0x89, 0xe5, 0xbf, 0xe8, 0x03, 0x00, 0x00,
					0x48, 0xb8 };
	static const uint8_t tail[] = { 0xff, 0xd0, 0x5d, 0xc3 };
	uintptr_t fn = (uintptr_t)jit_alloc;
	uint8_t *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
			     0);

	if (code == MAP_FAILED)
		return NULL;
	memcpy(code, head, sizeof(head));
	memcpy(code + sizeof(head), &fn, sizeof(fn));
	memcpy(code + sizeof(head) + sizeof(fn), tail, sizeof(tail));
	if (mprotect(code, 4096, PROT_READ | PROT_EXEC))
		return NULL;
	return (void (*)(void))(uintptr_t)code;
}

int main(int argc, char **argv)
{
	long count = argc > 1 ? atol(argv[1]) : 100;
	void (*code)(void) = make_code();
	sigset_t set;
	int sig;

	if (count <= 0 || !code) {
		fprintf(stderr, "usage: svc_jit [COUNT [own | map FILE]]\n");
		return 2;
	}
	blocks = calloc((size_t)count, sizeof(void *));
	if (!blocks)
		return 1;
	if (argc > 2 && !strcmp(argv[2], "own")) {
		char path[64];
		FILE *f;

		snprintf(path, sizeof(path), "/tmp/perf-%d.map", (int)getpid());
		f = fopen(path, "w");
		if (!f)
			return 1;
		fprintf(f, "%lx %x jit_own_function\n", (unsigned long)(uintptr_t)code, CODE_SIZE);
		fclose(f);
	} else if (argc > 3 && !strcmp(argv[2], "map")) {
		int fd = open(argv[3], O_RDONLY | O_CLOEXEC);

		if (fd < 0 || mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0) == MAP_FAILED)
			return 1;
		close(fd);
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	printf("code %lx %x\n", (unsigned long)(uintptr_t)code, CODE_SIZE);
	printf("ready %d\n", (int)getpid());
	for (;;) {
		if (sigwait(&set, &sig))
			return 1;
		if (sig != SIGUSR1)
			return 0;
		for (long i = nblocks; i < count; i++)
			code();
		printf("allocated %ld\n", (long)nblocks);
	}
}
