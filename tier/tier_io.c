/*
 * tier_io.c — file I/O through the tier: the data path (tier_read_begin /
 * _end, tier_write_begin / _end, read-ahead), truncate, fallocate, lseek,
 * fsync, and the per-file controls (state, pin, evict, warm). Opens,
 * closes and passthrough are tier_open.c. The handle's lifecycle
 * is tier.c. Threading: every call is thread-safe; callers hold no inode
 * lock (tier.h).
 *
 * DESIGN
 * - The data path: fs/ brackets every read and write with tier_*_begin and tier_*_end.
 *   begin pins the chunks it touches (chunk->pins) so the evictor never
 *   punches a range a request is copying, makes cold chunks hot first, and
 *   (writes) reserves hot room; end marks written chunks HOT_DIRTY with a new
 *   generation, updates size and times and the hot usage, then unpins.
 * - A write that finds no hot room waits (bounded by write_wait) for the
 *   evictor when a cold tier exists; without one it fails with ENOSPC at once.
 *   Nothing is acknowledged before its bytes are in the hot file.
 * - A truncate, fallocate or write waits for every chunk of its range to
 *   leave RESTORING at once, looking at the whole range again after each
 *   wait. Meanwhile in->rst_hold stops reads, writes, warms and prefetch
 *   from starting a restore of the file, so its bound is the restores in
 *   flight when it began waiting plus those of operations already under
 *   way: one segment read each (a partial restore's rest: its chunk), never
 *   a stream of random readers (test_tier_races measures it).
 * - Lock order: index lock, inode lock, tier lock.
 */
#include "tier/tier_i.h"
#include "tier/extent/extent.h"
#include "tier/admit/admit.h"
#include "tier/spill/spill.h"
#include "tier/spill/to_extent.h"
#include "tier/tier.h"

#include "common/clock.h"
#include "common/log.h"
#include "index/journal.h"
#include "tier/segment/segment.h"
#include "tier/store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Wait until no chunk in [first, last] is RESTORING, all at once: a wait
 * drops the lock, and a restore may start on a chunk already looked at (a
 * direct read sets RESTORING, then COLD; a read or write already under way
 * goes on to its next chunk), so every wait starts over.
 * Fair: while it waits, in->rst_hold keeps new operations from starting a
 * restore of the file (hold_wait_locked), so the bound is the restores in
 * flight when it began waiting and those of the operations already under
 * way (one segment read each; a partial restore's rest: its chunk), not a
 * stream of random readers. Of two such waiters, the first one done clears
 * the hold; the other sets it again as it looks again. in->lock held. */
static void wait_restoring_locked(struct inode *in, uint64_t first, uint64_t last)
{
	int held = 0;

	for (uint64_t c = first; c <= last && c < in->nchunks; c++)
		if (in->chunks[c].state == CHUNK_RESTORING) {
			in->rst_hold = 1;
			held = 1;
			idx_inode_wait(in);
			c = first - 1; /* wraps to first at the c++ */
		}
	if (held) {
		in->rst_hold = 0;
		idx_inode_wake(in); /* the operations hold_wait_locked held off */
	}
}

/* No write over a cold copy (overlay) in flight in chunks [first, last]:
 * what drops chains (truncate, punch) waits for them. in->lock held. 1
 * when it waited. */
static int wait_chain_writers_locked(struct inode *in, uint64_t first, uint64_t last)
{
	int waited = 0;

	for (uint64_t c = first; c <= last && c < in->nchunks; c++) {
		while (c < in->nchunks && in->chunks[c].chain && in->chunks[c].chain->wr) {
			idx_inode_wait(in);
			waited = 1;
			c = first; /* the lock was dropped: look at all again */
		}
	}
	return waited;
}

/* Before the hot pages of chunks [first, last] go (ftruncate, a punch):
 * nothing may be using them, all at once - no restore (it writes them),
 * no write over a cold copy, no spill reading them through a mapping
 * (spill.c: a cut page is a SIGBUS to it). Each
 * wait drops the lock, so every one looks again after any waited.
 * in->lock held. */
static void wait_pages_idle_locked(struct tier *t, struct inode *in, uint64_t first,
				   uint64_t last)
{
	int waited;

	do {
		wait_restoring_locked(in, first, last);
		waited = wait_chain_writers_locked(in, first, last);
		waited |= spill_wait_mapped_locked(t, in, first, last);
	} while (waited);
}

/* An operation that may restore (or read directly) a cold chunk of
 * [first, last] waits, at its start, for a wait_restoring_locked of the
 * file to end: it holds no chunk RESTORING yet, so the waiter never waits
 * for it. in->lock held. */
static void hold_wait_locked(struct inode *in, uint64_t first, uint64_t last)
{
	for (uint64_t c = first; in->rst_hold && c <= last && c < in->nchunks; c++)
		if (in->chunks[c].state == CHUNK_COLD || in->chunks[c].state == CHUNK_RESTORING) {
			idx_inode_wait(in);
			c = first - 1; /* wraps to first at the c++ */
		}
}

static void pin(struct inode *in, uint64_t first, uint64_t last, int delta)
{
	for (uint64_t c = first; c <= last && c < in->nchunks; c++)
		in->chunks[c].pins += delta;
}

/* Finish the partial restores io started (after the reply). in->lock held. */
static void read_rest_locked(struct tier *t, struct inode *in, struct tier_io *io)
{
	for (uint64_t i = 0; io->rest >> i; i++)
		if ((io->rest >> i) & 1)
			restore_rest_locked(t, in, io->first + i);
	io->rest = 0;
}

/* The answer of a read some of whose chunks were answered from memory
 * (mem[i]: chunk first+i's piece, or NULL: in the hot file): iov pieces in
 * order, the hot file's pieces (pinned) read into buffers beside the
 * verified cold ones. A hot piece read short (the file shrank meanwhile)
 * ends the answer there. 0 or -errno. */
static int read_pieces(struct tier *t, struct tier_io *io, const void *const *mem)
{
	uint64_t pos = io->off, end = io->off + io->len;

	for (uint64_t c = io->first; pos < end && c <= io->last; c++) {
		int i = (int)(c - io->first);
		uint64_t ce = (c + 1) * t->chunk_size, n = (ce < end ? ce : end) - pos;
		void *p = (void *)mem[i];

		if (!p) {
			ssize_t got;

			if (!(p = io->own[i] = seg_buf_alloc(n)))
				return -ENOMEM;
			if ((got = pread(io->fd, p, n, (off_t)pos)) < 0)
				return -errno;
			if ((uint64_t)got < n) {
				io->iov[io->niov++] = (struct iovec){p, (size_t)got};
				io->len = pos + (uint64_t)got - io->off;
				return 0;
			}
		}
		io->iov[io->niov++] = (struct iovec){p, n};
		pos += n;
	}
	return 0;
}

/* A read of a file with an extent (tier/extent): io as its answer, nothing
 * pinned, no read-ahead. 1 when in has none. */
static int ext_read(struct tier *t, struct inode *in, uint64_t off, size_t len,
		    struct tier_io *io)
{
	struct ext_read r;
	int ret = ext_read_begin(t, in, off, len, &r);

	io->ext = 0;
	if (ret == 1)
		return 1;
	memset(io->own, 0, sizeof(io->own));
	io->ext = 1;
	io->fd = r.fd;
	io->off = off;
	io->len = r.len;
	io->first = 1;
	io->last = 0;
	io->niov = 0;
	io->rest = 0;
	io->direct = 1;
	io->promoted = 0;
	io->flags = 0;
	if (r.buf) {
		io->iov[0].iov_base = (char *)r.buf + r.skip;
		io->iov[0].iov_len = r.len;
		io->own[0] = r.buf;
		io->niov = 1;
	}
	return ret;
}

static int read_begin(struct tier *t, struct inode *in, uint64_t off, size_t len, unsigned flags,
		      struct tier_reader *rd, struct tier_io *io)
{
	const void *mem[TIER_IO_PIECES] = {0};
	uint64_t size, t0 = clock_now_ns();
	int ret, waited = -1, pieces, any_mem = 0;

	if ((ret = ext_read(t, in, off, len, io)) != 1)
		return ret;
	ret = 0;
	io->rest = 0;
	io->niov = 0;
	io->direct = 0;
	io->promoted = 0;
	memset(io->own, 0, sizeof(io->own));
	tier_chunk_range(t, off, len ? len : 1, &io->first, &io->last);
	idx_inode_lock(in);
	if (in->ext) { /* moved into an extent meanwhile (around_to_extent_locked) */
		idx_inode_unlock(in);
		return ext_read(t, in, off, len, io);
	}
	hold_wait_locked(in, io->first, io->last);
	if (rd) /* judged in this order: under the lock (struct tier_reader) */
		flags = rd->pattern(rd, off, len) | (rd->again ? TIER_READ_AGAIN : 0);
	io->flags = flags;
	in->kcached = 1;
	size = in->size;
	if (off >= size || len == 0) {
		io->first = 1;
		io->last = 0; /* nothing pinned */
		len = 0;
	} else {
		if (off + len > size)
			len = size - off;
		tier_chunk_range(t, off, len, &io->first, &io->last);
		if (io->last >= in->nchunks)
			io->last = in->nchunks ? in->nchunks - 1 : 0;
		/* a read of a few chunks may be answered from memory piece by
		 * piece (cold pieces read from their segments) */
		pieces = io->last - io->first < TIER_IO_PIECES;
		/* each chunk: only the reader's blocks first when it is cold */
		for (uint64_t c = io->first; c <= io->last && c < in->nchunks; c++) {
			uint64_t cs = c * t->chunk_size, lo = off > cs ? off - cs : 0;
			uint64_t hi = off + len - cs < t->chunk_size ? off + len - cs : t->chunk_size;
			struct chunk_read r = {.c = c,
					       .lo = lo,
					       .hi = hi,
					       .random = (flags & TIER_READ_RANDOM) != 0,
					       .near = (flags & TIER_READ_NEAR) != 0,
					       .again = (flags & TIER_READ_AGAIN) != 0,
					       .stream = (flags & TIER_READ_STREAM) != 0,
					       .one = pieces,
					       .may_rest = c - io->first < 64};

			if ((ret = restore_read_locked(t, in, &r)) < 0) {
				if (c > io->first)
					pin(in, io->first, c - 1, -1);
				read_rest_locked(t, in, io);
				idx_inode_unlock(in);
				for (int i = 0; i < TIER_IO_PIECES; i++)
					seg_buf_free(io->own[i]);
				return ret;
			}
			if (r.rest)
				io->rest |= 1ull << (c - io->first);
			if (pieces) { /* a cold range may be answered from memory */
				mem[c - io->first] = r.mem;
				io->own[c - io->first] = r.buf;
				any_mem |= r.mem != NULL;
			}
			io->direct |= r.direct;
			io->promoted |= r.promoted;
			if (r.tier > waited)
				waited = r.tier;
		}
		if (rd && io->promoted) /* this handle re-reads: so do its next reads */
			rd->again = 1;
		uint64_t tick = idx_tick(t->idx);
		for (uint64_t c = io->first; c <= io->last && c < in->nchunks; c++)
			chunk_touch(&in->chunks[c], (uint32_t)tick);
	}
	io->fd = in->hot_fd;
	io->off = off;
	io->len = len;
	idx_inode_unlock(in);
	if (waited >= 0) /* a cold range: request .. bytes in RAM */
		lhist_observe(&t->st.h_first[waited], clock_now_ns() - t0);
	if (any_mem && (ret = read_pieces(t, io, mem)) < 0) {
		tier_read_end(t, in, io);
		return ret;
	}
	return io->niov || io->fd >= 0 ? 0 : -EBADF;
}

int tier_read_begin(struct tier *t, struct inode *in, uint64_t off, size_t len, unsigned flags,
		    struct tier_io *io)
{
	return read_begin(t, in, off, len, flags, NULL, io);
}

int tier_read_begin_by(struct tier *t, struct inode *in, uint64_t off, size_t len,
		       struct tier_reader *rd, struct tier_io *io)
{
	return read_begin(t, in, off, len, 0, rd, io);
}

void tier_read_end(struct tier *t, struct inode *in, struct tier_io *io)
{
	for (int i = 0; i < TIER_IO_PIECES; i++) {
		seg_buf_free(io->own[i]);
		io->own[i] = NULL;
	}
	io->niov = 0;
	if (io->first > io->last)
		return;
	idx_inode_lock(in);
	pin(in, io->first, io->last, -1);
	/* a failed partial restore waits for its readers, an evict for readers
	 * that still held a chunk (tier_evict_file) */
	idx_inode_wake(in);
	read_rest_locked(t, in, io);
	idx_inode_unlock(in);
}

void tier_read_ahead(struct tier *t, struct inode *in, uint64_t off, uint64_t *next_chunk)
{
	uint64_t c = off / t->chunk_size + 1, last = c + t->cfg->io_workers - 1;

	if (!t->store)
		return;
	if (*next_chunk > c)
		c = *next_chunk;
	if (c > last)
		return;
	restore_ahead(t, in, c, last);
	*next_chunk = last + 1;
}

/* Chunks claimed by a write that did not complete go back to COLD. */
static void unclaim_locked(struct inode *in, struct tier_io *io)
{
	for (uint64_t i = 0; io->claimed >> i; i++)
		if ((io->claimed >> i) & 1 && in->chunks[io->first + i].state == CHUNK_RESTORING)
			chunk_set_state(in, io->first + i, CHUNK_COLD);
	if (io->claimed)
		idx_inode_wake(in);
	io->claimed = 0;
}

/* A write that will not happen: unpin chunks [io->first, end) it pinned
 * (those it went over are let go as written with nothing). */
static void unpin_begun_locked(struct tier *t, struct inode *in, struct tier_io *io, uint64_t end)
{
	for (uint64_t c = io->first; c < end && c <= io->last && c < in->nchunks; c++) {
		if (c - io->first < 64 && (io->over >> (c - io->first) & 1))
			chain_write_end_locked(t, in, c, 0, 0, 0);
		else
			in->chunks[c].pins--;
	}
	io->over = 0;
}

int tier_write_begin(struct tier *t, struct inode *in, uint64_t off, size_t len, unsigned flags,
		     struct tier_io *io)
{
	int ret = 0;
	int64_t r;

	if ((ret = idx_check_writable(t->idx)) < 0)
		return ret;
	io->ext = 0;
	io->off = off;
	io->len = len;
	io->flags = flags;
	if ((ret = ext_write_begin(t, in, &io->fd)) != 1) {
		/* into its extent: nothing pinned, nothing reserved */
		io->ext = 1;
		io->first = 1;
		io->last = 0;
		io->reserved = io->claimed = io->over = 0;
		return ret;
	}
	ret = 0;
	io->reserved = 0;
	io->claimed = 0;
	io->over = 0;
	tier_chunk_range(t, off, len, &io->first, &io->last);
	idx_inode_lock(in);
	if (in->ext) { /* moved into an extent meanwhile: write there */
		idx_inode_unlock(in);
		return tier_write_begin(t, in, off, len, flags, io);
	}
	if ((ret = idx_chunks_reserve(in, io->last + 1)) < 0)
		goto out_unclaim;
	hold_wait_locked(in, io->first, io->last);
	in->kcached = 1;
	/* A partial overwrite of a cold chunk needs its old bytes first; a whole
	 * overwrite claims it (RESTORING, so no restore races the new bytes). */
	for (uint64_t c = io->first; c <= io->last; c++) {
		uint64_t cs = c * t->chunk_size, ce = cs + t->chunk_size;
		int full = off <= cs && off + len >= ce && c - io->first < 64;
		wait_restoring_locked(in, c, c);
		if (in->chunks[c].state == CHUNK_COLD && full) {
			chunk_set_state(in, c, CHUNK_RESTORING);
			io->claimed |= 1ULL << (c - io->first);
			in->chunks[c].pins++;
			continue;
		}
		/* a part of a chunk with a cold copy goes over it (pinned) */
		ret = c - io->first < 64 && !full
			      ? chain_write_begin_locked(t, in, c, off > cs ? off - cs : 0,
							 off + len < ce ? off + len - cs : t->chunk_size)
			      : 0;
		if (ret == 1) {
			io->over |= 1ULL << (c - io->first);
			continue;
		}
		if (ret == 0)
			ret = restore_make_hot_locked(t, in, c, c, 1);
		if (ret < 0) {
			/* unpin what this loop pinned so far */
			unpin_begun_locked(t, in, io, c);
			goto out_unclaim;
		}
	}
	io->fd = in->hot_fd;
	idx_inode_unlock(in);
	if (io->fd < 0) {
		ret = -EBADF;
		goto out_unpin;
	}
	r = evict_wait_room(t, io->fd, off, len);
	if (r < 0) {
		ret = (int)r;
		goto out_unpin;
	}
	io->reserved = r;
	return 0;
out_unpin:
	idx_inode_lock(in);
	unpin_begun_locked(t, in, io, io->last + 1);
out_unclaim:
	unclaim_locked(in, io);
	idx_inode_unlock(in);
	return ret;
}

/* A stream all in RAM moves into an extent (ext_adopt_locked), its
 * chunks let go. 0 or -EAGAIN. in->lock held, fd its hot file (held). */
static int to_extent_locked(struct tier *t, struct inode *in, int fd)
{
	if (fd < 0 || ext_adopt_locked(t, in, fd, 0) < 0)
		return -EAGAIN;
	spill_let_go_for_extent_locked(t, in, fd);
	evict_room_freed(t);
	return 0;
}

/* Should the stream io just wrote into move into an extent now? A big
 * stream while RAM fills, or one written around, lives in an extent from
 * then on when it can (tier/extent): tried before the evictor takes its
 * chunks (at low_watermark, or the moment it is written around), then at
 * the chunk boundaries of its writes. in->lock held. */
static int stream_wants_extent_locked(struct tier *t, const struct inode *in,
				      const struct tier_io *io, uint64_t written, int was_around)
{
	if (!t->cfg->extents || in->open_count != 1 || !(io->flags & TIER_WRITE_STREAM))
		return 0;
	if (!(in->around && !was_around) &&
	    (io->off + written) / t->chunk_size == io->off / t->chunk_size)
		return 0;
	return in->around || (in->size >= t->cfg->extent_min &&
			      hot_used(t->hot) + hot_reserved(t->hot) >
				  t->cfg->low_watermark * (double)hot_limit(t->hot));
}

/* A stream under pressure moves into an extent (tier/extent): and the
 * next streams get one at their open. */
static int around_to_extent_locked(struct tier *t, struct inode *in)
{
	if (to_extent_locked(t, in, in->hot_fd) < 0)
		return -EAGAIN;
	__atomic_store_n(&t->admit.around_ms, clock_now_ms(), __ATOMIC_RELAXED);
	return 0;
}

ssize_t tier_write_end(struct tier *t, struct inode *in, struct tier_io *io, ssize_t written)
{
	if (io->ext) {
		ext_write_end(t, in, io->off, (long)written);
		return written;
	}
	idx_inode_lock(in);
	/* A claimed (cold, wholly overwritten) chunk the copy did not finish
	 * keeps its cold copy: acknowledge only the bytes before it. */
	for (uint64_t i = 0; written > 0 && io->claimed >> i; i++) {
		uint64_t cs = (io->first + i) * t->chunk_size;
		if (((io->claimed >> i) & 1) && io->off + (uint64_t)written < cs + t->chunk_size)
			written = cs > io->off ? (ssize_t)(cs - io->off) : -EIO;
	}
	/* chunks written over their cold copy: the blocks the bytes landed in */
	for (uint64_t i = 0; io->over >> i; i++) {
		uint64_t c = io->first + i, cs = c * t->chunk_size;
		uint64_t end = io->off + (written > 0 ? (uint64_t)written : 0);
		if (!((io->over >> i) & 1))
			continue;
		uint64_t lo = io->off > cs ? io->off - cs : 0;
		uint64_t hi = io->off + io->len - cs < t->chunk_size ? io->off + io->len - cs
									: t->chunk_size;
		uint64_t done = end > cs ? (end - cs < hi ? end - cs : hi) : 0;
		chain_write_end_locked(t, in, c, lo, hi, done);
	}
	if (written > 0) {
		uint64_t first, last, end = io->off + (uint64_t)written;
		/* chunks past the old end: dirty with the new size, together */
		uint64_t grow = end > in->size ? (in->size + t->chunk_size - 1) / t->chunk_size
					       : UINT64_MAX;
		tier_chunk_range(t, io->off, (uint64_t)written, &first, &last);
		for (uint64_t c = first; c <= last && c < grow; c++)
			if (c - io->first >= 64 || !(io->over >> (c - io->first) & 1))
				tier_mark_dirty_locked(t, in, c, c);
		idx_touch(&in->mtime);
		in->ctime = in->mtime;
		/* set-user/group-ID: the kernel clears them before the write
		 * (file_remove_privs, a SETATTR of the mode), by the VFS's rules:
		 * not for CAP_FSETID, set-group-ID only with group-execute */
		/* the size before the reply; mtime alone waits for close or fsync */
		in->attr_dirty = grow == UINT64_MAX;
		if (grow != UINT64_MAX &&
		    tier_grow_locked(t, in, first > grow ? first : grow, last, end) < 0)
			written = -EIO;
	}
	for (uint64_t c = io->first; c <= io->last && c < in->nchunks; c++)
		if (c - io->first >= 64 || !(io->over >> (c - io->first) & 1))
			in->chunks[c].pins--;
	io->over = 0;
	if (io->claimed) {
		/* claimed chunks the write did not fully cover keep their cold copy */
		uint64_t done_end = io->off + (written > 0 ? (uint64_t)written : 0);
		for (uint64_t i = 0; io->claimed >> i; i++) {
			uint64_t c = io->first + i;
			if (((io->claimed >> i) & 1) && (c + 1) * t->chunk_size <= done_end)
				io->claimed &= ~(1ULL << i);
		}
		if (io->claimed && in->hot_fd >= 0)
			for (uint64_t i = 0; io->claimed >> i; i++)
				if ((io->claimed >> i) & 1)
					fallocate(in->hot_fd,
						  FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
						  (off_t)((io->first + i) * t->chunk_size),
						  (off_t)t->chunk_size);
		unclaim_locked(in, io);
		idx_inode_wake(in);
	}
	hot_account_locked(t->hot, in);
	/* a stream under pressure is written around (tier/admit) */
	int was_around = in->around;
	int kick = written > 0 && admit_write_locked(t, in, io->off, (uint64_t)written,
						     (io->flags & TIER_WRITE_STREAM) != 0);
	if (written > 0 && stream_wants_extent_locked(t, in, io, (uint64_t)written, was_around) &&
	    around_to_extent_locked(t, in) == 0)
		kick = 0;
	idx_inode_unlock(in);
	hot_unreserve(t->hot, (uint64_t)io->reserved);
	if (kick || (t->store && hot_used(t->hot) > t->cfg->spill_threshold * hot_limit(t->hot)))
		evict_kick(t);
	return written;
}

/* The file's size becomes `size`, chunks wholly past it holes (the boundary
 * chunk stays), journaled in one transaction. in->lock held. 0, or -EIO with
 * the size and the chunks as they were. */
static int cut_locked(struct tier *t, struct inode *in, uint64_t size)
{
	uint64_t keep = (size + t->chunk_size - 1) / t->chunk_size, old = in->size;
	int any = 0, ret;
	for (uint64_t c = keep; c < in->nchunks && !any; c++)
		any = in->chunks[c].state != CHUNK_ABSENT;
	/* the holes and the size in one transaction, journaled before the
	 * cold copies are let go (GC may delete them) and before the hot file
	 * is cut: a kill between the hot file's ftruncate and these records
	 * kept the old size with zeros where RAM-only bytes were (the kill -9
	 * loop of test_durability, a truncate under way) */
	in->size = size;
	if ((ret = idx_journal_cut_locked(t->idx, in, keep, any ? in->nchunks - keep : 0)) < 0) {
		in->size = old;
		return ret;
	}
	for (uint64_t c = keep; c < in->nchunks; c++) {
		struct chunk *ch = &in->chunks[c];
		if (ch->state == CHUNK_ABSENT)
			continue;
		chain_forget_cold(t, ch);
		chunk_set_state(in, c, CHUNK_ABSENT);
		ch->gen++;
	}
	return 0;
}

int tier_truncate(struct tier *t, struct inode *in, uint64_t size)
{
	uint64_t bc = UINT64_MAX; /* the boundary chunk, pinned */
	int fd, ret;

	tier_refresh(t, in); /* passthrough writers' size first */

	if ((ret = idx_check_writable(t->idx)) < 0)
		return ret;
	if ((ret = ext_truncate(t, in, size)) != 1)
		return ret;
	ret = 0;
	idx_inode_lock(in);
	fd = hot_fd_get_locked(t->hot, in);
	if (fd < 0) {
		ret = fd;
		goto out;
	}
	if (size < in->size)
		wait_restoring_locked(in, size / t->chunk_size, in->nchunks);
	if (size < in->size && size % t->chunk_size) {
		/* the boundary chunk keeps its head: it must be hot to cut it,
		 * and pinned (never dropped) while the waits below drop the lock */
		uint64_t c = size / t->chunk_size;
		if (c < in->nchunks && (ret = restore_make_hot_locked(t, in, c, c, 1)) < 0)
			goto out_put;
		if (c < in->nchunks)
			bc = c;
		/* that restore dropped the lock: none may be restoring past it */
		wait_restoring_locked(in, c + 1, in->nchunks);
	}
	if (size < in->size)
		wait_pages_idle_locked(t, in, size / t->chunk_size, in->nchunks);
	/* marked with the lock held through the ftruncate: marked before the
	 * waits, a spill could take the chunk while they dropped the lock,
	 * copy the bytes past the cut with the new generation and keep them
	 * as its cold copy - a truncated tail back once the file grew again
	 * (the soak's fsx, bench/soak) */
	if (bc != UINT64_MAX && in->chunks[bc].state != CHUNK_ABSENT)
		tier_mark_dirty_locked(t, in, bc, bc);
	/* whatever the old size: no chunk outlives the end (issue 39); the
	 * cut journaled first, then the hot file cut */
	if ((ret = cut_locked(t, in, size)) == 0 && ftruncate(fd, (off_t)size) < 0)
		ret = -errno;
	if (bc != UINT64_MAX) {
		pin(in, bc, bc, -1);
		idx_inode_wake(in);
	}
	if (ret < 0)
		goto out_put;
	idx_touch(&in->mtime);
	in->ctime = in->mtime;
	ret = idx_journal_attr_locked(t->idx, in);
	hot_account_locked(t->hot, in);
out_put:
	hot_fd_put_locked(t->hot, in);
out:
	idx_inode_unlock(in);
	return ret;
}

/* Does [off, off+len) cover every byte chunk c holds (its range, cut at
 * EOF)? Then a punch or zeroing replaces the chunk whole. */
static int covers_chunk(const struct tier *t, const struct inode *in, uint64_t c, uint64_t off,
			uint64_t len)
{
	uint64_t cs = c * t->chunk_size, ce = cs + t->chunk_size;
	if (in->size > cs && in->size < ce)
		ce = in->size;
	return off <= cs && off + len >= ce;
}

/* fallocate(2) on the hot file. tmpfs has no FALLOC_FL_ZERO_RANGE: there a
 * zeroing is a punch of the range and an allocation of it. */
static int hot_fallocate(int fd, int mode, uint64_t off, uint64_t len)
{
	if (fallocate(fd, mode, (off_t)off, (off_t)len) == 0)
		return 0;
	if (errno != EOPNOTSUPP || !(mode & FALLOC_FL_ZERO_RANGE))
		return -errno;
	if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len) < 0)
		return -errno;
	mode &= FALLOC_FL_KEEP_SIZE;
	return fallocate(fd, mode, (off_t)off, (off_t)len) < 0 ? -errno : 0;
}

/* One piece of a fallocate (tier_fallocate): its chunks are made hot and
 * pinned together, so it must fit in RAM. */
static int fallocate_piece(struct tier *t, struct inode *in, int mode, uint64_t off, uint64_t len)
{
	int replaces = mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE);
	uint64_t first, last, punch_len = len;
	int64_t r = 0;
	int fd, ret = 0;

	if ((ret = idx_check_writable(t->idx)) < 0)
		return ret;
	tier_chunk_range(t, off, len, &first, &last);
	tier_refresh(t, in); /* passthrough writers' size first */
	idx_inode_lock(in);
	if ((ret = idx_chunks_reserve(in, last + 1)) < 0)
		goto out;
	fd = hot_fd_get_locked(t->hot, in);
	if (fd < 0) {
		ret = fd;
		goto out;
	}
	/* Cold chunks keep their bytes through an allocation, so they must be
	 * hot first; only a punch or zeroing of a whole chunk replaces it. */
	wait_restoring_locked(in, first, last);
	for (uint64_t c = first; c <= last; c++) {
		int full = covers_chunk(t, in, c, off, len);
		if (replaces && full) {
			in->chunks[c].pins++;
		} else if ((ret = restore_make_hot_locked(t, in, c, c, 1)) < 0) {
			if (c > first)
				pin(in, first, c - 1, -1);
			goto out_put;
		}
	}
	if (!(mode & FALLOC_FL_PUNCH_HOLE)) {
		idx_inode_unlock(in);
		r = evict_wait_room(t, fd, off, len); /* may wait for the evictor */
		idx_inode_lock(in);
		if (r < 0) {
			ret = -ENOSPC;
			r = 0;
			goto out_unpin;
		}
	}
	wait_pages_idle_locked(t, in, first, last);
	/* a punch through EOF takes the last partial page too (tmpfs frees
	 * only whole pages; past EOF there is nothing to keep) */
	if ((mode & FALLOC_FL_PUNCH_HOLE) && off + len >= in->size) {
		uint64_t end = (in->size + 4095) & ~4095ULL;
		if (end > off + len)
			punch_len = end - off;
	}
	if ((ret = hot_fallocate(fd, mode, off, punch_len)) < 0)
		goto out_unpin;
	/* Past the end a chunk stays a hole: a punch or a zeroing there
	 * changes no byte of the file, and an allocation kept past it
	 * (KEEP_SIZE) is room, not data (a chunk marked there was never
	 * spilled: it kept its file's hot file, and the file was declared
	 * lost after a reboot, issue 39). A growth marks the chunks past the
	 * old end with the new size (tier_grow_locked). */
	uint64_t grow = (in->size + t->chunk_size - 1) / t->chunk_size;
	int grows = !(mode & FALLOC_FL_KEEP_SIZE) && off + len > in->size;
	for (uint64_t c = first; c <= last && c < grow; c++) {
		struct chunk *ch = &in->chunks[c];
		int full = covers_chunk(t, in, c, off, len);
		if ((mode & FALLOC_FL_PUNCH_HOLE) && full) {
			chunk_set_state(in, c, CHUNK_ABSENT);
			ch->gen++;
			idx_journal_chunk_locked(t->idx, in, c, 1);
			chain_forget_cold(t, ch);
		} else if (replaces || ch->state == CHUNK_COLD) {
			tier_mark_dirty_locked(t, in, c, c);
		} else if (ch->state == CHUNK_ABSENT) {
			tier_mark_dirty_locked(t, in, c, c); /* allocated zeros are data now */
		}
	}
	if (grows && (ret = tier_grow_locked(t, in, first > grow ? first : grow, last, off + len)) < 0)
		goto out_unpin;
	idx_touch(&in->mtime);
	in->ctime = in->mtime;
	ret = idx_journal_attr_locked(t->idx, in);
	hot_account_locked(t->hot, in);
out_unpin:
	pin(in, first, last, -1);
	if (r > 0)
		hot_unreserve(t->hot, (uint64_t)r);
out_put:
	hot_fd_put_locked(t->hot, in);
out:
	idx_inode_unlock(in);
	return ret;
}

/*
 * An allocation (or zeroing) bigger than RAM goes in pieces of a quarter of
 * the hot budget (at least a chunk), chunk-aligned: each piece is made hot,
 * allocated and marked dirty, and the evictor spills it to make room for
 * the next, as for a stream of writes. In one piece, a range larger than
 * the budget waited write_wait and failed with ENOSPC however much room the
 * cold tier had (fallocate -l 64M on a 16M tier). A failed piece leaves the
 * pieces before it allocated (the size covers them), as a local filesystem
 * running out of room part way may. A punch needs no room: one piece.
 */
int tier_fallocate(struct tier *t, struct inode *in, int mode, uint64_t off, uint64_t len)
{
	uint64_t piece, end = off + len;
	int ret = 0;

	if (mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE))
		return -EOPNOTSUPP;
	if ((mode & FALLOC_FL_PUNCH_HOLE) && !(mode & FALLOC_FL_KEEP_SIZE))
		return -EOPNOTSUPP;
	if (len == 0)
		return -EINVAL;
	if ((ret = ext_fallocate(t, in, mode, off, len)) != 1)
		return ret;
	ret = 0;
	if ((mode & FALLOC_FL_PUNCH_HOLE) || !t->store)
		return fallocate_piece(t, in, mode, off, len);
	piece = hot_limit(t->hot) / 4 / t->chunk_size * t->chunk_size;
	if (piece < t->chunk_size)
		piece = t->chunk_size;
	while (off < end && ret == 0) {
		uint64_t next = (off / piece + 1) * piece;
		if (next > end)
			next = end;
		ret = fallocate_piece(t, in, mode, off, next - off);
		off = next;
	}
	return ret;
}

int64_t tier_lseek(struct tier *t, struct inode *in, uint64_t off, int whence)
{
	int64_t ret;
	uint64_t pos = off;
	int fd;

	tier_refresh(t, in); /* passthrough writers' size first */

	if (ext_lseek(t, in, off, whence, &ret) == 0)
		return ret;
	idx_inode_lock(in);
	if (off >= in->size) {
		ret = -ENXIO;
		goto out;
	}
	fd = hot_fd_get_locked(t->hot, in);
	if (fd < 0) {
		ret = fd;
		goto out;
	}
	ret = whence == SEEK_DATA ? -ENXIO : (int64_t)in->size;
	while (pos < in->size) {
		uint64_t c = pos / t->chunk_size, ce = (c + 1) * t->chunk_size;
		uint8_t s = c < in->nchunks ? in->chunks[c].state : CHUNK_ABSENT;
		if (s == CHUNK_COLD || s == CHUNK_RESTORING ||
		    (c < in->nchunks && chain_partial(&in->chunks[c]))) {
			/* a cold chunk counts as data throughout */
			if (whence == SEEK_DATA) {
				ret = (int64_t)pos;
				break;
			}
		} else if (s != CHUNK_ABSENT) {
			off_t r = lseek(fd, (off_t)pos, whence);
			if (r >= 0 && (uint64_t)r < ce && (uint64_t)r < in->size) {
				ret = r;
				break;
			}
		} else if (whence == SEEK_HOLE) {
			ret = (int64_t)pos;
			break;
		}
		pos = ce;
	}
	hot_fd_put_locked(t->hot, in);
out:
	idx_inode_unlock(in);
	return ret;
}

/* evict_file, and while the nvme tier is full with S3 below, wait (like a
 * writer for RAM, up to until_ms) for demotion to make room and go again */
static int evict_file_waiting(struct tier *t, struct inode *in, int drop, uint64_t until_ms)
{
	int ret;

	while ((ret = evict_file(t, in, drop)) == -ENOSPC && evict_wait_cold_room(t, until_ms))
		;
	return ret;
}

/* Has st another device that could take a segment one of them just failed
 * to write (a failed device is skipped: store.h)? */
static int other_device_left(struct store *st)
{
	struct store_dev_stat devs[16];
	int n = store_stat(st, devs, 16), ok = 0;

	for (int i = 0; i < n; i++)
		ok += !devs[i].failed;
	return n > 1 && ok > 0;
}

/* The sum of a file's chunk generations: changes with every write or
 * punch of it (a spill keeps them). */
static uint64_t file_gens(struct inode *in)
{
	uint64_t sum = 0;
	idx_inode_lock(in);
	for (uint64_t c = 0; c < in->nchunks; c++)
		sum += in->chunks[c].gen;
	idx_inode_unlock(in);
	return sum;
}

int tier_fsync(struct tier *t, struct inode *in)
{
	int ret = 0;
	if (!t->jrnl)
		return 0; /* nothing outlives the mount: nothing to make durable */
	if ((ret = ext_fsync(t, in)) != 1)
		return ret < 0 ? ret : state_s3_push_changed(t);
	ret = 0;
	/* passthrough writers: what they wrote so far is dirty now */
	if (__atomic_load_n(&in->pt_writers, __ATOMIC_RELAXED)) {
		idx_inode_lock(in);
		if (in->pt_writers)
			tier_pt_refresh_locked(t, in, 1);
		idx_inode_unlock(in);
	}
	/* every chunk dirty now must be in a durable segment: spill them, wait
	 * for the evictor's spills of this file in flight, and go again for
	 * chunks a racing write re-dirtied (bounded: writes after the fsync
	 * began are not its business) */
	uint64_t until = clock_now_ms() + t->cfg->write_wait_ms, gens = file_gens(in);
	int dirty = 0;
	for (int round = 0, failed = 0; t->store && S_ISREG(idx_type(in)) && round < 8; round++) {
		if ((ret = evict_file_waiting(t, in, 0, until)) < 0) {
			/* a cold device failed under a segment: its chunks are
			 * dirty again and the device is skipped now (store.h), so
			 * another one takes them */
			if (ret == -ENOMEM || ++failed == 3 || !other_device_left(t->store))
				return ret;
			continue;
		}
		idx_inode_lock(in);
		for (;;) {
			int spilling = 0;
			dirty = 0;
			for (uint64_t c = 0; c < in->nchunks; c++) {
				spilling |= in->chunks[c].state == CHUNK_SPILLING;
				dirty |= in->chunks[c].state == CHUNK_HOT_DIRTY &&
					 tier_chunk_len(t, in->size, c) > 0;
			}
			if (!spilling)
				break;
			idx_inode_wait(in);
		}
		idx_inode_unlock(in);
		if (!dirty)
			break;
	}
	/* Still dirty, and nothing written since the fsync began: its bytes
	 * cannot be made durable, and 0 would say they are */
	if (dirty && file_gens(in) == gens) {
		log_err("fsync: inode %llu: a chunk stays dirty after every spill: EIO",
			(unsigned long long)in->ino);
		return -EIO;
	}
	/* moved into an extent meanwhile: its bytes are the extent's now */
	if ((ret = ext_fsync(t, in)) != 1)
		return ret < 0 ? ret : state_s3_push_changed(t);
	idx_inode_lock(in);
	in->attr_dirty = 0;
	ret = idx_journal_attr_locked(t->idx, in);
	idx_inode_unlock(in);
	if (ret == 0)
		ret = jrnl_sync(t->jrnl);
	return ret < 0 ? ret : state_s3_push_changed(t);
}

int tier_sync(struct tier *t)
{
	int ret = t->jrnl ? jrnl_sync(t->jrnl) : 0;
	return ret < 0 ? ret : (t->jrnl ? state_s3_push_changed(t) : 0);
}

int tier_file_state(struct tier *t, struct inode *in, char *buf, size_t len)
{
	uint64_t n[CHUNK_RESTORING + 1] = {0}, segs = 0, last = 0;
	int pinned, ret;
	if ((ret = ext_state(t, in, buf, len)) != 1)
		return ret;
	idx_inode_lock(in);
	for (uint64_t c = 0; c < in->nchunks; c++) {
		struct chunk *ch = &in->chunks[c];
		n[ch->state]++;
		/* distinct segments (chunks of a file are mostly contiguous) */
		if (ch->loc.seg_id && ch->loc.seg_id != last) {
			segs++;
			last = ch->loc.seg_id;
		}
	}
	pinned = in->pinned;
	idx_inode_unlock(in);
	return snprintf(
	    buf, len,
	    "hot=%llu dirty=%llu cold=%llu restoring=%llu spilling=%llu pinned=%d "
	    "segments=%llu",
	    (unsigned long long)(n[CHUNK_HOT_DIRTY] + n[CHUNK_HOT_CLEAN] + n[CHUNK_SPILLING]),
	    (unsigned long long)n[CHUNK_HOT_DIRTY], (unsigned long long)n[CHUNK_COLD],
	    (unsigned long long)n[CHUNK_RESTORING], (unsigned long long)n[CHUNK_SPILLING], pinned,
	    (unsigned long long)segs);
}

int tier_pin(struct tier *t, struct inode *in, int on)
{
	idx_inode_lock(in);
	in->pinned = on ? 1 : 0;
	idx_inode_unlock(in);
	return 0;
}

/* How long an evict waits for a writer's release still on its way */
#define EVICT_RELEASE_WAIT_MS 500

int tier_evict_file(struct tier *t, struct inode *in)
{
	if (!t->store)
		return -ENOTSUP;
	/* the rest of a chunk a reader just faulted in is still arriving (it
	 * is restored after the reply): evict the whole file, not around it */
	uint64_t until = clock_now_ms() + t->cfg->write_wait_ms;
	struct timespec dl;
	int ret;

	if ((ret = ext_evict(t, in, 0)) != 1)
		return ret;
	/* a big file all in RAM, closed: into an extent rather than segments
	 * (read once later, the kernel reads it at the disk's speed). Its
	 * writer's release may still be on its way (FUSE sends it after
	 * close() returned): wait for it, at most EVICT_RELEASE_WAIT_MS */
	if (t->cfg->extents) {
		dl = clock_deadline_ms(EVICT_RELEASE_WAIT_MS);
		idx_inode_lock(in);
		while (in->open_count && in->size >= t->cfg->extent_min &&
		       ext_movable_locked(t, in) == 0 && idx_inode_timedwait(in, &dl) != -ETIMEDOUT)
			;
		idx_inode_unlock(in);
	}
	if (t->cfg->extents && spill_file_to_extent(t, in) >= 0) {
		evict_room_freed(t);
		return ext_evict(t, in, 0); /* and its pages go too */
	}
	ret = 0;
	idx_inode_lock(in);
	wait_restoring_locked(in, 0, in->nchunks);
	idx_inode_unlock(in);
	if ((ret = evict_file_waiting(t, in, 1, until)) < 0)
		return ret;
	/* the evictor's spill of a chunk of the file in flight (evict_file
	 * passes SPILLING chunks by), or a reader still in flight (its reply
	 * sent, its pin not yet dropped, the rest of its chunk about to come
	 * in) kept a chunk hot: wait for them, at most 10 s, and drop what
	 * they left */
	dl = clock_deadline_ms(10000);
	idx_inode_lock(in);
	for (;;) {
		int busy = 0;
		for (uint64_t c = 0; c < in->nchunks && !busy; c++) {
			uint8_t st = in->chunks[c].state;
			busy = st == CHUNK_RESTORING || st == CHUNK_SPILLING ||
			       ((st == CHUNK_HOT_CLEAN || st == CHUNK_HOT_DIRTY) && in->chunks[c].pins);
		}
		if (!busy || idx_inode_timedwait(in, &dl) == -ETIMEDOUT)
			break;
	}
	idx_inode_unlock(in);
	return evict_file_waiting(t, in, 1, until);
}

int tier_warm_file(struct tier *t, struct inode *in)
{
	int ret;
	if (!t->store)
		return 0;
	/* an extent: into segments on the first cold tier, then restored as
	 * any cold file (its cold copy kept, as a restore keeps it); one that
	 * cannot go now (open, no room) is read into the page cache instead */
	if (__atomic_load_n(&in->ext, __ATOMIC_RELAXED) && extent_to_segments(t, in->ino) != 0 &&
	    (ret = ext_evict(t, in, 1)) != 1)
		return ret;
	ret = 0;
	/* the restore workers fetch in parallel; this thread takes what is left
	 * and waits for the rest */
	restore_file_async(t, in);
	idx_inode_lock(in);
	hold_wait_locked(in, 0, in->nchunks);
	ret = in->nchunks ? restore_make_hot_locked(t, in, 0, in->nchunks - 1, 0) : 0;
	idx_inode_unlock(in);
	return ret;
}
