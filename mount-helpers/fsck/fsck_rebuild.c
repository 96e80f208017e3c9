/*
 * fsck_rebuild — spillway-fsck --rebuild: the index rebuilt from the
 * segments' footers when the journal is lost or stale.
 *
 * DESIGN
 * 1. Segment-table entries whose segment is missing are dropped; every
 *    readable segment of this filesystem is added (or its entry updated),
 *    but for a second copy of a segment the table already has.
 * 2. Every (ino, chunk) any footer names gets its best usable copy: highest
 *    gen, then segment id, then offset; with --verify-data a copy that fails
 *    verification is passed over for the next best.
 * 3. Reachable regular files get those chunk locations, and a size that
 *    covers them; files newer than the namespace go to /lost+found as #<ino>;
 *    older inodes the namespace lacks were deleted and stay out.
 * 4. next_seg and next_ino are raised above everything found.
 * Every change goes through fsck_change(). Single-threaded.
 */
#include "mount-helpers/fsck/fsck_i.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- --rebuild ---- */

struct best {
	struct hent h;
	uint64_t ino, chunk;
	struct copy *c;
};

/* Is copy a better than b for its (ino, chunk)? Highest gen, then segment id. */
static int better(const struct copy *a, const struct copy *b)
{
	const struct seg_entry *x = &a->f->ents[a->ei], *y = &b->f->ents[b->ei];
	if (x->gen != y->gen)
		return x->gen > y->gen;
	if (a->f->id != b->f->id)
		return a->f->id > b->f->id;
	return x->off > y->off;
}

/* A copy --rebuild may use: a readable segment of ours the table points at. */
static int usable_copy(struct fsck *f, const struct copy *c)
{
	return !c->bad && c->f->ours && c->f->mret == 0 && !c->f->removed && fsck_in_table(f, c->f);
}

/* The best usable copy of (ino, chunk), verified with --verify-data. */
static struct copy *best_copy(struct fsck *f, uint64_t ino, uint64_t chunk)
{
	uint64_t k = key2(ino, chunk);
	for (;;) {
		struct copy *best = NULL;
		for (struct hent *h = ht_bucket(&f->copies, k); h; h = h->next) {
			struct copy *c = (struct copy *)h;
			const struct seg_entry *e = &c->f->ents[c->ei];
			/* an overlay is part of a chain the lost journal knew:
			 * not a copy of the chunk (its writes are lost with it) */
			if (h->key == k && e->ino == ino && e->chunk == chunk &&
			    !(e->flags & SEG_F_OVL) && usable_copy(f, c) &&
			    (!best || better(c, best)))
				best = c;
		}
		if (!best || !f->verify ||
		    fsck_verify_chunk(f, best->f, &best->f->ents[best->ei]) == 0)
			return best;
		best->bad = 1;
	}
}

static int best_cmp(const void *a, const void *b)
{
	const struct best *x = *(struct best *const *)a, *y = *(struct best *const *)b;
	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	return x->chunk < y->chunk ? -1 : x->chunk > y->chunk;
}

/* What --rebuild did, for its closing note. */
struct rebuild_stats {
	uint64_t top_seg; /* above every segment id of ours found */
	uint64_t added, dropped;
	uint64_t files, chunks, recovered;
};

/* Step 1: drop the table's entries whose segment was not found, add (or
 * update) every readable segment of ours in fds (sorted), but for a second
 * copy of a segment the table already has. 0 or -errno. */
static int rebuild_segtab(struct fsck *f, struct found **fds, size_t n, struct rebuild_stats *st)
{
	struct seg_where w;
	uint64_t id = 0;
	int ret = 0;

	while (ret == 0 && segtab_next(f->segs, &id, &w))
		if (!fsck_seg_copy(f, id)) {
			struct jrec r = {.type = JR_SEG_DEL, .seg = {.id = id}};
			ret = fsck_change(f, &r);
			st->dropped++;
		}
	for (size_t i = 0; i < n && ret == 0; i++) {
		struct found *fd = fds[i], *copy = fsck_seg_copy(f, fd->id);
		if (fd->mret < 0 || !fd->ours)
			continue;
		if (fd->id >= st->top_seg)
			st->top_seg = fd->id + 1;
		if (copy && copy != fd)
			continue; /* a second copy of a segment the table has */
		if (copy == fd && segtab_where(f->segs, fd->id, &w) == 0 && w.len == fd->size &&
		    w.dev == fd->dev && w.store == fd->store)
			continue;
		ret = fsck_change_seg_add(f, fd);
		st->added++;
	}
	return ret;
}

/* Step 2, first half: one struct best in keys for every (ino, chunk) a
 * footer of the segment table's segments names. 0 or -ENOMEM. */
static int collect_chunks(struct fsck *f, struct found **fds, size_t n, struct htab *keys)
{
	for (size_t i = 0; i < n; i++) {
		struct found *fd = fds[i];
		if (!fsck_in_table(f, fd))
			continue;
		for (uint32_t e = 0; e < fd->n; e++) {
			const struct seg_entry *se = &fd->ents[e];
			uint64_t k = key2(se->ino, se->chunk);
			struct best *b = NULL;
			for (struct hent *h = ht_bucket(keys, k); h && !b; h = h->next)
				if (h->key == k && ((struct best *)h)->ino == se->ino &&
				    ((struct best *)h)->chunk == se->chunk)
					b = (struct best *)h;
			if (b)
				continue;
			if (!(b = calloc(1, sizeof(*b))) || fsck_ht_add(keys, &b->h, k) < 0) {
				free(b);
				return -ENOMEM;
			}
			b->ino = se->ino;
			b->chunk = se->chunk;
		}
	}
	return 0;
}

/* Step 2, second half: the best usable copy of each of bs[nb], then bs
 * sorted by (ino, chunk). */
static void choose_copies(struct fsck *f, struct best **bs, size_t nb)
{
	for (size_t i = 0; i < nb; i++) {
		fsck_progress(
		    f, f->verify ? "rebuild: verifying chunks" : "rebuild: choosing chunks", i, nb);
		bs[i]->c = best_copy(f, bs[i]->ino, bs[i]->chunk);
	}
	fsck_progress(f, "rebuild", nb, nb);
	if (bs)
		qsort(bs, nb, sizeof(*bs), best_cmp);
}

/* Link inode ino, which the namespace lacks, into /lost+found as #<ino>: a
 * regular file owned as the root is. 0 or -errno. */
static int link_orphan(struct fsck *f, uint64_t ino)
{
	struct jrec_attr a = {.mode = S_IFREG | 0600}, ra = fsck_attr(idx_find(f->idx, ROOT_INO));
	char name[32];
	uint64_t lf;
	int ret;

	a.uid = ra.uid;
	a.gid = ra.gid;
	a.atime_ns = a.mtime_ns = a.ctime_ns = now_ns();
	if ((ret = fsck_lost_found(f, &lf)) < 0 || (ret = fsck_change_inode(f, ino, &a, "", 0)) < 0)
		return ret;
	snprintf(name, sizeof(name), "#%" PRIu64, ino);
	if ((ret = fsck_change_link(f, lf, name, ino)) < 0)
		return ret;
	return fsck_scan(f);
}

/* Step 3 for one file: bs[0..n) are its chunks (one ino). A file the
 * namespace has gets their locations and a size that covers them; one newer
 * than the namespace goes to /lost+found first; an older one the namespace
 * lacks was deleted and is left out. 0 or -errno. */
static int rebuild_file(struct fsck *f, struct best **bs, size_t n, struct rebuild_stats *st)
{
	uint64_t ino = bs[0]->ino, end = 0, changed = 0;
	struct inode *in = idx_find(f->idx, ino);
	struct jrec ir;
	int orphan = !in && ino >= f->orig_next_ino, ret = 0;

	if (!orphan && !(in && fsck_reachable(f, ino) && S_ISREG(fsck_attr(in).mode)))
		return 0; /* a file deleted before the namespace was saved */
	if (orphan) {
		if ((ret = link_orphan(f, ino)) < 0)
			return ret;
		in = idx_find(f->idx, ino);
	}
	for (size_t c = 0; c < n && ret == 0; c++) {
		struct copy *cp = bs[c]->c;
		const struct seg_entry *e;
		struct chunk_loc l;
		const struct chunk_loc *cl;
		if (!cp)
			continue;
		e = &cp->f->ents[cp->ei];
		cl = fsck_chunk_loc(in, bs[c]->chunk, &l) ? &l : NULL;
		/* the chunk's length in its file (holes included), not its record's */
		if (bs[c]->chunk * f->chunk_size + e->chunk_len > end)
			end = bs[c]->chunk * f->chunk_size + e->chunk_len;
		if (cl && cl->seg_id == cp->f->id && cl->off == e->off && cl->dev == cp->f->dev &&
		    cl->gen == e->gen && cl->len == e->len && cl->crc == e->crc &&
		    cl->flags == e->flags)
			continue;
		if (cl && cl->gen > e->gen) {
			char path[PATH_MAX_OUT];
			fsck_note(f,
				  "chunk %" PRIu64 " of %s: only an older copy found (gen %" PRIu64
				  " < %u)",
				  bs[c]->chunk, fsck_path_of(f, ino, path, sizeof(path)), e->gen,
				  cl->gen);
		}
		ret = fsck_change_loc(f, ino, bs[c]->chunk, cp->f, e);
		changed++;
	}
	idx_inode_rec(in, &ir);
	if (ret == 0 && end > ir.attr.size) {
		ir.attr.size = end;
		ret = fsck_change_inode(f, ino, &ir.attr, ir.name, ir.name_len);
	}
	if (ret == 0 && (changed || orphan)) {
		char path[PATH_MAX_OUT], hs[32];
		fsck_note(f, "%s %s (%s, %" PRIu64 " chunk location%s set)",
			  orphan ? "recovered" : "restored",
			  fsck_path_of(f, ino, path, sizeof(path)),
			  fsck_human(fsck_attr(in).size, hs, sizeof(hs)), changed, S(changed));
		st->files++;
		st->chunks += changed;
		st->recovered += orphan;
	}
	return ret;
}

/* Step 3: rebuild_file for each file in bs (sorted by ino). 0 or -errno. */
static int rebuild_files(struct fsck *f, struct best **bs, size_t nb, struct rebuild_stats *st)
{
	int ret = 0;

	for (size_t i = 0; i < nb && ret == 0;) {
		size_t k = i;
		while (k < nb && bs[k]->ino == bs[i]->ino)
			k++;
		ret = rebuild_file(f, bs + i, k - i, st);
		i = k;
	}
	return ret;
}

/* Step 4: next_seg and next_ino above everything found, in a META record
 * (the table's next id is above every entry already; the records say the
 * same once one holds it). 0 or -errno. */
static int raise_counters(struct fsck *f, uint64_t top_seg)
{
	if (top_seg <= f->meta_next_seg && fsck_ino_ceiling(f) <= idx_next_ino(f->idx))
		return 0;
	return fsck_change_meta(f, fsck_ino_ceiling(f), top_seg);
}

int fsck_rebuild(struct fsck *f)
{
	struct htab keys = {0};
	struct best **bs = NULL;
	struct found **fds;
	struct rebuild_stats st = {0};
	size_t n, nb = 0;
	int ret;

	if ((ret = fsck_check_root(f)) < 0) /* a new namespace: / first */
		return ret;
	fds = (struct found **)fsck_ht_array(&f->found, &n);
	if (fds)
		qsort(fds, n, sizeof(*fds), fsck_found_cmp);
	if ((ret = rebuild_segtab(f, fds, n, &st)) < 0 ||
	    (ret = collect_chunks(f, fds, n, &keys)) < 0)
		goto out;
	bs = (struct best **)fsck_ht_array(&keys, &nb);
	if (keys.n && !bs) {
		ret = -ENOMEM;
		goto out;
	}
	choose_copies(f, bs, nb);
	if ((ret = rebuild_files(f, bs, nb, &st)) < 0)
		goto out;
	ret = raise_counters(f, st.top_seg);
	fsck_note(f,
		  "rebuild: %" PRIu64 " segment%s added to the segment table, %" PRIu64
		  " dropped; %" PRIu64 " file%s restored (%" PRIu64 " chunk location%s), %" PRIu64
		  " in /lost+found",
		  st.added, S(st.added), st.dropped, st.files - st.recovered,
		  S(st.files - st.recovered), st.chunks, S(st.chunks), st.recovered);
	if (ret == 0)
		ret = fsck_scan(f);
out:
	for (size_t i = 0; i < nb; i++)
		free(bs[i]);
	free(bs);
	free(keys.b);
	free(fds);
	return ret;
}
