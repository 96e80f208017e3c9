/*
 * to_extent — a file all in RAM moving into an extent (tier/extent,
 * DESIGN section 16) rather than into segments. The callers announce the
 * room freed (evict_room_freed).
 */
#ifndef SPW_TO_EXTENT_H
#define SPW_TO_EXTENT_H

#include <stdint.h>

struct tier;
struct inode;

/* A closed file of extent_min or more all in RAM moves into a sealed
 * extent (an evict, or the evictor's pick of a cold big file): copied,
 * made durable and crc'd outside its lock, committed only when no chunk
 * changed meanwhile. The RAM it freed, or -errno (-EAGAIN: not such a
 * file, or it changed; -ENOSPC: no cold directory keeps room). Takes the
 * inode lock. */
int64_t spill_file_to_extent(struct tier *t, struct inode *in);
/* in just became an extent: its chunks are let go (journaled as holes
 * after the extent's record: a replay of both keeps the extent, which
 * recovery prefers), its hot file emptied once no spill reads it through
 * a mapping (the wait drops the lock), the opens' holds on it returned.
 * in->lock held, fd its hot file (held). */
void spill_let_go_for_extent_locked(struct tier *t, struct inode *in, int fd);

#endif
