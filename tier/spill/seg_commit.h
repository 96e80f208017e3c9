/*
 * seg_commit — the commit of a new segment of chunk records, one sequence for
 * spill (spill.c) and compaction (gc.c): the segment made durable and
 * registered (segtab_commit), then each chunk whose record it holds pointed
 * at it, if the chunk is still what was copied, its new location journaled.
 * Guarantees: a chunk points at the new segment only once the segment is
 * durable and the chunk's record journaled; every record's live bytes are
 * released exactly once: the old record's when the chunk moved, the new
 * one's when the chunk moved on meanwhile or the journal refused (then the
 * chunk keeps the location it had, and a spilled chunk is HOT_DIRTY again).
 * Threading: any thread, no lock held; each chunk is handled under its
 * inode's lock (lock order: inode lock, the segment table's lock).
 */
#ifndef SPW_SEG_COMMIT_H
#define SPW_SEG_COMMIT_H

#include <stddef.h>
#include <stdint.h>

#include "index/chunk_loc.h"
#include "tier/segment/segment.h"

struct tier;
struct inode;

/* One record written into the new segment. */
struct seg_commit_rec {
	struct seg_entry e; /* as the writer returned it */
	struct inode *in;   /* the caller's reference, kept */
	uint64_t c;
	/* compaction: the record this one copies (seg_id: the old segment,
	 * off); it moves only if the chunk still points at that very record.
	 * Spill: seg_id 0: the chunk moves if it is still SPILLING at the
	 * generation e records. */
	struct chunk_loc from;
	/* spill: an overlay of these blocks of the chunk (chain.c), NULL: the
	 * whole chunk. Consumed (freed) by a successful seg_commit. */
	uint64_t *bits;
};

/* What the caller does at two points of the commit (either may be NULL). */
struct seg_commit_hooks {
	/* once the segment is durable, before any chunk moves: so that whoever
	 * sees the RAM come back also sees the spill counted */
	void (*durable)(struct tier *t, void *arg);
	/* under the inode lock, for each chunk that moved to the new segment:
	 * the bytes of the chunk whose pages the kernel should drop (0: none) */
	uint32_t (*moved)(struct tier *t, struct inode *in, uint64_t c);
	void *arg;
};

/*
 * Commit writer w (segment id, consumed whatever happens) holding the
 * records v[0..n), n > 0, then point their chunks at it (h may be NULL).
 * 0, or -errno from segtab_commit: nothing committed, no chunk touched (the
 * caller puts its chunks back; bits stay the caller's).
 */
int seg_commit(struct tier *t, struct seg_writer *w, uint64_t id, struct seg_commit_rec *v,
	       size_t n, const struct seg_commit_hooks *h);

#endif
