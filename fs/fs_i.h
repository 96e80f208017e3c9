/*
 * fs_i.h — private to fs/: the mount context and the ops tables' pieces.
 * Threading: the ops run on libfuse's worker threads (fuse_session_loop_mt,
 * or one thread with -s), any number at once on the same inode or handle.
 * struct spw is written only by main() before the session loop starts and
 * read-only after; the index and the tier lock what they hold. A struct
 * spw_file's hints are relaxed atomics (racy between parallel reads of one
 * handle, on purpose: they only steer read-ahead).
 */
#ifndef SPW_FS_I_H
#define SPW_FS_I_H

#include "common/config.h"
#include "index/index.h"
#include "index/journal.h" /* JRNL_MAX_FILE_SIZE */
#include "tier/tier.h"

#include <fuse_lowlevel.h>

/* The one context main() builds; every op gets it from fuse_req_userdata. */
struct spw {
	struct spw_config cfg;
	struct index *idx;
	struct tier *tier;
	struct fuse_session *se;
	double entry_timeout, attr_timeout;
	unsigned max_read; /* the max_read mount option (0: none) */
	int passthrough;   /* opens may be passed through (op_init decided) */
	int acl;	   /* POSIX ACLs on (op_init: default_permissions given) */
	/* every open file handle, so that those the kernel never released (the
	 * session ended first: SIGTERM, a lazy unmount) are freed at exit */
	pthread_mutex_t files_lock;
	struct spw_file *files;
};

static inline struct spw *spw_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* An open regular file: fi->fh. Owns an internal ref on in. The access
 * pattern fields are hints, updated without a lock (relaxed atomics) by the
 * reads in flight on this handle. */
struct spw_file {
	struct spw_file *next, **pprev; /* spw.files, under spw.files_lock */
	struct inode *in;
	struct tier_open_out how; /* passed through or not (tier_open) */
	uint64_t ra_next;  /* first chunk not yet asked to restore ahead */
	uint64_t wnext;	   /* where the last write ended (UINT64_MAX: none yet) */
	/* the read pattern, noted under the inode's lock (tier_read_begin_by) */
	struct tier_reader rd;
	uint64_t next_off; /* where the last read ended (UINT64_MAX: none yet) */
	uint32_t seq;	   /* reads in a row that went on from the last one */
	uint32_t jumps;	   /* reads in a row that did not */
};

/* New handle for in (taking over the caller's ref); NULL without memory. */
struct spw_file *fs_file_new(struct spw *s, struct inode *in);
void fs_file_free(struct spw *s, struct spw_file *f);
/* At exit, once no request runs: free the handles never released. */
void fs_files_free_all(struct spw *s);

static inline struct spw_file *fh_file(struct fuse_file_info *fi)
{
	return (struct spw_file *)(uintptr_t)fi->fh;
}

/* The inode behind an open file handle (an internal ref the fh owns). */
static inline struct inode *fh_inode(struct fuse_file_info *fi)
{
	return fh_file(fi)->in;
}

/* An open directory: fi->fh. Owns an internal ref on in. Its listing ends
 * before `end`, the directory's next cookie when it was opened or rewound:
 * an entry renamed away and back gets a new cookie past it, so a reader
 * that renames what it reads still comes to the end, each entry seen at
 * most once (POSIX leaves entries added after opendir unspecified;
 * xfstests generic/736). */
struct spw_dir {
	struct inode *in;
	uint64_t end; /* relaxed atomic: readdirs of one handle may race */
};

static inline struct spw_dir *fh_dir(struct fuse_file_info *fi)
{
	return (struct spw_dir *)(uintptr_t)fi->fh;
}

/* Fill a fuse_entry_param for `in` (takes in->lock). */
void fs_fill_entry(struct spw *s, struct inode *in, struct fuse_entry_param *e);
/* The attributes every reply carries, passthrough writers' size included
 * (tier_refresh; takes in->lock). */
void fs_stat(struct spw *s, struct inode *in, struct stat *st);

/* ops_entry.c */
void op_lookup(fuse_req_t, fuse_ino_t, const char *);
void op_forget(fuse_req_t, fuse_ino_t, uint64_t);
void op_forget_multi(fuse_req_t, size_t, struct fuse_forget_data *);
void op_getattr(fuse_req_t, fuse_ino_t, struct fuse_file_info *);
void op_setattr(fuse_req_t, fuse_ino_t, struct stat *, int, struct fuse_file_info *);
void op_readlink(fuse_req_t, fuse_ino_t);
void op_mknod(fuse_req_t, fuse_ino_t, const char *, mode_t, dev_t);
void op_mkdir(fuse_req_t, fuse_ino_t, const char *, mode_t);
void op_unlink(fuse_req_t, fuse_ino_t, const char *);
void op_rmdir(fuse_req_t, fuse_ino_t, const char *);
void op_symlink(fuse_req_t, const char *, fuse_ino_t, const char *);
void op_rename(fuse_req_t, fuse_ino_t, const char *, fuse_ino_t, const char *, unsigned int);
void op_link(fuse_req_t, fuse_ino_t, fuse_ino_t, const char *);
void op_access(fuse_req_t, fuse_ino_t, int);
void op_create(fuse_req_t, fuse_ino_t, const char *, mode_t, struct fuse_file_info *);
#if FUSE_VERSION >= FUSE_MAKE_VERSION(3, 15)
void op_tmpfile(fuse_req_t, fuse_ino_t, mode_t, struct fuse_file_info *);
#endif
/* ops_dir.c */
void op_opendir(fuse_req_t, fuse_ino_t, struct fuse_file_info *);
void op_readdir(fuse_req_t, fuse_ino_t, size_t, off_t, struct fuse_file_info *);
void op_readdirplus(fuse_req_t, fuse_ino_t, size_t, off_t, struct fuse_file_info *);
void op_releasedir(fuse_req_t, fuse_ino_t, struct fuse_file_info *);
void op_fsyncdir(fuse_req_t, fuse_ino_t, int, struct fuse_file_info *);
void op_statfs(fuse_req_t, fuse_ino_t);
/* ops_io.c */
void op_open(fuse_req_t, fuse_ino_t, struct fuse_file_info *);
void op_read(fuse_req_t, fuse_ino_t, size_t, off_t, struct fuse_file_info *);
void op_write_buf(fuse_req_t, fuse_ino_t, struct fuse_bufvec *, off_t, struct fuse_file_info *);
void op_release(fuse_req_t, fuse_ino_t, struct fuse_file_info *);
void op_fsync(fuse_req_t, fuse_ino_t, int, struct fuse_file_info *);
void op_fallocate(fuse_req_t, fuse_ino_t, int, off_t, off_t, struct fuse_file_info *);
void op_lseek(fuse_req_t, fuse_ino_t, off_t, int, struct fuse_file_info *);
/* ops_timed.c: the session's ops (all but init), each timed. */
void fs_fill_ops(struct fuse_lowlevel_ops *ops);
/* ops_xattr.c */
void op_setxattr(fuse_req_t, fuse_ino_t, const char *, const char *, size_t, int);
void op_getxattr(fuse_req_t, fuse_ino_t, const char *, size_t);
void op_listxattr(fuse_req_t, fuse_ino_t, size_t);
void op_removexattr(fuse_req_t, fuse_ino_t, const char *);
/* POSIX ACLs (s->acl), on the index's xattrs. A new node's mode (umask:
 * the creator's, applied only without a default ACL) and the ACLs it gets
 * from parent: *acc and *def malloc'ed (NULL: none), caller frees. */
int fs_acl_inherit(struct spw *s, fuse_ino_t parent, mode_t umask, mode_t *mode, void **acc,
		   size_t *acc_len, void **def, size_t *def_len);
/* A chmod of in to mode: its access ACL follows. in->lock not held. */
int fs_acl_chmod(struct spw *s, struct inode *in, mode_t mode);
/* Is the caller of req in group gid (its primary or a supplementary one)? */
int fs_req_in_group(fuse_req_t req, gid_t gid);
/* What writing value to user.spillway.<what> asks for: VX_*, or -EINVAL.
 * Pure (fuzzed by tests/fuzz/fuzz_xattr.c). */
enum { VX_PIN, VX_UNPIN, VX_EVICT, VX_WARM };
int xattr_vx_parse(const char *what, const void *value, size_t size);

#endif
