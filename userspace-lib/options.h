/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The options of a profile, each defined once: its key (Start's a{sv} key in <memprof/bus.h>'s
 * protocol and the manifest's), its type and D-Bus signature, memprofctl's flag, its default,
 * bounds and help text. memprofctl's getopt tables and --help lines, memprofd's parsing of
 * Start's options and of its configuration, and libmemprof's client encoding all iterate this
 * table, and one validator (mp_option__parse(), mp_option__check()) refuses a bad value with
 * the same sentence wherever it comes from. Internal (not exported by libmemprof.so).
 *
 * Adding an option: one MP_OPTIONS() row, then its use (struct mp_opts has the field; the
 * engine reads it from mp_profile_opts.opt) and its line in the man pages.
 */
#ifndef MP_OPTIONS_H
#define MP_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/*
 * The smallest sampling rate: one sample per 8 GB allocated on average. The BPF sampler draws
 * its gaps in 32.32 fixed point (bpf/gap.h), exact for rates down to 2^-31 (4.7e-10); far
 * below, the gap constant no longer fits and sampling would be wrong rather than rare.
 */
#define MP_RATE_MIN		1e-9
#define MP_RATE_DEFAULT		1e-4
/* Frames per sample: MP_MAX_STACK of bpf/memprof.h (bpf_get_stack's limit). */
#define MP_CALLSTACK_MAX	127
/* Bytes of stack copied per sample: MP_USTACK_DEFAULT and MP_USTACK_MAX of bpf/memprof.h. */
#define MP_STACK_COPY_DEFAULT	(16 << 10)
#define MP_STACK_COPY_MAX	(64 << 10)
/* The longest text option (a path, a unit's name). */
#define MP_OPT_STRING_MAX	4095
/* The longest duration a profile may ask for (366 days, in µs). */
#define MP_MAX_DURATION_US	(366ULL * 24 * 3600 * 1000000)

/* Value types: the C type of the field in struct mp_opts and how text is read. */
#define MP_OPT_CTYPE_DOUBLE	double
#define MP_OPT_CTYPE_UINT	uint32_t
#define MP_OPT_CTYPE_BOOL	bool	/* the flag sets the opposite of the default */
#define MP_OPT_CTYPE_DURATION	uint64_t	/* µs; text "30s", "500ms", "5m", "1h", "10" */
#define MP_OPT_CTYPE_ENUM	uint32_t	/* index in the row's names */
#define MP_OPT_CTYPE_FILE	struct mp_opt_file
#define MP_OPT_CTYPE_STRING	const char *	/* borrowed: argv's, the message's */

/* A trace's file: a path on the command line, a descriptor on the bus. */
struct mp_opt_file {
	const char *path;
	int fd;
};

/*
 * X(ID, key, TYPE, signature, flag, short flag, argument, what, default, min, max, names, help)
 *	key	the D-Bus key of Start's options and the manifest's key
 *	flag	memprofctl's long option; short flag 0: none
 *	what	the value's name in messages ("Invalid sampling rate '2': ...")
 *	names	ENUM: the names, in the order of the values ("auto", "fp", "dwarf")
 *	help	--help's text; "%R" is the range, "%D" the default, '\n' a new line
 */
#define MP_OPTIONS(X)									\
	X(RATE, rate, DOUBLE, "d", "rate", 'r', "RATE", "sampling rate",		\
	  MP_RATE_DEFAULT, MP_RATE_MIN, 1, NULL,						\
	  "sampling rate per 8-byte word, %R\n(default %D)")					\
	X(CALLSTACK_SIZE, callstack_size, UINT, "u", "callstack-size", 0, "N",		\
	  "callstack size", MP_CALLSTACK_MAX, 1, MP_CALLSTACK_MAX, NULL,			\
	  "frames kept per sample, %R (default %D)")						\
	X(UNWIND, unwind, ENUM, "s", "unwind", 0, "MODE", "unwind mode", 0, 0, 2,		\
	  MP_OPT_NAMES("auto", "fp", "dwarf"),							\
	  "backtraces: fp (frame pointers), dwarf (DWARF CFI on\na copy of the stack), "	\
	  "auto (dwarf where frame\npointers are missing) (default %D)")			\
	X(STACK_COPY_SIZE, stack_copy_size, UINT, "u", "stack-copy-size", 0, "BYTES",	\
	  "stack copy size", MP_STACK_COPY_DEFAULT, 0, MP_STACK_COPY_MAX, NULL,		\
	  "bytes of stack copied per sample for dwarf and auto,\n%R (default %D; 0: no copy)")	\
	X(DURATION, duration_us, DURATION, "t", "duration", 'd', "T", "duration", 0, 0,	\
	  MP_MAX_DURATION_US, NULL, "stop sampling after T (e.g. 30s, 500ms, 5m, 1h)")		\
	X(OUTPUT, output, FILE, "h", "output", 'o', "FILE", "output", 0, 0, 0, NULL,		\
	  "write the first process' trace to FILE; forked\nchildren write FILE.<pid>")		\
	X(FOLLOW_FORKS, follow_forks, BOOL, "b", "no-follow-forks", 0, NULL,		\
	  "follow forks", 1, 0, 1, NULL, "do not profile the children the processes fork")	\
	X(FORMAT_VERSION, format_version, UINT, "q", "format-version", 0, "V",		\
	  "format version", 2, 2, 3, NULL, "memtrace format version, %R (default %D)")		\
	X(ZSTD, zstd, BOOL, "b", "zstd", 'z', NULL, "zstd", 0, 0, 1, NULL,			\
	  "compress the traces with zstd")							\
	X(MAX_OVERHEAD, max_overhead, DOUBLE, "d", "max-overhead", 0, "PCT",		\
	  "overhead budget", 0, 0, 1e6, NULL,							\
	  "detach a process whose probes cost more than PCT %%\nof one CPU, 1 s average, "	\
	  "%R\n(default %D: no limit)")								\
	X(UNIT, unit, STRING, "s", "unit", 0, "NAME", "unit", 0, 0, 0, NULL,			\
	  "profile every process of systemd unit NAME, now\nand after its restarts")		\
	X(CGROUP, cgroup, STRING, "s", "cgroup", 0, "PATH", "cgroup", 0, 0, 0, NULL,		\
	  "profile every process in cgroup PATH or below it,\nnow and later")			\
	X(EXE, exe, STRING, "s", "exe", 0, "PATH", "executable", 0, 0, 0, NULL,		\
	  "profile every process that runs executable PATH,\nnow and later")

#define MP_OPT_NAMES(...)	((const char *const[]){ __VA_ARGS__, NULL })

enum mp_opt_id {
#define MP_OPT_ENUM_(ID, key, TYPE, ...) MP_OPT_##ID,
	MP_OPTIONS(MP_OPT_ENUM_)
#undef MP_OPT_ENUM_
	MP_OPT__COUNT
};

enum mp_opt_type {
	MP_OPT_T_DOUBLE,
	MP_OPT_T_UINT,
	MP_OPT_T_BOOL,
	MP_OPT_T_DURATION,
	MP_OPT_T_ENUM,
	MP_OPT_T_FILE,
	MP_OPT_T_STRING,
};

/* The values of a profile's options; a field not in @set holds its default. */
struct mp_opts {
	uint32_t set;		/* bit (1 << MP_OPT_<ID>): given by the user */
#define MP_OPT_FIELD_(ID, key, TYPE, ...) MP_OPT_CTYPE_##TYPE key;
	MP_OPTIONS(MP_OPT_FIELD_)
#undef MP_OPT_FIELD_
};

_Static_assert(MP_OPT__COUNT <= 32, "struct mp_opts.set has 32 bits");

struct mp_option {
	enum mp_opt_id id;
	const char *key;
	enum mp_opt_type type;
	const char *sig;
	const char *flag;
	char short_flag;
	const char *arg;
	const char *what;
	double def, min, max;
	const char *const *names;
	const char *help;
	size_t offset;		/* of the value in struct mp_opts */
};

extern const struct mp_option mp_options[MP_OPT__COUNT];

#define MP_OPT_IS_SET(o, ID)	(((o)->set >> MP_OPT_##ID) & 1)

/* The row of D-Bus key @key, or NULL. */
const struct mp_option *mp_option__by_key(const char *key);
/* The row of long flag @flag, or NULL. */
const struct mp_option *mp_option__by_flag(const char *flag);

/* Every option at its default, none set, no file (fd -1). */
void mp_opts__init(struct mp_opts *o);

/*
 * Read @text (a command-line argument or a configuration value; NULL for a flag without
 * argument) into @o's field of @opt, check it and mark it set. Returns 0, or -EINVAL with
 * "Invalid <what> '<text>': <range>" in @err.
 */
int mp_option__parse(const struct mp_option *opt, const char *text, struct mp_opts *o,
		     char *err, size_t err_len);
/* Check @o's field of @opt against its bounds. Returns 0 or -EINVAL with a sentence in @err. */
int mp_option__check(const struct mp_option *opt, const struct mp_opts *o, char *err,
		     size_t err_len);
/* mp_option__check() of every option @o sets. */
int mp_opts__check(const struct mp_opts *o, char *err, size_t err_len);

/* The range @opt accepts, as messages and --help state it ("1 to 127", "fp, dwarf or auto"). */
void mp_option__range(const struct mp_option *opt, char *buf, size_t len);
/* @opt's value in @o as text ("1e-4", "auto", "16384"). */
void mp_option__format(const struct mp_option *opt, const struct mp_opts *o, char *buf,
		       size_t len);

/*
 * --help lines of @opt: "  -r, --rate RATE" then its help text (@help instead when not NULL)
 * from column @col, continued lines indented to @col.
 */
void mp_option__print_help(FILE *f, const struct mp_option *opt, int col, const char *help);

#endif
