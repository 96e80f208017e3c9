/*
 * segment_into.c — a range of a chunk record read straight into the
 * caller's memory (seg_read_into, segment.h): the admission path's direct
 * read into a reply buffer, a restore's into a mapping of the hot file.
 *
 * DESIGN
 * - An aligned record (v3: mapped, on 4 KiB, whole-page extents; checked
 *   here on the offset and the map, since the index does not say) has
 *   each extent's data page-aligned in the segment exactly as in the
 *   chunk: the blocks of the range's data that lie wholly inside [lo, hi)
 *   are read by the store into dst at their chunk offsets, one store read
 *   per extent piece (O_DIRECT on nvme: the device writes the caller's
 *   pages), and verified there, each block's crc chained over its pieces.
 *   A record's data may end inside a page (the chunk's end): that page is
 *   read whole and the bytes past the data zeroed at once, so dst never
 *   holds anything but the chunk's bytes and zeros.
 * - The two blocks at the ends of the range may reach outside it (a read
 *   that starts or ends inside a block, a sparse chunk whose block holds
 *   bytes of extents outside it): those go through a window buffer, are
 *   verified there and only their part inside the range copied (at most
 *   two blocks; one read when there is no inner block).
 * - Anything else (plain and v1 records, an unaligned record or range)
 *   reads through seg_read_part and copies: what v2 did.
 * - Holes are zeroed in dst before the reads, unless SEG_INTO_HOLES (dst
 *   maps the hot file: its holes are holes, and a write would allocate).
 * Threading: per call (the map cache has its own lock).
 */
#include "tier/segment/segment_i.h"

#include "common/crc32c.h"
#include "common/le.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int seg_layout_v3_ok(const struct seg_entry *e, const struct seg_chunk *sc)
{
	if (sc->data_len <= SEG_DENSE_MAX)
		return e->off % SEG_REC_ALIGN == 0;
	return (e->flags & LOC_F_MAP) && e->off % SEG_ALIGN == 0 &&
	       seg_ext_granular(sc->ext, sc->next);
}

/* Copy the extents' bytes of sc that lie in chunk bytes [lo, hi) to dst
 * (dst[0] is chunk byte lo), zeros for the rest unless holes is set. */
static void copy_part(const struct seg_chunk *sc, uint64_t lo, uint64_t hi, uint8_t *dst, int holes)
{
	uint64_t pos = 0;

	if (!holes) {
		seg_chunk_copy(sc, lo, (uint32_t)(hi - lo), dst);
		return;
	}
	for (uint32_t i = 0; i < sc->next; pos += sc->ext[i].len, i++) {
		uint64_t xo = sc->ext[i].off, xe = xo + sc->ext[i].len;
		uint64_t a = lo > xo ? lo : xo, b = hi < xe ? hi : xe;

		if (a < b)
			memcpy(dst + (a - lo), sc->data + pos + (a - xo), b - a);
	}
}

/* The v2 way: the blocks through a window buffer, then copied. */
static int into_copy(struct store *st, uint64_t seg_id, uint32_t dev, const struct seg_entry *e,
		     uint64_t lo, uint64_t hi, uint8_t *dst, unsigned flags,
		     struct seg_into_stat *stat)
{
	struct seg_chunk sc;
	int ret = seg_read_part(st, seg_id, dev, e, lo, hi - lo, &sc);

	if (ret == 0)
		copy_part(&sc, lo, hi, dst, flags & SEG_INTO_HOLES);
	if (ret == 0 && stat)
		stat->copied = sc.data_len;
	seg_chunk_free(&sc);
	return ret;
}

/* Zero the bytes of [lo, hi) that no extent of m holds. */
static void zero_holes(const struct rmap *m, uint64_t lo, uint64_t hi, uint8_t *dst)
{
	uint64_t cur = lo;

	for (uint32_t i = 0; i < m->next && cur < hi; i++) {
		uint64_t xo = m->ext[i].off, xe = xo + m->ext[i].len;

		if (xe <= cur)
			continue;
		if (xo > cur)
			memset(dst + (cur - lo), 0, (xo < hi ? xo : hi) - cur);
		cur = xe;
	}
	if (cur < hi)
		memset(dst + (cur - lo), 0, hi - cur);
}

/* The data bytes [a, b) of m's record as chunk pieces: fn(arg, chunk
 * offset, data position, length) for each extent piece, in order; stops
 * at the first nonzero return. */
static int pieces(const struct rmap *m, uint64_t a, uint64_t b,
		  int (*fn)(void *arg, uint64_t c, uint64_t d, uint64_t n), void *arg)
{
	uint64_t pos = 0;
	int ret = 0;

	for (uint32_t i = 0; ret == 0 && i < m->next && pos < b; pos += m->ext[i].len, i++) {
		uint64_t pa = a > pos ? a : pos, pe = pos + m->ext[i].len;
		uint64_t pb = b < pe ? b : pe;

		if (pa < pb)
			ret = fn(arg, m->ext[i].off + (pa - pos), pa, pb - pa);
	}
	return ret;
}

struct into {
	struct store *st;
	uint64_t seg_id;
	uint32_t dev;
	const struct seg_entry *e;
	uint64_t lo;
	uint8_t *dst;
	uint32_t crc;		/* the block being hashed */
	const uint8_t *win;	/* edge blocks: their window, at data position wpos */
	uint64_t wpos, hi;
	struct seg_into_stat st_;
};

/* An inner piece: read by the store into dst where it belongs; a last
 * partial page read whole, the bytes past the piece zeroed. */
static int read_piece(void *arg, uint64_t c, uint64_t d, uint64_t n)
{
	struct into *x = arg;
	uint8_t *p = x->dst + (c - x->lo);
	uint64_t rn = align_up(n);
	int ret = store_read(x->st, x->seg_id, x->dev, x->e->off + d, p, rn);

	if (ret == 0 && rn > n)
		memset(p + n, 0, rn - n);
	x->st_.direct += n;
	return ret;
}

static int crc_piece(void *arg, uint64_t c, uint64_t d, uint64_t n)
{
	struct into *x = arg;

	(void)d;
	x->crc = crc32c(x->crc, x->dst + (c - x->lo), n);
	return 0;
}

/* An edge piece: its part inside [lo, hi) copied from the window. */
static int copy_piece(void *arg, uint64_t c, uint64_t d, uint64_t n)
{
	struct into *x = arg;
	uint64_t a = c > x->lo ? c : x->lo, b = c + n < x->hi ? c + n : x->hi;

	if (a < b) {
		memcpy(x->dst + (a - x->lo), x->win + (d - x->wpos) + (a - c), b - a);
		x->st_.copied += b - a;
	}
	return 0;
}

/* Blocks [b0, b1] through a window: read, verified, their part inside the
 * range copied. */
static int edge_blocks(struct into *x, const struct rmap *m, uint32_t b0, uint32_t b1)
{
	uint64_t ds = (uint64_t)b0 * m->bsize, de = (uint64_t)(b1 + 1) * m->bsize;
	void *buf = NULL;
	int ret;

	if (de > m->data_len)
		de = m->data_len;
	ret = seg_read_window(x->st, x->seg_id, x->dev, x->e->off + ds, de - ds, &buf, &x->win);
	if (ret == 0 && seg_blocks_verify(x->win, m, b0, b1) < 0)
		ret = -EBADMSG;
	x->wpos = ds;
	if (ret == 0)
		pieces(m, ds, de, copy_piece, x);
	seg_buf_free(buf);
	return ret;
}

/* Blocks [i0, i1] straight into dst, then verified there. */
static int inner_blocks(struct into *x, const struct rmap *m, uint32_t i0, uint32_t i1)
{
	uint64_t ds = (uint64_t)i0 * m->bsize, de = (uint64_t)(i1 + 1) * m->bsize;
	int ret;

	if (de > m->data_len)
		de = m->data_len;
	if ((ret = pieces(m, ds, de, read_piece, x)) < 0)
		return ret;
	for (uint32_t b = i0; b <= i1; b++) {
		uint64_t bs = (uint64_t)b * m->bsize, be = bs + m->bsize;

		x->crc = 0;
		pieces(m, bs, be < m->data_len ? be : m->data_len, crc_piece, x);
		if (x->crc != le_get32(m->crcs + 4 * b))
			return -EBADMSG;
	}
	return 0;
}

int seg_read_into(struct store *st, uint64_t seg_id, uint32_t dev, const struct seg_entry *e,
		  uint64_t lo, uint64_t hi, void *dst, unsigned flags, struct seg_into_stat *stat)
{
	struct into x = {.st = st, .seg_id = seg_id, .dev = dev, .e = e, .lo = lo, .hi = hi,
			 .dst = dst};
	uint64_t s0 = UINT64_MAX, s1 = 0, pos = 0;
	const char *what = "reading";
	struct rmap m;
	int ret = 0, e0, e1;
	uint32_t b0, b1;

	m.ext = NULL;
	m.buf = NULL;
	if (stat)
		*stat = (struct seg_into_stat){0};
	if (e->len == 0 || e->off < SEG_HDR_SIZE || (e->flags & ~SEG_F_ALL) || lo > hi ||
	    lo > SEG_MAX_CHUNK_LEN || hi - lo > SEG_MAX_CHUNK_LEN)
		return -EINVAL;
	if (lo == hi)
		return 0;
	if (!(e->flags & LOC_F_MAP) || e->off % SEG_ALIGN || lo % SEG_ALIGN ||
	    (uintptr_t)dst % SEG_ALIGN)
		return into_copy(st, seg_id, dev, e, lo, hi, dst, flags, stat);
	if ((ret = seg_rmap_load(st, seg_id, dev, e, &m, &what)) < 0)
		goto out;
	if (!seg_ext_granular(m.ext, m.next)) {
		seg_rmap_free(&m);
		return into_copy(st, seg_id, dev, e, lo, hi, dst, flags, stat);
	}
	if (!(flags & SEG_INTO_HOLES))
		zero_holes(&m, lo, hi, dst);
	for (uint32_t i = 0; i < m.next; pos += m.ext[i].len, i++) {
		uint64_t xo = m.ext[i].off, xe = xo + m.ext[i].len;
		uint64_t a = lo > xo ? lo : xo, b = hi < xe ? hi : xe;

		if (a >= b)
			continue;
		if (s0 == UINT64_MAX)
			s0 = pos + (a - xo);
		s1 = pos + (b - xo);
	}
	if (s0 == UINT64_MAX)
		goto out; /* all holes */
	/* data positions in [s0, s1) are the chunk's bytes in [lo, hi): a
	 * block inside it is read in place; the ones at the ends may not be */
	b0 = (uint32_t)(s0 / m.bsize);
	b1 = (uint32_t)((s1 - 1) / m.bsize);
	e0 = s0 > (uint64_t)b0 * m.bsize;
	e1 = s1 < (uint64_t)(b1 + 1) * m.bsize && s1 < m.data_len;
	what = "reading";
	if (b1 - b0 < (uint32_t)(e0 + e1) || (b0 == b1 && (e0 || e1))) {
		ret = edge_blocks(&x, &m, b0, b1); /* no inner block: one read */
		goto out;
	}
	if (e0 && (ret = edge_blocks(&x, &m, b0, b0)) < 0)
		goto out;
	if (e1 && (ret = edge_blocks(&x, &m, b1, b1)) < 0)
		goto out;
	ret = inner_blocks(&x, &m, b0 + (uint32_t)e0, b1 - (uint32_t)e1);
out:
	if (ret == -EBADMSG)
		what = "verifying";
	if (ret < 0 && ret != -ENOMEM)
		seg_log_read_err(seg_id, dev, e, what, ret);
	if (stat)
		*stat = x.st_;
	seg_rmap_free(&m);
	return ret;
}
