// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * A systemd unit as a target (Start's "unit"): its cgroup, asked of systemd's manager. A unit
 * that is not running has no cgroup yet: it gets the one systemd will make, its slice's path
 * and its name (systemd.slice(5)), watched from its creation. The manager is reached on its
 * private socket (root, no bus daemon needed) or else on the system bus; every call has a
 * short timeout, so a stuck manager cannot hold memprofd's event loop for long.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-bus.h>

#include "daemon/service/memprofd.h"

#define SD_DEST		"org.freedesktop.systemd1"
#define SD_PATH		"/org/freedesktop/systemd1"
#define SD_MANAGER	"org.freedesktop.systemd1.Manager"
#define SD_UNIT		"org.freedesktop.systemd1.Unit"
#define SD_TIMEOUT_US	(2 * 1000000ull)

/* The unit types that have a cgroup, and the interface of each that has ControlGroup. */
static const struct {
	const char *suffix, *iface;
} unit_types[] = {
	{ ".service", "org.freedesktop.systemd1.Service" },
	{ ".scope", "org.freedesktop.systemd1.Scope" },
	{ ".slice", "org.freedesktop.systemd1.Slice" },
	{ ".socket", "org.freedesktop.systemd1.Socket" },
	{ ".mount", "org.freedesktop.systemd1.Mount" },
	{ ".swap", "org.freedesktop.systemd1.Swap" },
};

static const char *const no_procs[] = { ".target", ".timer", ".path", ".device", ".automount" };

static bool valid_unit_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       strchr(":-_.\\@", c);
}

/* @name's cgroup interface, @full the name with ".service" added when it has no type. */
static const char *unit_iface(const char *name, char *full, size_t len)
{
	const char *dot = strrchr(name, '.');

	for (const char *s = name; *s; s++)
		if (!valid_unit_char(*s))
			return NULL;
	if (!name[0] || strlen(name) > 255)
		return NULL;
	for (size_t i = 0; dot && i < sizeof(unit_types) / sizeof(unit_types[0]); i++)
		if (!strcmp(dot, unit_types[i].suffix)) {
			snprintf(full, len, "%s", name);
			return unit_types[i].iface;
		}
	for (size_t i = 0; dot && i < sizeof(no_procs) / sizeof(no_procs[0]); i++)
		if (!strcmp(dot, no_procs[i]))
			return NULL;	/* a unit type without processes */
	snprintf(full, len, "%s.service", name);
	return unit_types[0].iface;
}

/* "a-b-c.slice" -> "/a.slice/a-b.slice/a-b-c.slice"; "-.slice" (the root) -> "". */
static void slice_path(const char *slice, char *out, size_t len)
{
	size_t o = 0, n = strlen(slice) - strlen(".slice");

	out[0] = '\0';
	if (!strcmp(slice, "-.slice"))
		return;
	for (size_t i = 0; i <= n && o < len; i++)
		if (i == n || slice[i] == '-')
			o += (size_t)snprintf(out + o, len - o, "/%.*s.slice", (int)i, slice);
}

static int manager_open(sd_bus **bus, bool *direct)
{
	int r = sd_bus_new(bus);

	if (r >= 0)
		r = sd_bus_set_address(*bus, "unix:path=/run/systemd/private");
	if (r >= 0)
		r = sd_bus_start(*bus);
	if (r >= 0) {
		*direct = true;
	} else {
		*bus = sd_bus_flush_close_unref(*bus);
		*direct = false;
		r = sd_bus_open_system(bus);
	}
	if (r >= 0)
		r = sd_bus_set_method_call_timeout(*bus, SD_TIMEOUT_US);
	return r;
}

int svc_unit_cgroup(const char *name, char *out, size_t out_len, char *err, size_t err_len)
{
	sd_bus_error e = SD_BUS_ERROR_NULL;
	sd_bus_message *reply = NULL;
	char full[300], *state = NULL, *cg = NULL, *slice = NULL, sp[1024];
	const char *iface, *upath, *dest;
	sd_bus *bus = NULL;
	bool direct;
	int r;

	iface = unit_iface(name, full, sizeof(full));
	if (!iface) {
		snprintf(err, err_len, "Invalid unit name '%s': a service, scope, slice, socket, "
			 "mount or swap unit", name);
		return -EINVAL;
	}
	r = manager_open(&bus, &direct);
	if (r < 0) {
		snprintf(err, err_len, "Cannot ask systemd about unit %s: no service manager "
			 "(/run/systemd/private, the system bus): %s", full, strerror(-r));
		goto out;
	}
	dest = direct ? NULL : SD_DEST;
	r = sd_bus_call_method(bus, dest, SD_PATH, SD_MANAGER, "LoadUnit", &e, &reply, "s",
			       full);
	if (r >= 0)
		r = sd_bus_message_read(reply, "o", &upath);
	if (r < 0) {
		snprintf(err, err_len, "systemd cannot load unit %s: %s", full,
			 e.message ? e.message : strerror(-r));
		goto out;
	}
	r = sd_bus_get_property_string(bus, dest, upath, SD_UNIT, "LoadState", &e, &state);
	if (r >= 0 && strcmp(state, "loaded")) {
		snprintf(err, err_len, "Unit %s is %s", full,
			 !strcmp(state, "not-found") ? "not known to systemd (not-found)" : state);
		r = !strcmp(state, "not-found") ? -ENOENT : -EINVAL;
		goto out;
	}
	if (r >= 0)
		r = sd_bus_get_property_string(bus, dest, upath, iface, "ControlGroup", &e, &cg);
	if (r >= 0 && !cg[0] && strcmp(iface, unit_types[2].iface))
		r = sd_bus_get_property_string(bus, dest, upath, iface, "Slice", &e, &slice);
	if (r < 0) {
		snprintf(err, err_len, "Cannot read the cgroup of unit %s from systemd: %s", full,
			 e.message ? e.message : strerror(-r));
		goto out;
	}
	if (cg[0]) {
		snprintf(out, out_len, "%s", cg);
	} else {	/* not running: where systemd will put it */
		slice_path(slice ? slice : full, sp, sizeof(sp));
		if (slice)
			snprintf(out, out_len, "%s/%s", sp, full);
		else
			snprintf(out, out_len, "%s", sp[0] ? sp : "/");
	}
	r = 0;
out:
	free(state);
	free(cg);
	free(slice);
	sd_bus_error_free(&e);
	sd_bus_message_unref(reply);
	sd_bus_flush_close_unref(bus);
	return r;
}
