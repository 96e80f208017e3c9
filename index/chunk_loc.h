/*
 * chunk_loc — where a record of a chunk lies in the cold tier: one shape for
 * the index (a chunk's base copy, each overlay of its chain), the journal
 * (JR_CHUNK_LOC, JR_CHUNK_OVL) and the tier that writes and moves records.
 * Plain data, no functions and no lock of its own: whoever holds one guards
 * it (a chunk's: its inode lock). The wire formats are the codecs' business:
 * journal_codec.c and, for a segment's footer entries, seg_entry_loc() /
 * seg_loc_entry() (tier/segment/segment.h) translate to and from it.
 */
#ifndef SPW_CHUNK_LOC_H
#define SPW_CHUNK_LOC_H

#include <stdint.h>

/* 28 bytes, 4-byte aligned (off is packed), so struct chunk stays 48
 * bytes (index.c) */
struct chunk_loc {
	uint32_t seg_id; /* 0 = none; ids are 1..JRNL_MAX_SEG_ID (2^32 - 1) */
	uint64_t off __attribute__((packed, aligned(4))); /* record offset in the segment */
	uint32_t len;	/* record bytes stored (live/payload accounting counts these) */
	uint32_t crc;	/* plain record: crc32c of its bytes; mapped: the map's crc */
	uint32_t gen;	/* the chunk's generation stored with the record */
	uint16_t dev;	/* device index (< 64) */
	uint16_t flags; /* LOC_F_* */
};

/* flags: the record is data + extent map (segment format v2); clear: plain
 * (a v2 small chunk, or any v1 payload). len counts the record's stored
 * bytes either way. Journal records written before format v2 have none. */
#define LOC_F_MAP 1u
#define LOC_F_ALL LOC_F_MAP /* every flag a location may carry */

#endif
