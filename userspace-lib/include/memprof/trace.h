/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libmemprof: read and write memtrace traces (Jane Street's .ctf format, versions 1-3).
 *
 * A trace is a run of self-contained packets. The writer emits whole packets only, so a
 * process that dies mid-trace leaves a readable prefix; with zstd compression each packet is
 * flushed as its own zstd block for the same reason.
 *
 * Conventions: functions return 0 (or a count) on success and a negative errno on failure;
 * constructors return NULL with errno set. The library never logs: a reader's error message
 * is available from memprof_reader__errmsg(). Objects hold no locks: use each from one thread
 * at a time.
 */
#ifndef MEMPROF_TRACE_H
#define MEMPROF_TRACE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Source of an allocation, as the format has it. Native allocations are EXTERNAL. */
enum memprof_source {
	MEMPROF_SOURCE_MINOR = 0,
	MEMPROF_SOURCE_MAJOR = 1,
	MEMPROF_SOURCE_EXTERNAL = 2,
};

/* The trace-info packet. Strings are NUL-terminated; NULL is written as "". */
struct memprof_trace_info {
	double sample_rate;		/* probability per word, (0, 1] */
	uint8_t word_size;		/* in bits; 64 for native traces */
	const char *executable_name;
	const char *host_name;
	const char *runtime_params;	/* "ocaml_runtime_params" slot; free-form */
	uint64_t pid;
	uint64_t start_time_us;		/* µs since the Unix epoch */
	const char *context;		/* v2+; NULL or "" means none */
	uint16_t initial_domain;	/* v3 packet domain of the info packet; 0 otherwise */
	uint16_t version;		/* format version of the trace: 1, 2 or 3 */
};

/*
 * One source location. A location code (an opaque 64-bit id, e.g. a return address) maps
 * to 0..255 of these, outermost (caller) first, innermost (inlined callee) last.
 * Fields above the format's maxima are clamped when written (line 2^20-1, start 255, end 1023).
 */
struct memprof_location {
	const char *filename;
	const char *defname;		/* function name */
	uint32_t line;
	uint32_t start_char;
	uint32_t end_char;
};

/* ------------------------------------------------------------------------------------------
 * Writer
 */
struct memprof_writer;

struct memprof_writer_opts {
	size_t sz;			/* sizeof(struct memprof_writer_opts), for ABI growth */
	uint16_t version;		/* 2 (default when 0) or 3 */
	int zstd_level;			/* 0: plain .ctf; > 0: zstd-compressed stream */
	int real_verifier;		/* >= 0 (default): real cache verifiers in event packets;
					 * < 0: dummy verifiers everywhere */
	uint32_t max_packet_span_us;	/* start a new packet after this span; 0 or more than
					 * 30 s means 30 s (packets always span < 30 s) */
};

/*
 * Start a trace on @fd (the caller keeps ownership: __close() does not close it). The
 * trace-info packet is written immediately. @opts may be NULL (all defaults).
 * @info->version is ignored; @opts->version decides. @info->start_time_us is the trace's
 * time origin: earlier event times are clamped to it.
 */
struct memprof_writer *memprof_writer__new(int fd, const struct memprof_trace_info *info,
					   const struct memprof_writer_opts *opts);
/* Same, creating @path (O_CREAT|O_TRUNC|O_CLOEXEC, mode 0644); the writer owns the fd. */
struct memprof_writer *memprof_writer__open(const char *path,
					    const struct memprof_trace_info *info,
					    const struct memprof_writer_opts *opts);

/*
 * Define location code @code (1 <= code < 2^62) as @nlocs locations (0..255). A code must
 * be defined before a backtrace uses it; redefining it identically is a no-op, differently
 * is -EINVAL. Strings longer than 1023 bytes are truncated; a definition whose encoding could
 * exceed 8 KiB is written as one "<unknown>" location (as upstream). The location event is
 * stamped with the time of the last event. Returns 0 or -errno.
 */
int memprof_writer__location(struct memprof_writer *w, uint64_t code,
			     const struct memprof_location *locs, unsigned int nlocs);
/* Whether @code was already defined in this trace (1) or not (0). */
int memprof_writer__has_location(const struct memprof_writer *w, uint64_t code);

/*
 * Record an allocation at @time_us (µs since the epoch; clamped to be monotone) of
 * @length words (header excluded) carrying @nsamples >= 1 samples. @bt lists @bt_len location
 * codes outermost first, allocation site last; every code must be defined (else -ENOENT).
 * Backtraces longer than 3000 frames keep their innermost 3000 (counted, see
 * memprof_writer__dropped_frames()). On success returns 0 and stores the object id
 * (0, 1, 2, ...) in *@id (@id may be NULL).
 */
int memprof_writer__alloc(struct memprof_writer *w, uint64_t time_us, uint64_t length,
			  uint64_t nsamples, enum memprof_source source, const uint64_t *bt,
			  size_t bt_len, uint64_t *id);
/* The object @id (from __alloc) was promoted / freed. Returns 0, or -EINVAL for an id not yet
 * allocated. The writer does not track liveness (constant memory). */
int memprof_writer__promote(struct memprof_writer *w, uint64_t time_us, uint64_t id);
int memprof_writer__collect(struct memprof_writer *w, uint64_t time_us, uint64_t id);

/* Write out the pending packet (if any). Returns 0 or -errno. */
int memprof_writer__flush(struct memprof_writer *w);
/* Flush, finish the zstd frame, close the fd if owned, free. NULL-safe. Returns 0 or -errno. */
int memprof_writer__close(struct memprof_writer *w);

/* Bytes written to the file so far (compressed bytes for zstd). */
uint64_t memprof_writer__bytes(const struct memprof_writer *w);
/* Frames dropped from backtraces longer than the 3000-frame limit so far. */
uint64_t memprof_writer__dropped_frames(const struct memprof_writer *w);

/* ------------------------------------------------------------------------------------------
 * Reader
 */
struct memprof_reader;

enum memprof_event_type {
	MEMPROF_EV_ALLOC = 1,
	MEMPROF_EV_PROMOTE = 2,
	MEMPROF_EV_COLLECT = 3,
	MEMPROF_EV_LOCATION = 4,	/* only when opts.report_locations is set */
};

struct memprof_event {
	enum memprof_event_type type;
	uint64_t time_us;		/* µs since the trace's start_time_us */
	uint64_t id;			/* object id (alloc, promote, collect) */
	uint16_t domain;		/* v3 packet domain, else 0 */
	/* alloc */
	uint64_t length;		/* words, header excluded */
	uint64_t nsamples;
	enum memprof_source source;
	const uint64_t *backtrace;	/* outermost first; valid until the next __next() */
	size_t backtrace_len;
	size_t common_prefix;		/* as encoded */
	/* location */
	uint64_t code;
	const struct memprof_location *locs;	/* valid until the next __next() */
	unsigned int nlocs;
};

struct memprof_reader_opts {
	size_t sz;			/* sizeof(struct memprof_reader_opts) */
	int strict;			/* also reject what upstream only tolerates:
					 * >= 0 (default): on; < 0: off (upstream's rules) */
	int report_locations;		/* return location events from __next() too */
	/* Called for each warning (skipped packet, truncated tail); may be NULL. */
	void (*warn)(void *ctx, uint64_t offset, const char *msg);
	void *warn_ctx;
};

/*
 * Open a trace (plain or zstd, detected by magic) and read its trace-info packet.
 * On failure returns NULL with errno set; if @errbuf is not NULL, a message naming the
 * byte offset and the rule broken is stored there.
 */
struct memprof_reader *memprof_reader__open(const char *path,
					    const struct memprof_reader_opts *opts,
					    char *errbuf, size_t errbuf_len);
/* On an fd the caller keeps (not closed by __free()). */
struct memprof_reader *memprof_reader__new_fd(int fd, const struct memprof_reader_opts *opts,
					      char *errbuf, size_t errbuf_len);
/* On @len bytes at @buf, which must stay valid until __free(). */
struct memprof_reader *memprof_reader__new_buf(const void *buf, size_t len,
					       const struct memprof_reader_opts *opts,
					       char *errbuf, size_t errbuf_len);

const struct memprof_trace_info *memprof_reader__info(const struct memprof_reader *r);

/*
 * Decode the next event into @ev. Returns 1 with an event, 0 at the end of the trace, or
 * -errno on a malformed trace (then memprof_reader__errmsg() names offset and rule; further
 * calls return the same error).
 */
int memprof_reader__next(struct memprof_reader *r, struct memprof_event *ev);

/* Locations of @code, or NULL if it was never defined. *@nlocs gets the count. */
const struct memprof_location *memprof_reader__lookup(const struct memprof_reader *r,
						      uint64_t code, unsigned int *nlocs);

const char *memprof_reader__errmsg(const struct memprof_reader *r);
/* Compressed-input bytes consumed so far and the file size (0 if unknown), for progress. */
uint64_t memprof_reader__offset(const struct memprof_reader *r);
uint64_t memprof_reader__file_size(const struct memprof_reader *r);
/* Number of warnings (skipped packets, truncated tail) so far. */
unsigned int memprof_reader__warnings(const struct memprof_reader *r);

void memprof_reader__free(struct memprof_reader *r);	/* NULL-safe */

#ifdef __cplusplus
}
#endif

#endif /* MEMPROF_TRACE_H */
