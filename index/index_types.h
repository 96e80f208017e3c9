/*
 * index_types — the index's in-memory types that every file of index/ and
 * its users share: a chunk (struct chunk, its states and its overlay chain),
 * an inode (struct inode) and their inline helpers, and the hooks'
 * function types. Moved out of index.h so that index_chain.c (which
 * index.c calls) can see them without depending on index.c's header: the
 * two made a circle (tests/tools/tier_cycles.py on index/). index.h
 * includes this; nothing here is a call.
 * Threading: as index.h says (each inode's lock guards its chunk map).
 */
#ifndef SPW_INDEX_TYPES_H
#define SPW_INDEX_TYPES_H

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
	 * (tier/spill/evict.c), or a slow reader would restore it twice */
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
	uint16_t wr;	 /* writes in flight into the chunk (tier/chain/chain.c) */
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

/*
 * An extent (tier/extent, DESIGN section 16): all of a regular file's bytes
 * in one file of a cold directory, at their own offsets. A file with one has
 * no chunks (nchunks 0); its size is the extent's. Journaled (JR_EXTENT,
 * JR_EXTENT_CRC) as id, dev, size and, once sealed, one crc32c per
 * JRNL_EXT_BLOCK; fd and wgen are the tier's. Under the inode lock.
 */
struct idx_ext {
	uint64_t id;	 /* with the inode, names its file: extents/<ino>-<id> */
	uint64_t size;	 /* sealed: the bytes the crcs cover */
	uint32_t dev;	 /* the cold directory (its place in nvme=) */
	uint32_t sealed; /* crc[0..ncrc) cover size bytes */
	uint32_t ncrc;	 /* crcs held (replay: set so far) */
	uint32_t *crc;
	int fd;		 /* tier/extent: the open file, -1 none */
	uint32_t wgen;	 /* tier/extent: bumped by every change (a seal compares) */
	uint32_t opens;	 /* tier/extent: opens now, and writers among them */
	uint32_t writers;
	int64_t seen_mt, seen_ct; /* tier/extent: the extent's times last taken */
	int32_t wb_err;		  /* tier/extent: a writeback error a seal's sync took, owed
				   * to the next fsync (errseq reports it to one sync only) */
	uint64_t used;		  /* tier/extent: idx_tick of its last open or seal (0: none
				   * since the mount), what demotion orders by */
	uint32_t bad_wgen;	  /* tier/extent: wgen + 1 when demotion found a block
				   * failing its crc (0: never): not picked again */
};

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
	/* hot tier state, owned by tier/hot/hot.c */
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
	uint32_t mark : 2;	 /* recovery only: reachable / lost (IDX_MARK_*) */
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
	struct idx_ext *ext; /* regular files: the extent holding all its bytes, or NULL */
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

/* Called (without locks held) when an inode is destroyed: drop its data. */
typedef void (*idx_release_fn)(void *arg, struct inode *ino);

struct idx_anomaly;
/* For IDX_AN_UNREACHABLE a nonzero return keeps the inode (and the names
 * inside it) instead of dropping it: nlink 0, so checkpoints leave it out,
 * until a later idx_replay_finish finds it reachable. Ignored otherwise. */
typedef int (*idx_anomaly_fn)(void *arg, const struct idx_anomaly *a);

/* Chains (index_chain.c). Words of a bitmap of a chain of chunk_size. */
static inline uint32_t chain_words(uint64_t chunk_size)
{
	return (uint32_t)((chunk_size / CHAIN_BLK + 63) / 64);
}
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

#endif
