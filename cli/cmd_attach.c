// SPDX-License-Identifier: LGPL-2.1-or-later
/* memprofctl attach PID...: start a profile of running processes in memprofd. */
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
#include "daemon/engine/engine.h"
#include "userspace-lib/codec/outfile.h"
#include "userspace-lib/validate.h"

static void attach_help(void)
{
	printf("Usage: memprofctl attach [OPTIONS] PID...\n"
	       "\n"
	       "Start sampling the allocations of running processes in memprofd.\n"
	       "\n"
	       "Options:\n"
	       "  -r, --rate RATE           sampling rate per word, in [1e-9, 1] (default 1e-4)\n"
	       "      --callstack-size N    frames kept per sample, 1-127 (default 127)\n"
	       "      --unwind MODE         backtraces: fp, dwarf or auto (default auto)\n"
	       "      --stack-copy-size BYTES\n"
	       "                            bytes of stack copied per sample for dwarf and auto\n"
	       "                            (default 16384, at most 65536; 0: no copy)\n"
	       "  -d, --duration T          stop sampling after T (e.g. 30s, 500ms, 5m, 1h)\n"
	       "  -o, --output FILE         write the first process' trace to FILE\n"
	       "      --no-follow-forks     do not profile the children the processes fork\n"
	       "      --format-version V    memtrace format version, 2 or 3 (default 2)\n"
	       "  -z, --zstd                compress the traces with zstd\n"
	       "      --max-overhead PCT    detach a process whose probes cost more than PCT %%\n"
	       "                            of one CPU, 1 s average (default 0: no limit)\n"
	       "  -w, --wait                wait until sampling ends, then discard and print\n"
	       "  -j, --json                print JSON\n"
	       "  -h, --help                show this help\n");
}

enum { OPT_CALLSTACK = 0x100, OPT_NO_FOLLOW, OPT_FORMAT, OPT_MAX_OVERHEAD, OPT_UNWIND,
       OPT_STACK_COPY };

int cmd_attach(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "rate", required_argument, NULL, 'r' },
		{ "callstack-size", required_argument, NULL, OPT_CALLSTACK },
		{ "unwind", required_argument, NULL, OPT_UNWIND },
		{ "stack-copy-size", required_argument, NULL, OPT_STACK_COPY },
		{ "duration", required_argument, NULL, 'd' },
		{ "output", required_argument, NULL, 'o' },
		{ "no-follow-forks", no_argument, NULL, OPT_NO_FOLLOW },
		{ "format-version", required_argument, NULL, OPT_FORMAT },
		{ "zstd", no_argument, NULL, 'z' },
		{ "max-overhead", required_argument, NULL, OPT_MAX_OVERHEAD },
		{ "wait", no_argument, NULL, 'w' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	struct memprof_client_start_opts o = { .sz = sizeof(o) };
	struct memprof_client_profile *p = NULL;
	struct memprof_client *cl = NULL;
	struct mp_outfile out = { .fd = -1 };
	const char *output = NULL;
	bool wait = false;
	pid_t *pids = NULL;
	size_t npids = 0;
	uint32_t id;
	char *end;
	int c, r, ret = 1;
	unsigned long v;
	char msg[256];

	while ((c = getopt_long(argc, argv, "r:d:o:zwjh", opts, NULL)) != -1) {
		switch (c) {
		case 'r':
			errno = 0;
			o.rate = strtod(optarg, &end);
			if (errno || end == optarg || *end) {
				fprintf(stderr, "memprofctl attach: invalid rate '%s': a number\n",
					optarg);
				return 2;
			}
			if (mp_rate__check(o.rate, msg, sizeof(msg)) < 0) {
				fprintf(stderr, "memprofctl attach: %s\n", msg);
				return 2;
			}
			break;
		case OPT_CALLSTACK:
			errno = 0;
			v = strtoul(optarg, &end, 10);
			if (errno || end == optarg || *end || v < 1 || v > 127) {
				fprintf(stderr, "memprofctl attach: invalid callstack size '%s': "
					"1-127\n", optarg);
				return 2;
			}
			o.callstack_size = (unsigned int)v;
			break;
		case OPT_UNWIND:
			if (strcmp(optarg, "fp") && strcmp(optarg, "dwarf") && strcmp(optarg, "auto")) {
				fprintf(stderr, "memprofctl attach: invalid unwind mode '%s': fp, "
					"dwarf or auto\n", optarg);
				return 2;
			}
			o.unwind = optarg;
			break;
		case OPT_STACK_COPY:
			errno = 0;
			v = strtoul(optarg, &end, 10);
			if (errno || end == optarg || *end || v > 65536) {
				fprintf(stderr, "memprofctl attach: invalid stack copy size '%s': 0 to "
					"65536 bytes\n", optarg);
				return 2;
			}
			o.stack_copy_size = v ? (int)v : -1;
			break;
		case 'd':
			r = ctl_parse_duration(optarg, &o.duration_us);
			if (r == -ERANGE) {
				fprintf(stderr, "memprofctl attach: invalid duration '%s': "
					"from 1us to 366 days (%lluus)\n", optarg,
					MP_MAX_DURATION_US);
				return 2;
			}
			if (r < 0) {
				fprintf(stderr, "memprofctl attach: invalid duration '%s' (e.g. 30s, "
					"500ms, 5m)\n", optarg);
				return 2;
			}
			break;
		case 'o':
			output = optarg;
			break;
		case OPT_NO_FOLLOW:
			o.no_follow_forks = true;
			break;
		case OPT_FORMAT:
			if (strcmp(optarg, "2") && strcmp(optarg, "3")) {
				fprintf(stderr, "memprofctl attach: invalid format version '%s': 2 or "
					"3\n", optarg);
				return 2;
			}
			o.format_version = (uint16_t)atoi(optarg);
			break;
		case OPT_MAX_OVERHEAD:
			errno = 0;
			o.max_overhead = strtod(optarg, &end);
			if (errno || *end || end == optarg || !(o.max_overhead >= 0) ||
			    o.max_overhead > 1e6) {
				fprintf(stderr, "memprofctl attach: invalid overhead budget '%s': a "
					"percentage of one CPU >= 0 (0 = unlimited)\n", optarg);
				return 2;
			}
			break;
		case 'z':
			o.zstd = true;
			break;
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
	if (optind >= argc) {
		fprintf(stderr, "memprofctl attach: no PID given; try 'memprofctl attach --help'.\n");
		return 2;
	}
	pids = calloc((size_t)(argc - optind), sizeof(*pids));
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
	r = memprof_client__start(cl, pids, npids, &o, out.fd, &id);
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
		printf("Profile %" PRIu32 " %s %zu process(es); traces in %s%s%s\n", id,
		       p->state_name, npids, output ? output : p->directory,
		       output ? " (first process), " : "", output ? p->directory : "");
	}
	memprof_client_profile__free(p);
	ret = 0;
out:
	mp_outfile__abort(&out);	/* after the commit: nothing left to remove */
	free(pids);
	memprof_client__free(cl);
	return ret;
}
