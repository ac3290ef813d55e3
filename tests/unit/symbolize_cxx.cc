// SPDX-License-Identifier: LGPL-2.1-or-later
/* A C++ method whose name must come back demangled. */
#include "tests/unit/symbolize_helper.h"

namespace ns {
struct Class {
	int method(int);
};
}

__attribute__((noinline)) int ns::Class::method(int x)
{
	mp_line_cxx = __LINE__; mp_capture();
	return x + 1;
}

extern "C" int mp_call_cxx(int x)
{
	ns::Class c;

	return c.method(x) + 1;
}
