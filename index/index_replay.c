/*
 * index_replay.c — the index rebuilt from the journal, and written out as a
 * checkpoint: idx_replay applies one record, idx_replay_finish fixes the
 * link counts from what / reaches and drops (or, through the anomaly hook,
 * keeps) the rest; idx_snapshot emits every reachable inode and name;
 * idx_remove_marked removes what recovery marked lost (moves what it
 * marked damaged to /lost+found).
 * Guarantees: replay never journals again (the index has no journal yet)
 * and tells the anomaly hook of every record it skips.
 * Threading: replay and finish run alone (recovery, fsck); snapshot and
 * remove_marked take idx->lock as the namespace operations do.
 */
#include "index/index_i.h"
#include "index/index.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An inode with a given number (recovery): found, or created bare. */
static struct inode *replay_inode(struct index *idx, uint64_t ino, uint32_t mode)
{
	struct inode *in = idx_ino_find(idx, ino);
	struct idx_new_node nn = {.mode = mode};
	uint64_t save;
	if (in)
		return in;
	save = idx->next_ino;
	idx->next_ino = ino;
	in = idx_inode_alloc(idx, &nn);
	idx->next_ino = save > ino + 1 ? save : ino + 1;
	if (in && idx_inode_insert(idx, in) < 0) {
		idx_inode_destroy(idx, in);
		in = NULL;
	}
	return in;
}

void idx_set_anomaly_hook(struct index *idx, idx_anomaly_fn fn, void *arg)
{
	idx->anomaly = fn;
	idx->anomaly_arg = arg;
}

/* Tell the anomaly hook (if any); returns its answer. */
static int anomaly(struct index *idx, enum idx_anomaly_kind kind, const struct jrec *r,
		   uint64_t ino, uint64_t parent, const char *name)
{
	struct idx_anomaly a = {.kind = kind, .ino = ino, .parent = parent, .name = name};
	if (!idx->anomaly)
		return 0;
	if (r) {
		a.rec_type = r->type;
		a.chunk = r->chunk;
	}
	return idx->anomaly(idx->anomaly_arg, &a);
}

/* JR_EXTENT and JR_EXTENT_CRC. A record of an inode that is not a regular
 * file, or crcs out of order, is an anomaly: the extent stays unsealed
 * (recovered by its size). */
static int replay_ext(struct index *idx, const struct jrec *r)
{
	struct inode *in = idx_ino_find(idx, r->ino);
	struct idx_ext *x;

	if (!in) {
		anomaly(idx, IDX_AN_NO_INODE, r, r->ino, 0, NULL);
		return 0;
	}
	if (!S_ISREG(idx_type(in))) {
		anomaly(idx, IDX_AN_NOT_FILE, r, r->ino, 0, NULL);
		return 0;
	}
	if (r->type == JR_EXTENT && (r->ext.flags & JEXT_GONE)) {
		idx_ext_free(in);
		return 0;
	}
	if (r->type == JR_EXTENT_CRC) {
		uint32_t n = r->value_len / 4;
		uint32_t *nc;
		if (!(x = in->ext) || x->sealed || r->chunk != x->ncrc) {
			anomaly(idx, IDX_AN_CHUNK_RANGE, r, r->ino, 0, NULL);
			return 0;
		}
		if (!(nc = realloc(x->crc, ((size_t)x->ncrc + n) * 4)))
			return -ENOMEM;
		x->crc = nc;
		memcpy(x->crc + x->ncrc, r->value, (size_t)n * 4);
		x->ncrc += n;
		return 0;
	}
	if (!(x = idx_ext_new_locked(in)))
		return -ENOMEM;
	if (!(r->ext.flags & JEXT_SEALED) || x->id != r->ext.id || x->sealed ||
	    x->ncrc != idx_ext_blocks(r->ext.size)) {
		/* a new extent, or one being sealed again: its crcs follow */
		free(x->crc);
		x->crc = NULL;
		x->ncrc = 0;
		x->sealed = 0;
		x->size = 0;
		x->id = r->ext.id;
		x->dev = r->ext.dev;
		if (r->ext.flags & JEXT_SEALED)
			anomaly(idx, IDX_AN_CHUNK_RANGE, r, r->ino, 0, NULL);
		return 0;
	}
	x->dev = r->ext.dev;
	x->size = r->ext.size;
	x->sealed = 1;
	return 0;
}

/* JR_CHUNK_OVL (a record pushed on the chain over the base a JR_CHUNK_LOC
 * set) or JR_CHUNK_PART (blocks written over the chain, only in RAM). A
 * chunk without a base, a chain past CHAIN_MAX or a bitmap of another
 * chunk size is a record that does not fit. */
static int replay_chain(struct index *idx, struct inode *in, const struct jrec *r)
{
	struct chunk *ch = &in->chunks[r->chunk];
	struct chunk_chain *k;

	if (!ch->loc.seg_id || (ch->state != CHUNK_COLD && ch->state != CHUNK_HOT_DIRTY) ||
	    (r->type == JR_CHUNK_OVL &&
	     (r->value_len != (idx->chunk_size / CHAIN_BLK + 7) / 8 ||
	      (ch->chain && ch->chain->nrec == CHAIN_MAX)))) {
		anomaly(idx, IDX_AN_CHUNK_RANGE, r, r->ino, 0, NULL);
		return 0;
	}
	if (!(k = idx_chain_get(idx, in, r->chunk)))
		return -ENOMEM;
	if (r->type == JR_CHUNK_PART) {
		chunk_set_state(in, r->chunk, CHUNK_HOT_DIRTY);
		return 0;
	}
	struct chain_rec *o = &k->rec[k->nrec++];
	o->loc = r->loc;
	memcpy(o->bits, r->value, r->value_len);
	ch->gen = r->loc.gen;
	return 0;
}

int idx_replay(struct index *idx, const struct jrec *r)
{
	struct inode *in, *p;
	struct dirent_node *d;
	char name[256];
	int ret = 0;

	switch (r->type) {
	case JR_META:
		if (r->next_ino > idx->next_ino)
			idx->next_ino = r->next_ino;
		return 1;
	case JR_INODE:
		in = idx_ino_find(idx, r->ino);
		if (in && (in->mode & S_IFMT) != (r->attr.mode & S_IFMT))
			return 0; /* never happens: numbers are not reused */
		if (!in && !(in = replay_inode(idx, r->ino, r->attr.mode)))
			return -ENOMEM;
		idx_set_mode_locked(in, r->attr.mode);
		in->uid = r->attr.uid;
		in->gid = r->attr.gid;
		if (idx_is_dev(in))
			in->rdev_ = (uint32_t)r->attr.rdev;
		in->size = r->attr.size;
		in->atime = r->attr.atime_ns;
		in->mtime = r->attr.mtime_ns;
		in->ctime = r->attr.ctime_ns;
		if (S_ISLNK(idx_type(in)) && r->name_len && !in->symlink_) {
			if (!(in->symlink_ = strndup(r->name, r->name_len)))
				return -ENOMEM;
		}
		return 0;
	case JR_LINK:
	case JR_UNLINK:
		memcpy(name, r->name, r->name_len);
		name[r->name_len] = '\0';
		d = idx_dent_find(idx, r->parent, name);
		if (r->type == JR_UNLINK) {
			if (d && (p = idx_ino_find(idx, r->parent)))
				idx_dent_del(idx, p, d);
			return 0;
		}
		/* a name in a directory that is gone by the end: harmless to skip */
		if (!(p = idx_ino_find(idx, r->parent)) || !idx_dir(p) || !idx_ino_find(idx, r->ino)) {
			anomaly(idx, IDX_AN_LINK_SKIPPED, r, r->ino, r->parent, name);
			return 0;
		}
		if (d)
			d->ino = r->ino;
		else
			ret = idx_dent_add(idx, p, name, r->ino);
		return ret;
	case JR_XATTR_SET:
	case JR_XATTR_DEL:
		/* idx->jrnl is not set yet: nothing is journaled again */
		if (!(in = idx_ino_find(idx, r->ino))) {
			anomaly(idx, IDX_AN_NO_INODE, r, r->ino, 0, NULL);
			return 0;
		}
		memcpy(name, r->name, r->name_len);
		name[r->name_len] = '\0';
		{
			/* the INODE records carry ctime: replaying must not touch it */
			int64_t ct = in->ctime;
			int ret2 = 0;
			if (r->type == JR_XATTR_SET)
				ret2 = idx_xattr_set(idx, in, name, r->value, r->value_len, 0);
			else
				idx_xattr_remove(idx, in, name); /* -ENODATA is fine */
			in->ctime = ct;
			return ret2;
		}
	case JR_CHUNK_LOC:
	case JR_CHUNK_OVL:
	case JR_CHUNK_PART:
	case JR_CHUNK_DIRTY:
	case JR_CHUNK_ABSENT: {
		struct chunk *ch;
		if (!(in = idx_ino_find(idx, r->ino))) {
			anomaly(idx, IDX_AN_NO_INODE, r, r->ino, 0, NULL);
			return 0;
		}
		if (!S_ISREG(idx_type(in))) {
			if (r->type != JR_CHUNK_ABSENT)
				anomaly(idx, IDX_AN_NOT_FILE, r, r->ino, 0, NULL);
			return 0;
		}
		if (r->type != JR_CHUNK_ABSENT && !jrnl_rec_fits(r, idx->chunk_size)) {
			/* the decoder bounds what it reads; this bounds every caller */
			anomaly(idx, IDX_AN_CHUNK_RANGE, r, r->ino, 0, NULL);
			return 0;
		}
		if (r->type == JR_CHUNK_ABSENT) {
			for (uint64_t c = r->chunk; c < in->nchunks && c - r->chunk < r->count; c++) {
				idx_chain_free(&in->chunks[c]);
				memset(&in->chunks[c], 0, sizeof(in->chunks[c]));
			}
			return 0;
		}
		if ((ret = idx_chunks_reserve(in, r->chunk + 1)) < 0)
			return ret;
		ch = &in->chunks[r->chunk];
		if (r->type == JR_CHUNK_OVL || r->type == JR_CHUNK_PART)
			return replay_chain(idx, in, r);
		idx_chain_free(ch);
		memset(ch, 0, sizeof(*ch));
		if (r->type == JR_CHUNK_DIRTY) {
			chunk_set_state(in, r->chunk, CHUNK_HOT_DIRTY);
		} else {
			chunk_set_state(in, r->chunk, CHUNK_COLD);
			ch->loc = r->loc;
			ch->gen = r->loc.gen;
		}
		return 0;
	}
	case JR_EXTENT:
	case JR_EXTENT_CRC:
		return replay_ext(idx, r);
	default:
		return 1;
	}
}

/* marks during idx_replay_finish */
#define MARK_NONE 0
#define MARK_REACHED 1
#define MARK_KEPT 3 /* unreachable, kept by the anomaly hook */

/* Unreachable inodes: count their names, ask the hook whether to keep them. */
static void finish_unreachable(struct index *idx, struct inode *root)
{
	struct inode *in;
	for (uint64_t b = 0; b < idx->dtab_size; b++)
		for (struct dirent_node *d = idx->dtab[b]; d; d = d->hash_next) {
			struct inode *c = idx_ino_find(idx, d->ino);
			if (c && c->mark == MARK_NONE && idx_ino_find(idx, d->parent))
				c->nlink++; /* a name count for now; reset below */
		}
	for (in = idx_inode_next(idx, NULL); in; in = idx_inode_next(idx, in)) {
		struct idx_anomaly a = {.kind = IDX_AN_UNREACHABLE,
					.ino = in->ino,
					.names = in->nlink - (idx_dir(in) ? 2 : 0),
					.is_dir = idx_dir(in) != NULL};
		if (in->mark != MARK_NONE || in == root)
			continue;
		if (idx->anomaly(idx->anomaly_arg, &a))
			in->mark = MARK_KEPT;
	}
}

uint64_t idx_replay_finish(struct index *idx)
{
	struct inode *in, *next, *root = idx_ino_find(idx, IDX_ROOT_INO);
	struct inode **stack = NULL;
	size_t sp = 0, cap = 0;
	uint64_t dropped = 0;

	for (in = idx_inode_next(idx, NULL); in; in = idx_inode_next(idx, in)) {
		in->nlink = idx_dir(in) ? 2 : 0;
		in->mark = MARK_NONE;
	}
	/* walk from the root: only names in reachable directories count */
	root->mark = MARK_REACHED;
	idx_dir(root)->parent = IDX_ROOT_INO;
	if ((stack = malloc(sizeof(*stack) * (cap = 64))))
		stack[sp++] = root;
	while (sp > 0) {
		struct inode *dir = stack[--sp];
		for (uint64_t i = 0; i < idx_dir(dir)->n; i++) {
			struct dirent_node *d = dir_ent(idx_dir(dir), i);
			struct inode *c;
			if (!d || !(c = idx_ino_find(idx, d->ino)))
				continue;
			if (idx_dir(c)) {
				if (c->mark || c == root)
					continue; /* a second name for a directory: ignored */
				idx_dir(c)->parent = dir->ino;
				dir->nlink++;
				if (sp == cap) {
					struct inode **ns = realloc(stack, sizeof(*ns) * (cap *= 2));
					if (!ns)
						continue;
					stack = ns;
				}
				stack[sp++] = c;
			} else {
				c->nlink++;
			}
			c->mark = MARK_REACHED;
		}
	}
	free(stack);
	if (idx->anomaly)
		finish_unreachable(idx, root);
	/* names whose target or directory is gone (a kept directory keeps its
	 * names; a kept directory's `parent` means nothing) */
	for (uint64_t b = 0; b < idx->dtab_size; b++) {
		struct dirent_node *d = idx->dtab[b], *dn;
		for (; d; d = dn) {
			struct inode *p = idx_ino_find(idx, d->parent), *c = idx_ino_find(idx, d->ino);
			enum idx_anomaly_kind kind = 0;
			dn = d->hash_next;
			if (!c)
				kind = IDX_AN_NAME_DANGLING;
			else if (!p || p->mark == MARK_NONE)
				kind = IDX_AN_NAME_ORPHAN;
			else if (c->mark == MARK_NONE)
				kind = IDX_AN_NAME_DANGLING; /* its inode is dropped below */
			else if (idx_dir(c) && c->mark == MARK_REACHED && idx_dir(c)->parent != d->parent)
				kind = IDX_AN_DIR_ALIAS;
			if (!kind)
				continue;
			anomaly(idx, kind, NULL, d->ino, d->parent, d->name);
			idx_dent_del(idx, p && idx_dir(p) ? p : root, d);
		}
	}
	for (in = idx_inode_next(idx, NULL); in; in = next) {
		next = idx_inode_next(idx, in);
		if (in->mark == MARK_REACHED || in == root)
			continue;
		in->nlink = 0;
		if (in->mark == MARK_KEPT)
			continue;
		if (idx_inode_maybe_unhook(idx, in)) {
			idx_inode_destroy(idx, in);
			dropped++;
		}
	}
	for (in = idx_inode_next(idx, NULL); in; in = idx_inode_next(idx, in))
		in->mark = MARK_NONE;
	return dropped;
}

static int emit_one(void *e, const struct jrec *r)
{
	return jrnl_emit(e, r);
}

static int snap_inode(struct jrnl_emitter *e, struct inode *in)
{
	struct jrec r;
	int ret;
	idx_inode_lock(in);
	idx_attr_rec_locked(in, &r);
	ret = jrnl_emit(e, &r);
	for (struct xattr *x = in->xattrs; x && !ret; x = x->next) {
		struct jrec xr = {.type = JR_XATTR_SET,
				  .ino = in->ino,
				  .name = x->name,
				  .name_len = (uint32_t)strlen(x->name),
				  .value = x->value,
				  .value_len = (uint32_t)x->size};
		ret = jrnl_emit(e, &xr);
	}
	for (uint64_t c = 0; c < in->nchunks && !ret; c++) {
		struct jrec cr[CHAIN_MAX + 2];
		int n;
		if (in->chunks[c].state == CHUNK_ABSENT)
			continue;
		n = idx_chunk_recs_locked(in, c, cr);
		for (int i = 0; i < n && !ret; i++)
			ret = jrnl_emit(e, &cr[i]);
	}
	if (!ret)
		ret = idx_ext_recs_locked(in, emit_one, e);
	idx_inode_unlock(in);
	return ret;
}

int idx_snapshot(struct index *idx, struct jrnl_emitter *e)
{
	struct inode *in;
	int ret = 0;

	pthread_mutex_lock(&idx->lock);
	for (in = idx_inode_next(idx, NULL); in && !ret; in = idx_inode_next(idx, in))
		if (in->nlink > 0 || in->ino == IDX_ROOT_INO)
			ret = snap_inode(e, in);
	for (in = idx_inode_next(idx, NULL); in && !ret; in = idx_inode_next(idx, in)) {
		if (!idx_dir(in) || in->nlink == 0)
			continue;
		for (uint64_t i = 0; i < idx_dir(in)->n && !ret; i++) {
			struct dirent_node *d = dir_ent(idx_dir(in), i);
			struct jrec r;
			if (!d)
				continue;
			idx_name_rec(&r, JR_LINK, d->parent, d->name, d->ino);
			ret = jrnl_emit(e, &r);
		}
	}
	pthread_mutex_unlock(&idx->lock);
	return ret;
}

/* Path of a name: "/" + names of the directories up to the root. */
static void dent_path(struct index *idx, struct dirent_node *d, char *buf, size_t len)
{
	char tmp[4096];
	size_t pos = sizeof(tmp) - 1;
	tmp[pos] = '\0';
	for (int depth = 0; d && depth < 256; depth++) {
		size_t nl = strlen(d->name);
		struct inode *p;
		if (nl + 1 > pos)
			break;
		pos -= nl;
		memcpy(tmp + pos, d->name, nl);
		tmp[--pos] = '/';
		if (d->parent == IDX_ROOT_INO || !(p = idx_ino_find(idx, d->parent)) || !idx_dir(p))
			break;
		/* a directory's own name: the entry in its parent pointing to it */
		struct inode *gp = idx_ino_find(idx, idx_dir(p)->parent);
		struct dirent_node *up = NULL;
		for (uint64_t i = 0; gp && idx_dir(gp) && i < idx_dir(gp)->n; i++)
			if (dir_ent(idx_dir(gp), i) && dir_ent(idx_dir(gp), i)->ino == p->ino) {
				up = dir_ent(idx_dir(gp), i);
				break;
			}
		d = up;
	}
	snprintf(buf, len, "%s", tmp + pos);
}

/* /lost+found (made 0700, owned as / is, when missing): its number, or 0. */
static uint64_t lost_found(struct index *idx)
{
	struct inode *root = idx_get(idx, IDX_ROOT_INO), *lf = NULL;
	struct idx_new_node nn = {.mode = S_IFDIR | 0700};
	uint64_t ino = 0;

	if (root) {
		nn.uid = root->uid;
		nn.gid = root->gid;
		idx_put(idx, root);
	}
	if (idx_lookup(idx, IDX_ROOT_INO, "lost+found", 0, &lf) == 0) {
		ino = idx_dir(lf) ? lf->ino : 0;
		idx_put(idx, lf);
	} else if (idx_create(idx, IDX_ROOT_INO, "lost+found", &nn, &lf) == 0) {
		ino = lf->ino;
		idx_forget(idx, ino, 1); /* no kernel holds it yet */
		idx_put(idx, lf);
	}
	return ino;
}

uint64_t idx_remove_marked(struct index *idx,
			   void (*report)(void *arg, const char *path, struct inode *in,
					  const char *moved),
			   void *arg)
{
	struct {
		uint64_t parent, ino;
		char *name;
		int move;
	} *v = NULL;
	size_t n = 0, cap = 0;
	uint64_t removed = 0, lf = 0;
	char path[4096], moved[64];

	pthread_mutex_lock(&idx->lock);
	for (uint64_t b = 0; b < idx->dtab_size; b++)
		for (struct dirent_node *d = idx->dtab[b]; d; d = d->hash_next) {
			struct inode *c = idx_ino_find(idx, d->ino);
			int move = 0;
			if (!c || (c->mark != IDX_MARK_LOST && c->mark != IDX_MARK_DAMAGED))
				continue;
			if (n == cap) {
				void *nv = realloc(v, sizeof(*v) * (cap = cap ? cap * 2 : 16));
				if (!nv)
					continue;
				v = nv;
			}
			/* a damaged file's first name found moves, the others go */
			if (c->mark == IDX_MARK_DAMAGED) {
				move = 1;
				for (size_t i = 0; i < n && move; i++)
					move = v[i].ino != c->ino;
			}
			dent_path(idx, d, path, sizeof(path));
			snprintf(moved, sizeof(moved), "/lost+found/#%llu", (unsigned long long)c->ino);
			if (report)
				report(arg, path, c, move ? moved : NULL);
			v[n].parent = d->parent;
			v[n].ino = c->ino;
			v[n].name = strdup(d->name);
			v[n].move = move;
			n++;
		}
	pthread_mutex_unlock(&idx->lock);
	for (size_t i = 0; i < n; i++) {
		if (v[i].move && !lf)
			lf = lost_found(idx);
		snprintf(moved, sizeof(moved), "#%llu", (unsigned long long)v[i].ino);
		if (v[i].name && (v[i].move && lf ? idx_rename(idx, v[i].parent, v[i].name, lf, moved, 0)
						  : idx_unlink(idx, v[i].parent, v[i].name)) == 0)
			removed++;
		free(v[i].name);
	}
	free(v);
	return removed;
}
