/*
 * fsck_check.c — the checks of spillway-fsck, and their report: every
 * reachable file's chunks against the segments (a damaged or missing copy
 * replaced by another copy from the footers with --repair, else the file's
 * chunks reported lost), the namespace (the root, names dropped by replay,
 * inodes / does not reach), the segment table against the stores (missing,
 * misplaced and unreferenced segments).
 * Guarantees: each problem is one line naming the file by path; every
 * change to the index goes through fsck_change (journal first, then the
 * model); a segment is deleted (--repair) only when neither the segment
 * table nor a file uses it.
 * Single-threaded.
 */
#include "mount-helpers/fsck/fsck_i.h"

#include "common/crc32c.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum kind {
	K_NOTABLE = 1, /* in the store, not in the segment table (not damage) */
	K_DEV,	       /* the segment moved to another device (not damage) */
	K_NOSTORE,     /* the table names a tier that is not configured */
	K_MISSING,
	K_UNREADABLE,
	K_FOREIGN,
	K_MANIFEST,
	K_CRC,
	K_READERR,
};

#define DAMAGE(k) ((k) >= K_NOSTORE)

struct bad {
	int kind;
	uint64_t seg, chunk;
	int err; /* K_UNREADABLE, K_READERR */
};

struct badlist {
	struct bad *b;
	size_t n, cap;
};

static int bad_add(struct badlist *l, int kind, uint64_t seg, uint64_t chunk, int err)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		struct bad *b = realloc(l->b, cap * sizeof(*b));
		if (!b)
			return -ENOMEM;
		l->b = b;
		l->cap = cap;
	}
	l->b[l->n++] = (struct bad){.kind = kind, .seg = seg, .chunk = chunk, .err = err};
	return 0;
}

static int bad_cmp(const void *a, const void *b)
{
	const struct bad *x = a, *y = b;
	if (x->kind != y->kind)
		return x->kind < y->kind ? -1 : 1;
	if (x->seg != y->seg)
		return x->seg < y->seg ? -1 : 1;
	if (x->chunk != y->chunk)
		return x->chunk < y->chunk ? -1 : 1;
	return 0;
}

/* Classify chunk c of in (cold copy at loc) into l. */
static int check_chunk(struct fsck *f, struct inode *in, uint64_t c, const struct chunk_loc *loc,
		       struct badlist *l)
{
	struct seg_where w;
	int in_table = segtab_where(f->segs, loc->seg_id, &w) == 0;
	struct found *fd;
	struct seg_entry *e;
	int store = in_table ? w.store : -1, ret;

	if (store < 0) { /* not in the table: look in every store */
		for (int k = 0; k < 2 && store < 0; k++)
			if (f->usable[k] && fsck_found_get(f, k, loc->seg_id, loc->dev))
				store = k;
		if (store < 0) {
			for (int k = 0; k < 2; k++)
				if (f->configured[k] && !f->usable[k])
					return 0; /* may be there: not checked */
			return bad_add(l, K_MISSING, loc->seg_id, c, 0);
		}
	}
	if (store > 1 || !f->configured[store])
		return bad_add(l, K_NOSTORE, loc->seg_id, c, 0);
	if (!f->usable[store])
		return 0;
	fd = in_table ? fsck_seg_copy(f, loc->seg_id) : fsck_found_get(f, store, loc->seg_id, loc->dev);
	if (!fd) {
		if (in_table && (ret = fsck_seg_mark_reported(f, loc->seg_id)) < 0)
			return ret;
		return bad_add(l, K_MISSING, loc->seg_id, c, 0);
	}
	fd->chunk_refs++;
	if (!in_table && (ret = bad_add(l, K_NOTABLE, loc->seg_id, c, 0)) < 0)
		return ret;
	if (fd->mret < 0)
		return bad_add(l, K_UNREADABLE, loc->seg_id, c, fd->mret);
	if (!fd->ours)
		return bad_add(l, K_FOREIGN, loc->seg_id, c, 0);
	e = fsck_entry_for(fd, in->ino, c, loc->off);
	if (!e || e->len != loc->len || e->crc != loc->crc || e->gen != loc->gen ||
	    (e->flags & LOC_F_MAP) != loc->flags)
		return bad_add(l, K_MANIFEST, loc->seg_id, c, 0);
	if (f->verify) {
		ret = fsck_verify_chunk(f, fd, e);
		if (ret == -ENOMEM)
			return ret;
		if (ret)
			return bad_add(l, ret > 0 ? K_CRC : K_READERR, loc->seg_id, c,
				       ret < 0 ? ret : 0);
	}
	if (loc->dev != fd->dev)
		return bad_add(l, K_DEV, loc->seg_id, c, 0);
	return 0;
}

/* Another good copy of chunk c of in (same gen, len and crc, data verified),
 * in a segment the table can point at; NULL if none. */
static struct copy *find_copy(struct fsck *f, struct inode *in, uint64_t c)
{
	struct chunk_loc l, *loc = &l;
	uint64_t k = key2(in->ino, c);
	if (!fsck_chunk_loc(in, c, loc))
		return NULL;
	for (struct hent *h = ht_bucket(&f->copies, k); h; h = h->next) {
		struct copy *cp = (struct copy *)h;
		struct found *fd = cp->f;
		struct seg_entry *e = &fd->ents[cp->ei];
		struct found *bound;
		struct seg_where w;
		if (h->key != k || e->ino != in->ino || e->chunk != c || cp->bad || fd->removed)
			continue;
		if (e->gen != loc->gen || e->len != loc->len || e->crc != loc->crc ||
		    e->flags != loc->flags)
			continue;
		if (fd->id == loc->seg_id && e->off == loc->off && fd->dev == loc->dev)
			continue; /* the damaged one */
		bound = fsck_seg_copy(f, fd->id);
		if (segtab_where(f->segs, fd->id, &w) == 0 &&
		    (w.store != fd->store || (bound && bound != fd)))
			continue; /* the table means another segment by that id */
		if (fsck_verify_chunk(f, fd, e) != 0) {
			cp->bad = 1;
			continue;
		}
		return cp;
	}
	return NULL;
}

static const char *kind_text(struct fsck *f, const struct bad *b, char *buf, size_t len)
{
	switch (b->kind) {
	case K_UNREADABLE:
		snprintf(buf, len, "%s",
			 b->err == -EIO ? "bad header or footer" : strerror(-b->err));
		break;
	case K_READERR:
		snprintf(buf, len, "%s", strerror(-b->err));
		break;
	default:
		buf[0] = 0;
	}
	return buf;
}

/* Print the problems of one file, grouped by (kind, segment). */
static void report_file(struct fsck *f, struct inode *in, struct badlist *l, const char *suffix,
			int fixed)
{
	char path[PATH_MAX_OUT], chunks[512], why[256];
	const char *p = fsck_path_of(f, in->ino, path, sizeof(path));
	uint64_t *cs = malloc(l->n * sizeof(*cs));

	if (!cs)
		return;
	qsort(l->b, l->n, sizeof(*l->b), bad_cmp);
	for (size_t i = 0; i < l->n;) {
		size_t k = i, m = 0;
		const struct bad *b = &l->b[i];
		while (k < l->n && l->b[k].kind == b->kind && l->b[k].seg == b->seg)
			cs[m++] = l->b[k++].chunk;
		fsck_chunk_list(cs, m, chunks, sizeof(chunks));
		kind_text(f, b, why, sizeof(why));
		switch (b->kind) {
		case K_NOTABLE:
			fsck_problem(f, f->repair,
				"segment %" PRIu64 " not in the segment table: %s (%s)%s", b->seg,
				p, chunks, f->repair ? " -- added" : "");
			break;
		case K_DEV:
			fsck_problem(f, f->repair,
				"%s of %s: segment %" PRIu64 " is on another device%s", chunks, p,
				b->seg, f->repair ? " -- location updated" : "");
			break;
		case K_NOSTORE:
			fsck_problem(f, fixed,
				"segment %" PRIu64 " is on a tier not configured: %s (%s)%s",
				b->seg, p, chunks, suffix);
			break;
		case K_MISSING:
			fsck_problem(f, fixed, "segment %" PRIu64 " missing: %s (%s)%s", b->seg, p,
				chunks, suffix);
			break;
		case K_UNREADABLE:
			fsck_problem(f, fixed, "segment %" PRIu64 " unreadable (%s): %s (%s)%s", b->seg,
				why, p, chunks, suffix);
			break;
		case K_FOREIGN:
			fsck_problem(f, fixed,
				"segment %" PRIu64 " belongs to another filesystem: %s (%s)%s",
				b->seg, p, chunks, suffix);
			break;
		case K_MANIFEST:
			fsck_problem(f, fixed, "%s of %s: not in segment %" PRIu64 "'s manifest%s",
				chunks, p, b->seg, suffix);
			break;
		case K_CRC:
			fsck_problem(f, fixed, "%s of %s: crc mismatch in segment %" PRIu64 "%s", chunks,
				p, b->seg, suffix);
			break;
		case K_READERR:
			fsck_problem(f, fixed, "%s of %s: read error in segment %" PRIu64 " (%s)%s",
				chunks, p, b->seg, why, suffix);
			break;
		}
		i = k;
	}
	free(cs);
}

struct names_of {
	uint64_t ino;
	struct {
		uint64_t parent;
		char *name;
	} *v;
	size_t n;
	int err;
};

static int collect_names(void *arg, uint64_t parent, const char *name, uint64_t ino)
{
	struct names_of *no = arg;
	void *v;
	if (ino != no->ino)
		return 0;
	if (!(v = realloc(no->v, (no->n + 1) * sizeof(*no->v))) ||
	    !(((struct names_of *)arg)->v = v, no->v[no->n].name = strdup(name))) {
		no->err = -ENOMEM;
		return 1;
	}
	no->v[no->n++].parent = parent;
	return 0;
}

/* Remove every name of inode ino; with `lost`, it is lost: print "lost: PATH"
 * for each. */
static int unlink_all(struct fsck *f, uint64_t ino, int lost)
{
	struct names_of no = {.ino = ino};
	int ret;
	idx_for_each_name(f->idx, collect_names, &no);
	ret = no.err;
	for (size_t i = 0; i < no.n && ret == 0; i++) {
		char path[PATH_MAX_OUT];
		if (lost)
			printf("lost: %s\n",
			       fsck_dent_path(f, no.v[i].parent, no.v[i].name, path, sizeof(path)));
		ret = fsck_change_unlink(f, no.v[i].parent, no.v[i].name,
					 (uint32_t)strlen(no.v[i].name));
	}
	for (size_t i = 0; i < no.n; i++)
		free(no.v[i].name);
	free(no.v);
	if (lost)
		f->lost++;
	return ret;
}

/* Chunks wholly past a file's end hold no byte of it (a crash between a
 * growth's records, or a punch past EOF, before issue 39): reported, and
 * with --repair made holes (the daemon's recovery drops them too). Their
 * chunks are not checked. 0 or -errno. */
static int check_past_eof(struct fsck *f, struct inode *in)
{
	uint64_t n = (fsck_attr(in).size + f->chunk_size - 1) / f->chunk_size, past = 0;
	char path[PATH_MAX_OUT];
	struct jrec r;

	for (uint64_t c = n; c < idx_nchunks(in); c++) {
		idx_chunk_rec(in, c, &r);
		past += r.type != JR_CHUNK_ABSENT;
	}
	if (!past)
		return 0;
	fsck_problem(f, f->repair, "%s: %" PRIu64 " chunks past its end (%" PRIu64 " bytes)%s",
		     fsck_path_of(f, in->ino, path, sizeof(path)), past, fsck_attr(in).size,
		     f->repair ? " -- dropped" : "");
	if (!f->repair)
		return 0;
	memset(&r, 0, sizeof(r));
	r.type = JR_CHUNK_ABSENT;
	r.ino = in->ino;
	r.chunk = n;
	r.count = idx_nchunks(in) - n;
	return fsck_change(f, &r);
}

/* A file whose bytes are an extent (tier/extent): its file is in its cold
 * directory's extents/ at least as long as the file; sealed and with
 * --verify-data, every 64 KiB block matches its crc. A problem is one line
 * by path (nothing to repair: there is no other copy). */
static int check_extent(struct fsck *f, struct inode *in)
{
	char pbuf[PATH_MAX_OUT], name[4200];
	const char *path;
	struct stat st;
	uint64_t bad = 0, size = fsck_attr(in).size;
	uint32_t *crc = NULL, ncrc = 0;
	int fd, sealed;
	uint32_t dev;
	uint64_t id;

	idx_inode_lock(in);
	if (!in->ext) {
		idx_inode_unlock(in);
		return 0;
	}
	dev = in->ext->dev;
	id = in->ext->id;
	sealed = in->ext->sealed && in->ext->size == size;
	if (sealed && (crc = malloc((size_t)in->ext->ncrc * 4 + 4))) {
		ncrc = in->ext->ncrc;
		memcpy(crc, in->ext->crc, (size_t)ncrc * 4);
	}
	idx_inode_unlock(in);
	f->extents++;
	path = fsck_path_of(f, in->ino, pbuf, sizeof(pbuf));
	if (!f->usable[0] || dev >= (uint32_t)f->tiers.nnvme) {
		fsck_problem(f, 0, "%s: its extent is on cold directory %u, which is not configured",
			     path, dev);
		free(crc);
		return 0;
	}
	snprintf(name, sizeof(name), "%s/extents/%016" PRIx64 "-%016" PRIx64, f->devname[dev],
		 in->ino, id);
	if ((fd = open(name, O_RDONLY | O_CLOEXEC)) < 0 || fstat(fd, &st) < 0) {
		fsck_problem(f, 0, "%s: its extent %s is missing: its bytes are lost", path, name);
		if (fd >= 0)
			close(fd);
		free(crc);
		return 0;
	}
	if ((uint64_t)st.st_size < size)
		fsck_problem(f, 0, "%s: its extent %s holds %" PRIu64 " bytes, the file %" PRIu64,
			     path, name, (uint64_t)st.st_size, size);
	if (f->verify && crc) {
		uint8_t *buf = malloc(JRNL_EXT_BLOCK);
		for (uint32_t b = 0; buf && b < ncrc; b++) {
			uint64_t off = (uint64_t)b * JRNL_EXT_BLOCK;
			size_t len = size - off < JRNL_EXT_BLOCK ? size - off : JRNL_EXT_BLOCK;
			if (pread(fd, buf, len, (off_t)off) != (ssize_t)len ||
			    crc32c(0, buf, len) != crc[b])
				bad++;
		}
		free(buf);
		if (bad)
			fsck_problem(f, 0, "%s: its extent %s: %" PRIu64 " blocks of 64 KiB fail their "
				     "crc (reads of them are EIO)",
				     path, name, bad);
	}
	close(fd);
	free(crc);
	return 0;
}

/* Check (and with --repair fix) the chunks of every reachable file. */
int fsck_check_files(struct fsck *f)
{
	size_t n;
	const char *what = f->verify ? "verifying chunks" : "checking chunks";
	uint64_t total = 0, done = 0;
	int ret = 0;
	struct inode **ins = fsck_reachable_inodes(f, &n, &ret);
	struct chunk_loc loc, locs[CHAIN_MAX + 1];

	if (ret < 0)
		return ret;

	for (size_t i = 0; i < n; i++)
		for (uint64_t c = 0; S_ISREG(fsck_attr(ins[i]).mode) && c < idx_nchunks(ins[i]);
		     c++)
			total += fsck_chunk_loc(ins[i], c, &loc);
	for (size_t i = 0; i < n && ret == 0; i++) {
		struct inode *in = ins[i];
		struct badlist l = {0};
		int damaged = 0, all_found = 1;
		mode_t mode = fsck_attr(in).mode;
		struct copy **repl = NULL;

		if (S_ISDIR(mode))
			f->dirs++;
		else if (S_ISREG(mode))
			f->files++;
		if (!S_ISREG(mode) || (ret = check_past_eof(f, in)) < 0 ||
		    (ret = check_extent(f, in)) < 0)
			continue;
		for (uint64_t c = 0; c < idx_nchunks(in) && ret == 0; c++) {
			int nl = c * f->chunk_size < fsck_attr(in).size ? fsck_chunk_locs(in, c, locs) : 0;
			if (!nl)
				continue;
			fsck_progress(f, what, done++, total);
			f->chunks_checked++;
			for (int j = 0; j < nl && ret == 0; j++)
				ret = check_chunk(f, in, c, &locs[j], &l);
		}
		if (ret < 0 || l.n == 0) {
			free(l.b);
			continue;
		}
		for (size_t k = 0; k < l.n; k++)
			damaged |= DAMAGE(l.b[k].kind);
		if (!f->repair) {
			report_file(f, in, &l, "", 0);
			free(l.b);
			continue;
		}
		/* segments used but missing from the table: add them first */
		for (size_t k = 0; k < l.n && ret == 0; k++) {
			struct seg_where w;
			struct found *fd = NULL;
			if (l.b[k].kind != K_NOTABLE || segtab_where(f->segs, l.b[k].seg, &w) == 0)
				continue;
			fsck_chunk_loc(in, l.b[k].chunk, &loc);
			for (int st = 0; st < 2; st++)
				if (f->usable[st] && (fd = fsck_found_get(f, st, l.b[k].seg, loc.dev)))
					break;
			if (fd)
				ret = fsck_change_seg_add(f, fd);
		}
		if (damaged && !(repl = calloc(l.n, sizeof(*repl))))
			ret = -ENOMEM;
		for (size_t k = 0; damaged && k < l.n && ret == 0; k++)
			if (DAMAGE(l.b[k].kind) && (fsck_chunk_chained(in, l.b[k].chunk) ||
						    !(repl[k] = find_copy(f, in, l.b[k].chunk))))
				all_found = 0;
		if (ret < 0) {
			free(repl);
			free(l.b);
			break;
		}
		if (damaged && !all_found) {
			report_file(f, in, &l, " -- no other copy", 1);
			ret = unlink_all(f, in->ino, 1);
		} else {
			report_file(f, in, &l, damaged ? " -- relocated to another copy" : "", 1);
			for (size_t k = 0; k < l.n && ret == 0; k++) {
				uint64_t c = l.b[k].chunk;
				struct found *fd;
				if (repl && repl[k]) {
					fd = repl[k]->f;
					if (!fsck_in_table(f, fd) &&
					    (ret = fsck_change_seg_add(f, fd)) < 0)
						break;
					ret = fsck_change_loc(f, in->ino, c, fd,
							      &fd->ents[repl[k]->ei]);
				} else if (l.b[k].kind == K_DEV && !fsck_chunk_chained(in, c)) {
					fd = fsck_seg_copy(f, l.b[k].seg);
					if (fd && fsck_chunk_loc(in, c, &loc))
						ret = fsck_change_loc(
						    f, in->ino, c, fd,
						    fsck_entry_for(fd, in->ino, c, loc.off));
				}
			}
		}
		free(repl);
		free(l.b);
	}
	fsck_progress(f, what, total, total);
	free(ins);
	return ret;
}

/* Link in (nameless or unreachable) into /lost+found as #<ino>. */
static int link_lost_found(struct fsck *f, uint64_t ino)
{
	char name[32];
	uint64_t lf;
	int ret;
	if ((ret = fsck_lost_found(f, &lf)) < 0)
		return ret;
	snprintf(name, sizeof(name), "#%" PRIu64, ino);
	if ((ret = fsck_change_link(f, lf, name, ino)) < 0)
		return ret;
	return fsck_scan(f);
}

/* The root directory, created (owned like STATE_DIR) when missing. */
int fsck_check_root(struct fsck *f)
{
	struct jrec_attr a = {.mode = S_IFDIR | 0755};
	struct stat sb;
	int ret;

	/* the index always has a directory /: did the journal make it? */
	if (f->root_seen && !f->root_bad)
		return 0;
	if (stat(f->dir, &sb) == 0) {
		a.uid = sb.st_uid;
		a.gid = sb.st_gid;
	}
	a.atime_ns = a.mtime_ns = a.ctime_ns = now_ns();
	fsck_problem(f, f->repair, "root directory %s%s",
		f->root_seen ? "is not a directory" : "missing",
		f->repair ? " -- created" : "");
	if (!f->repair)
		return 1;
	if ((ret = fsck_change_inode(f, ROOT_INO, &a, "", 0)) < 0)
		return ret;
	return fsck_scan(f);
}

static int unreach_cmp(const void *a, const void *b)
{
	const struct unreach *x = a, *y = b;
	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

/* A name dropped for ino: it may need a new one (no separate report). */
static struct badname *rescue_of(struct fsck *f, uint64_t ino)
{
	for (size_t i = 0; i < f->nbad; i++)
		if (f->bad[i].rescue && f->bad[i].ino == ino)
			return &f->bad[i];
	return NULL;
}

/* Root, names of missing inodes or in missing directories (dropped by the
 * first scan), inodes named but unreachable from / (cycles). */
int fsck_check_namespace(struct fsck *f)
{
	int ret;

	if ((ret = fsck_check_root(f)) != 0)
		return ret < 0 ? ret : 0;
	for (size_t i = 0; i < f->nbad && ret == 0; i++) {
		struct badname *b = &f->bad[i];
		int have_t = idx_find(f->idx, b->ino) != NULL;
		char path[PATH_MAX_OUT];
		const char *what = !have_t			   ? "entry for a missing inode"
				   : idx_find(f->idx, b->parent) ? "entry in a file that is not a directory"
								   : "entry in a missing directory";
		fsck_dent_path(f, b->parent, b->name, path, sizeof(path));
		b->rescue = have_t; /* may need a new name: see below */
		fsck_problem(f, f->repair, "%s: %s (inode %" PRIu64 ")%s", path, what, b->ino,
			f->repair ? " -- removed" : "");
		if (f->repair) /* gone from the index already: journal it */
			ret = fsck_change_unlink(f, b->parent, b->name, (uint32_t)strlen(b->name));
	}
	if (ret < 0 || (ret = fsck_scan(f)) < 0)
		return ret;
	for (;;) {
		struct unreach pick = {0};
		struct badname *r;
		if (f->nunreach) /* qsort wants a real array even for none */
			qsort(f->unreach, f->nunreach, sizeof(*f->unreach), unreach_cmp);
		for (size_t i = 0; i < f->nunreach; i++) {
			struct unreach *u = &f->unreach[i];
			int rescue = rescue_of(f, u->ino) != NULL;
			if (!u->names && !rescue)
				continue; /* nameless: the journal's leftover of an unlinked file */
			if (!f->repair) {
				if (!rescue)
					fsck_problem(f, 0,
						"inode %" PRIu64
						" (%s) is named but not reachable from /",
						u->ino, u->is_dir ? "directory" : "file");
			} else if (!pick.ino) {
				pick = *u; /* the lowest number */
			}
		}
		if (!pick.ino)
			return 0;
		if (!(r = rescue_of(f, pick.ino)))
			fsck_problem(f, 1, "inode %" PRIu64 " (%s) is named but not reachable from /",
				pick.ino, pick.is_dir ? "directory" : "file");
		fsck_note(f, "inode %" PRIu64 " moved to /lost+found/#%" PRIu64, pick.ino,
			  pick.ino);
		while ((r = rescue_of(f, pick.ino)))
			r->rescue = 0;
		if ((ret = unlink_all(f, pick.ino, 0)) < 0 ||
		    (ret = link_lost_found(f, pick.ino)) < 0)
			return ret;
	}
}

/* Segment table against the stores: missing entries, wrong length or
 * device, and segments nobody references (deleted by --repair). */
int fsck_check_segments(struct fsck *f)
{
	size_t n;
	struct found **fds;
	struct seg_where w;
	char h1[32], h2[32];
	int ret = 0;

	for (uint64_t id = 0; ret == 0 && segtab_next(f->segs, &id, &w);) {
		struct found *fd = fsck_seg_copy(f, id);
		int st = w.store;
		if (st > 1 || !f->configured[st]) {
			fsck_problem(f, f->repair,
				"segment %" PRIu64 " is on a tier not configured here%s", id,
				f->repair ? " -- dropped from the segment table" : "");
		} else if (!f->usable[st]) {
			continue;
		} else if (!fd) {
			if (!fsck_seg_reported(f, id))
				fsck_problem(f, f->repair,
					"segment %" PRIu64 " missing (%s, no file uses it)%s", id,
					fsck_human(w.len, h1, sizeof(h1)),
					f->repair ? " -- dropped from the segment table" : "");
			else if (f->repair)
				fsck_note(f, "segment %" PRIu64 " dropped from the segment table",
					  id);
		} else if (fd->mret == 0 && fd->ours && w.len != fd->size) {
			fsck_problem(f, f->repair,
				"segment %" PRIu64 ": %s in the store, the segment table says %s%s",
				id, fsck_human(fd->size, h1, sizeof(h1)),
				fsck_human(w.len, h2, sizeof(h2)),
				f->repair ? " -- table updated" : "");
			if (f->repair)
				ret = fsck_change_seg_add(f, fd);
			continue;
		} else if (fd->mret == 0 && fd->ours && w.dev != fd->dev) {
			fsck_problem(f, f->repair,
				"segment %" PRIu64 " is in %s, the segment table says %s%s", id,
				fsck_dev_name(f, st, fd->dev), fsck_dev_name(f, st, w.dev),
				f->repair ? " -- table updated" : "");
			if (f->repair)
				ret = fsck_change_seg_add(f, fd);
			continue;
		} else {
			continue;
		}
		if (f->repair) {
			struct jrec r = {.type = JR_SEG_DEL, .seg = {.id = id}};
			ret = fsck_change(f, &r);
		}
	}
	if (ret < 0)
		return ret;
	fds = (struct found **)fsck_ht_array(&f->found, &n);
	if (f->found.n && !fds)
		return -ENOMEM;
	if (fds)
		qsort(fds, n, sizeof(*fds), fsck_found_cmp);
	for (size_t i = 0; i < n; i++) {
		struct found *fd = fds[i];
		char extra[PATH_MAX_OUT + 64] = "";
		int r = 0;
		if (fd->removed || fsck_in_table(f, fd) || fd->chunk_refs)
			continue; /* used (chunk_refs without --repair: reported with the files) */
		if (fsck_seg_copy(f, fd->id))
			snprintf(extra, sizeof(extra), ", a second copy in %s",
				 fsck_dev_name(f, fd->store, fd->dev));
		else if (fd->mret < 0)
			snprintf(extra, sizeof(extra), ", unreadable");
		else if (!fd->ours)
			snprintf(extra, sizeof(extra), ", another filesystem's");
		if (f->tiers.nnvme > 1 || (f->tiers.nnvme && f->tiers.s3))
			snprintf(extra + strlen(extra), sizeof(extra) - strlen(extra), ", in %s",
				 fsck_dev_name(f, fd->store, fd->dev));
		if (f->repair) {
			r = store_remove(f->st[fd->store], fd->id, fd->dev);
			fd->removed = r == 0 || r == -ENOENT;
		}
		fsck_problem(f, f->repair && fd->removed, "segment %" PRIu64 " unreferenced (%s%s)%s%s",
			fd->id, fsck_human(fd->size, h1, sizeof(h1)), extra,
			!f->repair    ? ""
			: fd->removed ? " -- deleted"
				      : " -- cannot delete: ",
			f->repair && !fd->removed ? strerror(-r) : "");
	}
	free(fds);
	return 0;
}
