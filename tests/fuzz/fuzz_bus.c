// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libFuzzer target for memprofd's control API: each input is one byte saying who connects
 * (bit 0: uid and gid 65534 when the fuzzer runs as root, else the fuzzer's own) and the byte
 * stream that client sends after authenticating (D-Bus messages, as
 * tests/fuzz/gen-bus-corpus.py writes them), fed
 * through a real connection on a real control socket to the daemon's own code (daemon/bus.c,
 * svc_profile.c, memprofd.c) in this process: sd-bus parses it, the handlers run and reply.
 * The service has no engine (no BPF, no root needed): a Start that passes every check fails as
 * a failed load would. Any input must end in replies, errors or a closed connection, never a
 * crash, leak, hang or sanitizer report; the service must have no client left afterwards.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon/bus.h"
#include "daemon/memprofd.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct memprofd d = { .next_id = 1 };
static char dir[] = "/tmp/memprofd-fuzz-bus.XXXXXX";
static struct sockaddr_un sa = { .sun_family = AF_UNIX };

static void cleanup(void)
{
	char cmd[64];

	mp_bus_server__free(d.bus);
	svc_profile__free_all(&d);
	sd_event_unref(d.event);
	mp_config__done(&d.cfg);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "fuzz_bus: failed to remove %s\n", dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char state[sizeof(dir) + 8];

	mp_log_setup(2, false);	/* a refused call logs at info; errors would be real */
	if (!mkdtemp(dir) || chmod(dir, 0755) < 0)	/* uid 65534 connects too */
		abort();
	mp_config__defaults(&d.cfg);
	snprintf(state, sizeof(state), "%s/state", dir);
	free(d.cfg.state_dir);
	d.cfg.state_dir = strdup(state);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/bus", dir);
	if (!d.cfg.state_dir || sd_event_new(&d.event) < 0)
		abort();
	d.bus = mp_bus_server__new(&d, -1, sa.sun_path);
	if (!d.bus)
		abort();
	atexit(cleanup);
	return 0;
}

/* One loop iteration without waiting, and whatever the daemon wrote to @fd thrown away. */
static int step(int fd)
{
	char buf[65536];
	int r = sd_event_run(d.event, 0);

	while (fd >= 0 && read(fd, buf, sizeof(buf)) > 0)
		;
	return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	bool nobody = size && (data[0] & 1) && geteuid() == 0;
	char auth[80], uid[16];
	size_t off = 0;
	int fd, i, k, n;

	if (size) {
		data++;
		size--;
	}
	/* SO_PEERCRED holds the effective ids of connect()'s caller. */
	if (nobody && (setegid(65534) < 0 || seteuid(65534) < 0))
		abort();
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		abort();
	if (nobody && (seteuid(0) < 0 || setegid(0) < 0))
		abort();
	for (i = 0; i < 100 && mp_bus_server__nclients(d.bus) == 0; i++)
		step(fd);
	if (mp_bus_server__nclients(d.bus) != 1)
		abort();	/* the connection was not accepted */
	/* EXTERNAL with our uid as hex digits, then the messages, as dbus-send --peer does. */
	k = snprintf(uid, sizeof(uid), "%u", nobody ? 65534U : (unsigned int)geteuid());
	auth[0] = '\0';
	n = 1 + snprintf(auth + 1, sizeof(auth) - 1, "AUTH EXTERNAL ");
	for (i = 0; i < k; i++)
		n += snprintf(auth + n, sizeof(auth) - n, "%02x", (unsigned char)uid[i]);
	n += snprintf(auth + n, sizeof(auth) - n, "\r\nBEGIN\r\n");
	if (write(fd, auth, n) != n)
		abort();
	for (i = 0; off < size && i < 10000; i++) {
		ssize_t w = write(fd, data + off, size - off);

		if (w > 0)
			off += w;
		else if (w < 0 && errno != EAGAIN)
			break;	/* the daemon closed the connection */
		step(fd);
	}
	shutdown(fd, SHUT_WR);
	for (i = 0; i < 10000 && mp_bus_server__nclients(d.bus); i++)
		step(fd);
	close(fd);
	for (i = 0; i < 1000 && mp_bus_server__nclients(d.bus); i++)
		step(-1);
	if (mp_bus_server__nclients(d.bus))
		abort();	/* a client the daemon never let go: a hang */
	for (i = 0; i < 100 && step(-1) > 0; i++)
		;	/* deferred frees of closed connections */
	return 0;
}
