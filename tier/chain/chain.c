/*
 * chain — writes over cold data without restoring it (overlays).
 *
 * DESIGN
 * - A write into a chunk whose bytes are in the cold tier (COLD, or
 *   HOT_CLEAN with a cold copy) does not read the chunk back. The chunk
 *   gets a chain (index.h, struct chunk_chain): its cold copy is the base
 *   record plus up to CHAIN_MAX overlay records, and RAM holds the blocks
 *   (CHAIN_BLK = 4 KiB) the write touched (`have`, partial) — only the
 *   write's first and last block are read first when the write does not
 *   cover them whole. A read takes the blocks RAM holds from the hot file
 *   and the others from the chain: a random reader's range of a COLD chain
 *   is read straight from its records (newest first, each block from the
 *   newest record that holds it: at most CHAIN_MAX + 1 segment reads); a
 *   range of a chunk RAM holds in part is read from the chain into the
 *   hot file first (a fill), then served from it.
 * - Spill what is dirty, not the chunk: a chained chunk whose written
 *   blocks (`dirty`) are fewer than half of it is spilled as an overlay
 *   record of just those blocks (their bytes; the record's own holes mean
 *   nothing, the journaled bitmap says which blocks it holds), pushed on
 *   the chain. A record whose blocks newer records cover wholly is
 *   dropped from the chain (its bytes released). A chunk RAM holds whole
 *   with half of it or more dirty is spilled whole and replaces its chain.
 * - Chains stay short: a chain at CHAIN_MAX (16) records is folded at the
 *   next write or spill: the blocks of all its overlays are read into RAM
 *   and marked dirty, so the next spill writes them as one record that
 *   shadows the rest (bytes moved: the overlays', never more than half a
 *   chunk); when the overlays and the dirty blocks reach half the chunk,
 *   the whole chunk is read and spilled as a new base instead (one chunk
 *   read and written per at least half a chunk of overlays). 16: a reader
 *   pays at most 17 segment reads for a range of a chain, and a stream of
 *   single-block spills folds every 16 spills.
 * - Waits: fills and folds do their reads with the inode lock held (a few
 *   blocks; a fold at most a chunk); a fill waits for the writes in flight
 *   into the chunk (their bytes land in the hot file after the lock is
 *   dropped, so a fill must not write old bytes under them). A restore of a
 *   COLD chain (sequential readers, prefetch, truncate) reads the whole
 *   chain into RAM with the chunk RESTORING, the lock dropped.
 * - Truncate, fallocate and anything else that needs the chunk whole in
 *   RAM makes it so first (restore_make_hot_locked fills it); then the
 *   chunk's change makes the hot file its only copy and the chain goes
 *   (chain_forget_cold, after the journal says so).
 * - The journal (version 2) records a chain as its base (JR_CHUNK_LOC),
 *   each overlay with its bitmap (JR_CHUNK_OVL), and, while written
 *   blocks are only in RAM, JR_CHUNK_PART; one transaction per change.
 *   After a crash with hot_dir kept, the blocks the hot file holds of such
 *   a chunk are taken as written (recover.c); after a reboot they are lost
 *   like any RAM-only bytes.
 * Threading: in->lock held throughout (see tier_i.h for who drops it).
 */
#include "tier/tier_i.h"

#include "common/clock.h"
#include "common/log.h"
#include "tier/segment/segment.h"
#include "tier/store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint32_t blk_hi(uint64_t end)
{
	return (uint32_t)((end + CHAIN_BLK - 1) / CHAIN_BLK);
}

void chain_view_of(const struct inode *in, uint64_t c, struct chain_view *v)
{
	const struct chunk *ch = &in->chunks[c];
	v->ino = in->ino;
	v->c = c;
	v->base = ch->loc;
	v->k = ch->chain;
}

/* Bytes [a, z) of record l of v's chunk into dst (holes as zeros); *tier
 * (may be NULL) gets the cold tier it came from. */
static int rec_read(struct tier *t, const struct chain_view *v, const struct chunk_loc *l,
		    uint64_t a, uint64_t z, uint8_t *dst, int *tier)
{
	struct cold_rec r;
	struct seg_chunk sc;
	int ret;

	cold_locate(t, v->ino, v->c, l, &r);
	ret = cold_read(t, &r, a, z - a, &sc);
	if (tier)
		*tier = r.tier;
	if (ret < 0)
		return ret;
	seg_chunk_copy(&sc, a, (uint32_t)(z - a), dst);
	seg_chunk_free(&sc);
	return 0;
}

/*
 * Chunk bytes [lo, hi) of the chain v into dst: each block from the newest
 * record that holds it, else from the base. Records are read newest first,
 * a run of blocks at a time, only for blocks no newer record gave.
 */
int chain_view_read(struct tier *t, const struct chain_view *v, uint64_t lo, uint64_t hi,
		    uint8_t *dst, int *tier)
{
	uint32_t b0 = (uint32_t)(lo / CHAIN_BLK), b1 = blk_hi(hi), nb = b1 - b0;
	uint64_t *done = calloc((nb + 63) / 64, sizeof(uint64_t));
	int ret = 0;

	if (!done)
		return -ENOMEM;
	for (int i = v->k->nrec - 1; i >= 0 && ret == 0; i--) {
		const struct chain_rec *o = &v->k->rec[i];
		for (uint32_t b = b0; b < b1 && ret == 0;) {
			if (!chain_test(o->bits, b) || chain_test(done, b - b0)) {
				b++;
				continue;
			}
			uint32_t z = b;
			while (z < b1 && chain_test(o->bits, z) && !chain_test(done, z - b0))
				z++;
			uint64_t a = (uint64_t)b * CHAIN_BLK, y = (uint64_t)z * CHAIN_BLK;
			a = a > lo ? a : lo;
			y = y < hi ? y : hi;
			ret = rec_read(t, v, &o->loc, a, y, dst + (a - lo), tier);
			chain_set(done, b - b0, z - b0, 1);
			b = z;
		}
	}
	/* the base: the runs no overlay gave */
	for (uint32_t b = b0; b < b1 && ret == 0;) {
		if (chain_test(done, b - b0)) {
			b++;
			continue;
		}
		uint32_t z = b;
		while (z < b1 && !chain_test(done, z - b0))
			z++;
		uint64_t a = (uint64_t)b * CHAIN_BLK, y = (uint64_t)z * CHAIN_BLK;
		a = a > lo ? a : lo;
		y = y < hi ? y : hi;
		ret = rec_read(t, v, &v->base, a, y, dst + (a - lo), tier);
		b = z;
	}
	free(done);
	return ret;
}

int chain_read_cold_locked(struct tier *t, struct inode *in, uint64_t c, uint64_t lo,
			   uint64_t hi, void *dst, int *tier)
{
	struct chain_view v;
	int ret;

	chain_view_of(in, c, &v);
	idx_inode_unlock(in);
	ret = chain_view_read(t, &v, lo, hi, dst, tier);
	idx_inode_lock(in);
	return ret;
}

int chain_pwrite_full(int fd, const uint8_t *p, size_t len, uint64_t off)
{
	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* Blocks [b0, b1) of chunk c that RAM does not hold, read from the chain
 * and written into the hot file (cut at the file's end), then held. The
 * caller saw no write in flight into the chunk. */
static int fill_blocks_locked(struct tier *t, struct inode *in, uint64_t c, uint32_t b0,
			      uint32_t b1)
{
	struct chunk_chain *k = in->chunks[c].chain;
	uint32_t clen = tier_chunk_len(t, in->size, c);
	uint64_t base = c * t->chunk_size;
	struct chain_view v;
	uint8_t *buf;
	int fd, ret = 0;

	while (b0 < b1 && chain_test(k->have, b0))
		b0++;
	while (b1 > b0 && chain_test(k->have, b1 - 1))
		b1--;
	if (b0 == b1)
		return 0;
	if ((uint64_t)b0 * CHAIN_BLK >= clen) {
		chain_set(k->have, b0, b1, 1); /* past the end: zeros either way */
		return 0;
	}
	fd = hot_fd_get_locked(t->hot, in);
	if (fd < 0)
		return fd;
	if (!(buf = seg_buf_alloc((size_t)(b1 - b0) * CHAIN_BLK))) {
		hot_fd_put_locked(t->hot, in);
		return -ENOMEM;
	}
	chain_view_of(in, c, &v);
	ret = chain_view_read(t, &v, (uint64_t)b0 * CHAIN_BLK, (uint64_t)b1 * CHAIN_BLK, buf, NULL);
	for (uint32_t b = b0; b < b1 && ret == 0;) {
		if (chain_test(k->have, b)) {
			b++;
			continue;
		}
		uint32_t z = b;
		while (z < b1 && !chain_test(k->have, z))
			z++;
		uint64_t a = (uint64_t)b * CHAIN_BLK, y = (uint64_t)z * CHAIN_BLK;
		y = y < clen ? y : clen;
		if (a < y) {
			ret = chain_pwrite_full(fd, buf + (a - (uint64_t)b0 * CHAIN_BLK), y - a, base + a);
			if (ret == 0)
				__atomic_add_fetch(&t->st.ovl_fill_bytes, y - a, __ATOMIC_RELAXED);
		}
		if (ret == 0)
			chain_set(k->have, b, z, 1);
		b = z;
	}
	seg_buf_free(buf);
	hot_account_locked(t->hot, in);
	hot_fd_put_locked(t->hot, in);
	if (ret < 0)
		log_err("overlay: inode %llu chunk %llu: reading its chain: %s",
			(unsigned long long)in->ino, (unsigned long long)c, strerror(-ret));
	return ret;
}

/* Wait until no write is in flight into chunk c. 1 when the chunk is
 * still one RAM holds in part (else the caller looks again). */
static int wait_writers_locked(struct inode *in, uint64_t c)
{
	while (chain_partial(&in->chunks[c]) && in->chunks[c].chain->wr)
		idx_inode_wait(in);
	return chain_partial(&in->chunks[c]) && in->chunks[c].state != CHUNK_COLD &&
	       in->chunks[c].state != CHUNK_RESTORING;
}

int chain_fill_locked(struct tier *t, struct inode *in, uint64_t c, uint64_t lo, uint64_t hi)
{
	struct chunk_chain *k;
	int ret = 0;

	for (;;) {
		k = in->chunks[c].chain;
		if (!chain_partial(&in->chunks[c]))
			return 0;
		if (chain_all(k->have, (uint32_t)(lo / CHAIN_BLK), blk_hi(hi)))
			goto whole;
		if (wait_writers_locked(in, c))
			break;
		if (in->chunks[c].state == CHUNK_COLD || in->chunks[c].state == CHUNK_RESTORING)
			return 0; /* dropped meanwhile: the caller restores or reads it */
	}
	ret = fill_blocks_locked(t, in, c, (uint32_t)(lo / CHAIN_BLK), blk_hi(hi));
whole:
	/* reads filled it all: RAM holds the chunk whole again (else the file
	 * is never all in RAM: no passthrough, tier_open.c all_hot_locked) */
	k = in->chunks[c].chain;
	if (ret == 0 && chain_partial(&in->chunks[c]) &&
	    chain_all(k->have, 0, blk_hi(tier_chunk_len(t, in->size, c))))
		k->partial = 0;
	return ret;
}

/* A chain at CHAIN_MAX records: see DESIGN. The chunk is HOT_* or
 * SPILLING; on success it is HOT_DIRTY (journaled) with the overlays'
 * blocks (or all of it) dirty, and the next spill shadows the overlays. */
static int chain_fold_locked(struct tier *t, struct inode *in, uint64_t c)
{
	struct chunk_chain *k = in->chunks[c].chain;
	uint32_t clen = tier_chunk_len(t, in->size, c), nb = blk_hi(clen);
	uint32_t w = chain_words(t->chunk_size);
	uint64_t *u = calloc(w, sizeof(uint64_t));
	int ret = 0, was_dirty;

	if (!u)
		return -ENOMEM;
	for (uint16_t i = 0; i < k->nrec; i++)
		for (uint32_t j = 0; j < w; j++)
			u[j] |= k->rec[i].bits[j];
	int done = 1; /* folded already: the next spill shadows them all */
	for (uint32_t j = 0; j < w; j++)
		done &= (u[j] & ~k->dirty[j]) == 0;
	if (done) {
		free(u);
		return 0;
	}
	for (uint32_t j = 0; j < w; j++)
		u[j] |= k->dirty[j];
	if ((uint64_t)chain_count(u, k->nbits) * 2 >= nb) {
		chain_set(u, 0, nb, 1); /* fold into a new base */
		ret = fill_blocks_locked(t, in, c, 0, nb);
		if (ret == 0)
			k->partial = 0;
	} else {
		for (uint32_t b = 0; b < nb && ret == 0;) {
			if (!chain_test(u, b)) {
				b++;
				continue;
			}
			uint32_t z = b;
			while (z < nb && chain_test(u, z))
				z++;
			ret = fill_blocks_locked(t, in, c, b, z);
			b = z;
		}
	}
	k = in->chunks[c].chain;
	if (ret == 0) {
		was_dirty = chain_any(k->dirty, 0, k->nbits);
		for (uint32_t j = 0; j < w; j++)
			k->dirty[j] |= u[j];
		/* a spill in flight sees the new generation and keeps nothing */
		chunk_set_state(in, c, CHUNK_HOT_DIRTY);
		in->chunks[c].gen++;
		if (!was_dirty)
			idx_journal_chunk_locked(t->idx, in, c, 0);
		__atomic_add_fetch(&t->st.ovl_folds, 1, __ATOMIC_RELAXED);
	}
	free(u);
	return ret;
}

int chain_write_begin_locked(struct tier *t, struct inode *in, uint64_t c, uint64_t lo,
			     uint64_t hi)
{
	struct chunk *ch;
	struct chunk_chain *k;
	int ret;

	for (;;) {
		ch = &in->chunks[c];
		if (!t->cfg->cold_writes || !t->store || !ch->loc.seg_id)
			return 0;
		if (ch->state == CHUNK_RESTORING) {
			idx_inode_wait(in);
			continue;
		}
		if (ch->state != CHUNK_COLD && !ch->chain && ch->state != CHUNK_HOT_CLEAN)
			return 0;
		int fresh = !ch->chain;
		if (!(k = idx_chain_get(t->idx, in, c)))
			return -ENOMEM;
		if (fresh && ch->state == CHUNK_HOT_CLEAN)
			k->partial = 0; /* RAM holds it whole */
		if (ch->state == CHUNK_COLD) {
			/* nothing of it in RAM: the hot file has a hole there */
			uint32_t w = chain_words(t->chunk_size);
			k->partial = 1;
			memset(k->have, 0, w * sizeof(uint64_t));
			memset(k->dirty, 0, w * sizeof(uint64_t));
			chunk_set_state(in, c, CHUNK_HOT_CLEAN);
		}
		if (k->nrec == CHAIN_MAX && chain_partial(ch) && k->wr) {
			idx_inode_wait(in);
			continue;
		}
		if (k->nrec == CHAIN_MAX && (ret = chain_fold_locked(t, in, c)) < 0)
			return ret;
		ch = &in->chunks[c];
		k = ch->chain;
		if (k->partial) {
			/* a block the write covers only in part keeps its old bytes */
			uint32_t bl = (uint32_t)(lo / CHAIN_BLK), bh = (uint32_t)((hi - 1) / CHAIN_BLK);
			int need = (lo % CHAIN_BLK && !chain_test(k->have, bl)) ||
				   (hi % CHAIN_BLK && !chain_test(k->have, bh));
			if (need && k->wr) {
				idx_inode_wait(in);
				continue;
			}
			if (need && lo % CHAIN_BLK && (ret = fill_blocks_locked(t, in, c, bl, bl + 1)) < 0)
				return ret;
			if (need && hi % CHAIN_BLK && (ret = fill_blocks_locked(t, in, c, bh, bh + 1)) < 0)
				return ret;
		}
		break;
	}
	ch = &in->chunks[c];
	ch->chain->wr++;
	ch->pins++;
	__atomic_add_fetch(&t->st.ovl_writes, 1, __ATOMIC_RELAXED);
	return 1;
}

void chain_write_end_locked(struct tier *t, struct inode *in, uint64_t c, uint64_t lo,
			    uint64_t hi, uint64_t done)
{
	struct chunk *ch = &in->chunks[c];
	struct chunk_chain *k = ch->chain;

	ch->pins--;
	if (!k) { /* cannot be: chains are not let go under writers */
		log_err("overlay: inode %llu chunk %llu lost its chain under a write",
			(unsigned long long)in->ino, (unsigned long long)c);
		abort();
	}
	k->wr--;
	if (done > lo) {
		uint32_t b0 = (uint32_t)(lo / CHAIN_BLK), b1 = blk_hi(done);
		int was_dirty = chain_any(k->dirty, 0, k->nbits);
		if (done < hi && done % CHAIN_BLK && k->partial && !chain_test(k->have, b1 - 1) &&
		    (uint64_t)(b1 - 1) * CHAIN_BLK >= lo) {
			/* a short write ended inside a block it did not cover
			 * whole: its tail keeps the old bytes (from the chain) */
			uint8_t *buf = seg_buf_alloc(CHAIN_BLK);
			struct chain_view v;
			uint64_t bs = (uint64_t)(b1 - 1) * CHAIN_BLK;
			uint32_t clen = tier_chunk_len(t, in->size, c);
			chain_view_of(in, c, &v);
			if (buf && chain_view_read(t, &v, bs, bs + CHAIN_BLK, buf, NULL) == 0 && done < clen)
				chain_pwrite_full(in->hot_fd, buf + (done - bs),
					    (clen < bs + CHAIN_BLK ? clen : bs + CHAIN_BLK) - done,
					    c * t->chunk_size + done);
			seg_buf_free(buf);
		}
		chain_set(k->have, b0, b1, 1);
		chain_set(k->dirty, b0, b1, 1);
		/* written all over (a sequential rewrite): RAM holds it whole, and
		 * the next spill replaces the chain with one record */
		uint64_t clen = tier_chunk_len(t, in->size, c); /* the size before this write */
		if (k->partial && chain_all(k->have, 0, blk_hi(clen > done ? clen : done)))
			k->partial = 0;
		chunk_set_state(in, c, CHUNK_HOT_DIRTY);
		ch->gen++;
		chunk_touch(ch, (uint32_t)idx_tick(t->idx));
		if (!was_dirty)
			idx_journal_chunk_locked(t->idx, in, c, 0);
	}
	idx_inode_wake(in);
}

void chain_forget_cold(struct tier *t, struct chunk *ch)
{
	struct chunk_chain *k = ch->chain;
	for (uint16_t i = 0; k && i < k->nrec; i++)
		segtab_release_bytes(t->segtab, k->rec[i].loc.seg_id, k->rec[i].loc.len);
	idx_chain_free(ch);
	segtab_release_chunk(t->segtab, ch);
}

/* Chunks [first,last] were written: new generation, dirty, recently used. */
void tier_mark_dirty_locked(struct tier *t, struct inode *in, uint64_t first, uint64_t last)
{
	uint64_t tick = idx_tick(t->idx);
#if !defined(NDEBUG) || defined(SPW_CHECK_STATES)
	/* a chunk past EOF is a hole: none is ever written (issue 39) */
	if (first <= last && first < in->nchunks && first * t->chunk_size >= in->size) {
		log_err("inode %llu: chunk %llu marked dirty past EOF (size %llu)",
			(unsigned long long)in->ino, (unsigned long long)first,
			(unsigned long long)in->size);
		abort();
	}
#endif
	for (uint64_t c = first; c <= last && c < in->nchunks; c++) {
		struct chunk *ch = &in->chunks[c], old = *ch;
		if (ch->chain && ch->chain->wr) {
			/* writes over it in flight hold its chain: every block is
			 * dirty now (RAM holds it whole), the next spill after
			 * them replaces the chain */
			int was = chain_any(ch->chain->dirty, 0, ch->chain->nbits);
			ch->chain->partial = 0;
			chain_set(ch->chain->dirty, 0, ch->chain->nbits, 1);
			chunk_set_state(in, c, CHUNK_HOT_DIRTY);
			ch->gen++;
			chunk_touch(ch, (uint32_t)tick);
			if (!was)
				idx_journal_chunk_locked(t->idx, in, c, 0);
			continue;
		}
		/* a chain's records said "written over it": that changes too; a
		 * kept copy (index.h) is the journal's location until now */
		int was_dirty = (ch->state == CHUNK_HOT_DIRTY || ch->state == CHUNK_SPILLING) &&
				!ch->chain && !ch->loc.seg_id;
		ch->chain = NULL; /* the hot file holds the chunk whole now */
		chunk_set_state(in, c, CHUNK_HOT_DIRTY);
		ch->gen++;
		chunk_touch(ch, (uint32_t)tick);
		/* no cold copy now (a spill in flight sees the new gen), so the
		 * record says dirty: with the copy still set it named the old
		 * location, whose segment GC then deleted - a kill -9 later
		 * found the chunk in a segment that was gone (fsstress) */
		ch->loc.seg_id = 0;
		ch->loc.len = 0;
		/* journaled before the old cold copy is let go: GC may delete its
		 * segment as soon as its live bytes drop */
		if (!was_dirty)
			idx_journal_chunk_locked(t->idx, in, c, 0);
		chain_forget_cold(t, &old); /* base and overlays alike */
	}
}

int chain_spill_plan_locked(struct tier *t, struct inode *in, uint64_t c, uint32_t len,
			    uint64_t **bits)
{
	struct chunk *ch = &in->chunks[c];
	struct chunk_chain *k = ch->chain;
	uint32_t nb = blk_hi(len), w = chain_words(t->chunk_size), d;
	int ret;

	*bits = NULL;
	if (!k)
		return 0;
	if (k->nrec == CHAIN_MAX && k->partial && k->wr)
		return -EAGAIN; /* a fold reads under writes in flight: later */
	if (k->nrec == CHAIN_MAX && (ret = chain_fold_locked(t, in, c)) < 0)
		return ret; /* stays dirty: a chunk RAM holds in part is never spilled whole */
	ch = &in->chunks[c];
	k = ch->chain;
	if (ch->state != CHUNK_HOT_DIRTY)
		return -EAGAIN;
	d = chain_count(k->dirty, k->nbits);
	if (d == 0) {
		chunk_set_state(in, c, CHUNK_HOT_CLEAN); /* RAM and the chain agree */
		return -EAGAIN;
	}
	if (!k->partial && ((uint64_t)d * 2 >= nb || k->nrec == CHAIN_MAX))
		return 0;
	if (!(*bits = malloc(w * sizeof(uint64_t))))
		return -ENOMEM;
	memcpy(*bits, k->dirty, w * sizeof(uint64_t));
	chain_set(*bits, nb, k->nbits, 0); /* past the end: nothing to hold */
	return 1;
}

int chain_spill_commit_locked(struct tier *t, struct inode *in, uint64_t c,
			      const struct seg_entry *e, uint64_t seg, uint32_t dev, uint64_t *bits)
{
	struct chunk *ch = &in->chunks[c];
	struct chunk_chain *k = ch->chain;
	uint32_t w = chain_words(t->chunk_size);
	struct chain_rec gone[CHAIN_MAX];
	int ngone = 0, covered[CHAIN_MAX], ret;

	/* records the new one covers wholly go (their bytes once journaled) */
	for (uint16_t i = 0; i < k->nrec; i++) {
		covered[i] = 1;
		for (uint32_t j = 0; j < w && covered[i]; j++)
			covered[i] = (k->rec[i].bits[j] & ~bits[j]) == 0;
		ngone += covered[i];
	}
	if (k->nrec - ngone == CHAIN_MAX) {
		/* no room: the chunk stays dirty, the next write or spill folds */
		segtab_release_bytes(t->segtab, seg, e->len);
		free(bits);
		return -ENOSPC;
	}
	ngone = 0;
	for (uint16_t i = 0, j = 0; i < k->nrec; i++) {
		if (covered[i])
			gone[ngone++] = k->rec[i];
		else
			k->rec[j++] = k->rec[i];
	}
	k->nrec = (uint16_t)(k->nrec - ngone);
	/* the bitmaps of the records gone are free slots again */
	for (int i = 0; i < ngone; i++)
		k->rec[k->nrec + i].bits = gone[i].bits;
	struct chain_rec *o = &k->rec[k->nrec];
	o->loc = seg_entry_loc(e, seg, dev);
	memcpy(o->bits, bits, w * sizeof(uint64_t));
	k->nrec++;
	memset(k->dirty, 0, w * sizeof(uint64_t));
	chunk_set_state(in, c, CHUNK_HOT_CLEAN);
	ret = idx_journal_chunk_locked(t->idx, in, c, 0);
	if (ret < 0) {
		/* not recorded (the journal is read-only now): RAM stays the
		 * only copy of the blocks, and the records the journal still
		 * names keep their bytes live (no GC under them) */
		k->nrec--;
		memcpy(k->dirty, bits, w * sizeof(uint64_t));
		chunk_set_state(in, c, CHUNK_HOT_DIRTY);
		segtab_release_bytes(t->segtab, seg, e->len);
	} else {
		for (int i = 0; i < ngone; i++)
			segtab_release_bytes(t->segtab, gone[i].loc.seg_id, gone[i].loc.len);
		__atomic_add_fetch(&t->st.ovl_spills, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&t->st.ovl_bytes, e->len, __ATOMIC_RELAXED);
	}
	free(bits);
	return ret;
}

int tier_grow_locked(struct tier *t, struct inode *in, uint64_t first, uint64_t last,
		     uint64_t size)
{
	uint64_t old = (in->size + t->chunk_size - 1) / t->chunk_size, tick = idx_tick(t->idx);
	uint64_t from = first > old ? first : old;

	if (old > first)
		tier_mark_dirty_locked(t, in, first, old - 1 < last ? old - 1 : last);
	in->size = size;
	for (uint64_t c = from; c <= last && c < in->nchunks; c++) {
		struct chunk *ch = &in->chunks[c];
		if (ch->state != CHUNK_ABSENT) {
			/* past EOF a chunk is a hole (recovery, truncate and
			 * fallocate keep it so): never seen, but marked as any */
			tier_mark_dirty_locked(t, in, c, c);
			continue;
		}
		chunk_set_state(in, c, CHUNK_HOT_DIRTY);
		ch->gen++;
		chunk_touch(ch, (uint32_t)tick);
	}
	return idx_journal_grow_locked(t->idx, in, from, last >= from ? last - from + 1 : 0);
}
