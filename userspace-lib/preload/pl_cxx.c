// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libmemprof-preload's C++ allocation functions: the sixteen operators new and delete, each
 * sampled as preload.c's malloc is and forwarded to the next allocator's own operator (or to
 * its malloc and free when it has none).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/param.h>

#include "pl_next.h"
#include "pl_state.h"

/*
 * Written in C against the Itanium C++ ABI so that C programs do not load libstdc++. Only a
 * program that calls operator new has libstdc++ loaded, so the weak references below are
 * resolved whenever they are needed: the new-handler loop and std::bad_alloc.
 */
typedef void (*pl_new_handler)(void);
extern pl_new_handler _ZSt15get_new_handlerv(void) __attribute__((weak));
extern void *__cxa_allocate_exception(size_t size) __attribute__((weak));
extern void __cxa_throw(void *obj, void *tinfo, void (*dtor)(void *)) __attribute__((weak));
extern char _ZTISt9bad_alloc[] __attribute__((weak));	/* typeinfo for std::bad_alloc */
extern char _ZTVSt9bad_alloc[] __attribute__((weak));	/* vtable for std::bad_alloc */
extern void _ZNSt9bad_allocD1Ev(void *obj) __attribute__((weak));

static __attribute__((noreturn, noinline)) void pl_throw_bad_alloc(void)
{
	void **obj;

	if (!__cxa_allocate_exception || !__cxa_throw || !_ZTISt9bad_alloc || !_ZTVSt9bad_alloc)
		abort();
	obj = __cxa_allocate_exception(sizeof(void *));
	obj[0] = _ZTVSt9bad_alloc + 2 * sizeof(void *);	/* vptr: past offset-to-top, RTTI */
	__cxa_throw(obj, _ZTISt9bad_alloc, _ZNSt9bad_allocD1Ev);
	abort();
}

/* The operator new loop: retry through the new-handler; throw or return NULL without one. */
static void *pl_new_retry(size_t size, size_t alignment, bool nothrow)
{
	for (;;) {
		pl_new_handler h = _ZSt15get_new_handlerv ? _ZSt15get_new_handlerv() : NULL;
		void *p;

		if (!h) {
			if (nothrow)
				return NULL;
			pl_throw_bad_alloc();
		}
		h();	/* may throw: the frames here have unwind tables (-fexceptions) */
		p = alignment ? pl_next.memalign(alignment, size) : pl_next.malloc(size);
		if (p)
			return p;
	}
}

/* enum pl_cxx_op of an operator new variant. */
#define PL_NEW_OP(array, nothrow, aligned) \
	((enum pl_cxx_op)(PL_ZNWM + (array) + 2 * (nothrow) + 4 * (aligned)))

static const char pl_nothrow;	/* stands for std::nothrow: the operators ignore it */

typedef void *(*pl_new_fn)(size_t size);
typedef void *(*pl_new_nt_fn)(size_t size, const void *nt);
typedef void *(*pl_new_al_fn)(size_t size, size_t alignment);
typedef void *(*pl_new_al_nt_fn)(size_t size, size_t alignment, const void *nt);

/* The next allocator's own operator new (jemalloc's, tcmalloc's, ...): its contract. */
static inline void *pl_call_new(void *fn, size_t size, size_t alignment, bool nothrow)
{
	if (alignment)
		return nothrow ? ((pl_new_al_nt_fn)fn)(size, alignment, &pl_nothrow) :
				 ((pl_new_al_fn)fn)(size, alignment);
	return nothrow ? ((pl_new_nt_fn)fn)(size, &pl_nothrow) : ((pl_new_fn)fn)(size);
}

static __attribute__((noinline)) void *pl_new_slow(size_t size, size_t alignment, bool nothrow,
						   bool array)
{
	int64_t r = pl_cross_begin(pl_words(size));
	/* The nothrow variant inside the sampling window: an exception must not leave it open. */
	void *fn = __atomic_load_n(&pl_next.cxx[PL_NEW_OP(array, true, alignment != 0)],
				   __ATOMIC_RELAXED);
	void *p;

	if (fn)
		p = pl_call_new(fn, size, alignment, true);
	else
		p = alignment ? pl_next.memalign(alignment, size) : pl_next.malloc(size);
	pl_cross_finish(r, p, size, MEMPROF_PRELOAD_NEW);
	if (p)
		return p;
	/* Not sampled when the first attempt fails: the handler path is rare. */
	fn = __atomic_load_n(&pl_next.cxx[PL_NEW_OP(array, nothrow, alignment != 0)],
			     __ATOMIC_RELAXED);
	if (fn)
		return pl_call_new(fn, size, alignment, nothrow);
	return pl_new_retry(size, alignment, nothrow);
}

static inline void *pl_new(size_t size, bool nothrow, bool array)
{
	void *fn, *p;

	if (!size)
		size = 1;
	if (unlikely(pl_sample_due(pl_words(size))))
		return pl_new_slow(size, 0, nothrow, array);
	pl_next_ensure();	/* no slow path may have run yet: the gate skips it while closed */
	fn = __atomic_load_n(&pl_next.cxx[PL_NEW_OP(array, nothrow, false)], __ATOMIC_RELAXED);
	if (fn)
		return pl_call_new(fn, size, 0, nothrow);
	p = pl_next.malloc(size);
	return likely(p != NULL) ? p : pl_new_retry(size, 0, nothrow);
}

static inline void *pl_new_aligned(size_t size, size_t alignment, bool nothrow, bool array)
{
	void *fn, *p;

	if (!powerof2(alignment) || !alignment) {
		if (nothrow)
			return NULL;
		pl_throw_bad_alloc();
	}
	if (!size)
		size = 1;
	if (unlikely(pl_sample_due(pl_words(size))))
		return pl_new_slow(size, alignment, nothrow, array);
	pl_next_ensure();
	fn = __atomic_load_n(&pl_next.cxx[PL_NEW_OP(array, nothrow, true)], __ATOMIC_RELAXED);
	if (fn)
		return pl_call_new(fn, size, alignment, nothrow);
	p = pl_next.memalign(alignment, size);
	return likely(p != NULL) ? p : pl_new_retry(size, alignment, nothrow);
}

static __attribute__((noinline)) void pl_delete_slow(void *p)
{
	pl_release(p, MEMPROF_PRELOAD_DELETE);
}

typedef void (*pl_del_fn)(void *p);
typedef void (*pl_del_sz_fn)(void *p, size_t sz);		/* sized, or aligned */
typedef void (*pl_del_nt_fn)(void *p, const void *nt);
typedef void (*pl_del_sz_al_fn)(void *p, size_t sz, size_t al);
typedef void (*pl_del_al_nt_fn)(void *p, size_t al, const void *nt);

/*
 * Report a sampled block, then give it to the next allocator's operator delete of the same
 * variant (sizes and alignments passed on: jemalloc and tcmalloc use them) or to its free.
 */
static inline void pl_delete(void *p, enum pl_cxx_op op, size_t a, size_t b)
{
	void *fn;

	if (unlikely(pl_table_maybe(&pl_table, p)))
		pl_delete_slow(p);
	/* resolved: the operator new that made @p did it, before @p reached this thread */
	fn = __atomic_load_n(&pl_next.cxx[op], __ATOMIC_RELAXED);
	if (likely(!fn)) {
		pl_next.free(p);
		return;
	}
	switch (op) {
	case PL_ZDLPV_SZ:
	case PL_ZDAPV_SZ:
	case PL_ZDLPV_AL:
	case PL_ZDAPV_AL:
		((pl_del_sz_fn)fn)(p, a);
		break;
	case PL_ZDLPV_NT:
	case PL_ZDAPV_NT:
		((pl_del_nt_fn)fn)(p, &pl_nothrow);
		break;
	case PL_ZDLPV_SZ_AL:
	case PL_ZDAPV_SZ_AL:
		((pl_del_sz_al_fn)fn)(p, a, b);
		break;
	case PL_ZDLPV_AL_NT:
	case PL_ZDAPV_AL_NT:
		((pl_del_al_nt_fn)fn)(p, a, &pl_nothrow);
		break;
	default:
		((pl_del_fn)fn)(p);
		break;
	}
}

#define PL_CXX(ret, name, mangled, ...)                                                        \
	PL_EXPORT ret name(__VA_ARGS__) __asm__(mangled);                                      \
	PL_EXPORT ret name(__VA_ARGS__)

/* operator new(size_t), new[](size_t) */
PL_CXX(void *, pl_op_new, "_Znwm", size_t size) { return pl_new(size, false, false); }
PL_CXX(void *, pl_op_new_arr, "_Znam", size_t size) { return pl_new(size, false, true); }
/* nothrow */
PL_CXX(void *, pl_op_new_nt, "_ZnwmRKSt9nothrow_t", size_t size, const void *nt)
{
	return pl_new(size, true, false);
}
PL_CXX(void *, pl_op_new_arr_nt, "_ZnamRKSt9nothrow_t", size_t size, const void *nt)
{
	return pl_new(size, true, true);
}
/* aligned (std::align_val_t is a size_t enum) */
PL_CXX(void *, pl_op_new_al, "_ZnwmSt11align_val_t", size_t size, size_t al)
{
	return pl_new_aligned(size, al, false, false);
}
PL_CXX(void *, pl_op_new_arr_al, "_ZnamSt11align_val_t", size_t size, size_t al)
{
	return pl_new_aligned(size, al, false, true);
}
PL_CXX(void *, pl_op_new_al_nt, "_ZnwmSt11align_val_tRKSt9nothrow_t", size_t size, size_t al,
       const void *nt)
{
	return pl_new_aligned(size, al, true, false);
}
PL_CXX(void *, pl_op_new_arr_al_nt, "_ZnamSt11align_val_tRKSt9nothrow_t", size_t size,
       size_t al, const void *nt)
{
	return pl_new_aligned(size, al, true, true);
}

/* operator delete: plain, array, sized, nothrow, aligned, sized+aligned, aligned+nothrow */
PL_CXX(void, pl_op_del, "_ZdlPv", void *p) { pl_delete(p, PL_ZDLPV, 0, 0); }
PL_CXX(void, pl_op_del_arr, "_ZdaPv", void *p) { pl_delete(p, PL_ZDAPV, 0, 0); }
PL_CXX(void, pl_op_del_sz, "_ZdlPvm", void *p, size_t sz) { pl_delete(p, PL_ZDLPV_SZ, sz, 0); }
PL_CXX(void, pl_op_del_arr_sz, "_ZdaPvm", void *p, size_t sz)
{
	pl_delete(p, PL_ZDAPV_SZ, sz, 0);
}
PL_CXX(void, pl_op_del_nt, "_ZdlPvRKSt9nothrow_t", void *p, const void *nt)
{
	pl_delete(p, PL_ZDLPV_NT, 0, 0);
}
PL_CXX(void, pl_op_del_arr_nt, "_ZdaPvRKSt9nothrow_t", void *p, const void *nt)
{
	pl_delete(p, PL_ZDAPV_NT, 0, 0);
}
PL_CXX(void, pl_op_del_al, "_ZdlPvSt11align_val_t", void *p, size_t al)
{
	pl_delete(p, PL_ZDLPV_AL, al, 0);
}
PL_CXX(void, pl_op_del_arr_al, "_ZdaPvSt11align_val_t", void *p, size_t al)
{
	pl_delete(p, PL_ZDAPV_AL, al, 0);
}
PL_CXX(void, pl_op_del_sz_al, "_ZdlPvmSt11align_val_t", void *p, size_t sz, size_t al)
{
	pl_delete(p, PL_ZDLPV_SZ_AL, sz, al);
}
PL_CXX(void, pl_op_del_arr_sz_al, "_ZdaPvmSt11align_val_t", void *p, size_t sz, size_t al)
{
	pl_delete(p, PL_ZDAPV_SZ_AL, sz, al);
}
PL_CXX(void, pl_op_del_al_nt, "_ZdlPvSt11align_val_tRKSt9nothrow_t", void *p, size_t al,
       const void *nt)
{
	pl_delete(p, PL_ZDLPV_AL_NT, al, 0);
}
PL_CXX(void, pl_op_del_arr_al_nt, "_ZdaPvSt11align_val_tRKSt9nothrow_t", void *p, size_t al,
       const void *nt)
{
	pl_delete(p, PL_ZDAPV_AL_NT, al, 0);
}
