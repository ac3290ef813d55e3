// SPDX-License-Identifier: LGPL-2.1-or-later
/* Allocator symbol resolution and probe placement from the file (see elf_syms.h). */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "daemon/elf_syms.h"

static void scan_symtab(Elf *elf, Elf_Scn *scn, const GElf_Shdr *sh, Elf_Data *versym,
			mp_sym_index_fn index, void *ctx, struct mp_sym_found *found)
{
	Elf_Data *data = elf_getdata(scn, NULL);
	size_t n;

	if (!data || sh->sh_entsize == 0)
		return;
	n = sh->sh_size / sh->sh_entsize;
	for (size_t i = 1; i < n; i++) {
		GElf_Sym sym;
		const char *name;
		int idx, prio;

		if (!gelf_getsym(data, (int)i, &sym) || GELF_ST_TYPE(sym.st_info) != STT_FUNC ||
		    sym.st_shndx == SHN_UNDEF || sym.st_value == 0)
			continue;
		name = elf_strptr(elf, sh->sh_link, sym.st_name);
		if (!name || (idx = index(name, ctx)) < 0)
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

void mp_elf_find_funcs(Elf *elf, mp_sym_index_fn index, void *ctx, struct mp_sym_found *found)
{
	Elf_Data *versym = NULL;
	Elf_Scn *scn = NULL;

	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;

		if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_GNU_versym)
			versym = elf_getdata(scn, NULL);
	}
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;

		if (gelf_getshdr(scn, &sh) && (sh.sh_type == SHT_DYNSYM || sh.sh_type == SHT_SYMTAB))
			scan_symtab(elf, scn, &sh, sh.sh_type == SHT_DYNSYM ? versym : NULL, index,
				    ctx, found);
	}
}

int mp_elf_vaddr_to_off(Elf *elf, uint64_t v, uint64_t *off, uint64_t *avail, uint64_t *before)
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
			if (before)
				*before = v - ph.p_vaddr;
			return 0;
		}
	}
	return -ENOENT;
}

int mp_elf_place(int fd, struct mp_placement_req *req, uint64_t size, uint64_t avail,
		 struct mp_placement *pl)
{
	size_t len = size ? size : 64;
	uint8_t *code;
	ssize_t got;
	int err;

	if (len > avail)
		len = avail;
	if (len > MP_MAX_CODE_SCAN)
		len = MP_MAX_CODE_SCAN;
	code = malloc(len);
	if (!code)
		return -ENOMEM;
	got = pread(fd, code, len, (off_t)req->addr);
	if (got > 0) {
		req->code = code;
		req->len = (size_t)got;
		mp_placement__choose(req, pl);
		req->code = NULL;
		err = 0;
	} else {
		err = got < 0 ? -errno : -EIO;
	}
	free(code);
	return err;
}
