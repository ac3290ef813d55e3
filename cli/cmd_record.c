// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * memprofctl record [OPTIONS] -- CMD [ARGS...]: run CMD under the sampling engine, in this
 * process (no memprofd needed), and write its trace(s) when it exits. When memprofd is
 * reachable the daemon samples instead and this process keeps the ptrace part
 * (cli/record/record_daemon.c); --daemon / --no-daemon force either way.
 *
 * Probes must be in place before the new image runs any code of its own, but the libraries
 * whose allocators we probe are mapped by the dynamic linker after exec. So the child runs
 * under ptrace: it stops at exec (PTRACE_SEIZE, PTRACE_O_TRACEEXEC), we put a breakpoint on the
 * dynamic linker's debugger hook _dl_debug_state() and let it run until the link map is
 * consistent (r_debug.r_state == RT_CONSISTENT: every DT_NEEDED object mapped, no constructor
 * run yet) and attach the probes there. A static executable is probed at the exec stop. The
 * tree stays traced so that forked children and later execs are probed the same way before
 * they run (cli/record/record_trace.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memprof/preload.h>

#include "cli/commands.h"
#include "cli/record/record_daemon.h"
#include "cli/record/record_trace.h"
#include "cli/ctl_opts.h"
#include "cli/summary.h"
#include "userspace-lib/codec/outfile.h"
#include "daemon/engine/engine.h"

/* The table's options record takes: all of them (--duration only with -p: CMD's exit ends a
 * recording of CMD). */
/* all the table's but the targets: record follows its command, or -p PIDs */
#define RECORD_OPTS	(((1u << MP_OPT__COUNT) - 1) & \
			 ~(CTL_OPT_BIT(UNIT) | CTL_OPT_BIT(CGROUP) | CTL_OPT_BIT(EXE)))

#define RECORD_MAX_PIDS	64

static void record_usage(FILE *f)
{
	static const char *const help[MP_OPT__COUNT] = {
		[MP_OPT_OUTPUT] = "trace of CMD (default memprof.ctf, memprof.ctf.zst\n"
				  "with --zstd); forked children write FILE.<pid>",
		[MP_OPT_FOLLOW_FORKS] = "do not profile CMD's children",
		[MP_OPT_DURATION] = "with -p: stop after T (e.g. 30s, 5m; default: at\n"
				    "Ctrl-C or when the processes exit)",
	};

	fprintf(f,
		"Usage: memprofctl record [OPTIONS] -- CMD [ARGS...]\n"
		"       memprofctl record [OPTIONS] -p PID[,PID...] [-d T]\n"
		"\n"
		"Run CMD and sample its allocations; write a memtrace trace when it exits.\n"
		"With -p, sample processes that are running already, in this process (no\n"
		"memprofd), until Ctrl-C, T or their exit.\n"
		"\n"
		"Options:\n");
	ctl_opts__help(f, RECORD_OPTS, help);
	fprintf(f,
		"  -p, --pid PID[,PID...]   profile these running processes (the ptrace rule,\n"
		"                           and root for the BPF programs): allocations made\n"
		"                           before the attach are not seen\n"
		"      --interval BYTES     mean bytes between samples (rate = 8 / BYTES)\n"
		"      --seed N             seed of the multiplicity PRNG (reproducible runs)\n"
		"      --preload[=LIB]      run CMD with LD_PRELOAD=libmemprof-preload.so (LIB):\n"
		"                           it samples in-process and traps only on samples\n"
		"      --batch N            with --preload: report samples N at a time, about\n"
		"                           10 ms late at most (1..16, default 16; 1: each one\n"
		"                           at once, a trap per sample) (MEMPROF_BATCH)\n"
		"      --daemon             record through memprofd (fail if it is not reachable)\n"
		"      --no-daemon          record in this process even if memprofd is reachable\n"
		"  -h, --help               show this help\n"
		"\n"
		"Through memprofd when its socket answers (--seed: in-process), else in-process.\n");
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (!s[0] || s[0] == '-')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);	/* decimal, as attach's: "0100" is a hundred */
	if (errno || *end)
		return -EINVAL;
	*out = v;
	return 0;
}

/*
 * Releasing a uprobe perf event waits for an RCU tasks-trace grace period (~250 ms each on
 * kernel 6.18), so tearing down the ~20 probes of a process would hold our exit for seconds.
 * A helper that shares our descriptors (taken once CMD's probes are attached) and lives until we
 * are gone holds the last references: the kernel releases the probes when it exits, after us.
 * It keeps no terminal or pipe of our caller open. (Probes attached later, to forked children,
 * are not shared and are released the slow way.)
 */
static void hand_off_probe_release(void)
{
	int p[2], fd;
	pid_t h;
	char c;

	if (pipe2(p, O_CLOEXEC))
		return;
	h = fork();
	if (h < 0) {
		close(p[0]);
		close(p[1]);
		return;
	}
	if (h == 0) {
		close(p[1]);
		fd = open("/dev/null", O_RDWR | O_CLOEXEC);
		for (int i = 0; i < 3; i++)
			if (fd >= 0)
				dup2(fd, i);
		/* EOF when the parent has exited and closed the write end */
		while (read(p[0], &c, 1) < 0 && errno == EINTR)
			;
		_exit(0);
	}
	close(p[0]);
	/* p[1] stays open until we exit, on purpose */
}

/* A trace that could not be written whole (mp_profile__write_failures()). */
static void write_failure(void *ctx, const char *msg)
{
	fprintf(stderr, "memprofctl record: %s\n", msg);
}

/* The summary of CMD's profile, text or JSON (on stderr: stdout is CMD's). */
static void print_summary(struct mp_engine *e, struct mp_profile *p, const uint64_t *base,
			  int status)
{
	struct mp_summary s;

	if (mp_summary__from_profile(&s, e, p, base) < 0) {
		fprintf(stderr, "memprofctl record: Out of memory for the summary\n");
		return;
	}
	if (ctl.json)
		ctl_summary__print_json(&s, status, stderr);
	else
		ctl_summary__print(&s, stderr);
	mp_summary__free(&s);
}

/* The loader's warnings and errors (probes the kernel refused, children it could not follow);
 * with -v its notes too (kernel mechanisms, probes kept on a single-stepped entry), with -vv
 * every probe's placement. */
static void engine_log(void *ctx, int level, const char *msg)
{
	int max = ctl.verbose > 1 ? 7 : ctl.verbose ? 6 : 4;

	(void)ctx;
	if (level <= max)
		fprintf(stderr, "memprofctl record: %s\n", msg);
}

/* ---- the command ---- */

struct record_opts {
	struct mp_opts opts;		/* the table's (options.h) */
	struct mp_profile_opts popts;	/* the same for the in-process engine */
	struct mp_engine_opts eopts;
	char **cmd;
	bool preload;			/* --preload: the cooperative fast path */
	const char *preload_lib;	/* --preload=LIB */
	unsigned int batch;		/* --batch N: MEMPROF_BATCH for CMD, 0: not set */
	enum record_daemon_mode daemon;	/* --daemon, --no-daemon */
	pid_t pids[RECORD_MAX_PIDS];	/* -p: running processes instead of CMD */
	size_t npids;
};

/* -p PID[,PID...], repeatable. */
static int parse_pids(const char *arg, struct record_opts *o)
{
	char *buf = strdup(arg), *tok, *save = NULL;
	size_t before = o->npids;
	int r = 0;
	uint64_t v;

	if (!buf) {
		fprintf(stderr, "memprofctl record: Out of memory for the pid list\n");
		return -ENOMEM;
	}
	for (tok = strtok_r(buf, ",", &save); tok && !r; tok = strtok_r(NULL, ",", &save)) {
		if (parse_u64(tok, &v) || v < 1 || v > INT_MAX) {
			fprintf(stderr, "memprofctl record: invalid pid '%s'\n", tok);
			r = -EINVAL;
		} else if (o->npids == RECORD_MAX_PIDS) {
			fprintf(stderr, "memprofctl record: more than %d pids\n", RECORD_MAX_PIDS);
			r = -E2BIG;
		} else {
			o->pids[o->npids++] = (pid_t)v;
		}
	}
	free(buf);
	if (!r && o->npids == before) {
		fprintf(stderr, "memprofctl record: invalid pid list '%s': no pid in it\n", arg);
		r = -EINVAL;
	}
	return r;
}

/* -p: what cannot go with it (then a message and -EINVAL). */
static int check_pid_args(const struct record_opts *o, bool has_cmd)
{
	const char *bad = has_cmd ? "a command: -p records running processes, CMD a new one" :
			  o->preload ? "--preload: a running process cannot be preloaded" :
			  o->daemon == RECORD_DAEMON_REQUIRE ?
			  "--daemon: -p records in this process ('memprofctl attach' asks memprofd)" :
			  NULL;

	if (!bad)
		return 0;
	fprintf(stderr, "memprofctl record: -p does not take %s\n", bad);
	return -EINVAL;
}

static int parse_args(int argc, char **argv, struct record_opts *o)
{
	enum { OPT_INTERVAL = 256, OPT_SEED, OPT_PRELOAD, OPT_DAEMON, OPT_NO_DAEMON, OPT_BATCH };
	static const struct option own[] = {
		{ "interval", required_argument, NULL, OPT_INTERVAL },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "preload", optional_argument, NULL, OPT_PRELOAD },
		{ "batch", required_argument, NULL, OPT_BATCH },
		{ "daemon", no_argument, NULL, OPT_DAEMON },
		{ "no-daemon", no_argument, NULL, OPT_NO_DAEMON },
		{ "pid", required_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	const struct mp_option *opt;
	bool has_interval = false;
	struct ctl_opts t;
	uint64_t v;
	char msg[256];
	int c;

	mp_opts__init(&o->opts);
	ctl_opts__init(&t, RECORD_OPTS, own, "+hp:");	/* '+': CMD's own options are not ours */
	while ((c = getopt_long(argc, argv, t.shorts, t.longopts, NULL)) != -1) {
		opt = ctl_opts__option(&t, c);
		if ((opt && opt->id == MP_OPT_RATE && has_interval) ||
		    (c == OPT_INTERVAL && MP_OPT_IS_SET(&o->opts, RATE) && !has_interval)) {
			fprintf(stderr, "memprofctl record: --rate and --interval exclude each "
				"other\n");
			return 2;
		}
		if (opt) {
			if (ctl_opts__parse(opt, optarg, &o->opts))
				return 2;
			continue;
		}
		switch (c) {
		case OPT_INTERVAL:
			if (parse_u64(optarg, &v) || v < 8) {
				fprintf(stderr, "memprofctl record: invalid interval '%s': it must "
					"be a whole number of bytes >= 8\n", optarg);
				return 2;
			}
			o->opts.rate = 8.0 / (double)v;
			if (mp_option__check(&mp_options[MP_OPT_RATE], &o->opts, msg,
					     sizeof(msg)) < 0) {
				mp_option__range(&mp_options[MP_OPT_RATE], msg, sizeof(msg));
				fprintf(stderr, "memprofctl record: invalid interval '%s': its "
					"rate %g is not %s\n", optarg, o->opts.rate, msg);
				return 2;
			}
			o->opts.set |= CTL_OPT_BIT(RATE);
			has_interval = true;
			break;
		case OPT_SEED:
			if (parse_u64(optarg, &v)) {
				fprintf(stderr, "memprofctl record: invalid seed '%s'\n", optarg);
				return 2;
			}
			o->eopts.seed = v;
			o->eopts.has_seed = true;
			break;
		case OPT_PRELOAD:
			o->preload = true;
			o->preload_lib = optarg;
			break;
		case OPT_BATCH:
			if (parse_u64(optarg, &v) || v < 1 || v > MEMPROF_PRELOAD_MAX_BATCH) {
				fprintf(stderr, "memprofctl record: invalid batch '%s': 1 to %d "
					"samples per report\n", optarg, MEMPROF_PRELOAD_MAX_BATCH);
				return 2;
			}
			o->batch = (unsigned int)v;
			break;
		case OPT_DAEMON:
		case OPT_NO_DAEMON:
			o->daemon = c == OPT_DAEMON ? RECORD_DAEMON_REQUIRE : RECORD_DAEMON_NEVER;
			break;
		case 'p':
			if (parse_pids(optarg, o))
				return 2;
			break;
		case 'h':
			record_usage(stdout);
			return 0;
		default:
			return 2;	/* getopt printed the error line */
		}
	}
	if (o->npids) {
		if (check_pid_args(o, optind < argc))
			return 2;
	} else if (optind >= argc) {
		fprintf(stderr, "memprofctl record: no command given; usage: memprofctl record "
			"[OPTIONS] -- CMD [ARGS...], or -p PID\n");
		return 2;
	} else if (MP_OPT_IS_SET(&o->opts, DURATION)) {
		fprintf(stderr, "memprofctl record: --duration needs -p: a recording of CMD ends "
			"when CMD does\n");
		return 2;
	}
	if (o->batch && !o->preload) {
		fprintf(stderr, "memprofctl record: --batch needs --preload\n");
		return 2;
	}
	/* libmemprof-preload walks frame pointers in-process: no stack copy, no DWARF */
	if (o->preload && MP_OPT_IS_SET(&o->opts, UNWIND) && o->opts.unwind != MP_UNWIND_FP) {
		fprintf(stderr, "memprofctl record: --preload takes no --unwind %s: "
			"libmemprof-preload follows frame pointers only (--unwind fp); DWARF stacks "
			"need uprobe mode (without --preload)\n", mp_unwind__name(o->opts.unwind));
		return 2;
	}
	if (o->preload && MP_OPT_IS_SET(&o->opts, STACK_COPY_SIZE)) {
		fprintf(stderr, "memprofctl record: --preload takes no --stack-copy-size: "
			"libmemprof-preload copies no stack (it follows frame pointers)\n");
		return 2;
	}
	if (!o->opts.output.path)
		o->opts.output.path = o->opts.zstd ? "memprof.ctf.zst" : "memprof.ctf";
	/* record's rate is the table's default, through memprofd too (not its DefaultRate). */
	o->opts.set |= CTL_OPT_BIT(RATE);
	mp_profile_opts__set(&o->popts, &o->opts);
	o->cmd = o->npids ? NULL : argv + optind;
	return -1;
}

#ifndef MP_LIBDIR
#define MP_LIBDIR "/usr/local/lib"
#endif
#define MP_PRELOAD_LIB "libmemprof-preload.so.0"	/* its SONAME: the runtime package has it */

/*
 * --preload: CMD (and whatever it runs) gets LD_PRELOAD=<libmemprof-preload.so> in front of
 * its own preloads; our environment is CMD's. The library is --preload=LIB, else the build
 * tree's (../lib next to this executable), else the installed one (MP_LIBDIR). --seed seeds
 * the library's samplers too (MEMPROF_SEED), for reproducible runs.
 */
static int preload_env(struct record_opts *o)
{
	char exe[PATH_MAX], lib[PATH_MAX + 64], *env, *slash;
	const char *old = getenv("LD_PRELOAD");
	ssize_t n;

	if (o->preload_lib) {
		if (!realpath(o->preload_lib, lib)) {
			fprintf(stderr, "memprofctl record: Failed to find the preload library "
				"'%s': %s\n", o->preload_lib, strerror(errno));
			return -errno;
		}
	} else {
		lib[0] = '\0';
		n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		if (n > 0) {
			exe[n] = '\0';
			slash = strrchr(exe, '/');
			if (slash) {
				*slash = '\0';
				snprintf(lib, sizeof(lib), "%s/../lib/" MP_PRELOAD_LIB, exe);
			}
		}
		if (!lib[0] || access(lib, R_OK))
			snprintf(lib, sizeof(lib), "%s/" MP_PRELOAD_LIB, MP_LIBDIR);
		if (access(lib, R_OK)) {
			fprintf(stderr, "memprofctl record: Failed to find " MP_PRELOAD_LIB " next to "
				"memprofctl or in " MP_LIBDIR ": %s (use --preload=LIB)\n",
				strerror(errno));
			return -ENOENT;
		}
	}
	if (asprintf(&env, "%s%s%s", lib, old && old[0] ? ":" : "", old ? old : "") < 0)
		return -ENOMEM;
	if (setenv("LD_PRELOAD", env, 1)) {
		free(env);
		return -errno;
	}
	free(env);
	if (o->eopts.has_seed) {
		char seed[32];

		snprintf(seed, sizeof(seed), "%" PRIu64, o->eopts.seed);
		setenv("MEMPROF_SEED", seed, 1);
	}
	if (o->batch) {	/* 1: the library reports each sample at once; unset: 16 */
		char batch[16];

		snprintf(batch, sizeof(batch), "%u", o->batch);
		if (setenv("MEMPROF_BATCH", batch, 1))
			return -errno;
	}
	return 0;
}

/* Say so when CMD did not load the library (static, setuid, or it cleared LD_PRELOAD). */
static void preload_check(struct mp_profile *p, const char *cmd)
{
	struct mp_proc_stats ps;

	if (mp_profile__procs(p, &ps, 1) >= 1 && ps.mode != MP_PROC_MODE_PRELOAD)
		fprintf(stderr, "memprofctl record: '%s' did not load " MP_PRELOAD_LIB " (static "
			"or set-user-ID executable?): profiling it with allocator uprobes\n", cmd);
}

/* Child side: wait until the parent has seized us (@gofd readable), then exec; on failure
 * report errno through @errfd. */
static void __attribute__((noreturn)) child_exec(char **cmd, int errfd, int gofd,
						 const sigset_t *old)
{
	ssize_t n;
	char c;
	int err;

	sigprocmask(SIG_SETMASK, old, NULL);
	do
		n = read(gofd, &c, 1);
	while (n < 0 && errno == EINTR);
	if (n != 1)
		_exit(127);	/* the parent failed to seize us and said so */
	execvp(cmd[0], cmd);
	err = errno;
	if (write(errfd, &err, sizeof(err)) < 0)
		_exit(127);
	_exit(127);
}

static int exit_status(int st)
{
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return 1;
}

/* The in-process engine, its counters now in @base; NULL after the error line. */
static struct mp_engine *record_engine(struct record_opts *o, uint64_t *base)
{
	struct mp_engine *e;
	char why[1024];

	o->eopts.log = engine_log;
	o->eopts.error = why;
	o->eopts.error_len = sizeof(why);
	e = mp_engine__new(&o->eopts);
	o->eopts.error = NULL;
	if (!e) {
		fprintf(stderr, "memprofctl record: Failed to load the BPF programs: %s\n", why);
		return NULL;
	}
	mp_engine__stats(e, base, MP_STAT__MAX);
	return e;
}

/* The end of an in-process recording: stop, the last events, the traces completed, the
 * summary (@status: CMD's exit status, -1: none). */
static void record_finish(struct mp_engine *e, struct mp_profile *p, const uint64_t *base,
			  int status)
{
	if (mp_profile__state(p) == MP_PROFILE_SAMPLING)
		mp_profile__stop(p);
	mp_engine__process(e);
	mp_profile__discard(p);
	print_summary(e, p, base, status);
}

/*
 * The ptrace rule for -p, before anything is loaded: /proc/PID/mem opens only for a caller
 * that may ptrace-attach to PID (same credentials and dumpable, or CAP_SYS_PTRACE; YAMA's
 * ptrace_scope applies). Nothing is read from it.
 */
static int check_pid_access(pid_t pid)
{
	char path[64];
	int fd, err;

	snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		close(fd);
		return 0;
	}
	err = errno;
	if (err == ENOENT || err == ESRCH)
		fprintf(stderr, "memprofctl record: no process %d\n", (int)pid);
	else if (err == EACCES || err == EPERM)
		fprintf(stderr, "memprofctl record: not allowed to profile process %d: it is not "
			"yours to ptrace (another user's, set-id, or YAMA's ptrace_scope)\n",
			(int)pid);
	else
		fprintf(stderr, "memprofctl record: Failed to check access to process %d: %s\n",
			(int)pid, strerror(err));
	return -err;
}

/*
 * record -p PID...: the processes run on; this process samples them until SIGINT, SIGTERM or
 * SIGHUP, --duration, or the last one's exit, then completes their traces and prints the
 * summary, as for CMD. Blocks allocated before the attach are never sampled (their frees are
 * not matched); forked children are followed as memprofd follows them (unless
 * --no-follow-forks), so a child's first allocations, before its probes are attached, are
 * missed.
 */
static int record_pids(struct record_opts *o)
{
	uint64_t base[MP_STAT__MAX] = { 0 };
	char errmsg[1024] = "";
	struct mp_profile *p = NULL;
	struct signalfd_siginfo si;
	struct mp_engine *e = NULL;
	int sigfd = -1, ret = 1, r;
	sigset_t mask, old;

	for (size_t i = 0; i < o->npids; i++)
		if (check_pid_access(o->pids[i]))
			return 1;
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigaddset(&mask, SIGQUIT);
	sigprocmask(SIG_BLOCK, &mask, &old);	/* before the engine's threads start */
	sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sigfd < 0) {
		fprintf(stderr, "memprofctl record: Failed to set up signals: %s\n",
			strerror(errno));
		goto out;
	}
	e = record_engine(o, base);
	if (!e)
		goto out;
	r = mp_engine__start(e, &o->popts, o->pids, o->npids, &p, errmsg, sizeof(errmsg));
	if (r) {
		fprintf(stderr, "memprofctl record: %s\n", errmsg[0] ? errmsg : strerror(-r));
		goto out;
	}
	hand_off_probe_release();
	/* also with --json: the summary is the last line, and a script waits for this one */
	fprintf(stderr, "memprofctl record: sampling %zu process(es) from pid %d; Ctrl-C ends "
		"the recording\n", o->npids, (int)o->pids[0]);
	while (mp_profile__state(p) == MP_PROFILE_SAMPLING) {
		struct pollfd pfd[2] = { { .fd = sigfd, .events = POLLIN },
					 { .fd = mp_engine__fd(e), .events = POLLIN } };

		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "memprofctl record: Failed to wait for events: %s\n",
				strerror(errno));
			break;
		}
		if (pfd[1].revents && (r = mp_engine__process(e)) < 0) {
			fprintf(stderr, "memprofctl record: Failed to read events: %s\n",
				strerror(-r));
			break;
		}
		if ((pfd[0].revents & POLLIN) && read(sigfd, &si, sizeof(si)) == sizeof(si))
			break;	/* a signal ends the recording, not this process */
	}
	record_finish(e, p, base, -1);
	ret = mp_profile__write_failures(p, write_failure, NULL) ? 1 : 0;
out:
	if (sigfd >= 0)
		close(sigfd);
	mp_engine__free(e);
	sigprocmask(SIG_SETMASK, &old, NULL);
	return ret;
}

int cmd_record(int argc, char **argv)
{
	struct record_opts o = { .popts = { .sz = sizeof(o.popts), .out_fd = -1 },
				 .eopts = { .sz = sizeof(o.eopts) } };
	uint64_t base[MP_STAT__MAX] = { 0 };
	struct record_daemon *rd = NULL;
	struct mp_engine *e = NULL;
	struct mp_profile *p = NULL;
	sigset_t mask, old;
	int errpipe[2] = { -1, -1 }, go[2] = { -1, -1 }, sigfd = -1, st = 0, ret = 1, r, err;
	struct record_trace_stats tstats;
	char errmsg[1024], msg[256];
	pid_t child;
	bool reaped = false, running = false;
	struct rlimit rl;

	r = parse_args(argc, argv, &o);
	if (r >= 0)
		return r;
	if (o.npids)
		return record_pids(&o);
	if (o.preload && preload_env(&o))
		return 1;
	/* One trace fd per followed process: allow as many as we may. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}

	/* Signals that would kill us are forwarded to CMD instead; we end when it does.
	 * SIGCHLD: a traced task stopped or ended. Blocked before the engine starts its
	 * threads, which would otherwise take (and lose) them. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigaddset(&mask, SIGQUIT);
	sigaddset(&mask, SIGCHLD);
	sigprocmask(SIG_BLOCK, &mask, &old);
	/* memprofd writes regular files only: record a FIFO or a device itself */
	if (o.daemon == RECORD_DAEMON_AUTO && o.popts.out_path &&
	    mp_outfile__check_path(o.popts.out_path, msg, sizeof(msg)) < 0)
		o.daemon = RECORD_DAEMON_NEVER;
	if (record_daemon__open(o.daemon, o.eopts.has_seed, &rd) < 0) {
		sigprocmask(SIG_SETMASK, &old, NULL);
		return 1;
	}
	if (!rd && !(e = record_engine(&o, base))) {
		sigprocmask(SIG_SETMASK, &old, NULL);
		return 1;
	}

	sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sigfd < 0 || pipe2(errpipe, O_CLOEXEC) || pipe2(go, O_CLOEXEC)) {
		fprintf(stderr, "memprofctl record: Failed to set up: %s\n", strerror(errno));
		goto out;
	}

	child = fork();
	if (child < 0) {
		fprintf(stderr, "memprofctl record: Failed to fork: %s\n", strerror(errno));
		goto out;
	}
	if (child == 0) {
		close(go[1]);
		child_exec(o.cmd, errpipe[1], go[0], &old);
	}
	close(errpipe[1]);
	errpipe[1] = -1;
	close(go[0]);
	go[0] = -1;
	r = record_trace__seize(child, !o.popts.no_follow_forks);
	if (r) {
		fprintf(stderr, "memprofctl record: Failed to trace process %d (ptrace): %s\n",
			(int)child, strerror(-r));
		close(go[1]);	/* EOF: the child exits */
		go[1] = -1;
		record_trace__wait(child, &st);
		goto out;
	}
	if (write(go[1], "", 1) != 1) {
		fprintf(stderr, "memprofctl record: Failed to start '%s': %s\n", o.cmd[0],
			strerror(errno));
		kill(child, SIGKILL);
		goto out_kill;
	}
	close(go[1]);
	go[1] = -1;

	/* The child stops at exec (PTRACE_EVENT_EXEC), or exits if exec failed. */
	if (record_trace__wait_exec(child, &st)) {
		err = 0;
		if (read(errpipe[0], &err, sizeof(err)) == sizeof(err) && err)
			fprintf(stderr, "memprofctl record: Failed to execute '%s': %s\n",
				o.cmd[0], strerror(err));
		else
			fprintf(stderr, "memprofctl record: '%s' exited before it started\n",
				o.cmd[0]);
		ret = err == ENOENT ? 127 : err ? 126 : exit_status(st);
		goto out;
	}
	r = record_run_to_link_map(child, &st);
	if (r) {
		fprintf(stderr, "memprofctl record: Failed to run '%s' up to its dynamic linking: "
			"%s\n", o.cmd[0], strerror(-r));
		kill(child, SIGKILL);
		goto out_kill;
	}
	if (rd)
		r = record_daemon__start(rd, &o.opts, child, o.preload, o.cmd[0]);
	else
		r = mp_engine__start(e, &o.popts, &child, 1, &p, errmsg, sizeof(errmsg));
	if (r && rd) {
		kill(child, SIGKILL);
		goto out_kill;
	}
	if (r) {
		fprintf(stderr, "memprofctl record: %s\n",
			errmsg[0] ? errmsg : strerror(-r));
		kill(child, SIGKILL);
		goto out_kill;
	}
	if (!rd)
		hand_off_probe_release();
	if (o.preload && !rd)
		preload_check(p, o.cmd[0]);
	running = true;
	if (rd)
		r = record_trace__run_sync(record_daemon__sync(rd), child,
					   !o.popts.no_follow_forks, sigfd, &st, &tstats);
	else
		r = record_trace__run(e, child, !o.popts.no_follow_forks, sigfd, &st, &tstats);
	if (r == 0)
		reaped = true;
	else
		kill(child, SIGKILL);
	if (tstats.lost || tstats.attach_errors)
		fprintf(stderr, "memprofctl record: %" PRIu64 " processes not traced (limit %d), %"
			PRIu64 " not probed (attach failed)\n", tstats.lost, MP_RECORD_MAX_TASKS,
			tstats.attach_errors);

out_kill:
	if (reaped || record_trace__wait(child, &st) == 0) {
		reaped = true;
		/* CMD's status, unless we failed to start profiling it (then we killed it) */
		ret = running ? exit_status(st) : 1;
	}
	if (p) {
		/* The exit event is in the ring buffer by now (sched_process_exit runs before
		 * the parent is notified): deliver it, or complete the trace without it. */
		mp_engine__reap(e, child);
		record_finish(e, p, base, running && reaped ? exit_status(st) : -1);
		if (!ctl.json && running && reaped && WIFSIGNALED(st))
			fprintf(stderr, "memprofctl record: '%s' was killed by signal %d (%s)\n",
				o.cmd[0], WTERMSIG(st), strsignal(WTERMSIG(st)));
		/* CMD succeeded but its profile did not: say so in the status too */
		if (mp_profile__write_failures(p, write_failure, NULL) && ret == 0)
			ret = 1;
	}
	if (rd && running && record_daemon__finish(rd, reaped ? st : -1, o.cmd[0]) != 0 &&
	    ret == 0)
		ret = 1;	/* CMD succeeded but its trace may not be whole */
	if (!reaped)
		ret = 1;
out:
	if (go[0] >= 0)
		close(go[0]);
	if (go[1] >= 0)
		close(go[1]);
	if (sigfd >= 0)
		close(sigfd);
	if (errpipe[0] >= 0)
		close(errpipe[0]);
	if (errpipe[1] >= 0)
		close(errpipe[1]);
	mp_engine__free(e);
	record_daemon__free(rd);
	sigprocmask(SIG_SETMASK, &old, NULL);
	return ret;
}
