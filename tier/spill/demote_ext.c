/*
 * demote_ext — an extent (tier/extent, DESIGN section 16) moved to S3:
 * picked with the segments as the nvme tier passes nvme_threshold
 * (demote.c, demote_pick), moved by the maintenance worker (maint.c).
 *
 * DESIGN
 * - Its form in S3: one segment holding the file's chunks in order (a
 *   record per chunk that has data, its holes kept; a chunk of holes only
 *   has none and stays a hole), written straight to S3 (multipart, within
 *   the part buffers' budget), never through the full disk. The file then
 *   leaves extent form: its chunks are COLD in that segment, so what
 *   segments have is the demoted file's too: ranged reads whose first
 *   bytes come back early, restores into RAM, fsck, GC, and the bucket's
 *   copy of the state. An extent above DEMOTE_SEG_MAX goes as several
 *   segments; one of more than DEMOTE_MAX_CHUNKS chunks stays on disk (its
 *   records would not fit one journal transaction).
 * - Never wrong bytes: each chunk read from the extent is checked against
 *   the extent's crcs before it is added (the segment's own crcs are taken
 *   from those very bytes). A mismatch ends the move (-EIO, logged; the
 *   extent stays, and the scrub and fsck name it).
 * - Order: the upload without the inode lock (a sealed, closed extent
 *   changes only through an open for writing, a truncate or an unlink,
 *   each seen at the commit); the segments committed (journal synced,
 *   durable in S3, registered); then under the lock, if the extent is
 *   unchanged, closed and sealed: the chunks pointed at the segments and
 *   the extent's end journaled as one transaction, synced, and only then
 *   the extent removed. Changed meanwhile: the segments' bytes are
 *   released (GC deletes them) and the extent stays.
 * - A crash before the transaction leaves the extent the file's (the
 *   segments, named by no chunk, are GC's); after it the segments are (the
 *   extent, named by no file, is swept at mount).
 * - Unmount: the move stops between two chunks (-ECANCELED).
 */
#include "tier/tier_i.h"
#include "tier/extent/extent.h"

#include "common/log.h"
#include "index/journal.h"
#include "tier/segment/segment.h"
#include "tier/store/store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEMOTE_SEG_MAX	  (4ull << 30)
#define DEMOTE_MAX_CHUNKS 16384u

/* One segment the move wrote. */
struct dseg {
	uint64_t id, payload;
	uint32_t dev;
};

/* Bytes [0, len) of buf (the chunk at off of fd) packed to their data
 * extents (SEEK_DATA/SEEK_HOLE): *next extents into ext; all data when
 * there are more than SEG_MAX_EXTENTS. 0 (*next 0: holes only) or -errno. */
static int pack_data(int fd, uint64_t off, uint8_t *buf, uint32_t len, struct seg_extent *ext,
		     uint32_t *next)
{
	uint64_t pos = off, end = off + len, packed = 0;
	uint32_t n = 0;

	while (pos < end) {
		off_t d = lseek(fd, (off_t)pos, SEEK_DATA), h;
		if (d < 0 && errno == ENXIO)
			break;
		if (d < 0)
			return -errno;
		if ((uint64_t)d >= end)
			break;
		if ((h = lseek(fd, d, SEEK_HOLE)) < 0)
			return -errno;
		if ((uint64_t)h > end)
			h = (off_t)end;
		if (n == SEG_MAX_EXTENTS) { /* too fragmented: all of it, as it is */
			ext[0] = (struct seg_extent){0, len};
			*next = 1;
			return 0;
		}
		/* the extents of a file are 4 KiB-granular here (page cache) */
		ext[n++] = (struct seg_extent){(uint32_t)((uint64_t)d - off), (uint32_t)(h - d)};
		pos = (uint64_t)h;
	}
	/* back to back, in order (each moves down or stays: memmove) */
	for (uint32_t i = 0; i < n; i++) {
		if (packed != ext[i].off)
			memmove(buf + packed, buf + ext[i].off, ext[i].len);
		packed += ext[i].len;
	}
	*next = n;
	return 0;
}

/* The extent s (of inode ino) uploaded chunk by chunk, each record at
 * generation gens[c]: ents[c] and segof[c] (1-based into segs; 0: a hole)
 * for each chunk, *nsegs the segments committed. 0 or -errno (what was
 * committed is in segs: the caller releases it). */
static int upload(struct tier *t, int s3, uint64_t ino, const struct ext_snap *s,
		  const uint32_t *gens, struct seg_entry *ents, uint32_t *segof, struct dseg *segs,
		  uint32_t *nsegs)
{
	int (*commit)(struct segtab *, struct seg_writer *, uint64_t, uint64_t, uint32_t *,
		      uint64_t *) = s3 ? segtab_commit_s3 : segtab_commit;
	uint64_t cs = t->chunk_size, nch = (s->size + cs - 1) / cs;
	struct seg_extent *ext = malloc(SEG_MAX_EXTENTS * sizeof(*ext));
	uint8_t *buf = seg_buf_alloc(cs);
	struct seg_writer *w = NULL;
	struct dseg cur = {0};
	uint64_t seg_len;
	int ret = 0;

	if (!ext || !buf)
		ret = -ENOMEM;
	for (uint64_t c = 0; c < nch && ret == 0; c++) {
		uint64_t off = c * cs;
		uint32_t len = (uint32_t)(s->size - off < cs ? s->size - off : cs), next = 0;
		ssize_t got;

		if (__atomic_load_n(&t->stopping, __ATOMIC_ACQUIRE)) {
			ret = -ECANCELED;
			break;
		}
		if ((got = pread(s->fd, buf, len, (off_t)off)) != (ssize_t)len) {
			ret = got < 0 ? -errno : -EIO;
			break;
		}
		if (ext_verify(s, off, buf, len) < 0) {
			ret = -EILSEQ; /* the caller marks it */
			__atomic_add_fetch(&t->st.ext_crc_errors, 1, __ATOMIC_RELAXED);
			log_err("%s: extent of inode %llu: chunk %llu fails its crcs: it stays "
				"on disk (spillctl scrub names it)",
				s3 ? "demote" : "warm", (unsigned long long)ino,
				(unsigned long long)c);
			break;
		}
		if ((ret = pack_data(s->fd, off, buf, len, ext, &next)) < 0 || next == 0)
			continue; /* holes only: no record */
		if (!w) {
			uint64_t left = s->size - off;
			cur = (struct dseg){.id = segtab_alloc_id(t->segtab)};
			ret = seg_writer_new(s3 ? t->s3 : t->store, t->uuid, cur.id,
					     (left < DEMOTE_SEG_MAX ? left : DEMOTE_SEG_MAX) + (4u << 20),
					     &w);
			if (ret < 0)
				break;
		}
		if ((ret = seg_writer_add_extents(w, ino, c, gens[c], len, ext, next, buf, &ents[c])) <
		    0)
			break;
		cur.payload += ents[c].len;
		segof[c] = *nsegs + 1;
		if (seg_writer_bytes(w) >= DEMOTE_SEG_MAX || c + 1 == nch) {
			ret = commit(t->segtab, w, cur.id, cur.payload, &cur.dev, &seg_len);
			w = NULL;
			if (ret < 0)
				break;
			segs[(*nsegs)++] = cur;
		}
	}
	if (ret == 0 && w) { /* the last chunks were holes */
		ret = commit(t->segtab, w, cur.id, cur.payload, &cur.dev, &seg_len);
		w = NULL;
		if (ret == 0)
			segs[(*nsegs)++] = cur;
	}
	seg_writer_abort(w);
	seg_buf_free(buf);
	free(ext);
	return ret;
}

/* Point in's chunks at the segments and let the extent go (one journal
 * transaction). 0, or -EAGAIN (changed meanwhile) / -errno: nothing
 * changed. in->lock held. */
static int switch_locked(struct tier *t, struct inode *in, const struct ext_snap *s,
			 const struct seg_entry *ents, const uint32_t *segof,
			 const struct dseg *segs)
{
	uint64_t cs = t->chunk_size, nch = (s->size + cs - 1) / cs, nrec = 0;
	struct jrec *rs;
	int n = 0, ret;

	if (!ext_snap_same_locked(in, s))
		return -EAGAIN;
	if ((ret = idx_chunks_reserve(in, nch)) < 0)
		return ret;
	for (uint64_t c = 0; c < nch; c++)
		nrec += segof[c] != 0;
	if (!(rs = calloc(nrec + 1, sizeof(*rs))))
		return -ENOMEM;
	for (uint64_t c = 0; c < nch; c++) {
		struct chunk *ch = &in->chunks[c];
		if (!segof[c])
			continue;
		ch->loc = seg_entry_loc(&ents[c], segs[segof[c] - 1].id, segs[segof[c] - 1].dev);
		ch->gen = (uint32_t)ents[c].gen; /* newer than any record it had */
		chunk_set_state(in, c, CHUNK_COLD);
		n += idx_chunk_recs_locked(in, c, rs + n);
	}
	if ((ret = ext_let_go_locked(t, in, rs, n)) < 0) {
		for (uint64_t c = 0; c < nch; c++) {
			if (!segof[c])
				continue;
			in->chunks[c].loc = (struct chunk_loc){0};
			chunk_set_state(in, c, CHUNK_ABSENT);
		}
	}
	free(rs);
	return ret;
}

/* ino's extent into segments on s3 (s3 1) or on the first cold tier. */
static int to_segments(struct tier *t, uint64_t ino, int s3)
{
	const char *what = s3 ? "demote" : "warm";
	struct inode *in = idx_get(t->idx, ino);
	uint64_t nch = 0;
	struct seg_entry *ents = NULL;
	uint32_t *segof = NULL, *gens = NULL, nsegs = 0;
	struct dseg *segs = NULL;
	struct ext_snap s;
	int ret;

	if (!in)
		return 1;
	idx_inode_lock(in);
	/* opened, written, gone or (to s3) pinned since the pick */
	if ((s3 && in->pinned) || ext_snap_locked(t, in, &s) < 0) {
		idx_inode_unlock(in);
		idx_put(t->idx, in);
		return 1;
	}
	ret = 0;
	nch = (s.size + t->chunk_size - 1) / t->chunk_size;
	if (nch > DEMOTE_MAX_CHUNKS)
		ret = -EFBIG;
	else if (!(gens = calloc(nch, sizeof(*gens))))
		ret = -ENOMEM;
	for (uint64_t c = 0; ret == 0 && c < nch; c++)
		gens[c] = (c < in->nchunks ? in->chunks[c].gen : 0) + 1;
	idx_inode_unlock(in);
	if (ret == 0 && (!(ents = calloc(nch, sizeof(*ents))) ||
			 !(segof = calloc(nch, sizeof(*segof))) ||
			 !(segs = calloc(s.size / DEMOTE_SEG_MAX + 2, sizeof(*segs)))))
		ret = -ENOMEM;
	if (ret == 0 && (ret = upload(t, s3, ino, &s, gens, ents, segof, segs, &nsegs)) == -EILSEQ) {
		idx_inode_lock(in);
		ext_snap_bad_locked(in, &s);
		idx_inode_unlock(in);
		ret = -EIO;
	}
	if (ret == 0) {
		idx_inode_lock(in);
		ret = switch_locked(t, in, &s, ents, segof, segs);
		idx_inode_unlock(in);
	}
	if (ret < 0) /* nothing points at them: GC deletes them */
		for (uint32_t i = 0; i < nsegs; i++)
			segtab_release_bytes(t->segtab, segs[i].id, segs[i].payload);
	if (ret == 0 && s3) {
		__atomic_add_fetch(&t->st.ext_demoted, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&t->st.ext_demoted_bytes, s.size, __ATOMIC_RELAXED);
	}
	if (ret == 0) {
		log_debug("%s: extent of inode %llu (%llu bytes) into %u segments", what,
			  (unsigned long long)ino, (unsigned long long)s.size, nsegs);
	} else if (ret == -EAGAIN) {
		log_info("%s: extent of inode %llu changed during its copy: the copy is dropped",
			 what, (unsigned long long)ino);
	} else if (ret == -EFBIG) {
		log_warn("%s: extent of inode %llu: %llu chunks, more than one journal "
			 "transaction holds (%u): it stays an extent",
			 what, (unsigned long long)ino, (unsigned long long)nch, DEMOTE_MAX_CHUNKS);
	} else if (ret != -ECANCELED) {
		log_warn("%s: extent of inode %llu: %s", what, (unsigned long long)ino,
			 strerror(-ret));
	}
	ext_snap_free(&s);
	free(ents);
	free(segof);
	free(gens);
	free(segs);
	idx_put(t->idx, in);
	return ret == -EAGAIN ? 1 : ret;
}

int demote_extent(struct tier *t, uint64_t ino)
{
	return to_segments(t, ino, 1);
}

int extent_to_segments(struct tier *t, uint64_t ino)
{
	return t->store ? to_segments(t, ino, 0) : 1;
}
