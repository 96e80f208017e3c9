/*
 * cold — reading a record from its cold segment: where the segment is now
 * (located once per read, tier_i.h struct cold_rec), the bytes read and
 * verified, and the errors counted.
 *
 * DESIGN
 * - A read locates its record's segment once (segtab_locate, which notes
 *   the access for demotion) and passes the location down to every read
 *   of it. A segment may move from NVMe to S3 meanwhile: demotion puts the
 *   new copy and relocates the table entry before it deletes the old one,
 *   so a read that finds the segment gone (-ENOENT) locates it once more
 *   and reads again.
 * - A crc mismatch is -EIO to the caller (counted as a crc error), never
 *   wrong bytes; a segment gone for good is -EIO too.
 * - Three ways to read a record: whole, the blocks covering a range (both
 *   into a seg_chunk the caller copies from), or a range straight into
 *   the caller's aligned memory (cold_read_into: no copy for an aligned,
 *   v3, record; segment.h seg_read_into says the contract).
 * Threading: any thread; no lock held or taken but the segment table's.
 */
#include "tier/tier_i.h"

#include "tier/segment/segment.h"
#include "tier/store/store.h"

#include <errno.h>

/* r->loc.seg_id's store and device now; 0, or -ENOENT with r unchanged. */
static int locate(struct tier *t, struct cold_rec *r)
{
	struct store *st;
	uint32_t dev;
	int ret = segtab_locate(t->segtab, r->loc.seg_id, &st, &dev);

	if (ret == 0) {
		r->st = st;
		r->dev = dev;
		r->tier = store_tier(st);
	}
	return ret;
}

void cold_locate(struct tier *t, uint64_t ino, uint64_t c, const struct chunk_loc *l,
		 struct cold_rec *r)
{
	*r = (struct cold_rec){.ino = ino, .c = c, .loc = *l, .tier = STORE_TIER_NVME};
	locate(t, r);
}

/* How a record is read: whole, its blocks covering a range (into a
 * seg_chunk), or a range straight into the caller's memory. */
enum { RD_PART, RD_WHOLE, RD_INTO };

struct rd {
	int how;
	uint64_t off, len;
	struct seg_chunk *sc; /* RD_PART, RD_WHOLE */
	void *dst;	      /* RD_INTO */
	unsigned flags;
	struct seg_into_stat *stat;
};

static int read_at(struct cold_rec *r, const struct rd *q)
{
	/* the one place a located record becomes the readers' footer entry */
	struct seg_entry e = seg_loc_entry(r->ino, r->c, &r->loc);

	if (!r->st)
		return -ENOENT;
	if (q->how == RD_WHOLE)
		return seg_read_chunk(r->st, r->loc.seg_id, r->dev, &e, q->sc);
	if (q->how == RD_PART)
		return seg_read_part(r->st, r->loc.seg_id, r->dev, &e, q->off, q->len, q->sc);
	return seg_read_into(r->st, r->loc.seg_id, r->dev, &e, q->off, q->off + q->len, q->dst,
			     q->flags, q->stat);
}

static int cold_read_at(struct tier *t, struct cold_rec *r, const struct rd *q)
{
	int ret = read_at(r, q);

	/* moved to s3 since it was located: look it up again */
	if (ret == -ENOENT && (ret = locate(t, r)) == 0)
		ret = read_at(r, q);
	if (ret == -EBADMSG) {
		__atomic_add_fetch(&t->st.errors_crc, 1, __ATOMIC_RELAXED);
		ret = -EIO; /* the caller sees an I/O error, never wrong bytes */
	} else if (ret < 0) {
		__atomic_add_fetch(&t->st.errors_io, 1, __ATOMIC_RELAXED);
		if (ret == -ENOENT)
			ret = -EIO; /* the segment is gone: for the reader, an I/O error */
	}
	return ret;
}

int cold_read(struct tier *t, struct cold_rec *r, uint64_t off, uint64_t len,
	      struct seg_chunk *sc)
{
	struct rd q = {.how = RD_PART, .off = off, .len = len, .sc = sc};

	return cold_read_at(t, r, &q);
}

int cold_read_whole(struct tier *t, struct cold_rec *r, struct seg_chunk *sc)
{
	struct rd q = {.how = RD_WHOLE, .sc = sc};

	return cold_read_at(t, r, &q);
}

int cold_read_into(struct tier *t, struct cold_rec *r, uint64_t lo, uint64_t hi, void *dst,
		   unsigned flags, struct seg_into_stat *stat)
{
	struct rd q = {.how = RD_INTO, .off = lo, .len = hi - lo, .dst = dst, .flags = flags,
		       .stat = stat};

	if (hi < lo)
		return -EINVAL;
	return cold_read_at(t, r, &q);
}
