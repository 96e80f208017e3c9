/*
 * ROOM tier/restore/: cold chunks back into RAM: the read's plan and its
 * executors (restore_read.c), whole and partial restores (restore.c), the
 * prefetch and read-ahead workers (restore_workers.c; shared state in
 * restore_i.h). Uses spill/ (room for a restore), chain/, admit/, hot/,
 * segment/. Guarantees: a chunk is never served from unverified bytes.
 * Threading: below.
 */
/*
 * restore — the restore room's lifecycle: the workers that fault cold
 * chunks back ahead of readers (restore=open prefetch, read-ahead) and the
 * table of chunks restored in two steps (new, free: restore.c; start, stop
 * and the queue: restore_workers.c; the state: restore_i.h). The data-path
 * calls (restore_read_locked and the rest) are in tier_i.h.
 * Threading: new, start, stop and free from the thread that runs tier_new,
 * tier_start, tier_stop and tier_free; the workers' jobs take the index and
 * inode locks in their order, the room's own locks are leaves.
 */
#ifndef SPW_RESTORE_H
#define SPW_RESTORE_H

struct tier;

/* t->rst, no thread yet (tier_new). 0 or -ENOMEM. */
int restore_new(struct tier *t);
/* Start io_workers workers (tier_start, with a cold tier). 0 or -errno. */
int restore_start(struct tier *t);
/* Set t->stopping and stop the workers; queued jobs are dropped. */
void restore_stop(struct tier *t);
/* Stop, then free t->rst (NULL: nothing). */
void restore_free(struct tier *t);

#endif
