/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Writing a{sv} dictionaries of memprofd's protocol (<memprof/bus.h>): Start's and
 * AddProcess' options (the client), ProcessStatus (the daemon). Internal to libmemprof and
 * memprofd.
 */
#ifndef MP_BUS_DICT_H
#define MP_BUS_DICT_H

#include <stddef.h>
#include <systemd/sd-bus.h>

#include "userspace-lib/options.h"

/*
 * Append one {sv} entry, @key with a variant of the single complete @type holding the value
 * that follows, to the a{sv} open in @m. Returns 0 or -errno.
 */
int mp_bus_dict_append(sd_bus_message *m, const char *key, const char *type, ...);
/* The same for a key of <memprof/bus.h>, of its signature KEY_SIG. */
#define MP_BUS_DICT_PUT(m, key, ...) mp_bus_dict_append(m, key, key##_SIG, __VA_ARGS__)

/*
 * Start's options (options.h): append every option @o sets, each as its row's key and
 * signature, to the a{sv} open in @m (a file as its descriptor, when >= 0). Returns 0 or
 * -errno.
 */
int mp_opts__append_bus(sd_bus_message *m, const struct mp_opts *o);
/*
 * Read one {sv} entry of Start's options, entered in @m and its key already read as @key,
 * into @o: the variant must have its row's signature, the value is checked (a file: a regular
 * file open for writing, the descriptor owned by @m). Returns 0; -ENOENT for a key not in the
 * table, -EINVAL for a bad value, each with a sentence in @err; or -errno of sd-bus.
 */
int mp_opts__read_bus(sd_bus_message *m, const char *key, struct mp_opts *o, char *err,
		      size_t err_len);

#endif
