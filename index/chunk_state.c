/*
 * chunk_state — the one writer of a chunk's residency state (index.h, enum
 * chunk_state) and the table of the moves a chunk may make. Every change of
 * ch->state goes through chunk_set_state(); debug builds (no NDEBUG), and
 * any build with SPW_CHECK_STATES (the hardening builds), abort on a move
 * the table does not list, naming the inode, the chunk and both states. Threading: the caller holds the chunk's inode lock.
 */
#include "index/index_i.h"
#include "index/index.h"

#include "common/log.h"

#include <stdlib.h>

/*
 * The state machine: every legal move (from -> to), why, and where. A move
 * to the same state is legal only where listed. Replay sets a chunk as its
 * journal record says, from a zeroed (ABSENT) chunk or over what the
 * records before set (index_replay.c). "Written" is tier_mark_dirty_locked()
 * (chain.c), called by writes and fallocate (tier_io.c) and for passthrough
 * writers (tier_open.c).
 *
 * ABSENT    -> HOT_DIRTY  written or allocated; replay: DIRTY
 *           -> COLD       replay: a location (LOC); an extent demoted to
 *                         S3 (tier/spill/demote_ext.c)
 *           -> ABSENT     a hole punched over it (tier_io.c, fallocate)
 * HOT_DIRTY -> HOT_DIRTY  written again
 *           -> SPILLING   taken by a spill (spill.c)
 *           -> HOT_CLEAN  written over its cold copy, nothing dirty left:
 *                         RAM and the chain agree (chain.c, spill plan)
 *           -> COLD       recovery: nothing written over the chain reached
 *                         the hot file (recover.c)
 *           -> ABSENT     truncated or punched (tier_io.c)
 * SPILLING  -> HOT_CLEAN  its segment durable, its location journaled
 *                         (spill.c; chain.c for an overlay record)
 *           -> HOT_DIRTY  written (or its chain folded, chain.c) meanwhile,
 *                         or the spill failed (spill.c)
 *           -> ABSENT     truncated or punched meanwhile (tier_io.c)
 * HOT_CLEAN -> HOT_DIRTY  written (or its chain folded, chain.c)
 *           -> COLD       evicted: its hole punched (spill.c)
 *           -> ABSENT     truncated or punched (tier_io.c)
 * COLD      -> RESTORING  restored (restore.c, restore_workers.c), read from
 *                         its cold copy directly (restore_read.c), or claimed by a
 *                         write covering it whole (tier_io.c)
 *           -> HOT_CLEAN  overlays: read or written over in part, RAM holds
 *                         those blocks (restore_read.c, chain.c)
 *           -> HOT_DIRTY  zeroed whole (fallocate: written); replay: PART
 *           -> COLD       recovery: a chain with nothing in the hot file
 *                         (recover.c)
 *           -> ABSENT     truncated or punched (tier_io.c); an extent's
 *                         demotion the journal refused (demote_ext.c)
 * RESTORING -> HOT_CLEAN  restored (restore.c)
 *           -> COLD       the restore failed (restore.c) or the last direct
 *                         reader is done (restore_read.c, restore.c: a chunk
 *                         the admission filter keeps cold), a claim undone
 *                         (tier_io.c)
 *           -> HOT_DIRTY  the claiming write is done (written)
 * Never: RESTORING -> ABSENT (truncate and punch wait for restores first),
 * SPILLING -> SPILLING or COLD (one spill at a time; a chunk is punched
 * only clean), RESTORING -> RESTORING (one restore at a time).
 */
#if !defined(NDEBUG) || defined(SPW_CHECK_STATES)
#define CHECK_STATES 1
#endif

#ifdef CHECK_STATES /* the table is only read by the check */
#define TO(s) (1u << (s))
static const uint8_t legal[] = {
    [CHUNK_ABSENT] = TO(CHUNK_HOT_DIRTY) | TO(CHUNK_COLD) | TO(CHUNK_ABSENT),
    [CHUNK_HOT_DIRTY] = TO(CHUNK_HOT_DIRTY) | TO(CHUNK_SPILLING) | TO(CHUNK_HOT_CLEAN) |
			TO(CHUNK_COLD) | TO(CHUNK_ABSENT),
    [CHUNK_SPILLING] = TO(CHUNK_HOT_CLEAN) | TO(CHUNK_HOT_DIRTY) | TO(CHUNK_ABSENT),
    [CHUNK_HOT_CLEAN] = TO(CHUNK_HOT_DIRTY) | TO(CHUNK_COLD) | TO(CHUNK_ABSENT),
    [CHUNK_COLD] = TO(CHUNK_RESTORING) | TO(CHUNK_HOT_CLEAN) | TO(CHUNK_HOT_DIRTY) | TO(CHUNK_COLD) |
		   TO(CHUNK_ABSENT),
    [CHUNK_RESTORING] = TO(CHUNK_HOT_CLEAN) | TO(CHUNK_COLD) | TO(CHUNK_HOT_DIRTY),
};

static const char *const state_names[] = {
    [CHUNK_ABSENT] = "ABSENT",	     [CHUNK_HOT_DIRTY] = "HOT_DIRTY", [CHUNK_SPILLING] = "SPILLING",
    [CHUNK_HOT_CLEAN] = "HOT_CLEAN", [CHUNK_COLD] = "COLD",	      [CHUNK_RESTORING] = "RESTORING",
};

static const char *state_name(enum chunk_state s)
{
	return (unsigned)s < sizeof(state_names) / sizeof(state_names[0]) ? state_names[s] : "?";
}

static int legal_move(enum chunk_state from, enum chunk_state to)
{
	return (unsigned)from <= CHUNK_RESTORING && (unsigned)to <= CHUNK_RESTORING &&
	       (legal[from] >> to & 1);
}
#endif

void chunk_set_state(struct inode *in, uint64_t c, enum chunk_state to)
{
	struct chunk *ch = &in->chunks[c];

#ifdef CHECK_STATES
	if (c >= in->nchunks || !legal_move(ch->state, to)) {
		log_err("chunk_set_state: inode %llu chunk %llu (of %u): %s -> %s is not a legal move "
			"(index/chunk_state.c)",
			(unsigned long long)in->ino, (unsigned long long)c, in->nchunks,
			c < in->nchunks ? state_name(ch->state) : "-", state_name(to));
		abort();
	}
#endif
	ch->state = (uint8_t)to;
}
