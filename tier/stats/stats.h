/*
 * ROOM tier/stats/: what the daemon reports: one snapshot of the counters
 * (stats.c), rendered as the stats xattr's JSON and as the Prometheus file
 * by the metrics thread (metrics.c). Reads every room below it, writes
 * none. Threading: below.
 */
/*
 * stats — one snapshot of what the daemon reports, rendered twice: as the
 * JSON of the user.spillway.stats xattr (tier_stats_json, tier.h) and as
 * the Prometheus text file (metrics.c). Each counter is read once per
 * snapshot, so the two views are built from the same reading and a new
 * figure is added in one place.
 * Threading: tier_snapshot() may run on any thread, several at once (the
 * stats xattr on FUSE threads, the metrics thread); it reads the counters
 * as relaxed atomics and takes each lock it needs alone. A snapshot belongs
 * to its caller (usually on the stack) and is formatted without a lock.
 */
#ifndef SPW_TIER_STATS_H
#define SPW_TIER_STATS_H

#include "tier/hot/pressure.h"
#include "tier/store/store.h"
#include "tier/tier_i.h"

#include <stddef.h>
#include <stdint.h>

#define SNAP_DEVS 16 /* cold directories reported per store */

struct tier_snapshot {
	/* hot tier */
	uint64_t hot_used, hot_limit, hot_reserved, hot_size, hot_min;
	struct pressure_stats ps;
	/* namespace */
	uint64_t inodes, files;
	/* segment table: totals, and bytes per cold tier ([0] first store, [1] s3) */
	uint64_t segs, seg_bytes, seg_live, tier_bytes[2];
	/* counters and histograms (struct tier_stats, each field read once) */
	struct tier_stats c;
	/* read together under the evictor's lock (evict_waiters) */
	unsigned writers_waiting;
	int cold_full;
	int cold_failing; /* the evictor's last spill failed (evict_cold_failing) */
	const char *slow_op; /* "" when none (read under t->lock) */
	/* journal */
	int jrnl_on, jrnl_failed;
	uint64_t jrnl_bytes, jrnl_checkpoints, jrnl_syncs;
	struct tier_recovery rec;
	/* stores: [0] t->store, [1] t->s3; name NULL when absent */
	const char *store_name[2];
	int ndev[2];
	struct store_dev_stat dev[2][SNAP_DEVS];
	/* hot chunks the evictor cannot take now (only with SNAP_CHUNKS: a walk
	 * of every file) */
	uint64_t unevict_in_use, unevict_pinned, unevict_spilling, unevict_restoring;
	uint64_t unevict_passthrough;
	int pt_on;	    /* passthrough enabled (tier_set_passthrough) */
	uint64_t pt_pinned; /* hot bytes of passed-through files */
};

#define SNAP_CHUNKS 1 /* also walk the files for the unevictable counts */

/* Fill s (flags: SNAP_*). Takes and drops the locks it needs, one at a time. */
void tier_snapshot(struct tier *t, struct tier_snapshot *s, int flags);

/* The stats xattr's JSON of s into buf (snprintf rules: returns the length
 * the whole needs; truncated when that is >= len). nvme_first: the first
 * store is an nvme tier (else s3 alone). */
int stats_json(const struct tier_snapshot *s, int nvme_first, char *buf, size_t len);

#endif
