// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * C++ workload for the report's site naming: every allocation goes through the standard
 * library (std::vector::resize -> _M_default_append -> _M_allocate -> allocator_traits ->
 * __new_allocator::allocate -> operator new; std::string's _M_create; std::make_shared), so
 * the site the report names must be the user's function, not a libstdc++ frame. Prints the
 * exact truth per site as wl_alloc does (TRUTH NAME words= live_words= blocks=); every block is
 * freed before exit except the leaked vectors of wl_vec_leak.
 */
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#define NOINLINE __attribute__((noinline))

static const void *volatile sink;

static unsigned long long words(size_t size)
{
	return (size + 7) / 8 + 1;
}

static void truth(const char *site, unsigned long long w, unsigned long long live,
		  unsigned long long blocks)
{
	std::printf("TRUTH %s words=%llu live_words=%llu blocks=%llu\n", site, w, live, blocks);
}

/* resize() of an empty vector: one block of exactly n elements. */
NOINLINE static void wl_vec_fill(size_t n)
{
	std::vector<long> v;

	v.resize(n);
	sink = v.data();
}

/* Vectors kept to the end: live. */
NOINLINE static std::vector<int> *wl_vec_leak(size_t n)
{
	auto *v = new std::vector<int>();	/* the vector object itself: 24 bytes */

	v->resize(n);
	sink = v->data();
	return v;
}

/* A string longer than the small-string buffer: one block of its length + 1. */
NOINLINE static void wl_string(size_t len)
{
	std::string s(len, 'x');

	sink = s.data();
}

struct Obj {
	char bytes[120];
};

/* make_shared: one block holding the control block and the object. */
NOINLINE static void wl_shared()
{
	auto p = std::make_shared<Obj>();

	sink = p.get();
}

int main()
{
	const long n_fill = 3000, n_leak = 300, n_str = 20000, n_shared = 20000;
	std::vector<std::vector<int> *> kept;
	unsigned long long leak_w;

	kept.reserve(n_leak);	/* main's own block: not one of the sites */
	for (long i = 0; i < n_fill; i++)
		wl_vec_fill(512);
	truth("wl_vec_fill", n_fill * words(512 * sizeof(long)), 0, n_fill);
	for (long i = 0; i < n_leak; i++)
		kept.push_back(wl_vec_leak(1000));
	leak_w = n_leak * (words(1000 * sizeof(int)) + words(sizeof(std::vector<int>)));
	truth("wl_vec_leak", leak_w, leak_w, 2 * n_leak);
	for (long i = 0; i < n_str; i++)
		wl_string(200);
	truth("wl_string", n_str * words(201), 0, n_str);
	for (long i = 0; i < n_shared; i++)
		wl_shared();
	/* _Sp_counted_ptr_inplace<Obj>: vtable, two counts, the object */
	truth("wl_shared", n_shared * words(16 + sizeof(Obj)), 0, n_shared);
	std::fflush(stdout);
	sink = kept.data();
	return 0;
}
