// SPDX-License-Identifier: LGPL-2.1-or-later
/* The table of a profile's options and its one validator (options.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "userspace-lib/options.h"
#include "userspace-lib/units.h"

const struct mp_option mp_options[MP_OPT__COUNT] = {
#define MP_OPT_ROW_(ID, k, TYPE, s, fl, sh, a, w, d, lo, hi, nm, h)			\
	[MP_OPT_##ID] = { .id = MP_OPT_##ID, .key = #k, .type = MP_OPT_T_##TYPE, .sig = s,	\
			  .flag = fl, .short_flag = sh, .arg = a, .what = w, .def = d,		\
			  .min = lo, .max = hi, .names = nm, .help = h,			\
			  .offset = offsetof(struct mp_opts, k) },
	MP_OPTIONS(MP_OPT_ROW_)
#undef MP_OPT_ROW_
};

/* a text option's field (FIELD() of "const char *" would put the const on the char) */
typedef const char *mp_opt_text;

#define FIELD(o, opt, type) ((type *)((char *)(o) + (opt)->offset))
#define CFIELD(o, opt, type) ((const type *)((const char *)(o) + (opt)->offset))

const struct mp_option *mp_option__by_key(const char *key)
{
	for (size_t i = 0; i < MP_OPT__COUNT; i++)
		if (!strcmp(mp_options[i].key, key))
			return &mp_options[i];
	return NULL;
}

const struct mp_option *mp_option__by_flag(const char *flag)
{
	for (size_t i = 0; i < MP_OPT__COUNT; i++)
		if (!strcmp(mp_options[i].flag, flag))
			return &mp_options[i];
	return NULL;
}

void mp_opts__init(struct mp_opts *o)
{
	memset(o, 0, sizeof(*o));
	for (size_t i = 0; i < MP_OPT__COUNT; i++) {
		const struct mp_option *opt = &mp_options[i];

		switch (opt->type) {
		case MP_OPT_T_DOUBLE:
			*FIELD(o, opt, double) = opt->def;
			break;
		case MP_OPT_T_UINT:
		case MP_OPT_T_ENUM:
			*FIELD(o, opt, uint32_t) = (uint32_t)opt->def;
			break;
		case MP_OPT_T_BOOL:
			*FIELD(o, opt, bool) = opt->def != 0;
			break;
		case MP_OPT_T_DURATION:
			*FIELD(o, opt, uint64_t) = (uint64_t)opt->def;
			break;
		case MP_OPT_T_FILE:
			*FIELD(o, opt, struct mp_opt_file) = (struct mp_opt_file){ .fd = -1 };
			break;
		case MP_OPT_T_STRING:
			*FIELD(o, opt, mp_opt_text) = NULL;
			break;
		}
	}
}

static size_t nnames(const struct mp_option *opt)
{
	size_t n = 0;

	while (opt->names[n])
		n++;
	return n;
}

/*
 * @v as the man pages write it: the shortest exact text, "1e-4" and "1e6" rather than
 * "0.0001" and "1e+06" outside [1e-3, 1e5).
 */
static void format_number(double v, char *buf, size_t len)
{
	char *e, *to, *from;

	if (v == 0 || (fabs(v) >= 1e-3 && fabs(v) < 1e5) || !isfinite(v)) {
		snprintf(buf, len, "%g", v);
		return;
	}
	for (int prec = 0; prec < 17; prec++) {
		snprintf(buf, len, "%.*e", prec, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	e = strchr(buf, 'e');
	if (!e)
		return;
	/* "e-04" -> "e-4", "e+06" -> "e6" */
	to = from = e + 1;
	if (*from == '+')
		from++;
	else if (*from == '-')
		*to++ = *from++;
	while (*from == '0' && from[1])
		from++;
	memmove(to, from, strlen(from) + 1);
}

void mp_option__range(const struct mp_option *opt, char *buf, size_t len)
{
	size_t n, off = 0;

	switch (opt->type) {
	case MP_OPT_T_DOUBLE: {
		char lo[32], hi[32];

		format_number(opt->min, lo, sizeof(lo));
		format_number(opt->max, hi, sizeof(hi));
		snprintf(buf, len, "in [%s, %s]", lo, hi);
		break;
	}
	case MP_OPT_T_UINT:
		snprintf(buf, len, "%.0f %s %.0f", opt->min, opt->max == opt->min + 1 ? "or" : "to",
			 opt->max);
		break;
	case MP_OPT_T_DURATION:
		snprintf(buf, len, "from 1us to %.0f days", opt->max / 86400e6);
		break;
	case MP_OPT_T_ENUM:
		buf[0] = '\0';
		n = nnames(opt);
		for (size_t i = 0; i < n && off < len; i++)
			off += (size_t)snprintf(buf + off, len - off, "%s%s",
						i == 0 ? "" : i + 1 == n ? " or " : ", ",
						opt->names[i]);
		break;
	case MP_OPT_T_BOOL:
		snprintf(buf, len, "true or false");
		break;
	case MP_OPT_T_FILE:
		snprintf(buf, len, "a regular file");
		break;
	case MP_OPT_T_STRING:
		snprintf(buf, len, "1 to %d characters", MP_OPT_STRING_MAX);
		break;
	}
}

void mp_option__format(const struct mp_option *opt, const struct mp_opts *o, char *buf,
		       size_t len)
{
	uint32_t e;

	switch (opt->type) {
	case MP_OPT_T_DOUBLE:
		format_number(*CFIELD(o, opt, double), buf, len);
		break;
	case MP_OPT_T_UINT:
		snprintf(buf, len, "%u", *CFIELD(o, opt, uint32_t));
		break;
	case MP_OPT_T_DURATION:
		snprintf(buf, len, "%lluus", (unsigned long long)*CFIELD(o, opt, uint64_t));
		break;
	case MP_OPT_T_ENUM:
		e = *CFIELD(o, opt, uint32_t);
		snprintf(buf, len, "%s", e < nnames(opt) ? opt->names[e] : "?");
		break;
	case MP_OPT_T_BOOL:
		snprintf(buf, len, "%s", *CFIELD(o, opt, bool) ? "true" : "false");
		break;
	case MP_OPT_T_FILE:
		snprintf(buf, len, "%s", CFIELD(o, opt, struct mp_opt_file)->path ?: "");
		break;
	case MP_OPT_T_STRING:
		snprintf(buf, len, "%s", *CFIELD(o, opt, mp_opt_text) ?: "");
		break;
	}
}

static int invalid(const struct mp_option *opt, const char *text, char *err, size_t err_len)
{
	char range[128];

	mp_option__range(opt, range, sizeof(range));
	snprintf(err, err_len, "Invalid %s '%s': %s", opt->what, text, range);
	return -EINVAL;
}

int mp_option__check(const struct mp_option *opt, const struct mp_opts *o, char *err,
		     size_t err_len)
{
	double v;
	char text[64];

	switch (opt->type) {
	case MP_OPT_T_DOUBLE:
		v = *CFIELD(o, opt, double);
		break;
	case MP_OPT_T_UINT:
	case MP_OPT_T_ENUM:
		v = *CFIELD(o, opt, uint32_t);
		break;
	case MP_OPT_T_DURATION:
		v = (double)*CFIELD(o, opt, uint64_t);
		break;
	case MP_OPT_T_STRING: {
		const char *s = *CFIELD(o, opt, mp_opt_text);
		size_t n = s ? strnlen(s, MP_OPT_STRING_MAX + 1) : 0;

		if (!s || (n >= 1 && n <= MP_OPT_STRING_MAX))
			return 0;	/* unset, or a text of its bounds */
		snprintf(text, sizeof(text), "%.*s%s", n > 40 ? 40 : (int)n, s ? s : "",
			 n > 40 ? "..." : "");
		return invalid(opt, text, err, err_len);
	}
	default:
		return 0;
	}
	/* !(v >= min): NaN is out of every range. */
	if (!(v >= opt->min) || v > opt->max || (opt->type == MP_OPT_T_ENUM && v >= nnames(opt))) {
		mp_option__format(opt, o, text, sizeof(text));
		return invalid(opt, text, err, err_len);
	}
	return 0;
}

int mp_opts__check(const struct mp_opts *o, char *err, size_t err_len)
{
	for (size_t i = 0; i < MP_OPT__COUNT; i++) {
		int r;

		if (!((o->set >> i) & 1))
			continue;
		r = mp_option__check(&mp_options[i], o, err, err_len);
		if (r < 0)
			return r;
	}
	return 0;
}

/* A decimal number without sign, as a double (exact up to 2^53). */
static int parse_whole(const char *s, double *out)
{
	unsigned long long v;
	char *end;

	if (s[0] < '0' || s[0] > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);	/* decimal: "0100" is a hundred */
	if (errno || *end)
		return -EINVAL;
	*out = (double)v;
	return 0;
}

/* A duration (units.h) in [1 µs, MP_MAX_DURATION_US]: -EINVAL, or -ERANGE outside. */
static int mp_duration__parse(const char *s, uint64_t *us)
{
	uint64_t v;
	int r = mp_parse_duration(s, &v);

	if (r < 0)
		return r;
	if (!v && strtod(s, NULL) == 0)
		return -EINVAL;	/* no duration at all */
	if (v < 1 || v > MP_MAX_DURATION_US)
		return -ERANGE;
	*us = v;
	return 0;
}

int mp_option__parse(const struct mp_option *opt, const char *text, struct mp_opts *o,
		     char *err, size_t err_len)
{
	double v = 0;
	char *end;
	int r;

	if (!text && opt->type != MP_OPT_T_BOOL)
		return invalid(opt, "", err, err_len);
	switch (opt->type) {
	case MP_OPT_T_DOUBLE:
		errno = 0;
		v = strtod(text, &end);
		if (errno || end == text || *end)
			return invalid(opt, text, err, err_len);
		*FIELD(o, opt, double) = v;
		break;
	case MP_OPT_T_UINT:
		if (parse_whole(text, &v) < 0 || v > UINT32_MAX)
			return invalid(opt, text, err, err_len);
		*FIELD(o, opt, uint32_t) = (uint32_t)v;
		break;
	case MP_OPT_T_DURATION:
		r = mp_duration__parse(text, FIELD(o, opt, uint64_t));
		if (r == -EINVAL) {
			snprintf(err, err_len, "Invalid %s '%s' (e.g. 30s, 500ms, 5m)", opt->what,
				 text);
			return r;
		}
		if (r < 0)
			return invalid(opt, text, err, err_len);
		break;
	case MP_OPT_T_ENUM:
		r = -EINVAL;
		for (size_t i = 0; opt->names[i]; i++) {
			if (!strcmp(opt->names[i], text)) {
				*FIELD(o, opt, uint32_t) = (uint32_t)i;
				r = 0;
			}
		}
		if (r < 0)
			return invalid(opt, text, err, err_len);
		break;
	case MP_OPT_T_BOOL:
		if (!text) {
			*FIELD(o, opt, bool) = opt->def == 0;
		} else if (!strcmp(text, "true") || !strcmp(text, "yes") || !strcmp(text, "1")) {
			*FIELD(o, opt, bool) = true;
		} else if (!strcmp(text, "false") || !strcmp(text, "no") || !strcmp(text, "0")) {
			*FIELD(o, opt, bool) = false;
		} else {
			return invalid(opt, text, err, err_len);
		}
		break;
	case MP_OPT_T_FILE:
		FIELD(o, opt, struct mp_opt_file)->path = text;
		break;
	case MP_OPT_T_STRING:
		*FIELD(o, opt, mp_opt_text) = text;
		break;
	}
	if (mp_option__check(opt, o, err, err_len) < 0)
		return invalid(opt, text ? text : "", err, err_len);
	o->set |= 1u << opt->id;
	return 0;
}

void mp_option__print_help(FILE *f, const struct mp_option *opt, int col, const char *help)
{
	char spec[64], range[128], def[64], text[512];
	struct mp_opts d;
	size_t n = 0;
	int w;

	mp_opts__init(&d);
	mp_option__range(opt, range, sizeof(range));
	mp_option__format(opt, &d, def, sizeof(def));
	/* "%R", "%D" and "%%" of the help text. */
	for (const char *s = help ? help : opt->help; *s && n + 1 < sizeof(text); s++) {
		const char *sub = NULL;

		if (s[0] == '%' && (s[1] == 'R' || s[1] == 'D' || s[1] == '%')) {
			sub = s[1] == 'R' ? range : s[1] == 'D' ? def : "%";
			s++;
		}
		if (sub)
			n += (size_t)snprintf(text + n, sizeof(text) - n, "%s", sub);
		else
			text[n++] = *s;
		if (n >= sizeof(text))
			n = sizeof(text) - 1;
	}
	text[n] = '\0';

	if (opt->short_flag)
		w = snprintf(spec, sizeof(spec), "  -%c, --%s", opt->short_flag, opt->flag);
	else
		w = snprintf(spec, sizeof(spec), "      --%s", opt->flag);
	if (opt->arg)
		w += snprintf(spec + w, sizeof(spec) - (size_t)w, " %s", opt->arg);
	fputs(spec, f);
	if (w >= col - 1)
		fprintf(f, "\n%*s", col, "");
	else
		fprintf(f, "%*s", col - w, "");
	for (const char *s = text; *s; s++) {
		fputc(*s, f);
		if (*s == '\n' && s[1])
			fprintf(f, "%*s", col, "");
	}
	fputc('\n', f);
}
