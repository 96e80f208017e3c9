/*
 * journal_codec.c — the journal's record format (journal.h "On disk"):
 * encoding a record or a transaction into a crc'ed frame, decoding one
 * back with every length bounded by the bytes at hand (a torn or corrupt
 * frame is refused, never read past), iterating a transaction's records.
 * Guarantees: what jrnl_encode writes jrnl_decode returns unchanged.
 * Threading: none needed: pure functions over the caller's buffers.
 */
#include "index/journal_codec.h"

#include "common/crc32c.h"
#include "common/le.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define FRAME 9u /* u32 len, u32 crc, u8 type */

/* Cursor forms of le.h's: write at *p and step past. */
static void put32(uint8_t **p, uint32_t v)
{
	le_put32(*p, v);
	*p += 4;
}

static void put64(uint8_t **p, uint64_t v)
{
	le_put64(*p, v);
	*p += 8;
}

static void putb(uint8_t **p, const void *b, size_t n)
{
	if (n)
		memcpy(*p, b, n);
	*p += n;
}

/* Payload size of r (without framing). */
static size_t payload_size(const struct jrec *r)
{
	switch (r->type) {
	case JR_HEADER:
		return 4 + 4 + 8 + 8 + 16;
	case JR_END:
		return 8;
	case JR_META:
		return 16;
	case JR_INODE:
		return 8 + 12 + 16 + 24 + r->name_len;
	case JR_LINK:
		return 16 + r->name_len;
	case JR_UNLINK:
		return 8 + r->name_len;
	case JR_XATTR_SET:
		return 8 + 4 + r->name_len + r->value_len;
	case JR_XATTR_DEL:
		return 8 + r->name_len;
	case JR_CHUNK_LOC:
		return 32 + 16;
	case JR_CHUNK_OVL:
		return 32 + 16 + r->value_len;
	case JR_CHUNK_DIRTY:
	case JR_CHUNK_PART:
		return 16;
	case JR_CHUNK_ABSENT:
		return 24;
	case JR_SEG_ADD:
		return 24 + 4 + 1;
	case JR_SEG_DEL:
		return 8;
	case JR_EXTENT:
		return 32;
	case JR_EXTENT_CRC:
		return 16 + r->value_len;
	}
	return 0;
}

static void encode_payload(const struct jrec *r, uint8_t *p)
{
	switch (r->type) {
	case JR_HEADER:
		put32(&p, r->hdr.version);
		put32(&p, r->hdr.kind);
		put64(&p, r->hdr.gen);
		put64(&p, r->hdr.chunk_size);
		putb(&p, r->hdr.uuid, 16);
		break;
	case JR_END:
		put64(&p, r->count);
		break;
	case JR_META:
		put64(&p, r->next_ino);
		put64(&p, r->next_seg);
		break;
	case JR_INODE:
		put64(&p, r->ino);
		put32(&p, r->attr.mode);
		put32(&p, r->attr.uid);
		put32(&p, r->attr.gid);
		put64(&p, r->attr.rdev);
		put64(&p, r->attr.size);
		put64(&p, (uint64_t)r->attr.atime_ns);
		put64(&p, (uint64_t)r->attr.mtime_ns);
		put64(&p, (uint64_t)r->attr.ctime_ns);
		putb(&p, r->name, r->name_len);
		break;
	case JR_LINK:
		put64(&p, r->parent);
		put64(&p, r->ino);
		putb(&p, r->name, r->name_len);
		break;
	case JR_UNLINK:
		put64(&p, r->parent);
		putb(&p, r->name, r->name_len);
		break;
	case JR_XATTR_SET:
		put64(&p, r->ino);
		put32(&p, r->name_len);
		putb(&p, r->name, r->name_len);
		putb(&p, r->value, r->value_len);
		break;
	case JR_XATTR_DEL:
		put64(&p, r->ino);
		putb(&p, r->name, r->name_len);
		break;
	case JR_CHUNK_LOC:
	case JR_CHUNK_OVL:
		put64(&p, r->ino);
		put64(&p, r->chunk);
		put64(&p, r->loc.seg_id);
		put64(&p, r->loc.off);
		put32(&p, r->loc.len);
		put32(&p, r->loc.crc);
		put32(&p, r->loc.dev | (uint32_t)r->loc.flags << 16);
		put32(&p, r->loc.gen);
		if (r->type == JR_CHUNK_OVL)
			putb(&p, r->value, r->value_len);
		break;
	case JR_CHUNK_DIRTY:
	case JR_CHUNK_PART:
		put64(&p, r->ino);
		put64(&p, r->chunk);
		break;
	case JR_CHUNK_ABSENT:
		put64(&p, r->ino);
		put64(&p, r->chunk);
		put64(&p, r->count);
		break;
	case JR_SEG_ADD:
		put64(&p, r->seg.id);
		put64(&p, r->seg.len);
		put64(&p, r->seg.payload);
		put32(&p, r->seg.dev);
		*p++ = r->seg.store;
		break;
	case JR_SEG_DEL:
		put64(&p, r->seg.id);
		break;
	case JR_EXTENT:
		put64(&p, r->ino);
		put64(&p, r->ext.id);
		put64(&p, r->ext.size);
		put32(&p, r->ext.dev);
		put32(&p, r->ext.flags);
		break;
	case JR_EXTENT_CRC:
		put64(&p, r->ino);
		put64(&p, r->chunk);
		putb(&p, r->value, r->value_len);
		break;
	}
}

/* Decode payload p[0..n) of a record of `type` into r. 0 or -EBADMSG. */
static int decode_payload(uint8_t type, const uint8_t *p, size_t n, struct jrec *r)
{
	struct jrec probe = {.type = type};
	uint64_t seg;
	size_t fixed;

	memset(r, 0, sizeof(*r));
	r->type = type;
	if (type < JR_HEADER || type > JR_TYPE_MAX || type == JR_TX)
		return -EBADMSG;
	fixed = payload_size(&probe); /* names and values are 0 in probe */
	if (n < fixed)
		return -EBADMSG;
	switch (type) {
	case JR_HEADER:
		if (n != fixed)
			return -EBADMSG;
		r->hdr.version = le_get32(p);
		r->hdr.kind = le_get32(p + 4);
		r->hdr.gen = le_get64(p + 8);
		r->hdr.chunk_size = le_get64(p + 16);
		memcpy(r->hdr.uuid, p + 24, 16);
		break;
	case JR_END:
		if (n != fixed)
			return -EBADMSG;
		r->count = le_get64(p);
		break;
	case JR_META:
		if (n != fixed)
			return -EBADMSG;
		r->next_ino = le_get64(p);
		r->next_seg = le_get64(p + 8);
		if (r->next_seg > JRNL_MAX_SEG_ID + 1)
			return -EBADMSG;
		break;
	case JR_INODE:
		r->ino = le_get64(p);
		r->attr.mode = le_get32(p + 8);
		r->attr.uid = le_get32(p + 12);
		r->attr.gid = le_get32(p + 16);
		r->attr.rdev = le_get64(p + 20);
		r->attr.size = le_get64(p + 28);
		r->attr.atime_ns = (int64_t)le_get64(p + 36);
		r->attr.mtime_ns = (int64_t)le_get64(p + 44);
		r->attr.ctime_ns = (int64_t)le_get64(p + 52);
		r->name = (const char *)p + fixed;
		r->name_len = (uint32_t)(n - fixed);
		if (r->name_len > 4096 || r->ino == 0 || r->attr.size > JRNL_MAX_FILE_SIZE)
			return -EBADMSG;
		break;
	case JR_LINK:
		r->parent = le_get64(p);
		r->ino = le_get64(p + 8);
		r->name = (const char *)p + fixed;
		r->name_len = (uint32_t)(n - fixed);
		if (r->name_len == 0 || r->name_len > 255 || r->ino == 0 || r->parent == 0)
			return -EBADMSG;
		break;
	case JR_UNLINK:
		r->parent = le_get64(p);
		r->name = (const char *)p + fixed;
		r->name_len = (uint32_t)(n - fixed);
		if (r->name_len == 0 || r->name_len > 255)
			return -EBADMSG;
		break;
	case JR_XATTR_SET:
		r->ino = le_get64(p);
		r->name_len = le_get32(p + 8);
		if (r->name_len == 0 || r->name_len > 255 || r->name_len > n - fixed)
			return -EBADMSG;
		r->name = (const char *)p + fixed;
		r->value = p + fixed + r->name_len;
		r->value_len = (uint32_t)(n - fixed - r->name_len);
		break;
	case JR_XATTR_DEL:
		r->ino = le_get64(p);
		r->name = (const char *)p + fixed;
		r->name_len = (uint32_t)(n - fixed);
		if (r->name_len == 0 || r->name_len > 255)
			return -EBADMSG;
		break;
	case JR_CHUNK_LOC:
	case JR_CHUNK_OVL:
		if (type == JR_CHUNK_LOC ? n != fixed : n == fixed || n - fixed > JRNL_MAX_OVL_BITMAP)
			return -EBADMSG;
		if (type == JR_CHUNK_OVL) {
			r->value = p + fixed;
			r->value_len = (uint32_t)(n - fixed);
		}
		r->ino = le_get64(p);
		r->chunk = le_get64(p + 8);
		seg = le_get64(p + 16); /* 64 bits on the wire, 32 in struct chunk_loc */
		r->loc.seg_id = (uint32_t)seg;
		r->loc.off = le_get64(p + 24);
		r->loc.len = le_get32(p + 32);
		r->loc.crc = le_get32(p + 36);
		r->loc.dev = (uint16_t)le_get32(p + 40);
		r->loc.flags = (uint16_t)(le_get32(p + 40) >> 16);
		r->loc.gen = le_get32(p + 44);
		if (seg == 0 || (r->loc.flags & ~LOC_F_ALL) || seg > JRNL_MAX_SEG_ID ||
		    r->chunk >= JRNL_MAX_CHUNKS || r->loc.len > JRNL_MAX_LOC_LEN ||
		    r->loc.off > UINT64_MAX - r->loc.len)
			return -EBADMSG;
		break;
	case JR_CHUNK_DIRTY:
	case JR_CHUNK_PART:
		if (n != fixed)
			return -EBADMSG;
		r->ino = le_get64(p);
		r->chunk = le_get64(p + 8);
		if (r->chunk >= JRNL_MAX_CHUNKS)
			return -EBADMSG;
		break;
	case JR_CHUNK_ABSENT:
		if (n != fixed)
			return -EBADMSG;
		r->ino = le_get64(p);
		r->chunk = le_get64(p + 8);
		r->count = le_get64(p + 16);
		if (r->chunk >= JRNL_MAX_CHUNKS || r->count > JRNL_MAX_CHUNKS - r->chunk)
			return -EBADMSG;
		break;
	case JR_SEG_ADD:
		if (n != fixed)
			return -EBADMSG;
		r->seg.id = le_get64(p);
		r->seg.len = le_get64(p + 8);
		r->seg.payload = le_get64(p + 16);
		r->seg.dev = le_get32(p + 24);
		r->seg.store = p[28];
		if (r->seg.id == 0 || r->seg.id > JRNL_MAX_SEG_ID || r->seg.store > 1)
			return -EBADMSG;
		break;
	case JR_SEG_DEL:
		if (n != fixed)
			return -EBADMSG;
		r->seg.id = le_get64(p);
		if (r->seg.id == 0 || r->seg.id > JRNL_MAX_SEG_ID)
			return -EBADMSG;
		break;
	case JR_EXTENT:
		if (n != fixed)
			return -EBADMSG;
		r->ino = le_get64(p);
		r->ext.id = le_get64(p + 8);
		r->ext.size = le_get64(p + 16);
		r->ext.dev = le_get32(p + 24);
		r->ext.flags = le_get32(p + 28);
		if (r->ino == 0 || r->ext.id == 0 || r->ext.size > JRNL_MAX_FILE_SIZE ||
		    r->ext.dev >= 64 || (r->ext.flags & ~JEXT_ALL))
			return -EBADMSG;
		break;
	case JR_EXTENT_CRC:
		r->ino = le_get64(p);
		r->chunk = le_get64(p + 8);
		r->value = p + fixed;
		r->value_len = (uint32_t)(n - fixed);
		if (r->ino == 0 || r->value_len == 0 || r->value_len % 4 ||
		    r->value_len > 4 * JRNL_EXT_CRCS_MAX ||
		    r->chunk >= JRNL_MAX_FILE_SIZE / JRNL_EXT_BLOCK)
			return -EBADMSG;
		break;
	}
	return 0;
}

int jrnl_rec_fits(const struct jrec *r, uint64_t chunk_size)
{
	uint64_t max = chunk_size ? JRNL_MAX_FILE_SIZE / chunk_size : JRNL_MAX_CHUNKS;
	switch (r->type) {
	case JR_CHUNK_LOC:
	case JR_CHUNK_OVL:
	case JR_CHUNK_DIRTY:
	case JR_CHUNK_PART:
		return r->chunk < max;
	case JR_CHUNK_ABSENT:
		return r->chunk < max && r->count <= max - r->chunk;
	default:
		return 1;
	}
}

size_t jrnl_encoded_size(const struct jrec *r)
{
	return FRAME + payload_size(r);
}

/* Fill len and crc of a frame whose type and payload are in place. */
static void seal_frame(uint8_t *buf, size_t total)
{
	uint8_t *p = buf;
	uint32_t crc;
	put32(&p, (uint32_t)(total - 8));
	crc = crc32c(0, buf, 4);
	crc = crc32c(crc, buf + 8, total - 8);
	put32(&p, crc);
}

size_t jrnl_encode(const struct jrec *r, uint8_t *buf)
{
	size_t total = jrnl_encoded_size(r);
	buf[8] = r->type;
	encode_payload(r, buf + FRAME);
	seal_frame(buf, total);
	return total;
}

uint8_t *jrnl_encode_tx(const struct jrec *rs, int n, size_t *len)
{
	size_t total = FRAME;
	uint8_t *buf, *p;

	if (n < 1)
		return NULL;
	if (n == 1) {
		total = jrnl_encoded_size(&rs[0]);
		if ((buf = malloc(total)))
			*len = jrnl_encode(&rs[0], buf);
		return buf;
	}
	for (int i = 0; i < n; i++)
		total += 5 + payload_size(&rs[i]);
	if (!(buf = malloc(total)))
		return NULL;
	buf[8] = JR_TX;
	p = buf + FRAME;
	for (int i = 0; i < n; i++) {
		size_t ps = payload_size(&rs[i]);
		put32(&p, (uint32_t)(1 + ps));
		*p++ = rs[i].type;
		encode_payload(&rs[i], p);
		p += ps;
	}
	seal_frame(buf, total);
	*len = total;
	return buf;
}

/* Decode the inner record of a JR_TX at *p (before end) into r and step past
 * it. Only data records may be inside: a header, an end mark or a nested TX
 * in a transaction is a bad record (its crc can still be valid). */
static int next_inner(const uint8_t **p, const uint8_t *end, struct jrec *r)
{
	uint32_t il;
	uint8_t type;

	if (end - *p < 5)
		return -EBADMSG;
	il = le_get32(*p);
	type = (*p)[4];
	if (il < 1 || il > (size_t)(end - *p - 4) || type == JR_TX || type == JR_HEADER ||
	    type == JR_END || decode_payload(type, *p + 5, il - 1, r) < 0)
		return -EBADMSG;
	*p += 4 + il;
	return 0;
}

ssize_t jrnl_decode(const uint8_t *buf, size_t avail, struct jrec *r)
{
	uint32_t len, crc;

	if (avail < 8)
		return 0;
	len = le_get32(buf);
	if (len < 1 || len > JRNL_MAX_RECORD)
		return -EBADMSG;
	if (avail < 8 + (size_t)len)
		return 0;
	crc = crc32c(0, buf, 4);
	crc = crc32c(crc, buf + 8, len);
	if (crc != le_get32(buf + 4))
		return -EBADMSG;
	if (buf[8] == JR_TX) {
		/* validate the inner records now, so a TX applies wholly or not at all */
		const uint8_t *p = buf + FRAME, *end = buf + 8 + len;
		struct jrec inner;
		int count = 0;
		while (p < end) {
			if (next_inner(&p, end, &inner) < 0)
				return -EBADMSG;
			count++;
		}
		if (count == 0)
			return -EBADMSG;
		memset(r, 0, sizeof(*r));
		r->type = JR_TX;
		r->count = (uint64_t)count;
	} else if (decode_payload(buf[8], buf + FRAME, len - 1, r) < 0) {
		return -EBADMSG;
	}
	return (ssize_t)(8 + len);
}

int jrnl_for_each_in(const uint8_t *framed, size_t framed_len, const struct jrec *outer,
		     jrnl_rec_fn fn, void *arg)
{
	const uint8_t *p = framed + FRAME, *end = framed + framed_len;
	struct jrec r;
	int ret;

	if (outer->type != JR_TX)
		return fn(arg, outer);
	while (p < end) {
		if (next_inner(&p, end, &r) < 0)
			return -EBADMSG;
		if ((ret = fn(arg, &r)) != 0)
			return ret;
	}
	return 0;
}
