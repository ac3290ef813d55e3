// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * memtrace writer. Events are encoded straight into a 32 KiB packet buffer; a packet is
 * written with one write() when it is full, spans too long, or on __flush(). The encoder
 * mirrors the reader's decoder state exactly: the 16384-slot backtrace cache with its "next
 * slot" predictions, the previous backtrace, and the MTF string tables of location events.
 * Memory is constant in the trace length except the table of defined location codes.
 * An asynchronous writer (writer_async.h) hands its packets to a thread of its own instead.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include <memprof/trace.h>

#include "userspace-lib/codec/codec.h"
#include "userspace-lib/codec/outfile.h"
#include "userspace-lib/codec/writer_async.h"

#define MP_MAX_FRAMES		3000u		/* frames kept per backtrace (innermost) */
#define MP_STR_MAX		1023u		/* longer location strings are truncated */
#define MP_LOC_EVENT_MAX	8192u		/* larger location events become <unknown> */
#define MP_DEFAULT_SPAN		30000000u	/* µs: upstream's packet time limit */
#define MP_CODE_LIMIT		(1ull << 62)
#define MP_MAX_CODES		(1u << 24)	/* distinct location codes per trace */
#define MP_WQ_CHUNK		(64u * 1024)	/* bytes of one queued chunk */
#define MP_WQ_SPARE		4		/* written chunks kept for reuse */
#define MP_WQ_STACK		(64u * 1024)	/* the writer thread's stack */

/* A run of trace bytes on its way to the file, or (truncate >= 0) "cut the file there". */
struct wq_chunk {
	struct wq_chunk *next;
	size_t len;
	off_t truncate;
	uint8_t data[MP_WQ_CHUNK];
};

/* The queue of an asynchronous writer and its thread (writer_async.h). */
struct mp_wq {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct wq_chunk *head, *tail;	/* queued, oldest first; the thread pops the head */
	struct wq_chunk *spare;		/* written, for reuse */
	unsigned int nspare;
	_Atomic size_t queued;		/* bytes in the queue */
	size_t limit;
	bool finish;			/* nothing more will be queued: patch, close, end */
	_Atomic bool done;		/* the thread ended */
	_Atomic int err;		/* errno of the first failed write */
	uint64_t err_us;		/* its CLOCK_REALTIME time (under mu) */
	uint64_t lost;			/* bytes the file did not get since (under mu) */
	char *patch;			/* context tail to write at the end (under mu) */
	size_t patch_len;
};

struct memprof_writer {
	int fd;
	bool own_fd;
	int err;			/* sticky: the first I/O or allocation failure */
	struct mp_wq *q;		/* asynchronous writer: the packets go there */
	bool closing;			/* the last packets may overshoot the queue's bound */
	bool finished;			/* mp_writer__finish() was called */
	off_t base;			/* file offset where the trace begins, or -1 */
	bool regular;			/* the output is a regular file */
	bool patchable;			/* plain, on a regular file without O_APPEND */
	uint64_t ctx_off;		/* file offset of the context string, and its length */
	size_t ctx_len;
	char *patch;			/* sync writer: the context tail for close */
	size_t patch_len;
	uint16_t version;
	uint16_t domain;
	unsigned int hdr_size;
	bool real_verifier;
	uint32_t span;
	uint64_t pid;
	uint64_t start_time;
	uint64_t last_time;		/* time of the last event written (monotone) */

	/* the pending packet */
	size_t len;			/* bytes used, header included; 0 when no packet is open */
	uint64_t pkt_begin;
	uint64_t pkt_id_begin;
	uint16_t vix, vpred;
	uint64_t vval;
	uint64_t event_packets;
	uint32_t next_vix;

	uint64_t next_id;
	uint64_t bytes;
	uint64_t dropped_frames;

	/* backtrace codec: an exact mirror of the reader's cache */
	uint16_t pred[MP_CACHE_SLOTS];
	uint64_t loc[MP_CACHE_SLOTS];
	uint64_t stamp[MP_CACHE_SLOTS];
	uint64_t *prev;
	size_t prev_len, prev_cap;

	/* locations */
	struct mp_hashmap defined;	/* code -> fingerprint of its definition */
	struct mp_mtf mtf;

	ZSTD_CCtx *zc;
	uint8_t *zbuf;
	size_t zcap;

	uint8_t scratch[MP_PACKET_MAX];
	uint8_t pkt[MP_PACKET_MAX];
};

#define OPT(opts, field, def)                                                                 \
	((opts) && (opts)->sz >= offsetof(__typeof__(*(opts)), field) + sizeof((opts)->field)  \
		 ? (opts)->field                                                               \
		 : (def))

static uint64_t realtime_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* Queue @n bytes (or, with @truncate >= 0, a cut of the file) for the writer's thread. */
static int wq_put(struct mp_wq *q, const uint8_t *p, size_t n, off_t truncate)
{
	pthread_mutex_lock(&q->mu);
	while (n || truncate >= 0) {
		struct wq_chunk *c = q->tail;
		size_t k;

		if (!c || c->truncate >= 0 || c->len == MP_WQ_CHUNK || truncate >= 0) {
			c = q->spare;
			if (c) {
				q->spare = c->next;
				q->nspare--;
			} else if (!(c = malloc(sizeof(*c)))) {
				pthread_mutex_unlock(&q->mu);
				return -ENOMEM;
			}
			c->next = NULL;
			c->len = 0;
			c->truncate = truncate;
			if (q->tail)
				q->tail->next = c;
			else
				q->head = c;
			q->tail = c;
			if (truncate >= 0) {
				truncate = -1;
				continue;
			}
		}
		k = MP_WQ_CHUNK - c->len;
		if (k > n)
			k = n;
		memcpy(c->data + c->len, p, k);
		c->len += k;
		p += k;
		n -= k;
		atomic_fetch_add_explicit(&q->queued, k, memory_order_relaxed);
	}
	pthread_cond_signal(&q->cv);
	pthread_mutex_unlock(&q->mu);
	return 0;
}

static int write_all(struct memprof_writer *w, const uint8_t *p, size_t n)
{
	int err = w->q ? wq_put(w->q, p, n, -1) : mp_write_all(w->fd, p, n);

	if (!err)
		w->bytes += n;
	return err;
}

/* The file's first failure, kept with its time; what follows it is not written. */
static void wq_fail(struct mp_wq *q, int err)
{
	pthread_mutex_lock(&q->mu);
	if (!atomic_load(&q->err)) {
		q->err_us = realtime_us();
		atomic_store(&q->err, -err);
	}
	pthread_mutex_unlock(&q->mu);
}

static void *wq_thread(void *arg)
{
	struct memprof_writer *w = arg;
	struct mp_wq *q = w->q;
	int err;

	pthread_mutex_lock(&q->mu);
	for (;;) {
		struct wq_chunk *c = q->head;

		if (!c) {
			if (q->finish)
				break;
			pthread_cond_wait(&q->cv, &q->mu);
			continue;
		}
		q->head = c->next;
		if (!q->head)
			q->tail = NULL;
		pthread_mutex_unlock(&q->mu);

		err = 0;
		if (atomic_load(&q->err))
			;
		else if (c->truncate >= 0 && (ftruncate(w->fd, c->truncate) < 0 ||
					      lseek(w->fd, c->truncate, SEEK_SET) < 0))
			err = -errno;
		else if (c->truncate < 0)
			err = mp_write_all(w->fd, c->data, c->len);
		if (err)
			wq_fail(q, err);

		pthread_mutex_lock(&q->mu);
		if (atomic_load(&q->err))
			q->lost += c->len;
		atomic_fetch_sub_explicit(&q->queued, c->len, memory_order_relaxed);
		if (q->nspare < MP_WQ_SPARE) {
			c->next = q->spare;
			q->spare = c;
			q->nspare++;
		} else {
			free(c);
		}
	}
	pthread_mutex_unlock(&q->mu);
	/* the drop counts, in place: also after a failed write (it needs no new block) */
	if (q->patch && w->patchable &&
	    pwrite(w->fd, q->patch, q->patch_len, (off_t)(w->ctx_off + w->ctx_len -
							   q->patch_len)) < 0)
		wq_fail(q, -errno);
	if (w->own_fd && close(w->fd) < 0)
		wq_fail(q, -errno);
	w->fd = -1;
	atomic_store(&q->done, true);
	return NULL;
}

static void wq_free(struct mp_wq *q)
{
	struct wq_chunk *c;

	while ((c = q->head)) {
		q->head = c->next;
		free(c);
	}
	while ((c = q->spare)) {
		q->spare = c->next;
		free(c);
	}
	pthread_mutex_destroy(&q->mu);
	pthread_cond_destroy(&q->cv);
	free(q->patch);
	free(q);
}

/* Compress @n bytes with @mode (ZSTD_e_flush per packet, ZSTD_e_end at close), one write(). */
static int zstd_out(struct memprof_writer *w, const uint8_t *p, size_t n, ZSTD_EndDirective mode)
{
	ZSTD_inBuffer in = { p, n, 0 };
	size_t rem;
	int err;

	do {
		ZSTD_outBuffer out = { w->zbuf, w->zcap, 0 };

		rem = ZSTD_compressStream2(w->zc, &out, &in, mode);
		if (ZSTD_isError(rem))
			return -EIO;
		err = write_all(w, w->zbuf, out.pos);
		if (err)
			return err;
	} while (rem || in.pos < in.size);
	return 0;
}

static int emit(struct memprof_writer *w, const uint8_t *p, size_t n)
{
	return w->zc ? zstd_out(w, p, n, ZSTD_e_flush) : write_all(w, p, n);
}

static void put_header(struct memprof_writer *w, uint8_t *h, size_t len, uint64_t begin,
		       uint64_t end, uint16_t vix, uint16_t vpred, uint64_t vval, uint64_t id_begin,
		       uint64_t id_end)
{
	size_t o = MP_OFF_DOMAIN;

	mp_put32(h + MP_OFF_MAGIC, MP_CTF_MAGIC);
	mp_put32(h + MP_OFF_SIZE, (uint32_t)(len * 8));
	mp_put64(h + MP_OFF_TBEGIN, begin);
	mp_put64(h + MP_OFF_TEND, end);
	mp_put32(h + MP_OFF_FLUSH, 0);
	mp_put16(h + MP_OFF_VERSION, w->version);
	mp_put64(h + MP_OFF_PID, w->pid);
	if (w->version >= 3) {
		mp_put16(h + o, w->domain);
		o += 2;
	}
	mp_put16(h + o, vix);
	mp_put16(h + o + 2, vpred);
	mp_put64(h + o + 4, vval);
	mp_put64(h + o + 12, id_begin);
	mp_put64(h + o + 20, id_end);
}

/* The sticky error, an asynchronous writer's file's first failure included. */
static inline int writer_err(struct memprof_writer *w)
{
	int e;

	if (!w->err && w->q && (e = atomic_load_explicit(&w->q->err, memory_order_relaxed)))
		w->err = -e;
	return w->err;
}

int memprof_writer__flush(struct memprof_writer *w)
{
	int err;

	if (!w)
		return -EINVAL;
	if (writer_err(w))
		return w->err;
	if (!w->len)
		return 0;
	/* a full queue: the packet stays pending, the caller's event is not added */
	if (w->q && !w->closing &&
	    atomic_load_explicit(&w->q->queued, memory_order_relaxed) >= w->q->limit)
		return -EAGAIN;
	put_header(w, w->pkt, w->len, w->pkt_begin, w->last_time, w->vix, w->vpred, w->vval,
		   w->pkt_id_begin, w->next_id);
	err = emit(w, w->pkt, w->len);
	w->len = 0;
	if (err)
		w->err = err;
	return err;
}

/* Make room for @need bytes of events at time @t, opening a packet if none is open. */
static int reserve(struct memprof_writer *w, size_t need, uint64_t t)
{
	int err;

	if (w->len && (w->len + need > MP_PACKET_MAX || t - w->pkt_begin >= w->span)) {
		err = memprof_writer__flush(w);
		if (err)
			return err;
	}
	if (w->len)
		return 0;
	w->len = w->hdr_size;
	w->pkt_begin = t;
	w->pkt_id_begin = w->next_id;
	/* The verifier describes the cache as the reader has it before this packet. */
	if (w->real_verifier && w->event_packets) {
		w->vix = (uint16_t)w->next_vix;
		w->vpred = w->pred[w->vix];
		w->vval = w->loc[w->vix];
		w->next_vix = (w->next_vix + MP_VERIFY_STEP) & MP_CACHE_MASK;
	} else {
		w->vix = MP_VERIFY_NONE;
		w->vpred = 0;
		w->vval = 0;
	}
	w->event_packets++;
	return 0;
}

static uint64_t clamp_time(struct memprof_writer *w, uint64_t t)
{
	if (t < w->last_time)
		t = w->last_time;
	w->last_time = t;
	return t;
}

static size_t put_evhdr(uint8_t *p, unsigned int code, uint64_t t)
{
	mp_put32(p, (uint32_t)code << MP_TLOW_BITS | (uint32_t)(t & MP_TLOW_MASK));
	return 4;
}

static size_t put_str(uint8_t *p, const char *s, size_t n)
{
	memcpy(p, s, n);
	p[n] = 0;
	return n + 1;
}

static size_t bounded_len(const char *s)
{
	return s ? strnlen(s, MP_STR_MAX) : 0;
}

static void free_writer(struct memprof_writer *w)
{
	if (w->q)
		wq_free(w->q);
	else if (w->own_fd && w->fd >= 0)
		close(w->fd);
	ZSTD_freeCCtx(w->zc);
	free(w->zbuf);
	free(w->prev);
	free(w->patch);
	mp_hashmap__clear(&w->defined);
	mtc_mtf__free(&w->mtf);
	free(w);
}

/* The trace-info packet, first in the trace: one event, header + content <= 32 KiB. */
static int write_info(struct memprof_writer *w, const struct memprof_trace_info *info)
{
	const char *strs[4];
	size_t lens[4], n = 0;
	uint8_t *p;

	strs[0] = info->executable_name;
	strs[1] = info->host_name;
	strs[2] = info->runtime_params;
	strs[3] = w->version >= 2 ? info->context : NULL;
	for (int i = 0; i < 4; i++) {
		lens[i] = strs[i] ? strnlen(strs[i], MP_PACKET_MAX) : 0;
		n += lens[i] + 1;
	}
	if (w->hdr_size + 4 + 8 + 1 + 8 + n > MP_PACKET_MAX)
		return -E2BIG;
	w->start_time = w->last_time = info->start_time_us;
	p = w->pkt + w->hdr_size;
	p += put_evhdr(p, MP_EV_INFO, w->start_time);
	memcpy(p, &info->sample_rate, 8);
	p += 8;
	*p++ = info->word_size;
	for (int i = 0; i < 3; i++)
		p += put_str(p, strs[i] ? strs[i] : "", lens[i]);
	mp_put64(p, info->pid);
	p += 8;
	if (w->version >= 2) {
		w->ctx_off = (uint64_t)w->base + (uint64_t)(p - w->pkt);
		w->ctx_len = lens[3];
		p += put_str(p, strs[3] ? strs[3] : "", lens[3]);
	}
	put_header(w, w->pkt, (size_t)(p - w->pkt), w->start_time, w->start_time, MP_VERIFY_NONE, 0,
		   0, 0, 0);
	return emit(w, w->pkt, (size_t)(p - w->pkt));
}

static struct memprof_writer *writer_new(int fd, size_t queue_bytes,
					 const struct memprof_trace_info *info,
					 const struct memprof_writer_opts *opts)
{
	struct memprof_writer *w;
	pthread_attr_t attr;
	struct stat st;
	int level, err;

	if (fd < 0 || !info || (opts && opts->sz < sizeof(size_t)) || info->pid >= MP_CODE_LIMIT) {
		errno = EINVAL;
		return NULL;
	}
	w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->fd = fd;
	w->version = OPT(opts, version, 0) ? OPT(opts, version, 0) : 2;
	if (w->version != 2 && w->version != 3) {
		free(w);
		errno = EINVAL;
		return NULL;
	}
	w->hdr_size = w->version >= 3 ? MP_HDR_V3 : MP_HDR_V2;
	w->domain = w->version >= 3 ? info->initial_domain : 0;
	w->real_verifier = OPT(opts, real_verifier, 0) >= 0;
	w->span = OPT(opts, max_packet_span_us, 0);
	if (!w->span || w->span > MP_DEFAULT_SPAN)
		w->span = MP_DEFAULT_SPAN;
	w->pid = info->pid;
	w->next_vix = MP_VERIFY_FIRST;
	w->defined.limit = MP_MAX_CODES;
	w->base = lseek(fd, 0, SEEK_CUR);
	level = OPT(opts, zstd_level, 0);
	/* pwrite() on an O_APPEND file appends: its context cannot be patched in place */
	w->regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
	w->patchable = level <= 0 && w->base >= 0 && w->regular && !(fcntl(fd, F_GETFL) & O_APPEND);
	if (level > 0) {
		w->zc = ZSTD_createCCtx();
		w->zcap = ZSTD_compressBound(MP_PACKET_MAX) + 4096;
		w->zbuf = malloc(w->zcap);
		if (!w->zc || !w->zbuf ||
		    ZSTD_isError(ZSTD_CCtx_setParameter(w->zc, ZSTD_c_compressionLevel, level)) ||
		    ZSTD_isError(ZSTD_CCtx_setParameter(w->zc, ZSTD_c_checksumFlag, 0))) {
			free_writer(w);
			errno = ENOMEM;
			return NULL;
		}
	}
	if (queue_bytes) {
		w->q = calloc(1, sizeof(*w->q));
		if (!w->q) {
			free_writer(w);
			errno = ENOMEM;
			return NULL;
		}
		pthread_mutex_init(&w->q->mu, NULL);
		pthread_cond_init(&w->q->cv, NULL);
		w->q->limit = queue_bytes > MP_PACKET_MAX ? queue_bytes : MP_PACKET_MAX;
	}
	err = write_info(w, info);
	if (!err && w->q) {
		pthread_attr_init(&attr);
		pthread_attr_setstacksize(&attr, MP_WQ_STACK);
		err = -pthread_create(&w->q->thread, &attr, wq_thread, w);
		pthread_attr_destroy(&attr);
	}
	if (err) {
		free_writer(w);
		errno = -err;
		return NULL;
	}
	return w;
}

struct memprof_writer *memprof_writer__new(int fd, const struct memprof_trace_info *info,
					   const struct memprof_writer_opts *opts)
{
	return writer_new(fd, 0, info, opts);
}

struct memprof_writer *mp_writer__new_async(int fd, size_t queue_bytes,
					    const struct memprof_trace_info *info,
					    const struct memprof_writer_opts *opts)
{
	struct memprof_writer *w = writer_new(fd, queue_bytes, info, opts);
	int err = errno;

	if (w) {
		w->own_fd = true;
	} else if (fd >= 0) {
		close(fd);
		errno = err;
	}
	return w;
}

struct memprof_writer *memprof_writer__open(const char *path,
					    const struct memprof_trace_info *info,
					    const struct memprof_writer_opts *opts)
{
	struct memprof_writer *w;
	int fd;

	if (!path || !info) {
		errno = EINVAL;
		return NULL;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return NULL;
	w = memprof_writer__new(fd, info, opts);
	if (w)
		w->own_fd = true;
	else
		mtc_close_keep_errno(fd);
	return w;
}

int mp_writer__patch_context_tail(struct memprof_writer *w, const char *s, size_t n)
{
	char *copy;

	if (!w || w->finished)
		return -EINVAL;
	if (!w->patchable || w->version < 2)
		return -ENOTSUP;
	if (n > w->ctx_len)
		return -EINVAL;
	copy = malloc(n ? n : 1);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, s, n);
	if (w->q) {
		pthread_mutex_lock(&w->q->mu);
		free(w->q->patch);
		w->q->patch = copy;
		w->q->patch_len = n;
		pthread_mutex_unlock(&w->q->mu);
	} else {
		free(w->patch);
		w->patch = copy;
		w->patch_len = n;
	}
	return 0;
}

int mp_writer__reset(struct memprof_writer *w, const struct memprof_trace_info *info)
{
	int err;

	if (!w || !info || w->finished || info->pid >= MP_CODE_LIMIT)
		return -EINVAL;
	if (writer_err(w))
		return w->err;
	if (w->next_id || w->defined.len || w->len)
		return -EBUSY;
	if (w->base < 0 || !w->regular)
		return -ENOTSUP;
	if (w->q)
		err = wq_put(w->q, NULL, 0, w->base);
	else if (ftruncate(w->fd, w->base) < 0 || lseek(w->fd, w->base, SEEK_SET) < 0)
		err = -errno;
	else
		err = 0;
	if (!err && w->zc && ZSTD_isError(ZSTD_CCtx_reset(w->zc, ZSTD_reset_session_only)))
		err = -EIO;
	if (!err) {
		w->bytes = 0;
		w->pid = info->pid;
		w->domain = w->version >= 3 ? info->initial_domain : 0;
		err = write_info(w, info);
	}
	if (err)
		w->err = err;
	return err;
}

/* The last packets and the end of the zstd frame, past the queue's bound. */
static int writer_end(struct memprof_writer *w)
{
	int err;

	w->closing = true;
	err = memprof_writer__flush(w);
	if (!err && w->zc)
		err = zstd_out(w, NULL, 0, ZSTD_e_end);
	return err;
}

int mp_writer__finish(struct memprof_writer *w)
{
	int err;

	if (!w || w->finished)
		return -EINVAL;
	err = writer_end(w);
	w->finished = true;
	if (w->q) {
		pthread_mutex_lock(&w->q->mu);
		w->q->finish = true;
		pthread_cond_signal(&w->q->cv);
		pthread_mutex_unlock(&w->q->mu);
	}
	return err;
}

bool mp_writer__done(struct memprof_writer *w)
{
	return !w || !w->q || atomic_load(&w->q->done);
}

int mp_writer__output_error(struct memprof_writer *w, uint64_t *since_us, uint64_t *lost)
{
	int err = 0;

	if (since_us)
		*since_us = 0;
	if (lost)
		*lost = 0;
	if (!w || !w->q)
		return w && w->err ? -w->err : 0;
	pthread_mutex_lock(&w->q->mu);
	err = atomic_load(&w->q->err);
	if (since_us)
		*since_us = w->q->err_us;
	if (lost)
		*lost = w->q->lost;
	pthread_mutex_unlock(&w->q->mu);
	return err;
}

/* ---- locations ---------------------------------------------------------------------------- */

static uint32_t clampu(uint32_t v, uint32_t max)
{
	return v > max ? max : v;
}

/* A fingerprint of a definition as it is written (clamped, truncated): equal iff identical. */
static uint64_t loc_fingerprint(const struct memprof_location *locs, unsigned int nlocs)
{
	uint64_t h = MP_HASH_SEED;

	h = mp_hash_bytes(h, &nlocs, sizeof(nlocs));
	for (unsigned int i = 0; i < nlocs; i++) {
		const struct memprof_location *l = &locs[i];
		uint64_t v = mp_loc_pack(clampu(l->line, MP_LINE_MAX),
					 clampu(l->start_char, MP_START_MAX),
					 clampu(l->end_char, MP_END_MAX), 0, 0);
		const char *f = l->filename ? l->filename : "";
		const char *d = l->defname ? l->defname : "";

		h = mp_hash_bytes(h, &v, sizeof(v));
		h = mp_hash_bytes(h, f, bounded_len(f) + 1);
		h = mp_hash_bytes(h, d, bounded_len(d) + 1);
	}
	return mp_hash64(h);
}

/*
 * Find @s in an MTF array of @n owned strings; on a hit move it to the front and return its
 * index, else return MP_MTF_NEW (the caller pushes it).
 */
static unsigned int mtf_find(char **arr, unsigned int n, const char *s, size_t len, size_t stride)
{
	for (unsigned int i = 0; i < n; i++) {
		const char *e = *(char **)((uint8_t *)arr + i * stride);

		if (!strncmp(e, s, len) && !e[len]) {
			mtc_mtf_to_front(arr, stride, i);
			return i;
		}
	}
	return MP_MTF_NEW;
}

static int mtf_push_file(struct mp_mtf *t, const char *s, size_t len)
{
	struct mp_mtf_defs *defs = calloc(1, sizeof(*defs));
	char *name = strndup(s, len);

	if (!defs || !name) {
		free(defs);
		free(name);
		return -ENOMEM;
	}
	if (t->n == MP_MTF_SLOTS) {
		struct mp_mtf_file *old = &t->f[MP_MTF_SLOTS - 1];

		free(old->name);
		for (unsigned int i = 0; i < old->defs->n; i++)
			free(old->defs->s[i]);
		free(old->defs);
		t->n--;
	}
	memmove(&t->f[1], &t->f[0], t->n * sizeof(t->f[0]));
	t->f[0].name = name;
	t->f[0].defs = defs;
	t->n++;
	return 0;
}

static int mtf_push_def(struct mp_mtf_defs *d, const char *s, size_t len)
{
	char *name = strndup(s, len);

	if (!name)
		return -ENOMEM;
	if (d->n == MP_MTF_SLOTS)
		free(d->s[--d->n]);
	memmove(&d->s[1], &d->s[0], d->n * sizeof(d->s[0]));
	d->s[0] = name;
	d->n++;
	return 0;
}

static size_t put_loc(struct memprof_writer *w, uint8_t *p, const struct memprof_location *l)
{
	const char *f = l->filename ? l->filename : "";
	const char *d = l->defname ? l->defname : "";
	size_t fl = bounded_len(f), dl = bounded_len(d), n = 6;
	unsigned int fc, dc;
	uint64_t v;

	fc = mtf_find((char **)&w->mtf.f[0].name, w->mtf.n, f, fl, sizeof(w->mtf.f[0]));
	if (fc == MP_MTF_NEW && mtf_push_file(&w->mtf, f, fl))
		w->err = -ENOMEM;
	dc = MP_MTF_NEW;
	if (w->mtf.n) {
		struct mp_mtf_defs *defs = w->mtf.f[0].defs;

		dc = mtf_find(defs->s, defs->n, d, dl, sizeof(defs->s[0]));
		if (dc == MP_MTF_NEW && mtf_push_def(defs, d, dl))
			w->err = -ENOMEM;
	}
	v = mp_loc_pack(clampu(l->line, MP_LINE_MAX), clampu(l->start_char, MP_START_MAX),
			clampu(l->end_char, MP_END_MAX), fc, dc);
	mp_put32(p, (uint32_t)v);
	mp_put16(p + 4, (uint16_t)(v >> 32));
	if (fc == MP_MTF_NEW)
		n += put_str(p + n, f, fl);
	if (dc == MP_MTF_NEW)
		n += put_str(p + n, d, dl);
	return n;
}

int memprof_writer__location(struct memprof_writer *w, uint64_t code,
			     const struct memprof_location *locs, unsigned int nlocs)
{
	static const struct memprof_location unknown = { "<unknown>", "??", 1, 1, 1 };
	size_t worst = 4 + 8 + 1;
	uint64_t fp, *slot;
	bool found;
	uint8_t *p;
	int err = 0;

	if (!w || !code || code >= MP_CODE_LIMIT || nlocs > 255 || (nlocs && !locs))
		return -EINVAL;
	if (writer_err(w))
		return w->err;
	fp = loc_fingerprint(locs, nlocs);
	slot = mp_hashmap__find(&w->defined, code, 0);
	if (slot)
		return *slot == fp ? 0 : -EINVAL;
	for (unsigned int i = 0; i < nlocs; i++)
		worst += 6 + bounded_len(locs[i].filename) + 1 + bounded_len(locs[i].defname) + 1;
	if (worst > MP_LOC_EVENT_MAX) {
		/* As upstream: an oversized definition becomes one <unknown> location. */
		locs = &unknown;
		nlocs = 1;
		worst = 4 + 8 + 1 + 6 + 10 + 3;
	}
	slot = mp_hashmap__insert(&w->defined, code, 0, &found, &err);
	if (!slot)
		return err;
	err = reserve(w, worst, w->last_time);
	if (err) {
		mp_hashmap__remove(&w->defined, code, 0);
		return err;
	}
	*slot = fp;
	p = w->pkt + w->len;
	p += put_evhdr(p, MP_EV_LOCATION, w->last_time);
	mp_put64(p, code);
	p += 8;
	*p++ = (uint8_t)nlocs;
	for (unsigned int i = 0; i < nlocs; i++)
		p += put_loc(w, p, &locs[i]);
	w->len = (size_t)(p - w->pkt);
	return w->err;
}

int memprof_writer__has_location(const struct memprof_writer *w, uint64_t code)
{
	return w && code && mp_hashmap__find(&w->defined, code, 0) ? 1 : 0;
}

/* ---- backtraces --------------------------------------------------------------------------- */

static inline unsigned int hash1(uint64_t c)
{
	return (unsigned int)((c * 0x4983723ull) >> 11) & MP_CACHE_MASK;
}

static inline unsigned int hash2(uint64_t c)
{
	return (unsigned int)((c * 0xFDEA731ull) >> 21) & MP_CACHE_MASK;
}

/*
 * Encode frames bt[0..n) as codewords into @out; returns the number of codewords (*@len gets
 * the bytes). Each step mirrors what the reader does with the codeword, so loc/pred stay equal.
 */
static unsigned int encode_frames(struct memprof_writer *w, const uint64_t *bt, size_t n,
				  uint8_t *out, size_t *len)
{
	uint64_t stamp = w->next_id + 1;
	unsigned int p = 0, ncw = 0;
	size_t i = 0, o = 0;

	while (i < n) {
		uint64_t c = bt[i];
		unsigned int b1 = hash1(c), b2 = hash2(c), b, q, k = 0;

		if (w->loc[b1] == c || w->loc[b2] == c) {
			b = w->loc[b1] == c ? b1 : b2;
			w->pred[p] = (uint16_t)b;
			w->stamp[b] = stamp;
			q = b;
			while (k < 255 && i + 1 + k < n && w->loc[w->pred[q]] == bt[i + 1 + k]) {
				q = w->pred[q];
				w->stamp[q] = stamp;
				k++;
			}
			if (k <= 1) {
				mp_put16(out + o, (uint16_t)(b << 2 | k));
				o += 2;
			} else {
				mp_put16(out + o, (uint16_t)(b << 2 | 2));
				out[o + 2] = (uint8_t)k;
				o += 3;
			}
			p = q;
			i += 1 + k;
		} else {
			b = w->stamp[b1] <= w->stamp[b2] ? b1 : b2;
			w->pred[p] = (uint16_t)b;
			w->loc[b] = c;
			w->stamp[b] = stamp;
			mp_put16(out + o, (uint16_t)(b << 2 | 3));
			mp_put64(out + o + 2, c);
			o += 10;
			p = b;
			i++;
		}
		ncw++;
	}
	*len = o;
	return ncw;
}

int memprof_writer__alloc(struct memprof_writer *w, uint64_t time_us, uint64_t length,
			  uint64_t nsamples, enum memprof_source source, const uint64_t *bt,
			  size_t bt_len, uint64_t *id)
{
	size_t pfx = 0, cwlen, need;
	unsigned int ncw;
	uint64_t t;
	uint8_t *p;
	bool shrt;
	int err;

	if (!w || nsamples < 1 || nsamples >= MP_CODE_LIMIT || length >= MP_CODE_LIMIT ||
	    (unsigned int)source > MEMPROF_SOURCE_EXTERNAL || (bt_len && !bt))
		return -EINVAL;
	if (writer_err(w))
		return w->err;
	if (bt_len > MP_MAX_FRAMES) {
		/* Keep the innermost frames: the allocation site matters most. */
		w->dropped_frames += bt_len - MP_MAX_FRAMES;
		bt += bt_len - MP_MAX_FRAMES;
		bt_len = MP_MAX_FRAMES;
	}
	while (pfx < bt_len && pfx < w->prev_len && bt[pfx] == w->prev[pfx])
		pfx++;
	for (size_t i = pfx; i < bt_len; i++)
		if (!mp_hashmap__find(&w->defined, bt[i], 0))
			return -ENOENT;
	if (MP_ARRAY_RESERVE(w->prev, w->prev_cap, bt_len, 64))
		return -ENOMEM;
	need = 4 + 3 * MP_VINT_MAX + 1 + 2 + 10 * (bt_len - pfx);
	t = time_us < w->last_time ? w->last_time : time_us;
	err = reserve(w, need, t);
	if (err)
		return err;
	t = clamp_time(w, t);

	ncw = encode_frames(w, bt + pfx, bt_len - pfx, w->scratch, &cwlen);
	memcpy(w->prev + pfx, bt + pfx, (bt_len - pfx) * sizeof(*bt));
	w->prev_len = bt_len;

	p = w->pkt + w->len;
	shrt = length >= 1 && length <= MP_SHORT_MAX_LEN && nsamples == 1 &&
	       source == MEMPROF_SOURCE_MINOR && ncw < 256;
	if (shrt) {
		p += put_evhdr(p, MP_EV_SHORT_ALLOC + (unsigned int)length, t);
		p += mp_put_vint(p, (int64_t)pfx);
		*p++ = (uint8_t)ncw;
	} else {
		p += put_evhdr(p, MP_EV_ALLOC, t);
		p += mp_put_vint(p, (int64_t)length);
		p += mp_put_vint(p, (int64_t)nsamples);
		*p++ = (uint8_t)source;
		p += mp_put_vint(p, (int64_t)pfx);
		mp_put16(p, (uint16_t)ncw);
		p += 2;
	}
	memcpy(p, w->scratch, cwlen);
	p += cwlen;
	w->len = (size_t)(p - w->pkt);
	if (id)
		*id = w->next_id;
	w->next_id++;
	return 0;
}

static int id_event(struct memprof_writer *w, unsigned int code, uint64_t time_us, uint64_t id)
{
	uint64_t t;
	uint8_t *p;
	int err;

	if (!w)
		return -EINVAL;
	if (writer_err(w))
		return w->err;
	if (id >= w->next_id)
		return -EINVAL;
	t = time_us < w->last_time ? w->last_time : time_us;
	err = reserve(w, 4 + MP_VINT_MAX, t);
	if (err)
		return err;
	t = clamp_time(w, t);
	p = w->pkt + w->len;
	p += put_evhdr(p, code, t);
	p += mp_put_vint(p, (int64_t)(w->next_id - 1 - id));
	w->len = (size_t)(p - w->pkt);
	return 0;
}

int memprof_writer__promote(struct memprof_writer *w, uint64_t time_us, uint64_t id)
{
	return id_event(w, MP_EV_PROMOTE, time_us, id);
}

int memprof_writer__collect(struct memprof_writer *w, uint64_t time_us, uint64_t id)
{
	return id_event(w, MP_EV_COLLECT, time_us, id);
}

uint64_t memprof_writer__bytes(const struct memprof_writer *w)
{
	return w ? w->bytes : 0;
}

uint64_t memprof_writer__dropped_frames(const struct memprof_writer *w)
{
	return w ? w->dropped_frames : 0;
}

int memprof_writer__close(struct memprof_writer *w)
{
	int err = 0, qerr;

	if (!w)
		return 0;
	if (!w->finished)
		err = mp_writer__finish(w);
	if (w->q) {
		pthread_join(w->q->thread, NULL);
		qerr = atomic_load(&w->q->err);
		if (!err && qerr)
			err = -qerr;
	} else {
		/* the drop counts, in place: also after a failed write (it needs no new block) */
		if (w->patch && w->patchable &&
		    pwrite(w->fd, w->patch, w->patch_len,
			   (off_t)(w->ctx_off + w->ctx_len - w->patch_len)) < 0 && !err)
			err = -errno;
		if (w->own_fd && w->fd >= 0) {
			if (close(w->fd) && !err)
				err = -errno;
			w->fd = -1;
		}
	}
	free_writer(w);
	return err;
}
