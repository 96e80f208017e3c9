/*
 * index_names.c — the POSIX namespace operations of the index: lookup,
 * create, link, unlink/rmdir, rename (RENAME_NOREPLACE / RENAME_EXCHANGE),
 * readdir. Guarantees: the errors POSIX asks for (EEXIST, ENOTEMPTY, EISDIR,
 * ...); every change journaled (its names as one record, then the
 * attributes it moved); a failed allocation changes nothing.
 * Threading: each takes idx->lock, and under it one inode lock at a time.
 */
#include "index/index_i.h"
#include "index/index.h"

#include <errno.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>

int idx_lookup(struct index *idx, uint64_t parent, const char *name, int kernel_ref,
	       struct inode **out)
{
	struct inode *p, *in = NULL;
	struct dirent_node *d;
	int ret = 0;

	pthread_mutex_lock(&idx->lock);
	p = idx_ino_find(idx, parent);
	if (!p) {
		ret = -ENOENT;
		goto out;
	}
	/* "." of any inode: a lookup by inode number (FUSE export support:
	 * the kernel opening a file handle whose inode it no longer holds) */
	if (strcmp(name, ".") == 0) {
		/* a removed file or directory has no handle: the kernel may
		 * not have sent its FORGET yet, so it is still here (ENOENT
		 * is the kernel's ESTALE, as a local filesystem answers) */
		if (p->nlink == 0 && p->ino != IDX_ROOT_INO) {
			ret = -ENOENT;
			goto out;
		}
		in = p;
		goto found;
	}
	if (!idx_dir(p)) {
		ret = -ENOTDIR;
		goto out;
	}
	if (strlen(name) > 255) {
		ret = -ENAMETOOLONG;
		goto out;
	}
	if (strcmp(name, "..") == 0)
		in = idx_ino_find(idx, idx_dir(p)->parent);
	else if ((d = idx_dent_find(idx, parent, name)))
		in = idx_ino_find(idx, d->ino);
	if (!in) {
		ret = -ENOENT;
		goto out;
	}
found:
	in->refs++;
	if (kernel_ref)
		in->nlookup++;
	*out = in;
out:
	pthread_mutex_unlock(&idx->lock);
	return ret;
}

static void parent_changed(struct inode *p)
{
	idx_inode_lock(p);
	idx_touch(&p->mtime);
	p->ctime = p->mtime;
	idx_inode_unlock(p);
}

static void nlink_add(struct inode *in, int delta)
{
	idx_inode_lock(in);
	in->nlink += delta;
	idx_touch(&in->ctime);
	idx_inode_unlock(in);
}

static int check_name(const char *name)
{
	size_t len = strlen(name);
	if (len == 0)
		return -ENOENT;
	if (len > 255)
		return -ENAMETOOLONG;
	if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return -EEXIST;
	return 0;
}

static struct inode *dir_of(struct index *idx, uint64_t ino, int *err)
{
	struct inode *p = idx_ino_find(idx, ino);
	if (!p)
		*err = -ENOENT;
	else if (!idx_dir(p))
		*err = -ENOTDIR;
	else if (p->nlink == 0)
		*err = -ENOENT; /* removed directory */
	else
		return p;
	return NULL;
}

int idx_create(struct index *idx, uint64_t parent, const char *name, const struct idx_new_node *nn,
	       struct inode **out)
{
	struct inode *p, *in;
	int ret = 0;

	pthread_mutex_lock(&idx->lock);
	if ((ret = idx_jcheck(idx)) < 0 || !(p = dir_of(idx, parent, &ret)))
		goto out;
	if ((ret = check_name(name)) < 0)
		goto out;
	if (idx_dent_find(idx, parent, name)) {
		ret = -EEXIST;
		goto out;
	}
	if (!(in = idx_inode_alloc(idx, nn))) {
		ret = -ENOMEM;
		goto out;
	}
	if ((ret = idx_inode_insert(idx, in)) < 0 || (ret = idx_dent_add(idx, p, name, in->ino)) < 0) {
		/* idx_inode_insert failure leaves nothing behind; undo insert otherwise */
		if (idx_ino_find(idx, in->ino))
			idx_inode_maybe_unhook(idx, in);
		idx_inode_destroy(idx, in);
		goto out;
	}
	in->nlink = idx_dir(in) ? 2 : 1;
	if (idx_dir(in)) {
		idx_dir(in)->parent = parent;
		nlink_add(p, 1);
	}
	parent_changed(p);
	in->refs = 1;
	in->nlookup = 1;
	*out = in;
	if (idx->jrnl) {
		/* the new inode is not reachable yet: its record can be built here */
		struct jrec rs[2];
		idx_attr_rec(in, &rs[0]);
		idx_name_rec(&rs[1], JR_LINK, parent, name, in->ino);
		if ((ret = idx_jlog(idx, rs, 2)) == 0)
			ret = idx_journal_attr(idx, p);
	}
out:
	pthread_mutex_unlock(&idx->lock);
	return ret;
}

int idx_tmpfile(struct index *idx, uint64_t parent, const struct idx_new_node *nn,
		struct inode **out)
{
	struct inode *p, *in;
	int ret = 0;

	pthread_mutex_lock(&idx->lock);
	if ((ret = idx_jcheck(idx)) < 0 || !(p = dir_of(idx, parent, &ret)))
		goto out;
	if (!(in = idx_inode_alloc(idx, nn))) {
		ret = -ENOMEM;
		goto out;
	}
	if ((ret = idx_inode_insert(idx, in)) < 0) {
		idx_inode_destroy(idx, in);
		goto out;
	}
	in->nlink = 0; /* no name: gone with its last reference, or linked */
	in->refs = 1;
	in->nlookup = 1;
	*out = in;
	if (idx->jrnl) {
		/* unreachable until a link: a replay drops it like an orphan */
		struct jrec r;
		idx_attr_rec(in, &r);
		ret = idx_jlog(idx, &r, 1);
	}
out:
	pthread_mutex_unlock(&idx->lock);
	return ret;
}

/* Every record of in (attributes, xattrs, chunks), journaled before an
 * O_TMPFILE file gets its first name: a checkpoint taken while it had none
 * left it out (idx_snapshot keeps what a name reaches), and its name would
 * otherwise point at nothing after a replay from that checkpoint.
 * idx->lock held. */
static int jlog_whole_inode(struct index *idx, struct inode *in)
{
	struct jrec r;
	int ret;
	idx_inode_lock(in);
	idx_attr_rec_locked(in, &r);
	ret = idx_jlog(idx, &r, 1);
	for (struct xattr *x = in->xattrs; x && !ret; x = x->next) {
		struct jrec xr = {.type = JR_XATTR_SET,
				  .ino = in->ino,
				  .name = x->name,
				  .name_len = (uint32_t)strlen(x->name),
				  .value = x->value,
				  .value_len = (uint32_t)x->size};
		ret = idx_jlog(idx, &xr, 1);
	}
	for (uint64_t c = 0; c < in->nchunks && !ret; c++) {
		struct jrec cr[CHAIN_MAX + 2];
		int n;
		if (in->chunks[c].state == CHUNK_ABSENT)
			continue;
		n = idx_chunk_recs_locked(in, c, cr);
		ret = idx_jlog(idx, cr, n);
	}
	if (!ret)
		ret = idx_journal_ext_locked(idx, in, 0);
	idx_inode_unlock(in);
	return ret;
}

int idx_link(struct index *idx, uint64_t ino, uint64_t newparent, const char *newname,
	     struct inode **out)
{
	int first_name;
	struct inode *p, *in;
	int ret = 0;

	pthread_mutex_lock(&idx->lock);
	if ((ret = idx_jcheck(idx)) < 0 || !(p = dir_of(idx, newparent, &ret)))
		goto out;
	if (!(in = idx_ino_find(idx, ino))) {
		ret = -ENOENT;
		goto out;
	}
	if (idx_dir(in)) {
		ret = -EPERM;
		goto out;
	}
	if ((ret = check_name(newname)) < 0)
		goto out;
	if (idx_dent_find(idx, newparent, newname)) {
		ret = -EEXIST;
		goto out;
	}
	if ((ret = idx_dent_add(idx, p, newname, ino)) < 0)
		goto out;
	first_name = in->nlink == 0;
	nlink_add(in, 1);
	parent_changed(p);
	in->refs++;
	in->nlookup++;
	*out = in;
	if (idx->jrnl) {
		struct jrec r;
		idx_name_rec(&r, JR_LINK, newparent, newname, ino);
		if (first_name && (ret = jlog_whole_inode(idx, in)) < 0)
			goto out;
		if ((ret = idx_jlog(idx, &r, 1)) == 0 && (ret = idx_journal_attr(idx, in)) == 0)
			ret = idx_journal_attr(idx, p);
	}
out:
	pthread_mutex_unlock(&idx->lock);
	return ret;
}

static int do_remove(struct index *idx, uint64_t parent, const char *name, int want_dir)
{
	struct inode *p, *in, *dead = NULL;
	struct dirent_node *d;
	int ret = 0;

	pthread_mutex_lock(&idx->lock);
	if ((ret = idx_jcheck(idx)) < 0 || !(p = dir_of(idx, parent, &ret)))
		goto out;
	if (want_dir && strcmp(name, ".") == 0) {
		ret = -EINVAL;
		goto out;
	}
	if (want_dir && strcmp(name, "..") == 0) {
		ret = -ENOTEMPTY;
		goto out;
	}
	if (!(d = idx_dent_find(idx, parent, name)) || !(in = idx_ino_find(idx, d->ino))) {
		ret = -ENOENT;
		goto out;
	}
	if (want_dir && !idx_dir(in)) {
		ret = -ENOTDIR;
		goto out;
	}
	if (!want_dir && idx_dir(in)) {
		ret = -EISDIR;
		goto out;
	}
	if (idx_dir(in) && idx_dir(in)->live > 0) {
		ret = -ENOTEMPTY;
		goto out;
	}
	idx_dent_del(idx, p, d);
	if (idx_dir(in)) {
		nlink_add(in, -2);
		nlink_add(p, -1);
	} else {
		nlink_add(in, -1);
	}
	parent_changed(p);
	if (idx->jrnl) {
		struct jrec r;
		idx_name_rec(&r, JR_UNLINK, parent, name, 0);
		if ((ret = idx_jlog(idx, &r, 1)) == 0)
			ret = idx_journal_attr(idx, p);
		if (ret == 0 && in->nlink > 0)
			ret = idx_journal_attr(idx, in); /* other names remain: ctime moved */
	}
	dead = idx_inode_maybe_unhook(idx, in);
out:
	pthread_mutex_unlock(&idx->lock);
	idx_inode_release(idx, dead);
	return ret;
}

int idx_unlink(struct index *idx, uint64_t parent, const char *name)
{
	return do_remove(idx, parent, name, 0);
}

int idx_rmdir(struct index *idx, uint64_t parent, const char *name)
{
	return do_remove(idx, parent, name, 1);
}

/* A rename's names as one record (both or neither), then the attributes of
 * the inodes it touched, each built and appended under its own lock so a
 * racing write's newer size is never followed by an older one. */
static int journal_renamed(struct index *idx, const struct jrec *names, int n, struct inode *src,
			   struct inode *dst, struct inode *p, struct inode *np)
{
	int ret = idx_jlog(idx, names, n);
	if (ret == 0)
		ret = idx_journal_attr(idx, src);
	if (ret == 0 && dst)
		ret = idx_journal_attr(idx, dst);
	if (ret == 0)
		ret = idx_journal_attr(idx, p);
	if (ret == 0 && np != p)
		ret = idx_journal_attr(idx, np);
	return ret;
}

/* Is `anc` an ancestor of (or equal to) directory `ino`? */
static int is_ancestor(struct index *idx, uint64_t anc, uint64_t ino)
{
	while (1) {
		struct inode *in;
		if (ino == anc)
			return 1;
		if (ino == IDX_ROOT_INO)
			return 0;
		in = idx_ino_find(idx, ino);
		if (!in || !idx_dir(in))
			return 0;
		ino = idx_dir(in)->parent;
	}
}

int idx_rename(struct index *idx, uint64_t parent, const char *name, uint64_t newparent,
	       const char *newname, unsigned flags)
{
	struct inode *p, *np, *src, *dst = NULL, *dead = NULL;
	struct dirent_node *sd, *dd;
	int ret = 0;

	if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE))
		return -EINVAL;
	if ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE))
		return -EINVAL;
	pthread_mutex_lock(&idx->lock);
	if ((ret = idx_jcheck(idx)) < 0 || !(p = dir_of(idx, parent, &ret)) ||
	    !(np = dir_of(idx, newparent, &ret)))
		goto out;
	if (!(sd = idx_dent_find(idx, parent, name)) || !(src = idx_ino_find(idx, sd->ino))) {
		ret = -ENOENT;
		goto out;
	}
	if ((ret = check_name(newname)) < 0) {
		ret = -EBUSY;
		goto out;
	}
	dd = idx_dent_find(idx, newparent, newname);
	if (dd)
		dst = idx_ino_find(idx, dd->ino);
	if ((flags & RENAME_EXCHANGE) && !dst) {
		ret = -ENOENT;
		goto out;
	}
	if (dst && (flags & RENAME_NOREPLACE)) {
		ret = -EEXIST;
		goto out;
	}
	if (dst == src)
		goto out; /* same inode: POSIX says do nothing */
	/* moving a directory into its own subtree */
	if (idx_dir(src) && newparent != parent && is_ancestor(idx, src->ino, newparent)) {
		ret = -EINVAL;
		goto out;
	}
	if ((flags & RENAME_EXCHANGE) && idx_dir(dst) && newparent != parent &&
	    is_ancestor(idx, dst->ino, parent)) {
		ret = -EINVAL;
		goto out;
	}
	if (flags & RENAME_EXCHANGE) {
		sd->ino = dst->ino;
		dd->ino = src->ino;
		if (idx_dir(src))
			idx_dir(src)->parent = newparent;
		if (idx_dir(dst))
			idx_dir(dst)->parent = parent;
		if (idx_dir(src) && !idx_dir(dst)) {
			nlink_add(p, -1);
			nlink_add(np, 1);
		} else if (!idx_dir(src) && idx_dir(dst)) {
			nlink_add(p, 1);
			nlink_add(np, -1);
		}
		nlink_add(src, 0);
		nlink_add(dst, 0);
		parent_changed(p);
		parent_changed(np);
		if (idx->jrnl) {
			struct jrec rs[2];
			idx_name_rec(&rs[0], JR_LINK, parent, name, dst->ino);
			idx_name_rec(&rs[1], JR_LINK, newparent, newname, src->ino);
			ret = journal_renamed(idx, rs, 2, src, dst, p, np);
		}
		goto out;
	}
	if (dst) {
		if (idx_dir(src) && !idx_dir(dst)) {
			ret = -ENOTDIR;
			goto out;
		}
		if (!idx_dir(src) && idx_dir(dst)) {
			ret = -EISDIR;
			goto out;
		}
		if (idx_dir(dst) && idx_dir(dst)->live > 0) {
			ret = -ENOTEMPTY;
			goto out;
		}
	}
	/* add the new name first so an allocation failure changes nothing */
	if (dd) {
		dd->ino = src->ino;
	} else if ((ret = idx_dent_add(idx, np, newname, src->ino)) < 0) {
		goto out;
	}
	/* sd may have moved? no: idx_dent_add never frees nodes; dir_remove only clears slots */
	idx_dent_del(idx, p, sd);
	if (dst) {
		if (idx_dir(dst)) {
			nlink_add(dst, -2);
			nlink_add(np, -1);
		} else {
			nlink_add(dst, -1);
		}
		dead = idx_inode_maybe_unhook(idx, dst);
	}
	if (idx_dir(src) && parent != newparent) {
		idx_dir(src)->parent = newparent;
		nlink_add(p, -1);
		nlink_add(np, 1);
	}
	nlink_add(src, 0); /* ctime */
	parent_changed(p);
	if (np != p)
		parent_changed(np);
	if (idx->jrnl) {
		struct jrec rs[2];
		idx_name_rec(&rs[0], JR_LINK, newparent, newname, src->ino);
		idx_name_rec(&rs[1], JR_UNLINK, parent, name, 0);
		ret = journal_renamed(idx, rs, 2, src, NULL, p, np);
	}
out:
	pthread_mutex_unlock(&idx->lock);
	idx_inode_release(idx, dead);
	return ret;
}

int idx_readdir(struct index *idx, uint64_t dir, uint64_t off, idx_dirent_fn fn, void *arg)
{
	struct inode *p, *c;
	uint64_t i;
	int ret = 0;

	pthread_mutex_lock(&idx->lock);
	p = idx_ino_find(idx, dir);
	if (!p) {
		ret = -ENOENT;
		goto out;
	}
	if (!idx_dir(p)) {
		ret = -ENOTDIR;
		goto out;
	}
	if (off < 1 && fn(arg, ".", p, 1))
		goto out;
	if (off < 2 && (c = idx_ino_find(idx, idx_dir(p)->parent)) && fn(arg, "..", c, 2))
		goto out;
	for (i = idx_dir_search(idx_dir(p), off); i < idx_dir(p)->n; i++) {
		struct dirent_node *d = dir_ent(idx_dir(p), i);
		if (!d || !(c = idx_ino_find(idx, d->ino)))
			continue;
		if (fn(arg, d->name, c, d->cookie))
			break;
	}
out:
	pthread_mutex_unlock(&idx->lock);
	return ret;
}

uint64_t idx_dir_next_cookie(struct index *idx, uint64_t dir)
{
	struct inode *p;
	uint64_t n = 0;
	pthread_mutex_lock(&idx->lock);
	p = idx_ino_find(idx, dir);
	if (p && idx_dir(p))
		n = idx_dir(p)->next_cookie;
	pthread_mutex_unlock(&idx->lock);
	return n;
}

uint64_t idx_dir_entries(struct index *idx, uint64_t dir)
{
	struct inode *p;
	uint64_t n = 0;
	pthread_mutex_lock(&idx->lock);
	p = idx_ino_find(idx, dir);
	if (p && idx_dir(p))
		n = idx_dir(p)->live;
	pthread_mutex_unlock(&idx->lock);
	return n;
}
