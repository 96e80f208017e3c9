/*
 * restore_read — a read of a chunk as a plan, then its execution: what the
 * read does at each look at the chunk (in RAM, a chain's blocks filled,
 * blocks published by a restore in blocks, read beside such a restore,
 * read directly, a partial or a whole restore) is decided in one place,
 * read_plan_locked, and done by one executor per plan (plan_run).
 *
 * DESIGN
 * - The plan is made under in->lock from the chunk's state and what the
 *   reader is (struct chunk_read: random, stream, the read in one chunk);
 *   an executor that waited or changed the chunk has it looked at again.
 *   Whether a reader reads directly, leaving the chunk cold, is decided
 *   at the first look and kept: with admit=reread the admission filter's
 *   verdict (tier/admit: a first access reads directly, a re-read comes
 *   into RAM), with admit=always only a random reader's; never for a
 *   chunk a worker has queued or is restoring into RAM.
 * - Direct readers of one chunk share it: the first sets it RESTORING
 *   (writers, truncates and the maintenance worker wait; its segment
 *   stays) with a direct entry in the restore table, the others join it,
 *   and the last one out sets it COLD again (rst_part_direct_end_locked).
 * - The chunk's record is located once per read (cold_locate: one note of
 *   the segment's access for demotion) and passed down to the executor;
 *   it is located again only when the chunk has another record by then, or
 *   a read finds the segment moved (cold.c).
 * - Reads from the cold copy (direct, beside) are verified as any restore
 *   and answered from their buffer (struct chunk_read mem, buf); the
 *   restores themselves (whole, partial) are restore.c's.
 * Threading: in->lock held, dropped during I/O (tier_i.h).
 */
#include "tier/admit/admit.h"
#include "tier/restore/restore_i.h"
#include "tier/tier_i.h"

#include "common/log.h"

#include "tier/segment/segment.h"

#include <errno.h>
#include <stddef.h>

/* The reader's bytes [r->lo, r->hi) of chunk r->c (RESTORING: its cold copy,
 * rec, is what the chunk holds, and stays) read and verified from that
 * copy, restoring nothing. r->mem points at them in r->buf: the verified
 * read window itself when they are all data, else a copy with the holes
 * zeroed; r->tier is where they came from. in->lock held; dropped during
 * I/O. 0 or -errno. */
static int read_cold_copy_locked(struct tier *t, struct inode *in, struct chunk_read *r,
				 struct cold_rec *rec)
{
	uint64_t lo = r->lo, hi = r->hi;
	struct seg_chunk sc;
	int ret;

	idx_inode_unlock(in);
	ret = cold_read(t, rec, lo, hi - lo, &sc);
	r->tier = rec->tier;
	if (ret == 0 && (r->mem = seg_chunk_span(&sc, lo, hi))) {
		r->buf = sc.buf_; /* kept for the reply */
		sc.buf_ = NULL;
	} else if (ret == 0 && !(r->buf = seg_buf_alloc(hi - lo))) {
		ret = -ENOMEM;
	} else if (ret == 0) {
		seg_chunk_copy(&sc, lo, (uint32_t)(hi - lo), r->buf);
		r->mem = r->buf;
	}
	seg_chunk_free(&sc);
	idx_inode_lock(in);
	if (ret == 0) {
		__atomic_add_fetch(&t->st.direct_reads, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&t->st.direct_bytes, hi - lo, __ATOMIC_RELAXED);
	}
	return ret;
}

/*
 * The read plan: what a read of a chunk does at one look at it (in->lock
 * held). read_plan_locked is the one place that decides, from the chunk's
 * state and what the reader asked (struct chunk_read); one executor per
 * plan does it (plan_run). An executor that waited, or changed the chunk,
 * returns PLAN_AGAIN: the chunk is looked at again (the lock was dropped).
 */
enum plan_kind {
	PLAN_RAM,	   /* in RAM: the reader reads the hot file */
	PLAN_FILL,	   /* RAM holds part of a chain: the range from it first */
	PLAN_CHAIN_PART,   /* a COLD chain: held in part from now, the range filled */
	PLAN_PUBLISHED,	   /* restored in blocks and the range's are in: read them */
	PLAN_BESIDE,	   /* restored in blocks: the range from the cold copy beside it */
	PLAN_WAIT,	   /* being restored: wait for it */
	PLAN_DIRECT,	   /* COLD: the range from the cold copy, nothing restored */
	PLAN_DIRECT_CHAIN, /* the same of a chain: each block from its newest record */
	PLAN_PARTIAL,	   /* COLD, mapped: the range's blocks now, the rest after the reply */
	PLAN_WHOLE,	   /* COLD: the whole chunk restored */
	PLAN_KINDS
};

#define PLAN_AGAIN 1 /* an executor's "look at the chunk again" */

/* A read's plan, kept across its looks at the chunk. */
struct read_plan {
	enum plan_kind kind;
	int looked;	     /* the first look was taken (direct decided) */
	int direct;	     /* read it directly (decided at the first look) */
	int located;	     /* rec is set */
	struct cold_rec rec; /* the chunk's record, located once per read */
	struct rst_part *p;  /* PUBLISHED, BESIDE: the restore in blocks */
};

static int in_cold(const struct chunk *ch)
{
	return ch->state == CHUNK_COLD || ch->state == CHUNK_RESTORING;
}

/* The chunk's record, located once per read (again only when the chunk has
 * another record by now); the first location is the read's cold tier. */
static void plan_locate(struct tier *t, struct inode *in, struct chunk_read *r,
			struct read_plan *pl)
{
	const struct chunk_loc *l = &in->chunks[r->c].loc;

	if (pl->located && pl->rec.loc.seg_id == l->seg_id) {
		pl->rec.loc = *l;
		return;
	}
	cold_locate(t, in->ino, r->c, l, &pl->rec);
	if (!pl->located)
		r->tier = pl->rec.tier;
	pl->located = 1;
}

/* The plan of a COLD chunk that has no chain. */
static enum plan_kind plan_cold(struct tier *t, struct inode *in, struct chunk_read *r,
				const struct read_plan *pl, int mem_ok)
{
	const struct chunk *ch = &in->chunks[r->c];
	uint32_t clen = tier_chunk_len(t, in->size, r->c);
	uint64_t b0 = r->lo / SEG_BLOCK, b1 = (r->hi - 1) / SEG_BLOCK;
	int mapped = (ch->loc.flags & LOC_F_MAP) != 0;

	/* a v1 record is read whole: direct only when it is one block */
	if (pl->direct && mem_ok && (mapped || ch->loc.len <= SEG_BLOCK))
		return PLAN_DIRECT;
	/* one crc for the record (v1, small), or the range is the chunk: whole */
	if (r->may_rest && mapped && r->hi <= clen && (b1 + 1 - b0) * SEG_BLOCK < clen)
		return PLAN_PARTIAL;
	return PLAN_WHOLE;
}

/* Does the read leave the chunk cold, reading its cold copy directly? At
 * the first look only (the admission filter notes the access). */
static int plan_direct(struct tier *t, struct inode *in, struct chunk_read *r)
{
	const struct chunk *ch = &in->chunks[r->c];
	const struct rst_part *p;

	if (!r->one || ch->queued || !in_cold(ch))
		return 0;
	if (!t->cfg->admit_reread)
		return r->random && ch->state == CHUNK_COLD;
	/* being restored into RAM: admitted already */
	if (ch->state == CHUNK_RESTORING && (!(p = rst_part_find(t, in->ino, r->c)) || !p->direct))
		return 0;
	r->promoted = admit_read_locked(t, in, r->c, r->lo, r->hi, r->random, r->near,
					r->again) == ADMIT_PROMOTE;
	return !r->promoted;
}

static enum plan_kind read_plan_locked(struct tier *t, struct inode *in, struct chunk_read *r,
				       struct read_plan *pl)
{
	const struct chunk *ch = &in->chunks[r->c]; /* the map may move while unlocked */
	uint32_t b0 = (uint32_t)(r->lo / SEG_BLOCK), b1 = (uint32_t)((r->hi - 1) / SEG_BLOCK);
	int mem_ok;

	if (!pl->looked) {
		pl->direct = plan_direct(t, in, r);
		/* a handle that starts (or jumps) into what RAM holds re-reads:
		 * its reads of chunks read before come in too (TIER_READ_AGAIN) */
		if (!in_cold(ch) && !r->near && t->cfg->admit_reread)
			r->promoted = 1;
		pl->looked = 1;
	}
	if (!in_cold(ch))
		return chain_partial(ch) ? PLAN_FILL : PLAN_RAM;
	plan_locate(t, in, r, pl);
	mem_ok = r->one && r->hi <= tier_chunk_len(t, in->size, r->c);
	if (ch->state == CHUNK_RESTORING) {
		pl->p = rst_part_find(t, in->ino, r->c);
		/* direct readers: join them, or wait to bring it into RAM */
		if (pl->p && pl->p->direct)
			return pl->direct && mem_ok ? PLAN_BESIDE : PLAN_WAIT;
		if (!pl->p || pl->p->failed)
			return PLAN_WAIT;
		if (rst_part_has(pl->p, b0, b1))
			return PLAN_PUBLISHED;
		/* a stream's blocks are next anyway: it waits for them */
		return mem_ok && !r->stream ? PLAN_BESIDE : PLAN_WAIT;
	}
	if (ch->chain)
		return pl->direct && mem_ok ? PLAN_DIRECT_CHAIN : PLAN_CHAIN_PART;
	return plan_cold(t, in, r, pl, mem_ok);
}

typedef int (*plan_fn)(struct tier *t, struct inode *in, struct chunk_read *r,
		       struct read_plan *pl);

static int run_ram(struct tier *t, struct inode *in, struct chunk_read *r, struct read_plan *pl)
{
	(void)t, (void)in, (void)r, (void)pl;
	return 0;
}

static int run_fill(struct tier *t, struct inode *in, struct chunk_read *r, struct read_plan *pl)
{
	int ret = chain_fill_locked(t, in, r->c, r->lo, r->hi);
	const struct chunk *ch = &in->chunks[r->c];

	(void)pl;
	if (ret < 0)
		return ret;
	/* dropped meanwhile: look again */
	return chain_partial(ch) && !in_cold(ch) ? 0 : PLAN_AGAIN;
}

/* The blocks of the range only, the chunk then held in part (RAM and the
 * chain agree: clean); a stream's whole segment blocks (read and verified
 * anyway). The workers restoring ahead of a stream restore whole chains. */
static int run_chain_part(struct tier *t, struct inode *in, struct chunk_read *r,
			  struct read_plan *pl)
{
	uint64_t clen = tier_chunk_len(t, in->size, r->c), a = r->lo, z = r->hi;
	int ret;

	(void)pl;
	if (r->stream) {
		a -= a % SEG_BLOCK;
		z = (z + SEG_BLOCK - 1) / SEG_BLOCK * SEG_BLOCK;
		z = z < clen ? z : (clen > r->hi ? clen : r->hi);
	}
	chunk_set_state(in, r->c, CHUNK_HOT_CLEAN);
	in->chunks[r->c].chain->partial = 1;
	ret = chain_fill_locked(t, in, r->c, a, z);
	return ret < 0 ? ret : PLAN_AGAIN;
}

static int run_published(struct tier *t, struct inode *in, struct chunk_read *r,
			 struct read_plan *pl)
{
	(void)in, (void)r, (void)pl;
	/* its blocks are in: read them while the rest comes */
	__atomic_add_fetch(&t->st.published_reads, 1, __ATOMIC_RELAXED);
	return 0;
}

/* A restore in blocks (pl->p) holds the cold copy still: read the range
 * from it rather than wait for its turn (the restore ends after us). Or
 * pl->p is a direct entry: read it with the other direct readers; the
 * last one out sets the chunk COLD again. */
static int run_beside(struct tier *t, struct inode *in, struct chunk_read *r, struct read_plan *pl)
{
	struct rst_part *p = pl->p;
	int ret;

	p->beside++;
	ret = read_cold_copy_locked(t, in, r, &pl->rec);
	r->direct = p->direct;
	if (--p->beside == 0 && p->direct)
		rst_part_direct_end_locked(t, in, p);
	idx_inode_wake(in);
	return ret;
}

static int run_wait(struct tier *t, struct inode *in, struct chunk_read *r, struct read_plan *pl)
{
	(void)t, (void)r, (void)pl;
	idx_inode_wait(in);
	return PLAN_AGAIN;
}

/* RESTORING meanwhile, with a direct entry that other direct readers
 * join (writers wait, the maintenance worker keeps the segment), COLD
 * again after the last of them. Without memory for the entry, alone. */
static int run_direct(struct tier *t, struct inode *in, struct chunk_read *r, struct read_plan *pl)
{
	int ret;

	chunk_set_state(in, r->c, CHUNK_RESTORING);
	if ((pl->p = rst_part_new(t, in->ino, r->c))) {
		pl->p->direct = 1;
		pl->p->rec = pl->rec;
		return run_beside(t, in, r, pl);
	}
	ret = read_cold_copy_locked(t, in, r, &pl->rec);
	r->direct = 1;
	chunk_set_state(in, r->c, CHUNK_COLD);
	idx_inode_wake(in);
	return ret;
}

static int run_direct_chain(struct tier *t, struct inode *in, struct chunk_read *r,
			    struct read_plan *pl)
{
	int ret;

	(void)pl;
	if (!(r->buf = seg_buf_alloc(r->hi - r->lo)))
		return -ENOMEM;
	chunk_set_state(in, r->c, CHUNK_RESTORING);
	ret = chain_read_cold_locked(t, in, r->c, r->lo, r->hi, r->buf, &r->tier);
	chunk_set_state(in, r->c, CHUNK_COLD);
	idx_inode_wake(in);
	if (ret < 0) {
		seg_buf_free(r->buf);
		r->buf = NULL;
		return ret;
	}
	r->mem = r->buf;
	r->direct = 1;
	__atomic_add_fetch(&t->st.direct_reads, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&t->st.direct_bytes, r->hi - r->lo, __ATOMIC_RELAXED);
	return 0;
}

static int run_whole(struct tier *t, struct inode *in, struct chunk_read *r, struct read_plan *pl)
{
	int ret;

	chunk_set_state(in, r->c, CHUNK_RESTORING);
	ret = rst_whole_locked(t, in, r->c, &pl->rec);
	return ret < 0 ? ret : PLAN_AGAIN;
}

static int run_partial(struct tier *t, struct inode *in, struct chunk_read *r,
		       struct read_plan *pl)
{
	struct rst_part *p = rst_part_new(t, in->ino, r->c);
	int ret;

	log_debug("read: inode %llu chunk %llu [%llu, %llu) into RAM (random %d near %d again "
		  "%d stream %d one %d queued %d promoted %d)",
		  (unsigned long long)in->ino, (unsigned long long)r->c, (unsigned long long)r->lo,
		  (unsigned long long)r->hi, r->random, r->near, r->again, r->stream, r->one,
		  in->chunks[r->c].queued, r->promoted);
	if (!p) /* no memory for its entry: the whole chunk */
		return run_whole(t, in, r, pl);
	chunk_set_state(in, r->c, CHUNK_RESTORING);
	if ((ret = rst_part_first_locked(t, in, r, p, &pl->rec)) < 0)
		return ret;
	r->rest = 1;
	return 0;
}

static const plan_fn plan_run[PLAN_KINDS] = {
    [PLAN_RAM] = run_ram,
    [PLAN_FILL] = run_fill,
    [PLAN_CHAIN_PART] = run_chain_part,
    [PLAN_PUBLISHED] = run_published,
    [PLAN_BESIDE] = run_beside,
    [PLAN_WAIT] = run_wait,
    [PLAN_DIRECT] = run_direct,
    [PLAN_DIRECT_CHAIN] = run_direct_chain,
    [PLAN_PARTIAL] = run_partial,
    [PLAN_WHOLE] = run_whole,
};

int restore_read_locked(struct tier *t, struct inode *in, struct chunk_read *r)
{
	struct read_plan pl = {0};
	int ret;

	r->rest = 0;
	r->tier = -1;
	r->mem = NULL;
	r->buf = NULL;
	r->direct = 0;
	r->promoted = 0;
	do {
		pl.kind = read_plan_locked(t, in, r, &pl);
		ret = plan_run[pl.kind](t, in, r, &pl);
	} while (ret == PLAN_AGAIN);
	if (ret == 0)
		in->chunks[r->c].pins++;
	return ret;
}
