/*
 * spill — writing one segment of dirty chunks, and dropping hot copies a
 * segment holds (see spill.h).
 *
 * DESIGN
 * - Spill of one chunk: HOT_DIRTY -> SPILLING (generation noted) -> payload
 *   copied into the segment (a chunk with a chain: only its dirty blocks,
 *   as an overlay record) -> segment durable (seg_commit.c, the same
 *   sequence as compaction's) -> for each chunk whose state is still
 *   SPILLING with the same generation: its location is recorded and,
 *   unless a request has it pinned, its hole is punched (COLD) and the
 *   kernel's page cache for it invalidated. A chunk
 *   written during the spill went back to HOT_DIRTY: its copy in the
 *   segment is dead weight for GC. A failed segment puts every chunk back
 *   to HOT_DIRTY: a hot copy is never dropped before its segment is durable.
 * - No bounce (format v3, nvme): the segment writer appends a chunk's data
 *   straight from a read-only mapping of the hot file (segment_fd.c). Two
 *   things follow. (a) A page of the mapping cut by a truncate is a SIGBUS
 *   when touched: while a chunk's bytes are read, the chunk is listed in
 *   `mapped` (below), and truncate and punch wait for it to leave
 *   (spill_wait_mapped_locked, tier_io.c): one chunk's read, not the whole
 *   segment's. (b) A write racing the spill may change the pages between
 *   their crcs and the device's read of them: the writer asks spill_check
 *   once the bytes are written. A new generation (the write ended) drops
 *   the record; a pin (a write, or a read, in flight) has the pages hashed
 *   again and the record kept only if they match; neither, and no write
 *   can have overlapped (a write pins the chunk from its start to its
 *   end, and bumps the generation at the end). A dropped record gets no
 *   footer entry, so nothing (the index, fsck, --rebuild) ever takes bytes
 *   that may not match their crc for the chunk.
 * - Lock order: index lock, inode lock, segtab.lock.
 */
#include "tier/spill/spill.h"
#include "tier/spill/cand.h"
#include "tier/spill/seg_commit.h"
#include "tier/tier_i.h"

#include "common/clock.h"
#include "common/log.h"
#include "index/journal.h"
#include "tier/segment/segment.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint32_t spill_drop_chunk_locked(struct tier *t, struct inode *in, uint64_t c)
{
	struct chunk *ch = &in->chunks[c];
	uint32_t len = tier_chunk_len(t, in->size, c);
	int fd;

	/* the kernel reads a passthrough open's hot file itself: never punched
	 * (t->pt is NULL once the session is gone: then no kernel does) */
	if (ch->state != CHUNK_HOT_CLEAN || ch->pins || len == 0 || !ch->loc.seg_id ||
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
	chunk_set_state(in, c, CHUNK_COLD);
	if (ch->chain) {
		/* RAM holds none of it now (no write is in flight: unpinned) */
		ch->chain->partial = 1;
		memset(ch->chain->have, 0, chain_words(t->chunk_size) * sizeof(uint64_t));
	}
	hot_account_locked(t->hot, in);
	hot_fd_put_locked(t->hot, in);
	return len;
}

/* Chunks whose bytes a spill is reading from the hot file now (on the
 * spilling thread's stack), for spill_wait_mapped_locked: few at once (one
 * per spill in flight). Guarded by mapped_lock; a node is added and
 * removed with its inode's lock held too. */
struct mapped {
	const struct tier *t;
	uint64_t ino, c;
	struct mapped *next;
};
static struct mapped *mapped_list;
static pthread_mutex_t mapped_lock = PTHREAD_MUTEX_INITIALIZER;

static void mapped_add(struct mapped *m)
{
	pthread_mutex_lock(&mapped_lock);
	m->next = mapped_list;
	mapped_list = m;
	pthread_mutex_unlock(&mapped_lock);
}

static void mapped_del(struct mapped *m)
{
	pthread_mutex_lock(&mapped_lock);
	for (struct mapped **pp = &mapped_list; *pp; pp = &(*pp)->next)
		if (*pp == m) {
			*pp = m->next;
			break;
		}
	pthread_mutex_unlock(&mapped_lock);
}

static int mapped_any(const struct tier *t, uint64_t ino, uint64_t first, uint64_t last)
{
	int any = 0;

	pthread_mutex_lock(&mapped_lock);
	for (struct mapped *m = mapped_list; m && !any; m = m->next)
		any = m->t == t && m->ino == ino && m->c >= first && m->c <= last;
	pthread_mutex_unlock(&mapped_lock);
	return any;
}

int spill_wait_mapped_locked(struct tier *t, struct inode *in, uint64_t first, uint64_t last)
{
	int waited = 0;

	while (mapped_any(t, in->ino, first, last)) {
		idx_inode_wait(in); /* the spill wakes the inode as it lets go */
		waited = 1;
	}
	return waited;
}

/* The writer's question once a chunk's bytes went from its pages to the
 * segment (segment.h, struct seg_fd_check; DESIGN (b)). */
struct spill_ck {
	struct inode *in;
	uint64_t c;
	uint32_t gen;
};

static int spill_check(void *arg)
{
	struct spill_ck *k = arg;
	const struct chunk *ch;
	int r;

	idx_inode_lock(k->in);
	ch = &k->in->chunks[k->c];
	if (ch->state != CHUNK_SPILLING || ch->gen != k->gen)
		r = SEG_FD_STALE;
	else
		r = ch->pins ? SEG_FD_RECHECK : SEG_FD_OK;
	idx_inode_unlock(k->in);
	return r;
}

/* The blocks `bits` of chunk bytes [0, len) at fd_off of fd, as one
 * overlay record: runs of blocks, the smallest gaps between them stored
 * too when there are more than a record takes (the bitmap, not the
 * record, says which blocks it holds). */
static int add_overlay(struct seg_writer *w, uint64_t ino, uint64_t c, uint64_t gen, int fd,
		       uint64_t fd_off, uint32_t len, const uint64_t *bits,
		       const struct seg_fd_check *ck, struct seg_entry *e)
{
	uint32_t nb = (len + CHAIN_BLK - 1) / CHAIN_BLK, n = 0;
	struct seg_extent *x = malloc(((size_t)nb / 2 + 1) * sizeof(*x));
	int ret;

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
	/* only RAM's blocks: a read through a mapping never touches a hole */
	ret = seg_writer_add_fd_ext(w, ino, c, gen, fd, fd_off, len, x, n, ck, e);
	if (ret == 0)
		seg_writer_mark_overlay(w);
	free(x);
	return ret;
}

/* seg_commit's hooks: the segment counted as soon as it is durable (before
 * its chunks leave RAM: a writer woken by the room sees it counted); a chunk
 * now durable in it leaves RAM unless its file is pinned. */
struct spilled {
	uint64_t payload;
	size_t n;
};

static void count_spilled(struct tier *t, void *arg)
{
	const struct spilled *s = arg;
	__atomic_add_fetch(&t->st.segments_written, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&t->st.bytes_spilled, s->payload, __ATOMIC_RELAXED);
	__atomic_add_fetch(&t->st.chunks_spilled, s->n, __ATOMIC_RELAXED);
}

static uint32_t drop_unpinned_locked(struct tier *t, struct inode *in, uint64_t c)
{
	return in->pinned ? 0 : spill_drop_chunk_locked(t, in, c);
}

int spill_segment(struct tier *t, const struct cand *v, size_t n, int drop, int *committed)
{
	struct seg_writer *w = NULL;
	struct seg_commit_rec *done = calloc(n ? n : 1, sizeof(*done));
	uint64_t id = segtab_alloc_id(t->segtab), size_hint = SEG_HDR_SIZE + SEG_ALIGN, payload = 0,
		 t0 = clock_now_ns();
	size_t nd = 0;
	int ret;

	*committed = 0;
	if (!done)
		return -ENOMEM;
	/* at most: the chunk, its padding, map and footer entry (holes make it less) */
	for (size_t i = 0; i < n; i++)
		size_hint += v[i].len + SEG_ALIGN + SEG_MAP_TAIL + 8 +
			     (v[i].len / SEG_BLOCK + 1) * 4 + SEG_ENTRY_SIZE;
	ret = seg_writer_new(t->store, t->uuid, id, size_hint, &w);
	if (ret < 0)
		goto out;
	for (size_t i = 0; i < n; i++) {
		const struct cand *cd = &v[i];
		struct inode *in = cd->in;
		struct chunk *ch;
		uint64_t gen;
		uint32_t len;
		int fd;

		idx_inode_lock(in);
		ch = &in->chunks[cd->c];
		len = tier_chunk_len(t, in->size, cd->c);
		if (ch->state != CHUNK_HOT_DIRTY || len == 0 || (in->pinned && drop)) {
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
		chunk_set_state(in, cd->c, CHUNK_SPILLING);
		gen = ch->gen;
		/* its pages stay while they are read (DESIGN (a)) */
		struct mapped mp = {.t = t, .ino = in->ino, .c = cd->c};
		mapped_add(&mp);
		idx_inode_unlock(in);

		struct spill_ck k = {.in = in, .c = cd->c, .gen = (uint32_t)gen};
		struct seg_fd_check ck = {.fn = spill_check, .arg = &k};
		if (bits)
			ret = add_overlay(w, in->ino, cd->c, gen, fd, cd->c * t->chunk_size, len,
					  bits, &ck, &done[nd].e);
		else
			ret = seg_writer_add_fd(w, in->ino, cd->c, gen, fd, cd->c * t->chunk_size,
						len, &ck, &done[nd].e);
		idx_inode_lock(in);
		mapped_del(&mp);
		idx_inode_wake(in); /* a truncate or punch waiting for it */
		ch = &in->chunks[cd->c]; /* the map may have grown (moved) meanwhile */
		hot_fd_put_locked(t->hot, in);
		if (ret < 0) {
			free(bits);
			/* truncated meanwhile (-ENODATA), written under the read
			 * (-ESTALE: no record) or a read error: stays dirty */
			if (ch->state == CHUNK_SPILLING)
				chunk_set_state(in, cd->c, CHUNK_HOT_DIRTY);
			idx_inode_wake(in); /* fsync waits for spills */
			idx_inode_unlock(in);
			if (ret == -ENODATA || ret == -ESTALE)
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
	struct spilled sp = {.payload = payload, .n = nd};
	struct seg_commit_hooks h = {
	    .durable = count_spilled, .moved = drop ? drop_unpinned_locked : NULL, .arg = &sp};
	ret = seg_commit(t, w, id, done, nd, &h);
	w = NULL;
	if (ret < 0)
		goto out;
	__atomic_add_fetch(&t->st.spill_ns, clock_now_ns() - t0, __ATOMIC_RELAXED);
	hist_observe(&t->st.h_spill, clock_now_ns() - t0);
	*committed = 1; /* the caller wakes the writers waiting for room */
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
			chunk_set_state(in, done[i].c, CHUNK_HOT_DIRTY);
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
	return ret;
}
