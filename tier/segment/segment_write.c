/*
 * segment_write.c — the segment writer: header, records, footer, in order,
 * into a store put (segment.h says what a record is and where it goes).
 *
 * DESIGN
 * - The writer stages into one aligned buffer: its own SEG_STAGE_SIZE one,
 *   or, when the store lends one (put_window: S3's part buffer), the
 *   store's, so that the append copies nothing. Each time the stage fills
 *   it is handed to store_put_append(), so every append is aligned and a
 *   multiple of 4 KiB. Segment position = flushed + fill.
 * - No bounce for large records (format v3): a record with more than
 *   SEG_DENSE_MAX bytes of data starts on 4 KiB and its extents are whole
 *   pages (finer ones are widened), so its data lies page for page as in
 *   the chunk. When the bytes are in the caller's memory (an aligned buffer,
 *   or the hot file's pages mapped by segment_fd.c) and the store takes the
 *   caller's memory (nvme: O_DIRECT from any aligned address), the stage is
 *   flushed (whole pages: the record starts on 4 KiB) and each extent's
 *   whole pages are appended straight from there, their block crcs taken
 *   on those pages, once; a last partial page (the chunk's end) goes into
 *   the stage with the map behind it. S3 keeps its part buffers (the upload
 *   needs a buffer anyway): the bytes are copied there as before.
 * - Everything else (dense records, S3, an fd read with pread, extents the
 *   writer had to widen) streams through the stage: each piece is copied
 *   in and its crc taken there at once while cached, so the crcs are of the
 *   bytes written even when the source changes under the copy.
 * - A record that fails part way (the hot file cut under it, a stale check)
 *   leaves its bytes as padding and gets no entry: the footer names only
 *   records whose every crc matches what was written.
 * - The footer is built when finishing, once the entry count and the body
 *   length are known; its front padding makes the total length a multiple
 *   of 4 KiB so that the last append is whole blocks too.
 * Threading: one thread per writer.
 */
#include "tier/segment/segment_i.h"

#include "common/crc32c.h"
#include "common/le.h"
#include "common/log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int seg_no_direct;

struct seg_writer {
	struct store *st;
	struct store_put *put;
	uint64_t seg_id;
	uint8_t *stage;	  /* stage_cap bytes, aligned: own, or the store's window; NULL: none yet */
	size_t stage_cap;
	uint8_t *own;	  /* SEG_STAGE_SIZE bytes, when the store lends no window */
	size_t fill;	  /* bytes staged */
	uint64_t flushed; /* bytes appended to the put */
	uint64_t direct, staged; /* data bytes appended from the caller's memory / copied */
	struct seg_entry *ent;
	uint32_t n, cap;
	int err; /* sticky store error */
};

static uint64_t w_pos(const struct seg_writer *w)
{
	return w->flushed + w->fill;
}

int seg_w_err(const struct seg_writer *w)
{
	return w->err;
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

/* Append the staged bytes if the stage is full (or force, for the last
 * blocks, or before a direct append: the position is then on 4 KiB). */
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

/* Common start of add: checks, room for the entry, the padding up to
 * `align` (SEG_REC_ALIGN: dense; SEG_ALIGN: aligned). */
static int w_add_begin(struct seg_writer *w, uint64_t align)
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
	return w_emit(w, NULL, (pos + align - 1) / align * align - pos);
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

/* Largest piece copied from a source at a time (its crc is taken while it
 * is still in the cache). */
#define SRC_PIECE (256u << 10)

/* Chunk bytes [x, x + n) of src into dst: a source's holes (DATA) read as
 * zeros; -ENODATA when an fd is shorter than that now (cut under the
 * read), or pread's -errno. */
static int src_copy(const struct seg_src *s, uint64_t x, size_t n, uint8_t *dst)
{
	if (s->kind == SEG_SRC_IMG) {
		memcpy(dst, s->img + x, n);
		return 0;
	}
	if (s->kind == SEG_SRC_FD) {
		while (n > 0) {
			ssize_t got = pread(s->fd, dst, n, (off_t)(s->base + x));

			if (got < 0 && errno == EINTR)
				continue;
			if (got < 0)
				return -errno;
			if (got == 0)
				return -ENODATA; /* EOF: cut since the extents were found */
			dst += got;
			x += (uint64_t)got;
			n -= (size_t)got;
		}
		return 0;
	}
	memset(dst, 0, n);
	for (uint32_t i = 0, pos = 0; i < s->next; pos += s->ext[i].len, i++) {
		uint64_t xo = s->ext[i].off, xe = xo + s->ext[i].len;
		uint64_t a = x > xo ? x : xo, b = x + n < xe ? x + n : xe;

		if (xo >= x + n)
			break;
		if (a < b)
			memcpy(dst + (a - x), s->data + pos + (a - xo), b - a);
	}
	return 0;
}

/* Stage chunk bytes [x, x + len) of src, adding them to b as they land. */
static int w_stream(struct seg_writer *w, const struct seg_src *src, uint64_t x, uint32_t len,
		    struct blk_crcs *b)
{
	while (len > 0) {
		size_t k;
		uint8_t *dst;
		int ret = w_room(w);

		if (ret < 0)
			return ret;
		k = w->stage_cap - w->fill;
		dst = w->stage + w->fill;
		if (k > len)
			k = len;
		if (k > SRC_PIECE)
			k = SRC_PIECE;
		if ((ret = src_copy(src, x, k, dst)) < 0)
			return ret;
		blk_add(b, dst, k);
		x += k;
		w->fill += k;
		w->staged += k;
		len -= (uint32_t)k;
		ret = w_flush(w, 0);
		if (ret < 0)
			return ret;
	}
	return 0;
}

/* Append len bytes at p (4 KiB-aligned; the position is on 4 KiB) with no
 * copy: the stage's whole pages (what precedes) and p's whole pages from p
 * itself, in flight together, their crcs taken there; a last partial page
 * goes into the stage. */
static int w_direct(struct seg_writer *w, const uint8_t *p, uint32_t len, struct blk_crcs *b)
{
	uint32_t whole = len / SEG_ALIGN * SEG_ALIGN;
	struct seg_src tail = {.kind = SEG_SRC_IMG, .img = p};
	int ret;

	if (whole) {
		struct iovec v[2] = {{w->stage, w->fill}, {(void *)p, whole}};
		int k = w->fill ? 0 : 1;

		blk_add(b, p, whole);
		if ((ret = store_put_appendv(w->put, v + k, 2 - k)) < 0) {
			w->err = ret;
			return ret;
		}
		w->flushed += w->fill + whole;
		w->fill = 0;
		w->direct += whole;
	}
	return len > whole ? w_stream(w, &tail, whole, len - whole, b) : 0;
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

static uint64_t ext_sum(const struct seg_extent *x, uint32_t n)
{
	uint64_t s = 0;

	for (uint32_t i = 0; i < n; i++)
		s += x[i].len;
	return s;
}

/* The extents of an aligned record: each widened to whole pages (cut at
 * chunk_len), neighbours that meet merged. out has room for n. Returns the
 * count. */
static uint32_t extents_pages(const struct seg_extent *x, uint32_t n, uint32_t chunk_len,
			      struct seg_extent *out)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < n; i++) {
		uint64_t a = x[i].off / SEG_ALIGN * SEG_ALIGN;
		uint64_t e = align_up((uint64_t)x[i].off + x[i].len);

		if (e > chunk_len)
			e = chunk_len;
		if (k && a <= (uint64_t)out[k - 1].off + out[k - 1].len) {
			if (e > (uint64_t)out[k - 1].off + out[k - 1].len)
				out[k - 1].len = (uint32_t)(e - out[k - 1].off);
		} else {
			out[k++] = (struct seg_extent){(uint32_t)a, (uint32_t)(e - a)};
		}
	}
	return k;
}

int seg_w_direct_ok(const struct seg_writer *w, const struct seg_extent *ext, uint32_t next)
{
	return !seg_no_direct && w->own && !w->st->ops->put_window &&
	       ext_sum(ext, next) > SEG_DENSE_MAX;
}

/* The record's data from its source: straight from the caller's memory
 * when it can be, else through the stage. */
static int w_data(struct seg_writer *w, const struct seg_extent *x, uint32_t n, int direct,
		  const struct seg_src *src, struct blk_crcs *b)
{
	uint64_t pos = 0;
	int ret = 0;

	for (uint32_t i = 0; ret == 0 && i < n; pos += x[i].len, i++) {
		if (direct && src->kind == SEG_SRC_IMG)
			ret = w_direct(w, src->img + x[i].off, x[i].len, b);
		else if (direct)
			ret = w_direct(w, src->data + pos, x[i].len, b);
		else
			ret = w_stream(w, src, x[i].off, x[i].len, b);
	}
	return ret;
}

/* check said RECHECK: do the source's pages still hash to the crcs taken
 * as they were written? 1 or 0. */
static int img_still(const struct seg_src *src, const struct seg_extent *x, uint32_t n,
		     const struct blk_crcs *b, uint32_t nblocks)
{
	struct blk_crcs again = {.v = calloc(nblocks + 1, sizeof(uint32_t))};
	int same;

	if (!again.v)
		return 0;
	for (uint32_t i = 0; i < n; i++)
		blk_add(&again, src->img + x[i].off, x[i].len);
	same = memcmp(again.v, b->v, nblocks * sizeof(uint32_t)) == 0;
	free(again.v);
	return same;
}

/* The map behind a mapped record's data (segment.h); *crc gets its crc. */
static void map_encode(uint8_t *map, uint32_t map_len, const struct seg_extent *x, uint32_t n,
		       const struct blk_crcs *b, uint32_t nblocks, uint64_t data_len, uint32_t *crc)
{
	uint8_t *p = map;

	for (uint32_t i = 0; i < n; i++, p += 8) {
		le_put32(p, x[i].off);
		le_put32(p + 4, x[i].len);
	}
	for (uint32_t i = 0; i < nblocks; i++, p += 4)
		le_put32(p, b->v[i]);
	le_put32(p, n);
	le_put32(p + 4, (uint32_t)data_len);
	le_put32(p + 8, SEG_BLOCK);
	*crc = crc32c(0, map, map_len - 4);
	le_put32(p + 12, *crc);
}

int seg_w_record(struct seg_writer *w, uint64_t ino, uint64_t chunk, uint64_t gen,
		 uint32_t chunk_len, const struct seg_extent *ext, uint32_t next,
		 const struct seg_src *src, const struct seg_fd_check *check,
		 struct seg_entry *entry_out)
{
	struct blk_crcs b = {0};
	struct seg_extent *px = NULL;
	const struct seg_extent *x = ext;
	uint64_t data_len, off;
	uint32_t n = next, nblocks, map_len, crc, flags;
	uint8_t *map = NULL;
	int ret, aligned, direct;

	if (!extents_valid(chunk_len, ext, next, &data_len))
		return -EINVAL;
	if (w->err)
		return w->err;
	aligned = data_len > SEG_DENSE_MAX;
	if (aligned && !seg_ext_granular(ext, next)) { /* widened */
		if (!(px = malloc(next * sizeof(*px))))
			return -ENOMEM;
		n = extents_pages(ext, next, chunk_len, px);
		x = px;
	}
	/* straight from the caller's memory: a mapping, or data that needs no
	 * widening and lies on 4 KiB */
	direct = aligned && seg_w_direct_ok(w, ext, next) &&
		 (src->kind == SEG_SRC_IMG ||
		  (src->kind == SEG_SRC_DATA && (uintptr_t)src->data % SEG_ALIGN == 0 &&
		   ext_sum(x, n) == data_len));
	data_len = ext_sum(x, n);
	flags = n == 1 && x[0].off == 0 && x[0].len <= SEG_BLOCK ? 0 : LOC_F_MAP;
	nblocks = (uint32_t)((data_len + SEG_BLOCK - 1) / SEG_BLOCK);
	map_len = flags ? n * 8 + nblocks * 4 + SEG_MAP_TAIL : 0;
	b.v = calloc(nblocks + 1, sizeof(*b.v));
	if (flags)
		map = malloc(map_len);
	if (!b.v || (flags && !map)) {
		ret = -ENOMEM;
		goto out;
	}
	ret = w_add_begin(w, aligned ? SEG_ALIGN : SEG_REC_ALIGN);
	if (ret < 0)
		goto out;
	off = w_pos(w);
	if ((ret = w_data(w, x, n, direct, src, &b)) < 0)
		goto out;
	if (direct && src->kind == SEG_SRC_IMG && check) {
		int r = check->fn(check->arg);

		if (r == SEG_FD_STALE || (r == SEG_FD_RECHECK && !img_still(src, x, n, &b, nblocks))) {
			ret = -ESTALE; /* its bytes are padding now */
			goto out;
		}
	}
	if (flags) {
		map_encode(map, map_len, x, n, &b, nblocks, data_len, &crc);
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
	free(px);
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
	struct seg_src src = {.kind = SEG_SRC_DATA, .data = data, .ext = ext, .next = next};

	if (next && !data)
		return -EINVAL;
	return seg_w_record(w, ino, chunk, gen, chunk_len, ext, next, &src, NULL, entry_out);
}

int seg_writer_add(struct seg_writer *w, uint64_t ino, uint64_t chunk, uint64_t gen,
		   const void *data, uint32_t len, struct seg_entry *entry_out)
{
	struct seg_extent one = {0, len};

	if (len == 0 || !data)
		return -EINVAL;
	return seg_writer_add_extents(w, ino, chunk, gen, len, &one, 1, data, entry_out);
}

uint64_t seg_writer_bytes(const struct seg_writer *w)
{
	return w_pos(w);
}

uint32_t seg_writer_count(const struct seg_writer *w)
{
	return w->n;
}

void seg_writer_moved(const struct seg_writer *w, uint64_t *direct, uint64_t *staged)
{
	*direct = w->direct;
	*staged = w->staged;
}

uint64_t seg_v3_len(const uint32_t *rec_len, const uint32_t *data_len, uint32_t n)
{
	uint64_t body = SEG_HDR_SIZE;

	for (uint32_t i = 0; i < n; i++)
		body = (data_len[i] > SEG_DENSE_MAX ? align_up(body) : rec_align(body)) + rec_len[i];
	return body + seg_footer_len(body, n);
}

void seg_v3_rec_size(const struct seg_entry *e, uint32_t *rec_len, uint32_t *data_len)
{
	uint32_t blocks = (e->len + SEG_BLOCK - 1) / SEG_BLOCK;

	if (e->flags & LOC_F_MAP) {
		uint32_t map = 8 + blocks * 4 + SEG_MAP_TAIL;

		*rec_len = e->len;
		*data_len = e->len > map ? e->len - map : 0;
	} else {
		*data_len = e->len;
		*rec_len = e->len <= SEG_BLOCK ? e->len : e->len + 8 + blocks * 4 + SEG_MAP_TAIL;
	}
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
