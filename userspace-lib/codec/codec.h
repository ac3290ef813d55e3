/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libmemprof internals shared by the memtrace writer and reader: format constants, the
 * little-endian primitives, vints and the move-to-front string tables of location events.
 * See man/memprof-trace.5 for the format.
 */
#ifndef MP_CODEC_H
#define MP_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "userspace-lib/array.h"
#include "userspace-lib/hashmap.h"

#define MP_CTF_MAGIC		0xC1FC1FC1u
#define MP_ZSTD_MAGIC		0xFD2FB528u
#define MP_PACKET_MAX		32768u		/* readers' packet buffer */
#define MP_HDR_V2		66u
#define MP_HDR_V3		68u
#define MP_TLOW_BITS		25
#define MP_TLOW_MASK		((1u << MP_TLOW_BITS) - 1)
#define MP_CACHE_SLOTS		16384u
#define MP_CACHE_MASK		(MP_CACHE_SLOTS - 1)
#define MP_VERIFY_FIRST		4242u
#define MP_VERIFY_STEP		5413u
#define MP_VERIFY_NONE		0xFFFFu
#define MP_MTF_SLOTS		31u
#define MP_MTF_NEW		31u

#define MP_LINE_MAX		0xFFFFFu
#define MP_START_MAX		0xFFu
#define MP_END_MAX		0x3FFu

enum mp_ev_code {
	MP_EV_INFO = 0,
	MP_EV_LOCATION = 1,
	MP_EV_ALLOC = 2,
	MP_EV_PROMOTE = 3,
	MP_EV_COLLECT = 4,
	MP_EV_SHORT_ALLOC = 100,	/* 101..116: short alloc of code-100 words */
	MP_SHORT_MAX_LEN = 16,
};

/* Header field offsets (v1/v2; add 2 after the pid for v3's domain field). */
#define MP_OFF_MAGIC		0
#define MP_OFF_SIZE		4
#define MP_OFF_TBEGIN		8
#define MP_OFF_TEND		16
#define MP_OFF_FLUSH		24
#define MP_OFF_VERSION		28
#define MP_OFF_PID		30
#define MP_OFF_DOMAIN		38	/* v3 only */

static inline void mp_put16(uint8_t *p, uint16_t v)
{
	p[0] = v;
	p[1] = v >> 8;
}

static inline void mp_put32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);	/* little-endian host: x86-64, arm64 */
}

static inline void mp_put64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

static inline uint16_t mp_get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t mp_get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

static inline uint64_t mp_get64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "libmemprof assumes a little-endian host"
#endif

/* Encode @v as upstream does (minimal form, FE only for values that fit a signed int32). */
static inline size_t mp_put_vint(uint8_t *p, int64_t v)
{
	if (v >= 0 && v <= 252) {
		p[0] = (uint8_t)v;
		return 1;
	}
	if (v >= 0 && v <= 0xFFFF) {
		p[0] = 253;
		mp_put16(p + 1, (uint16_t)v);
		return 3;
	}
	if (v >= INT32_MIN && v <= INT32_MAX) {
		p[0] = 254;
		mp_put32(p + 1, (uint32_t)(int32_t)v);
		return 5;
	}
	p[0] = 255;
	mp_put64(p + 1, (uint64_t)v);
	return 9;
}

#define MP_VINT_MAX		9

/* Fields of one encoded location: 48 bits packed as u32 + u16. */
static inline uint64_t mp_loc_pack(uint32_t line, uint32_t start, uint32_t end, unsigned int fcode,
				   unsigned int dcode)
{
	return (uint64_t)line | (uint64_t)start << 20 | (uint64_t)end << 28 |
	       (uint64_t)fcode << 38 | (uint64_t)dcode << 43;
}

/*
 * Move-to-front tables of location events: 31 filenames, each with its own 31 defnames.
 * Strings are owned (malloc'd). Both sides keep the filled entries at indices 0..n-1.
 */
struct mp_mtf_defs {
	char *s[MP_MTF_SLOTS];
	unsigned int n;
};

struct mp_mtf_file {
	char *name;
	struct mp_mtf_defs *defs;
};

struct mp_mtf {
	struct mp_mtf_file f[MP_MTF_SLOTS];
	unsigned int n;
};

void mtc_mtf__free(struct mp_mtf *t);
/* Move entry @i of an array of @elem-byte entries to the front. */
void mtc_mtf_to_front(void *arr, size_t elem, unsigned int i);

/* close(@fd) on an error path, keeping the errno of the error that is being returned. */
void mtc_close_keep_errno(int fd);

#endif
