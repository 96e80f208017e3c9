/*
 * ROOM tier/segment/ (library spw_segment): the segment format and what
 * reads it without a tier: segment.c (header, footer, map cache, buffers),
 * segment_write.c, segment_fd.c, segment_read.c, segment_into.c, the
 * segment table (segtab.h) and STATE_DIR/tiers (tiers_file.h). Uses only
 * store/, index/ and common/: spillway-fsck and the fuzzers link it alone.
 * Guarantees: every byte a reader returns is verified. Threading: below.
 */
/*
 * segment — the self-describing segment format, its writer and its readers.
 * A writer streams header, chunk records and footer to a store, through a
 * 4 MiB aligned staging buffer for what is small or unaligned and straight
 * from the caller's memory (the hot file's pages, an aligned buffer) for
 * the 4 KiB-aligned data of large records (format v3); readers verify every
 * byte they return (header crc, footer crc, record maps, per-block crc32c)
 * and report an error with a log line naming the segment and offset on any
 * mismatch or short read. Readers take all three format versions; the
 * writer writes v3. docs/segments.md tells the format's story.
 * Threading: a seg_writer is used by one thread at a time; the readers and
 * the encode/decode functions are pure or use only the (thread-safe) store.
 *
 * Wire format, version 3 (the writer's), all integers little-endian:
 *   header, bytes [0, 4096):
 *     0   u8[8]  magic "SPWSEG01"
 *     8   u32    format version (3; 2 and 1 for old segments, see below)
 *     12  u32    flags (0)
 *     16  u8[16] filesystem uuid
 *     32  u64    segment id
 *     40  ...    zero
 *     4092 u32   crc32c of bytes [0, 4092)
 *   data, from 4096: chunk records back to back, two kinds of placement:
 *     dense: a record whose data (below) is at most SEG_DENSE_MAX (64 KiB,
 *       one block) bytes starts at the next multiple of SEG_REC_ALIGN (8);
 *       small objects cost their size (they are read whole anyway).
 *     aligned: every other record starts at the next multiple of SEG_ALIGN
 *       (4 KiB), and its data extents are 4 KiB-granular: each extent's
 *       chunk offset is a multiple of 4096, and so is its length, except
 *       for an extent that ends at the chunk's length. So the data of
 *       extent i starts 4 KiB-aligned in the segment as in the chunk, and
 *       a block-aligned range of it moves with O_DIRECT between the segment
 *       and any page-aligned memory that holds the chunk (a mapping of the
 *       hot file, a reply buffer) with no copy. The writer widens finer
 *       extents to whole pages (the bytes added are the chunk's: zeros in
 *       its holes); tmpfs extents are whole pages already.
 *     The bytes between records (< 8, or < 4096 before an aligned record)
 *     are padding, covered by no crc and meaning nothing; so are the bytes
 *     of a record the writer gave up on (its entry is not in the footer).
 *     A record is one of:
 *     plain (entry flag LOC_F_MAP clear): the chunk is one data extent that
 *       starts at chunk offset 0 and is at most SEG_BLOCK bytes long; the
 *       record is those bytes, nothing else; the entry's crc is their
 *       crc32c (so it is also the crc of the record's only block). Always
 *       dense.
 *     mapped (LOC_F_MAP set): every other chunk (bigger than a block, or
 *       sparse, or no data at all):
 *         data   the bytes of the chunk's data extents, back to back
 *         map    u32[2] (chunk offset, length) per extent, ascending, not
 *                  overlapping, none empty (holes are what no extent covers)
 *                u32 crc32c per block of data: block i is data bytes
 *                  [i * block size, (i + 1) * block size), the last short
 *                u32 extent count, u32 data length, u32 block size
 *                u32 crc32c of the map before this field
 *       The map sits behind the data so the writer can stream a chunk
 *       through and emit the block crcs after; a reader finds it from the
 *       record's end (the last 16 bytes give its length). The entry's crc
 *       is the map's crc. Dense when the data is at most SEG_DENSE_MAX
 *       bytes, else aligned.
 *     The index keeps (offset, record length, crc, LOC_F_MAP) per chunk:
 *     enough to read a plain record, or the map and then any of its blocks.
 *     Nothing in the index says "aligned": a reader that wants to read
 *     straight into its memory checks the record's offset and its map
 *     (seg_read_into), so an old record that happens to be aligned is read
 *     the same way.
 *   footer, the last footer_len bytes, starting right after the last
 *   record (or at 4096), so that the segment length is a multiple of 4096:
 *     zero padding (< 4096 bytes)
 *     entries, SEG_ENTRY_SIZE (44) bytes each:
 *       u64 ino, u64 chunk index, u32 generation, u32 flags (LOC_F_MAP,
 *       SEG_F_OVL), u64 record offset within the segment, u32 record
 *       length, u32 crc (above), u32 chunk length (its bytes in the file,
 *       holes included: --rebuild sizes files from it)
 *     u32 count
 *     u32 footer crc32c over [footer start, here): the padding, entries, count
 *     u32 footer_len (padding + entries + trailer)
 *     u8[8] magic "SPWFOOT3"
 *
 * Block size: SEG_BLOCK = 64 KiB. A read from the middle of a chunk fetches
 * and verifies whole blocks: at 64 KiB that is one NVMe request of about
 * the device's optimal size (latency is flat up to ~64-128 KiB) and one S3
 * range that costs no more than a 4 KiB one, and crc32c of it takes ~5 us,
 * while the crcs cost 4 bytes per 64 KiB (64 per 4 MiB chunk, 0.006 %).
 * Records up to one block (every object under 64 KiB) need no map at all.
 * Padding: an aligned record wastes < 4 KiB before it (< 0.1 % of a 4 MiB
 * chunk); dense records waste < 8 bytes.
 *
 * Version 2 (still read, never written): the same records and footer
 * (magic "SPWFOOT2"), every record dense (on 8 bytes), extents as tmpfs
 * gave them. Its records read exactly like v3's; one that happens to start
 * on 4 KiB with whole-page extents (the first of each segment) is read
 * straight into memory too.
 *
 * Version 1 (still read, never written): records ("payloads") each start at
 * a 4 KiB-aligned offset and hold the whole chunk from offset 0, holes as
 * zeros; one crc32c per record; entries are 40 bytes: u64 ino, u64 chunk,
 * u64 generation, u32 length, u64 offset, u32 crc32c; footer magic
 * "SPWFOOT1". A v1 record reads exactly like a plain record of any length
 * (one crc over the whole record), so index locations of v1 chunks (no
 * LOC_F_MAP) keep their meaning.
 */
#ifndef SPW_SEGMENT_H
#define SPW_SEGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "index/chunk_loc.h"
#include "tier/store/store.h"

#define SEG_ALIGN	    4096u
#define SEG_HDR_SIZE	    4096u
#define SEG_VERSION	    3u		 /* written; 1, 2 and 3 are read */
#define SEG_REC_ALIGN	    8u		 /* dense record offsets (v2: all records) */
#define SEG_BLOCK	    (64u << 10) /* bytes per block crc (v2, v3) */
#define SEG_DENSE_MAX	    SEG_BLOCK	 /* v3: records with more data start on SEG_ALIGN */
#define SEG_ENTRY_SIZE	    44u		 /* v2/v3 footer entry */
#define SEG_ENTRY_SIZE_V1   40u
#define SEG_TRAILER_SIZE    20u	       /* count, crc, footer_len, magic */
#define SEG_MAP_TAIL	    16u	       /* extent count, data length, block size, crc */
#define SEG_MAX_EXTENTS	    4096u      /* per record; the writer merges beyond */
#define SEG_STAGE_SIZE	    (4u << 20) /* writer's staging buffer */
#define SEG_FOOTER_MAX	    (256u << 20) /* readers refuse larger footers */
#define SEG_MAX_CHUNK_LEN   (1u << 30)	 /* longest chunk add() takes */

/* entry flags: LOC_F_MAP (index/chunk_loc.h), the record is data + extent
 * map (v2), the same bit in a footer, the index and the journal; and
 * SEG_F_OVL, an overlay (tier/chain/chain.c): the record holds only the blocks
 * its chunk's journal names, over older records; not a copy of the chunk */
#define SEG_F_OVL 2u
#define SEG_F_ALL (LOC_F_MAP | SEG_F_OVL)

/* One data extent of a chunk: bytes [off, off + len) of the chunk. */
struct seg_extent {
	uint32_t off, len;
};

struct seg_entry {
	uint64_t ino, chunk, gen;
	uint64_t off;	   /* record offset within the segment (v1: 4 KiB-aligned) */
	uint32_t len;	   /* record bytes stored (live/payload accounting counts these) */
	uint32_t crc;	   /* plain: crc32c of the record; mapped: the map's crc */
	uint32_t flags;	   /* LOC_F_MAP, SEG_F_OVL */
	uint32_t chunk_len; /* the chunk's length in its file, holes included */
};

/* The only conversions between a footer entry and a chunk's location:
 * where entry e's record lies once its segment seg is on device dev (what
 * the index keeps: LOC_F_MAP; SEG_F_OVL is the footer's), and the entry
 * that reads record l of chunk `chunk` of inode ino (seg_read_*; its
 * chunk_len is not the location's to know: 0). */
static inline struct chunk_loc seg_entry_loc(const struct seg_entry *e, uint64_t seg, uint32_t dev)
{
	return (struct chunk_loc){.seg_id = (uint32_t)seg,
				  .off = e->off,
				  .len = e->len,
				  .crc = e->crc,
				  .gen = (uint32_t)e->gen,
				  .dev = (uint16_t)dev,
				  .flags = (uint16_t)(e->flags & LOC_F_MAP)};
}
static inline struct seg_entry seg_loc_entry(uint64_t ino, uint64_t chunk,
					     const struct chunk_loc *l)
{
	return (struct seg_entry){.ino = ino,
				  .chunk = chunk,
				  .gen = l->gen,
				  .off = l->off,
				  .len = l->len,
				  .crc = l->crc,
				  .flags = l->flags & LOC_F_MAP};
}

/* ---- pure encode/decode (no I/O) ---- */

/* A header of the writer's version (SEG_VERSION). */
void seg_header_encode(uint8_t buf[SEG_HDR_SIZE], const uint8_t uuid[16], uint64_t seg_id);
/* 0, -EIO (bad magic or crc), -ENOTSUP (valid header of another version).
 * version may be NULL. */
int seg_header_decode(const uint8_t buf[SEG_HDR_SIZE], uint8_t uuid[16], uint64_t *seg_id,
		      uint32_t *version);

/* Footer length for n (v2/v3) entries after a body (header + records) of body_end bytes. */
uint32_t seg_footer_len(uint64_t body_end, uint32_t n);
/* Write the footer of the writer's version, footer_len =
 * seg_footer_len(body_end, n) bytes, into buf. */
void seg_footer_encode(uint8_t *buf, uint32_t footer_len, const struct seg_entry *e, uint32_t n);
/*
 * From the last SEG_TRAILER_SIZE bytes of a segment of seg_len bytes, get the
 * footer length (checked against seg_len and SEG_FOOTER_MAX) and the format
 * version its magic names (version may be NULL). 0 or -EIO.
 */
int seg_trailer_decode(const uint8_t tail[SEG_TRAILER_SIZE], uint64_t seg_len,
		       uint32_t *footer_len, uint32_t *version);
/*
 * Verify and parse a whole footer of format version (1, 2 or 3; the last
 * footer_len bytes of a segment of seg_len bytes): crc, count, and that each
 * entry lies inside the data area at an offset aligned for its version.
 * v1 entries decode with flags 0 and chunk_len = len. On success *entries
 * is malloc'ed (caller frees; NULL when n == 0). 0, -EIO, or -ENOMEM.
 */
int seg_footer_decode(const uint8_t *footer, uint32_t footer_len, uint64_t seg_len,
		      uint32_t version, struct seg_entry **entries, uint32_t *n);

/* ---- writer ---- */

struct seg_writer;

/*
 * Start segment seg_id on st: put_begin (which picks the device) with
 * size_hint (expected segment bytes, 0 = unknown), header staged.
 * Caller owns *out: end it with seg_writer_finish() or seg_writer_abort().
 */
int seg_writer_new(struct store *st, const uint8_t uuid[16], uint64_t seg_id, uint64_t size_hint,
		   struct seg_writer **out);
/*
 * Append chunk (ino, chunk, gen) of chunk_len bytes whose data extents are
 * ext[0..next) (ascending, not overlapping, none empty, inside chunk_len;
 * next <= SEG_MAX_EXTENTS, 0 for a chunk of holes only) and whose extent
 * bytes are data, back to back. Plain record when it can be, else mapped;
 * dense or aligned by its data length (above). *entry_out (may be NULL)
 * gets its entry. 0, -EINVAL, -E2BIG (footer full), -ENOMEM or a store
 * -errno; after a store error the writer is only good for
 * seg_writer_abort().
 * No copy (the write-around path): when data is 4 KiB-aligned, the extents
 * are 4 KiB-granular (every offset a multiple of 4096, every length too
 * but for an extent that ends at chunk_len), the record is aligned (more
 * than SEG_DENSE_MAX bytes of data) and the store takes the caller's
 * memory (put_window NULL: nvme), the data is appended straight from data
 * (O_DIRECT), its block crcs taken there, and only a last partial page is
 * copied (into the stage, beside the map). data must then stay unchanged
 * during the call (the write is done when it returns). Anything else goes
 * through the stage (one copy, as before).
 */
int seg_writer_add_extents(struct seg_writer *w, uint64_t ino, uint64_t chunk, uint64_t gen,
			   uint32_t chunk_len, const struct seg_extent *ext, uint32_t next,
			   const void *data, struct seg_entry *entry_out);
/* A chunk that is all data: len (1..SEG_MAX_CHUNK_LEN) bytes from offset
 * 0 (add_extents with one extent: the same no-copy rule). */
int seg_writer_add(struct seg_writer *w, uint64_t ino, uint64_t chunk, uint64_t gen,
		   const void *data, uint32_t len, struct seg_entry *entry_out);

/*
 * What the caller of seg_writer_add_fd says about the chunk's bytes once
 * they were written straight from the hot file's pages (a write racing the
 * spill may change them after their crcs were taken). fn(arg) is called
 * after the record's bytes are in the segment, with the mapping still held,
 * and returns:
 *   SEG_FD_OK      nothing can have written the chunk meanwhile (no write
 *                  in flight, generation unchanged): the record stands;
 *   SEG_FD_RECHECK a write may be in flight: the pages are hashed again
 *                  and the record stands only if every crc still matches;
 *   SEG_FD_STALE   the chunk was written meanwhile: the record is dropped.
 * A dropped record's bytes stay as padding and it gets no footer entry (so
 * neither fsck nor --rebuild ever sees bytes that may not match their crc);
 * add_fd then returns -ESTALE.
 */
enum { SEG_FD_OK = 0, SEG_FD_RECHECK = 1, SEG_FD_STALE = 2 };
struct seg_fd_check {
	int (*fn)(void *arg);
	void *arg;
};

/*
 * A chunk of len bytes at fd_off of fd (the hot file): its data extents are
 * found with SEEK_DATA/SEEK_HOLE (holes are not stored; above
 * SEG_MAX_EXTENTS the smallest holes are stored as data; a file spilled
 * chunk after chunk is walked once, see segment_write.c).
 * No bounce: when the record is aligned, fd_off is page-aligned and the
 * store takes the caller's memory (nvme), the extents are mapped
 * (read-only MAP_SHARED, only the data extents touched: a fault on a tmpfs
 * hole would allocate a page), hashed and appended straight from the hot
 * file's pages; check (may be NULL: SEG_FD_OK) then decides whether the
 * record stands. THE CALLER MUST KEEP [fd_off, fd_off + len) FROM BEING
 * TRUNCATED during the call: touching a mapped page past EOF is SIGBUS
 * (spill.c: spill_wait_mapped_locked). Otherwise (S3's part buffers, an
 * unaligned offset, a dense record, no mapping) the bytes are read (pread:
 * no page is allocated) into the stage and hashed there, as in v2, and
 * check is not called (the crcs are of the bytes written).
 * If fd is shorter than fd_off + len (truncated before the call), yields
 * fewer bytes, or fails, returns -ENODATA or that -errno, records nothing,
 * and the writer stays usable (the bytes copied become padding); -ESTALE
 * as above.
 */
int seg_writer_add_fd(struct seg_writer *w, uint64_t ino, uint64_t chunk, uint64_t gen, int fd,
		      uint64_t fd_off, uint32_t len, const struct seg_fd_check *check,
		      struct seg_entry *entry_out);
/* The same with the extents given (an overlay's dirty blocks, tier/chain/chain.c)
 * instead of found: ext as for seg_writer_add_extents, relative to fd_off. */
int seg_writer_add_fd_ext(struct seg_writer *w, uint64_t ino, uint64_t chunk, uint64_t gen,
			  int fd, uint64_t fd_off, uint32_t chunk_len, const struct seg_extent *ext,
			  uint32_t next, const struct seg_fd_check *check,
			  struct seg_entry *entry_out);
/* The record added last is an overlay (SEG_F_OVL in its footer entry). */
void seg_writer_mark_overlay(struct seg_writer *w);
/* Segment bytes so far (header, records, padding; no footer). */
uint64_t seg_writer_bytes(const struct seg_writer *w);
/* Entries recorded so far. */
uint32_t seg_writer_count(const struct seg_writer *w);
/* Bytes appended straight from the caller's memory by this writer so far
 * (no copy), and bytes staged (copied): tests and benchmarks. */
void seg_writer_moved(const struct seg_writer *w, uint64_t *direct, uint64_t *staged);
/*
 * Length of a v3 segment holding records of the given lengths (rec_len)
 * whose data is data_len bytes (which places them: dense or aligned), in
 * order. GC uses it to compact only what shrinks. Pure.
 */
uint64_t seg_v3_len(const uint32_t *rec_len, const uint32_t *data_len, uint32_t n);
/* A record's length and data length once rewritten in v3 (GC's estimate
 * from a footer entry of any version: a v1 payload longer than a block
 * gains a map; a map's size is taken as one extent's). */
void seg_v3_rec_size(const struct seg_entry *e, uint32_t *rec_len, uint32_t *data_len);
/*
 * Write the footer and make the segment durable (put_finish). *dev gets the
 * device, *seg_len the segment length (either may be NULL). Frees w always;
 * on failure nothing of the segment remains in the store.
 */
int seg_writer_finish(struct seg_writer *w, uint32_t *dev, uint64_t *seg_len);
/* Drop the segment (put_abort) and free w. NULL is a no-op. */
void seg_writer_abort(struct seg_writer *w);

/* ---- readers ---- */

/* Aligned buffer for len bytes rounded up to SEG_ALIGN (at least one block); NULL if no memory. */
void *seg_buf_alloc(size_t len);
void seg_buf_free(void *buf);
/* Unmap the recycled buffers kept for the next seg_buf_alloc when none was
 * taken or given back since the previous call (call it about once a
 * second: an idle pool goes back to the kernel, a busy one stays). Returns
 * the bytes unmapped. Thread-safe. */
size_t seg_buf_trim(void);

#define SEG_CHUNK_INLINE 8 /* extents a seg_chunk holds without malloc */

/* A chunk (or part of one) read back by seg_read_chunk() or seg_read_part():
 * release with seg_chunk_free(). */
struct seg_chunk {
	const uint8_t *data;	     /* the extents' bytes, back to back */
	uint32_t data_len;	     /* sum of the extents' lengths */
	uint32_t next;		     /* number of extents (0: all holes) */
	const struct seg_extent *ext; /* in chunk order */
	void *buf_;		     /* owned: the read window */
	struct seg_extent *ext_;     /* owned: extents beyond SEG_CHUNK_INLINE */
	struct seg_extent in_[SEG_CHUNK_INLINE]; /* the extents, when few */
};

/*
 * Read the record of e (from the index, or a footer) and verify all of it
 * (map and every block, or the plain crc); out gets its extents and data.
 * Caller owns *out on success only: seg_chunk_free(). 0, -EBADMSG (crc or
 * map mismatch), -EIO (short read), -ENOMEM, or the store's -errno; errors
 * are logged with segment id and offset.
 */
int seg_read_chunk(struct store *st, uint64_t seg_id, uint32_t dev, const struct seg_entry *e,
		   struct seg_chunk *out);
void seg_chunk_free(struct seg_chunk *c);
/* Chunk bytes [off, off + len) of sc into dst: its extents' bytes, zeros
 * for the holes between them and for anything sc does not cover. */
void seg_chunk_copy(const struct seg_chunk *sc, uint64_t off, uint32_t len, void *dst);
/* When chunk bytes [lo, hi) lie inside one data extent of sc: a pointer to
 * them in sc's buffer (valid while sc is), else NULL. */
const void *seg_chunk_span(const struct seg_chunk *sc, uint64_t lo, uint64_t hi);
/*
 * Read and verify only the blocks covering bytes [off, off + len) of the
 * chunk of e (and the map): out gets the data extents cut to that range,
 * in chunk order, and their bytes back to back (next == 0: all holes). A
 * plain record (one block; v1: the whole payload, one crc) is read whole.
 * A bad block outside the range is neither read nor reported. Caller owns
 * *out on success only: seg_chunk_free(). Errors as seg_read_chunk().
 * The map comes from a small process-wide cache of the maps last written
 * (seg_writer) or read, when it holds this record's (same segment, offset,
 * length and crc, and the copy checks): then only the blocks are read, and
 * damage to the map on the disk is seen by the next read that misses, or by
 * seg_read_chunk (which always reads the map).
 */
int seg_read_part(struct store *st, uint64_t seg_id, uint32_t dev, const struct seg_entry *e,
		  uint64_t off, uint64_t len, struct seg_chunk *out);
/* Empty the map cache of seg_read_part (tests: make the next read go to the disk). */
void seg_map_cache_drop(void);
/*
 * Read bytes [off, off + len) of the chunk of e into dst (holes, and
 * anything past the stored data, read as zeros), fetching and verifying
 * only the blocks that cover the range (and the map): what a fault-in of
 * part of a chunk needs. A plain record (one block; v1: the whole payload)
 * is read whole. Errors as seg_read_chunk().
 */
int seg_read_range(struct store *st, uint64_t seg_id, uint32_t dev, const struct seg_entry *e,
		   uint64_t off, uint32_t len, void *dst);
/*
 * Read chunk bytes [lo, hi) of the record of e straight into dst (dst[0]
 * is chunk byte lo), verifying every block it returns, with no copy where
 * the layout allows: the admission path's direct read (into the reply
 * buffer) and the restore's (into a mapping of the hot file).
 * Contract:
 *  - dst is 4 KiB-aligned and writable for align_up(hi - lo) bytes (the
 *    last page may be read whole; bytes past hi - lo are left zero or
 *    unchanged, never anything else).
 *  - flags: SEG_INTO_HOLES leaves the bytes of holes untouched (dst maps
 *    the hot file, whose holes are holes already: writing zeros there
 *    would allocate pages); without it, holes, and anything past the
 *    record's data, read as zeros.
 *  - No copy when the record is aligned (v3, or an old one that happens to
 *    be: mapped, 4 KiB-aligned offset, 4 KiB-granular extents) and lo is
 *    4 KiB-aligned: every block that lies wholly inside [lo, hi) is read
 *    by the store into dst where it belongs (O_DIRECT on nvme; S3 copies
 *    from the socket, as always) and verified there. The blocks at the two
 *    ends that reach outside [lo, hi), a plain record (at most a block,
 *    one crc), a v1 payload and any unaligned record go through a window
 *    buffer and are copied (the v2 way: at most two blocks of a range).
 *  - *stat (may be NULL) gets the data bytes read straight into dst and
 *    those copied (their sum: the data bytes of the range).
 *  - 0, or -errno as seg_read_chunk (-EBADMSG: a crc or map mismatch,
 *    logged). On error dst's bytes in [0, align_up(hi - lo)) are
 *    undefined: they may hold bytes that failed their crc. Never serve
 *    them; a mapping of the hot file must punch the range.
 *  - hi - lo at most SEG_MAX_CHUNK_LEN, lo <= hi (else -EINVAL).
 * The map comes from the map cache like seg_read_part's.
 */
#define SEG_INTO_HOLES 1u
struct seg_into_stat {
	uint64_t direct; /* data bytes the store read in place */
	uint64_t copied; /* data bytes read through a window and copied */
};
int seg_read_into(struct store *st, uint64_t seg_id, uint32_t dev, const struct seg_entry *e,
		  uint64_t lo, uint64_t hi, void *dst, unsigned flags, struct seg_into_stat *stat);
/*
 * Is the record of e (read back whole as sc) laid out as format v3 places
 * it: a record with more than SEG_DENSE_MAX bytes of data on a 4 KiB
 * boundary with 4 KiB-granular extents? 1 or 0 (fsck checks v3 segments).
 */
int seg_layout_v3_ok(const struct seg_entry *e, const struct seg_chunk *sc);
/*
 * Read and verify header and footer of a segment of seg_len bytes (from the
 * index, or list()), of either version. uuid_out and version may be NULL.
 * *entries is malloc'ed, caller frees (NULL when *n == 0). 0, -EIO
 * (corrupt, truncated, or another segment's header), -ENOTSUP (unknown
 * version), or the store's -errno.
 */
int seg_read_manifest(struct store *st, uint64_t seg_id, uint32_t dev, uint64_t seg_len,
		      uint8_t uuid_out[16], uint32_t *version, struct seg_entry **entries,
		      uint32_t *n);

#endif
