/*
 * segment_i.h — private to the segment format's two files (segment.c: the
 * header, footer, writer, map cache and I/O buffers; segment_read.c: the
 * readers). The map cache holds the maps of recently written or read
 * mapped records (segment.c says what it guarantees); its calls take its
 * own lock and are safe from any thread.
 */
#ifndef SPW_SEGMENT_I_H
#define SPW_SEGMENT_I_H

#include "tier/segment.h"

#include <stdint.h>

#define MAPC_MAX SEG_ALIGN /* the largest map the cache holds */

static inline uint64_t align_up(uint64_t v)
{
	return (v + SEG_ALIGN - 1) / SEG_ALIGN * SEG_ALIGN;
}

/* Remember the map of the record at (seg_id, off) of len bytes and crc
 * (map_len bytes; larger than MAPC_MAX, or no memory: not kept). */
void seg_mapc_put(uint64_t seg_id, uint64_t off, uint32_t len, uint32_t crc,
		  const uint8_t *map, uint32_t map_len);
/* Copy the cached map of record (seg_id, e) into buf (MAPC_MAX bytes): its
 * length, or 0 on a miss. Unchecked: the caller decodes it as from disk. */
uint32_t seg_mapc_get(uint64_t seg_id, const struct seg_entry *e, uint8_t *buf);

/* Tests: called by seg_writer_add_fd(fd) once the chunk's extents are
 * known, before any of its bytes is copied (NULL: nothing). */
extern void (*seg_test_add_fd_hook)(int fd);

#endif
