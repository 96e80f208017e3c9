/* tier_i.h — private to tier/: the tier context shared by hot, evict, restore. */
#ifndef SPW_TIER_I_H
#define SPW_TIER_I_H

#include "common/config.h"
#include "index/index.h"
#include "tier/hot.h"
#include "tier/tier.h"

#include <pthread.h>

struct store;

struct tier_stats {
	/* atomics */
	uint64_t bytes_spilled, chunks_spilled, segments_written, segments_deleted;
	uint64_t segments_compacted, bytes_restored, chunks_restored;
	uint64_t spill_ns, restore_ns;
	uint64_t enospc, write_waits, errors_io, errors_crc, retries;
};

struct tier {
	const struct spw_config *cfg;
	struct index *idx;
	struct hot *hot;
	struct store *store; /* NULL: no cold tier */
	uint64_t chunk_size;
	tier_inval_fn inval;
	void *inval_arg;
	struct tier_stats st;

	pthread_mutex_t lock;     /* guards the fields below */
	pthread_cond_t room;      /* hot room was freed */
	pthread_cond_t wake;      /* evictor: work to do */
	unsigned writers_waiting;
	int stopping;
	int cold_full;            /* last spill failed for lack of cold room */
	struct evictor *ev;
	struct restorer *rs;
};

/* Chunk range of [off, off+len). */
static inline void tier_chunk_range(const struct tier *t, uint64_t off, uint64_t len,
				    uint64_t *first, uint64_t *last)
{
	*first = off / t->chunk_size;
	*last = len ? (off + len - 1) / t->chunk_size : *first;
}

/* Forget a chunk's cold copy (segment live bytes drop). Caller holds in->lock. */
void tier_chunk_release_cold(struct tier *t, struct inode *in, struct chunk *c);
/* Make chunks [first,last] RAM-resident, waiting for restores. in->lock held;
 * may drop and retake it. Returns 0 or -errno. */
int tier_make_hot_locked(struct tier *t, struct inode *in, uint64_t first, uint64_t last);

#endif
