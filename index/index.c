/*
 * DESIGN
 * - Inodes live in a chained hash keyed by number; numbers come from a
 *   counter that only grows, so the kernel never sees a number reused.
 * - An inode is destroyed when it has no names (nlink 0), no kernel lookup
 *   references (nlookup 0) and no internal references (refs 0); then the
 *   release hook drops its data (hot file, cold chunks). Unlinked-but-open
 *   files therefore stay readable: the open holds a ref.
 * - Directory entries live in one chained hash keyed by (parent, name) and
 *   in their directory's array, ordered by a per-directory cookie that only
 *   grows. Removing an entry leaves a NULL slot (compacted when more than
 *   half are empty), so the readdir offset (= cookie) of every surviving entry
 *   stays valid and resuming is a binary search.
 * - All of the above under idx->lock; per-inode fields under the inode
 *   lock, one of IDX_LOCK_STRIPES mutex + condvar pairs picked by inode
 *   number (88 bytes an inode no longer carries). A process-wide table, like
 *   the kernel's hashed wait queues: several indexes in one process only
 *   share stripes. Debug builds assert a thread holds one inode lock at most.
 */
#include "index/index.h"

#include "index/journal.h"

#include "common/slab.h"

#include <assert.h>
#include <errno.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

struct dirent_node {
	struct dirent_node *hash_next;
	uint64_t parent;
	uint64_t ino;
	uint64_t cookie;
	uint32_t hash;
	char name[];
};

/* A regular file's inode carries its first chunk: the whole map of a file
 * of one chunk (most files), no separate allocation. */
struct idx_file {
	struct inode in;
	struct chunk chunk0;
};

/* Bytes of an inode of this type (a regular file carries its first chunk). */
static size_t inode_size(mode_t mode)
{
	return S_ISREG(mode) ? sizeof(struct idx_file) : sizeof(struct inode);
}

static struct chunk *inline_chunk(struct inode *in)
{
	return &((struct idx_file *)in)->chunk0;
}

struct idx_dir {
	/* ordered by cookie. A slot holds its entry, or, once the entry is
	 * removed, its cookie tagged (cookie << 1 | 1: entries are aligned, so
	 * the low bit tells them apart): no second array of cookies */
	uintptr_t *slots;
	uint64_t n, cap, live;
	uint64_t next_cookie;
	uint64_t parent; /* ino of '..' (index lock) */
};

/* Slot i's entry; NULL where it was removed. */
static struct dirent_node *dir_ent(const struct idx_dir *dir, uint64_t i)
{
	return dir->slots[i] & 1 ? NULL : (struct dirent_node *)dir->slots[i];
}

static uint64_t slot_cookie(const struct idx_dir *dir, uint64_t i)
{
	return dir->slots[i] & 1 ? dir->slots[i] >> 1 : ((struct dirent_node *)dir->slots[i])->cookie;
}

struct index {
	pthread_mutex_t lock;
	uint64_t chunk_size;
	uint64_t next_ino;   /* protected by lock */
	uint64_t tick;	     /* atomic */
	struct inode **itab; /* protected by lock */
	uint64_t itab_size, ninodes, nfiles;
	struct dirent_node **dtab; /* protected by lock */
	uint64_t dtab_size, ndents;
	idx_release_fn release;
	void *release_arg;
	struct journal *jrnl; /* NULL: volatile (no state_dir) */
	struct slab *slab;    /* inodes and names (common/slab.h) */
	idx_anomaly_fn anomaly; /* recovery only (single-threaded) */
	void *anomaly_arg;
};

#define IDX_LOCK_STRIPES 1024 /* power of two */

static struct inode_stripe {
	pthread_mutex_t lock;
	pthread_cond_t cond;
} __attribute__((aligned(128))) stripes[IDX_LOCK_STRIPES] = {
    [0 ... IDX_LOCK_STRIPES - 1] = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER}};

#ifndef NDEBUG
static __thread int inode_locks_held;
#define HELD(d) (inode_locks_held += (d))
#else
#define HELD(d) ((void)0)
#endif

static struct inode_stripe *stripe_of(const struct inode *in)
{
	uint64_t h = in->ino * 0x9e3779b97f4a7c15ull; /* Fibonacci hashing */
	return &stripes[h >> (64 - 10)];
}

_Static_assert(IDX_LOCK_STRIPES == 1 << 10, "stripe_of shifts by log2(IDX_LOCK_STRIPES)");

void idx_inode_lock(struct inode *in)
{
	assert(inode_locks_held == 0 && "two inode locks at once (striped: may deadlock)");
	pthread_mutex_lock(&stripe_of(in)->lock);
	HELD(1);
}

void idx_inode_unlock(struct inode *in)
{
	HELD(-1);
	pthread_mutex_unlock(&stripe_of(in)->lock);
}

int idx_inode_trylock(struct inode *in)
{
	if (pthread_mutex_trylock(&stripe_of(in)->lock) != 0)
		return -EBUSY;
	HELD(1);
	return 0;
}

void idx_inode_wait(struct inode *in)
{
	struct inode_stripe *st = stripe_of(in);
	pthread_cond_wait(&st->cond, &st->lock);
}

int idx_inode_timedwait(struct inode *in, const struct timespec *deadline)
{
	struct inode_stripe *st = stripe_of(in);
	return pthread_cond_timedwait(&st->cond, &st->lock, deadline) == ETIMEDOUT ? -ETIMEDOUT
										: 0;
}

void idx_inode_wake(struct inode *in)
{
	pthread_cond_broadcast(&stripe_of(in)->cond);
}

static uint32_t name_hash(uint64_t parent, const char *name)
{
	/* FNV-1a over parent and name */
	uint32_t h = 2166136261u;
	for (int i = 0; i < 8; i++) {
		h ^= (parent >> (i * 8)) & 0xff;
		h *= 16777619u;
	}
	for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
		h ^= *p;
		h *= 16777619u;
	}
	return h;
}

static int rehash_inodes(struct index *idx)
{
	uint64_t nsize = idx->itab_size ? idx->itab_size * 2 : 1024;
	struct inode **nt = slab_table_alloc(nsize * sizeof(*nt));
	if (!nt)
		return -ENOMEM;
	for (uint64_t i = 0; i < idx->itab_size; i++) {
		struct inode *in = idx->itab[i], *next;
		for (; in; in = next) {
			next = in->hash_next;
			in->hash_next = nt[in->ino & (nsize - 1)];
			nt[in->ino & (nsize - 1)] = in;
		}
	}
	slab_table_free(idx->itab, idx->itab_size * sizeof(*nt));
	idx->itab = nt;
	idx->itab_size = nsize;
	return 0;
}

static int rehash_dents(struct index *idx)
{
	uint64_t nsize = idx->dtab_size ? idx->dtab_size * 2 : 1024;
	struct dirent_node **nt = slab_table_alloc(nsize * sizeof(*nt));
	if (!nt)
		return -ENOMEM;
	for (uint64_t i = 0; i < idx->dtab_size; i++) {
		struct dirent_node *d = idx->dtab[i], *next;
		for (; d; d = next) {
			next = d->hash_next;
			d->hash_next = nt[d->hash & (nsize - 1)];
			nt[d->hash & (nsize - 1)] = d;
		}
	}
	slab_table_free(idx->dtab, idx->dtab_size * sizeof(*nt));
	idx->dtab = nt;
	idx->dtab_size = nsize;
	return 0;
}

/* Walk of every inode in table order: the first (in == NULL) or the one
 * after in. Taking the next before dropping in lets a walk unhook it. */
static struct inode *inode_next(const struct index *idx, const struct inode *in)
{
	uint64_t b = 0;
	if (in) {
		if (in->hash_next)
			return in->hash_next;
		b = (in->ino & (idx->itab_size - 1)) + 1;
	}
	for (; b < idx->itab_size; b++)
		if (idx->itab[b])
			return idx->itab[b];
	return NULL;
}

static struct inode *ino_find(struct index *idx, uint64_t ino)
{
	struct inode *in = idx->itab[ino & (idx->itab_size - 1)];
	while (in && in->ino != ino)
		in = in->hash_next;
	return in;
}

static struct dirent_node **dent_slot(struct index *idx, uint64_t parent, const char *name,
				      uint32_t h)
{
	struct dirent_node **pp = &idx->dtab[h & (idx->dtab_size - 1)];
	for (; *pp; pp = &(*pp)->hash_next)
		if ((*pp)->hash == h && (*pp)->parent == parent && strcmp((*pp)->name, name) == 0)
			return pp;
	return pp;
}

static void dent_free(struct index *idx, struct dirent_node *d)
{
	slab_free(idx->slab, d, sizeof(*d) + strlen(d->name) + 1);
}

static struct dirent_node *dent_find(struct index *idx, uint64_t parent, const char *name)
{
	return *dent_slot(idx, parent, name, name_hash(parent, name));
}

int64_t idx_ts_ns(const struct timespec *ts)
{
	const int64_t g = 1000000000LL;
	if (ts->tv_sec > INT64_MAX / g - 1)
		return INT64_MAX;
	if (ts->tv_sec < INT64_MIN / g + 1)
		return INT64_MIN;
	return (int64_t)ts->tv_sec * g + ts->tv_nsec;
}

struct timespec idx_ns_ts(int64_t ns)
{
	struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000LL),
			      .tv_nsec = (long)(ns % 1000000000LL)};
	if (ts.tv_nsec < 0) {
		ts.tv_nsec += 1000000000L;
		ts.tv_sec--;
	}
	return ts;
}

void idx_touch(int64_t *ns)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	*ns = idx_ts_ns(&ts);
}

/* JR_INODE for in; caller holds in->lock (symlink is immutable). */
static void attr_rec_locked(struct inode *in, struct jrec *r)
{
	memset(r, 0, sizeof(*r));
	r->type = JR_INODE;
	r->ino = in->ino;
	r->attr.mode = in->mode;
	r->attr.uid = in->uid;
	r->attr.gid = in->gid;
	r->attr.rdev = idx_rdev(in);
	r->attr.size = in->size;
	r->attr.atime_ns = in->atime;
	r->attr.mtime_ns = in->mtime;
	r->attr.ctime_ns = in->ctime;
	if (idx_symlink(in)) {
		r->name = in->symlink_;
		r->name_len = (uint32_t)strlen(in->symlink_);
	}
}

static void attr_rec(struct inode *in, struct jrec *r)
{
	idx_inode_lock(in);
	attr_rec_locked(in, r);
	idx_inode_unlock(in);
}

static void name_rec(struct jrec *r, uint8_t type, uint64_t parent, const char *name, uint64_t ino)
{
	memset(r, 0, sizeof(*r));
	r->type = type;
	r->parent = parent;
	r->ino = ino;
	r->name = name;
	r->name_len = (uint32_t)strlen(name);
}

/* Refuse changes once the journal is read-only. */
static int jcheck(struct index *idx)
{
	return idx->jrnl && jrnl_failed(idx->jrnl) ? -EIO : 0;
}

static int jlog(struct index *idx, const struct jrec *rs, int n)
{
	return idx->jrnl ? jrnl_append_tx(idx->jrnl, rs, n) : 0;
}

void idx_set_journal(struct index *idx, struct journal *j)
{
	idx->jrnl = j;
}

struct journal *idx_journal(struct index *idx)
{
	return idx->jrnl;
}

int idx_check_writable(struct index *idx)
{
	return jcheck(idx);
}

int idx_journal_attr_locked(struct index *idx, struct inode *in)
{
	struct jrec r;
	if (!idx->jrnl)
		return 0;
	attr_rec_locked(in, &r);
	return jrnl_append(idx->jrnl, &r);
}

int idx_journal_attr(struct index *idx, struct inode *in)
{
	int ret;
	if (!idx->jrnl)
		return 0;
	idx_inode_lock(in);
	ret = idx_journal_attr_locked(idx, in);
	idx_inode_unlock(in);
	return ret;
}

/* Per-file memory: a chunk is 40 bytes (a 32-bit LRU tick and segment id;
 * format v2's flags took spare bits of the device field). Its flags are the
 * journal's, bit for bit; its segment id holds any the journal accepts. */
_Static_assert(sizeof(struct chunk) == 40, "struct chunk grew");
_Static_assert(JRNL_MAX_SEG_ID <= UINT32_MAX, "segment ids do not fit struct chunk");
_Static_assert(CHUNK_LOC_MAP == JRNL_LOC_MAP, "chunk and journal location flags differ");

/* The residency record of chunk c (caller holds in->lock): its cold
 * location when it has a valid one, RAM-only when dirty, else a hole. */
static void chunk_rec(struct inode *in, uint64_t c, struct jrec *r)
{
	struct chunk *ch = c < in->nchunks ? &in->chunks[c] : NULL;
	memset(r, 0, sizeof(*r));
	r->ino = in->ino;
	r->chunk = c;
	if (!ch || ch->state == CHUNK_ABSENT) {
		r->type = JR_CHUNK_ABSENT;
		r->count = 1;
	} else if (ch->seg_id && ch->state != CHUNK_HOT_DIRTY && ch->state != CHUNK_SPILLING) {
		r->type = JR_CHUNK_LOC;
		r->loc.seg_id = ch->seg_id;
		r->loc.off = ch->seg_off;
		r->loc.len = ch->seg_len;
		r->loc.crc = ch->seg_crc;
		r->loc.dev = ch->seg_dev;
		r->loc.flags = ch->seg_flags;
		r->loc.gen = ch->seg_gen;
	} else {
		r->type = JR_CHUNK_DIRTY;
	}
}

int idx_journal_chunk_locked(struct index *idx, struct inode *in, uint64_t c, uint64_t count)
{
	struct jrec r;
	if (!idx->jrnl)
		return 0;
	chunk_rec(in, c, &r);
	if (count > 0) {
		r.type = JR_CHUNK_ABSENT;
		r.count = count;
	}
	return jrnl_append(idx->jrnl, &r);
}

static struct inode *inode_alloc(struct index *idx, const struct idx_new_node *nn)
{
	struct inode *in = slab_alloc(idx->slab, inode_size(nn->mode));
	if (!in)
		return NULL;
	if (S_ISLNK(nn->mode) && nn->symlink && !(in->symlink_ = strdup(nn->symlink))) {
		slab_free(idx->slab, in, inode_size(nn->mode));
		return NULL;
	}
	if (S_ISDIR(nn->mode) && !(in->dir_ = calloc(1, sizeof(*in->dir_)))) {
		slab_free(idx->slab, in, inode_size(nn->mode));
		return NULL;
	}
	if (S_ISDIR(nn->mode))
		in->dir_->next_cookie = 3;
	in->ino = idx->next_ino++;
	in->mode = nn->mode;
	in->uid = nn->uid;
	in->gid = nn->gid;
	if (idx_is_dev(in))
		in->rdev_ = nn->rdev;
	in->hot_fd = -1;
	if (idx_symlink(in))
		in->size = strlen(in->symlink_);
	idx_touch(&in->atime);
	in->mtime = in->ctime = in->atime;
	return in;
}

static int inode_insert(struct index *idx, struct inode *in)
{
	if (idx->ninodes + 1 > idx->itab_size && rehash_inodes(idx) < 0)
		return -ENOMEM;
	in->hash_next = idx->itab[in->ino & (idx->itab_size - 1)];
	idx->itab[in->ino & (idx->itab_size - 1)] = in;
	idx->ninodes++;
	if (S_ISREG(in->mode))
		idx->nfiles++;
	return 0;
}

static void inode_destroy(struct index *idx, struct inode *in)
{
	struct xattr *x, *next;
	for (x = in->xattrs; x; x = next) {
		next = x->next;
		free(x->name);
		free(x->value);
		free(x);
	}
	if (idx_dir(in)) {
		free(idx_dir(in)->slots);
		free(idx_dir(in));
	}
	if (S_ISREG(in->mode) && in->chunks != inline_chunk(in))
		free(in->chunks);
	if (S_ISLNK(in->mode))
		free(in->symlink_);
	slab_free(idx->slab, in, inode_size(in->mode));
}

/* Unhook an inode that has no names and no references; called with idx->lock.
 * Returns it when the caller must destroy it (after dropping the lock). */
static struct inode *inode_maybe_unhook(struct index *idx, struct inode *in)
{
	struct inode **pp;
	if (in->nlink > 0 || in->nlookup > 0 || in->refs > 0 || in->ino == IDX_ROOT_INO)
		return NULL;
	for (pp = &idx->itab[in->ino & (idx->itab_size - 1)]; *pp != in; pp = &(*pp)->hash_next)
		;
	*pp = in->hash_next;
	idx->ninodes--;
	if (S_ISREG(in->mode))
		idx->nfiles--;
	return in;
}

static void inode_release(struct index *idx, struct inode *dead)
{
	if (!dead)
		return;
	if (idx->release)
		idx->release(idx->release_arg, dead);
	inode_destroy(idx, dead);
}

int idx_new(uint64_t chunk_size, struct index **out)
{
	struct index *idx = calloc(1, sizeof(*idx));
	struct idx_new_node root = {.mode = S_IFDIR | 0755};
	struct inode *r;

	if (!idx)
		return -ENOMEM;
	pthread_mutex_init(&idx->lock, NULL);
	idx->chunk_size = chunk_size;
	idx->next_ino = IDX_ROOT_INO;
	if (slab_new(&idx->slab) < 0 || rehash_inodes(idx) < 0 || rehash_dents(idx) < 0)
		goto fail;
	r = inode_alloc(idx, &root);
	if (!r)
		goto fail;
	r->nlink = 2;
	idx_dir(r)->parent = IDX_ROOT_INO;
	r->uid = getuid();
	r->gid = getgid();
	inode_insert(idx, r);
	*out = idx;
	return 0;
fail:
	slab_table_free(idx->itab, idx->itab_size * sizeof(*idx->itab));
	slab_table_free(idx->dtab, idx->dtab_size * sizeof(*idx->dtab));
	slab_destroy(idx->slab);
	free(idx);
	return -ENOMEM;
}

void idx_free(struct index *idx)
{
	struct inode *in, *next;
	if (!idx)
		return;
	for (in = inode_next(idx, NULL); in; in = next) {
		next = inode_next(idx, in);
		if (idx->release)
			idx->release(idx->release_arg, in);
		inode_destroy(idx, in);
	}
	for (uint64_t i = 0; i < idx->dtab_size; i++) {
		struct dirent_node *d = idx->dtab[i], *dn;
		for (; d; d = dn) {
			dn = d->hash_next;
			dent_free(idx, d);
		}
	}
	slab_table_free(idx->itab, idx->itab_size * sizeof(*idx->itab));
	slab_table_free(idx->dtab, idx->dtab_size * sizeof(*idx->dtab));
	slab_destroy(idx->slab);
	pthread_mutex_destroy(&idx->lock);
	free(idx);
}

void idx_set_release_hook(struct index *idx, idx_release_fn fn, void *arg)
{
	idx->release = fn;
	idx->release_arg = arg;
}

uint64_t idx_chunk_size(const struct index *idx)
{
	return idx->chunk_size;
}

uint64_t idx_tick(struct index *idx)
{
	return __atomic_add_fetch(&idx->tick, 1, __ATOMIC_RELAXED);
}

uint64_t idx_tick_now(struct index *idx)
{
	return __atomic_load_n(&idx->tick, __ATOMIC_RELAXED);
}

void idx_tick_seed(struct index *idx, uint64_t tick)
{
	__atomic_store_n(&idx->tick, tick, __ATOMIC_RELAXED);
}

struct inode *idx_get(struct index *idx, uint64_t ino)
{
	struct inode *in;
	pthread_mutex_lock(&idx->lock);
	in = ino_find(idx, ino);
	if (in)
		in->refs++;
	pthread_mutex_unlock(&idx->lock);
	return in;
}

void idx_ref(struct index *idx, struct inode *in)
{
	pthread_mutex_lock(&idx->lock);
	in->refs++;
	pthread_mutex_unlock(&idx->lock);
}

void idx_put(struct index *idx, struct inode *in)
{
	struct inode *dead;
	if (!in)
		return;
	pthread_mutex_lock(&idx->lock);
	if (in->refs == 0)
		abort(); /* refcount underflow */
	in->refs--;
	dead = inode_maybe_unhook(idx, in);
	pthread_mutex_unlock(&idx->lock);
	inode_release(idx, dead);
}

void idx_forget(struct index *idx, uint64_t ino, uint64_t n)
{
	struct inode *in, *dead = NULL;
	pthread_mutex_lock(&idx->lock);
	in = ino_find(idx, ino);
	if (in) {
		in->nlookup = in->nlookup > n ? in->nlookup - n : 0;
		dead = inode_maybe_unhook(idx, in);
	}
	pthread_mutex_unlock(&idx->lock);
	inode_release(idx, dead);
}

void idx_get_locked(struct inode *in)
{
	in->refs++;
}

void idx_kernel_ref_locked(struct inode *child)
{
	child->nlookup++;
}

int idx_lookup(struct index *idx, uint64_t parent, const char *name, int kernel_ref,
	       struct inode **out)
{
	struct inode *p, *in = NULL;
	struct dirent_node *d;
	int ret = 0;

	pthread_mutex_lock(&idx->lock);
	p = ino_find(idx, parent);
	if (!p) {
		ret = -ENOENT;
		goto out;
	}
	if (!idx_dir(p)) {
		ret = -ENOTDIR;
		goto out;
	}
	if (strlen(name) > 255) {
		ret = -ENAMETOOLONG;
		goto out;
	}
	if (strcmp(name, ".") == 0)
		in = p;
	else if (strcmp(name, "..") == 0)
		in = ino_find(idx, idx_dir(p)->parent);
	else if ((d = dent_find(idx, parent, name)))
		in = ino_find(idx, d->ino);
	if (!in) {
		ret = -ENOENT;
		goto out;
	}
	in->refs++;
	if (kernel_ref)
		in->nlookup++;
	*out = in;
out:
	pthread_mutex_unlock(&idx->lock);
	return ret;
}

static int dir_append(struct idx_dir *dir, struct dirent_node *d)
{
	if (dir->n == dir->cap) {
		uint64_t ncap = dir->cap ? dir->cap * 2 : 16;
		uintptr_t *ns = realloc(dir->slots, ncap * sizeof(*ns));
		if (!ns)
			return -ENOMEM;
		dir->slots = ns;
		dir->cap = ncap;
	}
	d->cookie = dir->next_cookie++;
	dir->slots[dir->n++] = (uintptr_t)d;
	dir->live++;
	return 0;
}

/* Index of the first slot whose cookie is > off (a removed slot keeps its
 * cookie, so this is a plain binary search). */
static uint64_t dir_search(const struct idx_dir *dir, uint64_t off)
{
	uint64_t lo = 0, hi = dir->n;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (slot_cookie(dir, mid) <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static void dir_remove(struct idx_dir *dir, struct dirent_node *d)
{
	uint64_t i = dir_search(dir, d->cookie - 1);
	if (i < dir->n && dir_ent(dir, i) == d)
		dir->slots[i] = (uintptr_t)d->cookie << 1 | 1;
	dir->live--;
	if (dir->n > 64 && dir->live < dir->n / 2) {
		uint64_t j = 0;
		for (i = 0; i < dir->n; i++)
			if (dir_ent(dir, i))
				dir->slots[j++] = dir->slots[i];
		dir->n = j;
	}
}

static int dent_add(struct index *idx, struct inode *parent, const char *name, uint64_t ino)
{
	size_t len = strlen(name);
	struct dirent_node *d;
	int ret;

	if (idx->ndents + 1 > idx->dtab_size && (ret = rehash_dents(idx)) < 0)
		return ret;
	d = slab_alloc(idx->slab, sizeof(*d) + len + 1);
	if (!d)
		return -ENOMEM;
	memcpy(d->name, name, len + 1);
	d->parent = parent->ino;
	d->ino = ino;
	d->hash = name_hash(parent->ino, name);
	if ((ret = dir_append(idx_dir(parent), d)) < 0) {
		dent_free(idx, d);
		return ret;
	}
	d->hash_next = idx->dtab[d->hash & (idx->dtab_size - 1)];
	idx->dtab[d->hash & (idx->dtab_size - 1)] = d;
	idx->ndents++;
	return 0;
}

static void dent_del(struct index *idx, struct inode *parent, struct dirent_node *d)
{
	struct dirent_node **pp = dent_slot(idx, d->parent, d->name, d->hash);
	*pp = d->hash_next;
	dir_remove(idx_dir(parent), d);
	idx->ndents--;
	dent_free(idx, d);
}

static void parent_changed(struct inode *p)
{
	idx_inode_lock(p);
	idx_touch(&p->mtime);
	p->ctime = p->mtime;
	idx_inode_unlock(p);
}

static void nlink_add(struct inode *in, int delta)
{
	idx_inode_lock(in);
	in->nlink += delta;
	idx_touch(&in->ctime);
	idx_inode_unlock(in);
}

static int check_name(const char *name)
{
	size_t len = strlen(name);
	if (len == 0)
		return -ENOENT;
	if (len > 255)
		return -ENAMETOOLONG;
	if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return -EEXIST;
	return 0;
}

static struct inode *dir_of(struct index *idx, uint64_t ino, int *err)
{
	struct inode *p = ino_find(idx, ino);
	if (!p)
		*err = -ENOENT;
	else if (!idx_dir(p))
		*err = -ENOTDIR;
	else if (p->nlink == 0)
		*err = -ENOENT; /* removed directory */
	else
		return p;
	return NULL;
}

int idx_create(struct index *idx, uint64_t parent, const char *name, const struct idx_new_node *nn,
	       struct inode **out)
{
	struct inode *p, *in;
	int ret = 0;

	pthread_mutex_lock(&idx->lock);
	if ((ret = jcheck(idx)) < 0 || !(p = dir_of(idx, parent, &ret)))
		goto out;
	if ((ret = check_name(name)) < 0)
		goto out;
	if (dent_find(idx, parent, name)) {
		ret = -EEXIST;
		goto out;
	}
	if (!(in = inode_alloc(idx, nn))) {
		ret = -ENOMEM;
		goto out;
	}
	if ((ret = inode_insert(idx, in)) < 0 || (ret = dent_add(idx, p, name, in->ino)) < 0) {
		/* inode_insert failure leaves nothing behind; undo insert otherwise */
		if (ino_find(idx, in->ino))
			inode_maybe_unhook(idx, in);
		inode_destroy(idx, in);
		goto out;
	}
	in->nlink = idx_dir(in) ? 2 : 1;
	if (idx_dir(in)) {
		idx_dir(in)->parent = parent;
		nlink_add(p, 1);
	}
	parent_changed(p);
	in->refs = 1;
	in->nlookup = 1;
	*out = in;
	if (idx->jrnl) {
		/* the new inode is not reachable yet: its record can be built here */
		struct jrec rs[2];
		attr_rec(in, &rs[0]);
		name_rec(&rs[1], JR_LINK, parent, name, in->ino);
		if ((ret = jlog(idx, rs, 2)) == 0)
			ret = idx_journal_attr(idx, p);
	}
out:
	pthread_mutex_unlock(&idx->lock);
	return ret;
}

int idx_link(struct index *idx, uint64_t ino, uint64_t newparent, const char *newname,
	     struct inode **out)
{
	struct inode *p, *in;
	int ret = 0;

	pthread_mutex_lock(&idx->lock);
	if ((ret = jcheck(idx)) < 0 || !(p = dir_of(idx, newparent, &ret)))
		goto out;
	if (!(in = ino_find(idx, ino))) {
		ret = -ENOENT;
		goto out;
	}
	if (idx_dir(in)) {
		ret = -EPERM;
		goto out;
	}
	if ((ret = check_name(newname)) < 0)
		goto out;
	if (dent_find(idx, newparent, newname)) {
		ret = -EEXIST;
		goto out;
	}
	if ((ret = dent_add(idx, p, newname, ino)) < 0)
		goto out;
	nlink_add(in, 1);
	parent_changed(p);
	in->refs++;
	in->nlookup++;
	*out = in;
	if (idx->jrnl) {
		struct jrec r;
		name_rec(&r, JR_LINK, newparent, newname, ino);
		if ((ret = jlog(idx, &r, 1)) == 0 && (ret = idx_journal_attr(idx, in)) == 0)
			ret = idx_journal_attr(idx, p);
	}
out:
	pthread_mutex_unlock(&idx->lock);
	return ret;
}

static int do_remove(struct index *idx, uint64_t parent, const char *name, int want_dir)
{
	struct inode *p, *in, *dead = NULL;
	struct dirent_node *d;
	int ret = 0;

	pthread_mutex_lock(&idx->lock);
	if ((ret = jcheck(idx)) < 0 || !(p = dir_of(idx, parent, &ret)))
		goto out;
	if (want_dir && strcmp(name, ".") == 0) {
		ret = -EINVAL;
		goto out;
	}
	if (want_dir && strcmp(name, "..") == 0) {
		ret = -ENOTEMPTY;
		goto out;
	}
	if (!(d = dent_find(idx, parent, name)) || !(in = ino_find(idx, d->ino))) {
		ret = -ENOENT;
		goto out;
	}
	if (want_dir && !idx_dir(in)) {
		ret = -ENOTDIR;
		goto out;
	}
	if (!want_dir && idx_dir(in)) {
		ret = -EISDIR;
		goto out;
	}
	if (idx_dir(in) && idx_dir(in)->live > 0) {
		ret = -ENOTEMPTY;
		goto out;
	}
	dent_del(idx, p, d);
	if (idx_dir(in)) {
		nlink_add(in, -2);
		nlink_add(p, -1);
	} else {
		nlink_add(in, -1);
	}
	parent_changed(p);
	if (idx->jrnl) {
		struct jrec r;
		name_rec(&r, JR_UNLINK, parent, name, 0);
		if ((ret = jlog(idx, &r, 1)) == 0)
			ret = idx_journal_attr(idx, p);
		if (ret == 0 && in->nlink > 0)
			ret = idx_journal_attr(idx, in); /* other names remain: ctime moved */
	}
	dead = inode_maybe_unhook(idx, in);
out:
	pthread_mutex_unlock(&idx->lock);
	inode_release(idx, dead);
	return ret;
}

int idx_unlink(struct index *idx, uint64_t parent, const char *name)
{
	return do_remove(idx, parent, name, 0);
}

int idx_rmdir(struct index *idx, uint64_t parent, const char *name)
{
	return do_remove(idx, parent, name, 1);
}

/* A rename's names as one record (both or neither), then the attributes of
 * the inodes it touched, each built and appended under its own lock so a
 * racing write's newer size is never followed by an older one. */
static int journal_renamed(struct index *idx, const struct jrec *names, int n, struct inode *src,
			   struct inode *dst, struct inode *p, struct inode *np)
{
	int ret = jlog(idx, names, n);
	if (ret == 0)
		ret = idx_journal_attr(idx, src);
	if (ret == 0 && dst)
		ret = idx_journal_attr(idx, dst);
	if (ret == 0)
		ret = idx_journal_attr(idx, p);
	if (ret == 0 && np != p)
		ret = idx_journal_attr(idx, np);
	return ret;
}

/* Is `anc` an ancestor of (or equal to) directory `ino`? */
static int is_ancestor(struct index *idx, uint64_t anc, uint64_t ino)
{
	while (1) {
		struct inode *in;
		if (ino == anc)
			return 1;
		if (ino == IDX_ROOT_INO)
			return 0;
		in = ino_find(idx, ino);
		if (!in || !idx_dir(in))
			return 0;
		ino = idx_dir(in)->parent;
	}
}

int idx_rename(struct index *idx, uint64_t parent, const char *name, uint64_t newparent,
	       const char *newname, unsigned flags)
{
	struct inode *p, *np, *src, *dst = NULL, *dead = NULL;
	struct dirent_node *sd, *dd;
	int ret = 0;

	if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE))
		return -EINVAL;
	if ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE))
		return -EINVAL;
	pthread_mutex_lock(&idx->lock);
	if ((ret = jcheck(idx)) < 0 || !(p = dir_of(idx, parent, &ret)) ||
	    !(np = dir_of(idx, newparent, &ret)))
		goto out;
	if (!(sd = dent_find(idx, parent, name)) || !(src = ino_find(idx, sd->ino))) {
		ret = -ENOENT;
		goto out;
	}
	if ((ret = check_name(newname)) < 0) {
		ret = -EBUSY;
		goto out;
	}
	dd = dent_find(idx, newparent, newname);
	if (dd)
		dst = ino_find(idx, dd->ino);
	if ((flags & RENAME_EXCHANGE) && !dst) {
		ret = -ENOENT;
		goto out;
	}
	if (dst && (flags & RENAME_NOREPLACE)) {
		ret = -EEXIST;
		goto out;
	}
	if (dst == src)
		goto out; /* same inode: POSIX says do nothing */
	/* moving a directory into its own subtree */
	if (idx_dir(src) && newparent != parent && is_ancestor(idx, src->ino, newparent)) {
		ret = -EINVAL;
		goto out;
	}
	if ((flags & RENAME_EXCHANGE) && idx_dir(dst) && newparent != parent &&
	    is_ancestor(idx, dst->ino, parent)) {
		ret = -EINVAL;
		goto out;
	}
	if (flags & RENAME_EXCHANGE) {
		sd->ino = dst->ino;
		dd->ino = src->ino;
		if (idx_dir(src))
			idx_dir(src)->parent = newparent;
		if (idx_dir(dst))
			idx_dir(dst)->parent = parent;
		if (idx_dir(src) && !idx_dir(dst)) {
			nlink_add(p, -1);
			nlink_add(np, 1);
		} else if (!idx_dir(src) && idx_dir(dst)) {
			nlink_add(p, 1);
			nlink_add(np, -1);
		}
		nlink_add(src, 0);
		nlink_add(dst, 0);
		parent_changed(p);
		parent_changed(np);
		if (idx->jrnl) {
			struct jrec rs[2];
			name_rec(&rs[0], JR_LINK, parent, name, dst->ino);
			name_rec(&rs[1], JR_LINK, newparent, newname, src->ino);
			ret = journal_renamed(idx, rs, 2, src, dst, p, np);
		}
		goto out;
	}
	if (dst) {
		if (idx_dir(src) && !idx_dir(dst)) {
			ret = -ENOTDIR;
			goto out;
		}
		if (!idx_dir(src) && idx_dir(dst)) {
			ret = -EISDIR;
			goto out;
		}
		if (idx_dir(dst) && idx_dir(dst)->live > 0) {
			ret = -ENOTEMPTY;
			goto out;
		}
	}
	/* add the new name first so an allocation failure changes nothing */
	if (dd) {
		dd->ino = src->ino;
	} else if ((ret = dent_add(idx, np, newname, src->ino)) < 0) {
		goto out;
	}
	/* sd may have moved? no: dent_add never frees nodes; dir_remove only clears slots */
	dent_del(idx, p, sd);
	if (dst) {
		if (idx_dir(dst)) {
			nlink_add(dst, -2);
			nlink_add(np, -1);
		} else {
			nlink_add(dst, -1);
		}
		dead = inode_maybe_unhook(idx, dst);
	}
	if (idx_dir(src) && parent != newparent) {
		idx_dir(src)->parent = newparent;
		nlink_add(p, -1);
		nlink_add(np, 1);
	}
	nlink_add(src, 0); /* ctime */
	parent_changed(p);
	if (np != p)
		parent_changed(np);
	if (idx->jrnl) {
		struct jrec rs[2];
		name_rec(&rs[0], JR_LINK, newparent, newname, src->ino);
		name_rec(&rs[1], JR_UNLINK, parent, name, 0);
		ret = journal_renamed(idx, rs, 2, src, NULL, p, np);
	}
out:
	pthread_mutex_unlock(&idx->lock);
	inode_release(idx, dead);
	return ret;
}

int idx_readdir(struct index *idx, uint64_t dir, uint64_t off, idx_dirent_fn fn, void *arg)
{
	struct inode *p, *c;
	uint64_t i;
	int ret = 0;

	pthread_mutex_lock(&idx->lock);
	p = ino_find(idx, dir);
	if (!p) {
		ret = -ENOENT;
		goto out;
	}
	if (!idx_dir(p)) {
		ret = -ENOTDIR;
		goto out;
	}
	if (off < 1 && fn(arg, ".", p, 1))
		goto out;
	if (off < 2 && (c = ino_find(idx, idx_dir(p)->parent)) && fn(arg, "..", c, 2))
		goto out;
	for (i = dir_search(idx_dir(p), off); i < idx_dir(p)->n; i++) {
		struct dirent_node *d = dir_ent(idx_dir(p), i);
		if (!d || !(c = ino_find(idx, d->ino)))
			continue;
		if (fn(arg, d->name, c, d->cookie))
			break;
	}
out:
	pthread_mutex_unlock(&idx->lock);
	return ret;
}

uint64_t idx_dir_entries(struct index *idx, uint64_t dir)
{
	struct inode *p;
	uint64_t n = 0;
	pthread_mutex_lock(&idx->lock);
	p = ino_find(idx, dir);
	if (p && idx_dir(p))
		n = idx_dir(p)->live;
	pthread_mutex_unlock(&idx->lock);
	return n;
}

void idx_stat(struct index *idx, struct inode *in, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	idx_inode_lock(in);
	st->st_ino = in->ino;
	st->st_mode = in->mode;
	st->st_nlink = in->nlink;
	st->st_uid = in->uid;
	st->st_gid = in->gid;
	st->st_rdev = idx_rdev(in);
	st->st_size = idx_dir(in) ? 4096 : (off_t)in->size;
	st->st_blksize = 4096;
	if (idx_dir(in)) {
		st->st_blocks = 8;
	} else {
		/* RAM-resident bytes plus bytes held only in cold segments */
		uint64_t bytes = in->hot_bytes;
		for (uint64_t c = 0; c < in->nchunks; c++)
			if (in->chunks[c].state == CHUNK_COLD)
				bytes += in->chunks[c].seg_len;
		st->st_blocks = (bytes + 511) / 512;
	}
	st->st_atim = idx_ns_ts(in->atime);
	st->st_mtim = idx_ns_ts(in->mtime);
	st->st_ctim = idx_ns_ts(in->ctime);
	idx_inode_unlock(in);
}

int idx_for_each(struct index *idx, int (*fn)(void *arg, struct inode *ino), void *arg)
{
	int ret = 0;
	pthread_mutex_lock(&idx->lock);
	for (struct inode *in = inode_next(idx, NULL); in; in = inode_next(idx, in))
		if ((ret = fn(arg, in)) != 0)
			break;
	pthread_mutex_unlock(&idx->lock);
	return ret;
}

void idx_counts(struct index *idx, uint64_t *inodes, uint64_t *files)
{
	pthread_mutex_lock(&idx->lock);
	*inodes = idx->ninodes;
	*files = idx->nfiles;
	pthread_mutex_unlock(&idx->lock);
}

static struct xattr **xattr_find(struct inode *in, const char *name)
{
	struct xattr **pp = &in->xattrs;
	while (*pp && strcmp((*pp)->name, name) != 0)
		pp = &(*pp)->next;
	return pp;
}

int idx_xattr_set(struct index *idx, struct inode *in, const char *name, const void *value,
		  size_t size, int flags)
{
	struct xattr **pp, *x;
	void *v;
	int ret = 0;

	if ((ret = jcheck(idx)) < 0)
		return ret;
	if (strlen(name) > 255)
		return -ERANGE;
	if (strcmp(name, "user.") == 0)
		return -EINVAL; /* a namespace with no name, as the VFS says */
	if (size > 65536)
		return -E2BIG;
	v = malloc(size ? size : 1);
	if (!v)
		return -ENOMEM;
	memcpy(v, value, size);
	idx_inode_lock(in);
	pp = xattr_find(in, name);
	if (*pp && (flags & XATTR_CREATE)) {
		ret = -EEXIST;
		goto fail;
	}
	if (!*pp && (flags & XATTR_REPLACE)) {
		ret = -ENODATA;
		goto fail;
	}
	if (*pp) {
		x = *pp;
		free(x->value);
	} else {
		x = calloc(1, sizeof(*x));
		if (!x || !(x->name = strdup(name))) {
			free(x);
			ret = -ENOMEM;
			goto fail;
		}
		*pp = x;
	}
	x->value = v;
	x->size = size;
	idx_touch(&in->ctime);
	if (idx->jrnl) {
		struct jrec rs[2] = {{.type = JR_XATTR_SET,
				      .ino = in->ino,
				      .name = name,
				      .name_len = (uint32_t)strlen(name),
				      .value = value,
				      .value_len = (uint32_t)size}};
		attr_rec_locked(in, &rs[1]);
		ret = jrnl_append_tx(idx->jrnl, rs, 2);
	}
	idx_inode_unlock(in);
	return ret;
fail:
	idx_inode_unlock(in);
	free(v);
	return ret;
}

ssize_t idx_xattr_get(struct inode *in, const char *name, void *buf, size_t size)
{
	struct xattr *x;
	ssize_t ret;
	idx_inode_lock(in);
	x = *xattr_find(in, name);
	if (!x)
		ret = -ENODATA;
	else if (size == 0)
		ret = x->size;
	else if (size < x->size)
		ret = -ERANGE;
	else {
		memcpy(buf, x->value, x->size);
		ret = x->size;
	}
	idx_inode_unlock(in);
	return ret;
}

ssize_t idx_xattr_list(struct inode *in, char *buf, size_t size)
{
	size_t need = 0;
	ssize_t ret;
	idx_inode_lock(in);
	for (struct xattr *x = in->xattrs; x; x = x->next)
		need += strlen(x->name) + 1;
	if (size == 0) {
		ret = need;
	} else if (size < need) {
		ret = -ERANGE;
	} else {
		char *p = buf;
		for (struct xattr *x = in->xattrs; x; x = x->next) {
			size_t l = strlen(x->name) + 1;
			memcpy(p, x->name, l);
			p += l;
		}
		ret = need;
	}
	idx_inode_unlock(in);
	return ret;
}

int idx_xattr_remove(struct index *idx, struct inode *in, const char *name)
{
	struct xattr **pp, *x;
	int ret;
	if ((ret = jcheck(idx)) < 0)
		return ret;
	idx_inode_lock(in);
	pp = xattr_find(in, name);
	if (!(x = *pp)) {
		ret = -ENODATA;
	} else {
		*pp = x->next;
		free(x->name);
		free(x->value);
		free(x);
		idx_touch(&in->ctime);
		if (idx->jrnl) {
			struct jrec rs[2] = {{.type = JR_XATTR_DEL,
					      .ino = in->ino,
					      .name = name,
					      .name_len = (uint32_t)strlen(name)}};
			attr_rec_locked(in, &rs[1]);
			ret = jrnl_append_tx(idx->jrnl, rs, 2);
		}
	}
	idx_inode_unlock(in);
	return ret;
}

int idx_chunks_reserve(struct inode *in, uint64_t n)
{
	struct chunk *nc, *old = in->chunks;
	uint64_t cap;
	if (n <= in->nchunks)
		return 0;
	if (!S_ISREG(in->mode))
		return -EINVAL; /* only a regular file has a chunk map (the union) */
	/* no wrap of cap or of cap * sizeof: such a count cannot be held anyway */
	if (n > SIZE_MAX / 2 / sizeof(*nc))
		return -EFBIG;
	if (n == 1 && !in->nchunks && S_ISREG(in->mode)) {
		in->chunks = inline_chunk(in); /* zeroed by inode_alloc */
		in->nchunks = 1;
		return 0;
	}
	cap = in->nchunks ? in->nchunks : 4;
	while (cap < n)
		cap *= 2;
	if (old && old == inline_chunk(in)) {
		if ((nc = malloc(cap * sizeof(*nc))))
			memcpy(nc, old, sizeof(*nc));
	} else {
		nc = realloc(old, cap * sizeof(*nc));
	}
	if (!nc)
		return -ENOMEM;
	memset(nc + in->nchunks, 0, (cap - in->nchunks) * sizeof(*nc));
	in->chunks = nc;
	in->nchunks = cap;
	return 0;
}

/* ---- recovery and checkpoints ---- */

/* An inode with a given number (recovery): found, or created bare. */
static struct inode *replay_inode(struct index *idx, uint64_t ino, uint32_t mode)
{
	struct inode *in = ino_find(idx, ino);
	struct idx_new_node nn = {.mode = mode};
	uint64_t save;
	if (in)
		return in;
	save = idx->next_ino;
	idx->next_ino = ino;
	in = inode_alloc(idx, &nn);
	idx->next_ino = save > ino + 1 ? save : ino + 1;
	if (in && inode_insert(idx, in) < 0) {
		inode_destroy(idx, in);
		in = NULL;
	}
	return in;
}

void idx_set_anomaly_hook(struct index *idx, idx_anomaly_fn fn, void *arg)
{
	idx->anomaly = fn;
	idx->anomaly_arg = arg;
}

/* Tell the anomaly hook (if any); returns its answer. */
static int anomaly(struct index *idx, enum idx_anomaly_kind kind, const struct jrec *r,
		   uint64_t ino, uint64_t parent, const char *name)
{
	struct idx_anomaly a = {.kind = kind, .ino = ino, .parent = parent, .name = name};
	if (!idx->anomaly)
		return 0;
	if (r) {
		a.rec_type = r->type;
		a.chunk = r->chunk;
	}
	return idx->anomaly(idx->anomaly_arg, &a);
}

int idx_replay(struct index *idx, const struct jrec *r)
{
	struct inode *in, *p;
	struct dirent_node *d;
	char name[256];
	int ret = 0;

	switch (r->type) {
	case JR_META:
		if (r->next_ino > idx->next_ino)
			idx->next_ino = r->next_ino;
		return 1;
	case JR_INODE:
		in = ino_find(idx, r->ino);
		if (in && (in->mode & S_IFMT) != (r->attr.mode & S_IFMT))
			return 0; /* never happens: numbers are not reused */
		if (!in && !(in = replay_inode(idx, r->ino, r->attr.mode)))
			return -ENOMEM;
		in->mode = r->attr.mode;
		in->uid = r->attr.uid;
		in->gid = r->attr.gid;
		if (idx_is_dev(in))
			in->rdev_ = (uint32_t)r->attr.rdev;
		in->size = r->attr.size;
		in->atime = r->attr.atime_ns;
		in->mtime = r->attr.mtime_ns;
		in->ctime = r->attr.ctime_ns;
		if (S_ISLNK(in->mode) && r->name_len && !in->symlink_) {
			if (!(in->symlink_ = strndup(r->name, r->name_len)))
				return -ENOMEM;
		}
		return 0;
	case JR_LINK:
	case JR_UNLINK:
		memcpy(name, r->name, r->name_len);
		name[r->name_len] = '\0';
		d = dent_find(idx, r->parent, name);
		if (r->type == JR_UNLINK) {
			if (d && (p = ino_find(idx, r->parent)))
				dent_del(idx, p, d);
			return 0;
		}
		/* a name in a directory that is gone by the end: harmless to skip */
		if (!(p = ino_find(idx, r->parent)) || !idx_dir(p) || !ino_find(idx, r->ino)) {
			anomaly(idx, IDX_AN_LINK_SKIPPED, r, r->ino, r->parent, name);
			return 0;
		}
		if (d)
			d->ino = r->ino;
		else
			ret = dent_add(idx, p, name, r->ino);
		return ret;
	case JR_XATTR_SET:
	case JR_XATTR_DEL:
		/* idx->jrnl is not set yet: nothing is journaled again */
		if (!(in = ino_find(idx, r->ino))) {
			anomaly(idx, IDX_AN_NO_INODE, r, r->ino, 0, NULL);
			return 0;
		}
		memcpy(name, r->name, r->name_len);
		name[r->name_len] = '\0';
		{
			/* the INODE records carry ctime: replaying must not touch it */
			int64_t ct = in->ctime;
			int ret2 = 0;
			if (r->type == JR_XATTR_SET)
				ret2 = idx_xattr_set(idx, in, name, r->value, r->value_len, 0);
			else
				idx_xattr_remove(idx, in, name); /* -ENODATA is fine */
			in->ctime = ct;
			return ret2;
		}
	case JR_CHUNK_LOC:
	case JR_CHUNK_DIRTY:
	case JR_CHUNK_ABSENT: {
		struct chunk *ch;
		if (!(in = ino_find(idx, r->ino))) {
			anomaly(idx, IDX_AN_NO_INODE, r, r->ino, 0, NULL);
			return 0;
		}
		if (!S_ISREG(in->mode)) {
			if (r->type != JR_CHUNK_ABSENT)
				anomaly(idx, IDX_AN_NOT_FILE, r, r->ino, 0, NULL);
			return 0;
		}
		if (r->type != JR_CHUNK_ABSENT && !jrnl_rec_fits(r, idx->chunk_size)) {
			/* the decoder bounds what it reads; this bounds every caller */
			anomaly(idx, IDX_AN_CHUNK_RANGE, r, r->ino, 0, NULL);
			return 0;
		}
		if (r->type == JR_CHUNK_ABSENT) {
			for (uint64_t c = r->chunk; c < in->nchunks && c - r->chunk < r->count; c++)
				memset(&in->chunks[c], 0, sizeof(in->chunks[c]));
			return 0;
		}
		if ((ret = idx_chunks_reserve(in, r->chunk + 1)) < 0)
			return ret;
		ch = &in->chunks[r->chunk];
		memset(ch, 0, sizeof(*ch));
		if (r->type == JR_CHUNK_DIRTY) {
			ch->state = CHUNK_HOT_DIRTY;
		} else {
			ch->state = CHUNK_COLD;
			ch->seg_id = r->loc.seg_id;
			ch->seg_off = r->loc.off;
			ch->seg_len = r->loc.len;
			ch->seg_crc = r->loc.crc;
			ch->seg_dev = (uint16_t)r->loc.dev;
			ch->seg_flags = (uint16_t)r->loc.flags;
			ch->seg_gen = r->loc.gen;
			ch->gen = r->loc.gen;
		}
		return 0;
	}
	default:
		return 1;
	}
}

/* marks during idx_replay_finish */
#define MARK_NONE 0
#define MARK_REACHED 1
#define MARK_KEPT 3 /* unreachable, kept by the anomaly hook */

/* Unreachable inodes: count their names, ask the hook whether to keep them. */
static void finish_unreachable(struct index *idx, struct inode *root)
{
	struct inode *in;
	for (uint64_t b = 0; b < idx->dtab_size; b++)
		for (struct dirent_node *d = idx->dtab[b]; d; d = d->hash_next) {
			struct inode *c = ino_find(idx, d->ino);
			if (c && c->mark == MARK_NONE && ino_find(idx, d->parent))
				c->nlink++; /* a name count for now; reset below */
		}
	for (in = inode_next(idx, NULL); in; in = inode_next(idx, in)) {
		struct idx_anomaly a = {.kind = IDX_AN_UNREACHABLE,
					.ino = in->ino,
					.names = in->nlink - (idx_dir(in) ? 2 : 0),
					.is_dir = idx_dir(in) != NULL};
		if (in->mark != MARK_NONE || in == root)
			continue;
		if (idx->anomaly(idx->anomaly_arg, &a))
			in->mark = MARK_KEPT;
	}
}

uint64_t idx_replay_finish(struct index *idx)
{
	struct inode *in, *next, *root = ino_find(idx, IDX_ROOT_INO);
	struct inode **stack = NULL;
	size_t sp = 0, cap = 0;
	uint64_t dropped = 0;

	for (in = inode_next(idx, NULL); in; in = inode_next(idx, in)) {
		in->nlink = idx_dir(in) ? 2 : 0;
		in->mark = MARK_NONE;
	}
	/* walk from the root: only names in reachable directories count */
	root->mark = MARK_REACHED;
	idx_dir(root)->parent = IDX_ROOT_INO;
	if ((stack = malloc(sizeof(*stack) * (cap = 64))))
		stack[sp++] = root;
	while (sp > 0) {
		struct inode *dir = stack[--sp];
		for (uint64_t i = 0; i < idx_dir(dir)->n; i++) {
			struct dirent_node *d = dir_ent(idx_dir(dir), i);
			struct inode *c;
			if (!d || !(c = ino_find(idx, d->ino)))
				continue;
			if (idx_dir(c)) {
				if (c->mark || c == root)
					continue; /* a second name for a directory: ignored */
				idx_dir(c)->parent = dir->ino;
				dir->nlink++;
				if (sp == cap) {
					struct inode **ns = realloc(stack, sizeof(*ns) * (cap *= 2));
					if (!ns)
						continue;
					stack = ns;
				}
				stack[sp++] = c;
			} else {
				c->nlink++;
			}
			c->mark = MARK_REACHED;
		}
	}
	free(stack);
	if (idx->anomaly)
		finish_unreachable(idx, root);
	/* names whose target or directory is gone (a kept directory keeps its
	 * names; a kept directory's `parent` means nothing) */
	for (uint64_t b = 0; b < idx->dtab_size; b++) {
		struct dirent_node *d = idx->dtab[b], *dn;
		for (; d; d = dn) {
			struct inode *p = ino_find(idx, d->parent), *c = ino_find(idx, d->ino);
			enum idx_anomaly_kind kind = 0;
			dn = d->hash_next;
			if (!c)
				kind = IDX_AN_NAME_DANGLING;
			else if (!p || p->mark == MARK_NONE)
				kind = IDX_AN_NAME_ORPHAN;
			else if (c->mark == MARK_NONE)
				kind = IDX_AN_NAME_DANGLING; /* its inode is dropped below */
			else if (idx_dir(c) && c->mark == MARK_REACHED && idx_dir(c)->parent != d->parent)
				kind = IDX_AN_DIR_ALIAS;
			if (!kind)
				continue;
			anomaly(idx, kind, NULL, d->ino, d->parent, d->name);
			dent_del(idx, p && idx_dir(p) ? p : root, d);
		}
	}
	for (in = inode_next(idx, NULL); in; in = next) {
		next = inode_next(idx, in);
		if (in->mark == MARK_REACHED || in == root)
			continue;
		in->nlink = 0;
		if (in->mark == MARK_KEPT)
			continue;
		if (inode_maybe_unhook(idx, in)) {
			inode_destroy(idx, in);
			dropped++;
		}
	}
	for (in = inode_next(idx, NULL); in; in = inode_next(idx, in))
		in->mark = MARK_NONE;
	return dropped;
}

struct inode *idx_find(struct index *idx, uint64_t ino)
{
	struct inode *in;
	pthread_mutex_lock(&idx->lock);
	in = ino_find(idx, ino);
	pthread_mutex_unlock(&idx->lock);
	return in;
}

void idx_inode_rec(struct inode *in, struct jrec *r)
{
	attr_rec(in, r);
}

uint64_t idx_nchunks(struct inode *in)
{
	uint64_t n;
	idx_inode_lock(in);
	n = in->nchunks;
	idx_inode_unlock(in);
	return n;
}

void idx_chunk_rec(struct inode *in, uint64_t c, struct jrec *r)
{
	idx_inode_lock(in);
	chunk_rec(in, c, r);
	idx_inode_unlock(in);
}

int idx_for_each_name(struct index *idx,
		      int (*fn)(void *arg, uint64_t parent, const char *name, uint64_t ino),
		      void *arg)
{
	int ret = 0;
	pthread_mutex_lock(&idx->lock);
	for (uint64_t b = 0; b < idx->dtab_size && !ret; b++)
		for (struct dirent_node *d = idx->dtab[b]; d && !ret; d = d->hash_next)
			ret = fn(arg, d->parent, d->name, d->ino);
	pthread_mutex_unlock(&idx->lock);
	return ret;
}

uint64_t idx_next_ino(struct index *idx)
{
	uint64_t n;
	pthread_mutex_lock(&idx->lock);
	n = idx->next_ino;
	pthread_mutex_unlock(&idx->lock);
	return n;
}

static int snap_inode(struct jrnl_emitter *e, struct inode *in)
{
	struct jrec r;
	int ret;
	idx_inode_lock(in);
	attr_rec_locked(in, &r);
	ret = jrnl_emit(e, &r);
	for (struct xattr *x = in->xattrs; x && !ret; x = x->next) {
		struct jrec xr = {.type = JR_XATTR_SET,
				  .ino = in->ino,
				  .name = x->name,
				  .name_len = (uint32_t)strlen(x->name),
				  .value = x->value,
				  .value_len = (uint32_t)x->size};
		ret = jrnl_emit(e, &xr);
	}
	for (uint64_t c = 0; c < in->nchunks && !ret; c++) {
		struct jrec cr;
		if (in->chunks[c].state == CHUNK_ABSENT)
			continue;
		chunk_rec(in, c, &cr);
		ret = jrnl_emit(e, &cr);
	}
	idx_inode_unlock(in);
	return ret;
}

int idx_snapshot(struct index *idx, struct jrnl_emitter *e)
{
	struct inode *in;
	int ret = 0;

	pthread_mutex_lock(&idx->lock);
	for (in = inode_next(idx, NULL); in && !ret; in = inode_next(idx, in))
		if (in->nlink > 0 || in->ino == IDX_ROOT_INO)
			ret = snap_inode(e, in);
	for (in = inode_next(idx, NULL); in && !ret; in = inode_next(idx, in)) {
		if (!idx_dir(in) || in->nlink == 0)
			continue;
		for (uint64_t i = 0; i < idx_dir(in)->n && !ret; i++) {
			struct dirent_node *d = dir_ent(idx_dir(in), i);
			struct jrec r;
			if (!d)
				continue;
			name_rec(&r, JR_LINK, d->parent, d->name, d->ino);
			ret = jrnl_emit(e, &r);
		}
	}
	pthread_mutex_unlock(&idx->lock);
	return ret;
}

/* Path of a name: "/" + names of the directories up to the root. */
static void dent_path(struct index *idx, struct dirent_node *d, char *buf, size_t len)
{
	char tmp[4096];
	size_t pos = sizeof(tmp) - 1;
	tmp[pos] = '\0';
	for (int depth = 0; d && depth < 256; depth++) {
		size_t nl = strlen(d->name);
		struct inode *p;
		if (nl + 1 > pos)
			break;
		pos -= nl;
		memcpy(tmp + pos, d->name, nl);
		tmp[--pos] = '/';
		if (d->parent == IDX_ROOT_INO || !(p = ino_find(idx, d->parent)) || !idx_dir(p))
			break;
		/* a directory's own name: the entry in its parent pointing to it */
		struct inode *gp = ino_find(idx, idx_dir(p)->parent);
		struct dirent_node *up = NULL;
		for (uint64_t i = 0; gp && idx_dir(gp) && i < idx_dir(gp)->n; i++)
			if (dir_ent(idx_dir(gp), i) && dir_ent(idx_dir(gp), i)->ino == p->ino) {
				up = dir_ent(idx_dir(gp), i);
				break;
			}
		d = up;
	}
	snprintf(buf, len, "%s", tmp + pos);
}

uint64_t idx_remove_marked(struct index *idx,
			   void (*report)(void *arg, const char *path, struct inode *in), void *arg)
{
	struct {
		uint64_t parent;
		char *name;
	} *v = NULL;
	size_t n = 0, cap = 0;
	uint64_t removed = 0;
	char path[4096];

	pthread_mutex_lock(&idx->lock);
	for (uint64_t b = 0; b < idx->dtab_size; b++)
		for (struct dirent_node *d = idx->dtab[b]; d; d = d->hash_next) {
			struct inode *c = ino_find(idx, d->ino);
			if (!c || c->mark != 2)
				continue;
			if (n == cap) {
				void *nv = realloc(v, sizeof(*v) * (cap = cap ? cap * 2 : 16));
				if (!nv)
					continue;
				v = nv;
			}
			dent_path(idx, d, path, sizeof(path));
			if (report)
				report(arg, path, c);
			v[n].parent = d->parent;
			v[n].name = strdup(d->name);
			n++;
		}
	pthread_mutex_unlock(&idx->lock);
	for (size_t i = 0; i < n; i++) {
		if (v[i].name && idx_unlink(idx, v[i].parent, v[i].name) == 0)
			removed++;
		free(v[i].name);
	}
	free(v);
	return removed;
}
