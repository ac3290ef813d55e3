// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * memtrace reader: versions 1-3, plain or zstd, streaming (one packet in memory at a time).
 * Every fatal condition of the format gets its own message naming the offset in the
 * uncompressed stream and the rule broken; strict mode also rejects what upstream tolerates
 * but consumers rely on. The reader never trusts a length: every loop is bounded by the
 * packet buffer or a hard limit.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <memprof/trace.h>

#include "userspace-lib/codec/codec.h"

#define MP_MAX_DOMAINS		128u
#define MP_READER_MAX_FRAMES	(1u << 18)	/* decoded frames per backtrace */
#define MP_MAX_LOC_CODES	(1u << 22)
#define MP_MAX_LOC_BYTES	(256u << 20)
#define MP_MAX_LIVE		(1u << 24)	/* strict mode's set of live object ids */
#define MP_ZIN_SIZE		(64u << 10)

struct domain {
	uint16_t id;
	uint64_t last_time;
	uint64_t *bt;			/* the previous decoded backtrace */
	size_t bt_len, bt_cap;
	struct mp_mtf mtf;
	uint16_t pred[MP_CACHE_SLOTS];
	uint64_t loc[MP_CACHE_SLOTS];
};

struct loc_def {
	unsigned int nlocs;
	struct memprof_location locs[];	/* strings follow the array */
};

struct memprof_reader {
	bool strict, report_locations;
	void (*warn)(void *ctx, uint64_t offset, const char *msg);
	void *warn_ctx;
	unsigned int warnings;
	int err;
	bool eof;
	char errmsg[256];

	/* input */
	int fd;
	bool own_fd;
	const uint8_t *mem;
	size_t mem_len, mem_pos;
	uint8_t peek[4];
	size_t peek_len, peek_pos;
	ZSTD_DCtx *zd;
	uint8_t *zin;
	size_t zin_len, zin_pos;
	size_t zlast;			/* last ZSTD_decompressStream hint: 0 = frame complete */
	bool raw_eof, zwarned;
	uint64_t in_off;		/* compressed bytes consumed */
	uint64_t file_size;
	uint64_t off;			/* uncompressed bytes consumed */

	/* trace info */
	struct memprof_trace_info info;
	char *info_strs;

	/* current packet */
	bool in_packet;
	uint64_t pkt_off;
	unsigned int hdr_size;
	uint16_t pkt_version;
	uint64_t tbegin, tend, id_begin, id_end, running_id;
	struct domain *dom;
	size_t pos, end;		/* content cursor, in pkt[] */

	struct domain *doms[MP_MAX_DOMAINS];
	unsigned int ndoms;

	struct mp_hashmap locs;		/* code -> struct loc_def *, code 0 in loc0 */
	struct loc_def *loc0;
	bool has_loc0;
	size_t loc_bytes;
	struct mp_hashmap live;		/* strict: id + 1 of allocated, uncollected objects */

	uint8_t pkt[MP_HDR_V3 + MP_PACKET_MAX];
};

#define OPT(opts, field, def)                                                                 \
	((opts) && (opts)->sz >= offsetof(__typeof__(*(opts)), field) + sizeof((opts)->field)  \
		 ? (opts)->field                                                               \
		 : (def))

__attribute__((format(printf, 3, 4)))
static int fail(struct memprof_reader *r, uint64_t off, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (r->err)
		return r->err;
	n = snprintf(r->errmsg, sizeof(r->errmsg), "offset %" PRIu64 ": ", off);
	va_start(ap, fmt);
	vsnprintf(r->errmsg + n, sizeof(r->errmsg) - (size_t)n, fmt, ap);
	va_end(ap);
	r->err = -EBADMSG;
	return r->err;
}

__attribute__((format(printf, 3, 4)))
static void warn(struct memprof_reader *r, uint64_t off, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	r->warnings++;
	if (!r->warn)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	r->warn(r->warn_ctx, off, msg);
}

/* ---- input -------------------------------------------------------------------------------- */

static size_t raw_read(struct memprof_reader *r, uint8_t *dst, size_t n)
{
	size_t got = 0;

	while (got < n && r->peek_pos < r->peek_len)
		dst[got++] = r->peek[r->peek_pos++];
	if (r->mem) {
		size_t k = r->mem_len - r->mem_pos;

		if (k > n - got)
			k = n - got;
		memcpy(dst + got, r->mem + r->mem_pos, k);
		r->mem_pos += k;
		got += k;
	} else {
		while (got < n && !r->raw_eof) {
			ssize_t k = read(r->fd, dst + got, n - got);

			if (k < 0 && errno == EINTR)
				continue;
			if (k < 0) {
				fail(r, r->off, "read error: %s", strerror(errno));
				break;
			}
			if (!k)
				r->raw_eof = true;
			got += (size_t)k;
		}
	}
	r->in_off += got;
	return got;
}

/* Read up to @n bytes of the uncompressed stream; fewer only at its end (or on error). */
static size_t in_read(struct memprof_reader *r, uint8_t *dst, size_t n)
{
	size_t got = 0;

	if (!r->zd) {
		got = raw_read(r, dst, n);
	} else {
		while (got < n && !r->err) {
			ZSTD_outBuffer out = { dst + got, n - got, 0 };
			ZSTD_inBuffer in;

			bool drained = false;
			size_t ret;

			if (r->zin_pos == r->zin_len && !r->raw_eof) {
				r->zin_len = raw_read(r, r->zin, MP_ZIN_SIZE);
				r->zin_pos = 0;
				if (!r->zin_len)
					r->raw_eof = true;
			}
			drained = r->zin_pos == r->zin_len;
			in = (ZSTD_inBuffer){ r->zin, r->zin_len, r->zin_pos };
			ret = ZSTD_decompressStream(r->zd, &out, &in);
			if (ZSTD_isError(ret)) {
				fail(r, r->off + got, "zstd decompression failed: %s",
				     ZSTD_getErrorName(ret));
				break;
			}
			if (in.pos == r->zin_pos && !out.pos && !drained) {
				fail(r, r->off + got, "zstd decompression made no progress");
				break;
			}
			/* The hint after the last real progress: 0 iff a frame just ended. */
			if (in.pos != r->zin_pos || out.pos)
				r->zlast = ret;
			r->zin_pos = in.pos;
			got += out.pos;
			/* No input left and nothing more buffered in the decoder: the end. */
			if (drained && r->raw_eof && !out.pos) {
				if (r->zlast && !r->zwarned) {
					warn(r, r->off + got,
					     "zstd stream ends inside a frame (trace not closed)");
					r->zwarned = true;
				}
				break;
			}
		}
	}
	r->off += got;
	return got;
}

/* ---- domains and locations ---------------------------------------------------------------- */

static struct domain *get_domain(struct memprof_reader *r, uint16_t id, uint64_t off)
{
	struct domain *d;

	for (unsigned int i = 0; i < r->ndoms; i++)
		if (r->doms[i]->id == id)
			return r->doms[i];
	if (r->ndoms == MP_MAX_DOMAINS) {
		fail(r, off, "too many domains (limit %u)", MP_MAX_DOMAINS);
		return NULL;
	}
	d = calloc(1, sizeof(*d));
	if (!d) {
		fail(r, off, "out of memory");
		r->err = -ENOMEM;
		return NULL;
	}
	d->id = id;
	d->last_time = r->info.start_time_us;
	r->doms[r->ndoms++] = d;
	return d;
}

static struct loc_def *find_def(const struct memprof_reader *r, uint64_t code)
{
	const uint64_t *v;

	if (!code)
		return r->has_loc0 ? r->loc0 : NULL;
	v = mp_hashmap__find(&r->locs, code, 0);
	return v ? (struct loc_def *)(uintptr_t)*v : NULL;
}

static bool str_eq(const char *a, const char *b)
{
	return !strcmp(a ? a : "", b ? b : "");
}

static bool def_eq(const struct loc_def *a, const struct memprof_location *locs, unsigned int n)
{
	if (a->nlocs != n)
		return false;
	for (unsigned int i = 0; i < n; i++) {
		const struct memprof_location *x = &a->locs[i], *y = &locs[i];

		if (x->line != y->line || x->start_char != y->start_char ||
		    x->end_char != y->end_char || !str_eq(x->filename, y->filename) ||
		    !str_eq(x->defname, y->defname))
			return false;
	}
	return true;
}

/* Store a definition (strings copied into one block); returns it or NULL after fail(). */
static struct loc_def *store_def(struct memprof_reader *r, uint64_t code, uint64_t off,
				 const struct memprof_location *locs, unsigned int n)
{
	size_t sz = sizeof(struct loc_def) + n * sizeof(locs[0]);
	struct loc_def *d;
	uint64_t *slot = NULL;
	bool found;
	char *s;
	int err = 0;

	for (unsigned int i = 0; i < n; i++)
		sz += strlen(locs[i].filename) + strlen(locs[i].defname) + 2;
	if (r->loc_bytes + sz > MP_MAX_LOC_BYTES) {
		fail(r, off, "location table larger than %u bytes (limit)", MP_MAX_LOC_BYTES);
		return NULL;
	}
	if (code) {
		slot = mp_hashmap__insert(&r->locs, code, 0, &found, &err);
		if (!slot) {
			fail(r, off, "%s", err == -ENOSPC ? "too many location codes (limit)"
							  : "out of memory");
			return NULL;
		}
	}
	d = malloc(sz);
	if (!d) {
		if (code)
			mp_hashmap__remove(&r->locs, code, 0);
		fail(r, off, "out of memory");
		return NULL;
	}
	d->nlocs = n;
	s = (char *)&d->locs[n];
	for (unsigned int i = 0; i < n; i++) {
		size_t fl = strlen(locs[i].filename) + 1, dl = strlen(locs[i].defname) + 1;

		d->locs[i] = locs[i];
		d->locs[i].filename = memcpy(s, locs[i].filename, fl);
		s += fl;
		d->locs[i].defname = memcpy(s, locs[i].defname, dl);
		s += dl;
	}
	r->loc_bytes += sz;
	if (code) {
		*slot = (uint64_t)(uintptr_t)d;
	} else {
		r->loc0 = d;
		r->has_loc0 = true;
	}
	return d;
}

/* ---- packet cursor ------------------------------------------------------------------------ */

static uint64_t cur_off(const struct memprof_reader *r)
{
	return r->pkt_off + r->pos;
}

static bool need(struct memprof_reader *r, size_t n, const char *what)
{
	if (r->end - r->pos >= n)
		return true;
	fail(r, cur_off(r), "event runs past the end of its packet (buffer underflow) reading %s",
	     what);
	return false;
}

/* The next @n bytes of the packet, consumed; or NULL, failed naming @what. */
static const uint8_t *take(struct memprof_reader *r, size_t n, const char *what)
{
	const uint8_t *p = r->pkt + r->pos;

	if (!need(r, n, what))
		return NULL;
	r->pos += n;
	return p;
}

static bool get8(struct memprof_reader *r, uint8_t *v, const char *what)
{
	const uint8_t *p = take(r, 1, what);

	return p && (*v = *p, true);
}

static bool get16(struct memprof_reader *r, uint16_t *v, const char *what)
{
	const uint8_t *p = take(r, 2, what);

	return p && (*v = mp_get16(p), true);
}

static bool get32(struct memprof_reader *r, uint32_t *v, const char *what)
{
	const uint8_t *p = take(r, 4, what);

	return p && (*v = mp_get32(p), true);
}

static bool get64(struct memprof_reader *r, uint64_t *v, const char *what)
{
	const uint8_t *p = take(r, 8, what);

	return p && (*v = mp_get64(p), true);
}

/* As upstream: FD is unsigned 16-bit, FE a signed int32, FF 64 bits kept to 63 (signed). */
static bool getvint(struct memprof_reader *r, int64_t *v, const char *what)
{
	uint8_t t;
	uint16_t a;
	uint32_t b;
	uint64_t c;

	if (!get8(r, &t, what))
		return false;
	switch (t) {
	case 253:
		if (!get16(r, &a, what))
			return false;
		*v = a;
		return true;
	case 254:
		if (!get32(r, &b, what))
			return false;
		*v = (int32_t)b;
		return true;
	case 255:
		if (!get64(r, &c, what))
			return false;
		*v = (int64_t)(c << 1) >> 1;
		return true;
	default:
		*v = t;
		return true;
	}
}

static bool getstr(struct memprof_reader *r, const char **s, const char *what)
{
	const uint8_t *nul = memchr(r->pkt + r->pos, 0, r->end - r->pos);

	if (!nul) {
		fail(r, cur_off(r), "unterminated string (buffer underflow) reading %s", what);
		return false;
	}
	*s = (const char *)r->pkt + r->pos;
	r->pos = (size_t)(nul - r->pkt) + 1;
	return true;
}

/* A copy of the next string of the packet; or NULL, failed (at @off when out of memory). */
static char *getstr_dup(struct memprof_reader *r, const char *what, uint64_t off)
{
	const char *s;
	char *copy;

	if (!getstr(r, &s, what))
		return NULL;
	copy = strdup(s);
	if (!copy)
		fail(r, off, "out of memory");
	return copy;
}

/* ---- packets ------------------------------------------------------------------------------ */

/*
 * Read one packet into pkt[]. Returns 1 when a packet is ready, 0 at the end of the trace
 * (clean or truncated tail), or -errno. @first: the trace-info packet.
 */
static int read_packet(struct memprof_reader *r, bool first)
{
	uint64_t off = r->off, bytes;
	size_t n, content, o;
	int32_t size;

	r->pkt_off = off;
	n = in_read(r, r->pkt, MP_OFF_PID + 8);
	if (r->err)
		return r->err;
	if (!n) {
		if (first)
			return fail(r, off, "empty file: no trace-info packet");
		return 0;
	}
	if (n >= 4 && mp_get32(r->pkt) != MP_CTF_MAGIC)
		return fail(r, off, "bad magic 0x%08x (not a CTF packet)", mp_get32(r->pkt));
	if (n < MP_OFF_PID + 8)
		goto truncated_header;
	r->pkt_version = mp_get16(r->pkt + MP_OFF_VERSION);
	if (r->pkt_version < 1 || r->pkt_version > 3)
		return fail(r, off + MP_OFF_VERSION, "unsupported format version %u (must be 1..3)",
			    r->pkt_version);
	r->hdr_size = r->pkt_version >= 3 ? MP_HDR_V3 : MP_HDR_V2;
	n += in_read(r, r->pkt + n, r->hdr_size - n);
	if (r->err)
		return r->err;
	if (n < r->hdr_size)
		goto truncated_header;

	size = (int32_t)mp_get32(r->pkt + MP_OFF_SIZE);
	if (size < 0)
		return fail(r, off + MP_OFF_SIZE, "negative packet size %d", size);
	bytes = (uint64_t)size / 8;
	if (bytes < r->hdr_size)
		return fail(r, off + MP_OFF_SIZE,
			    "packet size %" PRIu64 " bytes is smaller than its %u-byte header", bytes,
			    r->hdr_size);
	content = bytes - r->hdr_size;
	if (first && bytes > MP_PACKET_MAX)
		return fail(r, off + MP_OFF_SIZE,
			    "trace-info packet larger than 32768 bytes (%" PRIu64 ")", bytes);
	if (content > MP_PACKET_MAX)
		return fail(r, off + MP_OFF_SIZE,
			    "packet content larger than 32768 bytes (%zu)", content);

	r->tbegin = mp_get64(r->pkt + MP_OFF_TBEGIN);
	r->tend = mp_get64(r->pkt + MP_OFF_TEND);
	o = r->pkt_version >= 3 ? MP_OFF_DOMAIN + 2 : MP_OFF_DOMAIN;
	r->id_begin = mp_get64(r->pkt + o + 12);
	r->id_end = mp_get64(r->pkt + o + 20);

	n = in_read(r, r->pkt + r->hdr_size, content);
	if (r->err)
		return r->err;
	if (n < content) {
		if (first)
			return fail(r, off, "truncated trace-info packet");
		warn(r, off, "skipping truncated packet (%zu of %zu content bytes)", n, content);
		return 0;
	}
	if (r->tbegin > r->tend)
		return fail(r, off + MP_OFF_TBEGIN,
			    "timestamp_begin %" PRIu64 " > timestamp_end %" PRIu64, r->tbegin, r->tend);
	if (r->id_begin > r->id_end)
		return fail(r, off + o + 12, "alloc_id_begin %" PRIu64 " > alloc_id_end %" PRIu64,
			    r->id_begin, r->id_end);
	r->pos = r->hdr_size;
	r->end = r->hdr_size + content;
	return 1;

truncated_header:
	/*
	 * Upstream fails here; but a header cut by the end of the file is the same crash as a
	 * cut packet (a writer that died mid-write, a full disk), so only the info packet's is
	 * fatal.
	 */
	if (first)
		return fail(r, off, "truncated packet header (%zu bytes)", n);
	warn(r, off, "skipping truncated packet header (%zu bytes at the end)", n);
	return 0;
}

/* After the header checks: pid, domain, cache verifier. 1: decode it, 0: skipped, < 0 error. */
static int start_packet(struct memprof_reader *r)
{
	uint64_t pid = mp_get64(r->pkt + MP_OFF_PID), vval;
	size_t o = r->pkt_version >= 3 ? MP_OFF_DOMAIN + 2 : MP_OFF_DOMAIN;
	uint16_t dom = r->pkt_version >= 3 ? mp_get16(r->pkt + MP_OFF_DOMAIN) : 0, vix, vpred;

	if (pid != r->info.pid) {
		warn(r, r->pkt_off, "skipping packet of pid %" PRIu64 " (trace pid %" PRIu64 ")",
		     pid, r->info.pid);
		return 0;
	}
	r->dom = get_domain(r, dom, r->pkt_off + MP_OFF_DOMAIN);
	if (!r->dom)
		return r->err;
	vix = mp_get16(r->pkt + o);
	vpred = mp_get16(r->pkt + o + 2);
	vval = mp_get64(r->pkt + o + 4);
	if (vix != MP_VERIFY_NONE) {
		if (vix >= MP_CACHE_SLOTS)
			return fail(r, r->pkt_off + o,
				    "cache verification failed: index %u out of range", vix);
		if (r->dom->pred[vix] != vpred || r->dom->loc[vix] != vval)
			return fail(r, r->pkt_off + o,
				    "cache verification failed at slot %u: pred %u/%u, code 0x%" PRIx64
				    "/0x%" PRIx64 " (decoder out of sync)",
				    vix, r->dom->pred[vix], vpred, r->dom->loc[vix], vval);
	}
	r->running_id = r->id_begin;
	r->in_packet = true;
	return 1;
}

/* Full time of an event from its 25 low bits, checked against the packet window. */
static bool event_time(struct memprof_reader *r, uint32_t tlow, uint64_t off, uint64_t *t)
{
	uint64_t base = r->tbegin & ~(uint64_t)MP_TLOW_MASK, tl = tlow;

	if (tl < (r->tbegin & MP_TLOW_MASK))
		tl += 1ull << MP_TLOW_BITS;
	*t = base + tl;
	if (*t < r->tbegin || *t > r->tend) {
		fail(r, off, "event time %" PRIu64 " outside the packet window [%" PRIu64
			     ", %" PRIu64 "] (time in packet bounds)", *t, r->tbegin, r->tend);
		return false;
	}
	return true;
}

static int read_info(struct memprof_reader *r)
{
	const char *s[4] = { "", "", "", "" };
	uint64_t t, off;
	uint32_t h;
	uint8_t ws;
	size_t total = 0;
	char *p;
	int ret;

	ret = read_packet(r, true);
	if (ret <= 0)
		return ret < 0 ? ret : -EBADMSG;
	off = cur_off(r);
	if (!get32(r, &h, "trace_info header"))
		return r->err;
	if (h >> MP_TLOW_BITS != MP_EV_INFO)
		return fail(r, off, "first event is code %u, not trace_info", h >> MP_TLOW_BITS);
	if (!event_time(r, h & MP_TLOW_MASK, off, &t))
		return r->err;
	if (t != r->tbegin)
		return fail(r, off, "trace_info time %" PRIu64 " != timestamp_begin %" PRIu64, t,
			    r->tbegin);
	if (!get64(r, (uint64_t *)&r->info.sample_rate, "sample_rate") ||
	    !get8(r, &ws, "word_size") || !getstr(r, &s[0], "executable_name") ||
	    !getstr(r, &s[1], "host_name") || !getstr(r, &s[2], "ocaml_runtime_params") ||
	    !get64(r, &r->info.pid, "pid"))
		return r->err;
	if (r->pkt_version >= 2 && !getstr(r, &s[3], "context"))
		return r->err;
	if (r->pos != r->end)
		return fail(r, cur_off(r), "%zu leftover bytes after trace_info (trace info packet done)",
			    r->end - r->pos);
	for (int i = 0; i < 4; i++)
		total += strlen(s[i]) + 1;
	r->info_strs = p = malloc(total);
	if (!p)
		return -ENOMEM;
	for (int i = 0; i < 4; i++) {
		size_t l = strlen(s[i]) + 1;

		memcpy(p, s[i], l);
		s[i] = p;
		p += l;
	}
	r->info.word_size = ws;
	r->info.executable_name = s[0];
	r->info.host_name = s[1];
	r->info.runtime_params = s[2];
	r->info.context = *s[3] ? s[3] : NULL;
	r->info.start_time_us = r->tbegin;
	r->info.version = r->pkt_version;
	r->info.initial_domain = r->pkt_version >= 3 ? mp_get16(r->pkt + MP_OFF_DOMAIN) : 0;
	return get_domain(r, r->info.initial_domain, r->pkt_off) ? 0 : r->err;
}

static void set_opts(struct memprof_reader *r, const struct memprof_reader_opts *opts)
{
	r->strict = OPT(opts, strict, 0) >= 0;
	r->report_locations = OPT(opts, report_locations, 0) != 0;
	r->warn = OPT(opts, warn, NULL);
	r->warn_ctx = OPT(opts, warn_ctx, NULL);
	r->live.limit = MP_MAX_LIVE;
	r->locs.limit = MP_MAX_LOC_CODES;
}

static struct memprof_reader *finish_open(struct memprof_reader *r, char *errbuf, size_t len)
{
	int err;

	/* Detect zstd by its frame magic; the peeked bytes are replayed to the plain path. */
	r->peek_len = raw_read(r, r->peek, 4);
	r->in_off -= r->peek_len;
	if (!r->err && r->peek_len == 4 && mp_get32(r->peek) == MP_ZSTD_MAGIC) {
		r->zd = ZSTD_createDCtx();
		r->zin = malloc(MP_ZIN_SIZE);
		if (!r->zd || !r->zin)
			r->err = -ENOMEM;
	}
	err = r->err ? r->err : read_info(r);
	if (err) {
		if (errbuf && len)
			snprintf(errbuf, len, "%s", r->errmsg[0] ? r->errmsg : strerror(-err));
		r->own_fd = false;	/* the caller keeps its fd on failure */
		memprof_reader__free(r);
		errno = -err;
		return NULL;
	}
	return r;
}

struct memprof_reader *memprof_reader__new_fd(int fd, const struct memprof_reader_opts *opts,
					      char *errbuf, size_t errbuf_len)
{
	struct memprof_reader *r;
	struct stat st;

	if (fd < 0) {
		errno = EINVAL;
		return NULL;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->fd = fd;
	if (!fstat(fd, &st) && S_ISREG(st.st_mode))
		r->file_size = (uint64_t)st.st_size;
	set_opts(r, opts);
	return finish_open(r, errbuf, errbuf_len);
}

struct memprof_reader *memprof_reader__new_buf(const void *buf, size_t len,
					       const struct memprof_reader_opts *opts,
					       char *errbuf, size_t errbuf_len)
{
	struct memprof_reader *r;

	if (!buf && len) {
		errno = EINVAL;
		return NULL;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->fd = -1;
	r->mem = buf ? buf : (const uint8_t *)"";
	r->mem_len = len;
	r->file_size = len;
	set_opts(r, opts);
	return finish_open(r, errbuf, errbuf_len);
}

struct memprof_reader *memprof_reader__open(const char *path,
					    const struct memprof_reader_opts *opts,
					    char *errbuf, size_t errbuf_len)
{
	struct memprof_reader *r;
	int fd, err;

	if (!path) {
		errno = EINVAL;
		return NULL;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		err = errno;
		if (errbuf && errbuf_len)
			snprintf(errbuf, errbuf_len, "%s", strerror(err));	/* callers name @path */
		errno = err;
		return NULL;
	}
	r = memprof_reader__new_fd(fd, opts, errbuf, errbuf_len);
	if (r)
		r->own_fd = true;
	else
		mtc_close_keep_errno(fd);
	return r;
}

/* ---- events ------------------------------------------------------------------------------- */

static int read_location(struct memprof_reader *r, struct memprof_event *ev, uint64_t off)
{
	struct memprof_location locs[255];
	struct mp_mtf *mtf = &r->dom->mtf;
	struct loc_def *d;
	uint64_t code;
	uint8_t n;

	if (!get64(r, &code, "location code") || !get8(r, &n, "nlocs"))
		return r->err;
	for (unsigned int i = 0; i < n; i++) {
		uint32_t lo;
		uint16_t hi;
		uint64_t v;
		unsigned int fc, dc;
		struct mp_mtf_defs *defs;

		if (!get32(r, &lo, "location") || !get16(r, &hi, "location"))
			return r->err;
		v = (uint64_t)hi << 32 | lo;
		locs[i].line = v & MP_LINE_MAX;
		locs[i].start_char = (v >> 20) & MP_START_MAX;
		locs[i].end_char = (v >> 28) & MP_END_MAX;
		fc = (v >> 38) & 31;
		dc = (v >> 43) & 31;
		if (fc == MP_MTF_NEW) {
			char *name = getstr_dup(r, "filename", off);

			if (!name)
				return r->err;
			if (mtf->n == MP_MTF_SLOTS) {
				/*
				 * As upstream's reader: the new file inherits the defname table of
				 * the entry pushed off (a v1 writer relied on it).
				 */
				defs = mtf->f[MP_MTF_SLOTS - 1].defs;
				free(mtf->f[MP_MTF_SLOTS - 1].name);
				mtf->n--;
			} else {
				defs = calloc(1, sizeof(*defs));
				if (!defs) {
					free(name);
					return fail(r, off, "out of memory");
				}
			}
			memmove(&mtf->f[1], &mtf->f[0], mtf->n * sizeof(mtf->f[0]));
			mtf->f[0].name = name;
			mtf->f[0].defs = defs;
			mtf->n++;
		} else if (fc >= mtf->n) {
			return fail(r, cur_off(r) - 6,
				    "MTF filename code %u points at an empty slot (%u filled)", fc,
				    mtf->n);
		} else {
			mtc_mtf_to_front(mtf->f, sizeof(mtf->f[0]), fc);
		}
		defs = mtf->f[0].defs;
		if (dc == MP_MTF_NEW) {
			char *name = getstr_dup(r, "defname", off);

			if (!name)
				return r->err;
			if (defs->n == MP_MTF_SLOTS)
				free(defs->s[--defs->n]);
			memmove(&defs->s[1], &defs->s[0], defs->n * sizeof(defs->s[0]));
			defs->s[0] = name;
			defs->n++;
		} else if (dc >= defs->n) {
			return fail(r, cur_off(r),
				    "MTF defname code %u points at an empty slot (%u filled)", dc,
				    defs->n);
		} else {
			mtc_mtf_to_front(defs->s, sizeof(defs->s[0]), dc);
		}
		locs[i].filename = mtf->f[0].name;
		locs[i].defname = defs->s[0];
	}
	d = find_def(r, code);
	if (d) {
		if (!def_eq(d, locs, n))
			return fail(r, off, "location code 0x%" PRIx64
				    " redefined differently (consistent location info)", code);
	} else {
		/* Strings must be copied now: the MTF tables own the ones in locs[]. */
		d = store_def(r, code, off, locs, n);
		if (!d)
			return r->err;
	}
	ev->type = MEMPROF_EV_LOCATION;
	ev->code = code;
	ev->locs = d->locs;
	ev->nlocs = d->nlocs;
	return r->report_locations ? 1 : 0;
}

static bool check_defined(struct memprof_reader *r, uint64_t code, uint64_t off)
{
	if (!r->strict || find_def(r, code))
		return true;
	fail(r, off, "undefined location code 0x%" PRIx64 " used in a backtrace (strict)", code);
	return false;
}

static int read_backtrace(struct memprof_reader *r, int64_t pfx, unsigned int ncw, uint64_t off,
			  struct memprof_event *ev)
{
	struct domain *d = r->dom;
	bool keep = (uint64_t)pfx <= d->bt_len;
	size_t len = keep ? (size_t)pfx : d->bt_len;
	unsigned int p = 0;

	if (!keep && r->strict)
		return fail(r, off, "common prefix %" PRId64
			    " longer than the previous backtrace (%zu frames) (strict)",
			    pfx, d->bt_len);
	for (unsigned int i = 0; i < ncw; i++) {
		uint16_t w;
		unsigned int b, k = 0, q;
		uint8_t k8;
		uint64_t c;

		if (!get16(r, &w, "backtrace codeword"))
			return r->err;
		b = w >> 2;
		d->pred[p] = (uint16_t)b;
		if ((w & 3) == 3) {
			if (!get64(r, &c, "backtrace code"))
				return r->err;
			d->loc[b] = c;
			p = b;
		} else {
			if ((w & 3) == 2) {
				if (!get8(r, &k8, "prediction count"))
					return r->err;
				k = k8;
			} else {
				k = w & 3;
			}
		}
		if (!keep)
			goto next;	/* upstream decodes, then keeps the previous backtrace */
		if (len + 1 + k > MP_READER_MAX_FRAMES)
			return fail(r, off, "backtrace longer than %u frames (limit)",
				    MP_READER_MAX_FRAMES);
		if (MP_ARRAY_RESERVE(d->bt, d->bt_cap, len + 1 + k, 256))
			return fail(r, off, "out of memory");
		if (!check_defined(r, d->loc[b], cur_off(r)))
			return r->err;
		d->bt[len++] = d->loc[b];
		for (q = b; k; k--) {
			q = d->pred[q];
			if (!check_defined(r, d->loc[q], cur_off(r)))
				return r->err;
			d->bt[len++] = d->loc[q];
		}
		if ((w & 3) != 3)
			p = q;
		continue;
next:
		if ((w & 3) != 3) {
			for (q = b; k; k--)
				q = d->pred[q];
			p = q;
		}
	}
	if (keep)
		d->bt_len = len;
	ev->backtrace = d->bt;
	ev->backtrace_len = d->bt_len;
	ev->common_prefix = (size_t)pfx;
	return 0;
}

static int read_alloc(struct memprof_reader *r, unsigned int code, uint64_t off,
		      struct memprof_event *ev)
{
	int64_t len = 1, ns = 1, pfx;
	uint8_t src = MEMPROF_SOURCE_MINOR, n8;
	uint16_t n16;
	unsigned int ncw;
	uint64_t id = r->running_id;
	bool found;
	int err = 0;

	if (code == MP_EV_ALLOC) {
		if (!getvint(r, &len, "alloc length") || !getvint(r, &ns, "nsamples"))
			return r->err;
		if (!get8(r, &src, "alloc source"))
			return r->err;
		if (src > MEMPROF_SOURCE_EXTERNAL)
			return fail(r, cur_off(r) - 1, "bad alloc source byte %u (source)", src);
		if (!getvint(r, &pfx, "common prefix") || !get16(r, &n16, "n_codewords"))
			return r->err;
		ncw = n16;
	} else {
		len = code - MP_EV_SHORT_ALLOC;
		if (!getvint(r, &pfx, "common prefix") || !get8(r, &n8, "n_codewords"))
			return r->err;
		ncw = n8;
	}
	if (pfx < 0)
		return fail(r, off, "negative common prefix %" PRId64, pfx);
	if (r->strict && ns < 1)
		return fail(r, off, "nsamples %" PRId64 " < 1 (strict)", ns);
	if (r->strict && len < 0)
		return fail(r, off, "negative alloc length %" PRId64 " (strict)", len);
	if (read_backtrace(r, pfx, ncw, off, ev))
		return r->err;
	if (r->strict) {
		uint64_t *slot;

		if (id + 1 == 0)
			return fail(r, off, "object id %" PRIu64 " out of range (strict)", id);
		slot = mp_hashmap__insert(&r->live, id + 1, 0, &found, &err);

		if (!slot)
			return fail(r, off, "%s", err == -ENOSPC ? "too many live objects (limit)"
								  : "out of memory");
		if (found)
			return fail(r, off, "object id %" PRIu64 " allocated twice (strict)", id);
	}
	r->running_id++;
	ev->type = MEMPROF_EV_ALLOC;
	ev->id = id;
	ev->length = (uint64_t)len;
	ev->nsamples = (uint64_t)ns;
	ev->source = (enum memprof_source)src;
	return 1;
}

static int read_id_event(struct memprof_reader *r, unsigned int code, uint64_t off,
			 struct memprof_event *ev)
{
	bool promote = code == MP_EV_PROMOTE;
	int64_t delta;
	uint64_t id;

	if (!getvint(r, &delta, promote ? "promote delta" : "collect delta"))
		return r->err;
	if (delta < 0 && promote)
		return fail(r, off, "promote delta %" PRId64 " < 0 (promote id sync)", delta);
	if (delta < 0 && r->pkt_version < 3)
		return fail(r, off, "collect delta %" PRId64 " < 0 in a v%u packet (collect id sync)",
			    delta, r->pkt_version);
	id = r->running_id - 1 - (uint64_t)delta;
	if (r->strict) {
		if (!mp_hashmap__find(&r->live, id + 1, 0))
			return fail(r, off, "%s of unknown or already collected object id %" PRIu64
				    " (strict)", promote ? "promote" : "collect", id);
		if (!promote)
			mp_hashmap__remove(&r->live, id + 1, 0);
	}
	ev->type = promote ? MEMPROF_EV_PROMOTE : MEMPROF_EV_COLLECT;
	ev->id = id;
	return 1;
}

static int read_event(struct memprof_reader *r, struct memprof_event *ev)
{
	uint64_t off = cur_off(r), t;
	unsigned int code;
	uint32_t h;

	if (!get32(r, &h, "event header"))
		return r->err;
	code = h >> MP_TLOW_BITS;
	if (code == MP_EV_INFO)
		return fail(r, off, "second trace_info event");
	if (code != MP_EV_LOCATION && code != MP_EV_ALLOC && code != MP_EV_PROMOTE &&
	    code != MP_EV_COLLECT && (code <= MP_EV_SHORT_ALLOC ||
				      code > MP_EV_SHORT_ALLOC + MP_SHORT_MAX_LEN))
		return fail(r, off, "unknown event code %u", code);
	if (!event_time(r, h & MP_TLOW_MASK, off, &t))
		return r->err;
	if (t < r->dom->last_time)
		return fail(r, off, "event time %" PRIu64 " before the previous event's %" PRIu64
			    " (monotone timestamps)", t, r->dom->last_time);
	r->dom->last_time = t;
	memset(ev, 0, sizeof(*ev));
	ev->time_us = t - r->info.start_time_us;
	ev->domain = r->dom->id;
	switch (code) {
	case MP_EV_LOCATION:
		return read_location(r, ev, off);
	case MP_EV_PROMOTE:
	case MP_EV_COLLECT:
		return read_id_event(r, code, off, ev);
	default:
		return read_alloc(r, code, off, ev);
	}
}

int memprof_reader__next(struct memprof_reader *r, struct memprof_event *ev)
{
	int ret;

	if (!r || !ev)
		return -EINVAL;
	for (;;) {
		if (r->err)
			return r->err;
		if (!r->in_packet) {
			if (r->eof)
				return 0;
			ret = read_packet(r, false);
			if (ret < 0)
				return ret;
			if (!ret) {
				r->eof = true;
				return 0;
			}
			ret = start_packet(r);
			if (ret < 0)
				return ret;
			continue;
		}
		if (r->pos == r->end) {
			r->in_packet = false;
			if (r->running_id != r->id_end)
				return fail(r, r->pkt_off,
					    "alloc id sync: alloc_id_end %" PRIu64 " but %" PRIu64
					    " allocs from alloc_id_begin %" PRIu64,
					    r->id_end, r->running_id - r->id_begin, r->id_begin);
			continue;
		}
		ret = read_event(r, ev);
		if (ret)
			return ret < 0 ? r->err : ret;
	}
}

const struct memprof_trace_info *memprof_reader__info(const struct memprof_reader *r)
{
	return r ? &r->info : NULL;
}

const struct memprof_location *memprof_reader__lookup(const struct memprof_reader *r,
						      uint64_t code, unsigned int *nlocs)
{
	const struct loc_def *d = r ? find_def(r, code) : NULL;

	if (nlocs)
		*nlocs = d ? d->nlocs : 0;
	return d ? d->locs : NULL;
}

const char *memprof_reader__errmsg(const struct memprof_reader *r)
{
	if (!r)
		return "no reader";
	return r->errmsg[0] ? r->errmsg : (r->err ? strerror(-r->err) : "");
}

uint64_t memprof_reader__offset(const struct memprof_reader *r)
{
	return r ? r->in_off : 0;
}

uint64_t memprof_reader__file_size(const struct memprof_reader *r)
{
	return r ? r->file_size : 0;
}

unsigned int memprof_reader__warnings(const struct memprof_reader *r)
{
	return r ? r->warnings : 0;
}

void memprof_reader__free(struct memprof_reader *r)
{
	if (!r)
		return;
	for (unsigned int i = 0; i < r->ndoms; i++) {
		mtc_mtf__free(&r->doms[i]->mtf);
		free(r->doms[i]->bt);
		free(r->doms[i]);
	}
	for (size_t i = 0; i < r->locs.cap; i++)
		if (r->locs.slots[i].k1)
			free((void *)(uintptr_t)r->locs.slots[i].val);
	free(r->loc0);
	mp_hashmap__clear(&r->locs);
	mp_hashmap__clear(&r->live);
	ZSTD_freeDCtx(r->zd);
	free(r->zin);
	free(r->info_strs);
	if (r->own_fd)
		close(r->fd);
	free(r);
}
