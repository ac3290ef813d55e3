/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * memprofctl report: read memtrace traces offline and turn their samples into unbiased
 * estimates per allocation site, leak suspects, a live-heap timeline, a flame graph and a
 * pprof profile.
 *
 * Data flow: rp_model__load() streams each trace through the libmemprof reader and keeps one
 * small record per sampled block (times, words, samples, interned stack). rp_model__analyze()
 * aggregates the blocks inside the time window into sites (by function, line, stack or
 * object). The output modules (text, JSON, SVG, pprof) only read the analyzed model.
 *
 * Estimators (a block of w = length + 1 words gets n ~ Binomial(w, λ) samples; it is in the
 * trace iff n >= 1, which has probability p(w) = 1 - (1 - λ)^w):
 *   bytes      Σ n/λ · B              Var = Σ w(1-λ)/λ · B², estimated by Σ n(1-λ)/λ² · B²
 *   blocks     Σ 1/p(w)               (Horvitz-Thompson) Var estimated by Σ (1-p)/p²
 * with B = word_size/8 bytes per word. Each trace is unbiased with its own λ and traces are
 * merged by adding estimates and variances.
 */
#ifndef MEMPROF_REPORT_H
#define MEMPROF_REPORT_H

#include <math.h>
#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "userspace-lib/hashmap.h"

#include "userspace-lib/units.h"	/* mp_fmt_bytes(), mp_parse_duration() */

/* Hard limits on what a trace can make us hold. */
#define RP_MAX_BLOCKS	(64u << 20)	/* sampled blocks over all traces */
#define RP_MAX_FRAMES	(16u << 20)	/* distinct frames */
#define RP_MAX_STACKS	(16u << 20)	/* distinct stacks */
#define RP_MAX_CODES	(16u << 20)	/* location codes per trace */
#define RP_MAX_TRACES	1024u
#define RP_MAX_POINTS	1000u		/* live-heap timeline points */
#define RP_NO_FREE	UINT64_MAX
#define RP_SIZE_CLASSES	30u		/* block sizes: <= 8 B, <= 16 B, ..., <= 2 GiB, more */
#define RP_TEMP_US	1000u		/* default --temporary-threshold: 1 ms */

enum rp_by {
	RP_BY_FUNCTION,
	RP_BY_LINE,
	RP_BY_STACK,
	RP_BY_OBJECT,
};

/* An estimate and its variance; se = sqrt(var). */
struct rp_est {
	double est;
	double var;
};

struct rp_frame {
	char *func;		/* "" when unknown */
	char *file;		/* "" when unknown */
	char *object;		/* object basename, or the executable's when the file is a source */
	uint32_t line;
	uint64_t code;		/* the location code (for frames without a location) */
	bool allocator;		/* malloc, operator new, std:: allocation wrappers, the preload
				 * library: skipped at the innermost end unless --no-trim */
};

struct rp_stack {
	uint32_t off;		/* into model.stack_frames */
	uint32_t len;		/* frames, outermost first */
	uint32_t eff_len;	/* without innermost allocator frames (at least 1 if len > 0),
				 * all of them with --no-trim */
	uint32_t site;		/* filled by rp_model__analyze */
};

struct rp_block {
	uint64_t t_alloc;	/* µs since its trace's start */
	uint64_t t_free;	/* µs since its trace's start, or RP_NO_FREE */
	uint64_t length;	/* words, header excluded */
	uint64_t nsamples;
	uint32_t stack;
	uint16_t trace;
};

struct rp_trace {
	char *path;
	char *executable;
	char *host;
	char *context;
	uint64_t pid;
	uint64_t start_us;	/* µs since the epoch */
	uint64_t end_us;	/* time of the last event, µs since start */
	uint64_t first_alloc_us;	/* time of the first allocation, µs since start */
	double rate;		/* λ */
	double word_bytes;	/* word_size / 8 */
	unsigned int word_size;
	unsigned int version;
	size_t first_block;
	size_t nblocks;
	uint64_t collects, promotes, unmatched_collects, warnings;
	uint64_t sum_nsamples, sum_length;
	uint64_t digest;	/* a hash of every event (time, kind, size, samples, stack) */
	bool base;		/* a trace of the base (--base): subtracted, on its own axis */
	bool in_progress;	/* its context says it was not completed (still being written) */
	/* The analysis window of this trace, µs since start (from the first allocation or
	 * --since, to the last event or --until), and the leak-tail cutoff. */
	uint64_t win_start, win_end, young_after;
};

struct rp_site {
	char *key;		/* display name */
	uint32_t frame;		/* representative innermost frame (function/line/object) */
	uint32_t stack;		/* a representative stack (RP_BY_STACK) */
	struct rp_est bytes, blocks;		/* allocated in the window */
	struct rp_est live_bytes, live_blocks;	/* still live at the window's end */
	struct rp_est old_live_bytes, old_live_blocks;	/* live and not young */
	struct rp_est base_bytes, base_blocks, base_live_bytes, base_live_blocks;	/* --base */
	struct rp_est temp_bytes, temp_blocks;	/* freed within the temporary threshold */
	struct rp_est peak_live_bytes;		/* live at the peak (rp_model.peak_us) */
	struct rp_est size_blocks[RP_SIZE_CLASSES];	/* allocations per size class */
	uint64_t sampled, samples, sampled_live, sampled_old_live, sampled_freed;
	/* Lifetimes of freed sampled blocks and ages of live ones at the window end, in µs. */
	uint64_t *lifetimes;
	size_t nlifetimes, cap_lifetimes;
	uint64_t *ages;
	size_t nages, cap_ages;
	double life_median_s, life_p90_s, age_median_s, age_max_s;
};

struct rp_stackval {
	double bytes, blocks, live_bytes, live_blocks;
	double bytes_var, live_bytes_var;
	/* the same over the base traces (--base) */
	double base_bytes, base_blocks, base_live_bytes, base_live_blocks;
	double base_bytes_var, base_live_bytes_var;
};

struct rp_point {
	double t_s;			/* seconds since the time axis' origin (rp_model.t0_us) */
	struct rp_est live_bytes;
};

struct rp_options {
	enum rp_by by;
	unsigned int top;
	bool live;			/* rank, flame graph and pprof default by live bytes */
	bool has_since, has_until;
	uint64_t since_us, until_us;	/* from the earliest trace's start (rp_model.t0_us) */
	double tail;			/* fraction of the window treated as young (leaks) */
	unsigned int points;		/* live-heap timeline points */
	bool progress;			/* print read progress on stderr */
	bool quiet;			/* no warnings on stderr (still counted per trace) */
	bool no_trim;			/* name sites by the innermost frame, allocator or not */
	bool flame;			/* flame graph with the root at the bottom (not icicle) */
	/* pprof's filters on frames (function, file or object; POSIX extended regex owned by
	 * the caller, NULL when unset): keep stacks with a frame matching focus, drop those with
	 * one matching ignore, remove frames matching hide, cut each stack above (outside) its
	 * outermost frame matching show_from and drop stacks without one. */
	const regex_t *focus, *ignore, *hide, *show_from;
	uint64_t temp_us;		/* a block freed within this is temporary (0: default) */
};

struct rp_model {
	struct rp_options opts;
	struct rp_trace *traces;
	size_t ntraces, cap_traces;
	struct rp_block *blocks;
	size_t nblocks, cap_blocks;
	struct rp_frame *frames;
	size_t nframes, cap_frames;
	uint32_t *stack_frames;
	size_t nstack_frames, cap_stack_frames;
	struct rp_stack *stacks;
	size_t nstacks, cap_stacks;
	struct mp_hashmap frame_idx;	/* private lookup tables: hash -> index */
	struct mp_hashmap stack_idx;
	struct mp_hashmap site_idx;
	size_t nduplicates;		/* traces given again and counted once */
	uint64_t t0_us;			/* the time axis' origin: the earliest trace's start */
	uint64_t base_t0_us;		/* the same for the base traces */
	bool has_base;			/* some traces are a base: the report is a difference */
	bool same_window;		/* every trace has the same window on that axis */

	/* Results of rp_model__analyze(). */
	struct rp_site *sites;
	size_t nsites, cap_sites;
	uint32_t *by_bytes;		/* site indices, ranked */
	uint32_t *by_blocks;
	uint32_t *suspects;		/* sites with old live blocks, ranked by old live bytes */
	size_t nsuspects;
	struct rp_est total_bytes, total_blocks, total_live_bytes, total_live_blocks;
	/* Words as memtrace counts them (Σ n/λ: the requests rounded to words, plus one header
	 * word per block), for --json */
	struct rp_est total_words, total_live_words;
	uint64_t total_sampled, total_samples, total_sampled_live;
	struct rp_point *timeline;
	size_t npoints;
	double span_s;			/* timeline span */
	struct rp_stackval *stack_vals;	/* per stack, over the window */
	int64_t *stack_view;		/* loaded stack -> the stack after the filters, or -1 */
	size_t nstack_view;
	uint64_t filtered_out;		/* sampled blocks in the window the filters dropped */
	/* --base: totals of the base traces, and sites ranked by |change| (new - base) of
	 * allocated bytes and of live bytes. */
	struct rp_est base_total_bytes, base_total_blocks, base_total_live_bytes,
		base_total_live_blocks;
	uint32_t *by_change_bytes, *by_change_live;
	/* The peak of the estimated live heap over the window: its value (with the SE at that
	 * time), when (µs on the axis), and the sites ranked by their live bytes then. */
	struct rp_est peak_live;
	uint64_t peak_us;
	uint32_t *by_peak;
	/* Temporary allocations (freed within opts.temp_us), sites ranked by them. */
	struct rp_est total_temp_bytes, total_temp_blocks;
	uint32_t *by_temp;
	struct rp_est size_blocks[RP_SIZE_CLASSES], size_bytes[RP_SIZE_CLASSES];
};

struct rp_model *rp_model__new(const struct rp_options *opts);
void rp_model__free(struct rp_model *m);	/* NULL-safe */

/*
 * Read one trace into the model. Returns 0 or -errno; on failure @err (of @errlen bytes)
 * says why (the reader's message for a malformed trace: offset and rule). A trace equal to
 * one already loaded (same pid, start time and events) is counted once: it is dropped with a
 * warning on stderr and m->nduplicates counts it.
 */
int rp_model__load(struct rp_model *m, const char *path, char *err, size_t errlen);
/* The same for a trace of the base of a difference (--base): its estimates are subtracted. */
int rp_model__load_base(struct rp_model *m, const char *path, char *err, size_t errlen);

/* new - base of two estimates: the variances add (independent samples). */
static inline struct rp_est rp_est_diff(const struct rp_est *cur, const struct rp_est *base)
{
	return (struct rp_est){ cur->est - base->est, cur->var + base->var };
}

/* Aggregate the loaded blocks (window, sites, ranks, leaks, timeline). Returns 0 or -errno. */
int rp_model__analyze(struct rp_model *m);

/* The size class of a block of @bytes: 0 for <= 8 B, k for (8·2^(k-1), 8·2^k], the last open. */
unsigned int rp_size_class(double bytes);
/* The upper bound of size class @k in bytes (the last class: its lower bound). */
double rp_size_class_max(unsigned int k);

/* A frame's display name: function, else file, else the code in hex. */
const char *rp_frame__name(const struct rp_model *m, uint32_t frame, char *buf, size_t len);
/* The wall-clock span of the analysed windows of all traces, in epoch us: false when empty. */
bool rp_model__span(const struct rp_model *m, uint64_t *t0, uint64_t *t1);

static inline double rp_se(const struct rp_est *e)
{
	return e->var > 0 ? sqrt(e->var) : 0.0;
}

/* Outputs. Each returns 0 or -errno and writes its file atomically (temp + rename). */
int rp_print_text(const struct rp_model *m, FILE *f);
int rp_print_json(const struct rp_model *m, FILE *f);
/*
 * One line saying what was written to @flame and @pprof (either NULL) and what it holds: the
 * traces, the estimated allocated and live bytes (their change with --base), the sites.
 */
int rp_print_summary(const struct rp_model *m, const char *flame, const char *pprof, FILE *f);
/* The text report's closing notes: objects without symbols and how to get them, CPython. */
void rp_print_notes(const struct rp_model *m, FILE *f);
int rp_write_flamegraph(const struct rp_model *m, const char *path);
int rp_write_pprof(const struct rp_model *m, const char *path);

/* Helpers shared by the outputs. */
const char *rp_by_name(enum rp_by by);
/* The --by key named @s (rp_by_name()'s names) into *@by: 0, or -EINVAL. */
int rp_by__parse(const char *s, enum rp_by *by);
/*
 * Write @len bytes of @data to @path, "-" for standard output. A file there is replaced only
 * once the new one is complete; a device or FIFO is written as it is (outfile.h). Returns 0
 * or -errno.
 */
int rp_write_output(const char *path, const void *data, size_t len);

/* The index stored in @m for the key @eq recognises (see userspace-lib/hashmap.h), or -1. */
static inline int64_t rp_index_find(const struct mp_hashmap *m, uint64_t hash,
				    mp_hashmap_eq_fn eq, const void *ctx)
{
	const uint64_t *v = mp_hashmap__find_eq(m, hash, eq, ctx);

	return v ? (int64_t)*v : -1;
}

/* Hashes of the interned frames, stacks and strings. */
static inline uint64_t rp_hash_mix(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
	return h * 0xff51afd7ed558ccdull;
}

static inline uint64_t rp_hash_str(uint64_t h, const char *s)
{
	return rp_hash_mix(mp_hash_bytes(h, s, strlen(s)), 0xff);
}

#endif
