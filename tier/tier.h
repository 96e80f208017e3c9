/*
 * THE HANDLE, tier/'s top: tier.c (tier_new/start/stop/free, unmount),
 * tier_io.c (reads, writes, truncate, fallocate, fsync, evict/warm/pin),
 * tier_open.c (opens, closes, passthrough); tier.h is what fs/ calls,
 * tier_i.h is struct tier and the rooms' internal calls. It uses every
 * room below it (the folders of tier/: README, "Architecture"); no room
 * uses it.
 */
/*
 * tier — the data path the fs layer calls: open/close, read and write
 * bracketing, truncate, fallocate, SEEK_DATA/HOLE, statfs, stats. It owns the
 * hot tier and (when configured) the evictor, cold stores and restore.
 * Guarantees: a chunk pinned by a read or write in flight is never evicted;
 * a write is only acknowledged once its bytes are in the hot file.
 * Threading: every call is thread-safe; callers hold no inode lock.
 */
#ifndef SPW_TIER_H
#define SPW_TIER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

struct spw_config;
struct index;
struct inode;
struct tier;

/* Chunks a read may answer from memory, piece by piece (a read of more
 * chunks than this goes through the hot file). */
#define TIER_IO_PIECES 4

/* One read or write in flight (caller-allocated, filled by *_begin). */
struct tier_io {
	int fd; /* hot file to read from / write into */
	uint64_t off, len;
	uint64_t first, last; /* chunk range pinned */
	int64_t reserved;     /* hot bytes reserved (writes) */
	uint64_t claimed;     /* bit i: chunk first+i was COLD, wholly overwritten */
	uint64_t over;	      /* writes: bit i: chunk first+i is written over its
			       * cold copy (overlay: tier/chain/chain.c) */
	uint64_t rest;	      /* reads: bit i: chunk first+i partly restored, the
			       * rest follows in tier_read_end (after the reply) */
	/* reads: the answer is iov[0..niov) (niov > 0: cold pieces read
	 * from their segments, verified, not in the hot file, and the hot
	 * file's pieces beside them read into buffers), valid until
	 * tier_read_end; else len bytes of fd at off */
	struct iovec iov[TIER_IO_PIECES];
	int niov;
	void *own[TIER_IO_PIECES]; /* reads: buffers freed by tier_read_end */
	int direct; /* reads: some chunk was read from its segment, not
		     * brought into RAM (tier/admit): no read-ahead */
	int promoted; /* reads: the reader re-reads: the admission filter let
		       * a chunk into RAM as re-read, or a read not near the
		       * handle's last one found its chunk in RAM (the
		       * caller's next reads: TIER_READ_AGAIN) */
	unsigned flags; /* writes: tier_write_begin's; reads: the TIER_READ_*
			 * flags the read was judged with */
	int ext;	/* the file's extent served it (tier/extent): nothing pinned */
};

/* tier_read_begin flags: the reader's pattern */
#define TIER_READ_RANDOM 1u /* it jumps about: a cold chunk is read
			     * directly, not restored */
#define TIER_READ_STREAM 2u /* it goes on from its last read: it waits for
			     * the blocks of chunks restored ahead of it */
#define TIER_READ_NEAR	 4u /* it starts near where the handle's last read
			     * ended (a stream's readahead, in any order):
			     * not a re-read for the admission filter */
#define TIER_READ_AGAIN	 8u /* the handle re-reads (a read of it was let into
			     * RAM: io->promoted): so does this read, of
			     * whatever was read before */

/* Page-cache invalidation, provided by the fs layer (FUSE notify). */
typedef void (*tier_inval_fn)(void *arg, uint64_t ino, uint64_t off, uint64_t len);

/* On failure, err gets a one-line reason naming the option at fault. */
int tier_new(const struct spw_config *cfg, struct index *idx, struct tier **out, char *err,
	     size_t errlen);
/* Start background threads (after daemonizing); stop them before the
 * index is freed. */
int tier_start(struct tier *t);
void tier_stop(struct tier *t);
void tier_free(struct tier *t);
void tier_set_inval(struct tier *t, tier_inval_fn fn, void *arg);

/*
 * Passthrough: an open may hand the file's hot file to the kernel, which
 * then reads and writes it itself (FUSE passthrough); no read of that open
 * reaches the daemon. The rules that keep every promise:
 * - Only a file whose data is all in RAM (no chunk COLD or RESTORING) is
 *   passed through, and only a read-only open, unless the file already has
 *   passthrough opens (below). A write through the daemon keeps the budget,
 *   write_wait and dirty tracking; the kernel gives the daemon no say over
 *   a passthrough write.
 * - The kernel serves an inode either through the daemon or passed through,
 *   never both: while a file has daemon opens, a new open goes through the
 *   daemon too; while it has passthrough opens, a new open is passed through
 *   too, writers included. Such a writer's writes never reach the daemon:
 *   every chunk of the file counts as dirty from its open until after its
 *   last close, and its size, mtime and RAM are read back from the hot file
 *   (tier_refresh, at getattr, fsync and close). The evictor leaves the
 *   file alone meanwhile (as if pinned).
 * - A file with passthrough opens is never punched: its chunks are not
 *   evictable (they count as unevictable, reason "passthrough") until the
 *   last such open closes; user.spillway.evict on it is EBUSY, as on a
 *   pinned file. Opens and closes count as accesses for the evictor.
 * - The kernel's own page cache of a file read or written through the
 *   daemon is dropped at the file's last close (the hot file holds the
 *   bytes): RAM holds one copy of a hot byte, not two.
 */
/* tier_open flags */
#define TIER_OPEN_WRITE 1u	 /* the open may write */
#define TIER_OPEN_PASSTHROUGH 2u /* the caller can pass the hot file to the kernel */
#define TIER_OPEN_CREATE 4u	 /* a create: passed through only to an extent it
				  * gets (tier/extent), else through the daemon */
#define TIER_OPEN_EXT 8u	 /* out: counted as an open of the file's extent */

/* How tier_open served an open: passthrough (backing_id > 0, the id the
 * kernel knows the hot file by) or through the daemon (backing_id 0). */
struct tier_open_out {
	int32_t backing_id;
	unsigned flags; /* the TIER_OPEN_* it was opened with: for tier_close */
};

/* Handing hot files to the kernel, provided by the fs layer (FUSE
 * passthrough). open returns the backing id (> 0) or -errno; both are called
 * with the inode's lock held and never wait for a FUSE request. ctx is the
 * caller's of tier_open / tier_close. */
struct tier_pt_ops {
	int (*open)(void *ctx, int fd);
	void (*close)(void *ctx, int32_t backing_id);
};
/* Enable passthrough (before the first open); without it every open goes
 * through the daemon. */
void tier_set_passthrough(struct tier *t, const struct tier_pt_ops *ops);

int tier_open(struct tier *t, struct inode *in, unsigned flags, void *ctx,
	      struct tier_open_out *out);
void tier_close(struct tier *t, struct inode *in, const struct tier_open_out *how, void *ctx);
/* A file with passthrough writers: read its size, mtime and RAM back from
 * its hot file. Cheap when it has none. */
void tier_refresh(struct tier *t, struct inode *in);

/* A read of a cold range waits only for the blocks it covers; the rest of
 * those chunks is restored by tier_read_end, which the caller calls once it
 * answered (it may take a chunk's restore time). With TIER_READ_RANDOM a
 * cold range within one chunk is read, verified and answered without
 * restoring anything: a random reader costs the blocks it reads, not a
 * chunk each. Without TIER_READ_STREAM, a range within a chunk that
 * another thread is restoring (restore=open's workers) is read from the
 * cold copy rather than waited for. A cold chunk the admission filter
 * (tier/admit) does not let into RAM is read from its segment into the
 * answer. The answer is io->iov when io->niov > 0, else io->len bytes of
 * io->fd at off. */
int tier_read_begin(struct tier *t, struct inode *in, uint64_t off, size_t len, unsigned flags,
		    struct tier_io *io);

/*
 * A handle's reads as the admission filter must see them: one after the
 * other in the order they are judged. The kernel sends a handle's
 * readahead as several requests that the daemon's threads take in any
 * order; a pattern noted before the inode's lock is taken (which request
 * came first, which go on near the last) may be judged in another order,
 * and a stream's first pages read after its next ones looked like a
 * re-read of them. So the caller's pattern() is asked under the lock,
 * right before the read's chunks are judged, and gives TIER_READ_* flags
 * (RANDOM, STREAM, NEAR) for [off, off + len); again is the handle's
 * memory that one of its reads was let into RAM as a re-read (its next
 * reads: TIER_READ_AGAIN), set under the same lock. Both under the
 * inode's lock: readers of one file are judged one at a time.
 */
struct tier_reader {
	unsigned (*pattern)(struct tier_reader *rd, uint64_t off, size_t len);
	int again;
};

/* tier_read_begin for rd's next read: its flags from rd->pattern (and
 * rd->again), noted under the inode's lock; io->how gives them back. */
int tier_read_begin_by(struct tier *t, struct inode *in, uint64_t off, size_t len,
		       struct tier_reader *rd, struct tier_io *io);
void tier_read_end(struct tier *t, struct inode *in, struct tier_io *io);
/* A sequential reader is at off: keep io_workers chunks after off's chunk
 * restoring ahead of it. *next_chunk (the caller's, per open file, start
 * at 0) is the first chunk not asked for yet. Never blocks on I/O. */
void tier_read_ahead(struct tier *t, struct inode *in, uint64_t off, uint64_t *next_chunk);
/* flags: TIER_WRITE_STREAM, the writer goes on from its last write: above
 * spill_threshold the file is written around (tier/admit) */
#define TIER_WRITE_STREAM 1u
int tier_write_begin(struct tier *t, struct inode *in, uint64_t off, size_t len, unsigned flags,
		     struct tier_io *io);
/* written: bytes the copy wrote, or -errno. Returns written or -errno. */
ssize_t tier_write_end(struct tier *t, struct inode *in, struct tier_io *io, ssize_t written);

int tier_truncate(struct tier *t, struct inode *in, uint64_t size);
int tier_fallocate(struct tier *t, struct inode *in, int mode, uint64_t off, uint64_t len);
/* SEEK_DATA / SEEK_HOLE: returns the offset or -errno (-ENXIO past EOF). */
int64_t tier_lseek(struct tier *t, struct inode *in, uint64_t off, int whence);
/* fsync: spill the file's dirty chunks (write-through) and sync the journal;
 * tier_sync: sync the journal only (fsyncdir). 0 or -errno. */
int tier_fsync(struct tier *t, struct inode *in);
int tier_sync(struct tier *t);
/* Clean unmount, after the FUSE session is gone and tier_stop, before the
 * index is freed. With a journal: spill every dirty chunk to the cold tier
 * (unless keep_hot, or no cold tier, or the cold tier is failing), write a
 * last checkpoint, and remove every hot file whose data is all cold, so the
 * RAM goes back to the node; what could not be spilled keeps its hot file
 * for the next mount. Bounded by the cold tier's write time (S3: its request
 * bounds). Without a journal the index drops every hot file as it is freed. */
void tier_detach(struct tier *t);

/* Residency of one file, e.g. "hot=3 cold=9 restoring=0 pinned=0 segments=2". */
int tier_file_state(struct tier *t, struct inode *in, char *buf, size_t len);
int tier_pin(struct tier *t, struct inode *in, int pin);
int tier_evict_file(struct tier *t, struct inode *in);
int tier_warm_file(struct tier *t, struct inode *in);
/* Whole-tier statistics as one JSON object. Returns length or -errno. */
int tier_stats_json(struct tier *t, char *buf, size_t len);
/* The online scrub of every sealed extent (tier/extent/scrub.h): start a
 * run (limit: bytes/s, 0 none; -EBUSY while one runs), cancel it, and its
 * status as one JSON object (snprintf rules). */
int tier_scrub_start(struct tier *t, uint64_t limit);
int tier_scrub_cancel(struct tier *t);
int tier_scrub_json(struct tier *t, char *buf, size_t len);
/* A FUSE request named `op` (a static string) took ns in the daemon: keep
 * the slowest for the stats. Thread-safe. */
void tier_note_request(struct tier *t, const char *op, uint64_t ns);
void tier_statfs(struct tier *t, uint64_t *total, uint64_t *avail);

#endif
