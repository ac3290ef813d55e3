// SPDX-License-Identifier: LGPL-2.1-or-later
/* memprofctl attach PID...: start a profile of running processes (and of units, cgroups,
 * executables) in memprofd. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/ctl_bus.h"
#include "cli/ctl_opts.h"
#include "userspace-lib/client/client_int.h"
#include "userspace-lib/codec/outfile.h"

#define ATTACH_OPTS	((1u << MP_OPT__COUNT) - 1)	/* all the table's */

static void attach_help(void)
{
	printf("Usage: memprofctl attach [OPTIONS] PID...\n"
	       "       memprofctl attach [OPTIONS] {--unit NAME|--cgroup PATH|--exe PATH} [PID...]\n"
	       "\n"
	       "Start sampling the allocations of running processes in memprofd: the PIDs\n"
	       "given, and every process of the unit, cgroup or executable, now and later.\n"
	       "\n"
	       "Options:\n");
	ctl_opts__help(stdout, ATTACH_OPTS, NULL);
	printf("  -w, --wait               wait until sampling ends, then discard and print\n"
	       "  -j, --json               print JSON\n"
	       "  -h, --help               show this help\n");
}

int cmd_attach(int argc, char **argv)
{
	static const struct option own[] = {
		{ "wait", no_argument, NULL, 'w' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	const struct mp_option *opt;
	struct ctl_opts t;
	struct mp_opts o;
	struct memprof_client_profile *p = NULL;
	struct memprof_client *cl = NULL;
	struct mp_outfile out = { .fd = -1 };
	const char *output;
	bool wait = false, targets;
	pid_t *pids = NULL;
	size_t npids = 0;
	uint32_t id;
	char *end;
	int c, r, ret = 1;
	unsigned long v;
	char msg[256];

	mp_opts__init(&o);
	ctl_opts__init(&t, ATTACH_OPTS, own, "wjh");
	while ((c = getopt_long(argc, argv, t.shorts, t.longopts, NULL)) != -1) {
		if ((opt = ctl_opts__option(&t, c))) {
			if (ctl_opts__parse(opt, optarg, &o))
				return 2;
			continue;
		}
		switch (c) {
		case 'w':
			wait = true;
			break;
		case 'j':
			ctl.json = true;
			break;
		case 'h':
			attach_help();
			return 0;
		default:
			return 2;	/* getopt printed the error line */
		}
	}
	output = o.output.path;
	targets = MP_OPT_IS_SET(&o, UNIT) || MP_OPT_IS_SET(&o, CGROUP) || MP_OPT_IS_SET(&o, EXE);
	if (optind >= argc && !targets) {
		fprintf(stderr, "memprofctl attach: no PID, --unit, --cgroup or --exe given; try "
			"'memprofctl attach --help'.\n");
		return 2;
	}
	pids = calloc((size_t)(argc - optind) + 1, sizeof(*pids));
	if (!pids)
		return ctl_fail("attach", "Out of memory");
	for (int i = optind; i < argc; i++) {
		errno = 0;
		v = strtoul(argv[i], &end, 10);
		if (errno || end == argv[i] || *end || v < 1 || v > INT32_MAX) {
			fprintf(stderr, "memprofctl attach: invalid PID '%s'\n", argv[i]);
			free(pids);
			return 2;
		}
		pids[npids++] = (pid_t)v;
	}

	if (ctl_bus_connect(&cl, false) < 0)
		goto out;
	if (output) {
		/*
		 * Opened here, with the caller's rights; memprofd only gets the descriptor
		 * (read-write: it patches the header's drop counts at the end). A file already
		 * there is replaced only once memprofd accepted the profile (outfile.h). A
		 * regular file only: memprofd refuses pipes, FIFOs and devices.
		 */
		if (mp_outfile__check_path(output, msg, sizeof(msg)) < 0) {
			ctl_fail("attach", "Failed to use '%s': %s", output, msg);
			goto out;
		}
		r = mp_outfile__open(&out, output, true, 0644);
		if (r < 0) {
			ctl_fail("attach", "Failed to open '%s': %s", output, strerror(-r));
			goto out;
		}
	}
	o.output.fd = out.fd;
	r = mp_client__start(cl, pids, npids, &o, &id);
	if (r < 0) {
		ctl_fail_client("attach", cl, r);
		goto out;
	}
	if (out.fd >= 0) {
		close(out.fd);
		out.fd = -1;
		r = mp_outfile__commit(&out);
		if (r < 0) {
			ctl_fail("attach", "Failed to rename the trace into '%s': %s", output,
				 strerror(-r));
			goto out;
		}
	}
	if (wait) {
		if (ctl_wait_stopped(cl, "attach", id, true) < 0)
			goto out;
		r = memprof_client__discard(cl, id);
		if (r < 0) {
			ctl_fail_client("attach", cl, r);
			goto out;
		}
	}
	r = memprof_client__profile(cl, id, &p);
	if (r < 0) {
		ctl_fail_client("attach", cl, r);
		goto out;
	}
	if (wait || ctl.json) {
		ctl_print_profile(p);
	} else {
		printf("Profile %" PRIu32 " %s %zu process(es)%s; traces in %s%s%s\n", id,
		       p->state_name, p->nprocs, targets ? " and its targets' new ones" : "",
		       output ? output : p->directory, output ? " (first process), " : "",
		       output ? p->directory : "");
	}
	memprof_client_profile__free(p);
	ret = 0;
out:
	mp_outfile__abort(&out);	/* after the commit: nothing left to remove */
	free(pids);
	memprof_client__free(cl);
	return ret;
}
