/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The figures of a profile and of its processes, in one struct whoever counted them (the engine
 * in this process, or memprofd over D-Bus), and their one JSON form. `memprofctl record` and
 * `status` print them, memprofd's manifest.json holds them; the text printers are memprofctl's
 * (cli/summary.c).
 *
 * Words: a block is one sampled allocation; a sample is one of its Binomial draws (a block
 * carries n >= 1 samples: memtrace's nsamples). JSON names are snake_case with their unit in
 * the name (_bytes, _us, _pct); memprofctl(1), JSON OUTPUT, lists them.
 *
 * Owner: the engine component.
 */
#ifndef MP_SUMMARY_H
#define MP_SUMMARY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/engine/engine.h"

struct json_object;

/* One process of a profile. Strings are borrowed from what it was filled from. */
struct mp_summary_proc {
	pid_t pid;
	char comm[16];
	const char *mode;		/* "uprobe", "preload"; NULL: not known */
	bool exited;
	const char *trace;		/* NULL: written to a file descriptor the client passed */
	uint64_t sampled_blocks;
	uint64_t samples;		/* Σ n over the sampled blocks */
	uint64_t live_samples;		/* the same over the blocks not freed */
	uint64_t freed_blocks;		/* sampled blocks freed */
	uint64_t drops;			/* events of this process lost */
	double allocated_bytes, allocated_bytes_se;	/* requested bytes: estimate.h */
	double live_bytes, live_bytes_se;
	double allocated_words, live_words;		/* Σ n / rate, as OCaml's tools count */
	const char *detached_reason;	/* NULL: probed until it exited */
	const char *write_error;	/* NULL, an errno name ("ENOSPC"), or "stalled" */
	uint64_t write_error_since_us;	/* CLOCK_REALTIME */
	uint64_t lost_writes;		/* events not written to the trace */
	/* The engine's own counts: known when it ran in this process or in this daemon
	 * (@engine_counts), not through the D-Bus API. */
	bool engine_counts;
	bool trace_complete;
	uint64_t unmatched_frees, truncated_stacks, dwarf_stacks, window_cut_stacks;
	uint64_t unwind_fallbacks, image_gone_stacks, probe_hits, stalled_output;
	double overhead_pct;
	uint64_t preload_samples;	/* the preload library's count of samples drawn */
	uint64_t preload_lost;		/* ... and of those it lost */
};

/* Loss counters by name (BPF's, then the engine's), over what the summary covers. */
#define MP_SUMMARY_MAX_LOSSES (MP_STAT__MAX + MP_DROP__MAX)

/* A profile: its processes, their sums, and the counters of the sampling itself. */
struct mp_summary {
	double rate;
	uint32_t daemon_profile;	/* memprofd's profile id; 0: sampled in this process */
	size_t nprocs;
	struct mp_summary_proc *procs;	/* owned (mp_summary__free()) */
	struct mp_summary_proc total;	/* sums of the counts (not the estimates' SE) */
	/* exited processes no longer listed (mp_profile__retired()): how many, and their sums
	 * (not in @total) */
	uint64_t nretired;
	struct mp_summary_proc retired;
	/* Losses: names[i] = values[i]. @losses_daemon_wide: memprofd's counters, grown while the
	 * summary's profile ran but of all its profiles together. */
	size_t nlosses;
	const char *loss_names[MP_SUMMARY_MAX_LOSSES];
	uint64_t loss_values[MP_SUMMARY_MAX_LOSSES];
	bool losses_daemon_wide;
	bool has_calls;			/* in-process: the probes' own counts */
	uint64_t probed_calls, sampled_calls;
	bool has_stacks;		/* in-process: how the stacks were taken */
	const char *unwind;
	int stack_copy_size;
	struct mp_engine_stack_stats stacks;
	unsigned int callstack_size;
	const char *mechanisms;		/* the kernel mechanisms in use; NULL: not known */
};

/* The write error of @ps's trace as summaries name it: NULL, the errno name of its first failed
 * write ("ENOSPC"), or "stalled" (its output did not keep up); *@since_us: when it began. */
const char *mp_proc_stats__write_error(const struct mp_proc_stats *ps, uint64_t *since_us);

/* @ps, one process of a profile sampled at @rate, as a summary's process. */
void mp_summary_proc__from_stats(struct mp_summary_proc *out, const struct mp_proc_stats *ps,
				 double rate);

/*
 * Profile @p of engine @e: its processes (from mp_profile__procs(); they borrow the engine's
 * strings until the profile is freed) and the engine's counters grown since @base (the
 * mp_engine__stats() taken when it started, MP_STAT__MAX of them). Returns 0 or -ENOMEM.
 */
int mp_summary__from_profile(struct mp_summary *s, struct mp_engine *e, struct mp_profile *p,
			     const uint64_t *base);
/* Allocate @n processes (zeroed) into @s. Returns 0 or -ENOMEM. */
int mp_summary__alloc_procs(struct mp_summary *s, size_t n);
/* Sum @s's processes into @s->total. */
void mp_summary__sum(struct mp_summary *s);
/*
 * The loss counters into @s: BPF's (enum mp_stat, from the ring-buffer drops on, activity left
 * out), then the engine's (enum mp_engine_drop), valued from @stats and @drops indexed by those
 * enums (0 where NULL).
 */
void mp_summary__set_losses(struct mp_summary *s, const uint64_t *stats, const uint64_t *drops);
void mp_summary__free(struct mp_summary *s);

/* One process as a JSON object (every key always there: null when not known). NULL: ENOMEM. */
struct json_object *mp_summary_proc__json(const struct mp_summary_proc *ps);
/* The array of @s's processes. */
struct json_object *mp_summary__procs_json(const struct mp_summary *s);
/* @s's retired processes: {"processes": N, and mp_summary_proc__json()'s keys}, or NULL when
 * there are none. */
struct json_object *mp_summary__retired_json(const struct mp_summary *s);
/* The whole summary of a recording that ended with @status (-1: not known). */
struct json_object *mp_summary__json(const struct mp_summary *s, int status);

#endif
