/*
 * gc — segment garbage collection: gc_pick chooses (the evictor thread,
 * through maint_plan), gc_delete and gc_compact do it (the maintenance
 * worker, maint.c, which states the invariants they keep with spills and
 * writers on other threads).
 *
 * DESIGN
 * - A segment whose live bytes reach 0 is deleted: its SEG_DEL record and
 *   the records that moved its chunks away are durable before the store
 *   copy goes (s3 alone: the bucket's copy of the state is pushed first,
 *   one push per batch).
 * - One segment at a time whose live bytes fall below gc_threshold x its
 *   payload is compacted: its live chunks (those still pointing at it) are
 *   copied into a new segment, which is committed the way a spill's is
 *   (seg_commit.c): each chunk is relocated if it still points at the old
 *   record (same segment and offset) and is not RESTORING (that one stays
 *   behind); the
 *   old record's live bytes are released in the same inode-lock section,
 *   else the new copy's are. Its live bytes then reach 0 and a later pick
 *   deletes it. A stopping tier ends a compaction before its new segment
 *   is sealed (-ECANCELED).
 * - A segment that a rewrite would not shrink is marked (gc_no_gain) and
 *   not tried again until more of it dies.
 * - The table's entries change only through segtab's calls (segtab.h).
 * - Lock order: index lock, inode lock, the segment table's lock.
 */
#include "tier/spill/seg_commit.h"
#include "tier/tier_i.h"

#include "common/log.h"
#include "index/journal.h"
#include "tier/segment/segment.h"
#include "tier/store/store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void seg_delete(struct tier *t, uint64_t id)
{
	struct seg_where w;
	int ret;

	if (segtab_where(t->segtab, id, &w) < 0)
		return; /* gone already */
	/* the records moving its chunks away must be durable before it goes */
	if ((ret = segtab_log(t->segtab, id, 1)) == 0 && t->jrnl)
		ret = jrnl_sync(t->jrnl);

	if (ret == 0)
		ret = store_remove(w.st, id, w.dev);
	if (ret == 0 || ret == -ENOENT) {
		segtab_drop(t->segtab, id);
		__atomic_add_fetch(&t->st.segments_deleted, 1, __ATOMIC_RELAXED);
	} else {
		segtab_unbusy(t->segtab, &id, 1);
		log_warn("gc: cannot delete segment %llu: %s", (unsigned long long)id,
			 strerror(-ret));
	}
}

/* Is entry e of segment id still what its chunk points at? */
static int entry_live(struct tier *t, uint64_t id, const struct seg_entry *e, struct inode **out)
{
	struct inode *in = idx_get(t->idx, e->ino);
	int live;

	*out = in;
	if (!in)
		return 0;
	idx_inode_lock(in);
	live = e->chunk < in->nchunks && chunk_rec_at(&in->chunks[e->chunk], id, e->off) >= -1;
	idx_inode_unlock(in);
	return live;
}

/*
 * GC never rewrites a segment it cannot shrink: 1 when the live entries of
 * ents, rewritten, would not make a shorter segment than len bytes.
 */
static int compact_no_gain(struct tier *t, uint64_t id, uint64_t len, const struct seg_entry *ents,
			   uint32_t n)
{
	uint32_t *lens = malloc((n ? n : 1) * 2 * sizeof(*lens)), *dlens = lens + (n ? n : 1), k = 0;
	int ret;

	if (!lens)
		return 0; /* cannot tell: the rewrite itself fails on memory */
	for (uint32_t i = 0; i < n; i++) {
		struct inode *in;
		if (entry_live(t, id, &ents[i], &in)) {
			seg_v3_rec_size(&ents[i], &lens[k], &dlens[k]);
			k++;
		}
		if (in)
			idx_put(t->idx, in);
	}
	ret = k && seg_v3_len(lens, dlens, k) >= len;
	free(lens);
	return ret;
}

/* Copy segment id's live chunks (their data extents, holes stay holes) into
 * a new segment (format v3: a large record's data goes from the read
 * window to the device with no copy when its old record was aligned), then
 * relocate them. 1 when that would not shrink it. */
static int seg_compact(struct tier *t, uint64_t id)
{
	struct seg_entry *ents = NULL;
	struct seg_commit_rec *moved = NULL;
	struct seg_writer *w = NULL;
	uint32_t n = 0, dev;
	uint64_t len, newid = 0;
	size_t nm = 0;
	struct seg_where where;
	struct store *old;
	int ret;

	if ((ret = segtab_where(t->segtab, id, &where)) < 0)
		goto out;
	dev = where.dev;
	len = where.len;
	old = where.st;
	ret = seg_read_manifest(old, id, dev, len, NULL, NULL, &ents, &n);
	if (ret < 0)
		goto out;
	if (compact_no_gain(t, id, len, ents, n)) {
		ret = 1;
		goto out;
	}
	moved = calloc(n ? n : 1, sizeof(*moved));
	if (!moved) {
		ret = -ENOMEM;
		goto out;
	}
	newid = segtab_alloc_id(t->segtab);
	if ((ret = seg_writer_new(t->store, t->uuid, newid, 0, &w)) < 0)
		goto out;
	for (uint32_t i = 0; i < n; i++) {
		struct seg_chunk sc;
		struct inode *in;
		if (__atomic_load_n(&t->stopping, __ATOMIC_ACQUIRE)) {
			ret = -ECANCELED; /* unmount: the old segment stays as it is */
			goto out;
		}
		if (!entry_live(t, id, &ents[i], &in)) {
			if (in)
				idx_put(t->idx, in);
			continue;
		}
		if ((ret = seg_read_chunk(old, id, dev, &ents[i], &sc)) == 0) {
			ret = seg_writer_add_extents(w, ents[i].ino, ents[i].chunk, ents[i].gen,
						     ents[i].chunk_len, sc.ext, sc.next, sc.data,
						     &moved[nm].e);
			if (ret == 0 && (ents[i].flags & SEG_F_OVL))
				seg_writer_mark_overlay(w); /* still one */
			seg_chunk_free(&sc);
		}
		if (ret < 0) {
			idx_put(t->idx, in);
			goto out;
		}
		moved[nm].in = in; /* keeps the ref until relocated */
		moved[nm].c = ents[i].chunk;
		moved[nm].from = seg_entry_loc(&ents[i], id, dev);
		nm++;
	}
	if (nm) {
		ret = seg_commit(t, w, newid, moved, nm, NULL);
		w = NULL;
		if (ret < 0)
			goto out;
		__atomic_add_fetch(&t->st.segments_written, 1, __ATOMIC_RELAXED);
	}
	__atomic_add_fetch(&t->st.segments_compacted, 1, __ATOMIC_RELAXED);
	ret = 0;
out:
	for (size_t i = 0; i < nm; i++)
		idx_put(t->idx, moved[i].in);
	if (w)
		seg_writer_abort(w);
	free(moved);
	free(ents);
	if (ret == -ECANCELED)
		log_debug("gc: compaction of segment %llu cancelled: stopping",
			  (unsigned long long)id);
	else if (ret < 0)
		log_warn("gc: cannot compact segment %llu: %s", (unsigned long long)id,
			 strerror(-ret));
	return ret;
}

size_t gc_pick(struct tier *t, uint64_t *dead, size_t max, uint64_t *compact)
{
	double thr;

	/* the daemon never changes it after mount; the unit tests (test_maint)
	 * lower it while the evictor runs, with an atomic store: relaxed, a
	 * value read once per round */
	__atomic_load(&t->cfg->gc_threshold, &thr, __ATOMIC_RELAXED);
	return segtab_pick_dead(t->segtab, dead, max, thr, compact);
}

/* Is any of ids[0..n) a segment of the bucket's? */
static int in_bucket(struct tier *t, const uint64_t *ids, size_t n)
{
	struct seg_where w;
	for (size_t i = 0; i < n; i++)
		if (!t->cfg->nvme || (segtab_where(t->segtab, ids[i], &w) == 0 && w.store == 1))
			return 1;
	return 0;
}

void gc_delete(struct tier *t, const uint64_t *ids, size_t n)
{
	/* the bucket's copy of the state (s3 alone, s3_state) must stop
	 * referencing those in S3 too (a replacement node recovers from it):
	 * one push for the batch */
	if (n && t->s3st && in_bucket(t, ids, n) &&
	    ((t->jrnl && jrnl_sync(t->jrnl) < 0) || state_s3_push(t) < 0)) {
		segtab_unbusy(t->segtab, ids, n);
		return; /* kept; picked again later */
	}
	for (size_t i = 0; i < n; i++)
		seg_delete(t, ids[i]);
}

void gc_compact(struct tier *t, uint64_t id)
{
	/* not tried again until more of it dies */
	if (seg_compact(t, id) == 1)
		segtab_no_gain(t->segtab, id);
	segtab_unbusy(t->segtab, &id, 1);
	/* its live bytes are now 0 if everything moved: a later pick deletes it */
}
