// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * stk_cxx: C++ allocations whose backtraces must show demangled names with their parameters:
 * main -> ns::Class::method(int) -> ns::make_buffer<char>(unsigned long) -> operator new[].
 * Built without frame pointers (-fomit-frame-pointer -O2 -g).
 *
 *	stk_cxx [ITERATIONS [PAUSE_US]]	(default 20000, no pause after each)
 */
#include <cstdlib>
#include <cstring>
#include <ctime>

void *volatile stk_sink;

namespace ns {

template <typename T> __attribute__((noinline)) T *make_buffer(unsigned long n)
{
	T *p = new T[n];

	std::memset(p, 1, n * sizeof(T) < 16 ? n * sizeof(T) : 16);
	return p;
}

class Class {
public:
	__attribute__((noinline)) void method(int n);
};

void Class::method(int n)
{
	char *p = make_buffer<char>(static_cast<unsigned long>(n));

	stk_sink = p;
	delete[] p;
	stk_sink = nullptr;
}

} // namespace ns

int main(int argc, char **argv)
{
	int iters = argc > 1 ? std::atoi(argv[1]) : 20000;
	long pause_us = argc > 2 ? std::atol(argv[2]) : 0;
	struct timespec ts = { 0, pause_us > 0 && pause_us < 1000000 ? pause_us * 1000 : 0 };
	ns::Class c;

	for (int i = 0; i < iters; i++) {
		c.method(1024);
		if (ts.tv_nsec)
			nanosleep(&ts, nullptr);
	}
	stk_sink = nullptr;
	return 0;
}
