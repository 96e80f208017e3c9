/*
 * segtab — the segment table: one entry per sealed segment (where it lives,
 * its length, its live payload bytes, its GC/demotion state) and the
 * totals, indexed by segment id, and its journal records (SEG_ADD/SEG_DEL).
 * Guarantees: a segment is journaled before any chunk points at it
 * (segtab_register); live bytes never underflow (abort: accounting bug).
 * Threading: every field is protected by segtab.lock; functions without the
 * _locked suffix take it themselves. Lock order: index lock, inode lock,
 * segtab.lock, tier lock.
 */
#ifndef SPW_SEGTAB_H
#define SPW_SEGTAB_H

#include <pthread.h>
#include <stdint.h>

struct tier;
struct store;
struct chunk;
struct jrec;
struct jrnl_emitter;

/* One sealed segment. Protected by segtab.lock. */
struct seg_info {
	uint64_t len;	  /* 0 = slot unused (deleted or never sealed) */
	uint64_t live;	  /* payload bytes still referenced by chunks */
	uint64_t payload; /* payload bytes when sealed */
	uint64_t atime;	  /* last restore from it (demotion picks the oldest) */
	uint32_t dev;
	uint8_t store;	     /* 0: t->store, 1: t->s3 (demoted) */
	uint8_t gc_busy;     /* a delete, compact or demote job queued or running (maint.c) */
	uint64_t gc_no_gain; /* live bytes when compacting it would not have shrunk it */
};

struct segtab {
	pthread_mutex_t lock;
	struct seg_info *v;	     /* indexed by segment id; v[0] unused */
	uint64_t cap, next;	     /* slots allocated; next id to hand out */
	uint64_t count, bytes, live; /* sealed segments, their bytes, live bytes */
};

void segtab_init(struct segtab *s);
/* Frees the table (no store is touched). */
void segtab_destroy(struct segtab *s);

uint64_t segtab_alloc_id(struct tier *t);
/* Table entry for id, growing the table (segtab.lock held). */
struct seg_info *segtab_slot_locked(struct tier *t, uint64_t id);
/* Enter a durable segment in the table and the journal. 0, or -EIO (not
 * journaled: not entered). */
int segtab_register(struct tier *t, uint64_t id, uint32_t dev, uint64_t len, uint64_t payload);
void segtab_release_bytes(struct tier *t, uint64_t id, uint64_t bytes);
/* Forget a chunk's cold copy (segment live bytes drop). Caller holds the
 * chunk's inode lock. */
void segtab_release_chunk(struct tier *t, struct chunk *c);
/* Segment bytes held by t->store (out[0]) and t->s3 (out[1]). */
void segtab_tier_bytes(struct tier *t, uint64_t out[2]);
/* Where segment id lives now (it may move from nvme to s3); notes the
 * access for demotion. 0 or -ENOENT. */
int segtab_locate(struct tier *t, uint64_t id, struct store **st, uint32_t *dev);
/* Segment count, bytes and live bytes, read together. */
void segtab_totals(struct tier *t, uint64_t *count, uint64_t *bytes, uint64_t *live);

/* Journal a segment's table entry (SEG_ADD) or its removal (SEG_DEL); 0
 * without a journal. 0 or -errno. */
int segtab_log(struct tier *t, uint64_t id, int del);
/* Replay: apply a META, SEG_ADD or SEG_DEL record (others are ignored);
 * live bytes start at 0, recounted from the chunk maps. */
void segtab_replay(struct tier *t, const struct jrec *r);
/* Checkpoint: emit JR_META (next_ino, the table's next id) and one SEG_ADD
 * per segment. 0 or -errno. */
int segtab_emit(struct tier *t, struct jrnl_emitter *e, uint64_t next_ino);
/* After recovery recounted live bytes: recompute the totals and start every
 * segment's access clock now. Returns the table's capacity (ids below it). */
uint64_t segtab_recount(struct tier *t);

#endif
