/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Symbolization of user-space addresses of a live process with libdw (libdwfl): function
 * names (demangled), source file and line, inlined frames, build-ids, with object+offset when
 * nothing better is known. Modules are cached per build-id and evicted by a limit.
 *
 * Owner: the stacks/symbols component. The engine (daemon/engine.c) is its user.
 */
#ifndef MEMPROFD_SYMBOLIZE_H
#define MEMPROFD_SYMBOLIZE_H

#include <stdint.h>
#include <sys/types.h>

#include <memprof/trace.h>

struct mp_symbolizer;

/* What one address resolves to: the locations of one memtrace location code, outermost first
 * (an inlined callee comes after its caller). Strings are owned by the symbolizer and stay valid
 * until mp_symbolizer__free(). */
struct mp_frame {
	unsigned int nlocs;
	const struct memprof_location *locs;
	const char *object;		/* path of the mapped object, or NULL */
	const char *build_id;		/* hex, or NULL */
};

struct mp_symbolizer *mp_symbolizer__new(void);
void mp_symbolizer__free(struct mp_symbolizer *s);	/* NULL-safe */

/*
 * Resolve @addr in process @pid. @is_return_addr: @addr is a return address (every frame but
 * an exact instruction pointer), so the call instruction before it is what is looked up.
 * Returns 0 and fills *@out, or -errno (-ESRCH: the process is gone and was never seen).
 */
int mp_symbolizer__resolve(struct mp_symbolizer *s, pid_t pid, uint64_t addr, int is_return_addr,
			   struct mp_frame *out);

/* @pid's address space changed (dlopen, exec) or it exited: drop what was cached for it. */
void mp_symbolizer__forget(struct mp_symbolizer *s, pid_t pid);

#endif
