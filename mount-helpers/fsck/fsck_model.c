/*
 * fsck_model — spillway-fsck's model of the index: inodes, directory entries,
 * chunk maps, xattrs and the segment table, replayed from the journal
 * (fsck_apply), changed only through fsck_change(), saved as a checkpoint.
 *
 * DESIGN
 * - Records are applied as the daemon replays them: a name whose directory
 *   or inode is missing (or whose parent is not a directory) is skipped;
 *   other records naming unknown inodes are counted and skipped. Nameless
 *   inodes are the journal's leftovers of unlinked files; fsck_ns_scan works
 *   out link counts and what / reaches, and only that goes into a checkpoint.
 * - fsck_change() starts the journal on the first change (jrnl_start may
 *   checkpoint this model then), appends the record and applies it with the
 *   replay code. Without a usable checkpoint (f->manual) nothing is appended:
 *   fsck_write_checkpoint() writes checkpoint.<gen> from the model itself
 *   (tmp file, fsync, rename, fsync of the directory).
 * - Single-threaded (see spillway-fsck.c): no locks.
 */
#include "mount-helpers/fsck/fsck_i.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- a small chained hash (key: a 64-bit hash; callers compare the rest) ---- */

static uint64_t key_name(uint64_t parent, const char *name, uint32_t len)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (uint32_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)name[i]) * 0x100000001b3ull;
	return key2(parent, h);
}

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

static void ht_del(struct htab *t, struct hent *e)
{
	for (struct hent **pp = &t->b[e->key & (t->nb - 1)]; *pp; pp = &(*pp)->next)
		if (*pp == e) {
			*pp = e->next;
			t->n--;
			return;
		}
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

/* ---- model: lookups and record application ---- */

struct finode *fsck_ino_get(struct fsck *f, uint64_t ino)
{
	uint64_t k = mix64(ino);
	for (struct hent *e = ht_bucket(&f->inodes, k); e; e = e->next)
		if (e->key == k && ((struct finode *)e)->ino == ino)
			return (struct finode *)e;
	return NULL;
}

static struct finode *ino_make(struct fsck *f, uint64_t ino)
{
	struct finode *in = fsck_ino_get(f, ino);
	if (in)
		return in;
	if (!(in = calloc(1, sizeof(*in))))
		return NULL;
	in->ino = ino;
	if (fsck_ht_add(&f->inodes, &in->h, mix64(ino)) < 0) {
		free(in);
		return NULL;
	}
	return in;
}

static struct fdent *dent_get(struct fsck *f, uint64_t parent, const char *name, uint32_t nlen)
{
	uint64_t k = key_name(parent, name, nlen);
	for (struct hent *e = ht_bucket(&f->dents, k); e; e = e->next) {
		struct fdent *d = (struct fdent *)e;
		if (e->key == k && d->parent == parent && d->nlen == nlen &&
		    memcmp(d->name, name, nlen) == 0)
			return d;
	}
	return NULL;
}

struct fseg *fsck_seg_get(struct fsck *f, uint64_t id)
{
	uint64_t k = mix64(id);
	for (struct hent *e = ht_bucket(&f->segs, k); e; e = e->next)
		if (e->key == k && ((struct fseg *)e)->seg.id == id)
			return (struct fseg *)e;
	return NULL;
}

static int chunks_reserve(struct finode *in, uint64_t n)
{
	uint64_t cap = in->nchunks ? in->nchunks : 8;
	struct fchunk *c;
	if (n <= in->nchunks)
		return 0;
	if (n > MAX_CHUNKS)
		return -EFBIG;
	while (cap < n)
		cap *= 2;
	if (!(c = realloc(in->chunks, cap * sizeof(*c))))
		return -ENOMEM;
	memset(c + in->nchunks, 0, (cap - in->nchunks) * sizeof(*c));
	in->chunks = c;
	in->nchunks = cap;
	return 0;
}

static void *memdup(const void *p, size_t n)
{
	void *q = malloc(n ? n : 1);
	if (q && n)
		memcpy(q, p, n);
	return q;
}

/* Apply one record to the model (journal replay and our own changes).
 * 0, -ENOMEM; records that name unknown inodes are counted and skipped. */
int fsck_apply(void *arg, const struct jrec *r)
{
	struct fsck *f = arg;
	struct finode *in;
	struct fdent *d;
	struct fseg *s;

	switch (r->type) {
	case JR_META:
		if (r->next_ino > f->next_ino)
			f->next_ino = r->next_ino;
		if (r->next_seg > f->next_seg)
			f->next_seg = r->next_seg;
		return 0;
	case JR_INODE:
		if (!(in = ino_make(f, r->ino)))
			return -ENOMEM;
		in->attr = r->attr;
		if (r->name_len || !in->target) {
			char *t = memdup(r->name, r->name_len); /* r->name may be in->target */
			if (!t)
				return -ENOMEM;
			free(in->target);
			in->target = t;
			in->tlen = r->name_len;
		}
		return 0;
	case JR_LINK:
		/* as the daemon replays it: a name in a directory or for an inode
		 * that does not exist (yet, in a fuzzy checkpoint) is skipped */
		if (!(in = fsck_ino_get(f, r->parent)) || !is_dir(in) || !fsck_ino_get(f, r->ino))
			return 0;
		if ((d = dent_get(f, r->parent, r->name, r->name_len))) {
			d->ino = r->ino;
			return 0;
		}
		if (!(d = calloc(1, sizeof(*d))) || !(d->name = memdup(r->name, r->name_len))) {
			free(d);
			return -ENOMEM;
		}
		d->parent = r->parent;
		d->ino = r->ino;
		d->nlen = r->name_len;
		if (fsck_ht_add(&f->dents, &d->h, key_name(r->parent, r->name, r->name_len)) < 0) {
			free(d->name);
			free(d);
			return -ENOMEM;
		}
		return 0;
	case JR_UNLINK:
		if ((d = dent_get(f, r->parent, r->name, r->name_len))) {
			ht_del(&f->dents, &d->h);
			free(d->name);
			free(d);
		}
		return 0;
	case JR_XATTR_SET:
	case JR_XATTR_DEL: {
		struct fxattr **pp, *x;
		if (!(in = fsck_ino_get(f, r->ino))) {
			f->unknown_recs++;
			return 0;
		}
		for (pp = &in->xattrs; *pp; pp = &(*pp)->next)
			if ((*pp)->nlen == r->name_len &&
			    !memcmp((*pp)->name, r->name, r->name_len))
				break;
		if (r->type == JR_XATTR_DEL) {
			if ((x = *pp)) {
				*pp = x->next;
				free(x->name);
				free(x->val);
				free(x);
			}
			return 0;
		}
		if (!(x = *pp)) {
			if (!(x = calloc(1, sizeof(*x))) ||
			    !(x->name = memdup(r->name, r->name_len))) {
				free(x);
				return -ENOMEM;
			}
			x->nlen = r->name_len;
			*pp = x;
		}
		free(x->val);
		if (!(x->val = memdup(r->value, r->value_len)))
			return -ENOMEM;
		x->vlen = r->value_len;
		return 0;
	}
	case JR_CHUNK_LOC:
	case JR_CHUNK_DIRTY: {
		int ret;
		if (!(in = fsck_ino_get(f, r->ino)) || !S_ISREG(in->attr.mode)) {
			f->unknown_recs++;
			return 0;
		}
		if ((ret = chunks_reserve(in, r->chunk + 1)) < 0) {
			if (ret != -EFBIG)
				return ret;
			f->unknown_recs++;
			return 0;
		}
		in->chunks[r->chunk].state = r->type == JR_CHUNK_LOC ? CS_LOC : CS_DIRTY;
		in->chunks[r->chunk].loc = r->loc;
		return 0;
	}
	case JR_CHUNK_ABSENT:
		if (!(in = fsck_ino_get(f, r->ino))) {
			f->unknown_recs++;
			return 0;
		}
		for (uint64_t c = r->chunk; c < in->nchunks && c - r->chunk < r->count; c++)
			in->chunks[c].state = CS_NONE;
		return 0;
	case JR_SEG_ADD:
		if (!(s = fsck_seg_get(f, r->seg.id))) {
			if (!(s = calloc(1, sizeof(*s))))
				return -ENOMEM;
			if (fsck_ht_add(&f->segs, &s->h, mix64(r->seg.id)) < 0) {
				free(s);
				return -ENOMEM;
			}
		}
		s->seg = r->seg;
		s->copy = NULL; /* bound again by bind_segments */
		return 0;
	case JR_SEG_DEL:
		if ((s = fsck_seg_get(f, r->seg.id))) {
			ht_del(&f->segs, &s->h);
			free(s);
		}
		return 0;
	}
	return 0;
}

/* ---- namespace: reachability and paths ---- */

int fsck_ns_scan(struct fsck *f)
{
	size_t n, nd, head = 0, tail = 0;
	void **all = fsck_ht_array(&f->inodes, &n), **dents = fsck_ht_array(&f->dents, &nd);
	struct finode **queue = NULL, *root;
	int ret = 0;

	if ((f->inodes.n && !all) || (f->dents.n && !dents) ||
	    !(queue = malloc((n + 1) * sizeof(*queue)))) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		struct finode *in = all[i];
		in->nlinks = 0;
		in->reachable = 0;
		in->pdent = NULL;
		in->children = NULL;
	}
	for (size_t i = 0; i < nd; i++) {
		struct fdent *d = dents[i];
		struct finode *t = fsck_ino_get(f, d->ino), *p = fsck_ino_get(f, d->parent);
		d->sib = NULL;
		if (t)
			t->nlinks++;
		if (p && is_dir(p)) {
			d->sib = p->children;
			p->children = d;
		}
	}
	if ((root = fsck_ino_get(f, ROOT_INO)) && is_dir(root)) {
		root->reachable = 1;
		queue[tail++] = root;
	}
	while (head < tail) {
		struct finode *dir = queue[head++];
		for (struct fdent *d = dir->children; d; d = d->sib) {
			struct finode *t = fsck_ino_get(f, d->ino);
			if (!t || t->reachable || t->ino == ROOT_INO)
				continue;
			t->reachable = 1;
			t->pdent = d;
			if (is_dir(t))
				queue[tail++] = t;
		}
	}
out:
	free(queue);
	free(all);
	free(dents);
	return ret;
}

/* Path of a reachable inode ("/a/b"), else "<inode N>". */
const char *fsck_path_of(struct fsck *f, const struct finode *in, char *buf, size_t len)
{
	size_t pos = len - 1;
	buf[pos] = 0;
	if (in->ino == ROOT_INO)
		return "/";
	if (!in->reachable) {
		snprintf(buf, len, "<inode %" PRIu64 ">", in->ino);
		return buf;
	}
	for (const struct finode *x = in; x && x->pdent; x = fsck_ino_get(f, x->pdent->parent)) {
		const struct fdent *d = x->pdent;
		if (d->nlen + 1 > pos) {
			memcpy(buf, "...", 3);
			return buf;
		}
		pos -= d->nlen;
		memcpy(buf + pos, d->name, d->nlen);
		buf[--pos] = '/';
	}
	return buf + pos;
}

/* Path of entry d ("/dir/name"), its parent being reachable or not. */
const char *fsck_dent_path(struct fsck *f, const struct fdent *d, char *buf, size_t len)
{
	char pb[PATH_MAX_OUT];
	struct finode *p = fsck_ino_get(f, d->parent);
	const char *pp = p ? fsck_path_of(f, p, pb, sizeof(pb)) : NULL;
	if (!pp)
		snprintf(buf, len, "<missing directory %" PRIu64 ">/%.*s", d->parent, (int)d->nlen,
			 d->name);
	else
		snprintf(buf, len, "%s%s%.*s", pp, strcmp(pp, "/") ? "/" : "", (int)d->nlen,
			 d->name);
	return buf;
}

/* ---- changes: model + journal ---- */

static int snapshot(struct fsck *f, int (*emit)(void *, const struct jrec *), void *ectx);

static int emit_jrnl(void *e, const struct jrec *r)
{
	return jrnl_emit(e, r);
}

static int snap_jrnl(void *arg, struct jrnl_emitter *e)
{
	return snapshot(arg, emit_jrnl, e);
}

/* Append r to the journal, then apply it to the model (r's strings may
 * belong to the model). 0 or -errno (reported). */
int fsck_change(struct fsck *f, const struct jrec *r)
{
	int ret;
	if (!f->manual && !f->started) {
		if ((ret = jrnl_start(f->j, snap_jrnl, f)) < 0) {
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

int fsck_change_meta(struct fsck *f)
{
	struct jrec r = {.type = JR_META, .next_ino = f->next_ino, .next_seg = f->next_seg};
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
	struct fseg *s;
	int ret = fsck_change(f, &r);
	if (ret == 0 && (s = fsck_seg_get(f, fd->id)))
		s->copy = fd;
	return ret;
}

int fsck_change_loc(struct fsck *f, uint64_t ino, uint64_t chunk, const struct found *fd,
		    const struct seg_entry *e)
{
	struct jrec r = {.type = JR_CHUNK_LOC,
			 .ino = ino,
			 .chunk = chunk,
			 .loc = {.seg_id = fd->id,
				 .off = e->off,
				 .len = e->len,
				 .crc = e->crc,
				 .dev = fd->dev,
				 .gen = (uint32_t)e->gen,
				 .flags = e->flags & SEG_F_MAP}};
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
	uint64_t top = f->next_ino > ROOT_INO ? f->next_ino : ROOT_INO + 1;
	for (size_t i = 0; i < f->inodes.nb; i++)
		for (struct hent *e = f->inodes.b[i]; e; e = e->next)
			if (((struct finode *)e)->ino >= top)
				top = ((struct finode *)e)->ino + 1;
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
	struct finode *root = fsck_ino_get(f, ROOT_INO);
	for (int i = 0; i < 2; i++) {
		struct fdent *d = dent_get(f, ROOT_INO, names[i], (uint32_t)strlen(names[i]));
		struct finode *in = d ? fsck_ino_get(f, d->ino) : NULL;
		struct jrec_attr a;
		uint64_t ino;
		int ret;
		if (in && is_dir(in)) {
			*out = in->ino;
			return 0;
		}
		if (d)
			continue;
		ino = fsck_ino_ceiling(f);
		memset(&a, 0, sizeof(a));
		a.mode = S_IFDIR | 0700;
		a.uid = root ? root->attr.uid : 0;
		a.gid = root ? root->attr.gid : 0;
		a.atime_ns = a.mtime_ns = a.ctime_ns = now_ns();
		f->next_ino = ino + 1;
		if ((ret = fsck_change_meta(f)) < 0 ||
		    (ret = fsck_change_inode(f, ino, &a, "", 0)) < 0 ||
		    (ret = fsck_change_link(f, ROOT_INO, names[i], ino)) < 0)
			return ret;
		*out = ino;
		return fsck_ns_scan(f);
	}
	fsck_oper_err(f, "no room for a lost+found directory in /");
	return -EEXIST;
}

/* ---- queries and sort orders ---- */

/* Is fd the copy the segment table points at? */
int fsck_in_table(struct fsck *f, const struct found *fd)
{
	struct fseg *s = fsck_seg_get(f, fd->id);
	return s && s->copy == fd;
}

int fsck_inode_cmp(const void *a, const void *b)
{
	const struct finode *x = *(struct finode *const *)a, *y = *(struct finode *const *)b;
	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

/* Sorted array of the reachable inodes (caller frees). */
struct finode **fsck_reachable_inodes(struct fsck *f, size_t *n)
{
	size_t all_n, k = 0;
	struct finode **all = (struct finode **)fsck_ht_array(&f->inodes, &all_n);
	for (size_t i = 0; i < all_n; i++)
		if (all[i]->reachable)
			all[k++] = all[i];
	if (all)
		qsort(all, k, sizeof(*all), fsck_inode_cmp);
	*n = k;
	return all;
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

int fsck_seg_cmp(const void *a, const void *b)
{
	const struct fseg *x = *(struct fseg *const *)a, *y = *(struct fseg *const *)b;
	return x->seg.id < y->seg.id ? -1 : x->seg.id > y->seg.id;
}

/* ---- checkpoints ---- */

static int emit_dent_cmp(const void *a, const void *b)
{
	const struct fdent *x = *(struct fdent *const *)a, *y = *(struct fdent *const *)b;
	if (x->parent != y->parent)
		return x->parent < y->parent ? -1 : 1;
	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

/* Emit the model as checkpoint records: META, INODE, LINK, XATTR_SET,
 * CHUNK_LOC/DIRTY, SEG_ADD. Only what / reaches is part of it. */
static int snapshot(struct fsck *f, int (*emit)(void *, const struct jrec *), void *ectx)
{
	struct jrec r = {.type = JR_META, .next_ino = f->next_ino, .next_seg = f->next_seg};
	struct finode **ins = NULL;
	struct fdent **dents = NULL;
	struct fseg **segs = NULL;
	size_t n = 0, nd = 0, ns = 0;
	int ret;

	if ((ret = fsck_ns_scan(f)) < 0)
		return ret;
	if ((ret = emit(ectx, &r)) != 0)
		return ret;
	ins = fsck_reachable_inodes(f, &n);
	dents = (struct fdent **)fsck_ht_array(&f->dents, &nd);
	segs = (struct fseg **)fsck_ht_array(&f->segs, &ns);
	if ((f->inodes.n && !ins) || (f->dents.n && !dents) || (f->segs.n && !segs)) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n && ret == 0; i++) {
		r = (struct jrec){.type = JR_INODE,
				  .ino = ins[i]->ino,
				  .attr = ins[i]->attr,
				  .name = ins[i]->target,
				  .name_len = ins[i]->tlen};
		ret = emit(ectx, &r);
	}
	if (dents)
		qsort(dents, nd, sizeof(*dents), emit_dent_cmp);
	for (size_t i = 0; i < nd && ret == 0; i++) {
		struct fdent *d = dents[i];
		struct finode *p = fsck_ino_get(f, d->parent), *t = fsck_ino_get(f, d->ino);
		if (!p || !t || !p->reachable || !t->reachable || !is_dir(p))
			continue;
		r = (struct jrec){.type = JR_LINK,
				  .parent = d->parent,
				  .ino = d->ino,
				  .name = d->name,
				  .name_len = d->nlen};
		ret = emit(ectx, &r);
	}
	for (size_t i = 0; i < n && ret == 0; i++)
		for (struct fxattr *x = ins[i]->xattrs; x && ret == 0; x = x->next) {
			r = (struct jrec){.type = JR_XATTR_SET,
					  .ino = ins[i]->ino,
					  .name = x->name,
					  .name_len = x->nlen,
					  .value = x->val,
					  .value_len = x->vlen};
			ret = emit(ectx, &r);
		}
	for (size_t i = 0; i < n && ret == 0; i++)
		for (uint64_t c = 0; c < ins[i]->nchunks && ret == 0; c++) {
			const struct fchunk *ch = &ins[i]->chunks[c];
			if (ch->state == CS_NONE)
				continue;
			r = (struct jrec){.type =
					      ch->state == CS_LOC ? JR_CHUNK_LOC : JR_CHUNK_DIRTY,
					  .ino = ins[i]->ino,
					  .chunk = c,
					  .loc = ch->loc};
			ret = emit(ectx, &r);
		}
	if (segs)
		qsort(segs, ns, sizeof(*segs), fsck_seg_cmp);
	for (size_t i = 0; i < ns && ret == 0; i++) {
		r = (struct jrec){.type = JR_SEG_ADD, .seg = segs[i]->seg};
		ret = emit(ectx, &r);
	}
out:
	free(ins);
	free(dents);
	free(segs);
	return ret;
}

struct fwriter {
	int fd;
	uint8_t *buf;
	size_t used, cap;
	uint64_t off, count;
};

static int fw_flush(struct fwriter *w)
{
	size_t done = 0;
	while (done < w->used) {
		ssize_t k = pwrite(w->fd, w->buf + done, w->used - done, (off_t)(w->off + done));
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -EIO;
		done += (size_t)k;
	}
	w->off += w->used;
	w->used = 0;
	return 0;
}

static int emit_file(void *arg, const struct jrec *r)
{
	struct fwriter *w = arg;
	size_t len = jrnl_encoded_size(r);
	int ret;
	if (len > w->cap - w->used && (ret = fw_flush(w)) < 0)
		return ret;
	if (len > w->cap)
		return -E2BIG;
	jrnl_encode(r, w->buf + w->used);
	w->used += len;
	if (r->type != JR_HEADER && r->type != JR_END)
		w->count++;
	return 0;
}

/* Write STATE_DIR/checkpoint.<gen> from the model ourselves (no usable
 * checkpoint to start the journal from): tmp file, fsync, rename, fsync dir. */
int fsck_write_checkpoint(struct fsck *f, uint64_t gen)
{
	char tmp[PATH_MAX_OUT + 8], name[PATH_MAX_OUT];
	struct fwriter w = {.cap = 1 << 20};
	struct jrec h = {.type = JR_HEADER,
			 .hdr = {.version = JRNL_VERSION,
				 .kind = JRNL_KIND_CHECKPOINT,
				 .gen = gen,
				 .chunk_size = f->chunk_size}};
	int ret, dfd = -1;

	memcpy(h.hdr.uuid, f->uuid, 16);
	snprintf(name, sizeof(name), "%s/checkpoint.%016" PRIx64, f->dir, gen);
	snprintf(tmp, sizeof(tmp), "%s.tmp", name);
	if (!(w.buf = malloc(w.cap)))
		return -ENOMEM;
	w.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (w.fd < 0) {
		ret = -errno;
		goto out;
	}
	if ((ret = emit_file(&w, &h)) < 0 || (ret = snapshot(f, emit_file, &w)) != 0)
		goto out;
	{
		struct jrec end = {.type = JR_END, .count = w.count};
		if ((ret = emit_file(&w, &end)) < 0 || (ret = fw_flush(&w)) < 0)
			goto out;
	}
	if (fsync(w.fd) < 0 || rename(tmp, name) < 0) {
		ret = -errno;
		goto out;
	}
	if ((dfd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 || fsync(dfd) < 0)
		ret = -errno;
out:
	if (dfd >= 0)
		close(dfd);
	if (w.fd >= 0)
		close(w.fd);
	if (ret < 0) {
		unlink(tmp);
		fsck_oper_err(f, "%s: %s", name, strerror(ret < 0 ? -ret : EIO));
	}
	free(w.buf);
	return ret;
}
