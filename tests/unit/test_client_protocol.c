// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libmemprof's client reads memprofd's protocol (<memprof/bus.h>) by name: a peer of its own
 * (a forked child serving Profile1 over a real socket with sd-bus) sends ProcessStatus
 * dictionaries with keys in another order, keys and a property the client does not know, and
 * keys left out; memprof_client__profile() must take every known field, ignore the others and
 * leave the absent ones at their defaults. An unknown profile is -ENOENT.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <systemd/sd-bus.h>

#include <memprof/bus.h>
#include <memprof/client.h>

#include "tests/unit/test.h"
#include "userspace-lib/client/bus_dict.h"

static int prop(sd_bus *bus, const char *path, const char *iface, const char *name,
		sd_bus_message *reply, void *userdata, sd_bus_error *error)
{
	int r;

	if (!strcmp(name, MEMPROF_BUS_STATE))
		return sd_bus_message_append(reply, "s", MEMPROF_BUS_STATE_STOPPED);
	if (!strcmp(name, MEMPROF_BUS_DIRECTORY))
		return sd_bus_message_append(reply, "s", "/srv/profiles/1");
	if (!strcmp(name, MEMPROF_BUS_RATE))
		return sd_bus_message_append(reply, "d", 0.25);
	if (!strcmp(name, "FutureProperty"))
		return sd_bus_message_append(reply, "a(ss)", 1, "x", "y");
	/* ProcessStatus: the first process with every kind of key, the second with a pid only */
	r = sd_bus_message_open_container(reply, 'a', MEMPROF_BUS_PROCESS_STATUS_ENTRY);
	if (r >= 0)
		r = sd_bus_message_open_container(reply, 'a', "{sv}");
	if (r >= 0)
		r = MP_BUS_DICT_PUT(reply, MEMPROF_PROC_SAMPLES, (uint64_t)9);
	if (r >= 0)
		r = mp_bus_dict_append(reply, "future_list", "as", 2, "a", "b");
	if (r >= 0)
		r = MP_BUS_DICT_PUT(reply, MEMPROF_PROC_PID, (uint32_t)4242);
	if (r >= 0)
		r = MP_BUS_DICT_PUT(reply, MEMPROF_PROC_COMM, "app");
	if (r >= 0)
		r = MP_BUS_DICT_PUT(reply, MEMPROF_PROC_EXITED, 1);
	if (r >= 0)
		r = MP_BUS_DICT_PUT(reply, MEMPROF_PROC_SAMPLED_BLOCKS, (uint64_t)5);
	if (r >= 0)
		r = mp_bus_dict_append(reply, "future_count", "t", (uint64_t)77);
	if (r >= 0)
		r = MP_BUS_DICT_PUT(reply, MEMPROF_PROC_FREED_BLOCKS, (uint64_t)2);
	if (r >= 0)
		r = MP_BUS_DICT_PUT(reply, MEMPROF_PROC_EST_ALLOC_BYTES, 1234.5);
	if (r >= 0)
		r = MP_BUS_DICT_PUT(reply, MEMPROF_PROC_WRITE_ERROR, "ENOSPC");
	if (r >= 0)
		r = MP_BUS_DICT_PUT(reply, MEMPROF_PROC_LOST_WRITES, (uint64_t)3);
	if (r >= 0)
		r = sd_bus_message_close_container(reply);
	if (r >= 0)
		r = sd_bus_message_open_container(reply, 'a', "{sv}");
	if (r >= 0)
		r = MP_BUS_DICT_PUT(reply, MEMPROF_PROC_PID, (uint32_t)4243);
	if (r >= 0)
		r = sd_bus_message_close_container(reply);
	if (r >= 0)
		r = sd_bus_message_close_container(reply);
	return r;
}

static const sd_bus_vtable profile_vtable[] = {
	SD_BUS_VTABLE_START(0),
	SD_BUS_PROPERTY(MEMPROF_BUS_STATE, MEMPROF_BUS_STATE_SIG, prop, 0, 0),
	SD_BUS_PROPERTY("FutureProperty", "a(ss)", prop, 0, 0),
	SD_BUS_PROPERTY(MEMPROF_BUS_DIRECTORY, MEMPROF_BUS_DIRECTORY_SIG, prop, 0, 0),
	SD_BUS_PROPERTY(MEMPROF_BUS_PROCESS_STATUS, MEMPROF_BUS_PROCESS_STATUS_SIG, prop, 0, 0),
	SD_BUS_PROPERTY(MEMPROF_BUS_RATE, MEMPROF_BUS_RATE_SIG, prop, 0, 0),
	SD_BUS_VTABLE_END
};

/* The peer: serve one connection on @lfd until the client hangs up. */
static int serve(int lfd)
{
	sd_id128_t id;
	sd_bus *bus = NULL;
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC), r;

	if (fd < 0)
		return 1;
	r = sd_id128_randomize(&id);
	if (r >= 0)
		r = sd_bus_new(&bus);
	if (r >= 0)
		r = sd_bus_set_fd(bus, fd, fd);
	if (r >= 0)
		r = sd_bus_set_server(bus, 1, id);
	if (r >= 0)
		r = sd_bus_start(bus);
	if (r >= 0)
		r = sd_bus_add_object_vtable(bus, NULL, MEMPROF_BUS_PROFILE_PREFIX "/1",
					     MEMPROF_BUS_PROFILE_IFACE, profile_vtable, NULL);
	while (r >= 0) {
		r = sd_bus_process(bus, NULL);
		if (r == 0)
			r = sd_bus_wait(bus, UINT64_MAX);
	}
	sd_bus_close_unref(bus);
	if (r != -ECONNRESET && r != -ENOTCONN)
		fprintf(stderr, "the peer failed: %s\n", strerror(-r));
	return r == -ECONNRESET || r == -ENOTCONN ? 0 : 1;
}

static void test_process_status_by_name(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct memprof_client_profile *p = NULL;
	struct memprof_client *c = NULL;
	char dir[] = "/tmp/test_client_protocol.XXXXXX";
	int lfd, status = -1;
	pid_t child;

	if (!ASSERT_TRUE(mkdtemp(dir) != NULL, "mkdtemp"))
		return;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/bus", dir);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (!ASSERT_TRUE(lfd >= 0 && bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
			 listen(lfd, 1) == 0, "listen"))
		return;
	child = fork();
	if (child == 0)
		_exit(serve(lfd));
	close(lfd);
	if (ASSERT_OK(memprof_client__connect(sa.sun_path, &c), "connect") &&
	    ASSERT_OK(memprof_client__profile(c, 1, &p), "profile 1") &&
	    ASSERT_EQ(p->nprocs, 2, "processes")) {
		const struct memprof_client_process *a = &p->procs[0], *b = &p->procs[1];

		ASSERT_EQ(p->state, MEMPROF_CLIENT_STOPPED, "state");
		ASSERT_STREQ(p->directory, "/srv/profiles/1", "directory");
		ASSERT_TRUE(p->rate == 0.25, "rate after an unknown property");
		ASSERT_EQ(a->pid, 4242, "pid after unknown and known keys");
		ASSERT_STREQ(a->comm, "app", "comm");
		ASSERT_TRUE(a->exited, "exited");
		ASSERT_EQ(a->samples, 5, "sampled_blocks");
		ASSERT_EQ(a->nsamples, 9, "samples");
		ASSERT_EQ(a->frees, 2, "freed_blocks");
		ASSERT_TRUE(a->est_alloc_bytes == 1234.5, "est_alloc_bytes");
		ASSERT_STREQ(a->write_error, "ENOSPC", "write_error");
		ASSERT_EQ(a->lost_writes, 3, "lost_writes");
		ASSERT_TRUE(!a->mode && !a->detached_reason, "absent strings are NULL");
		ASSERT_STREQ(a->trace, "", "no trace key: the client's file");
		ASSERT_EQ(a->live_nsamples + a->drops + a->write_error_since_us, 0, "absent counts");
		ASSERT_EQ(b->pid, 4243, "second process");
		ASSERT_STREQ(b->comm, "", "absent comm");
		ASSERT_TRUE(!b->write_error && !b->exited && !b->samples, "second's defaults");
	}
	memprof_client_profile__free(p);
	p = NULL;
	if (c)
		ASSERT_EQ(memprof_client__profile(c, 2, &p), -ENOENT, "unknown profile");
	ASSERT_TRUE(p == NULL, "nothing returned for it");
	memprof_client__free(c);
	if (child > 0)
		waitpid(child, &status, 0);
	ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the peer served and ended");
	unlink(sa.sun_path);
	rmdir(dir);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	RUN(test_process_status_by_name);
	return test_exit();
}
