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
 * - Order: deletes first (a batch of every queued one: one push of the
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
 * - Locks: the maint lock guards the queues and is never held with
 *   another (picks and gc_busy changes take the table's lock after it is
 *   dropped); jobs take index, inode and segtab locks in their order.
 */
#include "tier/maint.h"
#include "tier/tier_i.h"

#include <errno.h>
#include <stdlib.h>

struct maint_q {
	uint64_t id[MAINT_QUEUE_MAX]; /* a ring */
	unsigned head, n;
};

struct maint {
	struct tier *t;
	pthread_mutex_t lock;
	pthread_cond_t cond;		/* a job was queued, or stop */
	struct maint_q q[MAINT_KINDS];	/* (lock) */
	unsigned running[MAINT_KINDS];	/* jobs of a kind being run (lock) */
	int stop;			/* (lock) */
	uint64_t job[MAINT_QUEUE_MAX];	/* the worker's jobs in hand */
	uint64_t pick[MAINT_QUEUE_MAX]; /* the planner's picks */
	pthread_t th;
};

/* Take up to max jobs of one kind off its queue into out (lock held). */
static size_t take_locked(struct maint *m, enum maint_kind k, uint64_t *out, size_t max)
{
	struct maint_q *q = &m->q[k];
	size_t n = 0;
	while (q->n && n < max) {
		out[n++] = q->id[q->head];
		q->head = (q->head + 1) % MAINT_QUEUE_MAX;
		q->n--;
	}
	return n;
}

static void *maint_worker(void *arg)
{
	struct maint *m = arg;
	struct tier *t = m->t;

	pthread_mutex_lock(&m->lock);
	for (;;) {
		enum maint_kind k = MAINT_KINDS;
		size_t n = 0;
		int ret;

		while (!m->stop && !m->q[MAINT_DELETE].n && !m->q[MAINT_COMPACT].n &&
		       !m->q[MAINT_DEMOTE].n)
			pthread_cond_wait(&m->cond, &m->lock);
		if (m->stop)
			break;
		for (k = 0; k < MAINT_KINDS && !m->q[k].n; k++)
			;
		n = take_locked(m, k, m->job, k == MAINT_DELETE ? MAINT_QUEUE_MAX : 1);
		m->running[k] = (unsigned)n;
		pthread_mutex_unlock(&m->lock);
		ret = 0;
		switch (k) {
		case MAINT_DELETE:
			gc_delete(t, m->job, n);
			break;
		case MAINT_COMPACT:
			gc_compact(t, m->job[0]);
			break;
		default:
			ret = demote_segment(t, m->job[0]);
			break;
		}
		pthread_mutex_lock(&m->lock);
		m->running[k] = 0;
		if (k == MAINT_DEMOTE && ret != 0) {
			/* failed, or the nvme tier is low enough: the batch ends */
			n = take_locked(m, MAINT_DEMOTE, m->job, MAINT_QUEUE_MAX);
			pthread_mutex_unlock(&m->lock);
			segtab_unbusy(t->segtab, m->job, n);
			pthread_mutex_lock(&m->lock);
		}
	}
	/* stopping: cancel what is still queued */
	for (int k = 0; k < MAINT_KINDS; k++) {
		size_t n = take_locked(m, k, m->job, MAINT_QUEUE_MAX);
		segtab_unbusy(t->segtab, m->job, n);
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

/* Queue ids[0..n) of kind k; the planner picked no more than the room. */
static void queue(struct maint *m, enum maint_kind k, const uint64_t *ids, size_t n)
{
	struct maint_q *q = &m->q[k];
	size_t i;

	if (!n)
		return;
	pthread_mutex_lock(&m->lock);
	for (i = 0; i < n && q->n < MAINT_QUEUE_MAX; i++)
		q->id[(q->head + q->n++) % MAINT_QUEUE_MAX] = ids[i];
	pthread_cond_signal(&m->cond);
	pthread_mutex_unlock(&m->lock);
	if (i < n) /* only one planner: cannot happen, but never lose a busy mark */
		segtab_unbusy(m->t->segtab, ids + i, n - i);
}

void maint_plan(struct tier *t)
{
	struct maint *m = t->maint;
	uint64_t compact = 0;
	size_t room, n;
	int want_compact, want_demote;

	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	room = MAINT_QUEUE_MAX - m->q[MAINT_DELETE].n;
	want_compact = !m->q[MAINT_COMPACT].n && !m->running[MAINT_COMPACT];
	want_demote = !m->q[MAINT_DEMOTE].n && !m->running[MAINT_DEMOTE];
	pthread_mutex_unlock(&m->lock);

	n = gc_pick(t, m->pick, room, want_compact ? &compact : NULL);
	queue(m, MAINT_DELETE, m->pick, n);
	if (compact)
		queue(m, MAINT_COMPACT, &compact, 1);
	if (want_demote)
		queue(m, MAINT_DEMOTE, m->pick, demote_pick(t, m->pick, MAINT_QUEUE_MAX));
}

unsigned maint_pending(struct tier *t)
{
	struct maint *m = t->maint;
	unsigned n = 0;

	if (!m)
		return 0;
	pthread_mutex_lock(&m->lock);
	for (int k = 0; k < MAINT_KINDS; k++)
		n += m->q[k].n + m->running[k];
	pthread_mutex_unlock(&m->lock);
	return n;
}

int maint_start(struct tier *t)
{
	struct maint *m = calloc(1, sizeof(*m));
	int ret;

	if (!m)
		return -ENOMEM;
	m->t = t;
	pthread_mutex_init(&m->lock, NULL);
	pthread_cond_init(&m->cond, NULL);
	if ((ret = pthread_create(&m->th, NULL, maint_worker, m)) != 0) {
		pthread_cond_destroy(&m->cond);
		pthread_mutex_destroy(&m->lock);
		free(m);
		return -ret;
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
	pthread_mutex_lock(&m->lock);
	m->stop = 1;
	pthread_cond_signal(&m->cond);
	pthread_mutex_unlock(&m->lock);
	pthread_join(m->th, NULL);
	t->maint = NULL;
	pthread_cond_destroy(&m->cond);
	pthread_mutex_destroy(&m->lock);
	free(m);
}
