// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Lookups in one object of the symbolizer (see symbolize.c): an ELF address -> its locations,
 * from the line table, a per-CU index of function ranges (with inlined callers), and the ELF
 * symbol tables for what DWARF lacks.
 */
#include "daemon/stacks/symbolize_int.h"

struct loc_builder {
	struct memprof_location locs[MP_MAX_INLINE_DEPTH];
	unsigned int n;		/* innermost first while building */
};

/*
 * A function's name: the demangled linkage name for C++ (and Rust legacy mangling), whose
 * DW_AT_name is unqualified; DW_AT_name otherwise, since a C linkage name is an asm label
 * (glibc's "__GI___libc_malloc" for __libc_malloc).
 */
static const char *die_name(struct mp_symbolizer *s, Dwarf_Die *die)
{
	Dwarf_Attribute a;
	const char *name;

	name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &a));
	if (!name)
		name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &a));
	if (name && name[0] == '_' && name[1] == 'Z')
		return sym_intern_symbol(s, name);
	name = dwarf_diename(die);
	return name ? sym_intern(s, name) : NULL;
}

static uint32_t die_udata(Dwarf_Die *die, int at)
{
	Dwarf_Attribute a;
	Dwarf_Word w;

	if (dwarf_formudata(dwarf_attr(die, at, &a), &w))
		return 0;
	return w > UINT32_MAX ? UINT32_MAX : (uint32_t)w;
}

/*
 * Per-CU index of the functions (DW_TAG_subprogram with code) by address range, so that finding
 * the function of a pc costs a binary search rather than dwarf_getscopes()' walk over the CU's
 * DIEs (large C++ CUs have tens of thousands). Built on first use of a CU, freed on unload.
 */
struct fn_range {
	uint64_t lo, hi;		/* [lo, hi) in CU (DWARF) addresses */
	Dwarf_Die die;
};

struct cu_index {
	struct fn_range *r;
	size_t n, cap;
};

#define MP_MAX_SCOPE_DEPTH	256	/* nested blocks and inlines walked below a function */

static int cu_index_add(struct cu_index *ix, uint64_t lo, uint64_t hi, const Dwarf_Die *die)
{
	if (MP_ARRAY_RESERVE(ix->r, ix->cap, ix->n + 1, 64))
		return -ENOMEM;
	ix->r[ix->n++] = (struct fn_range){ lo, hi, *die };
	return 0;
}

/* Functions below @parent, through namespaces and classes (C++ methods defined in the class),
 * not into functions (a GNU C nested function is left to dwarf_getscopes). */
static int cu_index_walk(struct cu_index *ix, Dwarf_Die *parent, int depth)
{
	Dwarf_Die child;

	if (depth > 32 || dwarf_child(parent, &child) != 0)
		return 0;
	do {
		Dwarf_Addr base, lo, hi;
		ptrdiff_t off = 0;
		int r;

		switch (dwarf_tag(&child)) {
		case DW_TAG_subprogram:
			while ((off = dwarf_ranges(&child, off, &base, &lo, &hi)) > 0)
				if (hi > lo && (r = cu_index_add(ix, lo, hi, &child)))
					return r;
			break;
		case DW_TAG_namespace:
		case DW_TAG_class_type:
		case DW_TAG_structure_type:
		case DW_TAG_union_type:
		case DW_TAG_module:
			r = cu_index_walk(ix, &child, depth + 1);
			if (r)
				return r;
			break;
		default:
			break;
		}
	} while (dwarf_siblingof(&child, &child) == 0);
	return 0;
}

static int fn_range_cmp(const void *a, const void *b)
{
	const struct fn_range *x = a, *y = b;
	Dwarf_Off ox, oy;

	if (x->lo != y->lo)
		return x->lo < y->lo ? -1 : 1;
	/* aliases (glibc's __GI_ names) share a range: the first DIE, as dwarf_getscopes has */
	ox = dwarf_dieoffset((Dwarf_Die *)&x->die);
	oy = dwarf_dieoffset((Dwarf_Die *)&y->die);
	return ox < oy ? -1 : ox > oy;
}

void sym_cu_indexes_free(struct module *m)
{
	for (size_t i = 0; i < m->cu_index.cap; i++) {
		struct cu_index *ix = (void *)(uintptr_t)m->cu_index.slots[i].val;

		if (ix) {
			free(ix->r);
			free(ix);
		}
	}
	mp_hashmap__clear(&m->cu_index);
}

static struct cu_index *cu_index_get(struct module *m, Dwarf_Die *cudie)
{
	uint64_t key = dwarf_dieoffset(cudie) + 1;
	struct cu_index *ix = hmap_get(&m->cu_index, key, 0);

	if (ix)
		return ix;
	ix = calloc(1, sizeof(*ix));
	if (!ix)
		return NULL;
	if (cu_index_walk(ix, cudie, 0) || hmap_put(&m->cu_index, key, 0, ix)) {
		free(ix->r);
		free(ix);
		return NULL;
	}
	if (ix->n > 1)	/* a CU without functions has no array at all */
		qsort(ix->r, ix->n, sizeof(ix->r[0]), fn_range_cmp);
	return ix;
}

/*
 * The functions containing @pc, innermost first (inlined subroutines, then the subprogram),
 * into @fns (up to @max). From the index: the subprogram by binary search, then down through
 * the blocks and inlined subroutines that contain @pc. Returns how many, 0 if the index does
 * not know @pc.
 */
static int scopes_indexed(struct module *m, Dwarf_Die *cudie, Dwarf_Addr pc, Dwarf_Die *fns,
			  int max)
{
	struct cu_index *ix = cu_index_get(m, cudie);
	Dwarf_Die chain[MP_MAX_SCOPE_DEPTH], cur, child;
	const struct fn_range *fr = NULL;
	size_t lo;
	int n = 0;

	if (!ix || !ix->n)
		return 0;
	lo = SYM_UPPER_BOUND(ix->r, ix->n, lo, pc);	/* first range starting after pc */
	if (lo > 0 && pc < ix->r[lo - 1].hi)
		fr = &ix->r[lo - 1];
	if (!fr)
		return 0;
	while (fr > ix->r && fr[-1].lo == fr->lo && pc < fr[-1].hi)
		fr--;
	cur = fr->die;
	chain[n++] = cur;
	while (n < MP_MAX_SCOPE_DEPTH && dwarf_child(&cur, &child) == 0) {
		bool found = false;

		do {
			int tag = dwarf_tag(&child);

			if ((tag == DW_TAG_inlined_subroutine || tag == DW_TAG_lexical_block ||
			     tag == DW_TAG_try_block || tag == DW_TAG_catch_block) &&
			    dwarf_haspc(&child, pc) > 0) {
				found = true;
				break;
			}
		} while (dwarf_siblingof(&child, &child) == 0);
		if (!found)
			break;
		cur = child;
		if (dwarf_tag(&cur) == DW_TAG_inlined_subroutine)
			chain[n++] = cur;
	}
	if (n > max)
		n = max;
	for (int i = 0; i < n; i++)
		fns[i] = chain[n - 1 - i];
	return n;
}

/*
 * The same with dwarf_getscopes(), for what the index does not cover. Past an inlined
 * subroutine, dwarf_getscopes() continues with the scopes of its abstract origin (the inline
 * function's definition), not with the function it was inlined into: those come from
 * dwarf_getscopes_die() on the inlined instance.
 */
static int scopes_walked(Dwarf_Die *cudie, Dwarf_Addr pc, Dwarf_Die *fns, int max)
{
	Dwarf_Die *scopes = NULL;
	int n = dwarf_getscopes(cudie, pc, &scopes), k = 0, i = 0;

	while (i < n && k < max) {
		int tag = dwarf_tag(&scopes[i]);

		if (tag == DW_TAG_subprogram) {
			fns[k++] = scopes[i];
			break;
		}
		if (tag != DW_TAG_inlined_subroutine) {
			i++;
			continue;
		}
		fns[k++] = scopes[i];
		/* the concrete scopes around this instance; [0] is the instance itself */
		free(scopes);
		scopes = NULL;
		n = dwarf_getscopes_die(&fns[k - 1], &scopes);
		i = 1;
	}
	free(scopes);
	return k;
}

/*
 * Locations of the functions containing @pc, innermost first: the innermost at the line
 * table's position (already in locs[0]), each enclosing one at the call site
 * (DW_AT_call_file/line/column) of the inlined subroutine it contains.
 */
static void add_inlines(struct mp_symbolizer *s, struct module *m, struct loc_builder *b,
			Dwarf_Die *cudie, Dwarf_Addr pc)
{
	Dwarf_Die fns[MP_MAX_INLINE_DEPTH];
	Dwarf_Files *files = NULL;
	size_t nfiles = 0;
	int n;

	n = scopes_indexed(m, cudie, pc, fns, MP_MAX_INLINE_DEPTH);
	if (!n)
		n = scopes_walked(cudie, pc, fns, MP_MAX_INLINE_DEPTH);
	for (int i = 0; i < n; i++) {
		Dwarf_Die *d = &fns[i];
		struct memprof_location *l;
		uint32_t file;

		b->locs[b->n - 1].defname = die_name(s, d);
		if (dwarf_tag(d) != DW_TAG_inlined_subroutine || b->n >= MP_MAX_INLINE_DEPTH)
			break;
		/* inlined: the next enclosing function is at the call site */
		l = &b->locs[b->n++];
		file = die_udata(d, DW_AT_call_file);
		*l = (struct memprof_location){ 0 };
		l->line = die_udata(d, DW_AT_call_line);
		l->start_char = l->end_char = die_udata(d, DW_AT_call_column);
		if (!files && dwarf_getsrcfiles(cudie, &files, &nfiles))
			files = NULL;
		if (files && file < nfiles)
			l->filename = sym_intern(s, dwarf_filesrc(files, file, NULL, NULL));
		if (!l->filename)
			l->filename = b->locs[0].filename;
		/* its defname: the enclosing function's, next round */
	}
}

/* A result with @n locations, copied from @locs (outermost first) into the arena. */
struct result *sym_result_new(struct mp_symbolizer *s, const struct memprof_location *locs,
			      unsigned int n, const struct module *m, const char *object)
{
	struct result *r = sym_arena_alloc(s, sizeof(*r) + n * sizeof(r->locs[0]));

	if (!r)
		return NULL;
	memcpy(r->locs, locs, n * sizeof(r->locs[0]));
	r->frame.nlocs = n;
	r->frame.locs = r->locs;
	r->frame.object = m ? m->path : object;
	r->frame.build_id = m ? m->build_id : NULL;
	return r;
}

static int sym_cmp(const void *a, const void *b)
{
	const struct sym_ent *x = a, *y = b;

	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	return x->end > y->end ? -1 : x->end < y->end;	/* sized before unsized */
}

static void syms_build(struct module *m)
{
	int n = dwfl_module_getsymtab(m->dmod);

	m->syms_built = true;
	if (n <= 1)
		return;
	m->syms = calloc((size_t)n, sizeof(*m->syms));
	if (!m->syms)
		return;
	for (int i = 1; i < n; i++) {
		GElf_Addr addr;
		GElf_Sym sym;
		const char *name = dwfl_module_getsym_info(m->dmod, i, &sym, &addr, NULL, NULL,
							   NULL);
		int type = GELF_ST_TYPE(sym.st_info), bind = GELF_ST_BIND(sym.st_info);

		if (!name || !name[0] || sym.st_shndx == SHN_UNDEF ||
		    (type != STT_FUNC && type != STT_GNU_IFUNC))
			continue;
		m->syms[m->nsyms++] = (struct sym_ent){
			.start = addr, .end = addr + sym.st_size, .name = name,
			.rank = bind == STB_GLOBAL ? 0 : bind == STB_WEAK ? 1 : 2,
		};
	}
	qsort(m->syms, m->nsyms, sizeof(*m->syms), sym_cmp);
}

/* The function symbol containing @a (a sized one, else the unsized one just below), or NULL. */
static const char *syms_lookup(struct module *m, GElf_Addr a)
{
	size_t lo, i;

	if (!m->syms_built)
		syms_build(m);
	lo = SYM_UPPER_BOUND(m->syms, m->nsyms, start, a);	/* first entry with start > a */
	if (!lo)
		return NULL;
	i = lo - 1;
	while (i > 0 && m->syms[i - 1].start == m->syms[i].start)
		i--;		/* the preferred of the aliases at that address */
	if (m->syms[i].end == m->syms[i].start || a < m->syms[i].end)
		return m->syms[i].name;
	/* past its end: an enclosing sized symbol just below (rare), within a few entries */
	for (size_t k = 0; k < 8 && i > 0; k++) {
		i--;
		if (m->syms[i].end > a)
			return m->syms[i].name;
	}
	return NULL;
}

/*
 * Names come from DWARF when there is some (the DIEs of the function and its inlined callees);
 * the ELF symbol tables (.symtab of the object or its debug file, .dynsym, MiniDebugInfo) are
 * asked only for what DWARF did not name, as libdwfl searches them linearly.
 */
struct result *sym_lookup_module(struct mp_symbolizer *s, struct module *m, uint64_t vaddr)
{
	struct loc_builder b = { .n = 1 };
	struct memprof_location out[MP_MAX_INLINE_DEPTH];
	const char *symname = NULL, *fallback;
	bool dwarf = false, symtab = false;
	Dwarf_Addr a = 0, dbias;
	Dwfl_Line *line;
	Dwarf_Die *cudie;

	s->st.lookups++;
	fallback = sym_internf(s, "%s+0x%" PRIx64, m->base, vaddr);
	if (!fallback)
		return NULL;
	b.locs[0] = (struct memprof_location){ .filename = m->base };
	if (sym_module_load(s, m) == 0) {
		a = vaddr + m->bias;
		/* libdwfl gives an address in a gap between a CU's ranges (code of an object
		 * without debug info linked in, e.g. crt1.o's _start) to the preceding CU, and
		 * the line of its last row: only a CU that covers the address is asked. */
		cudie = dwfl_module_addrdie(m->dmod, a, &dbias);
		if (cudie && dwarf_haspc(cudie, a - dbias) <= 0)
			cudie = NULL;
		line = cudie ? dwfl_module_getsrc(m->dmod, a) : NULL;
		if (line) {
			int lineno = 0, col = 0;
			const char *file = dwfl_lineinfo(line, NULL, &lineno, &col, NULL, NULL);

			if (file) {
				b.locs[0].filename = sym_intern(s, file);
				b.locs[0].line = lineno > 0 ? (uint32_t)lineno : 0;
				b.locs[0].start_char = col > 0 ? (uint32_t)col : 0;
				b.locs[0].end_char = b.locs[0].start_char;
				dwarf = true;
			}
		}
		if (cudie) {
			add_inlines(s, m, &b, cudie, a - dbias);
			dwarf = true;
		}
		if (!b.locs[0].filename)
			b.locs[0].filename = m->base;
	}
	for (unsigned int i = 0; i < b.n; i++) {
		if (b.locs[i].defname)
			continue;
		if (!symtab && m->dmod) {
			const char *sn = syms_lookup(m, a);

			symname = sn ? sym_intern_symbol(s, sn) : NULL;
			symtab = true;
		}
		/* the ELF symbol is the outermost function: inlined ones get it if unnamed */
		b.locs[i].defname = symname ? symname : fallback;
	}
	if (dwarf)
		s->st.dwarf++;
	else if (symname)
		s->st.symtab_only++;
	else
		s->st.unknown++;
	for (unsigned int i = 0; i < b.n; i++) {
		out[i] = b.locs[b.n - 1 - i];
		if (!out[i].filename || !out[i].defname)
			return NULL;	/* interning failed: out of memory */
	}
	return sym_result_new(s, out, b.n, m, NULL);
}
