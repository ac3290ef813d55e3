// SPDX-License-Identifier: LGPL-2.1-or-later
/* Allocator symbol resolution and probe placement from the file (see elf_syms.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/probe/elf_syms.h"

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

int mp_elf_find_sym(Elf *elf, unsigned int sh_type, int st_type, const char *name,
		    GElf_Sym *sym)
{
	Elf_Scn *scn = NULL;

	while ((scn = elf_nextscn(elf, scn))) {
		Elf_Data *data;
		GElf_Shdr sh;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != sh_type || !sh.sh_entsize ||
		    !(data = elf_getdata(scn, NULL)))
			continue;
		for (size_t i = 1; i < sh.sh_size / sh.sh_entsize; i++) {
			const char *n;

			if (gelf_getsym(data, (int)i, sym) && sym->st_shndx != SHN_UNDEF &&
			    (st_type < 0 || GELF_ST_TYPE(sym->st_info) == st_type) &&
			    (n = elf_strptr(elf, sh.sh_link, sym->st_name)) && !strcmp(n, name))
				return 0;
		}
	}
	return -ENOENT;
}

/* The address of section @name, or 0. */
static uint64_t section_addr(Elf *elf, const char *name)
{
	Elf_Scn *scn = NULL;
	size_t shstrndx;

	if (elf_getshdrstrndx(elf, &shstrndx))
		return 0;
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		const char *n;

		if (gelf_getshdr(scn, &sh) && (n = elf_strptr(elf, shstrndx, sh.sh_name)) &&
		    !strcmp(n, name))
			return sh.sh_addr;
	}
	return 0;
}

/*
 * One note of type 3, owner "stapsdt": three addresses of the ELF class's size (the probe's
 * pc, the link-time address of .stapsdt.base, the semaphore or 0), then the provider, the
 * name and the argument spec, NUL-terminated. Returns the index in @names of the probe it
 * describes (its site in *@site), @nnames for another probe, or -EINVAL.
 */
static int usdt_note(Elf *elf, const uint8_t *desc, size_t len, const char *provider,
		     const char *const *names, int nnames, uint64_t base_now,
		     struct mp_usdt_site *site)
{
	size_t asz = gelf_getclass(elf) == ELFCLASS32 ? 4 : 8, plen;
	uint64_t a[3] = { 0, 0, 0 }, avail;
	const char *prov, *nm;
	int idx;

	if (len < 3 * asz + 3)
		return -EINVAL;
	for (int i = 0; i < 3; i++) {
		if (asz == 8) {
			memcpy(&a[i], desc + i * 8, 8);
		} else {
			uint32_t v;

			memcpy(&v, desc + i * 4, 4);
			a[i] = v;
		}
	}
	prov = (const char *)desc + 3 * asz;
	plen = strnlen(prov, len - 3 * asz);
	if (plen == len - 3 * asz)
		return -EINVAL;
	nm = prov + plen + 1;
	if (strnlen(nm, len - 3 * asz - plen - 1) == len - 3 * asz - plen - 1)
		return -EINVAL;
	if (strcmp(prov, provider))
		return nnames;
	for (idx = 0; idx < nnames && strcmp(nm, names[idx]); idx++)
		;
	if (idx == nnames)
		return nnames;
	/* Prelinked: everything moved by what .stapsdt.base moved. */
	if (base_now && a[1]) {
		a[0] += base_now - a[1];
		if (a[2])
			a[2] += base_now - a[1];
	}
	if (mp_elf_vaddr_to_off(elf, a[0], &site->ip_off, &avail, NULL))
		return -EINVAL;
	site->sema_off = 0;
	if (a[2] && mp_elf_vaddr_to_off(elf, a[2], &site->sema_off, &avail, NULL))
		return -EINVAL;
	return idx;
}

int mp_elf_usdt_sites(Elf *elf, const char *provider, const char *const *names, int nnames,
		      struct mp_usdt_site (*sites)[MP_USDT_MAX_SITES], int *nsites)
{
	uint64_t base_now = section_addr(elf, ".stapsdt.base");
	Elf_Scn *scn = NULL;

	for (int i = 0; i < nnames; i++)
		nsites[i] = 0;
	while ((scn = elf_nextscn(elf, scn))) {
		Elf_Data *data;
		GElf_Shdr sh;
		GElf_Nhdr nh;
		size_t off = 0, name_off, desc_off;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE ||
		    !(data = elf_getdata(scn, NULL)))
			continue;
		while ((off = gelf_getnote(data, off, &nh, &name_off, &desc_off)) > 0) {
			const char *owner = (const char *)data->d_buf + name_off;
			struct mp_usdt_site site;
			int r;

			if (nh.n_type != 3 || nh.n_namesz != sizeof("stapsdt") ||
			    memcmp(owner, "stapsdt", sizeof("stapsdt")))
				continue;
			r = usdt_note(elf, (const uint8_t *)data->d_buf + desc_off, nh.n_descsz,
				      provider, names, nnames, base_now, &site);
			if (r < 0)
				return r;
			if (r == nnames)
				continue;
			if (nsites[r] == MP_USDT_MAX_SITES)
				return -E2BIG;
			sites[r][nsites[r]++] = site;
		}
	}
	return 0;
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

bool mp_elf_is_go(Elf *elf)
{
	Elf_Scn *scn = NULL;
	size_t shstrndx;

	if (elf_getshdrstrndx(elf, &shstrndx))
		return false;
	while ((scn = elf_nextscn(elf, scn))) {
		const char *name;
		GElf_Shdr sh;

		if (!gelf_getshdr(scn, &sh) || !(name = elf_strptr(elf, shstrndx, sh.sh_name)))
			continue;
		if (!strcmp(name, ".go.buildinfo") || !strcmp(name, ".gopclntab") ||
		    !strcmp(name, ".note.go.buildid"))
			return true;
	}
	return false;
}
