/*
 * journal.c — the journal's files and its writer: open (the state dir's
 * lock), appends, group-commit syncs, checkpoints, the sync/checkpoint
 * thread. The record format is journal_codec.c, recovery journal_recover.c;
 * struct journal is in journal_i.h.
 *
 * DESIGN
 * - Appends encode the record on the caller's stack and pwrite it at the
 *   journal's end under j->lock, so records reach the kernel in the order
 *   the callers took their own locks (namespace changes under the index
 *   lock, chunk changes under the inode lock) and before their reply.
 * - Positions are a global byte count (LSN) across journal files: `written`
 *   and `synced`. jrnl_sync is a group commit: one caller fdatasyncs for
 *   everybody waiting (`syncing`), the others wait for `synced` to pass
 *   their target. A failed fdatasync or write sets `failed` for good.
 * - Checkpoint: rotate (fdatasync the old journal, start journal.<g+1>),
 *   then snapshot the live state into checkpoint.<g+1>.tmp, fsync, rename,
 *   fsync the directory, then delete what the two newest checkpoints no
 *   longer need. The snapshot is fuzzy (appends continue); every record sets
 *   a value, so replaying journal.<g+1> over it converges to the live state.
 * - Recovery validates a checkpoint wholly before applying it (an apply
 *   cannot be undone), then replays journals in order up to the first bad
 *   record; anything after it is dropped and a checkpoint is taken at start.
 */
#include "index/journal_i.h"

#include "common/atomic_file.h"
#include "common/lockwait.h"
#include "common/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- files ---- */

static const char *kind_prefix(int kind)
{
	return kind == JRNL_KIND_CHECKPOINT ? "checkpoint" : "journal";
}

void jrnl_name_of(char *buf, size_t len, const char *what, uint64_t gen, const char *suffix)
{
	snprintf(buf, len, "%s.%016" PRIx64 "%s", what, gen, suffix);
}

void jrnl_file_name(char *buf, size_t len, int kind, uint64_t gen)
{
	jrnl_name_of(buf, len, kind_prefix(kind), gen, "");
}

int jrnl_parse_name(const char *name, int *kind, uint64_t *gen)
{
	static const int kinds[] = {JRNL_KIND_JOURNAL, JRNL_KIND_CHECKPOINT};
	for (int i = 0; i < 2; i++) {
		const char *what = kind_prefix(kinds[i]);
		size_t wl = strlen(what);
		uint64_t g = 0;
		if (strncmp(name, what, wl) != 0 || name[wl] != '.' || strlen(name) != wl + 17)
			continue;
		for (const char *h = name + wl + 1; *h; h++) {
			int v = *h >= '0' && *h <= '9'	 ? *h - '0'
				: *h >= 'a' && *h <= 'f' ? *h - 'a' + 10
				: *h >= 'A' && *h <= 'F' ? *h - 'A' + 10
							 : -1;
			if (v < 0)
				return 0;
			g = g << 4 | (uint64_t)v;
		}
		*kind = kinds[i];
		*gen = g;
		return 1;
	}
	return 0;
}

static int fail_locked(struct journal *j, const char *what, int err)
{
	if (!j->failed)
		log_err("journal %s/journal.%016" PRIx64 ": %s failed: %s; the journal is "
			"read-only now, metadata changes and writes fail with EIO",
			j->dir, j->gen, what, strerror(err));
	/* under j->lock, but jrnl_failed reads it without: an atomic store
	 * (relaxed: a one-way flag; whoever needs more than its value takes
	 * the lock) */
	__atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&j->cond);
	return -EIO;
}

/* pwrite all of buf at off. The journal is a small buffered append on the
 * caller's thread, so it does not go through the segment I/O ring. */
int jrnl_write_at(int fd, const uint8_t *buf, size_t len, uint64_t off)
{
	while (len) {
		ssize_t n = pwrite(fd, buf, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		buf += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

int jrnl_open(const struct jrnl_config *cfg, struct journal **out, char *err, size_t errlen)
{
	struct journal *j = calloc(1, sizeof(*j));
	struct stat st;
	char what[4200];
	int ret;

	if (!j)
		return -ENOMEM;
	j->dirfd = j->lockfd = j->fd = -1;
	j->sync_ms = cfg->sync_ms;
	j->checkpoint_bytes = cfg->checkpoint_bytes;
	j->chunk_size = cfg->chunk_size;
	pthread_mutex_init(&j->lock, NULL);
	pthread_mutex_init(&j->ck_lock, NULL);
	pthread_cond_init(&j->cond, NULL);
	if (!(j->dir = strdup(cfg->dir))) {
		ret = -ENOMEM;
		goto fail;
	}
	/* a new state_dir's entry is durable before anything in it is */
	if (mkdir(cfg->dir, 0700) == 0)
		atomic_file_sync_parent(cfg->dir);
	else if (errno != EEXIST) {
		ret = -errno;
		snprintf(err, errlen, "option 'state_dir': '%s': cannot create: %s", cfg->dir,
			 strerror(-ret));
		goto fail;
	}
	j->dirfd = open(cfg->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (j->dirfd < 0 || fstat(j->dirfd, &st) < 0) {
		ret = -errno;
		snprintf(err, errlen, "option 'state_dir': '%s': %s", cfg->dir, strerror(-ret));
		goto fail;
	}
	if ((st.st_mode & 0077) && fchmod(j->dirfd, 0700) < 0) {
		ret = -errno;
		snprintf(err, errlen, "option 'state_dir': '%s': cannot make it 0700: %s",
			 cfg->dir, strerror(-ret));
		goto fail;
	}
	j->lockfd = openat(j->dirfd, "lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (j->lockfd < 0) {
		ret = -errno;
		snprintf(err, errlen, "option 'state_dir': '%s': %s", cfg->dir, strerror(-ret));
		goto fail;
	}
	snprintf(what, sizeof(what), "state_dir '%s'", cfg->dir);
	if ((ret = lockwait_take(j->lockfd, what)) < 0) {
		snprintf(err, errlen, "option 'state_dir': '%s': %s", cfg->dir,
			 ret == -EBUSY ? "in use by another spillway daemon (or fsck)"
				       : strerror(-ret));
		goto fail;
	}
	lockwait_stamp(j->lockfd, NULL, cfg->mountpoint); /* only a hint for the next mount */
	*out = j;
	return 0;
fail:
	if (j->lockfd >= 0)
		close(j->lockfd);
	if (j->dirfd >= 0)
		close(j->dirfd);
	free(j->dir);
	free(j);
	return ret;
}

/* Generations of the state files of `kind` in d, ascending. */
static int list_dir(DIR *d, int kind, uint64_t **out, size_t *n)
{
	size_t cap = 0;
	struct dirent *de;

	*out = NULL;
	*n = 0;
	rewinddir(d);
	while ((de = readdir(d))) {
		uint64_t g;
		int k;
		if (!jrnl_parse_name(de->d_name, &k, &g) || k != kind)
			continue;
		if (*n == cap) {
			uint64_t *ng = realloc(*out, (cap = cap ? cap * 2 : 8) * sizeof(*ng));
			if (!ng) {
				free(*out);
				*out = NULL;
				*n = 0;
				return -ENOMEM;
			}
			*out = ng;
		}
		(*out)[(*n)++] = g;
	}
	/* sort ascending (few entries) */
	for (size_t a = 1; a < *n; a++)
		for (size_t b = a; b > 0 && (*out)[b - 1] > (*out)[b]; b--) {
			uint64_t t = (*out)[b];
			(*out)[b] = (*out)[b - 1];
			(*out)[b - 1] = t;
		}
	return 0;
}

int jrnl_list_files(const char *dir, int kind, uint64_t **gens, size_t *n)
{
	DIR *d = opendir(dir);
	int ret;
	*gens = NULL;
	*n = 0;
	if (!d)
		return -errno;
	ret = list_dir(d, kind, gens, n);
	closedir(d);
	return ret;
}

/* Generations of the files named `what`.<16 hex> in the state dir. */
int jrnl_list_gens(struct journal *j, const char *what, uint64_t **out, size_t *n)
{
	int dfd = dup(j->dirfd), ret;
	DIR *d;

	*out = NULL;
	*n = 0;
	if (dfd < 0 || !(d = fdopendir(dfd))) {
		if (dfd >= 0)
			close(dfd);
		return -errno;
	}
	ret = list_dir(d, strcmp(what, "checkpoint") ? JRNL_KIND_JOURNAL : JRNL_KIND_CHECKPOINT,
		       out, n);
	closedir(d);
	return ret;
}

/* ---- appends and syncs ---- */

static int append_buf(struct journal *j, const uint8_t *buf, size_t len)
{
	int ret = 0, sync_now;
	struct jrec check;

	/* a record replay would refuse must never reach the file: it would end
	 * every later replay there */
	if (jrnl_decode(buf, len, &check) != (ssize_t)len) {
		log_err("journal: refusing a malformed record of type %u (a bug)", buf[8]);
		return -EINVAL;
	}
	pthread_mutex_lock(&j->lock);
	if (j->failed || j->fd < 0) {
		pthread_mutex_unlock(&j->lock);
		return -EIO;
	}
	if ((ret = jrnl_write_at(j->fd, buf, len, j->off)) < 0) {
		ret = fail_locked(j, "write", -ret);
		pthread_mutex_unlock(&j->lock);
		return ret;
	}
	j->off += len;
	j->written += len;
	sync_now = j->sync_ms == 0;
	if (j->off > j->checkpoint_bytes)
		pthread_cond_broadcast(&j->cond);
	pthread_mutex_unlock(&j->lock);
	return sync_now ? jrnl_sync(j) : 0;
}

int jrnl_append(struct journal *j, const struct jrec *r)
{
	uint8_t stack[512];
	size_t len = jrnl_encoded_size(r);
	uint8_t *buf = len <= sizeof(stack) ? stack : malloc(len);
	int ret;

	if (!buf)
		return -ENOMEM;
	jrnl_encode(r, buf);
	ret = append_buf(j, buf, len);
	if (buf != stack)
		free(buf);
	return ret;
}

int jrnl_append_tx(struct journal *j, const struct jrec *rs, int n)
{
	size_t len;
	uint8_t *buf;
	int ret;
	if (n < 1)
		return -EINVAL;
	if (!(buf = jrnl_encode_tx(rs, n, &len)))
		return -ENOMEM;
	ret = append_buf(j, buf, len);
	free(buf);
	return ret;
}

/* Wait for any sync in flight, then make everything written durable.
 * j->lock held. */
static int sync_locked(struct journal *j)
{
	uint64_t target = j->written;
	while (!j->failed && j->synced < target) {
		uint64_t upto;
		int fd, r;
		if (j->syncing) {
			pthread_cond_wait(&j->cond, &j->lock);
			continue;
		}
		j->syncing = 1;
		upto = j->written;
		fd = j->fd;
		pthread_mutex_unlock(&j->lock);
		r = fdatasync(fd);
		pthread_mutex_lock(&j->lock);
		j->syncing = 0;
		if (r < 0)
			fail_locked(j, "fdatasync", errno);
		else if (upto > j->synced)
			j->synced = upto;
		j->syncs++;
		pthread_cond_broadcast(&j->cond);
	}
	return j->failed ? -EIO : 0;
}

int jrnl_sync(struct journal *j)
{
	int ret;
	pthread_mutex_lock(&j->lock);
	ret = sync_locked(j);
	pthread_mutex_unlock(&j->lock);
	return ret;
}

/* ---- checkpoints ---- */

struct jrnl_emitter {
	int fd;
	uint8_t *buf;
	size_t used, cap;
	uint64_t off, count;
	int err;
};

static int emit_flush(struct jrnl_emitter *e)
{
	if (e->used && !e->err) {
		int r = jrnl_write_at(e->fd, e->buf, e->used, e->off);
		if (r < 0)
			e->err = r;
		e->off += e->used;
	}
	e->used = 0;
	return e->err;
}

int jrnl_emit(struct jrnl_emitter *e, const struct jrec *r)
{
	size_t len = jrnl_encoded_size(r);
	if (e->err)
		return e->err;
	if (len > e->cap - e->used && emit_flush(e) < 0)
		return e->err;
	if (len > e->cap) {
		uint8_t *b = malloc(len);
		if (!b)
			return e->err = -ENOMEM;
		jrnl_encode(r, b);
		e->err = jrnl_write_at(e->fd, b, len, e->off);
		e->off += len;
		free(b);
	} else {
		jrnl_encode(r, e->buf + e->used);
		e->used += len;
	}
	if (r->type != JR_HEADER && r->type != JR_END)
		e->count++;
	return e->err;
}

/* Delete checkpoints older than the two newest, and the journals only they
 * needed. */
static void prune(struct journal *j)
{
	uint64_t *cks = NULL, *jns = NULL, keep;
	size_t ncks = 0, njns = 0;
	char name[64];
	if (jrnl_list_gens(j, "checkpoint", &cks, &ncks) < 0 || ncks < 2 ||
	    jrnl_list_gens(j, "journal", &jns, &njns) < 0)
		goto out;
	keep = cks[ncks - 2];
	for (size_t i = 0; i + 2 < ncks; i++) {
		jrnl_name_of(name, sizeof(name), "checkpoint", cks[i], "");
		unlinkat(j->dirfd, name, 0);
	}
	for (size_t i = 0; i < njns; i++)
		if (jns[i] < keep) {
			jrnl_name_of(name, sizeof(name), "journal", jns[i], "");
			unlinkat(j->dirfd, name, 0);
		}
out:
	free(cks);
	free(jns);
}

int jrnl_checkpoint(struct journal *j)
{
	struct jrec h = {.type = JR_HEADER,
			 .hdr = {.version = JRNL_VERSION, .chunk_size = j->chunk_size}};
	char jname[64];
	uint8_t hb[64];
	uint64_t gen;
	size_t hl;
	int ret = 0, nfd = -1;

	memcpy(h.hdr.uuid, j->uuid, 16);
	pthread_mutex_lock(&j->ck_lock);
	/* 1. rotate: everything so far is durable in the old journal */
	pthread_mutex_lock(&j->lock);
	if (j->failed) {
		pthread_mutex_unlock(&j->lock);
		ret = -EIO;
		goto out;
	}
	gen = j->gen + 1;
	h.hdr.kind = JRNL_KIND_JOURNAL;
	h.hdr.gen = gen;
	hl = jrnl_encode(&h, hb);
	jrnl_name_of(jname, sizeof(jname), "journal", gen, "");
	nfd = openat(j->dirfd, jname, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (nfd < 0 || (ret = jrnl_write_at(nfd, hb, hl, 0)) < 0 || fdatasync(nfd) < 0 ||
	    fsync(j->dirfd) < 0) {
		ret = ret < 0 ? ret : -errno;
		log_err("journal: cannot start %s/%s: %s", j->dir, jname, strerror(-ret));
		if (nfd >= 0)
			close(nfd);
		unlinkat(j->dirfd, jname, 0);
		pthread_mutex_unlock(&j->lock);
		goto out;
	}
	if (j->fd >= 0 && (ret = sync_locked(j)) < 0) {
		close(nfd);
		unlinkat(j->dirfd, jname, 0);
		pthread_mutex_unlock(&j->lock);
		goto out;
	}
	while (j->syncing)
		pthread_cond_wait(&j->cond, &j->lock);
	/* appends that slipped in while sync_locked had the lock dropped */
	if (j->fd >= 0 && j->synced < j->written && fdatasync(j->fd) < 0) {
		ret = fail_locked(j, "fdatasync", errno);
		close(nfd);
		unlinkat(j->dirfd, jname, 0);
		pthread_mutex_unlock(&j->lock);
		goto out;
	}
	if (j->fd >= 0)
		close(j->fd);
	j->fd = nfd;
	j->gen = gen;
	j->off = hl;
	j->written += hl;
	j->synced = j->written;
	pthread_mutex_unlock(&j->lock);

	/* 2. snapshot into checkpoint.<gen>, atomically */
	if ((ret = jrnl_write_checkpoint(j, gen, j->uuid, j->snap, j->snap_arg)) < 0)
		goto out;
	pthread_mutex_lock(&j->lock);
	j->checkpoints++;
	pthread_mutex_unlock(&j->lock);
	prune(j);
	if (j->on_ck)
		j->on_ck(j->on_ck_arg, gen);
	ret = 0;
out:
	pthread_mutex_unlock(&j->ck_lock);
	return ret;
}

int jrnl_write_checkpoint(struct journal *j, uint64_t gen, const uint8_t uuid[16],
			  jrnl_snapshot_fn snap, void *arg)
{
	struct jrnl_emitter e = {.fd = -1};
	struct jrec h = {.type = JR_HEADER,
			 .hdr = {.version = JRNL_VERSION,
				 .kind = JRNL_KIND_CHECKPOINT,
				 .gen = gen,
				 .chunk_size = j->chunk_size}};
	char name[64], tmp[64];
	int ret;

	memcpy(h.hdr.uuid, uuid, 16);
	jrnl_name_of(name, sizeof(name), "checkpoint", gen, "");
	jrnl_name_of(tmp, sizeof(tmp), "checkpoint", gen, ".tmp");
	e.cap = 1 << 20;
	if (!(e.buf = malloc(e.cap))) {
		ret = -ENOMEM;
		goto out_log;
	}
	e.fd = openat(j->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (e.fd < 0) {
		ret = -errno;
		goto out_log;
	}
	jrnl_emit(&e, &h);
	if (snap && (ret = snap(arg, &e)) != 0)
		goto out_log;
	{
		struct jrec end = {.type = JR_END, .count = e.count};
		jrnl_emit(&e, &end);
	}
	if ((ret = emit_flush(&e)) < 0)
		goto out_log;
	if (fsync(e.fd) < 0 || renameat(j->dirfd, tmp, j->dirfd, name) < 0 ||
	    fsync(j->dirfd) < 0) {
		ret = -errno;
		goto out_log;
	}
	log_debug("journal: checkpoint %s/%s (%" PRIu64 " records, %" PRIu64 " bytes)", j->dir,
		  name, e.count, e.off);
	ret = 0;
	goto out;
out_log:
	/* the older checkpoint and the journals since stay valid */
	log_err("journal: checkpoint %s/%s failed: %s", j->dir, name,
		strerror(ret < 0 ? -ret : EIO));
	unlinkat(j->dirfd, tmp, 0);
	ret = ret < 0 ? ret : -EIO;
out:
	if (e.fd >= 0)
		close(e.fd);
	free(e.buf);
	return ret;
}

/* ---- the group-commit thread ---- */

static void *jrnl_thread(void *arg)
{
	struct journal *j = arg;
	pthread_mutex_lock(&j->lock);
	while (!j->stop) {
		struct timespec ts;
		uint64_t ms = j->sync_ms ? j->sync_ms : 1000;
		int want_ck;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += (time_t)(ms / 1000);
		ts.tv_nsec += (long)(ms % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		if (j->off <= j->checkpoint_bytes || j->failed)
			pthread_cond_timedwait(&j->cond, &j->lock, &ts);
		if (j->stop)
			break;
		if (j->failed) {
			continue;
		}
		if (j->synced < j->written)
			sync_locked(j);
		want_ck = j->off > j->checkpoint_bytes && !j->failed;
		if (want_ck) {
			pthread_mutex_unlock(&j->lock);
			if (jrnl_checkpoint(j) < 0) {
				/* retry later, not in a loop */
				struct timespec d = {1, 0};
				nanosleep(&d, NULL);
			}
			pthread_mutex_lock(&j->lock);
		}
	}
	pthread_mutex_unlock(&j->lock);
	return NULL;
}

int jrnl_start_appends(struct journal *j, jrnl_snapshot_fn snap, void *arg)
{
	int ret;
	j->snap = snap;
	j->snap_arg = arg;
	if (j->need_checkpoint && (ret = jrnl_checkpoint(j)) < 0)
		return ret;
	j->need_checkpoint = 0;
	return 0;
}

int jrnl_run(struct journal *j)
{
	int ret;
	if (j->started)
		return 0;
	if ((ret = pthread_create(&j->th, NULL, jrnl_thread, j)) != 0)
		return -ret;
	j->started = 1;
	return 0;
}

int jrnl_start(struct journal *j, jrnl_snapshot_fn snap, void *arg)
{
	int ret = jrnl_start_appends(j, snap, arg);
	return ret < 0 ? ret : jrnl_run(j);
}

void jrnl_set_on_checkpoint(struct journal *j, jrnl_checkpoint_fn fn, void *arg)
{
	j->on_ck = fn;
	j->on_ck_arg = arg;
}

void jrnl_position(struct journal *j, uint64_t *gen, uint64_t *size)
{
	pthread_mutex_lock(&j->lock);
	*gen = j->gen;
	*size = j->off;
	pthread_mutex_unlock(&j->lock);
}

int jrnl_failed(const struct journal *j)
{
	return __atomic_load_n(&j->failed, __ATOMIC_RELAXED);
}

const uint8_t *jrnl_uuid(const struct journal *j)
{
	return j->uuid;
}

const char *jrnl_dir(const struct journal *j)
{
	return j->dir;
}

void jrnl_stats(const struct journal *j, uint64_t *journal_bytes, uint64_t *checkpoints,
		uint64_t *syncs)
{
	struct journal *m = (struct journal *)j;
	pthread_mutex_lock(&m->lock);
	*journal_bytes = j->off;
	*checkpoints = j->checkpoints;
	*syncs = j->syncs;
	pthread_mutex_unlock(&m->lock);
}

void jrnl_close(struct journal *j, int final)
{
	if (!j)
		return;
	if (j->started) {
		pthread_mutex_lock(&j->lock);
		j->stop = 1;
		pthread_cond_broadcast(&j->cond);
		pthread_mutex_unlock(&j->lock);
		pthread_join(j->th, NULL);
	}
	if (final && j->fd >= 0 && !j->failed)
		jrnl_checkpoint(j);
	else if (j->fd >= 0 && !j->failed)
		jrnl_sync(j);
	if (j->fd >= 0)
		close(j->fd);
	close(j->lockfd); /* the lock file stays: unlinking it would race */
	close(j->dirfd);
	pthread_mutex_destroy(&j->lock);
	pthread_mutex_destroy(&j->ck_lock);
	free(j->dir);
	free(j);
}
