/*
 * admit — what deserves RAM (DESIGN section 15): the hot tier's admission
 * filter. A cold chunk read for the first time is answered from its
 * segment and stays cold (read once: a Ray restore, a scan); a chunk read
 * again is promoted into the hot tier, as are warms, pins and writes. It
 * is the kernel's two-list idea with a refault distance: a second access
 * promotes only when it comes soon enough that the chunk, admitted at its
 * first read, would still have been in RAM (the evictor's horizon).
 * Guarantees: a verdict changes no data and no chunk state, only the
 * chunk's admission bits (index.h: seen, hw) and its access tick.
 * Threading: admit_read_locked with the chunk's inode lock held; the
 * horizon is one atomic word written by the evictor.
 */
#ifndef SPW_ADMIT_H
#define SPW_ADMIT_H

#include <stdint.h>

struct tier;
struct inode;

enum admit_verdict {
	ADMIT_STREAM,  /* read it from its segment into the reply; it stays cold */
	ADMIT_PROMOTE, /* bring it into RAM (restore, partial or whole) */
};

/*
 * The verdict for a read of chunk bytes [lo, hi) of COLD chunk c of in by a
 * reader that jumps about (random) or not, that goes on near where its
 * handle's last read ended (near: a stream, its readahead in any order) or
 * not, and the note of this access. A stream through a chunk is one
 * access, and so is a new handle's read that starts where the chunk's
 * earlier readers stopped (hw); a read that starts well below that, or a
 * random reader's second read of the chunk, is a re-read. With
 * admit=always (or no cold tier) every read promotes. in->lock held.
 */
enum admit_verdict admit_read_locked(struct tier *t, struct inode *in, uint64_t c, uint64_t lo,
				     uint64_t hi, int random, int near);

/* The evictor let go of chunks last accessed `age` index ticks ago (the
 * youngest of a round): the horizon a re-read must come within. */
void admit_note_evicted(struct tier *t, uint32_t age);

/* Index ticks within which a second access promotes: unbounded while the
 * hot tier is below low_watermark (nothing is being pushed out), else the
 * age of the youngest chunk the evictor let go last. */
uint32_t admit_horizon(struct tier *t);

#endif
