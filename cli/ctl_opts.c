// SPDX-License-Identifier: LGPL-2.1-or-later
/* memprofctl's profile options from the options table (ctl_opts.h). */
#include <string.h>

#include "cli/commands.h"
#include "cli/ctl_opts.h"

void ctl_opts__init(struct ctl_opts *t, uint32_t mask, const struct option *extra,
		    const char *extra_shorts)
{
	size_t n = 0, s = 0;

	memset(t, 0, sizeof(*t));
	t->mask = mask;
	if (extra_shorts[0] == '+')
		t->shorts[s++] = '+';
	for (size_t i = 0; i < MP_OPT__COUNT; i++) {
		const struct mp_option *opt = &mp_options[i];

		if (!((mask >> i) & 1))
			continue;
		t->longopts[n++] = (struct option){
			.name = opt->flag,
			.has_arg = opt->arg ? required_argument : no_argument,
			.val = opt->short_flag ? opt->short_flag : CTL_OPT_VAL(i),
		};
		if (opt->short_flag) {
			t->shorts[s++] = opt->short_flag;
			if (opt->arg)
				t->shorts[s++] = ':';
		}
	}
	for (; extra->name && n + 1 < sizeof(t->longopts) / sizeof(t->longopts[0]); extra++)
		t->longopts[n++] = *extra;
	snprintf(t->shorts + s, sizeof(t->shorts) - s, "%s",
		 extra_shorts + (extra_shorts[0] == '+'));
}

const struct mp_option *ctl_opts__option(const struct ctl_opts *t, int c)
{
	for (size_t i = 0; i < MP_OPT__COUNT; i++) {
		const struct mp_option *opt = &mp_options[i];

		if (((t->mask >> i) & 1) && (c == CTL_OPT_VAL(i) ||
					     (opt->short_flag && c == opt->short_flag)))
			return opt;
	}
	return NULL;
}

int ctl_opts__parse(const struct mp_option *opt, const char *arg, struct mp_opts *o)
{
	char err[256];

	if (mp_option__parse(opt, arg, o, err, sizeof(err)) < 0) {
		fprintf(stderr, "memprofctl %s: %s\n", ctl.cmd, err);
		return 2;
	}
	return 0;
}

void ctl_opts__help(FILE *f, uint32_t mask, const char *const help[MP_OPT__COUNT])
{
	for (size_t i = 0; i < MP_OPT__COUNT; i++)
		if ((mask >> i) & 1)
			mp_option__print_help(f, &mp_options[i], CTL_HELP_COL,
					      help ? help[i] : NULL);
}
