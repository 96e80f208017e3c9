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
 * Threading: any thread; no lock held or taken but the segment table's.
 */
#include "tier/tier_i.h"

#include "tier/segment.h"
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

static int read_at(struct cold_rec *r, uint64_t off, uint64_t len, int whole,
		   struct seg_chunk *sc)
{
	/* the one place a located record becomes the readers' footer entry */
	struct seg_entry e = seg_loc_entry(r->ino, r->c, &r->loc);

	if (!r->st)
		return -ENOENT;
	return whole ? seg_read_chunk(r->st, r->loc.seg_id, r->dev, &e, sc)
		     : seg_read_part(r->st, r->loc.seg_id, r->dev, &e, off, len, sc);
}

static int cold_read_at(struct tier *t, struct cold_rec *r, uint64_t off, uint64_t len,
			int whole, struct seg_chunk *sc)
{
	int ret = read_at(r, off, len, whole, sc);

	/* moved to s3 since it was located: look it up again */
	if (ret == -ENOENT && (ret = locate(t, r)) == 0)
		ret = read_at(r, off, len, whole, sc);
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
	return cold_read_at(t, r, off, len, 0, sc);
}

int cold_read_whole(struct tier *t, struct cold_rec *r, struct seg_chunk *sc)
{
	return cold_read_at(t, r, 0, 0, 1, sc);
}
