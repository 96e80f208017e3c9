/*
 * segtab — the segment table: one entry per sealed segment (its store and
 * device, its length, its live payload bytes, its GC/demotion state) and
 * the totals, indexed by segment id, and its journal records
 * (SEG_ADD/SEG_DEL). The handle holds the table, its lock, the journal it
 * records to, the two cold stores its entries point into and the clock
 * demotion orders by; the daemon (struct tier) and spillway-fsck each make
 * one. Only segtab.c reads or writes an entry: its users ask and tell
 * through the calls below.
 * Guarantees: a segment is journaled before any chunk points at it
 * (segtab_register); live bytes never underflow (abort: accounting bug);
 * ids only grow, a deleted id is never handed out again.
 * Threading: every call takes the table's lock itself; none does I/O
 * under it (but segtab_remove_stored, at teardown). Lock order: index lock,
 * inode lock, the table's lock, the evictor's lock (evict.c).
 */
#ifndef SPW_SEGTAB_H
#define SPW_SEGTAB_H

#include <stddef.h>
#include <stdint.h>

struct segtab;
struct store;
struct index;
struct journal;
struct chunk;
struct jrec;
struct jrnl_emitter;
struct seg_writer;

/* A segment's entry, copied out (segtab_where, segtab_next). */
struct seg_where {
	struct store *st; /* the store holding it (segtab_set_stores; NULL: not set) */
	uint64_t len;	  /* bytes of the segment */
	uint64_t payload; /* payload bytes when sealed */
	uint64_t live;	  /* payload bytes still referenced by chunks */
	uint32_t dev;
	uint8_t store; /* as journaled: 0 the first cold tier, 1 s3 (demoted) */
};

/* An empty table; clock (NULL: none, every tick 0) is the index whose
 * access clock (idx_tick) stamps a segment's last restore. Caller owns the
 * result; free with segtab_free(). 0 or -ENOMEM. */
int segtab_new(struct index *clock, struct segtab **out);
/* Frees the table (no store is touched). NULL is a no-op. */
void segtab_free(struct segtab *s);
/* The journal SEG_ADD/SEG_DEL records go to from now on (NULL: none). */
void segtab_set_journal(struct segtab *s, struct journal *j);
/* The stores an entry's store 0 and 1 name (either may be NULL). */
void segtab_set_stores(struct segtab *s, struct store *first, struct store *s3);

/* ---- ids, registration, live bytes ---- */

uint64_t segtab_alloc_id(struct segtab *s);
/* The id segtab_alloc_id would hand out next (not taken). */
uint64_t segtab_next_id(struct segtab *s);
/* Enter a durable segment of store `store` (0: the first cold tier, 1:
 * s3) in the table and the journal. 0, or -EIO (not journaled: not
 * entered). */
int segtab_register(struct segtab *s, uint64_t id, uint8_t store, uint32_t dev, uint64_t len,
		    uint64_t payload);
/*
 * The commit of a new segment, for spill and compaction alike: the journal
 * synced first (the records naming the files its chunks belong to are
 * durable before the segment is, else a segment surviving a power loss
 * could hold an inode the index lost, which looks like a stale state_dir
 * at mount; and nothing is committed once the journal is read-only), then
 * w finished (durable in its store), then registered (segtab_register).
 * payload: its records' bytes. w is consumed whatever happens. *dev and
 * *len get where it went. 0, or -errno: nothing entered (a segment
 * finished but not journaled is an orphan, removed at the next mount).
 */
int segtab_commit(struct segtab *s, struct seg_writer *w, uint64_t id, uint64_t payload,
		  uint32_t *dev, uint64_t *len);
/* The same for a segment w writes to s3 directly (store 1: an extent's
 * demotion, tier/spill/demote_ext.c). */
int segtab_commit_s3(struct segtab *s, struct seg_writer *w, uint64_t id, uint64_t payload,
		     uint32_t *dev, uint64_t *len);
void segtab_release_bytes(struct segtab *s, uint64_t id, uint64_t bytes);
/* Forget a chunk's cold copy (segment live bytes drop). Caller holds the
 * chunk's inode lock. */
void segtab_release_chunk(struct segtab *s, struct chunk *c);

/* ---- where a segment is ---- */

/* Where segment id lives now (it may move from nvme to s3); notes the
 * access for demotion. 0 or -ENOENT. */
int segtab_locate(struct segtab *s, uint64_t id, struct store **st, uint32_t *dev);
/* Segment id's entry into *w, nothing noted. 0 or -ENOENT. */
int segtab_where(struct segtab *s, uint64_t id, struct seg_where *w);
/* The first segment with an id above *id (start at 0): 1 with *id and *w
 * set, 0 when there is none. The table may change between calls. */
int segtab_next(struct segtab *s, uint64_t *id, struct seg_where *w);
/* Segment count, bytes and live bytes, read together. */
void segtab_totals(struct segtab *s, uint64_t *count, uint64_t *bytes, uint64_t *live);
/* Segment bytes held by store 0 (out[0]) and store 1 (out[1]). */
void segtab_tier_bytes(struct segtab *s, uint64_t out[2]);

/* ---- GC and demotion (gc.c, demote.c, maint.c) ---- */

/* Mark gc_busy and return up to max segments with no live bytes in dead;
 * when compact is not NULL, also one segment whose live bytes fell below
 * sparse x its payload, unless it was found not worth it at these live
 * bytes (segtab_no_gain) (0: none). Returns the dead segments picked. */
size_t segtab_pick_dead(struct segtab *s, uint64_t *dead, size_t max, double sparse,
			uint64_t *compact);
/* Mark gc_busy and return up to max segments of store `store`, least
 * recently read first, until their bytes reach `bytes`; atimes (may be
 * NULL) gets each one's last read (idx_tick) and lens its length. */
size_t segtab_pick_oldest(struct segtab *s, uint8_t store, uint64_t bytes, uint64_t *ids,
			  size_t max, uint64_t *atimes, uint64_t *lens);
/* Clear gc_busy of ids[0..n): they may be picked again. */
void segtab_unbusy(struct segtab *s, const uint64_t *ids, size_t n);
/* Compacting id would not shrink it: not picked again until more of it dies. */
void segtab_no_gain(struct segtab *s, uint64_t id);
/* Forget segment id (deleted from its store): the totals drop its bytes. */
void segtab_drop(struct segtab *s, uint64_t id);
/* Segment id now lives in store `store`, device dev (not journaled: see
 * segtab_log). No-op when id is not in the table. */
void segtab_relocate(struct segtab *s, uint64_t id, uint8_t store, uint32_t dev);

/* ---- journal, replay, recovery ---- */

/* Journal a segment's table entry (SEG_ADD) or its removal (SEG_DEL); 0
 * without a journal. 0 or -errno. */
int segtab_log(struct segtab *s, uint64_t id, int del);
/* Replay: apply a META, SEG_ADD or SEG_DEL record (others are ignored);
 * live bytes start at 0, recounted from the chunk maps (segtab_add_live). */
void segtab_replay(struct segtab *s, const struct jrec *r);
/* Checkpoint: emit JR_META (next_ino, the table's next id) and one SEG_ADD
 * per segment, by id. 0 or -errno. */
int segtab_emit(struct segtab *s, struct jrnl_emitter *e, uint64_t next_ino);
/* Recovery: a chunk in segment id holds bytes of it. 0 or -ENOENT. */
int segtab_add_live(struct segtab *s, uint64_t id, uint64_t bytes);
/* After recovery recounted live bytes: recompute the totals and start every
 * segment's access clock now. Returns the table's capacity (ids below it). */
uint64_t segtab_recount(struct segtab *s);
/* Teardown of a volatile mount: remove every segment from its store. */
void segtab_remove_stored(struct segtab *s);

#endif
