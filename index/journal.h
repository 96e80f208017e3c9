/*
 * journal — the durable record of the index, in state_dir: an append-only log
 * of metadata changes plus periodic checkpoints (full snapshots).
 * Guarantees: jrnl_append returns only once the record is in the kernel (a
 * daemon crash keeps it); jrnl_sync returns once every record appended
 * before it is on stable storage. A failed write or fdatasync turns the
 * journal read-only for good: every later append and sync returns -EIO.
 * Recovery replays the newest valid checkpoint and the journals after it up
 * to the first bad record (a torn tail is cut off, never fatal).
 * Threading: append, sync and checkpoint are thread-safe; open, recover,
 * start and close are not (one caller, before/after the others).
 *
 * On disk (all integers little-endian):
 *   record   = [u32 len][u32 crc32c][u8 type][payload]; len counts type and
 *              payload, crc covers len, type and payload.
 *   JR_TX    = payload is a sequence of [u32 len][u8 type][payload] applied
 *              together (a rename is one TX: both names or neither).
 *   journal.<gen> = JR_HEADER(kind journal) then records;
 *   checkpoint.<gen> = JR_HEADER(kind checkpoint), records, JR_END(count).
 *   checkpoint.<gen> holds everything before journal.<gen> started.
 */
#ifndef SPW_JOURNAL_H
#define SPW_JOURNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "index/chunk_loc.h"

enum jrec_type {
	JR_HEADER = 1,	 /* hdr */
	JR_END = 2,	 /* count: records before it in the checkpoint */
	JR_META = 3,	 /* counters: next_ino, next_seg */
	JR_INODE = 4,	 /* ino, attr, name = symlink target (may be empty) */
	JR_LINK = 5,	 /* parent, name -> ino (replaces an existing entry) */
	JR_UNLINK = 6,	 /* parent, name */
	JR_XATTR_SET = 7, /* ino, name, value */
	JR_XATTR_DEL = 8, /* ino, name */
	JR_CHUNK_LOC = 9, /* ino, chunk, loc: clean copy in a segment */
	JR_CHUNK_DIRTY = 10, /* ino, chunk: newest bytes only in RAM */
	JR_CHUNK_ABSENT = 11, /* ino, chunk, count: chunks [chunk, chunk+count) are holes */
	JR_SEG_ADD = 12,      /* seg: segment durable (or moved: same id, new store/dev) */
	JR_SEG_DEL = 13,      /* seg.id */
	JR_TX = 14,	      /* internal: several records at once (see top) */
	/* version 2: overlays (index.h, struct chunk_chain) */
	JR_CHUNK_OVL = 15, /* ino, chunk, loc, value = block bitmap: a record over the chunk's chain */
	JR_CHUNK_PART = 16, /* ino, chunk: blocks written over the chain only in RAM (chain kept) */
	JR_TYPE_MAX = 16,
};

#define JRNL_KIND_JOURNAL 1
#define JRNL_KIND_CHECKPOINT 2
#define JRNL_MAX_RECORD (1u << 20) /* largest len accepted when reading */

/*
 * Format limits. The decoder rejects a record outside them as a bad record
 * (replay stops there, as for a bad crc); nothing is allocated for it.
 * The filesystem refuses to grow a file past JRNL_MAX_FILE_SIZE (EFBIG), so
 * a record it wrote always fits. jrnl_recover also bounds chunk indexes by
 * the state's own chunk_size (JRNL_MAX_FILE_SIZE / chunk_size).
 */
#define JRNL_MAX_FILE_SIZE (1ull << 44) /* 16 TiB */
#define JRNL_MIN_CHUNK_SIZE (1ull << 20)
#define JRNL_MAX_CHUNK_SIZE (64ull << 20)
#define JRNL_MAX_CHUNKS (JRNL_MAX_FILE_SIZE / JRNL_MIN_CHUNK_SIZE) /* chunk < this */
#define JRNL_MAX_SEG_ID ((1ull << 32) - 1) /* segment ids are 1..this */
/* a chunk's record in a segment: its bytes plus (format v2) its map of
 * extents and block crcs, well under 1 MiB even for a 64 MiB chunk */
#define JRNL_MAX_LOC_LEN (JRNL_MAX_CHUNK_SIZE + (1ull << 20))

struct jrec_attr {
	uint32_t mode, uid, gid;
	uint64_t rdev, size;
	int64_t atime_ns, mtime_ns, ctime_ns; /* ns since the epoch */
};

struct jrec_seg {
	uint64_t id, len, payload;
	uint32_t dev;
	uint8_t store; /* 0: first cold tier, 1: s3 below nvme */
};

struct jrec_hdr {
	uint32_t version; /* JRNL_VERSION */
	uint32_t kind;	  /* JRNL_KIND_* */
	uint64_t gen;
	uint64_t chunk_size;
	uint8_t uuid[16]; /* the filesystem's id (also names its S3 objects) */
};

/* One decoded record. Pointers (name, value) point into the buffer the
 * record was decoded from: valid only as long as it is. */
struct jrec {
	uint8_t type;
	uint64_t ino, parent, chunk, count;
	const char *name; /* not NUL-terminated */
	uint32_t name_len;
	const void *value;
	uint32_t value_len;
	struct jrec_attr attr;
	struct chunk_loc loc; /* on the wire: seg_id u64, dev | flags << 16 */
	struct jrec_seg seg;
	struct jrec_hdr hdr;
	uint64_t next_ino, next_seg;
};

/* 2: JR_CHUNK_OVL and JR_CHUNK_PART. Files of version 1 are read as they
 * are (a subset); new files are written as 2, which older daemons refuse. */
#define JRNL_VERSION 2
#define JRNL_VERSION_MIN 1
/* An overlay's bitmap: one bit per JRNL_OVL_BLOCK bytes of its chunk. */
#define JRNL_OVL_BLOCK 4096u
#define JRNL_MAX_OVL_BITMAP (JRNL_MAX_CHUNK_SIZE / JRNL_OVL_BLOCK / 8)

/* ---- codec (pure functions, for the journal, fsck and tests) ---- */

/* Bytes jrnl_encode needs for r (framing included). */
size_t jrnl_encoded_size(const struct jrec *r);
/* Encode r (not JR_TX) with framing into buf (jrnl_encoded_size bytes). */
size_t jrnl_encode(const struct jrec *r, uint8_t *buf);
/* Encode n records as one JR_TX record (or as a plain record when n == 1).
 * Returns a malloc'ed buffer (caller frees) and its size in *len, or NULL. */
uint8_t *jrnl_encode_tx(const struct jrec *rs, int n, size_t *len);
/*
 * Decode the framed record at buf[0..avail). Returns its framed size (> 0)
 * and fills r, 0 when avail is too short for the record its length claims
 * (a torn tail), or -EBADMSG (bad crc, length or payload, or a field past
 * the format limits above).
 */
ssize_t jrnl_decode(const uint8_t *buf, size_t avail, struct jrec *r);
/* For a JR_TX record decoded by jrnl_decode: call fn for each inner record
 * (plain records: fn once). Stops at fn's nonzero return, which it returns;
 * -EBADMSG on a malformed TX. */
typedef int (*jrnl_rec_fn)(void *arg, const struct jrec *r);
int jrnl_for_each_in(const uint8_t *framed, size_t framed_len, const struct jrec *outer,
		     jrnl_rec_fn fn, void *arg);
/* Does decoded record r (not JR_TX) fit a filesystem of this chunk_size?
 * (chunk indexes and counts below JRNL_MAX_FILE_SIZE / chunk_size) */
int jrnl_rec_fits(const struct jrec *r, uint64_t chunk_size);

/* ---- files ---- */

/* State file names, spelled here only: "journal.<gen>" (kind
 * JRNL_KIND_JOURNAL) and "checkpoint.<gen>" (JRNL_KIND_CHECKPOINT), gen as
 * 16 lowercase hex digits. jrnl_parse_name: 1 and *kind, *gen for such a
 * name, else 0. jrnl_list_files: the generations of one kind in dir,
 * ascending, malloc'ed (caller frees; NULL when none). 0 or -errno. */
#define JRNL_NAME_MAX 32
void jrnl_file_name(char *buf, size_t len, int kind, uint64_t gen);
int jrnl_parse_name(const char *name, int *kind, uint64_t *gen);
int jrnl_list_files(const char *dir, int kind, uint64_t **gens, size_t *n);

struct journal;

struct jrnl_config {
	const char *dir;	   /* state_dir (created 0700 if missing) */
	uint64_t sync_ms;	   /* group commit period; 0: sync on every append */
	uint64_t checkpoint_bytes; /* journal size that triggers a checkpoint */
	uint64_t chunk_size;	   /* must match a recovered state */
	const char *mountpoint;	   /* written into the lock file (NULL: fsck) */
};

/* Open (create) state_dir and lock it, waiting for a daemon that is
 * finishing its unmount (common/lockwait.h). -EBUSY when another daemon (or
 * fsck) holds it. On failure, err gets a one-line reason. */
int jrnl_open(const struct jrnl_config *cfg, struct journal **out, char *err, size_t errlen);

struct jrnl_recovery {
	int fresh;		 /* 1: nothing to recover, a new filesystem */
	uint64_t checkpoint_gen; /* checkpoint loaded */
	uint64_t journals;	 /* journal files replayed */
	uint64_t records;	 /* records applied (checkpoint + journals) */
	uint64_t truncated;	 /* bytes of torn or bad tail dropped */
	uint8_t uuid[16];
};

/*
 * Load the newest valid checkpoint and replay the journals after it,
 * calling fn for every record in order (TX records expanded). On a fresh
 * state_dir nothing is called and info->fresh is set. A nonzero return of fn
 * aborts (returned). Then the journal is ready for appends: the torn tail
 * is cut, or a new checkpoint is due (see jrnl_start).
 */
int jrnl_recover(struct journal *j, jrnl_rec_fn fn, void *arg, struct jrnl_recovery *info,
		 char *err, size_t errlen);

/* The snapshot a checkpoint writes: emit every record of the live state
 * (JR_META first) with jrnl_emit. Runs on the journal's thread while
 * appends continue (records appended meanwhile are replayed over it, and
 * every record sets a value, so replaying them again is harmless). */
struct jrnl_emitter;
typedef int (*jrnl_snapshot_fn)(void *arg, struct jrnl_emitter *e);
int jrnl_emit(struct jrnl_emitter *e, const struct jrec *r);

/* Start appending (after jrnl_recover) and the group-commit thread. A fresh
 * or messy state (several journals, a bad record before the end) gets a
 * checkpoint now. */
int jrnl_start(struct journal *j, jrnl_snapshot_fn snap, void *arg);
/* The same in two steps, for a daemon that forks between recovery and
 * serving (threads do not survive fork()): appends may go on after
 * jrnl_start_appends, group commits start with jrnl_run (a no-op when
 * running). Until then changes reach the disk on fsync and at close. */
int jrnl_start_appends(struct journal *j, jrnl_snapshot_fn snap, void *arg);
int jrnl_run(struct journal *j);

/* Called after each checkpoint is committed (on the thread that wrote it),
 * with its generation: e.g. to copy checkpoint.<gen> off the machine. */
typedef void (*jrnl_checkpoint_fn)(void *arg, uint64_t gen);
void jrnl_set_on_checkpoint(struct journal *j, jrnl_checkpoint_fn fn, void *arg);
/* Generation of the current journal file (journal.<gen>) and its size. */
void jrnl_position(struct journal *j, uint64_t *gen, uint64_t *size);

/* Append one record, or n as one transaction. 0 or -EIO (read-only). */
int jrnl_append(struct journal *j, const struct jrec *r);
int jrnl_append_tx(struct journal *j, const struct jrec *rs, int n);
/* Make every record appended so far durable (group commit). 0 or -EIO. */
int jrnl_sync(struct journal *j);
/* Write a checkpoint now and start a new journal. 0 or -errno. */
int jrnl_checkpoint(struct journal *j);
/* Write checkpoint.<gen> of uuid (and the journal's chunk size) from snap,
 * atomically: a tmp file, fsync, rename, fsync of the directory. What
 * jrnl_checkpoint does after rotating; offline tools call it when no
 * checkpoint was recovered (the journal cannot start). Starts no journal,
 * prunes nothing. 0 or -errno (logged). */
int jrnl_write_checkpoint(struct journal *j, uint64_t gen, const uint8_t uuid[16],
			  jrnl_snapshot_fn snap, void *arg);
/* Read-only after a failure? (then every append and sync returns -EIO) */
int jrnl_failed(const struct journal *j);
const uint8_t *jrnl_uuid(const struct journal *j);
const char *jrnl_dir(const struct journal *j);
/* Bytes in the current journal file, and checkpoints written. */
void jrnl_stats(const struct journal *j, uint64_t *journal_bytes, uint64_t *checkpoints,
		uint64_t *syncs);
/* Stop the thread; with `final`, write a last checkpoint (clean unmount).
 * Then unlock and free. */
void jrnl_close(struct journal *j, int final);

#endif
