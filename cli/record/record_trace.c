// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Following CMD's process tree exactly, for `memprofctl record`.
 *
 * Pid-filtered uprobes do not fire in a forked child, and the loader can only attach the
 * child's own once the FORK record is read: a short-lived child allocates before that. So the
 * tree stays under ptrace, seized with PTRACE_O_TRACEFORK | TRACEVFORK | TRACECLONE | TRACEEXEC
 * | TRACEEXIT:
 *
 *  - fork/vfork (and clone of a new process): the parent stops at the event, the child starts
 *    in a PTRACE_EVENT_STOP before its first instruction (the two stops come in either order).
 *    mp_engine__sync_pid() reads the FORK record (the engine creates the child's trace) and
 *    attaches the child's probes; only then both run. A child no profile follows is detached.
 *    A vfork parent is let go at once too: it stays blocked in the kernel until the child execs.
 *  - exec: the process stops at PTRACE_EVENT_EXEC; it is run to the dynamic linker's consistent
 *    link map (record_run_to_link_map(): every DT_NEEDED library mapped, no constructor run),
 *    mp_engine__sync_pid() reads the EXEC record and attaches the new libraries, then it runs.
 *  - threads: share the mm, so the probes cover them; they are traced (TRACECLONE) only because
 *    ptrace options are per task: a fork or exec made by an untraced thread would not stop.
 *    A new thread is let go at its first stop.
 *  - signals: a signal-delivery-stop re-injects the signal; a group-stop (SIGSTOP, SIGTSTP,
 *    SIGTTIN, SIGTTOU) is held with PTRACE_LISTEN, so job control behaves as without us.
 *  - exits: each traced process stops at its leader's exit (PTRACE_O_TRACEEXIT, cleared for
 *    threads), memory still mapped: the engine reads a preload process' library counters one
 *    last time (mp_engine__exiting()); then its exit is waited for here first (we are its
 *    tracer), which hands it back to its real parent; CMD's own status ends the loop.
 *
 * The loop blocks in poll() on a signalfd (SIGCHLD and the forwarded signals) and the engine's
 * fd; waitpid(WNOHANG) drains stops when SIGCHLD arrives. Stops happen only at fork, exec,
 * thread creation, process exit and signals, never per allocation.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/signalfd.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/record/record_trace.h"
#include "daemon/engine/engine.h"

#define PFX "memprofctl record: "

enum task_state {
	TK_RUNNING,
	TK_NEW_STOPPED,	/* in its initial stop; its creator's event not seen yet */
	TK_AWAIT_STOP,	/* creator's event handled: let it run at its initial stop */
	TK_AWAIT_DETACH, /* not followed: detach it at its initial stop */
};

struct task {
	pid_t tid;
	enum task_state st;
	pid_t creator;	/* TK_NEW_STOPPED: the process that made it (its event may never come) */
	bool thread;	/* not a leader: no exit stop (task_run()) */
};

struct rtrace {
	const struct record_sync *sync;
	pid_t root;
	bool follow_forks;
	bool root_done;
	int root_status;
	struct task *tasks;
	size_t ntasks, cap;
	struct record_trace_stats *stats;
};

/* ---- primitives ---- */

int record_trace__wait(pid_t pid, int *st)
{
	for (;;) {
		pid_t r = waitpid(pid, st, __WALL);

		if (r == pid)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

static unsigned int stop_event(int st)
{
	return (unsigned int)st >> 16;
}

static bool is_group_stop_sig(int sig)
{
	return sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
}

/* The options of a traced process; a thread's lack the exit stop (a stop per thread exit would
 * cost thread-heavy programs ~60 µs each, and only a process' exit has counters to read). */
static long trace_options(bool follow_forks, bool exit_stop)
{
	long opts = PTRACE_O_TRACEEXEC | PTRACE_O_TRACECLONE;

	if (follow_forks)
		opts |= PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK;
	if (exit_stop)
		opts |= PTRACE_O_TRACEEXIT;
	return opts;
}

int record_trace__seize(pid_t pid, bool follow_forks)
{
	if (ptrace(PTRACE_SEIZE, pid, NULL, (void *)trace_options(follow_forks, true)))
		return -errno;
	return 0;
}

int record_trace__wait_exec(pid_t pid, int *st)
{
	for (;;) {
		int r = record_trace__wait(pid, st), sig = 0;

		if (r)
			return r;
		if (!WIFSTOPPED(*st))
			return -ESRCH;
		if (stop_event(*st) == PTRACE_EVENT_EXEC)
			return 0;
		if (stop_event(*st) == PTRACE_EVENT_STOP) {
			if (is_group_stop_sig(WSTOPSIG(*st))) {
				if (ptrace(PTRACE_LISTEN, pid, NULL, NULL))
					return -errno;
				continue;
			}
		} else if (!stop_event(*st)) {
			sig = WSTOPSIG(*st);
		}
		if (ptrace(PTRACE_CONT, pid, NULL, (void *)(long)sig))
			return -errno;
	}
}

#if defined(__x86_64__)
static int hwbp_set(pid_t pid, uint64_t addr)
{
	/* DR7: L0 (local enable of DR0), R/W0 = 00 (instruction execution), LEN0 = 00 */
	if (addr && ptrace(PTRACE_POKEUSER, pid, (void *)offsetof(struct user, u_debugreg[0]),
			   (void *)addr))
		return -errno;
	if (ptrace(PTRACE_POKEUSER, pid, (void *)offsetof(struct user, u_debugreg[7]),
		   (void *)(long)(addr ? 1 : 0)))
		return -errno;
	return 0;
}

int record_trace__run_to(pid_t pid, uint64_t addr, uint64_t state_addr, int *st)
{
	int r, sig = 0;

	r = hwbp_set(pid, addr);
	if (r)
		return r;
	for (;;) {
		struct user_regs_struct regs;
		long dr6, state;

		if (ptrace(PTRACE_CONT, pid, NULL, (void *)(long)sig)) {
			r = -errno;
			break;
		}
		sig = 0;
		r = record_trace__wait(pid, st);
		if (r)
			break;
		if (!WIFSTOPPED(*st)) {
			r = -ESRCH;
			break;
		}
		if (stop_event(*st))
			continue;	/* group-stop or interrupt: the link map comes first */
		if (WSTOPSIG(*st) != SIGTRAP) {
			sig = WSTOPSIG(*st);
			continue;
		}
		errno = 0;
		dr6 = ptrace(PTRACE_PEEKUSER, pid, (void *)offsetof(struct user, u_debugreg[6]),
			     NULL);
		if (errno) {
			r = -errno;
			break;
		}
		if (ptrace(PTRACE_GETREGS, pid, NULL, &regs)) {
			r = -errno;
			break;
		}
		if (!(dr6 & 1) || regs.rip != addr) {
			sig = SIGTRAP;	/* not ours */
			continue;
		}
		if (!state_addr) {
			r = 0;
			break;
		}
		errno = 0;
		state = ptrace(PTRACE_PEEKDATA, pid, (void *)state_addr, NULL);
		if (errno) {
			r = -errno;
			break;
		}
		if ((int)(state & 0xffffffff) == 0 /* RT_CONSISTENT */) {
			r = 0;
			break;
		}
		/* Not yet; the kernel set EFLAGS.RF, so the breakpoint does not fire again at
		 * once on continuing. */
	}
	if (r != -ESRCH)
		hwbp_set(pid, 0);
	return r;
}
#else
int record_trace__run_to(pid_t pid, uint64_t addr, uint64_t state_addr, int *st)
{
	(void)pid;
	(void)addr;
	(void)state_addr;
	(void)st;
	return -EOPNOTSUPP;
}
#endif

/* ---- the task table ---- */

static struct task *task_find(struct rtrace *t, pid_t tid)
{
	for (size_t i = 0; i < t->ntasks; i++)
		if (t->tasks[i].tid == tid)
			return &t->tasks[i];
	return NULL;
}

static struct task *task_add(struct rtrace *t, pid_t tid, enum task_state st)
{
	struct task *k = task_find(t, tid);

	if (k) {
		k->st = st;
		return k;
	}
	if (t->ntasks >= MP_RECORD_MAX_TASKS)
		return NULL;
	if (t->ntasks == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 64;
		struct task *n = realloc(t->tasks, cap * sizeof(*n));

		if (!n)
			return NULL;
		t->tasks = n;
		t->cap = cap;
	}
	k = &t->tasks[t->ntasks++];
	k->tid = tid;
	k->st = st;
	k->creator = 0;
	k->thread = false;
	return k;
}

static void task_del(struct rtrace *t, pid_t tid)
{
	struct task *k = task_find(t, tid);

	if (k)
		*k = t->tasks[--t->ntasks];
}

static void task_resume(struct rtrace *t, pid_t tid, int sig)
{
	/* ESRCH: killed meanwhile; its exit is reported next */
	(void)t;
	ptrace(PTRACE_CONT, tid, NULL, (void *)(long)sig);
}

/* Let a new task (@thread: of an existing process) run from its first stop. */
static void task_run(struct rtrace *t, pid_t tid, bool thread)
{
	if (thread)	/* stopped: its options can change */
		ptrace(PTRACE_SETOPTIONS, tid, NULL, (void *)trace_options(t->follow_forks, false));
	task_resume(t, tid, 0);
}

static void task_detach(struct rtrace *t, pid_t tid, int sig)
{
	ptrace(PTRACE_DETACH, tid, NULL, (void *)(long)sig);
	task_del(t, tid);
}

/* A "Name: <pid>" field of /proc/@tid/status (0 if gone). */
static pid_t status_pid(pid_t tid, const char *field)
{
	char path[64], line[128];
	size_t n = strlen(field);
	pid_t v = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, field, n) && line[n] == ':') {
			v = (pid_t)atoi(line + n + 1);
			break;
		}
	fclose(f);
	return v;
}

static pid_t task_tgid(pid_t tid)
{
	return status_pid(tid, "Tgid");
}

/* The process that created the new task @tid: its own process for a thread, else its parent. */
static pid_t task_creator(pid_t tid)
{
	pid_t tg = task_tgid(tid);

	return tg && tg != tid ? tg : status_pid(tid, "PPid");
}

static void on_new_task(struct rtrace *t, pid_t parent, pid_t child, unsigned int ev);

/* ---- events ---- */

static void on_exit_status(struct rtrace *t, pid_t tid, int st)
{
	task_del(t, tid);
	if (tid == t->root) {
		t->root_done = true;
		t->root_status = st;
	}
	/* Killed between creating a task and reporting it (a fatal signal skips the event
	 * stop): its new tasks would wait for that event forever. */
	for (size_t i = 0; i < t->ntasks; i++) {
		if (t->tasks[i].st != TK_NEW_STOPPED || t->tasks[i].creator != tid)
			continue;
		on_new_task(t, tid, t->tasks[i].tid, PTRACE_EVENT_FORK);
		i = (size_t)-1;	/* the table may have changed: rescan */
	}
}

/* @parent (stopped at its fork/vfork/clone event) created @child. */
static void on_new_task(struct rtrace *t, pid_t parent, pid_t child, unsigned int ev)
{
	struct task *k = task_find(t, child);
	bool thread = false, follow = true;
	char err[512];
	int r;

	if (ev == PTRACE_EVENT_CLONE) {
		pid_t tg = task_tgid(child);

		thread = tg && tg == task_tgid(parent);
	}
	if (thread) {
		t->stats->threads++;
	} else {
		t->stats->forks++;
		r = t->sync->sync_pid(t->sync->ctx, child, true, err, sizeof(err));
		if (r == 0) {
			follow = false;
			t->stats->unfollowed++;
		} else if (r < 0 && r != -ESRCH) {
			t->stats->attach_errors++;
			fprintf(stderr, PFX "Failed to probe child %d of %d: %s\n", (int)child,
				(int)parent, err[0] ? err : strerror(-r));
		}
	}
	if (k && k->st == TK_NEW_STOPPED) {
		if (follow) {
			k->st = TK_RUNNING;
			task_run(t, child, thread);
		} else {
			task_detach(t, child, 0);
		}
	} else if ((k = task_add(t, child, follow ? TK_AWAIT_STOP : TK_AWAIT_DETACH))) {
		k->thread = thread;
	} else {
		/* untracked from now on: it must not stay stopped; its stop is still to come */
		t->stats->lost++;
		ptrace(PTRACE_DETACH, child, NULL, NULL);
	}
}

static void on_exec(struct rtrace *t, pid_t pid)
{
	unsigned long former = 0;
	char err[512];
	int r, st;

	t->stats->execs++;
	/* a non-leader thread exec'd: it took over the leader's pid, its own tid is gone, and
	 * the leader it now is stops at its exit */
	if (!ptrace(PTRACE_GETEVENTMSG, pid, NULL, &former) && (pid_t)former != pid) {
		task_del(t, (pid_t)former);
		ptrace(PTRACE_SETOPTIONS, pid, NULL, (void *)trace_options(t->follow_forks, true));
	}
	r = record_run_to_link_map(pid, &st);
	if (r == -ESRCH) {
		on_exit_status(t, pid, st);
		return;
	}
	if (r)
		fprintf(stderr, PFX "Failed to run process %d up to its dynamic linking after exec: "
			"%s; its libraries are probed late\n", (int)pid, strerror(-r));
	r = t->sync->sync_pid(t->sync->ctx, pid, false, err, sizeof(err));
	if (r == 0) {
		task_detach(t, pid, 0);	/* no profile holds it */
		return;
	}
	if (r < 0 && r != -ESRCH && r != -ENOENT) {
		t->stats->attach_errors++;
		fprintf(stderr, PFX "Failed to probe process %d after exec: %s\n", (int)pid,
			err[0] ? err : strerror(-r));
	}
	task_resume(t, pid, 0);
}

static void on_stop(struct rtrace *t, pid_t tid, int st)
{
	unsigned int ev = stop_event(st);
	int sig = WSTOPSIG(st);
	unsigned long msg = 0;
	struct task *k = task_find(t, tid);

	if (!k) {
		/* a new task whose creator's event is still to come */
		k = task_add(t, tid, TK_NEW_STOPPED);
		if (!k) {
			t->stats->lost++;
			ptrace(PTRACE_DETACH, tid, NULL, NULL);
			return;
		}
		k->creator = task_creator(tid);
		return;
	}
	switch (k->st) {
	case TK_NEW_STOPPED:
		return;	/* stays stopped until its creator's event */
	case TK_AWAIT_STOP:
		k->st = TK_RUNNING;
		task_run(t, tid, k->thread);
		return;
	case TK_AWAIT_DETACH:
		task_detach(t, tid, 0);
		return;
	case TK_RUNNING:
		break;
	}
	switch (ev) {
	case PTRACE_EVENT_FORK:
	case PTRACE_EVENT_VFORK:
	case PTRACE_EVENT_CLONE:
		if (!ptrace(PTRACE_GETEVENTMSG, tid, NULL, &msg) && msg)
			on_new_task(t, tid, (pid_t)msg, ev);
		task_resume(t, tid, 0);
		break;
	case PTRACE_EVENT_EXEC:
		on_exec(t, tid);
		break;
	case PTRACE_EVENT_EXIT:
		if (t->sync->exiting)
			t->sync->exiting(t->sync->ctx, tid);
		task_resume(t, tid, 0);
		break;
	case PTRACE_EVENT_STOP:
		if (is_group_stop_sig(sig))
			ptrace(PTRACE_LISTEN, tid, NULL, NULL);
		else
			task_resume(t, tid, 0);
		break;
	case 0:
		task_resume(t, tid, sig);	/* signal-delivery-stop: deliver it */
		break;
	default:
		task_resume(t, tid, 0);
		break;
	}
}

static void on_wait(struct rtrace *t, pid_t tid, int st)
{
	if (WIFEXITED(st) || WIFSIGNALED(st))
		on_exit_status(t, tid, st);
	else if (WIFSTOPPED(st))
		on_stop(t, tid, st);
}

/* Handle every pending wait status. Returns 0, or -ECHILD when nothing is left to wait for. */
static int drain(struct rtrace *t)
{
	for (;;) {
		int st;
		pid_t r = waitpid(-1, &st, __WALL | WNOHANG);

		if (r == 0)
			return 0;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		on_wait(t, r, st);
	}
}

/* CMD is gone: let every task still traced go, with the signal it was about to get. */
static void detach_all(struct rtrace *t)
{
	while (t->ntasks) {
		struct task *k = &t->tasks[t->ntasks - 1];
		pid_t tid = k->tid;
		unsigned long msg = 0;
		int st, sig = 0;

		if (k->st == TK_NEW_STOPPED) {
			task_detach(t, tid, 0);	/* stopped, its status consumed */
			continue;
		}
		if (k->st == TK_RUNNING && ptrace(PTRACE_INTERRUPT, tid, NULL, NULL)) {
			task_del(t, tid);	/* gone */
			continue;
		}
		if (record_trace__wait(tid, &st) || !WIFSTOPPED(st)) {
			task_del(t, tid);
			continue;
		}
		switch (stop_event(st)) {
		case 0:
			sig = WSTOPSIG(st);
			break;
		case PTRACE_EVENT_FORK:
		case PTRACE_EVENT_VFORK:
		case PTRACE_EVENT_CLONE:
			/* its new child is traced too, and about to stop */
			if (!ptrace(PTRACE_GETEVENTMSG, tid, NULL, &msg) && msg &&
			    !task_find(t, (pid_t)msg))
				task_add(t, (pid_t)msg, TK_AWAIT_DETACH);
			break;
		case PTRACE_EVENT_STOP:
			if (is_group_stop_sig(WSTOPSIG(st)))
				sig = WSTOPSIG(st);	/* stays stopped once detached */
			break;
		default:
			break;
		}
		task_detach(t, tid, sig);
	}
}

static int engine_sync(void *ctx, pid_t pid, bool forked, char *err, size_t err_len)
{
	(void)forked;
	return mp_engine__sync_pid(ctx, pid, err, err_len);
}

static int engine_process(void *ctx)
{
	return mp_engine__process(ctx);
}

static void engine_exiting(void *ctx, pid_t tid)
{
	mp_engine__exiting(ctx, tid);
}

int record_trace__run(struct mp_engine *e, pid_t root, bool follow_forks, int sigfd,
		      int *root_status, struct record_trace_stats *stats)
{
	const struct record_sync s = { .sync_pid = engine_sync, .process = engine_process,
				       .exiting = engine_exiting, .fd = mp_engine__fd(e),
				       .ctx = e };

	return record_trace__run_sync(&s, root, follow_forks, sigfd, root_status, stats);
}

int record_trace__run_sync(const struct record_sync *sync, pid_t root, bool follow_forks,
			   int sigfd, int *root_status, struct record_trace_stats *stats)
{
	struct rtrace t = { .sync = sync, .root = root, .follow_forks = follow_forks,
			    .stats = stats };
	int r = 0;

	memset(stats, 0, sizeof(*stats));
	if (!task_add(&t, root, TK_RUNNING))
		return -ENOMEM;
	task_resume(&t, root, 0);
	while (!t.root_done) {
		struct pollfd pfd[2] = {
			{ .fd = sync->fd, .events = POLLIN },
			{ .fd = sigfd, .events = POLLIN },
		};

		r = drain(&t);
		if (r == -ECHILD && t.root_done)
			r = 0;	/* CMD was the last child we had */
		if (r < 0) {
			fprintf(stderr, PFX "Failed to wait for process %d: %s\n", (int)root,
				strerror(-r));
			break;
		}
		if (t.root_done)
			break;
		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			fprintf(stderr, PFX "poll failed: %s\n", strerror(errno));
			break;
		}
		if (pfd[0].revents && sync->process) {
			r = sync->process(sync->ctx);
			if (r < 0) {
				fprintf(stderr, PFX "Failed to read events: %s\n", strerror(-r));
				break;
			}
			r = 0;
		}
		if (pfd[1].revents) {
			struct signalfd_siginfo si;

			while (read(sigfd, &si, sizeof(si)) == sizeof(si))
				if (si.ssi_signo != SIGCHLD)
					kill(root, (int)si.ssi_signo);
		}
	}
	detach_all(&t);
	free(t.tasks);
	if (!t.root_done)
		return r < 0 ? r : -EIO;
	*root_status = t.root_status;
	return 0;
}
