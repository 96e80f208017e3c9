/* ops_io.c — open files: zero-copy reads and writes through the hot file. */
#include "fs/fs_i.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/stat.h>

/* A read starting this close to where the last one ended (either side:
 * the kernel's readahead sends several at once) continues a sequential
 * stream. */
#define SEQ_SLACK (1u << 20)
/* A read this close to where the handle's last one ended is part of its
 * stream for the admission filter (TIER_READ_NEAR: never a re-read): the
 * kernel's readahead has up to max_background (12) requests of up to 1 MiB
 * in flight, which the daemon's threads take in any order (measured: with
 * read_ahead_kb 8192 a dd's requests arrive more than 8 MiB apart). */
#define NEAR_WINDOW (16u << 20)

static unsigned read_pattern(struct tier_reader *rd, uint64_t off, size_t size);

struct spw_file *fs_file_new(struct spw *s, struct inode *in)
{
	struct spw_file *f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	f->in = in;
	f->rd.pattern = read_pattern;
	f->next_off = UINT64_MAX; /* no read yet */
	f->wnext = UINT64_MAX;	  /* no write yet */
	pthread_mutex_lock(&s->files_lock);
	if ((f->next = s->files))
		f->next->pprev = &f->next;
	f->pprev = &s->files;
	s->files = f;
	pthread_mutex_unlock(&s->files_lock);
	return f;
}

void fs_file_free(struct spw *s, struct spw_file *f)
{
	if (!f)
		return;
	pthread_mutex_lock(&s->files_lock);
	if ((*f->pprev = f->next))
		f->next->pprev = f->pprev;
	pthread_mutex_unlock(&s->files_lock);
	free(f);
}

void fs_files_free_all(struct spw *s)
{
	while (s->files)
		fs_file_free(s, s->files);
}

void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct spw *s = spw_of(req);
	struct inode *in = idx_get(s->idx, ino);
	int ret;
	if (!in) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (!S_ISREG(idx_type(in))) {
		idx_put(s->idx, in);
		fuse_reply_err(req, idx_dir(in) ? EISDIR : EINVAL);
		return;
	}
	/* atomic_o_trunc: the truncation arrives with the open; cold chunks are
	 * dropped, never read back */
	if ((fi->flags & O_TRUNC) && (ret = tier_truncate(s->tier, in, 0)) < 0) {
		idx_put(s->idx, in);
		fuse_reply_err(req, -ret);
		return;
	}
	struct spw_file *f = fs_file_new(s, in);
	if (!f) {
		idx_put(s->idx, in);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	/* a file all in RAM, opened to read, is passed through: the kernel
	 * reads its hot file itself (the rules: tier.h) */
	ret = tier_open(s->tier, in,
			((fi->flags & O_ACCMODE) != O_RDONLY ? TIER_OPEN_WRITE : 0) |
			    (s->passthrough ? TIER_OPEN_PASSTHROUGH : 0),
			req, &f->how);
	if (ret < 0) {
		fs_file_free(s, f);
		idx_put(s->idx, in);
		fuse_reply_err(req, -ret);
		return;
	}
	fi->fh = (uintptr_t)f;
	/* Every change passes through this daemon, so cached pages stay valid;
	 * the evictor invalidates what it takes out of RAM. (A passthrough open
	 * has no cache of its own: the kernel refuses keep_cache with it.) */
	fi->keep_cache = !f->how.backing_id;
#ifdef SPW_PASSTHROUGH
	fi->backing_id = f->how.backing_id; /* > 0: FOPEN_PASSTHROUGH */
#endif
	if (fuse_reply_open(req, fi) != 0) {
		tier_close(s->tier, in, &f->how, req);
		idx_put(s->idx, in);
		fs_file_free(s, f);
	}
}

/* Note a read of [off, off + size) on f: TIER_READ_STREAM when it
 * continues a stream (two reads in a row went on from the last one),
 * TIER_READ_RANDOM when the handle jumps about (two jumps in a row, and no
 * stream since), and TIER_READ_NEAR when it starts within NEAR_WINDOW of where the handle's last
 * read ended (the kernel's readahead of one stream, in any order: never a
 * re-read for the admission filter). One jump is not a pattern: the first
 * read of a stream may start anywhere, and its chunk is restored as usual.
 * The same read again (the kernel retries a failed one) changes nothing.
 * Asked by the tier under the inode's lock (struct tier_reader): the
 * handle's reads are noted in the order they are judged. */
static unsigned read_pattern_from(struct spw_file *f, uint64_t prev, uint64_t off, size_t size)
{
	unsigned near = off + NEAR_WINDOW >= prev && off <= prev + NEAR_WINDOW ? TIER_READ_NEAR : 0;

	if (prev == off + size)
		return f->jumps >= 2 ? TIER_READ_RANDOM | near
		       : f->seq >= 2 ? TIER_READ_STREAM | near
				     : near;
	if (off + SEQ_SLACK >= prev && off <= prev + SEQ_SLACK) {
		if (++f->seq < 2)
			return near | (f->jumps >= 2 ? TIER_READ_RANDOM : 0);
		f->jumps = 0;
		return TIER_READ_STREAM | near;
	}
	f->seq = 0;
	return (++f->jumps >= 2 ? TIER_READ_RANDOM : 0) | near;
}

static unsigned read_pattern(struct tier_reader *rd, uint64_t off, size_t size)
{
	struct spw_file *f = (struct spw_file *)((char *)rd - offsetof(struct spw_file, rd));
	uint64_t prev = f->next_off;

	f->next_off = off + size;
	if (prev == UINT64_MAX) /* the handle's first read: as if the last ended at 0, never near */
		return read_pattern_from(f, 0, off, size) & ~TIER_READ_NEAR;
	return read_pattern_from(f, prev, off, size);
}

void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct spw *s = spw_of(req);
	struct spw_file *f = fh_file(fi);
	struct inode *in = f->in;
	struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
	struct tier_io io;
	int ret = tier_read_begin_by(s->tier, in, (uint64_t)off, size, &f->rd, &io);

	if (ret < 0) {
		fuse_reply_err(req, -ret);
		return;
	}
	if (io.len == 0) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	buf.buf[0].size = io.len;
	buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	buf.buf[0].fd = io.fd;
	buf.buf[0].pos = off;
	/* read-ahead only queues restores: before the reply, since the file
	 * handle f may be released (and freed) as soon as we reply; none for
	 * a reader the admission filter keeps out of RAM (tier/admit) */
	if ((io.flags & TIER_READ_STREAM) && !io.direct) { /* the hint is racy between parallel reads: harmless */
		uint64_t next = __atomic_load_n(&f->ra_next, __ATOMIC_RELAXED);
		tier_read_ahead(s->tier, in, (uint64_t)off + io.len, &next);
		__atomic_store_n(&f->ra_next, next, __ATOMIC_RELAXED);
	}
	/* Once replied, the file may be released and the inode freed before
	 * the unpin below: hold a reference across it. */
	idx_ref(s->idx, in);
	if (io.niov) /* cold pieces, verified: from the read buffers */
		fuse_reply_iov(req, io.iov, io.niov);
	else
		fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
	/* the rest of a chunk restored reader's blocks first comes in now */
	tier_read_end(s->tier, in, &io);
	idx_put(s->idx, in);
}

void op_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *in_buf, off_t off,
		  struct fuse_file_info *fi)
{
	struct spw *s = spw_of(req);
	struct spw_file *f = fh_file(fi);
	struct inode *in = f->in;
	size_t len = fuse_buf_size(in_buf);
	struct fuse_bufvec out = FUSE_BUFVEC_INIT(len);
	struct tier_io io;
	ssize_t res;
	int ret, stream;

	/* the journal cannot record a file past JRNL_MAX_FILE_SIZE: like a
	 * write past s_maxbytes, EFBIG at the limit and short before it */
	if (off < 0 || (uint64_t)off >= JRNL_MAX_FILE_SIZE) {
		fuse_reply_err(req, off < 0 ? EINVAL : EFBIG);
		return;
	}
	if (len > JRNL_MAX_FILE_SIZE - (uint64_t)off)
		out.buf[0].size = len = (size_t)(JRNL_MAX_FILE_SIZE - (uint64_t)off);
	/* a write that goes on from the handle's last one: a stream */
	stream = __atomic_exchange_n(&f->wnext, (uint64_t)off + len, __ATOMIC_RELAXED) ==
		 (uint64_t)off;
	ret = tier_write_begin(s->tier, in, (uint64_t)off, len, stream ? TIER_WRITE_STREAM : 0,
			       &io);
	if (ret < 0) {
		fuse_reply_err(req, -ret);
		return;
	}
	out.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	out.buf[0].fd = io.fd;
	out.buf[0].pos = off;
	res = fuse_buf_copy(&out, in_buf, 0);
	res = tier_write_end(s->tier, in, &io, res);
	if (res < 0)
		fuse_reply_err(req, (int)-res);
	else
		fuse_reply_write(req, (size_t)res);
}

void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct spw *s = spw_of(req);
	struct spw_file *f = fh_file(fi);
	tier_close(s->tier, f->in, &f->how, req);
	idx_put(s->idx, f->in);
	fs_file_free(s, f);
	fuse_reply_err(req, 0);
}

void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct spw *s = spw_of(req);
	fuse_reply_err(req, -tier_fsync(s->tier, fh_inode(fi)));
}

/* Could the tiers hold what an allocation past EOF adds? A request larger
 * than all their free room fails at once with ENOSPC, as on a local
 * filesystem (xfstests generic/213), rather than spilling zeros until a
 * tier is full. Bytes within the size are not counted (mostly allocated). */
static int fits_somewhere(struct spw *s, struct inode *in, int mode, uint64_t off, uint64_t len)
{
	uint64_t size, total, avail, from;

	if (mode & FALLOC_FL_PUNCH_HOLE)
		return 1;
	idx_inode_lock(in);
	size = in->size;
	idx_inode_unlock(in);
	from = off > size ? off : size;
	if (off + len <= from)
		return 1;
	tier_statfs(s->tier, &total, &avail);
	return off + len - from <= avail;
}

void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
		  struct fuse_file_info *fi)
{
	struct spw *s = spw_of(req);
	if (off < 0 || len <= 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if ((uint64_t)len > JRNL_MAX_FILE_SIZE || (uint64_t)off > JRNL_MAX_FILE_SIZE - (uint64_t)len) {
		fuse_reply_err(req, EFBIG); /* see op_write_buf */
		return;
	}
	if (!fits_somewhere(s, fh_inode(fi), mode, (uint64_t)off, (uint64_t)len)) {
		fuse_reply_err(req, ENOSPC);
		return;
	}
	fuse_reply_err(req,
		       -tier_fallocate(s->tier, fh_inode(fi), mode, (uint64_t)off, (uint64_t)len));
}

void op_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi)
{
	struct spw *s = spw_of(req);
	int64_t r;
	if (whence != SEEK_DATA && whence != SEEK_HOLE) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (off < 0) {
		fuse_reply_err(req, ENXIO);
		return;
	}
	r = tier_lseek(s->tier, fh_inode(fi), (uint64_t)off, whence);
	if (r < 0)
		fuse_reply_err(req, (int)-r);
	else
		fuse_reply_lseek(req, (off_t)r);
}
