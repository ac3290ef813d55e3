// SPDX-License-Identifier: LGPL-2.1-or-later
/* memprofctl: the command-line front end of memprofd. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memprof/bus.h>

#include "cli/commands.h"

struct ctl_globals ctl;

static const struct ctl_command commands[] = {
	{ "attach", cmd_attach, "[OPTIONS] PID...", "start profiling running processes" },
	{ "discard", cmd_discard, "[OPTIONS] ID", "complete a stopped profile's traces" },
	{ "dump", cmd_dump, "[OPTIONS] TRACE", "print a trace, one line per event" },
	{ "list", cmd_list, "[OPTIONS]", "list the profiles" },
	{ "record", cmd_record, "[OPTIONS] -- CMD [ARGS...]", "run CMD and sample its allocations" },
	{ "report", cmd_report, "[OPTIONS] TRACE...", "top sites, leaks, flame graph, pprof" },
	{ "status", cmd_status, "[OPTIONS] [ID]", "show memprofd's or a profile's state" },
	{ "stop", cmd_stop, "[OPTIONS] ID", "stop sampling (frees still recorded)" },
	{ "top", cmd_top, "[OPTIONS] ID|PID|TRACE...", "live view of a profile's sites" },
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: memprofctl [OPTIONS] COMMAND [ARGS...]\n"
		"\n"
		"Profile the memory allocations of native processes with memprofd.\n"
		"\n"
		"Options:\n"
		"  -j, --json          print data as JSON\n"
		"  -s, --socket PATH   memprofd's control socket (default /run/memprofd/bus)\n"
		"  -v, --verbose       record: the probe loader's notes too (twice: every probe)\n"
		"  -h, --help          show this help\n"
		"      --version       show the version\n"
		"\n"
		"Commands:\n");
	for (size_t i = 0; i < N_COMMANDS; i++)
		fprintf(f, "  %-10s %-36s %s\n", commands[i].name, commands[i].args,
			commands[i].help);
	fprintf(f, "\nRun 'memprofctl COMMAND --help' for a command's options.\n");
}

int ctl_parse_json_help(int argc, char **argv, const char *help)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	int c;

	while ((c = getopt_long(argc, argv, "jh", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			ctl.json = true;
			break;
		case 'h':
			printf("%s\n"
			       "Options:\n"
			       "  -j, --json   print JSON\n"
			       "  -h, --help   show this help\n", help);
			return 0;
		default:
			return 2;	/* getopt printed the error line */
		}
	}
	return -1;
}

/* Exact match first, then a unique prefix (as bpftool does). */
static const struct ctl_command *find_command(const char *name)
{
	const struct ctl_command *found = NULL;
	size_t len = strlen(name);

	for (size_t i = 0; i < N_COMMANDS; i++) {
		if (!strcmp(commands[i].name, name))
			return &commands[i];
		if (!strncmp(commands[i].name, name, len)) {
			if (found)
				return NULL;
			found = &commands[i];
		}
	}
	return found;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "socket", required_argument, NULL, 's' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{}
	};
	const struct ctl_command *cmd;
	char prog[64];
	int c, idx;

	ctl.socket = getenv("MEMPROFD_SOCKET");
	if (!ctl.socket)
		ctl.socket = MEMPROF_BUS_SOCKET;
	/* getopt's one error line starts with argv[0]: "memprofctl: unrecognized option..." */
	argv[0] = "memprofctl";

	/* '+': stop at the command name; its own options are its business. */
	while ((c = getopt_long(argc, argv, "+js:vh", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			ctl.json = true;
			break;
		case 's':
			ctl.socket = optarg;
			break;
		case 'v':
			ctl.verbose++;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("memprofctl %s\n", MP_VERSION);
			return 0;
		default:
			return 2;	/* getopt printed the error line */
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "memprofctl: no command given; try 'memprofctl --help'.\n");
		return 2;
	}
	idx = optind;
	cmd = find_command(argv[idx]);
	if (!cmd) {
		fprintf(stderr, "memprofctl: unknown or ambiguous command '%s'; try 'memprofctl --help'.\n",
			argv[idx]);
		return 2;
	}
	/*
	 * Each command parses its own options with getopt_long from a fresh start; getopt names
	 * it in its error lines ("memprofctl attach: option '--rate' requires an argument").
	 */
	ctl.cmd = cmd->name;
	snprintf(prog, sizeof(prog), "memprofctl %s", cmd->name);
	argv[idx] = prog;
	optind = 0;
	return cmd->run(argc - idx, argv + idx);
}
