/*
 * restore — faulting cold chunks back into RAM.
 *
 * DESIGN
 * - A chunk goes COLD -> RESTORING -> HOT_CLEAN (or back to COLD on error)
 *   under its inode's lock; whoever flips it to RESTORING does the I/O and
 *   everyone else waits on in->cond. A read of a chunk not yet restored
 *   restores it itself at once (it is "served first"); the background
 *   workers skip chunks no longer COLD.
 * - Opening a file with restore=open queues all its COLD chunks in file
 *   order; io_workers threads work the queue. Prefetch stops while the hot
 *   tier is above spill_threshold, so it never pushes out hotter data.
 * - Every chunk read back is checked against its crc32c (seg_read_chunk:
 *   every block, and the extent map of a v2 mapped record): a mismatch is
 *   EIO to the reader and a log line, never wrong bytes.
 * - Only the chunk's data extents are written into the hot file: holes
 *   stored as holes in the segment stay holes in tmpfs (format v2; a v1
 *   record is one extent, the whole chunk).
 */
#include "tier/tier_i.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/uring.h"
#include "tier/segment.h"
#include "tier/store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

_Static_assert(SEG_F_MAP == CHUNK_LOC_MAP, "segment and index record flags differ");

struct restore_job {
	struct restore_job *next;
	struct inode *in; /* internal ref */
	uint64_t c;
};

int restore_chunk_locked(struct tier *t, struct inode *in, uint64_t c)
{
	struct chunk *ch = &in->chunks[c];
	struct seg_entry e = {.ino = in->ino,
			      .chunk = c,
			      .gen = ch->seg_gen,
			      .off = ch->seg_off,
			      .len = ch->seg_len,
			      .crc = ch->seg_crc,
			      .flags = ch->seg_flags & CHUNK_LOC_MAP};
	uint64_t seg = ch->seg_id, off = c * t->chunk_size, t0 = clock_now_ns();
	/* room: a plain record is its bytes from offset 0; a mapped one may
	 * spread anywhere in the chunk (only its extents get written) */
	uint32_t dev = ch->seg_dev,
		 need = e.flags ? tier_chunk_len(t, in->size, c) : e.len;
	struct seg_chunk sc = {0};
	int64_t reserved = 0;
	int fd, ret;

	fd = hot_fd_get_locked(t->hot, in);
	if (fd < 0) {
		ch->state = CHUNK_COLD;
		idx_inode_wake(in);
		return fd;
	}
	idx_inode_unlock(in);

	/* Acknowledged data must stay readable even when nothing can be
	 * evicted: a restore waits only while the evictor frees RAM, then
	 * overshoots hot_size by the chunks in flight (at most io_workers +
	 * readers); the evictor drops them first, as they are clean. */
	reserved = evict_room_for_restore(t, fd, off, need);
	for (int tries = 0; tries < 2; tries++) {
		struct store *st;
		/* the segment may have moved to s3 since: look it up each time */
		ret = seg_locate(t, seg, &st, &dev);
		if (ret == 0)
			ret = seg_read_chunk(st, seg, dev, &e, &sc);
		if (ret != -ENOENT)
			break;
	}
	if (ret == -EBADMSG) {
		__atomic_add_fetch(&t->st.errors_crc, 1, __ATOMIC_RELAXED);
		ret = -EIO; /* the caller sees an I/O error, never wrong bytes */
	} else if (ret < 0) {
		__atomic_add_fetch(&t->st.errors_io, 1, __ATOMIC_RELAXED);
	}
	/* the data extents only: holes stay holes in the hot file too */
	for (uint32_t i = 0, pos = 0; ret == 0 && i < sc.next; pos += sc.ext[i].len, i++)
		ret = uring_write_full(fd, sc.data + pos, sc.ext[i].len, off + sc.ext[i].off);
	if (ret == 0)
		__atomic_add_fetch(&t->st.bytes_restored, sc.data_len, __ATOMIC_RELAXED);
	seg_chunk_free(&sc);
	idx_inode_lock(in);
	ch = &in->chunks[c]; /* the map may have grown (moved) meanwhile */
	if (ret == 0) {
		ch->state = CHUNK_HOT_CLEAN;
		ch->atime = idx_tick(t->idx);
		__atomic_add_fetch(&t->st.chunks_restored, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&t->st.restore_ns, clock_now_ns() - t0, __ATOMIC_RELAXED);
		hist_observe(&t->st.h_restore, clock_now_ns() - t0);
	} else {
		ch->state = CHUNK_COLD;
		__atomic_add_fetch(&t->st.errors_io, 1, __ATOMIC_RELAXED);
		log_err("restore: inode %llu chunk %llu from segment %llu: %s",
			(unsigned long long)in->ino, (unsigned long long)c, (unsigned long long)seg,
			strerror(-ret));
	}
	hot_account_locked(t->hot, in);
	hot_fd_put_locked(t->hot, in);
	idx_inode_wake(in);
	if (reserved > 0)
		hot_unreserve(t->hot, (uint64_t)reserved);
	return ret;
}

int tier_make_hot_locked(struct tier *t, struct inode *in, uint64_t first, uint64_t last, int pin)
{
	/* Restoring chunk c drops in->lock, so chunks made hot earlier in this
	 * call are pinned at once or the evictor could take them again. */
	for (uint64_t c = first; c <= last && c < in->nchunks; c++) {
		for (;;) {
			uint8_t s = in->chunks[c].state;
			if (s == CHUNK_RESTORING) {
				idx_inode_wait(in);
				continue;
			}
			if (s != CHUNK_COLD)
				break;
			in->chunks[c].state = CHUNK_RESTORING;
			int ret = restore_chunk_locked(t, in, c);
			if (ret < 0) {
				while (pin && c-- > first)
					in->chunks[c].pins--;
				return ret;
			}
		}
		if (pin)
			in->chunks[c].pins++;
	}
	return 0;
}

void restore_file_async(struct tier *t, struct inode *in)
{
	struct restore_job *head = NULL, **tail = &head;
	uint64_t n = 0;

	if (!t->store || t->nrworkers == 0)
		return;
	idx_inode_lock(in);
	for (uint64_t c = 0; c < in->nchunks; c++) {
		struct chunk *ch = &in->chunks[c];
		struct restore_job *j;
		if (ch->state != CHUNK_COLD || ch->queued)
			continue;
		if (!(j = calloc(1, sizeof(*j))))
			break;
		ch->queued = 1;
		j->c = c;
		*tail = j;
		tail = &j->next;
		n++;
	}
	idx_inode_unlock(in);
	if (!head)
		return;
	/* each job holds a ref so the inode outlives its queue entries */
	for (struct restore_job *j = head; j; j = j->next) {
		struct inode *r = idx_get(t->idx, in->ino);
		j->in = r ? r : in;
		if (!r)
			j->c = UINT64_MAX; /* gone: the worker only clears nothing */
	}
	pthread_mutex_lock(&t->rlock);
	if (t->rq_tail)
		t->rq_tail->next = head;
	else
		t->rq_head = head;
	for (t->rq_tail = head; t->rq_tail->next; t->rq_tail = t->rq_tail->next)
		;
	pthread_cond_broadcast(&t->rcond);
	pthread_mutex_unlock(&t->rlock);
	log_debug("restore: inode %llu: %llu chunks queued", (unsigned long long)in->ino,
		  (unsigned long long)n);
}

static void *restore_worker(void *arg)
{
	struct tier *t = arg;

	/* Prefetch is best effort: idle I/O class, so a chunk a reader is
	 * waiting for (restored by the reader's own thread) is not queued behind
	 * a whole file's worth of prefetch in the disk scheduler. */
	if (syscall(SYS_ioprio_set, 1 /* IOPRIO_WHO_PROCESS */, (int)syscall(SYS_gettid), 3 << 13) <
	    0) /* the pread fallback, and S3 */
		log_debug("restore: cannot lower the prefetch I/O priority: %s", strerror(errno));
	uint64_t threshold = (uint64_t)(t->cfg->spill_threshold * hot_limit(t->hot));

	pthread_mutex_lock(&t->rlock);
	for (;;) {
		struct restore_job *j;
		while (!t->rq_head && !t->stopping)
			pthread_cond_wait(&t->rcond, &t->rlock);
		if (t->stopping)
			break;
		j = t->rq_head;
		t->rq_head = j->next;
		if (!t->rq_head)
			t->rq_tail = NULL;
		pthread_mutex_unlock(&t->rlock);

		if (j->c != UINT64_MAX) {
			struct inode *in = j->in;
			idx_inode_lock(in);
			if (j->c < in->nchunks) {
				struct chunk *ch = &in->chunks[j->c];
				ch->queued = 0;
				/* prefetch only while there is room to spare */
				if (ch->state == CHUNK_COLD && in->nlink + in->open_count > 0 &&
				    hot_used(t->hot) + hot_reserved(t->hot) < threshold) {
					/* the head of a file is what its reader asks for
					 * first: fetch it at normal priority */
					uring_set_ioprio(j->c < 2 ? 0 : 3 << 13);
					ch->state = CHUNK_RESTORING;
					restore_chunk_locked(t, in, j->c);
				}
			}
			idx_inode_unlock(in);
			idx_put(t->idx, in);
		}
		free(j);
		pthread_mutex_lock(&t->rlock);
	}
	pthread_mutex_unlock(&t->rlock);
	return NULL;
}

int restore_start(struct tier *t)
{
	unsigned n = t->cfg->io_workers;
	t->rworkers = calloc(n, sizeof(*t->rworkers));
	if (!t->rworkers)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		if (pthread_create(&t->rworkers[i], NULL, restore_worker, t) != 0)
			break;
		t->nrworkers++;
	}
	return t->nrworkers ? 0 : -EAGAIN;
}

void restore_stop(struct tier *t)
{
	struct restore_job *j, *next;
	pthread_mutex_lock(&t->rlock);
	t->stopping = 1;
	pthread_cond_broadcast(&t->rcond);
	pthread_mutex_unlock(&t->rlock);
	for (unsigned i = 0; i < t->nrworkers; i++)
		pthread_join(t->rworkers[i], NULL);
	free(t->rworkers);
	t->rworkers = NULL;
	t->nrworkers = 0;
	for (j = t->rq_head; j; j = next) {
		next = j->next;
		if (j->c != UINT64_MAX)
			idx_put(t->idx, j->in);
		free(j);
	}
	t->rq_head = t->rq_tail = NULL;
}
