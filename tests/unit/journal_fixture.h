/*
 * journal_fixture.h — what the journal's tests share (test_journal_codec,
 * test_journal_writer, test_journal_recovery): fdatasync/fsync stand-ins
 * that can fail or hold a caller (they take the place of libc's for the
 * statically linked journal), small file helpers, records compared and
 * logged, the model the records describe, the snapshot and recovery
 * callbacks, the fixture (a temp dir, maybe a tmpfs mounted here, open
 * journals; T() registers a test with it) and sample records.
 * Header-only, for test binaries: each includes it once, from one .c, and
 * calls journal_fixture_init() first in main. The helpers are the static
 * functions they were in test_journal.c, moved as they were.
 */
#ifndef SPW_JOURNAL_FIXTURE_H
#define SPW_JOURNAL_FIXTURE_H

/* Each test binary uses some of these helpers, not all. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/crc32c.h"
#include "common/le.h"
#include "common/log.h"
#include "index/index.h"
#include "index/journal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (4ULL << 20)

/* ------------------------------------------------------------------------
 * fdatasync/fsync: these definitions in the test binary take the place of
 * libc's for the statically linked journal. With g_fail_sync they fail with
 * EIO. With g_track, every sync is logged (file name, size before it) and a
 * sync of the file named g_gate_name completes, then holds its caller until
 * released (a slow disk: bytes written meanwhile are not covered).
 */
static atomic_int g_fail_sync;
static atomic_int g_sync_failed_calls;
static atomic_int g_track;
static pthread_mutex_t g_sy_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_sy_cv = PTHREAD_COND_INITIALIZER;
#define SYNCLOG_MAX 1024
static struct {
	char name[64];
	off_t size;
} g_synclog[SYNCLOG_MAX]; /* guarded by g_sy_mu */
static int g_nsync;
static char g_gate_name[64];
static int g_gate; /* 0 off, 1 armed, 2 holding a caller, 3 released */

static void fd_name(int fd, char *out, size_t len)
{
	char link[64], path[512];
	ssize_t n;
	const char *b;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof(path) - 1);
	if (n < 0) {
		out[0] = 0;
		return;
	}
	path[n] = 0;
	b = strrchr(path, '/');
	snprintf(out, len, "%.63s", b ? b + 1 : path);
}

/* Wait (g_sy_mu held) until *v != val or the deadline; 0 or -ETIMEDOUT. */
static int gate_wait_while(int *v, int val, int secs)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += secs;
	while (*v == val)
		if (pthread_cond_timedwait(&g_sy_cv, &g_sy_mu, &ts) == ETIMEDOUT)
			return -ETIMEDOUT;
	return 0;
}

static int do_sync(int fd, long nr)
{
	struct stat st;
	char name[64] = "";
	int track = atomic_load(&g_track), rc, e;

	if (atomic_load(&g_fail_sync)) {
		atomic_fetch_add(&g_sync_failed_calls, 1);
		errno = EIO;
		return -1;
	}
	if (track) {
		fd_name(fd, name, sizeof(name));
		if (fstat(fd, &st) < 0)
			st.st_size = -1;
	}
	rc = (int)syscall(nr, fd);
	e = errno;
	if (track) {
		pthread_mutex_lock(&g_sy_mu);
		if (g_nsync < SYNCLOG_MAX) {
			snprintf(g_synclog[g_nsync].name, sizeof(g_synclog[0].name), "%s", name);
			g_synclog[g_nsync++].size = st.st_size;
		}
		if (g_gate == 1 && !strcmp(name, g_gate_name)) {
			g_gate = 2;
			pthread_cond_broadcast(&g_sy_cv);
			gate_wait_while(&g_gate, 2, 10);
		}
		pthread_mutex_unlock(&g_sy_mu);
	}
	errno = e;
	return rc;
}

int fdatasync(int fd)
{
	return do_sync(fd, SYS_fdatasync);
}

int fsync(int fd)
{
	return do_sync(fd, SYS_fsync);
}

static void gates_off(void)
{
	atomic_store(&g_track, 0);
	pthread_mutex_lock(&g_sy_mu);
	g_gate = 0;
	g_nsync = 0;
	pthread_cond_broadcast(&g_sy_cv);
	pthread_mutex_unlock(&g_sy_mu);
}

/* A tmpfs this binary mounted: unmounted by teardown, or by the watchdog. */
static char g_mounted[256];

static void on_alarm(int sig)
{
	static const char msg[] = "test_journal: watchdog: a test hung (deadlock?)\n";

	(void)sig;
	if (g_mounted[0])
		umount2(g_mounted, MNT_DETACH);
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(2);
	_exit(1);
}

/* ------------------------------------------------------------------------
 * small helpers
 */
static uint64_t rnd(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

static uint64_t rndn(uint64_t *s, uint64_t n)
{
	return rnd(s) % n;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(p);
	return 0;
}

static void rm_rf(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static uint8_t *read_all(const char *path, size_t *len)
{
	struct stat st;
	uint8_t *buf;
	int fd = open(path, O_RDONLY);

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0) {
		close(fd);
		return NULL;
	}
	buf = malloc(st.st_size + 1);
	if (!buf || pread(fd, buf, st.st_size, 0) != st.st_size) {
		free(buf);
		close(fd);
		return NULL;
	}
	close(fd);
	*len = st.st_size;
	return buf;
}

static int write_all(const char *path, const uint8_t *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = len ? write(fd, buf, len) : 0;
	close(fd);
	return n == (ssize_t)len ? 0 : -EIO;
}

/* The newest "<prefix>.<16 hex>" in dir: its name in out, its gen returned
 * (-1 when there is none). */
static int64_t newest(const char *dir, const char *prefix, char *out, size_t outlen)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int64_t best = -1;
	size_t pl = strlen(prefix);

	if (!d)
		return -1;
	while ((de = readdir(d))) {
		char *end;
		uint64_t g;

		if (strncmp(de->d_name, prefix, pl) || de->d_name[pl] != '.' ||
		    strlen(de->d_name + pl + 1) != 16)
			continue;
		g = strtoull(de->d_name + pl + 1, &end, 16);
		if (*end)
			continue;
		if ((int64_t)g > best) {
			best = g;
			snprintf(out, outlen, "%.63s", de->d_name);
		}
	}
	closedir(d);
	return best;
}

static int count_prefixed(const char *dir, const char *prefix)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)))
		if (!strncmp(de->d_name, prefix, strlen(prefix)))
			n++;
	closedir(d);
	return n;
}

/* Saved copies of every file of a state dir except the lock. */
#define SAVE_MAX 32
struct savedir {
	int n;
	char name[SAVE_MAX][256];
	uint8_t *data[SAVE_MAX];
	size_t len[SAVE_MAX];
};

static void save_dir(const char *dir, struct savedir *s)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	memset(s, 0, sizeof(*s));
	assert_non_null(d);
	while ((de = readdir(d))) {
		char p[512];

		if (de->d_name[0] == '.' || !strcmp(de->d_name, "lock"))
			continue;
		assert_true(s->n < SAVE_MAX);
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		snprintf(s->name[s->n], sizeof(s->name[0]), "%s", de->d_name);
		s->data[s->n] = read_all(p, &s->len[s->n]);
		assert_non_null(s->data[s->n]);
		s->n++;
	}
	closedir(d);
}

static int save_find(const struct savedir *s, const char *name)
{
	for (int i = 0; i < s->n; i++)
		if (!strcmp(s->name[i], name))
			return i;
	return -1;
}

static void save_free(struct savedir *s)
{
	for (int i = 0; i < s->n; i++)
		free(s->data[i]);
	memset(s, 0, sizeof(*s));
}

/* Empty dir (but the lock file) and write the saved files back. */
static void restore_dir(const char *dir, const struct savedir *s)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	assert_non_null(d);
	while ((de = readdir(d))) {
		char p[512];

		if (de->d_name[0] == '.' || !strcmp(de->d_name, "lock"))
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		unlink(p);
	}
	closedir(d);
	for (int i = 0; i < s->n; i++) {
		char p[512];

		snprintf(p, sizeof(p), "%s/%s", dir, s->name[i]);
		assert_int_equal(write_all(p, s->data[i], s->len[i]), 0);
	}
}

/* ------------------------------------------------------------------------
 * records: equality, printing, owned copies
 */
static int attr_eq(const struct jrec_attr *a, const struct jrec_attr *b)
{
	return a->mode == b->mode && a->uid == b->uid && a->gid == b->gid && a->rdev == b->rdev &&
	       a->size == b->size && a->atime_ns == b->atime_ns && a->mtime_ns == b->mtime_ns &&
	       a->ctime_ns == b->ctime_ns;
}

static int loc_eq(const struct chunk_loc *a, const struct chunk_loc *b)
{
	return a->seg_id == b->seg_id && a->off == b->off && a->len == b->len && a->crc == b->crc &&
	       a->dev == b->dev && a->gen == b->gen;
}

static int seg_eq(const struct jrec_seg *a, const struct jrec_seg *b)
{
	return a->id == b->id && a->len == b->len && a->payload == b->payload && a->dev == b->dev &&
	       a->store == b->store;
}

static int bytes_eq(const void *a, uint32_t al, const void *b, uint32_t bl)
{
	return al == bl && (!al || !memcmp(a, b, al));
}

/* Equal in every field the record's type carries. */
static int rec_eq(const struct jrec *a, const struct jrec *b)
{
	if (a->type != b->type)
		return 0;
	switch (a->type) {
	case JR_HEADER:
		return a->hdr.version == b->hdr.version && a->hdr.kind == b->hdr.kind &&
		       a->hdr.gen == b->hdr.gen && a->hdr.chunk_size == b->hdr.chunk_size &&
		       !memcmp(a->hdr.uuid, b->hdr.uuid, 16);
	case JR_END:
		return a->count == b->count;
	case JR_META:
		return a->next_ino == b->next_ino && a->next_seg == b->next_seg;
	case JR_INODE:
		return a->ino == b->ino && attr_eq(&a->attr, &b->attr) &&
		       bytes_eq(a->name, a->name_len, b->name, b->name_len);
	case JR_LINK:
		return a->parent == b->parent && a->ino == b->ino &&
		       bytes_eq(a->name, a->name_len, b->name, b->name_len);
	case JR_UNLINK:
		return a->parent == b->parent &&
		       bytes_eq(a->name, a->name_len, b->name, b->name_len);
	case JR_XATTR_SET:
		return a->ino == b->ino && bytes_eq(a->name, a->name_len, b->name, b->name_len) &&
		       bytes_eq(a->value, a->value_len, b->value, b->value_len);
	case JR_XATTR_DEL:
		return a->ino == b->ino && bytes_eq(a->name, a->name_len, b->name, b->name_len);
	case JR_CHUNK_LOC:
		return a->ino == b->ino && a->chunk == b->chunk && loc_eq(&a->loc, &b->loc);
	case JR_CHUNK_DIRTY:
		return a->ino == b->ino && a->chunk == b->chunk;
	case JR_CHUNK_ABSENT:
		return a->ino == b->ino && a->chunk == b->chunk && a->count == b->count;
	case JR_SEG_ADD:
		return seg_eq(&a->seg, &b->seg);
	case JR_SEG_DEL:
		return a->seg.id == b->seg.id;
	}
	return 0;
}

static const char *rec_str(const struct jrec *r, char *buf, size_t len)
{
	snprintf(buf, len,
		 "type=%u ino=%" PRIu64 " parent=%" PRIu64 " chunk=%" PRIu64 " count=%" PRIu64
		 " name_len=%u value_len=%u seg=%" PRIu64 " next_ino=%" PRIu64,
		 r->type, r->ino, r->parent, r->chunk, r->count, r->name_len, r->value_len,
		 r->seg.id, r->next_ino);
	return buf;
}

struct reclog {
	struct jrec *r;
	size_t n, cap;
};

static void log_add(struct reclog *l, const struct jrec *r)
{
	struct jrec c = *r;

	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 64;
		l->r = realloc(l->r, l->cap * sizeof(*l->r));
		if (!l->r)
			abort();
	}
	if (r->name_len) {
		char *p = malloc(r->name_len);
		if (!p)
			abort();
		memcpy(p, r->name, r->name_len);
		c.name = p;
	} else {
		c.name = NULL;
	}
	if (r->value_len) {
		void *p = malloc(r->value_len);
		if (!p)
			abort();
		memcpy(p, r->value, r->value_len);
		c.value = p;
	} else {
		c.value = NULL;
	}
	l->r[l->n++] = c;
}

static void log_clear(struct reclog *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free((void *)l->r[i].name);
		free((void *)l->r[i].value);
	}
	l->n = 0;
}

static void log_free(struct reclog *l)
{
	log_clear(l);
	free(l->r);
	memset(l, 0, sizeof(*l));
}

/* got == a followed by b, record by record. */
static void assert_log_is(const struct reclog *got, const struct reclog *a, const struct reclog *b)
{
	size_t na = a ? a->n : 0, nb = b ? b->n : 0;
	char s1[256], s2[256];

	for (size_t i = 0; i < got->n && i < na + nb; i++) {
		const struct jrec *want = i < na ? &a->r[i] : &b->r[i - na];

		if (!rec_eq(&got->r[i], want))
			fail_msg("record %zu of %zu differs: got {%s} want {%s}", i, na + nb,
				 rec_str(&got->r[i], s1, sizeof(s1)),
				 rec_str(want, s2, sizeof(s2)));
	}
	if (got->n != na + nb)
		fail_msg("replay gave %zu records, want %zu (%zu checkpoint + %zu journal)", got->n,
			 na + nb, na, nb);
}

/* ------------------------------------------------------------------------
 * the model: what the records describe, with "set a value" semantics
 */
#define NINO   48 /* inode numbers 1..NINO-1 */
#define NDIR   8  /* parents 1..NDIR */
#define NNAME  24
#define NXN    6
#define NCHUNK 12
#define NSEG   40 /* segment ids 1..NSEG-1 */
#define MAXVAL 200
#define MAXTGT 80

struct nm {
	char s[256];
	uint32_t len;
};
static struct nm g_names[NNAME]; /* dentry names */
static struct nm g_xnames[NXN];	 /* xattr names */

static void init_names(void)
{
	static const char *xn[NXN] = {
	    "user.a", "user.spillway.meta",	"security.selinux", "trusted.overlay.opaque",
	    NULL,     "system.posix_acl_access"};

	for (int k = 0; k < NNAME; k++) {
		struct nm *n = &g_names[k];

		if (k == 0) {
			for (int i = 0; i < 255; i++)
				n->s[i] = 'a' + i % 26;
			n->len = 255;
		} else if (k == 1) {
			n->s[0] = 'x';
			n->len = 1;
		} else if (k == 2) {
			static const char odd[] = {(char)0xc3, (char)0xa9, (char)0xff, 0x01,
						   '.',	       (char)0x7f, ' ',	       '\n'};
			memcpy(n->s, odd, sizeof(odd));
			n->len = sizeof(odd);
		} else {
			n->len = snprintf(
			    n->s, sizeof(n->s), "file-%02d-%.*s", k, (k * 7) % 60,
			    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWX");
		}
	}
	for (int k = 0; k < NXN; k++) {
		struct nm *n = &g_xnames[k];

		if (xn[k]) {
			n->len = strlen(xn[k]);
			memcpy(n->s, xn[k], n->len);
		} else {
			memcpy(n->s, "user.", 5);
			memset(n->s + 5, 'z', 200);
			n->len = 205;
		}
	}
}

static int nm_idx(const struct nm *tab, int n, const char *s, uint32_t len)
{
	for (int i = 0; i < n; i++)
		if (tab[i].len == len && !memcmp(tab[i].s, s, len))
			return i;
	return -1;
}

struct m_inode {
	int present;
	struct jrec_attr attr;
	uint32_t tlen;
	char tgt[MAXTGT];
};

struct m_xattr {
	int present;
	uint32_t len;
	uint8_t val[MAXVAL];
};

struct m_chunk {
	int state; /* 0 hole, 1 clean copy at loc, 2 dirty */
	struct chunk_loc loc;
};

struct mstate {
	int have_meta;
	uint64_t next_ino, next_seg;
	struct m_inode in[NINO];
	uint64_t dent[NDIR + 1][NNAME]; /* 0: no entry */
	struct m_xattr xa[NINO][NXN];
	struct m_chunk ch[NINO][NCHUNK];
	int seg_present[NSEG];
	struct jrec_seg seg[NSEG];
	uint64_t applied;
	char why[300]; /* first rejected record */
};

struct model {
	pthread_mutex_t lock; /* guards st (the snapshot runs on the journal's thread) */
	struct mstate st;
};

static struct model *model_new(void)
{
	struct model *m = calloc(1, sizeof(*m));

	assert_non_null(m);
	pthread_mutex_init(&m->lock, NULL);
	m->st.have_meta = 1;
	m->st.next_ino = 2;
	m->st.next_seg = 1;
	return m;
}

static void model_free(struct model *m)
{
	if (!m)
		return;
	pthread_mutex_destroy(&m->lock);
	free(m);
}

static struct mstate *mstate_new(void)
{
	struct mstate *s = calloc(1, sizeof(*s));

	assert_non_null(s);
	return s;
}

static int bad(struct mstate *m, const struct jrec *r, const char *what)
{
	char b[200];

	if (!m->why[0])
		snprintf(m->why, sizeof(m->why), "%s: %s", what, rec_str(r, b, sizeof(b)));
	return -1;
}

/* Apply one record (HEADER and END are accepted and ignored). */
static int model_apply(struct mstate *m, const struct jrec *r)
{
	int k;

	switch (r->type) {
	case JR_HEADER:
	case JR_END:
		return 0;
	case JR_META:
		m->have_meta = 1;
		m->next_ino = r->next_ino;
		m->next_seg = r->next_seg;
		break;
	case JR_INODE:
		if (!r->ino || r->ino >= NINO || r->name_len > MAXTGT)
			return bad(m, r, "inode out of range");
		m->in[r->ino].present = 1;
		m->in[r->ino].attr = r->attr;
		m->in[r->ino].tlen = r->name_len;
		memset(m->in[r->ino].tgt, 0, MAXTGT);
		if (r->name_len)
			memcpy(m->in[r->ino].tgt, r->name, r->name_len);
		break;
	case JR_LINK:
	case JR_UNLINK:
		k = nm_idx(g_names, NNAME, r->name, r->name_len);
		if (!r->parent || r->parent > NDIR || k < 0)
			return bad(m, r, "dentry out of range");
		if (r->type == JR_LINK && !r->ino)
			return bad(m, r, "link to inode 0");
		m->dent[r->parent][k] = r->type == JR_LINK ? r->ino : 0;
		break;
	case JR_XATTR_SET:
	case JR_XATTR_DEL:
		k = nm_idx(g_xnames, NXN, r->name, r->name_len);
		if (!r->ino || r->ino >= NINO || k < 0 || r->value_len > MAXVAL)
			return bad(m, r, "xattr out of range");
		memset(&m->xa[r->ino][k], 0, sizeof(m->xa[0][0]));
		if (r->type == JR_XATTR_SET) {
			m->xa[r->ino][k].present = 1;
			m->xa[r->ino][k].len = r->value_len;
			if (r->value_len)
				memcpy(m->xa[r->ino][k].val, r->value, r->value_len);
		}
		break;
	case JR_CHUNK_LOC:
	case JR_CHUNK_DIRTY:
		if (!r->ino || r->ino >= NINO || r->chunk >= NCHUNK)
			return bad(m, r, "chunk out of range");
		memset(&m->ch[r->ino][r->chunk], 0, sizeof(m->ch[0][0]));
		m->ch[r->ino][r->chunk].state = r->type == JR_CHUNK_LOC ? 1 : 2;
		if (r->type == JR_CHUNK_LOC)
			m->ch[r->ino][r->chunk].loc = r->loc;
		break;
	case JR_CHUNK_ABSENT:
		if (!r->ino || r->ino >= NINO || !r->count)
			return bad(m, r, "absent out of range");
		for (uint64_t c = r->chunk; c < NCHUNK && c - r->chunk < r->count; c++)
			memset(&m->ch[r->ino][c], 0, sizeof(m->ch[0][0]));
		break;
	case JR_SEG_ADD:
	case JR_SEG_DEL:
		if (!r->seg.id || r->seg.id >= NSEG)
			return bad(m, r, "segment out of range");
		memset(&m->seg[r->seg.id], 0, sizeof(m->seg[0]));
		m->seg_present[r->seg.id] = r->type == JR_SEG_ADD;
		if (r->type == JR_SEG_ADD)
			m->seg[r->seg.id] = r->seg;
		break;
	default:
		return bad(m, r, "unexpected record type");
	}
	m->applied++;
	return 0;
}

/* NULL when equal, else the first difference. */
static const char *mstate_diff(const struct mstate *a, const struct mstate *b, char *buf,
			       size_t len)
{
	if (a->have_meta != b->have_meta || a->next_ino != b->next_ino ||
	    a->next_seg != b->next_seg) {
		snprintf(buf, len, "meta: %d %" PRIu64 " %" PRIu64 " vs %d %" PRIu64 " %" PRIu64,
			 a->have_meta, a->next_ino, a->next_seg, b->have_meta, b->next_ino,
			 b->next_seg);
		return buf;
	}
	for (int i = 0; i < NINO; i++) {
		const struct m_inode *x = &a->in[i], *y = &b->in[i];

		if (x->present != y->present ||
		    (x->present && (!attr_eq(&x->attr, &y->attr) ||
				    !bytes_eq(x->tgt, x->tlen, y->tgt, y->tlen)))) {
			snprintf(buf, len,
				 "inode %d: present %d/%d mode %o/%o size %" PRIu64 "/%" PRIu64
				 " tlen %u/%u",
				 i, x->present, y->present, x->attr.mode, y->attr.mode,
				 x->attr.size, y->attr.size, x->tlen, y->tlen);
			return buf;
		}
	}
	for (int p = 0; p <= NDIR; p++)
		for (int k = 0; k < NNAME; k++)
			if (a->dent[p][k] != b->dent[p][k]) {
				snprintf(buf, len, "dentry (%d, name %d): %" PRIu64 " vs %" PRIu64,
					 p, k, a->dent[p][k], b->dent[p][k]);
				return buf;
			}
	for (int i = 0; i < NINO; i++)
		for (int k = 0; k < NXN; k++) {
			const struct m_xattr *x = &a->xa[i][k], *y = &b->xa[i][k];

			if (x->present != y->present ||
			    (x->present && !bytes_eq(x->val, x->len, y->val, y->len))) {
				snprintf(buf, len,
					 "xattr (ino %d, name %d): present %d/%d len %u/%u", i, k,
					 x->present, y->present, x->len, y->len);
				return buf;
			}
		}
	for (int i = 0; i < NINO; i++)
		for (int c = 0; c < NCHUNK; c++) {
			const struct m_chunk *x = &a->ch[i][c], *y = &b->ch[i][c];

			if (x->state != y->state || (x->state == 1 && !loc_eq(&x->loc, &y->loc))) {
				snprintf(buf, len,
					 "chunk (ino %d, %d): state %d/%d seg %" PRIu32 "/%" PRIu32,
					 i, c, x->state, y->state, x->loc.seg_id, y->loc.seg_id);
				return buf;
			}
		}
	for (int s = 0; s < NSEG; s++)
		if (a->seg_present[s] != b->seg_present[s] ||
		    (a->seg_present[s] && !seg_eq(&a->seg[s], &b->seg[s]))) {
			snprintf(buf, len, "segment %d: present %d/%d", s, a->seg_present[s],
				 b->seg_present[s]);
			return buf;
		}
	return NULL;
}

#define assert_mstate_eq(a, b, ctx)                                                                \
	do {                                                                                       \
		char _b[300];                                                                      \
		const char *_d = mstate_diff((a), (b), _b, sizeof(_b));                            \
		if (_d)                                                                            \
			fail_msg("%s: state differs: %s", (ctx), _d);                              \
	} while (0)

/* The records describing the whole state, JR_META first. Pointers point
 * into m. */
static size_t mstate_records(const struct mstate *m, struct jrec **out)
{
	size_t n = 0, cap = 64;
	struct jrec *rs = malloc(cap * sizeof(*rs));

#define NEXT()                                                                                     \
	({                                                                                         \
		if (n == cap) {                                                                    \
			cap *= 2;                                                                  \
			rs = realloc(rs, cap * sizeof(*rs));                                       \
		}                                                                                  \
		if (!rs)                                                                           \
			abort();                                                                   \
		memset(&rs[n], 0, sizeof(rs[n]));                                                  \
		&rs[n++];                                                                          \
	})
	struct jrec *r = NEXT();
	r->type = JR_META;
	r->next_ino = m->next_ino;
	r->next_seg = m->next_seg;
	for (int i = 1; i < NINO; i++)
		if (m->in[i].present) {
			r = NEXT();
			r->type = JR_INODE;
			r->ino = i;
			r->attr = m->in[i].attr;
			r->name = m->in[i].tgt;
			r->name_len = m->in[i].tlen;
		}
	for (int p = 1; p <= NDIR; p++)
		for (int k = 0; k < NNAME; k++)
			if (m->dent[p][k]) {
				r = NEXT();
				r->type = JR_LINK;
				r->parent = p;
				r->name = g_names[k].s;
				r->name_len = g_names[k].len;
				r->ino = m->dent[p][k];
			}
	for (int i = 1; i < NINO; i++)
		for (int k = 0; k < NXN; k++)
			if (m->xa[i][k].present) {
				r = NEXT();
				r->type = JR_XATTR_SET;
				r->ino = i;
				r->name = g_xnames[k].s;
				r->name_len = g_xnames[k].len;
				r->value = m->xa[i][k].val;
				r->value_len = m->xa[i][k].len;
			}
	for (int i = 1; i < NINO; i++)
		for (int c = 0; c < NCHUNK; c++)
			if (m->ch[i][c].state) {
				r = NEXT();
				r->type = m->ch[i][c].state == 1 ? JR_CHUNK_LOC : JR_CHUNK_DIRTY;
				r->ino = i;
				r->chunk = c;
				r->loc = m->ch[i][c].loc;
			}
	for (int s = 1; s < NSEG; s++)
		if (m->seg_present[s]) {
			r = NEXT();
			r->type = JR_SEG_ADD;
			r->seg = m->seg[s];
		}
#undef NEXT
	*out = rs;
	return n;
}

/* ------------------------------------------------------------------------
 * snapshot and recovery callbacks
 */
struct snap {
	struct model *m;
	atomic_int calls;
	int fail_after;	   /* >0: return -ENOMEM once this many records are emitted */
	int gate;	   /* 1: the next snapshot holds (g_sy_mu) until gate != 2 */
	int err;	   /* first error from jrnl_emit */
	struct reclog log; /* the records of the last snapshot */
};

static int snap_fn(void *arg, struct jrnl_emitter *e)
{
	struct snap *s = arg;
	struct mstate *copy = malloc(sizeof(*copy));
	struct jrec *rs;
	size_t n;
	int rc = 0;

	if (!copy)
		return -ENOMEM;
	atomic_fetch_add(&s->calls, 1);
	pthread_mutex_lock(&g_sy_mu);
	if (s->gate == 1) {
		s->gate = 2;
		pthread_cond_broadcast(&g_sy_cv);
		gate_wait_while(&s->gate, 2, 5);
	}
	pthread_mutex_unlock(&g_sy_mu);
	pthread_mutex_lock(&s->m->lock);
	memcpy(copy, &s->m->st, sizeof(*copy));
	pthread_mutex_unlock(&s->m->lock);
	n = mstate_records(copy, &rs);
	log_clear(&s->log);
	for (size_t i = 0; i < n; i++) {
		rc = jrnl_emit(e, &rs[i]);
		if (rc) {
			if (!s->err)
				s->err = rc;
			break;
		}
		log_add(&s->log, &rs[i]);
		if (s->fail_after && (int)i + 1 >= s->fail_after) {
			rc = -ENOMEM;
			break;
		}
	}
	free(rs);
	free(copy);
	return rc;
}

struct rcv {
	struct mstate *m;
	struct reclog *log; /* optional: every record but HEADER/END */
	long calls;
	long nhdr, nend, ntx;
	long fail_at; /* return fail_rc on this call (1-based) */
	int fail_rc;
};

#define RCV_BAD 999

static int rcv_fn(void *arg, const struct jrec *r)
{
	struct rcv *c = arg;

	c->calls++;
	if (c->fail_at && c->calls == c->fail_at)
		return c->fail_rc;
	if (r->type == JR_HEADER) {
		c->nhdr++;
		return 0;
	}
	if (r->type == JR_END) {
		c->nend++;
		return 0;
	}
	if (r->type == JR_TX)
		c->ntx++;
	if (c->log)
		log_add(c->log, r);
	return model_apply(c->m, r) ? RCV_BAD : 0;
}

/* ------------------------------------------------------------------------
 * fixture: a temp dir (removed at the end), maybe a tmpfs, open journals
 */
struct fx {
	char base[64];
	char dir[128]; /* state dir: base/state (created by jrnl_open) */
	char mnt[96];
	int mounted;
	struct jrnl_config cfg;
	struct journal *j, *j2;
	struct model *m;
	struct snap snap;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	strcpy(f->base, "/tmp/test_journal.XXXXXX");
	if (!mkdtemp(f->base)) {
		free(f);
		return -1;
	}
	snprintf(f->dir, sizeof(f->dir), "%s/state", f->base);
	f->cfg.dir = f->dir;
	f->cfg.sync_ms = 1000;
	f->cfg.checkpoint_bytes = 1ULL << 30;
	f->cfg.chunk_size = CHUNK;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	atomic_store(&g_fail_sync, 0);
	gates_off();
	pthread_mutex_lock(&g_sy_mu);
	f->snap.gate = 0;
	pthread_cond_broadcast(&g_sy_cv);
	pthread_mutex_unlock(&g_sy_mu);
	if (f->j)
		jrnl_close(f->j, 0);
	if (f->j2)
		jrnl_close(f->j2, 0);
	if (f->mounted) {
		umount2(f->mnt, MNT_DETACH);
		g_mounted[0] = 0;
	}
	rm_rf(f->base);
	model_free(f->m);
	log_free(&f->snap.log);
	free(f);
	return 0;
}

static struct journal *jopen(struct fx *f)
{
	struct journal *j = NULL;
	char err[256] = "";
	int rc = jrnl_open(&f->cfg, &j, err, sizeof(err));

	if (rc)
		fail_msg("jrnl_open(%s) = %d: %s", f->cfg.dir, rc, err);
	assert_non_null(j);
	return j;
}

/* Open and recover into a fresh state (returned; caller frees). */
static struct mstate *jrecover(struct fx *f, struct journal **jout, struct reclog *log,
			       struct jrnl_recovery *info)
{
	struct mstate *m = mstate_new();
	struct rcv c = {.m = m, .log = log};
	char err[256] = "";
	int rc;

	*jout = jopen(f);
	memset(info, 0, sizeof(*info));
	rc = jrnl_recover(*jout, rcv_fn, &c, info, err, sizeof(err));
	if (rc == RCV_BAD)
		fail_msg("recovery gave a record the model rejects: %s", m->why);
	if (rc)
		fail_msg("jrnl_recover = %d: %s", rc, err);
	assert_int_equal(c.ntx, 0); /* TX records come expanded */
	return m;
}

/* Fresh state dir: open, recover (fresh), start with f->snap on f->m. */
static void start_fresh(struct fx *f)
{
	struct jrnl_recovery info;
	char err[256] = "";
	struct mstate *m;
	int rc;

	if (!f->m)
		f->m = model_new();
	f->snap.m = f->m;
	m = jrecover(f, &f->j, NULL, &info);
	assert_int_equal(info.fresh, 1);
	assert_int_equal(m->applied, 0);
	free(m);
	rc = jrnl_start(f->j, snap_fn, &f->snap);
	if (rc)
		fail_msg("jrnl_start = %d (err %s)", rc, err);
	assert_true(atomic_load(&f->snap.calls) >= 1); /* a fresh dir gets a checkpoint */
	assert_int_equal(f->snap.err, 0);
}

/* Apply to the live model and append, under the model's lock. */
static int live_append(struct fx *f, struct journal *j, const struct jrec *rs, int n)
{
	int rc;

	pthread_mutex_lock(&f->m->lock);
	for (int i = 0; i < n; i++)
		if (model_apply(&f->m->st, &rs[i]))
			fail_msg("the generator made a record the model rejects: %s", f->m->st.why);
	rc = n == 1 ? jrnl_append(j, rs) : jrnl_append_tx(j, rs, n);
	pthread_mutex_unlock(&f->m->lock);
	return rc;
}

/* ------------------------------------------------------------------------
 * sample records
 */
static uint8_t g_bigval[65536];

/* One record of every type but TX, all fields set to telling values. */
static int sample_records(struct jrec *rs)
{
	int n = 0;
	struct jrec *r;

	memset(rs, 0, 16 * sizeof(*rs));
	r = &rs[n++];
	r->type = JR_HEADER;
	r->hdr.version = JRNL_VERSION;
	r->hdr.kind = JRNL_KIND_CHECKPOINT;
	r->hdr.gen = 0x0123456789abcdefULL;
	r->hdr.chunk_size = 64ULL << 20;
	for (int i = 0; i < 16; i++)
		r->hdr.uuid[i] = 0xf0 ^ (i * 17);
	r = &rs[n++];
	r->type = JR_END;
	r->count = 0xfedcba9876543210ULL;
	r = &rs[n++];
	r->type = JR_META;
	r->next_ino = 0x1122334455667788ULL;
	r->next_seg = JRNL_MAX_SEG_ID + 1; /* the largest a record may carry */
	r = &rs[n++];
	r->type = JR_INODE;
	r->ino = 0xdeadbeefcafef00dULL;
	r->attr = (struct jrec_attr){.mode = 0120777,
				     .uid = 0xfffffffe,
				     .gid = 0x80000001,
				     .rdev = 0x0102030405060708ULL,
				     .size = JRNL_MAX_FILE_SIZE,
				     .atime_ns = -1234567890123456789LL,
				     .mtime_ns = 1700000000123456789LL,
				     .ctime_ns = INT64_MIN + 7};
	r->name = "../some/where/target";
	r->name_len = strlen(r->name);
	r = &rs[n++];
	r->type = JR_LINK;
	r->parent = 0xa5a5a5a5a5a5a5a5ULL;
	r->name = g_names[0].s;
	r->name_len = g_names[0].len;
	r->ino = 0x5a5a5a5a5a5a5a5aULL;
	r = &rs[n++];
	r->type = JR_UNLINK;
	r->parent = 0x0000000100000002ULL;
	r->name = g_names[2].s;
	r->name_len = g_names[2].len;
	r = &rs[n++];
	r->type = JR_XATTR_SET;
	r->ino = 77;
	r->name = g_xnames[4].s;
	r->name_len = g_xnames[4].len;
	r->value = g_bigval;
	r->value_len = sizeof(g_bigval); /* XATTR_SIZE_MAX */
	r = &rs[n++];
	r->type = JR_XATTR_DEL;
	r->ino = 78;
	r->name = g_xnames[1].s;
	r->name_len = g_xnames[1].len;
	r = &rs[n++];
	r->type = JR_CHUNK_LOC;
	r->ino = 1ULL << 63;
	r->chunk = JRNL_MAX_CHUNKS - 1;
	r->loc = (struct chunk_loc){.seg_id = JRNL_MAX_SEG_ID,
				   .off = 0x7766554433221100ULL,
				   .len = JRNL_MAX_CHUNK_SIZE,
				   .crc = 0x12345678,
				   .dev = 0xdef0,
				   .gen = 0xffffffff,
				   .flags = LOC_F_MAP};
	r = &rs[n++];
	r->type = JR_CHUNK_DIRTY;
	r->ino = 3;
	r->chunk = 0x00abcdefULL;
	r = &rs[n++];
	r->type = JR_CHUNK_ABSENT;
	r->ino = 4;
	r->chunk = 5;
	r->count = JRNL_MAX_CHUNKS - 5;
	r = &rs[n++];
	r->type = JR_SEG_ADD;
	r->seg = (struct jrec_seg){.id = 0x0f0e0d0cULL,
				   .len = 64ULL << 20,
				   .payload = (64ULL << 20) - 4096 - 17,
				   .dev = 0xc0ffee,
				   .store = 1};
	r = &rs[n++];
	r->type = JR_SEG_DEL;
	r->seg.id = 0x10000001ULL;
	/* an inode record with an empty target and a link with a 1-byte name */
	r = &rs[n++];
	r->type = JR_INODE;
	r->ino = 2;
	r->attr.mode = 040755;
	r = &rs[n++];
	r->type = JR_LINK;
	r->parent = 1;
	r->name = g_names[1].s;
	r->name_len = 1;
	r->ino = 2;
	return n;
}


/* ------------------------------------------------------------------------
 * records encoded (the codec's tests and the files' tests)
 */
static uint8_t *encode(const struct jrec *r, size_t *len)
{
	size_t sz = jrnl_encoded_size(r);
	uint8_t *buf = malloc(sz + 64);

	assert_non_null(buf);
	assert_true(sz >= 9);
	memset(buf, 0xa7, sz + 64);
	assert_int_equal(jrnl_encode(r, buf), sz);
	for (size_t i = sz; i < sz + 64; i++)
		if (buf[i] != 0xa7)
			fail_msg("jrnl_encode wrote past jrnl_encoded_size (%zu) at %zu", sz, i);
	*len = sz;
	return buf;
}

/* ------------------------------------------------------------------------
 * the model's records and its first state (the files', torn tails',
 * failures' and crash windows' tests)
 */

/* A few records touching the model's key space, every type. */
static int model_records(struct jrec *rs, int variant)
{
	static uint8_t val[MAXVAL];
	int n = 0;
	struct jrec *r;

	for (int i = 0; i < MAXVAL; i++)
		val[i] = i * 31 + 7;
	memset(rs, 0, 13 * sizeof(*rs));
	r = &rs[n++];
	r->type = JR_INODE;
	r->ino = 5 + variant;
	r->attr = (struct jrec_attr){.mode = 0120777,
				     .uid = 1000,
				     .gid = 100,
				     .size = 11,
				     .atime_ns = -5,
				     .mtime_ns = 1700000000000000001LL,
				     .ctime_ns = 3};
	r->name = "/etc/passwd";
	r->name_len = 11;
	r = &rs[n++];
	r->type = JR_LINK;
	r->parent = 1;
	r->name = g_names[0].s;
	r->name_len = g_names[0].len;
	r->ino = 5 + variant;
	r = &rs[n++];
	r->type = JR_XATTR_SET;
	r->ino = 5;
	r->name = g_xnames[4].s;
	r->name_len = g_xnames[4].len;
	r->value = val;
	r->value_len = MAXVAL - variant;
	r = &rs[n++];
	r->type = JR_LINK;
	r->parent = 2;
	r->name = g_names[2].s;
	r->name_len = g_names[2].len;
	r->ino = 9;
	r = &rs[n++];
	r->type = JR_UNLINK;
	r->parent = 1;
	r->name = g_names[0].s;
	r->name_len = g_names[0].len;
	r = &rs[n++];
	r->type = JR_CHUNK_LOC;
	r->ino = 5;
	r->chunk = 3;
	r->loc = (struct chunk_loc){.seg_id = 7,
				   .off = 4096 * (1 + variant),
				   .len = 1 << 22,
				   .crc = 0xdeadbeef,
				   .dev = 1,
				   .gen = 9};
	r = &rs[n++];
	r->type = JR_CHUNK_DIRTY;
	r->ino = 5;
	r->chunk = 4;
	r = &rs[n++];
	r->type = JR_CHUNK_ABSENT;
	r->ino = 5;
	r->chunk = 3;
	r->count = 1;
	r = &rs[n++];
	r->type = JR_SEG_ADD;
	r->seg =
	    (struct jrec_seg){.id = 7, .len = 1 << 26, .payload = 1 << 25, .dev = 2, .store = 1};
	r = &rs[n++];
	r->type = JR_META;
	r->next_ino = 100 + variant;
	r->next_seg = 50 + variant;
	r = &rs[n++];
	r->type = JR_XATTR_DEL;
	r->ino = 5;
	r->name = g_xnames[0].s;
	r->name_len = g_xnames[0].len;
	r = &rs[n++];
	r->type = JR_SEG_DEL;
	r->seg.id = 3;
	r = &rs[n++];
	r->type = JR_XATTR_SET;
	r->ino = 6;
	r->name = g_xnames[0].s;
	r->name_len = g_xnames[0].len;
	r->value = "";
	r->value_len = 0;
	return n;
}

/* A small initial state for the snapshot at jrnl_start. */
static void model_seed(struct model *m)
{
	struct mstate *s = &m->st;
	struct jrec r = {0};

	s->next_ino = 20;
	s->next_seg = 4;
	for (int i = 1; i <= 3; i++) {
		memset(&r, 0, sizeof(r));
		r.type = JR_INODE;
		r.ino = i;
		r.attr.mode = i == 1 ? 040755 : 0100644;
		r.attr.size = i * 1000;
		r.attr.mtime_ns = i * 1000000007LL;
		assert_int_equal(model_apply(s, &r), 0);
	}
	memset(&r, 0, sizeof(r));
	r.type = JR_LINK;
	r.parent = 1;
	r.name = g_names[5].s;
	r.name_len = g_names[5].len;
	r.ino = 2;
	assert_int_equal(model_apply(s, &r), 0);
	memset(&r, 0, sizeof(r));
	r.type = JR_XATTR_SET;
	r.ino = 5;
	r.name = g_xnames[0].s;
	r.name_len = g_xnames[0].len;
	r.value = "abc";
	r.value_len = 3;
	assert_int_equal(model_apply(s, &r), 0);
	memset(&r, 0, sizeof(r));
	r.type = JR_SEG_ADD;
	r.seg = (struct jrec_seg){.id = 3, .len = 1000, .payload = 900, .dev = 0, .store = 0};
	assert_int_equal(model_apply(s, &r), 0);
	memset(&r, 0, sizeof(r));
	r.type = JR_CHUNK_LOC;
	r.ino = 2;
	r.chunk = 0;
	r.loc = (struct chunk_loc){.seg_id = 3, .off = 0, .len = 1000, .crc = 1, .dev = 0, .gen = 1};
	assert_int_equal(model_apply(s, &r), 0);
}


#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

/* Once, first in main: quiet logs (SPW_TEST_LOG=1 shows the journal's
 * warnings, expected here), the names, the big value, the watchdog. */
static inline void journal_fixture_init(void)
{
	if (!getenv("SPW_TEST_LOG"))
		spw_log_level = LOG_CRIT;
	init_names();
	for (size_t i = 0; i < sizeof(g_bigval); i++)
		g_bigval[i] = (uint8_t)(i * 2654435761u >> 13);
	signal(SIGALRM, on_alarm);
	alarm(100);
}

#pragma GCC diagnostic pop

#endif
