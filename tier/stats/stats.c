/*
 * DESIGN
 * - tier_snapshot() is the only reader of the counters and gauges the
 *   daemon reports; stats_json() (the stats xattr) and metrics_write() (the
 *   Prometheus file) only format a snapshot. Counters are atomics bumped
 *   where things happen (struct tier_stats); a snapshot reads each once,
 *   relaxed, so a view is consistent per figure, not across figures (as
 *   before: nothing here stops the daemon to read it).
 * - The walk over every file for the unevictable-chunk gauges costs
 *   O(files) under each inode's lock: only the metrics file asks for it
 *   (SNAP_CHUNKS), once per metrics_interval.
 */
#include "tier/stats/stats.h"

#include "index/journal.h"
#include "tier/segment/segtab.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

static void read_counters(struct tier_stats *d, struct tier_stats *s)
{
	d->bytes_spilled = LD(s->bytes_spilled);
	d->chunks_spilled = LD(s->chunks_spilled);
	d->segments_written = LD(s->segments_written);
	d->segments_deleted = LD(s->segments_deleted);
	d->segments_compacted = LD(s->segments_compacted);
	d->segments_demoted = LD(s->segments_demoted);
	d->state_copies = LD(s->state_copies);
	d->bytes_restored = LD(s->bytes_restored);
	d->chunks_restored = LD(s->chunks_restored);
	d->spill_ns = LD(s->spill_ns);
	d->restore_ns = LD(s->restore_ns);
	d->enospc = LD(s->enospc);
	d->write_waits = LD(s->write_waits);
	d->errors_io = LD(s->errors_io);
	d->errors_crc = LD(s->errors_crc);
	d->retries = LD(s->retries);
	d->write_wait_ns = LD(s->write_wait_ns);
	d->restore_waits = LD(s->restore_waits);
	d->restore_overshoots = LD(s->restore_overshoots);
	d->slow_op_ns = LD(s->slow_op_ns);
	d->slow_op = NULL; /* under t->lock: see tier_snapshot */
	hist_read(&d->h_spill, &s->h_spill);
	hist_read(&d->h_restore, &s->h_restore);
	hist_read(&d->h_wait, &s->h_wait);
	for (int k = 0; k < 2; k++) {
		lhist_read(&d->h_first[k], &s->h_first[k]);
		lhist_read(&d->h_rst[k], &s->h_rst[k]);
	}
	d->partial_restores = LD(s->partial_restores);
	d->readahead_chunks = LD(s->readahead_chunks);
	d->published_reads = LD(s->published_reads);
	d->buffer_replies = LD(s->buffer_replies);
	d->direct_reads = LD(s->direct_reads);
	d->direct_bytes = LD(s->direct_bytes);
	d->around_files = LD(s->around_files);
	d->ovl_writes = LD(s->ovl_writes);
	d->ovl_spills = LD(s->ovl_spills);
	d->ovl_bytes = LD(s->ovl_bytes);
	d->ovl_folds = LD(s->ovl_folds);
	d->ovl_fill_bytes = LD(s->ovl_fill_bytes);
	d->pt_open_now = LD(s->pt_open_now);
	d->pt_opens = LD(s->pt_opens);
	for (int i = 0; i < TIER_PT_NWHY; i++)
		d->pt_fallback[i] = LD(s->pt_fallback[i]);
	d->cache_drops = LD(s->cache_drops);
	d->kdrops_sent = LD(s->kdrops_sent);
	d->kdrops_owed = LD(s->kdrops_owed);
	d->ext_files = LD(s->ext_files);
	d->ext_created = LD(s->ext_created);
	d->ext_opens = LD(s->ext_opens);
	d->ext_seals = LD(s->ext_seals);
	d->ext_sealed_bytes = LD(s->ext_sealed_bytes);
	d->ext_written_bytes = LD(s->ext_written_bytes);
	d->ext_crc_errors = LD(s->ext_crc_errors);
	d->ext_orphans = LD(s->ext_orphans);
	d->ext_evicted = LD(s->ext_evicted);
	d->ext_demoted = LD(s->ext_demoted);
	d->ext_demoted_bytes = LD(s->ext_demoted_bytes);
	d->scrub_runs = LD(s->scrub_runs);
	d->scrub_bytes = LD(s->scrub_bytes);
	d->scrub_damaged = LD(s->scrub_damaged);
}

static int count_unevictable(void *arg, struct inode *in)
{
	struct tier_snapshot *s = arg;
	/* mode under the lock too: a write clears its set-id bits */
	idx_inode_lock(in);
	for (uint64_t c = 0; S_ISREG(idx_type(in)) && c < in->nchunks; c++) {
		struct chunk *ch = &in->chunks[c];
		int hot = ch->state == CHUNK_HOT_DIRTY || ch->state == CHUNK_HOT_CLEAN;
		if (ch->state == CHUNK_SPILLING)
			s->unevict_spilling++;
		else if (ch->state == CHUNK_RESTORING)
			s->unevict_restoring++;
		else if (hot && in->pinned)
			s->unevict_pinned++;
		else if (hot && in->pt_opens)
			s->unevict_passthrough++;
		else if (hot && ch->pins)
			s->unevict_in_use++;
	}
	idx_inode_unlock(in);
	return 0;
}

void tier_snapshot(struct tier *t, struct tier_snapshot *s, int flags)
{
	memset(s, 0, sizeof(*s));
	s->hot_used = hot_used(t->hot);
	s->hot_reserved = hot_reserved(t->hot);
	s->pt_pinned = hot_pinned(t->hot);
	s->hot_size = t->cfg->hot_size;
	s->hot_min = t->cfg->hot_min;
	pressure_get(t->pressure, &s->ps);
	/* the limit is the pressure thread's budget: from the same sample, not
	 * read apart from it (a move in between showed two different values) */
	s->hot_limit = s->ps.enabled ? s->ps.budget : hot_limit(t->hot);
	idx_counts(t->idx, &s->inodes, &s->files);
	segtab_totals(t->segtab, &s->segs, &s->seg_bytes, &s->seg_live);
	segtab_tier_bytes(t->segtab, s->tier_bytes);
	read_counters(&s->c, &t->st);
	s->writers_waiting = evict_waiters(t, &s->cold_full);
	s->cold_failing = evict_cold_failing(t);
	pthread_mutex_lock(&t->lock);
	s->pt_on = tier_pt(t) != NULL;
	s->slow_op = t->st.slow_op ? t->st.slow_op : "";
	pthread_mutex_unlock(&t->lock);
	if (t->jrnl) {
		s->jrnl_on = 1;
		s->jrnl_failed = jrnl_failed(t->jrnl);
		jrnl_stats(t->jrnl, &s->jrnl_bytes, &s->jrnl_checkpoints, &s->jrnl_syncs);
	}
	s->rec = t->rec;
	for (int k = 0; k < 2; k++) {
		struct store *st = k ? t->s3 : t->store;
		int n;
		if (!st)
			continue;
		s->store_name[k] = store_name(st);
		n = store_stat(st, s->dev[k], SNAP_DEVS);
		s->ndev[k] = n < 0 ? 0 : n > SNAP_DEVS ? SNAP_DEVS : n;
	}
	if (flags & SNAP_CHUNKS)
		idx_for_each(t->idx, count_unevictable, s);
}

/* snprintf at buf + *pos, keeping *pos the length the whole would need */
#define PUT(...)                                                                           \
	do {                                                                               \
		int n_ = snprintf(*pos < len ? buf + *pos : NULL, *pos < len ? len - *pos : 0, \
				  __VA_ARGS__);                                            \
		if (n_ > 0)                                                                \
			*pos += (size_t)n_;                                                \
	} while (0)

static void json_lat(const struct lhist *h, char *buf, size_t len, size_t *pos)
{
	PUT("{\"count\":%llu,\"p50_us\":%.1f,\"p99_us\":%.1f,\"mean_us\":%.1f}",
	    (unsigned long long)h->count, lhist_quantile(h, 0.5) / 1e3,
	    lhist_quantile(h, 0.99) / 1e3, h->count ? h->sum_ns / 1e3 / h->count : 0.0);
}

int stats_json(const struct tier_snapshot *s, int nvme_first, char *buf, size_t len)
{
	const struct tier_stats *c = &s->c;
	const struct pressure_stats *ps = &s->ps;
	double spill_s = c->spill_ns / 1e9, rest_s = c->restore_ns / 1e9;
	size_t p = 0, *pos = &p;
	int first = 1;

	PUT("{\"hot\":{\"used\":%llu,\"limit\":%llu,\"reserved\":%llu,\"hot_size\":%llu,"
	    "\"hot_min\":%llu},",
	    (unsigned long long)s->hot_used, (unsigned long long)s->hot_limit,
	    (unsigned long long)s->hot_reserved, (unsigned long long)s->hot_size,
	    (unsigned long long)s->hot_min);
	PUT("\"pressure\":{\"enabled\":%d,\"budget\":%llu,\"mem_reserve\":%llu,"
	    "\"mem_reserve_of\":\"%s\",\"mem_limit\":%llu,\"mem_limit_of\":\"%s\","
	    "\"mem_available\":%llu,\"cgroup\":%d,\"cgroup_limit\":%llu,\"cgroup_usage\":%llu,"
	    "\"available\":%llu,\"psi_some_avg10\":%.2f,\"psi_full_avg10\":%.2f,"
	    "\"psi_trigger\":%d,\"under_pressure\":%d,\"shrinks\":%llu,\"grows\":%llu,"
	    "\"last_change_ms\":%llu},",
	    ps->enabled, (unsigned long long)ps->budget, (unsigned long long)ps->mem_reserve,
	    ps->reserve_given ? "given" : "default", (unsigned long long)ps->mem_limit,
	    ps->limit_cgroup ? "cgroup" : "node", (unsigned long long)ps->mem_available,
	    ps->cgroup, (unsigned long long)ps->cg_limit, (unsigned long long)ps->cg_usage,
	    (unsigned long long)ps->available, ps->psi_some10, ps->psi_full10, ps->psi_trigger,
	    ps->pressure, (unsigned long long)ps->shrinks, (unsigned long long)ps->grows,
	    (unsigned long long)ps->last_change_ms);
	PUT("\"pid\":%ld,\"inodes\":%llu,\"files\":%llu,", (long)getpid(),
	    (unsigned long long)s->inodes, (unsigned long long)s->files);
	PUT("\"segments\":{\"count\":%llu,\"bytes\":%llu,\"live_bytes\":%llu,"
	    "\"live_ratio\":%.3f,\"written\":%llu,\"deleted\":%llu,"
	    "\"compacted\":%llu,\"demoted\":%llu},",
	    (unsigned long long)s->segs, (unsigned long long)s->seg_bytes,
	    (unsigned long long)s->seg_live,
	    s->seg_bytes ? (double)s->seg_live / (double)s->seg_bytes : 1.0,
	    (unsigned long long)c->segments_written, (unsigned long long)c->segments_deleted,
	    (unsigned long long)c->segments_compacted, (unsigned long long)c->segments_demoted);
	PUT("\"tiers\":{\"nvme\":%llu,\"s3\":%llu},",
	    (unsigned long long)(nvme_first ? s->tier_bytes[0] : 0),
	    (unsigned long long)(nvme_first ? s->tier_bytes[1] : s->tier_bytes[0]));
	PUT("\"spilled\":{\"bytes\":%llu,\"chunks\":%llu,\"MiBps\":%.1f},",
	    (unsigned long long)c->bytes_spilled, (unsigned long long)c->chunks_spilled,
	    spill_s > 0 ? c->bytes_spilled / 1048576.0 / spill_s : 0.0);
	PUT("\"restored\":{\"bytes\":%llu,\"chunks\":%llu,\"MiBps\":%.1f},",
	    (unsigned long long)c->bytes_restored, (unsigned long long)c->chunks_restored,
	    rest_s > 0 ? c->bytes_restored / 1048576.0 / rest_s : 0.0);
	PUT("\"writers_waiting\":%u,\"write_waits\":%llu,\"enospc\":%llu,"
	    "\"restore_waits\":%llu,\"restore_overshoots\":%llu,",
	    s->writers_waiting, (unsigned long long)c->write_waits, (unsigned long long)c->enospc,
	    (unsigned long long)c->restore_waits, (unsigned long long)c->restore_overshoots);
	PUT("\"slow_request\":{\"op\":\"%s\",\"ms\":%llu},", s->slow_op,
	    (unsigned long long)(c->slow_op_ns / 1000000));
	PUT("\"cold_full\":%d,\"cold_failing\":%d,\"errors\":{\"io\":%llu,\"crc\":%llu},", s->cold_full,
	    s->cold_failing, (unsigned long long)c->errors_io, (unsigned long long)c->errors_crc);
	PUT("\"journal\":{\"enabled\":%d,\"failed\":%d,\"bytes\":%llu,\"checkpoints\":%llu,"
	    "\"syncs\":%llu,\"bucket_copies\":%llu},",
	    s->jrnl_on, s->jrnl_failed, (unsigned long long)s->jrnl_bytes,
	    (unsigned long long)s->jrnl_checkpoints, (unsigned long long)s->jrnl_syncs,
	    (unsigned long long)c->state_copies);
	PUT("\"recovery\":{\"records\":%llu,\"truncated_bytes\":%llu,\"dropped_inodes\":%llu,"
	    "\"damaged_chunks\":%llu,\"orphan_segments\":%llu,\"orphan_hot_files\":%llu,"
	    "\"past_eof_chunks\":%llu,\"adopted\":%d,\"adopt_gone_segments\":%llu,\"ms\":%llu},"
	    "\"lost_files\":%llu,\"damaged_files\":%llu,",
	    (unsigned long long)s->rec.records, (unsigned long long)s->rec.truncated,
	    (unsigned long long)s->rec.dropped_inodes, (unsigned long long)s->rec.damaged_chunks,
	    (unsigned long long)s->rec.orphan_segments,
	    (unsigned long long)s->rec.orphan_hot_files, (unsigned long long)s->rec.past_eof_chunks,
	    s->rec.adopted, (unsigned long long)s->rec.adopt_gone_segments,
	    (unsigned long long)s->rec.recover_ms, (unsigned long long)s->rec.lost_files,
	    (unsigned long long)s->rec.damaged_files);
	PUT("\"partial_restores\":%llu,\"readahead_chunks\":%llu,",
	    (unsigned long long)c->partial_restores, (unsigned long long)c->readahead_chunks);
	PUT("\"published_reads\":%llu,\"buffer_replies\":%llu,\"direct_reads\":%llu,",
	    (unsigned long long)c->published_reads, (unsigned long long)c->buffer_replies,
	    (unsigned long long)c->direct_reads);
	PUT("\"admission\":{\"direct_read_bytes\":%llu,\"written_around_files\":%llu},",
	    (unsigned long long)c->direct_bytes, (unsigned long long)c->around_files);
	PUT("\"overlay\":{\"writes\":%llu,\"spills\":%llu,\"spilled_bytes\":%llu,\"folds\":%llu,"
	    "\"fill_bytes\":%llu},",
	    (unsigned long long)c->ovl_writes, (unsigned long long)c->ovl_spills,
	    (unsigned long long)c->ovl_bytes, (unsigned long long)c->ovl_folds,
	    (unsigned long long)c->ovl_fill_bytes);
	PUT("\"passthrough\":{\"on\":%d,\"open\":%llu,\"opens\":%llu,\"fallback\":{"
	    "\"cold\":%llu,\"write\":%llu,\"shared\":%llu,\"error\":%llu,\"room\":%llu},"
	    "\"pinned\":%llu,\"cache_drops\":%llu},",
	    s->pt_on, (unsigned long long)c->pt_open_now, (unsigned long long)c->pt_opens,
	    (unsigned long long)c->pt_fallback[TIER_PT_COLD],
	    (unsigned long long)c->pt_fallback[TIER_PT_WRITE],
	    (unsigned long long)c->pt_fallback[TIER_PT_SHARED],
	    (unsigned long long)c->pt_fallback[TIER_PT_ERROR],
	    (unsigned long long)c->pt_fallback[TIER_PT_ROOM], (unsigned long long)s->pt_pinned,
	    (unsigned long long)c->cache_drops);
	PUT("\"extents\":{\"files\":%llu,\"created\":%llu,\"opens\":%llu,\"seals\":%llu,"
	    "\"sealed_bytes\":%llu,\"written_bytes\":%llu,\"crc_errors\":%llu,\"orphans\":%llu,\"evicted\":%llu,"
	    "\"demoted\":%llu,\"demoted_bytes\":%llu},",
	    (unsigned long long)c->ext_files, (unsigned long long)c->ext_created,
	    (unsigned long long)c->ext_opens, (unsigned long long)c->ext_seals,
	    (unsigned long long)c->ext_sealed_bytes, (unsigned long long)c->ext_written_bytes,
	    (unsigned long long)c->ext_crc_errors,
	    (unsigned long long)c->ext_orphans, (unsigned long long)c->ext_evicted,
	    (unsigned long long)c->ext_demoted, (unsigned long long)c->ext_demoted_bytes);
	PUT("\"scrub\":{\"runs\":%llu,\"bytes\":%llu,\"damaged\":%llu},",
	    (unsigned long long)c->scrub_runs, (unsigned long long)c->scrub_bytes,
	    (unsigned long long)c->scrub_damaged);
	PUT("\"page_cache\":{\"drops_sent\":%llu,\"drops_owed\":%llu},",
	    (unsigned long long)c->kdrops_sent, (unsigned long long)c->kdrops_owed);
	/* first byte, then whole-chunk restore; nvme, then s3 */
	PUT("\"latency\":{\"first_byte\":{\"nvme\":");
	json_lat(&c->h_first[0], buf, len, pos);
	PUT(",\"s3\":");
	json_lat(&c->h_first[1], buf, len, pos);
	PUT("},\"restore\":{\"nvme\":");
	json_lat(&c->h_rst[0], buf, len, pos);
	PUT(",\"s3\":");
	json_lat(&c->h_rst[1], buf, len, pos);
	PUT("}},\"cold\":[");
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < s->ndev[k]; i++, first = 0)
			PUT("%s{\"dir\":\"%s\",\"used\":%llu,\"avail\":%llu,\"failed\":%d}",
			    first ? "" : ",", s->dev[k][i].name,
			    (unsigned long long)s->dev[k][i].used,
			    (unsigned long long)s->dev[k][i].avail, s->dev[k][i].failed);
	PUT("]}");
	return p > (size_t)INT32_MAX ? INT32_MAX : (int)p;
}
