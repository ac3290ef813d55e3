// SPDX-License-Identifier: LGPL-2.1-or-later
/* memprofctl list: the profiles memprofd knows, one line each. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "cli/commands.h"
#include "cli/ctl_bus.h"

/* Print ListProfiles' a(usoudau); also count states into @counts (sampling, stopped, discarded). */
int ctl_list_profiles(sd_bus *bus, const char *cmd, bool print, unsigned int counts[3])
{
	sd_bus_error error = SD_BUS_ERROR_NULL;
	sd_bus_message *reply = NULL;
	struct json_object *arr = NULL;
	unsigned int n = 0;
	int r;

	r = sd_bus_call_method(bus, NULL, "/org/memprofd", "org.memprofd.Manager1", "ListProfiles",
			       &error, &reply, "");
	if (r < 0) {
		ctl_fail_bus(cmd, "Failed to list profiles", &error, r);
		sd_bus_error_free(&error);
		return r;
	}
	if (print && ctl.json)
		arr = json_object_new_array();
	else if (print)
		printf("%-6s %-10s %-6s %-10s %s\n", "ID", "STATE", "OWNER", "RATE", "PROCESSES");
	r = sd_bus_message_enter_container(reply, 'a', "(usoudau)");
	while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'r', "usoudau")) > 0) {
		const char *state, *path;
		uint32_t id, owner, pid;
		struct json_object *o = NULL, *pj = NULL;
		double rate;

		r = sd_bus_message_read(reply, "usoud", &id, &state, &path, &owner, &rate);
		if (r < 0)
			break;
		n++;
		if (counts)
			counts[!strcmp(state, "sampling") ? 0 : !strcmp(state, "stopped") ? 1 : 2]++;
		if (arr) {
			o = json_object_new_object();
			pj = json_object_new_array();
			json_object_object_add(o, "id", json_object_new_int64(id));
			json_object_object_add(o, "state", json_object_new_string(state));
			json_object_object_add(o, "path", json_object_new_string(path));
			json_object_object_add(o, "owner_uid", json_object_new_int64(owner));
			json_object_object_add(o, "rate", json_object_new_double(rate));
		} else if (print) {
			printf("%-6" PRIu32 " %-10s %-6" PRIu32 " %-10g", id, state, owner, rate);
		}
		r = sd_bus_message_enter_container(reply, 'a', "u");
		while (r >= 0 && (r = sd_bus_message_read(reply, "u", &pid)) > 0) {
			if (pj)
				json_object_array_add(pj, json_object_new_int64(pid));
			else if (print)
				printf(" %" PRIu32, pid);
		}
		if (r >= 0)
			r = sd_bus_message_exit_container(reply);
		if (r >= 0)
			r = sd_bus_message_exit_container(reply);
		if (o) {
			json_object_object_add(o, "pids", pj);
			json_object_array_add(arr, o);
		} else if (print) {
			printf("\n");
		}
	}
	sd_bus_message_unref(reply);
	if (r < 0) {
		json_object_put(arr);
		ctl_fail(cmd, "Failed to parse the list of profiles: %s", strerror(-r));
		return r;
	}
	if (arr) {
		printf("%s\n", json_object_to_json_string_ext(arr, JSON_C_TO_STRING_PRETTY |
							       JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(arr);
	}
	return (int)n;
}

int cmd_list(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	sd_bus *bus = NULL;
	int c, r;

	while ((c = getopt_long(argc, argv, "jh", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			ctl.json = true;
			break;
		case 'h':
			printf("Usage: memprofctl list [OPTIONS]\n"
			       "\n"
			       "List memprofd's profiles: id, state, owner, rate and processes.\n"
			       "\n"
			       "Options:\n"
			       "  -j, --json   print JSON\n"
			       "  -h, --help   show this help\n");
			return 0;
		default:
			fprintf(stderr, "Try 'memprofctl list --help'.\n");
			return 2;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "memprofctl list: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (ctl_bus_connect(&bus, false) < 0)
		return 1;
	r = ctl_list_profiles(bus, "list", true, NULL);
	sd_bus_flush_close_unref(bus);
	return r < 0 ? 1 : 0;
}
