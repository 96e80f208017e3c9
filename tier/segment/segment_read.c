/*
 * segment_read.c — reading chunk records back from a segment: a whole
 * record (seg_read_chunk), the blocks covering a range (seg_read_part,
 * seg_read_range), a segment's manifest (seg_read_manifest); and the parts
 * segment_into.c shares (a record's map, its block crcs, the window).
 * Guarantees: no length is trusted before it is checked against the
 * segment's (or the record's), and no byte is returned whose crc32c was not
 * verified: a mismatch is -EBADMSG and a log line naming segment and offset.
 * Threading: no state of its own beyond the map cache (segment.c, locked);
 * any number of readers at once.
 */
#include "tier/segment/segment_i.h"

#include "common/crc32c.h"
#include "common/le.h"
#include "common/log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

int seg_read_window(struct store *st, uint64_t seg_id, uint32_t dev, uint64_t off,
		    uint64_t len, void **buf, const uint8_t **p)
{
	uint64_t a = off / SEG_ALIGN * SEG_ALIGN, e = align_up(off + len);
	int ret;

	*buf = seg_buf_alloc(e - a);
	if (!*buf)
		return -ENOMEM;
	ret = store_read(st, seg_id, dev, a, *buf, e - a);
	if (ret < 0) {
		seg_buf_free(*buf);
		*buf = NULL;
		return ret;
	}
	*p = (const uint8_t *)*buf + (off - a);
	return 0;
}

void seg_rmap_free(struct rmap *m)
{
	if (m->ext != m->in_)
		free(m->ext);
	m->ext = NULL;
	seg_buf_free(m->buf);
	m->buf = NULL;
}

/* Sizes from the last SEG_MAP_TAIL bytes of a mapped record of rec_len bytes. */
static int map_tail(const uint8_t *tail, uint32_t rec_len, struct rmap *m)
{
	uint64_t nblocks, map_len;

	m->next = le_get32(tail);
	m->data_len = le_get32(tail + 4);
	m->bsize = le_get32(tail + 8);
	if (m->next > SEG_MAX_EXTENTS || m->bsize < SEG_ALIGN || m->bsize > (16u << 20) ||
	    (m->bsize & (m->bsize - 1)))
		return -EBADMSG;
	nblocks = ((uint64_t)m->data_len + m->bsize - 1) / m->bsize;
	map_len = (uint64_t)m->next * 8 + nblocks * 4 + SEG_MAP_TAIL;
	if ((uint64_t)m->data_len + map_len != rec_len)
		return -EBADMSG;
	m->nblocks = (uint32_t)nblocks;
	m->map_len = (uint32_t)map_len;
	return 0;
}

/* Check the map at map (m->map_len bytes, sizes from map_tail) against
 * want_crc and decode its extents into m->ext (free it). 0 or -EBADMSG. */
static int map_decode(const uint8_t *map, uint32_t want_crc, struct rmap *m)
{
	uint32_t crc = crc32c(0, map, m->map_len - 4);
	uint64_t end = 0, sum = 0;

	m->ext = NULL;
	if (crc != le_get32(map + m->map_len - 4) || crc != want_crc)
		return -EBADMSG;
	m->ext = m->next <= SEG_CHUNK_INLINE ? m->in_ : malloc(m->next * sizeof(*m->ext));
	if (!m->ext)
		return -ENOMEM;
	for (uint32_t i = 0; i < m->next; i++) {
		struct seg_extent *x = &m->ext[i];

		x->off = le_get32(map + 8 * i);
		x->len = le_get32(map + 8 * i + 4);
		if (x->len == 0 || x->off < end || (uint64_t)x->off + x->len > SEG_MAX_CHUNK_LEN)
			goto bad;
		end = (uint64_t)x->off + x->len;
		sum += x->len;
	}
	if (sum != m->data_len)
		goto bad;
	m->crcs = map + 8 * m->next;
	return 0;
bad:
	if (m->ext != m->in_)
		free(m->ext);
	m->ext = NULL;
	return -EBADMSG;
}

int seg_blocks_verify(const uint8_t *data, const struct rmap *m, uint32_t b0, uint32_t b1)
{
	for (uint32_t b = b0; b <= b1 && b < m->nblocks; b++) {
		uint64_t start = (uint64_t)b * m->bsize;
		uint64_t n = m->data_len - start < m->bsize ? m->data_len - start : m->bsize;

		if (crc32c(0, data + (start - (uint64_t)b0 * m->bsize), n) !=
		    le_get32(m->crcs + 4 * b))
			return -EBADMSG;
	}
	return 0;
}

void seg_log_read_err(uint64_t seg_id, uint32_t dev, const struct seg_entry *e, const char *what,
			 int err)
{
	log_err("segment %016" PRIx64 " dev %u: %s of chunk record at offset %" PRIu64
		" (ino %" PRIu64 " chunk %" PRIu64 ", %u bytes): %s",
		seg_id, dev, what, e->off, e->ino, e->chunk, e->len, strerror(-err));
}

int seg_read_chunk(struct store *st, uint64_t seg_id, uint32_t dev, const struct seg_entry *e,
		   struct seg_chunk *out)
{
	struct rmap m;
	const uint8_t *p;
	void *buf = NULL;
	const char *what = "reading";

	m.ext = NULL;
	m.buf = NULL;
	int ret;

	memset(out, 0, sizeof(*out));
	if (e->len == 0 || e->off < SEG_HDR_SIZE || (e->flags & ~SEG_F_ALL))
		return -EINVAL;
	ret = seg_read_window(st, seg_id, dev, e->off, e->len, &buf, &p);
	if (ret < 0)
		goto out;
	what = "verifying";
	if (!(e->flags & LOC_F_MAP)) {
		if (crc32c(0, p, e->len) != e->crc) {
			ret = -EBADMSG;
			goto out;
		}
		out->in_[0] = (struct seg_extent){0, e->len};
		out->ext = out->in_;
		out->next = 1;
		out->data_len = e->len;
	} else {
		if ((ret = map_tail(p + e->len - SEG_MAP_TAIL, e->len, &m)) < 0 ||
		    (ret = map_decode(p + m.data_len, e->crc, &m)) < 0)
			goto out;
		seg_mapc_put(seg_id, e->off, e->len, e->crc, p + m.data_len, m.map_len);
		if (m.nblocks && seg_blocks_verify(p, &m, 0, m.nblocks - 1) < 0) {
			ret = -EBADMSG;
			goto out;
		}
		if (m.ext == m.in_) {
			memcpy(out->in_, m.in_, m.next * sizeof(*m.ext));
			out->ext = out->in_;
		} else {
			out->ext = out->ext_ = m.ext;
			m.ext = NULL;
		}
		out->next = m.next;
		out->data_len = m.data_len;
	}
	out->data = p;
	out->buf_ = buf;
	buf = NULL;
out:
	if (ret < 0 && ret != -ENOMEM)
		seg_log_read_err(seg_id, dev, e, what, ret);
	seg_rmap_free(&m);
	seg_buf_free(buf);
	return ret;
}

void seg_chunk_free(struct seg_chunk *c)
{
	seg_buf_free(c->buf_);
	free(c->ext_);
	memset(c, 0, sizeof(*c));
}


/* Point out at the clipped extents' bytes: n of them, kept inline when few. */
static int part_ext(struct seg_chunk *out, uint32_t n)
{
	if (n <= SEG_CHUNK_INLINE) {
		out->ext = out->in_;
		return 0;
	}
	out->ext_ = malloc(n * sizeof(*out->ext_));
	if (!out->ext_)
		return -ENOMEM;
	out->ext = out->ext_;
	return 0;
}

int seg_rmap_load(struct store *st, uint64_t seg_id, uint32_t dev, const struct seg_entry *e,
		  struct rmap *m, const char **what)
{
	uint64_t end = e->off + e->len, tl = e->len < SEG_ALIGN ? e->len : SEG_ALIGN;
	const uint8_t *p;
	uint32_t cn;
	int ret;

	m->ext = NULL;
	m->buf = NULL;
	/* the map: cached, or found from the record's end */
	if ((cn = seg_mapc_get(seg_id, e, m->cached)) >= SEG_MAP_TAIL && cn <= e->len) {
		*what = "verifying";
		if (map_tail(m->cached + cn - SEG_MAP_TAIL, e->len, m) == 0 && m->map_len == cn &&
		    map_decode(m->cached, e->crc, m) == 0)
			return 0;
		/* not this record's, or it does not check: read it */
	}
	*what = "reading";
	if ((ret = seg_read_window(st, seg_id, dev, end - tl, tl, &m->buf, &p)) < 0)
		return ret;
	*what = "verifying";
	if ((ret = map_tail(p + tl - SEG_MAP_TAIL, e->len, m)) < 0)
		return ret;
	if (m->map_len > tl) {
		seg_buf_free(m->buf);
		m->buf = NULL;
		*what = "reading";
		if ((ret = seg_read_window(st, seg_id, dev, end - m->map_len, m->map_len, &m->buf,
					   &p)) < 0)
			return ret;
		*what = "verifying";
	} else {
		p += tl - m->map_len;
	}
	if ((ret = map_decode(p, e->crc, m)) < 0)
		return ret;
	seg_mapc_put(seg_id, e->off, e->len, e->crc, p, m->map_len);
	return 0;
}

/* seg_read_part of a mapped record. */
static int part_mapped(struct store *st, uint64_t seg_id, uint32_t dev, const struct seg_entry *e,
		       uint64_t off, uint64_t len, struct seg_chunk *out, const char **what)
{
	uint64_t s0 = UINT64_MAX, s1 = 0, pos = 0, ds, de;
	struct seg_extent *x;
	struct rmap m;
	const uint8_t *q;
	void *dbuf = NULL;
	uint32_t b0, b1, n = 0;
	int ret;

	if ((ret = seg_rmap_load(st, seg_id, dev, e, &m, what)) < 0)
		goto out;
	/* the stored bytes the range needs, and the blocks holding them */
	for (uint32_t i = 0; i < m.next; pos += m.ext[i].len, i++) {
		uint64_t xo = m.ext[i].off, xe = xo + m.ext[i].len;
		uint64_t lo = off > xo ? off : xo, hi = off + len < xe ? off + len : xe;

		if (lo >= hi)
			continue;
		if (s0 == UINT64_MAX)
			s0 = pos + (lo - xo);
		s1 = pos + (hi - xo);
		n++;
	}
	if (s0 == UINT64_MAX)
		goto out; /* all holes */
	b0 = (uint32_t)(s0 / m.bsize);
	b1 = (uint32_t)((s1 - 1) / m.bsize);
	ds = (uint64_t)b0 * m.bsize;
	de = (uint64_t)(b1 + 1) * m.bsize < m.data_len ? (uint64_t)(b1 + 1) * m.bsize : m.data_len;
	*what = "reading";
	if ((ret = seg_read_window(st, seg_id, dev, e->off + ds, de - ds, &dbuf, &q)) < 0)
		goto out;
	*what = "verifying";
	if (seg_blocks_verify(q, &m, b0, b1) < 0) {
		ret = -EBADMSG;
		goto out;
	}
	if ((ret = part_ext(out, n)) < 0)
		goto out;
	x = (struct seg_extent *)out->ext;
	pos = 0;
	for (uint32_t i = 0; i < m.next; pos += m.ext[i].len, i++) {
		uint64_t xo = m.ext[i].off, xe = xo + m.ext[i].len;
		uint64_t lo = off > xo ? off : xo, hi = off + len < xe ? off + len : xe;

		if (lo < hi) /* its stored bytes lie in [s0, s1), inside the window */
			*x++ = (struct seg_extent){(uint32_t)lo, (uint32_t)(hi - lo)};
	}
	out->next = n;
	out->data = q + (s0 - ds);
	out->data_len = (uint32_t)(s1 - s0);
	out->buf_ = dbuf;
	dbuf = NULL;
out:
	seg_rmap_free(&m);
	seg_buf_free(dbuf);
	return ret;
}

int seg_read_part(struct store *st, uint64_t seg_id, uint32_t dev, const struct seg_entry *e,
		  uint64_t off, uint64_t len, struct seg_chunk *out)
{
	const char *what = "reading";
	const uint8_t *p;
	void *buf = NULL;
	uint64_t lo, hi;
	int ret;

	memset(out, 0, sizeof(*out));
	if (e->len == 0 || e->off < SEG_HDR_SIZE || (e->flags & ~SEG_F_ALL) ||
	    off > SEG_MAX_CHUNK_LEN || len > SEG_MAX_CHUNK_LEN)
		return -EINVAL;
	if (e->flags & LOC_F_MAP) {
		ret = part_mapped(st, seg_id, dev, e, off, len, out, &what);
		goto out;
	}
	/* plain: one crc over the whole record */
	if ((ret = seg_read_window(st, seg_id, dev, e->off, e->len, &buf, &p)) < 0)
		goto out;
	what = "verifying";
	if (crc32c(0, p, e->len) != e->crc) {
		ret = -EBADMSG;
		goto out;
	}
	lo = off < e->len ? off : e->len;
	hi = off + len < e->len ? off + len : e->len;
	if (lo < hi) {
		out->in_[0] = (struct seg_extent){(uint32_t)lo, (uint32_t)(hi - lo)};
		out->ext = out->in_;
		out->next = 1;
		out->data = p + lo;
		out->data_len = (uint32_t)(hi - lo);
	}
	out->buf_ = buf;
	buf = NULL;
out:
	if (ret < 0) {
		seg_chunk_free(out);
		if (ret != -ENOMEM)
			seg_log_read_err(seg_id, dev, e, what, ret);
	}
	seg_buf_free(buf);
	return ret;
}

const void *seg_chunk_span(const struct seg_chunk *sc, uint64_t lo, uint64_t hi)
{
	uint64_t pos = 0;

	for (uint32_t i = 0; i < sc->next; pos += sc->ext[i].len, i++) {
		uint64_t xo = sc->ext[i].off, xe = xo + sc->ext[i].len;

		if (xo <= lo && hi <= xe)
			return sc->data + pos + (lo - xo);
	}
	return NULL;
}

void seg_chunk_copy(const struct seg_chunk *sc, uint64_t off, uint32_t len, void *dst)
{
	uint64_t pos = 0;

	memset(dst, 0, len);
	for (uint32_t i = 0; i < sc->next; pos += sc->ext[i].len, i++) {
		uint64_t xo = sc->ext[i].off, xe = xo + sc->ext[i].len;
		uint64_t a = off > xo ? off : xo, b = off + len < xe ? off + len : xe;

		if (a < b)
			memcpy((uint8_t *)dst + (a - off), sc->data + pos + (a - xo), b - a);
	}
}

int seg_read_range(struct store *st, uint64_t seg_id, uint32_t dev, const struct seg_entry *e,
		   uint64_t off, uint32_t len, void *dst)
{
	struct seg_chunk sc;
	int ret = seg_read_part(st, seg_id, dev, e, off, len, &sc);

	if (ret == 0)
		seg_chunk_copy(&sc, off, len, dst);
	else
		memset(dst, 0, len);
	seg_chunk_free(&sc);
	return ret;
}

int seg_read_manifest(struct store *st, uint64_t seg_id, uint32_t dev, uint64_t seg_len,
		      uint8_t uuid_out[16], uint32_t *version, struct seg_entry **entries,
		      uint32_t *n)
{
	uint8_t *blk, *foot = NULL;
	uint64_t id, fstart, astart;
	uint32_t flen, hv = 0, tv = 0;
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
	ret = seg_header_decode(blk, uuid_out, &id, &hv);
	if (ret == 0 && id != seg_id)
		ret = -EIO;
	if (ret < 0)
		goto out;
	what = "footer";
	ret = store_read(st, seg_id, dev, seg_len - SEG_ALIGN, blk, SEG_ALIGN);
	if (ret < 0)
		goto out;
	ret = seg_trailer_decode(blk + SEG_ALIGN - SEG_TRAILER_SIZE, seg_len, &flen, &tv);
	if (ret == 0 && tv != hv)
		ret = -EIO;
	if (ret < 0)
		goto out;
	if (version)
		*version = hv;
	fstart = seg_len - flen;
	astart = fstart / SEG_ALIGN * SEG_ALIGN;
	if (astart == seg_len - SEG_ALIGN) {
		ret = seg_footer_decode(blk + (fstart - astart), flen, seg_len, hv, entries, n);
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
	ret = seg_footer_decode(foot + (fstart - astart), flen, seg_len, hv, entries, n);
out:
	if (ret < 0 && ret != -ENOMEM)
		log_err("segment %016" PRIx64 " dev %u (%" PRIu64 " bytes): bad %s: %s", seg_id,
			dev, seg_len, what, strerror(-ret));
	seg_buf_free(foot);
	seg_buf_free(blk);
	return ret;
}
