// SPDX-License-Identifier: LGPL-2.1-or-later
/* a{sv} entries of memprofd's protocol, for both ends (bus_dict.h). */
#include <stdarg.h>

#include "userspace-lib/client/bus_dict.h"

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
