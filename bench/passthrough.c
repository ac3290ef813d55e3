// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libpassthrough.so: the floor of any LD_PRELOAD design (bench/run's "passthrough"
 * configuration). It interposes malloc, free, calloc and realloc and does nothing but forward
 * each to glibc's, with the shape of libmemprof-preload's unsampled path: a tail jump through
 * the GOT (-fno-plt). What libmemprof-preload costs loaded and idle, above this, is its own;
 * what this costs above the plain program is the price of interposing at all (one more jump per
 * call), which no in-process sampler avoids.
 */
#include <stdlib.h>

#define EXPORT __attribute__((visibility("default")))

extern void *__libc_malloc(size_t size);
extern void __libc_free(void *p);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);

EXPORT void *malloc(size_t size)
{
	return __libc_malloc(size);
}

EXPORT void free(void *p)
{
	__libc_free(p);
}

EXPORT void *calloc(size_t n, size_t size)
{
	return __libc_calloc(n, size);
}

EXPORT void *realloc(void *p, size_t size)
{
	return __libc_realloc(p, size);
}
