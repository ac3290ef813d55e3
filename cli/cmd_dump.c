// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * memprofctl dump [--json] [--locations] [--lenient] TRACE: print a memtrace trace, the
 * trace info first, then one line per event with its backtrace decoded (the format of the
 * upstream reader's dumps: code{"defname"@"file":line:start-end}, outermost frame first).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memprof/trace.h>

#include "cli/commands.h"
#include "userspace-lib/codec/trace_context.h"

static const char *const source_names[] = { "minor", "major", "external" };

/* Shortest "%g" that reads back as the same double. */
static void print_double(FILE *f, double v)
{
	char buf[40];

	for (int prec = 1; prec <= 17; prec++) {
		snprintf(buf, sizeof(buf), "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	fputs(buf, f);
}

/* A quoted string: C-style escapes for text, \u escapes for JSON. */
static void print_str(FILE *f, const char *s, bool json)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p < 0x20 || *p == 0x7f)
			fprintf(f, json ? "\\u%04x" : "\\%03u", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

static void print_locs(FILE *f, const struct memprof_location *l, unsigned int n, bool json)
{
	for (unsigned int i = 0; i < n; i++) {
		if (json) {
			fprintf(f, "%s{\"defname\":", i ? "," : "");
			print_str(f, l[i].defname, true);
			fputs(",\"filename\":", f);
			print_str(f, l[i].filename, true);
			fprintf(f, ",\"line\":%u,\"start_char\":%u,\"end_char\":%u}", l[i].line,
				l[i].start_char, l[i].end_char);
		} else {
			if (i)
				fputs("; ", f);
			print_str(f, l[i].defname, false);
			fputc('@', f);
			print_str(f, l[i].filename, false);
			fprintf(f, ":%u:%u-%u", l[i].line, l[i].start_char, l[i].end_char);
		}
	}
}

/* The start of an info field: JSON's ,"KEY": or the text's line "info KEY ". */
static void info_key(FILE *f, bool json, const char *key, bool first)
{
	if (json)
		fprintf(f, "%s\"%s\":", first ? "{\"info\":{" : ",", key);
	else
		fprintf(f, "%sinfo %s ", first ? "" : "\n", key);
}

/* The trace's info, one field at a time in either form. */
static void print_info(FILE *f, const struct memprof_trace_info *in, bool json)
{
	const struct {
		const char *key, *value;
	} strs[] = {
		{ "executable_name", in->executable_name }, { "host_name", in->host_name },
		{ "ocaml_runtime_params", in->runtime_params },
	};
	const struct {
		const char *key;
		uint64_t value;
	} nums[] = {
		{ "pid", in->pid }, { "start_time_us", in->start_time_us },
		{ "initial_domain", in->initial_domain },
	};

	info_key(f, json, "version", true);
	fprintf(f, "%u", in->version);
	info_key(f, json, "sample_rate", false);
	print_double(f, in->sample_rate);
	info_key(f, json, "word_size", false);
	fprintf(f, "%u", in->word_size);
	for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
		info_key(f, json, strs[i].key, false);
		print_str(f, strs[i].value, json);
	}
	for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
		info_key(f, json, nums[i].key, false);
		fprintf(f, "%" PRIu64, nums[i].value);
	}
	info_key(f, json, "context", false);
	if (in->context)
		print_str(f, in->context, json);
	else
		fputs(json ? "null" : "none", f);
	fputs(json ? "},\n\"events\":[\n" : "\n", f);
}

static void print_event(FILE *f, struct memprof_reader *r, const struct memprof_event *ev,
			bool json, bool first)
{
	static const char *const names[] = { "?", "alloc", "promote", "collect", "location" };
	const struct memprof_location *l;
	unsigned int n;

	if (json) {
		fprintf(f, "%s{\"time_us\":%" PRIu64 ",\"event\":\"%s\",\"domain\":%u", first ? "" : ",\n",
			ev->time_us, names[ev->type], ev->domain);
		if (ev->type == MEMPROF_EV_LOCATION) {
			fprintf(f, ",\"code\":%" PRIu64 ",\"locations\":[", ev->code);
			print_locs(f, ev->locs, ev->nlocs, true);
			fputs("]}", f);
			return;
		}
		fprintf(f, ",\"id\":%" PRIu64, ev->id);
		if (ev->type == MEMPROF_EV_ALLOC) {
			fprintf(f, ",\"source\":\"%s\",\"length\":%" PRIu64 ",\"nsamples\":%" PRIu64
				",\"common_prefix\":%zu,\"backtrace\":[", source_names[ev->source],
				ev->length, ev->nsamples, ev->common_prefix);
			for (size_t i = 0; i < ev->backtrace_len; i++) {
				l = memprof_reader__lookup(r, ev->backtrace[i], &n);
				fprintf(f, "%s{\"code\":%" PRIu64 ",\"locations\":[", i ? "," : "",
					ev->backtrace[i]);
				print_locs(f, l, n, true);
				fputs("]}", f);
			}
			fputc(']', f);
		}
		fputc('}', f);
		return;
	}
	fprintf(f, "%" PRIu64 " %s", ev->time_us, names[ev->type]);
	if (ev->type == MEMPROF_EV_LOCATION) {
		fprintf(f, " code=0x%" PRIx64 " dom=%u locs={", ev->code, ev->domain);
		print_locs(f, ev->locs, ev->nlocs, false);
		fputs("}\n", f);
		return;
	}
	fprintf(f, " id=%" PRIu64 " dom=%u", ev->id, ev->domain);
	if (ev->type == MEMPROF_EV_ALLOC) {
		fprintf(f, " src=%s len=%" PRIu64 " n=%" PRIu64 " pfx=%zu nbt=%zu bt=",
			source_names[ev->source], ev->length, ev->nsamples, ev->common_prefix,
			ev->backtrace_len);
		for (size_t i = 0; i < ev->backtrace_len; i++) {
			l = memprof_reader__lookup(r, ev->backtrace[i], &n);
			fprintf(f, "%s0x%" PRIx64 "{", i ? " | " : "", ev->backtrace[i]);
			print_locs(f, l, n, false);
			fputc('}', f);
		}
	}
	fputc('\n', f);
}

static void dump_warn(void *ctx, uint64_t offset, const char *msg)
{
	fprintf(stderr, "memprofctl dump: '%s': warning at offset %" PRIu64 ": %s\n",
		(const char *)ctx, offset, msg);
}

int cmd_dump(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "locations", no_argument, NULL, 'l' },
		{ "lenient", no_argument, NULL, 'L' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	struct memprof_reader_opts ropts = { .sz = sizeof(ropts), .warn = dump_warn };
	struct memprof_reader *r;
	struct memprof_event ev;
	bool json = ctl.json, first = true;
	char err[256];
	int c, ret;

	while ((c = getopt_long(argc, argv, "jlh", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = true;
			break;
		case 'l':
			ropts.report_locations = 1;
			break;
		case 'L':
			ropts.strict = -1;
			break;
		case 'h':
			printf("Usage: memprofctl dump [OPTIONS] TRACE\n\n"
			       "Print a memtrace trace (.ctf or .ctf.zst): its info, then one line per\n"
			       "event with the backtrace decoded, outermost frame first.\n\n"
			       "Options:\n"
			       "  -j, --json        print JSON\n"
			       "  -l, --locations   also print location definitions\n"
			       "      --lenient     accept what the upstream reader accepts\n"
			       "  -h, --help        show this help\n");
			return 0;
		default:
			return 2;	/* getopt printed the error line */
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "memprofctl dump: expected one TRACE argument; try 'memprofctl dump --help'.\n");
		return 2;
	}
	ropts.warn_ctx = argv[optind];
	r = memprof_reader__open(argv[optind], &ropts, err, sizeof(err));
	if (!r) {
		fprintf(stderr, "memprofctl dump: Failed to open trace '%s': %s\n", argv[optind], err);
		return 1;
	}
	print_info(stdout, memprof_reader__info(r), json);
	if (mp_ctx__in_progress(memprof_reader__info(r)->context))
		fprintf(stderr, "memprofctl dump: '%s' is in progress (still being written, or its "
			"writer stopped before completing it): its events so far\n", argv[optind]);
	while ((ret = memprof_reader__next(r, &ev)) > 0) {
		print_event(stdout, r, &ev, json, first);
		first = false;
	}
	if (json)
		fputs(first ? "]}\n" : "\n]}\n", stdout);
	if (ret < 0)
		fprintf(stderr, "memprofctl dump: Failed to read trace '%s': %s\n", argv[optind],
			memprof_reader__errmsg(r));
	memprof_reader__free(r);
	if (fflush(stdout) || ferror(stdout)) {
		fprintf(stderr, "memprofctl dump: Failed to write output: %s\n", strerror(errno));
		return 1;
	}
	return ret < 0 ? 1 : 0;
}
