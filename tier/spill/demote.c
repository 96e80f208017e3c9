/*
 * demote — move segments from the first cold tier (nvme) to S3:
 * demote_pick chooses a batch (the evictor thread, through maint_plan),
 * demote_segment copies one (the maintenance worker, maint.c).
 *
 * DESIGN
 * - Runs only with both tiers, when the nvme tier is fuller than
 *   nvme_threshold; then picks the least recently read segments whose
 *   bytes bring it 5 % below (at most MAINT_QUEUE_MAX per batch). Each job
 *   looks at the fill again first and ends the batch once it is low
 *   enough (the bytes freed may differ from the segments' lengths).
 * - Also when a spill found the nvme tier full below nvme_threshold (a
 *   threshold closer to 1 than a segment, other data on the disks): then
 *   it picks room for two segments (2 x min_spill_size), and each job goes
 *   on while the tier is still full (tier_cold_full).
 * - A segment is immutable: a plain copy, then its table entry switches to
 *   S3 and is journaled durably, and only then the nvme copy goes. A
 *   restore that looked it up a moment before retries on ENOENT.
 * - A stopping tier ends a copy between two stages (-ECANCELED): the
 *   upload is aborted, the nvme copy stays.
 */
#include "tier/tier_i.h"
#include "tier/extent/extent.h"

#include "common/log.h"
#include "index/journal.h"
#include "tier/segment/segment.h"
#include "tier/store/store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Fill fraction of the nvme tier (0..1); *total_out its bytes if not NULL. */
static double nvme_fill(struct tier *t, uint64_t *total_out)
{
	struct store_dev_stat devs[16];
	uint64_t total = 0, avail = 0;
	int n = store_stat(t->store, devs, 16);
	for (int i = 0; i < n && i < 16; i++) {
		total += devs[i].total;
		avail += devs[i].avail;
	}
	if (total_out)
		*total_out = total;
	return total ? 1.0 - (double)avail / (double)total : 0.0;
}

/* Copy segment id to S3 (segments are immutable: a plain copy), switch the
 * table entry, then delete the local copy. */
static int seg_demote(struct tier *t, uint64_t id)
{
	struct store_put *put = NULL;
	struct seg_where w;
	uint64_t len, off;
	uint32_t dev, newdev = 0;
	void *buf = seg_buf_alloc(SEG_STAGE_SIZE);
	int ret;

	if (!buf)
		return -ENOMEM;
	if ((ret = segtab_where(t->segtab, id, &w)) < 0)
		goto out;
	len = w.len;
	dev = w.dev;
	if ((ret = store_put_begin(t->s3, id, len, &put)) < 0)
		goto out;
	for (off = 0; off < len; off += SEG_STAGE_SIZE) {
		size_t n = len - off < SEG_STAGE_SIZE ? len - off : SEG_STAGE_SIZE;
		if (__atomic_load_n(&t->stopping, __ATOMIC_ACQUIRE))
			ret = -ECANCELED; /* unmount: the nvme copy stays */
		if (ret < 0 || (ret = store_read(t->store, id, dev, off, buf, n)) < 0 ||
		    (ret = store_put_append(put, buf, n)) < 0) {
			store_put_abort(put);
			goto out;
		}
	}
	ret = store_put_finish(put, &newdev);
	if (ret < 0)
		goto out;
	segtab_relocate(t->segtab, id, 1, newdev);
	/* the new home must be durable in the journal before the old copy goes */
	if ((ret = segtab_log(t->segtab, id, 0)) < 0 || (t->jrnl && (ret = jrnl_sync(t->jrnl)) < 0))
		goto out;
	/* a restore that looked it up a moment ago retries on ENOENT */
	store_remove(t->store, id, dev);
	__atomic_add_fetch(&t->st.segments_demoted, 1, __ATOMIC_RELAXED);
out:
	seg_buf_free(buf);
	if (ret == -ECANCELED)
		log_debug("demote: segment %llu: cancelled, stopping", (unsigned long long)id);
	else if (ret < 0)
		log_warn("demote: segment %llu to s3: %s", (unsigned long long)id, strerror(-ret));
	return ret;
}

size_t demote_pick(struct tier *t, uint64_t *ids, size_t max, uint64_t *inos, size_t *ninos)
{
	uint64_t total, excess = 0, sum = 0;
	uint64_t *atimes = NULL, *lens = NULL;
	struct ext_cand *ec = NULL;
	size_t n, ne = 0, i = 0, j = 0, k = 0;
	double fill;

	*ninos = 0;
	if (!t->s3)
		return 0;
	fill = nvme_fill(t, &total);
	if (fill > t->cfg->nvme_threshold)
		excess = (uint64_t)((fill - (t->cfg->nvme_threshold - 0.05)) * (double)total);
	if (tier_cold_full(t) && excess < 2 * t->cfg->min_spill_size)
		excess = 2 * t->cfg->min_spill_size;
	if (!excess)
		return 0;
	if (!(atimes = malloc(max * sizeof(*atimes))) || !(lens = malloc(max * sizeof(*lens))) ||
	    !(ec = malloc(max * sizeof(*ec)))) {
		free(atimes);
		free(lens);
		return 0;
	}
	/* the least recently read segments and the least recently opened
	 * extents, each enough alone; then, oldest first of both, until
	 * their bytes cover the excess */
	n = segtab_pick_oldest(t->segtab, 0, excess, ids, max, atimes, lens);
	ne = ext_pick_cold(t, ec, max);
	while (sum < excess && (i < n || j < ne)) {
		if (j < ne && (i == n || ec[j].used <= atimes[i])) {
			inos[(*ninos)++] = ec[j].ino;
			sum += ec[j++].size;
		} else {
			ids[k++] = ids[i];
			sum += lens[i++];
		}
	}
	if (i < n) /* not needed: free for the next pick */
		segtab_unbusy(t->segtab, ids + i, n - i);
	free(atimes);
	free(lens);
	free(ec);
	return k;
}

/* Is a demotion still needed? */
static int wanted(struct tier *t)
{
	return nvme_fill(t, NULL) > t->cfg->nvme_threshold - 0.05 || tier_cold_full(t);
}

int demote_segment(struct tier *t, uint64_t id)
{
	int ret = wanted(t) ? seg_demote(t, id) : 1;

	segtab_unbusy(t->segtab, &id, 1);
	return ret;
}

int demote_ext(struct tier *t, uint64_t ino)
{
	int ret = wanted(t) ? demote_extent(t, ino) : 1;

	/* one that changed meanwhile makes way for the next */
	return ret == 1 && wanted(t) ? 0 : ret;
}
