/* ops_entry.c — FUSE ops on names and attributes: thin wrappers over index/. */
#include "fs/acl.h"
#include "fs/fs_i.h"

#include <errno.h>
#include <linux/fs.h> /* RENAME_* */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

void fs_fill_entry(struct spw *s, struct inode *in, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = in->ino;
	e->generation = 0; /* inode numbers are never reused */
	e->attr_timeout = s->attr_timeout;
	e->entry_timeout = s->entry_timeout;
	fs_stat(s, in, &e->attr);
}

void fs_stat(struct spw *s, struct inode *in, struct stat *st)
{
	/* passthrough writers changed the file behind our back: every reply
	 * that carries attributes says what they wrote, or the kernel would
	 * take a stale size over the one it knows */
	tier_refresh(s->tier, in);
	idx_stat(s->idx, in, st);
}

static void reply_entry_put(fuse_req_t req, struct inode *in)
{
	struct spw *s = spw_of(req);
	struct fuse_entry_param e;
	fs_fill_entry(s, in, &e);
	idx_put(s->idx, in);
	fuse_reply_entry(req, &e);
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct spw *s = spw_of(req);
	struct inode *in;
	int ret = idx_lookup(s->idx, parent, name, 1, &in);
	if (ret == -ENOENT) {
		/* negative entry: we are the only writer, the kernel may cache it */
		struct fuse_entry_param e = {.ino = 0, .entry_timeout = s->entry_timeout};
		fuse_reply_entry(req, &e);
		return;
	}
	if (ret < 0) {
		fuse_reply_err(req, -ret);
		return;
	}
	reply_entry_put(req, in);
}

void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	idx_forget(spw_of(req)->idx, ino, nlookup);
	fuse_reply_none(req);
}

void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	struct spw *s = spw_of(req);
	for (size_t i = 0; i < count; i++)
		idx_forget(s->idx, forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
}

void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct spw *s = spw_of(req);
	struct inode *in = idx_get(s->idx, ino);
	struct stat st;
	if (!in) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	fs_stat(s, in, &st);
	idx_put(s->idx, in);
	fuse_reply_attr(req, &st, s->attr_timeout);
}

int fs_req_in_group(fuse_req_t req, gid_t gid)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	gid_t groups[64];
	int n;

	if (ctx->gid == gid)
		return 1;
	n = fuse_req_getgroups(req, 64, groups);
	for (int i = 0; i < n && i < 64; i++)
		if (groups[i] == gid)
			return 1;
	return 0;
}

/* A mode set by a caller outside the file's group and without CAP_FSETID
 * (taken as root) loses set-group-ID, as the VFS's setattr_copy does: the
 * kernel leaves that to us for the mode it sets when a write or truncate
 * kills set-user-ID (xfstests generic/683, 684). */
static int mode_keeps_sgid(fuse_req_t req, struct inode *in, struct stat *attr, int valid)
{
	gid_t gid = (valid & FUSE_SET_ATTR_GID) ? attr->st_gid : in->gid;
	if (!(valid & FUSE_SET_ATTR_MODE) || !(attr->st_mode & S_ISGID))
		return 1;
	return fuse_req_ctx(req)->uid == 0 || fs_req_in_group(req, gid);
}

static int do_setattr(struct spw *s, struct inode *in, struct stat *attr, int valid)
{
	int64_t now;
	int ret;

	if ((ret = idx_check_writable(s->idx)) < 0)
		return ret;
	if (valid & FUSE_SET_ATTR_SIZE) {
		if (idx_dir(in))
			return -EISDIR;
		if (!S_ISREG(idx_type(in)))
			return -EINVAL;
		if ((uint64_t)attr->st_size > JRNL_MAX_FILE_SIZE)
			return attr->st_size < 0 ? -EINVAL : -EFBIG; /* see op_write_buf */
		if ((ret = tier_truncate(s->tier, in, (uint64_t)attr->st_size)) < 0)
			return ret;
	}
	idx_touch(&now);
	idx_inode_lock(in);
	if (valid & FUSE_SET_ATTR_MODE)
		idx_set_mode_locked(in, (in->mode & S_IFMT) | (attr->st_mode & 07777));
	if (valid & FUSE_SET_ATTR_UID)
		in->uid = attr->st_uid;
	if (valid & FUSE_SET_ATTR_GID)
		in->gid = attr->st_gid;
	if ((valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) && !(valid & FUSE_SET_ATTR_MODE) &&
	    !idx_dir(in))
		idx_set_mode_locked(in,
				    in->mode & ~(S_ISUID | ((in->mode & S_IXGRP) ? S_ISGID : 0)));
	if (valid & FUSE_SET_ATTR_ATIME_NOW)
		in->atime = now;
	else if (valid & FUSE_SET_ATTR_ATIME)
		in->atime = idx_ts_ns(&attr->st_atim);
	if (valid & FUSE_SET_ATTR_MTIME_NOW)
		in->mtime = now;
	else if (valid & FUSE_SET_ATTR_MTIME)
		in->mtime = idx_ts_ns(&attr->st_mtim);
	if (valid & FUSE_SET_ATTR_CTIME)
		in->ctime = idx_ts_ns(&attr->st_ctim);
	else
		in->ctime = now;
	ret = idx_journal_attr_locked(s->idx, in);
	idx_inode_unlock(in);
	if (ret == 0 && s->acl && (valid & FUSE_SET_ATTR_MODE))
		ret = fs_acl_chmod(s, in, attr->st_mode);
	return ret;
}

void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid,
		struct fuse_file_info *fi)
{
	struct spw *s = spw_of(req);
	struct inode *in = idx_get(s->idx, ino);
	struct stat st;
	int ret;
	if (!in) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (!mode_keeps_sgid(req, in, attr, valid))
		attr->st_mode &= ~S_ISGID;
	ret = do_setattr(s, in, attr, valid);
	if (ret == 0)
		fs_stat(s, in, &st);
	idx_put(s->idx, in);
	if (ret < 0)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_attr(req, &st, s->attr_timeout);
}

void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct spw *s = spw_of(req);
	struct inode *in = idx_get(s->idx, ino);
	if (!in) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (!idx_symlink(in))
		fuse_reply_err(req, EINVAL);
	else
		fuse_reply_readlink(req, idx_symlink(in));
	idx_put(s->idx, in);
}

/* Create a node, inheriting the group of a set-group-ID parent. */
static int do_make(struct spw *s, fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		   dev_t rdev, const char *link, struct inode **out)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct idx_new_node nn = {
	    .mode = mode, .uid = ctx->uid, .gid = ctx->gid, .rdev = rdev, .symlink = link};
	void *acc = NULL, *def = NULL;
	size_t acc_len = 0, def_len = 0;
	int ret;
	struct inode *p = idx_get(s->idx, parent);
	if (p) {
		idx_inode_lock(p);
		if (p->mode & S_ISGID) {
			nn.gid = p->gid;
			if (S_ISDIR(mode))
				nn.mode |= S_ISGID;
		}
		idx_inode_unlock(p);
		idx_put(s->idx, p);
	}
	if (s->acl && !S_ISLNK(mode) &&
	    (ret = fs_acl_inherit(s, parent, ctx->umask, &nn.mode, &acc, &acc_len,
				  S_ISDIR(mode) ? &def : NULL, &def_len)) < 0)
		return ret;
	ret = idx_create(s->idx, parent, name, &nn, out);
	/* the node exists: an ACL that cannot be kept leaves it its mode,
	 * which the ACL already narrowed (no access is added by the loss) */
	if (ret == 0 && acc)
		idx_xattr_set(s->idx, *out, ACL_XATTR_ACCESS, acc, acc_len, 0);
	if (ret == 0 && def)
		idx_xattr_set(s->idx, *out, ACL_XATTR_DEFAULT, def, def_len, 0);
	free(acc);
	free(def);
	return ret;
}

static void make_reply(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev,
		       const char *link)
{
	struct spw *s = spw_of(req);
	struct inode *in;
	int ret = do_make(s, req, parent, name, mode, rdev, link, &in);
	if (ret < 0)
		fuse_reply_err(req, -ret);
	else
		reply_entry_put(req, in);
}

void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	if (!S_ISREG(mode) && !S_ISFIFO(mode) && !S_ISSOCK(mode) && !S_ISCHR(mode) &&
	    !S_ISBLK(mode)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	make_reply(req, parent, name, mode, rdev, NULL);
}

void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	make_reply(req, parent, name, S_IFDIR | (mode & 07777), 0, NULL);
}

void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	if (strlen(link) >= 4096) {
		fuse_reply_err(req, ENAMETOOLONG);
		return;
	}
	make_reply(req, parent, name, S_IFLNK | 0777, 0, link);
}

void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, -idx_unlink(spw_of(req)->idx, parent, name));
}

void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, -idx_rmdir(spw_of(req)->idx, parent, name));
}

/* RENAME_WHITEOUT (overlayfs's upper directories): the rename, then a
 * whiteout (a character device 0/0, as the VFS makes it) at the old name.
 * Two index steps: a crash between them leaves the name without its
 * whiteout. */
static int do_rename_whiteout(fuse_req_t req, fuse_ino_t parent, const char *name,
			      fuse_ino_t newparent, const char *newname, unsigned int flags)
{
	struct spw *s = spw_of(req);
	struct inode *wh;
	int ret;

	if (flags & RENAME_EXCHANGE)
		return -EINVAL;
	ret = idx_rename(s->idx, parent, name, newparent, newname, flags & ~RENAME_WHITEOUT);
	if (ret < 0)
		return ret;
	if ((ret = do_make(s, req, parent, name, S_IFCHR, makedev(0, 0), NULL, &wh)) < 0)
		return ret;
	/* the kernel makes its own entry for the whiteout: no lookup ref */
	idx_forget(s->idx, wh->ino, 1);
	idx_put(s->idx, wh);
	return 0;
}

void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
	       const char *newname, unsigned int flags)
{
	if (flags & RENAME_WHITEOUT)
		fuse_reply_err(req, -do_rename_whiteout(req, parent, name, newparent, newname, flags));
	else
		fuse_reply_err(req,
			       -idx_rename(spw_of(req)->idx, parent, name, newparent, newname, flags));
}

void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	struct inode *in;
	int ret = idx_link(spw_of(req)->idx, ino, newparent, newname, &in);
	if (ret < 0)
		fuse_reply_err(req, -ret);
	else
		reply_entry_put(req, in);
}

void op_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	struct spw *s = spw_of(req);
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct inode *in = idx_get(s->idx, ino);
	int ret = 0;
	if (!in) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	idx_inode_lock(in);
	if (mask != F_OK) {
		mode_t m = in->mode;
		int bits = ctx->uid == in->uid	 ? (m >> 6) & 7
			   : ctx->gid == in->gid ? (m >> 3) & 7
						 : m & 7;
		if (ctx->uid == 0) /* root: X needs some x bit, or a directory */
			bits = 6 | ((m & 0111) || S_ISDIR(m) ? 1 : 0);
		if ((mask & bits) != mask)
			ret = -EACCES;
	}
	idx_inode_unlock(in);
	idx_put(s->idx, in);
	fuse_reply_err(req, -ret);
}

/* Open the new inode `in` (a create's, or a tmpfile's: ret is how making
 * it went) and send the one reply. */
static void open_new_reply(fuse_req_t req, struct inode *in, int ret, struct fuse_file_info *fi)
{
	struct spw *s = spw_of(req);
	struct fuse_entry_param e;
	if (ret < 0) {
		fuse_reply_err(req, -ret);
		return;
	}
	struct spw_file *f = fs_file_new(s, in);
	/* a new file is written through the daemon (tier.h), or by the kernel
	 * into the extent it gets under pressure (tier/extent) */
	ret = f ? tier_open(s->tier, in,
			    TIER_OPEN_WRITE | TIER_OPEN_CREATE |
				(s->passthrough ? TIER_OPEN_PASSTHROUGH : 0),
			    req, &f->how)
		: -ENOMEM;
	if (ret < 0) {
		/* the inode exists; the kernel holds a lookup ref we must return */
		fs_file_free(s, f);
		idx_forget(s->idx, in->ino, 1);
		idx_put(s->idx, in);
		fuse_reply_err(req, -ret);
		return;
	}
	fi->fh = (uintptr_t)f; /* the create's internal ref now belongs to fh */
	fi->keep_cache = !f->how.backing_id;
#ifdef SPW_PASSTHROUGH
	fi->backing_id = f->how.backing_id;
#endif
	fs_fill_entry(s, in, &e);
	if (fuse_reply_create(req, &e, fi) != 0) {
		tier_close(s->tier, in, &f->how, req);
		idx_put(s->idx, in);
		fs_file_free(s, f);
	}
}

void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
	       struct fuse_file_info *fi)
{
	struct inode *in = NULL;
	int ret = do_make(spw_of(req), req, parent, name, S_IFREG | (mode & 07777), 0, NULL, &in);
	open_new_reply(req, in, ret, fi);
}

#if FUSE_VERSION >= FUSE_MAKE_VERSION(3, 15)
/* O_TMPFILE: an open regular file with no name; linkat gives it one. */
void op_tmpfile(fuse_req_t req, fuse_ino_t parent, mode_t mode, struct fuse_file_info *fi)
{
	struct spw *s = spw_of(req);
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct idx_new_node nn = {.mode = S_IFREG | (mode & 07777), .uid = ctx->uid, .gid = ctx->gid};
	struct inode *p = idx_get(s->idx, parent), *in = NULL;
	void *acc = NULL;
	size_t acc_len = 0;
	int ret = 0;
	if (p) {
		idx_inode_lock(p);
		if (p->mode & S_ISGID)
			nn.gid = p->gid;
		idx_inode_unlock(p);
		idx_put(s->idx, p);
	}
	if (s->acl)
		ret = fs_acl_inherit(s, parent, ctx->umask, &nn.mode, &acc, &acc_len, NULL, NULL);
	if (ret == 0)
		ret = idx_tmpfile(s->idx, parent, &nn, &in);
	if (ret == 0 && acc) /* as in do_make */
		idx_xattr_set(s->idx, in, ACL_XATTR_ACCESS, acc, acc_len, 0);
	free(acc);
	open_new_reply(req, in, ret, fi);
}
#endif
