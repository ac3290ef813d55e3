// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libFuzzer target for memprofd's control API. Each input connects to a real control socket
 * served by the daemon's own code (daemon/service/bus.c, svc_profile.c, memprofd.c) in this process,
 * and sends D-Bus messages that sd-bus parses and the handlers answer. Its first byte says who
 * connects and how the rest is read:
 *   bit 0  the client is uid and gid 65534 (when the fuzzer runs as root), else the fuzzer's
 *   bit 1  the rest is a program of messages built with sd-bus (well-formed: arguments of any
 *          types and values, file descriptors too); else raw bytes written after the
 *          authentication, as tests/fuzz/gen-bus-corpus.py makes them (framing, headers).
 * The service has no engine (no BPF, no root needed): a Start that passes every check fails as
 * a failed load would. Any input must end in replies, errors or a closed connection, never a
 * crash, leak, hang or sanitizer report; the service must have no client left afterwards.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <systemd/sd-bus.h>

#include "daemon/service/bus.h"
#include "daemon/service/memprofd.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct memprofd d = { .next_id = 1 };
static char dir[] = "/tmp/memprofd-fuzz-bus.XXXXXX";
static struct sockaddr_un sa = { .sun_family = AF_UNIX };
static int out_fds[2] = { -1, -1 };	/* passed as 'h': a writable file, a read-only one */

static void cleanup(void)
{
	char cmd[64];

	mp_bus_server__free(d.bus);
	svc_profile__free_all(&d);
	sd_event_unref(d.event);
	mp_config__done(&d.cfg);
	close(out_fds[0]);
	close(out_fds[1]);
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
	snprintf(state, sizeof(state), "%s/out", dir);
	out_fds[0] = open(state, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	out_fds[1] = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (out_fds[0] < 0 || out_fds[1] < 0)
		abort();
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

/* The client's end of a new control connection, accepted by the daemon. */
static int connect_as(bool nobody)
{
	int fd, i;

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
	return fd;
}

/* Bit 1 clear: authenticate by hand, then write the bytes as they are. */
static void send_raw(int fd, bool nobody, const uint8_t *data, size_t size)
{
	char auth[80], uid[16];
	size_t off = 0;
	int i, k, n;

	/* EXTERNAL with the uid as hex digits, then the messages, as dbus-send --peer does. */
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
}

/* ---- bit 1 set: messages built with sd-bus from a program of bytes ---- */

struct input {
	const uint8_t *p;
	size_t n;
};

static uint64_t take(struct input *in, unsigned int bytes)
{
	uint64_t v = 0;

	for (unsigned int i = 0; i < bytes && in->n; i++, in->n--)
		v |= (uint64_t)*in->p++ << (8 * i);
	return v;
}

#define PICK(in, table) (table[take(in, 1) % (sizeof(table) / sizeof(table[0]))])

static const char *const paths[] = {
	"/", "/org", MEMPROF_BUS_PATH, MEMPROF_BUS_PROFILE_PREFIX, MEMPROF_BUS_PROFILE_PREFIX "/1",
	MEMPROF_BUS_PROFILE_PREFIX "/0", MEMPROF_BUS_PROFILE_PREFIX "/4294967296",
	MEMPROF_BUS_PATH "/x",
};
static const struct {
	const char *iface, *member;
} calls[] = {
	{ MEMPROF_BUS_MANAGER_IFACE, MEMPROF_BUS_START },
	{ MEMPROF_BUS_MANAGER_IFACE, MEMPROF_BUS_LIST_PROFILES },
	{ MEMPROF_BUS_MANAGER_IFACE, MEMPROF_BUS_STOP },
	{ MEMPROF_BUS_MANAGER_IFACE, MEMPROF_BUS_DISCARD },
	{ MEMPROF_BUS_PROFILE_IFACE, MEMPROF_BUS_STOP },
	{ MEMPROF_BUS_PROFILE_IFACE, MEMPROF_BUS_DISCARD },
	{ MEMPROF_BUS_PROFILE_IFACE, MEMPROF_BUS_ADD_PROCESS },
	{ "org.freedesktop.DBus.Properties", "Get" },
	{ "org.freedesktop.DBus.Properties", "GetAll" },
	{ "org.freedesktop.DBus.Properties", "Set" },
	{ "org.freedesktop.DBus.Introspectable", "Introspect" },
	{ "org.freedesktop.DBus.Peer", "Ping" },
	{ "org.freedesktop.DBus.ObjectManager", "GetManagedObjects" },
	{ NULL, MEMPROF_BUS_START }, { MEMPROF_BUS_MANAGER_IFACE, "Nope" },
};
static const char *const strings[] = {
	"rate", "callstack_size", "follow_forks", "duration_us", "format_version", "zstd",
	"output", "unwind", "stack_copy_size", "max_overhead", "fp", "dwarf", "auto", "",
	MEMPROF_BUS_MANAGER_IFACE, MEMPROF_BUS_PROFILE_IFACE, MEMPROF_BUS_VERSION,
	MEMPROF_BUS_STATS, MEMPROF_BUS_MAX_PROFILES, MEMPROF_BUS_STATE, MEMPROF_BUS_PROCESSES,
	MEMPROF_BUS_PROCESS_STATUS, MEMPROF_BUS_CLIENTS, "x",
};
static const char *const signatures[] = { "", "s", "a{sv}", "aia{sv}", "ua{sv}", "v" };
static const char *const arrays[] = { "i", "u", "s", "{sv}", "y", "(us)", "v", "ai" };
static const char *const variants[] = { "d", "u", "t", "b", "q", "s", "h", "i", "as", "y",
					"a{sv}", "ai" };
static const double doubles[] = { 0, 1e-4, 0.5, 1, 2, -1, 4.9e-324, 1e-300, 1e6, 1e7,
				  NAN, INFINITY };

/* Append what the program says to @m until it says the message ends or runs out. sd-bus
 * refuses appends that do not fit the containers open: such steps are skipped. */
static void build(sd_bus_message *m, struct input *in)
{
	while (in->n) {
		unsigned int op = take(in, 1) % 20;
		uint64_t v;
		double dv;
		const char *str;
		char buf[17];
		int fd;

		switch (op) {
		case 0:
			v = take(in, 1);
			sd_bus_message_append_basic(m, 'y', &v);
			break;
		case 1:
			fd = take(in, 1) & 1;
			sd_bus_message_append_basic(m, 'b', &fd);
			break;
		case 2 ... 7:	/* n q (2 bytes), i u (4), x t (8) */
			v = take(in, 2u << (op - 2) / 2);
			sd_bus_message_append_basic(m, "nqiuxt"[op - 2], &v);
			break;
		case 8:
			v = take(in, 1);
			if (v & 0x80) {
				v = take(in, 8);
				memcpy(&dv, &v, sizeof(dv));
			} else {
				dv = doubles[v % (sizeof(doubles) / sizeof(doubles[0]))];
			}
			sd_bus_message_append_basic(m, 'd', &dv);
			break;
		case 9:
			v = take(in, 1);
			if (v & 0x80) {	/* raw bytes: sd-bus checks they are UTF-8 */
				size_t len = v % 17 < in->n ? v % 17 : in->n;

				memcpy(buf, in->p, len);
				buf[len] = '\0';
				in->p += len;
				in->n -= len;
				str = buf;
			} else {
				str = strings[v % (sizeof(strings) / sizeof(strings[0]))];
			}
			sd_bus_message_append_basic(m, 's', str);
			break;
		case 10:
		case 11:	/* an object path, a signature (one input byte picks it) */
			str = op == 10 ? PICK(in, paths) : PICK(in, signatures);
			sd_bus_message_append_basic(m, op == 10 ? 'o' : 'g', str);
			break;
		case 12:
			sd_bus_message_append_basic(m, 'h', &out_fds[take(in, 1) & 1]);
			break;
		case 13:
		case 14:	/* an array, a variant (one input byte picks its contents) */
			str = op == 13 ? PICK(in, arrays) : PICK(in, variants);
			sd_bus_message_open_container(m, op == 13 ? 'a' : 'v', str);
			break;
		case 15:
		case 16:	/* a dict entry, a struct */
			str = op == 15 ? "sv" : "us";
			sd_bus_message_open_container(m, op == 15 ? 'e' : 'r', str);
			break;
		case 17:
			sd_bus_message_close_container(m);
			break;
		default:
			return;
		}
	}
}

static void send_built(int fd, bool nobody, const uint8_t *data, size_t size)
{
	struct input in = { data, size };
	sd_bus *cl = NULL;
	int i, r;

	r = sd_bus_new(&cl);
	if (r >= 0)
		r = sd_bus_set_fd(cl, fd, fd);	/* the bus owns fd now */
	if (r >= 0)
		r = sd_bus_negotiate_fds(cl, 1);
	if (r < 0)
		abort();
	/* The client claims geteuid() in its EXTERNAL line: the peer's uid. */
	if (nobody && (setegid(65534) < 0 || seteuid(65534) < 0))
		abort();
	r = sd_bus_start(cl);
	if (nobody && (seteuid(0) < 0 || setegid(0) < 0))
		abort();
	if (r < 0)
		abort();
	/* Authenticated first: sd-bus would wait for it (blocking) to send a descriptor. */
	for (i = 0; i < 1000 && sd_bus_is_ready(cl) == 0; i++) {
		step(-1);
		sd_bus_process(cl, NULL);
	}
	if (sd_bus_is_ready(cl) <= 0)
		abort();	/* the daemon refused a client that did nothing wrong */
	for (int nmsg = 0; in.n && nmsg < 16; nmsg++) {
		const char *path = PICK(&in, paths);
		unsigned int c = take(&in, 1) % (sizeof(calls) / sizeof(calls[0]));
		sd_bus_message *m = NULL;

		if (sd_bus_message_new_method_call(cl, &m, NULL, path, calls[c].iface,
						   calls[c].member) < 0)
			abort();
		build(m, &in);
		while (sd_bus_message_close_container(m) >= 0)
			;
		sd_bus_send(cl, m, NULL);	/* refused when unsealable: skipped */
		sd_bus_message_unref(m);
	}
	/* Run both ends until the client has sent everything and both are idle. */
	for (i = 0; i < 10000 && mp_bus_server__nclients(d.bus); i++) {
		uint64_t queued = 0;
		int busy = step(-1);

		while ((r = sd_bus_process(cl, NULL)) > 0)
			busy = 1;
		sd_bus_get_n_queued_write(cl, &queued);
		if (!busy && !queued && r == 0)
			break;
	}
	sd_bus_close_unref(cl);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	bool nobody = size && (data[0] & 1) && geteuid() == 0;
	bool built = size && (data[0] & 2);
	int fd, i;

	if (size) {
		data++;
		size--;
	}
	fd = connect_as(nobody);
	if (built)
		send_built(fd, nobody, data, size);
	else
		send_raw(fd, nobody, data, size);
	for (i = 0; i < 1000 && mp_bus_server__nclients(d.bus); i++)
		step(-1);
	if (mp_bus_server__nclients(d.bus))
		abort();	/* a client the daemon never let go: a hang */
	for (i = 0; i < 100 && step(-1) > 0; i++)
		;	/* deferred frees of closed connections */
	return 0;
}
