// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The control API's connections: the private socket (bound, or passed by the service
 * manager), one peer-to-peer sd-bus server connection per accepted client within the
 * per-user and per-connection limits, and the registration on a bus.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-daemon.h>

#include "daemon/service/bus.h"
#include "daemon/service/bus_internal.h"
#include "daemon/service/memprofd.h"

static void conn_free(struct bus_conn *c)
{
	struct mp_bus_server *s;

	if (!c)
		return;
	s = c->s;
	for (struct bus_conn **pp = &s->conns; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	if (c->is_peer && s->nclients)
		s->nclients--;
	if (s->bus_conn == c)
		s->bus_conn = NULL;
	sd_event_source_disable_unref(c->reap);
	sd_event_source_disable_unref(c->stall_io);
	sd_event_source_disable_unref(c->stall_timer);
	/* A stalled client does not read: flushing would wait for it. */
	if (c->stalled)
		sd_bus_close_unref(c->bus);
	else
		sd_bus_flush_close_unref(c->bus);
	free(c);
}

static int on_reap(sd_event_source *es, void *userdata)
{
	struct bus_conn *c = userdata;

	conn_free(c);
	return 0;
}

static int on_disconnected(sd_bus_message *m, void *userdata, sd_bus_error *error)
{
	struct bus_conn *c = userdata;
	int r;

	if (c->is_peer)
		log_debug("Control client disconnected");
	else
		log_warning("Disconnected from the bus; the private socket still serves");
	if (c->reap)
		return 0;
	/* Not from inside the connection's own dispatch: free it on the next loop iteration. */
	r = sd_event_add_defer(c->s->d->event, &c->reap, on_reap, c);
	if (r < 0)
		log_error("Failed to schedule freeing a control connection: %s", strerror(-r));
	return 0;
}

/* ------------------------------------------------------------------ per-connection limits */

static uint64_t conn_queued(struct bus_conn *c)
{
	uint64_t nr = 0, nw = 0;

	sd_bus_get_n_queued_read(c->bus, &nr);
	sd_bus_get_n_queued_write(c->bus, &nw);
	return nr + nw;
}

static int on_stall_timeout(sd_event_source *es, uint64_t usec, void *userdata)
{
	struct bus_conn *c = userdata;

	log_warning("Disconnecting the control client of uid %u (pid %d): %" PRIu64 " calls "
		    "queued, over MaxQueuedCalls=%u, and it read none of its replies for %llu s",
		    (unsigned int)c->uid, (int)c->pid, conn_queued(c),
		    c->s->d->cfg.max_queued_calls, MP_STALL_TIMEOUT_US / 1000000);
	conn_free(c);
	return 0;
}

/* The client's socket takes data again (or it hung up): serve it again. */
static int on_stall_io(sd_event_source *es, int fd, uint32_t revents, void *userdata)
{
	struct bus_conn *c = userdata;
	int r;

	c->stall_io = sd_event_source_disable_unref(c->stall_io);
	c->stalled = false;
	r = sd_bus_attach_event(c->bus, c->s->d->event, SD_EVENT_PRIORITY_NORMAL);
	if (r < 0) {
		log_error("Failed to serve the control client of uid %u (pid %d) again: %s",
			  (unsigned int)c->uid, (int)c->pid, strerror(-r));
		conn_free(c);
	}
	return 0;
}

/*
 * Enforce MaxQueuedCalls on @c: over it, stop reading the client (sd-bus reads and dispatches
 * whenever its sources fire, so they are detached) until its socket can take replies again;
 * arm the cut-off the first time. Back under the limit, the cut-off is disarmed. Returns
 * true when @c must not be processed now.
 */
static bool conn_check_limits(struct bus_conn *c)
{
	struct memprofd *d = c->s->d;
	uint64_t n;
	int r;

	if (!c->is_peer || c->reap)
		return c->reap != NULL;
	if (c->stalled)
		return true;
	n = conn_queued(c);
	if (n <= d->cfg.max_queued_calls) {
		c->stall_timer = sd_event_source_disable_unref(c->stall_timer);
		return false;
	}
	r = sd_bus_detach_event(c->bus);
	if (r >= 0)
		r = sd_event_add_io(d->event, &c->stall_io, sd_bus_get_fd(c->bus), EPOLLOUT,
				    on_stall_io, c);
	if (r >= 0 && !c->stall_timer)
		r = sd_event_add_time_relative(d->event, &c->stall_timer, CLOCK_MONOTONIC,
					       MP_STALL_TIMEOUT_US, 0, on_stall_timeout, c);
	if (r < 0) {
		log_error("Failed to hold back the control client of uid %u (pid %d), "
			  "disconnecting it: %s", (unsigned int)c->uid, (int)c->pid, strerror(-r));
		c->stalled = true;	/* no flush on close */
		conn_free(c);
		return true;
	}
	c->stalled = true;
	log_debug("Control client of uid %u (pid %d) has %" PRIu64 " calls queued "
		  "(MaxQueuedCalls=%u): not reading it until it reads its replies",
		  (unsigned int)c->uid, (int)c->pid, n, d->cfg.max_queued_calls);
	return true;
}

/*
 * MaxQueuedBytes: what the kernel holds for a client that does not read is bounded by the
 * socket's send buffer (sd-bus raises it to 8 MiB; the kernel doubles what it is given).
 */
static void set_send_buffer(int fd, unsigned int bytes)
{
	int v = (int)(bytes / 2);

	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &v, sizeof(v)) < 0 &&
	    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)) < 0)
		log_warning("Failed to set the send buffer of a control connection to %u bytes: %s",
			    bytes, strerror(errno));
}

static struct bus_conn *conn_new(struct mp_bus_server *s, sd_bus *bus, bool is_peer)
{
	struct bus_conn *c = calloc(1, sizeof(*c));
	int r;

	if (!c) {
		sd_bus_unref(bus);
		return NULL;
	}
	c->s = s;
	c->bus = bus;
	c->is_peer = is_peer;
	c->next = s->conns;
	s->conns = c;
	if (is_peer)
		s->nclients++;
	r = sd_bus_match_signal(bus, NULL, NULL, "/org/freedesktop/DBus/Local",
				"org.freedesktop.DBus.Local", "Disconnected", on_disconnected, c);
	if (r < 0)
		goto err;
	r = bus_add_objects(s, bus);
	if (r < 0)
		goto err;
	r = sd_bus_attach_event(bus, s->d->event, SD_EVENT_PRIORITY_NORMAL);
	if (r < 0)
		goto err;
	return c;
err:
	conn_free(c);
	errno = -r;
	return NULL;
}

#define MP_ACCEPT_PAUSE_USEC	(250 * 1000ULL)
#define MP_FD_LOG_USEC		(10 * 1000000ULL)

static int on_accept_resume(sd_event_source *es, uint64_t usec, void *userdata)
{
	struct mp_bus_server *s = userdata;

	s->accept_pause = sd_event_source_disable_unref(s->accept_pause);
	sd_event_source_set_enabled(s->listen_src, SD_EVENT_ON);
	return 0;
}

/*
 * accept() found no descriptor (EMFILE, ENFILE; no memory: ENOBUFS, ENOMEM). The connection
 * stays queued and the socket readable: polled on, it would fail again at once, forever. Stop
 * polling it for a while instead, and say so at most every MP_FD_LOG_USEC.
 */
static void accept_pause(struct mp_bus_server *s, int err)
{
	uint64_t now = 0;
	int r;

	s->fd_pauses++;
	sd_event_now(s->d->event, CLOCK_MONOTONIC, &now);
	if (!s->fd_log_usec || now - s->fd_log_usec >= MP_FD_LOG_USEC) {
		log_error("Failed to accept a control connection: %s; not accepting any for %llu ms "
			  "(%" PRIu64 " such pauses since the last line)", strerror(err),
			  MP_ACCEPT_PAUSE_USEC / 1000, s->fd_pauses - s->fd_pauses_logged);
		s->fd_log_usec = now ? now : 1;
		s->fd_pauses_logged = s->fd_pauses;
	}
	if (s->accept_pause)
		return;
	r = sd_event_add_time_relative(s->d->event, &s->accept_pause, CLOCK_MONOTONIC,
				       MP_ACCEPT_PAUSE_USEC, 0, on_accept_resume, s);
	if (r < 0) {
		log_error("Failed to arm the timer that resumes accepting connections: %s",
			  strerror(-r));
		return;	/* keep polling: better busy than deaf */
	}
	sd_event_source_set_enabled(s->listen_src, SD_EVENT_OFF);
}

static int on_accept(sd_event_source *es, int fd, uint32_t revents, void *userdata)
{
	struct mp_bus_server *s = userdata;
	unsigned int same_uid = 0, per_uid;
	socklen_t uclen = sizeof(struct ucred);
	struct ucred uc;
	sd_bus *bus = NULL;
	struct bus_conn *c;
	int cfd, r;

	cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (cfd < 0) {
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
			accept_pause(s, errno);
		else if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
			log_error("Failed to accept a control connection: %s", strerror(errno));
		return 0;
	}
	/*
	 * MaxClients bounds the connections; one user may hold a quarter of them, so that no
	 * user can lock the others out. Root is always let in: an administrator must be able
	 * to stop and discard.
	 */
	if (getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &uc, &uclen) < 0) {
		log_error("Failed to get a control client's credentials: %s", strerror(errno));
		close(cfd);
		return 0;
	}
	for (struct bus_conn *o = s->conns; o; o = o->next)
		if (o->is_peer && o->uid == uc.uid)
			same_uid++;
	per_uid = s->d->cfg.max_clients / 4 ? s->d->cfg.max_clients / 4 : 1;
	if (s->nclients >= MP_HARD_MAX_CLIENTS ||
	    (uc.uid != 0 && (s->nclients >= s->d->cfg.max_clients || same_uid >= per_uid))) {
		s->refused++;
		log_warning("Refusing a control connection of uid %u: %u clients connected, %u of "
			    "them this user's (MaxClients=%u)", (unsigned int)uc.uid, s->nclients,
			    same_uid, s->d->cfg.max_clients);
		close(cfd);
		return 0;
	}
	r = sd_bus_new(&bus);
	if (r < 0)
		goto err;
	r = sd_bus_set_fd(bus, cfd, cfd);
	if (r < 0)
		goto err;
	cfd = -1;	/* the bus owns it */
	r = sd_bus_set_server(bus, 1, s->server_id);
	if (r >= 0)
		r = sd_bus_negotiate_fds(bus, 1);
	if (r >= 0)
		r = sd_bus_set_description(bus, "memprofd-client");
	if (r >= 0)
		r = sd_bus_start(bus);
	if (r < 0)
		goto err;
	set_send_buffer(sd_bus_get_fd(bus), s->d->cfg.max_queued_bytes);
	c = conn_new(s, bus, true);
	if (!c) {
		r = -errno;
		bus = NULL;
		goto err;
	}
	c->uid = uc.uid;
	c->pid = uc.pid;
	return 0;
err:
	log_error("Failed to set up a control connection: %s", strerror(-r));
	sd_bus_unref(bus);
	if (cfd >= 0)
		close(cfd);
	return 0;
}

/*
 * sd-bus dispatches one step per readiness event. A client that sends BEGIN and its first
 * call in one write (dbus-send --peer does) leaves that call in the connection's read
 * buffer when authentication completes, with nothing more to read on the socket: it would
 * wait forever. After each loop iteration, let every connection finish what it buffered,
 * within its limits (each step reads at most one call).
 */
static int on_post(sd_event_source *es, void *userdata)
{
	struct mp_bus_server *s = userdata;
	struct bus_conn *next;

	for (struct bus_conn *c = s->conns; c; c = next) {
		next = c->next;	/* conn_check_limits() may free c */
		for (int i = 0; i < 64 && !conn_check_limits(c); i++)
			if (sd_bus_process(c->bus, NULL) <= 0) {
				conn_check_limits(c);
				break;
			}
	}
	return 0;
}

static int bind_socket(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char dir[sizeof(sa.sun_path)];
	char *slash;
	int fd, r;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		log_error("Socket path '%s' is too long (%zu bytes at most)", path,
			  sizeof(sa.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, path);
	strcpy(dir, path);
	slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = '\0';
		if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
			r = -errno;
			log_error("Failed to create '%s': %s", dir, strerror(-r));
			return r;
		}
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		r = -errno;
		log_error("Failed to create a socket: %s", strerror(-r));
		return r;
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		struct stat st;
		int probe;

		if (errno != EADDRINUSE)
			goto fail;
		/* A socket file is there: another memprofd listening, or left by a crash. */
		probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(probe);
			close(fd);
			log_error("Another memprofd already listens on '%s'", path);
			return -EADDRINUSE;
		}
		if (probe >= 0)
			close(probe);
		/* Nobody listens: replace a stale socket, but nothing else that has the name. */
		if (lstat(path, &st) == 0 && !S_ISSOCK(st.st_mode)) {
			close(fd);
			log_error("Cannot bind the control socket '%s': a file that is not a socket "
				  "is there", path);
			return -EEXIST;
		}
		unlink(path);
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			goto fail;
	}
	goto bound;
fail:
	r = -errno;
	log_error("Failed to bind the control socket '%s': %s", path, strerror(-r));
	close(fd);
	return r;
bound:
	/* Anyone may connect; each call is authorized with the caller's credentials. */
	if (chmod(path, 0666) < 0 || listen(fd, SOMAXCONN) < 0) {
		r = -errno;
		log_error("Failed to listen on '%s': %s", path, strerror(-r));
		unlink(path);
		close(fd);
		return r;
	}
	return fd;
}

struct mp_bus_server *mp_bus_server__new(struct memprofd *d, int listen_fd, const char *path)
{
	struct mp_bus_server *s = calloc(1, sizeof(*s));
	int r;

	if (!s)
		return NULL;
	s->d = d;
	s->listen_fd = -1;
	r = sd_id128_randomize(&s->server_id);
	if (r < 0)
		goto err;
	if (listen_fd >= 0) {
		if (sd_is_socket_unix(listen_fd, SOCK_STREAM, 1, NULL, 0) <= 0) {
			log_error("The socket passed by the service manager is not a listening "
				  "AF_UNIX stream socket");
			r = -EINVAL;
			goto err;
		}
		int fl = fcntl(listen_fd, F_GETFL);

		if (fl < 0 || fcntl(listen_fd, F_SETFL, fl | O_NONBLOCK) < 0) {
			r = -errno;
			goto err;
		}
		s->listen_fd = listen_fd;
	} else {
		r = bind_socket(path);
		if (r < 0)
			goto err;
		s->listen_fd = r;
		s->bound_path = strdup(path);
		if (!s->bound_path) {
			r = -ENOMEM;
			goto err;
		}
		struct stat st;

		if (stat(path, &st) == 0) {
			s->bound_dev = st.st_dev;
			s->bound_ino = st.st_ino;
		}
	}
	r = sd_event_add_io(d->event, &s->listen_src, s->listen_fd, EPOLLIN, on_accept, s);
	if (r >= 0)
		r = sd_event_add_post(d->event, &s->post_src, on_post, s);
	if (r < 0) {
		log_error("Failed to watch the control socket: %s", strerror(-r));
		goto err;
	}
	return s;
err:
	mp_bus_server__free(s);
	errno = -r;
	return NULL;
}

int mp_bus_server__add_bus(struct mp_bus_server *s, const char *address)
{
	sd_bus *bus = NULL;
	int r;

	if (address) {
		r = sd_bus_new(&bus);
		if (r >= 0)
			r = sd_bus_set_address(bus, address);
		if (r >= 0)
			r = sd_bus_set_bus_client(bus, 1);
		if (r >= 0)
			r = sd_bus_negotiate_fds(bus, 1);
		if (r >= 0)
			r = sd_bus_start(bus);
	} else {
		r = sd_bus_open_system(&bus);
	}
	if (r < 0) {
		log_error("Failed to connect to the bus '%s': %s", address ? address : "system",
			  strerror(-r));
		sd_bus_unref(bus);
		return r;
	}
	if (!conn_new(s, bus, false)) {
		r = -errno;
		log_error("Failed to serve on the bus: %s", strerror(-r));
		return r;
	}
	s->bus_conn = s->conns;
	r = sd_bus_request_name(bus, MEMPROF_BUS_NAME, 0);
	if (r < 0) {
		log_error("Failed to acquire the name " MEMPROF_BUS_NAME " on the bus: %s",
			  strerror(-r));
		conn_free(s->bus_conn);
		return r;
	}
	log_info("Registered as " MEMPROF_BUS_NAME " on the bus '%s'",
		 address ? address : "system");
	return 0;
}

void mp_bus_server__profile_changed(struct mp_bus_server *s, struct svc_profile *sp)
{
	if (!s)
		return;
	for (struct bus_conn *c = s->conns; c; c = c->next) {
		int r = sd_bus_emit_properties_changed(c->bus, sp->object_path,
						       MEMPROF_BUS_PROFILE_IFACE, MEMPROF_BUS_STATE,
						       NULL);
		if (r < 0 && r != -ENOTCONN)
			log_debug("Failed to emit PropertiesChanged for %s: %s", sp->object_path,
				  strerror(-r));
	}
}

unsigned int mp_bus_server__nclients(const struct mp_bus_server *s)
{
	return s ? s->nclients : 0;
}

void mp_bus_server__free(struct mp_bus_server *s)
{
	if (!s)
		return;
	while (s->conns)
		conn_free(s->conns);
	sd_event_source_disable_unref(s->listen_src);
	sd_event_source_disable_unref(s->accept_pause);
	sd_event_source_disable_unref(s->post_src);
	if (s->bound_path) {
		struct stat st;

		/* Not a socket another memprofd bound at the same path meanwhile. */
		if (stat(s->bound_path, &st) == 0 && st.st_dev == s->bound_dev &&
		    st.st_ino == s->bound_ino)
			unlink(s->bound_path);
		free(s->bound_path);
	}
	if (s->listen_fd >= 0)
		close(s->listen_fd);
	free(s);
}
