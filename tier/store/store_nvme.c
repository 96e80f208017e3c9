/*
 * DESIGN
 * One directory per device; a segment is one file in one directory.
 * Write path: put_begin picks a device and opens <dir>/.tmp-<id> (O_DIRECT
 * when the filesystem takes it); put_append writes through the uring loop at
 * the current end; put_finish does fdatasync(file), rename to seg-<id>.spw,
 * fsync(dir). So a segment appears under its final name only complete and
 * durable, and a crash leaves at most a .tmp- file, never listed.
 * Placement (under nvme_store.lock): every device that is not failed or full
 * gets a weight equal to its free bytes (statvfs) minus the bytes reserved by
 * in-flight puts; a device whose weight is below the put's reservation is
 * left out unless the size is unknown and nothing else has room. One device
 * is drawn at random in proportion to the weights, so unequal disks fill at
 * the same rate and concurrent puts spread over the devices.
 * Failures are remembered per device: EIO/EROFS (or a temp file that cannot
 * be created) skip it for NVME_FAIL_BACKOFF_S; ENOSPC/EDQUOT skip it until
 * statvfs shows the room the failed put needed (more than it showed at the
 * failure, when it already showed that much), or the back-off passed.
 * All I/O is done outside the lock.
 * Reads go through a small cache of open segment fds (NVME_FD_CACHE, least
 * recently used out, under fdc_lock): a restore costs no open/close. An fd
 * in use is never closed under its reader; removing a segment closes its
 * cached fd (at once, or by its last reader) so the space is freed.
 */
#include "tier/store/store.h"
#include "common/atomic_file.h"

#include "common/segname.h"
#include "common/clock.h"
#include "common/lockwait.h"
#include "common/log.h"
#include "common/uring.h"

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define NAME_LEN 32

struct nvme_dev {
	char *path;
	int dirfd;
	int direct;	       /* protected by nvme_store.lock: 0 once O_DIRECT got EINVAL */
	uint64_t reserved;     /* protected by nvme_store.lock: bytes held by in-flight puts */
	uint64_t full_need;    /* protected by nvme_store.lock: nonzero = full until this avail */
	uint64_t full_until;   /* protected by nvme_store.lock: ms, monotonic */
	uint64_t failed_until; /* protected by nvme_store.lock: ms, monotonic; 0 = healthy */
};

#define NVME_FD_CACHE 64

/* One cached read fd. Protected by nvme_store.fdc_lock. */
struct nvme_fdc {
	uint64_t seg_id;
	uint32_t dev;
	int fd;		/* -1: slot free */
	uint32_t users; /* reads using fd now */
	uint64_t tick;	/* last use (LRU) */
	int doomed;	/* segment removed: close when users drops to 0 */
};

struct nvme_store {
	struct store base;
	pthread_mutex_t lock;
	uint64_t rng; /* protected by lock */
	pthread_mutex_t fdc_lock;
	struct nvme_fdc fdc[NVME_FD_CACHE]; /* protected by fdc_lock */
	uint64_t fdc_tick;		    /* protected by fdc_lock */
	int ndev;
	struct nvme_dev dev[];
};

struct nvme_put {
	struct store_put base;
	uint64_t seg_id;
	uint32_t dev;
	int fd;
	uint64_t size;	   /* bytes appended so far */
	uint64_t reserved; /* bytes counted in dev[dev].reserved */
	int err;	   /* first append error; the put is then only good for abort */
};

static const struct store_ops nvme_ops;

static struct nvme_store *to_ns(struct store *st)
{
	return (struct nvme_store *)st;
}

static void seg_name(char *buf, uint64_t seg_id)
{
	segname_format(buf, seg_id); /* buf holds NAME_LEN > SEGNAME_LEN bytes */
}

static void tmp_name(char *buf, uint64_t seg_id)
{
	snprintf(buf, NAME_LEN, ".tmp-%016" PRIx64, seg_id);
}

/* xorshift64*; caller holds ns->lock. */
static uint64_t rng_next(struct nvme_store *ns)
{
	uint64_t x = ns->rng;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	ns->rng = x;
	return x * 0x2545F4914F6CDD1Dull;
}

/* Free bytes of a device for an unprivileged writer, or 0 when unusable. */
static uint64_t dev_avail(const struct nvme_dev *d, uint64_t *total, uint64_t *used, int *ok)
{
	struct statvfs sv;

	if (fstatvfs(d->dirfd, &sv) < 0 || (sv.f_flag & ST_RDONLY)) {
		*ok = 0;
		if (total)
			*total = *used = 0;
		return 0;
	}
	*ok = 1;
	if (total) {
		*total = (uint64_t)sv.f_blocks * sv.f_frsize;
		*used = (uint64_t)(sv.f_blocks - sv.f_bfree) * sv.f_frsize;
	}
	return (uint64_t)sv.f_bavail * sv.f_frsize;
}

/* Remember that an operation on device i failed with err; need = bytes the put wanted. */
static void dev_note_error(struct nvme_store *ns, uint32_t i, int err, uint64_t need)
{
	struct nvme_dev *d = &ns->dev[i];
	uint64_t until = clock_now_ms() + NVME_FAIL_BACKOFF_S * 1000ull, avail;
	int ok;

	if (err == -ENOSPC || err == -EDQUOT) {
		/* out of room that statvfs still shows (a quota, thin
		 * provisioning, a filesystem's own reserves): only more room
		 * than now, or the back-off, brings the device back */
		avail = dev_avail(d, NULL, NULL, &ok);
		if (ok && avail >= need)
			need += avail;
	}
	pthread_mutex_lock(&ns->lock);
	if (err == -ENOSPC || err == -EDQUOT) {
		if (need > d->full_need)
			d->full_need = need;
		d->full_until = until;
	} else if (err == -EIO || err == -EROFS || err == -ENOENT || err == -EACCES ||
		   err == -EPERM || err == -ENOTDIR || err == -ESTALE) {
		d->failed_until = until;
	} else {
		err = 0; /* not the device's fault (EINVAL, EMFILE, ENOMEM, ...) */
	}
	pthread_mutex_unlock(&ns->lock);
	if (err == -ENOSPC || err == -EDQUOT)
		log_warn("nvme %s: %s; skipping it until %" PRIu64 " bytes are free", d->path,
			 strerror(-err), need);
	else if (err)
		log_warn("nvme %s: %s; skipping it for %d s", d->path, strerror(-err),
			 NVME_FAIL_BACKOFF_S);
}

static void dev_release(struct nvme_store *ns, uint32_t i, uint64_t bytes)
{
	pthread_mutex_lock(&ns->lock);
	ns->dev[i].reserved -= bytes;
	pthread_mutex_unlock(&ns->lock);
}

/*
 * Choose a device for a put reserving `need` bytes and reserve them.
 * Returns the index, -ENOSPC when none has room, -EIO when all have failed.
 */
static int dev_pick(struct nvme_store *ns, uint64_t need, int size_known)
{
	uint64_t avail[ns->ndev];
	int ok[ns->ndev];
	uint64_t now = clock_now_ms(), sum = 0, r;
	int usable = 0, pick = -1;

	for (int i = 0; i < ns->ndev; i++)
		avail[i] = dev_avail(&ns->dev[i], NULL, NULL, &ok[i]);

	pthread_mutex_lock(&ns->lock);
	for (int i = 0; i < ns->ndev; i++) {
		struct nvme_dev *d = &ns->dev[i];

		if (d->failed_until && now < d->failed_until)
			ok[i] = 0;
		else
			d->failed_until = 0;
		if (!ok[i])
			continue;
		usable++;
		avail[i] = avail[i] > d->reserved ? avail[i] - d->reserved : 0;
		if (d->full_need) {
			if (avail[i] >= d->full_need || now >= d->full_until)
				d->full_need = 0;
			else
				ok[i] = 0;
		}
	}
	/* Pass 0: devices with room for need. Pass 1 (size unknown): any room. */
	for (int pass = 0; pass < 2 && sum == 0; pass++) {
		uint64_t min = pass == 0 ? need : STORE_ALIGN;

		if (pass == 1 && size_known)
			break;
		for (int i = 0; i < ns->ndev; i++)
			if (ok[i] && avail[i] >= min)
				sum += avail[i];
		if (sum == 0)
			continue;
		r = rng_next(ns) % sum;
		for (int i = 0; i < ns->ndev && pick < 0; i++) {
			if (!ok[i] || avail[i] < min)
				continue;
			if (r < avail[i])
				pick = i;
			else
				r -= avail[i];
		}
	}
	if (pick >= 0)
		ns->dev[pick].reserved += need;
	pthread_mutex_unlock(&ns->lock);
	if (pick >= 0)
		return pick;
	return usable ? -ENOSPC : -EIO;
}

/* Open name in device i for write (create) or read; falls back from O_DIRECT on EINVAL. */
static int dev_open(struct nvme_store *ns, uint32_t i, const char *name, int flags)
{
	struct nvme_dev *d = &ns->dev[i];
	int direct, fd;

	pthread_mutex_lock(&ns->lock);
	direct = d->direct;
	pthread_mutex_unlock(&ns->lock);
	fd = openat(d->dirfd, name, flags | O_CLOEXEC | (direct ? O_DIRECT : 0), 0600);
	if (fd < 0 && errno == EINVAL && direct) {
		fd = openat(d->dirfd, name, flags | O_CLOEXEC, 0600);
		if (fd >= 0) {
			pthread_mutex_lock(&ns->lock);
			d->direct = 0;
			pthread_mutex_unlock(&ns->lock);
			log_info("nvme %s: no O_DIRECT on this filesystem, using buffered I/O",
				 d->path);
		}
	}
	return fd < 0 ? -errno : fd;
}

static int nvme_put_begin(struct store *st, uint64_t seg_id, uint64_t size_hint,
			  struct store_put **out)
{
	struct nvme_store *ns = to_ns(st);
	uint64_t need = size_hint ? size_hint : STORE_DEFAULT_RESERVE;
	struct nvme_put *p;
	char name[NAME_LEN];
	int ret, i;

	need = (need + STORE_ALIGN - 1) / STORE_ALIGN * STORE_ALIGN;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	tmp_name(name, seg_id);
	/* Each failed open marks its device failed, so this ends within ndev tries. */
	for (int tries = 0; tries <= ns->ndev; tries++) {
		i = dev_pick(ns, need, size_hint != 0);
		if (i < 0) {
			ret = i;
			goto err;
		}
		ret = dev_open(ns, (uint32_t)i, name, O_WRONLY | O_CREAT | O_TRUNC);
		if (ret >= 0)
			goto opened;
		dev_release(ns, (uint32_t)i, need);
		log_warn("nvme %s: cannot create %s: %s", ns->dev[i].path, name, strerror(-ret));
		dev_note_error(ns, (uint32_t)i, ret, need);
		if (ret == -EMFILE || ret == -ENFILE || ret == -ENOMEM)
			goto err;
	}
	ret = -EIO;
	goto err;
opened:
	p->base.st = st;
	p->seg_id = seg_id;
	p->dev = (uint32_t)i;
	p->fd = ret;
	p->reserved = need;
	*out = &p->base;
	return 0;
err:
	free(p);
	return ret;
}

static void put_free(struct nvme_put *p, int unlink_tmp)
{
	struct nvme_store *ns = to_ns(p->base.st);
	char name[NAME_LEN];

	if (p->fd >= 0)
		close(p->fd);
	if (unlink_tmp) {
		tmp_name(name, p->seg_id);
		unlinkat(ns->dev[p->dev].dirfd, name, 0);
	}
	dev_release(ns, p->dev, p->reserved);
	free(p);
}

static int nvme_put_appendv(struct store_put *put, const struct iovec *iov, int n)
{
	struct nvme_put *p = (struct nvme_put *)put;
	struct nvme_store *ns = to_ns(put->st);
	size_t len = 0;
	int ret;

	if (p->err)
		return p->err;
	for (int i = 0; i < n; i++) {
		if (iov[i].iov_len % STORE_ALIGN || (uintptr_t)iov[i].iov_base % STORE_ALIGN)
			return -EINVAL;
		len += iov[i].iov_len;
	}
	ret = n == 1 ? uring_write_full(p->fd, iov[0].iov_base, len, p->size)
		     : uring_writev_full(p->fd, iov, n, p->size);
	if (ret < 0) {
		p->err = ret;
		log_err("nvme %s: writing segment %016" PRIx64 " at %" PRIu64 ": %s",
			ns->dev[p->dev].path, p->seg_id, p->size, strerror(-ret));
		dev_note_error(ns, p->dev, ret, p->size + len);
		return ret;
	}
	p->size += len;
	if (p->size > p->reserved) {
		pthread_mutex_lock(&ns->lock);
		ns->dev[p->dev].reserved += p->size - p->reserved;
		pthread_mutex_unlock(&ns->lock);
		p->reserved = p->size;
	}
	return 0;
}

static int nvme_put_append(struct store_put *put, const void *buf, size_t len)
{
	struct iovec one = {.iov_base = (void *)buf, .iov_len = len};

	return nvme_put_appendv(put, &one, 1);
}

static int nvme_put_finish(struct store_put *put, uint32_t *dev)
{
	struct nvme_put *p = (struct nvme_put *)put;
	struct nvme_store *ns = to_ns(put->st);
	struct nvme_dev *d = &ns->dev[p->dev];
	char tmp[NAME_LEN], name[NAME_LEN];
	const char *what;
	int ret;

	if (p->err) {
		ret = p->err;
		goto abort;
	}
	what = "fdatasync";
	ret = uring_fdatasync(p->fd);
	if (ret < 0)
		goto fail;
	what = "close";
	ret = close(p->fd) < 0 ? -errno : 0;
	p->fd = -1;
	if (ret < 0)
		goto fail;
	tmp_name(tmp, p->seg_id);
	seg_name(name, p->seg_id);
	what = "rename";
	if (renameat(d->dirfd, tmp, d->dirfd, name) < 0) {
		ret = -errno;
		goto fail;
	}
	what = "directory fsync";
	if (fsync(d->dirfd) < 0) {
		ret = -errno;
		/* Not durable: take it back so it cannot be mistaken for a good one. */
		unlinkat(d->dirfd, name, 0);
		goto fail;
	}
	*dev = p->dev;
	put_free(p, 0);
	return 0;
fail:
	log_err("nvme %s: %s of segment %016" PRIx64 ": %s", d->path, what, p->seg_id,
		strerror(-ret));
	dev_note_error(ns, p->dev, ret, p->size);
abort:
	put_free(p, 1);
	return ret;
}

static void nvme_put_abort(struct store_put *put)
{
	put_free((struct nvme_put *)put, 1);
}

/* Cached slot of (dev, seg_id) that is not doomed, or -1. fdc_lock held. */
static int fdc_find_locked(struct nvme_store *ns, uint32_t dev, uint64_t seg_id)
{
	for (int i = 0; i < NVME_FD_CACHE; i++) {
		struct nvme_fdc *f = &ns->fdc[i];
		if (f->fd >= 0 && f->seg_id == seg_id && f->dev == dev && !f->doomed)
			return i;
	}
	return -1;
}

/*
 * A read fd for segment seg_id on dev; *slot gets its cache slot (-1: not
 * cached, the caller closes it). Release with fdc_put(). fd or -errno.
 */
static int fdc_get(struct nvme_store *ns, uint32_t dev, uint64_t seg_id, int *slot)
{
	char name[NAME_LEN];
	int i, fd, victim = -1, old = -1;

	pthread_mutex_lock(&ns->fdc_lock);
	if ((i = fdc_find_locked(ns, dev, seg_id)) >= 0) {
		ns->fdc[i].users++;
		ns->fdc[i].tick = ++ns->fdc_tick;
		fd = ns->fdc[i].fd;
		pthread_mutex_unlock(&ns->fdc_lock);
		*slot = i;
		return fd;
	}
	pthread_mutex_unlock(&ns->fdc_lock);
	seg_name(name, seg_id);
	fd = dev_open(ns, dev, name, O_RDONLY);
	*slot = -1;
	if (fd < 0)
		return fd;
	pthread_mutex_lock(&ns->fdc_lock);
	if ((i = fdc_find_locked(ns, dev, seg_id)) >= 0) {
		/* opened meanwhile by another reader: share that one */
		old = fd;
		ns->fdc[i].users++;
		ns->fdc[i].tick = ++ns->fdc_tick;
		fd = ns->fdc[i].fd;
		*slot = i;
		goto out;
	}
	for (i = 0; i < NVME_FD_CACHE; i++) {
		struct nvme_fdc *f = &ns->fdc[i];
		if (f->fd < 0) {
			victim = i;
			break;
		}
		if (!f->users && (victim < 0 || f->tick < ns->fdc[victim].tick))
			victim = i;
	}
	if (victim >= 0) { /* else every slot is in use: fd stays uncached */
		old = ns->fdc[victim].fd;
		ns->fdc[victim] = (struct nvme_fdc){.seg_id = seg_id, .dev = dev, .fd = fd,
						    .users = 1, .tick = ++ns->fdc_tick};
		*slot = victim;
	}
out:
	pthread_mutex_unlock(&ns->fdc_lock);
	if (old >= 0)
		close(old);
	return fd;
}

static void fdc_put(struct nvme_store *ns, int slot, int fd)
{
	if (slot < 0) {
		close(fd);
		return;
	}
	pthread_mutex_lock(&ns->fdc_lock);
	if (--ns->fdc[slot].users == 0 && ns->fdc[slot].doomed) {
		ns->fdc[slot].fd = -1;
		ns->fdc[slot].doomed = 0;
	} else {
		fd = -1;
	}
	pthread_mutex_unlock(&ns->fdc_lock);
	if (fd >= 0)
		close(fd);
}

/* Segment seg_id on dev is going away: close its cached fd (or let its last
 * reader do it). */
static void fdc_drop(struct nvme_store *ns, uint32_t dev, uint64_t seg_id)
{
	int i, fd = -1;

	pthread_mutex_lock(&ns->fdc_lock);
	if ((i = fdc_find_locked(ns, dev, seg_id)) >= 0) {
		if (ns->fdc[i].users) {
			ns->fdc[i].doomed = 1;
		} else {
			fd = ns->fdc[i].fd;
			ns->fdc[i].fd = -1;
		}
	}
	pthread_mutex_unlock(&ns->fdc_lock);
	if (fd >= 0)
		close(fd);
}

static int nvme_read(struct store *st, uint64_t seg_id, uint32_t dev, uint64_t off, void *buf,
		     size_t len)
{
	struct nvme_store *ns = to_ns(st);
	ssize_t got;
	int fd, slot;

	if (dev >= (uint32_t)ns->ndev)
		return -EINVAL;
	if (off % STORE_ALIGN || len % STORE_ALIGN || (uintptr_t)buf % STORE_ALIGN)
		return -EINVAL;
	fd = fdc_get(ns, dev, seg_id, &slot);
	if (fd < 0)
		return fd;
	got = uring_read_full(fd, buf, len, off);
	fdc_put(ns, slot, fd);
	if (got >= 0 && (size_t)got < len) {
		log_err("nvme %s: segment %016" PRIx64 " short read at %" PRIu64
			": %zd of %zu bytes",
			ns->dev[dev].path, seg_id, off, got, len);
		return -EIO;
	}
	if (got < 0)
		log_err("nvme %s: reading segment %016" PRIx64 " at %" PRIu64 ": %s",
			ns->dev[dev].path, seg_id, off, strerror((int)-got));
	return got < 0 ? (int)got : 0;
}

static int nvme_remove(struct store *st, uint64_t seg_id, uint32_t dev)
{
	struct nvme_store *ns = to_ns(st);
	char name[NAME_LEN];

	if (dev >= (uint32_t)ns->ndev)
		return -EINVAL;
	seg_name(name, seg_id);
	fdc_drop(ns, dev, seg_id);
	return unlinkat(ns->dev[dev].dirfd, name, 0) < 0 ? -errno : 0;
}

static int nvme_stat(struct store *st, struct store_dev_stat *out, int max)
{
	struct nvme_store *ns = to_ns(st);
	uint64_t now = clock_now_ms();

	for (int i = 0; i < ns->ndev && i < max; i++) {
		struct nvme_dev *d = &ns->dev[i];
		int ok;

		memset(&out[i], 0, sizeof(out[i]));
		snprintf(out[i].name, sizeof(out[i].name), "%s", d->path);
		out[i].avail = dev_avail(d, &out[i].total, &out[i].used, &ok);
		pthread_mutex_lock(&ns->lock);
		out[i].failed = !ok || (d->failed_until && now < d->failed_until);
		pthread_mutex_unlock(&ns->lock);
	}
	return ns->ndev;
}

static int list_dev(struct nvme_store *ns, uint32_t i, store_list_fn fn, void *arg)
{
	struct nvme_dev *d = &ns->dev[i];
	struct dirent *de;
	DIR *dir;
	int fd, ret = 0;

	fd = openat(d->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	dir = fdopendir(fd);
	if (!dir) {
		ret = -errno;
		close(fd);
		return ret;
	}
	for (;;) {
		struct stat sb;
		uint64_t id;

		errno = 0;
		de = readdir(dir);
		if (!de) {
			ret = errno ? -errno : 0;
			break;
		}
		if (segname_parse(de->d_name, &id))
			continue;
		if (fstatat(d->dirfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT) /* removed meanwhile */
				continue;
			ret = -errno;
			break;
		}
		if (!S_ISREG(sb.st_mode))
			continue;
		ret = fn(arg, id, i, (uint64_t)sb.st_size);
		if (ret)
			break;
	}
	closedir(dir);
	return ret;
}

static int nvme_list(struct store *st, store_list_fn fn, void *arg)
{
	struct nvme_store *ns = to_ns(st);
	int first_err = 0;

	for (int i = 0; i < ns->ndev; i++) {
		int ret = list_dev(ns, (uint32_t)i, fn, arg);

		if (ret > 0 || (ret < 0 && ret != -ENOENT && ret != -EIO && ret != -ESTALE))
			return ret; /* fn stopped the walk, or not a device fault */
		if (ret < 0) {
			log_err("nvme %s: listing segments: %s", ns->dev[i].path, strerror(-ret));
			if (!first_err)
				first_err = ret;
		}
	}
	return first_err;
}

static void nvme_close(struct store *st)
{
	struct nvme_store *ns = to_ns(st);

	for (int i = 0; i < NVME_FD_CACHE; i++)
		if (ns->fdc[i].fd >= 0)
			close(ns->fdc[i].fd);
	pthread_mutex_destroy(&ns->fdc_lock);
	for (int i = 0; i < ns->ndev; i++) {
		if (ns->dev[i].reserved)
			log_err("nvme %s: closed with puts in flight", ns->dev[i].path);
		if (ns->dev[i].dirfd >= 0)
			close(ns->dev[i].dirfd);
		free(ns->dev[i].path);
	}
	pthread_mutex_destroy(&ns->lock);
	free(ns);
}

static const struct store_ops nvme_ops = {
    .name = "nvme",
    .tier = STORE_TIER_NVME,
    .put_begin = nvme_put_begin,
    .put_append = nvme_put_append,
    .put_appendv = nvme_put_appendv,
    .put_finish = nvme_put_finish,
    .put_abort = nvme_put_abort,
    .read = nvme_read,
    .remove = nvme_remove,
    .stat = nvme_stat,
    .list = nvme_list,
    .close = nvme_close,
};

int store_nvme_open(const char *const *dirs, int ndirs, struct store **out)
{
	struct nvme_store *ns;
	struct timespec ts;
	int ret = 0;

	if (ndirs <= 0)
		return -EINVAL;
	ns = calloc(1, sizeof(*ns) + (size_t)ndirs * sizeof(ns->dev[0]));
	if (!ns)
		return -ENOMEM;
	ns->base.ops = &nvme_ops;
	pthread_mutex_init(&ns->lock, NULL);
	pthread_mutex_init(&ns->fdc_lock, NULL);
	for (int i = 0; i < NVME_FD_CACHE; i++)
		ns->fdc[i].fd = -1;
	clock_gettime(CLOCK_REALTIME, &ts);
	ns->rng = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ (uint64_t)getpid() ^
		  (uint64_t)(uintptr_t)ns;
	if (!ns->rng)
		ns->rng = 1;
	for (int i = 0; i < ndirs; i++)
		ns->dev[i].dirfd = -1;
	ns->ndev = ndirs;
	for (int i = 0; i < ndirs; i++) {
		struct nvme_dev *d = &ns->dev[i];
		struct stat sb, prev;

		d->direct = 1;
		d->path = strdup(dirs[i]);
		if (!d->path) {
			ret = -ENOMEM;
			goto err;
		}
		if (mkdir(dirs[i], 0700) == 0)
			atomic_file_sync_parent(dirs[i]); /* its entry durable first */
		else if (errno != EEXIST) {
			ret = -errno;
			goto err_dir;
		}
		d->dirfd = open(dirs[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (d->dirfd < 0 || fstat(d->dirfd, &sb) < 0) {
			ret = -errno;
			goto err_dir;
		}
		for (int k = 0; k < i; k++) {
			if (fstat(ns->dev[k].dirfd, &prev) == 0 && prev.st_dev == sb.st_dev &&
			    prev.st_ino == sb.st_ino) {
				log_err("nvme: %s and %s are the same directory", dirs[k], dirs[i]);
				ret = -EINVAL;
				goto err;
			}
		}
	}
	*out = &ns->base;
	return 0;
err_dir:
	for (int i = 0; i < ndirs; i++)
		if (ns->dev[i].path && ns->dev[i].dirfd < 0) {
			log_err("nvme %s: %s", dirs[i], strerror(-ret));
			break;
		}
err:
	nvme_close(&ns->base);
	return ret;
}

int store_nvme_lock(const char *dir, int *fd)
{
	char lock[4200];
	int lfd, ret;

	snprintf(lock, sizeof(lock), "%s/.spillway.lock", dir);
	lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lfd < 0)
		return -errno;
	snprintf(lock, sizeof(lock), "nvme '%s'", dir);
	if ((ret = lockwait_take(lfd, lock)) < 0) {
		close(lfd);
		return ret;
	}
	*fd = lfd;
	return 0;
}
