/*
 * evict — the evictor thread: dropping clean chunks, spilling dirty ones
 * into segments on a fixed pool of io_workers spill threads, and the
 * writer/evictor room handshake. After each round it chooses segments for
 * the maintenance worker (maint_plan: delete, compact, demote), which does
 * that I/O on its own thread: a compaction or demotion never holds up a
 * spill.
 *
 * DESIGN
 * - One thread wakes when hot usage (allocated + reserved) crosses
 *   spill_threshold x budget, when a writer waits, when memory pressure
 *   shrinks the budget (pressure.c), or every 200 ms, and works until usage
 *   is below low_watermark x budget (budget: hot_size, less under pressure):
 *     1. drops HOT_CLEAN chunks that were read or written since they
 *        came into RAM, least recently used first (no I/O), but only those
 *        older than the oldest HOT_DIRTY chunk (not written around);
 *     2. gathers the HOT_DIRTY chunks written around (tier/admit: a
 *        streaming writer's, under pressure), all of them, then HOT_DIRTY
 *        chunks LRU-first, at least min_spill_size bytes; in that same
 *        walk a HOT_CLEAN chunk met before the room is covered is dropped
 *        instead of gathering a newer dirty one, as long as more than
 *        min_spill_size is still to free (a pressure round asks for 35 %
 *        of the tier: gathering dirty chunks alone spilled and dropped the
 *        ones written a moment ago while older clean ones stayed),
 *        sorts them by (inode, chunk), cuts them into segments of about
 *        min_spill_size and writes up to io_workers segments in parallel.
 *        Under pressure (above hard_watermark, or a writer waiting) it also
 *        writes a partial segment rather than wait for min_spill_size, and
 *        so it does for what a closed written-around file left. Written-
 *        around chunks are spilled once a segment's worth is dirty even
 *        below the thresholds, and the room they free is not asked of the
 *        hot data (step 1 drops less). Then, if usage is still above
 *        low_watermark (no spill: too little dirty and no pressure, or the
 *        cold tier failing), the rest of the clean chunks, LRU first.
 *        Dropping every clean chunk before any dirty one, as step 1 once
 *        did, let the dirty chunks of files last written long ago fill the
 *        tier while the clean chunks of the files read a moment ago went: a
 *        session resumed twice in a row found its file cold
 *        (examples/integrations/sessions.py, test_sessions).
 *     3. drops the HOT_CLEAN chunks restored ahead of a reader and not yet
 *        read (index.h: unread), LRU first: only what steps 1-2 left short,
 *        and only down to the spill threshold (or one chunk for a waiter).
 *        A chunk restored ahead is newer than the reader's chunks behind
 *        it, yet plain LRU took it first (its restore is older than the
 *        reader's last read), and a reader slower than the restores then
 *        restored it again: 2.1x the bytes read with restore=open
 *        (bench/ray/restore_amp.py), as Ray's restores showed.
 * - Spill pool: a workq of io_workers threads created at evict_start, at
 *   most 4 x io_workers jobs queued; a batch (this thread's, an fsync's,
 *   the unmount flush's) keeps at most io_workers segments in it and waits
 *   for them. A
 *   lone segment, or one that finds the pool full, is written on the
 *   caller's thread. The pool outlives the evictor thread (evict_stop) for
 *   the unmount flush; evict_pool_stop ends it.
 * - Writing one segment and dropping hot copies is spill.c; choosing the
 *   candidates is cand.c.
 * - Pinned files, RESTORING chunks and chunks pinned by requests are never
 *   candidates; nor are files with passthrough writers (tier.h), and a
 *   file with any passthrough open is never punched.
 * - Lock order: index lock, inode lock, segtab.lock, evictor lock (a leaf).
 *   A batch's lock and the pool's are leaves too.
 */
#include "tier/tier_i.h"
#include "tier/admit/admit.h"
#include "tier/spill/cand.h"
#include "tier/spill/spill.h"
#include "tier/extent/extent.h"
#include "tier/spill/to_extent.h"
#include "index/journal.h"
#include "tier/spill/maint.h"
#include "common/workq.h"

#include "common/clock.h"
#include "common/log.h"
#include "tier/segment/segment.h"
#include "tier/store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The evictor room (t->ev): its thread, its handshake with writers and
 * restores, the cold tier's last verdict, and the spill pool. */
struct evictor {
	pthread_mutex_t lock; /* guards the fields down to backoff_until */
	pthread_cond_t room;  /* hot room was freed */
	pthread_cond_t wake;  /* evictor: work to do */
	unsigned writers_waiting;
	unsigned restores_waiting; /* restores waiting for room (evict_room_for_restore) */
	uint64_t rounds;	   /* evictor rounds finished */
	int stuck;		   /* the last busy round freed nothing */
	int cold_failing;	   /* last spill failed with an I/O error */
	uint64_t backoff_until;	   /* no spill before (clock_now_ns) */
	uint64_t aged_at;	   /* index tick of the last age_clamp pass (atomic) */
	uint64_t flush_total;	   /* unmount: dirty bytes to spill (atomic) */
	/* evict_start .. evict_stop, and the pool to evict_pool_stop: the
	 * thread that starts and stops the tier */
	pthread_t th;
	int started;
	struct workq *spool; /* the spill pool; NULL: not started (spills run inline) */
};

/* A chunk keeps the low 32 bits of the index tick, so an age is only
 * unambiguous below 2^31. Every AGE_PASS ticks the evictor moves every hot
 * chunk older than AGE_MAX up to AGE_MAX: ages then stay under
 * AGE_MAX + AGE_PASS < 2^31, the oldest chunks still sort first (tied among
 * themselves), and a chunk idle for hours on a busy node is not mistaken
 * for a new one. Chunks with no hot copy need no age. */
#define AGE_MAX (1u << 30)
#define AGE_PASS (1ull << 29)

static void age_clamp(struct tier *t)
{
	struct evictor *e = t->ev;
	uint64_t now = idx_tick_now(t->idx), *inos;
	size_t n;

	if (now - __atomic_load_n(&e->aged_at, __ATOMIC_RELAXED) < AGE_PASS ||
	    hot_list_inos(t->hot, &inos, &n) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		struct inode *in = idx_get(t->idx, inos[i]);
		if (!in)
			continue;
		idx_inode_lock(in);
		for (uint64_t c = 0; c < in->nchunks; c++) {
			struct chunk *ch = &in->chunks[c];
			uint32_t age = (uint32_t)now - ch->atime;
			if (age > AGE_MAX && age <= UINT32_MAX / 2) /* above: from the future */
				ch->atime = (uint32_t)now - AGE_MAX;
		}
		idx_inode_unlock(in);
		idx_put(t->idx, in);
	}
	free(inos);
	__atomic_store_n(&e->aged_at, now, __ATOMIC_RELAXED);
}

void evict_room_freed(struct tier *t)
{
	struct evictor *e = t->ev;

	pthread_mutex_lock(&e->lock);
	pthread_cond_broadcast(&e->room);
	pthread_mutex_unlock(&e->lock);
}

void evict_kick(struct tier *t)
{
	pthread_cond_signal(&t->ev->wake);
}

void evict_budget_changed(struct tier *t)
{
	struct evictor *e = t->ev;

	pthread_mutex_lock(&e->lock);
	pthread_cond_broadcast(&e->wake);
	pthread_cond_broadcast(&e->room);
	pthread_mutex_unlock(&e->lock);
}

unsigned evict_waiters(struct tier *t, int *cold_full)
{
	struct evictor *e = t->ev;
	unsigned n;

	pthread_mutex_lock(&e->lock);
	n = e->writers_waiting;
	if (cold_full)
		*cold_full = t->cold_full;
	pthread_mutex_unlock(&e->lock);
	return n;
}

int evict_cold_failing(struct tier *t)
{
	struct evictor *e = t->ev;
	int failing;

	pthread_mutex_lock(&e->lock);
	failing = e->cold_failing;
	pthread_mutex_unlock(&e->lock);
	return failing;
}

uint64_t evict_flush_total(struct tier *t)
{
	return __atomic_load_n(&t->ev->flush_total, __ATOMIC_RELAXED);
}

uint64_t evict_aged_at(struct tier *t)
{
	return __atomic_load_n(&t->ev->aged_at, __ATOMIC_RELAXED);
}

/* The writer half of the handshake: evict_room_freed() above is the evictor's. */
int64_t evict_wait_room(struct tier *t, int fd, uint64_t off, uint64_t len)
{
	struct evictor *e = t->ev;
	int64_t r = hot_try_reserve(t->hot, fd, off, len);
	struct timespec deadline;

	if (r >= 0 || !t->store)
		goto out;
	deadline = clock_deadline_ms(t->cfg->write_wait_ms);
	__atomic_add_fetch(&t->st.write_waits, 1, __ATOMIC_RELAXED);
	uint64_t w0 = clock_now_ns();
	pthread_mutex_lock(&e->lock);
	e->writers_waiting++;
	while ((r = hot_try_reserve(t->hot, fd, off, len)) < 0 && !t->stopping) {
		uint64_t rounds = e->rounds;
		pthread_cond_broadcast(&e->wake);
		if (pthread_cond_timedwait(&e->room, &e->lock, &deadline) == ETIMEDOUT) {
			r = hot_try_reserve(t->hot, fd, off, len);
			break;
		}
		/* a round freed nothing while passed-through files hold RAM the
		 * evictor may not take (tier.h): overshoot by those, never
		 * ENOSPC for want of RAM that only a close gives back */
		if (e->rounds != rounds && e->stuck &&
		    (r = hot_reserve_beside_pinned(t->hot, off, len)) >= 0)
			break;
	}
	e->writers_waiting--;
	pthread_mutex_unlock(&e->lock);
	hist_observe(&t->st.h_wait, clock_now_ns() - w0);
out:
	if (r < 0)
		__atomic_add_fetch(&t->st.enospc, 1, __ATOMIC_RELAXED);
	return r;
}

int evict_wait_cold_room(struct tier *t, uint64_t until_ms)
{
	struct evictor *e = t->ev;
	uint64_t now = clock_now_ms();
	struct timespec dl;
	int again;

	if (!t->s3 || now >= until_ms)
		return 0;
	dl = clock_deadline_ms(until_ms - now < 500 ? until_ms - now : 500);
	pthread_mutex_lock(&e->lock);
	__atomic_store_n(&t->cold_full, 1, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&e->wake); /* a round, then maint_plan: demote_pick */
	pthread_cond_timedwait(&e->room, &e->lock, &dl);
	again = !t->stopping;
	pthread_mutex_unlock(&e->lock);
	return again;
}

int64_t evict_room_for_restore(struct tier *t, int fd, uint64_t off, uint64_t len)
{
	struct evictor *e = t->ev;
	int64_t r = hot_try_reserve(t->hot, fd, off, len);
	uint64_t ms = RESTORE_ROOM_WAIT_MS, w0;
	struct timespec deadline;

	if (r >= 0)
		return r;
	if (t->cfg->write_wait_ms < ms)
		ms = t->cfg->write_wait_ms;
	deadline = clock_deadline_ms(ms);
	w0 = clock_now_ns();
	__atomic_add_fetch(&t->st.restore_waits, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&e->lock);
	e->restores_waiting++;
	/* nothing can be freed when the cold tier is full or failing, or when
	 * the evictor's last round found nothing to drop or spill (RAM all
	 * pinned, in use or unspillable): then do not wait at all */
	while (t->store && !t->stopping && !t->cold_full && !e->cold_failing && !e->stuck) {
		uint64_t rounds = e->rounds;
		pthread_cond_broadcast(&e->wake);
		if (pthread_cond_timedwait(&e->room, &e->lock, &deadline) == ETIMEDOUT)
			break;
		if ((r = hot_try_reserve(t->hot, fd, off, len)) >= 0)
			break;
		if (e->rounds != rounds && e->stuck)
			break; /* a round ended without freeing anything */
	}
	e->restores_waiting--;
	pthread_mutex_unlock(&e->lock);
	if (r < 0)
		r = hot_try_reserve(t->hot, fd, off, len);
	if (r < 0) {
		__atomic_add_fetch(&t->st.restore_overshoots, 1, __ATOMIC_RELAXED);
		log_debug("restore: no hot room after %llu ms: overshooting hot_size by %llu bytes",
			  (unsigned long long)((clock_now_ns() - w0) / 1000000),
			  (unsigned long long)len);
		r = hot_force_reserve(t->hot, off, len);
	}
	return r;
}

static void drop_and_inval(struct tier *t, struct inode *in, uint64_t c)
{
	uint32_t n;
	idx_inode_lock(in);
	n = spill_drop_chunk_locked(t, in, c);
	idx_inode_unlock(in);
	/* outside the lock: the kernel may call back into us to write pages */
	if (n)
		inval_async(t, in->ino, c * t->chunk_size, n);
}

/* ---- spilling ---- */

/* One caller's segments in flight in the pool. */
struct spill_batch {
	pthread_mutex_t lock;
	pthread_cond_t done; /* a segment of the batch finished */
	unsigned inflight;   /* queued or being written by a pool thread (lock) */
	int err;	     /* the first failure seen, or 0 (lock) */
};

struct spill_job {
	struct workq_job wj; /* first: a workq_job * is a spill_job * */
	struct tier *t;
	struct cand *v; /* sorted by location */
	size_t n;
	int drop; /* punch the chunks once durable */
	int ret;
	struct spill_batch *batch;
};

/*
 * The spill pool: a workq of io_workers threads started with the evictor,
 * its one level bounded at SPILL_RING_PER_WORKER x io_workers jobs. A
 * caller that finds it full (many fsyncs at once) writes its segment on
 * its own thread, so nobody waits for room in the queue. Stopping drains
 * it: the threads write what is queued.
 */
#define SPILL_RING_PER_WORKER 4

/* A segment was committed: the cold tier works, whoever spilled (an fsync
 * or evict_file as well as the evictor), so a failing one is over and its
 * backoff with it. e->lock held. */
static void cold_works_locked(struct evictor *e)
{
	if (e->cold_failing)
		log_info("evict: the cold tier works again");
	e->cold_failing = 0;
	e->backoff_until = 0;
}

/* One segment of the job's candidates; waiters learn of the room it made. */
static void spill_job_write(struct spill_job *job)
{
	struct evictor *e = job->t->ev;
	int committed = 0;

	job->ret = spill_segment(job->t, job->v, job->n, job->drop, &committed);
	if (committed) {
		pthread_mutex_lock(&e->lock);
		cold_works_locked(e);
		pthread_mutex_unlock(&e->lock);
		evict_room_freed(job->t);
	}
}

/* A pool thread: one segment, then its batch learns how it went. */
static void spill_run(struct workq *q, struct workq_job *wj, void *arg)
{
	struct spill_job *job = (struct spill_job *)wj;
	struct spill_batch *b = job->batch;

	(void)q;
	(void)arg;
	spill_job_write(job);
	pthread_mutex_lock(&b->lock);
	if (job->ret < 0 && !b->err)
		b->err = job->ret;
	b->inflight--;
	pthread_cond_broadcast(&b->done);
	pthread_mutex_unlock(&b->lock);
}

static const struct workq_ops spill_ops = {.run = spill_run};

/* Queue job on the pool, after waiting until its batch has fewer than par
 * segments in flight (par: the pool's threads, at least 1); 0, 1 when the
 * pool is full (the caller writes it itself), or the batch's first failure
 * (nothing more is queued). */
static int spill_queue(struct workq *p, struct spill_job *job, unsigned par)
{
	struct spill_batch *b = job->batch;
	int ret = 0;

	pthread_mutex_lock(&b->lock);
	while (b->inflight >= par && !b->err)
		pthread_cond_wait(&b->done, &b->lock);
	if (b->err)
		ret = b->err;
	else
		b->inflight++;
	pthread_mutex_unlock(&b->lock);
	if (ret == 0 && workq_push(p, &job->wj, 0) < 0) {
		pthread_mutex_lock(&b->lock);
		b->inflight--;
		pthread_mutex_unlock(&b->lock);
		ret = 1;
	}
	return ret;
}

/* Write the candidates v[0..n) (sorted by location) as segments of about
 * seg_bytes, up to io_workers (the pool's threads) at once on the spill
 * pool (a lone segment on the caller's thread). No segment is started after one failed. Returns 0
 * or the first -errno. */
static int spill_batch(struct tier *t, struct cand *v, size_t n, uint64_t seg_bytes, int drop)
{
	struct workq *p = t->ev->spool;
	struct spill_batch b = {.inflight = 0};
	struct spill_job *jobs;
	size_t njobs = 0, start = 0;
	int ret = 0;

	jobs = calloc(n ? n : 1, sizeof(*jobs));
	if (!jobs)
		return -ENOMEM;
	pthread_mutex_init(&b.lock, NULL);
	pthread_cond_init(&b.done, NULL);
	while (start < n) {
		uint64_t sum = 0;
		size_t end = start;
		while (end < n && sum < seg_bytes)
			sum += v[end++].len;
		/* fold a short tail into this segment rather than write a small one */
		uint64_t rest = 0;
		for (size_t k = end; k < n; k++)
			rest += v[k].len;
		if (rest && rest < seg_bytes / 2)
			end = n;
		jobs[njobs++] = (struct spill_job){
		    .t = t, .v = v + start, .n = end - start, .drop = drop, .batch = &b};
		start = end;
	}
	for (size_t k = 0; k < njobs && ret == 0; k++) {
		int q = p && njobs > 1 ? spill_queue(p, &jobs[k], workq_threads(p)) : 1;
		if (q < 0)
			break; /* an earlier segment failed */
		if (q == 0)
			continue;
		spill_job_write(&jobs[k]); /* no pool, a lone segment, or the pool full */
		ret = jobs[k].ret;
	}
	pthread_mutex_lock(&b.lock);
	while (b.inflight)
		pthread_cond_wait(&b.done, &b.lock);
	if (ret == 0)
		ret = b.err;
	pthread_mutex_unlock(&b.lock);
	pthread_cond_destroy(&b.done);
	pthread_mutex_destroy(&b.lock);
	free(jobs);
	return ret;
}

/* Drop the clean candidates among v[0..n), sorted least recently used
 * first, that are (unread 1) or are not (0) unread, LRU first, until got
 * reaches need. (Unread ones newest first, the furthest ahead of a reader,
 * measured worse: restore=open re-queues the chunks behind a reader that
 * reopens its file, and those are the oldest.) Returns whether any went
 * (the room is announced). */
static int drop_clean(struct tier *t, struct cand *v, size_t n, int unread, uint64_t need,
		      uint64_t *got, uint32_t *youngest)
{
	int dropped = 0;

	for (size_t i = 0; i < n && *got < need; i++) {
		struct cand *cd = &v[i];
		if (cd->state != CHUNK_HOT_CLEAN || cd->unread != unread)
			continue;
		uint64_t before = hot_used(t->hot);
		drop_and_inval(t, cd->in, cd->c);
		if (cd->age < *youngest)
			*youngest = cd->age;
		uint64_t after = hot_used(t->hot);
		*got += before > after ? before - after : 0;
		dropped = 1;
	}
	if (dropped)
		evict_room_freed(t);
	return dropped;
}

static uint64_t usage(struct tier *t)
{
	return hot_used(t->hot) + hot_reserved(t->hot);
}

static int under_pressure(struct tier *t)
{
	struct evictor *e = t->ev;
	unsigned waiting;
	pthread_mutex_lock(&e->lock);
	waiting = e->writers_waiting + e->restores_waiting;
	pthread_mutex_unlock(&e->lock);
	return waiting > 0 || usage(t) > (uint64_t)(t->cfg->hard_watermark * hot_limit(t->hot));
}

/* The extents step of a round (extents=on): a closed file of
 * extent_min or more all in RAM, among the dirty candidates v[0..*nd),
 * moves whole into an extent (tier/extent) rather than into packed
 * segments: read once later, the kernel reads it from the disk at the
 * disk's speed. Its candidates leave v[0..*nd) (the rest of v keeps its
 * order: step 3 reuses it); the RAM freed is added to *got, its dirty
 * bytes taken from *dirty and *around. Stops once *got + what is left
 * reaches need, or when no directory has room. */
static void move_big_files(struct tier *t, struct cand *v, size_t *nd, uint64_t need,
			   uint64_t *got, uint64_t *dirty, uint64_t *around)
{
	struct inode *tried[64]; /* files looked at this round (their chunks recur) */
	size_t ntried = 0;

	for (size_t i = 0; i < *nd && *got < need; i++) {
		struct inode *in = v[i].in;
		int64_t freed, seen = 0;
		for (size_t k = 0; k < ntried && !seen; k++)
			seen = tried[k] == in;
		if (seen || __atomic_load_n(&in->ext, __ATOMIC_RELAXED))
			continue; /* spill_file_to_extent checks the rest under the lock */
		if (ntried < sizeof(tried) / sizeof(tried[0]))
			tried[ntried++] = in;
		if ((freed = spill_file_to_extent(t, in)) == -ENOSPC)
			return;
		if (freed < 0)
			continue;
		evict_room_freed(t);
		*got += (uint64_t)freed;
		/* its candidates go; the ones behind it close up (i is met again) */
		size_t k = 0;
		for (size_t j = 0; j < *nd; j++) {
			if (v[j].in == in) {
				*dirty -= v[j].len;
				if (v[j].around)
					*around -= v[j].len;
				continue;
			}
			struct cand tmp = v[k];
			v[k++] = v[j];
			v[j] = tmp;
		}
		*nd = k;
		i = (size_t)-1;
	}
}

/* One round of eviction. Returns 1 if it freed or spilled anything, 0 if
 * it had to and could not, -1 if there was nothing to do. */
static int evict_round(struct tier *t)
{
	struct evictor *e = t->ev;
	uint64_t limit = hot_limit(t->hot);
	uint64_t low = (uint64_t)(t->cfg->low_watermark * limit);
	uint64_t used = usage(t), need, rest, got = 0, dirty = 0, around = 0;
	struct cand_set cs = {.now = (uint32_t)idx_tick_now(t->idx)};
	size_t nd = 0;
	uint32_t youngest = UINT32_MAX, ahead = UINT32_MAX; /* ages let go */
	int pressure = under_pressure(t), progress = 0, ret, flush;
	uint64_t taken = admit_around_take(t, &flush);

	if (used <= low && !pressure && !flush && taken < t->cfg->min_spill_size) {
		admit_around_put(t, taken, flush);
		return -1;
	}
	need = used > low ? used - low : pressure ? t->chunk_size : 0;
	cand_collect_hot(t, &cs);
	/* chunks written around (tier/admit) go first, all of them: to the
	 * front, and what they free is not asked of the rest */
	for (size_t i = 0; i < cs.n; i++) {
		if (!cs.v[i].around)
			continue;
		struct cand tmp = cs.v[nd];
		cs.v[nd++] = cs.v[i];
		cs.v[i] = tmp;
		around += cs.v[nd - 1].len;
	}
	if (cs.n > nd) /* cs.v is NULL when cs.n is 0 */
		cand_sort_lru(cs.v + nd, cs.n - nd);
	/* what the rest must free; all of it under pressure (a writer waits:
	 * no bet on the written-around chunks alone) */
	rest = pressure ? need : need > around ? need - around : 0;

	/* 1. clean chunks used already, LRU first, down to the oldest dirty
	 * one: no I/O */
	size_t older = nd;
	while (older < cs.n && cs.v[older].state != CHUNK_HOT_DIRTY)
		older++;
	progress = older > nd && drop_clean(t, cs.v + nd, older - nd, 0, rest, &got, &youngest);
	/* 2. dirty chunks, batched into large segments: the written-around
	 * ones, then LRU first what the rest must free */
	dirty = around;
	if (got < rest || (around && (around >= t->cfg->min_spill_size || flush || pressure))) {
		int topup = got < rest; /* at least a segment's worth of dirty ones */
		uint64_t seg = t->cfg->min_spill_size;
		/* One walk, LRU first: dirty chunks gathered; a clean chunk met
		 * on the way goes too, when more than a segment's worth must be
		 * freed yet (it is older than the dirty ones still to come, and
		 * costs no I/O). Gathering dirty chunks alone until they covered
		 * what the rest must free spilled, and dropped, the chunks
		 * written a moment ago while older clean ones stayed. Below a
		 * segment's worth the dirty ones are gathered anyway: a clean one
		 * dropped then would go for nothing. */
		for (size_t i = nd; i < cs.n; i++) {
			uint64_t g = dirty - around;
			if (got + g >= rest && (!topup || g >= seg))
				break;
			if (cs.v[i].state == CHUNK_HOT_CLEAN && !cs.v[i].unread &&
			    got + (g > seg ? g : seg) < rest) {
				if (drop_clean(t, cs.v + i, 1, 0, rest, &got, &youngest))
					progress = 1;
				continue;
			}
			if (cs.v[i].state != CHUNK_HOT_DIRTY)
				continue;
			/* dirty ones to the front; a swap keeps every
			 * candidate for step 3 */
			struct cand tmp = cs.v[nd];
			cs.v[nd++] = cs.v[i];
			cs.v[i] = tmp;
			dirty += cs.v[nd - 1].len;
		}
		if (nd && t->cfg->extents) {
			size_t was = nd;
			move_big_files(t, cs.v, &nd, rest + around, &got, &dirty, &around);
			progress |= nd < was;
		}
		if (nd && (dirty >= t->cfg->min_spill_size || pressure || flush)) {
			cand_sort_location(cs.v, nd);
			ret = spill_batch(t, cs.v, nd, t->cfg->min_spill_size, 1);
			pthread_mutex_lock(&e->lock);
			if (ret == -ENOSPC && !t->cold_full)
				log_warn("evict: every cold directory is full: writers wait up to "
					 "write_wait, then get ENOSPC");
			else if (ret == 0 && t->cold_full)
				log_info("evict: cold tier has room again");
			if (ret == -ENOSPC)
				__atomic_store_n(&t->cold_full, 1, __ATOMIC_RELAXED);
			else if (ret == 0)
				__atomic_store_n(&t->cold_full, 0, __ATOMIC_RELAXED);
			if (ret < 0 && ret != -ENOSPC) {
				/* every cold directory failing (in its backoff): retry once a
				 * second, not as fast as writers wake us */
				if (!e->cold_failing)
					log_warn("evict: the cold tier is failing (%s): retrying "
						 "every second; writers wait up to write_wait",
						 strerror(-ret));
				e->cold_failing = 1;
				e->backoff_until = clock_now_ns() + 1000000000ull;
			} else if (ret == 0) {
				cold_works_locked(e);
			}
			pthread_mutex_unlock(&e->lock);
			progress = ret == 0;
			for (size_t i = 0; ret == 0 && i < nd; i++)
				if (!cs.v[i].around && cs.v[i].age < youngest)
					youngest = cs.v[i].age;
			if (ret == 0)
				around = 0; /* spilled (or rewritten meanwhile: dirty as any) */
		}
	}
	admit_around_put(t, around, flush);
	/* then the clean chunks newer than a dirty one, LRU first, if the
	 * spill did not make the room (it dropped what it wrote: usage says).
	 * Those step 1 dropped are met again and free nothing. */
	uint64_t now = usage(t);
	if (got < rest && now > low && cs.n > nd) {
		uint64_t more = 0;
		cand_sort_lru(cs.v + nd, cs.n - nd); /* step 2 moved some */
		if (drop_clean(t, cs.v + nd, cs.n - nd, 0, now - low, &more, &youngest))
			progress = 1;
		got += more;
	}
	/* 3. chunks restored ahead of their readers, last, and only down to
	 * the spill threshold (prefetch stops there too): each one dropped is
	 * restored again when its reader gets there */
	uint64_t thr = (uint64_t)(t->cfg->spill_threshold * limit);
	uint64_t need_ahead = used > thr ? used - thr : pressure ? t->chunk_size : 0;
	if (got < need_ahead && cs.n > nd) { /* cs.v is NULL when cs.n is 0 */
		cand_sort_lru(cs.v + nd, cs.n - nd); /* step 2 moved some */
		if (drop_clean(t, cs.v + nd, cs.n - nd, 1, need_ahead, &got, &ahead))
			progress = 1;
	}
	/* the admission filter's horizon: chunks used this long ago go */
	if (youngest != UINT32_MAX)
		admit_note_evicted(t, youngest);
	cand_free(t, &cs);
	return progress;
}

int evict_file(struct tier *t, struct inode *in, int drop)
{
	struct cand_set cs = {.now = (uint32_t)idx_tick_now(t->idx)};
	size_t nd = 0;
	int ret = 0;

	idx_inode_lock(in);
	/* a close's RELEASE reaches the daemon after the close returned (the
	 * kernel sends it in the background): an evict right after the last
	 * close waits for it, a little */
	if (drop && !in->pinned && in->pt_opens) {
		struct timespec dl;
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += 1;
		while (in->pt_opens && idx_inode_timedwait(in, &dl) == 0)
			;
	}
	/* pinned, or passed through to the kernel: its RAM stays (tier.h) */
	ret = drop && (in->pinned || in->pt_opens) ? -EBUSY : 0;
	idx_inode_unlock(in);
	if (ret < 0)
		return ret;

	/* the caller holds a reference on in: no walk of the whole index */
	if (S_ISREG(idx_type(in)) && cand_collect_file(t, &cs, in, 1) > 0) {
		idx_ref(t->idx, in);
		cs.refs[cs.nrefs++] = in;
	}
	if (cs.oom) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < cs.n; i++)
		if (cs.v[i].state == CHUNK_HOT_DIRTY)
			cs.v[nd++] = cs.v[i];
	if (nd) {
		cand_sort_location(cs.v, nd);
		/* segments of min_spill_size, io_workers of them in parallel */
		ret = spill_batch(t, cs.v, nd, t->cfg->min_spill_size, drop);
	}
	if (drop && ret == 0) {
		idx_inode_lock(in);
		uint64_t n = in->nchunks;
		idx_inode_unlock(in);
		for (uint64_t c = 0; c < n; c++)
			drop_and_inval(t, in, c);
		evict_room_freed(t);
	}
out:
	cand_free(t, &cs);
	return ret;
}

int evict_flush_all(struct tier *t)
{
	struct evictor *e = t->ev;
	struct cand_set cs = {.now = (uint32_t)idx_tick_now(t->idx)};
	uint64_t *inos, dirty = 0;
	size_t n, nd = 0;
	int ret = 0;

	if (hot_list_inos(t->hot, &inos, &n) < 0)
		return -ENOMEM;
	/* every file with a hot file, pinned ones too; unlinked files have
	 * nothing worth keeping (recovery drops them) */
	for (size_t i = 0; i < n && !cs.oom; i++) {
		struct inode *in = idx_get(t->idx, inos[i]);
		if (!in)
			continue;
		/* nlink changes under the index and inode locks: read it under
		 * the inode's */
		idx_inode_lock(in);
		int linked = in->nlink > 0;
		idx_inode_unlock(in);
		if (S_ISREG(idx_type(in)) && linked && cand_collect_file(t, &cs, in, 1) > 0)
			cs.refs[cs.nrefs++] = in;
		else
			idx_put(t->idx, in);
	}
	free(inos);
	if (cs.oom) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < cs.n; i++)
		if (cs.v[i].state == CHUNK_HOT_DIRTY) {
			dirty += cs.v[i].len;
			cs.v[nd++] = cs.v[i];
		}
	__atomic_store_n(&e->flush_total, dirty, __ATOMIC_RELAXED);
	if (nd) {
		cand_sort_location(cs.v, nd);
		/* partial segments allowed; io_workers of them in parallel */
		ret = spill_batch(t, cs.v, nd, t->cfg->min_spill_size, 0);
	}
	/* every clean copy goes; a chunk whose spill failed stays dirty, in RAM */
	for (size_t i = 0; i < cs.nrefs; i++) {
		struct inode *in = cs.refs[i];
		idx_inode_lock(in);
		uint64_t nc = in->nchunks;
		idx_inode_unlock(in);
		for (uint64_t c = 0; c < nc; c++)
			drop_and_inval(t, in, c);
	}
out:
	cand_free(t, &cs);
	return ret;
}

static void *evictor(void *arg)
{
	struct tier *t = arg;
	struct evictor *e = t->ev;
	uint64_t threshold;

	pthread_mutex_lock(&e->lock);
	while (!t->stopping) {
		/* the budget moves under memory pressure (pressure.c) */
		threshold = (uint64_t)(t->cfg->spill_threshold * hot_limit(t->hot));
		int flush, busy = usage(t) > threshold ||
				  e->writers_waiting + e->restores_waiting > 0 ||
				  admit_around_ready(t, &flush);
		if (!busy)
			e->stuck = 0; /* idle: the next waiter gets a fresh round */
		if (!busy) {
			struct timespec dl = clock_deadline_ms(200);
			pthread_cond_timedwait(&e->wake, &e->lock, &dl);
		}
		if (t->stopping)
			break;
		threshold = (uint64_t)(t->cfg->spill_threshold * hot_limit(t->hot));
		busy = usage(t) > threshold || e->writers_waiting + e->restores_waiting > 0 ||
		       admit_around_ready(t, &flush);
		if (busy && clock_now_ns() < e->backoff_until) {
			/* the cold tier failed a moment ago: wait out the backoff */
			struct timespec dl = clock_deadline_ms(
			    (e->backoff_until - clock_now_ns()) / 1000000 + 1);
			pthread_cond_timedwait(&e->wake, &e->lock, &dl);
			if (clock_now_ns() < e->backoff_until)
				busy = 0;
		}
		pthread_mutex_unlock(&e->lock);
		age_clamp(t);
		int r = busy ? evict_round(t) : -1, progress = r != 0;
		if (busy) {
			/* restores waiting for room learn whether this round could
			 * free any */
			pthread_mutex_lock(&e->lock);
			e->rounds++;
			e->stuck = r == 0;
			pthread_cond_broadcast(&e->room);
			pthread_mutex_unlock(&e->lock);
		}
		/* choose segments to delete, compact and demote: the maintenance
		 * worker does the I/O, never this thread */
		maint_plan(t);
		pthread_mutex_lock(&e->lock);
		if (busy && !progress && !t->stopping) {
			/* nothing evictable right now (or the cold tier failed): back off */
			struct timespec dl = clock_deadline_ms(t->cold_full ? 500 : 50);
			pthread_cond_timedwait(&e->wake, &e->lock, &dl);
		}
	}
	pthread_mutex_unlock(&e->lock);
	return NULL;
}

void evict_pool_stop(struct tier *t)
{
	workq_free(t->ev->spool); /* the threads write what is queued, then exit */
	t->ev->spool = NULL;
}

int evict_start(struct tier *t)
{
	struct evictor *e = t->ev;
	/* io_workers spill threads, created once: no thread per segment */
	unsigned n = t->cfg->io_workers ? t->cfg->io_workers : 1;
	int ret = e->spool ? 0
			   : workq_new(&spill_ops, NULL, n, 1, n * SPILL_RING_PER_WORKER, &e->spool);

	if (ret < 0)
		return ret;
	ret = pthread_create(&e->th, NULL, evictor, t);
	if (ret)
		return -ret;
	e->started = 1;
	return 0;
}

void evict_stop(struct tier *t)
{
	struct evictor *e = t->ev;

	if (!e->started)
		return;
	pthread_mutex_lock(&e->lock);
	__atomic_store_n(&t->stopping, 1, __ATOMIC_RELEASE); /* read without the lock too */
	pthread_cond_broadcast(&e->wake);
	pthread_cond_broadcast(&e->room);
	pthread_mutex_unlock(&e->lock);
	pthread_join(e->th, NULL);
	e->started = 0;
}

int evict_new(struct tier *t)
{
	struct evictor *e = calloc(1, sizeof(*e));

	if (!e)
		return -ENOMEM;
	pthread_mutex_init(&e->lock, NULL);
	pthread_cond_init(&e->room, NULL);
	pthread_cond_init(&e->wake, NULL);
	t->ev = e;
	return 0;
}

void evict_free(struct tier *t)
{
	struct evictor *e = t->ev;

	if (!e)
		return;
	evict_pool_stop(t);
	pthread_cond_destroy(&e->room);
	pthread_cond_destroy(&e->wake);
	pthread_mutex_destroy(&e->lock);
	free(e);
	t->ev = NULL;
}
