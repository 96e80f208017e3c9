/*
 * restore_i.h — private to the restore room (restore.c: the data path and
 * the partial-restore table; restore_workers.c: the workers and their
 * queue): its state, and the one call the workers make into restore.c.
 */
#ifndef SPW_RESTORE_I_H
#define SPW_RESTORE_I_H

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

/* A worker's restore of COLD chunk c, which it set to RESTORING (in->lock
 * held; dropped during I/O): a mapped record is published a piece at a
 * time. 0 or -errno. */
int restore_pub_locked(struct tier *t, struct inode *in, uint64_t c);

#endif
