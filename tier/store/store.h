/*
 * store — the cold store interface: put a segment, read a byte range of it,
 * delete it, report capacity, list what is there. One const struct store_ops
 * per backend (store_nvme.c, store_s3.c), called through the store_*() helpers.
 * Guarantees: a segment is visible (read/list) under its id only after
 * put_finish returned 0, and then it is durable; a failed or aborted put
 * leaves nothing behind under the final name.
 * Threading: a store is thread-safe (several puts, reads and removes at once
 * from different threads); one store_put is used by one thread at a time.
 */
#ifndef SPW_STORE_H
#define SPW_STORE_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define STORE_ALIGN 4096u /* put_append / read buffers, offsets and lengths */

/* Reservation for a put whose size is not known (size_hint == 0). */
#define STORE_DEFAULT_RESERVE (64ull << 20)

struct store_ops;

/* Each backend embeds this as its first member and owns the rest. */
struct store {
	const struct store_ops *ops;
};

/* An in-progress segment upload; each backend embeds this first. */
struct store_put {
	struct store *st;
};

struct store_dev_stat {
	char name[256];		     /* directory path (nvme) or bucket/prefix (s3) */
	uint64_t used, total, avail; /* bytes; avail = what an unprivileged writer can use */
	int failed;		     /* 1 while the device is skipped after an I/O error */
};

/* Called by list() for each segment; a nonzero return stops the walk and is returned. */
typedef int (*store_list_fn)(void *arg, uint64_t seg_id, uint32_t dev, uint64_t size);

/* Which cold tier a backend is: the index of the per-tier figures
 * (struct tier_stats h_first, h_rst) and of a read's cold tier. */
enum store_tier { STORE_TIER_NVME = 0, STORE_TIER_S3 = 1 };

struct store_ops {
	const char *name;
	enum store_tier tier;
	/*
	 * Start writing segment seg_id and choose its device now. size_hint is
	 * the expected final size in bytes (0 = unknown: STORE_DEFAULT_RESERVE);
	 * it is reserved against the device's free space until the put ends and
	 * devices without that much room are avoided where possible.
	 * -ENOSPC when no device has room, -EIO when every device has failed.
	 */
	int (*put_begin)(struct store *st, uint64_t seg_id, uint64_t size_hint,
			 struct store_put **out);
	/*
	 * Append len bytes at the current end; len a multiple of STORE_ALIGN,
	 * buf STORE_ALIGN-aligned (else -EINVAL). An error (e.g. -ENOSPC, -EIO)
	 * leaves the put only good for put_abort. A device that failed with EIO
	 * or ENOSPC is avoided by the next put_begin.
	 */
	int (*put_append)(struct store_put *put, const void *buf, size_t len);
	/*
	 * Optional (NULL: put_append for each). Append the n buffers of iov,
	 * one after another, as put_append would each (every one aligned, a
	 * multiple of STORE_ALIGN long), in flight together. Errors as
	 * put_append.
	 */
	int (*put_appendv)(struct store_put *put, const struct iovec *iov, int n);
	/*
	 * Optional (NULL: the caller appends from its own buffer). The put's
	 * own buffer at its current end: *buf (STORE_ALIGN-aligned) gets *len
	 * bytes (a multiple of STORE_ALIGN, at least one), valid until the
	 * next call on the put. The caller writes the segment's next bytes
	 * there and appends them with put_append(put, *buf, n), n <= *len,
	 * which then copies nothing. Errors as put_append.
	 */
	int (*put_window)(struct store_put *put, void **buf, size_t *len);
	/*
	 * Make the segment durable and visible under its final name; *dev gets
	 * the device index it landed on. Frees the put whether it succeeds or
	 * not (on failure, nothing is left behind).
	 */
	int (*put_finish)(struct store_put *put, uint32_t *dev);
	/* Delete partial data and free the put. */
	void (*put_abort)(struct store_put *put);
	/*
	 * Read len bytes at off of segment seg_id on dev (off, len, buf
	 * STORE_ALIGN-aligned, else -EINVAL). 0, -ENOENT (no such segment),
	 * -EIO on a short read, or another -errno.
	 */
	int (*read)(struct store *st, uint64_t seg_id, uint32_t dev, uint64_t off, void *buf,
		    size_t len);
	/* Delete a finished segment. 0 or -errno (-ENOENT when absent). */
	int (*remove)(struct store *st, uint64_t seg_id, uint32_t dev);
	/* Fill up to max entries of out; returns the number of devices (may exceed max). */
	int (*stat)(struct store *st, struct store_dev_stat *out, int max);
	/*
	 * Call fn for each finished segment present (for recovery, fsck, GC of
	 * orphans); partial uploads are not reported. Returns 0, fn's nonzero
	 * return, or the first -errno met (the other devices are still listed).
	 */
	int (*list)(struct store *st, store_list_fn fn, void *arg);
	/* Optional: the mount is going away; a store whose requests retry a
	 * failing remote for minutes stops retrying while it is failing (the
	 * unmount's last puts still get their retries from a healthy one). */
	void (*unmounting)(struct store *st);
	/* Free the store. Every put must have been finished or aborted. */
	void (*close)(struct store *st);
};

static inline const char *store_name(const struct store *st)
{
	return st->ops->name;
}

static inline enum store_tier store_tier(const struct store *st)
{
	return st->ops->tier;
}

static inline int store_put_begin(struct store *st, uint64_t seg_id, uint64_t size_hint,
				  struct store_put **out)
{
	return st->ops->put_begin(st, seg_id, size_hint, out);
}

static inline int store_put_append(struct store_put *put, const void *buf, size_t len)
{
	return put->st->ops->put_append(put, buf, len);
}

/* Append iov[0..n) in order: in flight together where the store can. */
static inline int store_put_appendv(struct store_put *put, const struct iovec *iov, int n)
{
	int ret = 0;

	if (put->st->ops->put_appendv)
		return put->st->ops->put_appendv(put, iov, n);
	for (int i = 0; i < n && ret == 0; i++)
		ret = put->st->ops->put_append(put, iov[i].iov_base, iov[i].iov_len);
	return ret;
}

/* The put's own buffer to fill in place (put_window), or -EOPNOTSUPP. */
static inline int store_put_window(struct store_put *put, void **buf, size_t *len)
{
	return put->st->ops->put_window ? put->st->ops->put_window(put, buf, len) : -EOPNOTSUPP;
}

static inline int store_put_finish(struct store_put *put, uint32_t *dev)
{
	return put->st->ops->put_finish(put, dev);
}

static inline void store_put_abort(struct store_put *put)
{
	put->st->ops->put_abort(put);
}

static inline int store_read(struct store *st, uint64_t seg_id, uint32_t dev, uint64_t off,
			     void *buf, size_t len)
{
	return st->ops->read(st, seg_id, dev, off, buf, len);
}

static inline int store_remove(struct store *st, uint64_t seg_id, uint32_t dev)
{
	return st->ops->remove(st, seg_id, dev);
}

static inline int store_stat(struct store *st, struct store_dev_stat *out, int max)
{
	return st->ops->stat(st, out, max);
}

static inline int store_list(struct store *st, store_list_fn fn, void *arg)
{
	return st->ops->list(st, fn, arg);
}

static inline void store_unmounting(struct store *st)
{
	if (st && st->ops->unmounting)
		st->ops->unmounting(st);
}

static inline void store_close(struct store *st)
{
	if (st)
		st->ops->close(st);
}

/*
 * nvme backend: ndirs directories (device index = position in dirs), each
 * created 0700 if missing. Segment seg_id is <dir>/seg-<16 lowercase hex>.spw,
 * written as <dir>/.tmp-<16 hex> and renamed after fdatasync, then the
 * directory is fsynced. Placement: random, weighted by free space (statvfs
 * f_bavail * f_frsize minus what in-flight puts reserved); a device is
 * skipped while failed (EIO/EROFS/open error: NVME_FAIL_BACKOFF_S seconds)
 * or full (ENOSPC/EDQUOT: until statvfs shows the room that put needed, or
 * the back-off passed). O_DIRECT where the filesystem takes it.
 * Caller owns *out; free with store_close(). 0 or -errno.
 */
#define NVME_FAIL_BACKOFF_S 30
int store_nvme_open(const char *const *dirs, int ndirs, struct store **out);
/*
 * One user per cold directory (a mount, or spillway-fsck): take
 * <dir>/.spillway.lock (created 0600 if missing) with an exclusive flock,
 * waiting only for a daemon that is finishing its unmount (common/lockwait.h;
 * the caller stamps the file with lockwait_stamp). *fd gets its descriptor;
 * closing it lets go (the file stays: unlinking it would race). 0, -EBUSY
 * (another process holds it), -errno.
 */
int store_nvme_lock(const char *dir, int *fd);

#endif
