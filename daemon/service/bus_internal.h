/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * What the control API's two halves share: the objects and their methods (bus.c) and the
 * connections that carry them (bus_server.c).
 */
#ifndef MEMPROFD_BUS_INTERNAL_H
#define MEMPROFD_BUS_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

struct bus_conn {
	struct mp_bus_server *s;
	sd_bus *bus;
	bool is_peer;			/* a client of the private socket */
	uid_t uid;			/* its uid (SO_PEERCRED), for the per-user limit */
	pid_t pid;
	sd_event_source *reap;		/* deferred free after disconnect */
	/*
	 * Over MaxQueuedCalls (calls read but not answered, replies not yet written), a client
	 * is not read: its bus is detached from the loop and only its socket's writability is
	 * watched. The timer cuts it off when it has not come back under the limit in time.
	 */
	bool stalled;
	sd_event_source *stall_io;
	sd_event_source *stall_timer;
	struct bus_conn *next;
};

struct mp_bus_server {
	struct memprofd *d;
	int listen_fd;
	char *bound_path;		/* set when we bound the socket ourselves */
	dev_t bound_dev;		/* ... and what it was, so that exit removes only ours */
	ino_t bound_ino;
	sd_event_source *listen_src;
	sd_event_source *post_src;
	sd_id128_t server_id;
	struct bus_conn *conns;
	struct bus_conn *bus_conn;	/* registration on a bus, if any */
	unsigned int nclients;
	uint64_t refused;
	/* Out of descriptors: the listening socket is not polled until this timer fires. */
	sd_event_source *accept_pause;
	uint64_t fd_pauses, fd_pauses_logged;	/* so far, and when the last log line said */
	uint64_t fd_log_usec;			/* when that line was written */
};

/* Register Manager1 and the profiles' Profile1 objects on @bus. */
int bus_add_objects(struct mp_bus_server *s, sd_bus *bus);

#endif
