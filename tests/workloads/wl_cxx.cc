// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * C++ workload for the record tests: operator new/delete and new[]/delete[] at known sites,
 * with the same TRUTH lines as wl_alloc.c. Objects go to a volatile sink so the compiler keeps
 * every new/delete pair. "wl_cxx wait" only waits for EOF on stdin (a profiled bystander).
 */
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>

#define NOINLINE __attribute__((noinline))

struct Obj {
	char bytes[200];
};

static void *volatile sink;

static uint64_t words(size_t size)
{
	return (size + 7) / 8 + 1;
}

static void truth(const char *site, uint64_t w, uint64_t live, uint64_t blocks)
{
	std::printf("TRUTH %s words=%llu live_words=%llu blocks=%llu\n", site,
		    (unsigned long long)w, (unsigned long long)live, (unsigned long long)blocks);
}

NOINLINE static Obj *wl_site_new()
{
	Obj *o = new Obj;

	sink = o;
	return o;
}

NOINLINE static char *wl_site_new_array(size_t n)
{
	char *a = new char[n];

	sink = a;
	return a;
}

int main(int argc, char **argv)
{
	const long n_obj = 30000, n_arr = 20000;

	if (argc > 1 && !std::strcmp(argv[1], "wait")) {
		/* a bystander: a C++ process that maps libstdc++ and waits for EOF on stdin */
		while (std::getchar() != EOF)
			;
		return 0;
	}

	for (long i = 0; i < n_obj; i++)
		wl_site_new();	/* leaked */
	truth("wl_site_new", n_obj * words(sizeof(Obj)), n_obj * words(sizeof(Obj)), n_obj);
	for (long i = 0; i < n_arr; i++)
		delete[] wl_site_new_array(3000);
	truth("wl_site_new_array", n_arr * words(3000), 0, n_arr);
	return 0;
}
