/*
 * restore_i.h — private to the restore room (restore.c: the restores and
 * the partial-restore table; restore_read.c: a read's plan and its
 * executors; restore_workers.c: the workers and their queue): its state,
 * and the calls the workers and the read plan make into restore.c.
 */
#ifndef SPW_RESTORE_I_H
#define SPW_RESTORE_I_H

#include "tier/tier_i.h"

#include <pthread.h>
#include <stdint.h>

struct tier;
struct inode;
struct workq;
struct rst_part;

#define RST_PART_HASH 64 /* buckets of the in-flight partial restore table */

struct restore {
	struct tier *t;
	struct workq *wq;   /* the workers: READ_AHEAD jobs first; NULL: not started */
	uint64_t threshold; /* prefetch only below this hot usage (set at start) */
	/* chunks restored in two steps, keyed by (ino, chunk); the table and
	 * free list are protected by plock, an entry's state by its inode's lock */
	pthread_mutex_t plock;
	struct rst_part *parts[RST_PART_HASH];
	struct rst_part *pfree;
};

/* Blocks of the largest chunk (JRNL_MAX_CHUNK_SIZE) */
#define PART_BLKS ((64u << 20) / SEG_BLOCK)

/* A chunk being restored in two steps. See DESIGN. */
struct rst_part {
	struct rst_part *next; /* hash chain or free list (restore.plock) */
	uint64_t ino, c;       /* key, set while hashed (restore.plock) */
	/* the rest: protected by the inode's lock */
	int failed;	  /* the rest failed: no new reader of it */
	struct cold_rec rec; /* the chunk's record, located when it began */
	int64_t reserved; /* hot room held until the rest is in */
	uint64_t t0;	  /* restore start */
	/* the reader's blocks, verified, answered from memory and not yet in
	 * the hot file (held): chunk bytes [hlo, hhi) of sc */
	int held;
	uint64_t hlo, hhi;
	struct seg_chunk sc;
	/* readers reading blocks of the chunk from its cold copy meanwhile
	 * (restore_read.c, read_cold_copy_locked): the restore ends (and p goes) after them */
	int beside;
	/* no restore at all: readers reading the chunk's cold copy straight
	 * into their answers (a direct read: the admission filter kept the
	 * chunk out of RAM); counted in beside, the last one out ends it */
	int direct;
	uint64_t have[PART_BLKS / 64]; /* blocks in the hot file */
};

/* For the read plan (restore_read.c); in->lock held throughout. */
/* The entry of chunk c of inode ino being restored in two steps, or NULL. */
struct rst_part *rst_part_find(struct tier *t, uint64_t ino, uint64_t c);
/* A new entry for (ino, c), no block in RAM; NULL without memory. */
struct rst_part *rst_part_new(struct tier *t, uint64_t ino, uint64_t c);
/* The last reader of direct entry p is done: the chunk COLD again (its
 * readers woken), p gone. */
void rst_part_direct_end_locked(struct tier *t, struct inode *in, struct rst_part *p);
/* Are blocks [b0, b1] of p in the hot file? */
int rst_part_has(const struct rst_part *p, uint32_t b0, uint32_t b1);
/* First step of a partial restore of chunk r->c (the caller set it
 * RESTORING; p fresh) from its record rec: the blocks covering the reader's
 * bytes only (with r->one, answered from memory: r->mem). The rest:
 * restore_rest_locked. On failure the chunk is COLD again, p gone. 0 or
 * -errno. */
int rst_part_first_locked(struct tier *t, struct inode *in, struct chunk_read *r,
			  struct rst_part *p, const struct cold_rec *rec);
/* The whole-chunk restore of chunk c (RESTORING, no chain) from its record
 * rec, located: HOT_CLEAN, or COLD on error. 0 or -errno. */
int rst_whole_locked(struct tier *t, struct inode *in, uint64_t c, struct cold_rec *rec);

/* A worker's restore of COLD chunk c, which it set to RESTORING (in->lock
 * held; dropped during I/O): a mapped record is published a piece at a
 * time. 0 or -errno. */
int restore_pub_locked(struct tier *t, struct inode *in, uint64_t c);

#endif
