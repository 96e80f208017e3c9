/* ops_dir.c — directory listing, fsyncdir and statfs. */
#include "fs/fs_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct dir_fill {
	struct spw *s;
	fuse_req_t req;
	char *buf;
	size_t size, pos;
	uint64_t end; /* no entry from this cookie on (struct spw_dir) */
	int plus;
};

static int fill_one(void *arg, const char *name, struct inode *child, uint64_t cookie)
{
	struct dir_fill *f = arg;
	size_t need;

	if (cookie >= f->end)
		return 1;
	if (f->plus) {
		struct fuse_entry_param e;
		int dots = !strcmp(name, ".") || !strcmp(name, "..");
		fs_fill_entry(f->s, child, &e);
		need = fuse_add_direntry_plus(f->req, f->buf + f->pos, f->size - f->pos, name, &e,
					      (off_t)cookie);
		if (need > f->size - f->pos)
			return 1;
		if (!dots)
			idx_kernel_ref_locked(child);
	} else {
		/* only the type (d_type): no inode lock here */
		struct stat st = {.st_ino = child->ino, .st_mode = idx_type(child)};
		need = fuse_add_direntry(f->req, f->buf + f->pos, f->size - f->pos, name, &st,
					 (off_t)cookie);
		if (need > f->size - f->pos)
			return 1;
	}
	f->pos += need;
	return 0;
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, int plus,
		       struct spw_dir *d)
{
	struct dir_fill f = {.s = spw_of(req), .req = req, .size = size, .plus = plus};
	int ret;

	if (off == 0) /* opened or rewound: what is there now */
		__atomic_store_n(&d->end, idx_dir_next_cookie(f.s->idx, ino), __ATOMIC_RELAXED);
	f.end = __atomic_load_n(&d->end, __ATOMIC_RELAXED);

	f.buf = malloc(size);
	if (!f.buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	ret = idx_readdir(f.s->idx, ino, (uint64_t)off, fill_one, &f);
	if (ret < 0)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_buf(req, f.buf, f.pos);
	free(f.buf);
}

void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct spw *s = spw_of(req);
	struct inode *in = idx_get(s->idx, ino);
	struct spw_dir *d;
	if (!in) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (!idx_dir(in) || !(d = malloc(sizeof(*d)))) {
		fuse_reply_err(req, idx_dir(in) ? ENOMEM : ENOTDIR);
		idx_put(s->idx, in);
		return;
	}
	d->in = in;
	d->end = idx_dir_next_cookie(s->idx, ino);
	fi->fh = (uintptr_t)d;
	fi->cache_readdir = 0;
	if (fuse_reply_open(req, fi) != 0) { /* interrupted: no releasedir */
		idx_put(s->idx, in);
		free(d);
	}
}

void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, 0, fh_dir(fi));
}

void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, 1, fh_dir(fi));
}

void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct spw_dir *d = fh_dir(fi);
	idx_put(spw_of(req)->idx, d->in);
	free(d);
	fuse_reply_err(req, 0);
}

void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	/* directory entries live in the index: make its journal durable */
	fuse_reply_err(req, -tier_sync(spw_of(req)->tier));
}

void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct spw *s = spw_of(req);
	struct statvfs sv = {0};
	uint64_t total, avail, inodes, files;

	tier_statfs(s->tier, &total, &avail);
	idx_counts(s->idx, &inodes, &files);
	sv.f_bsize = 4096;
	sv.f_frsize = 4096;
	sv.f_blocks = total / 4096;
	sv.f_bfree = avail / 4096;
	sv.f_bavail = avail / 4096;
	sv.f_files = inodes + (1ULL << 32);
	sv.f_ffree = 1ULL << 32;
	sv.f_favail = sv.f_ffree;
	sv.f_namemax = 255;
	fuse_reply_statfs(req, &sv);
}
