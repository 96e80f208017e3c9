/*
 * seg_commit — one commit sequence for a new segment, spill's and
 * compaction's (see seg_commit.h).
 *
 * DESIGN
 * - Order: segtab_commit (journal synced, segment durable, registered),
 *   then chunk by chunk under its inode lock: the location set, the chunk
 *   journaled, and only then the old record's bytes released. A chunk the
 *   journal refused gets its location (and, spilled, its chain and state)
 *   back and the new record's bytes are released: nothing points at them.
 * - Which chunks move. Spill (from.seg_id 0): a chunk still SPILLING at the
 *   generation copied; an overlay record is pushed on its chain
 *   (chain_spill_commit_locked), a whole one replaces base and chain (not
 *   while writes over the chain are in flight: they hold it), the chunk
 *   HOT_CLEAN. A chunk written meanwhile goes back to HOT_DIRTY. Compaction:
 *   the record still pointed at (the base, or an overlay of the chain),
 *   not while RESTORING (a reader is on the old copy: it stays live there);
 *   a HOT_DIRTY or SPILLING chunk still pointing at it holds it as a kept
 *   copy or chain base (index.h) and moves too.
 * - State changes go through chunk_set_state (index/chunk_state.c).
 */
#include "tier/spill/seg_commit.h"
#include "tier/tier_i.h"

#include <errno.h>
#include <stdlib.h>

/* Point slot (a chunk's base or one of its overlays) at `to` and journal
 * chunk c: 0 and *was the record it pointed at (the caller releases it),
 * or -EIO: slot as it was, to's bytes released. */
static int point_locked(struct tier *t, struct inode *in, uint64_t c, struct chunk_loc *slot,
			const struct chunk_loc *to, struct chunk_loc *was)
{
	*was = *slot;
	*slot = *to;
	if (idx_journal_chunk_locked(t->idx, in, c, 0) < 0) {
		*slot = *was;
		segtab_release_bytes(t->segtab, to->seg_id, to->len);
		return -EIO;
	}
	return 0;
}

/* Spill: 1 when chunk c now points at the new record r (to). */
static int spill_one_locked(struct tier *t, struct seg_commit_rec *r, const struct chunk_loc *to)
{
	struct inode *in = r->in;
	struct chunk *ch = &in->chunks[r->c];
	int same = ch->state == CHUNK_SPILLING && ch->gen == r->e.gen;
	uint64_t *bits = r->bits;

	r->bits = NULL;
	if (same && bits) {
		/* an overlay: pushed on the chain (journaled there) */
		int ret = chain_spill_commit_locked(t, in, r->c, &r->e, to->seg_id, to->dev, bits);
		if (ret < 0 && in->chunks[r->c].state == CHUNK_SPILLING)
			chunk_set_state(in, r->c, CHUNK_HOT_DIRTY);
		return ret == 0;
	}
	if (same && !(ch->chain && ch->chain->wr)) {
		/* whole: the new record replaces the chunk's chain, which is
		 * let go once the journal says so */
		struct chunk old = {.chain = ch->chain};
		ch->chain = NULL;
		chunk_set_state(in, r->c, CHUNK_HOT_CLEAN);
		if (point_locked(t, in, r->c, &ch->loc, to, &old.loc) < 0) {
			/* not recorded: the RAM copy stays the only one */
			ch->chain = old.chain;
			chunk_set_state(in, r->c, CHUNK_HOT_DIRTY);
			return 0;
		}
		chain_forget_cold(t, &old); /* the old base and overlays */
		return 1;
	}
	/* rewritten meanwhile (or being written) */
	segtab_release_bytes(t->segtab, to->seg_id, to->len);
	free(bits);
	if (ch->state == CHUNK_SPILLING)
		chunk_set_state(in, r->c, CHUNK_HOT_DIRTY);
	return 0;
}

/* Compaction: 1 when chunk c now points at the new record (to) instead of
 * the one r copied. Only that very record moves: a chunk rewritten,
 * truncated or unlinked meanwhile had its old bytes released by whoever
 * changed it. */
static int compact_one_locked(struct tier *t, struct seg_commit_rec *r, const struct chunk_loc *to)
{
	struct inode *in = r->in;
	struct chunk *ch = r->c < in->nchunks ? &in->chunks[r->c] : NULL;
	int i = ch ? chunk_rec_at(ch, r->from.seg_id, r->from.off) : -2;
	struct chunk_loc *slot = NULL, was;

	if (i >= 0 && ch->state != CHUNK_RESTORING)
		slot = &ch->chain->rec[i].loc; /* an overlay moves the same way */
	else if (i == -1 && (ch->state == CHUNK_COLD || ch->state == CHUNK_HOT_CLEAN ||
			     ch->state == CHUNK_HOT_DIRTY || ch->state == CHUNK_SPILLING ||
			     (ch->chain && ch->state != CHUNK_RESTORING)))
		slot = &ch->loc; /* a v1 payload may have gained a map: len too */
	if (!slot) {
		segtab_release_bytes(t->segtab, to->seg_id, to->len);
		return 0;
	}
	if (point_locked(t, in, r->c, slot, to, &was) < 0)
		return 0; /* not recorded: it stays in the old segment */
	segtab_release_bytes(t->segtab, was.seg_id, was.len);
	return 1;
}

int seg_commit(struct tier *t, struct seg_writer *w, uint64_t id, struct seg_commit_rec *v,
	       size_t n, const struct seg_commit_hooks *h)
{
	uint64_t payload = 0, len;
	uint32_t dev;
	int ret;

	for (size_t i = 0; i < n; i++)
		payload += v[i].e.len; /* stored bytes: what live counts */
	/* journal synced, segment durable, registered (nothing is committed
	 * once the journal is read-only: no location could be recorded) */
	if ((ret = segtab_commit(t->segtab, w, id, payload, &dev, &len)) < 0)
		return ret;
	if (h && h->durable)
		h->durable(t, h->arg);
	for (size_t i = 0; i < n; i++) {
		struct seg_commit_rec *r = &v[i];
		struct inode *in = r->in;
		struct chunk_loc to = seg_entry_loc(&r->e, id, dev);
		uint32_t drop = 0;
		int moved;

		idx_inode_lock(in);
		moved = r->from.seg_id ? compact_one_locked(t, r, &to) : spill_one_locked(t, r, &to);
		if (moved && h && h->moved)
			drop = h->moved(t, in, r->c);
		idx_inode_wake(in); /* fsync waits for spills */
		idx_inode_unlock(in);
		if (drop)
			inval_async(t, in->ino, r->c * t->chunk_size, drop);
	}
	return 0;
}
