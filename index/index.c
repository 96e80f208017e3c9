/*
 * index.c — the index's tables: the handle, inodes (allocation, lifecycle,
 * references, striped locks), the name hash and directory arrays, the
 * journal records of an inode, attributes, xattrs and chunk maps. The POSIX
 * namespace operations are in index_names.c, recovery and checkpoints in
 * index_replay.c; the three share index_i.h.
 *
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
#include "index/index_i.h"
#include "index/index.h"

#include "common/slab.h"

#include <assert.h>
#include <errno.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

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
struct inode *idx_inode_next(const struct index *idx, const struct inode *in)
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

struct inode *idx_ino_find(struct index *idx, uint64_t ino)
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

struct dirent_node *idx_dent_find(struct index *idx, uint64_t parent, const char *name)
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
void idx_attr_rec_locked(struct inode *in, struct jrec *r)
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

void idx_attr_rec(struct inode *in, struct jrec *r)
{
	idx_inode_lock(in);
	idx_attr_rec_locked(in, r);
	idx_inode_unlock(in);
}

void idx_name_rec(struct jrec *r, uint8_t type, uint64_t parent, const char *name, uint64_t ino)
{
	memset(r, 0, sizeof(*r));
	r->type = type;
	r->parent = parent;
	r->ino = ino;
	r->name = name;
	r->name_len = (uint32_t)strlen(name);
}

/* Refuse changes once the journal is read-only. */
int idx_jcheck(struct index *idx)
{
	return idx->jrnl && jrnl_failed(idx->jrnl) ? -EIO : 0;
}

int idx_jlog(struct index *idx, const struct jrec *rs, int n)
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
	return idx_jcheck(idx);
}

int idx_journal_attr_locked(struct index *idx, struct inode *in)
{
	struct jrec r;
	if (!idx->jrnl)
		return 0;
	idx_attr_rec_locked(in, &r);
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

/* Per-file memory: a chunk is 48 bytes (a 32-bit LRU tick and segment id;
 * format v2's flags took spare bits of the device field; 8 for the pointer
 * to an overlay chain). Its location is the journal's (struct chunk_loc);
 * its segment id holds any the journal accepts. */
_Static_assert(sizeof(struct chunk) == 48, "struct chunk grew");
/* an overlay's bitmap is journaled as the bytes of its words */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "chain bitmaps are little-endian");
_Static_assert(JRNL_MAX_SEG_ID <= UINT32_MAX, "segment ids do not fit struct chunk");

int idx_journal_chunk_locked(struct index *idx, struct inode *in, uint64_t c, uint64_t count)
{
	struct jrec rs[CHAIN_MAX + 2];
	int n;
	if (!idx->jrnl)
		return 0;
	if (count > 0) {
		idx_chunk_rec_locked(in, c, &rs[0]);
		rs[0].type = JR_CHUNK_ABSENT;
		rs[0].count = count;
		return jrnl_append(idx->jrnl, &rs[0]);
	}
	n = idx_chunk_recs_locked(in, c, rs);
	return n == 1 ? jrnl_append(idx->jrnl, &rs[0]) : jrnl_append_tx(idx->jrnl, rs, n);
}

int idx_journal_cut_locked(struct index *idx, struct inode *in, uint64_t c, uint64_t count)
{
	struct jrec rs[2];
	int n = 0;
	if (!idx->jrnl)
		return 0;
	if (count > 0) {
		idx_chunk_rec_locked(in, c, &rs[n]);
		rs[n].type = JR_CHUNK_ABSENT;
		rs[n++].count = count;
	}
	idx_attr_rec_locked(in, &rs[n++]);
	return n == 1 ? jrnl_append(idx->jrnl, &rs[0]) : jrnl_append_tx(idx->jrnl, rs, n);
}

int idx_journal_grow_locked(struct index *idx, struct inode *in, uint64_t c, uint64_t count)
{
	struct jrec rs[64];
	int n = 0, ret = 0;

	if (!idx->jrnl)
		return 0;
	for (uint64_t i = 0; i < count && ret == 0; i++) {
		if (n == (int)(sizeof(rs) / sizeof(rs[0])) - 1) {
			ret = jrnl_append_tx(idx->jrnl, rs, n);
			n = 0;
		}
		idx_chunk_rec_locked(in, c + i, &rs[n++]);
	}
	if (ret < 0)
		return ret;
	idx_attr_rec_locked(in, &rs[n++]);
	return n == 1 ? jrnl_append(idx->jrnl, &rs[0]) : jrnl_append_tx(idx->jrnl, rs, n);
}

struct inode *idx_inode_alloc(struct index *idx, const struct idx_new_node *nn)
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

int idx_inode_insert(struct index *idx, struct inode *in)
{
	if (idx->ninodes + 1 > idx->itab_size && rehash_inodes(idx) < 0)
		return -ENOMEM;
	in->hash_next = idx->itab[in->ino & (idx->itab_size - 1)];
	idx->itab[in->ino & (idx->itab_size - 1)] = in;
	idx->ninodes++;
	if (S_ISREG(idx_type(in)))
		idx->nfiles++;
	return 0;
}

void idx_inode_destroy(struct index *idx, struct inode *in)
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
	for (uint64_t c = 0; S_ISREG(idx_type(in)) && c < in->nchunks; c++)
		idx_chain_free(&in->chunks[c]);
	if (S_ISREG(idx_type(in)) && in->chunks != inline_chunk(in))
		free(in->chunks);
	idx_ext_free(in);
	if (S_ISLNK(idx_type(in)))
		free(in->symlink_);
	slab_free(idx->slab, in, inode_size(in->mode));
}

/* Unhook an inode that has no names and no references; called with idx->lock.
 * Returns it when the caller must destroy it (after dropping the lock). */
struct inode *idx_inode_maybe_unhook(struct index *idx, struct inode *in)
{
	struct inode **pp;
	if (in->nlink > 0 || in->nlookup > 0 || in->refs > 0 || in->ino == IDX_ROOT_INO)
		return NULL;
	for (pp = &idx->itab[in->ino & (idx->itab_size - 1)]; *pp != in; pp = &(*pp)->hash_next)
		;
	*pp = in->hash_next;
	idx->ninodes--;
	if (S_ISREG(idx_type(in)))
		idx->nfiles--;
	return in;
}

void idx_inode_release(struct index *idx, struct inode *dead)
{
	if (!dead)
		return;
	if (idx->release)
		idx->release(idx->release_arg, dead);
	idx_inode_destroy(idx, dead);
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
	r = idx_inode_alloc(idx, &root);
	if (!r)
		goto fail;
	r->nlink = 2;
	idx_dir(r)->parent = IDX_ROOT_INO;
	r->uid = getuid();
	r->gid = getgid();
	idx_inode_insert(idx, r);
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
	for (in = idx_inode_next(idx, NULL); in; in = next) {
		next = idx_inode_next(idx, in);
		if (idx->release)
			idx->release(idx->release_arg, in);
		idx_inode_destroy(idx, in);
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
	in = idx_ino_find(idx, ino);
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
	dead = idx_inode_maybe_unhook(idx, in);
	pthread_mutex_unlock(&idx->lock);
	idx_inode_release(idx, dead);
}

void idx_forget(struct index *idx, uint64_t ino, uint64_t n)
{
	struct inode *in, *dead = NULL;
	pthread_mutex_lock(&idx->lock);
	in = idx_ino_find(idx, ino);
	if (in) {
		in->nlookup = in->nlookup > n ? in->nlookup - n : 0;
		dead = idx_inode_maybe_unhook(idx, in);
	}
	pthread_mutex_unlock(&idx->lock);
	idx_inode_release(idx, dead);
}

void idx_get_locked(struct inode *in)
{
	in->refs++;
}

void idx_kernel_ref_locked(struct inode *child)
{
	child->nlookup++;
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
uint64_t idx_dir_search(const struct idx_dir *dir, uint64_t off)
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
	uint64_t i = idx_dir_search(dir, d->cookie - 1);
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

int idx_dent_add(struct index *idx, struct inode *parent, const char *name, uint64_t ino)
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

void idx_dent_del(struct index *idx, struct inode *parent, struct dirent_node *d)
{
	struct dirent_node **pp = dent_slot(idx, d->parent, d->name, d->hash);
	*pp = d->hash_next;
	dir_remove(idx_dir(parent), d);
	idx->ndents--;
	dent_free(idx, d);
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
				bytes += in->chunks[c].loc.len;
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
	for (struct inode *in = idx_inode_next(idx, NULL); in; in = idx_inode_next(idx, in))
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

	if ((ret = idx_jcheck(idx)) < 0)
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
		idx_attr_rec_locked(in, &rs[1]);
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
	if ((ret = idx_jcheck(idx)) < 0)
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
			idx_attr_rec_locked(in, &rs[1]);
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
	if (!S_ISREG(idx_type(in)))
		return -EINVAL; /* only a regular file has a chunk map (the union) */
	/* no wrap of cap or of cap * sizeof: such a count cannot be held anyway */
	if (n > SIZE_MAX / 2 / sizeof(*nc))
		return -EFBIG;
	if (n == 1 && !in->nchunks && S_ISREG(idx_type(in))) {
		in->chunks = inline_chunk(in); /* zeroed by idx_inode_alloc */
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

struct inode *idx_find(struct index *idx, uint64_t ino)
{
	struct inode *in;
	pthread_mutex_lock(&idx->lock);
	in = idx_ino_find(idx, ino);
	pthread_mutex_unlock(&idx->lock);
	return in;
}

void idx_inode_rec(struct inode *in, struct jrec *r)
{
	idx_attr_rec(in, r);
}

uint64_t idx_nchunks(struct inode *in)
{
	uint64_t n;
	idx_inode_lock(in);
	n = in->nchunks;
	idx_inode_unlock(in);
	return n;
}

int idx_chunk_recs(struct inode *in, uint64_t c, struct jrec *rs)
{
	int n;
	idx_inode_lock(in);
	n = idx_chunk_recs_locked(in, c, rs);
	idx_inode_unlock(in);
	return n;
}

void idx_chunk_rec(struct inode *in, uint64_t c, struct jrec *r)
{
	idx_inode_lock(in);
	idx_chunk_rec_locked(in, c, r);
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

