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
 *     - a file with RAM-only (dirty) chunks and no hot file is lost: logged by
 *       path, counted, its names removed (journaled) — never served as zeros;
 *     - segment live bytes recounted from the chunk maps; segments in a store
 *       that the index does not know (written, not journaled before a crash)
 *       are deleted;
 *     - journaling starts (a checkpoint first when the state was fresh or
 *       messy), and state_dir/tiers says where the segments are (for fsck).
 * Threading: single-threaded, before the filesystem is served; afterwards
 * only recover_log_seg runs (any thread).
 */
#include "tier/tier_i.h"

#include "common/clock.h"
#include "common/log.h"
#include "index/journal.h"
#include "tier/store.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int recover_log_seg(struct tier *t, uint64_t id, int del)
{
	struct jrec r = {.type = del ? JR_SEG_DEL : JR_SEG_ADD};
	if (!t->jrnl)
		return 0;
	r.seg.id = id;
	if (!del) {
		pthread_mutex_lock(&t->seg_lock);
		r.seg.len = t->segs[id].len;
		r.seg.payload = t->segs[id].payload;
		r.seg.dev = t->segs[id].dev;
		r.seg.store = t->segs[id].store;
		pthread_mutex_unlock(&t->seg_lock);
	}
	return jrnl_append(t->jrnl, &r);
}

/* jrnl_recover callback: index records to the index, segments to the table. */
static int apply(void *arg, const struct jrec *r)
{
	struct tier *t = arg;
	struct seg_info *s;
	int ret = idx_replay(t->idx, r);

	if (ret <= 0)
		return ret;
	pthread_mutex_lock(&t->seg_lock);
	switch (r->type) {
	case JR_META:
		if (r->next_seg > t->next_seg)
			t->next_seg = r->next_seg;
		break;
	case JR_SEG_ADD:
		s = seg_slot_locked(t, r->seg.id);
		s->len = r->seg.len ? r->seg.len : 1;
		s->payload = r->seg.payload;
		s->dev = r->seg.dev;
		s->store = r->seg.store;
		s->live = 0; /* recounted from the chunk maps */
		break;
	case JR_SEG_DEL:
		if (r->seg.id < t->nsegs_cap)
			memset(&t->segs[r->seg.id], 0, sizeof(t->segs[r->seg.id]));
		break;
	}
	pthread_mutex_unlock(&t->seg_lock);
	return 0;
}

int recover_open(struct tier *t, char *err, size_t errlen)
{
	struct jrnl_config jc = {.dir = t->cfg->state_dir,
				 .sync_ms = t->cfg->journal_sync_ms,
				 .checkpoint_bytes = t->cfg->checkpoint_size,
				 .chunk_size = t->chunk_size};
	struct jrnl_recovery info;
	uint64_t t0 = clock_now_ns();
	int ret;

	if (!t->cfg->state_dir)
		return 0;
	if ((ret = jrnl_open(&jc, &t->jrnl, err, errlen)) < 0)
		return ret;
	if ((ret = jrnl_recover(t->jrnl, apply, t, &info, err, errlen)) < 0) {
		jrnl_close(t->jrnl, 0);
		t->jrnl = NULL;
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
	if (!S_ISREG(in->mode))
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

/* hot_list callback: mark inodes that have a hot file; remove the others. */
static int hot_seen(void *arg, uint64_t ino)
{
	struct tier *t = arg;
	struct inode *in = idx_get(t->idx, ino);
	if (in && S_ISREG(in->mode) && in->nlink > 0) {
		in->mark = 1;
	} else {
		hot_remove(t->hot, ino);
		t->rec.orphan_hot_files++;
	}
	if (in)
		idx_put(t->idx, in);
	return 0;
}

/* One regular file: fix its hot file, count its cold bytes, find if lost. */
static void reconcile_file(struct tier *t, struct inode *in)
{
	int dirty = 0, fd;

	pthread_mutex_lock(&in->lock);
	for (uint64_t c = 0; c < in->nchunks; c++) {
		struct chunk *ch = &in->chunks[c];
		if (ch->state == CHUNK_HOT_DIRTY)
			dirty = 1;
		if (ch->state != CHUNK_COLD)
			continue;
		pthread_mutex_lock(&t->seg_lock);
		if (ch->seg_id < t->nsegs_cap && t->segs[ch->seg_id].len) {
			t->segs[ch->seg_id].live += ch->seg_len;
		} else {
			t->rec.damaged_chunks++;
			log_err("recovery: inode %llu chunk %llu: segment %llu is not in the index "
				"(reads of it fail with EIO; see spillway-fsck)",
				(unsigned long long)in->ino, (unsigned long long)c,
				(unsigned long long)ch->seg_id);
		}
		pthread_mutex_unlock(&t->seg_lock);
	}
	if (in->mark == 1) {
		/* the hot file mirrors the size; a cold copy wins over RAM bytes */
		fd = hot_fd_get_locked(t->hot, in);
		if (fd >= 0) {
			for (uint64_t c = 0; c < in->nchunks; c++)
				if (in->chunks[c].state == CHUNK_COLD)
					fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
						  (off_t)(c * t->chunk_size), (off_t)t->chunk_size);
			hot_account_locked(t->hot, in);
			hot_fd_put_locked(t->hot, in);
		}
		in->mark = 0;
	} else if (dirty) {
		in->mark = 2; /* its newest bytes were only in RAM, and RAM is gone */
		t->rec.lost_files++;
	}
	pthread_mutex_unlock(&in->lock);
}

static void report_lost(void *arg, const char *path, struct inode *in)
{
	log_warn("recovery: lost %s (%llu bytes): its data existed only in RAM and hot_dir "
		 "was emptied (a reboot?); it was not fsync'd or spilled. Removed.",
		 path, (unsigned long long)in->size);
}

struct seen_ctx {
	struct tier *t;
	struct store *st;
	uint8_t store_no;
	uint8_t *seen; /* per segment id */
	uint64_t nseen;
};

static int store_seen(void *arg, uint64_t id, uint32_t dev, uint64_t size)
{
	struct seen_ctx *c = arg;
	struct tier *t = c->t;
	int known;
	pthread_mutex_lock(&t->seg_lock);
	known = id < t->nsegs_cap && t->segs[id].len && t->segs[id].store == c->store_no &&
		t->segs[id].dev == dev;
	pthread_mutex_unlock(&t->seg_lock);
	if (known) {
		if (id < c->nseen)
			c->seen[id] = 1;
		return 0;
	}
	/* written but never journaled (crash between the two), or moved */
	store_remove(c->st, id, dev);
	t->rec.orphan_segments++;
	return 0;
}

static int write_tiers_file(struct tier *t)
{
	char path[4200], tmp[4300];
	FILE *f;
	const struct spw_config *cfg = t->cfg;
	snprintf(path, sizeof(path), "%s/tiers", cfg->state_dir);
	snprintf(tmp, sizeof(tmp), "%s/tiers.tmp", cfg->state_dir);
	if (!(f = fopen(tmp, "we")))
		return -errno;
	fprintf(f, "# written by spillway at mount: where this filesystem's segments are\n");
	fprintf(f, "uuid=");
	for (int i = 0; i < 16; i++)
		fprintf(f, "%02x", t->uuid[i]);
	fprintf(f, "\nchunk_size=%llu\n", (unsigned long long)cfg->chunk_size);
	if (cfg->nvme)
		fprintf(f, "nvme=%s\n", cfg->nvme);
	if (cfg->s3) {
		fprintf(f, "s3=%s\n", cfg->s3);
		if (cfg->s3_endpoint)
			fprintf(f, "s3_endpoint=%s\n", cfg->s3_endpoint);
		if (cfg->s3_region)
			fprintf(f, "s3_region=%s\n", cfg->s3_region);
		fprintf(f, "s3_path_style=%d\n", cfg->s3_path_style);
	}
	if (fflush(f) != 0 || fsync(fileno(f)) < 0) {
		fclose(f);
		return -EIO;
	}
	fclose(f);
	return rename(tmp, path) < 0 ? -errno : 0;
}

/* jrnl_snapshot_fn: counters, the segment table, then the index. */
static int snapshot(void *arg, struct jrnl_emitter *e)
{
	struct tier *t = arg;
	struct jrec m = {.type = JR_META, .next_ino = idx_next_ino(t->idx)};
	int ret;

	pthread_mutex_lock(&t->seg_lock);
	m.next_seg = t->next_seg;
	ret = jrnl_emit(e, &m);
	for (uint64_t id = 1; id < t->nsegs_cap && !ret; id++) {
		struct seg_info *s = &t->segs[id];
		struct jrec r = {.type = JR_SEG_ADD,
				 .seg = {.id = id,
					 .len = s->len,
					 .payload = s->payload,
					 .dev = s->dev,
					 .store = s->store}};
		if (s->len)
			ret = jrnl_emit(e, &r);
	}
	pthread_mutex_unlock(&t->seg_lock);
	return ret ? ret : idx_snapshot(t->idx, e);
}

int recover_finish(struct tier *t, char *err, size_t errlen)
{
	struct inode_list l = {0};
	uint64_t t0 = clock_now_ns(), nseen;
	int ret;

	if (!t->jrnl)
		return 0;
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
	pthread_mutex_lock(&t->seg_lock);
	t->seg_count = t->seg_bytes = t->seg_live = 0;
	for (uint64_t id = 1; id < t->nsegs_cap; id++)
		if (t->segs[id].len) {
			t->seg_count++;
			t->seg_bytes += t->segs[id].len;
			t->seg_live += t->segs[id].live;
			t->segs[id].atime = idx_tick(t->idx);
		}
	nseen = t->nsegs_cap;
	pthread_mutex_unlock(&t->seg_lock);
	{
		struct seen_ctx sc = {.t = t, .seen = calloc(nseen ? nseen : 1, 1), .nseen = nseen};
		for (int k = 0; k < 2; k++) {
			sc.st = k ? t->s3 : t->store;
			sc.store_no = (uint8_t)k;
			if (sc.st)
				store_list(sc.st, store_seen, &sc);
		}
		pthread_mutex_lock(&t->seg_lock);
		for (uint64_t id = 1; sc.seen && id < nseen; id++)
			if (t->segs[id].len && !sc.seen[id] && t->segs[id].live)
				log_err("recovery: segment %llu (%s) is missing from the cold tier; "
					"files with chunks in it fail with EIO (see spillway-fsck)",
					(unsigned long long)id, t->segs[id].store ? "s3" : "first tier");
		pthread_mutex_unlock(&t->seg_lock);
		free(sc.seen);
	}
	/* from here on, changes are journaled: the lost files' names go */
	idx_set_journal(t->idx, t->jrnl);
	if (t->rec.lost_files)
		idx_remove_marked(t->idx, report_lost, t);
	if ((ret = jrnl_start(t->jrnl, snapshot, t)) < 0) {
		snprintf(err, errlen, "option 'state_dir': '%s': cannot start the journal: %s",
			 t->cfg->state_dir, strerror(-ret));
		goto out;
	}
	if ((ret = write_tiers_file(t)) < 0) {
		snprintf(err, errlen, "option 'state_dir': '%s': cannot write 'tiers': %s",
			 t->cfg->state_dir, strerror(-ret));
		goto out;
	}
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
