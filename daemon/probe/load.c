// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Opening the loader: the kernel's mechanisms probed and chosen (kernel_probe()), the programs
 * loaded, the lifecycle programs attached, the ring buffer created; its log (logf_(), libbpf's
 * messages), its counters and its teardown. The loader as a whole is described in
 * daemon/probe/loader_internal.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>

#include <libelf.h>
#include <bpf/bpf.h>

#include "bpf/gap.h"
#include "daemon/probe/bpf_kernel.h"
#include "daemon/probe/loader_internal.h"
#include "daemon/probe/uprobe_link.h"

void logf_(struct mp_bpf *b, int level, const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	if (!b->log)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	b->log(b->log_ctx, level, buf);
}

/* A small file (sysfs) into @buf, NUL-terminated: 0 or -errno. */
static int read_small_file(const char *path, char *buf, size_t len)
{
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n <= 0)
		return -EINVAL;
	buf[n] = 0;
	return 0;
}

static int read_int_file(const char *path, int *out)
{
	char buf[64];
	int err = read_small_file(path, buf, sizeof(buf));

	if (!err)
		*out = atoi(buf);
	return err;
}

/* The first config bit of the uprobe PMU's format field @field ("config:N" or "config:N-M"). */
static int uprobe_format_bit(const char *field, int *bit)
{
	char path[128], buf[64];
	int err;

	snprintf(path, sizeof(path), "/sys/bus/event_source/devices/uprobe/format/%s", field);
	err = read_small_file(path, buf, sizeof(buf));
	if (err)
		return err;
	return sscanf(buf, "config:%d", bit) == 1 ? 0 : -EINVAL;
}

/*
 * The uprobe PMU: its type, the config bit that makes a uretprobe, and where a USDT
 * semaphore's offset goes (Linux 4.20+: "config:32-63"; without it, no preload mode).
 */
static int uprobe_pmu_init(struct mp_bpf *b)
{
	int err;

	err = read_int_file("/sys/bus/event_source/devices/uprobe/type", &b->uprobe_type);
	if (!err)
		err = uprobe_format_bit("retprobe", &b->retprobe_bit);
	if (!err && uprobe_format_bit("ref_ctr_offset", &b->ref_ctr_shift))
		b->ref_ctr_shift = -1;
	return err;
}

/* CLOCK_REALTIME - CLOCK_MONOTONIC, measured once (at the first mp_bpf__open). */
static int64_t epoch_offset_ns;
static bool epoch_offset_known;

static void epoch_offset_init(void)
{
	struct timespec m1, r, m2;
	int64_t best = INT64_MAX;

	/* the pair read in the shortest window */
	for (int i = 0; i < 5; i++) {
		int64_t w, mid;

		clock_gettime(CLOCK_MONOTONIC, &m1);
		clock_gettime(CLOCK_REALTIME, &r);
		clock_gettime(CLOCK_MONOTONIC, &m2);
		w = (m2.tv_sec - m1.tv_sec) * 1000000000LL + (m2.tv_nsec - m1.tv_nsec);
		if (w >= best)
			continue;
		best = w;
		mid = m1.tv_sec * 1000000000LL + m1.tv_nsec + w / 2;
		epoch_offset_ns = r.tv_sec * 1000000000LL + r.tv_nsec - mid;
	}
	epoch_offset_known = true;
}

static mp_bpf_log_fn libbpf_log_fn;
static void *libbpf_log_ctx;

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	char buf[512];
	size_t n;

	if (level == LIBBPF_DEBUG)
		return 0;
	if (mp_load_log__active()) { /* skel_load(): explained at once if it fails */
		mp_load_log__add(fmt, ap);
		return 0;
	}
	if (!libbpf_log_fn)
		return 0;
	vsnprintf(buf, sizeof(buf), fmt, ap);
	n = strlen(buf);
	while (n && buf[n - 1] == '\n')
		buf[--n] = 0;
	libbpf_log_fn(libbpf_log_ctx, level == LIBBPF_WARN ? 4 : 6, buf);
	return 0;
}

/*
 * Our pid namespace: BPF reports and takes pids in it (mp_pidns_* in bpf/memprof.bpf.c), so
 * that a daemon in a container sees its own pids.
 */
struct pidns {
	bool nested;		/* not the initial pid namespace */
	uint64_t dev;		/* of /proc/self/ns/pid, in the kernel's encoding (MKDEV) */
	uint64_t ino;
};

#define MP_PROC_PID_INIT_INO	0xEFFFFFFCU	/* the initial pid namespace's inode (proc_ns.h) */

static int pidns_self(struct pidns *ns)
{
	struct stat st;

	if (stat("/proc/self/ns/pid", &st))
		return -errno;
	ns->dev = (uint64_t)major(st.st_dev) << 20 | minor(st.st_dev);
	ns->ino = st.st_ino;
	ns->nested = st.st_ino != MP_PROC_PID_INIT_INO;
	return 0;
}

/* Nested pid namespace: run mp_pidns_probe in our context to learn its level, and check that
 * BPF sees our own pid as getpid(). */
static int pidns_probe(struct memprof_bpf *skel)
{
	LIBBPF_OPTS(bpf_test_run_opts, opts);
	uint64_t self;

	if (bpf_prog_test_run_opts(bpf_program__fd(skel->progs.mp_pidns_probe), &opts))
		return -errno;
	self = skel->bss->mp_pidns_self;
	if ((pid_t)(self >> 32) != getpid() || (pid_t)(uint32_t)self != (pid_t)syscall(SYS_gettid))
		return -ENXIO;
	return 0;
}

/*
 * Open and load the programs: @multi uprobe_multi links, @session uprobe sessions, exit program
 * @exit_task (mp_exit_task instead of mp_exit). On failure @why says which program failed and
 * the kernel's reason (libbpf's messages are collected meanwhile).
 */
static struct memprof_bpf *skel_load(const struct pidns *ns, bool multi, bool session,
				     bool exit_task, char *why, size_t why_len)
{
	struct memprof_bpf *skel = memprof_bpf__open();
	char *log;
	int err;

	if (!skel) {
		snprintf(why, why_len, "cannot open the BPF object: %s", strerror(errno));
		return NULL;
	}
	skel->rodata->mp_session_mode = session;
	skel->rodata->mp_pidns_nested = ns->nested;
	skel->rodata->mp_pidns_dev = ns->dev;
	skel->rodata->mp_pidns_ino = ns->ino;
	bpf_program__set_autoload(skel->progs.mp_pidns_probe, ns->nested);
	bpf_program__set_autoload(skel->progs.mp_session, session);
	/* A session program is entry and return at once: the pair is never attached then, and
	 * not verifying it saves about 0.1 s of every start (a session self-test that fails
	 * reloads without sessions). */
	bpf_program__set_autoload(skel->progs.mp_entry, !session);
	bpf_program__set_autoload(skel->progs.mp_ret, !session);
	bpf_program__set_autoload(skel->progs.mp_exit, !exit_task);
	bpf_program__set_autoload(skel->progs.mp_exit_task, exit_task);
	/* test-only: a program every verifier rejects (tests/bpf/kernel-mechanisms.sh) */
	bpf_program__set_autoload(skel->progs.mp_test_reject, getenv("MP_BPF_TEST_REJECT") != NULL);
	if (session)
		bpf_program__set_expected_attach_type(skel->progs.mp_session,
						      MP_BPF_TRACE_UPROBE_SESSION);
	if (multi) {
		struct bpf_program *usdt[] = { skel->progs.mp_usdt_alloc, skel->progs.mp_usdt_free,
					       skel->progs.mp_usdt_free_batch,
					       skel->progs.mp_usdt_flush };

		bpf_program__set_expected_attach_type(skel->progs.mp_entry,
						      MP_BPF_TRACE_UPROBE_MULTI);
		bpf_program__set_expected_attach_type(skel->progs.mp_ret,
						      MP_BPF_TRACE_UPROBE_MULTI);
		/* pl_attach_probe(): one link per probe, with the semaphores */
		for (size_t i = 0; i < sizeof(usdt) / sizeof(usdt[0]); i++)
			bpf_program__set_expected_attach_type(usdt[i], MP_BPF_TRACE_UPROBE_MULTI);
	}
	mp_load_log__begin();
	err = memprof_bpf__load(skel) ? -errno : 0;
	log = mp_load_log__end();
	if (err)
		mp_load_explain(log, err, mp_kernel_bpf_capable(), why, why_len);
	free(log);
	if (!err && ns->nested && (err = pidns_probe(skel)))
		snprintf(why, why_len, "program 'mp_pidns_probe' could not learn our pid "
			 "namespace: %s", strerror(-err));
	if (err) {
		memprof_bpf__destroy(skel);
		errno = -err;
		return NULL;
	}
	return skel;
}

/* Can a link of @attach_type be created on our own function @off of @path? 0 or -errno; the
 * link is kept (closed now, its grace period would run into a short `record`'s exit). */
static int link_probe(struct mp_bpf *b, unsigned int attach_type, const char *path, uint64_t off)
{
	int prog = mp_kernel_probe_prog(attach_type);
	struct plink l = { .fd = -1 };

	if (prog < 0)
		return prog;
	l.fd = mp_uprobe_multi_link(prog, attach_type, getpid(), path, &off, NULL, NULL, 1, false);
	close(prog);	/* the link holds the program */
	if (l.fd < 0)
		return l.fd;
	self_keep(b, &l, 1);
	return 0;
}

/*
 * Can links of @attach_type (@what) be used? Not when @env is set or @missing says why not;
 * else a link is tried on our own function. @why gets the reason when not; the result is
 * logged once, with the @fallback used instead.
 */
static bool link_kind(struct mp_bpf *b, const char *what, const char *env, const char *missing,
		      unsigned int attach_type, const char *path, uint64_t off, char *why,
		      size_t len, const char *fallback)
{
	int err;

	if (getenv(env))
		snprintf(why, len, "disabled by %s", env);
	else if (missing)
		snprintf(why, len, "%s", missing);
	else if ((err = link_probe(b, attach_type, path, off)))
		snprintf(why, len, "a link on our own test function failed: %s", strerror(-err));
	else {
		logf_(b, 6, "Kernel: %s: yes", what);
		return true;
	}
	logf_(b, 6, "Kernel: %s: no (%s): %s", what, why, fallback);
	return false;
}

/*
 * Every kernel-dependent choice, probed on the running kernel and logged once: the exit
 * tracepoint's prototype (kernel BTF), uprobe_multi links and uprobe session links (a real link
 * on our own test function @path+@off; @path NULL: none found). Fills @exit_task, @multi,
 * @session. Returns 0, or -errno with @why when the kernel lacks something required.
 */
static int kernel_probe(struct mp_bpf *b, const char *path, uint64_t off, bool *exit_task,
			bool *multi, bool *session, char *multi_why, char *session_why,
			size_t len, char *why, size_t why_len)
{
	int n = mp_kernel_tp_nargs("sched_process_exit");

	if (n < 1) {
		snprintf(why, why_len, "cannot read the prototype of tracepoint sched_process_exit "
			 "from the kernel's BTF (/sys/kernel/btf/vmlinux): %s; memprofd needs a "
			 "kernel built with CONFIG_DEBUG_INFO_BTF", strerror(n < 0 ? -n : EPROTO));
		return n < 0 ? n : -EPROTO;
	}
	*exit_task = n < 2;
	logf_(b, 6, "Kernel: tracepoint sched_process_exit passes %s: exit program %s", n < 2 ?
	      "the task only" : "(task, group_dead)", n < 2 ? "mp_exit_task (group_dead from "
	      "signal->live)" : "mp_exit");
	*multi = link_kind(b, "uprobe_multi links", "MP_BPF_NO_UPROBE_MULTI",
			   path ? NULL : "no function of our own to try a link on",
			   MP_BPF_TRACE_UPROBE_MULTI, path, off, multi_why, len,
			   "perf-event uprobes");
	*session = link_kind(b, "uprobe session links", "MP_BPF_NO_SESSION",
			     *multi ? NULL : "needs uprobe_multi links",
			     MP_BPF_TRACE_UPROBE_SESSION, path, off, session_why, len,
			     "entry and return probes");
	return 0;
}

struct mp_bpf *mp_bpf__open(mp_bpf_event_fn fn, void *ctx)
{
	return mp_bpf__open_log(fn, ctx, NULL, NULL, NULL, 0);
}

struct mp_bpf *mp_bpf__open_log(mp_bpf_event_fn fn, void *ctx, mp_bpf_log_fn log,
				void *log_ctx, char *why, size_t why_len)
{
	struct mp_bpf *b = calloc(1, sizeof(*b));
	struct bpf_program *progs[3];
	char whybuf[1024], multi_why[128], session_why[128];
	bool exit_task, multi, session;
	struct pidns ns;
	int err;

	if (!why || !why_len) {
		why = whybuf;
		why_len = sizeof(whybuf);
	}
	why[0] = 0;
	if (!b)
		return NULL;
	b->fn = fn;
	b->ctx = ctx;
	if (log)
		mp_bpf__set_log(b, log, log_ctx);
	pthread_mutex_init(&b->lock, NULL);
	pthread_cond_init(&b->cond, NULL);
	libbpf_set_print(libbpf_print);
	if (elf_version(EV_CURRENT) == EV_NONE) {
		err = -EINVAL;
		snprintf(why, why_len, "libelf: %s", elf_errmsg(-1));
		goto fail;
	}
	err = uprobe_pmu_init(b);
	if (err) {
		snprintf(why, why_len, "no uprobe PMU (/sys/bus/event_source/devices/uprobe): %s",
			 strerror(-err));
		goto fail;
	}
	err = pidns_self(&ns);
	if (err) {
		snprintf(why, why_len, "cannot read /proc/self/ns/pid: %s", strerror(-err));
		goto fail;
	}
	/*
	 * uprobe session links when the kernel has them (6.13+): entry and return in one program
	 * whose entry skips the return half of unsampled calls; else uprobe_multi links (6.6+):
	 * one link, and one grace period when it is closed, per object instead of per probe;
	 * perf-event uprobes otherwise. Sessions must also pass a behavioural self-test on our own
	 * process (session_selftest()). MP_BPF_NO_SESSION=1 forces entry + return probes,
	 * MP_BPF_NO_UPROBE_MULTI=1 perf-event uprobes (tests, benchmarks).
	 */
	{
		char self[PATH_MAX];
		uint64_t self_off = 0;
		uint64_t test_off = 0;
		bool have_self = self_target((uintptr_t)mp_bpf_self_target, self, sizeof(self),
					     &self_off) == 0 &&
				 self_target((uintptr_t)mp_bpf_selftest_target, self, sizeof(self),
					     &test_off) == 0;

		err = kernel_probe(b, have_self ? self : NULL, test_off, &exit_task, &multi,
				   &session, multi_why, session_why, sizeof(multi_why), why,
				   why_len);
		if (err)
			goto fail;
		if (session) {
			b->skel = skel_load(&ns, true, true, exit_task, why, why_len);
			if (b->skel) {
				b->multi = b->session = true;
				if (session_selftest(b, self, test_off)) {
					memprof_bpf__destroy(b->skel);
					b->skel = NULL;
					b->multi = b->session = false;
					snprintf(session_why, sizeof(session_why),
						 "failed the self-test");
				}
			} else {
				snprintf(session_why, sizeof(session_why), "program rejected");
			}
		}
		if (!b->skel) {
			char *first = session && why[0] ? strdup(why) : NULL;

			b->skel = skel_load(&ns, multi, false, exit_task, why, why_len);
			if (b->skel && first)	/* only the session program was in the way */
				logf_(b, 4, "uprobe sessions unusable: %s: using entry and return "
				      "probes", first);
			free(first);
			if (!b->skel) {
				err = errno ? -errno : -EINVAL;
				goto fail;
			}
			b->multi = multi;
		}
		b->exit_prog = exit_task ? b->skel->progs.mp_exit_task : b->skel->progs.mp_exit;
		snprintf(b->mechanisms, sizeof(b->mechanisms),
			 "%s%s%s; %s%s%s; exit: tp_btf/sched_process_exit(%s)",
			 b->multi ? "uprobe_multi links" : "perf-event uprobes (no uprobe_multi: ",
			 b->multi ? "" : multi_why, b->multi ? "" : ")",
			 b->session ? "uprobe sessions" : "entry+return probes (no sessions: ",
			 b->session ? "" : session_why, b->session ? "" : ")",
			 exit_task ? "task" : "task, group_dead");
		logf_(b, 6, "Kernel mechanisms: %s", b->mechanisms);
		b->entry_cost_ns = MP_DEFAULT_ENTRY_COST_NS;
		b->return_cost_ns = MP_DEFAULT_RETURN_COST_NS;
		if (have_self)
			calibrate(b, self, self_off);
	}
	progs[0] = b->skel->progs.mp_fork;
	progs[1] = b->skel->progs.mp_exec;
	progs[2] = b->exit_prog;
	for (int i = 0; i < 3; i++) {
		b->lifecycle[i] = bpf_program__attach(progs[i]);
		if (!b->lifecycle[i]) {
			err = -errno;
			snprintf(why, why_len, "cannot attach program '%s' (%s): %s",
				 bpf_program__name(progs[i]), bpf_program__section_name(progs[i]),
				 strerror(-err));
			goto fail;
		}
	}
	/* cgroup targets only: without them memprofd still profiles PIDs and executables */
	progs[0] = b->skel->progs.mp_cg_attach;
	progs[1] = b->skel->progs.mp_cg_mkdir;
	for (int i = 0; i < 2; i++) {
		b->cg_links[i] = bpf_program__attach(progs[i]);
		if (!b->cg_links[i]) {
			logf_(b, 4, "Cannot attach program '%s' (%s): %s; cgroup and unit targets "
			      "are unavailable", bpf_program__name(progs[i]),
			      bpf_program__section_name(progs[i]), strerror(errno));
			bpf_link__destroy(b->cg_links[0]);
			b->cg_links[0] = NULL;
			break;
		}
	}
	b->rb = ring_buffer__new(bpf_map__fd(b->skel->maps.rb), rb_event, b, NULL);
	if (!b->rb) {
		err = -errno;
		snprintf(why, why_len, "cannot read the ring buffer: %s", strerror(-err));
		goto fail;
	}
	if (!epoch_offset_known)
		epoch_offset_init();
	return b;
fail:
	if (!why[0])
		snprintf(why, why_len, "%s", strerror(err < 0 ? -err : EINVAL));
	mp_bpf__free(b);
	errno = err < 0 ? -err : EINVAL;
	return NULL;
}

void mp_bpf__free(struct mp_bpf *b)
{
	struct target *t;
	struct obj *o;

	if (!b)
		return;
	while ((t = b->targets)) {
		b->targets = t->next;
		target_bury(b, t);
	}
	if (b->self)
		target_bury(b, b->self);
	pthread_mutex_lock(&b->lock);
	b->reaper_stop = true;
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);
	if (b->reaper_started)
		pthread_join(b->reaper, NULL);
	pthread_mutex_destroy(&b->lock);
	pthread_cond_destroy(&b->cond);
	while ((o = b->objs)) {
		b->objs = o->next;
		free(o);
	}
	ring_buffer__free(b->rb);
	for (int i = 0; i < 3; i++)
		bpf_link__destroy(b->lifecycle[i]);
	for (int i = 0; i < 2; i++)
		bpf_link__destroy(b->cg_links[i]);
	memprof_bpf__destroy(b->skel);
	if (libbpf_log_fn == b->log && libbpf_log_ctx == b->log_ctx)
		libbpf_log_fn = NULL;
	free(b);
}

void mp_bpf__set_log(struct mp_bpf *b, mp_bpf_log_fn fn, void *ctx)
{
	b->log = fn;
	b->log_ctx = ctx;
	libbpf_log_fn = fn;
	libbpf_log_ctx = ctx;
}

const char *mp_bpf__mechanisms(const struct mp_bpf *b)
{
	return b->mechanisms;
}

void mp_bpf__counters(const struct mp_bpf *b, struct mp_bpf_counters *out)
{
	*out = b->counters;
	out->uprobe_multi = b->multi;
	out->uprobe_session = b->session;
	out->entry_cost_ns = b->entry_cost_ns;
	out->return_cost_ns = b->return_cost_ns;
	out->cost_calibrated = b->calibrated;
}

uint64_t mp_gap_k(double rate)
{
	return mp_gap_k_q32(rate);
}

uint64_t mp_ktime_to_epoch_us(uint64_t ktime_ns)
{
	if (!epoch_offset_known)
		epoch_offset_init();
	return (uint64_t)((int64_t)ktime_ns + epoch_offset_ns) / 1000;
}
