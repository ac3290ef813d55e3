/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A trace writer whose output never makes its caller wait (memprofd's traces): the packets go
 * through a bounded queue to a thread of the writer's own, which alone writes, truncates,
 * patches and closes the file. A stuck output (a file on a stalled network mount or a frozen
 * filesystem) holds up that thread only; once its queue is full, the writer's calls return
 * -EAGAIN and leave the trace as it was (the event is not in it: the caller counts it lost),
 * until the thread catches up. The first failed write (ENOSPC) ends what the file gets: later
 * packets are counted and dropped, so the file stays a readable prefix, and
 * mp_writer__output_error() names the error and when it happened.
 * Internal to memprofd and memprofctl (not exported by libmemprof.so).
 */
#ifndef MP_WRITER_ASYNC_H
#define MP_WRITER_ASYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <memprof/trace.h>

/*
 * memprof_writer__new() on @fd, which the writer owns from now on (closed by its thread, or at
 * once on failure), with a queue of at most @queue_bytes (at least one packet; a packet may
 * overshoot it): the trace-info packet is queued, not written. With @queue_bytes 0 the writer
 * writes in the caller's thread, as memprof_writer__new() does (and closes @fd). NULL + errno.
 */
struct memprof_writer *mp_writer__new_async(int fd, size_t queue_bytes,
					    const struct memprof_trace_info *info,
					    const struct memprof_writer_opts *opts);

/*
 * At completion, overwrite the last @n bytes of the trace-info context string (v2+) in place
 * with @s (a field of fixed width the caller reserved there). Plain traces on a regular file
 * opened without O_APPEND only (-ENOTSUP otherwise); -EINVAL when @n exceeds the context.
 * May be called again (the last one wins); applies at mp_writer__finish() or __close().
 */
int mp_writer__patch_context_tail(struct memprof_writer *w, const char *s, size_t n);

/*
 * Start the trace over with @info: only while it holds no event (-EBUSY). The file is cut
 * back to where the trace began and gets a new trace-info packet (a regular file only:
 * -ENOTSUP otherwise).
 */
int mp_writer__reset(struct memprof_writer *w, const struct memprof_trace_info *info);

/*
 * Complete the trace without waiting: the pending packet (past the queue's bound if need be),
 * the end of the zstd frame, the context patch and the close go to the writer's thread. Only
 * mp_writer__done(), mp_writer__output_error() and memprof_writer__close() may follow.
 * Returns 0 or the writer's error.
 */
int mp_writer__finish(struct memprof_writer *w);

/* Has the writer's thread written, patched and closed everything (or is there none)? */
bool mp_writer__done(struct memprof_writer *w);

/*
 * The errno of the first write to the file that failed (0: none), its CLOCK_REALTIME time in
 * µs in *@since_us, the bytes the file did not get because of it in *@lost (either may be NULL).
 */
int mp_writer__output_error(struct memprof_writer *w, uint64_t *since_us, uint64_t *lost);

#endif
