/*
 * admit.c — the admission filter (admit.h).
 *
 * DESIGN
 * - What the filter remembers of a chunk is two fields of struct chunk
 *   (index.h): seen (it was read since it last became cold) and hw (how
 *   far into it its readers went, in 16ths of the chunk), plus its access
 *   tick (atime), which every read and write sets. No table, no
 *   allocation: a cold file costs what it cost before.
 * - A re-read is a read by another handle (or after a jump) that starts
 *   inside what was read before (a 16th of the chunk below hw: hw is
 *   rounded up), or a random reader's 8th read of the chunk. No more slack
 *   than that: the kernel keeps the pages a reader's readahead took past
 *   what it asked for (keep_cache; a close drops only pages of chunks RAM
 *   holds), so a new handle that reads on asks from where they end, and a
 *   handle that asks again for what was read re-reads, whichever of its
 *   requests is judged first (the kernel sends a re-reader's first pages
 *   as several requests, taken by the daemon's threads in any order). A
 *   stream's own reads never are re-reads (the fs layer says which reads
 *   go on near the handle's last one, noted in the order they are judged:
 *   struct tier_reader); a stream that
 *   re-reads is promoted at its first read, its later reads of chunks read
 *   before are re-reads too (the fs layer remembers it per handle: again),
 *   and read-ahead brings in such chunks ahead of it (admit_ahead_locked). So a
 *   stream through a chunk, or two opens reading adjacent ranges (Ray
 *   reopens its spill file for each object), is one access, and a session
 *   resumed from its start, or a page read twice, is two.
 * - Refault distance: a re-read promotes only when the chunk's last access
 *   is younger than the horizon, the age of the youngest chunk the evictor
 *   let go lately; had the chunk been admitted then, it would still be in
 *   RAM now. While the tier is below low_watermark nothing is pushed out
 *   and any re-read promotes. Older accesses are forgotten: the read counts
 *   as a first one again.
 */
#include "tier/admit/admit.h"
#include "tier/tier_i.h"

#include "common/log.h"

#include <stdint.h>

#include "common/clock.h"

/* hw + 1 is how far readers went, in 16ths of the chunk (1..16), rounded up */
#define HW_STEPS 16u
#define HW_MAX	 (HW_STEPS - 1)
/* a random reader's reads of a chunk (hw + 1 counts them) that bring it into
 * RAM: its pages read again, or a chunk it keeps coming back to. A stream
 * whose requests the kernel sent out of order, and that was taken for a
 * random reader, reads a 4 MiB chunk in no more than 4 of them. */
#define RANDOM_AGAIN 8u

uint32_t admit_horizon(struct tier *t)
{
	if (hot_used(t->hot) < t->cfg->low_watermark * (double)hot_limit(t->hot))
		return UINT32_MAX;
	return __atomic_load_n(&t->admit.horizon, __ATOMIC_RELAXED);
}

void admit_note_evicted(struct tier *t, uint32_t age)
{
	__atomic_store_n(&t->admit.horizon, age ? age : 1, __ATOMIC_RELAXED);
}

static int over_threshold(struct tier *t)
{
	return hot_used(t->hot) + hot_reserved(t->hot) >
	       t->cfg->spill_threshold * (double)hot_limit(t->hot);
}

int admit_write_locked(struct tier *t, struct inode *in, uint64_t off, uint64_t written,
		       int stream)
{
	uint64_t first, last, end = off + written, marked = 0;

	if (!t->cfg->admit_reread || !t->store || !written)
		return 0;
	tier_chunk_range(t, off, written, &first, &last);
	if (stream && !in->around && !in->pinned && over_threshold(t)) {
		/* from now on; and the stream's chunks behind it go first too */
		in->around = 1;
		__atomic_add_fetch(&t->st.around_files, 1, __ATOMIC_RELAXED);
		__atomic_store_n(&t->admit.around_ms, clock_now_ms(), __ATOMIC_RELAXED);
		for (uint64_t c = 0; c < first && c < in->nchunks; c++)
			if (in->chunks[c].state == CHUNK_HOT_DIRTY && !in->chunks[c].around) {
				in->chunks[c].around = 1;
				marked += t->chunk_size;
			}
	}
	for (uint64_t c = first; c <= last && c < in->nchunks; c++) {
		struct chunk *ch = &in->chunks[c];
		/* only a streaming write completes a chunk for write-around */
		ch->around = in->around && stream && (c + 1) * t->chunk_size <= end &&
			     ch->state == CHUNK_HOT_DIRTY;
		marked += ch->around ? t->chunk_size : 0;
	}
	if (!marked)
		return 0;
	return __atomic_add_fetch(&t->admit.around_bytes, marked, __ATOMIC_RELAXED) >=
	       t->cfg->min_spill_size;
}

int admit_close_locked(struct tier *t, struct inode *in)
{
	if (!in->around)
		return 0;
	in->around = 0;
	for (uint64_t c = 0; c < in->nchunks; c++)
		if (in->chunks[c].state == CHUNK_HOT_DIRTY)
			in->chunks[c].around = 1;
	__atomic_store_n(&t->admit.around_flush, 1, __ATOMIC_RELAXED);
	return 1;
}

int admit_around_ready(struct tier *t, int *flush)
{
	*flush = __atomic_load_n(&t->admit.around_flush, __ATOMIC_RELAXED);
	return *flush ||
	       __atomic_load_n(&t->admit.around_bytes, __ATOMIC_RELAXED) >= t->cfg->min_spill_size;
}

uint64_t admit_around_take(struct tier *t, int *flush)
{
	*flush = __atomic_exchange_n(&t->admit.around_flush, 0, __ATOMIC_RELAXED);
	return __atomic_exchange_n(&t->admit.around_bytes, 0, __ATOMIC_RELAXED);
}

void admit_around_put(struct tier *t, uint64_t left, int flush)
{
	if (!left)
		return;
	__atomic_add_fetch(&t->admit.around_bytes, left, __ATOMIC_RELAXED);
	if (flush)
		__atomic_store_n(&t->admit.around_flush, 1, __ATOMIC_RELAXED);
}

int admit_ahead_locked(struct tier *t, struct inode *in, uint64_t c)
{
	const struct chunk *ch = &in->chunks[c];

	if (!t->cfg->admit_reread || !t->store)
		return 1;
	return ch->seen && (uint32_t)idx_tick_now(t->idx) - ch->atime <= admit_horizon(t);
}

enum admit_verdict admit_read_locked(struct tier *t, struct inode *in, uint64_t c, uint64_t lo,
				     uint64_t hi, int random, int near, int again)
{
	struct chunk *ch = &in->chunks[c];
	uint64_t step = t->chunk_size / HW_STEPS, reached, hw;
	uint32_t age = (uint32_t)idx_tick_now(t->idx) - ch->atime;

	if (!t->cfg->admit_reread || !t->store)
		return ADMIT_PROMOTE;
	/* a "random" read near the handle's last one is a stream whose
	 * requests the kernel's readahead sent out of order */
	random = random && !near;
	if (ch->seen && age > admit_horizon(t))
		ch->seen = 0; /* too long ago: this is a first access again */
	/* once seen, hw + 1 is the 16ths its readers reached, or a random
	 * reader's reads of it */
	reached = ((uint64_t)ch->hw + 1) * step;
	if (random && ch->seen && ch->hw + 2u >= RANDOM_AGAIN) {
		log_debug("admit: inode %llu chunk %llu read again (%u random reads, the last "
			  "%u ticks ago): into RAM",
			  (unsigned long long)in->ino, (unsigned long long)c, ch->hw + 2u, age);
		return ADMIT_PROMOTE;
	}
	/* hw is rounded up: the bytes below reached - step were read */
	if (!random && ch->seen && (again || (!near && lo + step <= reached))) {
		log_debug("admit: inode %llu chunk %llu read again (from %llu, read to %llu "
			  "before, %u ticks ago): into RAM",
			  (unsigned long long)in->ino, (unsigned long long)c,
			  (unsigned long long)lo, (unsigned long long)reached, age);
		return ADMIT_PROMOTE;
	}
	if (ch->seen)
		log_debug("admit: inode %llu chunk %llu read on (from %llu, read to %llu before, "
			  "random %d near %d)",
			  (unsigned long long)in->ino, (unsigned long long)c, (unsigned long long)lo,
			  (unsigned long long)reached, random, near);
	if (random) {
		ch->hw = (uint8_t)(!ch->seen ? 0u : ch->hw < HW_MAX ? ch->hw + 1u : HW_MAX);
	} else {
		hw = (hi + step - 1) / step - (hi > 0); /* 16ths reached, less one */
		if (!ch->seen || hw > ch->hw)
			ch->hw = (uint8_t)(hw > HW_MAX ? HW_MAX : hw);
	}
	ch->seen = 1;
	return ADMIT_STREAM;
}
