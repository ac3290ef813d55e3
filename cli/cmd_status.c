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

struct daemon_info {
	char *version, *state_dir;
	double rate;
	uint32_t callstack, max_profiles, clients;
	uint64_t refused;
	char *stat_names[16];
	uint64_t stat_values[16];
	unsigned int nstats;
};

static void daemon_info_done(struct daemon_info *i)
{
	free(i->version);
	free(i->state_dir);
	for (unsigned int k = 0; k < i->nstats; k++)
		free(i->stat_names[k]);
}

static int read_stats(sd_bus_message *m, struct daemon_info *i)
{
	const char *name;
	uint64_t v;
	int r;

	r = sd_bus_message_enter_container(m, 'v', "a(st)");
	if (r >= 0)
		r = sd_bus_message_enter_container(m, 'a', "(st)");
	while (r >= 0 && (r = sd_bus_message_read(m, "(st)", &name, &v)) > 0) {
		if (i->nstats < 16) {
			i->stat_names[i->nstats] = strdup(name);
			i->stat_values[i->nstats++] = v;
		}
	}
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	return r;
}

static int get_daemon_info(sd_bus *bus, struct daemon_info *i)
{
	sd_bus_error error = SD_BUS_ERROR_NULL;
	sd_bus_message *reply = NULL;
	int r;

	r = sd_bus_call_method(bus, NULL, "/org/memprofd", "org.freedesktop.DBus.Properties",
			       "GetAll", &error, &reply, "s", "org.memprofd.Manager1");
	if (r < 0) {
		ctl_fail_bus("status", "Failed to read memprofd's state", &error, r);
		sd_bus_error_free(&error);
		return r;
	}
	r = sd_bus_message_enter_container(reply, 'a', "{sv}");
	while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'e', "sv")) > 0) {
		const char *k, *s;

		r = sd_bus_message_read(reply, "s", &k);
		if (r < 0)
			break;
		if (!strcmp(k, "Version") || !strcmp(k, "StateDirectory")) {
			r = sd_bus_message_read(reply, "v", "s", &s);
			if (r >= 0 && k[0] == 'V')
				i->version = strdup(s);
			else if (r >= 0)
				i->state_dir = strdup(s);
		} else if (!strcmp(k, "DefaultRate")) {
			r = sd_bus_message_read(reply, "v", "d", &i->rate);
		} else if (!strcmp(k, "DefaultCallstackSize")) {
			r = sd_bus_message_read(reply, "v", "u", &i->callstack);
		} else if (!strcmp(k, "MaxProfiles")) {
			r = sd_bus_message_read(reply, "v", "u", &i->max_profiles);
		} else if (!strcmp(k, "Clients")) {
			r = sd_bus_message_read(reply, "v", "u", &i->clients);
		} else if (!strcmp(k, "RefusedClients")) {
			r = sd_bus_message_read(reply, "v", "t", &i->refused);
		} else if (!strcmp(k, "Stats")) {
			r = read_stats(reply, i);
		} else {
			r = sd_bus_message_skip(reply, "v");
		}
		if (r >= 0)
			r = sd_bus_message_exit_container(reply);
	}
	sd_bus_message_unref(reply);
	if (r >= 0 && (!i->version || !i->state_dir))
		r = -EBADMSG;
	if (r < 0)
		ctl_fail("status", "Failed to parse memprofd's state: %s", strerror(-r));
	return r;
}

static int daemon_status(sd_bus *bus)
{
	struct daemon_info i = { 0 };
	unsigned int counts[3] = { 0 };
	int r;

	r = get_daemon_info(bus, &i);
	if (r >= 0)
		r = ctl_list_profiles(bus, "status", false, counts);
	if (r < 0)
		goto out;
	if (ctl.json) {
		struct json_object *o = json_object_new_object(), *st = json_object_new_object();

		json_object_object_add(o, "version", json_object_new_string(i.version));
		json_object_object_add(o, "socket", json_object_new_string(ctl.socket));
		json_object_object_add(o, "state_directory", json_object_new_string(i.state_dir));
		json_object_object_add(o, "default_rate", json_object_new_double(i.rate));
		json_object_object_add(o, "default_callstack_size",
				       json_object_new_int64(i.callstack));
		json_object_object_add(o, "max_profiles", json_object_new_int64(i.max_profiles));
		json_object_object_add(o, "sampling", json_object_new_int64(counts[0]));
		json_object_object_add(o, "stopped", json_object_new_int64(counts[1]));
		json_object_object_add(o, "discarded", json_object_new_int64(counts[2]));
		json_object_object_add(o, "clients", json_object_new_int64(i.clients));
		json_object_object_add(o, "refused_clients", json_object_new_uint64(i.refused));
		for (unsigned int k = 0; k < i.nstats; k++)
			json_object_object_add(st, i.stat_names[k],
					       json_object_new_uint64(i.stat_values[k]));
		json_object_object_add(o, "bpf", st);
		printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
							       JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(o);
	} else {
		printf("memprofd %s at %s\n", i.version, ctl.socket);
		printf("  Profiles:  %u sampling, %u stopped, %u discarded (at most %" PRIu32
		       " sampling or stopped)\n", counts[0], counts[1], counts[2], i.max_profiles);
		printf("  Defaults:  rate %g per word, callstack %" PRIu32 " frames\n", i.rate,
		       i.callstack);
		printf("  Traces:    %s/profiles\n", i.state_dir);
		printf("  Clients:   %" PRIu32 " connected, %" PRIu64 " refused\n", i.clients,
		       i.refused);
		printf("  BPF:      ");
		for (unsigned int k = 0; k < i.nstats; k++)
			printf(" %s %" PRIu64 "%s", i.stat_names[k], i.stat_values[k],
			       k + 1 < i.nstats ? "," : "");
		printf("\n");
	}
out:
	daemon_info_done(&i);
	return r < 0 ? 1 : 0;
}

int cmd_status(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	struct ctl_profile p;
	sd_bus *bus = NULL;
	uint32_t id = 0;
	int c, ret;

	while ((c = getopt_long(argc, argv, "jh", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			ctl.json = true;
			break;
		case 'h':
			printf("Usage: memprofctl status [OPTIONS] [ID]\n"
			       "\n"
			       "Without ID: memprofd's version, defaults, profile counts and BPF\n"
			       "counters. With ID: the profile's settings, state and, per process,\n"
			       "samples, frees, estimated allocated and live bytes, drops and trace.\n"
			       "\n"
			       "Options:\n"
			       "  -j, --json   print JSON\n"
			       "  -h, --help   show this help\n");
			return 0;
		default:
			fprintf(stderr, "Try 'memprofctl status --help'.\n");
			return 2;
		}
	}
	if (argc - optind > 1) {
		fprintf(stderr, "memprofctl status: expected at most one profile ID\n");
		return 2;
	}
	if (optind < argc && ctl_parse_id("status", argv[optind], &id) < 0)
		return 2;
	if (ctl_bus_connect(&bus, false) < 0)
		return 1;
	if (!id) {
		ret = daemon_status(bus);
	} else if (ctl_bus_get_profile(bus, "status", id, &p) < 0) {
		ret = 1;
	} else {
		ctl_print_profile(&p);
		ctl_profile_done(&p);
		ret = 0;
	}
	sd_bus_flush_close_unref(bus);
	return ret;
}
