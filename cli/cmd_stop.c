// SPDX-License-Identifier: LGPL-2.1-or-later
/* memprofctl stop ID: end a profile's sampling (cmd_discard.c shares the code). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/ctl_bus.h"
#include "cli/ctl_opts.h"

/* Parse a profile id argument: 1..UINT32_MAX. */
int ctl_parse_id(const char *cmd, const char *s, uint32_t *id)
{
	unsigned long v;
	char *end;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v < 1 || v > UINT32_MAX) {
		fprintf(stderr, "memprofctl %s: invalid profile id '%s'\n", cmd, s);
		return -EINVAL;
	}
	*id = (uint32_t)v;
	return 0;
}

int ctl_stop_or_discard(int argc, char **argv, bool discard)
{
	static const char discard_usage[] =
		"Usage: memprofctl discard [OPTIONS] ID\n"
		"\n"
		"Discard a stopped profile: stop tracking its sampled blocks and\n"
		"complete its traces.\n";
	static const char stop_usage[] =
		"Usage: memprofctl stop [OPTIONS] ID\n"
		"\n"
		"Stop sampling new allocations; frees of blocks already sampled are\n"
		"still recorded until the profile is discarded.\n";
	const char *cmd = discard ? "discard" : "stop";
	struct memprof_client *cl = NULL;
	uint32_t id;
	int r;

	r = ctl_opts__json_help(argc, argv, discard ? discard_usage : stop_usage);
	if (r >= 0)
		return r;
	if (optind + 1 != argc) {
		fprintf(stderr, "memprofctl %s: expected one profile ID; try 'memprofctl %s "
			"--help'.\n", cmd, cmd);
		return 2;
	}
	if (ctl_parse_id(cmd, argv[optind], &id) < 0)
		return 2;
	if (ctl_bus_connect(&cl, false) < 0)
		return 1;
	r = discard ? memprof_client__discard(cl, id) : memprof_client__stop(cl, id);
	if (r < 0)
		ctl_fail_client(cmd, cl, r);
	memprof_client__free(cl);
	if (r < 0)
		return 1;
	if (ctl.json)
		printf("{\"id\": %" PRIu32 ", \"state\": \"%s\"}\n", id,
		       discard ? "discarded" : "stopped");
	else
		printf("Profile %" PRIu32 " %s.\n", id, discard ? "discarded" : "stopped");
	return 0;
}

int cmd_stop(int argc, char **argv)
{
	return ctl_stop_or_discard(argc, argv, false);
}
