/*
 * maint — the maintenance worker (see maint.h).
 *
 * DESIGN
 * - Who does what. The evictor thread chooses (maint_plan: gc_pick,
 *   demote_pick, a scan of the segment table under its lock, no I/O) and
 *   queues; this thread does the I/O (gc_delete, gc_compact,
 *   demote_segment); the spill pool writes new segments. So a compaction
 *   or a demotion of 1,024 segments to S3 runs beside spilling, never in
 *   its turn.
 * - Queue: a workq with one thread and a level per kind (enum maint_kind
 *   is its order), each level bounded at MAINT_QUEUE_MAX.
 * - Order: extents' seals first (seal_delay after their last writer's
 *   close, tier/extent: one sync and one crc pass each; a cancelled one is
 *   queued again for the unmount's), then deletes (a batch of every queued one: one push of the
 *   bucket's state for all, then one store remove each), then the
 *   compaction, then one demotion; the queue is looked at again after each
 *   job, so a compaction or deletes chosen during a long demotion batch go
 *   before its next segment. At most one compaction and one demotion batch
 *   are queued or running at a time (maint_plan picks none while one is);
 *   a failed or no longer needed demotion cancels the rest of its batch,
 *   as the end of a demotion round did.
 * - Bounds: MAINT_QUEUE_MAX jobs of each kind (the planner picks no more
 *   than the room left). maint_stop cancels what is queued; the job in
 *   flight sees t->stopping at its next step (one segment read or one part
 *   written) and gives up: unmount waits for one store request at most.
 *
 * INVARIANTS (segments and chunks now change on different threads: this
 * worker, the spill pool, FUSE threads writing, truncating and unlinking)
 * - gc_busy: a segment picked is gc_busy until its job ends or is
 *   cancelled, and a busy segment is never picked: no two jobs ever touch
 *   one segment, and a segment being demoted is not compacted or deleted.
 * - Live bytes of a segment only fall after it is registered: they start at
 *   its payload, and each chunk record in it is released exactly once, by
 *   whoever takes the chunk off it under the chunk's inode lock (a write,
 *   truncate, punch or unlink through segtab_release_chunk, which also
 *   clears the chunk's segment; a compaction moving it; the spill or
 *   compaction that wrote it, for a record no chunk took). So live 0 means
 *   no chunk points at the segment and none ever will: deleting it is safe.
 * - A compaction copies a chunk's record, then relocates the chunk only if,
 *   under its inode lock, it still points at the same segment and offset
 *   and is COLD or HOT_CLEAN. Then it releases the old record's bytes from
 *   the old segment, in that same critical section; otherwise (rewritten,
 *   truncated, unlinked, restoring) the chunk's owner has already released
 *   them (or will, once) and the compaction releases the new copy's bytes
 *   from the new segment instead. Either way one release per record: no
 *   double release, no leak; an underflow aborts (segtab_release_bytes).
 * - A segment is never deleted under a restore in flight: a restore reads
 *   a chunk's segment only while the chunk is RESTORING (set under the
 *   inode lock together with reading its location), a RESTORING chunk
 *   keeps its record's live bytes and is never relocated, so its segment's
 *   live bytes stay above 0. A demotion removes the nvme copy only after
 *   the table points at s3: a restore that looked it up before gets ENOENT
 *   and looks it up again (restore.c, chunk_read).
 * - Locks: the queue is a workq (workq.h) whose lock is a leaf (picks and
 *   gc_busy changes take the table's lock after it is dropped); jobs take
 *   index, inode and segtab locks in their order.
 */
#include "tier/spill/maint.h"
#include "tier/tier_i.h"
#include "tier/extent/extent.h"
#include "common/workq.h"

#include <errno.h>
#include <stdlib.h>

/* One segment's job; its kind is its workq level. */
struct maint_job {
	struct workq_job wj; /* first: a workq_job * is a maint_job * */
	uint64_t id;
};

struct maint {
	struct tier *t;
	struct workq *wq; /* one thread; a level per kind, MAINT_QUEUE_MAX each */
	/* the worker's jobs in hand (its thread only) */
	uint64_t job[MAINT_QUEUE_MAX];
	struct workq_job *taken[MAINT_QUEUE_MAX];
	uint64_t pick[MAINT_QUEUE_MAX]; /* the planner's picks (its thread only) */
	uint64_t pick_ext[MAINT_QUEUE_MAX];
};

/* Take up to max jobs of kind k off the queue into m->job (the worker). */
static size_t take(struct maint *m, enum maint_kind k, size_t max)
{
	size_t n = workq_take(m->wq, k, m->taken, max);

	for (size_t i = 0; i < n; i++) {
		m->job[i] = ((struct maint_job *)m->taken[i])->id;
		free(m->taken[i]);
	}
	return n;
}

static void job_run(struct workq *q, struct workq_job *wj, void *arg)
{
	struct maint *m = arg;
	struct tier *t = m->t;
	enum maint_kind k = (enum maint_kind)wj->level;
	uint64_t id = ((struct maint_job *)wj)->id;
	size_t n;

	(void)q;
	free(wj);
	switch (k) {
	case MAINT_SEAL:
		ext_seal_ino(t, id);
		break;
	case MAINT_DELETE:
		/* a batch of every queued one */
		n = take(m, MAINT_DELETE, MAINT_QUEUE_MAX - 1);
		m->job[n++] = id;
		gc_delete(t, m->job, n);
		break;
	case MAINT_COMPACT:
		gc_compact(t, id);
		break;
	case MAINT_DEMOTE:
		if (demote_segment(t, id) != 0) {
			/* failed, or the nvme tier is low enough: the batch ends */
			n = take(m, MAINT_DEMOTE, MAINT_QUEUE_MAX);
			segtab_unbusy(t->segtab, m->job, n);
		}
		break;
	default:
		if (demote_ext(t, id) != 0) /* the same, for the extents picked */
			take(m, MAINT_DEMOTE_EXT, MAINT_QUEUE_MAX);
		break;
	}
	/* a demotion batch over (this job is still counted pending): the bucket's copy of the state (s3_state)
	 * names what moved, so a replacement node finds it */
	if ((k == MAINT_DEMOTE || k == MAINT_DEMOTE_EXT) &&
	    workq_pending(m->wq, MAINT_DEMOTE) + workq_pending(m->wq, MAINT_DEMOTE_EXT) <= 1)
		state_s3_push_changed(t);
}

/* Stopping: a job still queued is cancelled (an extent's holds nothing). */
static void job_cancel(struct workq_job *wj, void *arg)
{
	struct maint *m = arg;

	if (wj->level == MAINT_SEAL) /* sealed at the unmount, before its checkpoint */
		ext_seal_requeue(m->t, ((struct maint_job *)wj)->id);
	else if (wj->level != MAINT_DEMOTE_EXT)
		segtab_unbusy(m->t->segtab, &((struct maint_job *)wj)->id, 1);
	free(wj);
}

static const struct workq_ops maint_wq_ops = {.run = job_run, .cancel = job_cancel};

/* Queue ids[0..n) of kind k; the planner picked no more than the room. */
static void queue(struct maint *m, enum maint_kind k, const uint64_t *ids, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct maint_job *j = malloc(sizeof(*j));
		if (j) {
			j->id = ids[i];
			if (workq_push(m->wq, &j->wj, k) == 0)
				continue;
		}
		/* no memory, or stopping: never lose a busy mark */
		free(j);
		if (k == MAINT_SEAL)
			ext_seal_requeue(m->t, ids[i]);
		else if (k != MAINT_DEMOTE_EXT)
			segtab_unbusy(m->t->segtab, ids + i, 1);
	}
}

void maint_plan(struct tier *t)
{
	struct maint *m = t->maint;
	uint64_t compact = 0;
	size_t room, n;
	int want_compact, want_demote;

	if (!m)
		return;
	queue(m, MAINT_SEAL, m->pick, ext_seals_due(t, m->pick, workq_room(m->wq, MAINT_SEAL), 0));
	room = workq_room(m->wq, MAINT_DELETE);
	want_compact = !workq_pending(m->wq, MAINT_COMPACT);
	want_demote = !workq_pending(m->wq, MAINT_DEMOTE) && !workq_pending(m->wq, MAINT_DEMOTE_EXT);

	n = gc_pick(t, m->pick, room, want_compact ? &compact : NULL);
	queue(m, MAINT_DELETE, m->pick, n);
	if (compact)
		queue(m, MAINT_COMPACT, &compact, 1);
	if (want_demote) {
		size_t ne;
		n = demote_pick(t, m->pick, MAINT_QUEUE_MAX, m->pick_ext, &ne);
		queue(m, MAINT_DEMOTE, m->pick, n);
		queue(m, MAINT_DEMOTE_EXT, m->pick_ext, ne);
	}
}

unsigned maint_pending(struct tier *t)
{
	struct maint *m = t->maint;
	unsigned n = 0;

	if (!m)
		return 0;
	for (int k = 0; k < MAINT_KINDS; k++)
		n += workq_pending(m->wq, k);
	return n;
}

int maint_start(struct tier *t)
{
	struct maint *m = calloc(1, sizeof(*m));
	int ret;

	if (!m)
		return -ENOMEM;
	m->t = t;
	if ((ret = workq_new(&maint_wq_ops, m, 1, MAINT_KINDS, MAINT_QUEUE_MAX, &m->wq)) < 0) {
		free(m);
		return ret;
	}
	t->maint = m;
	return 0;
}

void maint_stop(struct tier *t)
{
	struct maint *m = t->maint;

	if (!m)
		return;
	/* the job in flight gives up at its next step */
	__atomic_store_n(&t->stopping, 1, __ATOMIC_RELEASE);
	workq_free(m->wq); /* queued jobs: job_cancel */
	t->maint = NULL;
	free(m);
}
