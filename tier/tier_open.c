/*
 * tier_open.c — opens and closes of a file through the tier, and FUSE
 * passthrough of files all in RAM (the rules: tier.h): which open is passed
 * through, the chunks a passthrough writer may have changed behind the
 * daemon, and the kernel's page cache dropped at the last close served
 * through the daemon. Threading: every call is thread-safe; callers hold
 * no inode lock (tier.h), but the *_locked helpers (in->lock held).
 */
#include "tier/tier_i.h"
#include "tier/admit/admit.h"
#include "tier/extent/extent.h"
#include "tier/tier.h"

#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/*
 * Chunks [first, last] may have been written behind the daemon (passthrough
 * writers: from their open to their last close, every chunk counts as
 * changed). A chunk with a plain cold copy keeps it (index.h): dirty for the
 * evictor, which spills it (the spill replaces the copy), but not in the
 * journal, whose durable version stays the copy. Marking it dirty (journal
 * first, copy released) would make a power loss before the next spill lose
 * the whole file - one fsync'd and maybe never written since: an open for
 * write, an fsync and a close each mark every chunk. A chunk with a chain,
 * or none, becomes dirty as for a write. in->lock held.
 */
static void mark_changed_locked(struct tier *t, struct inode *in, uint64_t first, uint64_t last)
{
	uint64_t tick = idx_tick(t->idx);
	for (uint64_t c = first; c <= last && c < in->nchunks; c++) {
		struct chunk *ch = &in->chunks[c];
		if (!ch->loc.seg_id || ch->chain ||
		    (ch->state != CHUNK_HOT_CLEAN && ch->state != CHUNK_HOT_DIRTY &&
		     ch->state != CHUNK_SPILLING)) {
			tier_mark_dirty_locked(t, in, c, c);
			continue;
		}
		chunk_set_state(in, c, CHUNK_HOT_DIRTY); /* a spill in flight sees the new gen */
		ch->gen++;
		chunk_touch(ch, (uint32_t)tick);
	}
}

/* ---- opens, and passthrough (the rules: tier.h) ---- */

void tier_set_passthrough(struct tier *t, const struct tier_pt_ops *ops)
{
	__atomic_store_n(&t->pt, ops, __ATOMIC_RELEASE);
}

/* Chunks [0, n) that hold the file's bytes. */
static uint64_t size_chunks(const struct tier *t, const struct inode *in)
{
	return (in->size + t->chunk_size - 1) / t->chunk_size;
}

/* An open or a close is an access: the evictor takes the file last. Not a
 * read of its chunks (an unread chunk stays unread: index.h). */
static void touch_all_locked(struct tier *t, struct inode *in)
{
	uint32_t tick = (uint32_t)idx_tick(t->idx);
	for (uint64_t c = 0; c < in->nchunks; c++)
		in->chunks[c].atime = tick;
}

/* Is every byte of the file in RAM (no chunk COLD or RESTORING)? A
 * restore job queued for a chunk that is hot meanwhile does nothing. */
static int all_hot_locked(const struct inode *in)
{
	for (uint64_t c = 0; c < in->nchunks; c++) {
		const struct chunk *ch = &in->chunks[c];
		if (ch->state == CHUNK_COLD || ch->state == CHUNK_RESTORING || chain_partial(ch))
			return 0;
	}
	return 1;
}

/* Passthrough writers wrote into the hot file behind the daemon's back:
 * take its size, mtime and allocation from it; with all_dirty, every chunk
 * of it becomes dirty (any may have changed). in->lock held. */
void tier_pt_refresh_locked(struct tier *t, struct inode *in, int all_dirty)
{
	struct stat st;
	int64_t mt;

	if (in->ext) {
		ext_refresh_locked(t, in);
		return;
	}
	if (in->hot_fd < 0 || fstat(in->hot_fd, &st) < 0)
		return;
	if ((uint64_t)st.st_size > in->size) {
		uint64_t n = ((uint64_t)st.st_size + t->chunk_size - 1) / t->chunk_size;
		uint64_t first = in->size / t->chunk_size;
		if (idx_chunks_reserve(in, n) == 0)
			tier_grow_locked(t, in, first, n - 1, (uint64_t)st.st_size);
	}
	mt = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	if (mt > in->mtime) {
		in->mtime = in->ctime = mt;
		in->attr_dirty = 1;
	}
	/* every chunk of the size, the map grown to it first: a truncate up
	 * leaves the chunks past the old end out of it, and the writer may
	 * have written there (out of memory: the map's chunks at least) */
	if (all_dirty && size_chunks(t, in)) {
		idx_chunks_reserve(in, size_chunks(t, in));
		mark_changed_locked(t, in, 0, size_chunks(t, in) - 1);
	}
	hot_account_locked(t->hot, in);
}

void tier_refresh(struct tier *t, struct inode *in)
{
	if (!__atomic_load_n(&in->pt_writers, __ATOMIC_RELAXED))
		return;
	idx_inode_lock(in);
	if (in->pt_writers)
		tier_pt_refresh_locked(t, in, 0);
	idx_inode_unlock(in);
}

/* Decide whether this open is passed through (out->backing_id set) and
 * count it. fd: the hot file, held for the open. in->lock held. */
static int pt_open_locked(struct tier *t, struct inode *in, int fd, unsigned flags, void *ctx,
			  struct tier_open_out *out)
{
	static int warned;
	int why = -1, id;
	struct stat st;

	if (in->pt_opens) {
		/* the kernel takes only passthrough opens of this inode now */
		if (in->pt_opens == UINT16_MAX || in->pt_writers == UINT16_MAX)
			return -EMFILE;
		/* atomic: tier_refresh and tier_io look without the lock */
		if ((flags & TIER_OPEN_WRITE) &&
		    __atomic_fetch_add(&in->pt_writers, 1, __ATOMIC_RELAXED) == 0)
			tier_pt_refresh_locked(t, in, 1);
		in->pt_opens++;
		out->backing_id = in->backing_id;
	} else if (in->open_count > 0) {
		why = TIER_PT_SHARED;
	} else if (flags & TIER_OPEN_WRITE) {
		why = TIER_PT_WRITE;
	} else if (!all_hot_locked(in)) {
		why = TIER_PT_COLD;
	} else if (hot_pinned(t->hot) + in->hot_bytes > hot_limit(t->hot) / 2) {
		/* RAM the evictor cannot take: at most half of it, so that the
		 * rest still turns over for writers */
		why = TIER_PT_ROOM;
	} else if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != in->size) {
		/* the hot file mirrors the size (hot.c): never seen otherwise */
		log_warn("passthrough: inode %llu's hot file is not its size: through the daemon",
			 (unsigned long long)in->ino);
		why = TIER_PT_ERROR;
	} else if ((id = tier_pt(t)->open(ctx, fd)) <= 0) {
		if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
			log_warn("passthrough: the kernel refused a hot file (%s): such opens go "
				 "through the daemon",
				 strerror(id < 0 ? -id : EIO));
		why = TIER_PT_ERROR;
	} else {
		in->backing_id = id;
		in->pt_opens = 1;
		hot_pin_locked(t->hot, in, 1);
		out->backing_id = id;
	}
	if (why >= 0) {
		__atomic_add_fetch(&t->st.pt_fallback[why], 1, __ATOMIC_RELAXED);
		return 0;
	}
	__atomic_add_fetch(&t->st.pt_opens, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&t->st.pt_open_now, 1, __ATOMIC_RELAXED);
	touch_all_locked(t, in);
	return 0;
}

int tier_open(struct tier *t, struct inode *in, unsigned flags, void *ctx,
	      struct tier_open_out *out)
{
	int fd, ret = 0;

	out->backing_id = 0;
	out->flags = flags;
	idx_inode_lock(in);
	/* a file with an extent (or a stream that gets one now) */
	if ((ret = ext_open_locked(t, in, !!(flags & TIER_OPEN_WRITE),
				   !!(flags & TIER_OPEN_PASSTHROUGH), tier_pt(t) ? tier_pt(t)->open : NULL,
				   ctx, &out->backing_id)) != 0) {
		idx_inode_unlock(in);
		if (ret > 0)
			out->flags |= TIER_OPEN_EXT;
		return ret < 0 ? ret : 0;
	}
	if (flags & TIER_OPEN_CREATE)
		flags &= ~TIER_OPEN_PASSTHROUGH;
	fd = hot_fd_get_locked(t->hot, in);
	if (fd >= 0 && tier_pt(t) && (flags & TIER_OPEN_PASSTHROUGH))
		ret = pt_open_locked(t, in, fd, flags, ctx, out);
	if (fd >= 0 && ret == 0)
		in->open_count++;
	else if (fd >= 0)
		hot_fd_put_locked(t->hot, in);
	idx_inode_unlock(in);
	if (fd < 0 || ret < 0)
		return fd < 0 ? fd : ret;
	if (!out->backing_id && t->store && t->cfg->restore == RESTORE_OPEN)
		restore_file_async(t, in);
	return 0;
}

/* Runs of chunks a last close drops from the kernel's cache, at most (more:
 * the whole file) */
#define DROP_RUNS 16

/* The chunks in RAM, as runs [c0, c1) in runs (at most DROP_RUNS): the
 * kernel's copies of them are second copies. Returns the number of runs,
 * or -1 when there are more (drop the whole file), 0 when none. in->lock
 * held. */
static int hot_runs_locked(const struct inode *in, uint64_t runs[][2])
{
	int n = 0;

	for (uint64_t c = 0; c < in->nchunks;) {
		uint8_t s = in->chunks[c].state;
		uint64_t e = c;

		if (s != CHUNK_HOT_DIRTY && s != CHUNK_HOT_CLEAN && s != CHUNK_SPILLING) {
			c++;
			continue;
		}
		while (e < in->nchunks && (in->chunks[e].state == CHUNK_HOT_DIRTY ||
					   in->chunks[e].state == CHUNK_HOT_CLEAN ||
					   in->chunks[e].state == CHUNK_SPILLING))
			e++;
		if (n == DROP_RUNS)
			return -1;
		runs[n][0] = c;
		runs[n][1] = e;
		n++;
		c = e;
	}
	return n;
}

void tier_close(struct tier *t, struct inode *in, const struct tier_open_out *how, void *ctx)
{
	uint64_t runs[DROP_RUNS][2];
	int drop_cache = 0, nruns = 0;

	if (ext_close(t, in, !!(how->flags & TIER_OPEN_WRITE), !!(how->flags & TIER_OPEN_EXT),
		      how->backing_id,
		      tier_pt(t) ? tier_pt(t)->close : NULL, ctx))
		return;
	idx_inode_lock(in);
	if (how->backing_id) {
		if (how->flags & TIER_OPEN_WRITE) {
			__atomic_sub_fetch(&in->pt_writers, 1, __ATOMIC_RELAXED); /* as above */
			tier_pt_refresh_locked(t, in, 1);
		}
		if (in->pt_opens == 1) {
			hot_pin_locked(t->hot, in, 0);
			tier_pt(t)->close(ctx, in->backing_id);
			in->backing_id = 0;
		}
		if (!--in->pt_opens)
			idx_inode_wake(in); /* an evict waiting for the last release */
		touch_all_locked(t, in);
		__atomic_sub_fetch(&t->st.pt_open_now, 1, __ATOMIC_RELAXED);
	} else if (in->open_count == 1 && tier_pt(t) && in->kcached &&
		   (nruns = hot_runs_locked(in, runs)) != 0) {
		/* the last open served through the daemon: the kernel's copy of
		 * what the hot file holds goes. Only when a read or write put
		 * pages there: the drop takes the kernel's cached attributes too
		 * (a create-and-close stats at cache speed). Not the chunks RAM
		 * does not hold: the kernel's pages of those came from cold
		 * reads (tier/admit: read once) and are the only copy, as a plain
		 * directory's page cache would be (a reopen that reads on, as
		 * Ray's next object does, finds its readahead there) */
		in->kcached = 0;
		drop_cache = nruns < 0 || (nruns == 1 && runs[0][0] == 0 &&
					   runs[0][1] == in->nchunks);
	}
	if (in->open_count == 1 && in->inval_owed) {
		/* the evictor's drops held back while the file was open (inval.c) */
		in->inval_owed = 0;
		drop_cache = 1;
	}
	if (in->attr_dirty) {
		in->attr_dirty = 0;
		idx_journal_attr_locked(t->idx, in);
	}
	/* a writer that wrote the file around: what it left dirty goes now */
	int kick = (how->flags & TIER_OPEN_WRITE) && admit_close_locked(t, in);
	if (--in->open_count == 0)
		idx_inode_wake(in); /* an evict waiting for the writer's release */
	hot_fd_put_locked(t->hot, in);
	idx_inode_unlock(in);
	if (kick)
		evict_kick(t);
	if (drop_cache) {
		inval_async(t, in->ino, 0, 0);
		__atomic_add_fetch(&t->st.cache_drops, 1, __ATOMIC_RELAXED);
	} else if (nruns > 0) {
		for (int i = 0; i < nruns; i++)
			inval_async(t, in->ino, runs[i][0] * t->chunk_size,
				    (runs[i][1] - runs[i][0]) * t->chunk_size);
		__atomic_add_fetch(&t->st.cache_drops, 1, __ATOMIC_RELAXED);
	}
}
