/*
 * segment.c — the segment format's header and footer, the map cache and
 * the I/O buffers both sides use. The writer is segment_write.c, the
 * readers segment_read.c (a whole record, the blocks of a range) and
 * segment_into.c (a range straight into the caller's memory).
 *
 * DESIGN
 * - One header and one footer layout for every version; what differs is
 *   the version word and the footer magic (SPWFOOT1/2/3), the v1 entry
 *   (40 bytes), and where records may start (v1: 4 KiB; v2: 8 bytes; v3:
 *   8 bytes, or 4 KiB for an aligned record, which the footer cannot tell
 *   from the entry: the readers check what they rely on).
 * - Readers never trust a length before it is checked against the segment
 *   length (or the record's), and never return a byte whose crc was not
 *   verified.
 */
#include "tier/segment/segment_i.h"

#include "common/crc32c.h"
#include "common/le.h"
#include "common/log.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

static const char hdr_magic[8] = {'S', 'P', 'W', 'S', 'E', 'G', '0', '1'};
static const char foot_magic_v1[8] = {'S', 'P', 'W', 'F', 'O', 'O', 'T', '1'};
static const char foot_magic_v2[8] = {'S', 'P', 'W', 'F', 'O', 'O', 'T', '2'};
static const char foot_magic[8] = {'S', 'P', 'W', 'F', 'O', 'O', 'T', '3'};

#define HDR_CRC_OFF (SEG_HDR_SIZE - 4)

/* ---- header ---- */

void seg_header_encode(uint8_t buf[SEG_HDR_SIZE], const uint8_t uuid[16], uint64_t seg_id)
{
	memset(buf, 0, SEG_HDR_SIZE);
	memcpy(buf, hdr_magic, 8);
	le_put32(buf + 8, SEG_VERSION);
	le_put32(buf + 12, 0);
	memcpy(buf + 16, uuid, 16);
	le_put64(buf + 32, seg_id);
	le_put32(buf + HDR_CRC_OFF, crc32c(0, buf, HDR_CRC_OFF));
}

int seg_header_decode(const uint8_t buf[SEG_HDR_SIZE], uint8_t uuid[16], uint64_t *seg_id,
		      uint32_t *version)
{
	uint32_t v;

	if (memcmp(buf, hdr_magic, 8) != 0)
		return -EIO;
	if (le_get32(buf + HDR_CRC_OFF) != crc32c(0, buf, HDR_CRC_OFF))
		return -EIO;
	v = le_get32(buf + 8);
	if (v != 1 && v != 2 && v != SEG_VERSION)
		return -ENOTSUP;
	if (uuid)
		memcpy(uuid, buf + 16, 16);
	*seg_id = le_get64(buf + 32);
	if (version)
		*version = v;
	return 0;
}

/* ---- footer ---- */

static uint32_t footer_len_of(uint64_t body_end, uint32_t n, uint32_t esize)
{
	uint64_t raw = (uint64_t)n * esize + SEG_TRAILER_SIZE;

	return (uint32_t)(align_up(body_end + raw) - body_end);
}

uint32_t seg_footer_len(uint64_t body_end, uint32_t n)
{
	return footer_len_of(body_end, n, SEG_ENTRY_SIZE);
}

void seg_footer_encode(uint8_t *buf, uint32_t footer_len, const struct seg_entry *e, uint32_t n)
{
	uint32_t pad = footer_len - (n * SEG_ENTRY_SIZE + SEG_TRAILER_SIZE);
	uint8_t *p = buf + pad;

	memset(buf, 0, pad);
	for (uint32_t i = 0; i < n; i++, p += SEG_ENTRY_SIZE) {
		le_put64(p, e[i].ino);
		le_put64(p + 8, e[i].chunk);
		le_put32(p + 16, (uint32_t)e[i].gen);
		le_put32(p + 20, e[i].flags);
		le_put64(p + 24, e[i].off);
		le_put32(p + 32, e[i].len);
		le_put32(p + 36, e[i].crc);
		le_put32(p + 40, e[i].chunk_len);
	}
	le_put32(p, n);
	le_put32(p + 4, crc32c(0, buf, (size_t)(p + 4 - buf)));
	le_put32(p + 8, footer_len);
	memcpy(p + 12, foot_magic, 8);
}

int seg_trailer_decode(const uint8_t tail[SEG_TRAILER_SIZE], uint64_t seg_len, uint32_t *footer_len,
		       uint32_t *version)
{
	uint32_t flen = le_get32(tail + 8), v;

	if (memcmp(tail + 12, foot_magic, 8) == 0)
		v = SEG_VERSION;
	else if (memcmp(tail + 12, foot_magic_v2, 8) == 0)
		v = 2;
	else if (memcmp(tail + 12, foot_magic_v1, 8) == 0)
		v = 1;
	else
		return -EIO;
	if (seg_len % SEG_ALIGN || flen < SEG_TRAILER_SIZE || flen > SEG_FOOTER_MAX ||
	    seg_len < (uint64_t)SEG_HDR_SIZE + flen)
		return -EIO;
	*footer_len = flen;
	if (version)
		*version = v;
	return 0;
}

/* One entry of a footer of the given version; 0 or -EIO when out of bounds. */
static int entry_decode(const uint8_t *p, uint32_t version, uint64_t data_end, struct seg_entry *e)
{
	if (version == 1) {
		*e = (struct seg_entry){.ino = le_get64(p),
					.chunk = le_get64(p + 8),
					.gen = le_get64(p + 16),
					.len = le_get32(p + 24),
					.off = le_get64(p + 28),
					.crc = le_get32(p + 36)};
		e->chunk_len = e->len;
		if (e->off % SEG_ALIGN)
			return -EIO;
	} else {
		*e = (struct seg_entry){.ino = le_get64(p),
					.chunk = le_get64(p + 8),
					.gen = le_get32(p + 16),
					.flags = le_get32(p + 20),
					.off = le_get64(p + 24),
					.len = le_get32(p + 32),
					.crc = le_get32(p + 36),
					.chunk_len = le_get32(p + 40)};
		if (e->off % SEG_REC_ALIGN || (e->flags & ~SEG_F_ALL) ||
		    e->chunk_len > SEG_MAX_CHUNK_LEN)
			return -EIO;
		if (e->flags & LOC_F_MAP ? e->len < SEG_MAP_TAIL
					 : e->len > SEG_BLOCK || e->len > e->chunk_len)
			return -EIO;
	}
	if (e->off < SEG_HDR_SIZE || e->len == 0 || e->off > data_end ||
	    e->len > data_end - e->off)
		return -EIO;
	return 0;
}

int seg_footer_decode(const uint8_t *footer, uint32_t footer_len, uint64_t seg_len,
		      uint32_t version, struct seg_entry **entries, uint32_t *n)
{
	const uint8_t *tail = footer + footer_len - SEG_TRAILER_SIZE;
	uint32_t esize = version == 1 ? SEG_ENTRY_SIZE_V1 : SEG_ENTRY_SIZE;
	uint64_t data_end, raw;
	struct seg_entry *e = NULL;
	uint32_t flen, count, tv;
	const uint8_t *p;

	if (version != 1 && version != 2 && version != SEG_VERSION)
		return -ENOTSUP;
	if (footer_len < SEG_TRAILER_SIZE || seg_trailer_decode(tail, seg_len, &flen, &tv) < 0 ||
	    flen != footer_len || tv != version)
		return -EIO;
	if (le_get32(tail + 4) != crc32c(0, footer, footer_len - 16))
		return -EIO;
	count = le_get32(tail);
	raw = (uint64_t)count * esize + SEG_TRAILER_SIZE;
	if (raw > footer_len || footer_len - raw >= SEG_ALIGN)
		return -EIO;
	data_end = seg_len - footer_len;
	if (count) {
		e = malloc(count * sizeof(*e));
		if (!e)
			return -ENOMEM;
	}
	p = footer + (footer_len - raw);
	for (uint32_t i = 0; i < count; i++, p += esize) {
		if (entry_decode(p, version, data_end, &e[i]) < 0) {
			free(e);
			return -EIO;
		}
	}
	*entries = e;
	*n = count;
	return 0;
}

/* ---- map cache ---- */

/*
 * Map cache: the maps of recently written or read mapped records, so that a
 * partial read of a record whose map is known needs one I/O (the reader's
 * blocks) instead of two in sequence (the record's tail, then the blocks).
 * Direct-mapped on (segment, record offset), MAPC_SLOTS slots, maps of at
 * most MAPC_MAX bytes (a 4 MiB chunk of one extent: ~290 bytes): bounded at
 * MAPC_SLOTS * MAPC_MAX. Nothing is trusted from it: a hit must match the
 * record's segment, offset, length and crc, and the copy is checked by
 * map_tail and map_decode (its crc against the entry's) as a map read from
 * the disk is; the blocks are verified against its crcs as always. Stale
 * slots (a removed segment) can only miss, so nothing invalidates them.
 */
#define MAPC_SLOTS 2048u

struct mapc_slot {
	uint64_t seg_id, off;
	uint32_t len, crc, map_len;
	uint8_t *map; /* map_len bytes, malloc'ed; NULL = empty */
};

static struct mapc_slot mapc[MAPC_SLOTS];
static pthread_mutex_t mapc_lock = PTHREAD_MUTEX_INITIALIZER;

static uint32_t mapc_slot_of(uint64_t seg_id, uint64_t off)
{
	uint64_t h = (seg_id * 0x9e3779b97f4a7c15ull) ^ (off / SEG_ALIGN * 0xc2b2ae3d27d4eb4full);

	return (uint32_t)(h >> 32) % MAPC_SLOTS;
}

void seg_mapc_put(uint64_t seg_id, uint64_t off, uint32_t len, uint32_t crc,
		     const uint8_t *map, uint32_t map_len)
{
	struct mapc_slot *sl = &mapc[mapc_slot_of(seg_id, off)];
	uint8_t *copy, *old = NULL;

	if (map_len > MAPC_MAX || !(copy = malloc(map_len)))
		return;
	memcpy(copy, map, map_len);
	pthread_mutex_lock(&mapc_lock);
	if (sl->map && sl->map_len == map_len) { /* reuse the buffer */
		old = copy;
		copy = sl->map;
		memcpy(copy, map, map_len);
	} else {
		old = sl->map;
	}
	*sl = (struct mapc_slot){seg_id, off, len, crc, map_len, copy};
	pthread_mutex_unlock(&mapc_lock);
	free(old);
}

void seg_map_cache_drop(void)
{
	pthread_mutex_lock(&mapc_lock);
	for (uint32_t i = 0; i < MAPC_SLOTS; i++) {
		free(mapc[i].map);
		mapc[i] = (struct mapc_slot){0};
	}
	pthread_mutex_unlock(&mapc_lock);
}

/* Copy the cached map of record (seg_id, e) into buf (MAPC_MAX bytes): its
 * length, or 0 on a miss. Unchecked: the caller decodes it as from disk. */
uint32_t seg_mapc_get(uint64_t seg_id, const struct seg_entry *e, uint8_t *buf)
{
	struct mapc_slot *sl = &mapc[mapc_slot_of(seg_id, e->off)];
	uint32_t n = 0;

	pthread_mutex_lock(&mapc_lock);
	if (sl->map && sl->seg_id == seg_id && sl->off == e->off && sl->len == e->len &&
	    sl->crc == e->crc) {
		n = sl->map_len;
		memcpy(buf, sl->map, n);
	}
	pthread_mutex_unlock(&mapc_lock);
	return n;
}

/* ---- I/O buffers ---- */

/*
 * I/O buffers come from mmap, never malloc: glibc keeps freed heap memory in
 * per-thread arenas, and with a dozen worker threads that grew the daemon by
 * hundreds of MiB on top of the RAM budget. Buffers up to POOL_BUF are
 * recycled through a small pool (page faults on a fresh 4 MiB buffer cost
 * more than the copy), larger ones are unmapped at once. A header page in
 * front records the mapping's size. POOL_BUF leaves room for the unaligned
 * window around a 4 MiB chunk's v2 record (its map and two partial pages).
 * The pool keeps what a burst left (up to BUF_POOL_MAX, 65 MiB) only while
 * it is in use: seg_buf_trim unmaps it after a still second.
 */
#define BUF_POOL_MAX 16
#define POOL_BUF     (SEG_STAGE_SIZE + SEG_BLOCK)

static pthread_mutex_t buf_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static void *buf_pool[BUF_POOL_MAX]; /* protected by buf_pool_lock */
static int buf_pool_n;              /* protected by buf_pool_lock */
static uint64_t buf_pool_ops;	    /* protected by buf_pool_lock: takes and returns */
static uint64_t buf_pool_seen;	    /* protected by buf_pool_lock: at the last trim call */

void *seg_buf_alloc(size_t len)
{
	size_t n = align_up(len ? len : 1);
	void *base = NULL;

	if (n <= POOL_BUF) {
		n = POOL_BUF;
		pthread_mutex_lock(&buf_pool_lock);
		if (buf_pool_n > 0)
			base = buf_pool[--buf_pool_n];
		buf_pool_ops++;
		pthread_mutex_unlock(&buf_pool_lock);
		if (base)
			return (char *)base + SEG_ALIGN;
	}
	base = mmap(NULL, n + SEG_ALIGN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		    0);
	if (base == MAP_FAILED)
		return NULL;
	*(size_t *)base = n;
	return (char *)base + SEG_ALIGN;
}

void seg_buf_free(void *buf)
{
	char *base;
	size_t n;

	if (!buf)
		return;
	base = (char *)buf - SEG_ALIGN;
	n = *(size_t *)base;
	if (n == POOL_BUF) {
		pthread_mutex_lock(&buf_pool_lock);
		if (buf_pool_n < BUF_POOL_MAX) {
			buf_pool[buf_pool_n++] = base;
			base = NULL;
		}
		buf_pool_ops++;
		pthread_mutex_unlock(&buf_pool_lock);
	}
	if (base)
		munmap(base, n + SEG_ALIGN);
}

size_t seg_buf_trim(void)
{
	void *drop[BUF_POOL_MAX];
	int n = 0;

	pthread_mutex_lock(&buf_pool_lock);
	if (buf_pool_ops == buf_pool_seen)
		while (buf_pool_n > 0)
			drop[n++] = buf_pool[--buf_pool_n];
	buf_pool_seen = buf_pool_ops;
	pthread_mutex_unlock(&buf_pool_lock);
	for (int i = 0; i < n; i++)
		munmap(drop[i], POOL_BUF + SEG_ALIGN);
	return (size_t)n * (POOL_BUF + SEG_ALIGN);
}
