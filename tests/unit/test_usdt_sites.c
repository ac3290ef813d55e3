// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The loader's reading of USDT notes (mp_elf_usdt_sites(), daemon/probe/elf_syms.c) on the built
 * libmemprof-preload.so ($MP_BUILD/lib): each memprof probe has one site, a 5-byte nop in the
 * file at the offset found, and its semaphore at the file offset of the sdt.h symbol
 * memprof_<name>_semaphore; unknown probes and providers have no site.
 */
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include "daemon/probe/elf_syms.h"
#include "tests/unit/test.h"

static Elf *elf;
static int fd = -1;

/* The file offset of .symtab symbol @name, or 0. */
static uint64_t sym_off(const char *name)
{
	uint64_t off, avail;
	GElf_Sym s;

	if (mp_elf_find_sym(elf, SHT_SYMTAB, -1, name, &s) ||
	    mp_elf_vaddr_to_off(elf, s.st_value, &off, &avail, NULL))
		return 0;
	return off;
}

static void check_probe(const char *name)
{
	static const uint8_t nop5[5] = { 0x0f, 0x1f, 0x44, 0x00, 0x00 };
	struct mp_usdt_site s[1][MP_USDT_MAX_SITES];
	char sema[64];
	uint8_t code[5];
	int n;

	if (!ASSERT_OK(mp_elf_usdt_sites(elf, "memprof", &name, 1, s, &n), "read the notes") ||
	    !ASSERT_EQ(n, 1, name))
		return;
	ASSERT_TRUE(pread(fd, code, sizeof(code), (off_t)s[0][0].ip_off) == sizeof(code) &&
			    !memcmp(code, nop5, sizeof(nop5)),
		    "the site is a 5-byte nop in the file");
	snprintf(sema, sizeof(sema), "memprof_%s_semaphore", name);
	ASSERT_TRUE(s[0][0].sema_off != 0, "has a semaphore");
	ASSERT_EQ(s[0][0].sema_off, sym_off(sema), sema);
}

static void test_alloc(void)
{
	check_probe("alloc");
}

static void test_free(void)
{
	check_probe("free");
}

static void test_free_batch(void)
{
	check_probe("free_batch");
}

static void test_flush(void)
{
	check_probe("flush");
}

/* One pass, several probes; probes the notes do not name have no site. */
static void test_several_and_absent(void)
{
	static const char *const names[] = { "nosuch", "free", "alloc" };
	struct mp_usdt_site s[3][MP_USDT_MAX_SITES];
	int n[3];

	ASSERT_OK(mp_elf_usdt_sites(elf, "memprof", names, 3, s, n), "read the notes");
	ASSERT_EQ(n[0], 0, "unknown probe");
	ASSERT_EQ(n[1], 1, "free");
	ASSERT_EQ(n[2], 1, "alloc");
	ASSERT_TRUE(s[1][0].ip_off != s[2][0].ip_off, "free and alloc at different sites");
	ASSERT_OK(mp_elf_usdt_sites(elf, "other", names + 2, 1, s, n), "other provider");
	ASSERT_EQ(n[0], 0, "another provider's alloc");
}

int main(void)
{
	const char *b = getenv("MP_BUILD");
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/lib/libmemprof-preload.so", b ? b : "build");
	elf_version(EV_CURRENT);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	elf = fd >= 0 ? elf_begin(fd, ELF_C_READ_MMAP, NULL) : NULL;
	if (!elf) {
		printf("FAIL: open %s\n", path);
		return 1;
	}
	RUN(test_alloc);
	RUN(test_free);
	RUN(test_free_batch);
	RUN(test_flush);
	RUN(test_several_and_absent);
	elf_end(elf);
	close(fd);
	return test_exit();
}
