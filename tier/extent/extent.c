/*
 * extent.c — extents (extent.h): granting one, opens and closes passed
 * through to it, sealing, the daemon's I/O on it, recovery and removal.
 */
#include "tier/extent/extent.h"
#include "tier/tier_i.h"
#include "tier/store/store.h"

#include "common/clock.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "common/uring.h"
#include "index/journal.h"

#include <dirent.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define EXT_DIRS 64
#define B JRNL_EXT_BLOCK

/* A seal due (seal_delay after its last writer's close). */
struct due {
	uint64_t ino, at_ms;
};

/* The room: each cold directory's extents/ folder. Read-only after
 * ext_room_new but next_id (atomic) and the seals due (their lock, a
 * leaf). */
struct extents {
	int n;
	int dirfd[EXT_DIRS];
	uint64_t next_id;
	pthread_mutex_t due_lock;
	struct due *due; /* in the order they fall due */
	size_t ndue, cap;
	/* the reaper: the last close of a removed extent frees its blocks
	 * (on a disk mounted with discard, a discard per run of blocks, in
	 * the closing thread); that close runs here, off the FUSE request
	 * that removed the file (an unlink waited for it) */
	pthread_mutex_t reap_lock;
	pthread_cond_t reap_cv;
	int *reap; /* fds to close */
	size_t nreap, reap_cap;
	int reap_stop, reaper_on;
	pthread_t reaper;
};

static void ext_name(char *buf, size_t len, uint64_t ino, uint64_t id)
{
	snprintf(buf, len, "%016" PRIx64 "-%016" PRIx64, ino, id);
}

static int parse_name(const char *name, uint64_t *ino, uint64_t *id)
{
	char tail;
	return strlen(name) == 33 && name[16] == '-' &&
	       sscanf(name, "%16" SCNx64 "-%16" SCNx64 "%c", ino, id, &tail) == 2;
}

#define ST_ADD(f, v) __atomic_add_fetch(&t->st.f, (v), __ATOMIC_RELAXED)

/* ---- the room ---- */

static void *reaper_main(void *arg)
{
	struct extents *e = arg;
	int *fds = NULL;
	size_t n;

	pthread_mutex_lock(&e->reap_lock);
	for (;;) {
		while (!e->nreap && !e->reap_stop)
			pthread_cond_wait(&e->reap_cv, &e->reap_lock);
		if (!e->nreap)
			break; /* stopping, and nothing left */
		fds = e->reap;
		n = e->nreap;
		e->reap = NULL;
		e->nreap = e->reap_cap = 0;
		pthread_mutex_unlock(&e->reap_lock);
		for (size_t i = 0; i < n; i++)
			close(fds[i]);
		free(fds);
		pthread_mutex_lock(&e->reap_lock);
	}
	pthread_mutex_unlock(&e->reap_lock);
	return NULL;
}

/* Close fd, the last open of an extent whose name is gone, on the reaper
 * (at once when there is none or no memory). */
static void reap_close(struct extents *e, int fd)
{
	pthread_mutex_lock(&e->reap_lock);
	if (e->reaper_on && !e->reap_stop && e->nreap == e->reap_cap) {
		size_t cap = e->reap_cap ? e->reap_cap * 2 : 64;
		int *v = realloc(e->reap, cap * sizeof(*v));
		if (v) {
			e->reap = v;
			e->reap_cap = cap;
		}
	}
	if (e->reaper_on && !e->reap_stop && e->nreap < e->reap_cap) {
		e->reap[e->nreap++] = fd;
		fd = -1;
		pthread_cond_signal(&e->reap_cv);
	}
	pthread_mutex_unlock(&e->reap_lock);
	if (fd >= 0)
		close(fd);
}

static int sweep_dir(struct tier *t, int dfd)
{
	int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;
	uint64_t ino, id;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	while ((de = readdir(d))) {
		struct inode *in;
		int keep = 0;
		if (de->d_name[0] == '.')
			continue;
		if (parse_name(de->d_name, &ino, &id) && (in = idx_get(t->idx, ino))) {
			idx_inode_lock(in);
			keep = in->ext && in->ext->id == id;
			idx_inode_unlock(in);
			idx_put(t->idx, in);
		}
		if (!keep && unlinkat(dfd, de->d_name, 0) == 0)
			ST_ADD(ext_orphans, 1);
	}
	closedir(d);
	return 0;
}

int ext_room_new(struct tier *t, char *err, size_t errlen)
{
	char *copy, *save = NULL, *d;
	struct extents *e;
	struct timespec ts;

	if (!t->cfg->nvme)
		return 0;
	if (!(e = calloc(1, sizeof(*e))) || !(copy = strdup(t->cfg->nvme))) {
		free(e);
		return -ENOMEM;
	}
	for (d = strtok_r(copy, ":", &save); d && e->n < EXT_DIRS; d = strtok_r(NULL, ":", &save)) {
		char p[4200];
		snprintf(p, sizeof(p), "%s/extents", d);
		if ((mkdir(p, 0700) < 0 && errno != EEXIST) ||
		    (e->dirfd[e->n] = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
			snprintf(err, errlen, "option 'nvme': '%s': %s", p, strerror(errno));
			int ret = -errno;
			while (e->n > 0)
				close(e->dirfd[--e->n]);
			free(copy);
			free(e);
			return ret;
		}
		fchmod(e->dirfd[e->n], 0700);
		e->n++;
	}
	free(copy);
	pthread_mutex_init(&e->due_lock, NULL);
	pthread_mutex_init(&e->reap_lock, NULL);
	pthread_cond_init(&e->reap_cv, NULL);
	clock_gettime(CLOCK_REALTIME, &ts);
	e->next_id = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	t->extr = e;
	/* extents no file names: a crash between granting one and journaling
	 * it, or a file removed while its extent's unlink was lost */
	for (int i = 0; i < e->n; i++)
		sweep_dir(t, e->dirfd[i]);
	if (t->st.ext_orphans)
		log_info("extents: removed %llu that no file names",
			 (unsigned long long)t->st.ext_orphans);
	return 0;
}

void ext_room_start(struct tier *t)
{
	struct extents *e = t->extr;
	int on;

	if (!e)
		return;
	on = pthread_create(&e->reaper, NULL, reaper_main, e) == 0;
	pthread_mutex_lock(&e->reap_lock);
	e->reaper_on = on;
	pthread_mutex_unlock(&e->reap_lock);
}

void ext_room_free(struct tier *t)
{
	struct extents *e = t->extr;

	if (!e)
		return;
	if (e->reaper_on) { /* it closes what is queued, then ends */
		pthread_mutex_lock(&e->reap_lock);
		e->reap_stop = 1;
		pthread_cond_signal(&e->reap_cv);
		pthread_mutex_unlock(&e->reap_lock);
		pthread_join(e->reaper, NULL);
	}
	free(e->reap);
	pthread_cond_destroy(&e->reap_cv);
	pthread_mutex_destroy(&e->reap_lock);
	for (int i = 0; i < e->n; i++)
		close(e->dirfd[i]);
	pthread_mutex_destroy(&e->due_lock);
	free(e->due);
	free(e);
	t->extr = NULL;
}

/* ---- crcs and seals ---- */

/* crc32c of every block of fd's first size bytes (from the page cache:
 * mapped, not copied). NULL on error (*err). */
static uint32_t *crc_blocks(int fd, uint64_t size, uint32_t *n, int *err)
{
	uint32_t nb = idx_ext_blocks(size);
	uint32_t *crc = malloc(nb ? (size_t)nb * 4 : 4);
	const uint64_t win = 64ull << 20;

	*n = nb;
	if (!crc) {
		*err = -ENOMEM;
		return NULL;
	}
	for (uint64_t w = 0; w < size; w += win) {
		uint64_t wl = size - w < win ? size - w : win;
		uint8_t *p = mmap(NULL, wl, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, (off_t)w);
		if (p == MAP_FAILED) {
			*err = -errno;
			free(crc);
			return NULL;
		}
		for (uint64_t o = 0; o < wl; o += B)
			crc[(w + o) / B] = crc32c(0, p + o, wl - o < B ? wl - o : B);
		munmap(p, wl);
	}
	return crc;
}

/* Seal in's extent: crcs of its size bytes, journaled with the size. The
 * lock stays held (no writer can open meanwhile, nothing truncates it).
 * The bytes and the extent's name are made durable before the record: a
 * seal on disk over bytes that are not (the kernel's pages not yet written
 * back) would fail its crcs after a power loss, and a file closed and
 * sealed before a journal sync must come back whole. */
static void seal_locked(struct tier *t, struct inode *in)
{
	struct idx_ext *x = in->ext;
	uint32_t n, *crc;
	int err = 0;

	ext_refresh_locked(t, in);
	if (fdatasync(x->fd) < 0 ||
	    (t->extr && x->dev < (uint32_t)t->extr->n && fsync(t->extr->dirfd[x->dev]) < 0)) {
		x->wb_err = -errno; /* the writer's next fsync reports it */
		log_warn("extent of inode %llu: cannot seal it: its sync failed: %s (its reads are "
			 "not verified until it is)",
			 (unsigned long long)in->ino, strerror(errno));
		return;
	}
	if (!(crc = crc_blocks(x->fd, in->size, &n, &err))) {
		log_warn("extent of inode %llu: cannot seal it: %s (its reads are not verified "
			 "until it is)",
			 (unsigned long long)in->ino, strerror(-err));
		return;
	}
	free(x->crc);
	x->crc = crc;
	x->ncrc = n;
	x->size = in->size;
	x->sealed = 1;
	x->used = idx_tick(t->idx);
	in->attr_dirty = 0;
	if (idx_journal_attr_locked(t->idx, in) == 0)
		idx_journal_ext_locked(t->idx, in, 0);
	ST_ADD(ext_seals, 1);
	ST_ADD(ext_sealed_bytes, in->size);
}

/* A change: a seal in flight or done no longer holds. Durable before the
 * extent changes (the kernel may write its pages back at any time after a
 * write): a power loss must never leave the old seal over new bytes (its
 * crcs would fail: EIO for bytes the disk holds). 0 or -EIO. */
static int unseal_locked(struct tier *t, struct inode *in)
{
	struct idx_ext *x = in->ext;
	int ret;

	x->wgen++;
	if (!x->sealed)
		return 0;
	x->sealed = 0;
	free(x->crc);
	x->crc = NULL;
	x->ncrc = 0;
	if ((ret = idx_journal_ext_locked(t->idx, in, 0)) == 0 && t->jrnl)
		ret = jrnl_sync(t->jrnl);
	return ret;
}

void ext_refresh_locked(struct tier *t, struct inode *in)
{
	struct stat st;
	int64_t mt, ct;

	if (!in->ext || in->ext->fd < 0 || fstat(in->ext->fd, &st) < 0)
		return;
	mt = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	ct = (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec;
	if ((uint64_t)st.st_size != in->size) {
		in->size = (uint64_t)st.st_size;
		in->attr_dirty = 1;
	}
	/* only what changed in the extent since last taken: a time the
	 * application set (utimensat) stays until the extent is written again */
	if (mt != in->ext->seen_mt) {
		in->ext->seen_mt = mt;
		if (mt > in->mtime) {
			in->mtime = mt;
			in->attr_dirty = 1;
		}
	}
	if (ct != in->ext->seen_ct) {
		in->ext->seen_ct = ct;
		if (ct > in->ctime) {
			in->ctime = ct;
			in->attr_dirty = 1;
		}
	}
}

/* ---- granting one, opens and closes ---- */

/* The cold directory with the most room that keeps its margin, or -ENOSPC.
 * Directories on one filesystem share its room: among them, each new
 * extent takes the next in turn (their disks' bandwidth, if the mount
 * stacks several). */
static int choose_dir(struct tier *t)
{
	struct extents *e = t->extr;
	struct store_dev_stat ds[EXT_DIRS];
	uint64_t best = 0, best_fsid = 0;
	int dev = -ENOSPC, nds = t->store ? store_stat(t->store, ds, EXT_DIRS) : 0;
	unsigned start = (unsigned)(__atomic_load_n(&e->next_id, __ATOMIC_RELAXED) % (uint64_t)e->n);

	for (int k = 0; k < e->n; k++) {
		int i = (int)((start + (unsigned)k) % (unsigned)e->n);
		struct statvfs sv;
		uint64_t total, avail, margin;
		/* a directory the segments skip after an I/O error: so do extents */
		if ((i < nds && ds[i].failed) || fstatvfs(e->dirfd[i], &sv) < 0)
			continue;
		total = (uint64_t)sv.f_blocks * sv.f_frsize;
		avail = (uint64_t)sv.f_bavail * sv.f_frsize;
		margin = total / 10 > EXT_MARGIN_MIN ? total / 10 : EXT_MARGIN_MIN;
		if (avail < margin)
			continue;
		/* with s3 below, demotion keeps the directory under the
		 * threshold: an extent (never demoted yet) must not eat that */
		if (t->s3 && (double)(total - avail) > (t->cfg->nvme_threshold - 0.05) * (double)total)
			continue;
		if (avail > best && (dev < 0 || (uint64_t)sv.f_fsid != best_fsid)) {
			best = avail;
			best_fsid = (uint64_t)sv.f_fsid;
			dev = i;
		}
	}
	return dev;
}

/* Should this open get an extent? An empty file opened to write while
 * streams are written around (one was in the last EXT_RECENT_MS: tier/admit
 * found RAM above spill_threshold; the evictor may have brought it down
 * since), no other open, passthrough at hand. Not merely RAM above
 * low_watermark: files that fit in RAM stay there (the hot tier's job). */
static int wanted_locked(struct tier *t, struct inode *in, int write, int pt)
{
	uint64_t around = __atomic_load_n(&t->admit.around_ms, __ATOMIC_RELAXED);

	if (!t->extr || !t->cfg->extents || !tier_pt(t) || !pt || !write || in->size ||
	    in->open_count || in->pt_opens || in->pinned || in->nlink == 0 ||
	    idx_check_writable(t->idx) < 0)
		return 0;
	for (uint64_t c = 0; c < in->nchunks; c++)
		if (in->chunks[c].state != CHUNK_ABSENT)
			return 0;
	return around && clock_now_ms() - around < EXT_RECENT_MS;
}

/* [off, end) of in into out at the same offsets, in the kernel:
 * copy_file_range where it can (one filesystem), sendfile across them
 * (tmpfs to a disk: copy_file_range says EXDEV). 0 or -errno. */
static int copy_range(int in, int out, uint64_t off, uint64_t end, int *cross)
{
	loff_t a = (loff_t)off, b = (loff_t)off;
	off_t so = (off_t)off;

	if (*cross && lseek(out, (off_t)off, SEEK_SET) < 0)
		return -errno;
	while ((uint64_t)(*cross ? (uint64_t)so : (uint64_t)a) < end) {
		ssize_t r;
		if (!*cross) {
			r = copy_file_range(in, &a, out, &b, end - (uint64_t)a, 0);
			if (r < 0 && (errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP) &&
			    (uint64_t)a == off) {
				*cross = 1;
				so = (off_t)off;
				if (lseek(out, (off_t)off, SEEK_SET) < 0)
					return -errno;
				continue;
			}
		} else {
			r = sendfile(out, in, &so, end - (uint64_t)so);
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
	}
	return 0;
}

/* The data of [0, len) of in into out at the same offsets; holes stay
 * holes (SEEK_DATA: a sparse file all in RAM does not become zeros on
 * disk). 0 or -errno. */
static int copy_all(int in, int out, uint64_t len)
{
	uint64_t off = 0;
	int cross = 0, ret;

	while (off < len) {
		off_t d = lseek(in, (off_t)off, SEEK_DATA), h;
		if (d < 0)
			return errno == ENXIO ? 0 : -errno; /* the rest is a hole */
		if ((uint64_t)d >= len)
			return 0;
		if ((h = lseek(in, d, SEEK_HOLE)) < 0)
			return -errno;
		if ((uint64_t)h > len)
			h = (off_t)len;
		if ((ret = copy_range(in, out, (uint64_t)d, (uint64_t)h, &cross)) < 0)
			return ret;
		off = (uint64_t)h;
	}
	return 0;
}

/* The extent's times as they are now are not the file's news (a copy
 * made them, or they were taken already): ext_refresh_locked takes only
 * later ones. */
static void times_seen(struct idx_ext *x, const struct stat *st)
{
	x->seen_mt = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
	x->seen_ct = (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec;
}

/* A new extent file for inode ino on the directory with the most room:
 * empty, or (hot_fd >= 0) holding size bytes copied from hot_fd, durable
 * (fdatasync of it and its name) when asked. No lock needed: nothing
 * names it yet. 0 or -errno (nothing left behind). */
static int make_file(struct tier *t, uint64_t ino, int hot_fd, uint64_t size, int durable,
		     struct ext_move *m)
{
	struct extents *e = t->extr;
	char name[40];
	int ret = 0;

	*m = (struct ext_move){.fd = -1, .dev = choose_dir(t), .size = size};
	if (m->dev < 0)
		return m->dev;
	m->id = __atomic_add_fetch(&e->next_id, 1, __ATOMIC_RELAXED);
	m->ino = ino;
	ext_name(name, sizeof(name), ino, m->id);
	m->fd = openat(e->dirfd[m->dev], name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (m->fd < 0)
		return -errno;
	if (hot_fd >= 0 && ((ret = copy_all(hot_fd, m->fd, size)) < 0 ||
			    (ftruncate(m->fd, (off_t)size) < 0 && (ret = -errno))))
		goto fail;
	/* durable before the record that lets its RAM copy go (an evict) */
	if (durable && (fdatasync(m->fd) < 0 || fsync(e->dirfd[m->dev]) < 0)) {
		ret = -errno;
		goto fail;
	}
	return 0;
fail:
	ext_move_abort(t, m);
	return ret;
}

void ext_move_abort(struct tier *t, struct ext_move *m)
{
	char name[40];

	if (m->fd < 0)
		return;
	close(m->fd);
	m->fd = -1;
	ext_name(name, sizeof(name), m->ino, m->id);
	unlinkat(t->extr->dirfd[m->dev], name, 0);
	free(m->crc);
	m->crc = NULL;
}

/* m, made for in, becomes in's extent, journaled (sealed with m's crcs
 * when it has them). The file's opens now count as the extent's. 0 or
 * -errno (m is still the caller's). */
static int install_locked(struct tier *t, struct inode *in, struct ext_move *m)
{
	struct idx_ext *x;
	struct stat st;

	if (fstat(m->fd, &st) < 0)
		return -errno;
	if (!(x = idx_ext_new_locked(in)))
		return -ENOMEM;
	x->id = m->id;
	x->dev = (uint32_t)m->dev;
	x->fd = m->fd;
	x->used = idx_tick(t->idx);
	times_seen(x, &st);
	/* opens from before (an adopted stream's): each may write */
	x->opens = in->open_count;
	x->writers = in->open_count;
	if (m->crc) {
		x->crc = m->crc;
		x->ncrc = m->ncrc;
		x->size = m->size;
		x->sealed = 1;
	}
	if (idx_journal_ext_locked(t->idx, in, 0) < 0) {
		x->crc = NULL; /* still m's */
		idx_ext_free(in);
		return -EIO;
	}
	m->fd = -1;
	m->crc = NULL;
	ST_ADD(ext_created, 1);
	ST_ADD(ext_files, 1);
	if (x->sealed) {
		ST_ADD(ext_seals, 1);
		ST_ADD(ext_sealed_bytes, x->size);
		ST_ADD(ext_written_bytes, x->size);
	}
	return 0;
}

/* A new extent for in, journaled: empty, or (hot_fd >= 0) holding the
 * file's bytes so far, copied from its hot file before the record. The
 * file's opens now count as the extent's. 0 or -errno (nothing changed). */
static int grant_locked(struct tier *t, struct inode *in, int hot_fd, int durable)
{
	struct ext_move m;
	int ret;

	if ((ret = make_file(t, in->ino, hot_fd, in->size, durable, &m)) < 0)
		return ret;
	if ((ret = install_locked(t, in, &m)) < 0)
		ext_move_abort(t, &m);
	return ret;
}

int ext_move_prepare(struct tier *t, uint64_t ino, int hot_fd, uint64_t size, struct ext_move *m)
{
	int ret, err = 0;

	if (!t->extr || !t->cfg->extents || !tier_pt(t))
		return -EAGAIN;
	if ((ret = make_file(t, ino, hot_fd, size, 1, m)) < 0)
		return ret;
	/* the crcs from the page cache the copy just filled: sealed at once */
	if (!(m->crc = crc_blocks(m->fd, size, &m->ncrc, &err))) {
		ext_move_abort(t, m);
		return err;
	}
	return 0;
}

int ext_move_commit_locked(struct tier *t, struct inode *in, struct ext_move *m)
{
	if (ext_movable_locked(t, in) < 0 || in->open_count || in->size != m->size)
		return -EAGAIN;
	return install_locked(t, in, m);
}

void ext_seal_locked(struct tier *t, struct inode *in)
{
	if (in->ext && !in->ext->sealed && !in->ext->writers && in->nlink > 0)
		seal_locked(t, in);
}

int ext_movable_locked(struct tier *t, struct inode *in)
{
	if (!t->extr || !t->cfg->extents || !tier_pt(t) || in->ext || in->pt_opens ||
	    in->pinned || in->nlink == 0 || !in->size || idx_check_writable(t->idx) < 0)
		return -EAGAIN;
	for (uint64_t c = 0; c < in->nchunks; c++) {
		const struct chunk *ch = &in->chunks[c];
		if ((ch->state != CHUNK_ABSENT && ch->state != CHUNK_HOT_DIRTY &&
		     ch->state != CHUNK_HOT_CLEAN) ||
		    ch->pins || ch->chain || ch->queued || ch->loc.seg_id)
			return -EAGAIN;
	}
	return 0;
}

int ext_adopt_locked(struct tier *t, struct inode *in, int hot_fd, int durable)
{
	if (ext_movable_locked(t, in) < 0)
		return -EAGAIN;
	return grant_locked(t, in, hot_fd, durable);
}

int ext_open_locked(struct tier *t, struct inode *in, int write, int pt,
		    int (*pt_open)(void *ctx, int fd), void *ctx, int32_t *backing_id)
{
	struct idx_ext *x = in->ext;
	int ret;

	if (!x) {
		if (!wanted_locked(t, in, write, pt && pt_open) || grant_locked(t, in, -1, 0) < 0)
			return 0;
		x = in->ext;
	}
	if (x->fd < 0)
		return -EIO; /* recovery could not open it */
	if (in->pt_opens == UINT16_MAX || x->opens == UINT32_MAX)
		return -EMFILE;
	if (write && (ret = unseal_locked(t, in)) < 0)
		return ret;
	/* one mode per inode: passed through while it has such opens (or
	 * none), through the daemon while it has daemon opens */
	pt = pt_open && pt && (x->opens == 0 || in->pt_opens);
	if (pt && !in->pt_opens) {
		int id = pt_open(ctx, x->fd);
		if (id > 0)
			in->backing_id = id;
		else
			pt = 0;
	}
	if (pt) {
		in->pt_opens++;
		if (write)
			__atomic_add_fetch(&in->pt_writers, 1, __ATOMIC_RELAXED);
		*backing_id = in->backing_id;
		ST_ADD(ext_opens, 1);
	}
	x->opens++;
	if (write)
		x->writers++;
	x->used = idx_tick(t->idx);
	in->open_count++;
	return 1;
}

/* Seal ino seal_delay from now (the maintenance worker: ext_seals_due).
 * 0, or -1: seal it now (no delay, no room). */
static int due_add(struct tier *t, uint64_t ino)
{
	struct extents *e = t->extr;
	int ret = -1;

	if (!e || !t->cfg->seal_delay_ms || !t->maint)
		return -1;
	pthread_mutex_lock(&e->due_lock);
	if (e->ndue == e->cap) {
		size_t cap = e->cap ? e->cap * 2 : 64;
		struct due *d = realloc(e->due, cap * sizeof(*d));
		if (d) {
			e->due = d;
			e->cap = cap;
		}
	}
	if (e->ndue < e->cap) {
		e->due[e->ndue++] = (struct due){ino, clock_now_ms() + t->cfg->seal_delay_ms};
		ret = 0;
	}
	pthread_mutex_unlock(&e->due_lock);
	return ret;
}

size_t ext_seals_due(struct tier *t, uint64_t *inos, size_t max, int all)
{
	struct extents *e = t->extr;
	uint64_t now = clock_now_ms();
	size_t n = 0;

	if (!e)
		return 0;
	pthread_mutex_lock(&e->due_lock);
	while (n < max && n < e->ndue && (all || e->due[n].at_ms <= now)) {
		inos[n] = e->due[n].ino;
		n++;
	}
	if (n) {
		memmove(e->due, e->due + n, (e->ndue - n) * sizeof(*e->due));
		e->ndue -= n;
	}
	pthread_mutex_unlock(&e->due_lock);
	return n;
}

void ext_seal_ino(struct tier *t, uint64_t ino)
{
	struct inode *in = idx_get(t->idx, ino);

	if (!in)
		return;
	idx_inode_lock(in);
	/* written again since (a writer open: its close queues it anew), or
	 * sealed, or going */
	ext_seal_locked(t, in);
	idx_inode_unlock(in);
	idx_put(t->idx, in);
}

void ext_seal_requeue(struct tier *t, uint64_t ino)
{
	if (due_add(t, ino) < 0)
		ext_seal_ino(t, ino);
}

void ext_seal_all_due(struct tier *t)
{
	uint64_t inos[256];
	size_t n;

	while ((n = ext_seals_due(t, inos, 256, 1)) > 0)
		for (size_t i = 0; i < n; i++)
			ext_seal_ino(t, inos[i]);
}

int ext_close(struct tier *t, struct inode *in, int write, int counted, int32_t backing_id,
	      void (*pt_close)(void *ctx, int32_t id), void *ctx)
{
	struct idx_ext *x;

	if (!__atomic_load_n(&in->ext, __ATOMIC_RELAXED))
		return 0;
	idx_inode_lock(in);
	if (!(x = in->ext)) {
		idx_inode_unlock(in);
		return 0;
	}
	ext_refresh_locked(t, in);
	if (backing_id) {
		if (in->pt_opens == 1) {
			if (pt_close)
				pt_close(ctx, in->backing_id);
			in->backing_id = 0;
		}
		if (!--in->pt_opens)
			idx_inode_wake(in); /* an evict waiting for the last release */
		if (write)
			__atomic_sub_fetch(&in->pt_writers, 1, __ATOMIC_RELAXED);
	}
	/* an open from before the extent (counted 0) was counted a writer */
	if ((write || !counted) && x->writers)
		x->writers--;
	x->opens--;
	/* the last writer's close seals it, now or seal_delay later (an
	 * unlinked file is going) */
	if (!x->writers && !x->sealed && in->nlink > 0) {
		ST_ADD(ext_written_bytes, in->size);
		if (due_add(t, in->ino) < 0)
			seal_locked(t, in);
	}
	if (in->attr_dirty) {
		in->attr_dirty = 0;
		idx_journal_attr_locked(t->idx, in);
	}
	/* the last open: the kernel's pages of what the daemon served (a
	 * passthrough open reads the extent itself, never them) go */
	int drop = x->opens == 0 && in->kcached;
	if (drop)
		in->kcached = 0;
	in->open_count--;
	idx_inode_unlock(in);
	if (drop)
		inval_async(t, in->ino, 0, 0);
	return 1;
}

/* ---- the daemon's I/O ---- */

/* in->ext, locked, or NULL (unlocked) when it has none. */
static struct idx_ext *ext_lock(struct inode *in)
{
	if (!__atomic_load_n(&in->ext, __ATOMIC_RELAXED))
		return NULL;
	idx_inode_lock(in);
	if (!in->ext)
		idx_inode_unlock(in);
	return in->ext;
}

int ext_read_begin(struct tier *t, struct inode *in, uint64_t off, size_t len,
		   struct ext_read *r)
{
	struct idx_ext *x = ext_lock(in);
	uint64_t b0, b1, end, size;
	uint32_t *crc, g;
	uint8_t *buf;
	int ret, fd;

	if (!x)
		return 1;
	if (in->pt_writers)
		ext_refresh_locked(t, in);
	in->kcached = 1;
	r->fd = x->fd;
	r->len = 0;
	r->buf = NULL;
	r->skip = 0;
	size = in->size;
	if (off >= size || len == 0) {
		idx_inode_unlock(in);
		return 0;
	}
	r->len = off + len > size ? size - off : len;
	b0 = off / B;
	b1 = (off + r->len + B - 1) / B;
	if (!x->sealed || b1 > x->ncrc || off + r->len > x->size) {
		idx_inode_unlock(in);
		return 0;
	}
	/* sealed: whole blocks, verified */
	end = b1 * B < x->size ? b1 * B : x->size;
	g = x->wgen;
	fd = x->fd;
	crc = malloc((size_t)(b1 - b0) * 4);
	if (crc)
		memcpy(crc, x->crc + b0, (size_t)(b1 - b0) * 4);
	idx_inode_unlock(in);
	if (!crc || !(buf = seg_buf_alloc((size_t)(b1 - b0) * B))) {
		free(crc);
		return -ENOMEM;
	}
	ssize_t got = uring_read_full(fd, buf, end - b0 * B, b0 * B);
	ret = got < 0 ? (int)got : (uint64_t)got < end - b0 * B ? -EIO : 0;
	if (ret == -EIO) { /* short: cut meanwhile? */
		idx_inode_lock(in);
		if (in->ext != x || x->wgen != g)
			ret = -EAGAIN;
		idx_inode_unlock(in);
	}
	for (uint64_t b = b0; ret == 0 && b < b1; b++) {
		uint64_t bl = end - b * B < B ? end - b * B : B;
		if (crc32c(0, buf + (b - b0) * B, bl) == crc[b - b0])
			continue;
		idx_inode_lock(in);
		ret = in->ext == x && x->wgen == g ? -EIO : -EAGAIN;
		idx_inode_unlock(in);
		if (ret == -EIO) {
			ST_ADD(ext_crc_errors, 1);
			ST_ADD(errors_crc, 1);
			log_err("extent of inode %llu: block %llu (bytes %llu..) fails its crc: EIO",
				(unsigned long long)in->ino, (unsigned long long)b,
				(unsigned long long)(b * B));
		}
	}
	free(crc);
	if (ret == -EAGAIN) /* written since: not sealed any more, read as it is */
		ret = 0, seg_buf_free(buf);
	else if (ret < 0)
		seg_buf_free(buf);
	else {
		r->buf = buf;
		r->skip = off - b0 * B;
	}
	return ret;
}

int ext_write_begin(struct tier *t, struct inode *in, int *fd)
{
	struct idx_ext *x = ext_lock(in);
	int ret;

	if (!x)
		return 1;
	*fd = x->fd;
	in->kcached = 1;
	ret = unseal_locked(t, in);
	idx_inode_unlock(in);
	return ret;
}

void ext_write_end(struct tier *t, struct inode *in, uint64_t off, long written)
{
	idx_inode_lock(in);
	if (in->ext && written > 0) {
		/* sealed meanwhile (another open's close): not any more */
		if (in->ext->sealed)
			unseal_locked(t, in);
		in->ext->wgen++;
		if (off + (uint64_t)written > in->size)
			in->size = off + (uint64_t)written;
		idx_touch(&in->mtime);
		in->ctime = in->mtime;
		in->attr_dirty = 1;
	}
	idx_inode_unlock(in);
}

int ext_truncate(struct tier *t, struct inode *in, uint64_t size)
{
	struct idx_ext *x = ext_lock(in);
	int ret = 0;

	if (!x)
		return 1;
	if (size == 0 && x->opens == 0) {
		/* emptied and closed: it goes, the file is an empty hot file
		 * again (its next writer under pressure gets a new extent) */
		char name[40];
		uint64_t id = x->id, old = in->size;
		int fd = x->fd, dfd = t->extr ? t->extr->dirfd[x->dev] : AT_FDCWD;
		ext_name(name, sizeof(name), in->ino, id);
		/* journaled first: a kill before the unlink leaves an orphan
		 * (removed at mount), never a file whose extent is gone */
		__atomic_store_n(&in->ext, NULL, __ATOMIC_RELAXED); /* peeked at unlocked */
		in->size = 0;
		if ((ret = idx_journal_ext_locked(t->idx, in, id)) == 0)
			ret = idx_journal_attr_locked(t->idx, in);
		__atomic_store_n(&in->ext, x, __ATOMIC_RELAXED);
		if (ret < 0) {
			in->size = old;
			idx_inode_unlock(in);
			return ret;
		}
		if (fd >= 0)
			close(fd);
		ST_ADD(ext_files, -1);
		unlinkat(dfd, name, 0);
		idx_ext_free(in);
		idx_touch(&in->mtime);
		in->ctime = in->mtime;
		ret = idx_journal_attr_locked(t->idx, in);
		idx_inode_unlock(in);
		return ret;
	}
	/* unsealed (journaled) before the extent changes */
	if ((ret = unseal_locked(t, in)) < 0)
		;
	else if (ftruncate(x->fd, (off_t)size) < 0)
		ret = -errno;
	else {
		in->size = size;
		idx_touch(&in->mtime);
		in->ctime = in->mtime;
		in->attr_dirty = 0;
		ret = idx_journal_attr_locked(t->idx, in);
	}
	idx_inode_unlock(in);
	return ret;
}

int ext_fallocate(struct tier *t, struct inode *in, int mode, uint64_t off, uint64_t len)
{
	struct idx_ext *x = ext_lock(in);
	int ret = 0;

	if (!x)
		return 1;
	if ((ret = idx_check_writable(t->idx)) < 0 || (ret = unseal_locked(t, in)) < 0)
		;
	else if (fallocate(x->fd, mode, (off_t)off, (off_t)len) < 0)
		ret = -errno;
	else {
		ext_refresh_locked(t, in);
		in->attr_dirty = 0;
		ret = idx_journal_attr_locked(t->idx, in);
	}
	idx_inode_unlock(in);
	return ret;
}

int ext_lseek(struct tier *t, struct inode *in, uint64_t off, int whence, int64_t *res)
{
	struct idx_ext *x = ext_lock(in);
	off_t r;

	if (!x)
		return 1;
	ext_refresh_locked(t, in);
	if (off >= in->size) {
		*res = -ENXIO;
	} else if ((r = lseek(x->fd, (off_t)off, whence)) < 0) {
		*res = -errno;
	} else {
		*res = (uint64_t)r > in->size ? (int64_t)in->size : (int64_t)r;
	}
	idx_inode_unlock(in);
	return 0;
}

int ext_fsync(struct tier *t, struct inode *in)
{
	struct idx_ext *x = ext_lock(in);
	int fd, dfd, ret = 0;

	if (!x)
		return 1;
	fd = x->fd;
	dfd = t->extr ? t->extr->dirfd[x->dev] : -1;
	idx_inode_unlock(in);
	/* the kernel's pages of the extent, then its name, then the journal;
	 * the open handle keeps the extent (and fd) while this runs */
	if (fdatasync(fd) < 0 || (dfd >= 0 && fsync(dfd) < 0))
		ret = -errno;
	idx_inode_lock(in);
	if (in->ext && in->ext->wb_err) { /* taken by a seal's sync meanwhile */
		ret = ret ? ret : in->ext->wb_err;
		in->ext->wb_err = 0;
	}
	if (ret == 0 && in->ext) {
		ext_refresh_locked(t, in);
		in->attr_dirty = 0;
		ret = idx_journal_attr_locked(t->idx, in);
	}
	idx_inode_unlock(in);
	if (ret == 0 && t->jrnl)
		ret = jrnl_sync(t->jrnl);
	return ret;
}

int ext_evict(struct tier *t, struct inode *in, int warm)
{
	struct idx_ext *x = ext_lock(in);
	int fd;

	if (!x)
		return 1;
	fd = x->fd;
	/* the extent's pages are the kernel's page cache, not the hot tier:
	 * evict drops them, warm reads them in */
	if (fd >= 0)
		posix_fadvise(fd, 0, 0, warm ? POSIX_FADV_WILLNEED : POSIX_FADV_DONTNEED);
	idx_inode_unlock(in);
	return 0;
}

int ext_state(struct tier *t, struct inode *in, char *buf, size_t len)
{
	struct idx_ext *x = ext_lock(in);
	int ret;

	if (!x)
		return 1;
	ret = snprintf(buf, len,
		       "hot=0 dirty=0 cold=%llu restoring=0 spilling=0 pinned=%d segments=0 "
		       "extent=1 sealed=%u",
		       (unsigned long long)((in->size + t->chunk_size - 1) / t->chunk_size),
		       in->pinned, x->sealed);
	idx_inode_unlock(in);
	return ret;
}

/* Close in's extent and remove its file (in->ext stays: the caller's). */
/* reap: the fd's last close on the reaper (a FUSE request removed the
 * file); 0: here (the maintenance worker's demotion: its next look at the
 * disk's fill must see the blocks freed, or it demotes one extent more) */
static void remove_locked(struct tier *t, struct inode *in, int reap)
{
	struct idx_ext *x = in->ext;
	char name[40];

	ext_name(name, sizeof(name), in->ino, x->id);
	if (x->fd >= 0) /* counted (a missing one, at recovery, was not) */
		ST_ADD(ext_files, -1); /* first: who sees the file gone sees the count */
	/* the name first: with x->fd still open this frees nothing, so it is
	 * quick; the blocks go at the fd's close, on the reaper */
	if (t->extr && x->dev < (uint32_t)t->extr->n)
		unlinkat(t->extr->dirfd[x->dev], name, 0);
	if (x->fd >= 0) {
		if (t->extr && reap)
			reap_close(t->extr, x->fd);
		else
			close(x->fd);
	}
	x->fd = -1;
}

void ext_drop(struct tier *t, struct inode *in)
{
	if (!ext_lock(in))
		return;
	remove_locked(t, in, 1);
	idx_inode_unlock(in);
}

/* ---- demotion (tier/spill/demote_ext.c) ---- */

struct pick {
	struct ext_cand *v;
	size_t n, max;
};

static int pick_one(void *arg, struct inode *in)
{
	struct pick *p = arg;
	struct idx_ext *x;

	if (!S_ISREG(idx_type(in)) || !__atomic_load_n(&in->ext, __ATOMIC_RELAXED))
		return 0;
	idx_inode_lock(in);
	x = in->ext;
	if (x && x->sealed && !x->opens && x->fd >= 0 && x->size && in->nlink > 0 &&
	    !in->pinned && x->bad_wgen != x->wgen + 1) {
		if (p->n < p->max)
			p->v[p->n++] = (struct ext_cand){in->ino, x->used, x->size};
		else /* full: the most recently used one makes way */
			for (size_t i = 0; i < p->n; i++)
				if (x->used < p->v[i].used) {
					p->v[i] = (struct ext_cand){in->ino, x->used, x->size};
					break;
				}
	}
	idx_inode_unlock(in);
	return 0;
}

static int by_used(const void *a, const void *b)
{
	const struct ext_cand *x = a, *y = b;
	return x->used < y->used ? -1 : x->used > y->used;
}

size_t ext_pick_cold(struct tier *t, struct ext_cand *v, size_t max)
{
	struct pick p = {.v = v, .max = max};

	idx_for_each(t->idx, pick_one, &p);
	if (p.n)
		qsort(v, p.n, sizeof(*v), by_used);
	return p.n;
}

int ext_snap_locked(struct tier *t, struct inode *in, struct ext_snap *s)
{
	struct idx_ext *x = in->ext;

	(void)t;
	memset(s, 0, sizeof(*s));
	s->fd = -1;
	if (!x || !x->sealed || x->opens || x->fd < 0 || !x->size || in->nlink == 0 ||
	    in->size != x->size)
		return -EAGAIN;
	for (uint64_t c = 0; c < in->nchunks; c++)
		if (in->chunks[c].state != CHUNK_ABSENT || in->chunks[c].loc.seg_id ||
		    in->chunks[c].chain)
			return -EAGAIN; /* never so: its bytes are all the extent's */
	if (!(s->crc = malloc((size_t)x->ncrc * 4 + 4)))
		return -ENOMEM;
	if ((s->fd = fcntl(x->fd, F_DUPFD_CLOEXEC, 0)) < 0) {
		free(s->crc);
		s->crc = NULL;
		return -errno;
	}
	memcpy(s->crc, x->crc, (size_t)x->ncrc * 4);
	s->ncrc = x->ncrc;
	s->id = x->id;
	s->size = x->size;
	s->wgen = x->wgen;
	return 0;
}

void ext_snap_free(struct ext_snap *s)
{
	if (s->fd >= 0)
		close(s->fd);
	free(s->crc);
	s->fd = -1;
	s->crc = NULL;
}

int ext_snap_same_locked(struct inode *in, const struct ext_snap *s)
{
	struct idx_ext *x = in->ext;

	return x && x->id == s->id && x->wgen == s->wgen && x->sealed && !x->opens &&
	       x->size == s->size && in->size == s->size && in->nlink > 0;
}

void ext_snap_bad_locked(struct inode *in, const struct ext_snap *s)
{
	if (in->ext && in->ext->id == s->id && in->ext->wgen == s->wgen)
		in->ext->bad_wgen = s->wgen + 1;
}

int ext_verify(const struct ext_snap *s, uint64_t off, const void *buf, uint64_t len)
{
	const uint8_t *p = buf;

	if (off % B)
		return -EINVAL;
	for (uint64_t o = 0; o < len; o += B) {
		uint64_t b = (off + o) / B, bl = len - o < B ? len - o : B;
		if (b >= s->ncrc || crc32c(0, p + o, bl) != s->crc[b])
			return -EIO;
	}
	return 0;
}

int ext_let_go_locked(struct tier *t, struct inode *in, struct jrec *rs, int n)
{
	struct idx_ext *x = in->ext;
	int ret = 0;

	rs[n] = (struct jrec){
	    .type = JR_EXTENT, .ino = in->ino, .ext = {.id = x->id, .flags = JEXT_GONE}};
	/* one transaction: a replay sees the file in one form or the other */
	if (t->jrnl && ((ret = jrnl_append_tx(t->jrnl, rs, n + 1)) < 0 ||
			(ret = jrnl_sync(t->jrnl)) < 0))
		return ret;
	remove_locked(t, in, 0);
	idx_ext_free(in);
	return 0;
}

/* ---- recovery and scrub ---- */

int ext_recover_locked(struct tier *t, struct inode *in)
{
	struct extents *e = t->extr;
	struct idx_ext *x = in->ext;
	char name[40];
	struct stat st;
	int fd = -1;

	ext_name(name, sizeof(name), in->ino, x->id);
	/* its directory first; the nvme list may have been given in another order */
	for (int k = -1; e && k < e->n && fd < 0; k++) {
		int d = k < 0 ? (int)x->dev : k;
		if (d >= e->n || (k >= 0 && d == (int)x->dev))
			continue;
		if ((fd = openat(e->dirfd[d], name, O_RDWR | O_CLOEXEC)) >= 0)
			x->dev = (uint32_t)d;
	}
	if (fd < 0 || fstat(fd, &st) < 0) {
		if (t->rec.adopted) /* the old node's disk: reported with the lost files */
			log_debug("recovery: inode %llu: its extent %s stayed on the old node",
				  (unsigned long long)in->ino, name);
		else
			log_err("recovery: inode %llu: its extent %s is missing from every cold "
				"directory",
				(unsigned long long)in->ino, name);
		if (fd >= 0)
			close(fd);
		return 1;
	}
	x->fd = fd;
	ST_ADD(ext_files, 1);
	if (x->sealed && (uint64_t)st.st_size == x->size && in->size == x->size) {
		times_seen(x, &st); /* the journal's times are the file's */
		return 0;
	}
	if (x->sealed)
		log_warn("recovery: inode %llu: its extent holds %llu bytes, %llu when sealed: "
			 "sealed again as it is",
			 (unsigned long long)in->ino, (unsigned long long)st.st_size,
			 (unsigned long long)x->size);
	/* unsealed (written when the daemon stopped): its size on disk is the
	 * file's, what the kernel wrote back is its bytes */
	x->sealed = 0;
	in->size = (uint64_t)st.st_size;
	seal_locked(t, in);
	t->rec.ext_resealed++;
	return 0;
}
