// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * floor: run a command with empty BPF uprobe programs on the allocator probe points memprofd
 * uses, to measure the physical floor of probe-every-call profiling (bench/run).
 *
 *   floor [-c] [-e | -s] [-q] [-v] [-l OBJECT]... [--] COMMAND [ARGS...]
 *
 * The command is forked and held on a pipe before exec; the programs are loaded and attached
 * pid-filtered to the child; then the child is released, so the whole run is probed. floor
 * exits with the command's status and prints its figures to stderr as "floor: key value" lines.
 *
 * Probe points: every allocator function memprofd probes (the malloc family, C++ new/delete,
 * mmap/munmap) that each OBJECT defines; entry programs where memprofd's placement rule
 * (daemon/probe/placement.c, linked in) puts them, return programs on the functions memprofd
 * return-probes (unless -e: entry probes only, the floor of memprofd's uprobe-session mode,
 * where the return half runs for sampled calls only; or -s: an empty uprobe session program on
 * one uprobe_multi session link per object, returning 1 so the return half never runs, which
 * is memprofd's own mechanism with nothing sampled). Free-like functions are probed on their
 * first emulated instruction of the non-NULL path (free+9, a push, on Debian 12's glibc:
 * free's own first instruction, test %rdi,%rdi, would be single-stepped at 12-15 us per call).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <getopt.h>
#include <libelf.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <bpf/libbpf.h>
#include <bpf/bpf.h>

#include "bench/bench.h"
#include "bench/floor.h"
#include "bench/floor.skel.h"
#include "daemon/probe/elf_syms.h"
#include "daemon/probe/placement.h"
#include "daemon/probe/uprobe_link.h"

#define MAX_LINKS	512
#define MAX_OBJS	64

/*
 * The allocator entry points memprofd probes in every object that defines them, with the
 * argument registers its entry programs read, whether a return probe shares the point, and
 * whether the function frees (pointer in %rdi: placement follows the non-NULL path).
 * Generated from daemon/probe/discover.c's probe table by bench/gen-floor-probes.
 */
struct floor_probe {
	const char *sym;
	unsigned int nargs;
	bool ret;
	bool free_like;
};

static const struct floor_probe probes[] = {
#include "bench/floor_probes.h"
};

#define N_PROBES (sizeof(probes) / sizeof(probes[0]))

struct loader {
	struct floor_bpf *skel;
	pid_t pid;
	bool verbose;
	bool entry_only;	/* no return probes: one trap per call, perf-event uprobes */
	bool session;		/* empty session program on uprobe_multi session links */
	size_t nlinks, nprobes;
	struct bpf_link *links[MAX_LINKS];
	size_t nfds;
	int fds[MAX_OBJS];	/* session links, one per object */
	unsigned int emulated, stepped;	/* entry probe points by kind of instruction */
};

static int probe_index(const char *name, void *ctx)
{
	for (size_t i = 0; i < N_PROBES; i++)
		if (!strcmp(probes[i].sym, name))
			return (int)i;
	return -1;
}

/* memprofd's placement rule (daemon/probe/placement.h) for one function at file offset @off. */
static uint64_t place(int fd, const struct floor_probe *pr, uint64_t off, uint64_t size,
		      uint64_t avail, struct mp_placement *pl)
{
	struct mp_placement_req req = {
		.addr = off,
		.nargs = pr->nargs,
		.has_return = pr->ret,
		.skip_null_check = pr->free_like,
	};

	memset(pl, 0, sizeof(*pl));
	mp_elf_place(fd, &req, size, avail, pl);
	return pl->offset;
}

static int attach_one(struct loader *l, struct bpf_program *prog, const char *path,
		      uint64_t off, bool retprobe, const char *sym)
{
	LIBBPF_OPTS(bpf_uprobe_opts, uo, .retprobe = retprobe);
	struct bpf_link *link;

	if (l->nlinks >= MAX_LINKS) {
		fprintf(stderr, "floor: more than %d probes\n", MAX_LINKS);
		return -E2BIG;
	}
	link = bpf_program__attach_uprobe_opts(prog, l->pid, path, (size_t)off, &uo);
	if (!link) {
		int err = -errno;

		fprintf(stderr, "floor: failed to attach %s to '%s' in '%s': %s\n",
			retprobe ? "uretprobe" : "uprobe", sym, path, strerror(-err));
		return err;
	}
	l->links[l->nlinks++] = link;
	l->nprobes++;
	return 0;
}

/* floor -s: one session link for the @n points of @path, as memprofd attaches mp_session. */
static int attach_session(struct loader *l, const char *path, const uint64_t *at, size_t n)
{
	int fd;

	if (!n)
		return 0;
	if (l->nfds >= MAX_OBJS) {
		fprintf(stderr, "floor: more than %d session links\n", MAX_OBJS);
		return -E2BIG;
	}
	fd = mp_uprobe_multi_link(bpf_program__fd(l->skel->progs.floor_session),
				  MP_BPF_TRACE_UPROBE_SESSION, l->pid, path, at, NULL, NULL,
				  (uint32_t)n, false);
	if (fd < 0) {
		fprintf(stderr, "floor: failed to attach a uprobe session link to %zu functions in "
			"'%s': %s\n", n, path, strerror(-fd));
		return fd;
	}
	l->fds[l->nfds++] = fd;
	l->nprobes += n;
	return 0;
}

/* Attach to every allocator entry point @path defines, as memprofd would. */
static int attach_object(struct loader *l, const char *path)
{
	struct mp_sym_found found[N_PROBES] = { 0 };
	uint64_t offs[N_PROBES], points[N_PROBES];
	size_t noffs = 0, npoints = 0;
	int fd, err = 0;
	Elf *elf;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		err = -errno;
		fprintf(stderr, "floor: failed to open '%s': %s\n", path, strerror(-err));
		return err;
	}
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF) {
		fprintf(stderr, "floor: failed to read ELF file '%s': %s\n", path, elf_errmsg(-1));
		err = -EINVAL;
		goto out;
	}
	mp_elf_find_funcs(elf, probe_index, NULL, found);
	for (size_t i = 0; i < N_PROBES && !err; i++) {
		const struct floor_probe *pr = &probes[i];
		struct mp_placement pl;
		uint64_t off, avail, at;
		bool dup = false;

		if (!found[i].prio || mp_elf_vaddr_to_off(elf, found[i].value, &off, &avail, NULL))
			continue;
		for (size_t j = 0; j < noffs; j++)
			dup |= offs[j] == off;	/* aliases: the first name wins */
		if (dup)
			continue;
		offs[noffs++] = off;
		at = off + place(fd, pr, off, found[i].size, avail, &pl);
		if (pl.emulated)
			l->emulated++;
		else
			l->stepped++;
		if (l->verbose)
			fprintf(stderr, "floor: probe %s+%#llx in %s (%s%s): %s\n", pr->sym,
				(unsigned long long)(at - off), path, pl.insn,
				pl.emulated ? ", emulated" : ", single-stepped", pl.reason);
		if (l->session) {
			points[npoints++] = at;
			continue;
		}
		err = attach_one(l, pr->free_like ? l->skel->progs.floor_free
						  : l->skel->progs.floor_alloc_entry,
				 path, at, false, pr->sym);
		if (!err && pr->ret && !l->entry_only)
			err = attach_one(l, l->skel->progs.floor_alloc_return, path, at, true,
					 pr->sym);
	}
	if (!err && l->session)
		err = attach_session(l, path, points, npoints);
out:
	if (elf)
		elf_end(elf);
	close(fd);
	return err;
}

static const char *libc_path(char *buf)
{
	Dl_info info;

	if (!dladdr((void *)&malloc, &info) || !info.dli_fname || !realpath(info.dli_fname, buf))
		return NULL;
	return buf;
}

static void usage(FILE *f, const char *prog)
{
	fprintf(f,
		"Usage: %s [-c] [-e | -s] [-q] [-v] [-l OBJECT]... [--] COMMAND [ARGS...]\n"
		"Run COMMAND with empty BPF programs on memprofd's allocator probe points.\n"
		"  -c         count probe hits (adds a map update per hit) and print the counts\n"
		"  -e         entry probes only, no return probes (the floor with uprobe sessions,\n"
		"             whose return half runs for sampled calls only)\n"
		"  -s         an empty uprobe session program (entry returns 1: no return half) on\n"
		"             one uprobe_multi session link per object: memprofd's own mechanism\n"
		"             (Linux 6.13+)\n"
		"  -l OBJECT  probe the allocator functions OBJECT defines (repeatable; default:\n"
		"             the C library this program uses)\n"
		"  -q         print nothing but errors\n"
		"  -v         print each probe point and why it was chosen\n",
		prog);
}

static int wait_child(pid_t pid, int *status)
{
	while (waitpid(pid, status, 0) < 0) {
		int err = errno;

		if (err != EINTR) {
			fprintf(stderr, "floor: failed to wait for pid %d: %s\n", pid, strerror(err));
			return -err;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const char *const hit_names[] = { "alloc_entry", "alloc_return", "free", "session" };
	struct loader l = { 0 };
	const char *objs[MAX_OBJS];
	char libc_buf[PATH_MAX];
	size_t nobjs = 0;
	bool count = false, quiet = false, released = false;
	int go[2] = { -1, -1 };
	int opt, status = 0, ret = 1;
	double t0, t_load, t_attach, t_release = 0, t_exit = 0;

	while ((opt = getopt(argc, argv, "+cel:qsvh")) != -1) {
		switch (opt) {
		case 'c':
			count = true;
			break;
		case 'e':
			l.entry_only = true;
			break;
		case 'l':
			if (nobjs == MAX_OBJS) {
				fprintf(stderr, "floor: at most %d objects\n", MAX_OBJS);
				return 2;
			}
			objs[nobjs++] = optarg;
			break;
		case 'q':
			quiet = true;
			break;
		case 's':
			l.session = true;
			break;
		case 'v':
			l.verbose = true;
			break;
		case 'h':
			usage(stdout, argv[0]);
			return 0;
		default:
			usage(stderr, argv[0]);
			return 2;
		}
	}
	if (optind >= argc || (l.entry_only && l.session)) {
		usage(stderr, argv[0]);
		return 2;
	}
	if (!nobjs) {
		if (!libc_path(libc_buf)) {
			fprintf(stderr, "floor: failed to find the C library's path\n");
			return 1;
		}
		objs[nobjs++] = libc_buf;
	}
	if (elf_version(EV_CURRENT) == EV_NONE) {
		fprintf(stderr, "floor: failed to initialize libelf: %s\n", elf_errmsg(-1));
		return 1;
	}

	if (pipe2(go, O_CLOEXEC)) {
		fprintf(stderr, "floor: failed to create a pipe: %s\n", strerror(errno));
		return 1;
	}
	l.pid = fork();
	if (l.pid < 0) {
		fprintf(stderr, "floor: failed to fork: %s\n", strerror(errno));
		return 1;
	}
	if (l.pid == 0) {
		char c;

		close(go[1]);
		if (read(go[0], &c, 1) != 1)
			_exit(127);	/* the loader failed: never run unprobed */
		execvp(argv[optind], argv + optind);
		fprintf(stderr, "floor: failed to execute '%s': %s\n", argv[optind], strerror(errno));
		_exit(127);
	}
	close(go[0]);

	t0 = bench_now_ms();
	libbpf_set_strict_mode(LIBBPF_STRICT_ALL);
	l.skel = floor_bpf__open();
	if (!l.skel) {
		fprintf(stderr, "floor: failed to open the BPF object: %s\n", strerror(errno));
		goto out;
	}
	l.skel->rodata->count_hits = count;
	/* The session program loads only on kernels that have sessions: only when asked for. */
	bpf_program__set_autoload(l.skel->progs.floor_session, l.session);
	if (l.session)
		bpf_program__set_expected_attach_type(l.skel->progs.floor_session,
						      MP_BPF_TRACE_UPROBE_SESSION);
	if (floor_bpf__load(l.skel)) {
		fprintf(stderr, "floor: failed to load the BPF programs: %s\n", strerror(errno));
		goto out;
	}
	t_load = bench_now_ms();
	for (size_t i = 0; i < nobjs; i++)
		if (attach_object(&l, objs[i]))
			goto out;
	if (!l.nprobes) {
		fprintf(stderr, "floor: no allocator function found in the objects given\n");
		goto out;
	}
	t_attach = t_release = bench_now_ms();
	if (write(go[1], "g", 1) != 1) {
		fprintf(stderr, "floor: failed to release the child: %s\n", strerror(errno));
		goto out;
	}
	released = true;
	close(go[1]);
	go[1] = -1;
	if (wait_child(l.pid, &status))
		goto out;
	t_exit = bench_now_ms();
	l.pid = 0;
	ret = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);

	if (!quiet) {
		fprintf(stderr, "floor: load_ms %.1f\nfloor: attach_ms %.1f\nfloor: probes %zu\n"
			"floor: entry_points_emulated %u\nfloor: entry_points_single_stepped %u\n"
			"floor: child_ms %.1f\n", t_load - t0, t_attach - t_load, l.nprobes,
			l.emulated, l.stepped, t_exit - t_release);
	}
	if (count) {
		int ncpu = libbpf_num_possible_cpus();

		for (uint32_t k = 0; k < FLOOR_HIT__MAX && ncpu > 0; k++) {
			uint64_t vals[ncpu], sum = 0;

			if (bpf_map__lookup_elem(l.skel->maps.hits, &k, sizeof(k), vals, sizeof(vals),
						 0))
				continue;
			for (int c = 0; c < ncpu; c++)
				sum += vals[c];
			fprintf(stderr, "floor: hits_%s %llu\n", hit_names[k],
				(unsigned long long)sum);
		}
	}
out:
	if (go[1] >= 0)
		close(go[1]);	/* not released: the child exits without running the command */
	if (l.pid > 0) {
		if (released)
			kill(l.pid, SIGKILL);
		wait_child(l.pid, &status);
	}
	/* Each uprobe link's destruction waits ~0.1 s in the kernel, serialized: not measured. */
	while (l.nlinks > 0)
		bpf_link__destroy(l.links[--l.nlinks]);
	while (l.nfds > 0)
		close(l.fds[--l.nfds]);
	floor_bpf__destroy(l.skel);
	return ret;
}
