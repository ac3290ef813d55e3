/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Writing a{sv} dictionaries of memprofd's protocol (<memprof/bus.h>): Start's and
 * AddProcess' options (the client), ProcessStatus (the daemon). Internal to libmemprof and
 * memprofd.
 */
#ifndef MP_BUS_DICT_H
#define MP_BUS_DICT_H

#include <systemd/sd-bus.h>

/*
 * Append one {sv} entry, @key with a variant of the single complete @type holding the value
 * that follows, to the a{sv} open in @m. Returns 0 or -errno.
 */
int mp_bus_dict_append(sd_bus_message *m, const char *key, const char *type, ...);
/* The same for a key of <memprof/bus.h>, of its signature KEY_SIG. */
#define MP_BUS_DICT_PUT(m, key, ...) mp_bus_dict_append(m, key, key##_SIG, __VA_ARGS__)

#endif
