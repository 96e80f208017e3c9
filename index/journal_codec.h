/*
 * journal_codec — the journal's record format: the record types (struct
 * jrec), the format's limits and the pure encode/decode calls
 * (journal_codec.c; the framing on disk: journal.h, "On disk"). Its own
 * header, out of journal.h, so the codec does not depend on the journal's
 * files and writer, which call it (tests/tools/tier_cycles.py on index/).
 * journal.h includes this.
 * Threading: none needed: pure functions over the caller's buffers.
 */
#ifndef SPW_JOURNAL_CODEC_H
#define SPW_JOURNAL_CODEC_H

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
	/* version 3: extents (tier/extent: the file's bytes in one file of a
	 * cold directory) */
	JR_EXTENT = 17,	    /* ino, ext: the file's extent (or none: JEXT_GONE) */
	JR_EXTENT_CRC = 18, /* ino, chunk = first block, value = u32 crc32c per JRNL_EXT_BLOCK */
	JR_TYPE_MAX = 18,
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

/* JR_EXTENT: extent `id` of the inode on cold directory `dev`; sealed
 * (JEXT_SEALED): the JR_EXTENT_CRC records before it hold the crc of each
 * JRNL_EXT_BLOCK of its `size` bytes; JEXT_GONE: the file has none now */
struct jrec_ext {
	uint64_t id, size;
	uint32_t dev, flags;
};
#define JEXT_SEALED 1u
#define JEXT_GONE 2u
#define JEXT_ALL (JEXT_SEALED | JEXT_GONE)
#define JRNL_EXT_BLOCK (64u << 10)
#define JRNL_EXT_CRCS_MAX 16384u /* crcs per JR_EXTENT_CRC record (64 KiB) */

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
	struct jrec_ext ext;
	struct jrec_hdr hdr;
	uint64_t next_ino, next_seg;
};

/* 2: JR_CHUNK_OVL and JR_CHUNK_PART; 3: JR_EXTENT and JR_EXTENT_CRC.
 * Files of versions 1 and 2 are read as they are (a subset); new files are
 * written as 3, which older daemons refuse. */
#define JRNL_VERSION 3
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

#endif
