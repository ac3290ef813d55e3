// SPDX-License-Identifier: LGPL-2.1-or-later
/* memprofctl report TRACE...: offline analysis of memtrace traces (see report/report.h). */
#include <errno.h>
#include <getopt.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "report/report.h"

static void report_usage(FILE *f)
{
	fprintf(f,
		"Usage: memprofctl report [OPTIONS] TRACE...\n"
		"       memprofctl report [OPTIONS] --base OLD [--base OLD...] TRACE...\n"
		"\n"
		"Estimate allocated and live bytes per allocation site from memtrace traces;\n"
		"several traces are merged on one time axis (a trace given twice counts once).\n"
		"\n"
		"Options:\n"
		"  -n, --top N              sites per table, 1 or more (default 20)\n"
		"  -b, --by KEY             site: function (default), line, stack or object\n"
		"  -l, --live               rank, flame graph and pprof by bytes live at the end\n"
		"      --since T            ignore blocks allocated before T, from the earliest\n"
		"                           trace's start (e.g. 1.5s, 500ms)\n"
		"      --until T            ignore blocks allocated after T; the window ends at T\n"
		"      --tail F             leak suspects ignore blocks of the last F of the\n"
		"                           window: 0.1 or 10%% (default 10%%)\n"
		"      --points N           live-heap timeline points (default 10, at most %u)\n"
		"      --focus RE           only stacks with a frame matching RE (function, file\n"
		"                           or object; POSIX extended regular expression)\n"
		"      --ignore RE          drop stacks with a frame matching RE\n"
		"      --hide RE            remove the frames matching RE from stacks\n"
		"      --show-from RE       cut stacks above their outermost frame matching RE\n"
		"      --no-trim            name sites by their innermost frame, even an\n"
		"                           allocator's or a standard-library wrapper's\n"
		"      --temporary-threshold T  a block freed within T of its allocation is\n"
		"                           temporary (default 1ms)\n"
		"      --base OLD           report the difference TRACE... minus OLD (a trace;\n"
		"                           repeat it for a set of traces)\n"
		"  -j, --json               print one JSON document\n"
		"  -f, --flamegraph FILE    write an interactive SVG flame graph (-: to stdout,\n"
		"                           instead of the report; to a file: the report is a\n"
		"                           one-line summary)\n"
		"      --flame-orientation icicle|flame\n"
		"                           the flame graph's root on top (default icicle)\n"
		"                           or at the bottom\n"
		"  -p, --pprof FILE         write a gzipped pprof profile (-: to stdout, instead\n"
		"                           of the report; to a file: as --flamegraph)\n"
		"  -t, --text               print the whole text report with --flamegraph or\n"
		"                           --pprof to a file\n"
		"  -q, --quiet              no progress on stderr\n"
		"  -h, --help               show this help\n", RP_MAX_POINTS);
}

static int parse_uint(const char *s, unsigned int max, unsigned int *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v > max || s[0] == '-')
		return -EINVAL;
	*out = (unsigned int)v;
	return 0;
}

static int parse_tail(const char *s, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s)
		return -EINVAL;
	if (!strcmp(end, "%"))
		v /= 100;
	else if (*end)
		return -EINVAL;
	if (!(v >= 0 && v < 1))
		return -EINVAL;
	*out = v;
	return 0;
}

/* The flame graph and pprof profile asked for (NULL: not asked). Returns 0 or -errno after one
 * line. */
static int write_files(const struct rp_model *m, const char *flame, const char *pprof)
{
	const struct {
		const char *path, *what;
		int (*write)(const struct rp_model *m, const char *path);
	} outputs[] = {
		{ flame, "flame graph", rp_write_flamegraph },
		{ pprof, "pprof profile", rp_write_pprof },
	};

	for (size_t i = 0; i < sizeof(outputs) / sizeof(outputs[0]); i++) {
		int r = outputs[i].path ? outputs[i].write(m, outputs[i].path) : 0;

		if (r < 0) {
			fprintf(stderr, "memprofctl report: Failed to write %s '%s': %s\n",
				outputs[i].what, outputs[i].path, strerror(-r));
			return r;
		}
	}
	return 0;
}

int cmd_report(int argc, char **argv)
{
	enum { OPT_SINCE = 256, OPT_UNTIL, OPT_TAIL, OPT_POINTS, OPT_FOCUS, OPT_IGNORE, OPT_HIDE,
	       OPT_SHOW_FROM, OPT_NO_TRIM, OPT_BASE, OPT_TEMP, OPT_ORIENT };
	static const struct option opts[] = {
		{ "top", required_argument, NULL, 'n' },
		{ "by", required_argument, NULL, 'b' },
		{ "live", no_argument, NULL, 'l' },
		{ "since", required_argument, NULL, OPT_SINCE },
		{ "until", required_argument, NULL, OPT_UNTIL },
		{ "tail", required_argument, NULL, OPT_TAIL },
		{ "points", required_argument, NULL, OPT_POINTS },
		{ "focus", required_argument, NULL, OPT_FOCUS },
		{ "ignore", required_argument, NULL, OPT_IGNORE },
		{ "hide", required_argument, NULL, OPT_HIDE },
		{ "show-from", required_argument, NULL, OPT_SHOW_FROM },
		{ "no-trim", no_argument, NULL, OPT_NO_TRIM },
		{ "base", required_argument, NULL, OPT_BASE },
		{ "temporary-threshold", required_argument, NULL, OPT_TEMP },
		{ "json", no_argument, NULL, 'j' },
		{ "text", no_argument, NULL, 't' },
		{ "flamegraph", required_argument, NULL, 'f' },
		{ "flame-orientation", required_argument, NULL, OPT_ORIENT },
		{ "pprof", required_argument, NULL, 'p' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	struct rp_options o = { .by = RP_BY_FUNCTION, .top = 20, .tail = 0.1, .points = 10,
				.temp_us = RP_TEMP_US };
	const char *flame = NULL, *pprof = NULL;
	bool json = ctl.json, quiet = false, text = false, flame_out, pprof_out;
	/* focus, ignore, hide, show-from: compiled once each, freed at the end */
	static const char *const re_names[4] = { "--focus", "--ignore", "--hide", "--show-from" };
	regex_t res[4];
	bool have_re[4] = { false };
	const regex_t **re_opts[4] = { &o.focus, &o.ignore, &o.hide, &o.show_from };
	struct rp_model *m = NULL;
	char **bases = NULL;
	int nbases = 0;
	char err[512];
	int c, ret, rc = 2;

	while ((c = getopt_long(argc, argv, "n:b:ljtf:p:qh", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			if (parse_uint(optarg, 1000000, &o.top) || !o.top) {
				fprintf(stderr, "memprofctl report: invalid --top '%s'\n", optarg);
				goto out;
			}
			break;
		case 'b':
			if (rp_by__parse(optarg, &o.by)) {
				fprintf(stderr, "memprofctl report: invalid --by '%s' (function, "
					"line, stack or object)\n", optarg);
				goto out;
			}
			break;
		case 'l':
			o.live = true;
			break;
		case OPT_SINCE:
		case OPT_UNTIL:
			if (mp_parse_duration(optarg, c == OPT_SINCE ? &o.since_us : &o.until_us)) {
				fprintf(stderr, "memprofctl report: invalid time '%s' (e.g. 1.5s, "
					"500ms)\n", optarg);
				goto out;
			}
			if (c == OPT_SINCE)
				o.has_since = true;
			else
				o.has_until = true;
			break;
		case OPT_TAIL:
			if (parse_tail(optarg, &o.tail)) {
				fprintf(stderr, "memprofctl report: invalid --tail '%s' (a fraction "
					"in [0, 1) or a percentage)\n", optarg);
				goto out;
			}
			break;
		case OPT_FOCUS:
		case OPT_IGNORE:
		case OPT_HIDE:
		case OPT_SHOW_FROM: {
			int k = c - OPT_FOCUS, e;

			if (have_re[k]) {
				regfree(&res[k]);
				have_re[k] = false;
			}
			e = regcomp(&res[k], optarg, REG_EXTENDED | REG_NOSUB);
			if (e) {
				regerror(e, &res[k], err, sizeof(err));
				fprintf(stderr, "memprofctl report: invalid %s '%s': %s\n",
					re_names[k], optarg, err);
				goto out;
			}
			have_re[k] = true;
			*re_opts[k] = &res[k];
			break;
		}
		case OPT_TEMP:
			if (mp_parse_duration(optarg, &o.temp_us) || !o.temp_us) {
				fprintf(stderr, "memprofctl report: invalid --temporary-threshold "
					"'%s' (more than 0, e.g. 1ms, 20us)\n", optarg);
				goto out;
			}
			break;
		case OPT_ORIENT:
			if (strcmp(optarg, "icicle") && strcmp(optarg, "flame")) {
				fprintf(stderr, "memprofctl report: invalid "
					"--flame-orientation '%s' (icicle or flame)\n", optarg);
				goto out;
			}
			o.flame = !strcmp(optarg, "flame");
			break;
		case OPT_NO_TRIM:
			o.no_trim = true;
			break;
		case OPT_BASE: {
			char **nb = realloc(bases, (size_t)(nbases + 1) * sizeof(*bases));

			if (!nb) {
				fprintf(stderr, "memprofctl report: out of memory\n");
				rc = 1;
				goto out;
			}
			bases = nb;
			bases[nbases++] = optarg;
			break;
		}
		case OPT_POINTS:
			if (parse_uint(optarg, RP_MAX_POINTS, &o.points) || !o.points) {
				fprintf(stderr, "memprofctl report: invalid --points '%s' (1..%u)\n",
					optarg, RP_MAX_POINTS);
				goto out;
			}
			break;
		case 'j':
			json = true;
			break;
		case 't':
			text = true;
			break;
		case 'f':
			flame = optarg;
			break;
		case 'p':
			pprof = optarg;
			break;
		case 'q':
			quiet = true;
			break;
		case 'h':
			report_usage(stdout);
			rc = 0;
			goto out;
		default:
			goto out;	/* getopt printed the error line */
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "memprofctl report: no trace given; try 'memprofctl report --help'.\n");
		goto out;
	}
	if (o.has_since && o.has_until && o.until_us < o.since_us) {
		fprintf(stderr, "memprofctl report: --until is before --since\n");
		goto out;
	}
	flame_out = flame && !strcmp(flame, "-");
	pprof_out = pprof && !strcmp(pprof, "-");
	if (flame_out + pprof_out + json > 1) {
		fprintf(stderr, "memprofctl report: only one of --json, --flamegraph - and --pprof - "
			"can write to standard output\n");
		goto out;
	}
	o.progress = !quiet && isatty(STDERR_FILENO);

	m = rp_model__new(&o);
	if (!m) {
		fprintf(stderr, "memprofctl report: Failed to allocate the report: %s\n",
			strerror(errno));
		rc = 1;
		goto out;
	}
	for (int i = 0; i < nbases; i++) {
		err[0] = '\0';
		ret = rp_model__load_base(m, bases[i], err, sizeof(err));
		if (ret < 0) {
			fprintf(stderr, "memprofctl report: Failed to read the base '%s': %s\n",
				bases[i], err[0] ? err : strerror(-ret));
			goto fail;
		}
	}
	for (int i = optind; i < argc; i++) {
		err[0] = '\0';
		ret = rp_model__load(m, argv[i], err, sizeof(err));
		if (ret < 0) {
			fprintf(stderr, "memprofctl report: Failed to read '%s': %s\n", argv[i],
				err[0] ? err : strerror(-ret));
			goto fail;
		}
	}
	ret = rp_model__analyze(m);
	if (ret < 0) {
		fprintf(stderr, "memprofctl report: Failed to analyze the traces: %s\n",
			strerror(-ret));
		goto fail;
	}
	ret = write_files(m, flame, pprof);
	if (ret < 0)
		goto fail;
	/* a flame graph or profile on stdout is the output; written to files, they are
	 * summarized in one line unless the report is asked for */
	if (flame_out || pprof_out)
		ret = 0;
	else if (json)
		ret = rp_print_json(m, stdout);
	else if ((flame || pprof) && !text)
		ret = rp_print_summary(m, flame, pprof, stdout);
	else
		ret = rp_print_text(m, stdout);
	if (ret < 0) {
		fprintf(stderr, "memprofctl report: Failed to write the report: %s\n",
			strerror(-ret));
		goto fail;
	}
	rc = 0;
	goto out;
fail:
	rc = 1;
out:
	rp_model__free(m);
	free(bases);
	for (int k = 0; k < 4; k++)
		if (have_re[k])
			regfree(&res[k]);
	return rc;
}
