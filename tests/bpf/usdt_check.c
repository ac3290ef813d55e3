// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Attach real uprobes to libmemprof-preload's USDT probes in a real process and check what
 * arrives (tests/bpf/preload-usdt.sh, root).
 *
 *	usdt_check [--no-attach] LIB WORKLOAD
 *
 * Starts WORKLOAD (tests/workloads/pl_usdt.c) with LD_PRELOAD=LIB, MEMPROF_RATE=0.01 and
 * MEMPROF_BATCH=1 (immediate reports: flushes of the deferred queue are not checked here),
 * waits until it runs, attaches memprof:alloc, memprof:free and memprof:free_batch to it with
 * bpf_program__attach_usdt() (which sets the semaphore's ref_ctr_offset, so the kernel
 * arms the library), lets it allocate and free, and compares the events with the library's
 * own counters: every free is reported by id (most of them batched, the last ones by the
 * library's destructor at exit). With --no-attach the library must stay disarmed: no hook
 * runs, nothing arrives.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bpf/libbpf.h>

#include <memprof/preload.h>

#include "tests/bpf/result.h"
#include "tests/bpf/usdt_check.h"
#include "usdt_check.skel.h"

#define MAX_EVENTS (1 << 20)

static struct uc_event *events;
static size_t nevents;

static int on_event(void *ctx, void *data, size_t len)
{
	if (len >= sizeof(struct uc_event) && nevents < MAX_EVENTS)
		events[nevents++] = *(struct uc_event *)data;
	return 0;
}

int main(int argc, char **argv)
{
	bool attach = true;
	struct usdt_check_bpf *skel = NULL;
	struct bpf_link *links[3] = { NULL, NULL, NULL };
	struct ring_buffer *rb = NULL;
	int go[2], rep[2], ep = -1, status;
	char stats[256] = "";
	size_t stats_len = 0;
	pid_t pid;
	const char *lib, *wl;

	result_prefix = "usdt: ";
	if (argc > 1 && !strcmp(argv[1], "--no-attach")) {
		attach = false;
		argv++;
		argc--;
	}
	if (argc != 3) {
		fprintf(stderr, "usage: usdt_check [--no-attach] LIB WORKLOAD\n");
		return 2;
	}
	lib = argv[1];
	wl = argv[2];
	events = calloc(MAX_EVENTS, sizeof(*events));
	skel = usdt_check_bpf__open_and_load();
	if (!events || !skel) {
		fprintf(stderr, "Failed to load the BPF program: %s\n", strerror(errno));
		return 1;
	}
	rb = ring_buffer__new(bpf_map__fd(skel->maps.events), on_event, NULL, NULL);
	if (!rb || pipe2(go, O_CLOEXEC) || pipe2(rep, O_CLOEXEC)) {
		fprintf(stderr, "Failed to set up the ring buffer: %s\n", strerror(errno));
		return 1;
	}
	pid = fork();
	if (pid == 0) {
		if (dup2(go[0], 3) < 0 || dup2(rep[1], 4) < 0)
			_exit(127);
		setenv("LD_PRELOAD", lib, 1);
		setenv("MEMPROF_RATE", "0.01", 1);
		/* immediate reports: this checker reads memprof:alloc/free/free_batch only */
		setenv("MEMPROF_BATCH", "1", 1);
		unsetenv("MEMPROF_ARM");
		unsetenv("MEMPROF_TEST_LOG");
		execl(wl, wl, (char *)NULL);
		_exit(127);
	}
	close(go[0]);
	close(rep[1]);
	char c;

	if (pid < 0 || read(rep[0], &c, 1) != 1 || c != 'R') {
		fprintf(stderr, "Failed to start '%s'\n", wl);
		return 1;
	}
	if (attach) {
		links[0] = bpf_program__attach_usdt(skel->progs.on_alloc, pid, lib, "memprof",
						    "alloc", NULL);
		links[1] = bpf_program__attach_usdt(skel->progs.on_free, pid, lib, "memprof",
						    "free", NULL);
		links[2] = bpf_program__attach_usdt(skel->progs.on_free_batch, pid, lib, "memprof",
						    "free_batch", NULL);
		if (!links[0] || !links[1] || !links[2]) {
			fprintf(stderr, "Failed to attach to the USDT probes of '%s': %s\n", lib,
				strerror(errno));
			kill(pid, SIGKILL);
			return 1;
		}
	}
	if (write(go[1], "G", 1) != 1)
		return 1;

	/* Wait for events and for the workload's report (then EOF), never by sleeping. */
	struct epoll_event ev = { .events = EPOLLIN };

	ep = epoll_create1(EPOLL_CLOEXEC);
	ev.data.fd = ring_buffer__epoll_fd(rb);
	epoll_ctl(ep, EPOLL_CTL_ADD, ev.data.fd, &ev);
	ev.data.fd = rep[0];
	epoll_ctl(ep, EPOLL_CTL_ADD, rep[0], &ev);
	for (bool eof = false; !eof;) {
		struct epoll_event out[2];
		int n = epoll_wait(ep, out, 2, -1);

		if (n < 0 && errno != EINTR)
			break;
		for (int i = 0; i < n; i++) {
			if (out[i].data.fd == rep[0]) {
				ssize_t r = read(rep[0], stats + stats_len,
						 sizeof(stats) - 1 - stats_len);

				if (r <= 0)
					eof = true;
				else
					stats_len += (size_t)r;
			} else {
				ring_buffer__consume(rb);
			}
		}
	}
	waitpid(pid, &status, 0);
	ring_buffer__consume(rb);

	unsigned long hooks = 0, fhooks = 0, samples = 0, armings = 0, live = 0, queued = 0;
	unsigned long unwalked = 0;

	result(WIFEXITED(status) && WEXITSTATUS(status) == 0, "workload exited 0");
	result(sscanf(stats, "%lu %lu %lu %lu %lu %lu %lu", &hooks, &fhooks, &samples, &armings,
		      &live, &queued, &unwalked) == 7,
	       "workload reported its counters (%s)", stats);

	size_t nalloc = 0, nfree = 0, nbatched = 0, badsize = 0, unmatched = 0, other_pid = 0;
	size_t badid = 0, unwalked_ev = 0;
	uint64_t nsum = 0, last_id = 0;
	struct uc_event **live_ev = calloc(nevents + 1, sizeof(*live_ev));
	size_t nlive = 0;

	for (size_t i = 0; i < nevents; i++) {
		struct uc_event *e = &events[i];

		other_pid += e->pid != (uint32_t)pid;
		if (e->type == UC_ALLOC) {
			nalloc++;
			nsum += e->nsamples;
			if ((e->size != 3000 && e->size != 50000) ||
			    e->kind != MEMPROF_PRELOAD_MALLOC || e->nsamples < 1 || e->gen != 0)
				badsize++;
			/* one thread: ids come in order, each new */
			badid += e->id <= last_id;
			last_id = e->id;
			unwalked_ev += e->nframes < 0;
			live_ev[nlive++] = e;
		} else {
			bool found = false;

			nfree++;
			nbatched += e->type == UC_BATCHED;
			for (size_t j = nlive; j-- > 0;)
				if (live_ev[j]->id == e->id) {
					found = e->type == UC_BATCHED ||
						(e->addr == live_ev[j]->addr &&
						 e->kind == MEMPROF_PRELOAD_FREE);
					live_ev[j] = live_ev[--nlive];
					break;
				}
			unmatched += !found;
		}
	}

	if (attach) {
		result(armings >= 1, "the attach armed the library through the semaphore "
		       "(%lu armings)", armings);
		result(nalloc > 100, "alloc events arrived (%zu)", nalloc);
		result(nalloc == hooks, "one event per alloc hook (%zu events, %lu hooks)", nalloc,
		       hooks);
		result(badid == 0, "ids are unique and increasing (%zu bad)", badid);
		result(nfree == fhooks + queued,
		       "every free of a sampled block reported once, by id (%zu events, %lu at "
		       "once + %lu queued)", nfree, fhooks, queued);
		result(nbatched == queued && nbatched > 1000,
		       "frees go out in batches (%zu batched, %lu queued)", nbatched, queued);
		result(nsum == samples, "nsamples as drawn in-process (%" PRIu64 " vs %lu)", nsum,
		       samples);
		result(badsize == 0, "sizes, kinds and nsamples are the workload's (%zu bad)",
		       badsize);
		result(unmatched == 0, "every free event names a sampled block (%zu unmatched)",
		       unmatched);
		result(nlive == live, "blocks left live match the library's count, pending frees "
		       "flushed at exit (%zu vs %lu)", nlive, live);
		result(unwalked_ev == 0 && unwalked == 0,
		       "the library walked every stack itself (%zu, %lu not walked)", unwalked_ev,
		       unwalked);
		result(other_pid == 0, "only the target process reports");
		result(skel->bss->drops == 0 && skel->bss->read_errors == 0,
		       "no ring buffer drops, no read errors");
	} else {
		result(armings == 0, "without a probe the library never arms");
		result(hooks == 0 && fhooks == 0, "without a probe no hook runs (%lu, %lu)", hooks,
		       fhooks);
		result(nevents == 0, "without a probe nothing arrives (%zu)", nevents);
	}
	free(live_ev);
	for (int i = 0; i < 3; i++)
		bpf_link__destroy(links[i]);
	ring_buffer__free(rb);
	usdt_check_bpf__destroy(skel);
	free(events);
	return result_failures ? 1 : 0;
}
