/*
 * index — the namespace and every file's chunk map, in memory.
 * Owns inodes (by number, never reused: numbers only grow), directory entries
 * (a hash on parent+name for lookup, and per-directory arrays ordered by a
 * never-reused cookie, so readdir offsets stay stable while entries come and
 * go), symlink targets, user xattrs and chunk maps. POSIX rules of the
 * namespace (EEXIST, ENOTEMPTY, rename flags, ...) are enforced here.
 * Threading: idx->lock (internal) guards the namespace, the inode table and
 * link/lookup counts; each inode's lock (idx_inode_lock) guards its
 * attributes and chunk map. Lock order: index lock, then one inode lock —
 * never two inode locks at once (they are striped). Functions return 0 or
 * -errno.
 */
#ifndef SPW_INDEX_H
#define SPW_INDEX_H

#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include "index/chunk_loc.h"

#define IDX_ROOT_INO 1

enum chunk_state {
	CHUNK_ABSENT = 0, /* never written: a hole, no copy anywhere */
	CHUNK_HOT_DIRTY,  /* RAM copy only, or cold copy stale */
	CHUNK_SPILLING,	  /* RAM copy; being written into a segment */
	CHUNK_HOT_CLEAN,  /* RAM copy and valid cold copy */
	CHUNK_COLD,	  /* cold copy only; hole punched in the hot file */
	CHUNK_RESTORING,  /* cold copy being read back into RAM */
};

/* One chunk of a regular file. Protected by its inode's lock. */
struct chunk {
	uint8_t state;	/* enum chunk_state */
	uint8_t queued : 1; /* restore queued/in flight */
	/* restored ahead of its reader (prefetch, read-ahead) and not read or
	 * written since: the evictor drops it after the chunks used already
	 * (tier/evict.c), or a slow reader would restore it twice */
	uint8_t unread : 1;
	/* admission (tier/admit): read since it last went cold (or a re-read
	 * promoted it), and how far its readers went, in 16ths of the chunk:
	 * what tells a second access from a stream going on */
	uint8_t seen : 1;
	uint8_t hw : 4;
	/* written around (tier/admit): a streaming writer's chunk, written
	 * under pressure: the evictor spills it first and lets it go */
	uint8_t around : 1;
	uint16_t pins;	/* reads/writes in flight on this chunk: not evictable */
	uint32_t gen;	/* bumped by every write/punch of the chunk */
	/* index tick of the last access (LRU), its low 32 bits: compare ages
	 * (idx_tick_now() - atime, in 32 bits), never the values, which wrap */
	uint32_t atime;
	/* cold location (loc.seg_id 0: none), valid in HOT_CLEAN, COLD,
	 * RESTORING (and SPILLING's old copy); in HOT_DIRTY (or SPILLING)
	 * without a chain, a kept copy: the chunk may have changed behind the
	 * daemon (a passthrough writer) and this copy stays its durable
	 * version until a spill replaces it (journaled as its location, never
	 * as dirty: tier_io.c) */
	struct chunk_loc loc;
	/* overlays: NULL, or the records over the cold copy above (its base)
	 * and which blocks of the chunk RAM holds (struct chunk_chain) */
	struct chunk_chain *chain;
};

/* A read or a write of the chunk: the LRU's tick, and no longer unread. */
static inline void chunk_touch(struct chunk *ch, uint32_t tick)
{
	ch->atime = tick;
	ch->unread = 0;
}

struct inode;
/* Move chunk c of in (c < in->nchunks) to state `to`: the only writer of
 * struct chunk's state (a tree-wide grep test says so, test_chunk_state_owner).
 * The moves a chunk may make are one table in index/chunk_state.c; debug
 * builds abort on any other, naming the inode, the chunk and both states.
 * Changes nothing else of the chunk. Caller holds the inode lock. */
void chunk_set_state(struct inode *in, uint64_t c, enum chunk_state to);

/*
 * A chunk written over its cold copy without restoring it (overlays).
 * Its cold copy is a chain: the base (the chunk's own loc) and
 * up to CHAIN_MAX records over it, oldest first, each holding some
 * CHAIN_BLK-byte blocks of the chunk (bits); a block reads from the newest
 * record that holds it, else from the base. While the chunk is in RAM
 * (HOT_*, SPILLING), `partial` says the hot file holds only the blocks in
 * `have` (the rest is read from the chain); `dirty` are the blocks written
 * since the newest record, a subset of have when partial. A chain is only
 * ever in a chunk with a base (loc.seg_id != 0). Under the inode lock.
 */
#define CHAIN_BLK 4096u
#define CHAIN_MAX 16
struct chain_rec {
	struct chunk_loc loc;
	uint64_t *bits;
};
struct chunk_chain {
	uint32_t nbits;	 /* blocks of a whole chunk */
	uint16_t nrec;	 /* records over the base */
	uint8_t partial; /* RAM holds only `have` */
	uint16_t wr;	 /* writes in flight into the chunk (tier/chain.c) */
	uint64_t *have, *dirty;
	struct chain_rec rec[CHAIN_MAX];
	uint64_t bm[]; /* the bitmaps: have, dirty, one per record */
};

struct xattr {
	struct xattr *next;
	char *name;
	void *value;
	size_t size;
};

struct idx_dir;

struct inode {
	uint64_t ino; /* immutable */
	/* idx_inode_lock(in) guards everything below unless noted */
	uint64_t size;
	int64_t atime, mtime, ctime; /* ns since the epoch, as journaled */
	mode_t mode; /* stored atomically once published; type: idx_type() */
	uid_t uid;
	gid_t gid;
	uint32_t nlink; /* changed under index lock + inode lock */
	struct xattr *xattrs;
	/* what only one file type has (S_IFMT of mode says which; read the
	 * pointers through the helpers below, which check it) */
	union {
		/* regular files: the chunk map; chunks past nchunks are ABSENT
		 * (other types have nchunks 0). A map of one chunk lives inside
		 * the inode's allocation (index.c). */
		struct chunk *chunks;
		struct idx_dir *dir_;	/* directories: idx_dir() */
		char *symlink_;		/* symlinks: the target, immutable; idx_symlink() */
		uint32_t rdev_;		/* devices: FUSE carries 32 bits; idx_rdev() */
	};
	/* hot tier state, owned by tier/hot.c */
	uint64_t hot_bytes; /* allocated bytes of the hot file, last accounted */
	int hot_fd;	    /* -1 when closed */
	uint32_t hot_users; /* opens + internal users of hot_fd */
	uint32_t nchunks;   /* < JRNL_MAX_CHUNKS (2^24) */
	uint32_t open_count : 24;
	/* tier_io.c: written around (tier/admit) by a streaming writer under
	 * pressure: what is left dirty at its last close goes too */
	uint32_t around : 1;
	/* tier_io.c: a read or write went through the daemon since the
	 * kernel's copy was last dropped (it may hold pages of the file) */
	uint32_t kcached : 1;
	/* inval.c: a drop of the kernel's pages was held back while the file
	 * was open; the last close drops the whole file (tier_io.c) */
	uint32_t inval_owed : 1;
	/* tier.c: a truncate, fallocate or write waits for the restores in
	 * flight in the file; no new one starts meanwhile */
	uint32_t rst_hold : 1;
	uint32_t mark : 2;	 /* recovery only: reachable / lost */
	uint32_t pinned : 1;	 /* user.spillway.pin */
	uint32_t attr_dirty : 1; /* mtime changed since its last journal record */
	/* hot.c's list of inodes that have a hot file: slot + 1, 0 = not
	 * listed (guarded by hot.c's lock, so in a word of its own) */
	uint32_t hot_slot;
	/* passthrough opens (tier.h), owned by tier_io.c, under the inode lock:
	 * opens the kernel serves from the hot file itself, the writers among
	 * them, and the id the kernel knows the hot file by while there are
	 * any (0: none) */
	uint16_t pt_opens, pt_writers;
	int32_t backing_id;
	/* namespace bookkeeping, guarded by the index lock */
	uint32_t refs;		 /* internal references (idx_get/idx_put) */
	uint64_t nlookup;	 /* kernel references */
	struct inode *hash_next; /* the inode table's chain: also how all are walked */
};

/* The file type (S_IFMT bits) of in->mode. in->mode is under the inode
 * lock, but its type bits never change once the inode is in the index,
 * and many readers hold only the index lock or no lock (idx_dir() below,
 * lookups, the evictor's and the checkpoint's walks) while a chmod or a
 * write clearing the set-id bits rewrites the word. So every store to a
 * published inode's mode is atomic (idx_set_mode_locked) and the type is
 * read with an atomic load: relaxed is enough, the bits it keeps were
 * stored before the inode was published (under the index lock) and never
 * change. Readers of the permission bits take the inode lock. */
static inline mode_t idx_type(const struct inode *in)
{
	return __atomic_load_n(&in->mode, __ATOMIC_RELAXED) & S_IFMT;
}
/* in->mode = mode, under the inode lock (see idx_type). */
static inline void idx_set_mode_locked(struct inode *in, mode_t mode)
{
	__atomic_store_n(&in->mode, mode, __ATOMIC_RELAXED);
}

/* The union's members, read for the file type that has them. */
static inline int idx_is_dev(const struct inode *in)
{
	return S_ISCHR(idx_type(in)) || S_ISBLK(idx_type(in));
}
static inline uint32_t idx_rdev(const struct inode *in)
{
	return idx_is_dev(in) ? in->rdev_ : 0;
}
static inline const char *idx_symlink(const struct inode *in)
{
	return S_ISLNK(idx_type(in)) ? in->symlink_ : NULL;
}
/* A directory's entries (index.c); NULL for any other type: also the test
 * "is a directory" the FUSE ops use. */
static inline struct idx_dir *idx_dir(const struct inode *in)
{
	return S_ISDIR(idx_type(in)) ? in->dir_ : NULL;
}

struct index;

/* The inode lock and its wait queue. They are striped — a fixed table of
 * mutex + condition variable pairs hashed by inode number — so an inode
 * carries neither. Hence: hold at most one inode lock at a time, and every
 * wait re-checks its predicate in a loop (a wake-up of another inode of the
 * same stripe, or a spurious one, wakes it too). */
void idx_inode_lock(struct inode *in);
void idx_inode_unlock(struct inode *in);
int idx_inode_trylock(struct inode *in); /* 0, or -EBUSY */
void idx_inode_wait(struct inode *in);	 /* caller holds the lock */
/* The same until a CLOCK_REALTIME deadline: 0, or -ETIMEDOUT. */
int idx_inode_timedwait(struct inode *in, const struct timespec *deadline);
void idx_inode_wake(struct inode *in);	 /* broadcast to the inode's waiters */

/* Called (without locks held) when an inode is destroyed: drop its data. */
typedef void (*idx_release_fn)(void *arg, struct inode *ino);

int idx_new(uint64_t chunk_size, struct index **out);
void idx_free(struct index *idx);
void idx_set_release_hook(struct index *idx, idx_release_fn fn, void *arg);
uint64_t idx_chunk_size(const struct index *idx);
uint64_t idx_tick(struct index *idx); /* monotonic access clock for LRU */
uint64_t idx_tick_now(struct index *idx); /* its current value, not advanced */
/* Tests: start the clock at tick (e.g. just below a 32-bit wrap). */
void idx_tick_seed(struct index *idx, uint64_t tick);

/* Take/drop an internal reference on inode `ino`; NULL if it does not exist. */
struct inode *idx_get(struct index *idx, uint64_t ino);
void idx_put(struct index *idx, struct inode *ino);
/* Take one more internal reference on an inode the caller already holds. */
void idx_ref(struct index *idx, struct inode *ino);
/* Kernel reference counting (lookup/forget). */
void idx_forget(struct index *idx, uint64_t ino, uint64_t n);

/* Lookup: on success *out has one internal ref and nlookup was incremented
 * when `kernel_ref` is set. "." is parent itself, of any type; ".." the
 * parent of directory parent. */
int idx_lookup(struct index *idx, uint64_t parent, const char *name, int kernel_ref,
	       struct inode **out);

struct idx_new_node {
	mode_t mode; /* includes file type */
	uid_t uid;
	gid_t gid;
	dev_t rdev;
	const char *symlink;
};
/* Create a node (file, dir, fifo, symlink, ...) named `name` in `parent`.
 * *out gets an internal ref and one kernel lookup ref. */
int idx_create(struct index *idx, uint64_t parent, const char *name, const struct idx_new_node *nn,
	       struct inode **out);
int idx_link(struct index *idx, uint64_t ino, uint64_t newparent, const char *newname,
	     struct inode **out);
int idx_unlink(struct index *idx, uint64_t parent, const char *name);
int idx_rmdir(struct index *idx, uint64_t parent, const char *name);
/* O_TMPFILE: a regular file with no name (nlink 0) on parent's filesystem,
 * one internal ref and one kernel ref as idx_create; idx_link names it. */
int idx_tmpfile(struct index *idx, uint64_t parent, const struct idx_new_node *nn,
		struct inode **out);
/* flags: 0, RENAME_NOREPLACE or RENAME_EXCHANGE (linux/fs.h values). */
int idx_rename(struct index *idx, uint64_t parent, const char *name, uint64_t newparent,
	       const char *newname, unsigned flags);

/* readdir: calls fn for each entry with cookie > off, in cookie order,
 * with the index lock held ("." = 1, ".." = 2). fn returns non-zero to stop;
 * `child` is valid only during the call (use idx_get_locked to keep it). */
typedef int (*idx_dirent_fn)(void *arg, const char *name, struct inode *child, uint64_t cookie);
int idx_readdir(struct index *idx, uint64_t dir, uint64_t off, idx_dirent_fn fn, void *arg);
/* Inside an idx_readdir/idx_for_each callback: take an internal ref
 * (drop it later with idx_put). */
void idx_get_locked(struct inode *in);
/* Inside an idx_readdir callback: add a kernel lookup ref to child. */
void idx_kernel_ref_locked(struct inode *child);
uint64_t idx_dir_entries(struct index *idx, uint64_t dir);
/* The cookie the next entry made in dir will get: every entry there now has
 * a smaller one (a rename into dir makes a new entry). 0 if dir is gone. */
uint64_t idx_dir_next_cookie(struct index *idx, uint64_t dir);

/* Attributes. idx_stat fills st from the inode (takes its lock). */
void idx_stat(struct index *idx, struct inode *ino, struct stat *st);
void idx_touch(int64_t *ns); /* current time, ns since the epoch */
/* timespec <-> ns since the epoch (saturating: the journal's int64 range,
 * years 1678-2262). */
int64_t idx_ts_ns(const struct timespec *ts);
struct timespec idx_ns_ts(int64_t ns);

/* Iterate all live inodes (for the evictor, stats): fn called with the
 * index lock held; return non-zero to stop. */
int idx_for_each(struct index *idx, int (*fn)(void *arg, struct inode *ino), void *arg);
void idx_counts(struct index *idx, uint64_t *inodes, uint64_t *files);

/* user xattrs (inode lock taken inside). flags: XATTR_CREATE / XATTR_REPLACE. */
int idx_xattr_set(struct index *idx, struct inode *ino, const char *name, const void *value,
		  size_t size, int flags);
/* Returns value size, copying into buf when size > 0 (-ERANGE if too small). */
ssize_t idx_xattr_get(struct inode *ino, const char *name, void *buf, size_t size);
ssize_t idx_xattr_list(struct inode *ino, char *buf, size_t size);
int idx_xattr_remove(struct index *idx, struct inode *ino, const char *name);

/* Chunk map (caller holds the inode lock). Grows the map to hold nchunks
 * chunks; `chunks` may move (a one-chunk map is inline in the inode).
 * 0, -ENOMEM, or -EFBIG for a count no allocation can hold. */
int idx_chunks_reserve(struct inode *ino, uint64_t nchunks);

/* ---- journal (index/journal.h) ----
 * With a journal set, every namespace, attribute and xattr change is
 * appended before the call returns; once the journal is read-only, changes
 * fail with -EIO before anything is modified. */
struct journal;
struct jrec;
struct jrnl_emitter;
void idx_set_journal(struct index *idx, struct journal *j);
struct journal *idx_journal(struct index *idx);
/* 0, or -EIO when the journal is read-only (callers check before changing data). */
int idx_check_writable(struct index *idx);
/* Journal the attributes of in (size, mode, owner, times); _locked: caller
 * holds in->lock. 0 or -EIO. */
int idx_journal_attr(struct index *idx, struct inode *in);
int idx_journal_attr_locked(struct index *idx, struct inode *in);
/* Chains (index_chain.c). Words of a bitmap of a chain of chunk_size. */
static inline uint32_t chain_words(uint64_t chunk_size)
{
	return (uint32_t)((chunk_size / CHAIN_BLK + 63) / 64);
}
/* The chain of chunk c, made (empty, partial, nothing in RAM) when it has
 * none. NULL without memory. Caller holds the inode lock. */
struct chunk_chain *idx_chain_get(struct index *idx, struct inode *in, uint64_t c);
/* Free chunk c's chain (its records' bytes are the caller's to release). */
void idx_chain_free(struct chunk *ch);
static inline int chain_test(const uint64_t *bm, uint32_t b)
{
	return (int)(bm[b / 64] >> (b % 64) & 1);
}
/* Which of chunk ch's records is at offset off of segment seg: -1 its base,
 * i >= 0 overlay i of its chain, -2 none. Caller holds the inode lock. */
static inline int chunk_rec_at(const struct chunk *ch, uint64_t seg, uint64_t off)
{
	if (ch->loc.seg_id == seg && ch->loc.off == off)
		return -1;
	for (uint16_t i = 0; ch->chain && i < ch->chain->nrec; i++)
		if (ch->chain->rec[i].loc.seg_id == seg && ch->chain->rec[i].loc.off == off)
			return i;
	return -2;
}
/* Set or clear bits [b0, b1) */
void chain_set(uint64_t *bm, uint32_t b0, uint32_t b1, int on);
/* Any bit set in [b0, b1)? All set? */
int chain_any(const uint64_t *bm, uint32_t b0, uint32_t b1);
int chain_all(const uint64_t *bm, uint32_t b0, uint32_t b1);
uint32_t chain_count(const uint64_t *bm, uint32_t nbits);
/* The records of chunk c's residency, for the journal or a checkpoint: the
 * base and every overlay (JR_CHUNK_LOC, JR_CHUNK_OVL...), then
 * JR_CHUNK_PART when written blocks are only in RAM; or one record as
 * idx_chunk_rec. rs holds CHAIN_MAX + 2; values point into the chain
 * (valid under the lock). Returns the count. Caller holds the inode lock. */
int idx_chunk_recs_locked(struct inode *in, uint64_t c, struct jrec *rs);

/* Journal the residency of chunk c — its cold location, RAM-only (dirty) or
 * a hole — or, with count > 0, that chunks [c, c+count) are holes now.
 * Caller holds in->lock. 0 or -EIO. */
int idx_journal_chunk_locked(struct index *idx, struct inode *in, uint64_t c, uint64_t count);

/* Recovery (single-threaded, before serving): apply one record. Returns 0,
 * 1 when the record is not the index's (segments; META is both), or -errno. */
int idx_replay(struct index *idx, const struct jrec *r);
/* After the last record: recount links, set directory parents and drop
 * every inode no name reaches (no release hook called), and the names in
 * unreachable directories or for missing inodes. Returns the number
 * dropped. May run again later (offline tools): it only recounts. */
uint64_t idx_replay_finish(struct index *idx);
/*
 * Recovery anomalies, for spillway-fsck: what idx_replay skips and
 * idx_replay_finish drops, reported to a hook as it happens (single-threaded,
 * like replay; strings valid only during the call). Without a hook replay
 * behaves exactly the same, it just does not say so.
 */
enum idx_anomaly_kind {
	IDX_AN_NO_INODE = 1, /* replay: xattr or chunk record for an inode that does not exist */
	IDX_AN_NOT_FILE,     /* replay: chunk record for an inode that is not a regular file */
	IDX_AN_CHUNK_RANGE,  /* replay: chunk index past the format's bound (jrnl_rec_fits) */
	IDX_AN_LINK_SKIPPED, /* replay: name in a missing or non-directory parent, or for a
				missing inode (normal in a fuzzy checkpoint) */
	IDX_AN_NAME_DANGLING, /* finish: a name whose inode does not exist; removed */
	IDX_AN_NAME_ORPHAN,   /* finish: a name in a directory / does not reach; removed */
	IDX_AN_DIR_ALIAS,     /* finish: a second name of a directory; removed */
	IDX_AN_UNREACHABLE,   /* finish: an inode / does not reach (names: how many it has) */
};

struct idx_anomaly {
	enum idx_anomaly_kind kind;
	uint8_t rec_type; /* replay: the record's type; finish: 0 */
	uint64_t ino;	  /* the inode named (names: its target) */
	uint64_t parent;  /* names: the directory */
	uint64_t chunk;	  /* chunk records */
	const char *name; /* names: NUL-terminated; NULL otherwise */
	uint64_t names;	  /* IDX_AN_UNREACHABLE: names pointing at it (0: nameless) */
	int is_dir;	  /* IDX_AN_UNREACHABLE: a directory */
};

/* For IDX_AN_UNREACHABLE a nonzero return keeps the inode (and the names
 * inside it) instead of dropping it: nlink 0, so checkpoints leave it out,
 * until a later idx_replay_finish finds it reachable. Ignored otherwise. */
typedef int (*idx_anomaly_fn)(void *arg, const struct idx_anomaly *a);
void idx_set_anomaly_hook(struct index *idx, idx_anomaly_fn fn, void *arg);

/* Offline tools (single-threaded, no references taken): the inode numbered
 * ino or NULL. Valid until the next idx_replay_finish; never idx_put it (an
 * inode with nlink 0 would be destroyed). */
struct inode *idx_find(struct index *idx, uint64_t ino);
/* Read-only views for offline tools (take the inode's lock): the JR_INODE
 * record of in (name = symlink target, pointing into the inode), the number
 * of chunk slots, and the residency record of chunk c (JR_CHUNK_LOC,
 * JR_CHUNK_DIRTY or JR_CHUNK_ABSENT with count 1). */
void idx_inode_rec(struct inode *in, struct jrec *r);
uint64_t idx_nchunks(struct inode *in);
void idx_chunk_rec(struct inode *in, uint64_t c, struct jrec *r);
/* Every record of chunk c's residency (idx_chunk_recs_locked, locked). */
int idx_chunk_recs(struct inode *in, uint64_t c, struct jrec *rs);
/* Every directory entry (hash order, index lock held): fn(arg, parent, name,
 * ino) returns non-zero to stop (returned). */
int idx_for_each_name(struct index *idx,
		      int (*fn)(void *arg, uint64_t parent, const char *name, uint64_t ino),
		      void *arg);

/* Emit the live namespace, attributes, xattrs and chunk maps (inodes first,
 * then names) for a checkpoint. Takes the index lock for the walk. */
int idx_snapshot(struct index *idx, struct jrnl_emitter *e);
uint64_t idx_next_ino(struct index *idx);
/* Paths of every name of inodes with mark == 2 (one call per name), then
 * remove those names (journaled). Returns the number of names removed. */
uint64_t idx_remove_marked(struct index *idx, void (*report)(void *arg, const char *path,
							      struct inode *in),
			   void *arg);

#endif
