// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Running an image that just exec'd up to the point where its allocators can be probed: the
 * dynamic linker's link map is consistent (every DT_NEEDED library mapped, no constructor run).
 * See cli/cmd_record.c for why, cli/record/record_trace.h for the API.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/record/record_trace.h"

#define R_DEBUG_STATE_OFF 24	/* offsetof(struct r_debug, r_state) on LP64 */

/* AT_BASE (dynamic linker load address) and AT_ENTRY of a stopped process. */
static int read_auxv(pid_t pid, uint64_t *base, uint64_t *entry)
{
	char path[64];
	Elf64_auxv_t av[128];
	ssize_t n;
	int fd;

	*base = *entry = 0;
	snprintf(path, sizeof(path), "/proc/%d/auxv", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, av, sizeof(av));
	close(fd);
	if (n < 0)
		return -errno;
	for (size_t i = 0; i < (size_t)n / sizeof(av[0]) && av[i].a_type != AT_NULL; i++) {
		if (av[i].a_type == AT_BASE)
			*base = av[i].a_un.a_val;
		else if (av[i].a_type == AT_ENTRY)
			*entry = av[i].a_un.a_val;
	}
	return 0;
}

/* The file mapped at @start in @pid (the dynamic linker: mapped at AT_BASE, offset 0). */
static int mapped_path(pid_t pid, uint64_t start, char *out, size_t len)
{
	char path[64], line[4096 + 128];
	FILE *f;
	int r = -ENOENT;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long lo, hi, off;
		int pos = 0;

		if (sscanf(line, "%llx-%llx %*s %llx %*s %*s %n", &lo, &hi, &off, &pos) < 3 || !pos)
			continue;
		if (lo == start && off == 0 && line[pos] == '/') {
			line[strcspn(line, "\n")] = '\0';
			snprintf(out, len, "%s", line + pos);
			r = 0;
			break;
		}
	}
	fclose(f);
	return r;
}

/* st_value of dynamic symbols @names[i] in the ELF file @path (0 when absent). */
static int elf_dynsyms(const char *path, const char *const *names, uint64_t *values, size_t n)
{
	Elf_Scn *scn = NULL;
	Elf *elf;
	int fd, r = -ENOENT;

	memset(values, 0, n * sizeof(*values));
	if (elf_version(EV_CURRENT) == EV_NONE)
		return -EINVAL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	elf = elf_begin(fd, ELF_C_READ, NULL);
	if (!elf) {
		close(fd);
		return -EINVAL;
	}
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *data;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM || !sh.sh_entsize)
			continue;
		data = elf_getdata(scn, NULL);
		if (!data)
			continue;
		for (size_t i = 0; i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Sym sym;
			const char *name;

			if (!gelf_getsym(data, (int)i, &sym))
				continue;
			name = elf_strptr(elf, sh.sh_link, sym.st_name);
			for (size_t k = 0; name && k < n; k++)
				if (!strcmp(name, names[k]) && sym.st_value) {
					values[k] = sym.st_value;
					r = 0;
				}
		}
	}
	elf_end(elf);
	close(fd);
	return r;
}

/*
 * @pid is stopped right after exec. Bring it to where every library it links is mapped and
 * no code of its own has run. Returns 0 (then the tracee is stopped), or -errno.
 */
int record_run_to_link_map(pid_t pid, int *st)
{
	uint64_t base, entry, vals[2];
	static const char *const names[] = { "_dl_debug_state", "_r_debug" };
	char ldso[4096];
	int r;

	r = read_auxv(pid, &base, &entry);
	if (r)
		return r;
	if (!base)
		return 0;	/* static executable: everything is mapped already */
	r = mapped_path(pid, base, ldso, sizeof(ldso));
	if (r)
		return r;
	r = elf_dynsyms(ldso, names, vals, 2);
#if defined(__x86_64__)
	if (r == 0 && vals[0] && vals[1])
		return record_trace__run_to(pid, base + vals[0], base + vals[1] + R_DEBUG_STATE_OFF,
					    st);
	/* No debugger hook: the entry point (constructors have run by then). */
	return entry ? record_trace__run_to(pid, entry, 0, st) : -ENOENT;
#else
	(void)vals;
	(void)st;
	return r;
#endif
}
