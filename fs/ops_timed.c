/*
 * ops_timed — the ops table the session runs: each op wrapped to measure how
 * long the request took in the daemon (receipt to return, reply included),
 * so the slowest request is visible in the stats (`slow_request`) and a
 * wait without a bound shows up in tests. Forget and init are not timed.
 */
#include "common/clock.h"
#include "fs/fs_i.h"

#define TIMED(name, params, args)                                                          \
	static void timed_##name params                                                    \
	{                                                                                  \
		struct spw *s = spw_of(req); /* req is gone once op_ replies */            \
		uint64_t t0 = clock_now_ns();                                              \
		op_##name args;                                                            \
		tier_note_request(s->tier, #name, clock_now_ns() - t0);                    \
	}

TIMED(lookup, (fuse_req_t req, fuse_ino_t p, const char *n), (req, p, n))
TIMED(getattr, (fuse_req_t req, fuse_ino_t i, struct fuse_file_info *fi), (req, i, fi))
TIMED(setattr, (fuse_req_t req, fuse_ino_t i, struct stat *a, int v, struct fuse_file_info *fi),
      (req, i, a, v, fi))
TIMED(readlink, (fuse_req_t req, fuse_ino_t i), (req, i))
TIMED(mknod, (fuse_req_t req, fuse_ino_t p, const char *n, mode_t m, dev_t d), (req, p, n, m, d))
TIMED(mkdir, (fuse_req_t req, fuse_ino_t p, const char *n, mode_t m), (req, p, n, m))
TIMED(unlink, (fuse_req_t req, fuse_ino_t p, const char *n), (req, p, n))
TIMED(rmdir, (fuse_req_t req, fuse_ino_t p, const char *n), (req, p, n))
TIMED(symlink, (fuse_req_t req, const char *l, fuse_ino_t p, const char *n), (req, l, p, n))
TIMED(rename,
      (fuse_req_t req, fuse_ino_t p, const char *n, fuse_ino_t np, const char *nn, unsigned f),
      (req, p, n, np, nn, f))
TIMED(link, (fuse_req_t req, fuse_ino_t i, fuse_ino_t np, const char *nn), (req, i, np, nn))
TIMED(open, (fuse_req_t req, fuse_ino_t i, struct fuse_file_info *fi), (req, i, fi))
TIMED(read, (fuse_req_t req, fuse_ino_t i, size_t sz, off_t o, struct fuse_file_info *fi),
      (req, i, sz, o, fi))
TIMED(write_buf,
      (fuse_req_t req, fuse_ino_t i, struct fuse_bufvec *b, off_t o, struct fuse_file_info *fi),
      (req, i, b, o, fi))
TIMED(release, (fuse_req_t req, fuse_ino_t i, struct fuse_file_info *fi), (req, i, fi))
TIMED(fsync, (fuse_req_t req, fuse_ino_t i, int d, struct fuse_file_info *fi), (req, i, d, fi))
TIMED(opendir, (fuse_req_t req, fuse_ino_t i, struct fuse_file_info *fi), (req, i, fi))
TIMED(readdir, (fuse_req_t req, fuse_ino_t i, size_t sz, off_t o, struct fuse_file_info *fi),
      (req, i, sz, o, fi))
TIMED(readdirplus, (fuse_req_t req, fuse_ino_t i, size_t sz, off_t o, struct fuse_file_info *fi),
      (req, i, sz, o, fi))
TIMED(releasedir, (fuse_req_t req, fuse_ino_t i, struct fuse_file_info *fi), (req, i, fi))
TIMED(fsyncdir, (fuse_req_t req, fuse_ino_t i, int d, struct fuse_file_info *fi), (req, i, d, fi))
TIMED(statfs, (fuse_req_t req, fuse_ino_t i), (req, i))
TIMED(setxattr, (fuse_req_t req, fuse_ino_t i, const char *n, const char *v, size_t sz, int f),
      (req, i, n, v, sz, f))
TIMED(getxattr, (fuse_req_t req, fuse_ino_t i, const char *n, size_t sz), (req, i, n, sz))
TIMED(listxattr, (fuse_req_t req, fuse_ino_t i, size_t sz), (req, i, sz))
TIMED(removexattr, (fuse_req_t req, fuse_ino_t i, const char *n), (req, i, n))
TIMED(access, (fuse_req_t req, fuse_ino_t i, int m), (req, i, m))
TIMED(create, (fuse_req_t req, fuse_ino_t p, const char *n, mode_t m, struct fuse_file_info *fi),
      (req, p, n, m, fi))
#if FUSE_VERSION >= FUSE_MAKE_VERSION(3, 15)
TIMED(tmpfile, (fuse_req_t req, fuse_ino_t p, mode_t m, struct fuse_file_info *fi),
      (req, p, m, fi))
#endif
TIMED(fallocate,
      (fuse_req_t req, fuse_ino_t i, int m, off_t o, off_t l, struct fuse_file_info *fi),
      (req, i, m, o, l, fi))
TIMED(lseek, (fuse_req_t req, fuse_ino_t i, off_t o, int w, struct fuse_file_info *fi),
      (req, i, o, w, fi))

void fs_fill_ops(struct fuse_lowlevel_ops *ops)
{
	ops->lookup = timed_lookup;
	ops->forget = op_forget;
	ops->forget_multi = op_forget_multi;
	ops->getattr = timed_getattr;
	ops->setattr = timed_setattr;
	ops->readlink = timed_readlink;
	ops->mknod = timed_mknod;
	ops->mkdir = timed_mkdir;
	ops->unlink = timed_unlink;
	ops->rmdir = timed_rmdir;
	ops->symlink = timed_symlink;
	ops->rename = timed_rename;
	ops->link = timed_link;
	ops->open = timed_open;
	ops->read = timed_read;
	ops->write_buf = timed_write_buf;
	/* no flush: every write is done when it returns (no writeback cache),
	 * and the kernel keeps POSIX locks itself, so a close has nothing to
	 * tell the daemon; without the op the kernel stops sending FLUSH
	 * (ENOSYS once), which saves a round trip on every close */
	ops->release = timed_release;
	ops->fsync = timed_fsync;
	ops->opendir = timed_opendir;
	ops->readdir = timed_readdir;
	ops->readdirplus = timed_readdirplus;
	ops->releasedir = timed_releasedir;
	ops->fsyncdir = timed_fsyncdir;
	ops->statfs = timed_statfs;
	ops->setxattr = timed_setxattr;
	ops->getxattr = timed_getxattr;
	ops->listxattr = timed_listxattr;
	ops->removexattr = timed_removexattr;
	ops->access = timed_access;
	ops->create = timed_create;
	ops->fallocate = timed_fallocate;
	ops->lseek = timed_lseek;
#if FUSE_VERSION >= FUSE_MAKE_VERSION(3, 15)
	ops->tmpfile = timed_tmpfile;
#endif
}
