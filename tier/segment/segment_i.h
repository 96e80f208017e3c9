/*
 * segment_i.h — private to the segment format's files: segment.c (header,
 * footer, map cache, I/O buffers), segment_write.c (the writer),
 * segment_fd.c (a chunk from the hot file: its extents, its pages),
 * segment_read.c (whole records, ranges through a window) and
 * segment_into.c (ranges straight into the caller's memory). The map
 * cache holds the maps of recently written or read mapped records
 * (segment.c says what it guarantees); its calls take its own lock and are
 * safe from any thread. Everything else here is pure or per call.
 */
#ifndef SPW_SEGMENT_I_H
#define SPW_SEGMENT_I_H

#include "tier/segment/segment.h"

#include <stdint.h>

#define MAPC_MAX SEG_ALIGN /* the largest map the cache holds */

static inline uint64_t align_up(uint64_t v)
{
	return (v + SEG_ALIGN - 1) / SEG_ALIGN * SEG_ALIGN;
}

static inline uint64_t rec_align(uint64_t v)
{
	return (v + SEG_REC_ALIGN - 1) / SEG_REC_ALIGN * SEG_REC_ALIGN;
}

/* Are extents x[0..n) whole pages, as an aligned (v3) record's are: every
 * offset a multiple of 4 KiB, every length too but the last's? */
static inline int seg_ext_granular(const struct seg_extent *x, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (x[i].off % SEG_ALIGN || (i + 1 < n && x[i].len % SEG_ALIGN))
			return 0;
	return 1;
}

/* Remember the map of the record at (seg_id, off) of len bytes and crc
 * (map_len bytes; larger than MAPC_MAX, or no memory: not kept). */
void seg_mapc_put(uint64_t seg_id, uint64_t off, uint32_t len, uint32_t crc,
		  const uint8_t *map, uint32_t map_len);
/* Copy the cached map of record (seg_id, e) into buf (MAPC_MAX bytes): its
 * length, or 0 on a miss. Unchecked: the caller decodes it as from disk. */
uint32_t seg_mapc_get(uint64_t seg_id, const struct seg_entry *e, uint8_t *buf);

/* ---- the writer's core (segment_write.c), for segment_fd.c ---- */

/* Where a record's bytes come from: chunk byte x is ... */
enum seg_src_kind {
	SEG_SRC_DATA, /* ... in data, the caller's extents' bytes back to back */
	SEG_SRC_FD,   /* ... at base + x of fd (pread) */
	SEG_SRC_IMG,  /* ... at img[x] (a mapping of the hot file's chunk) */
};
struct seg_src {
	enum seg_src_kind kind;
	const uint8_t *data; /* DATA */
	const struct seg_extent *ext; /* DATA: the layout of data */
	uint32_t next;
	int fd; /* FD */
	uint64_t base;
	const uint8_t *img; /* IMG */
};
/* Append one record of chunk (ino, chunk, gen) of chunk_len bytes, data
 * extents ext[0..next) (validated here), bytes from src; for an IMG source
 * appended straight from it, check (may be NULL) is asked afterwards
 * (segment.h, struct seg_fd_check). 0 or -errno as the add calls. */
int seg_w_record(struct seg_writer *w, uint64_t ino, uint64_t chunk, uint64_t gen,
		 uint32_t chunk_len, const struct seg_extent *ext, uint32_t next,
		 const struct seg_src *src, const struct seg_fd_check *check,
		 struct seg_entry *entry_out);
/* Would a record of these extents be appended from the caller's memory
 * (aligned, and the writer's store takes it)? */
int seg_w_direct_ok(const struct seg_writer *w, const struct seg_extent *ext, uint32_t next);
/* The writer's sticky store error (0: none). */
int seg_w_err(const struct seg_writer *w);

/* Tests and benchmarks: nonzero makes every add go through the stage (the
 * v2 way: pread / memcpy), to compare. */
extern int seg_no_direct;

/* Tests: called by seg_writer_add_fd(fd) once the chunk's extents are
 * known, before any of its bytes is read or mapped (NULL: nothing). */
extern void (*seg_test_add_fd_hook)(int fd);

/* ---- the readers' shared parts (segment_read.c) ---- */

/* A mapped record's map, once checked. */
struct rmap {
	uint32_t next, data_len, bsize, nblocks, map_len;
	const uint8_t *crcs;	/* nblocks u32, in the map's buffer */
	struct seg_extent *ext; /* in_, or malloc'ed when more: seg_rmap_free() */
	struct seg_extent in_[SEG_CHUNK_INLINE];
	uint8_t cached[MAPC_MAX]; /* the map, when it came from the cache */
	void *buf;		  /* the map's window, when read (seg_buf_free) */
};
void seg_rmap_free(struct rmap *m);
/* The checked map of mapped record e: from the map cache, or read from the
 * record's end (and then cached). *what names the step for an error log.
 * 0 or -errno (-EBADMSG: bad map); free m with seg_rmap_free either way. */
int seg_rmap_load(struct store *st, uint64_t seg_id, uint32_t dev, const struct seg_entry *e,
		  struct rmap *m, const char **what);
/* Verify blocks [b0, b1] of the record's data; data points at block b0. */
int seg_blocks_verify(const uint8_t *data, const struct rmap *m, uint32_t b0, uint32_t b1);
/* The aligned window around [off, off + len) of a segment: *buf gets the
 * buffer (seg_buf_free), *p points at off in it. 0 or -errno. */
int seg_read_window(struct store *st, uint64_t seg_id, uint32_t dev, uint64_t off,
		    uint64_t len, void **buf, const uint8_t **p);
void seg_log_read_err(uint64_t seg_id, uint32_t dev, const struct seg_entry *e, const char *what,
		      int err);

#endif
