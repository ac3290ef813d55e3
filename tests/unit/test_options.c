// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The options table and its validator (userspace-lib/options.h): defaults, bounds, types,
 * the sentences bad values get, and the table's own consistency. With --table, prints one
 * line per option for tests/unit/options-table.sh: key, D-Bus signature, flag, short flag
 * ("-" for none), argument ("-" for none), default (as --help says it; a duration's in "us"),
 * maximum.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include <memprof/bus.h>
#include <memprof/preload.h>

#include "tests/unit/test.h"
#include "userspace-lib/options.h"

static bool refused(enum mp_opt_id id, const char *text, const char *want)
{
	struct mp_opts o;
	char err[256] = "";
	int r;

	mp_opts__init(&o);
	r = mp_option__parse(&mp_options[id], text, &o, err, sizeof(err));
	return ASSERT_EQ(r, -EINVAL, text) && ASSERT_STREQ(err, want, text) &&
	       ASSERT_EQ(o.set, 0, "a refused value is not set");
}

static void test_defaults(void)
{
	struct mp_opts o;

	memset(&o, 0x5a, sizeof(o));
	mp_opts__init(&o);
	ASSERT_EQ(o.set, 0, "nothing set");
	ASSERT_TRUE(o.rate == 1e-4, "rate 1e-4");
	ASSERT_EQ(o.callstack_size, 127, "callstack_size");
	ASSERT_EQ(o.unwind, 0, "unwind auto");
	ASSERT_EQ(o.stack_copy_size, 16384, "stack_copy_size");
	ASSERT_EQ(o.duration_us, 0, "duration: never");
	ASSERT_TRUE(o.follow_forks, "follow_forks");
	ASSERT_EQ(o.format_version, 2, "format_version");
	ASSERT_TRUE(!o.zstd, "zstd");
	ASSERT_TRUE(o.max_overhead == 0, "max_overhead");
	ASSERT_TRUE(!o.output.path, "no output path");
	ASSERT_EQ(o.output.fd, -1, "no output fd");
	ASSERT_TRUE(!o.unit && !o.cgroup && !o.exe, "no target");
	/* Every default is within its own bounds. */
	for (size_t i = 0; i < MP_OPT__COUNT; i++) {
		char err[256] = "";

		ASSERT_OK(mp_option__check(&mp_options[i], &o, err, sizeof(err)), err);
	}
}

static void test_parse(void)
{
	struct mp_opts o;
	char err[256] = "";

	mp_opts__init(&o);
	ASSERT_OK(mp_option__parse(&mp_options[MP_OPT_RATE], "0.5", &o, err, sizeof(err)), err);
	ASSERT_TRUE(o.rate == 0.5 && MP_OPT_IS_SET(&o, RATE), "rate 0.5 set");
	ASSERT_OK(mp_option__parse(&mp_options[MP_OPT_RATE], "1e-9", &o, err, sizeof(err)), err);
	ASSERT_OK(mp_option__parse(&mp_options[MP_OPT_RATE], "1", &o, err, sizeof(err)), err);
	ASSERT_OK(mp_option__parse(&mp_options[MP_OPT_CALLSTACK_SIZE], "1", &o, err, sizeof(err)),
		  err);
	ASSERT_OK(mp_option__parse(&mp_options[MP_OPT_CALLSTACK_SIZE], "0127", &o, err,
				   sizeof(err)), err);
	ASSERT_EQ(o.callstack_size, 127, "decimal, not octal");
	ASSERT_OK(mp_option__parse(&mp_options[MP_OPT_UNWIND], "dwarf", &o, err, sizeof(err)),
		  err);
	ASSERT_STREQ(mp_options[MP_OPT_UNWIND].names[o.unwind], "dwarf", "unwind dwarf");
	ASSERT_OK(mp_option__parse(&mp_options[MP_OPT_STACK_COPY_SIZE], "0", &o, err,
				   sizeof(err)), err);
	ASSERT_TRUE(o.stack_copy_size == 0 && MP_OPT_IS_SET(&o, STACK_COPY_SIZE),
		    "0: no copy, and set");
	ASSERT_OK(mp_option__parse(&mp_options[MP_OPT_DURATION], "500ms", &o, err, sizeof(err)),
		  err);
	ASSERT_EQ(o.duration_us, 500000, "500ms");
	ASSERT_OK(mp_option__parse(&mp_options[MP_OPT_DURATION], "2m", &o, err, sizeof(err)), err);
	ASSERT_EQ(o.duration_us, 120000000, "2m");
	ASSERT_OK(mp_option__parse(&mp_options[MP_OPT_FORMAT_VERSION], "3", &o, err, sizeof(err)),
		  err);
	ASSERT_EQ(o.format_version, 3, "format 3");
	/* A flag without argument sets the opposite of the default. */
	ASSERT_OK(mp_option__parse(&mp_options[MP_OPT_FOLLOW_FORKS], NULL, &o, err, sizeof(err)),
		  err);
	ASSERT_TRUE(!o.follow_forks && MP_OPT_IS_SET(&o, FOLLOW_FORKS), "--no-follow-forks");
	ASSERT_OK(mp_option__parse(&mp_options[MP_OPT_ZSTD], NULL, &o, err, sizeof(err)), err);
	ASSERT_TRUE(o.zstd, "--zstd");
	ASSERT_OK(mp_option__parse(&mp_options[MP_OPT_ZSTD], "no", &o, err, sizeof(err)), err);
	ASSERT_TRUE(!o.zstd, "zstd=no (a configuration's text)");
	ASSERT_OK(mp_option__parse(&mp_options[MP_OPT_OUTPUT], "t.ctf", &o, err, sizeof(err)), err);
	ASSERT_STREQ(o.output.path, "t.ctf", "output path");
	ASSERT_OK(mp_option__parse(&mp_options[MP_OPT_MAX_OVERHEAD], "2.5", &o, err, sizeof(err)),
		  err);
	ASSERT_TRUE(o.max_overhead == 2.5, "max_overhead");
	ASSERT_OK(mp_option__parse(&mp_options[MP_OPT_EXE], "/usr/bin/python3", &o, err,
				   sizeof(err)), err);
	ASSERT_TRUE(o.exe && !strcmp(o.exe, "/usr/bin/python3") && MP_OPT_IS_SET(&o, EXE),
		    "exe, as given");
	ASSERT_OK(mp_option__parse(&mp_options[MP_OPT_UNIT], "cron", &o, err, sizeof(err)), err);
	ASSERT_STREQ(o.unit, "cron", "unit");
	ASSERT_OK(mp_opts__check(&o, err, sizeof(err)), err);
}

static void test_bad_input(void)
{
	refused(MP_OPT_CGROUP, "", "Invalid cgroup '': 1 to 4095 characters");
	refused(MP_OPT_RATE, "0", "Invalid sampling rate '0': in [1e-9, 1]");
	refused(MP_OPT_RATE, "1.5", "Invalid sampling rate '1.5': in [1e-9, 1]");
	refused(MP_OPT_RATE, "1e-10", "Invalid sampling rate '1e-10': in [1e-9, 1]");
	refused(MP_OPT_RATE, "nan", "Invalid sampling rate 'nan': in [1e-9, 1]");
	refused(MP_OPT_RATE, "abc", "Invalid sampling rate 'abc': in [1e-9, 1]");
	refused(MP_OPT_RATE, "0.1x", "Invalid sampling rate '0.1x': in [1e-9, 1]");
	refused(MP_OPT_RATE, "", "Invalid sampling rate '': in [1e-9, 1]");
	refused(MP_OPT_CALLSTACK_SIZE, "0", "Invalid callstack size '0': 1 to 127");
	refused(MP_OPT_CALLSTACK_SIZE, "128", "Invalid callstack size '128': 1 to 127");
	refused(MP_OPT_CALLSTACK_SIZE, "-1", "Invalid callstack size '-1': 1 to 127");
	refused(MP_OPT_CALLSTACK_SIZE, "4294967297", "Invalid callstack size '4294967297': 1 to 127");
	refused(MP_OPT_CALLSTACK_SIZE, "12x", "Invalid callstack size '12x': 1 to 127");
	refused(MP_OPT_CALLSTACK_SIZE, " 12", "Invalid callstack size ' 12': 1 to 127");
	refused(MP_OPT_STACK_COPY_SIZE, "65537", "Invalid stack copy size '65537': 0 to 65536");
	refused(MP_OPT_FORMAT_VERSION, "4", "Invalid format version '4': 2 or 3");
	refused(MP_OPT_FORMAT_VERSION, "1", "Invalid format version '1': 2 or 3");
	refused(MP_OPT_UNWIND, "lbr", "Invalid unwind mode 'lbr': auto, fp or dwarf");
	refused(MP_OPT_UNWIND, "", "Invalid unwind mode '': auto, fp or dwarf");
	refused(MP_OPT_DURATION, "0", "Invalid duration '0' (e.g. 30s, 500ms, 5m)");
	refused(MP_OPT_DURATION, "60x", "Invalid duration '60x' (e.g. 30s, 500ms, 5m)");
	refused(MP_OPT_DURATION, "0.1us", "Invalid duration '0.1us': from 1us to 366 days");
	refused(MP_OPT_DURATION, "367d", "Invalid duration '367d' (e.g. 30s, 500ms, 5m)");
	refused(MP_OPT_DURATION, "9000h", "Invalid duration '9000h': from 1us to 366 days");
	refused(MP_OPT_MAX_OVERHEAD, "-1", "Invalid overhead budget '-1': in [0, 1e6]");
	refused(MP_OPT_MAX_OVERHEAD, "2e6", "Invalid overhead budget '2e6': in [0, 1e6]");
	refused(MP_OPT_ZSTD, "maybe", "Invalid zstd 'maybe': true or false");
}

/* Values from D-Bus (mp_opts__read_bus()) are checked as numbers. */
static void test_check(void)
{
	struct mp_opts o;
	char err[256];

	mp_opts__init(&o);
	o.rate = 2;
	ASSERT_EQ(mp_option__check(&mp_options[MP_OPT_RATE], &o, err, sizeof(err)), -EINVAL,
		  "rate 2");
	ASSERT_STREQ(err, "Invalid sampling rate '2': in [1e-9, 1]", "rate 2");
	o.rate = NAN;
	ASSERT_EQ(mp_option__check(&mp_options[MP_OPT_RATE], &o, err, sizeof(err)), -EINVAL,
		  "NaN");
	o.rate = 1e-4;
	o.unwind = 3;
	ASSERT_EQ(mp_option__check(&mp_options[MP_OPT_UNWIND], &o, err, sizeof(err)), -EINVAL,
		  "unwind 3");
	ASSERT_STREQ(err, "Invalid unwind mode '?': auto, fp or dwarf", "unwind 3");
	o.unwind = 0;
	o.duration_us = MP_MAX_DURATION_US + 1;
	/* Not set: mp_opts__check() looks only at what the user gave. */
	ASSERT_OK(mp_opts__check(&o, err, sizeof(err)), "unset duration not checked");
	o.set |= 1u << MP_OPT_DURATION;
	ASSERT_EQ(mp_opts__check(&o, err, sizeof(err)), -EINVAL, "duration over 366 days");
	ASSERT_STREQ(err, "Invalid duration '31622400000001us': from 1us to 366 days", "duration");
}

static void test_table(void)
{
	for (size_t i = 0; i < MP_OPT__COUNT; i++) {
		const struct mp_option *a = &mp_options[i];

		ASSERT_EQ(a->id, i, a->key);
		ASSERT_TRUE(mp_option__by_key(a->key) == a, a->key);
		ASSERT_TRUE(mp_option__by_flag(a->flag) == a, a->flag);
		ASSERT_TRUE(strlen(a->sig) == 1 && strchr("dubqtsh", a->sig[0]), a->key);
		ASSERT_TRUE(a->help && a->what && a->min <= a->max, a->key);
		ASSERT_TRUE((a->type == MP_OPT_T_ENUM) == (a->names != NULL), a->key);
		ASSERT_TRUE((a->type == MP_OPT_T_BOOL) == (a->arg == NULL), a->key);
		for (size_t j = 0; j < i; j++) {
			const struct mp_option *b = &mp_options[j];

			ASSERT_TRUE(strcmp(a->key, b->key), a->key);
			ASSERT_TRUE(strcmp(a->flag, b->flag), a->flag);
			ASSERT_TRUE(!a->short_flag || a->short_flag != b->short_flag, a->flag);
		}
	}
	ASSERT_TRUE(!mp_option__by_key("Rate") && !mp_option__by_flag("rat"), "exact names");
	/* libmemprof-preload's public default (MEMPROF_RATE unset) is the table's. */
	ASSERT_TRUE(mp_options[MP_OPT_RATE].def == MEMPROF_PRELOAD_DEFAULT_RATE, "preload rate");
	/* The protocol header's name of the output option is the table's. */
	ASSERT_STREQ(mp_options[MP_OPT_OUTPUT].key, MEMPROF_BUS_OPT_OUTPUT, "output key");
	ASSERT_STREQ(mp_options[MP_OPT_OUTPUT].sig, MEMPROF_BUS_OPT_OUTPUT_SIG, "output sig");
}

static void test_help(void)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!ASSERT_TRUE(f, "open_memstream"))
		return;
	mp_option__print_help(f, &mp_options[MP_OPT_RATE], 27, NULL);
	mp_option__print_help(f, &mp_options[MP_OPT_STACK_COPY_SIZE], 27, NULL);
	mp_option__print_help(f, &mp_options[MP_OPT_MAX_OVERHEAD], 27, NULL);
	mp_option__print_help(f, &mp_options[MP_OPT_ZSTD], 27, "squeeze %D");
	fclose(f);
	ASSERT_STREQ(buf,
		     "  -r, --rate RATE          sampling rate per 8-byte word, in [1e-9, 1]\n"
		     "                           (default 1e-4)\n"
		     "      --stack-copy-size BYTES\n"
		     "                           bytes of stack copied per sample for dwarf and auto,\n"
		     "                           0 to 65536 (default 16384; 0: no copy)\n"
		     "      --max-overhead PCT   detach a process whose probes cost more than PCT %\n"
		     "                           of one CPU, 1 s average, in [0, 1e6]\n"
		     "                           (default 0: no limit)\n"
		     "  -z, --zstd               squeeze false\n", "help lines");
	free(buf);
}

static void print_table(void)
{
	struct mp_opts d;
	char def[64];

	mp_opts__init(&d);
	for (size_t i = 0; i < MP_OPT__COUNT; i++) {
		const struct mp_option *o = &mp_options[i];

		mp_option__format(o, &d, def, sizeof(def));
		printf("%s %s %s %s%c %s %s %.17g\n", o->key, o->sig, o->flag,
		       o->short_flag ? "-" : "", o->short_flag ? o->short_flag : '-',
		       o->arg ? o->arg : "-", def[0] ? def : "-", o->max);
	}
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--table")) {
		print_table();
		return 0;
	}
	RUN(test_defaults);
	RUN(test_parse);
	RUN(test_bad_input);
	RUN(test_check);
	RUN(test_table);
	RUN(test_help);
	return test_exit();
}
