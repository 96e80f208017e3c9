/*
 * admit.c — the admission filter (admit.h).
 *
 * DESIGN
 * - What the filter remembers of a chunk is two fields of struct chunk
 *   (index.h): seen (it was read since it last became cold, or used while
 *   in RAM) and hw (how far into it its readers went, in 32nds of the
 *   chunk), plus its access tick (atime), which every read and write sets.
 *   No table, no allocation: a cold file costs what it cost before.
 * - A re-read is a read by another handle (or after a jump) that starts
 *   below hw, less a slack for what the last reader's readahead took past
 *   what it asked for, or any second read of a random reader. A stream's
 *   own reads never are (their requests arrive out of order: the fs layer
 *   says which reads go on near the handle's last one). So a stream through
 *   a chunk, or two opens reading adjacent ranges (Ray reopens its spill
 *   file for each object), is one access, and a session resumed from its
 *   start, or a page read twice, is two.
 * - Refault distance: a re-read promotes only when the chunk's last access
 *   is younger than the horizon, the age of the youngest chunk the evictor
 *   let go lately; had the chunk been admitted then, it would still be in
 *   RAM now. While the tier is below low_watermark nothing is pushed out
 *   and any re-read promotes. Older accesses are forgotten: the read counts
 *   as a first one again.
 */
#include "tier/admit/admit.h"
#include "tier/tier_i.h"

#include <stdint.h>

/* hw is in 32nds of the chunk (5 bits), rounded up */
#define HW_STEPS 32u
#define HW_MAX	 (HW_STEPS - 1)
/* a new handle's first reads may start a little before where the last
 * reader stopped (its readahead went past what it asked for): up to 2 MiB,
 * and less when little was read (a small file read twice is a re-read) */
#define SLACK_MAX (2u << 20)

uint32_t admit_horizon(struct tier *t)
{
	if (hot_used(t->hot) < t->cfg->low_watermark * (double)hot_limit(t->hot))
		return UINT32_MAX;
	return __atomic_load_n(&t->admit_horizon, __ATOMIC_RELAXED);
}

void admit_note_evicted(struct tier *t, uint32_t age)
{
	__atomic_store_n(&t->admit_horizon, age ? age : 1, __ATOMIC_RELAXED);
}

enum admit_verdict admit_read_locked(struct tier *t, struct inode *in, uint64_t c, uint64_t lo,
				     uint64_t hi, int random, int near)
{
	struct chunk *ch = &in->chunks[c];
	uint64_t step = t->chunk_size / HW_STEPS, reached, slack, hw;
	uint32_t age = (uint32_t)idx_tick_now(t->idx) - ch->atime;

	if (!t->cfg->admit_reread || !t->store)
		return ADMIT_PROMOTE;
	if (ch->seen && age > admit_horizon(t)) {
		ch->seen = 0; /* too long ago: this is a first access again */
		ch->hw = 0;
	}
	reached = (uint64_t)ch->hw * step;
	slack = reached / 2 < SLACK_MAX ? reached / 2 : SLACK_MAX;
	if (ch->seen && (random || (!near && lo + slack < reached)))
		return ADMIT_PROMOTE;
	ch->seen = 1;
	hw = (hi + step - 1) / step;
	if (!random && hw > ch->hw)
		ch->hw = (uint8_t)(hw > HW_MAX ? HW_MAX : hw);
	return ADMIT_STREAM;
}
