// SPDX-License-Identifier: LGPL-2.1-or-later
/* a{sv} entries of memprofd's protocol, for both ends (bus_dict.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "userspace-lib/client/bus_dict.h"
#include "userspace-lib/codec/outfile.h"

int mp_bus_dict_append(sd_bus_message *m, const char *key, const char *type, ...)
{
	va_list ap;
	int r;

	r = sd_bus_message_open_container(m, 'e', "sv");
	if (r >= 0)
		r = sd_bus_message_append(m, "s", key);
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'v', type);
	if (r >= 0) {
		va_start(ap, type);
		r = sd_bus_message_appendv(m, type, ap);
		va_end(ap);
	}
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	return r < 0 ? r : 0;
}

int mp_opts__append_bus(sd_bus_message *m, const struct mp_opts *o)
{
	for (size_t i = 0; i < MP_OPT__COUNT; i++) {
		const struct mp_option *opt = &mp_options[i];
		const void *v = (const char *)o + opt->offset;
		int r = 0;

		if (opt->type == MP_OPT_T_FILE) {
			const struct mp_opt_file *f = v;

			if (f->fd >= 0)
				r = mp_bus_dict_append(m, opt->key, opt->sig, f->fd);
		} else if (!((o->set >> i) & 1)) {
			continue;
		} else if (opt->type == MP_OPT_T_DOUBLE) {
			r = mp_bus_dict_append(m, opt->key, opt->sig, *(const double *)v);
		} else if (opt->type == MP_OPT_T_BOOL) {
			r = mp_bus_dict_append(m, opt->key, opt->sig, (int)*(const bool *)v);
		} else if (opt->type == MP_OPT_T_DURATION) {
			r = mp_bus_dict_append(m, opt->key, opt->sig, *(const uint64_t *)v);
		} else if (opt->type == MP_OPT_T_STRING) {
			r = mp_bus_dict_append(m, opt->key, opt->sig, *(const char *const *)v);
		} else if (opt->type == MP_OPT_T_ENUM) {
			r = mp_bus_dict_append(m, opt->key, opt->sig,
					       opt->names[*(const uint32_t *)v]);
		} else if (!strcmp(opt->sig, "q")) {
			r = mp_bus_dict_append(m, opt->key, opt->sig, (int)*(const uint32_t *)v);
		} else {
			r = mp_bus_dict_append(m, opt->key, opt->sig, *(const uint32_t *)v);
		}
		if (r < 0)
			return r;
	}
	return 0;
}

/* "rate, callstack_size, ..." */
static void known_keys(char *buf, size_t len)
{
	size_t off = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < MP_OPT__COUNT && off < len; i++)
		off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? ", " : "",
					mp_options[i].key);
}

int mp_opts__read_bus(sd_bus_message *m, const char *key, struct mp_opts *o, char *err,
		      size_t err_len)
{
	const struct mp_option *opt = mp_option__by_key(key);
	union {
		double d;
		uint32_t u;
		uint16_t q;
		int b;
		uint64_t t;
		const char *s;
		int h;
	} v;
	void *f;
	int r;

	if (!opt) {
		char known[256];

		known_keys(known, sizeof(known));
		snprintf(err, err_len, "Unknown option '%s' (known: %s)", key, known);
		return -ENOENT;
	}
	r = sd_bus_message_read(m, "v", opt->sig, &v);
	if (r < 0) {
		snprintf(err, err_len, "Option '%s' must be a variant of type '%s'", key, opt->sig);
		return -EINVAL;
	}
	f = (char *)o + opt->offset;
	switch (opt->type) {
	case MP_OPT_T_DOUBLE:
		*(double *)f = v.d;
		break;
	case MP_OPT_T_UINT:
		*(uint32_t *)f = !strcmp(opt->sig, "q") ? v.q : v.u;
		break;
	case MP_OPT_T_BOOL:
		*(bool *)f = v.b;
		break;
	case MP_OPT_T_DURATION:
		*(uint64_t *)f = v.t;
		break;
	case MP_OPT_T_ENUM:
		r = mp_option__parse(opt, v.s, o, err, err_len);
		if (r < 0)
			return r;
		break;
	case MP_OPT_T_STRING:
		*(const char **)f = v.s;	/* owned by the message */
		break;
	case MP_OPT_T_FILE:
		r = mp_outfile__check_fd(v.h, err, err_len);
		if (r < 0)
			return -EINVAL;
		((struct mp_opt_file *)f)->fd = v.h;	/* owned by the message */
		break;
	}
	r = mp_option__check(opt, o, err, err_len);
	if (r < 0)
		return r;
	o->set |= 1u << opt->id;
	return 0;
}
