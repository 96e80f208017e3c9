/*
 * fsck_model — spillway-fsck's view of the index: a struct index replayed by
 * index/'s own code (idx_replay, idx_replay_finish), the segment table a
 * struct segtab replayed by tier/'s own code (segtab_replay), as at mount,
 * the paths of reachable inodes, and every change made through
 * fsck_change().
 *
 * DESIGN
 * - Records go to idx_replay exactly as at mount; what it skips (records for
 *   unknown inodes, chunk indexes out of range) reaches fsck through the
 *   index's anomaly hook and is counted. Segment records and next_seg go to
 *   the segment table (idx_replay returns 1 for them); which copy in a
 *   store an entry means is fsck's (struct found's bound).
 * - fsck_scan runs idx_replay_finish: link counts, names of missing inodes
 *   dropped (the first scan keeps them in f->bad for check_namespace). Its
 *   hook keeps every unreachable inode (listed in f->unreach), so an inode
 *   pointer stays valid for the whole run and nameless or lost inodes still
 *   count for inode numbers; kept inodes have nlink 0 and stay out of
 *   checkpoints, as the daemon would drop them. Then a breadth-first walk
 *   from / (idx_readdir) gives each reachable inode its first name: its path.
 * - fsck_change() starts the journal on the first change (jrnl_start may
 *   checkpoint the index then), appends the record and applies it with the
 *   replay code. Without a usable checkpoint (f->manual) nothing is appended:
 *   fsck_write_checkpoint() writes checkpoint.<gen> with jrnl_write_checkpoint,
 *   the daemon's own writer; both snapshot as the daemon does: META, the
 *   segment table, idx_snapshot.
 * - Single-threaded (see spillway-fsck.c): no locks of fsck's own.
 */
#include "mount-helpers/fsck/fsck_i.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- a small chained hash (key: a 64-bit hash; callers compare the rest) ---- */

int fsck_ht_add(struct htab *t, struct hent *e, uint64_t key)
{
	if (t->n + 1 > t->nb) {
		size_t nb = t->nb ? t->nb * 2 : 1024;
		struct hent **b = calloc(nb, sizeof(*b));
		if (!b)
			return -ENOMEM;
		for (size_t i = 0; i < t->nb; i++)
			for (struct hent *x = t->b[i], *nx; x; x = nx) {
				nx = x->next;
				x->next = b[x->key & (nb - 1)];
				b[x->key & (nb - 1)] = x;
			}
		free(t->b);
		t->b = b;
		t->nb = nb;
	}
	e->key = key;
	e->next = t->b[key & (t->nb - 1)];
	t->b[key & (t->nb - 1)] = e;
	t->n++;
	return 0;
}

/* Every entry of t into a malloc'ed array (caller frees); NULL when empty. */
void **fsck_ht_array(const struct htab *t, size_t *n)
{
	void **a = t->n ? malloc(t->n * sizeof(*a)) : NULL;
	size_t k = 0;
	if (a)
		for (size_t i = 0; i < t->nb; i++)
			for (struct hent *x = t->b[i]; x; x = x->next)
				a[k++] = x;
	*n = a ? k : 0;
	return a;
}

static void ht_clear(struct htab *t, void (*free_ent)(struct hent *))
{
	for (size_t i = 0; i < t->nb; i++)
		for (struct hent *x = t->b[i], *nx; x; x = nx) {
			nx = x->next;
			free_ent(x);
		}
	free(t->b);
	memset(t, 0, sizeof(*t));
}

static void free_fname(struct hent *e)
{
	free(((struct fname *)e)->name);
	free(e);
}

/* The copies live in their segment's array: nothing of their own. */
static void free_copy(struct hent *e)
{
	(void)e;
}

static void free_found(struct hent *e)
{
	struct found *fd = (struct found *)e;
	free(fd->ents);
	free(fd->copies);
	free(fd->verified);
	free(fd);
}

/* ---- the segment table's copies ---- */

struct found *fsck_seg_copy(struct fsck *f, uint64_t id)
{
	uint64_t k = mix64(id);
	for (struct hent *e = ht_bucket(&f->found, k); e; e = e->next)
		if (e->key == k && ((struct found *)e)->id == id && ((struct found *)e)->bound)
			return (struct found *)e;
	return NULL;
}

/* ---- the index ---- */

static int note_unreach(struct fsck *f, const struct idx_anomaly *a)
{
	if (f->nunreach == f->unreach_cap) {
		size_t cap = f->unreach_cap ? f->unreach_cap * 2 : 64;
		struct unreach *u = realloc(f->unreach, cap * sizeof(*u));
		if (!u)
			return -ENOMEM;
		f->unreach = u;
		f->unreach_cap = cap;
	}
	f->unreach[f->nunreach++] =
	    (struct unreach){.ino = a->ino, .names = a->names, .is_dir = a->is_dir};
	return 0;
}

static int note_badname(struct fsck *f, const struct idx_anomaly *a)
{
	struct badname *b = realloc(f->bad, (f->nbad + 1) * sizeof(*b));
	if (!b)
		return -ENOMEM;
	f->bad = b;
	b[f->nbad] = (struct badname){.parent = a->parent, .ino = a->ino, .kind = a->kind};
	if (!(b[f->nbad].name = strdup(a->name)))
		return -ENOMEM;
	f->nbad++;
	return 0;
}

/* The index's anomaly hook: count what replay skips, note what finish finds,
 * keep every unreachable inode. */
static int on_anomaly(void *arg, const struct idx_anomaly *a)
{
	struct fsck *f = arg;
	switch (a->kind) {
	case IDX_AN_NO_INODE:
	case IDX_AN_NOT_FILE:
	case IDX_AN_CHUNK_RANGE:
		f->unknown_recs++;
		break;
	case IDX_AN_NAME_DANGLING:
	case IDX_AN_NAME_ORPHAN:
		if (f->collect && note_badname(f, a) < 0)
			f->collect = -ENOMEM;
		break;
	case IDX_AN_UNREACHABLE:
		if (note_unreach(f, a) < 0)
			f->collect = -ENOMEM;
		return 1;
	default: /* names skipped in a fuzzy checkpoint, directory aliases */
		break;
	}
	return 0;
}

int fsck_index_open(struct fsck *f)
{
	int ret = idx_new(f->chunk_size, &f->idx);
	if (ret == 0)
		idx_set_anomaly_hook(f->idx, on_anomaly, f);
	if (ret == 0)
		ret = segtab_new(NULL, &f->segs); /* no clock: fsck reads nothing */
	return ret;
}

void fsck_index_close(struct fsck *f)
{
	idx_free(f->idx);
	f->idx = NULL;
	ht_clear(&f->names, free_fname);
	ht_clear(&f->copies, free_copy);
	ht_clear(&f->found, free_found);
	segtab_free(f->segs);
	f->segs = NULL;
	free(f->seg_reported);
	for (size_t i = 0; i < f->nbad; i++)
		free(f->bad[i].name);
	free(f->bad);
	free(f->unreach);
}

int fsck_apply(void *arg, const struct jrec *r)
{
	struct fsck *f = arg;
	int ret = idx_replay(f->idx, r);
	if (r->type == JR_INODE && r->ino == ROOT_INO) {
		f->root_seen = 1;
		f->root_bad = !S_ISDIR(r->attr.mode);
	}
	if (ret <= 0)
		return ret;
	if (r->type == JR_META && r->next_seg > f->meta_next_seg)
		f->meta_next_seg = r->next_seg;
	if (r->type == JR_SEG_ADD || r->type == JR_SEG_DEL) {
		struct found *fd = fsck_seg_copy(f, r->seg.id);
		if (fd)
			fd->bound = 0; /* bound again by bind_segments or fsck_change_seg_add */
	}
	segtab_replay(f->segs, r);
	return 0;
}

/* ---- reachability and paths ---- */

static struct fname *fname_get(struct fsck *f, uint64_t ino)
{
	uint64_t k = mix64(ino);
	for (struct hent *e = ht_bucket(&f->names, k); e; e = e->next)
		if (e->key == k && ((struct fname *)e)->ino == ino)
			return (struct fname *)e;
	return NULL;
}

int fsck_reachable(struct fsck *f, uint64_t ino)
{
	return ino == ROOT_INO || fname_get(f, ino) != NULL;
}

struct walk {
	struct fsck *f;
	uint64_t dir;
	uint64_t *queue;
	size_t tail, cap;
	int err;
};

/* idx_readdir callback (index lock held): first names of the children. */
static int walk_entry(void *arg, const char *name, struct inode *child, uint64_t cookie)
{
	struct walk *w = arg;
	struct fname *n;
	if (!strcmp(name, ".") || !strcmp(name, "..") || child->ino == ROOT_INO ||
	    fname_get(w->f, child->ino))
		return 0;
	if (!(n = calloc(1, sizeof(*n))) || !(n->name = strdup(name)) ||
	    fsck_ht_add(&w->f->names, &n->h, mix64(child->ino)) < 0) {
		if (n)
			free(n->name);
		free(n);
		w->err = -ENOMEM;
		return 1;
	}
	n->ino = child->ino;
	n->parent = w->dir;
	if (is_dir(child)) {
		if (w->tail == w->cap) {
			size_t cap = w->cap * 2;
			uint64_t *q = realloc(w->queue, cap * sizeof(*q));
			if (!q) {
				w->err = -ENOMEM;
				return 1;
			}
			w->queue = q;
			w->cap = cap;
		}
		w->queue[w->tail++] = child->ino;
	}
	return 0;
}

int fsck_scan(struct fsck *f)
{
	struct walk w = {.f = f, .cap = 64};
	size_t head = 0;

	f->nunreach = 0;
	idx_replay_finish(f->idx);
	if (f->collect < 0)
		return f->collect;
	f->collect = 0;
	ht_clear(&f->names, free_fname);
	if (!(w.queue = malloc(w.cap * sizeof(*w.queue))))
		return -ENOMEM;
	w.queue[w.tail++] = ROOT_INO;
	while (head < w.tail && !w.err) {
		w.dir = w.queue[head++];
		idx_readdir(f->idx, w.dir, 0, walk_entry, &w);
	}
	free(w.queue);
	return w.err;
}

/* Path of a reachable inode ("/a/b"), else "<inode N>". */
const char *fsck_path_of(struct fsck *f, uint64_t ino, char *buf, size_t len)
{
	size_t pos = len - 1;
	buf[pos] = 0;
	if (ino == ROOT_INO)
		return "/";
	if (!fname_get(f, ino)) {
		snprintf(buf, len, "<inode %" PRIu64 ">", ino);
		return buf;
	}
	for (const struct fname *n = fname_get(f, ino); n; n = fname_get(f, n->parent)) {
		size_t nl = strlen(n->name);
		if (nl + 1 > pos) {
			memcpy(buf, "...", 3);
			return buf;
		}
		pos -= nl;
		memcpy(buf + pos, n->name, nl);
		buf[--pos] = '/';
	}
	return buf + pos;
}

/* Path of the name `name` in parent ("/dir/name"), reachable or not. */
const char *fsck_dent_path(struct fsck *f, uint64_t parent, const char *name, char *buf,
			   size_t len)
{
	char pb[PATH_MAX_OUT];
	const char *pp = idx_find(f->idx, parent) ? fsck_path_of(f, parent, pb, sizeof(pb)) : NULL;
	if (!pp)
		snprintf(buf, len, "<missing directory %" PRIu64 ">/%s", parent, name);
	else
		snprintf(buf, len, "%s%s%s", pp, strcmp(pp, "/") ? "/" : "", name);
	return buf;
}

/* ---- changes: journal + index ---- */

/* jrnl_snapshot_fn, as the daemon's: counters, the segment table, the index. */
static int snapshot(void *arg, struct jrnl_emitter *e)
{
	struct fsck *f = arg;
	int ret;

	if ((ret = fsck_scan(f)) < 0 || (ret = segtab_emit(f->segs, e, idx_next_ino(f->idx))) != 0)
		return ret;
	return idx_snapshot(f->idx, e);
}

int fsck_change(struct fsck *f, const struct jrec *r)
{
	int ret;
	if (!f->manual && !f->started) {
		if ((ret = jrnl_start(f->j, snapshot, f)) < 0) {
			fsck_oper_err(f, "%s: cannot start the journal: %s", f->dir,
				      strerror(-ret));
			return ret;
		}
		f->started = 1;
	}
	if (!f->manual && (ret = jrnl_append(f->j, r)) < 0) {
		fsck_oper_err(f, "%s: journal append failed: %s", f->dir, strerror(-ret));
		return ret;
	}
	f->changed = 1;
	if ((ret = fsck_apply(f, r)) < 0) {
		fsck_oper_err(f, "%s", strerror(-ret));
		return ret;
	}
	return 0;
}

int fsck_change_meta(struct fsck *f, uint64_t next_ino, uint64_t next_seg)
{
	struct jrec r = {.type = JR_META, .next_ino = next_ino, .next_seg = next_seg};
	if (segtab_next_id(f->segs) > r.next_seg)
		r.next_seg = segtab_next_id(f->segs);
	return fsck_change(f, &r);
}

int fsck_change_seg_add(struct fsck *f, struct found *fd)
{
	struct jrec r = {.type = JR_SEG_ADD,
			 .seg = {.id = fd->id,
				 .len = fd->size,
				 .payload = fd->payload,
				 .dev = fd->dev,
				 .store = (uint8_t)fd->store}};
	int ret = fsck_change(f, &r);
	if (ret == 0)
		fd->bound = 1; /* fsck_apply unbound the one it replaced */
	return ret;
}

int fsck_change_loc(struct fsck *f, uint64_t ino, uint64_t chunk, const struct found *fd,
		    const struct seg_entry *e)
{
	struct jrec r = {.type = JR_CHUNK_LOC,
			 .ino = ino,
			 .chunk = chunk,
			 .loc = seg_entry_loc(e, fd->id, fd->dev)};
	return fsck_change(f, &r);
}

int fsck_change_link(struct fsck *f, uint64_t parent, const char *name, uint64_t ino)
{
	struct jrec r = {.type = JR_LINK,
			 .parent = parent,
			 .ino = ino,
			 .name = name,
			 .name_len = (uint32_t)strlen(name)};
	return fsck_change(f, &r);
}

int fsck_change_unlink(struct fsck *f, uint64_t parent, const char *name, uint32_t nlen)
{
	struct jrec r = {.type = JR_UNLINK, .parent = parent, .name = name, .name_len = nlen};
	return fsck_change(f, &r);
}

int fsck_change_inode(struct fsck *f, uint64_t ino, const struct jrec_attr *a, const char *target,
		      uint32_t tlen)
{
	struct jrec r = {
	    .type = JR_INODE, .ino = ino, .attr = *a, .name = target, .name_len = tlen};
	return fsck_change(f, &r);
}

/* The highest inode number anything knows of, plus one. */
uint64_t fsck_ino_ceiling(struct fsck *f)
{
	uint64_t top = idx_next_ino(f->idx); /* above every inode replayed */
	if (top < ROOT_INO + 1)
		top = ROOT_INO + 1;
	for (size_t i = 0; i < f->copies.nb; i++)
		for (struct hent *e = f->copies.b[i]; e; e = e->next) {
			struct copy *c = (struct copy *)e;
			if (c->f->ents[c->ei].ino >= top)
				top = c->f->ents[c->ei].ino + 1;
		}
	return top;
}

/* /lost+found (created as a directory inode above every known number). */
int fsck_lost_found(struct fsck *f, uint64_t *out)
{
	static const char *const names[] = {"lost+found", "lost+found.fsck"};
	struct inode *root = idx_find(f->idx, ROOT_INO);
	struct jrec_attr ra = fsck_attr(root);
	for (int i = 0; i < 2; i++) {
		struct inode *in;
		struct jrec_attr a;
		uint64_t ino;
		int ret = idx_lookup(f->idx, ROOT_INO, names[i], 0, &in);
		if (ret == 0) {
			ino = in->ino;
			ret = is_dir(in);
			idx_put(f->idx, in); /* named: idx_put leaves it */
			if (ret) {
				*out = ino;
				return 0;
			}
			continue;
		}
		ino = fsck_ino_ceiling(f);
		memset(&a, 0, sizeof(a));
		a.mode = S_IFDIR | 0700;
		a.uid = ra.uid;
		a.gid = ra.gid;
		a.atime_ns = a.mtime_ns = a.ctime_ns = now_ns();
		if ((ret = fsck_change_meta(f, ino + 1, 0)) < 0 ||
		    (ret = fsck_change_inode(f, ino, &a, "", 0)) < 0 ||
		    (ret = fsck_change_link(f, ROOT_INO, names[i], ino)) < 0)
			return ret;
		*out = ino;
		return fsck_scan(f);
	}
	fsck_oper_err(f, "no room for a lost+found directory in /");
	return -EEXIST;
}

/* ---- queries and sort orders ---- */

/* Is fd the copy the segment table points at? */
int fsck_in_table(struct fsck *f, const struct found *fd)
{
	return fd->bound;
}

struct inode_list {
	struct fsck *f;
	struct inode **v;
	size_t n, cap;
	int err;
};

static int collect_reachable(void *arg, struct inode *in)
{
	struct inode_list *l = arg;
	if (!fsck_reachable(l->f, in->ino))
		return 0;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 256;
		struct inode **v = realloc(l->v, cap * sizeof(*v));
		if (!v) {
			l->err = -ENOMEM;
			return 1;
		}
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = in;
	return 0;
}

static int inode_cmp(const void *a, const void *b)
{
	const struct inode *x = *(struct inode *const *)a, *y = *(struct inode *const *)b;
	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

/* Sorted array of the reachable inodes (caller frees). */
struct inode **fsck_reachable_inodes(struct fsck *f, size_t *n, int *err)
{
	struct inode_list l = {.f = f};
	idx_for_each(f->idx, collect_reachable, &l);
	*err = l.err;
	if (l.err) {
		free(l.v);
		*n = 0;
		return NULL;
	}
	if (l.v)
		qsort(l.v, l.n, sizeof(*l.v), inode_cmp);
	*n = l.n;
	return l.v;
}

int fsck_found_cmp(const void *a, const void *b)
{
	const struct found *x = *(struct found *const *)a, *y = *(struct found *const *)b;
	if (x->store != y->store)
		return x->store - y->store;
	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	return x->dev < y->dev ? -1 : x->dev > y->dev;
}

/* ---- checkpoints ---- */

int fsck_write_checkpoint(struct fsck *f, uint64_t gen)
{
	char name[JRNL_NAME_MAX];
	int ret = jrnl_write_checkpoint(f->j, gen, f->uuid, snapshot, f);
	if (ret < 0) {
		jrnl_file_name(name, sizeof(name), JRNL_KIND_CHECKPOINT, gen);
		fsck_oper_err(f, "%s/%s: %s", f->dir, name, strerror(-ret));
	}
	return ret;
}
