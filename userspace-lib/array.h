/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Arrays that grow by doubling: the one helper for the pattern "if full, realloc twice as
 * large", used by the symbolizer and the report model. Header only, no state.
 */
#ifndef MEMPROF_ARRAY_H
#define MEMPROF_ARRAY_H

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>

/*
 * Make room for @need elements of @size bytes in *@arr, an array of *@cap elements: the
 * capacity doubles from @min until it holds @need. Returns 0, or -ENOMEM with *@arr and *@cap
 * unchanged (the elements there stay valid).
 */
static inline int mp_array_reserve(void **arr, size_t *cap, size_t need, size_t size,
				   size_t min)
{
	size_t ncap;
	void *p;

	if (need <= *cap)
		return 0;
	ncap = *cap ? *cap : min;
	while (ncap < need)
		ncap *= 2;
	p = reallocarray(*arr, ncap, size);
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = ncap;
	return 0;
}

/* mp_array_reserve() for a typed array @arr of capacity @cap (lvalues). */
#define MP_ARRAY_RESERVE(arr, cap, need, min)                                                 \
	mp_array_reserve((void **)&(arr), &(cap), (need), sizeof(*(arr)), (min))

#endif
