/*
 * DESIGN
 * recover — bring a state_dir back at mount, and keep it current.
 * Order at mount (tier_new):
 *  1. recover_open: lock state_dir, replay checkpoint + journals into the
 *     index (namespace, attributes, chunk maps) and the segment table; drop
 *     inodes no name reaches (unlinked-but-open files of the dead daemon).
 *     The filesystem uuid comes from the state, so the stores opened next
 *     find their segments (S3 objects live under <prefix>/<uuid>/).
 *  2. recover_finish, with the hot tier and stores open:
 *     - hot files: kept for live regular files (their size fixed, chunks with
 *       a cold copy punched: the cold copy is the authority, a half-restored
 *       RAM copy must never be served); others removed;
 *     - chunks wholly past a file's end are dropped (no byte of it);
 *     - a file with RAM-only (dirty) chunks and no hot file is lost: logged by
 *       path, counted, its names removed (journaled) — never served as zeros;
 *       one whose other chunks are in segments is kept instead, the lost
 *       chunks holes, moved to /lost+found as #<ino> (logged by path);
 *     - segment live bytes recounted from the chunk maps; segments in a store
 *       that the index does not know (written, not journaled before a crash)
 *       are deleted;
 *     - journaling starts (a checkpoint first when the state was fresh or
 *       messy), and state_dir/tiers says where the segments are (for fsck).
 * Threading: single-threaded, before the filesystem is served; afterwards
 * nothing here runs (segment records are journaled by segtab_log).
 */
#include "tier/tier_i.h"
#include "tier/extent/extent.h"

#include "common/clock.h"
#include "common/log.h"
#include "index/journal.h"
#include "tier/segment/segment.h"
#include "tier/store/store.h"
#include "tier/store/store_s3.h"
#include "tier/segment/tiers_file.h"

#include <time.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


/* jrnl_recover callback: index records to the index, segments to the table. */
static int apply(void *arg, const struct jrec *r)
{
	struct tier *t = arg;
	int ret = idx_replay(t->idx, r);

	if (ret <= 0)
		return ret;
	segtab_replay(t->segtab, r);
	return 0;
}

int recover_open(struct tier *t, char *err, size_t errlen)
{
	struct jrnl_config jc = {.dir = t->cfg->state_dir,
				 .sync_ms = t->cfg->journal_sync_ms,
				 .checkpoint_bytes = t->cfg->checkpoint_size,
				 .chunk_size = t->chunk_size,
				 .mountpoint = t->cfg->mountpoint};
	struct jrnl_recovery info;
	uint64_t t0 = clock_now_ns();
	int ret;

	if (!t->cfg->state_dir)
		return 0;
	if ((ret = jrnl_open(&jc, &t->jrnl, err, errlen)) < 0)
		return ret;
	if ((t->cfg->s3 && (!t->cfg->nvme || t->cfg->s3_state) && (ret = state_s3_new(t)) < 0) ||
	    (t->s3st && (ret = state_s3_adopt(t, err, errlen)) < 0) ||
	    (ret = jrnl_recover(t->jrnl, apply, t, &info, err, errlen)) < 0) {
		jrnl_close(t->jrnl, 0);
		t->jrnl = NULL;
		state_s3_free(t); /* tier_new's failure here frees no more than it */
		return ret;
	}
	memcpy(t->uuid, info.uuid, 16);
	t->rec.fresh = info.fresh;
	t->rec.records = info.records;
	t->rec.truncated = info.truncated;
	t->rec.dropped_inodes = info.fresh ? 0 : idx_replay_finish(t->idx);
	t->rec.recover_ms = (clock_now_ns() - t0) / 1000000;
	return 0;
}

/* ---- reconciliation ---- */

struct inode_list {
	struct inode **v;
	size_t n, cap;
	int oom;
};

static int collect(void *arg, struct inode *in)
{
	struct inode_list *l = arg;
	if (!S_ISREG(idx_type(in)))
		return 0;
	if (l->n == l->cap) {
		size_t nc = l->cap ? l->cap * 2 : 1024;
		struct inode **nv = realloc(l->v, nc * sizeof(*nv));
		if (!nv) {
			l->oom = 1;
			return 1;
		}
		l->v = nv;
		l->cap = nc;
	}
	idx_get_locked(in);
	l->v[l->n++] = in;
	return 0;
}

/* hot_list callback: mark inodes that have a hot file (2: its size differs
 * from the index's, so it must be opened); remove the others. */
static int hot_seen(void *arg, uint64_t ino, uint64_t size, uint64_t bytes)
{
	struct tier *t = arg;
	struct inode *in = idx_get(t->idx, ino);
	if (in && S_ISREG(idx_type(in)) && in->nlink > 0) {
		in->mark = size == in->size ? 1 : 3;
		in->hot_bytes = bytes; /* counted in reconcile_file */
	} else {
		hot_remove(t->hot, ino);
		t->rec.orphan_hot_files++;
	}
	if (in)
		idx_put(t->idx, in);
	return 0;
}

/* Chunk c was written over its chain (JR_CHUNK_PART) and the hot file
 * survived: the blocks it holds are the written ones (a fill wrote the
 * chain's own bytes: the same), the rest is the chain's. */
static void reconcile_chain(struct tier *t, struct inode *in, uint64_t c, int fd)
{
	struct chunk *ch = &in->chunks[c];
	struct chunk_chain *k = ch->chain;
	uint64_t cs = c * t->chunk_size, ce = cs + tier_chunk_len(t, in->size, c);
	uint32_t w = chain_words(t->chunk_size);
	off_t pos = (off_t)cs;

	memset(k->have, 0, w * sizeof(uint64_t));
	k->partial = 1;
	while ((uint64_t)pos < ce) {
		off_t d = lseek(fd, pos, SEEK_DATA), h;
		if (d < 0 || (uint64_t)d >= ce)
			break;
		h = lseek(fd, d, SEEK_HOLE);
		if (h < 0 || (uint64_t)h > ce)
			h = (off_t)ce;
		chain_set(k->have, (uint32_t)(((uint64_t)d - cs) / CHAIN_BLK),
			  (uint32_t)(((uint64_t)h - cs + CHAIN_BLK - 1) / CHAIN_BLK), 1);
		pos = h;
	}
	memcpy(k->dirty, k->have, w * sizeof(uint64_t));
	if (!chain_any(k->have, 0, k->nbits))
		chunk_set_state(in, c, CHUNK_COLD); /* nothing written reached the hot file */
}

/* A chunk of a file, dropped (recovery: nothing is journaled yet, and no
 * segment's live bytes are counted yet, so none are released). */
static void drop_chunk(struct inode *in, uint64_t c)
{
	struct chunk *ch = &in->chunks[c];
	idx_chain_free(ch);
	chunk_set_state(in, c, CHUNK_ABSENT);
	ch->loc = (struct chunk_loc){0};
	ch->gen++;
}

/* Chunks wholly past the file's end hold no byte of it: a crash between a
 * growth's chunk record and its size's (before both were one transaction),
 * or a punch past EOF, left some. Dropped, or no spill takes them and the
 * file keeps its hot file for ever, then is declared lost (issue 39). */
static void drop_past_eof(struct tier *t, struct inode *in)
{
	uint64_t n = (in->size + t->chunk_size - 1) / t->chunk_size, dropped = 0;
	for (uint64_t c = n; c < in->nchunks; c++)
		if (in->chunks[c].state != CHUNK_ABSENT) {
			drop_chunk(in, c);
			dropped++;
		}
	if (!dropped)
		return;
	t->rec.past_eof_chunks += dropped;
	log_warn("recovery: inode %llu: %llu chunks past its end (%llu bytes) dropped",
		 (unsigned long long)in->ino, (unsigned long long)dropped,
		 (unsigned long long)in->size);
}

/* An adopted state (state_s3_locate): chunk c's bytes were on the old
 * node's disk (a segment no longer in the table). 1 if so. */
static int chunk_gone(struct tier *t, struct inode *in, uint64_t c)
{
	struct chunk *ch = &in->chunks[c];
	struct seg_where w;
	int gone = 0;
	if (ch->state != CHUNK_COLD && !ch->chain)
		return 0;
	for (uint16_t i = 0; ch->chain && i < ch->chain->nrec; i++)
		gone |= segtab_where(t->segtab, ch->chain->rec[i].loc.seg_id, &w) < 0;
	if (ch->state == CHUNK_COLD && ch->loc.seg_id)
		gone |= segtab_where(t->segtab, ch->loc.seg_id, &w) < 0;
	return gone;
}

/* One regular file: fix its hot file, count its cold bytes, find if lost. */
static void reconcile_file(struct tier *t, struct inode *in)
{
	int dirty = 0, cold = 0, gone = 0, fd;

	idx_inode_lock(in);
	if (in->ext) {
		/* its bytes are its extent's (tier/extent): no chunk, no hot file */
		int hot = in->mark != 0;
		for (uint64_t c = 0; c < in->nchunks; c++)
			if (in->chunks[c].state != CHUNK_ABSENT)
				drop_chunk(in, c);
		in->hot_bytes = 0;
		in->mark = 0;
		if (ext_recover_locked(t, in)) {
			in->mark = IDX_MARK_LOST;
			t->rec.lost_files++;
		}
		idx_inode_unlock(in);
		if (hot)
			hot_remove(t->hot, in->ino);
		return;
	}
	drop_past_eof(t, in);
	/* adopted: what was on the old node's disk is a hole now, the file
	 * lost or damaged below as if those bytes had been RAM's */
	for (uint64_t c = 0; t->rec.adopted && c < in->nchunks; c++)
		if (chunk_gone(t, in, c)) {
			drop_chunk(in, c);
			gone = 1;
		}
	for (uint64_t c = 0; c < in->nchunks; c++) {
		struct chunk *ch = &in->chunks[c];
		int bad = 0;
		if (ch->state == CHUNK_HOT_DIRTY)
			dirty = 1;
		if (ch->state != CHUNK_COLD && !ch->chain)
			continue;
		cold = 1;
		/* a chain (written over its cold copy): every record holds bytes */
		for (uint16_t i = 0; ch->chain && i < ch->chain->nrec; i++)
			bad |= segtab_add_live(t->segtab, ch->chain->rec[i].loc.seg_id,
					       ch->chain->rec[i].loc.len) < 0;
		if (segtab_add_live(t->segtab, ch->loc.seg_id, ch->loc.len) < 0 || bad) {
			t->rec.damaged_chunks++;
			log_err("recovery: inode %llu chunk %llu: segment %llu is not in the index "
				"(reads of it fail with EIO; see spillway-fsck)",
				(unsigned long long)in->ino, (unsigned long long)c,
				(unsigned long long)ch->loc.seg_id);
		}
	}
	if (in->mark == 1 && !cold) {
		/* intact and RAM only: count it, no need to open it (1M files) */
		uint64_t bytes = in->hot_bytes;
		in->hot_bytes = 0;
		hot_adopt_locked(t->hot, in, bytes);
		in->mark = 0;
	} else if (in->mark) {
		/* the hot file mirrors the size; a cold copy wins over RAM bytes */
		in->hot_bytes = 0;
		fd = hot_fd_get_locked(t->hot, in);
		if (fd >= 0) {
			for (uint64_t c = 0; c < in->nchunks; c++)
				if (in->chunks[c].state == CHUNK_COLD)
					fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
						  (off_t)(c * t->chunk_size), (off_t)t->chunk_size);
				else if (in->chunks[c].chain)
					reconcile_chain(t, in, c, fd);
			hot_account_locked(t->hot, in);
			hot_fd_put_locked(t->hot, in);
		}
		in->mark = 0;
	} else if ((dirty || gone) && !cold) {
		/* its bytes were only in RAM (or on the old node's disk), and
		 * that is gone: nothing to keep */
		in->mark = IDX_MARK_LOST;
		t->rec.lost_files++;
	} else if (dirty || gone) {
		/* some of its newest bytes were only in RAM; the rest is in
		 * segments: kept, with holes where RAM was, in /lost+found (as
		 * fsck keeps what it can), never removed whole */
		in->mark = IDX_MARK_DAMAGED;
		for (uint64_t c = 0; c < in->nchunks; c++) {
			struct chunk_chain *k = in->chunks[c].chain;
			if (in->chunks[c].state != CHUNK_HOT_DIRTY)
				continue;
			if (!k) {
				drop_chunk(in, c);
				continue;
			}
			/* written over its chain: the chain's bytes are what is left */
			memset(k->have, 0, chain_words(t->chunk_size) * sizeof(uint64_t));
			memset(k->dirty, 0, chain_words(t->chunk_size) * sizeof(uint64_t));
			k->partial = 1;
			chunk_set_state(in, c, CHUNK_COLD);
		}
		t->rec.damaged_files++;
	}
	idx_inode_unlock(in);
}

static void report_lost(void *arg, const char *path, struct inode *in, const char *moved)
{
	struct tier *t = arg;
	if (t->rec.adopted && moved)
		log_warn("recovery: damaged %s (%llu bytes): adopted from the bucket, some of its "
			 "data was on the old node's disk or in its RAM. What S3 holds is kept, "
			 "with holes where the rest was, as %s",
			 path, (unsigned long long)in->size, moved);
	else if (t->rec.adopted)
		log_warn("recovery: lost %s (%llu bytes): adopted from the bucket, its data was "
			 "on the old node's disk or in its RAM, none in S3. Removed.",
			 path, (unsigned long long)in->size);
	else if (moved)
		log_warn("recovery: damaged %s (%llu bytes): some of its data existed only in "
			 "RAM and hot_dir was emptied (a reboot?); it was not fsync'd since. What "
			 "its segments hold is kept, with holes where RAM was, as %s",
			 path, (unsigned long long)in->size, moved);
	else
		log_warn("recovery: lost %s (%llu bytes): its data existed only in RAM and "
			 "hot_dir was emptied (a reboot?); it was not fsync'd or spilled. Removed.",
			 path, (unsigned long long)in->size);
}

struct orphan {
	uint64_t id, size;
	uint32_t dev;
};

struct seen_ctx {
	struct tier *t;
	struct store *st;
	uint8_t store_no;
	uint8_t *seen; /* per segment id */
	uint64_t nseen;
	struct orphan *orphans;
	size_t norphans, cap;
};

static int store_seen(void *arg, uint64_t id, uint32_t dev, uint64_t size)
{
	struct seen_ctx *c = arg;
	struct seg_where w;
	int known = segtab_where(c->t->segtab, id, &w) == 0 && w.store == c->store_no;

	if (known && w.dev != dev) {
		/* the nvme directories were listed in another order: follow it */
		segtab_relocate(c->t->segtab, id, c->store_no, dev);
	}
	if (known) {
		if (id < c->nseen)
			c->seen[id] = 1;
		return 0;
	}
	if (c->norphans == c->cap) {
		size_t nc = c->cap ? c->cap * 2 : 16;
		struct orphan *no = realloc(c->orphans, nc * sizeof(*no));
		if (!no)
			return -ENOMEM;
		c->orphans = no;
		c->cap = nc;
	}
	c->orphans[c->norphans++] = (struct orphan){.id = id, .size = size, .dev = dev};
	return 0;
}

/*
 * Segments the index does not know: written but never journaled before a
 * crash — their chunks belong to files the index knows. A segment holding an
 * inode newer than anything the index has means the state is older than the
 * cold tier (a restored or stale state_dir): refuse rather than delete.
 * Except when the state is the bucket's copy (adopted by a replacement
 * node): that copy follows fsyncs, so a file created after the last one and
 * spilled before the node died (under pressure, or written around) is in a
 * segment the copy never heard of. Never fsync'd, it is gone, as promised;
 * its segment goes with the other orphans.
 */
static int remove_orphans(struct tier *t, struct seen_ctx *c, char *err, size_t errlen)
{
	uint64_t next_ino = idx_next_ino(t->idx);
	for (size_t i = 0; i < c->norphans && !t->rec.adopted; i++) {
		struct seg_entry *ents = NULL;
		uint32_t n = 0;
		struct orphan *o = &c->orphans[i];
		if (seg_read_manifest(c->st, o->id, o->dev, o->size, NULL, NULL, &ents, &n) == 0) {
			for (uint32_t k = 0; k < n; k++)
				if (ents[k].ino >= next_ino) {
					snprintf(err, errlen,
						 "option 'state_dir': '%s' is older than the cold tier "
						 "(segment %llu holds inode %llu, newer than the index): "
						 "run spillway-fsck --rebuild before mounting",
						 t->cfg->state_dir, (unsigned long long)o->id,
						 (unsigned long long)ents[k].ino);
					free(ents);
					return -ESTALE;
				}
		}
		free(ents);
	}
	for (size_t i = 0; i < c->norphans; i++) {
		store_remove(c->st, c->orphans[i].id, c->orphans[i].dev);
		t->rec.orphan_segments++;
	}
	return 0;
}

static int write_tiers_file(struct tier *t)
{
	const struct spw_config *cfg = t->cfg;
	struct tiers_file tf = {.have_uuid = 1,
				.chunk_size = cfg->chunk_size,
				.nvme = (char *)cfg->nvme,
				.s3 = (char *)cfg->s3,
				.s3_endpoint = (char *)cfg->s3_endpoint,
				.s3_region = (char *)cfg->s3_region,
				.s3_path_style = cfg->s3_path_style};
	memcpy(tf.uuid, t->uuid, 16);
	return tiers_file_write(cfg->state_dir, &tf);
}

/* jrnl_snapshot_fn: counters, the segment table, then the index. */
static int snapshot(void *arg, struct jrnl_emitter *e)
{
	struct tier *t = arg;
	int ret = segtab_emit(t->segtab, e, idx_next_ino(t->idx));

	return ret ? ret : idx_snapshot(t->idx, e);
}

int recover_finish(struct tier *t, char *err, size_t errlen)
{
	struct inode_list l = {0};
	uint64_t t0 = clock_now_ns(), nseen;
	struct seg_where w;
	int ret;

	/* the stores are open now: the table's entries name them */
	segtab_set_stores(t->segtab, t->store, t->s3);
	if (!t->jrnl)
		return 0;
	/* nothing is deleted below before the bucket prefix is ours */
	if (t->s3st && ((ret = state_s3_lease(t, err, errlen)) < 0 ||
			(ret = state_s3_locate(t, err, errlen)) < 0))
		return ret;
	/* hot files: which live files still have their RAM copy */
	hot_list(t->hot, hot_seen, t);
	idx_for_each(t->idx, collect, &l);
	if (l.oom) {
		snprintf(err, errlen, "recovery: out of memory");
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < l.n; i++)
		reconcile_file(t, l.v[i]);
	/* segment totals, and segments nobody references */
	nseen = segtab_recount(t->segtab);
	ret = 0;
	{
		struct seen_ctx sc = {.t = t, .seen = calloc(nseen ? nseen : 1, 1), .nseen = nseen};
		for (int k = 0; k < 2 && ret == 0; k++) {
			sc.st = k ? t->s3 : t->store;
			sc.store_no = (uint8_t)k;
			sc.norphans = 0;
			if (sc.st && (ret = store_list(sc.st, store_seen, &sc)) < 0)
				snprintf(err, errlen, "recovery: cannot list the %s tier: %s",
					 k ? "s3" : "first cold", strerror(-ret));
			else if (sc.st)
				ret = remove_orphans(t, &sc, err, errlen);
		}
		free(sc.orphans);
		if (ret < 0) {
			free(sc.seen);
			goto out;
		}
		for (uint64_t id = 0; sc.seen && segtab_next(t->segtab, &id, &w) && id < nseen;)
			if (!sc.seen[id] && w.live)
				log_err("recovery: segment %llu (%s) is missing from the cold tier; "
					"files with chunks in it fail with EIO (see spillway-fsck)",
					(unsigned long long)id, w.store ? "s3" : "first tier");
		free(sc.seen);
	}
	/* from here on, changes are journaled: the lost files' names go */
	idx_set_journal(t->idx, t->jrnl);
	segtab_set_journal(t->segtab, t->jrnl);
	if (t->rec.lost_files || t->rec.damaged_files)
		idx_remove_marked(t->idx, report_lost, t);
	if (t->s3st)
		jrnl_set_on_checkpoint(t->jrnl, state_s3_on_checkpoint, t);
	/* the group-commit thread starts in tier_start, after fuse_daemonize;
	 * chunks dropped above are in no record: a checkpoint says so */
	if ((ret = jrnl_start_appends(t->jrnl, snapshot, t)) < 0 ||
	    ((t->rec.past_eof_chunks || t->rec.damaged_files || t->rec.ext_resealed ||
	      t->rec.adopted) &&
	     (ret = jrnl_checkpoint(t->jrnl)) < 0)) {
		snprintf(err, errlen, "option 'state_dir': '%s': cannot start the journal: %s",
			 t->cfg->state_dir, strerror(-ret));
		goto out;
	}
	if ((ret = write_tiers_file(t)) < 0) {
		snprintf(err, errlen, "option 'state_dir': '%s': cannot write 'tiers': %s",
			 t->cfg->state_dir, strerror(-ret));
		goto out;
	}
	if (t->s3st && (ret = state_s3_push(t)) < 0) {
		snprintf(err, errlen, "option 's3': cannot store the checkpoint in the bucket: %s",
			 strerror(-ret));
		goto out;
	}
	state_s3_adopted(t); /* checkpointed in this node's numbering, and pushed */
	t->rec.recover_ms += (clock_now_ns() - t0) / 1000000;
	if (!t->rec.fresh) {
		uint64_t inodes, files;
		idx_counts(t->idx, &inodes, &files);
		log_info("recovered %llu files from %s in %llu ms (%llu records, %llu bytes of "
			 "torn tail dropped, %llu lost, %llu orphan segments removed)",
			 (unsigned long long)files, t->cfg->state_dir,
			 (unsigned long long)t->rec.recover_ms, (unsigned long long)t->rec.records,
			 (unsigned long long)t->rec.truncated, (unsigned long long)t->rec.lost_files,
			 (unsigned long long)t->rec.orphan_segments);
	}
	ret = 0;
out:
	for (size_t i = 0; i < l.n; i++)
		idx_put(t->idx, l.v[i]);
	free(l.v);
	return ret;
}
