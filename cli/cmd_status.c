// SPDX-License-Identifier: LGPL-2.1-or-later
/* memprofctl status [ID]: memprofd's state, or one profile's settings and per-process figures. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "cli/commands.h"
#include "cli/ctl_bus.h"
#include "cli/ctl_opts.h"

static int daemon_status(struct memprof_client *cl)
{
	struct memprof_client_daemon *d = NULL;
	unsigned int counts[3] = { 0 };
	int r;

	r = memprof_client__daemon(cl, &d);
	if (r < 0)
		ctl_fail_client("status", cl, r);
	else
		r = ctl_list_profiles(cl, "status", false, counts);
	if (r < 0)
		goto out;
	if (ctl.json) {
		struct json_object *o = json_object_new_object(), *st = json_object_new_object();

		json_object_object_add(o, "version", json_object_new_string(d->version));
		json_object_object_add(o, "socket", json_object_new_string(ctl.socket));
		json_object_object_add(o, "state_directory", json_object_new_string(d->state_dir));
		json_object_object_add(o, "default_rate", json_object_new_double(d->default_rate));
		json_object_object_add(o, "default_callstack_size",
				       json_object_new_int64(d->default_callstack_size));
		json_object_object_add(o, "max_profiles", json_object_new_int64(d->max_profiles));
		json_object_object_add(o, "sampling", json_object_new_int64(counts[0]));
		json_object_object_add(o, "stopped", json_object_new_int64(counts[1]));
		json_object_object_add(o, "discarded", json_object_new_int64(counts[2]));
		json_object_object_add(o, "clients", json_object_new_int64(d->clients));
		json_object_object_add(o, "refused_clients", json_object_new_uint64(d->refused_clients));
		for (size_t k = 0; k < d->nstats; k++)
			json_object_object_add(st, d->stat_names[k],
					       json_object_new_uint64(d->stat_values[k]));
		json_object_object_add(o, "bpf", st);
		if (d->mechanisms)
			json_object_object_add(o, "mechanisms",
					       json_object_new_string(d->mechanisms));
		printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
							       JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(o);
	} else {
		printf("memprofd %s at %s\n", d->version, ctl.socket);
		printf("  Profiles:  %u sampling, %u stopped, %u discarded (at most %" PRIu32
		       " sampling or stopped)\n", counts[0], counts[1], counts[2], d->max_profiles);
		printf("  Defaults:  rate %g per word, callstack %u frames\n", d->default_rate,
		       d->default_callstack_size);
		printf("  Traces:    %s/profiles\n", d->state_dir);
		printf("  Clients:   %u connected, %" PRIu64 " refused\n", d->clients,
		       d->refused_clients);
		printf("  BPF:      ");
		for (size_t k = 0; k < d->nstats; k++)
			printf(" %s %" PRIu64 "%s", d->stat_names[k], d->stat_values[k],
			       k + 1 < d->nstats ? "," : "");
		printf("\n");
		if (d->mechanisms)
			printf("  Kernel:    %s\n", d->mechanisms);
	}
out:
	memprof_client_daemon__free(d);
	return r < 0 ? 1 : 0;
}

int cmd_status(int argc, char **argv)
{
	struct memprof_client_profile *p;
	struct memprof_client *cl = NULL;
	uint32_t id = 0;
	int r, ret;

	r = ctl_opts__json_help(argc, argv,
				"Usage: memprofctl status [OPTIONS] [ID]\n"
				"\n"
				"Without ID: memprofd's version, defaults, profile counts, BPF\n"
				"counters and the kernel mechanisms in use. With ID: the profile's\n"
				"settings, state and, per process, samples, frees, estimated\n"
				"allocated and live bytes, drops and trace.\n");
	if (r >= 0)
		return r;
	if (argc - optind > 1) {
		fprintf(stderr, "memprofctl status: expected at most one profile ID\n");
		return 2;
	}
	if (optind < argc && ctl_parse_id("status", argv[optind], &id) < 0)
		return 2;
	if (ctl_bus_connect(&cl, false) < 0)
		return 1;
	if (!id) {
		ret = daemon_status(cl);
	} else if ((r = memprof_client__profile(cl, id, &p)) < 0) {
		ret = ctl_fail_client("status", cl, r);
	} else {
		ctl_print_profile(p);
		memprof_client_profile__free(p);
		ret = 0;
	}
	memprof_client__free(cl);
	return ret;
}
