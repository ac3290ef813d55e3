// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * memprofd: the memory profiling service. One sd-event loop drives the engine's ring buffer,
 * the control connections (daemon/service/bus.c), signals, the manifest flush timer and the systemd
 * watchdog. No threads.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>
#include <systemd/sd-event.h>

#include "daemon/service/bus.h"
#include "daemon/service/memprofd.h"
#include "userspace-lib/options.h"

/* ------------------------------------------------------------------ logging */

static int log_max_level = 6;
static bool log_journal;

static const char *const level_names[] = {
	"emerg", "alert", "crit", "err", "warning", "notice", "info", "debug",
};

void mp_log_setup(int level, bool journal_prefix)
{
	log_max_level = level;
	log_journal = journal_prefix;
}

int mp_log_level_parse(const char *s)
{
	if (s[0] >= '0' && s[0] <= '7' && !s[1])
		return s[0] - '0';
	if (!strcmp(s, "error"))
		return 3;
	for (int i = 0; i < 8; i++)
		if (!strcmp(s, level_names[i]))
			return i;
	return -EINVAL;
}

void mp_log(int level, const char *fmt, ...)
{
	int saved = errno;
	char buf[2048];
	va_list ap;

	if (level > log_max_level)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	/* journald reads "<N>" as the priority of a line on a stream it collects. */
	if (log_journal)
		fprintf(stderr, "<%d>%s\n", level, buf);
	else
		fprintf(stderr, "memprofd: %s\n", buf);
	errno = saved;
}

/* stderr is journald's stream when JOURNAL_STREAM names its device and inode. */
static bool stderr_is_journal(void)
{
	const char *e = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2 || fstat(STDERR_FILENO, &st) < 0)
		return false;
	return st.st_dev == dev && st.st_ino == ino;
}

/* ------------------------------------------------------------------ configuration */

void mp_config__defaults(struct mp_config *c)
{
	free(c->state_dir);
	*c = (struct mp_config){
		.default_rate = MP_RATE_DEFAULT,
		.callstack_size = MP_CALLSTACK_MAX,
		.state_dir = strdup(MP_DEFAULT_STATE_DIR),
		.max_profiles = MP_DEFAULT_MAX_PROFILES,
		.max_clients = MP_DEFAULT_MAX_CLIENTS,
		.max_queued_calls = MP_DEFAULT_MAX_QUEUED_CALLS,
		.max_queued_bytes = MP_DEFAULT_MAX_QUEUED_BYTES,
		.max_profiles_per_user = -1,
		.root_profiles = -1,
	};
}

void mp_config__done(struct mp_config *c)
{
	free(c->state_dir);
	c->state_dir = NULL;
	mp_standing__free_all(c);
}

static char *strip(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
		*--e = '\0';
	return s;
}

static int parse_uint(const char *v, unsigned int min, unsigned int max, unsigned int *out)
{
	unsigned long x;
	char *end;

	errno = 0;
	x = strtoul(v, &end, 10);
	if (errno || end == v || *end || v[0] == '-' || x < min || x > max)
		return -EINVAL;
	*out = (unsigned int)x;
	return 0;
}

int mp_config__load(struct mp_config *c, const char *path, char *err, size_t err_len)
{
	struct mp_config n = { 0 };
	char line[4096], msg[512];
	unsigned int lineno = 0;
	bool in_profile = false;
	FILE *f;
	int r = 0;

	f = fopen(path, "re");
	if (!f) {
		r = -errno;
		if (r != -ENOENT)
			snprintf(err, err_len, "%s: %s", path, strerror(-r));
		return r;
	}
	n = *c;
	n.state_dir = strdup(c->state_dir ? c->state_dir : MP_DEFAULT_STATE_DIR);
	n.standing = NULL;
	n.nstanding = 0;
	while (fgets(line, sizeof(line), f)) {
		char *k = strip(line), *v, *eq;

		lineno++;
		if (!*k || *k == '#' || *k == ';')
			continue;
		if (!strcmp(k, "[memprofd]")) {
			in_profile = false;
			continue;
		}
		if (!strcmp(k, "[Profile]")) {
			in_profile = true;
			r = mp_standing__section(&n, lineno, msg, sizeof(msg));
			if (r < 0) {
				snprintf(err, err_len, "%s:%u: %s", path, lineno,
					 r == -ENOMEM ? "out of memory" : msg);
				break;
			}
			continue;
		}
		eq = strchr(k, '=');
		if (!eq) {
			snprintf(err, err_len, "%s:%u: expected Key=Value", path, lineno);
			r = -EINVAL;
			break;
		}
		*eq = '\0';
		k = strip(k);
		v = strip(eq + 1);
		if (in_profile) {
			r = mp_standing__set(&n, k, v, msg, sizeof(msg));
			if (r < 0) {
				snprintf(err, err_len, "%s:%u: %s", path, lineno,
					 r == -ENOMEM ? "out of memory" : msg);
				break;
			}
			continue;
		}
		if (!strcmp(k, "DefaultRate") || !strcmp(k, "CallstackSize")) {
			/* The defaults of Start's options: read as the option is. */
			bool rate = !strcmp(k, "DefaultRate");
			enum mp_opt_id id = rate ? MP_OPT_RATE : MP_OPT_CALLSTACK_SIZE;
			struct mp_opts o;

			mp_opts__init(&o);
			r = mp_option__parse(&mp_options[id], v, &o, err, err_len);
			if (rate)
				n.default_rate = o.rate;
			else
				n.callstack_size = o.callstack_size;
		} else if (!strcmp(k, "MaxProfiles")) {
			r = parse_uint(v, 1, MP_HARD_MAX_PROFILES, &n.max_profiles);
		} else if (!strcmp(k, "MaxProfilesPerUser")) {
			unsigned int x;

			r = parse_uint(v, 1, MP_HARD_MAX_PROFILES, &x);
			n.max_profiles_per_user = (int)x;
		} else if (!strcmp(k, "RootReservedProfiles")) {
			unsigned int x;

			r = parse_uint(v, 0, MP_HARD_MAX_PROFILES, &x);
			n.root_profiles = (int)x;
		} else if (!strcmp(k, "MaxClients")) {
			r = parse_uint(v, 1, MP_HARD_MAX_CLIENTS, &n.max_clients);
		} else if (!strcmp(k, "MaxQueuedCalls")) {
			r = parse_uint(v, 1, MP_HARD_MAX_QUEUED_CALLS, &n.max_queued_calls);
		} else if (!strcmp(k, "MaxQueuedBytes")) {
			r = parse_uint(v, MP_MIN_QUEUED_BYTES, MP_HARD_MAX_QUEUED_BYTES,
				       &n.max_queued_bytes);
		} else if (!strcmp(k, "StateDirectory")) {
			if (v[0] != '/') {
				r = -EINVAL;
			} else {
				free(n.state_dir);
				n.state_dir = strdup(v);
			}
		} else {
			snprintf(err, err_len, "%s:%u: unknown setting '%s'", path, lineno, k);
			r = -EINVAL;
			break;
		}
		if (r < 0) {
			snprintf(err, err_len, "%s:%u: invalid value '%s' for %s", path, lineno, v, k);
			break;
		}
	}
	if (r == 0 && ferror(f)) {	/* a directory reads as EISDIR */
		r = errno ? -errno : -EIO;
		snprintf(err, err_len, "%s: %s", path, strerror(-r));
	}
	fclose(f);
	if (r == 0 && n.root_profiles >= 0 && (unsigned int)n.root_profiles >= n.max_profiles) {
		snprintf(err, err_len, "%s: RootReservedProfiles=%d leaves no profile to other "
			 "users (MaxProfiles=%u)", path, n.root_profiles, n.max_profiles);
		r = -EINVAL;
	}
	if (r == 0 && !n.state_dir) {
		snprintf(err, err_len, "Out of memory");
		r = -ENOMEM;
	}
	if (r == 0 && (r = mp_standing__check(&n, msg, sizeof(msg), &lineno)) < 0)
		snprintf(err, err_len, "%s:%u: %s", path, lineno, msg);
	if (r < 0) {
		free(n.state_dir);
		mp_standing__free_all(&n);
		return r;
	}
	free(c->state_dir);
	mp_standing__free_all(c);
	*c = n;
	return 0;
}

/* ------------------------------------------------------------------ the loop */

void memprofd__update_status(struct memprofd *d)
{
	unsigned int n[4] = { 0 };

	for (struct svc_profile *sp = d->profiles; sp; sp = sp->next) {
		enum mp_profile_state st = mp_profile__state(sp->p);

		if (st >= MP_PROFILE_SAMPLING && st <= MP_PROFILE_DISCARDED)
			n[st]++;
	}
	sd_notifyf(0, "STATUS=%s%u sampling, %u stopped, %u discarded profile(s); %u client(s)",
		   d->stopping ? "Stopping: " : "", n[MP_PROFILE_SAMPLING],
		   n[MP_PROFILE_STOPPED], n[MP_PROFILE_DISCARDED],
		   mp_bus_server__nclients(d->bus));
}

/* The loader's messages: kernel probes at start, probes the kernel refused. */
static void on_engine_log(void *ctx, int level, const char *msg)
{
	(void)ctx;
	mp_log(level, "%s", msg);
}

static int on_engine(sd_event_source *es, int fd, uint32_t revents, void *userdata)
{
	struct memprofd *d = userdata;
	int r = mp_engine__process_max(d->engine, MP_RING_SLICE_NS);

	if (r < 0)
		log_error("Failed to process BPF events: %s", strerror(-r));
	return 0;
}

static void on_profile_state(void *ctx, struct mp_profile *p, enum mp_profile_state st)
{
	struct memprofd *d = ctx;
	struct svc_profile *sp = svc_profile__by_engine(d, p);

	/* NULL while mp_engine__start() has not returned yet: the caller writes it then. */
	if (sp)
		svc_profile__state_changed(d, sp);
}

static int on_flush(sd_event_source *es, uint64_t usec, void *userdata)
{
	struct memprofd *d = userdata;

	if (d->engine)	/* the manifests count what is in the ring too */
		mp_engine__process_max(d->engine, MP_RING_SLICE_NS);
	for (struct svc_profile *sp = d->profiles; sp; sp = sp->next) {
		svc_profile__log_write_failures(sp);
		/* a discarded profile's manifest only until its final state is written */
		if (mp_profile__state(sp->p) != MP_PROFILE_DISCARDED || sp->manifest_failures)
			svc_profile__write_manifest(d, sp);
	}
	memprofd__update_status(d);
	sd_event_source_set_time_relative(es, MP_FLUSH_INTERVAL_US);
	sd_event_source_set_enabled(es, SD_EVENT_ONESHOT);
	return 0;
}

static int on_exit_signal(sd_event_source *es, const struct signalfd_siginfo *si, void *userdata)
{
	struct memprofd *d = userdata;

	log_notice("Received %s, completing traces and exiting", strsignal((int)si->ssi_signo));
	sd_event_exit(d->event, 0);
	return 0;
}

static int on_reload(sd_event_source *es, const struct signalfd_siginfo *si, void *userdata)
{
	struct memprofd *d = userdata;
	struct mp_config c = { 0 };
	char err[512] = "";
	int r;

	sd_notify(0, "RELOADING=1");
	mp_config__defaults(&c);
	r = mp_config__load(&c, d->config_path, err, sizeof(err));
	if (r == -ENOENT && d->config_given)	/* as at start: -c names a file that must be */
		snprintf(err, sizeof(err), "%s: %s", d->config_path, strerror(-r));
	if (r < 0 && (r != -ENOENT || d->config_given)) {
		log_error("Failed to reload the configuration, keeping the current one: %s", err);
		mp_config__done(&c);
	} else {
		if (d->opt_state_dir) {
			free(c.state_dir);
			c.state_dir = strdup(d->opt_state_dir);
		}
		if (!c.state_dir) {
			log_error("Failed to reload the configuration: out of memory");
		} else {
			unsigned int per_user, reserve;

			mp_config__done(&d->cfg);
			d->cfg = c;
			svc_profile__limits(&d->cfg, &per_user, &reserve);
			log_notice("Reloaded configuration from '%s': DefaultRate=%g CallstackSize=%u "
				   "StateDirectory=%s MaxProfiles=%u MaxProfilesPerUser=%u "
				   "RootReservedProfiles=%u MaxClients=%u MaxQueuedCalls=%u "
				   "MaxQueuedBytes=%u",
				   d->config_path, d->cfg.default_rate, d->cfg.callstack_size,
				   d->cfg.state_dir, d->cfg.max_profiles, per_user, reserve,
				   d->cfg.max_clients, d->cfg.max_queued_calls,
				   d->cfg.max_queued_bytes);
			svc_standing__apply(d);
		}
	}
	sd_notify(0, "READY=1");
	memprofd__update_status(d);
	return 0;
}

static void log_stuck(void *ctx, const char *msg)
{
	log_error("%s", msg);
}

/* Stop what samples, drain the ring buffer, then complete every trace (discard). */
static void memprofd__shutdown(struct memprofd *d)
{
	char err[512];

	d->stopping = true;
	sd_notify(0, "STOPPING=1");
	memprofd__update_status(d);
	for (struct svc_profile *sp = d->profiles; sp; sp = sp->next)
		if (mp_profile__state(sp->p) == MP_PROFILE_SAMPLING &&
		    svc_profile__stop(d, sp, err, sizeof(err)) < 0)
			log_error("%s", err);
	if (d->engine)
		mp_engine__process(d->engine);
	for (struct svc_profile *sp = d->profiles; sp; sp = sp->next)
		if (mp_profile__state(sp->p) == MP_PROFILE_STOPPED &&
		    svc_profile__discard(d, sp, err, sizeof(err)) < 0)
			log_error("%s", err);
}

static void help(void)
{
	printf("Usage: memprofd [OPTIONS]\n"
	       "\n"
	       "Memory profiling service: samples the allocations of native processes with BPF\n"
	       "uprobes and writes memtrace traces. Controlled by memprofctl over D-Bus.\n"
	       "\n"
	       "Options:\n"
	       "  -s, --socket PATH       control socket (default %s)\n"
	       "  -d, --state-dir DIR     where traces go (default %s)\n"
	       "  -c, --config FILE       configuration file (default %s)\n"
	       "  -l, --log-level LEVEL   err, warning, notice, info or debug (default info)\n"
	       "      --bus-address ADDR  also serve as org.memprofd on the bus at ADDR\n"
	       "      --system-bus        also serve as org.memprofd on the system bus\n"
	       "      --seed N            seed the sampler's random numbers (for tests)\n"
	       "  -h, --help              show this help\n"
	       "      --version           show the version\n",
	       MEMPROF_BUS_SOCKET, MP_DEFAULT_STATE_DIR, MP_DEFAULT_CONFIG);
}

enum { OPT_BUS_ADDRESS = 0x100, OPT_SYSTEM_BUS, OPT_SEED, OPT_VERSION };

static int parse_args(struct memprofd *d, int argc, char **argv, int *log_level,
		      bool *config_given)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "state-dir", required_argument, NULL, 'd' },
		{ "config", required_argument, NULL, 'c' },
		{ "log-level", required_argument, NULL, 'l' },
		{ "bus-address", required_argument, NULL, OPT_BUS_ADDRESS },
		{ "system-bus", no_argument, NULL, OPT_SYSTEM_BUS },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, OPT_VERSION },
		{}
	};
	char *end;
	int c;

	argv[0] = "memprofd";	/* getopt's error lines start with it */
	while ((c = getopt_long(argc, argv, "s:d:c:l:h", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			d->socket_path = optarg;
			break;
		case 'd':
			if (optarg[0] != '/') {
				fprintf(stderr, "memprofd: --state-dir needs an absolute path, not '%s'\n",
					optarg);
				return 2;
			}
			d->opt_state_dir = optarg;
			break;
		case 'c':
			d->config_path = optarg;
			d->config_given = true;
			*config_given = true;
			break;
		case 'l':
			*log_level = mp_log_level_parse(optarg);
			if (*log_level < 0) {
				fprintf(stderr, "memprofd: invalid log level '%s': err, warning, "
					"notice, info, debug or 0-7\n", optarg);
				return 2;
			}
			break;
		case OPT_BUS_ADDRESS:
			d->bus_address = optarg;
			break;
		case OPT_SYSTEM_BUS:
			d->system_bus = true;
			break;
		case OPT_SEED:
			errno = 0;
			d->seed = strtoull(optarg, &end, 0);
			if (errno || end == optarg || *end) {
				fprintf(stderr, "memprofd: invalid seed '%s'\n", optarg);
				return 2;
			}
			d->has_seed = true;
			break;
		case 'h':
			help();
			return 0;
		case OPT_VERSION:
			printf("memprofd %s\n", MP_VERSION);
			return 0;
		default:
			return 2;	/* getopt printed the error line */
		}
	}
	if (optind < argc) {
		fprintf(stderr, "memprofd: unexpected argument '%s'; try 'memprofd --help'.\n",
			argv[optind]);
		return 2;
	}
	return -1;
}

/*
 * Every probed process holds a few links (descriptors) until it exits and the closer thread
 * releases them; the default soft limit (1024 under systemd) is soon reached on a busy host.
 * Nothing here uses select(), so take the hard limit.
 */
static void raise_nofile_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
		return;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		log_warning("Failed to raise the soft limit of open files to %llu: %s",
			    (unsigned long long)rl.rlim_max, strerror(errno));
}

int main(int argc, char **argv)
{
	struct memprofd d = {
		.config_path = MP_DEFAULT_CONFIG,
		.socket_path = MEMPROF_BUS_SOCKET,
		.next_id = 1,
	};
	struct mp_engine_opts eopts = { .sz = sizeof(eopts) };
	bool config_given = false;
	int log_level = 6, listen_fd = -1, n, r, ret = 1;
	char err[512] = "", why[1024] = "";

	r = parse_args(&d, argc, argv, &log_level, &config_given);
	if (r >= 0)
		return r;
	mp_log_setup(log_level, stderr_is_journal());
	raise_nofile_limit();

	mp_config__defaults(&d.cfg);
	r = mp_config__load(&d.cfg, d.config_path, err, sizeof(err));
	if (r == -ENOENT && config_given) {
		log_error("Configuration file '%s' does not exist", d.config_path);
		goto out;
	}
	if (r < 0 && r != -ENOENT) {
		log_error("Failed to load the configuration: %s", err);
		goto out;
	}
	if (d.opt_state_dir) {
		free(d.cfg.state_dir);
		d.cfg.state_dir = strdup(d.opt_state_dir);
	}
	if (!d.cfg.state_dir) {
		log_error("Out of memory");
		goto out;
	}

	r = sd_event_default(&d.event);
	if (r < 0) {
		log_error("Failed to create the event loop: %s", strerror(-r));
		goto out;
	}
	signal(SIGPIPE, SIG_IGN);
	r = sd_event_add_signal(d.event, NULL, SIGTERM | SD_EVENT_SIGNAL_PROCMASK, on_exit_signal, &d);
	if (r >= 0)
		r = sd_event_add_signal(d.event, NULL, SIGINT | SD_EVENT_SIGNAL_PROCMASK,
					on_exit_signal, &d);
	if (r >= 0)
		r = sd_event_add_signal(d.event, NULL, SIGHUP | SD_EVENT_SIGNAL_PROCMASK, on_reload,
					&d);
	if (r < 0) {
		log_error("Failed to watch signals: %s", strerror(-r));
		goto out;
	}

	eopts.seed = d.seed;
	eopts.has_seed = d.has_seed;
	eopts.exec_check = svc_exec_check;
	eopts.join_check = svc_join_check;
	eopts.keep_exited = MP_KEEP_EXITED;
	/* no caller's file, however slow, may hold up the loop (writer_async.h) */
	eopts.output_queue_bytes = MP_OUTPUT_QUEUE_BYTES;
	eopts.log = on_engine_log;
	eopts.error = why;
	eopts.error_len = sizeof(why);
	d.engine = mp_engine__new(&eopts);
	if (!d.engine) {
		log_error("Failed to load the BPF programs: %s", why);
		goto out;
	}
	mp_engine__on_state(d.engine, on_profile_state, &d);
	r = sd_event_add_io(d.event, &d.engine_src, mp_engine__fd(d.engine), EPOLLIN, on_engine,
			    &d);
	if (r < 0) {
		log_error("Failed to watch the BPF ring buffer: %s", strerror(-r));
		goto out;
	}
	d.next_id = svc_profile__scan_ids(d.cfg.state_dir) + 1;
	svc_profile__mark_interrupted(d.cfg.state_dir);

	n = sd_listen_fds(1);
	if (n > 1) {
		log_error("Expected one socket from the service manager, got %d", n);
		goto out;
	}
	if (n == 1)
		listen_fd = SD_LISTEN_FDS_START;
	d.bus = mp_bus_server__new(&d, listen_fd, d.socket_path);
	if (!d.bus)
		goto out;	/* logged */
	if (d.bus_address && mp_bus_server__add_bus(d.bus, d.bus_address) < 0)
		goto out;
	if (d.system_bus && mp_bus_server__add_bus(d.bus, NULL) < 0)
		log_warning("Serving on the private socket only");

	r = sd_event_add_time_relative(d.event, &d.flush_timer, CLOCK_MONOTONIC,
				       MP_FLUSH_INTERVAL_US, 0, on_flush, &d);
	if (r < 0) {
		log_error("Failed to arm the flush timer: %s", strerror(-r));
		goto out;
	}
	r = sd_event_set_watchdog(d.event, 1);
	if (r < 0) {
		log_error("Failed to enable the watchdog: %s", strerror(-r));
		goto out;
	}

	log_notice("memprofd %s ready: control socket %s, traces under %s/profiles", MP_VERSION,
		   listen_fd >= 0 ? "from the service manager" : d.socket_path, d.cfg.state_dir);
	svc_standing__apply(&d);
	sd_notify(0, "READY=1");
	memprofd__update_status(&d);

	r = sd_event_loop(d.event);
	if (r < 0) {
		log_error("Event loop failed: %s", strerror(-r));
		goto out;
	}
	ret = 0;
out:
	if (d.engine) {
		memprofd__shutdown(&d);
		/* the files of traces complete in the engine, still being written */
		mp_engine__wait_outputs(d.engine, MP_SHUTDOWN_WAIT_MS, log_stuck, NULL);
	}
	mp_bus_server__free(d.bus);
	d.bus = NULL;
	sd_event_source_disable_unref(d.flush_timer);
	sd_event_source_disable_unref(d.engine_src);
	if (d.engine) {
		/* Traces are complete now; no callbacks into a half-freed table. */
		mp_engine__on_state(d.engine, NULL, NULL);
		mp_engine__free(d.engine);
	}
	svc_profile__free_all(&d);
	sd_event_unref(d.event);
	mp_config__done(&d.cfg);
	if (ret == 0)
		log_notice("All traces complete; exiting");
	return ret;
}
