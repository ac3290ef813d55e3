/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * `memprofctl record` keeps CMD's process tree under ptrace (PTRACE_SEIZE with
 * PTRACE_O_TRACEFORK | TRACEVFORK | TRACECLONE | TRACEEXEC | TRACEEXIT) so that every forked child
 * and every exec'd image is stopped before it runs code of its own until its probes are
 * attached, and every process once more at its exit.
 * See cli/record/record_trace.c.
 *
 * Owner: the record command (cli/cmd_record.c and cli/record/record_daemon.c are its users).
 */
#ifndef MEMPROFCTL_RECORD_TRACE_H
#define MEMPROFCTL_RECORD_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct mp_engine;

/* Most tasks (processes and threads) traced at once; more are let go unprobed (counted). */
#define MP_RECORD_MAX_TASKS 16384

struct record_trace_stats {
	uint64_t forks;		/* fork/vfork events (children held until probed) */
	uint64_t execs;		/* exec events (images run to their link map, then probed) */
	uint64_t threads;	/* clone events of threads (let go at once) */
	uint64_t unfollowed;	/* children let go unprobed: no profile follows them */
	uint64_t lost;		/* tasks let go untraced: MP_RECORD_MAX_TASKS reached */
	uint64_t attach_errors;	/* children or images whose probes failed to attach */
};

/*
 * Seize @pid (blocked before its exec, e.g. reading a pipe) with the tracing options;
 * @follow_forks adds fork/vfork/clone tracing. Returns 0 or -errno.
 */
int record_trace__seize(pid_t pid, bool follow_forks);

/* waitpid(@pid, @st, __WALL), retried on EINTR. Returns 0 or -errno. */
int record_trace__wait(pid_t pid, int *st);

/*
 * Wait until the seized @pid stops at its exec, passing signals on meanwhile. Returns 0 (it is
 * stopped at exec), or -ESRCH when it ended first (@st gets its wait status), or -errno.
 */
int record_trace__wait_exec(pid_t pid, int *st);

/*
 * Run the stopped tracee @pid until it executes @addr with, if @state_addr is set, the int at
 * @state_addr equal to 0 (RT_CONSISTENT). A hardware execute breakpoint (x86 debug register
 * DR0) is used rather than an int3, which a uprobe on the same instruction would swallow; the
 * tracee is left stopped at @addr. Signals it gets meanwhile are passed on. Returns 0, -ESRCH
 * when it ended (@st gets its wait status), or -errno.
 */
int record_trace__run_to(pid_t pid, uint64_t addr, uint64_t state_addr, int *st);

/* cli/record/link_map.c: bring @pid, stopped right after exec, to where every library it links
 * is mapped and no code of its own has run. Same returns as record_trace__run_to(). */
int record_run_to_link_map(pid_t pid, int *st);

/*
 * Who attaches the probes of a held process: the in-process engine (record_trace__run()) or
 * memprofd (cli/record/record_daemon.c, Profile1.AddProcess).
 */
struct record_sync {
	/*
	 * @pid, held stopped right after its fork (@forked) or exec, is brought in sync. Returns
	 * 1 (followed, probes attached), 0 (not followed: let it go), or -errno (@err says why).
	 */
	int (*sync_pid)(void *ctx, pid_t pid, bool forked, char *err, size_t err_len);
	int (*process)(void *ctx);	/* @fd is readable (NULL: nothing to do) */
	/* task @tid is held at its exit, its memory still readable (NULL: nothing to do) */
	void (*exiting)(void *ctx, pid_t tid);
	int fd;				/* polled with the signalfd; -1: none */
	void *ctx;
};

/* record_trace__run() with another way of syncing held processes. */
int record_trace__run_sync(const struct record_sync *sync, pid_t root, bool follow_forks,
			   int sigfd, int *root_status, struct record_trace_stats *stats);

/*
 * The event loop of a recording: @root (seized, probed and stopped at its link map) is let go;
 * every fork, vfork, clone and exec of the traced tree is handled as said above; @sigfd (a
 * signalfd of SIGCHLD and the signals forwarded to @root) and the engine's fd are polled. Returns
 * 0 when @root has ended (@root_status gets its wait status), or -errno. Other tasks still traced
 * then are detached.
 */
int record_trace__run(struct mp_engine *e, pid_t root, bool follow_forks, int sigfd,
		      int *root_status, struct record_trace_stats *stats);

#endif
