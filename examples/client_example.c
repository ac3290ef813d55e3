// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Drive memprofd through libmemprof's client API (<memprof/client.h>):
 *
 *	client_example [-s SOCKET] start PID TRACE.ctf [RATE]	prints "started ID"
 *	client_example [-s SOCKET] status ID			state and per-process counts
 *	client_example [-s SOCKET] stop ID
 *	client_example [-s SOCKET] discard ID
 *
 *	cc client_example.c $(pkg-config --cflags --libs libmemprof)
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <memprof/client.h>

static int fail(struct memprof_client *c, const char *what, int r)
{
	fprintf(stderr, "%s failed: %s: %s\n", what, strerror(-r), memprof_client__errmsg(c));
	return 1;
}

int main(int argc, char **argv)
{
	const char *sock = NULL;
	struct memprof_client *c;
	uint32_t id = 0;
	int r, rc = 0;

	if (argc > 2 && !strcmp(argv[1], "-s")) {
		sock = argv[2];
		argc -= 2;
		argv += 2;
	}
	if (argc < 3) {
		fprintf(stderr, "usage: client_example [-s SOCKET] start PID TRACE [RATE] | "
				"status|stop|discard ID\n");
		return 2;
	}
	r = memprof_client__connect(sock, &c);
	if (r < 0) {
		fprintf(stderr, "Failed to connect to memprofd at '%s': %s\n",
			sock ? sock : MEMPROF_BUS_SOCKET, strerror(-r));
		return 1;
	}
	if (!strcmp(argv[1], "start") && argc >= 4) {
		struct memprof_client_start_opts o = {
			.sz = sizeof(o),
			.rate = argc > 4 ? strtod(argv[4], NULL) : 0,
		};
		pid_t pid = (pid_t)atoi(argv[2]);
		int fd = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

		if (fd < 0) {
			fprintf(stderr, "Failed to create '%s': %s\n", argv[3], strerror(errno));
			rc = 1;
		} else if ((r = memprof_client__start(c, &pid, 1, &o, fd, &id)) < 0) {
			rc = fail(c, "start", r);
		} else {
			printf("started %" PRIu32 "\n", id);
		}
		if (fd >= 0)
			close(fd);
	} else {
		id = (uint32_t)strtoul(argv[2], NULL, 10);
		if (!strcmp(argv[1], "stop")) {
			if ((r = memprof_client__stop(c, id)) < 0)
				rc = fail(c, "stop", r);
		} else if (!strcmp(argv[1], "discard")) {
			if ((r = memprof_client__discard(c, id)) < 0)
				rc = fail(c, "discard", r);
		} else if (!strcmp(argv[1], "status")) {
			struct memprof_client_profile *p;

			if ((r = memprof_client__profile(c, id, &p)) < 0) {
				rc = fail(c, "status", r);
			} else {
				printf("state %s rate %g processes %zu\n", p->state_name, p->rate,
				       p->nprocs);
				for (size_t i = 0; i < p->nprocs; i++) {
					const struct memprof_client_process *pr = &p->procs[i];

					printf("process %d %s mode %s samples %" PRIu64 " frees %" PRIu64
					       " live %" PRIu64 " drops %" PRIu64 " est_bytes %.0f\n",
					       (int)pr->pid, pr->comm, pr->mode ? pr->mode : "-",
					       pr->samples, pr->frees, pr->live_nsamples, pr->drops,
					       pr->est_alloc_bytes);
				}
				memprof_client_profile__free(p);
			}
		} else {
			fprintf(stderr, "Unknown command '%s'\n", argv[1]);
			rc = 2;
		}
	}
	memprof_client__free(c);
	return rc;
}
