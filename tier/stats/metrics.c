/*
 * DESIGN
 * - Counters live in struct tier_stats (atomics, bumped where things
 *   happen); this file only renders one snapshot of them (stats.c), the
 *   same the stats xattr renders as JSON. Names follow Prometheus
 *   conventions: spillway_<what>_<unit>[_total], histograms in seconds.
 * - The file is written to FILE.tmp and renamed over FILE, so a scraper
 *   (node_exporter's textfile collector) never reads half a sample.
 */
#include "tier/tier_i.h"
#include "tier/stats/metrics.h"
#include "tier/stats/stats.h"

#include "common/clock.h"
#include "common/log.h"
#include "tier/hot/pressure.h"
#include "tier/store/store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void counter(FILE *f, const char *name, const char *help, unsigned long long v)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, v);
}

#define U(x) ((unsigned long long)(x))

void metrics_write(struct tier *t, FILE *f)
{
	struct tier_snapshot *s = malloc(sizeof(*s));
	const struct tier_stats *c;
	const struct pressure_stats *ps;
	if (!s)
		return;
	tier_snapshot(t, s, SNAP_CHUNKS);
	c = &s->c;
	ps = &s->ps;
	fprintf(f, "# HELP spillway_tier_used_bytes Bytes spillway holds in each tier.\n"
		   "# TYPE spillway_tier_used_bytes gauge\n");
	fprintf(f, "spillway_tier_used_bytes{tier=\"hot\"} %llu\n", U(s->hot_used));
	for (int k = 0; k < 2; k++)
		if (s->store_name[k])
			fprintf(f, "spillway_tier_used_bytes{tier=\"%s\"} %llu\n", s->store_name[k],
				U(s->tier_bytes[k]));
	fprintf(f,
		"# HELP spillway_tier_limit_bytes RAM budget of the hot tier.\n"
		"# TYPE spillway_tier_limit_bytes gauge\n"
		"spillway_tier_limit_bytes{tier=\"hot\"} %llu\n",
		U(s->hot_limit));
	fprintf(f,
		"# HELP spillway_hot_size_bytes The hot tier's ceiling (hot_size).\n"
		"# TYPE spillway_hot_size_bytes gauge\nspillway_hot_size_bytes %llu\n"
		"# HELP spillway_hot_min_bytes The hot tier's floor under memory pressure.\n"
		"# TYPE spillway_hot_min_bytes gauge\nspillway_hot_min_bytes %llu\n"
		"# HELP spillway_mem_available_bytes Memory available to the daemon "
		"(node MemAvailable, or less in its cgroup).\n"
		"# TYPE spillway_mem_available_bytes gauge\n"
		"spillway_mem_available_bytes %llu\n"
		"# HELP spillway_memory_pressure_psi_some_avg10 PSI memory some avg10 "
		"(percent; node or cgroup, the higher).\n"
		"# TYPE spillway_memory_pressure_psi_some_avg10 gauge\n"
		"spillway_memory_pressure_psi_some_avg10 %.2f\n"
		"# HELP spillway_memory_pressure 1 while under memory pressure.\n"
		"# TYPE spillway_memory_pressure gauge\nspillway_memory_pressure %d\n",
		U(ps->hot_size), U(ps->hot_min), U(ps->available), ps->psi_some10, ps->pressure);
	counter(f, "spillway_hot_budget_shrinks_total",
		"Times memory pressure shrank the hot budget.", ps->shrinks);
	counter(f, "spillway_hot_budget_grows_total",
		"Times the hot budget grew back after pressure.", ps->grows);
	/* each family's samples must stay together: one pass per family */
	for (int fam = 0; fam < 2; fam++) {
		fprintf(
		    f,
		    fam ? "# HELP spillway_cold_dir_failed 1 while a cold directory is skipped.\n"
			  "# TYPE spillway_cold_dir_failed gauge\n"
			: "# HELP spillway_cold_dir_avail_bytes Free bytes of each cold "
			  "directory.\n"
			  "# TYPE spillway_cold_dir_avail_bytes gauge\n");
		for (int k = 0; k < 2; k++)
			for (int i = 0; i < s->ndev[k]; i++) {
				const struct store_dev_stat *d = &s->dev[k][i];
				if (fam)
					fprintf(f,
						"spillway_cold_dir_failed{tier=\"%s\",dir=\"%s\"} %d\n",
						s->store_name[k], d->name, d->failed);
				else
					fprintf(f,
						"spillway_cold_dir_avail_bytes{tier=\"%s\",dir=\"%s\"} "
						"%llu\n",
						s->store_name[k], d->name, U(d->avail));
			}
	}
	fprintf(f,
		"# HELP spillway_segments Segments stored in the cold tiers.\n"
		"# TYPE spillway_segments gauge\nspillway_segments %llu\n",
		U(s->segs));
	fprintf(f,
		"# HELP spillway_segment_bytes Bytes of the stored segments.\n"
		"# TYPE spillway_segment_bytes gauge\nspillway_segment_bytes %llu\n",
		U(s->seg_bytes));
	fprintf(f,
		"# HELP spillway_segment_live_bytes Segment bytes still referenced.\n"
		"# TYPE spillway_segment_live_bytes gauge\nspillway_segment_live_bytes %llu\n",
		U(s->seg_live));

	counter(f, "spillway_spilled_bytes_total", "Chunk bytes written into segments.",
		c->bytes_spilled);
	counter(f, "spillway_spilled_chunks_total", "Chunks written into segments.",
		c->chunks_spilled);
	counter(f, "spillway_restored_bytes_total", "Chunk bytes read back into RAM.",
		c->bytes_restored);
	counter(f, "spillway_restored_chunks_total", "Chunks read back into RAM.",
		c->chunks_restored);
	counter(f, "spillway_segments_written_total", "Segments written.", c->segments_written);
	counter(f, "spillway_segments_deleted_total", "Segments deleted by GC.",
		c->segments_deleted);
	counter(f, "spillway_segments_compacted_total", "Segments compacted by GC.",
		c->segments_compacted);
	counter(f, "spillway_segments_demoted_total", "Segments moved from NVMe to S3.",
		c->segments_demoted);
	counter(f, "spillway_enospc_total", "Writes failed with ENOSPC.", c->enospc);
	counter(f, "spillway_writer_waits_total", "Writes that waited for room.", c->write_waits);
	fprintf(f,
		"# HELP spillway_errors_total Errors by kind.\n"
		"# TYPE spillway_errors_total counter\n"
		"spillway_errors_total{kind=\"io\"} %llu\n"
		"spillway_errors_total{kind=\"crc\"} %llu\n",
		U(c->errors_io), U(c->errors_crc));
	if (s->jrnl_on) {
		fprintf(f,
			"# HELP spillway_journal_read_only 1 after a journal write or sync failed "
			"(changes fail with EIO).\n"
			"# TYPE spillway_journal_read_only gauge\nspillway_journal_read_only %d\n",
			s->jrnl_failed);
		counter(f, "spillway_journal_checkpoints_total", "Checkpoints written.",
			s->jrnl_checkpoints);
		counter(f, "spillway_journal_syncs_total", "Journal fdatasyncs (group commits).",
			s->jrnl_syncs);
		fprintf(f,
			"# HELP spillway_lost_files Files found lost at mount (data only in RAM, "
			"RAM gone).\n# TYPE spillway_lost_files gauge\nspillway_lost_files %llu\n",
			U(s->rec.lost_files));
	}
	fprintf(f,
		"# HELP spillway_writers_waiting Writers waiting for room now.\n"
		"# TYPE spillway_writers_waiting gauge\nspillway_writers_waiting %u\n",
		s->writers_waiting);
	fprintf(f,
		"# HELP spillway_chunks_unevictable Hot chunks the evictor cannot take now.\n"
		"# TYPE spillway_chunks_unevictable gauge\n"
		"spillway_chunks_unevictable{reason=\"in_use\"} %llu\n"
		"spillway_chunks_unevictable{reason=\"pinned\"} %llu\n"
		"spillway_chunks_unevictable{reason=\"spilling\"} %llu\n"
		"spillway_chunks_unevictable{reason=\"restoring\"} %llu\n"
		"spillway_chunks_unevictable{reason=\"passthrough\"} %llu\n",
		U(s->unevict_in_use), U(s->unevict_pinned), U(s->unevict_spilling),
		U(s->unevict_restoring), U(s->unevict_passthrough));
	fprintf(f,
		"# HELP spillway_passthrough_open Opens the kernel serves from the hot file "
		"itself now.\n# TYPE spillway_passthrough_open gauge\nspillway_passthrough_open "
		"%llu\n",
		U(c->pt_open_now));
	counter(f, "spillway_passthrough_opens_total",
		"Opens passed through to the hot file (reads never reach the daemon).",
		c->pt_opens);
	fprintf(f,
		"# HELP spillway_passthrough_fallbacks_total Opens served through the daemon "
		"that asked for passthrough, by reason.\n"
		"# TYPE spillway_passthrough_fallbacks_total counter\n"
		"spillway_passthrough_fallbacks_total{reason=\"cold\"} %llu\n"
		"spillway_passthrough_fallbacks_total{reason=\"write\"} %llu\n"
		"spillway_passthrough_fallbacks_total{reason=\"shared\"} %llu\n"
		"spillway_passthrough_fallbacks_total{reason=\"error\"} %llu\n"
		"spillway_passthrough_fallbacks_total{reason=\"room\"} %llu\n",
		U(c->pt_fallback[TIER_PT_COLD]), U(c->pt_fallback[TIER_PT_WRITE]),
		U(c->pt_fallback[TIER_PT_SHARED]), U(c->pt_fallback[TIER_PT_ERROR]),
		U(c->pt_fallback[TIER_PT_ROOM]));
	fprintf(f,
		"# HELP spillway_passthrough_pinned_bytes Hot bytes of files passed through "
		"(not evictable until closed).\n# TYPE spillway_passthrough_pinned_bytes gauge\n"
		"spillway_passthrough_pinned_bytes %llu\n",
		U(s->pt_pinned));
	counter(f, "spillway_cache_drops_total",
		"Last closes of files served through the daemon that dropped the kernel's copy.",
		c->cache_drops);
	hist_write(f, "spillway_spill_segment_seconds", "Time to write one segment durably.",
		   &c->h_spill);
	hist_write(f, "spillway_restore_chunk_seconds",
		   "Time to bring one chunk back into RAM (what a reader waits for first bytes).",
		   &c->h_restore);
	hist_write(f, "spillway_writer_wait_seconds", "Time a writer waited for room.",
		   &c->h_wait);
	for (int i = 0; i < 2; i++)
		lhist_write(f, "spillway_first_byte_seconds",
			    i ? NULL
			      : "A read of a cold range: request to its bytes in RAM, per cold tier.",
			    i ? "tier=\"s3\"" : "tier=\"nvme\"", &c->h_first[i]);
	for (int i = 0; i < 2; i++)
		lhist_write(f, "spillway_restore_seconds",
			    i ? NULL : "One chunk restore: start to the whole chunk in RAM, per cold tier.",
			    i ? "tier=\"s3\"" : "tier=\"nvme\"", &c->h_rst[i]);
	counter(f, "spillway_partial_restores_total",
		"Chunks restored the reader's blocks first, the rest after the reply.",
		c->partial_restores);
	counter(f, "spillway_readahead_chunks_total",
		"Chunks restored ahead of a sequential reader.", c->readahead_chunks);
	counter(f, "spillway_published_reads_total",
		"Cold reads served from pieces of a chunk still being restored.",
		c->published_reads);
	counter(f, "spillway_buffer_replies_total",
		"Cold reads answered from the verified read buffer.", c->buffer_replies);
	counter(f, "spillway_direct_reads_total",
		"Reads of cold chunks answered from the cold tier without a restore.",
		c->direct_reads);
	counter(f, "spillway_direct_read_bytes_total",
		"Bytes of those reads (read once: not admitted into RAM).", c->direct_bytes);
	counter(f, "spillway_written_around_files_total",
		"Files a streaming writer wrote around RAM under pressure.", c->around_files);
	counter(f, "spillway_overlay_writes_total",
		"Writes that went over a chunk's cold copy instead of restoring it.",
		c->ovl_writes);
	counter(f, "spillway_overlay_spills_total",
		"Overlay records (a chunk's written blocks only) spilled.", c->ovl_spills);
	counter(f, "spillway_overlay_spilled_bytes_total", "Bytes of the overlay records spilled.",
		c->ovl_bytes);
	counter(f, "spillway_overlay_folds_total",
		"Chains of overlay records folded at their bound.", c->ovl_folds);
	counter(f, "spillway_overlay_fill_bytes_total",
		"Bytes read from chains into RAM for readers and partly covered writes.",
		c->ovl_fill_bytes);
	free(s);
}

static int write_file(struct tier *t)
{
	char tmp[4200];
	FILE *f;
	snprintf(tmp, sizeof(tmp), "%s.tmp", t->cfg->metrics);
	f = fopen(tmp, "w");
	if (!f)
		return -errno;
	metrics_write(t, f);
	if (fclose(f) != 0) {
		int e = -errno;
		unlink(tmp);
		return e;
	}
	if (rename(tmp, t->cfg->metrics) < 0) {
		int e = -errno;
		unlink(tmp);
		return e;
	}
	return 0;
}

/* The writer thread's own state (t->metrics). */
struct metrics {
	pthread_t th;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int stop; /* under lock */
};

static void *metrics_thread(void *arg)
{
	struct tier *t = arg;
	struct metrics *m = t->metrics;
	pthread_mutex_lock(&m->lock);
	while (!m->stop) {
		struct timespec dl;
		int ret;
		pthread_mutex_unlock(&m->lock);
		if ((ret = write_file(t)) < 0)
			log_warn("metrics: cannot write %s: %s", t->cfg->metrics, strerror(-ret));
		pthread_mutex_lock(&m->lock);
		dl = clock_deadline_ms(t->cfg->metrics_interval_ms);
		while (!m->stop && pthread_cond_timedwait(&m->cond, &m->lock, &dl) == 0)
			;
	}
	pthread_mutex_unlock(&m->lock);
	write_file(t); /* the last word */
	return NULL;
}

int metrics_start(struct tier *t)
{
	struct metrics *m;
	int ret;
	if (!t->cfg->metrics)
		return 0;
	if (!(m = calloc(1, sizeof(*m))))
		return -ENOMEM;
	pthread_mutex_init(&m->lock, NULL);
	pthread_cond_init(&m->cond, NULL);
	t->metrics = m;
	if ((ret = pthread_create(&m->th, NULL, metrics_thread, t)) != 0) {
		t->metrics = NULL;
		pthread_cond_destroy(&m->cond);
		pthread_mutex_destroy(&m->lock);
		free(m);
		return -ret;
	}
	return 0;
}

void metrics_stop(struct tier *t)
{
	struct metrics *m = t->metrics;
	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	m->stop = 1;
	pthread_cond_signal(&m->cond);
	pthread_mutex_unlock(&m->lock);
	pthread_join(m->th, NULL);
	pthread_cond_destroy(&m->cond);
	pthread_mutex_destroy(&m->lock);
	free(m);
	t->metrics = NULL;
}
