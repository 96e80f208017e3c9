/*
 * tier.c — the tier handle: tier_new / tier_start / tier_stop / tier_free
 * (it creates the rooms and starts their threads, in order, and stops them
 * in reverse), the unmount (tier_detach: flush what is dirty, give the RAM
 * back), the hooks the index and the pressure thread call, the request
 * timings and the stats snapshot. File I/O (reads, writes, opens,
 * truncate, fallocate, lseek, fsync, the per-file controls) is tier_io.c.
 * Threading: new, start, stop, detach and free from one thread, around
 * everything else; the rest as tier.h says. Lock order: index lock, inode
 * lock, then one leaf: the tier lock (slow_op) or a room's own.
 */
#include "tier/tier_i.h"
#include "tier/spill/maint.h"
#include "tier/stats/metrics.h"
#include "tier/restore/restore.h"
#include "tier/stats/stats.h"
#include "tier/tier.h"
#include "tier/extent/extent.h"
#include "tier/extent/scrub.h"

#include "index/journal.h"
#include "common/uring.h"

#include "common/clock.h"
#include "common/log.h"
#include "tier/store/store.h"
#include "tier/hot/pressure.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void drop_inode(void *arg, struct inode *in)
{
	struct tier *t = arg;
	idx_inode_lock(in);
	for (uint64_t c = 0; c < in->nchunks; c++)
		chain_forget_cold(t, &in->chunks[c]);
	idx_inode_unlock(in);
	ext_drop(t, in);
	hot_drop(t->hot, in);
	evict_room_freed(t);
}

/* hot_new: a hot file under an older spillway's marker is adopted only when
 * the index has its inode (as a file). */
static int idx_has_file(void *arg, uint64_t ino)
{
	struct inode *in = idx_get(arg, ino);
	int ret = in && S_ISREG(idx_type(in));

	if (in)
		idx_put(arg, in);
	return ret;
}

/* The budget moved (pressure thread): the evictor spills down to it, and
 * writers waiting for room look again. */
static void budget_changed(void *arg, uint64_t old_budget, uint64_t new_budget)
{
	evict_budget_changed(arg);
}

int tier_new(const struct spw_config *cfg, struct index *idx, struct tier **out, char *err,
	     size_t errlen)
{
	struct tier *t = calloc(1, sizeof(*t));
	struct hot_owner own = {.mountpoint = cfg->mountpoint, .known = idx_has_file, .arg = idx};
	const char *why;
	int ret;

	if (!t)
		return -ENOMEM;
	t->cfg = cfg;
	t->idx = idx;
	t->chunk_size = cfg->chunk_size;
	t->admit.horizon = UINT32_MAX; /* nothing evicted yet */
	pthread_mutex_init(&t->lock, NULL);
	if ((ret = evict_new(t)) < 0 || (ret = segtab_new(idx, &t->segtab)) < 0) {
		evict_free(t);
		free(t);
		return ret;
	}
	if ((ret = restore_new(t)) < 0 || (ret = inval_new(t)) < 0) {
		restore_free(t);
		segtab_free(t->segtab);
		evict_free(t);
		free(t);
		return ret;
	}
	if (cfg->io_psync)
		uring_disable();
	if (getrandom(t->uuid, sizeof(t->uuid), 0) != sizeof(t->uuid))
		memset(t->uuid, 0x5a, sizeof(t->uuid));
	/* the state first: it has the filesystem's uuid the stores are named by */
	if ((ret = recover_open(t, err, errlen)) < 0) {
		inval_free(t);
		restore_free(t);
		segtab_free(t->segtab);
		evict_free(t);
		free(t);
		return ret;
	}
	own.persistent = t->jrnl != NULL;
	memcpy(own.id, t->uuid, sizeof(own.id));
	ret = hot_new(cfg->hot_dir, cfg->hot_size, &own, &t->hot, &why);
	if (ret < 0) {
		snprintf(err, errlen, "option 'hot_dir': '%s': %s%s%s", cfg->hot_dir,
			 why ? why : "", why ? ": " : "", strerror(-ret));
		goto fail;
	}
	if ((ret = pressure_new(cfg, t->hot, budget_changed, t, &t->pressure)) < 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	if ((cfg->nvme && (ret = stores_open_nvme(t, err, errlen)) < 0) ||
	    (cfg->s3 && (ret = stores_open_s3(t, 1, cfg->nvme ? &t->s3 : &t->store, err, errlen)) < 0) ||
	    (ret = ext_room_new(t, err, errlen)) < 0 || (ret = recover_finish(t, err, errlen)) < 0)
		goto fail;
	if ((ret = scrub_new(t)) < 0)
		goto fail;
	idx_set_release_hook(idx, drop_inode, t);
	*out = t;
	return 0;
fail:
	idx_set_journal(idx, NULL);
	jrnl_close(t->jrnl, 0);
	if (t->store)
		store_close(t->store);
	if (t->s3)
		store_close(t->s3);
	stores_unlock_nvme(t);
	ext_room_free(t);
	state_s3_free(t);
	pressure_free(t->pressure);
	hot_free(t->hot);
	inval_free(t);
	restore_free(t);
	segtab_free(t->segtab);
	evict_free(t);
	free(t);
	return ret;
}

/* ---- unmount: give the RAM back ---- */

struct flush_log {
	struct tier *t;
	uint64_t base, t0; /* bytes_spilled and clock at the start */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int done; /* protected by lock */
};

/* Unmount progress, every 2 s while the flush runs (a long one is no hang). */
static void *flush_logger(void *arg)
{
	struct flush_log *fl = arg;
	struct tier *t = fl->t;
	pthread_mutex_lock(&fl->lock);
	while (!fl->done) {
		struct timespec dl = clock_deadline_ms(2000);
		if (pthread_cond_timedwait(&fl->cond, &fl->lock, &dl) != ETIMEDOUT || fl->done)
			continue;
		uint64_t done = __atomic_load_n(&t->st.bytes_spilled, __ATOMIC_RELAXED) - fl->base;
		uint64_t total = evict_flush_total(t);
		double s = (clock_now_ns() - fl->t0) / 1e9;
		log_info("unmount: spilling: %llu MiB left of %llu MiB, %.0f MiB/s",
			 (unsigned long long)((total > done ? total - done : 0) >> 20),
			 (unsigned long long)(total >> 20), s > 0 ? done / 1048576.0 / s : 0.0);
	}
	pthread_mutex_unlock(&fl->lock);
	return NULL;
}

/* Spill every dirty chunk and drop every hot copy (as fsync does, for the
 * whole filesystem), with a progress line every 2 s. 0 or -errno. */
static int flush_all(struct tier *t)
{
	struct flush_log fl = {.t = t, .t0 = clock_now_ns()};
	pthread_t th;
	int ret, logging;

	fl.base = __atomic_load_n(&t->st.bytes_spilled, __ATOMIC_RELAXED);
	pthread_mutex_init(&fl.lock, NULL);
	pthread_cond_init(&fl.cond, NULL);
	logging = pthread_create(&th, NULL, flush_logger, &fl) == 0;
	ret = evict_flush_all(t);
	if (logging) {
		pthread_mutex_lock(&fl.lock);
		fl.done = 1;
		pthread_cond_signal(&fl.cond);
		pthread_mutex_unlock(&fl.lock);
		pthread_join(th, NULL);
	}
	pthread_cond_destroy(&fl.cond);
	pthread_mutex_destroy(&fl.lock);
	uint64_t done = __atomic_load_n(&t->st.bytes_spilled, __ATOMIC_RELAXED) - fl.base;
	double s = (clock_now_ns() - fl.t0) / 1e9;
	if (ret == 0)
		log_info("unmount: spilled %llu MiB in %.1f s (%.0f MiB/s)",
			 (unsigned long long)(done >> 20), s, s > 0 ? done / 1048576.0 / s : 0.0);
	else
		log_err("unmount: cannot spill every dirty chunk: %s (%llu MiB of %llu MiB "
			"spilled); the rest stays in %s for the next mount",
			strerror(-ret), (unsigned long long)(done >> 20),
			(unsigned long long)(evict_flush_total(t) >> 20),
			t->cfg->hot_dir);
	return ret;
}

/* After the last checkpoint: remove the hot files of files with nothing in
 * RAM (all spilled, or holes) and of unlinked files (recovery drops those);
 * a file with a chunk still only in RAM keeps its hot file. Returns the
 * hot files kept; *kept_bytes their RAM. */
static uint64_t remove_hot_files(struct tier *t, uint64_t *kept_bytes)
{
	uint64_t *inos, kept = 0;
	size_t n;

	*kept_bytes = 0;
	if (hot_list_inos(t->hot, &inos, &n) < 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		struct inode *in = idx_get(t->idx, inos[i]);
		int hot = 0;
		if (!in)
			continue;
		idx_inode_lock(in);
		for (uint64_t c = 0; c < in->nchunks && !hot; c++)
			hot = in->chunks[c].state != CHUNK_ABSENT &&
			      in->chunks[c].state != CHUNK_COLD;
		if (!hot || in->nlink == 0) {
			hot_drop(t->hot, in);
		} else {
			kept++;
			*kept_bytes += in->hot_bytes;
		}
		idx_inode_unlock(in);
		idx_put(t->idx, in);
	}
	free(inos);
	return kept;
}

void tier_detach(struct tier *t)
{
	int flush;
	if (!t || !t->jrnl)
		return; /* volatile: the index drops every hot file as it is freed */
	inval_set(t, NULL, NULL); /* the FUSE session is gone: no page cache to drop, */
	__atomic_store_n(&t->pt, NULL, __ATOMIC_RELEASE); /* no kernel reads a hot file any more */
	flush = t->store && !t->cfg->keep_hot;
	if (flush && evict_cold_failing(t)) {
		log_warn("unmount: the cold tier is failing: the hot files stay in %s (%llu MiB "
			 "of RAM) for the next mount",
			 t->cfg->hot_dir, (unsigned long long)(hot_used(t->hot) >> 20));
		flush = 0;
	} else if (flush) {
		flush_all(t);
	}
	/* the extents' seals still due: synced and crc'd before the checkpoint */
	ext_seal_all_due(t);
	/* a last checkpoint: the next mount starts from it, no replay */
	jrnl_close(t->jrnl, 1);
	t->jrnl = NULL;
	segtab_set_journal(t->segtab, NULL);
	state_s3_release(t);
	idx_set_journal(t->idx, NULL);
	/* the remaining hot files and the segments belong to the state now:
	 * the index must not drop them while it is freed */
	idx_set_release_hook(t->idx, NULL, NULL);
	t->keep = 1;
	if (flush) {
		uint64_t bytes, kept = remove_hot_files(t, &bytes);
		if (kept)
			log_warn("unmount: %llu files keep their hot file in %s (%llu MiB of RAM): "
				 "their data could not be spilled; the next mount recovers them",
				 (unsigned long long)kept, t->cfg->hot_dir,
				 (unsigned long long)(bytes >> 20));
		else
			log_info("unmount: every file is in the cold tier; nothing left in RAM");
	} else if (!t->store) {
		log_info("unmount: no cold tier: the hot files stay in %s (%llu MiB of RAM) for "
			 "the next mount",
			 t->cfg->hot_dir, (unsigned long long)(hot_used(t->hot) >> 20));
	} else if (t->cfg->keep_hot) {
		log_info("unmount: keep_hot: the hot files stay in %s (%llu MiB of RAM) for a "
			 "fast remount",
			 t->cfg->hot_dir, (unsigned long long)(hot_used(t->hot) >> 20));
	}
}

int tier_start(struct tier *t)
{
	int ret;
	/* every thread starts here, after fuse_daemonize: none survives fork() */
	if (t->jrnl && (ret = jrnl_run(t->jrnl)) < 0)
		return ret;
	if ((ret = metrics_start(t)) < 0)
		return ret;
	if ((ret = pressure_start(t->pressure)) < 0)
		return ret;
	/* with or without a cold tier: the last close drops the kernel's copy */
	if ((ret = inval_start(t)) < 0)
		return ret;
	ext_room_start(t);
	if (!t->store)
		return 0;
	if ((ret = restore_start(t)) < 0)
		return ret;
	if ((ret = maint_start(t)) < 0)
		return ret;
	return evict_start(t);
}

void tier_stop(struct tier *t)
{
	/* the scrub first: its thread reads extents through the index */
	scrub_stop(t);
	/* a dead S3 endpoint: the threads joined below end their requests at
	 * once instead of after minutes of retries */
	store_unmounting(t->store);
	store_unmounting(t->s3);
	pressure_stop(t->pressure);
	metrics_stop(t);
	if (t->store) {
		evict_stop(t);
		maint_stop(t);
		restore_stop(t);
	}
	inval_stop(t);
}

void tier_free(struct tier *t)
{
	if (!t)
		return;
	evict_pool_stop(t); /* after the unmount flush (tier_detach) */
	/* Without a journal the segments cannot be found again: remove them. */
	if (!t->keep)
		segtab_remove_stored(t->segtab);
	if (t->store && !t->keep)
		stores_remove_all(t);
	if (t->store)
		store_close(t->store);
	if (t->s3)
		store_close(t->s3);
	stores_unlock_nvme(t);
	scrub_free(t);
	ext_room_free(t);
	state_s3_free(t);
	segtab_free(t->segtab);
	pressure_free(t->pressure);
	hot_free(t->hot);
	inval_free(t);
	restore_free(t);
	evict_free(t);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

void tier_set_inval(struct tier *t, tier_inval_fn fn, void *arg)
{
	inval_set(t, fn, arg);
}


#define LD(x) ((unsigned long long)__atomic_load_n(&(x), __ATOMIC_RELAXED))

void tier_note_request(struct tier *t, const char *op, uint64_t ns)
{
	if (ns <= __atomic_load_n(&t->st.slow_op_ns, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&t->lock);
	if (ns > t->st.slow_op_ns) {
		__atomic_store_n(&t->st.slow_op_ns, ns, __ATOMIC_RELAXED);
		t->st.slow_op = op;
	}
	pthread_mutex_unlock(&t->lock);
}

int tier_stats_json(struct tier *t, char *buf, size_t len)
{
	struct tier_snapshot snap;
	tier_snapshot(t, &snap, 0);
	return stats_json(&snap, t->cfg->nvme != NULL, buf, len);
}

int tier_scrub_start(struct tier *t, uint64_t limit)
{
	return scrub_start(t, limit);
}

int tier_scrub_cancel(struct tier *t)
{
	return scrub_cancel(t);
}

int tier_scrub_json(struct tier *t, char *buf, size_t len)
{
	return scrub_json(t, buf, len);
}

void tier_statfs(struct tier *t, uint64_t *total, uint64_t *avail)
{
	uint64_t used = hot_used(t->hot), lim = hot_limit(t->hot);
	*total = lim;
	*avail = used < lim ? lim - used : 0;
	for (int k = 0; k < 2; k++) {
		struct store *st = k ? t->s3 : t->store;
		struct store_dev_stat devs[16];
		int n = st ? store_stat(st, devs, 16) : 0;
		for (int i = 0; i < n && i < 16; i++) {
			*total += devs[i].total;
			if (!devs[i].failed)
				*avail += devs[i].avail;
		}
	}
}
