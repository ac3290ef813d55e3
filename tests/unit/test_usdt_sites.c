// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The loader's reading of USDT notes (mp_elf_usdt_sites(), daemon/elf_syms.c) on the built
 * libmemprof-preload.so ($MP_BUILD/lib): each memprof probe has one site, a 5-byte nop in the
 * file at the offset found, and its semaphore at the file offset of the sdt.h symbol
 * memprof_<name>_semaphore; unknown probes and providers have no site.
 */
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include "daemon/elf_syms.h"
#include "tests/unit/test.h"

static Elf *elf;
static int fd = -1;

/* The file offset of .symtab symbol @name, or 0. */
static uint64_t sym_off(const char *name)
{
	Elf_Scn *scn = NULL;
	uint64_t off, avail;

	while ((scn = elf_nextscn(elf, scn))) {
		Elf_Data *data;
		GElf_Shdr sh;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_SYMTAB || !sh.sh_entsize ||
		    !(data = elf_getdata(scn, NULL)))
			continue;
		for (size_t i = 1; i < sh.sh_size / sh.sh_entsize; i++) {
			const char *n;
			GElf_Sym s;

			if (gelf_getsym(data, (int)i, &s) && s.st_shndx != SHN_UNDEF &&
			    (n = elf_strptr(elf, sh.sh_link, s.st_name)) && !strcmp(n, name))
				return mp_elf_vaddr_to_off(elf, s.st_value, &off, &avail, NULL) ?
					       0 : off;
		}
	}
	return 0;
}

static void check_probe(const char *name)
{
	static const uint8_t nop5[5] = { 0x0f, 0x1f, 0x44, 0x00, 0x00 };
	struct mp_usdt_site s[4];
	char sema[64];
	uint8_t code[5];
	int n = mp_elf_usdt_sites(elf, "memprof", name, s, 4);

	if (!ASSERT_EQ(n, 1, name))
		return;
	ASSERT_TRUE(pread(fd, code, sizeof(code), (off_t)s[0].ip_off) == sizeof(code) &&
			    !memcmp(code, nop5, sizeof(nop5)),
		    "the site is a 5-byte nop in the file");
	snprintf(sema, sizeof(sema), "memprof_%s_semaphore", name);
	ASSERT_TRUE(s[0].sema_off != 0, "has a semaphore");
	ASSERT_EQ(s[0].sema_off, sym_off(sema), sema);
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

static void test_absent(void)
{
	struct mp_usdt_site s[1];

	ASSERT_EQ(mp_elf_usdt_sites(elf, "memprof", "nosuch", s, 1), 0, "unknown probe");
	ASSERT_EQ(mp_elf_usdt_sites(elf, "other", "alloc", s, 1), 0, "other provider");
	ASSERT_EQ(mp_elf_usdt_sites(elf, "memprof", "alloc", s, 0), 1, "counted past max");
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
	RUN(test_absent);
	elf_end(elf);
	close(fd);
	return test_exit();
}
