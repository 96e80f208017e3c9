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
 *     1. drops HOT_CLEAN chunks, least recently used first (no I/O);
 *     2. gathers HOT_DIRTY chunks LRU-first, at least min_spill_size bytes,
 *        sorts them by (inode, chunk), cuts them into segments of about
 *        min_spill_size and writes up to io_workers segments in parallel.
 *        Under pressure (above hard_watermark, or a writer waiting) it also
 *        writes a partial segment rather than wait for min_spill_size.
 * - Spill pool: io_workers threads created at evict_start and a ring of
 *   4 x io_workers jobs; a batch (this thread's, an fsync's, the unmount
 *   flush's) keeps at most io_workers segments in it and waits for them. A
 *   lone segment, or one that finds the ring full, is written on the
 *   caller's thread. The pool outlives the evictor thread (evict_stop) for
 *   the unmount flush; evict_pool_stop ends it.
 * - Spill of one chunk: HOT_DIRTY -> SPILLING (generation noted) -> payload
 *   copied into the segment -> segment durable (seg_writer_finish) -> for
 *   each chunk whose state is still SPILLING with the same generation: its
 *   location is recorded and, unless a request has it pinned, its hole is
 *   punched (COLD) and the kernel's page cache for it invalidated. A chunk
 *   written during the spill went back to HOT_DIRTY: its copy in the
 *   segment is dead weight for GC. A failed segment puts every chunk back
 *   to HOT_DIRTY: a hot copy is never dropped before its segment is durable.
 * - Pinned files, RESTORING chunks and chunks pinned by requests are never
 *   candidates; nor are files with passthrough writers (tier.h), and a
 *   file with any passthrough open is never punched.
 * - Lock order: index lock, inode lock, segtab.lock, tier lock.
 */
#include "tier/tier_i.h"
#include "index/journal.h"
#include "tier/maint.h"

#include "common/clock.h"
#include "common/log.h"
#include "tier/segment.h"
#include "tier/store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct cand {
	struct inode *in;
	uint64_t c;
	uint32_t age; /* index ticks since the chunk's last access (mod 2^32) */
	uint32_t len;
	uint8_t state;
};

struct cand_set {
	struct cand *v;
	size_t n, cap;
	struct inode **refs; /* one internal ref per inode in v */
	size_t nrefs, refcap;
	int oom;
	uint32_t now; /* the index tick when collecting began (low 32 bits) */
};

/* ---- candidates ---- */

static int cand_push(struct cand_set *cs, const struct cand *c)
{
	if (cs->n == cs->cap) {
		size_t ncap = cs->cap ? cs->cap * 2 : 1024;
		struct cand *nv = realloc(cs->v, ncap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		cs->v = nv;
		cs->cap = ncap;
	}
	cs->v[cs->n++] = *c;
	return 0;
}

/* Ticks since atime at now, both the low 32 bits of the index tick. An
 * access after now (a reader racing the collection) counts as age 0, not as
 * 2^32 - 1: the wrap-around age of a tick from the future. */
static uint32_t chunk_age(uint32_t now, uint32_t atime)
{
	uint32_t age = now - atime;
	return age > UINT32_MAX / 2 ? 0 : age;
}

/* Candidates of one file: its hot chunks. For a whole-tier round (only ==
 * NULL) pinned files and chunks in use are skipped; for one file (fsync,
 * evict xattr) a chunk in use is still spilled: a write racing the spill
 * bumps the generation and the copy is not trusted, and a chunk in use is
 * never dropped. Returns the number of candidates added or -ENOMEM. */
static long collect_chunks(struct tier *t, struct cand_set *cs, struct inode *in, int only)
{
	size_t before = cs->n;
	idx_inode_lock(in);
	/* a file with passthrough writers is written behind our back: its
	 * chunks are spilled at fsync and after the last such close */
	if ((!in->pinned && !in->pt_writers) || only) {
		for (uint64_t c = 0; c < in->nchunks; c++) {
			struct chunk *ch = &in->chunks[c];
			uint32_t len = tier_chunk_len(t, in->size, c);
			if ((ch->pins && !only) || len == 0 ||
			    (ch->state != CHUNK_HOT_CLEAN && ch->state != CHUNK_HOT_DIRTY) ||
			    (ch->state == CHUNK_HOT_CLEAN && in->pt_opens && !only))
				continue;
			struct cand cd = {
			    .in = in, .c = c, .age = chunk_age(cs->now, ch->atime), .len = len, .state = ch->state};
			if (cand_push(cs, &cd) < 0) {
				cs->oom = 1;
				break;
			}
		}
	}
	idx_inode_unlock(in);
	if (cs->n > before && cs->nrefs == cs->refcap) {
		size_t ncap = cs->refcap ? cs->refcap * 2 : 256;
		struct inode **nr = realloc(cs->refs, ncap * sizeof(*nr));
		if (!nr) {
			cs->n = before;
			cs->oom = 1;
			return -ENOMEM;
		}
		cs->refs = nr;
		cs->refcap = ncap;
	}
	return (long)(cs->n - before);
}

/* Candidates of every file with a hot file (the only ones with hot chunks:
 * O(hot files), not O(files)). */
static void collect_hot(struct tier *t, struct cand_set *cs)
{
	uint64_t *inos;
	size_t n;

	if (hot_list_inos(t->hot, &inos, &n) < 0) {
		cs->oom = 1;
		return;
	}
	for (size_t i = 0; i < n && !cs->oom; i++) {
		struct inode *in = idx_get(t->idx, inos[i]);
		if (!in)
			continue;
		/* only regular files have hot files */
		if (collect_chunks(t, cs, in, 0) > 0)
			cs->refs[cs->nrefs++] = in; /* the ref is the candidate set's now */
		else
			idx_put(t->idx, in);
	}
	free(inos);
}

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
	uint64_t now = idx_tick_now(t->idx), *inos;
	size_t n;

	if (now - __atomic_load_n(&t->aged_at, __ATOMIC_RELAXED) < AGE_PASS ||
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
	__atomic_store_n(&t->aged_at, now, __ATOMIC_RELAXED);
}

static void cand_free(struct tier *t, struct cand_set *cs)
{
	for (size_t i = 0; i < cs->nrefs; i++)
		idx_put(t->idx, cs->refs[i]);
	free(cs->refs);
	free(cs->v);
	memset(cs, 0, sizeof(*cs));
}

/* Least recently used first: the oldest age first. Ages, not tick values,
 * so the order holds across the 32-bit tick's wrap. */
static int by_age(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	return x->age > y->age ? -1 : x->age < y->age;
}

static int by_location(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	if (x->in->ino != y->in->ino)
		return x->in->ino < y->in->ino ? -1 : 1;
	return x->c < y->c ? -1 : x->c > y->c;
}

/* ---- dropping hot copies ---- */

/* Punch chunk c out of RAM if it is HOT_CLEAN and unpinned. in->lock held.
 * Returns bytes of the chunk dropped (0 if it was not). */
static uint32_t drop_chunk_locked(struct tier *t, struct inode *in, uint64_t c)
{
	struct chunk *ch = &in->chunks[c];
	uint32_t len = tier_chunk_len(t, in->size, c);
	int fd;

	/* the kernel reads a passthrough open's hot file itself: never punched
	 * (t->pt is NULL once the session is gone: then no kernel does) */
	if (ch->state != CHUNK_HOT_CLEAN || ch->pins || len == 0 || !ch->seg_id ||
	    (in->pt_opens && tier_pt(t)))
		return 0;
	fd = hot_fd_get_locked(t->hot, in);
	if (fd < 0)
		return 0;
	/* the whole chunk range, not just its bytes: tmpfs frees only whole
	 * pages, and a file's last partial page would otherwise stay in RAM */
	if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(c * t->chunk_size),
		      (off_t)t->chunk_size) < 0) {
		log_warn("evict: cannot punch inode %llu chunk %llu: %s",
			 (unsigned long long)in->ino, (unsigned long long)c, strerror(errno));
		hot_fd_put_locked(t->hot, in);
		return 0;
	}
	ch->state = CHUNK_COLD;
	if (ch->chain) {
		/* RAM holds none of it now (no write is in flight: unpinned) */
		ch->chain->partial = 1;
		memset(ch->chain->have, 0, chain_words(t->chunk_size) * sizeof(uint64_t));
	}
	hot_account_locked(t->hot, in);
	hot_fd_put_locked(t->hot, in);
	return len;
}

static void room_freed(struct tier *t)
{
	pthread_mutex_lock(&t->lock);
	pthread_cond_broadcast(&t->room);
	pthread_mutex_unlock(&t->lock);
}

/* The writer half of the handshake: room_freed() above is the evictor's. */
int64_t evict_wait_room(struct tier *t, int fd, uint64_t off, uint64_t len)
{
	int64_t r = hot_try_reserve(t->hot, fd, off, len);
	struct timespec deadline;

	if (r >= 0 || !t->store)
		goto out;
	deadline = clock_deadline_ms(t->cfg->write_wait_ms);
	__atomic_add_fetch(&t->st.write_waits, 1, __ATOMIC_RELAXED);
	uint64_t w0 = clock_now_ns();
	pthread_mutex_lock(&t->lock);
	t->writers_waiting++;
	while ((r = hot_try_reserve(t->hot, fd, off, len)) < 0 && !t->stopping) {
		uint64_t rounds = t->evict_rounds;
		pthread_cond_broadcast(&t->wake);
		if (pthread_cond_timedwait(&t->room, &t->lock, &deadline) == ETIMEDOUT) {
			r = hot_try_reserve(t->hot, fd, off, len);
			break;
		}
		/* a round freed nothing while passed-through files hold RAM the
		 * evictor may not take (tier.h): overshoot by those, never
		 * ENOSPC for want of RAM that only a close gives back */
		if (t->evict_rounds != rounds && t->evict_stuck &&
		    (r = hot_reserve_beside_pinned(t->hot, off, len)) >= 0)
			break;
	}
	t->writers_waiting--;
	pthread_mutex_unlock(&t->lock);
	hist_observe(&t->st.h_wait, clock_now_ns() - w0);
out:
	if (r < 0)
		__atomic_add_fetch(&t->st.enospc, 1, __ATOMIC_RELAXED);
	return r;
}

int evict_wait_cold_room(struct tier *t, uint64_t until_ms)
{
	uint64_t now = clock_now_ms();
	struct timespec dl;
	int again;

	if (!t->s3 || now >= until_ms)
		return 0;
	dl = clock_deadline_ms(until_ms - now < 500 ? until_ms - now : 500);
	pthread_mutex_lock(&t->lock);
	t->cold_full = 1;
	pthread_cond_broadcast(&t->wake); /* a round, then maint_plan: demote_pick */
	pthread_cond_timedwait(&t->room, &t->lock, &dl);
	again = !t->stopping;
	pthread_mutex_unlock(&t->lock);
	return again;
}

int64_t evict_room_for_restore(struct tier *t, int fd, uint64_t off, uint64_t len)
{
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
	pthread_mutex_lock(&t->lock);
	t->restores_waiting++;
	/* nothing can be freed when the cold tier is full or failing, or when
	 * the evictor's last round found nothing to drop or spill (RAM all
	 * pinned, in use or unspillable): then do not wait at all */
	while (t->store && !t->stopping && !t->cold_full && !t->cold_failing && !t->evict_stuck) {
		uint64_t rounds = t->evict_rounds;
		pthread_cond_broadcast(&t->wake);
		if (pthread_cond_timedwait(&t->room, &t->lock, &deadline) == ETIMEDOUT)
			break;
		if ((r = hot_try_reserve(t->hot, fd, off, len)) >= 0)
			break;
		if (t->evict_rounds != rounds && t->evict_stuck)
			break; /* a round ended without freeing anything */
	}
	t->restores_waiting--;
	pthread_mutex_unlock(&t->lock);
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
	n = drop_chunk_locked(t, in, c);
	idx_inode_unlock(in);
	/* outside the lock: the kernel may call back into us to write pages */
	if (n)
		inval_async(t, in->ino, c * t->chunk_size, n);
}

/* ---- spilling ---- */

/* One caller's segments in flight in the pool. Protected by the pool's lock. */
struct spill_batch {
	unsigned inflight; /* queued or being written by a pool thread */
	int err;	   /* the first failure seen, or 0 */
};

struct spill_job {
	struct tier *t;
	struct cand *v; /* sorted by location */
	size_t n;
	int drop; /* punch the chunks once durable */
	int ret;
	struct spill_batch *batch;
};

/*
 * The spill pool: io_workers threads started with the evictor, and a
 * bounded ring of jobs (SPILL_RING_PER_WORKER x io_workers). A caller with
 * a ring full (many fsyncs at once) writes its segment on its own thread,
 * so nobody waits for room in the ring.
 */
#define SPILL_RING_PER_WORKER 4

struct spill_pool {
	pthread_mutex_t lock;
	pthread_cond_t work;   /* a job was queued, or stop */
	pthread_cond_t done;   /* a job finished */
	struct spill_job **q;  /* ring of cap jobs (lock) */
	unsigned cap, head, n; /* (lock) */
	int stop;	       /* (lock) */
	pthread_t *th;
	unsigned nth;
};

struct spilled {
	struct seg_entry e;
	struct inode *in;
	uint64_t c;
	uint64_t *bits; /* an overlay of these blocks (chain.c), or NULL: whole */
};

/* The blocks `bits` of chunk bytes [0, len) at fd_off of fd, as one
 * overlay record: runs of blocks, the smallest gaps between them stored
 * too when there are more than a record takes (the bitmap, not the
 * record, says which blocks it holds). */
static int add_overlay(struct seg_writer *w, uint64_t ino, uint64_t c, uint64_t gen, int fd,
		       uint64_t fd_off, uint32_t len, const uint64_t *bits, struct seg_entry *e)
{
	uint32_t nb = (len + CHAIN_BLK - 1) / CHAIN_BLK, n = 0, total = 0;
	struct seg_extent *x = malloc(((size_t)nb / 2 + 1) * sizeof(*x));
	uint8_t *data = NULL;
	int ret = 0;

	if (!x)
		return -ENOMEM;
	for (uint32_t b = 0; b < nb;) {
		if (!chain_test(bits, b)) {
			b++;
			continue;
		}
		uint32_t z = b;
		while (z < nb && chain_test(bits, z))
			z++;
		x[n].off = b * CHAIN_BLK;
		x[n].len = (z * CHAIN_BLK < len ? z * CHAIN_BLK : len) - x[n].off;
		n++;
		b = z;
	}
	for (uint32_t gap = CHAIN_BLK; n > SEG_MAX_EXTENTS; gap *= 2) {
		uint32_t m = 0;
		for (uint32_t i = 1; i < n; i++) {
			if (x[i].off - (x[m].off + x[m].len) < gap)
				x[m].len = x[i].off + x[i].len - x[m].off;
			else
				x[++m] = x[i];
		}
		n = m + 1;
	}
	for (uint32_t i = 0; i < n; i++)
		total += x[i].len;
	if (!(data = malloc(total ? total : 1)))
		ret = -ENOMEM;
	for (uint32_t i = 0, pos = 0; ret == 0 && i < n; pos += x[i].len, i++) {
		ssize_t r = pread(fd, data + pos, x[i].len, (off_t)(fd_off + x[i].off));
		if (r < 0)
			ret = -errno;
		else if ((uint32_t)r < x[i].len)
			ret = -ENODATA; /* truncated meanwhile */
	}
	if (ret == 0)
		ret = seg_writer_add_extents(w, ino, c, gen, len, x, n, data, e);
	if (ret == 0)
		seg_writer_mark_overlay(w);
	free(data);
	free(x);
	return ret;
}

static void spill_segment(struct spill_job *job)
{
	struct tier *t = job->t;
	struct seg_writer *w = NULL;
	struct spilled *done = calloc(job->n ? job->n : 1, sizeof(*done));
	uint64_t id = segtab_alloc_id(t->segtab), size_hint = SEG_HDR_SIZE + SEG_ALIGN, seg_len = 0,
		 payload = 0, t0 = clock_now_ns();
	size_t nd = 0;
	uint32_t dev = 0;
	int ret;

	if (!done) {
		job->ret = -ENOMEM;
		return;
	}
	/* at most: the chunk, its padding, map and footer entry (holes make it less) */
	for (size_t i = 0; i < job->n; i++)
		size_hint += job->v[i].len + SEG_REC_ALIGN + SEG_MAP_TAIL + 8 +
			     (job->v[i].len / SEG_BLOCK + 1) * 4 + SEG_ENTRY_SIZE;
	ret = seg_writer_new(t->store, t->uuid, id, size_hint, &w);
	if (ret < 0)
		goto out;
	for (size_t i = 0; i < job->n; i++) {
		struct cand *cd = &job->v[i];
		struct inode *in = cd->in;
		struct chunk *ch;
		uint64_t gen;
		uint32_t len;
		int fd;

		idx_inode_lock(in);
		ch = &in->chunks[cd->c];
		len = tier_chunk_len(t, in->size, cd->c);
		if (ch->state != CHUNK_HOT_DIRTY || len == 0 || (in->pinned && job->drop)) {
			idx_inode_unlock(in);
			continue;
		}
		fd = hot_fd_get_locked(t->hot, in);
		if (fd < 0) {
			idx_inode_unlock(in);
			continue;
		}
		/* a chunk written over its cold copy: only what is dirty */
		uint64_t *bits = NULL;
		int plan = ch->chain ? chain_spill_plan_locked(t, in, cd->c, len, &bits) : 0;
		ch = &in->chunks[cd->c];
		if (plan < 0 || ch->state != CHUNK_HOT_DIRTY) {
			free(bits);
			hot_fd_put_locked(t->hot, in);
			idx_inode_unlock(in);
			continue;
		}
		ch->state = CHUNK_SPILLING;
		gen = ch->gen;
		idx_inode_unlock(in);

		if (bits)
			ret = add_overlay(w, in->ino, cd->c, gen, fd, cd->c * t->chunk_size, len,
					  bits, &done[nd].e);
		else
			ret = seg_writer_add_fd(w, in->ino, cd->c, gen, fd, cd->c * t->chunk_size,
						len, &done[nd].e);
		idx_inode_lock(in);
		ch = &in->chunks[cd->c]; /* the map may have grown (moved) meanwhile */
		hot_fd_put_locked(t->hot, in);
		if (ret < 0) {
			free(bits);
			/* truncated meanwhile (-ENODATA) or a read error: stays dirty */
			if (ch->state == CHUNK_SPILLING)
				ch->state = CHUNK_HOT_DIRTY;
			idx_inode_wake(in); /* fsync waits for spills */
			idx_inode_unlock(in);
			if (ret == -ENODATA)
				continue;
			goto out;
		}
		idx_inode_unlock(in);
		done[nd].in = in;
		done[nd].c = cd->c;
		done[nd].bits = bits;
		payload += done[nd].e.len; /* stored bytes: what live counts */
		nd++;
	}
	if (nd == 0) {
		ret = 0;
		goto out;
	}
	/* journal synced, segment durable, registered (no spill once the
	 * journal is read-only: its locations could not be recorded) */
	ret = segtab_commit(t->segtab, w, id, payload, &dev, &seg_len);
	w = NULL;
	if (ret < 0)
		goto out;
	__atomic_add_fetch(&t->st.segments_written, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&t->st.bytes_spilled, payload, __ATOMIC_RELAXED);
	__atomic_add_fetch(&t->st.chunks_spilled, nd, __ATOMIC_RELAXED);
	__atomic_add_fetch(&t->st.spill_ns, clock_now_ns() - t0, __ATOMIC_RELAXED);
	hist_observe(&t->st.h_spill, clock_now_ns() - t0);
	/* durable: record locations; punch what is still unchanged */
	for (size_t i = 0; i < nd; i++) {
		struct inode *in = done[i].in;
		struct chunk *ch;
		uint32_t n = 0;
		idx_inode_lock(in);
		ch = &in->chunks[done[i].c];
		if (ch->state == CHUNK_SPILLING && ch->gen == done[i].e.gen && done[i].bits) {
			/* an overlay: pushed on the chain (journaled there) */
			int r = chain_spill_commit_locked(t, in, done[i].c, &done[i].e, id, dev,
							  done[i].bits);
			done[i].bits = NULL;
			ch = &in->chunks[done[i].c];
			if (r < 0 && ch->state == CHUNK_SPILLING)
				ch->state = CHUNK_HOT_DIRTY;
			if (r == 0 && job->drop && !in->pinned)
				n = drop_chunk_locked(t, in, done[i].c);
		} else if (ch->state == CHUNK_SPILLING && ch->gen == done[i].e.gen &&
			   !(ch->chain && ch->chain->wr)) {
			/* whole: the new record replaces the chunk's chain, which
			 * is let go once the journal says so (not while writes
			 * over it are in flight: those hold it) */
			struct chunk old = *ch;
			ch->chain = NULL;
			ch->seg_id = id;
			ch->seg_off = done[i].e.off;
			ch->seg_len = done[i].e.len;
			ch->seg_crc = done[i].e.crc;
			ch->seg_dev = (uint16_t)dev;
			ch->seg_flags = (uint16_t)(done[i].e.flags & SEG_F_MAP);
			ch->seg_gen = (uint32_t)done[i].e.gen;
			ch->state = CHUNK_HOT_CLEAN;
			if (idx_journal_chunk_locked(t->idx, in, done[i].c, 0) < 0) {
				/* not recorded: the RAM copy stays the only one */
				segtab_release_chunk(t->segtab, ch);
				*ch = old;
				ch->state = CHUNK_HOT_DIRTY;
			} else {
				chain_forget_cold(t, &old);
				if (job->drop && !in->pinned)
					n = drop_chunk_locked(t, in, done[i].c);
			}
		} else {
			/* rewritten meanwhile (or being written) */
			segtab_release_bytes(t->segtab, id, done[i].e.len);
			free(done[i].bits);
			done[i].bits = NULL;
			if (ch->state == CHUNK_SPILLING)
				ch->state = CHUNK_HOT_DIRTY;
		}
		idx_inode_wake(in); /* fsync waits for spills */
		idx_inode_unlock(in);
		if (n)
			inval_async(t, in->ino, done[i].c * t->chunk_size, n);
	}
	room_freed(t);
	nd = 0;
	ret = 0;
out:
	if (w)
		seg_writer_abort(w);
	/* failure: every chunk taken goes back to HOT_DIRTY, its RAM copy intact */
	for (size_t i = 0; i < nd; i++) {
		struct inode *in = done[i].in;
		free(done[i].bits);
		idx_inode_lock(in);
		if (in->chunks[done[i].c].state == CHUNK_SPILLING)
			in->chunks[done[i].c].state = CHUNK_HOT_DIRTY;
		idx_inode_wake(in);
		idx_inode_unlock(in);
	}
	if (ret == -ENOSPC) {
		/* the caller reports a full cold tier once, not every retry */
		log_debug("evict: segment %llu not written: cold tier full",
			  (unsigned long long)id);
	} else if (ret < 0) {
		__atomic_add_fetch(&t->st.errors_io, 1, __ATOMIC_RELAXED);
		log_err("evict: segment %llu not written: %s (chunks stay in RAM)",
			(unsigned long long)id, strerror(-ret));
	}
	free(done);
	job->ret = ret;
}

static void *spill_worker(void *arg)
{
	struct spill_pool *p = arg;
	struct spill_job *job;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->n && !p->stop)
			pthread_cond_wait(&p->work, &p->lock);
		if (!p->n)
			break; /* stopping, and every queued job written */
		job = p->q[p->head];
		p->head = (p->head + 1) % p->cap;
		p->n--;
		pthread_mutex_unlock(&p->lock);
		spill_segment(job);
		pthread_mutex_lock(&p->lock);
		if (job->ret < 0 && !job->batch->err)
			job->batch->err = job->ret;
		job->batch->inflight--;
		pthread_cond_broadcast(&p->done);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

/* Queue job on the pool, after waiting until its batch has fewer than par
 * segments in flight (par: the pool's threads, at least 1); 0, 1 when the
 * ring is full (the caller writes it itself), or the batch's first failure
 * (nothing more is queued). */
static int spill_queue(struct spill_pool *p, struct spill_job *job, unsigned par)
{
	struct spill_batch *b = job->batch;
	int ret = 1;

	pthread_mutex_lock(&p->lock);
	while (b->inflight >= par && !b->err)
		pthread_cond_wait(&p->done, &p->lock);
	if (b->err) {
		ret = b->err;
	} else if (p->n < p->cap && !p->stop) {
		p->q[(p->head + p->n) % p->cap] = job;
		p->n++;
		b->inflight++;
		pthread_cond_signal(&p->work);
		ret = 0;
	}
	pthread_mutex_unlock(&p->lock);
	return ret;
}

/* Write the candidates v[0..n) (sorted by location) as segments of about
 * seg_bytes, up to io_workers (the pool's threads) at once on the spill
 * pool (a lone segment on the caller's thread). No segment is started after one failed. Returns 0
 * or the first -errno. */
static int spill_batch(struct tier *t, struct cand *v, size_t n, uint64_t seg_bytes, int drop)
{
	struct spill_pool *p = t->spool;
	struct spill_batch b = {0};
	struct spill_job *jobs;
	size_t njobs = 0, start = 0;
	int ret = 0;

	jobs = calloc(n ? n : 1, sizeof(*jobs));
	if (!jobs)
		return -ENOMEM;
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
		int q = p && njobs > 1 ? spill_queue(p, &jobs[k], p->nth) : 1;
		if (q < 0)
			break; /* an earlier segment failed */
		if (q == 0)
			continue;
		spill_segment(&jobs[k]); /* no pool, a lone segment, or the ring full */
		ret = jobs[k].ret;
	}
	if (p) {
		pthread_mutex_lock(&p->lock);
		while (b.inflight)
			pthread_cond_wait(&p->done, &p->lock);
		pthread_mutex_unlock(&p->lock);
	}
	if (ret == 0)
		ret = b.err;
	free(jobs);
	return ret;
}

static uint64_t usage(struct tier *t)
{
	return hot_used(t->hot) + hot_reserved(t->hot);
}

static int under_pressure(struct tier *t)
{
	unsigned waiting;
	pthread_mutex_lock(&t->lock);
	waiting = t->writers_waiting + t->restores_waiting;
	pthread_mutex_unlock(&t->lock);
	return waiting > 0 || usage(t) > (uint64_t)(t->cfg->hard_watermark * hot_limit(t->hot));
}

/* One round of eviction. Returns 1 if it freed or spilled anything, 0 if
 * it had to and could not, -1 if there was nothing to do. */
static int evict_round(struct tier *t)
{
	uint64_t limit = hot_limit(t->hot);
	uint64_t low = (uint64_t)(t->cfg->low_watermark * limit);
	uint64_t used = usage(t), need, got = 0, dirty = 0;
	struct cand_set cs = {.now = (uint32_t)idx_tick_now(t->idx)};
	size_t nd = 0;
	int pressure = under_pressure(t), progress = 0, ret;

	if (used <= low && !pressure)
		return -1;
	need = used > low ? used - low : t->chunk_size;
	collect_hot(t, &cs);
	if (cs.n) /* cs.v is NULL when nothing was collected: qsort's is nonnull */
		qsort(cs.v, cs.n, sizeof(*cs.v), by_age);

	/* 1. clean chunks, LRU first: no I/O */
	for (size_t i = 0; i < cs.n && got < need; i++) {
		if (cs.v[i].state != CHUNK_HOT_CLEAN)
			continue;
		uint64_t before = hot_used(t->hot);
		drop_and_inval(t, cs.v[i].in, cs.v[i].c);
		uint64_t after = hot_used(t->hot);
		got += before > after ? before - after : 0;
		progress = 1;
	}
	if (progress)
		room_freed(t);
	/* 2. dirty chunks, LRU first, batched into large segments */
	if (got < need) {
		uint64_t want = need - got;
		if (want < t->cfg->min_spill_size)
			want = t->cfg->min_spill_size;
		for (size_t i = 0; i < cs.n && dirty < want; i++) {
			if (cs.v[i].state != CHUNK_HOT_DIRTY)
				continue;
			cs.v[nd++] = cs.v[i]; /* compact dirty ones to the front */
			dirty += cs.v[i].len;
		}
		if (nd && (dirty >= t->cfg->min_spill_size || pressure)) {
			qsort(cs.v, nd, sizeof(*cs.v), by_location);
			ret = spill_batch(t, cs.v, nd, t->cfg->min_spill_size, 1);
			pthread_mutex_lock(&t->lock);
			if (ret == -ENOSPC && !t->cold_full)
				log_warn("evict: every cold directory is full: writers wait up to "
					 "write_wait, then get ENOSPC");
			else if (ret == 0 && t->cold_full)
				log_info("evict: cold tier has room again");
			if (ret == -ENOSPC)
				t->cold_full = 1;
			else if (ret == 0)
				t->cold_full = 0;
			if (ret < 0 && ret != -ENOSPC) {
				/* every cold directory failing (in its backoff): retry once a
				 * second, not as fast as writers wake us */
				if (!t->cold_failing)
					log_warn("evict: the cold tier is failing (%s): retrying "
						 "every second; writers wait up to write_wait",
						 strerror(-ret));
				t->cold_failing = 1;
				t->backoff_until = clock_now_ns() + 1000000000ull;
			} else if (ret == 0 && t->cold_failing) {
				log_info("evict: the cold tier works again");
				t->cold_failing = 0;
			}
			pthread_mutex_unlock(&t->lock);
			progress = ret == 0;
		}
	}
	cand_free(t, &cs);
	return progress;
}

int evict_file(struct tier *t, struct inode *in, int drop)
{
	struct cand_set cs = {.now = (uint32_t)idx_tick_now(t->idx)};
	size_t nd = 0;
	int ret = 0;

	idx_inode_lock(in);
	/* pinned, or passed through to the kernel: its RAM stays (tier.h) */
	ret = drop && (in->pinned || in->pt_opens) ? -EBUSY : 0;
	idx_inode_unlock(in);
	if (ret < 0)
		return ret;

	/* the caller holds a reference on in: no walk of the whole index */
	if (S_ISREG(idx_type(in)) && collect_chunks(t, &cs, in, 1) > 0) {
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
		qsort(cs.v, nd, sizeof(*cs.v), by_location);
		/* segments of min_spill_size, io_workers of them in parallel */
		ret = spill_batch(t, cs.v, nd, t->cfg->min_spill_size, drop);
	}
	if (drop && ret == 0) {
		idx_inode_lock(in);
		uint64_t n = in->nchunks;
		idx_inode_unlock(in);
		for (uint64_t c = 0; c < n; c++)
			drop_and_inval(t, in, c);
		room_freed(t);
	}
out:
	cand_free(t, &cs);
	return ret;
}

int evict_flush_all(struct tier *t)
{
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
		if (S_ISREG(idx_type(in)) && linked && collect_chunks(t, &cs, in, 1) > 0)
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
	__atomic_store_n(&t->flush_total, dirty, __ATOMIC_RELAXED);
	if (nd) {
		qsort(cs.v, nd, sizeof(*cs.v), by_location);
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
	uint64_t threshold;

	pthread_mutex_lock(&t->lock);
	while (!t->stopping) {
		/* the budget moves under memory pressure (pressure.c) */
		threshold = (uint64_t)(t->cfg->spill_threshold * hot_limit(t->hot));
		int busy = usage(t) > threshold || t->writers_waiting + t->restores_waiting > 0;
		if (!busy)
			t->evict_stuck = 0; /* idle: the next waiter gets a fresh round */
		if (!busy) {
			struct timespec dl = clock_deadline_ms(200);
			pthread_cond_timedwait(&t->wake, &t->lock, &dl);
		}
		if (t->stopping)
			break;
		threshold = (uint64_t)(t->cfg->spill_threshold * hot_limit(t->hot));
		busy = usage(t) > threshold || t->writers_waiting + t->restores_waiting > 0;
		if (busy && clock_now_ns() < t->backoff_until) {
			/* the cold tier failed a moment ago: wait out the backoff */
			struct timespec dl = clock_deadline_ms(
			    (t->backoff_until - clock_now_ns()) / 1000000 + 1);
			pthread_cond_timedwait(&t->wake, &t->lock, &dl);
			if (clock_now_ns() < t->backoff_until)
				busy = 0;
		}
		pthread_mutex_unlock(&t->lock);
		age_clamp(t);
		int r = busy ? evict_round(t) : -1, progress = r != 0;
		if (busy) {
			/* restores waiting for room learn whether this round could
			 * free any */
			pthread_mutex_lock(&t->lock);
			t->evict_rounds++;
			t->evict_stuck = r == 0;
			pthread_cond_broadcast(&t->room);
			pthread_mutex_unlock(&t->lock);
		}
		/* choose segments to delete, compact and demote: the maintenance
		 * worker does the I/O, never this thread */
		maint_plan(t);
		pthread_mutex_lock(&t->lock);
		if (busy && !progress && !t->stopping) {
			/* nothing evictable right now (or the cold tier failed): back off */
			struct timespec dl = clock_deadline_ms(t->cold_full ? 500 : 50);
			pthread_cond_timedwait(&t->wake, &t->lock, &dl);
		}
	}
	pthread_mutex_unlock(&t->lock);
	return NULL;
}

void evict_pool_stop(struct tier *t)
{
	struct spill_pool *p = t->spool;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = 1; /* the threads write what is queued, then exit */
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->lock);
	for (unsigned i = 0; i < p->nth; i++)
		pthread_join(p->th[i], NULL);
	t->spool = NULL;
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->done);
	pthread_mutex_destroy(&p->lock);
	free(p->th);
	free(p->q);
	free(p);
}

/* io_workers spill threads, created once: no thread per segment. */
static int pool_start(struct tier *t)
{
	unsigned n = t->cfg->io_workers ? t->cfg->io_workers : 1;
	struct spill_pool *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	p->cap = n * SPILL_RING_PER_WORKER;
	p->q = calloc(p->cap, sizeof(*p->q));
	p->th = calloc(n, sizeof(*p->th));
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->work, NULL);
	pthread_cond_init(&p->done, NULL);
	t->spool = p;
	for (unsigned i = 0; p->q && p->th && i < n; i++) {
		if (pthread_create(&p->th[i], NULL, spill_worker, p) != 0)
			break;
		p->nth++;
	}
	if (!p->nth) {
		evict_pool_stop(t);
		return -EAGAIN;
	}
	return 0;
}

int evict_start(struct tier *t)
{
	int ret = t->spool ? 0 : pool_start(t);
	if (ret < 0)
		return ret;
	ret = pthread_create(&t->evict_th, NULL, evictor, t);
	if (ret)
		return -ret;
	t->evict_started = 1;
	return 0;
}

void evict_stop(struct tier *t)
{
	if (!t->evict_started)
		return;
	pthread_mutex_lock(&t->lock);
	__atomic_store_n(&t->stopping, 1, __ATOMIC_RELEASE); /* read under rlock too */
	pthread_cond_broadcast(&t->wake);
	pthread_cond_broadcast(&t->room);
	pthread_mutex_unlock(&t->lock);
	pthread_join(t->evict_th, NULL);
	t->evict_started = 0;
}
