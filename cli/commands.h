/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* memprofctl's command table: each command lives in cli/cmd_<name>.c. */
#ifndef MEMPROFCTL_COMMANDS_H
#define MEMPROFCTL_COMMANDS_H

#include <stdbool.h>

/* Options common to every command, parsed before the command name. */
struct ctl_globals {
	bool json;		/* --json: machine-readable output */
	const char *socket;	/* --socket PATH: memprofd's private bus socket */
	const char *cmd;	/* the command running, for messages ("attach") */
	unsigned int verbose;	/* -v, --verbose, once or twice: more of record's loader log */
};

extern struct ctl_globals ctl;

struct ctl_command {
	const char *name;
	int (*run)(int argc, char **argv);	/* argv[0] is the command name */
	const char *args;			/* one-line synopsis of the arguments */
	const char *help;			/* one-line description */
};

/*
 * The options of a command that has only -j/--json and -h/--help (@help, its usage and
 * description, is printed with them on --help). Returns -1 to go on (optind is at the first
 * argument), else the exit status: 0 after --help, 2 after a usage error getopt printed.
 */
int ctl_parse_json_help(int argc, char **argv, const char *help);

/*
 * Each command returns the process exit status: 0 on success, 1 on failure (after printing
 * one error line), 2 on a usage error; "record" returns its child's status.
 */
int cmd_attach(int argc, char **argv);
int cmd_discard(int argc, char **argv);
int cmd_dump(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_stop(int argc, char **argv);
int cmd_record(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_top(int argc, char **argv);

#endif
