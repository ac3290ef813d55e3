// SPDX-License-Identifier: LGPL-2.1-or-later
/* The symbolizer's internal tables, reached by including its sources: string interning, the
 * mapping of file offsets to ELF addresses through PT_LOADs, the per-CU function index. */
#include "daemon/stacks/symbolize.c"
#include "daemon/stacks/objects.c"
#include "daemon/stacks/lookup.c"
#include "daemon/stacks/procmaps.c"

#include "tests/unit/test.h"

static void test_intern(void)
{
	struct mp_symbolizer *s = mp_symbolizer__new();
	const char *a, *b, *c, *d;
	char big[5000];

	if (!ASSERT_TRUE(s, "new"))
		return;
	a = sym_intern(s, "malloc");
	b = intern_n(s, "mallocX", 6);
	c = sym_internf(s, "%s", "malloc");
	ASSERT_TRUE(a && a == b && b == c, "same string, same pointer");
	ASSERT_STREQ(sym_intern_symbol(s, "_ZN2ns5Class6methodEi"), "ns::Class::method(int)",
		     "demangled");
	ASSERT_STREQ(sym_intern_symbol(s, "_Znot_mangled"), "_Znot_mangled",
		     "kept when not mangled");
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	d = sym_intern(s, big);	/* larger than a quarter chunk: allocated on its own */
	ASSERT_TRUE(d && strlen(d) == sizeof(big) - 1, "big string");
	ASSERT_TRUE(sym_intern(s, "malloc") == a, "still interned after a big one");
	mp_symbolizer__free(s);
}

static void test_segments(void)
{
	/* a typical PIE: r-- at 0, r-x at 0x1000 (file 0x1000), rw- data with bss */
	struct load_seg segs[] = {
		{ .offset = 0, .vaddr = 0, .filesz = 0x1040, .flags = PF_R },
		{ .offset = 0x1040, .vaddr = 0x2040, .filesz = 0x3000, .flags = PF_R | PF_X },
		{ .offset = 0x4040, .vaddr = 0x6040, .filesz = 0x100, .flags = PF_R | PF_W },
	};
	struct module m = { .segs = segs, .nsegs = 3 };
	uint64_t v = 0;

	/* the page at 0x1000 holds the end of r-- and the start of r-x: code wins */
	ASSERT_TRUE(sym_module_vaddr(&m, 0x1050, &v) && v == 0x2050, "code offset");
	ASSERT_TRUE(sym_module_seg(&m, 0x1000, 0x2000) == &segs[1], "mapping of the shared page");
	ASSERT_TRUE(sym_module_vaddr(&m, 0x10, &v) && v == 0x10, "header offset");
	ASSERT_TRUE(sym_module_vaddr(&m, 0x4050, &v) && v == 0x6050, "data offset");
	ASSERT_TRUE(!sym_module_vaddr(&m, 0x9000, &v), "past the file");
}

/*
 * The per-CU function index against libdw's own dwarf_getscopes walk (with the hop from an
 * inlined instance to its concrete caller), at every few bytes of this program's code (this
 * file includes the symbolizer, built -O2: plenty of inlining).
 */
static void test_scopes_differential(void)
{
	struct mp_symbolizer *s = mp_symbolizer__new();
	uint64_t probe = (uintptr_t)&mp_symbolizer__resolve, v0, v;
	long compared = 0, inlined = 0, differ = 0;
	struct proc_map *pm;
	struct mp_frame f;
	struct module *m;
	struct proc *p;

	if (!ASSERT_TRUE(s, "new") ||
	    !ASSERT_OK(mp_symbolizer__resolve(s, getpid(), probe, 0, &f), "resolve"))
		goto out;
	p = hmap_get(&s->procs, (uint64_t)getpid() + 1, 0);
	pm = p ? proc_find(p, probe) : NULL;
	m = pm ? pm->mod : NULL;
	if (!ASSERT_TRUE(m && !sym_module_load(s, m) && sym_module_vaddr(m, pm->pgoff, &v0),
			 "module"))
		goto out;
	for (v = v0; v < v0 + (pm->end - pm->start); v += 3) {
		Dwarf_Die f1[MP_MAX_INLINE_DEPTH], f2[MP_MAX_INLINE_DEPTH], *cu;
		Dwarf_Addr a = v + m->bias, dbias;
		bool same;
		int n1, n2;

		cu = dwfl_module_addrdie(m->dmod, a, &dbias);
		if (!cu)
			continue;
		n1 = scopes_indexed(m, cu, a - dbias, f1, MP_MAX_INLINE_DEPTH);
		n2 = scopes_walked(cu, a - dbias, f2, MP_MAX_INLINE_DEPTH);
		same = n1 == n2;
		for (int i = 0; same && i < n1; i++)
			same = dwarf_dieoffset(&f1[i]) == dwarf_dieoffset(&f2[i]);
		if (!same && differ++ < 5)
			fprintf(stderr, "vaddr 0x%" PRIx64 ": index %d functions, walk %d\n", v, n1,
				n2);
		compared++;
		inlined += n1 > 1;
	}
	fprintf(stderr, "%ld pcs compared, %ld in inlined code, %ld differ\n", compared, inlined,
		differ);
	ASSERT_EQ(differ, 0, "index = walk");
	ASSERT_TRUE(inlined > 100, "inlined code covered");
out:
	mp_symbolizer__free(s);
}

int main(void)
{
	RUN(test_intern);
	RUN(test_segments);
	RUN(test_scopes_differential);
	return test_exit();
}
