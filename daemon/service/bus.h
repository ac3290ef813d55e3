/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * memprofd's control API: D-Bus (sd-bus), served peer-to-peer on a private socket (one sd-bus
 * server connection per accepted client) and, optionally, under the name org.memprofd on a
 * bus. Object /org/memprofd (org.memprofd.Manager1) and one object per profile,
 * /org/memprofd/profile/<id> (org.memprofd.Profile1): the names and signatures are
 * <memprof/bus.h>'s, which the client library uses too. See memprofd(8) for the interface.
 *
 * Owner: the service component.
 */
#ifndef MEMPROFD_BUS_H
#define MEMPROFD_BUS_H

#include <memprof/bus.h>

struct memprofd;
struct mp_bus_server;
struct svc_profile;

/*
 * Serve the control API on @listen_fd (a listening AF_UNIX stream socket, e.g. from socket
 * activation), or when @listen_fd < 0 on a new socket bound at @path (mode 0666: every caller
 * may connect, each call is authorized by the caller's credentials). NULL + errno on failure.
 */
struct mp_bus_server *mp_bus_server__new(struct memprofd *d, int listen_fd, const char *path);
/* Also register as org.memprofd on the bus at @address (NULL: the system bus). */
int mp_bus_server__add_bus(struct mp_bus_server *s, const char *address);
/* Emit PropertiesChanged for @sp on every connection. */
void mp_bus_server__profile_changed(struct mp_bus_server *s, struct svc_profile *sp);
unsigned int mp_bus_server__nclients(const struct mp_bus_server *s);
/* Closes every connection; unlinks the socket it bound itself. NULL-safe. */
void mp_bus_server__free(struct mp_bus_server *s);

#endif
