/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * memprofctl's profile options (attach, record) from the options table
 * (userspace-lib/options.h): getopt_long's table, the parsing of each argument and the
 * --help lines, so that a command lists and reads exactly the table's flags.
 */
#ifndef MEMPROFCTL_CTL_OPTS_H
#define MEMPROFCTL_CTL_OPTS_H

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>

#include "userspace-lib/options.h"

/* getopt_long's value for row @i of the table when it has no short flag. */
#define CTL_OPT_VAL(i)		(0x1000 + (int)(i))
#define CTL_OPT_BIT(ID)		(1u << MP_OPT_##ID)
/* The help texts' column. */
#define CTL_HELP_COL		27

struct ctl_opts {
	uint32_t mask;			/* the table's options the command takes */
	struct option longopts[MP_OPT__COUNT + 24];
	char shorts[64];
};

/*
 * Fill @t with the options of @mask, then the command's own @extra (ended by an empty
 * entry, values not in the table's range) and its @extra_shorts ("+wjh").
 */
void ctl_opts__init(struct ctl_opts *t, uint32_t mask, const struct option *extra,
		    const char *extra_shorts);
/* The table's row of getopt's result @c, or NULL (one of the command's own options). */
const struct mp_option *ctl_opts__option(const struct ctl_opts *t, int c);
/* Read @arg into @o; on error print "memprofctl CMD: <why>" and return 2, else 0. */
int ctl_opts__parse(const struct mp_option *opt, const char *arg, struct mp_opts *o);
/* The --help lines of the options of @mask; @help[ID] replaces a row's text when not NULL. */
void ctl_opts__help(FILE *f, uint32_t mask, const char *const help[MP_OPT__COUNT]);

#endif
