/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The client's calls on the options table (userspace-lib/options.h), for memprofctl: every
 * option the table has, not only those struct memprof_client_start_opts names. Internal (not
 * exported by libmemprof.so).
 */
#ifndef MP_CLIENT_INT_H
#define MP_CLIENT_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <memprof/client.h>

#include "userspace-lib/options.h"

/*
 * memprof_client__start() with the options @o sets (the first process' trace to
 * @o->output.fd when >= 0). Returns 0 or -errno, memprof_client__errmsg() says why.
 */
int mp_client__start(struct memprof_client *c, const pid_t *pids, size_t n,
		     const struct mp_opts *o, uint32_t *id);

#endif
