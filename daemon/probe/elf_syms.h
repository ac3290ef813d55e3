/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Allocator symbol resolution shared by the loader (daemon/probe/discover.c) and the probe-floor
 * benchmark (bench/floor.c): find a table of function names in an object's symbol tables, map
 * their addresses to file offsets, and apply the probe placement rule (daemon/probe/placement.h) to
 * the code read from the file.
 *
 * Owner: the BPF/probes component. Library-style: never logs.
 */
#ifndef MEMPROFD_ELF_SYMS_H
#define MEMPROFD_ELF_SYMS_H

#include <stdbool.h>
#include <stdint.h>

#include <gelf.h>
#include <libelf.h>

#include "daemon/probe/placement.h"

#define MP_MAX_CODE_SCAN	65536	/* bytes of a function examined for placement */

struct mp_sym_found {
	uint64_t value, size;
	int prio;		/* 0: none; 1: hidden version; 2: .symtab; 3: default .dynsym */
};

/* Index of @name in the caller's table of names, or -1. */
typedef int (*mp_sym_index_fn)(const char *name, void *ctx);

/*
 * Fill found[index(name)] for every defined function symbol of @elf that @index knows, from
 * .dynsym and .symtab. Preference: a default-version dynamic symbol, then the static table,
 * then a hidden version. @found must be zeroed by the caller.
 */
void mp_elf_find_funcs(Elf *elf, mp_sym_index_fn index, void *ctx, struct mp_sym_found *found);

/* The defined symbol @name in @elf's symbol table of section type @sh_type (SHT_DYNSYM or
 * SHT_SYMTAB) and of symbol type @st_type (STT_OBJECT, ...; -1: any): 0 and *@sym, or -ENOENT. */
int mp_elf_find_sym(Elf *elf, unsigned int sh_type, int st_type, const char *name,
		    GElf_Sym *sym);

/* Was @elf built by the Go toolchain (its .go.buildinfo, .gopclntab or .note.go.buildid)? */
bool mp_elf_is_go(Elf *elf);

/* Virtual address -> file offset through the PT_LOAD segments; *@avail gets the file bytes
 * from there to the segment's end, *@before (if not NULL) the bytes from the segment's start.
 * Returns 0, -EINVAL or -ENOENT. */
int mp_elf_vaddr_to_off(Elf *elf, uint64_t v, uint64_t *off, uint64_t *avail, uint64_t *before);

/* A USDT probe site (.note.stapsdt): where a uprobe goes and its semaphore, as file offsets. */
struct mp_usdt_site {
	uint64_t ip_off;	/* file offset of the probe's instruction */
	uint64_t sema_off;	/* file offset of its semaphore, 0 if it has none */
};

/* Sites kept per probe (sdt.h makes one per expansion of a probe macro). */
#define MP_USDT_MAX_SITES	4

/*
 * The sites of USDT probes @provider:@names[i] in @elf, in one pass over its notes: nsites[i]
 * of them into sites[i] (addresses adjusted for prelinking through .stapsdt.base, as sdt.h
 * defines; 0 sites: no such probe). Returns 0, -E2BIG when a probe has more than
 * MP_USDT_MAX_SITES, or -EINVAL for a malformed note or a site outside the file's loaded
 * segments.
 */
int mp_elf_usdt_sites(Elf *elf, const char *provider, const char *const *names, int nnames,
		      struct mp_usdt_site (*sites)[MP_USDT_MAX_SITES], int *nsites);

/*
 * Read the code of the function at file offset req->addr of @fd (@size bytes, or 64 if the
 * symbol has no size; at most @avail and MP_MAX_CODE_SCAN) and choose its probe point into
 * @pl. Returns 0, or -ENOMEM / -EIO / -errno of the read (then @pl is untouched).
 */
int mp_elf_place(int fd, struct mp_placement_req *req, uint64_t size, uint64_t avail,
		 struct mp_placement *pl);

#endif
