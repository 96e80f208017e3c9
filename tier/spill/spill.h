/*
 * ROOM tier/spill/: chunks out of RAM: the evictor's candidates (cand.h),
 * one segment written (spill.h) and committed (seg_commit.h), the evictor
 * thread and its spill pool (evict.c), GC and demotion (gc.c, demote.c)
 * and the maintenance worker that runs them (maint.h). Uses hot/, admit/,
 * chain/, state/, segment/ and store/. Guarantees: a hot copy goes only
 * once its segment is durable. Threading: per file (below, maint.h,
 * evict.c's DESIGN block).
 */
/*
 * spill — writing one segment of dirty chunks (whole, or only their dirty
 * blocks as an overlay record over a cold copy), and dropping the hot copy
 * of a chunk a durable segment holds. The evictor, fsync, the evict xattr
 * and the unmount flush all spill through here (evict.c batches them on
 * its spill pool).
 * Threading: any thread; each chunk is taken and committed under its
 * inode's lock, the segment written with it dropped.
 */
#ifndef SPW_SPILL_H
#define SPW_SPILL_H

#include <stddef.h>
#include <stdint.h>

struct tier;
struct inode;
struct cand;

/* Write the candidates v[0..n) (sorted by location) that are still
 * HOT_DIRTY as one segment; once it is durable, record their locations
 * and, with drop, punch their hot copies. *committed: 1 when the segment
 * was committed (room may have been freed: wake the waiters). 0 (also when
 * nothing was left to write) or -errno: every chunk taken is HOT_DIRTY
 * again. */
int spill_segment(struct tier *t, const struct cand *v, size_t n, int drop, int *committed);
/* Punch chunk c out of RAM if it is HOT_CLEAN, unpinned, has a cold copy
 * and no kernel reads its hot file (passthrough). in->lock held. Returns
 * the chunk's bytes dropped (0 if it was not). */
uint32_t spill_drop_chunk_locked(struct tier *t, struct inode *in, uint64_t c);
/* Wait until no spill reads chunks [first, last] of `in` from its hot file
 * (their pages may be mapped: a truncate or punch under them is a SIGBUS
 * or a page allocated in a hole). One chunk's read each, not a segment.
 * in->lock held, dropped while waiting. 1 when it waited (the caller's
 * other waits look again), 0 when there was nothing to wait for. */
int spill_wait_mapped_locked(struct tier *t, struct inode *in, uint64_t first, uint64_t last);

#endif
