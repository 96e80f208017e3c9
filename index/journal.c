/*
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
#include "index/journal.h"

#include "common/crc32c.h"
#include "common/le.h"
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
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- codec ---- */

#define FRAME 9u /* u32 len, u32 crc, u8 type */

/* Cursor forms of le.h's: write at *p and step past. */
static void put32(uint8_t **p, uint32_t v)
{
	le_put32(*p, v);
	*p += 4;
}

static void put64(uint8_t **p, uint64_t v)
{
	le_put64(*p, v);
	*p += 8;
}

static void putb(uint8_t **p, const void *b, size_t n)
{
	if (n)
		memcpy(*p, b, n);
	*p += n;
}

/* Payload size of r (without framing). */
static size_t payload_size(const struct jrec *r)
{
	switch (r->type) {
	case JR_HEADER:
		return 4 + 4 + 8 + 8 + 16;
	case JR_END:
		return 8;
	case JR_META:
		return 16;
	case JR_INODE:
		return 8 + 12 + 16 + 24 + r->name_len;
	case JR_LINK:
		return 16 + r->name_len;
	case JR_UNLINK:
		return 8 + r->name_len;
	case JR_XATTR_SET:
		return 8 + 4 + r->name_len + r->value_len;
	case JR_XATTR_DEL:
		return 8 + r->name_len;
	case JR_CHUNK_LOC:
		return 32 + 16;
	case JR_CHUNK_DIRTY:
		return 16;
	case JR_CHUNK_ABSENT:
		return 24;
	case JR_SEG_ADD:
		return 24 + 4 + 1;
	case JR_SEG_DEL:
		return 8;
	}
	return 0;
}

static void encode_payload(const struct jrec *r, uint8_t *p)
{
	switch (r->type) {
	case JR_HEADER:
		put32(&p, r->hdr.version);
		put32(&p, r->hdr.kind);
		put64(&p, r->hdr.gen);
		put64(&p, r->hdr.chunk_size);
		putb(&p, r->hdr.uuid, 16);
		break;
	case JR_END:
		put64(&p, r->count);
		break;
	case JR_META:
		put64(&p, r->next_ino);
		put64(&p, r->next_seg);
		break;
	case JR_INODE:
		put64(&p, r->ino);
		put32(&p, r->attr.mode);
		put32(&p, r->attr.uid);
		put32(&p, r->attr.gid);
		put64(&p, r->attr.rdev);
		put64(&p, r->attr.size);
		put64(&p, (uint64_t)r->attr.atime_ns);
		put64(&p, (uint64_t)r->attr.mtime_ns);
		put64(&p, (uint64_t)r->attr.ctime_ns);
		putb(&p, r->name, r->name_len);
		break;
	case JR_LINK:
		put64(&p, r->parent);
		put64(&p, r->ino);
		putb(&p, r->name, r->name_len);
		break;
	case JR_UNLINK:
		put64(&p, r->parent);
		putb(&p, r->name, r->name_len);
		break;
	case JR_XATTR_SET:
		put64(&p, r->ino);
		put32(&p, r->name_len);
		putb(&p, r->name, r->name_len);
		putb(&p, r->value, r->value_len);
		break;
	case JR_XATTR_DEL:
		put64(&p, r->ino);
		putb(&p, r->name, r->name_len);
		break;
	case JR_CHUNK_LOC:
		put64(&p, r->ino);
		put64(&p, r->chunk);
		put64(&p, r->loc.seg_id);
		put64(&p, r->loc.off);
		put32(&p, r->loc.len);
		put32(&p, r->loc.crc);
		put32(&p, (r->loc.dev & 0xffff) | r->loc.flags << 16);
		put32(&p, r->loc.gen);
		break;
	case JR_CHUNK_DIRTY:
		put64(&p, r->ino);
		put64(&p, r->chunk);
		break;
	case JR_CHUNK_ABSENT:
		put64(&p, r->ino);
		put64(&p, r->chunk);
		put64(&p, r->count);
		break;
	case JR_SEG_ADD:
		put64(&p, r->seg.id);
		put64(&p, r->seg.len);
		put64(&p, r->seg.payload);
		put32(&p, r->seg.dev);
		*p++ = r->seg.store;
		break;
	case JR_SEG_DEL:
		put64(&p, r->seg.id);
		break;
	}
}

/* Decode payload p[0..n) of a record of `type` into r. 0 or -EBADMSG. */
static int decode_payload(uint8_t type, const uint8_t *p, size_t n, struct jrec *r)
{
	struct jrec probe = {.type = type};
	size_t fixed;

	memset(r, 0, sizeof(*r));
	r->type = type;
	if (type < JR_HEADER || type > JR_TYPE_MAX || type == JR_TX)
		return -EBADMSG;
	fixed = payload_size(&probe); /* names and values are 0 in probe */
	if (n < fixed)
		return -EBADMSG;
	switch (type) {
	case JR_HEADER:
		if (n != fixed)
			return -EBADMSG;
		r->hdr.version = le_get32(p);
		r->hdr.kind = le_get32(p + 4);
		r->hdr.gen = le_get64(p + 8);
		r->hdr.chunk_size = le_get64(p + 16);
		memcpy(r->hdr.uuid, p + 24, 16);
		break;
	case JR_END:
		if (n != fixed)
			return -EBADMSG;
		r->count = le_get64(p);
		break;
	case JR_META:
		if (n != fixed)
			return -EBADMSG;
		r->next_ino = le_get64(p);
		r->next_seg = le_get64(p + 8);
		if (r->next_seg > JRNL_MAX_SEG_ID + 1)
			return -EBADMSG;
		break;
	case JR_INODE:
		r->ino = le_get64(p);
		r->attr.mode = le_get32(p + 8);
		r->attr.uid = le_get32(p + 12);
		r->attr.gid = le_get32(p + 16);
		r->attr.rdev = le_get64(p + 20);
		r->attr.size = le_get64(p + 28);
		r->attr.atime_ns = (int64_t)le_get64(p + 36);
		r->attr.mtime_ns = (int64_t)le_get64(p + 44);
		r->attr.ctime_ns = (int64_t)le_get64(p + 52);
		r->name = (const char *)p + fixed;
		r->name_len = (uint32_t)(n - fixed);
		if (r->name_len > 4096 || r->ino == 0 || r->attr.size > JRNL_MAX_FILE_SIZE)
			return -EBADMSG;
		break;
	case JR_LINK:
		r->parent = le_get64(p);
		r->ino = le_get64(p + 8);
		r->name = (const char *)p + fixed;
		r->name_len = (uint32_t)(n - fixed);
		if (r->name_len == 0 || r->name_len > 255 || r->ino == 0 || r->parent == 0)
			return -EBADMSG;
		break;
	case JR_UNLINK:
		r->parent = le_get64(p);
		r->name = (const char *)p + fixed;
		r->name_len = (uint32_t)(n - fixed);
		if (r->name_len == 0 || r->name_len > 255)
			return -EBADMSG;
		break;
	case JR_XATTR_SET:
		r->ino = le_get64(p);
		r->name_len = le_get32(p + 8);
		if (r->name_len == 0 || r->name_len > 255 || r->name_len > n - fixed)
			return -EBADMSG;
		r->name = (const char *)p + fixed;
		r->value = p + fixed + r->name_len;
		r->value_len = (uint32_t)(n - fixed - r->name_len);
		break;
	case JR_XATTR_DEL:
		r->ino = le_get64(p);
		r->name = (const char *)p + fixed;
		r->name_len = (uint32_t)(n - fixed);
		if (r->name_len == 0 || r->name_len > 255)
			return -EBADMSG;
		break;
	case JR_CHUNK_LOC:
		if (n != fixed)
			return -EBADMSG;
		r->ino = le_get64(p);
		r->chunk = le_get64(p + 8);
		r->loc.seg_id = le_get64(p + 16);
		r->loc.off = le_get64(p + 24);
		r->loc.len = le_get32(p + 32);
		r->loc.crc = le_get32(p + 36);
		r->loc.dev = le_get32(p + 40) & 0xffff;
		r->loc.flags = le_get32(p + 40) >> 16;
		r->loc.gen = le_get32(p + 44);
		if (r->loc.seg_id == 0 || (r->loc.flags & ~JRNL_LOC_FLAGS) ||
		    r->loc.seg_id > JRNL_MAX_SEG_ID || r->chunk >= JRNL_MAX_CHUNKS ||
		    r->loc.len > JRNL_MAX_LOC_LEN || r->loc.off > UINT64_MAX - r->loc.len)
			return -EBADMSG;
		break;
	case JR_CHUNK_DIRTY:
		if (n != fixed)
			return -EBADMSG;
		r->ino = le_get64(p);
		r->chunk = le_get64(p + 8);
		if (r->chunk >= JRNL_MAX_CHUNKS)
			return -EBADMSG;
		break;
	case JR_CHUNK_ABSENT:
		if (n != fixed)
			return -EBADMSG;
		r->ino = le_get64(p);
		r->chunk = le_get64(p + 8);
		r->count = le_get64(p + 16);
		if (r->chunk >= JRNL_MAX_CHUNKS || r->count > JRNL_MAX_CHUNKS - r->chunk)
			return -EBADMSG;
		break;
	case JR_SEG_ADD:
		if (n != fixed)
			return -EBADMSG;
		r->seg.id = le_get64(p);
		r->seg.len = le_get64(p + 8);
		r->seg.payload = le_get64(p + 16);
		r->seg.dev = le_get32(p + 24);
		r->seg.store = p[28];
		if (r->seg.id == 0 || r->seg.id > JRNL_MAX_SEG_ID || r->seg.store > 1)
			return -EBADMSG;
		break;
	case JR_SEG_DEL:
		if (n != fixed)
			return -EBADMSG;
		r->seg.id = le_get64(p);
		if (r->seg.id == 0 || r->seg.id > JRNL_MAX_SEG_ID)
			return -EBADMSG;
		break;
	}
	return 0;
}

int jrnl_rec_fits(const struct jrec *r, uint64_t chunk_size)
{
	uint64_t max = chunk_size ? JRNL_MAX_FILE_SIZE / chunk_size : JRNL_MAX_CHUNKS;
	switch (r->type) {
	case JR_CHUNK_LOC:
	case JR_CHUNK_DIRTY:
		return r->chunk < max;
	case JR_CHUNK_ABSENT:
		return r->chunk < max && r->count <= max - r->chunk;
	default:
		return 1;
	}
}

size_t jrnl_encoded_size(const struct jrec *r)
{
	return FRAME + payload_size(r);
}

/* Fill len and crc of a frame whose type and payload are in place. */
static void seal_frame(uint8_t *buf, size_t total)
{
	uint8_t *p = buf;
	uint32_t crc;
	put32(&p, (uint32_t)(total - 8));
	crc = crc32c(0, buf, 4);
	crc = crc32c(crc, buf + 8, total - 8);
	put32(&p, crc);
}

size_t jrnl_encode(const struct jrec *r, uint8_t *buf)
{
	size_t total = jrnl_encoded_size(r);
	buf[8] = r->type;
	encode_payload(r, buf + FRAME);
	seal_frame(buf, total);
	return total;
}

uint8_t *jrnl_encode_tx(const struct jrec *rs, int n, size_t *len)
{
	size_t total = FRAME;
	uint8_t *buf, *p;

	if (n < 1)
		return NULL;
	if (n == 1) {
		total = jrnl_encoded_size(&rs[0]);
		if ((buf = malloc(total)))
			*len = jrnl_encode(&rs[0], buf);
		return buf;
	}
	for (int i = 0; i < n; i++)
		total += 5 + payload_size(&rs[i]);
	if (!(buf = malloc(total)))
		return NULL;
	buf[8] = JR_TX;
	p = buf + FRAME;
	for (int i = 0; i < n; i++) {
		size_t ps = payload_size(&rs[i]);
		put32(&p, (uint32_t)(1 + ps));
		*p++ = rs[i].type;
		encode_payload(&rs[i], p);
		p += ps;
	}
	seal_frame(buf, total);
	*len = total;
	return buf;
}

/* Decode the inner record of a JR_TX at *p (before end) into r and step past
 * it. Only data records may be inside: a header, an end mark or a nested TX
 * in a transaction is a bad record (its crc can still be valid). */
static int next_inner(const uint8_t **p, const uint8_t *end, struct jrec *r)
{
	uint32_t il;
	uint8_t type;

	if (end - *p < 5)
		return -EBADMSG;
	il = le_get32(*p);
	type = (*p)[4];
	if (il < 1 || il > (size_t)(end - *p - 4) || type == JR_TX || type == JR_HEADER ||
	    type == JR_END || decode_payload(type, *p + 5, il - 1, r) < 0)
		return -EBADMSG;
	*p += 4 + il;
	return 0;
}

ssize_t jrnl_decode(const uint8_t *buf, size_t avail, struct jrec *r)
{
	uint32_t len, crc;

	if (avail < 8)
		return 0;
	len = le_get32(buf);
	if (len < 1 || len > JRNL_MAX_RECORD)
		return -EBADMSG;
	if (avail < 8 + (size_t)len)
		return 0;
	crc = crc32c(0, buf, 4);
	crc = crc32c(crc, buf + 8, len);
	if (crc != le_get32(buf + 4))
		return -EBADMSG;
	if (buf[8] == JR_TX) {
		/* validate the inner records now, so a TX applies wholly or not at all */
		const uint8_t *p = buf + FRAME, *end = buf + 8 + len;
		struct jrec inner;
		int count = 0;
		while (p < end) {
			if (next_inner(&p, end, &inner) < 0)
				return -EBADMSG;
			count++;
		}
		if (count == 0)
			return -EBADMSG;
		memset(r, 0, sizeof(*r));
		r->type = JR_TX;
		r->count = (uint64_t)count;
	} else if (decode_payload(buf[8], buf + FRAME, len - 1, r) < 0) {
		return -EBADMSG;
	}
	return (ssize_t)(8 + len);
}

int jrnl_for_each_in(const uint8_t *framed, size_t framed_len, const struct jrec *outer,
		     jrnl_rec_fn fn, void *arg)
{
	const uint8_t *p = framed + FRAME, *end = framed + framed_len;
	struct jrec r;
	int ret;

	if (outer->type != JR_TX)
		return fn(arg, outer);
	while (p < end) {
		if (next_inner(&p, end, &r) < 0)
			return -EBADMSG;
		if ((ret = fn(arg, &r)) != 0)
			return ret;
	}
	return 0;
}

/* ---- files ---- */

struct journal {
	char *dir;
	int dirfd, lockfd;
	uint64_t sync_ms, checkpoint_bytes, chunk_size;
	uint8_t uuid[16];

	pthread_mutex_t lock; /* guards the fields below */
	pthread_cond_t cond;  /* sync finished, thread wake-up */
	int fd;		      /* current journal.<gen>, -1 before start */
	uint64_t gen;	      /* generation of the current journal */
	uint64_t off;	      /* its size */
	uint64_t written;     /* LSN: bytes appended since open */
	uint64_t synced;      /* LSN known durable */
	int syncing;	      /* an fdatasync is in flight */
	int failed;	      /* read-only for good */
	int stop;
	uint64_t checkpoints, syncs;

	pthread_mutex_t ck_lock; /* one checkpoint at a time */
	int need_checkpoint;	 /* set by recovery: take one at start */
	jrnl_snapshot_fn snap;
	void *snap_arg;
	jrnl_checkpoint_fn on_ck;
	void *on_ck_arg;
	pthread_t th;
	int started;
};

static const char *kind_prefix(int kind)
{
	return kind == JRNL_KIND_CHECKPOINT ? "checkpoint" : "journal";
}

static void name_of(char *buf, size_t len, const char *what, uint64_t gen, const char *suffix)
{
	snprintf(buf, len, "%s.%016" PRIx64 "%s", what, gen, suffix);
}

void jrnl_file_name(char *buf, size_t len, int kind, uint64_t gen)
{
	name_of(buf, len, kind_prefix(kind), gen, "");
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
	j->failed = 1;
	pthread_cond_broadcast(&j->cond);
	return -EIO;
}

/* pwrite all of buf at off. The journal is a small buffered append on the
 * caller's thread, so it does not go through the segment I/O ring. */
static int write_at(int fd, const uint8_t *buf, size_t len, uint64_t off)
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
	if (mkdir(cfg->dir, 0700) < 0 && errno != EEXIST) {
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
	if (flock(j->lockfd, LOCK_EX | LOCK_NB) < 0) {
		ret = errno == EWOULDBLOCK ? -EBUSY : -errno;
		snprintf(err, errlen, "option 'state_dir': '%s': %s", cfg->dir,
			 ret == -EBUSY ? "in use by another spillway daemon (or fsck)"
				       : strerror(-ret));
		goto fail;
	}
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

/* A whole file mapped read-only (len 0: empty, map NULL). */
struct mapped {
	uint8_t *map;
	size_t len;
};

static int map_file(struct journal *j, const char *name, struct mapped *m)
{
	struct stat st;
	int fd = openat(j->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	m->map = NULL;
	m->len = 0;
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		close(fd);
		return -errno;
	}
	if (st.st_size > 0) {
		void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (p == MAP_FAILED) {
			close(fd);
			return -errno;
		}
		madvise(p, (size_t)st.st_size, MADV_SEQUENTIAL);
		m->map = p;
		m->len = (size_t)st.st_size;
	}
	close(fd);
	return 0;
}

static void unmap_file(struct mapped *m)
{
	if (m->map)
		munmap(m->map, m->len);
	m->map = NULL;
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
static int list_gens(struct journal *j, const char *what, uint64_t **out, size_t *n)
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

/* Remove leftover temp files of an interrupted checkpoint. */
static void remove_tmp(struct journal *j)
{
	int dfd = dup(j->dirfd);
	DIR *d;
	struct dirent *de;
	if (dfd < 0 || !(d = fdopendir(dfd))) {
		if (dfd >= 0)
			close(dfd);
		return;
	}
	rewinddir(d);
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);
		if (l > 4 && strcmp(de->d_name + l - 4, ".tmp") == 0)
			unlinkat(j->dirfd, de->d_name, 0);
	}
	closedir(d);
}

struct apply_ctx {
	jrnl_rec_fn fn;
	void *arg;
	uint64_t records;
};

static int apply_one(void *arg, const struct jrec *r)
{
	struct apply_ctx *a = arg;
	a->records++;
	return a->fn(a->arg, r);
}

/* jrnl_for_each_in callback: -ERANGE for a record that does not fit a
 * filesystem of chunk size *arg (see jrnl_rec_fits). */
static int check_fits(void *arg, const struct jrec *r)
{
	return jrnl_rec_fits(r, *(const uint64_t *)arg) ? 0 : -ERANGE;
}

/* Is checkpoint `m` whole and consistent with this state dir? */
static int checkpoint_valid(struct journal *j, const struct mapped *m, uint64_t gen,
			    uint8_t uuid[16])
{
	size_t pos = 0;
	uint64_t count = 0, chunk_size;
	struct jrec r;
	ssize_t n;

	n = jrnl_decode(m->map, m->len, &r);
	if (n <= 0 || r.type != JR_HEADER || r.hdr.kind != JRNL_KIND_CHECKPOINT ||
	    r.hdr.version != JRNL_VERSION || r.hdr.gen != gen)
		return 0;
	memcpy(uuid, r.hdr.uuid, 16);
	/* its own chunk size: a mismatch with the mount's is reported later */
	chunk_size = r.hdr.chunk_size;
	pos = (size_t)n;
	while (pos < m->len) {
		n = jrnl_decode(m->map + pos, m->len - pos, &r);
		/* jrnl_emit writes neither a TX nor a second header */
		if (n <= 0 || r.type == JR_TX || r.type == JR_HEADER || !jrnl_rec_fits(&r, chunk_size))
			return 0;
		pos += (size_t)n;
		if (r.type == JR_END)
			return r.count == count && pos == m->len;
		count++;
	}
	return 0;
}

/* No checkpoint, and journals holding nothing but a header (a first
 * checkpoint that failed or was interrupted)? Takes the uuid from them. */
static int journals_empty(struct journal *j, const uint64_t *jns, size_t njns, uint8_t uuid[16])
{
	int have_uuid = 0;
	for (size_t i = 0; i < njns; i++) {
		struct mapped m;
		struct jrec r;
		char name[64];
		ssize_t n;
		name_of(name, sizeof(name), "journal", jns[i], "");
		if (map_file(j, name, &m) < 0)
			return 0;
		n = m.len ? jrnl_decode(m.map, m.len, &r) : 0;
		if (m.len && (n <= 0 || (size_t)n != m.len || r.type != JR_HEADER)) {
			unmap_file(&m);
			return 0;
		}
		if (n > 0 && !have_uuid) {
			memcpy(uuid, r.hdr.uuid, 16);
			have_uuid = 1;
		}
		unmap_file(&m);
	}
	if (!have_uuid && getrandom(uuid, 16, 0) != 16)
		return 0;
	return 1;
}

/* A state dir with nothing to replay: j->uuid is the new state's, generation
 * 0, a first checkpoint due. */
static void start_fresh(struct journal *j, struct jrnl_recovery *info)
{
	info->fresh = 1;
	memcpy(info->uuid, j->uuid, 16);
	j->gen = 0;
	j->need_checkpoint = 1;
}

/* Map the newest whole checkpoint of cks (ascending) into m and take its
 * uuid into j->uuid; its index in cks, or -1 when none is whole. */
static int find_checkpoint(struct journal *j, const uint64_t *cks, size_t ncks, struct mapped *m)
{
	char name[64];

	for (size_t i = ncks; i-- > 0;) {
		name_of(name, sizeof(name), "checkpoint", cks[i], "");
		if (map_file(j, name, m) < 0)
			continue;
		if (checkpoint_valid(j, m, cks[i], j->uuid))
			return (int)i;
		log_warn("journal: %s/%s is damaged; trying an older checkpoint", j->dir, name);
		unmap_file(m);
	}
	return -1;
}

/* Hand every record of checkpoint m (checkpoint_valid said it is whole) to
 * a. 0, -EINVAL for a chunk size other than the mount's, or what a->fn
 * returned (err filled). */
static int replay_checkpoint(struct journal *j, const struct mapped *m, struct apply_ctx *a,
			     char *err, size_t errlen)
{
	size_t pos = 0;
	int ret;

	while (pos < m->len) {
		struct jrec r;
		ssize_t n = jrnl_decode(m->map + pos, m->len - pos, &r);
		if (r.type == JR_HEADER) {
			if (r.hdr.chunk_size != j->chunk_size) {
				snprintf(err, errlen,
					 "option 'chunk_size': %" PRIu64
					 " does not match state_dir '%s', made with "
					 "chunk_size=%" PRIu64,
					 j->chunk_size, j->dir, r.hdr.chunk_size);
				return -EINVAL;
			}
		} else if (r.type != JR_END && (ret = apply_one(a, &r)) != 0) {
			snprintf(err, errlen, "state_dir '%s': checkpoint: %s", j->dir,
				 strerror(ret < 0 ? -ret : EINVAL));
			return ret;
		}
		pos += (size_t)n;
	}
	return 0;
}

/* Hand the records of journal `name` (generation g, mapped in m) to a, up to
 * its first torn or bad record or a header not of this state; then *stop is
 * set and what follows is counted as truncated. *end: where the replayed part
 * ends. 0, or what a->fn returned (err filled). */
static int replay_journal(struct journal *j, uint64_t g, const char *name, const struct mapped *m,
			  struct apply_ctx *a, struct jrnl_recovery *info, uint64_t *end, int *stop,
			  char *err, size_t errlen)
{
	size_t pos = 0;
	int ret;

	while (pos < m->len) {
		struct jrec r;
		ssize_t n = jrnl_decode(m->map + pos, m->len - pos, &r);
		if (n > 0 &&
		    jrnl_for_each_in(m->map + pos, (size_t)n, &r, check_fits, &j->chunk_size) != 0)
			n = -EBADMSG; /* out of range: as bad as a bad crc */
		if (n > 0 && pos > 0 && (r.type == JR_HEADER || r.type == JR_END))
			n = -EBADMSG; /* a header or end mark only opens/closes a file */
		if (n <= 0) {
			log_warn("journal: %s/%s: %s at byte %zu; replay stops there (%zu "
				 "bytes dropped)",
				 j->dir, name, n == 0 ? "torn record" : "bad record", pos,
				 m->len - pos);
			info->truncated += m->len - pos;
			*stop = 1;
			break;
		}
		if (pos == 0) {
			if (r.type != JR_HEADER || r.hdr.kind != JRNL_KIND_JOURNAL ||
			    r.hdr.gen != g || memcmp(r.hdr.uuid, j->uuid, 16) != 0) {
				log_warn("journal: %s/%s: bad header; ignored", j->dir, name);
				info->truncated += m->len;
				*stop = 1;
				break;
			}
		} else if ((ret = jrnl_for_each_in(m->map + pos, (size_t)n, &r, apply_one, a))) {
			snprintf(err, errlen, "state_dir '%s': %s: %s", j->dir, name,
				 strerror(ret < 0 ? -ret : EINVAL));
			return ret;
		}
		pos += (size_t)n;
	}
	*end = pos;
	return 0;
}

/* Replay the journals from the checkpoint's generation ckgen on, in order,
 * up to the first gap or the first file replay stops in (*stop set). *last:
 * the last generation replayed (ckgen when none); *end: where its valid part
 * ends (0 when there was none). 0, or -errno / what a->fn returned (err
 * filled). */
static int replay_journals(struct journal *j, const uint64_t *jns, size_t njns, uint64_t ckgen,
			   struct apply_ctx *a, struct jrnl_recovery *info, uint64_t *last,
			   uint64_t *end, int *stop, char *err, size_t errlen)
{
	char name[64];
	int ret;

	*last = ckgen;
	for (uint64_t g = ckgen; !*stop; g++) {
		struct mapped m;
		int have = 0;

		for (size_t i = 0; i < njns; i++)
			have |= jns[i] == g;
		if (!have)
			break;
		name_of(name, sizeof(name), "journal", g, "");
		if ((ret = map_file(j, name, &m)) < 0) {
			snprintf(err, errlen, "state_dir '%s': %s: %s", j->dir, name,
				 strerror(-ret));
			return ret;
		}
		info->journals++;
		*last = g;
		ret = replay_journal(j, g, name, &m, a, info, end, stop, err, errlen);
		unmap_file(&m);
		if (ret != 0)
			return ret;
	}
	return 0;
}

/* Remove the journals after generation last: after a bad record they would
 * be replayed on top of newer state. Counts them as truncated; 1 if any. */
static int drop_later_journals(struct journal *j, const uint64_t *jns, size_t njns, uint64_t last,
			       struct jrnl_recovery *info)
{
	char name[64];
	int dropped = 0;

	for (size_t i = 0; i < njns; i++)
		if (jns[i] > last) {
			struct stat st;
			name_of(name, sizeof(name), "journal", jns[i], "");
			if (fstatat(j->dirfd, name, &st, 0) == 0)
				info->truncated += (uint64_t)st.st_size;
			unlinkat(j->dirfd, name, 0);
			dropped = 1;
		}
	return dropped;
}

/* Reopen journal.<last> for appends, cut at its valid end `end`; when it is
 * missing or headerless (end 0), write it anew with a header. 0 or -errno
 * (err filled). */
static int reopen_for_append(struct journal *j, uint64_t last, uint64_t end, char *err,
			     size_t errlen)
{
	char name[64];
	int ret;

	j->gen = last;
	name_of(name, sizeof(name), "journal", last, "");
	j->fd = openat(j->dirfd, name, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	if (j->fd >= 0 && end == 0) {
		close(j->fd);
		j->fd = -1;
	}
	if (j->fd < 0) {
		struct jrec h = {.type = JR_HEADER,
				 .hdr = {.version = JRNL_VERSION,
					 .kind = JRNL_KIND_JOURNAL,
					 .gen = last,
					 .chunk_size = j->chunk_size}};
		uint8_t hb[64];
		size_t hl;
		memcpy(h.hdr.uuid, j->uuid, 16);
		hl = jrnl_encode(&h, hb);
		j->fd = openat(j->dirfd, name,
			       O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (j->fd < 0 || (ret = write_at(j->fd, hb, hl, 0)) < 0) {
			ret = j->fd < 0 ? -errno : ret;
			snprintf(err, errlen, "state_dir '%s': %s: %s", j->dir, name,
				 strerror(-ret));
			return ret;
		}
		end = hl;
	}
	if (ftruncate(j->fd, (off_t)end) < 0) {
		ret = -errno;
		snprintf(err, errlen, "state_dir '%s': %s: cannot cut the torn tail: %s", j->dir,
			 name, strerror(-ret));
		return ret;
	}
	j->off = end;
	return 0;
}

int jrnl_recover(struct journal *j, jrnl_rec_fn fn, void *arg, struct jrnl_recovery *info,
		 char *err, size_t errlen)
{
	uint64_t *cks = NULL, *jns = NULL, last, valid_end = 0;
	size_t ncks = 0, njns = 0;
	struct apply_ctx a = {.fn = fn, .arg = arg};
	struct mapped m = {0};
	char name[64];
	int ret, found, stop = 0;

	memset(info, 0, sizeof(*info));
	remove_tmp(j);
	if ((ret = list_gens(j, "checkpoint", &cks, &ncks)) < 0 ||
	    (ret = list_gens(j, "journal", &jns, &njns)) < 0) {
		snprintf(err, errlen, "state_dir '%s': cannot list: %s", j->dir, strerror(-ret));
		goto out;
	}
	if (ncks == 0 && njns == 0) {
		if (getrandom(j->uuid, sizeof(j->uuid), 0) != sizeof(j->uuid)) {
			ret = -errno;
			snprintf(err, errlen, "getrandom: %s", strerror(-ret));
			info->fresh = 1;
			goto out;
		}
		start_fresh(j, info);
		ret = 0;
		goto out;
	}
	found = find_checkpoint(j, cks, ncks, &m);
	if (found < 0 && journals_empty(j, jns, njns, j->uuid)) {
		/* the first checkpoint never made it: nothing was ever appended */
		for (size_t i = 0; i < njns; i++) {
			name_of(name, sizeof(name), "journal", jns[i], "");
			unlinkat(j->dirfd, name, 0);
		}
		start_fresh(j, info);
		ret = 0;
		goto out;
	}
	if (found < 0) {
		snprintf(err, errlen,
			 "state_dir '%s': no valid checkpoint (spillway-fsck --rebuild can "
			 "rebuild the index from the cold tier)",
			 j->dir);
		ret = -EBADMSG;
		goto out;
	}
	memcpy(info->uuid, j->uuid, 16);
	info->checkpoint_gen = cks[found];
	if ((ret = replay_checkpoint(j, &m, &a, err, errlen)) != 0)
		goto out;
	unmap_file(&m);
	if ((ret = replay_journals(j, jns, njns, cks[found], &a, info, &last, &valid_end, &stop,
				   err, errlen)) != 0)
		goto out;
	stop |= drop_later_journals(j, jns, njns, last, info);
	if (stop)
		fsync(j->dirfd);
	info->records = a.records;
	if ((ret = reopen_for_append(j, last, valid_end, err, errlen)) < 0)
		goto out;
	j->need_checkpoint = stop || info->journals > 1;
out:
	unmap_file(&m);
	free(cks);
	free(jns);
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
	if ((ret = write_at(j->fd, buf, len, j->off)) < 0) {
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
		int r = write_at(e->fd, e->buf, e->used, e->off);
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
		e->err = write_at(e->fd, b, len, e->off);
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
	if (list_gens(j, "checkpoint", &cks, &ncks) < 0 || ncks < 2 ||
	    list_gens(j, "journal", &jns, &njns) < 0)
		goto out;
	keep = cks[ncks - 2];
	for (size_t i = 0; i + 2 < ncks; i++) {
		name_of(name, sizeof(name), "checkpoint", cks[i], "");
		unlinkat(j->dirfd, name, 0);
	}
	for (size_t i = 0; i < njns; i++)
		if (jns[i] < keep) {
			name_of(name, sizeof(name), "journal", jns[i], "");
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
	name_of(jname, sizeof(jname), "journal", gen, "");
	nfd = openat(j->dirfd, jname, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (nfd < 0 || (ret = write_at(nfd, hb, hl, 0)) < 0 || fdatasync(nfd) < 0 ||
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
	name_of(name, sizeof(name), "checkpoint", gen, "");
	name_of(tmp, sizeof(tmp), "checkpoint", gen, ".tmp");
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
