/*
 * segment — the self-describing segment format, its writer and its readers.
 * A writer streams header, chunk payloads and footer to a store through a
 * 4 MiB aligned staging buffer; readers verify every byte they return
 * (header crc, footer crc, each payload's crc32c) and report -EIO with a log
 * line naming the segment and offset on any mismatch or short read.
 * Threading: a seg_writer is used by one thread at a time; the readers and
 * the encode/decode functions are pure or use only the (thread-safe) store.
 *
 * Wire format, version 1, all integers little-endian:
 *   header, bytes [0, 4096):
 *     0   u8[8]  magic "SPWSEG01"
 *     8   u32    format version (1)
 *     12  u32    flags (0)
 *     16  u8[16] filesystem uuid
 *     32  u64    segment id
 *     40  ...    zero
 *     4092 u32   crc32c of bytes [0, 4092)
 *   data, from 4096: chunk payloads, each at a 4 KiB-aligned offset, zero
 *     padding between them (the padding is not covered by any crc).
 *   footer, the last footer_len bytes, starting right after the last payload
 *   (or at 4096), so that the segment length is a multiple of 4096:
 *     zero padding (< 4096 bytes)
 *     entries, SEG_ENTRY_SIZE bytes each:
 *       u64 ino, u64 chunk index, u64 generation, u32 length,
 *       u64 offset within the segment, u32 crc32c of the payload
 *     u32 count
 *     u32 footer crc32c over [footer start, here): the padding, entries, count
 *     u32 footer_len (padding + entries + trailer)
 *     u8[8] magic "SPWFOOT1"
 */
#ifndef SPW_SEGMENT_H
#define SPW_SEGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "tier/store.h"

#define SEG_ALIGN	  4096u
#define SEG_HDR_SIZE	  4096u
#define SEG_VERSION	  1u
#define SEG_ENTRY_SIZE	  40u
#define SEG_TRAILER_SIZE  20u	       /* count, crc, footer_len, magic */
#define SEG_STAGE_SIZE	  (4u << 20)   /* writer's staging buffer */
#define SEG_FOOTER_MAX	  (256u << 20) /* readers refuse larger footers */
#define SEG_MAX_CHUNK_LEN (1u << 30)   /* longest payload add() takes */

struct seg_entry {
	uint64_t ino, chunk, gen;
	uint64_t off; /* payload offset within the segment, 4 KiB-aligned */
	uint32_t len, crc;
};

/* ---- pure encode/decode (no I/O) ---- */

void seg_header_encode(uint8_t buf[SEG_HDR_SIZE], const uint8_t uuid[16], uint64_t seg_id);
/* 0, -EIO (bad magic or crc), -ENOTSUP (valid header of another version). */
int seg_header_decode(const uint8_t buf[SEG_HDR_SIZE], uint8_t uuid[16], uint64_t *seg_id);

/* Footer length for n entries after a body (header + payloads) of body_end bytes. */
uint32_t seg_footer_len(uint64_t body_end, uint32_t n);
/* Write the footer_len = seg_footer_len(body_end, n) bytes of the footer into buf. */
void seg_footer_encode(uint8_t *buf, uint32_t footer_len, const struct seg_entry *e, uint32_t n);
/*
 * From the last SEG_TRAILER_SIZE bytes of a segment of seg_len bytes, get the
 * footer length (checked against seg_len and SEG_FOOTER_MAX). 0 or -EIO.
 */
int seg_trailer_decode(const uint8_t tail[SEG_TRAILER_SIZE], uint64_t seg_len,
		       uint32_t *footer_len);
/*
 * Verify and parse a whole footer (the last footer_len bytes of a segment of
 * seg_len bytes): crc, count, and that each entry lies inside the data area
 * at an aligned offset. On success *entries is malloc'ed (caller frees; NULL
 * when n == 0). 0, -EIO, or -ENOMEM.
 */
int seg_footer_decode(const uint8_t *footer, uint32_t footer_len, uint64_t seg_len,
		      struct seg_entry **entries, uint32_t *n);

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
 * Append one chunk payload (any alignment, 1..SEG_MAX_CHUNK_LEN bytes) and
 * record its entry; *entry_out (may be NULL) gets it. 0 or -errno; after a
 * store error the writer is only good for seg_writer_abort().
 */
int seg_writer_add(struct seg_writer *w, uint64_t ino, uint64_t chunk, uint64_t gen,
		   const void *data, uint32_t len, struct seg_entry *entry_out);
/*
 * Same, reading the payload from fd at fd_off straight into the staging
 * buffer (through the uring loop). If fd yields fewer than len bytes
 * (truncated meanwhile) or fails, returns -ENODATA or that -errno, records
 * nothing, and the writer stays usable (the bytes copied become padding).
 */
int seg_writer_add_fd(struct seg_writer *w, uint64_t ino, uint64_t chunk, uint64_t gen, int fd,
		      uint64_t fd_off, uint32_t len, struct seg_entry *entry_out);
/* Segment bytes so far (header, payloads, padding; no footer). */
uint64_t seg_writer_bytes(const struct seg_writer *w);
/* Entries recorded so far. */
uint32_t seg_writer_count(const struct seg_writer *w);
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

/*
 * Read e's payload into buf (from seg_buf_alloc(e->len)) and check its
 * crc32c. 0, -EBADMSG on a mismatch, -EIO on a short read (logged with
 * segment id and offset), or the store's -errno.
 */
int seg_read_chunk(struct store *st, uint64_t seg_id, uint32_t dev, const struct seg_entry *e,
		   void *buf);
/*
 * Read and verify header and footer of a segment of seg_len bytes (from the
 * index, or list()). uuid_out may be NULL. *entries is malloc'ed, caller
 * frees (NULL when *n == 0). 0, -EIO (corrupt, truncated, or another
 * segment's header), -ENOTSUP (unknown version), or the store's -errno.
 */
int seg_read_manifest(struct store *st, uint64_t seg_id, uint32_t dev, uint64_t seg_len,
		      uint8_t uuid_out[16], struct seg_entry **entries, uint32_t *n);

#endif
