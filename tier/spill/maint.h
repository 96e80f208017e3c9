/*
 * maint — the maintenance worker: one thread beside the evictor that runs
 * segment jobs from a typed, bounded queue: delete a dead segment, compact a
 * sparse one, demote one (a segment or an extent) from nvme to s3. The evictor chooses (maint_plan,
 * on its thread, through gc_pick and demote_pick); this worker does the
 * I/O, so a slow compaction or demotion never holds up a spill.
 * Guarantees: a segment has at most one job, queued or running, and is
 * gc_busy from the pick until that job ends or is cancelled; at most
 * MAINT_QUEUE_MAX jobs of each kind wait.
 * Threading: maint_plan is the evictor's (one planner); maint_pending from
 * any thread; jobs run on the worker, one at a time.
 */
#ifndef SPW_MAINT_H
#define SPW_MAINT_H

struct tier;

/* Job kinds, in the order the worker takes them. */
enum maint_kind {
	MAINT_SEAL,    /* an extent's seal, seal_delay after its last writer's close (its inode) */
	MAINT_DELETE,  /* a segment with no live bytes (deletes go in batches) */
	MAINT_COMPACT, /* a sparse segment: its live chunks rewritten (one at a time) */
	MAINT_DEMOTE,  /* an nvme segment copied to s3 (one batch at a time) */
	MAINT_DEMOTE_EXT, /* an extent moved to s3 (demote_ext.c; its job id: the inode) */
	MAINT_KINDS
};

#define MAINT_QUEUE_MAX 1024 /* jobs of each kind waiting */

/* Start the worker (t->maint). 0 or -errno. */
int maint_start(struct tier *t);
/* Stop it: the job in flight stops at its next step once t->stopping is
 * set (evict_stop sets it first), queued jobs are cancelled (gc_busy
 * cleared). Waits for that one step at most. */
void maint_stop(struct tier *t);
/* Choose dead segments, one compaction and a demotion batch, and queue
 * them (the evictor thread, after each round). No-op without a worker. */
void maint_plan(struct tier *t);
/* Jobs queued or running (all kinds). */
unsigned maint_pending(struct tier *t);

#endif
