/*
 * ROOM tier/admit/: the admission filter. Uses hot/ and segment/; spill/,
 * restore/ and the handle ask it.
 */
/*
 * admit — what deserves RAM (DESIGN section 15): the hot tier's admission
 * filter, both ways. Reads: a cold chunk read for the first time is
 * answered from its segment and stays cold (read once: a Ray restore, a
 * scan); a chunk read again is promoted into the hot tier, as are warms,
 * pins and writes. It is the kernel's two-list idea with a refault
 * distance: a second access promotes only when it comes soon enough that
 * the chunk, admitted at its first read, would still have been in RAM (the
 * evictor's horizon). Writes: above spill_threshold, a streaming writer's
 * chunks are written around: each one it completes is spilled first (not
 * by LRU age) and let go, and what it leaves dirty goes at its last close,
 * so a stream under pressure neither pushes the hot data out nor stays.
 * Guarantees: no verdict changes data or a chunk's state, only the
 * admission bits (index.h: seen, hw, around; inode around) and counters;
 * a written-around byte is acknowledged once in the hot file, as any
 * write, and leaves RAM only once its segment is durable (spill.c).
 * Threading: the _locked calls with the inode's lock held; the room's
 * state (struct tier admit) is atomics.
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
 * earlier readers stopped (hw); a read that starts inside what they read
 * (a 16th of the chunk below hw: hw is rounded up), a
 * random reader's 8th read of the chunk (RANDOM_AGAIN; reads near the
 * handle's last one count as a stream's, whatever the fs layer took them
 * for), or any read of a chunk read
 * before by a handle whose reads were found re-reads already (again: the
 * rest of a re-reading stream), is a re-read. With
 * admit=always (or no cold tier) every read promotes. in->lock held.
 */
enum admit_verdict admit_read_locked(struct tier *t, struct inode *in, uint64_t c, uint64_t lo,
				     uint64_t hi, int random, int near, int again);

/* May COLD chunk c of in be restored ahead of a sequential reader? Only a
 * chunk the reader's stream would bring into RAM anyway: one read before,
 * within the horizon (a re-read stream), or any with admit=always. A
 * stream that reads cold data once reads it from the segments, nothing
 * restored ahead. in->lock held. */
int admit_ahead_locked(struct tier *t, struct inode *in, uint64_t c);

/*
 * A write of [off, off + written) to in is done (its chunks marked dirty):
 * a streaming writer (stream) above spill_threshold writes the file around
 * from now on; the chunks a write-around completes are marked for the
 * evictor. Returns 1 when the evictor should look now. in->lock held.
 */
int admit_write_locked(struct tier *t, struct inode *in, uint64_t off, uint64_t written,
		       int stream);
/* The last writable open of in closed: a file written around has what it
 * left dirty marked too, and the evictor is to take it now (1: kick it).
 * in->lock held. */
int admit_close_locked(struct tier *t, struct inode *in);
/* The evictor: is written-around data waiting (a segment's worth, or a
 * closed writer's tail)? *flush: the tail must go now, however small. */
int admit_around_ready(struct tier *t, int *flush);
/* For a round that starts now: the written-around bytes marked (a hint)
 * and *flush, taken (what writers mark from now on counts for the next
 * round). */
uint64_t admit_around_take(struct tier *t, int *flush);
/* The round is over (or did not start: then left is what it took): `left`
 * written-around bytes it found are still dirty; with flush (the
 * round's), they are still to go however small. */
void admit_around_put(struct tier *t, uint64_t left, int flush);

/* The evictor let go of chunks last accessed `age` index ticks ago (the
 * youngest of a round): the horizon a re-read must come within. */
void admit_note_evicted(struct tier *t, uint32_t age);

/* Index ticks within which a second access promotes: unbounded while the
 * hot tier is below low_watermark (nothing is being pushed out), else the
 * age of the youngest chunk the evictor let go last. */
uint32_t admit_horizon(struct tier *t);

#endif
