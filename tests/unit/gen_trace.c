// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * gen_trace: simulate Gc.Memprof sampling of a known allocation program and write the trace
 * with libmemprof's writer, plus the exact truth as JSON, for the report tests.
 *
 *   gen_trace [-s SEED] [-r RATE] [-n STEPS] [-v VERSION] [-p PID] [-t START_OFFSET_US]
 *             [-o OBJECT] [-e EXE] [-W FUNC=WEIGHT]... [-T TEMP_US] [-D FUNC=DEPTH]
 *             OUT.ctf TRUTH.json
 *
 * -p, -e and -t change the pid, the executable and move the start time (for several traces
 * on one time axis);
 * -T sets the threshold of temporary allocations in the truth (µs, default 1000);
 * -W changes a site's weight (two runs that differ, for differences);
 * -o makes the last site a frame without symbols in OBJECT ("OBJECT+0x1a2b");
 * -D puts DEPTH frames of a recursive function "descend" (deep.c, one line per level) between
 * run_loop and site FUNC (a deep stack, as an interpreter's).
 * The program makes STEPS allocations, one every 10 µs, each from a site drawn by weight.
 * Every word of every block (w = ceil(size/8) + 1 words, header included) is a sample point
 * with probability RATE: a Bernoulli process over the allocation stream, simulated exactly
 * with geometric gaps (xoshiro256** seeded by SplitMix64). Blocks with n >= 1 samples go to
 * the trace. Freeing sites free each block after a random lifetime (a collect event if it
 * was sampled); blocks whose free time falls after the end stay live. Leaking sites never
 * free. The truth counts all blocks, sampled or not, in requested bytes rounded up to whole
 * words (header excluded), which is what Σ n 8 len/((len+1) λ) estimates (estimate.h).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memprof/trace.h>

#include "userspace-lib/rng.h"

#define STEP_US		10
#define MAX_DEEP	4096

static size_t deep_site = SIZE_MAX;	/* -D */
static unsigned int deep_depth;

struct site {
	const char *func, *file;
	uint32_t line;
	const char *alloc_fn;		/* innermost allocator frame, or NULL */
	const char *inlined_into;	/* outer location of the same code (inlining), or NULL */
	uint64_t size;			/* bytes */
	double weight;
	double max_life;		/* fraction of the duration; 0 = leaks */
	/* truth */
	uint64_t count, words, live_words, live_count;
	uint64_t words_half, live_words_half;	/* window [0, T/2] */
	/* Exact variances of the report's estimators over all blocks (not only sampled ones):
	 * bytes Σ 64 w (1-λ)/λ, allocations Σ (1-p)/p with p = 1 - (1-λ)^w. */
	double var_bytes, var_allocs, var_live_bytes, var_live_allocs, var_bytes_half,
		var_live_bytes_half;
	/* blocks freed within temp_us of their allocation, and their exact variances */
	uint64_t temp_count, temp_words;
	double var_temp_bytes, var_temp_allocs;
};

/* Every block's allocation (+words) and free (-words), for the exact peak of the live heap. */
struct live_ev {
	uint64_t t;
	int64_t words;
};

static struct live_ev *live_evs;
static size_t nlive_evs, cap_live_evs;

static int live_push(uint64_t t, int64_t words)
{
	if (nlive_evs == cap_live_evs) {
		size_t cap = cap_live_evs ? 2 * cap_live_evs : 4096;
		struct live_ev *p = realloc(live_evs, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		live_evs = p;
		cap_live_evs = cap;
	}
	live_evs[nlive_evs++] = (struct live_ev){ t, words };
	return 0;
}

static int cmp_live_ev(const void *a, const void *b)
{
	const struct live_ev *x = a, *y = b;

	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	return (x->words > 0) - (y->words > 0);	/* frees first at the same time */
}

#define SITE(fn, fl, ln, af, inl, sz, wt, life)                                               \
	{ .func = fn, .file = fl, .line = ln, .alloc_fn = af, .inlined_into = inl, .size = sz,  \
	  .weight = wt, .max_life = life }

static struct site sites[] = {
	SITE("parse_request", "parse.c", 77, "malloc", "handle_conn", 48, 40, 0.005),
	SITE("tiny_nodes", "list.c", 12, "malloc", NULL, 8, 30, 0.002),
	SITE("build_index", "index.cc", 130, "operator new(unsigned long)", NULL, 4096, 5, 0.01),
	SITE("leak_session", "session.c", 55, "malloc", NULL, 200, 8, 0),
	SITE("cache_grow", "cache.c", 201, "calloc", NULL, 65536, 0.3, 0),
	SITE("recent_buffers", "buffer.c", 9, "malloc", NULL, 1024, 4, 0.04),
	SITE("libfoo_alloc", "libfoo.so.1+0x1a2b", 0, "malloc", NULL, 300, 6, 0.003),
};
#define NSITES (sizeof(sites) / sizeof(sites[0]))

/* xoshiro256** with SplitMix64 seeding. */
static uint64_t rng_s[4];

static uint64_t rng_next(void)
{
	return mp_xoshiro256_next(rng_s);
}

/* Uniform on (0, 1]. */
static double rng_unit(void)
{
	return mp_uniform53(rng_next());
}

/* Geometric(λ) on {1, 2, ...}: words up to and including the next sample point. */
static uint64_t geom(double rate)
{
	if (rate >= 1)
		return 1;
	return (uint64_t)floor(log(rng_unit()) / log1p(-rate)) + 1;
}

struct pending {
	uint64_t t, id;
};

static struct pending *heap;
static size_t nheap, capheap;

static int heap_push(uint64_t t, uint64_t id)
{
	size_t i;

	if (nheap == capheap) {
		size_t cap = capheap ? capheap * 2 : 1024;
		struct pending *p = realloc(heap, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		heap = p;
		capheap = cap;
	}
	i = nheap++;
	while (i && heap[(i - 1) / 2].t > t) {
		heap[i] = heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	heap[i] = (struct pending){ t, id };
	return 0;
}

static struct pending heap_pop(void)
{
	struct pending top = heap[0], last = heap[--nheap];
	size_t i = 0;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= nheap)
			break;
		if (c + 1 < nheap && heap[c + 1].t < heap[c].t)
			c++;
		if (heap[c].t >= last.t)
			break;
		heap[i] = heap[c];
		i = c;
	}
	if (nheap)
		heap[i] = last;
	return top;
}

/*
 * Location codes: 1 main, 2 run_loop, 10+i site i, 100+i allocator frame of site i, 1000+k
 * level k of -D's recursion.
 */
static int define_locations(struct memprof_writer *w)
{
	struct memprof_location main_loc = { "main.c", "main", 10, 0, 0 };
	struct memprof_location loop_loc = { "loop.c", "run_loop", 20, 0, 0 };
	int err;

	err = memprof_writer__location(w, 1, &main_loc, 1);
	if (!err)
		err = memprof_writer__location(w, 2, &loop_loc, 1);
	for (unsigned int k = 0; k < deep_depth && !err; k++) {
		struct memprof_location loc = { "deep.c", "descend", 100 + k, 0, 0 };

		err = memprof_writer__location(w, 1000 + k, &loc, 1);
	}
	for (size_t i = 0; i < NSITES && !err; i++) {
		const struct site *s = &sites[i];
		struct memprof_location locs[2] = {
			{ "server.c", s->inlined_into, 40, 0, 0 },
			{ s->file, s->func, s->line, 0, 0 },
		};
		struct memprof_location alloc = { "", s->alloc_fn, 0, 0, 0 };

		if (s->inlined_into)
			err = memprof_writer__location(w, 10 + i, locs, 2);
		else
			err = memprof_writer__location(w, 10 + i, &locs[1], 1);
		if (!err && s->alloc_fn)
			err = memprof_writer__location(w, 100 + i, &alloc, 1);
	}
	return err;
}

static void write_truth(FILE *f, double rate, uint64_t seed, uint64_t end_us)
{
	int64_t live = 0, peak = 0;
	uint64_t peak_t = 0;

	qsort(live_evs, nlive_evs, sizeof(*live_evs), cmp_live_ev);
	for (size_t i = 0; i < nlive_evs; i++) {
		live += live_evs[i].words;
		if (live > peak) {
			peak = live;
			peak_t = live_evs[i].t;
		}
	}
	fprintf(f, "{\"rate\": %.17g, \"seed\": %llu, \"end_s\": %.6f, \"peak_live_bytes\": "
		"%lld, \"peak_t_s\": %.6f, \"sites\": [\n", rate, (unsigned long long)seed,
		(double)end_us / 1e6, (long long)peak * 8, (double)peak_t / 1e6);
	for (size_t i = 0; i < NSITES; i++) {
		const struct site *s = &sites[i];

		fprintf(f, "  {\"function\": \"%s\", \"file\": \"%s\", \"leak\": %s, "
			"\"allocations\": %llu, \"bytes\": %llu, \"live_allocations\": %llu, "
			"\"live_bytes\": %llu, \"bytes_half\": %llu, \"live_bytes_half\": %llu, "
			"\"var_bytes\": %.17g, \"var_allocations\": %.17g, "
			"\"var_live_bytes\": %.17g, \"var_live_allocations\": %.17g, "
			"\"var_bytes_half\": %.17g, \"var_live_bytes_half\": %.17g, "
			"\"size\": %llu, \"temporary_allocations\": %llu, "
			"\"temporary_bytes\": %llu, \"var_temporary_allocations\": %.17g, "
			"\"var_temporary_bytes\": %.17g}%s\n",
			s->func, s->file, s->max_life > 0 ? "false" : "true",
			(unsigned long long)s->count, (unsigned long long)s->words * 8,
			(unsigned long long)s->live_count, (unsigned long long)s->live_words * 8,
			(unsigned long long)s->words_half * 8,
			(unsigned long long)s->live_words_half * 8, s->var_bytes, s->var_allocs,
			s->var_live_bytes, s->var_live_allocs, s->var_bytes_half,
			s->var_live_bytes_half, (unsigned long long)s->size,
			(unsigned long long)s->temp_count, (unsigned long long)s->temp_words * 8,
			s->var_temp_allocs, s->var_temp_bytes, i + 1 < NSITES ? "," : "");
	}
	fprintf(f, "]}\n");
}

int main(int argc, char **argv)
{
	uint64_t seed = 1, steps = 300000, start_us = 1795959672000000ull, countdown;
	uint64_t temp_us = 1000;
	double rate = 1e-3, total_weight = 0;
	struct memprof_writer_opts wo = { .sz = sizeof(wo), .version = 2 };
	struct memprof_trace_info info = {
		.word_size = 64, .executable_name = "/usr/bin/synth-server",
		.host_name = "testhost", .runtime_params = "", .pid = 4242,
		.context = "gen_trace",
	};
	struct memprof_writer *w;
	uint64_t end_us, half_us;
	FILE *tf;
	int c, err;

	static char obj_func[256], obj_file[256];
	static uint64_t bt[MAX_DEEP + 4];

	while ((c = getopt(argc, argv, "s:r:n:v:p:t:o:e:W:T:D:")) != -1) {
		switch (c) {
		case 's':
			seed = strtoull(optarg, NULL, 0);
			break;
		case 'r':
			rate = strtod(optarg, NULL);
			break;
		case 'n':
			steps = strtoull(optarg, NULL, 0);
			break;
		case 'v':
			wo.version = (uint16_t)atoi(optarg);
			break;
		case 'p':
			info.pid = strtoull(optarg, NULL, 0);
			break;
		case 'e':
			info.executable_name = optarg;
			break;
		case 'T':
			temp_us = strtoull(optarg, NULL, 0);
			break;
		case 'W':
		case 'D': {
			const char *eq = strchr(optarg, '=');
			size_t i;

			for (i = 0; eq && i < NSITES; i++)
				if (strlen(sites[i].func) == (size_t)(eq - optarg) &&
				    !strncmp(sites[i].func, optarg, (size_t)(eq - optarg)))
					break;
			if (!eq || i == NSITES) {
				fprintf(stderr, "gen_trace: no site in -%c '%s'\n", c, optarg);
				return 2;
			}
			if (c == 'W') {
				sites[i].weight = strtod(eq + 1, NULL);
				break;
			}
			deep_site = i;
			deep_depth = (unsigned int)strtoul(eq + 1, NULL, 0);
			if (deep_depth > MAX_DEEP) {
				fprintf(stderr, "gen_trace: -D '%s': at most %u\n", optarg,
					MAX_DEEP);
				return 2;
			}
			break;
		}
		case 't':
			start_us += strtoull(optarg, NULL, 0);
			break;
		case 'o':
			snprintf(obj_func, sizeof(obj_func), "%s+0x1a2b", optarg);
			snprintf(obj_file, sizeof(obj_file), "%s", optarg);
			sites[NSITES - 1].func = obj_func;
			sites[NSITES - 1].file = obj_file;
			break;
		default:
			return 2;
		}
	}
	if (argc - optind != 2 || !(rate > 0 && rate <= 1) || !steps) {
		fprintf(stderr, "usage: gen_trace [-s SEED] [-r RATE] [-n STEPS] [-v 2|3] [-p PID] "
			"[-t START_OFFSET_US] [-o OBJECT] [-e EXE] [-W FUNC=WEIGHT] [-T TEMP_US] "
			"[-D FUNC=DEPTH] OUT.ctf TRUTH.json\n");
		return 2;
	}
	mp_xoshiro256_seed(rng_s, seed);
	info.sample_rate = rate;
	info.start_time_us = start_us;
	w = memprof_writer__open(argv[optind], &info, &wo);
	if (!w) {
		fprintf(stderr, "gen_trace: Failed to create '%s': %s\n", argv[optind],
			strerror(errno));
		return 1;
	}
	err = define_locations(w);
	if (err)
		goto fail;
	for (size_t i = 0; i < NSITES; i++)
		total_weight += sites[i].weight;
	end_us = (steps - 1) * STEP_US;
	half_us = end_us / 2;
	countdown = geom(rate);

	for (uint64_t step = 0; step < steps; step++) {
		uint64_t t = step * STEP_US, words, len, n = 0, free_t, id;
		double vb, vc, p_tracked;
		double pick = rng_unit() * total_weight;
		struct site *s = &sites[NSITES - 1];
		size_t si = NSITES - 1;

		for (size_t i = 0; i < NSITES; i++) {
			pick -= sites[i].weight;
			if (pick <= 0) {
				s = &sites[i];
				si = i;
				break;
			}
		}
		while (nheap && heap[0].t <= t) {
			struct pending p = heap_pop();

			err = memprof_writer__collect(w, start_us + p.t, p.id);
			if (err)
				goto fail;
		}
		words = (s->size + 7) / 8 + 1;
		/* Sample points falling in this block's words. */
		if (words < countdown) {
			countdown -= words;
		} else {
			uint64_t rest = words - countdown, g;

			n = 1;
			while ((g = geom(rate)) <= rest) {
				n++;
				rest -= g;
			}
			countdown = g - rest;
		}
		free_t = s->max_life > 0 ?
			 t + (uint64_t)(rng_unit() * s->max_life * (double)end_us) : UINT64_MAX;
		len = words - 1;
		/* Var(n 8 len/((len+1) λ)) with n ~ Binomial(len + 1, λ) */
		vb = 64.0 * (double)len * (double)len / (double)words * (1 - rate) / rate;
		p_tracked = rate >= 1 ? 1 : -expm1((double)words * log1p(-rate));
		vc = (1 - p_tracked) / p_tracked;
		if (live_push(t, (int64_t)len) ||
		    (free_t <= end_us && live_push(free_t, -(int64_t)len))) {
			err = -ENOMEM;
			goto fail;
		}
		if (free_t <= end_us && free_t - t <= temp_us) {
			s->temp_count++;
			s->temp_words += len;
			s->var_temp_bytes += vb;
			s->var_temp_allocs += vc;
		}
		s->count++;
		s->words += len;
		s->var_bytes += vb;
		s->var_allocs += vc;
		if (free_t > end_us) {
			s->live_count++;
			s->live_words += len;
			s->var_live_bytes += vb;
			s->var_live_allocs += vc;
		}
		if (t <= half_us) {
			s->words_half += len;
			s->var_bytes_half += vb;
			if (free_t > half_us) {
				s->live_words_half += len;
				s->var_live_bytes_half += vb;
			}
		}
		if (!n)
			continue;
		{
			unsigned int nbt = 0, deep = si == deep_site ? deep_depth : 0;

			bt[nbt++] = 1;
			bt[nbt++] = 2;
			for (unsigned int k = 0; k < deep; k++)
				bt[nbt++] = 1000 + k;
			bt[nbt++] = 10 + si;
			if (s->alloc_fn)
				bt[nbt++] = 100 + si;
			err = memprof_writer__alloc(w, start_us + t, words - 1, n,
						    MEMPROF_SOURCE_EXTERNAL, bt, nbt, &id);
		}
		if (err)
			goto fail;
		if (free_t <= end_us) {
			err = heap_push(free_t, id);
			if (err)
				goto fail;
		}
	}
	/* Frees due by the end; later ones never happen within the trace. */
	while (nheap && heap[0].t <= end_us) {
		struct pending p = heap_pop();

		err = memprof_writer__collect(w, start_us + p.t, p.id);
		if (err)
			goto fail;
	}
	err = memprof_writer__close(w);
	w = NULL;
	if (err)
		goto fail;
	tf = fopen(argv[optind + 1], "we");
	if (!tf) {
		fprintf(stderr, "gen_trace: Failed to create '%s': %s\n", argv[optind + 1],
			strerror(errno));
		return 1;
	}
	write_truth(tf, rate, seed, end_us);
	if (fclose(tf)) {
		fprintf(stderr, "gen_trace: Failed to write '%s': %s\n", argv[optind + 1],
			strerror(errno));
		return 1;
	}
	free(heap);
	free(live_evs);
	return 0;
fail:
	fprintf(stderr, "gen_trace: Failed to write the trace: %s\n", strerror(-err));
	memprof_writer__close(w);
	free(heap);
	return 1;
}
