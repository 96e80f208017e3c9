/*
 * scrub.c — the online scrub of extents (scrub.h).
 * DESIGN
 * - A run lists the files that have an extent (one walk of the index, each
 *   inode's lock taken alone for its size), then takes them in inode order,
 *   each in pieces of SCRUB_PIECE bytes. Per piece the inode lock is taken
 *   once: is the extent the one first seen (same id, same wgen, still
 *   sealed)? then its crcs of the piece are copied and the lock dropped;
 *   the read and the checks run without it. A block that fails is judged
 *   under the lock again: the extent unchanged, it is damaged; changed
 *   (a writer opened it, a truncate, a daemon write: each bumps wgen before
 *   touching the bytes), the file is skipped: its bytes moved under us.
 * - Its own file description (/proc/self/fd of a dup of the extent's fd,
 *   which stays valid whatever happens to the extent meanwhile), opened
 *   O_DIRECT: the disk is what is checked, and the page cache the node
 *   uses is left as it is. Where O_DIRECT is refused (tmpfs), buffered
 *   with readahead off, and the pages a piece brought in (mincore before)
 *   are dropped after it.
 * - Status under s->lock (a leaf); the stats counters (scrub.runs, bytes,
 *   damaged) are the tier's atomics.
 */
#include "tier/extent/scrub.h"
#include "tier/tier_i.h"

#include "common/clock.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "common/uring.h"
#include "index/journal_codec.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define B JRNL_EXT_BLOCK
#define SCRUB_PIECE (1u << 20) /* bytes read per look at the extent */
#define SCRUB_LIST 32	       /* damaged files the status names */
#define SCRUB_OFFS 8	       /* damaged block offsets it names per file */
#define SCRUB_PATH 1024	       /* longest path it names */
#define IOPRIO_IDLE (3 << 13)
#define PAGE 4096u

struct scrub_bad {
	uint64_t ino, blocks;
	uint32_t noff;
	uint64_t off[SCRUB_OFFS];
	char *path; /* resolved at the run's end; NULL: no name */
};

enum scrub_state { SCRUB_IDLE, SCRUB_RUNNING, SCRUB_DONE, SCRUB_CANCELLED };

struct scrub {
	pthread_mutex_t lock;
	pthread_cond_t cond; /* a paced run waits on it; stop wakes it */
	/* all below: protected by lock */
	pthread_t th;
	int has_thread; /* th is to be joined */
	int stop;	/* cancel the run in progress */
	int shut;	/* scrub_stop: no run starts any more */
	enum scrub_state state;
	uint64_t runs, limit;
	uint64_t files_total, bytes_total; /* listed at the run's start */
	uint64_t files, bytes, blocks, skipped, damaged_blocks, damaged_files;
	int64_t started, finished; /* seconds since the epoch */
	uint32_t nbad;
	struct scrub_bad bad[SCRUB_LIST];
};

#define ST_ADD(f, v) __atomic_add_fetch(&t->st.f, (v), __ATOMIC_RELAXED)

/* ---- the list ---- */

struct ext_list {
	uint64_t *ino;
	size_t n, cap;
	uint64_t bytes;
	int err;
};

static int list_one(void *arg, struct inode *in)
{
	struct ext_list *l = arg;

	if (!S_ISREG(idx_type(in)) || !__atomic_load_n(&in->ext, __ATOMIC_RELAXED))
		return 0;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 256;
		uint64_t *p = realloc(l->ino, cap * sizeof(*p));
		if (!p) {
			l->err = -ENOMEM;
			return 1;
		}
		l->ino = p;
		l->cap = cap;
	}
	l->ino[l->n++] = in->ino;
	idx_inode_lock(in);
	if (in->ext && in->ext->sealed)
		l->bytes += in->ext->size;
	idx_inode_unlock(in);
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* ---- paths of the damaged files ---- */

struct name_of {
	uint64_t ino, parent;
	char *name; /* NULL: not found yet */
};

struct names {
	struct name_of *v;
	size_t n, cap;
	int found;
};

static struct name_of *names_find(struct names *ns, uint64_t ino)
{
	for (size_t i = 0; i < ns->n; i++)
		if (ns->v[i].ino == ino)
			return &ns->v[i];
	return NULL;
}

static void names_want(struct names *ns, uint64_t ino)
{
	if (ino == IDX_ROOT_INO || names_find(ns, ino))
		return;
	if (ns->n == ns->cap) {
		size_t cap = ns->cap ? ns->cap * 2 : 64;
		struct name_of *p = realloc(ns->v, cap * sizeof(*p));
		if (!p)
			return;
		ns->v = p;
		ns->cap = cap;
	}
	ns->v[ns->n++] = (struct name_of){.ino = ino};
}

static int name_one(void *arg, uint64_t parent, const char *name, uint64_t ino)
{
	struct names *ns = arg;
	struct name_of *w = names_find(ns, ino);

	if (w && !w->name && (w->name = strdup(name))) {
		w->parent = parent;
		ns->found = 1;
	}
	return 0;
}

/* "/a/b" of ino from the names found, into buf; 0, or -1 when its chain
 * does not reach the root. */
static int path_of(struct names *ns, uint64_t ino, char *buf, size_t len)
{
	char tmp[SCRUB_PATH];
	size_t pos = sizeof(tmp) - 1;

	tmp[pos] = '\0';
	for (int depth = 0; ino != IDX_ROOT_INO; depth++) {
		struct name_of *w = names_find(ns, ino);
		size_t nl;
		if (!w || !w->name || depth > 255 || (nl = strlen(w->name)) + 1 > pos)
			return -1;
		pos -= nl;
		memcpy(tmp + pos, w->name, nl);
		tmp[--pos] = '/';
		ino = w->parent;
	}
	snprintf(buf, len, "%s", tmp + pos);
	return 0;
}

/* Each damaged file's path, by walks of the index's names: the files',
 * then their directories', up to the root (one walk per level). */
static void resolve_paths(struct tier *t, struct scrub_bad *bad, uint32_t nbad)
{
	struct names ns = {0};
	char path[SCRUB_PATH];

	for (uint32_t i = 0; i < nbad; i++)
		names_want(&ns, bad[i].ino);
	for (int depth = 0; depth < 256; depth++) {
		size_t n = ns.n;
		ns.found = 0;
		idx_for_each_name(t->idx, name_one, &ns);
		for (size_t i = 0; i < n; i++)
			if (ns.v[i].name)
				names_want(&ns, ns.v[i].parent);
		if (!ns.found && ns.n == n)
			break;
	}
	for (uint32_t i = 0; i < nbad; i++)
		if (path_of(&ns, bad[i].ino, path, sizeof(path)) == 0)
			bad[i].path = strdup(path);
	for (size_t i = 0; i < ns.n; i++)
		free(ns.v[i].name);
	free(ns.v);
}

/* ---- one file ---- */

/* The extent in->ext is still the one a scrub began with: same id, same
 * generation, sealed. in->lock held. */
static struct idx_ext *same_locked(struct inode *in, uint64_t id, uint32_t g)
{
	struct idx_ext *x = in->ext;
	return x && x->id == id && x->wgen == g && x->sealed ? x : NULL;
}

/* Wait until the bytes read so far are due at the run's limit; 1 when
 * told to stop. */
static int pace(struct scrub *s, uint64_t t0_ms)
{
	int stop;

	pthread_mutex_lock(&s->lock);
	if (s->limit && !s->stop) {
		uint64_t due = t0_ms + (uint64_t)((double)s->bytes * 1000.0 / (double)s->limit);
		uint64_t now;
		while (!s->stop && (now = clock_now_ms()) < due) {
			struct timespec dl = clock_deadline_ms(due - now);
			pthread_cond_timedwait(&s->cond, &s->lock, &dl);
		}
	}
	stop = s->stop;
	pthread_mutex_unlock(&s->lock);
	return stop;
}

/* fd's own file description for reading (O_DIRECT when *direct and the
 * filesystem takes it: *direct says); fd is consumed. */
static int own_fd(int fd, int *direct)
{
	char p[64];
	int r;

	snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
	if (*direct && (r = open(p, O_RDONLY | O_DIRECT | O_CLOEXEC)) >= 0) {
		close(fd);
		return r;
	}
	*direct = 0;
	if ((r = open(p, O_RDONLY | O_CLOEXEC)) >= 0) {
		close(fd);
		posix_fadvise(r, 0, 0, POSIX_FADV_RANDOM); /* no readahead past a piece */
		return r;
	}
	return fd; /* no /proc: the shared description, buffered */
}

/* Drop the pages of [off, off + len) that were not in the page cache
 * before (vec: mincore's, NULL unknown: all). */
static void drop_new_pages(int fd, uint64_t off, uint64_t len, const unsigned char *vec)
{
	uint64_t np = (len + PAGE - 1) / PAGE;

	if (!vec) {
		posix_fadvise(fd, (off_t)off, (off_t)len, POSIX_FADV_DONTNEED);
		return;
	}
	for (uint64_t i = 0; i < np;) {
		uint64_t j = i;
		if (vec[i] & 1) {
			i++;
			continue;
		}
		while (j < np && !(vec[j] & 1))
			j++;
		posix_fadvise(fd, (off_t)(off + i * PAGE), (off_t)((j - i) * PAGE),
			      POSIX_FADV_DONTNEED);
		i = j;
	}
}

/* Which pages of [off, off + len) the page cache holds. 0 or -1. */
static int resident(int fd, uint64_t off, uint64_t len, unsigned char *vec)
{
	void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)off);
	int r;

	if (p == MAP_FAILED)
		return -1;
	r = mincore(p, len, vec);
	munmap(p, len);
	return r;
}

/* A damaged block found (the extent unchanged): counted, logged, listed. */
static void note_bad(struct tier *t, struct scrub *s, uint64_t ino, uint64_t off, int first,
		     int err)
{
	ST_ADD(ext_crc_errors, 1);
	ST_ADD(errors_crc, 1);
	ST_ADD(scrub_damaged, 1);
	if (err)
		log_err("scrub: extent of inode %llu: block at byte %llu cannot be read: %s",
			(unsigned long long)ino, (unsigned long long)off, strerror(err));
	else
		log_err("scrub: extent of inode %llu: block at byte %llu fails its crc",
			(unsigned long long)ino, (unsigned long long)off);
	pthread_mutex_lock(&s->lock);
	s->damaged_blocks++;
	if (first)
		s->damaged_files++;
	struct scrub_bad *b = NULL;
	if (first && s->nbad < SCRUB_LIST) {
		b = &s->bad[s->nbad++];
		memset(b, 0, sizeof(*b));
		b->ino = ino;
	} else if (!first && s->nbad && s->bad[s->nbad - 1].ino == ino) {
		b = &s->bad[s->nbad - 1];
	}
	if (b) {
		b->blocks++;
		if (b->noff < SCRUB_OFFS)
			b->off[b->noff++] = off;
	}
	pthread_mutex_unlock(&s->lock);
}

enum { F_CHECKED, F_SKIPPED, F_GONE, F_STOPPED };

/* Scrub ino's extent with buf (SCRUB_PIECE bytes, aligned). */
static int scrub_file(struct tier *t, struct scrub *s, uint64_t ino, uint8_t *buf,
		      unsigned char *vec, uint64_t t0_ms)
{
	struct inode *in = idx_get(t->idx, ino);
	uint32_t crc[SCRUB_PIECE / B], g;
	uint64_t id, size, nbad = 0;
	int fd, direct = 1, ret = F_CHECKED;

	if (!in)
		return F_GONE;
	idx_inode_lock(in);
	struct idx_ext *x = S_ISREG(idx_type(in)) ? in->ext : NULL;
	if (!x || x->fd < 0 || in->nlink == 0) {
		idx_inode_unlock(in);
		idx_put(t->idx, in);
		return F_GONE;
	}
	if (!x->sealed || x->ncrc < idx_ext_blocks(x->size)) {
		idx_inode_unlock(in);
		idx_put(t->idx, in);
		return F_SKIPPED; /* being written */
	}
	id = x->id;
	g = x->wgen;
	size = x->size;
	fd = fcntl(x->fd, F_DUPFD_CLOEXEC, 0);
	idx_inode_unlock(in);
	if (fd < 0) {
		log_warn("scrub: extent of inode %llu: %s: skipped", (unsigned long long)ino,
			 strerror(errno));
		idx_put(t->idx, in);
		return F_SKIPPED;
	}
	fd = own_fd(fd, &direct);
	for (uint64_t off = 0; off < size && ret == F_CHECKED; off += SCRUB_PIECE) {
		uint64_t len = size - off < SCRUB_PIECE ? size - off : SCRUB_PIECE;
		uint32_t nb = (uint32_t)((len + B - 1) / B), fails = 0;
		uint64_t bad = 0; /* bit k: block k of the piece */
		int known = 0, err = 0;
		ssize_t got;

		if (pace(s, t0_ms)) {
			ret = F_STOPPED;
			break;
		}
		idx_inode_lock(in);
		if ((x = same_locked(in, id, g)))
			memcpy(crc, x->crc + off / B, nb * sizeof(crc[0]));
		idx_inode_unlock(in);
		if (!x) {
			ret = F_SKIPPED; /* changed: its bytes moved under us */
			break;
		}
		if (!direct)
			known = resident(fd, off, len, vec) == 0;
		got = uring_read_full(fd, buf, (len + PAGE - 1) / PAGE * PAGE, off);
		if (got == -EINVAL && direct) { /* O_DIRECT taken at open, not here */
			direct = 0;
			fd = own_fd(fd, &direct);
			got = uring_read_full(fd, buf, (len + PAGE - 1) / PAGE * PAGE, off);
		}
		if (!direct)
			drop_new_pages(fd, off, len, known ? vec : NULL);
		if (got < 0)
			err = (int)-got;
		for (uint32_t k = 0; k < nb; k++) {
			uint64_t bo = (uint64_t)k * B, bl = len - bo < B ? len - bo : B;
			if (got < 0 || (uint64_t)got < bo + bl ||
			    crc32c(0, buf + bo, (size_t)bl) != crc[k]) {
				bad |= 1ull << k;
				fails++;
			}
		}
		if (fails) {
			/* damaged, or changed since its crcs were copied? */
			idx_inode_lock(in);
			x = same_locked(in, id, g);
			idx_inode_unlock(in);
			if (!x) {
				ret = F_SKIPPED;
				break;
			}
			for (uint32_t k = 0; k < nb; k++)
				if (bad & (1ull << k))
					note_bad(t, s, ino, off + (uint64_t)k * B, nbad++ == 0,
						 err ? err : got < 0 ? EIO : 0);
		}
		ST_ADD(scrub_bytes, len);
		pthread_mutex_lock(&s->lock);
		s->bytes += len;
		s->blocks += nb;
		pthread_mutex_unlock(&s->lock);
	}
	close(fd);
	idx_put(t->idx, in);
	return ret;
}

/* ---- the run ---- */

static void *scrub_main(void *arg)
{
	struct tier *t = arg;
	struct scrub *s = t->scrub;
	struct ext_list l = {0};
	uint8_t *buf = seg_buf_alloc(SCRUB_PIECE);
	unsigned char *vec = malloc(SCRUB_PIECE / PAGE);
	uint64_t t0 = clock_now_ms();
	int stopped = 0;

	uring_set_ioprio(IOPRIO_IDLE);
	idx_for_each(t->idx, list_one, &l);
	if (l.n)
		qsort(l.ino, l.n, sizeof(l.ino[0]), cmp_u64);
	pthread_mutex_lock(&s->lock);
	s->files_total = l.n;
	s->bytes_total = l.bytes;
	pthread_mutex_unlock(&s->lock);
	if (!buf || !vec || l.err) {
		log_err("scrub: out of memory: not run");
		l.n = 0;
	}
	for (size_t i = 0; i < l.n && !stopped; i++) {
		int r = scrub_file(t, s, l.ino[i], buf, vec, t0);
		pthread_mutex_lock(&s->lock);
		if (r == F_CHECKED)
			s->files++;
		else if (r == F_SKIPPED)
			s->skipped++;
		stopped = r == F_STOPPED || s->stop;
		pthread_mutex_unlock(&s->lock);
	}
	seg_buf_free(buf);
	free(vec);
	free(l.ino);

	/* the paths, outside the room's lock (walks under the index lock) */
	struct scrub_bad bad[SCRUB_LIST];
	uint32_t nbad;
	pthread_mutex_lock(&s->lock);
	nbad = s->nbad;
	memcpy(bad, s->bad, nbad * sizeof(bad[0]));
	pthread_mutex_unlock(&s->lock);
	resolve_paths(t, bad, nbad);
	for (uint32_t i = 0; i < nbad; i++)
		if (bad[i].path)
			log_err("scrub: %s (inode %llu): %llu damaged blocks, the first at byte %llu",
				bad[i].path, (unsigned long long)bad[i].ino,
				(unsigned long long)bad[i].blocks, (unsigned long long)bad[i].off[0]);

	pthread_mutex_lock(&s->lock);
	for (uint32_t i = 0; i < nbad; i++)
		s->bad[i].path = bad[i].path;
	s->state = stopped ? SCRUB_CANCELLED : SCRUB_DONE;
	s->finished = (int64_t)time(NULL);
	log_info("scrub: %s: %llu files (%llu MiB) checked, %llu damaged (%llu blocks), %llu "
		 "skipped (being written)",
		 stopped ? "cancelled" : "done", (unsigned long long)s->files,
		 (unsigned long long)(s->bytes >> 20), (unsigned long long)s->damaged_files,
		 (unsigned long long)s->damaged_blocks, (unsigned long long)s->skipped);
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* ---- the room ---- */

int scrub_new(struct tier *t)
{
	struct scrub *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	t->scrub = s;
	return 0;
}

static void clear_bad_locked(struct scrub *s)
{
	for (uint32_t i = 0; i < s->nbad; i++)
		free(s->bad[i].path);
	s->nbad = 0;
}

void scrub_free(struct tier *t)
{
	struct scrub *s = t->scrub;

	if (!s)
		return;
	scrub_stop(t);
	clear_bad_locked(s);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	free(s);
	t->scrub = NULL;
}

int scrub_start(struct tier *t, uint64_t limit)
{
	struct scrub *s = t->scrub;
	int ret = 0;

	pthread_mutex_lock(&s->lock);
	if (s->shut) {
		ret = -ESHUTDOWN;
		goto out;
	}
	if (s->state == SCRUB_RUNNING) {
		ret = -EBUSY;
		goto out;
	}
	if (s->has_thread) { /* the last run's: it has set its state, it ends */
		pthread_join(s->th, NULL);
		s->has_thread = 0;
	}
	clear_bad_locked(s);
	s->files_total = s->bytes_total = 0;
	s->files = s->bytes = s->blocks = s->skipped = 0;
	s->damaged_blocks = s->damaged_files = 0;
	s->limit = limit;
	s->stop = 0;
	s->started = (int64_t)time(NULL);
	s->finished = 0;
	s->state = SCRUB_RUNNING;
	if ((ret = -pthread_create(&s->th, NULL, scrub_main, t)) < 0) {
		s->state = SCRUB_IDLE;
		goto out;
	}
	s->has_thread = 1;
	s->runs++;
	ST_ADD(scrub_runs, 1);
	log_info("scrub: started%s", limit ? " (paced)" : "");
out:
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int scrub_cancel(struct tier *t)
{
	struct scrub *s = t->scrub;

	pthread_mutex_lock(&s->lock);
	s->stop = 1;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

void scrub_stop(struct tier *t)
{
	struct scrub *s = t->scrub;
	pthread_t th;
	int join;

	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	s->shut = 1;
	s->stop = 1;
	pthread_cond_broadcast(&s->cond);
	join = s->has_thread;
	th = s->th;
	s->has_thread = 0;
	pthread_mutex_unlock(&s->lock);
	if (join)
		pthread_join(th, NULL);
}

/* snprintf at buf + *pos, keeping *pos the length the whole would need */
#define PUT(...)                                                                           \
	do {                                                                               \
		int n_ = snprintf(*pos < len ? buf + *pos : NULL, *pos < len ? len - *pos : 0, \
				  __VA_ARGS__);                                            \
		if (n_ > 0)                                                                \
			*pos += (size_t)n_;                                                \
	} while (0)

/* s as a JSON string: quotes, backslashes and control bytes escaped; other
 * bytes as they are (a name need not be UTF-8) */
static void put_str(const char *str, char *buf, size_t len, size_t *pos)
{
	PUT("\"");
	for (const unsigned char *c = (const unsigned char *)str; *c; c++) {
		if (*c == '"' || *c == '\\')
			PUT("\\%c", *c);
		else if (*c < 0x20)
			PUT("\\u%04x", *c);
		else
			PUT("%c", *c);
	}
	PUT("\"");
}

int scrub_json(struct tier *t, char *buf, size_t len)
{
	static const char *const names[] = {"idle", "running", "done", "cancelled"};
	struct scrub *s = t->scrub;
	size_t p = 0, *pos = &p;

	pthread_mutex_lock(&s->lock);
	PUT("{\"state\":\"%s\",\"runs\":%llu,\"limit\":%llu,\"files\":%llu,\"files_total\":%llu,"
	    "\"bytes\":%llu,\"bytes_total\":%llu,\"blocks\":%llu,\"damaged\":%llu,"
	    "\"damaged_blocks\":%llu,\"skipped\":%llu,\"started\":%lld,\"finished\":%lld,"
	    "\"damaged_files\":[",
	    names[s->state], (unsigned long long)s->runs, (unsigned long long)s->limit,
	    (unsigned long long)s->files, (unsigned long long)s->files_total,
	    (unsigned long long)s->bytes, (unsigned long long)s->bytes_total,
	    (unsigned long long)s->blocks, (unsigned long long)s->damaged_files,
	    (unsigned long long)s->damaged_blocks, (unsigned long long)s->skipped,
	    (long long)s->started, (long long)s->finished);
	/* room for the end kept: a long list stops short (damaged says how
	 * many there are) */
	for (uint32_t i = 0; i < s->nbad && p + 8192 < len; i++) {
		const struct scrub_bad *b = &s->bad[i];
		PUT("%s{\"ino\":%llu,\"blocks\":%llu,\"path\":", i ? "," : "",
		    (unsigned long long)b->ino, (unsigned long long)b->blocks);
		if (b->path && s->state != SCRUB_RUNNING)
			put_str(b->path, buf, len, pos);
		else
			PUT("null");
		PUT(",\"offsets\":[");
		for (uint32_t k = 0; k < b->noff; k++)
			PUT("%s%llu", k ? "," : "", (unsigned long long)b->off[k]);
		PUT("]}");
	}
	PUT("]}");
	pthread_mutex_unlock(&s->lock);
	return p > (size_t)INT32_MAX ? INT32_MAX : (int)p;
}
