// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * memprofctl top: a live view of a running profile's sites, refreshed every --delay seconds.
 *
 * Each refresh reads the traces as they are on disk (a trace being written is a readable
 * prefix; memprofd and record flush every trace at least once a second) into one report model
 * (report/report.h), analysed twice: over the last interval alone, for the allocation rate,
 * then over the whole traces, for the bytes live now and allocated so far; sites are joined by
 * their key. On a terminal the
 * view is redrawn in place and keys change it; otherwise each refresh prints a plain table.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/ctl_bus.h"
#include "report/report.h"
#include "userspace-lib/units.h"

enum top_sort { TOP_LIVE, TOP_RATE, TOP_ALLOCATED };

static const char *const sort_names[] = { "live", "rate", "allocated" };

struct top_row {
	char *key;
	struct rp_est live, allocated, rate;
};

struct top {
	/* what to read: trace files, or a profile (and maybe one of its processes) */
	char **paths;
	size_t npaths;
	bool from_daemon;
	uint32_t id;
	pid_t pid;			/* 0: every process of the profile */
	struct memprof_client *cl;
	bool profile_done;		/* the profile no longer samples: last refresh */
	/* view */
	enum top_sort sort;
	enum rp_by by;
	uint64_t delay_us;
	unsigned int rows;		/* 0: as many as the terminal has */
	bool tty;
	struct top_row *row;
	size_t nrows;
};

static volatile sig_atomic_t top_quit;

static void on_signal(int sig)
{
	(void)sig;
	top_quit = 1;
}

static void top_usage(FILE *f)
{
	fprintf(f,
		"Usage: memprofctl top [OPTIONS] ID|PID|TRACE...\n"
		"\n"
		"A live view of a running profile (memprofd's profile ID, or the newest profile\n"
		"holding PID: that process alone) or of trace files being written: its sites\n"
		"by live bytes, bytes allocated so far and allocation rate over the last\n"
		"interval, each with its standard error, refreshed every interval. On a\n"
		"terminal: q quits, l, r and a sort by live bytes, rate and allocated bytes.\n"
		"Otherwise one plain table per refresh.\n"
		"\n"
		"Options:\n"
		"  -d, --delay T          refresh interval: 1.5, 500ms, 2m (default 1s; 100ms\n"
		"                         to 1h)\n"
		"  -n, --iterations N     stop after N refreshes (default: until q, Ctrl-C or\n"
		"                         the end of the profile)\n"
		"  -s, --sort KEY         live (default), rate or allocated\n"
		"  -b, --by KEY           function (default), line, stack or object\n"
		"  -t, --top N            rows (default: what the terminal holds, 20 otherwise)\n"
		"  -h, --help             show this help\n");
}

static int parse_key(const char *what, const char *s, const char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(s, names[i]))
			return i;
	fprintf(stderr, "memprofctl top: unknown %s '%s'\n", what, s);
	return -EINVAL;
}

/* The profile's trace paths (those of @t->pid only, when set) into @t->paths. */
static int profile_paths(struct top *t)
{
	struct memprof_client_profile *p;
	size_t n = 0;
	int r;

	r = memprof_client__profile(t->cl, t->id, &p);
	if (r < 0) {
		ctl_fail_client("top", t->cl, r);
		return r;
	}
	for (size_t i = 0; i < t->npaths; i++)
		free(t->paths[i]);
	free(t->paths);
	t->paths = calloc(p->nprocs ? p->nprocs : 1, sizeof(*t->paths));
	t->npaths = 0;
	if (!t->paths) {
		memprof_client_profile__free(p);
		fprintf(stderr, "memprofctl top: Failed to allocate: %s\n", strerror(ENOMEM));
		return -ENOMEM;
	}
	for (size_t i = 0; i < p->nprocs; i++) {
		const struct memprof_client_process *c = &p->procs[i];

		if ((t->pid && c->pid != t->pid) || !c->trace || !c->trace[0])
			continue;
		t->paths[n] = strdup(c->trace);
		if (t->paths[n])
			n++;
	}
	t->npaths = n;
	t->profile_done = p->state != MEMPROF_CLIENT_SAMPLING;
	memprof_client_profile__free(p);
	return 0;
}

/* @num, an ID or a PID: the profile, and for a PID the process, to show. */
static int resolve_target(struct top *t, uint32_t num)
{
	struct memprof_client_entry *v = NULL;
	struct memprof_client_profile *p;
	size_t n = 0;
	int r;

	if (ctl_bus_connect(&t->cl, false) < 0)
		return -ENOTCONN;
	t->from_daemon = true;
	r = memprof_client__profile(t->cl, num, &p);
	if (r == 0) {
		t->id = num;
		memprof_client_profile__free(p);
		return 0;
	}
	if (r != -ENOENT) {
		ctl_fail_client("top", t->cl, r);
		return r;
	}
	r = memprof_client__list(t->cl, &v, &n);
	if (r < 0) {
		ctl_fail_client("top", t->cl, r);
		return r;
	}
	for (size_t i = 0; i < n && !t->id; i++)	/* newest first */
		for (size_t k = 0; k < v[i].npids; k++)
			if (v[i].pids[k] == (pid_t)num) {
				t->id = v[i].id;
				t->pid = (pid_t)num;
			}
	memprof_client_list__free(v, n);
	if (!t->id) {
		fprintf(stderr, "memprofctl top: %" PRIu32 " is neither a profile ID nor a process "
			"of a profile\n", num);
		return -ENOENT;
	}
	return 0;
}

/* @t's traces, as they are on disk now, in one model (not analysed yet). */
static int load_model(const struct top *t, struct rp_model **ret)
{
	struct rp_options o = { .by = t->by, .top = 1, .tail = 0.1, .points = 2, .quiet = true };
	struct rp_model *m = rp_model__new(&o);
	char err[256];
	int r = 0;

	if (!m)
		return -errno;
	for (size_t i = 0; i < t->npaths && !r; i++) {
		err[0] = 0;
		r = rp_model__load(m, t->paths[i], err, sizeof(err));
		if (r == -ENOENT) {
			r = 0;	/* a process' trace not created yet is not an error of the view */
		} else if (r < 0) {
			fprintf(stderr, "memprofctl top: Failed to read '%s': %s\n", t->paths[i],
				err[0] ? err : strerror(-r));
		}
	}
	if (r < 0) {
		rp_model__free(m);
		return r;
	}
	*ret = m;
	return 0;
}

/* The end of @m's time axis: its last event, µs from the axis' origin. */
static uint64_t axis_end(const struct rp_model *m)
{
	uint64_t end = 0;

	for (size_t i = 0; i < m->ntraces; i++) {
		const struct rp_trace *tr = &m->traces[i];
		uint64_t e = tr->start_us - m->t0_us + tr->end_us;

		if (e > end)
			end = e;
	}
	return end;
}

struct site_rate {
	char *key;
	struct rp_est bytes;		/* allocated over the last interval */
};

static int rate_cmp(const void *a, const void *b)
{
	return strcmp(((const struct site_rate *)a)->key, ((const struct site_rate *)b)->key);
}

static int row_cmp(const void *a, const void *b, void *ctx)
{
	const struct top_row *x = a, *y = b;
	const struct rp_est *ex, *ey;

	switch (*(const enum top_sort *)ctx) {
	case TOP_RATE:
		ex = &x->rate, ey = &y->rate;
		break;
	case TOP_ALLOCATED:
		ex = &x->allocated, ey = &y->allocated;
		break;
	default:
		ex = &x->live, ey = &y->live;
		break;
	}
	return ex->est < ey->est ? 1 : ex->est > ey->est ? -1 : strcmp(x->key, y->key);
}

static void rows_free(struct top *t)
{
	for (size_t i = 0; i < t->nrows; i++)
		free(t->row[i].key);
	free(t->row);
	t->row = NULL;
	t->nrows = 0;
}

/*
 * @m analysed twice: over the last @secs seconds (each site's bytes allocated then, by key),
 * then over the whole traces (live and allocated bytes, the totals draw() shows); the rows
 * join the two and are sorted by the view's key.
 */
static int build_rows(struct top *t, struct rp_model *m, double secs)
{
	uint64_t end = axis_end(m), len = (uint64_t)(secs * 1e6);
	struct site_rate *rates = NULL;
	size_t nrates = 0;
	int r = 0;

	rows_free(t);
	if (!m->nblocks)
		return 0;
	m->opts.has_since = m->opts.has_until = true;
	m->opts.since_us = end > len ? end - len : 0;
	m->opts.until_us = end;
	r = rp_model__analyze(m);
	if (r == 0 && m->nsites && !(rates = calloc(m->nsites, sizeof(*rates))))
		r = -ENOMEM;
	for (size_t i = 0; r == 0 && i < m->nsites; i++, nrates++) {
		rates[i].key = strdup(m->sites[i].key);
		rates[i].bytes = m->sites[i].bytes;
		if (!rates[i].key)
			r = -ENOMEM;
	}
	if (r == 0) {
		qsort(rates, nrates, sizeof(*rates), rate_cmp);
		m->opts.has_since = m->opts.has_until = false;
		r = rp_model__analyze(m);
	}
	if (r == 0 && m->nsites && !(t->row = calloc(m->nsites, sizeof(*t->row))))
		r = -ENOMEM;
	for (size_t i = 0; r == 0 && i < m->nsites; i++) {
		const struct rp_site *s = &m->sites[i];
		struct site_rate k = { .key = s->key }, *l;
		struct top_row *row = &t->row[t->nrows];

		row->key = strdup(s->key);
		if (!row->key) {
			r = -ENOMEM;
			break;
		}
		t->nrows++;
		row->live = s->live_bytes;
		row->allocated = s->bytes;
		l = bsearch(&k, rates, nrates, sizeof(*rates), rate_cmp);
		if (l)
			row->rate = (struct rp_est){ l->bytes.est / secs,
						     l->bytes.var / (secs * secs) };
	}
	if (r == 0)
		qsort_r(t->row, t->nrows, sizeof(*t->row), row_cmp, &t->sort);
	for (size_t i = 0; i < nrates; i++)
		free(rates[i].key);
	free(rates);
	return r;
}

/* "12.3 MiB ± 1.2 MiB" in a column of @w characters. */
static void put_est(FILE *f, const struct rp_est *e, const char *unit, int w)
{
	char a[32], b[32], cell[80];

	mp_fmt_bytes(e->est, a, sizeof(a));
	mp_fmt_bytes(rp_se(e), b, sizeof(b));
	snprintf(cell, sizeof(cell), "%s%s ± %s", a, unit, b);
	fprintf(f, "%*s", w, cell);
}

static void draw(struct top *t, const struct rp_model *all, double secs, FILE *f)
{
	unsigned int rows = t->rows;
	struct winsize ws = { 0 };
	char when[32];
	time_t now = time(NULL);
	struct rp_est rate = { 0 };

	if (!rows)
		rows = t->tty && !ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) && ws.ws_row > 6 ?
			       ws.ws_row - 6 : 20;
	for (size_t i = 0; i < t->nrows; i++) {
		rate.est += t->row[i].rate.est;
		rate.var += t->row[i].rate.var;
	}
	strftime(when, sizeof(when), "%H:%M:%S", localtime(&now));
	if (t->tty)
		fputs("\033[H\033[2J", f);
	fprintf(f, "memprofctl top - %s - %zu trace%s, %zu site%s by %s, sorted by %s%s\n", when,
		all->ntraces, all->ntraces == 1 ? "" : "s", t->nrows,
		t->nrows == 1 ? "" : "s", rp_by_name(t->by), sort_names[t->sort],
		t->profile_done ? " (profile no longer sampling)" : "");
	fputs("Live ", f);
	put_est(f, &all->total_live_bytes, "", 0);
	fputs("   allocated ", f);
	put_est(f, &all->total_bytes, "", 0);
	fprintf(f, "   rate over %.1f s ", secs);
	put_est(f, &rate, "/s", 0);
	fputs("\n\n", f);
	fprintf(f, "%28s %28s %28s  %s\n", t->sort == TOP_LIVE ? "LIVE BYTES*" : "LIVE BYTES",
		t->sort == TOP_ALLOCATED ? "ALLOCATED*" : "ALLOCATED",
		t->sort == TOP_RATE ? "RATE*" : "RATE", "SITE");
	for (size_t i = 0; i < t->nrows && i < rows; i++) {
		put_est(f, &t->row[i].live, "", 28);
		fputc(' ', f);
		put_est(f, &t->row[i].allocated, "", 28);
		fputc(' ', f);
		put_est(f, &t->row[i].rate, "/s", 28);
		fprintf(f, "  %s\n", t->row[i].key);
	}
	if (!t->nrows)
		fputs("  (no sampled block yet)\n", f);
	if (!t->tty)
		fputc('\n', f);
	fflush(f);
}

/* One refresh: read, join, draw. */
static int refresh(struct top *t, double secs)
{
	struct rp_model *m = NULL;
	int r;

	if (t->from_daemon && (r = profile_paths(t)) < 0)
		return r;
	r = load_model(t, &m);
	if (r < 0)
		return r;
	r = build_rows(t, m, secs);
	if (r == 0)
		draw(t, m, secs, stdout);
	else
		fprintf(stderr, "memprofctl top: Failed to build the view: %s\n", strerror(-r));
	rp_model__free(m);
	return r;
}

/* Wait up to @us, or until a key comes (then act on it: the next refresh is at once). */
static void wait_key(struct top *t, uint64_t us)
{
	struct pollfd pfd = { .fd = STDIN_FILENO, .events = POLLIN };
	char c;

	if (!t->tty) {
		struct timespec ts = { .tv_sec = us / 1000000, .tv_nsec = us % 1000000 * 1000 };

		nanosleep(&ts, NULL);
		return;
	}
	if (poll(&pfd, 1, (int)(us / 1000)) <= 0 || read(STDIN_FILENO, &c, 1) != 1)
		return;
	if (c == 'q' || c == 'Q')
		top_quit = 1;
	else if (c == 'l')
		t->sort = TOP_LIVE;
	else if (c == 'r')
		t->sort = TOP_RATE;
	else if (c == 'a')
		t->sort = TOP_ALLOCATED;
}

int cmd_top(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "delay", required_argument, NULL, 'd' },
		{ "iterations", required_argument, NULL, 'n' },
		{ "sort", required_argument, NULL, 's' },
		{ "by", required_argument, NULL, 'b' },
		{ "top", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	struct top t = { .sort = TOP_LIVE, .by = RP_BY_FUNCTION, .delay_us = 1000000 };
	struct sigaction sa = { .sa_handler = on_signal };
	struct termios saved, raw;
	bool raw_set = false;
	long iterations = 0, n = 0;	/* 0: no limit */
	int c, k, rc = 2;
	char *end;

	while ((c = getopt_long(argc, argv, "d:n:s:b:t:h", opts, NULL)) != -1) {
		switch (c) {
		case 'd':
			if (mp_parse_duration(optarg, &t.delay_us) || t.delay_us < 100000 ||
			    t.delay_us > 3600000000ull) {
				fprintf(stderr, "memprofctl top: --delay must be 100ms to 1h, not '%s'\n",
					optarg);
				return 2;
			}
			break;
		case 'n':
		case 't': {
			long v;

			errno = 0;
			v = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || v < 1 || v > 1000000) {
				fprintf(stderr, "memprofctl top: --%s must be 1 to 1000000, "
					"not '%s'\n", c == 'n' ? "iterations" : "top", optarg);
				return 2;
			}
			if (c == 'n')
				iterations = v;
			else
				t.rows = (unsigned int)v;
			break;
		}
		case 's':
			if ((k = parse_key("sort key", optarg, sort_names, 3)) < 0)
				return 2;
			t.sort = (enum top_sort)k;
			break;
		case 'b':
			if (rp_by__parse(optarg, &t.by)) {
				fprintf(stderr, "memprofctl top: unknown --by key '%s' (function, line, "
					"stack or object)\n", optarg);
				return 2;
			}
			break;
		case 'h':
			top_usage(stdout);
			return 0;
		default:
			return 2;	/* getopt printed the error line */
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "memprofctl top: no profile ID, PID or trace given; try "
			"'memprofctl top --help'.\n");
		return 2;
	}
	if (argc - optind == 1 && strspn(argv[optind], "0123456789") == strlen(argv[optind]) &&
	    access(argv[optind], F_OK)) {
		uint32_t num;

		if (ctl_parse_id("top", argv[optind], &num) < 0)
			return 2;
		if (resolve_target(&t, num) < 0) {
			rc = 1;
			goto out;
		}
	} else {
		t.paths = argv + optind;
		t.npaths = (size_t)(argc - optind);
		for (size_t i = 0; i < t.npaths; i++)
			if (access(t.paths[i], R_OK)) {
				fprintf(stderr, "memprofctl top: Cannot read '%s': %s\n",
					t.paths[i], strerror(errno));
				return 1;
			}
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	t.tty = isatty(STDOUT_FILENO) && isatty(STDIN_FILENO);
	if (t.tty && !tcgetattr(STDIN_FILENO, &saved)) {
		raw = saved;
		raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
		raw.c_cc[VMIN] = 1;
		raw.c_cc[VTIME] = 0;
		raw_set = !tcsetattr(STDIN_FILENO, TCSANOW, &raw);
		fputs("\033[?1049h\033[?25l", stdout);	/* alternate screen, no cursor */
	}
	rc = 0;
	while (!top_quit) {
		if (refresh(&t, (double)t.delay_us / 1e6) < 0) {
			rc = 1;
			break;
		}
		if ((iterations && ++n >= iterations) || t.profile_done)
			break;
		wait_key(&t, t.delay_us);
	}
	if (t.tty) {
		fputs("\033[?25h\033[?1049l", stdout);
		fflush(stdout);
	}
	if (raw_set)
		tcsetattr(STDIN_FILENO, TCSANOW, &saved);
out:
	if (t.from_daemon) {
		for (size_t i = 0; i < t.npaths; i++)
			free(t.paths[i]);
		free(t.paths);
	}
	rows_free(&t);
	memprof_client__free(t.cl);
	return rc;
}
