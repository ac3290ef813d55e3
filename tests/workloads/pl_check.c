// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Checks a MEMPROF_TEST_LOG written by libmemprof-preload (not run under the preload).
 *
 *	pl_check -n NAME -l LOG [-r RATE -T THREADS -c SIZE:COUNT,... [-k LEAKS] [-x SIZE]]
 *		 [-X] [-P] [-s]
 *
 * Always: records well-formed; in each process, a free names a block that is live in the
 * log, and an alloc never names a live block (frees are written before the memory goes
 * back to the allocator, so file order is causal order). -P tolerates frees of blocks
 * allocated under another pid (inherited across fork). -X requires cross-thread frees.
 * With -c: for every class (blocks of SIZE allocated with malloc by worker threads, COUNT
 * per thread), the estimate sum(n)/rate of allocated words is within 4 SE of the truth;
 * with -k (the workload's "L addr size" lines), the same for leaked words, and every other
 * class block was freed. -x SIZE: chi-square of samples per block against Binomial(w, rate).
 * -s prints a one-line summary. Results are PASS:/FAIL: lines; exit 1 on any failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memprof/preload.h>

#include "tests/unit/chisq.h"

#define MAX_CLASSES 16

struct live {
	uint64_t addr;		/* 0: empty */
	uint32_t pid, tid;
	uint64_t size, n;
	uint32_t kind;
	bool leaked;
};

static struct live *map;
static size_t map_cap;
static const char *name = "preload";
static int failures;

static void result(bool ok, const char *what)
{
	printf("%s: %s: %s\n", ok ? "PASS" : "FAIL", name, what);
	if (!ok)
		failures++;
}

static size_t slot_of(uint32_t pid, uint64_t addr)
{
	uint64_t h = (addr ^ ((uint64_t)pid << 48)) * 0x9e3779b97f4a7c15ULL;
	size_t i = h & (map_cap - 1);

	while (map[i].addr && !(map[i].addr == addr && map[i].pid == pid))
		i = (i + 1) & (map_cap - 1);
	return i;
}

/* Backward-shift deletion keeps linear probing without tombstones. */
static void map_del(size_t i)
{
	size_t j = i;

	map[i].addr = 0;
	for (;;) {
		j = (j + 1) & (map_cap - 1);
		if (!map[j].addr)
			return;
		uint64_t h = (map[j].addr ^ ((uint64_t)map[j].pid << 48)) * 0x9e3779b97f4a7c15ULL;
		size_t k = h & (map_cap - 1);

		if ((j > i && (k <= i || k > j)) || (j < i && (k <= i && k > j))) {
			map[i] = map[j];
			map[j].addr = 0;
			i = j;
		}
	}
}

static bool find_any_pid(uint64_t addr)
{
	for (size_t i = 0; i < map_cap; i++)
		if (map[i].addr == addr)
			return true;
	return false;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	const char *log = NULL, *leakfile = NULL;
	double rate = 0;
	int threads = 1, opt;
	bool need_xthread = false, multi_pid = false, summary = false;
	struct {
		uint64_t size, count, tracked, nsum, leaked_blocks, leaked_words, leaked_n;
		uint64_t hist[64];
	} cls[MAX_CLASSES] = { 0 };
	int ncls = 0;
	uint64_t chi_size = 0;

	while ((opt = getopt(argc, argv, "n:l:r:T:c:k:x:XPs")) != -1) {
		switch (opt) {
		case 'n': name = optarg; break;
		case 'l': log = optarg; break;
		case 'r': rate = strtod(optarg, NULL); break;
		case 'T': threads = atoi(optarg); break;
		case 'c': {
			char *save = NULL;

			for (char *s = strtok_r(optarg, ",", &save); s && ncls < MAX_CLASSES;
			     s = strtok_r(NULL, ",", &save)) {
				if (sscanf(s, "%lu:%lu", &cls[ncls].size, &cls[ncls].count) != 2)
					return 2;
				cls[ncls++].count *= (uint64_t)threads;
			}
			break;
		}
		case 'k': leakfile = optarg; break;
		case 'x': chi_size = strtoull(optarg, NULL, 0); break;
		case 'X': need_xthread = true; break;
		case 'P': multi_pid = true; break;
		case 's': summary = true; break;
		default: return 2;
		}
	}
	if (!log) {
		fprintf(stderr, "pl_check: -l LOG is required\n");
		return 2;
	}

	int fd = open(log, O_RDONLY | O_CLOEXEC);
	struct stat st;

	if (fd < 0 || fstat(fd, &st) < 0) {
		fprintf(stderr, "Failed to open '%s': %s\n", log, strerror(errno));
		return 1;
	}
	size_t nrec = (size_t)st.st_size / sizeof(struct memprof_preload_test_rec);
	struct memprof_preload_test_rec *recs = malloc(nrec * sizeof(*recs) + 1);

	if (!recs || read(fd, recs, nrec * sizeof(*recs)) != (ssize_t)(nrec * sizeof(*recs))) {
		fprintf(stderr, "Failed to read '%s'\n", log);
		return 1;
	}
	close(fd);
	result((size_t)st.st_size % sizeof(struct memprof_preload_test_rec) == 0,
	       "log is whole records");

	map_cap = 1;
	while (map_cap < 2 * nrec + 16)
		map_cap <<= 1;
	map = calloc(map_cap, sizeof(*map));

	uint64_t bad = 0, bad_free = 0, bad_alloc = 0, inherited = 0, xthread = 0, frees = 0;
	uint64_t allocs = 0;

	for (size_t r = 0; r < nrec; r++) {
		struct memprof_preload_test_rec *e = &recs[r];
		size_t i;

		if (e->type == MEMPROF_PRELOAD_REC_ALLOC) {
			allocs++;
			if (!e->nsamples || !e->addr || e->kind < MEMPROF_PRELOAD_MALLOC ||
			    e->kind > MEMPROF_PRELOAD_MMAP) {
				bad++;
				continue;
			}
			i = slot_of(e->pid, e->addr);
			if (map[i].addr) {
				if (bad_alloc++ < 5)
					fprintf(stderr, "alloc at live address %#lx (pid %u)\n",
						e->addr, e->pid);
				continue;
			}
			map[i] = (struct live){ e->addr, e->pid, e->tid, e->size, e->nsamples,
						e->kind, false };
			for (int c = 0; c < ncls; c++) {
				if (e->kind != MEMPROF_PRELOAD_MALLOC || e->size != cls[c].size ||
				    e->tid == e->pid)
					continue;
				cls[c].tracked++;
				cls[c].nsum += e->nsamples;
				cls[c].hist[e->nsamples < 63 ? e->nsamples : 63]++;
			}
		} else if (e->type == MEMPROF_PRELOAD_REC_FREE) {
			frees++;
			if (e->kind != MEMPROF_PRELOAD_FREE && e->kind != MEMPROF_PRELOAD_DELETE &&
			    e->kind != MEMPROF_PRELOAD_MUNMAP && e->kind != MEMPROF_PRELOAD_REALLOC &&
			    e->kind != MEMPROF_PRELOAD_REALLOCARRAY) {
				bad++;
				continue;
			}
			i = slot_of(e->pid, e->addr);
			if (!map[i].addr) {
				if (multi_pid && find_any_pid(e->addr)) {
					inherited++;
					continue;
				}
				if (bad_free++ < 5)
					fprintf(stderr, "free of untracked %#lx (pid %u)\n", e->addr,
						e->pid);
				continue;
			}
			xthread += map[i].tid != e->tid;
			map_del(i);
		} else {
			bad++;
		}
	}
	result(bad == 0, "records well-formed");
	result(bad_free == 0, "every free names a live sampled block");
	result(bad_alloc == 0, "no alloc at a live sampled address");
	if (need_xthread)
		result(xthread > 0, "cross-thread frees matched");
	if (summary)
		fprintf(stderr, "%s: %zu records, %lu allocs, %lu frees, %lu cross-thread, "
			"%lu inherited\n", name, nrec, allocs, frees, xthread, inherited);

	/* Leaked blocks: mark them, and account their true words per class. */
	if (leakfile) {
		FILE *f = fopen(leakfile, "re");
		char line[128];
		uint64_t *sorted = NULL, nsorted = 0, cap = 0, missing_live = 0;

		if (!f) {
			fprintf(stderr, "Failed to open '%s': %s\n", leakfile, strerror(errno));
			return 1;
		}
		while (fgets(line, sizeof(line), f)) {
			void *p;
			uint64_t size;

			if (sscanf(line, "L %p %lu", &p, &size) != 2)
				continue;
			for (int c = 0; c < ncls; c++)
				if (cls[c].size == size) {
					cls[c].leaked_blocks++;
					cls[c].leaked_words += (size + 15) / 8;
				}
			if (nsorted == cap) {
				cap = cap ? cap * 2 : 1024;
				sorted = realloc(sorted, cap * sizeof(*sorted));
			}
			sorted[nsorted++] = (uint64_t)(uintptr_t)p;
		}
		fclose(f);
		qsort(sorted, nsorted, sizeof(*sorted), cmp_u64);
		/* Every live class block must be a leak; leaked sampled blocks must be live. */
		uint64_t live_not_leaked = 0;

		for (size_t i = 0; i < map_cap; i++) {
			struct live *l = &map[i];
			bool is_cls = false;

			if (!l->addr)
				continue;
			for (int c = 0; c < ncls; c++)
				is_cls |= l->kind == MEMPROF_PRELOAD_MALLOC && l->size == cls[c].size &&
					  l->tid != l->pid;
			if (!is_cls)
				continue;
			if (!bsearch(&l->addr, sorted, nsorted, sizeof(*sorted), cmp_u64)) {
				live_not_leaked++;
				continue;
			}
			l->leaked = true;
			for (int c = 0; c < ncls; c++)
				if (l->size == cls[c].size)
					cls[c].leaked_n += l->n;
		}
		(void)missing_live;
		if (live_not_leaked)
			fprintf(stderr, "%lu freed class blocks never collected\n", live_not_leaked);
		result(live_not_leaked == 0, "every freed sampled block was collected");
		free(sorted);
	}

	for (int c = 0; c < ncls && rate > 0; c++) {
		uint64_t w = (cls[c].size + 15) / 8;
		double wt = (double)w * (double)cls[c].count;
		double z = ((double)cls[c].nsum / rate - wt) / sqrt(wt * (1 - rate) / rate);
		char what[160];

		snprintf(what, sizeof(what), "size %lu: allocated words within 4 SE (z=%.2f, "
			 "%lu sampled of %lu)", cls[c].size, z, cls[c].tracked, cls[c].count);
		result(fabs(z) < 4, what);
		if (leakfile && cls[c].leaked_words) {
			double lw = (double)cls[c].leaked_words;

			z = ((double)cls[c].leaked_n / rate - lw) / sqrt(lw * (1 - rate) / rate);
			snprintf(what, sizeof(what), "size %lu: live (leaked) words within 4 SE "
				 "(z=%.2f, %lu leaked blocks)", cls[c].size, z,
				 cls[c].leaked_blocks);
			result(fabs(z) < 4, what);
		}
		if (cls[c].size == chi_size) {
			double chi2, pv;
			int df;

			cls[c].hist[0] = cls[c].count - cls[c].tracked;
			pv = chisq_binomial_test(cls[c].hist, 64, cls[c].count, w, rate, &chi2, &df);
			snprintf(what, sizeof(what), "size %lu: samples per block ~ Binomial(%lu, %g) "
				 "(chi2=%.1f df=%d p=%.3g)", cls[c].size, w, rate, chi2, df, pv);
			result(pv > 0.001, what);
		}
	}
	free(recs);
	free(map);
	return failures ? 1 : 0;
}
