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
 * - Reader's range first (partial restore): a read of a COLD chunk with a
 *   v2 mapped record fetches and verifies only the 64 KiB blocks its range
 *   covers (seg_read_part) and answers; the same thread then restores the
 *   rest after the reply (restore_rest_locked, from tier_read_end).
 *   Meanwhile the chunk is RESTORING and a struct rst_part in a small side
 *   table (restore.parts, only while it lasts) records which blocks are in RAM:
 *   readers of those go on, everyone else (other blocks, writes, truncate,
 *   eviction) waits for the chunk to leave RESTORING, so a write always
 *   lands after the restore and wins, and no reader sees a block before it
 *   was verified and written whole. A v1 (or small plain) record has one
 *   crc: it is restored whole.
 * - Answer from the read buffer: when the read lies in one chunk and its
 *   bytes are all data (no hole), the reply is the verified bytes in the
 *   read buffer itself (tier_io.mem, fuse_reply_buf), not a write into tmpfs
 *   and a read back. The rst_part holds that buffer (held) until the rest
 *   starts, after the reply: the blocks are written into the hot file and
 *   only then published, so other readers of them wait as for any block.
 * - Publish as it lands: the rest of a partial restore, and every restore
 *   by a worker (prefetch, read-ahead) of a mapped record of more than one
 *   piece, come in a piece at a time (part_fill: 1 MiB from NVMe, the whole
 *   missing range in one GET from S3), each read, verified, written and
 *   then set in the rst_part bitmap, with a wake-up: a sequential reader
 *   waiting for block k of a chunk restored ahead of it goes on once k's
 *   piece is in, not after the whole chunk.
 * - A bad block is EIO to the reads that need it: the rest of a partial
 *   restore (or a worker's restore) fails at the first bad piece, readers
 *   of the pieces already published finish, then the chunk goes back to
 *   COLD (its range punched once no reader holds it) and reads of other
 *   blocks fetch their own blocks again.
 * - Sequential readers: the fs layer asks for io_workers chunks ahead
 *   (restore_ahead); those jobs go before the prefetch queue and run at
 *   normal I/O priority, prefetch at idle priority. The workers and their
 *   queue are restore_workers.c; the room's state is restore_i.h. What a
 *   read of a chunk does (read directly, beside, wait, restore in part or
 *   whole) is decided in one place, restore_read.c (read_plan_locked).
 */
#include "tier/restore/restore.h"
#include "tier/restore/restore_i.h"
#include "tier/tier_i.h"
#include "common/workq.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/uring.h"
#include "tier/segment/segment.h"
#include "tier/store/store.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Bytes a restore of a mapped record reads, verifies, writes and publishes
 * at a time from an NVMe segment (S3: the whole missing range, one GET). */
#define PUB_PIECE (1u << 20)

static unsigned part_bucket(uint64_t ino, uint64_t c)
{
	return (unsigned)(((ino * 0x9E3779B97F4A7C15ull) ^ c) % RST_PART_HASH);
}

struct rst_part *rst_part_find(struct tier *t, uint64_t ino, uint64_t c)
{
	struct restore *r = t->rst;
	struct rst_part *p;

	pthread_mutex_lock(&r->plock);
	for (p = r->parts[part_bucket(ino, c)]; p; p = p->next)
		if (p->ino == ino && p->c == c)
			break;
	pthread_mutex_unlock(&r->plock);
	return p;
}

/* A new entry for (ino, c), no block in RAM; NULL without memory. The free
 * list keeps them, so a restore allocates only while the table grows. */
struct rst_part *rst_part_new(struct tier *t, uint64_t ino, uint64_t c)
{
	struct restore *r = t->rst;
	struct rst_part *p;
	unsigned b = part_bucket(ino, c);

	pthread_mutex_lock(&r->plock);
	if ((p = r->pfree))
		r->pfree = p->next;
	pthread_mutex_unlock(&r->plock);
	if (!p && !(p = malloc(sizeof(*p))))
		return NULL;
	memset(p, 0, sizeof(*p));
	p->ino = ino;
	p->c = c;
	pthread_mutex_lock(&r->plock);
	p->next = r->parts[b];
	r->parts[b] = p;
	pthread_mutex_unlock(&r->plock);
	return p;
}

static void part_del(struct tier *t, struct rst_part *p)
{
	struct restore *r = t->rst;
	struct rst_part **pp;

	pthread_mutex_lock(&r->plock);
	for (pp = &r->parts[part_bucket(p->ino, p->c)]; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	p->next = r->pfree;
	r->pfree = p;
	pthread_mutex_unlock(&r->plock);
}

void rst_part_direct_end_locked(struct tier *t, struct inode *in, struct rst_part *p)
{
	chunk_set_state(in, p->c, CHUNK_COLD);
	part_del(t, p);
	idx_inode_wake(in);
}

int rst_part_has(const struct rst_part *p, uint32_t b0, uint32_t b1)
{
	for (uint32_t b = b0; b <= b1; b++)
		if (!(p->have[b / 64] >> (b % 64) & 1))
			return 0;
	return 1;
}

/* The restore p is over: wait for the readers reading beside it
 * (one block read each). in->lock held. */
static void part_wait_beside_locked(struct inode *in, struct rst_part *p)
{
	while (p->beside > 0)
		idx_inode_wait(in);
}

static void part_set(struct rst_part *p, uint32_t b0, uint32_t b1)
{
	for (uint32_t b = b0; b <= b1; b++)
		p->have[b / 64] |= 1ull << (b % 64);
}

/*
 * Write all len bytes of buf at off into the hot file. Up to one ring piece
 * (the reader's blocks) a plain pwrite: the hot file is on tmpfs, whose
 * buffered writes io_uring cannot do inline and punts to an io-wq worker (the
 * iou-wrk threads in a profile), a thread hand-off and wake-up on the
 * reader's path for what is a memory copy. Larger writes (a whole chunk, the
 * rest of one) stay on the ring, whose pieces the io-wq workers copy in
 * parallel: a single-threaded pwrite of 4 MiB halved the sequential restore
 * rate in bench_faultin. 0 or -errno.
 */
static int hot_write_full(int fd, const void *buf, size_t len, uint64_t off)
{
	const char *p = buf;

	if (len > URING_PIECE)
		return uring_write_full(fd, buf, len, off);
	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* Write the extents of sc that lie in chunk bytes [lo, hi) into fd, the
 * chunk starting at base; *done grows by the bytes written. 0 or -errno. */
static int write_extents(int fd, uint64_t base, const struct seg_chunk *sc, uint64_t lo,
			 uint64_t hi, uint64_t *done)
{
	uint64_t pos = 0;
	int ret = 0;

	for (uint32_t i = 0; ret == 0 && i < sc->next; pos += sc->ext[i].len, i++) {
		uint64_t xo = sc->ext[i].off, xe = xo + sc->ext[i].len;
		uint64_t a = lo > xo ? lo : xo, b = hi < xe ? hi : xe;

		if (a < b && (ret = hot_write_full(fd, sc->data + pos + (a - xo), b - a,
						     base + a)) == 0)
			*done += b - a;
	}
	return ret;
}

/* The end of a whole-chunk restore of chunk c (in->lock held again): the
 * chunk HOT_CLEAN and counted, or COLD; the hot file accounted and put,
 * waiters woken, the room reserved given back. Returns ret. */
static int restore_end_locked(struct tier *t, struct inode *in, uint64_t c, int ret,
			      uint64_t t0, int tier, int64_t reserved)
{
	struct chunk *ch = &in->chunks[c];
	if (ret == 0) {
		chunk_set_state(in, c, CHUNK_HOT_CLEAN);
		if (ch->chain)
			ch->chain->partial = 0;
		ch->atime = (uint32_t)idx_tick(t->idx);
		__atomic_add_fetch(&t->st.chunks_restored, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&t->st.restore_ns, clock_now_ns() - t0, __ATOMIC_RELAXED);
		hist_observe(&t->st.h_restore, clock_now_ns() - t0);
		lhist_observe(&t->st.h_rst[tier], clock_now_ns() - t0);
	} else {
		chunk_set_state(in, c, CHUNK_COLD);
	}
	hot_account_locked(t->hot, in);
	hot_fd_put_locked(t->hot, in);
	idx_inode_wake(in);
	if (reserved > 0)
		hot_unreserve(t->hot, (uint64_t)reserved);
	return ret;
}

/* restore_chunk_locked of a chunk with a chain (tier/chain/chain.c): the whole
 * chain, each block from the newest record that has it; blocks of zeros
 * stay holes. */
static int chain_restore_locked(struct tier *t, struct inode *in, uint64_t c)
{
	uint32_t clen = tier_chunk_len(t, in->size, c);
	uint64_t off = c * t->chunk_size, t0 = clock_now_ns();
	struct chain_view v;
	int64_t reserved = 0;
	uint8_t *buf = NULL;
	int fd, ret = 0, tier = 0;

	fd = hot_fd_get_locked(t->hot, in);
	if (fd < 0) {
		chunk_set_state(in, c, CHUNK_COLD);
		idx_inode_wake(in);
		return fd;
	}
	chain_view_of(in, c, &v);
	idx_inode_unlock(in);
	reserved = evict_room_for_restore(t, fd, off, clen);
	if (clen && !(buf = seg_buf_alloc(clen)))
		ret = -ENOMEM;
	if (ret == 0 && clen)
		ret = chain_view_read(t, &v, 0, clen, buf, &tier);
	/* blocks of zeros stay holes in the hot file */
	static const uint8_t zero[CHAIN_BLK];
	for (uint32_t a = 0; ret == 0 && a < clen;) {
		uint32_t n = clen - a < CHAIN_BLK ? clen - a : CHAIN_BLK, z = a;
		if (memcmp(buf + a, zero, n) == 0) {
			a += n;
			continue;
		}
		while (z < clen) {
			uint32_t m = clen - z < CHAIN_BLK ? clen - z : CHAIN_BLK;
			if (memcmp(buf + z, zero, m) == 0)
				break;
			z += m;
		}
		ret = chain_pwrite_full(fd, buf + a, z - a, off + a);
		a = z;
	}
	seg_buf_free(buf);
	if (ret == 0)
		__atomic_add_fetch(&t->st.bytes_restored, clen, __ATOMIC_RELAXED);
	idx_inode_lock(in);
	if (ret < 0) {
		/* nothing of it may be read from RAM: punch what landed */
		fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
			  (off_t)t->chunk_size);
		log_err("restore: inode %llu chunk %llu (a chain of %u records): %s",
			(unsigned long long)in->ino, (unsigned long long)c,
			(unsigned)v.k->nrec + 1, strerror(-ret));
	}
	return restore_end_locked(t, in, c, ret, t0, tier, reserved);
}

/* The whole-chunk restore of chunk c (RESTORING, no chain) from its record
 * rec, located. */
int rst_whole_locked(struct tier *t, struct inode *in, uint64_t c, struct cold_rec *rec)
{
	uint64_t off = c * t->chunk_size, t0 = clock_now_ns();
	/* room: a plain record is its bytes from offset 0; a mapped one may
	 * spread anywhere in the chunk (only its extents get written) */
	uint32_t need =
	    (rec->loc.flags & LOC_F_MAP) ? tier_chunk_len(t, in->size, c) : rec->loc.len;
	struct seg_chunk sc = {0};
	int64_t reserved = 0;
	int fd, ret;

	fd = hot_fd_get_locked(t->hot, in);
	if (fd < 0) {
		chunk_set_state(in, c, CHUNK_COLD);
		idx_inode_wake(in);
		return fd;
	}
	idx_inode_unlock(in);

	/* Acknowledged data must stay readable even when nothing can be
	 * evicted: a restore waits only while the evictor frees RAM, then
	 * overshoots hot_size by the chunks in flight (at most io_workers +
	 * readers); the evictor drops them first, as they are clean. */
	reserved = evict_room_for_restore(t, fd, off, need);
	ret = cold_read_whole(t, rec, &sc);
	/* the data extents only: holes stay holes in the hot file too */
	for (uint32_t i = 0, pos = 0; ret == 0 && i < sc.next; pos += sc.ext[i].len, i++)
		ret = hot_write_full(fd, sc.data + pos, sc.ext[i].len, off + sc.ext[i].off);
	if (ret == 0)
		__atomic_add_fetch(&t->st.bytes_restored, sc.data_len, __ATOMIC_RELAXED);
	seg_chunk_free(&sc);
	idx_inode_lock(in);
	if (ret < 0)
		log_err("restore: inode %llu chunk %llu from segment %llu: %s",
			(unsigned long long)in->ino, (unsigned long long)c,
			(unsigned long long)rec->loc.seg_id, strerror(-ret));
	return restore_end_locked(t, in, c, ret, t0, rec->tier, reserved);
}

/* Chunk c's cold record, located (in->lock held). */
static void locate_chunk(struct tier *t, const struct inode *in, uint64_t c, struct cold_rec *rec)
{
	cold_locate(t, in->ino, c, &in->chunks[c].loc, rec);
}

int restore_chunk_locked(struct tier *t, struct inode *in, uint64_t c)
{
	struct cold_rec rec;

	if (in->chunks[c].chain)
		return chain_restore_locked(t, in, c);
	locate_chunk(t, in, c, &rec);
	return rst_whole_locked(t, in, c, &rec);
}

/* First step of a partial restore of chunk r->c (RESTORING, p fresh) from
 * its record rec: the blocks covering the reader's bytes [r->lo, r->hi)
 * only. When the read lies in this chunk (r->one) and those bytes are all
 * data, they are not written into the hot file here: r->mem points at them
 * in the verified read buffer, which p holds until restore_rest_locked
 * writes them (after the reply). On failure the chunk is COLD again and p
 * is gone. */
int rst_part_first_locked(struct tier *t, struct inode *in, struct chunk_read *r,
			     struct rst_part *p, const struct cold_rec *rec)
{
	uint64_t c = r->c, base = c * t->chunk_size;
	uint32_t b0 = (uint32_t)(r->lo / SEG_BLOCK), b1 = (uint32_t)((r->hi - 1) / SEG_BLOCK);
	uint32_t clen = tier_chunk_len(t, in->size, c);
	uint64_t lo = (uint64_t)b0 * SEG_BLOCK, hi = (uint64_t)(b1 + 1) * SEG_BLOCK;
	struct seg_chunk sc;
	int fd, ret;

	if (hi > clen)
		hi = clen;
	p->rec = *rec;
	p->t0 = clock_now_ns();
	fd = hot_fd_get_locked(t->hot, in); /* kept until the rest is in */
	if (fd < 0) {
		ret = fd;
		goto out_cold;
	}
	idx_inode_unlock(in);
	p->reserved = evict_room_for_restore(t, fd, base, clen);
	ret = cold_read(t, &p->rec, lo, hi - lo, &sc);
	if (ret == 0 && r->one && (r->mem = seg_chunk_span(&sc, r->lo, r->hi))) {
		/* answered from sc; written and published after the reply */
		p->sc = sc;
		if (sc.ext == sc.in_) /* the inline extents moved with it */
			p->sc.ext = p->sc.in_;
		p->held = 1;
		__atomic_add_fetch(&t->st.buffer_replies, 1, __ATOMIC_RELAXED);
		p->hlo = lo;
		p->hhi = hi;
	} else if (ret == 0) {
		uint64_t done = 0;
		if ((ret = write_extents(fd, base, &sc, lo, hi, &done)) == 0)
			__atomic_add_fetch(&t->st.bytes_restored, done, __ATOMIC_RELAXED);
		else
			__atomic_add_fetch(&t->st.errors_io, 1, __ATOMIC_RELAXED);
		seg_chunk_free(&sc);
	}
	idx_inode_lock(in);
	if (ret == 0) {
		if (!p->held)
			part_set(p, b0, b1);
		__atomic_add_fetch(&t->st.partial_restores, 1, __ATOMIC_RELAXED);
		idx_inode_wake(in);
		return 0;
	}
	/* no reader saw these blocks: nothing of them stays */
	fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(base + lo),
		  (off_t)(hi - lo));
	log_err("restore: inode %llu chunk %llu bytes [%llu, %llu) from segment %llu: %s",
		(unsigned long long)in->ino, (unsigned long long)c, (unsigned long long)lo,
		(unsigned long long)hi, (unsigned long long)rec->loc.seg_id, strerror(-ret));
	hot_account_locked(t->hot, in);
	hot_fd_put_locked(t->hot, in);
	if (p->reserved > 0)
		hot_unreserve(t->hot, (uint64_t)p->reserved);
out_cold:
	part_wait_beside_locked(in, p);
	chunk_set_state(in, c, CHUNK_COLD);
	part_del(t, p);
	idx_inode_wake(in);
	return ret;
}

/* Write the held reader's blocks of p (see rst_part_first_locked) into the hot
 * file and publish them. in->lock not held. 0 or -errno. */
static int part_put_held(struct tier *t, struct inode *in, struct rst_part *p, int fd,
			 uint64_t base)
{
	uint64_t done = 0;
	int ret;

	if (!p->held)
		return 0;
	ret = write_extents(fd, base, &p->sc, p->hlo, p->hhi, &done);
	seg_chunk_free(&p->sc);
	p->held = 0;
	if (ret < 0) {
		__atomic_add_fetch(&t->st.errors_io, 1, __ATOMIC_RELAXED);
		return ret;
	}
	__atomic_add_fetch(&t->st.bytes_restored, done, __ATOMIC_RELAXED);
	idx_inode_lock(in);
	part_set(p, (uint32_t)(p->hlo / SEG_BLOCK), (uint32_t)((p->hhi - 1) / SEG_BLOCK));
	idx_inode_wake(in);
	idx_inode_unlock(in);
	return 0;
}

/*
 * Bring in the blocks of p's chunk (clen bytes, record p->rec, located) that
 * p does not have, in chunk order, a piece at a time: each piece is read,
 * verified, written into the hot file (fd) and published in p->have, so a
 * reader waiting for one of its blocks goes on while the rest still
 * arrives. A piece is PUB_PIECE bytes from NVMe; from S3 the whole missing
 * range is one GET (a request costs more than the bytes). Only this thread
 * sets bits of p->have meanwhile. in->lock not held. 0 or -errno.
 */
static int part_fill(struct tier *t, struct inode *in, struct rst_part *p, int fd, uint32_t clen)
{
	uint32_t nb = (clen + SEG_BLOCK - 1) / SEG_BLOCK, per = PUB_PIECE / SEG_BLOCK;
	uint64_t base = p->c * t->chunk_size, done = 0;
	int ret;

	if ((ret = part_put_held(t, in, p, fd, base)) < 0)
		return ret;
	if (p->rec.tier == STORE_TIER_S3)
		per = nb;
	for (uint32_t b = 0; ret == 0 && b < nb; b += per) {
		uint32_t end = b + per < nb ? b + per : nb, m0 = end, m1 = 0;
		struct seg_chunk sc;

		for (uint32_t k = b; k < end; k++)
			if (!rst_part_has(p, k, k)) {
				if (m0 == end)
					m0 = k;
				m1 = k;
			}
		if (m0 == end)
			continue; /* all in already */
		uint64_t lo = (uint64_t)m0 * SEG_BLOCK, hi = (uint64_t)(m1 + 1) * SEG_BLOCK;
		if (hi > clen)
			hi = clen;
		if ((ret = cold_read(t, &p->rec, lo, hi - lo, &sc)) < 0)
			break;
		/* only the runs of missing blocks: a reader may be reading the others */
		for (uint32_t k = m0; ret == 0 && k <= m1;) {
			uint32_t r = k;
			if (rst_part_has(p, k, k)) {
				k++;
				continue;
			}
			while (r <= m1 && !rst_part_has(p, r, r))
				r++;
			uint64_t rhi = (uint64_t)r * SEG_BLOCK < clen ? (uint64_t)r * SEG_BLOCK : clen;
			ret = write_extents(fd, base, &sc, (uint64_t)k * SEG_BLOCK, rhi, &done);
			k = r;
		}
		seg_chunk_free(&sc);
		if (ret < 0) {
			__atomic_add_fetch(&t->st.errors_io, 1, __ATOMIC_RELAXED);
			break;
		}
		idx_inode_lock(in);
		part_set(p, m0, m1);
		idx_inode_wake(in);
		idx_inode_unlock(in);
	}
	__atomic_add_fetch(&t->st.bytes_restored, done, __ATOMIC_RELAXED);
	return ret;
}

/* Fill the rest of chunk c (RESTORING, p its entry, p->reserved and the hot
 * fd held) and finish the restore: HOT_CLEAN, or COLD (hole punched once no
 * reader holds it) when a block fails. in->lock held; dropped during I/O.
 * p is gone afterwards. 0 or -errno. */
static int part_finish_locked(struct tier *t, struct inode *in, uint64_t c, struct rst_part *p)
{
	uint64_t base = c * t->chunk_size;
	uint32_t clen = tier_chunk_len(t, in->size, c);
	int fd = in->hot_fd, ret;

	idx_inode_unlock(in);
	ret = part_fill(t, in, p, fd, clen);
	idx_inode_lock(in);
	part_wait_beside_locked(in, p);
	if (ret == 0) {
		uint64_t ns = clock_now_ns() - p->t0;
		chunk_set_state(in, c, CHUNK_HOT_CLEAN);
		in->chunks[c].atime = idx_tick(t->idx);
		__atomic_add_fetch(&t->st.chunks_restored, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&t->st.restore_ns, ns, __ATOMIC_RELAXED);
		hist_observe(&t->st.h_restore, ns);
		lhist_observe(&t->st.h_rst[p->rec.tier], ns);
	} else {
		/* readers of the blocks in RAM finish first, none start; then
		 * the range goes (bounded: readers hold a pin only while the
		 * kernel copies their reply) */
		struct timespec dl = clock_deadline_ms(10000);
		if (p->held) { /* never written: its reader has its reply */
			seg_chunk_free(&p->sc);
			p->held = 0;
		}
		p->failed = 1;
		idx_inode_wake(in);
		while (in->chunks[c].pins > 0 &&
		       idx_inode_timedwait(in, &dl) != -ETIMEDOUT)
			;
		if (in->chunks[c].pins == 0)
			fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)base,
				  (off_t)clen);
		else
			log_warn("restore: inode %llu chunk %llu still read after 10 s: its "
				 "restored blocks stay in RAM",
				 (unsigned long long)in->ino, (unsigned long long)c);
		chunk_set_state(in, c, CHUNK_COLD);
		log_err("restore: inode %llu chunk %llu from segment %llu: %s",
			(unsigned long long)in->ino, (unsigned long long)c,
			(unsigned long long)p->rec.loc.seg_id, strerror(-ret));
	}
	hot_account_locked(t->hot, in);
	hot_fd_put_locked(t->hot, in);
	idx_inode_wake(in);
	if (p->reserved > 0)
		hot_unreserve(t->hot, (uint64_t)p->reserved);
	part_del(t, p);
	return ret;
}

int restore_rest_locked(struct tier *t, struct inode *in, uint64_t c)
{
	struct rst_part *p = rst_part_find(t, in->ino, c);

	if (!p) /* cannot be: the caller started it */
		return -EINVAL;
	return part_finish_locked(t, in, c, p);
}

/* A restore of chunk c (RESTORING) that publishes its blocks as they land
 * (part_fill), for the workers: a sequential reader waiting for a block of a
 * chunk restored ahead of it is served once that block is in, not after
 * the whole chunk. Records with one crc (plain, v1) and chunks of one piece
 * are restored whole. in->lock held, dropped during I/O. 0 or -errno. */
int restore_pub_locked(struct tier *t, struct inode *in, uint64_t c)
{
	uint32_t clen = tier_chunk_len(t, in->size, c);
	struct rst_part *p;
	int fd;

	if (!(in->chunks[c].loc.flags & LOC_F_MAP) || clen <= PUB_PIECE || in->chunks[c].chain ||
	    rst_part_find(t, in->ino, c) || !(p = rst_part_new(t, in->ino, c)))
		return restore_chunk_locked(t, in, c);
	locate_chunk(t, in, c, &p->rec);
	p->t0 = clock_now_ns();
	fd = hot_fd_get_locked(t->hot, in); /* put by part_finish_locked */
	if (fd < 0) {
		chunk_set_state(in, c, CHUNK_COLD);
		part_del(t, p);
		idx_inode_wake(in);
		return fd;
	}
	idx_inode_unlock(in);
	p->reserved = evict_room_for_restore(t, fd, c * t->chunk_size, clen);
	idx_inode_lock(in);
	return part_finish_locked(t, in, c, p);
}

int restore_make_hot_locked(struct tier *t, struct inode *in, uint64_t first, uint64_t last,
			    int pin)
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
			if (s != CHUNK_COLD && chain_partial(&in->chunks[c])) {
				/* RAM holds part of it: the rest from its chain */
				uint64_t clen = tier_chunk_len(t, in->size, c);
				int ret = chain_fill_locked(t, in, c, 0, clen ? clen : 1);
				if (ret == 0 && chain_partial(&in->chunks[c]) &&
				    in->chunks[c].state != CHUNK_COLD &&
				    in->chunks[c].state != CHUNK_RESTORING)
					in->chunks[c].chain->partial = 0;
				if (ret < 0) {
					while (pin && c-- > first)
						in->chunks[c].pins--;
					return ret;
				}
				continue;
			}
			if (s != CHUNK_COLD)
				break;
			chunk_set_state(in, c, CHUNK_RESTORING);
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

int restore_new(struct tier *t)
{
	struct restore *r = calloc(1, sizeof(*r));

	if (!r)
		return -ENOMEM;
	r->t = t;
	pthread_mutex_init(&r->plock, NULL);
	t->rst = r;
	return 0;
}

void restore_free(struct tier *t)
{
	struct restore *r = t->rst;

	if (!r)
		return;
	workq_free(r->wq);
	while (r->pfree) {
		struct rst_part *p = r->pfree;
		r->pfree = p->next;
		free(p);
	}
	pthread_mutex_destroy(&r->plock);
	free(r);
	t->rst = NULL;
}
