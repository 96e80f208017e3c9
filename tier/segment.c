/*
 * segment.c — the segment format's header and footer, the writer, the map
 * cache and the I/O buffers both sides use. The readers are segment_read.c.
 *
 * DESIGN
 * The writer stages into one aligned buffer: its own SEG_STAGE_SIZE one, or,
 * when the store lends one (put_window: S3's part buffer), the store's, so
 * that the append copies nothing. Everything the
 * segment contains (header, records, padding, footer) is emitted into it in
 * order, and each time it fills up it is handed to store_put_append(), so
 * every append is aligned and a multiple of 4 KiB. Segment position =
 * flushed + fill. The footer is built when finishing, once the entry count
 * and the body length are known; its front padding makes the total length
 * a multiple of 4 KiB so that the last append is whole blocks too.
 * Format v2 (segment.h): records are packed on 8 bytes, so small objects
 * cost their size; a record holds only the chunk's data extents (found with
 * SEEK_DATA/SEEK_HOLE on the hot file) and, unless it is one block of data
 * from offset 0, ends with a map of the extents and one crc32c per 64 KiB
 * block, emitted after the data has streamed through the stage (the crcs
 * are known only then). Readers fetch the 4 KiB-aligned window around what
 * they need (O_DIRECT on nvme, ranged GET on S3: the store takes aligned
 * ranges only) and verify each block they return, or the whole record.
 * Version 1 segments are read through the same paths: a v1 payload is a
 * plain record of any length.
 * Readers never trust a length before it is checked against the segment
 * length (or the record's), and never return a byte whose crc was not
 * verified.
 */
#include "tier/segment_i.h"

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
static const char foot_magic[8] = {'S', 'P', 'W', 'F', 'O', 'O', 'T', '2'};

#define HDR_CRC_OFF (SEG_HDR_SIZE - 4)

static uint64_t rec_align(uint64_t v)
{
	return (v + SEG_REC_ALIGN - 1) / SEG_REC_ALIGN * SEG_REC_ALIGN;
}

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
	if (v != 1 && v != SEG_VERSION)
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

	if (version != 1 && version != SEG_VERSION)
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

/* ---- writer ---- */

/*
 * Where the last SEEK_HOLE of a hot file found its hole. On tmpfs,
 * SEEK_HOLE walks every page from its start to the first hole, which in a
 * file all data is EOF: asked afresh for every chunk, spilling a file cost
 * O(file) per chunk, O(file^2) in all (a 256 MiB file: a third of the
 * spill's CPU; a 1 GiB file: 2.2 of the writer's 2.8 CPU-s/GiB). Each
 * thread remembers, for the last HOLE_CACHE files it spilled, that [d, h)
 * was data, and answers a later chunk inside it from that (segments of the
 * same file are written one after another by the same spill worker). A
 * stale answer can only call data what became a hole since (a punch, a
 * truncate and regrowth, the inode number of a deleted file reused): its
 * bytes are read (pread: no page is allocated) as zeros, what the hole
 * holds; a hole is never taken from here (SEEK_DATA, which skips holes
 * cheaply, is always asked past h, and data found right at h extends the
 * extent before it).
 */
#define HOLE_CACHE 8

struct hole_cache {
	dev_t dev;
	ino_t ino;
	uint64_t d, h; /* [d, h) was data; valid when h > d */
};

static _Thread_local struct hole_cache hole_cache[HOLE_CACHE];
static _Thread_local unsigned hole_cache_next;

/* This thread's entry for (dev, ino): its own, or the oldest one, emptied. */
static struct hole_cache *hole_cache_of(dev_t dev, ino_t ino)
{
	struct hole_cache *hc;

	for (unsigned i = 0; i < HOLE_CACHE; i++)
		if (hole_cache[i].ino == ino && hole_cache[i].dev == dev)
			return &hole_cache[i];
	hc = &hole_cache[hole_cache_next++ % HOLE_CACHE];
	*hc = (struct hole_cache){.dev = dev, .ino = ino};
	return hc;
}

struct seg_writer {
	struct store *st;
	struct store_put *put;
	uint64_t seg_id;
	uint8_t *stage;	  /* stage_cap bytes, aligned: own, or the store's window; NULL: none yet */
	size_t stage_cap;
	uint8_t *own;	  /* SEG_STAGE_SIZE bytes, when the store lends no window */
	size_t fill;	  /* bytes staged */
	uint64_t flushed; /* bytes appended to the put */
	struct seg_entry *ent;
	uint32_t n, cap;
	int err; /* sticky store error */
};

static uint64_t w_pos(const struct seg_writer *w)
{
	return w->flushed + w->fill;
}

/*
 * Room to stage into. A store that lends its own buffer (put_window: S3's
 * part buffer) gets the bytes written there, so its append copies nothing;
 * otherwise (nvme, whose O_DIRECT writes take any aligned memory) the
 * writer's own SEG_STAGE_SIZE buffer. A window is taken only when there is
 * something to stage: a segment that fills its last part exactly does not
 * start another.
 */
static int w_flush(struct seg_writer *w, int force);

static int w_room(struct seg_writer *w)
{
	void *buf;
	size_t len;
	int ret;

	if (w->stage && w->fill < w->stage_cap)
		return 0;
	if (w->fill && (ret = w_flush(w, 1)) < 0) /* full: never left so, but never spin */
		return ret;
	if (w->own) {
		w->stage = w->own;
		w->stage_cap = SEG_STAGE_SIZE;
		return 0;
	}
	ret = store_put_window(w->put, &buf, &len);
	if (ret == -EOPNOTSUPP) {
		w->own = seg_buf_alloc(SEG_STAGE_SIZE);
		if (!w->own)
			ret = -ENOMEM;
		else
			return w_room(w);
	}
	if (ret < 0) {
		w->err = ret;
		return ret;
	}
	w->stage = buf;
	w->stage_cap = len;
	return 0;
}

/* Append the staged bytes if the stage is full (or force, for the last blocks). */
static int w_flush(struct seg_writer *w, int force)
{
	int ret;

	if (w->fill == 0 || (!force && w->fill < w->stage_cap))
		return 0;
	ret = store_put_append(w->put, w->stage, w->fill);
	if (ret < 0) {
		w->err = ret;
		return ret;
	}
	w->flushed += w->fill;
	w->fill = 0;
	if (!w->own)
		w->stage = NULL; /* the next window: after this append */
	return 0;
}

/* Stage n bytes of data (zeros when data is NULL). */
static int w_emit(struct seg_writer *w, const void *data, size_t n)
{
	const uint8_t *src = data;

	while (n > 0) {
		size_t k;
		int ret = w_room(w);

		if (ret < 0)
			return ret;
		k = w->stage_cap - w->fill;

		if (k > n)
			k = n;
		if (src) {
			memcpy(w->stage + w->fill, src, k);
			src += k;
		} else {
			memset(w->stage + w->fill, 0, k);
		}
		w->fill += k;
		n -= k;
		ret = w_flush(w, 0);
		if (ret < 0)
			return ret;
	}
	return 0;
}

int seg_writer_new(struct store *st, const uint8_t uuid[16], uint64_t seg_id, uint64_t size_hint,
		   struct seg_writer **out)
{
	struct seg_writer *w;
	int ret;

	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->st = st;
	w->seg_id = seg_id;
	if (!st->ops->put_window) {
		w->own = seg_buf_alloc(SEG_STAGE_SIZE);
		if (!w->own) {
			free(w);
			return -ENOMEM;
		}
	}
	ret = store_put_begin(st, seg_id, size_hint, &w->put);
	if (ret < 0)
		goto err;
	ret = w_room(w);
	if (ret < 0) {
		store_put_abort(w->put);
		goto err;
	}
	seg_header_encode(w->stage, uuid, seg_id); /* a window is at least 4 KiB */
	w->fill = SEG_HDR_SIZE;
	*out = w;
	return 0;
err:
	seg_buf_free(w->own);
	free(w);
	return ret;
}

/* Common start of add: checks, room for the entry, alignment padding. */
static int w_add_begin(struct seg_writer *w)
{
	uint64_t pos;

	if (w->err)
		return w->err;
	if ((uint64_t)(w->n + 1) * SEG_ENTRY_SIZE + SEG_TRAILER_SIZE + SEG_ALIGN > SEG_FOOTER_MAX)
		return -E2BIG;
	if (w->n == w->cap) {
		uint32_t cap = w->cap ? w->cap * 2 : 64;
		struct seg_entry *e = realloc(w->ent, cap * sizeof(*e));

		if (!e)
			return -ENOMEM;
		w->ent = e;
		w->cap = cap;
	}
	pos = w_pos(w);
	return w_emit(w, NULL, rec_align(pos) - pos);
}

/* Running crc32c per SEG_BLOCK of a record's data. */
struct blk_crcs {
	uint32_t *v;
	uint32_t n;    /* blocks complete */
	uint32_t fill; /* bytes in block n */
};

static void blk_add(struct blk_crcs *b, const uint8_t *p, size_t len)
{
	while (len > 0) {
		size_t k = SEG_BLOCK - b->fill;

		if (k > len)
			k = len;
		b->v[b->n] = crc32c(b->fill ? b->v[b->n] : 0, p, k);
		b->fill += (uint32_t)k;
		p += k;
		len -= k;
		if (b->fill == SEG_BLOCK) {
			b->n++;
			b->fill = 0;
		}
	}
}

/*
 * The hot file's bytes, for add_fd. The hot tier is a tmpfs: its pages are
 * in RAM, so a read never waits for a device and is done with pread on the
 * calling thread (through the uring loop, every MiB went to an io-wq
 * worker and back: a thread switch each). Each piece (at most SRC_PIECE
 * bytes) is copied into the stage and its crc taken there at once, while it
 * is still in the cache (before, the crc read 4 MiB back from memory), and
 * from the stage: the crc is of the bytes written even when the file
 * changes under the copy (a write racing the spill: the evictor drops the
 * record, which has the old generation, but it is never inconsistent). A
 * file cut under the read gives a short pread: -ENODATA, never a signal.
 *
 * Why a copy at all: records are packed on 8 bytes (SEG_REC_ALIGN), so a
 * chunk's data starts r bytes past a 4 KiB boundary of the segment, r =
 * (4096 + the records before it) mod 4096 (a 4 MiB chunk's map is 280
 * bytes: r moves by 280 a record), the same r for all of the record's data
 * (tmpfs extents are whole pages); every 4 KiB block of the segment then
 * holds the end of one hot page and the start of the next. O_DIRECT takes
 * memory only at the device's DMA alignment (512 B on virtio-blk, 4 B on
 * NVMe) and, before Linux 6.18, each memory segment a multiple of the
 * block size long: straight from the hot pages only where r is a multiple
 * of 512, the first record of a segment and 1 in 64 of the others; the
 * page cache (buffered writes) would be a copy as well. The one copy left
 * is into the stage, on the CPU that takes the crc anyway. Measured
 * (bench/segspill.c, 1 GiB, CPU-s/GiB, medians): pread 0.51, a read-only
 * shared mapping of the chunk and memcpy from it 0.57 (page faults and
 * munmap cost more than the read's page lookups, and a truncate under the
 * copy is a SIGBUS to catch), the uring loop 0.60.
 */
#define SRC_PIECE (256u << 10)

/* Test hook (segment_i.h): called by add_fd after the extents are known,
 * before any byte is copied. */
void (*seg_test_add_fd_hook)(int fd);

/*
 * Stage len bytes of the hot file at fd_off, a piece at a time: read, then
 * the crc of what was read. -ENODATA when the file is shorter than that
 * now (truncated under the read), or pread's -errno.
 */
static int w_stream_fd(struct seg_writer *w, int fd, uint64_t fd_off, uint32_t len,
		       struct blk_crcs *b)
{
	while (len > 0) {
		size_t k;
		uint8_t *dst;
		ssize_t got;
		int ret = w_room(w);

		if (ret < 0)
			return ret;
		k = w->stage_cap - w->fill;
		dst = w->stage + w->fill;
		if (k > len)
			k = len;
		if (k > SRC_PIECE)
			k = SRC_PIECE;
		got = pread(fd, dst, k, (off_t)fd_off);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return -errno;
		if (got == 0)
			return -ENODATA; /* EOF: cut since the extents were found */
		k = (size_t)got;
		blk_add(b, dst, k);
		fd_off += k;
		w->fill += k;
		len -= (uint32_t)k;
		ret = w_flush(w, 0);
		if (ret < 0)
			return ret;
	}
	return 0;
}

/* Stage len bytes from data, adding them to b. */
static int w_stream(struct seg_writer *w, const uint8_t *data, uint32_t len, struct blk_crcs *b)
{
	while (len > 0) {
		size_t k;
		int ret = w_room(w);

		if (ret < 0)
			return ret;
		k = w->stage_cap - w->fill;
		if (k > len)
			k = len;
		memcpy(w->stage + w->fill, data, k);
		data += k;
		blk_add(b, w->stage + w->fill, k);
		w->fill += k;
		len -= (uint32_t)k;
		ret = w_flush(w, 0);
		if (ret < 0)
			return ret;
	}
	return 0;
}

static int extents_valid(uint32_t chunk_len, const struct seg_extent *ext, uint32_t next,
			 uint64_t *data_len)
{
	uint64_t end = 0, sum = 0;

	if (chunk_len > SEG_MAX_CHUNK_LEN || next > SEG_MAX_EXTENTS)
		return 0;
	for (uint32_t i = 0; i < next; i++) {
		if (ext[i].len == 0 || ext[i].off < end ||
		    (uint64_t)ext[i].off + ext[i].len > chunk_len)
			return 0;
		end = (uint64_t)ext[i].off + ext[i].len;
		sum += ext[i].len;
	}
	*data_len = sum;
	return 1;
}

/*
 * One record: the extents' bytes from data (back to back) or from fd at
 * fd_base + extent offset, then the map unless the record is plain.
 */
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

static int w_record(struct seg_writer *w, uint64_t ino, uint64_t chunk, uint64_t gen,
		    uint32_t chunk_len, const struct seg_extent *ext, uint32_t next,
		    const uint8_t *data, int fd, uint64_t fd_base, struct seg_entry *entry_out)
{
	struct blk_crcs b = {0};
	uint64_t data_len, off;
	uint32_t nblocks, map_len, crc, flags;
	uint8_t *map = NULL, *p;
	int ret;

	if (!extents_valid(chunk_len, ext, next, &data_len))
		return -EINVAL;
	flags = next == 1 && ext[0].off == 0 && ext[0].len <= SEG_BLOCK ? 0 : LOC_F_MAP;
	nblocks = (uint32_t)((data_len + SEG_BLOCK - 1) / SEG_BLOCK);
	map_len = flags ? next * 8 + nblocks * 4 + SEG_MAP_TAIL : 0;
	b.v = calloc(nblocks + 1, sizeof(*b.v));
	if (flags)
		map = malloc(map_len);
	if (!b.v || (flags && !map)) {
		ret = -ENOMEM;
		goto out;
	}
	ret = w_add_begin(w);
	if (ret < 0)
		goto out;
	off = w_pos(w);
	for (uint32_t i = 0; i < next; i++) {
		if (data)
			ret = w_stream(w, data, ext[i].len, &b);
		else
			ret = w_stream_fd(w, fd, fd_base + ext[i].off, ext[i].len, &b);
		if (ret < 0)
			goto out;
		if (data)
			data += ext[i].len;
	}
	if (flags) {
		p = map;
		for (uint32_t i = 0; i < next; i++, p += 8) {
			le_put32(p, ext[i].off);
			le_put32(p + 4, ext[i].len);
		}
		for (uint32_t i = 0; i < nblocks; i++, p += 4)
			le_put32(p, b.v[i]);
		le_put32(p, next);
		le_put32(p + 4, (uint32_t)data_len);
		le_put32(p + 8, SEG_BLOCK);
		crc = crc32c(0, map, map_len - 4);
		le_put32(p + 12, crc);
		ret = w_emit(w, map, map_len);
		if (ret < 0)
			goto out;
		seg_mapc_put(w->seg_id, off, (uint32_t)(w_pos(w) - off), crc, map, map_len);
	} else {
		crc = b.v[0];
	}
	w->ent[w->n] = (struct seg_entry){.ino = ino,
					  .chunk = chunk,
					  .gen = gen,
					  .off = off,
					  .len = (uint32_t)(w_pos(w) - off),
					  .crc = crc,
					  .flags = flags,
					  .chunk_len = chunk_len};
	if (entry_out)
		*entry_out = w->ent[w->n];
	w->n++;
out:
	free(map);
	free(b.v);
	return ret;
}

void seg_writer_mark_overlay(struct seg_writer *w)
{
	if (w->n)
		w->ent[w->n - 1].flags |= SEG_F_OVL;
}

int seg_writer_add_extents(struct seg_writer *w, uint64_t ino, uint64_t chunk, uint64_t gen,
			   uint32_t chunk_len, const struct seg_extent *ext, uint32_t next,
			   const void *data, struct seg_entry *entry_out)
{
	if (next && !data)
		return -EINVAL;
	return w_record(w, ino, chunk, gen, chunk_len, ext, next, data, -1, 0, entry_out);
}

int seg_writer_add(struct seg_writer *w, uint64_t ino, uint64_t chunk, uint64_t gen,
		   const void *data, uint32_t len, struct seg_entry *entry_out)
{
	struct seg_extent one = {0, len};

	if (len == 0 || !data)
		return -EINVAL;
	return w_record(w, ino, chunk, gen, len, &one, 1, data, -1, 0, entry_out);
}

/* Merge neighbours across the smallest holes until at most SEG_MAX_EXTENTS remain. */
static uint32_t extents_merge(struct seg_extent *x, uint32_t n)
{
	for (uint64_t gap = 4096; n > SEG_MAX_EXTENTS; gap *= 2) {
		uint32_t k = 0;

		for (uint32_t i = 1; i < n; i++) {
			if ((uint64_t)x[i].off - (x[k].off + x[k].len) <= gap)
				x[k].len = x[i].off + x[i].len - x[k].off;
			else
				x[++k] = x[i];
		}
		n = k + 1;
	}
	return n;
}

/*
 * The data extents of [base, base + len) of fd, relative to base. *out is
 * malloc'ed (caller frees). -ENODATA when fd is shorter than base + len.
 */
static int fd_extents(int fd, uint64_t base, uint32_t len, struct seg_extent **out, uint32_t *n)
{
	struct hole_cache *hc;
	uint64_t pos = base, end = base + len;
	struct seg_extent *x = NULL;
	uint32_t k = 0, cap = 0;
	struct stat sb;
	int ret = 0;

	if (fstat(fd, &sb) < 0)
		return -errno;
	if ((uint64_t)sb.st_size < end)
		return -ENODATA;
	hc = hole_cache_of(sb.st_dev, sb.st_ino);
	while (pos < end) {
		off_t d = lseek(fd, (off_t)pos, SEEK_DATA), h;

		if (d < 0 && (errno == EINVAL || errno == EOPNOTSUPP) && pos == base) {
			d = (off_t)base; /* no SEEK_DATA here: all of it is data */
			h = (off_t)end;
		} else if (d < 0) {
			if (errno == ENXIO)
				break; /* holes up to EOF */
			ret = -errno;
			goto err;
		} else if ((uint64_t)d >= end) {
			break;
		} else if ((uint64_t)d >= hc->d && (uint64_t)d < hc->h) {
			h = (off_t)hc->h; /* inside the data the last SEEK_HOLE walked */
		} else if ((h = lseek(fd, d, SEEK_HOLE)) < 0) {
			/* ENXIO: d is past EOF now, the file was cut since the fstat */
			ret = errno == ENXIO ? -ENODATA : -errno;
			goto err;
		} else if (h > d) {
			hc->d = (uint64_t)d;
			hc->h = (uint64_t)h;
		}
		if ((uint64_t)h > end || h <= d)
			h = (off_t)end;
		if (k > 0 && x[k - 1].off + x[k - 1].len == (uint64_t)d - base) {
			/* the cache's hole was filled since: one extent, as a fresh walk */
			x[k - 1].len += (uint32_t)((uint64_t)h - (uint64_t)d);
			pos = (uint64_t)h;
			continue;
		}
		if (k == cap) {
			uint32_t ncap = cap ? cap * 2 : 8;
			struct seg_extent *nx = realloc(x, ncap * sizeof(*nx));

			if (!nx) {
				ret = -ENOMEM;
				goto err;
			}
			x = nx;
			cap = ncap;
		}
		x[k++] = (struct seg_extent){(uint32_t)((uint64_t)d - base),
					     (uint32_t)((uint64_t)h - (uint64_t)d)};
		pos = (uint64_t)h;
	}
	*out = x;
	*n = extents_merge(x, k);
	return 0;
err:
	free(x);
	return ret;
}

int seg_writer_add_fd(struct seg_writer *w, uint64_t ino, uint64_t chunk, uint64_t gen, int fd,
		      uint64_t fd_off, uint32_t len, struct seg_entry *entry_out)
{
	struct seg_extent *x = NULL;
	uint32_t n = 0;
	int ret;

	if (w->err)
		return w->err;
	if (len == 0 || len > SEG_MAX_CHUNK_LEN)
		return -EINVAL;
	ret = fd_extents(fd, fd_off, len, &x, &n);
	if (ret == 0 && seg_test_add_fd_hook)
		seg_test_add_fd_hook(fd);
	if (ret == 0)
		ret = w_record(w, ino, chunk, gen, len, x, n, NULL, fd, fd_off, entry_out);
	free(x);
	return ret;
}

uint64_t seg_writer_bytes(const struct seg_writer *w)
{
	return w_pos(w);
}

uint32_t seg_writer_count(const struct seg_writer *w)
{
	return w->n;
}

uint64_t seg_v2_len(const uint32_t *rec_len, uint32_t n)
{
	uint64_t body = SEG_HDR_SIZE;

	for (uint32_t i = 0; i < n; i++)
		body = rec_align(body) + rec_len[i];
	return body + seg_footer_len(body, n);
}

static void w_free(struct seg_writer *w)
{
	seg_buf_free(w->own);
	free(w->ent);
	free(w);
}

int seg_writer_finish(struct seg_writer *w, uint32_t *dev, uint64_t *seg_len)
{
	uint64_t body_end = w_pos(w), total;
	uint32_t flen, d;
	uint8_t *foot = NULL;
	int ret = w->err;

	if (ret < 0)
		goto abort;
	flen = seg_footer_len(body_end, w->n);
	foot = malloc(flen);
	if (!foot) {
		ret = -ENOMEM;
		goto abort;
	}
	seg_footer_encode(foot, flen, w->ent, w->n);
	ret = w_emit(w, foot, flen);
	if (ret < 0)
		goto abort;
	ret = w_flush(w, 1);
	if (ret < 0)
		goto abort;
	total = w->flushed;
	ret = store_put_finish(w->put, &d); /* frees the put either way */
	w->put = NULL;
	if (ret < 0)
		goto out;
	if (dev)
		*dev = d;
	if (seg_len)
		*seg_len = total;
	goto out;
abort:
	store_put_abort(w->put);
out:
	if (ret < 0)
		log_err("segment %016" PRIx64 ": writing failed: %s", w->seg_id, strerror(-ret));
	free(foot);
	w_free(w);
	return ret;
}

void seg_writer_abort(struct seg_writer *w)
{
	if (!w)
		return;
	store_put_abort(w->put);
	w_free(w);
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
