/*
 * DESIGN
 * The writer keeps one SEG_STAGE_SIZE aligned staging buffer. Everything the
 * segment contains (header, payloads, padding, footer) is emitted into it in
 * order, and each time it fills up it is handed to store_put_append(), so
 * every append is aligned and a multiple of 4 KiB. Segment position =
 * flushed + fill. The footer is built when finishing, once the entry count
 * and the body length are known; its front padding makes the total length
 * a multiple of 4 KiB so that the last append is whole blocks too.
 * Readers never trust a length before it is checked against the segment
 * length, and never return a byte whose crc was not verified.
 */
#include "tier/segment.h"

#include "common/crc32c.h"
#include "common/log.h"
#include "common/uring.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>

static const char hdr_magic[8] = {'S', 'P', 'W', 'S', 'E', 'G', '0', '1'};
static const char foot_magic[8] = {'S', 'P', 'W', 'F', 'O', 'O', 'T', '1'};

#define HDR_CRC_OFF (SEG_HDR_SIZE - 4)

/* ---- little-endian helpers ---- */

static void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_le32(const uint8_t *p)
{
	uint32_t v = 0;

	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t get_le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t align_up(uint64_t v)
{
	return (v + SEG_ALIGN - 1) / SEG_ALIGN * SEG_ALIGN;
}

/* ---- header ---- */

void seg_header_encode(uint8_t buf[SEG_HDR_SIZE], const uint8_t uuid[16], uint64_t seg_id)
{
	memset(buf, 0, SEG_HDR_SIZE);
	memcpy(buf, hdr_magic, 8);
	put_le32(buf + 8, SEG_VERSION);
	put_le32(buf + 12, 0);
	memcpy(buf + 16, uuid, 16);
	put_le64(buf + 32, seg_id);
	put_le32(buf + HDR_CRC_OFF, crc32c(0, buf, HDR_CRC_OFF));
}

int seg_header_decode(const uint8_t buf[SEG_HDR_SIZE], uint8_t uuid[16], uint64_t *seg_id)
{
	if (memcmp(buf, hdr_magic, 8) != 0)
		return -EIO;
	if (get_le32(buf + HDR_CRC_OFF) != crc32c(0, buf, HDR_CRC_OFF))
		return -EIO;
	if (get_le32(buf + 8) != SEG_VERSION)
		return -ENOTSUP;
	if (uuid)
		memcpy(uuid, buf + 16, 16);
	*seg_id = get_le64(buf + 32);
	return 0;
}

/* ---- footer ---- */

uint32_t seg_footer_len(uint64_t body_end, uint32_t n)
{
	uint64_t raw = (uint64_t)n * SEG_ENTRY_SIZE + SEG_TRAILER_SIZE;

	return (uint32_t)(align_up(body_end + raw) - body_end);
}

void seg_footer_encode(uint8_t *buf, uint32_t footer_len, const struct seg_entry *e, uint32_t n)
{
	uint32_t pad = footer_len - (n * SEG_ENTRY_SIZE + SEG_TRAILER_SIZE);
	uint8_t *p = buf + pad;

	memset(buf, 0, pad);
	for (uint32_t i = 0; i < n; i++, p += SEG_ENTRY_SIZE) {
		put_le64(p, e[i].ino);
		put_le64(p + 8, e[i].chunk);
		put_le64(p + 16, e[i].gen);
		put_le32(p + 24, e[i].len);
		put_le64(p + 28, e[i].off);
		put_le32(p + 36, e[i].crc);
	}
	put_le32(p, n);
	put_le32(p + 4, crc32c(0, buf, (size_t)(p + 4 - buf)));
	put_le32(p + 8, footer_len);
	memcpy(p + 12, foot_magic, 8);
}

int seg_trailer_decode(const uint8_t tail[SEG_TRAILER_SIZE], uint64_t seg_len, uint32_t *footer_len)
{
	uint32_t flen = get_le32(tail + 8);

	if (memcmp(tail + 12, foot_magic, 8) != 0)
		return -EIO;
	if (seg_len % SEG_ALIGN || flen < SEG_TRAILER_SIZE || flen > SEG_FOOTER_MAX ||
	    seg_len < (uint64_t)SEG_HDR_SIZE + flen)
		return -EIO;
	*footer_len = flen;
	return 0;
}

int seg_footer_decode(const uint8_t *footer, uint32_t footer_len, uint64_t seg_len,
		      struct seg_entry **entries, uint32_t *n)
{
	const uint8_t *tail = footer + footer_len - SEG_TRAILER_SIZE;
	uint64_t data_end, raw;
	struct seg_entry *e = NULL;
	uint32_t flen, count;
	const uint8_t *p;

	if (footer_len < SEG_TRAILER_SIZE || seg_trailer_decode(tail, seg_len, &flen) < 0 ||
	    flen != footer_len)
		return -EIO;
	if (get_le32(tail + 4) != crc32c(0, footer, footer_len - 16))
		return -EIO;
	count = get_le32(tail);
	raw = (uint64_t)count * SEG_ENTRY_SIZE + SEG_TRAILER_SIZE;
	if (raw > footer_len || footer_len - raw >= SEG_ALIGN)
		return -EIO;
	data_end = seg_len - footer_len;
	if (count) {
		e = malloc(count * sizeof(*e));
		if (!e)
			return -ENOMEM;
	}
	p = footer + (footer_len - raw);
	for (uint32_t i = 0; i < count; i++, p += SEG_ENTRY_SIZE) {
		e[i].ino = get_le64(p);
		e[i].chunk = get_le64(p + 8);
		e[i].gen = get_le64(p + 16);
		e[i].len = get_le32(p + 24);
		e[i].off = get_le64(p + 28);
		e[i].crc = get_le32(p + 36);
		if (e[i].off % SEG_ALIGN || e[i].off < SEG_HDR_SIZE || e[i].len == 0 ||
		    e[i].off > data_end || e[i].len > data_end - e[i].off) {
			free(e);
			return -EIO;
		}
	}
	*entries = e;
	*n = count;
	return 0;
}

/* ---- writer ---- */

struct seg_writer {
	struct store *st;
	struct store_put *put;
	uint64_t seg_id;
	uint8_t *stage;	  /* SEG_STAGE_SIZE bytes, aligned */
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

/* Append the staged bytes if the stage is full (or force, for the last blocks). */
static int w_flush(struct seg_writer *w, int force)
{
	int ret;

	if (w->fill == 0 || (!force && w->fill < SEG_STAGE_SIZE))
		return 0;
	ret = store_put_append(w->put, w->stage, w->fill);
	if (ret < 0) {
		w->err = ret;
		return ret;
	}
	w->flushed += w->fill;
	w->fill = 0;
	return 0;
}

/* Stage n bytes of data (zeros when data is NULL). */
static int w_emit(struct seg_writer *w, const void *data, size_t n)
{
	const uint8_t *src = data;

	while (n > 0) {
		size_t k = SEG_STAGE_SIZE - w->fill;
		int ret;

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
	w->stage = seg_buf_alloc(SEG_STAGE_SIZE);
	if (!w->stage) {
		ret = -ENOMEM;
		goto err_free;
	}
	w->st = st;
	w->seg_id = seg_id;
	ret = store_put_begin(st, seg_id, size_hint, &w->put);
	if (ret < 0)
		goto err_stage;
	seg_header_encode(w->stage, uuid, seg_id);
	w->fill = SEG_HDR_SIZE;
	*out = w;
	return 0;
err_stage:
	seg_buf_free(w->stage);
err_free:
	free(w);
	return ret;
}

/* Common start of add: checks, room for the entry, alignment padding. */
static int w_add_begin(struct seg_writer *w, uint32_t len)
{
	uint64_t pos;

	if (w->err)
		return w->err;
	if (len == 0 || len > SEG_MAX_CHUNK_LEN)
		return -EINVAL;
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
	return w_emit(w, NULL, align_up(pos) - pos);
}

static void w_add_end(struct seg_writer *w, uint64_t ino, uint64_t chunk, uint64_t gen,
		      uint64_t off, uint32_t len, uint32_t crc, struct seg_entry *entry_out)
{
	struct seg_entry *e = &w->ent[w->n++];

	*e = (struct seg_entry){
	    .ino = ino, .chunk = chunk, .gen = gen, .off = off, .len = len, .crc = crc};
	if (entry_out)
		*entry_out = *e;
}

int seg_writer_add(struct seg_writer *w, uint64_t ino, uint64_t chunk, uint64_t gen,
		   const void *data, uint32_t len, struct seg_entry *entry_out)
{
	uint64_t off;
	int ret;

	ret = w_add_begin(w, len);
	if (ret < 0)
		return ret;
	off = w_pos(w);
	ret = w_emit(w, data, len);
	if (ret < 0)
		return ret;
	w_add_end(w, ino, chunk, gen, off, len, crc32c(0, data, len), entry_out);
	return 0;
}

int seg_writer_add_fd(struct seg_writer *w, uint64_t ino, uint64_t chunk, uint64_t gen, int fd,
		      uint64_t fd_off, uint32_t len, struct seg_entry *entry_out)
{
	uint64_t off;
	uint32_t crc = 0, left = len;
	int ret;

	ret = w_add_begin(w, len);
	if (ret < 0)
		return ret;
	off = w_pos(w);
	while (left > 0) {
		size_t k = SEG_STAGE_SIZE - w->fill;
		ssize_t got;

		if (k > left)
			k = left;
		got = uring_read_full(fd, w->stage + w->fill, k, fd_off);
		if (got < 0)
			return (int)got;
		if ((size_t)got < k)
			return -ENODATA;
		crc = crc32c(crc, w->stage + w->fill, k);
		w->fill += k;
		fd_off += k;
		left -= (uint32_t)k;
		ret = w_flush(w, 0);
		if (ret < 0)
			return ret;
	}
	w_add_end(w, ino, chunk, gen, off, len, crc, entry_out);
	return 0;
}

uint64_t seg_writer_bytes(const struct seg_writer *w)
{
	return w_pos(w);
}

uint32_t seg_writer_count(const struct seg_writer *w)
{
	return w->n;
}

static void w_free(struct seg_writer *w)
{
	seg_buf_free(w->stage);
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

/* ---- readers ---- */

/*
 * I/O buffers come from mmap, never malloc: glibc keeps freed heap memory in
 * per-thread arenas, and with a dozen worker threads that grew the daemon by
 * hundreds of MiB on top of the RAM budget. Buffers up to SEG_STAGE_SIZE are
 * recycled through a small pool (page faults on a fresh 4 MiB buffer cost
 * more than the copy), larger ones are unmapped at once. A header page in
 * front records the mapping's size.
 */
#define BUF_POOL_MAX 16

static pthread_mutex_t buf_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static void *buf_pool[BUF_POOL_MAX]; /* protected by buf_pool_lock */
static int buf_pool_n;              /* protected by buf_pool_lock */

void *seg_buf_alloc(size_t len)
{
	size_t n = align_up(len ? len : 1);
	void *base = NULL;

	if (n <= SEG_STAGE_SIZE) {
		n = SEG_STAGE_SIZE;
		pthread_mutex_lock(&buf_pool_lock);
		if (buf_pool_n > 0)
			base = buf_pool[--buf_pool_n];
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
	if (n == SEG_STAGE_SIZE) {
		pthread_mutex_lock(&buf_pool_lock);
		if (buf_pool_n < BUF_POOL_MAX) {
			buf_pool[buf_pool_n++] = base;
			base = NULL;
		}
		pthread_mutex_unlock(&buf_pool_lock);
	}
	if (base)
		munmap(base, n + SEG_ALIGN);
}

int seg_read_chunk(struct store *st, uint64_t seg_id, uint32_t dev, const struct seg_entry *e,
		   void *buf)
{
	int ret;

	if (e->off % SEG_ALIGN || e->len == 0)
		return -EINVAL;
	ret = store_read(st, seg_id, dev, e->off, buf, align_up(e->len));
	if (ret < 0) {
		log_err("segment %016" PRIx64 " dev %u: reading chunk at offset %" PRIu64 ": %s",
			seg_id, dev, e->off, strerror(-ret));
		return ret;
	}
	if (crc32c(0, buf, e->len) != e->crc) {
		log_err("segment %016" PRIx64 " dev %u: crc32c mismatch in chunk at offset %" PRIu64
			" (ino %" PRIu64 " chunk %" PRIu64 ", %u bytes)",
			seg_id, dev, e->off, e->ino, e->chunk, e->len);
		return -EBADMSG;
	}
	return 0;
}

int seg_read_manifest(struct store *st, uint64_t seg_id, uint32_t dev, uint64_t seg_len,
		      uint8_t uuid_out[16], struct seg_entry **entries, uint32_t *n)
{
	uint8_t *blk, *foot = NULL;
	uint64_t id, fstart, astart;
	uint32_t flen;
	const char *what = "length";
	int ret = -EIO;

	blk = seg_buf_alloc(SEG_ALIGN);
	if (!blk)
		return -ENOMEM;
	if (seg_len % SEG_ALIGN || seg_len < SEG_HDR_SIZE + SEG_ALIGN)
		goto out;
	what = "header";
	ret = store_read(st, seg_id, dev, 0, blk, SEG_HDR_SIZE);
	if (ret < 0)
		goto out;
	ret = seg_header_decode(blk, uuid_out, &id);
	if (ret == 0 && id != seg_id)
		ret = -EIO;
	if (ret < 0)
		goto out;
	what = "footer";
	ret = store_read(st, seg_id, dev, seg_len - SEG_ALIGN, blk, SEG_ALIGN);
	if (ret < 0)
		goto out;
	ret = seg_trailer_decode(blk + SEG_ALIGN - SEG_TRAILER_SIZE, seg_len, &flen);
	if (ret < 0)
		goto out;
	fstart = seg_len - flen;
	astart = fstart / SEG_ALIGN * SEG_ALIGN;
	if (astart == seg_len - SEG_ALIGN) {
		ret = seg_footer_decode(blk + (fstart - astart), flen, seg_len, entries, n);
		goto out;
	}
	foot = seg_buf_alloc(seg_len - astart);
	if (!foot) {
		ret = -ENOMEM;
		goto out;
	}
	ret = store_read(st, seg_id, dev, astart, foot, seg_len - astart);
	if (ret < 0)
		goto out;
	ret = seg_footer_decode(foot + (fstart - astart), flen, seg_len, entries, n);
out:
	if (ret < 0 && ret != -ENOMEM)
		log_err("segment %016" PRIx64 " dev %u (%" PRIu64 " bytes): bad %s: %s", seg_id,
			dev, seg_len, what, strerror(-ret));
	seg_buf_free(foot);
	seg_buf_free(blk);
	return ret;
}
