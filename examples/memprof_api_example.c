// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * An in-process leak finder with the Gc.Memprof-style API of libmemprof-preload.
 *
 *	cc -O2 -fno-omit-frame-pointer -fno-builtin-malloc -fno-builtin-free -rdynamic \
 *		memprof_api_example.c -lmemprof-preload
 *	./a.out [RATE]
 *
 * The tracker keeps one record per sampled block (in a fixed array: callbacks run inside the
 * allocator, so they should not allocate much themselves, although what they allocate is never
 * sampled). The dealloc callback drops the record. After the workload, the records still live
 * are the sampled leaks: each stands for n_samples / rate words. They are grouped by their
 * allocation site (innermost frame), estimated in bytes and named with dladdr().
 */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memprof/memprof.h>

#define MAX_LIVE	65536

struct live {
	uintptr_t site;		/* innermost return address; 0: free record */
	uint64_t n_samples;
};

static struct live live[MAX_LIVE];
static unsigned int next_free;			/* records are handed out round-robin */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void *volatile sink;

static void *on_alloc(const struct memprof_allocation *a, void *ctx)
{
	struct live *r = NULL;

	(void)ctx;
	pthread_mutex_lock(&lock);
	for (unsigned int i = 0; i < MAX_LIVE && !r; i++, next_free = (next_free + 1) % MAX_LIVE)
		if (!live[next_free].site)
			r = &live[next_free];
	if (r) {
		r->site = a->callstack_len ? a->callstack[0] : 1;
		r->n_samples = a->n_samples;
	}
	pthread_mutex_unlock(&lock);
	return r;	/* NULL (table full): not tracked */
}

static void on_dealloc(void *meta, void *ctx)
{
	struct live *r = meta;

	(void)ctx;
	pthread_mutex_lock(&lock);
	r->site = 0;
	pthread_mutex_unlock(&lock);
}

/* ---- a workload with one leak ---------------------------------------------------------- */

struct node {
	struct node *next;
	char payload[200];
};

/* Exported (-rdynamic) so that dladdr() names them. */
struct node *make_node(struct node *next);
void parse_request(int i);
void leak_cache_entry(int i);

__attribute__((noinline)) struct node *make_node(struct node *next)
{
	struct node *n = malloc(sizeof(*n));

	if (n)
		n->next = next;
	return n;
}

__attribute__((noinline)) void parse_request(int i)
{
	char *buf = malloc(512 + (size_t)(i % 7) * 64);

	sink = buf;
	free(buf);
}

__attribute__((noinline)) void leak_cache_entry(int i)
{
	/* Forgets one entry in 16: the leak to find. */
	char *entry = malloc(1024);

	sink = entry;
	if (i % 16)
		free(entry);
}

static void workload(void)
{
	struct node *list = NULL;

	for (int i = 0; i < 200000; i++) {
		parse_request(i);
		leak_cache_entry(i);
		list = make_node(list);
		if (i % 1000 == 999) {
			while (list) {
				struct node *n = list->next;

				free(list);
				list = n;
			}
		}
	}
}

/* ---- report ---------------------------------------------------------------------------- */

struct site {
	uintptr_t pc;
	uint64_t n_samples, blocks;
};

static int by_samples(const void *a, const void *b)
{
	const struct site *x = a, *y = b;

	return x->n_samples < y->n_samples ? 1 : x->n_samples > y->n_samples ? -1 : 0;
}

int main(int argc, char **argv)
{
	static const struct memprof_tracker tracker = { .alloc = on_alloc, .dealloc = on_dealloc };
	double rate = argc > 1 ? strtod(argv[1], NULL) : 1e-3;
	static struct site sites[256];
	struct memprof_profile *p;
	struct memprof_stats st;
	size_t nsites = 0;

	p = memprof_start(rate, 16, &tracker, NULL);
	if (!p) {
		fprintf(stderr, "Failed to start profiling at rate %g: %s\n", rate, strerror(errno));
		return 1;
	}
	workload();
	/* No new samples; frees of tracked blocks would still be reported until discard. */
	memprof_stop();
	memprof_profile_stats(p, &st);

	pthread_mutex_lock(&lock);
	for (unsigned int i = 0; i < MAX_LIVE; i++) {
		size_t k;

		if (!live[i].site)
			continue;
		for (k = 0; k < nsites && sites[k].pc != live[i].site; k++)
			;
		if (k == nsites) {
			if (nsites == 256)
				continue;
			sites[nsites++] = (struct site){ .pc = live[i].site };
		}
		sites[k].n_samples += live[i].n_samples;
		sites[k].blocks++;
	}
	pthread_mutex_unlock(&lock);
	memprof_discard(p);

	qsort(sites, nsites, sizeof(*sites), by_samples);
	printf("%" PRIu64 " samples in %" PRIu64 " blocks; %" PRIu64 " blocks still live\n",
	       st.samples, st.blocks, st.tracked);
	printf("%-12s %8s  %s\n", "est. bytes", "samples", "allocation site");
	for (size_t k = 0; k < nsites && k < 10; k++) {
		Dl_info info = { 0 };
		const char *name = "?";

		if (dladdr((void *)sites[k].pc, &info) && info.dli_sname)
			name = info.dli_sname;
		printf("%-12.0f %8" PRIu64 "  %s+%#lx\n", (double)sites[k].n_samples / rate * 8,
		       sites[k].n_samples, name,
		       (unsigned long)(sites[k].pc - (uintptr_t)(info.dli_saddr ? info.dli_saddr :
								     NULL)));
	}
	return 0;
}
