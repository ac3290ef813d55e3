// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * C++ workload of the probe tests: operator new/new[]/nothrow/aligned and the matching deletes,
 * each of a known size, called from known functions. libstdc++'s operator new calls malloc: the
 * checker verifies that each block is reported once, as MP_KIND_NEW. Sync protocol as probe_wl.
 */
#include <cstdlib>
#include <new>
#include <unistd.h>

void *volatile sink[16];

static void sync_point()
{
	char c = 'r';

	if (write(3, &c, 1) != 1)
		return;
	if (read(4, &c, 1) != 1)
		_exit(90);
}

struct alignas(64) Wide {
	char b[20032];
};

__attribute__((noinline)) void wl_news()
{
	sink[0] = ::operator new(20001);
	sink[1] = ::operator new[](20002);
	sink[2] = ::operator new(20003, std::nothrow);
	sink[3] = ::operator new[](20004, std::nothrow);
	sink[4] = ::operator new(20005, std::align_val_t(64));
	sink[5] = new Wide;		/* aligned new of 20032 bytes */
	sink[6] = ::operator new(20006);
}

__attribute__((noinline)) void wl_deletes()
{
	::operator delete(sink[0]);
	::operator delete[](sink[1]);
	::operator delete(sink[2], std::nothrow);
	::operator delete[](sink[3], std::nothrow);
	::operator delete(sink[4], std::align_val_t(64));
	delete static_cast<Wide *>(sink[5]);
	/* sink[6] is leaked */
}

int main()
{
	sync_point();
	wl_news();
	wl_deletes();
	return 0;
}
