/*
 * demote — move segments from the first cold tier (nvme) to S3, one round
 * at a time on the evictor's thread (demote_round).
 *
 * DESIGN
 * - Runs only with both tiers, when the nvme tier is fuller than
 *   nvme_threshold; then demotes the least recently read segments until
 *   it is 5 % below (at most 1024 per round).
 * - A segment is immutable: a plain copy, then its table entry switches to
 *   S3 and is journaled durably, and only then the nvme copy goes. A
 *   restore that looked it up a moment before retries on ENOENT.
 */
#include "tier/tier_i.h"

#include "common/log.h"
#include "index/journal.h"
#include "tier/segment.h"
#include "tier/store/store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Fill fraction of the nvme tier (0..1). */
static double nvme_fill(struct tier *t)
{
	struct store_dev_stat devs[16];
	uint64_t total = 0, avail = 0;
	int n = store_stat(t->store, devs, 16);
	for (int i = 0; i < n && i < 16; i++) {
		total += devs[i].total;
		avail += devs[i].avail;
	}
	return total ? 1.0 - (double)avail / (double)total : 0.0;
}

/* Copy segment id to S3 (segments are immutable: a plain copy), switch the
 * table entry, then delete the local copy. */
static int seg_demote(struct tier *t, uint64_t id)
{
	struct store_put *put = NULL;
	uint64_t len, off;
	uint32_t dev, newdev = 0;
	void *buf = seg_buf_alloc(SEG_STAGE_SIZE);
	int ret;

	if (!buf)
		return -ENOMEM;
	pthread_mutex_lock(&t->segtab.lock);
	len = t->segtab.v[id].len;
	dev = t->segtab.v[id].dev;
	pthread_mutex_unlock(&t->segtab.lock);
	if ((ret = store_put_begin(t->s3, id, len, &put)) < 0)
		goto out;
	for (off = 0; off < len; off += SEG_STAGE_SIZE) {
		size_t n = len - off < SEG_STAGE_SIZE ? len - off : SEG_STAGE_SIZE;
		if ((ret = store_read(t->store, id, dev, off, buf, n)) < 0 ||
		    (ret = store_put_append(put, buf, n)) < 0) {
			store_put_abort(put);
			goto out;
		}
	}
	ret = store_put_finish(put, &newdev);
	if (ret < 0)
		goto out;
	pthread_mutex_lock(&t->segtab.lock);
	t->segtab.v[id].store = 1;
	t->segtab.v[id].dev = newdev;
	pthread_mutex_unlock(&t->segtab.lock);
	/* the new home must be durable in the journal before the old copy goes */
	if ((ret = segtab_log(t, id, 0)) < 0 || (t->jrnl && (ret = jrnl_sync(t->jrnl)) < 0))
		goto out;
	/* a restore that looked it up a moment ago retries on ENOENT */
	store_remove(t->store, id, dev);
	__atomic_add_fetch(&t->st.segments_demoted, 1, __ATOMIC_RELAXED);
out:
	seg_buf_free(buf);
	if (ret < 0)
		log_warn("demote: segment %llu to s3: %s", (unsigned long long)id, strerror(-ret));
	return ret;
}

void demote_round(struct tier *t)
{
	if (!t->s3 || nvme_fill(t) <= t->cfg->nvme_threshold)
		return;
	for (int guard = 0; guard < 1024 && nvme_fill(t) > t->cfg->nvme_threshold - 0.05; guard++) {
		uint64_t pick = 0, best = UINT64_MAX;
		pthread_mutex_lock(&t->segtab.lock);
		for (uint64_t id = 1; id < t->segtab.next && id < t->segtab.cap; id++) {
			struct seg_info *si = &t->segtab.v[id];
			if (si->len && !si->store && !si->gc_busy && si->atime < best) {
				best = si->atime;
				pick = id;
			}
		}
		if (pick)
			t->segtab.v[pick].gc_busy = 1;
		pthread_mutex_unlock(&t->segtab.lock);
		if (!pick)
			return;
		int ret = seg_demote(t, pick);
		pthread_mutex_lock(&t->segtab.lock);
		t->segtab.v[pick].gc_busy = 0;
		pthread_mutex_unlock(&t->segtab.lock);
		if (ret < 0)
			return;
	}
}
