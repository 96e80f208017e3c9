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
#include "index/index_types.h"

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
/* Chains (index_chain.c; the inline helpers are in index_types.h). */
/* The chain of chunk c, made (empty, partial, nothing in RAM) when it has
 * none. NULL without memory. Caller holds the inode lock. */
struct chunk_chain *idx_chain_get(struct index *idx, struct inode *in, uint64_t c);
/* Free chunk c's chain (its records' bytes are the caller's to release). */
void idx_chain_free(struct chunk *ch);
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

/* Extents (index_ext.c; struct idx_ext: index_types.h). Caller holds the
 * inode lock. */
/* in->ext, made (id 0, fd -1) when it has none; NULL without memory. */
struct idx_ext *idx_ext_new_locked(struct inode *in);
/* Free in->ext (its fd is the tier's to close first); NULL after. */
void idx_ext_free(struct inode *in);
/* Crc blocks (JRNL_EXT_BLOCK) of size bytes. */
uint32_t idx_ext_blocks(uint64_t size);
/* Every record of in's extent (none without one), in replay order, to fn;
 * stops at and returns fn's nonzero return. */
int idx_ext_recs_locked(const struct inode *in, int (*fn)(void *arg, const struct jrec *r),
			void *arg);
/* Journal in's extent as it is now (idx_ext_recs_locked), or, without one,
 * that it has none (gone_id: the one it had; 0 journals nothing then).
 * 0 or -EIO. */
int idx_journal_ext_locked(struct index *idx, struct inode *in, uint64_t gone_id);

/* Journal the residency of chunk c — its cold location, RAM-only (dirty) or
 * a hole — or, with count > 0, that chunks [c, c+count) are holes now.
 * Caller holds in->lock. 0 or -EIO. */
int idx_journal_chunk_locked(struct index *idx, struct inode *in, uint64_t c, uint64_t count);
/* Journal a file's cut: chunks [c, c+count) are holes now (count 0: none)
 * and then its attributes (the new size), in one transaction, so that no
 * crash keeps the old size with the chunks past the new end gone.
 * Caller holds in->lock. 0 or -EIO. */
int idx_journal_cut_locked(struct index *idx, struct inode *in, uint64_t c, uint64_t count);
/* Journal a file's growth: the residency of chunks [c, c+count) (past its
 * old end) and then its attributes (the new size), in one transaction, so
 * that no crash keeps a chunk without the size that covers it. A growth of
 * more chunks than one transaction holds goes in several, the size in the
 * last (a crash between them leaves chunks past EOF, which recovery drops).
 * Caller holds in->lock. 0 or -EIO. */
int idx_journal_grow_locked(struct index *idx, struct inode *in, uint64_t c, uint64_t count);

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
/* Recovery's verdicts (in->mark after reconciliation). */
#define IDX_MARK_LOST 2	   /* no byte left: its names are removed */
#define IDX_MARK_DAMAGED 3 /* some bytes left: moved to /lost+found as #<ino> */
/* Paths of every name of inodes marked IDX_MARK_LOST or IDX_MARK_DAMAGED
 * (one call per name; `moved`: where a damaged file went, NULL for a
 * removed name), then: the names of lost inodes are removed, a damaged
 * inode's first name is moved to /lost+found (made 0700 when missing) as
 * #<ino> and its other names removed (all journaled). Returns the number
 * of names removed or moved. */
uint64_t idx_remove_marked(struct index *idx,
			   void (*report)(void *arg, const char *path, struct inode *in,
					  const char *moved),
			   void *arg);

#endif
