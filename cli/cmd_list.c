// SPDX-License-Identifier: LGPL-2.1-or-later
/* memprofctl list: the profiles memprofd knows, one line each. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "cli/commands.h"
#include "cli/ctl_bus.h"
#include "cli/ctl_opts.h"

/* Print ListProfiles' profiles; also count states into @counts (sampling, stopped, discarded). */
int ctl_list_profiles(struct memprof_client *c, const char *cmd, bool print,
		      unsigned int counts[3])
{
	struct memprof_client_entry *v;
	struct json_object *arr = NULL;
	size_t n;
	int r;

	r = memprof_client__list(c, &v, &n);
	if (r < 0) {
		ctl_fail_client(cmd, c, r);
		return r;
	}
	if (print && ctl.json)
		arr = json_object_new_array();
	else if (print)
		printf("%-6s %-10s %-6s %-10s %s\n", "ID", "STATE", "OWNER", "RATE", "PROCESSES");
	for (size_t i = 0; i < n; i++) {
		const struct memprof_client_entry *e = &v[i];

		if (counts)
			counts[e->state == MEMPROF_CLIENT_SAMPLING ? 0 :
			       e->state == MEMPROF_CLIENT_STOPPED ? 1 : 2]++;
		if (arr) {
			struct json_object *o = json_object_new_object();
			struct json_object *pj = json_object_new_array();

			json_object_object_add(o, "id", json_object_new_int64(e->id));
			json_object_object_add(o, "state", json_object_new_string(e->state_name));
			json_object_object_add(o, "path", json_object_new_string(e->path));
			json_object_object_add(o, "owner_uid", json_object_new_int64(e->owner_uid));
			json_object_object_add(o, "rate", json_object_new_double(e->rate));
			for (size_t k = 0; k < e->npids; k++)
				json_object_array_add(pj, json_object_new_int64(e->pids[k]));
			json_object_object_add(o, "pids", pj);
			json_object_array_add(arr, o);
		} else if (print) {
			printf("%-6" PRIu32 " %-10s %-6" PRIu32 " %-10g", e->id, e->state_name,
			       e->owner_uid, e->rate);
			for (size_t k = 0; k < e->npids; k++)
				printf(" %d", (int)e->pids[k]);
			printf("\n");
		}
	}
	memprof_client_list__free(v, n);
	if (arr) {
		printf("%s\n", json_object_to_json_string_ext(arr, JSON_C_TO_STRING_PRETTY |
							       JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(arr);
	}
	return (int)n;
}

int cmd_list(int argc, char **argv)
{
	struct memprof_client *cl = NULL;
	int r;

	r = ctl_opts__json_help(argc, argv,
				"Usage: memprofctl list [OPTIONS]\n"
				"\n"
				"List memprofd's profiles: id, state, owner, rate and processes.\n");
	if (r >= 0)
		return r;
	if (optind != argc) {
		fprintf(stderr, "memprofctl list: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (ctl_bus_connect(&cl, false) < 0)
		return 1;
	r = ctl_list_profiles(cl, "list", true, NULL);
	memprof_client__free(cl);
	return r < 0 ? 1 : 0;
}
