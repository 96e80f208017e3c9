/*
 * tier_i.h — private to tier/: the tier context (struct tier) shared by its
 * rooms, and their internal calls, grouped by the file that defines them.
 * It includes only lower layers (common, index, hot, segtab), so including
 * it makes no file depend on the rooms above.
 */
#ifndef SPW_TIER_I_H
#define SPW_TIER_I_H

#include "common/config.h"
#include "index/index.h"
#include "tier/hot/hot.h"
#include "tier/segment/segtab.h"
#include "common/hist.h"
#include "tier/segment/segment.h"

#include <pthread.h>

struct store;
struct pressure;
struct restore;
struct inval;
struct metrics;
struct evictor;
struct maint;
struct tier_pt_ops;
struct state_s3;
struct nvme_locks;
struct extents;
struct scrub;

struct tier_recovery {
	uint64_t records, truncated, lost_files, dropped_inodes, damaged_chunks;
	uint64_t damaged_files, past_eof_chunks;
	uint64_t ext_resealed; /* extents sealed at mount (a checkpoint follows) */
	uint64_t orphan_segments, orphan_hot_files, recover_ms;
	int fresh;
	uint64_t adopt_gone_segments; /* adopted: segments not in the bucket */
	int adopted; /* the state is the bucket's copy (state_s3_adopt) */
};

/* Why an open that could have been passed through was not (counted). */
enum tier_pt_why {
	TIER_PT_COLD,	/* some of its data is not in RAM */
	TIER_PT_WRITE,	/* a writable open of a file without passthrough opens */
	TIER_PT_SHARED, /* the file has opens served through the daemon */
	TIER_PT_ERROR,	/* the kernel refused the hot file */
	TIER_PT_ROOM,	/* passed-through files hold half the budget already */
	TIER_PT_NWHY
};

struct tier_stats {
	/* atomics */
	uint64_t bytes_spilled, chunks_spilled, segments_written, segments_deleted;
	uint64_t segments_compacted, segments_demoted, bytes_restored, chunks_restored;
	uint64_t spill_ns, restore_ns;
	uint64_t enospc, write_waits, errors_io, errors_crc, retries;
	uint64_t write_wait_ns;
	uint64_t state_copies; /* pushes of the state to the bucket (state_s3) */
	uint64_t restore_waits, restore_overshoots; /* restores short of room */
	uint64_t slow_op_ns;			    /* slowest FUSE request so far */
	const char *slow_op;			    /* its name (static string) */
	struct hist h_spill;   /* one segment: first byte staged .. durable */
	struct hist h_restore; /* one chunk: request .. in RAM (a reader's wait) */
	struct hist h_wait;    /* a writer waiting for room */
	/* per cold tier, [0] nvme (or the first store), [1] s3 */
	struct lhist h_first[2]; /* a read of a cold range: request .. its bytes in RAM */
	struct lhist h_rst[2];	 /* one chunk restore: start .. whole chunk in RAM */
	uint64_t partial_restores; /* chunks restored the reader's blocks first */
	uint64_t readahead_chunks; /* restores queued ahead of a sequential reader */
	uint64_t published_reads;  /* reads served from blocks of a chunk still restoring */
	uint64_t buffer_replies;   /* cold reads answered from the verified read buffer */
	uint64_t direct_reads;	   /* reads of cold chunks answered without a restore */
	uint64_t direct_bytes;	   /* their bytes (tier/admit: read once) */
	uint64_t around_files;	   /* files written around (tier/admit) */
	/* overlays (chain.c): writes that went over cold data, overlay
	 * records spilled and their bytes, chains folded, blocks read from a
	 * chain into RAM (fills) */
	uint64_t ovl_writes, ovl_spills, ovl_bytes, ovl_folds, ovl_fill_bytes;
	/* passthrough (tier.h): opens now and in all; opens that could have
	 * been passed through and were not, by enum tier_pt_why; daemon-path
	 * closes that dropped the kernel's copy of the file */
	uint64_t pt_open_now, pt_opens, pt_fallback[TIER_PT_NWHY], cache_drops;
	/* inval.c: drops of the kernel's pages sent, and held back for the
	 * last close because the file was open */
	uint64_t kdrops_sent, kdrops_owed;
	/* extents (tier/extent): files that have one now, granted, opens
	 * passed through to one, seals and their bytes, blocks that failed
	 * their crc, extents no file named (removed at mount), closed files
	 * moved whole into one (the evictor's, an evict's) */
	uint64_t ext_files, ext_created, ext_opens, ext_seals, ext_sealed_bytes, ext_written_bytes;
	uint64_t ext_crc_errors, ext_orphans, ext_evicted, ext_demoted, ext_demoted_bytes;
	/* the online scrub (tier/extent/scrub.c): runs started, bytes read
	 * and checked, blocks found damaged (also in ext_crc_errors) */
	uint64_t scrub_runs, scrub_bytes, scrub_damaged;
};

/*
 * The tier context: shared handles and the rooms' pointers. Each room owns
 * what its pointer points at, behind its own lock (its header or DESIGN
 * block says which); struct tier itself holds no room's state. Who writes
 * each field, and what guards it:
 */
struct tier {
	/* set by tier_new (and recovery) before any other thread runs;
	 * read-only until tier_free */
	const struct spw_config *cfg;
	struct index *idx;	   /* the index (its own locks: index.h) */
	struct hot *hot;	   /* the hot tier (atomics and inode locks: hot.h) */
	struct pressure *pressure; /* the elastic budget (pressure.h) */
	struct store *store; /* first cold tier (nvme, or s3 alone); NULL: none */
	struct store *s3;    /* with nvme and s3: the third tier, else NULL */
	struct nvme_locks *nvme_locks; /* each cold directory's flock (stores.c) */
	uint64_t chunk_size;
	struct segtab *segtab; /* the segment table, its own lock (segtab.h) */

	/* the rooms: made by tier_new (or tier_start), stopped by tier_stop,
	 * freed by tier_free; the pointer is read-only in between */
	struct inval *inval;	 /* page-cache invalidations (inval.c) */
	struct metrics *metrics; /* the metrics file's writer (metrics.c); NULL: none */
	struct evictor *ev;	 /* the evictor: thread, room handshake, spill pool (evict.c) */
	struct maint *maint;	 /* delete, compact, demote jobs (maint.h); NULL: not running */
	struct restore *rst;	 /* restore workers and partial restores (restore.h) */
	struct extents *extr;	 /* extents' directories (tier/extent); NULL: no nvme */
	struct scrub *scrub;	 /* the online scrub of extents (scrub.h) */
	struct state_s3 *s3st;	 /* s3 alone: the bucket's copy of the state (state_s3.c); NULL: none */

	/* any thread */
	const struct tier_pt_ops *pt; /* passthrough: NULL, off (atomic: tier_pt) */
	struct tier_stats st;	      /* atomics; st.slow_op under lock */
	pthread_mutex_t lock;	      /* guards st.slow_op with slow_op_ns; a leaf */
	/* the last spill found the cold tier full: written by evict.c under
	 * the evictor's lock (atomic store), read by demote.c (tier_cold_full)
	 * and stats */
	int cold_full;
	/* the admission room's state (tier/admit), atomics: written and read
	 * only through admit.h's calls */
	struct {
		/* index-tick age of the youngest chunk the evictor let go lately */
		uint32_t horizon;
		/* written-around bytes dirty in RAM (a hint: the evictor sets it
		 * to what it found each round), and whether a writer that wrote
		 * around closed (its tail goes now, a partial segment) */
		uint64_t around_bytes;
		int around_flush;
		/* clock_now_ms of the last file written around: streams are
		 * under pressure (tier/extent grants extents meanwhile) */
		uint64_t around_ms;
	} admit;
	/* set once by the first of evict_stop (under the evictor's lock),
	 * maint_stop, restore_stop; read with an atomic load by every worker */
	int stopping;

	/* set at mount (tier_new, recovery) and unmount (tier_detach), when no
	 * other thread runs; read-only in between */
	uint8_t uuid[16];
	struct journal *jrnl;	  /* NULL: volatile (no state_dir) */
	int keep;		  /* detached: segments outlive this mount */
	struct tier_recovery rec; /* what the last mount's recovery found */
};

/* evict.c */
/* t->ev (tier_new) and its end (tier_free, after evict_pool_stop's work).
 * 0 or -ENOMEM. */
int evict_new(struct tier *t);
void evict_free(struct tier *t);
/* Start the spill pool (io_workers threads), then the evictor thread. */
int evict_start(struct tier *t);
/* Stop the evictor thread; the spill pool stays for the unmount flush. */
void evict_stop(struct tier *t);
/* Stop the spill pool (tier_free: after the unmount flush). */
void evict_pool_stop(struct tier *t);
/* Spill the given file's dirty chunks and drop its hot chunks (evict xattr),
 * or only spill them (fsync write-through) when `drop` is 0. */
int evict_file(struct tier *t, struct inode *in, int drop);
/* Unmount (workers stopped, nothing served): spill every dirty chunk of
 * every named file, io_workers segments at once (partial ones allowed), then
 * drop every clean hot copy. t->flush_total gets the dirty bytes first (for
 * progress). 0, or the first -errno: what failed stays dirty, in RAM. */
int evict_flush_all(struct tier *t);
/* Room for a write of [off, off+len) of fd: waits (at most write_wait)
 * for the evictor when a cold tier exists. Reserved bytes or -ENOSPC. */
int64_t evict_wait_room(struct tier *t, int fd, uint64_t off, uint64_t len);
/* A spill outside the evictor (fsync) found the nvme tier full: with S3
 * below, mark it full (demotion then makes room: demote.c) and wait up to
 * 500 ms, never past until_ms (clock_now_ms). 1: try again; 0: no S3 below,
 * past until_ms, or stopping. */
int evict_wait_cold_room(struct tier *t, uint64_t until_ms);
/* Longest a restore waits for hot room (ms), also capped by write_wait. */
#define RESTORE_ROOM_WAIT_MS 1000
/* Room for restoring [off, off+len) of fd: waits only while the evictor
 * frees RAM (at most RESTORE_ROOM_WAIT_MS), then overshoots hot_size by
 * these bytes (clean, so dropped first) rather than wait for room that
 * cannot come. Returns the bytes reserved (for hot_unreserve); never fails. */
int64_t evict_room_for_restore(struct tier *t, int fd, uint64_t off, uint64_t len);
/* Hot room was freed (a file dropped, a spill done): waiters look again. */
void evict_room_freed(struct tier *t);
/* Hot usage crossed spill_threshold: signal the evictor (no lock taken). */
void evict_kick(struct tier *t);
/* The budget moved (pressure.c): the evictor and every waiter look again. */
void evict_budget_changed(struct tier *t);
/* Writers waiting for room now; *cold_full (may be NULL): the last spill
 * found the cold tier full. One snapshot under the evictor's lock. */
unsigned evict_waiters(struct tier *t, int *cold_full);
/* The last spill found the cold tier failing. */
int evict_cold_failing(struct tier *t);
/* Unmount flush: the dirty bytes it set out to spill. */
uint64_t evict_flush_total(struct tier *t);
/* The index tick of the evictor's last age pass (tests). */
uint64_t evict_aged_at(struct tier *t);

/* gc.c: choosing (evictor thread, through maint_plan) and doing (the
 * maintenance worker) segment deletion and compaction. */
/* Mark gc_busy and return up to max segments with no live bytes in dead;
 * when compact is not NULL, also one sparse segment worth rewriting (0:
 * none). Returns the dead segments picked. */
size_t gc_pick(struct tier *t, uint64_t *dead, size_t max, uint64_t *compact);
/* Delete the dead segments ids[0..n) (gc_busy, picked by gc_pick): each
 * goes, or its gc_busy is cleared to be tried again. */
void gc_delete(struct tier *t, const uint64_t *ids, size_t n);
/* Compact segment id (gc_busy, picked by gc_pick), then clear gc_busy. */
void gc_compact(struct tier *t, uint64_t id);

/* demote.c: nvme fuller than nvme_threshold: move the least recently read
 * segments and extents to s3. */
/* Up to max nvme segments (marked gc_busy) into ids and up to max extents
 * (their inodes) into inos, *ninos, least recently used first of both,
 * whose bytes bring the nvme tier 5 % below nvme_threshold (none when it
 * is not above it, or without s3). Returns the segments picked. */
size_t demote_pick(struct tier *t, uint64_t *ids, size_t max, uint64_t *inos, size_t *ninos);
/* Demote segment id (gc_busy, picked by demote_pick) unless the nvme tier
 * is already 5 % below nvme_threshold, then clear gc_busy. 0 demoted, 1
 * not needed any more, or -errno. */
int demote_segment(struct tier *t, uint64_t id);
/* The same for the extent of inode ino (demote_ext.c does the move). */
int demote_ext(struct tier *t, uint64_t ino);
/* demote_ext.c: move ino's extent into a segment on s3 now. 0 moved, 1
 * nothing to move (changed, open, gone), or -errno. */
int demote_extent(struct tier *t, uint64_t ino);
/* The same into segments on the first cold tier (warm: the file is then
 * restored into RAM like any cold file, its cold copy kept). */
int extent_to_segments(struct tier *t, uint64_t ino);

/* inval.c */
/* Queue a page-cache invalidation of [off, off+len) of ino (len 0: to the
 * end; never blocks). */
void inval_async(struct tier *t, uint64_t ino, uint64_t off, uint64_t len);
/* t->inval made (tier_new) and freed (tier_free, after inval_stop). */
int inval_new(struct tier *t);
void inval_free(struct tier *t);
/* The fs layer's sender (tier_inval_fn; NULL: send nothing). */
void inval_set(struct tier *t, void (*fn)(void *, uint64_t, uint64_t, uint64_t), void *arg);
/* The sending thread (sends only once inval_set named a sender). 0 or -errno. */
int inval_start(struct tier *t);
void inval_stop(struct tier *t);

/* stores.c */
/* Open the NVMe store of cfg->nvme into t->store, locking each directory;
 * without a journal, segments of an earlier mount are removed. 0 or
 * -errno with err naming the option. */
int stores_open_nvme(struct tier *t, char *err, size_t errlen);
/* Open the S3 store at <s3>/<uuid> (with_uuid) or at <s3> itself. */
int stores_open_s3(struct tier *t, int with_uuid, struct store **out, char *err, size_t errlen);
/* Remove every segment t->store lists. */
void stores_remove_all(struct tier *t);
/* Let go of the cold directories' locks (tier_free; the lock files stay:
 * unlinking them would race). */
void stores_unlock_nvme(struct tier *t);

/* recover.c */
/* Open state_dir, replay it into the index and the segment table (before
 * the stores are opened: the uuid comes from it). 0 or -errno with err set. */
int recover_open(struct tier *t, char *err, size_t errlen);
/* With the stores and hot tier open: reconcile hot files, segments and the
 * index, then start journaling. 0 or -errno with err set. */
int recover_finish(struct tier *t, char *err, size_t errlen);

/* state_s3.c: the bucket's copy of the state (s3 alone, or s3_state) */
/* t->s3st (recover_open: s3 alone or s3_state, a state_dir) and its end (tier_free).
 * 0 or -ENOMEM. */
int state_s3_new(struct tier *t);
void state_s3_free(struct tier *t);
/* recover_open: an empty state_dir adopts the filesystem the bucket prefix
 * holds (refused while another node's lease exists, unless takeover). 0 or
 * -errno with err set. */
int state_s3_adopt(struct tier *t, char *err, size_t errlen);
/* recover_finish: take the prefix's lease. 0 or -errno with err set. */
int state_s3_lease(struct tier *t, char *err, size_t errlen);
/* Copy the current checkpoint and journal to the bucket (after a journal
 * sync, for fsync). 0 or -errno. */
int state_s3_push(struct tier *t);
/* fsync, sync and the end of a demotion batch (after a journal sync): with
 * s3 alone state_s3_push; with nvme below only when S3's segments changed
 * since the last push (an fsync'd file on the node's disk is not a
 * replacement node's). 0 or -errno. */
int state_s3_push_changed(struct tier *t);
/* jrnl_set_on_checkpoint callback (arg: the tier): state_s3_push. */
void state_s3_on_checkpoint(void *arg, uint64_t gen);
/* Clean unmount: push, then release the bucket prefix's lease. */
void state_s3_release(struct tier *t);
/* recover_finish, an adopted state: segments listed in the bucket are S3's
 * (relocated to its store number), the others leave the table (the old
 * node's disk). 0 or -errno with err set. */
int state_s3_locate(struct tier *t, char *err, size_t errlen);
/* recover_finish, once the adopted state is checkpointed and pushed: the
 * adoption is done (its marker goes). */
void state_s3_adopted(struct tier *t);

/* restore.c (its lifecycle: restore.h) */
/* Queue every COLD chunk of `in` for background restore (file order). */
void restore_file_async(struct tier *t, struct inode *in);
/* Restore chunk c, which the caller set to RESTORING (in->lock held; dropped
 * during I/O). Leaves it HOT_CLEAN, or COLD on error. 0 or -errno. */
int restore_chunk_locked(struct tier *t, struct inode *in, uint64_t c);
/*
 * A read of chunk bytes [lo, hi) of chunk c, as tier_read_begin asks it
 * (what the reader is), and what it got. restore_read_locked makes the
 * bytes readable and pins the chunk (in->lock held; dropped during I/O).
 * How is the read's plan (restore_read.c, read_plan_locked: the one place
 * that decides, at each look at the chunk): in RAM; a chain's blocks
 * filled; blocks already published by a restore in blocks; read beside
 * such a restore from the cold copy; read directly (the
 * chunk stays COLD, RESTORING meanwhile so its segment stays: a reader
 * that the admission filter, tier/admit, keeps out of RAM, or a random
 * reader with admit=always); a partial
 * restore (a COLD chunk with a v2 mapped record: the reader's blocks
 * first, the rest after the reply); or the whole chunk. The chunk's record
 * is located once per read. 0 or -errno (nothing pinned).
 */
struct chunk_read {
	uint64_t c, lo, hi;
	int random;	  /* the reader jumps about (TIER_READ_RANDOM) */
	int near;	  /* it starts near the handle's last read (TIER_READ_NEAR) */
	int again;	  /* the handle re-reads (TIER_READ_AGAIN) */
	int stream;	  /* it goes on from its last read (TIER_READ_STREAM): it
			   * waits for a restore's blocks (next anyway) and a
			   * COLD chain fills whole segment blocks (chain.c) */
	int one;	  /* this chunk's bytes may be answered from memory
			   * (mem): read beside or directly (the read lies in
			   * a few chunks: tier_read_begin answers it piece
			   * by piece) */
	int may_rest;	  /* a partial restore may leave its rest for later */
	/* out */
	int rest;	 /* 1: a partial restore: call restore_rest_locked() once
			  * the reader is answered (the chunk stays RESTORING
			  * until then; readers of its blocks in RAM go on) */
	int tier;	 /* cold tier waited on (STORE_TIER_*), -1: in RAM */
	const void *mem; /* with one: the bytes [lo, hi) from memory, valid until
			  * restore_rest_locked, or while buf is (holes read as
			  * zeros); NULL: read the hot file */
	void *buf;	 /* holds mem when the reader owns it (seg_buf_free) */
	int direct;	 /* the bytes came from the cold copy, which the chunk
			  * keeps (not admitted into RAM: tier/admit) */
	int promoted;	 /* the reader re-reads: the admission filter let the
			  * chunk into RAM as re-read, or a reader not near
			  * its last read found it in RAM */
};
int restore_read_locked(struct tier *t, struct inode *in, struct chunk_read *r);
/* The rest of a partial restore of chunk c (in->lock held; dropped during
 * I/O): HOT_CLEAN, or COLD (hole punched) when a block fails. 0 or -errno. */
int restore_rest_locked(struct tier *t, struct inode *in, uint64_t c);
/* Queue chunks [first, last] of `in` that are COLD for restore ahead of a
 * sequential reader, before any prefetch, at normal I/O priority. */
void restore_ahead(struct tier *t, struct inode *in, uint64_t first, uint64_t last);
/* Make chunks [first,last] RAM-resident, waiting for restores, and pin each
 * (when `pin`) as soon as it is hot. in->lock held; may drop and retake it.
 * Returns 0 or -errno (with nothing left pinned). */
int restore_make_hot_locked(struct tier *t, struct inode *in, uint64_t first, uint64_t last,
			    int pin);

/* chain.c: chunks [first, last] were written: a new generation, dirty
 * (journaled before the old cold copy is let go), recently used. in->lock
 * held. */
void tier_mark_dirty_locked(struct tier *t, struct inode *in, uint64_t first, uint64_t last);
/* chain.c: the file grows to `size` (> in->size), its bytes written in
 * chunks [first, last]: those holding bytes of the old size are marked as
 * by tier_mark_dirty_locked, those past the old end become dirty with the
 * new size in one journal transaction (idx_journal_grow_locked): journaled
 * apart, a kill -9 between the chunk's record and the size's left a dirty
 * chunk past EOF that no spill takes (issue 39). in->lock held; 0 or -EIO
 * (the journal failed: the size is set all the same). */
int tier_grow_locked(struct tier *t, struct inode *in, uint64_t first, uint64_t last,
		     uint64_t size);
/* tier_open.c: take in what passthrough writers did behind the daemon: the
 * hot file's size, mtime and allocation, and (all_dirty) every chunk counted
 * as changed. in->lock held. */
void tier_pt_refresh_locked(struct tier *t, struct inode *in, int all_dirty);

/* cold.c: a record read from its cold segment. A read locates the
 * segment once (cold_locate) and passes the location down; a read that
 * finds the segment gone (moved to s3 since) locates it again, in place. */
struct cold_rec {
	uint64_t ino, c;      /* whose record it is: chunk c of inode ino */
	struct chunk_loc loc; /* the record: its segment (loc.seg_id), where in it */
	struct store *st;     /* where the segment is now (NULL: not in the table) */
	uint32_t dev;	      /* its device there (loc.dev: as journaled) */
	int tier; /* STORE_TIER_* of st (store.h): index of h_first, h_rst */
};
/* Record l of chunk c of inode ino (a chunk's base copy or one of its
 * overlays), located (segtab_locate: notes the access for demotion). Not
 * found: r->st NULL (a read of it is -EIO). */
void cold_locate(struct tier *t, uint64_t ino, uint64_t c, const struct chunk_loc *l,
		 struct cold_rec *r);
/* Bytes [off, off + len) of r's record (cold_read_whole: all of it), read
 * and verified into *sc (owned on success only). A crc mismatch, or the
 * segment gone, is -EIO (counted). 0 or -errno. */
int cold_read(struct tier *t, struct cold_rec *r, uint64_t off, uint64_t len,
	      struct seg_chunk *sc);
int cold_read_whole(struct tier *t, struct cold_rec *r, struct seg_chunk *sc);
/*
 * Chunk bytes [lo, hi) of r's record read and verified straight into dst
 * (dst[0] is chunk byte lo): seg_read_into's contract (segment.h) - dst
 * 4 KiB-aligned with room for align_up(hi - lo) bytes; no copy for the
 * blocks wholly inside [lo, hi) of an aligned (v3) record when lo is on
 * 4 KiB, a window and a copy for the rest; flags SEG_INTO_HOLES: holes
 * left untouched (dst maps the hot file), else zeros; *stat (may be
 * NULL) gets the data bytes read in place and those copied. Errors as cold_read (-EIO for a bad
 * crc, counted); on error dst's bytes are undefined: never serve them (a
 * mapping of the hot file: punch the range). Any thread, no lock held.
 */
int cold_read_into(struct tier *t, struct cold_rec *r, uint64_t lo, uint64_t hi, void *dst,
		   unsigned flags, struct seg_into_stat *stat);

/* chain.c: writes over cold data (overlays; index.h, struct chunk_chain).
 * All with in->lock held; chain_restore_locked drops it during I/O, the
 * others do their I/O under it (a few blocks, or a fold). */
/* A write of chunk bytes [lo, hi) over chunk c's cold copy: 1 when it goes
 * over it (the chunk is pinned and counted as written to: call
 * chain_write_end_locked after the write), 0 when the chunk must be made
 * hot first (restore_make_hot_locked), or -errno. */
int chain_write_begin_locked(struct tier *t, struct inode *in, uint64_t c, uint64_t lo,
			     uint64_t hi);
/* The write that chain_write_begin_locked let in is over: chunk bytes
 * [lo, done) hold its bytes (done <= lo: none). Unpins. */
void chain_write_end_locked(struct tier *t, struct inode *in, uint64_t c, uint64_t lo,
			    uint64_t hi, uint64_t done);
/* Chunk bytes [lo, hi) of a chunk that RAM holds only in part are made
 * readable from the hot file (read from the chain). 0 or -errno. */
int chain_fill_locked(struct tier *t, struct inode *in, uint64_t c, uint64_t lo, uint64_t hi);
/* Bytes [lo, hi) of COLD chunk c's chain into dst (the caller made it
 * RESTORING: the chain stays; in->lock dropped during the I/O). */
int chain_read_cold_locked(struct tier *t, struct inode *in, uint64_t c, uint64_t lo,
			   uint64_t hi, void *dst, int *tier);
/* What a read of chunk c's chain needs, copied out under the lock (the
 * chain itself stays put while the chunk is RESTORING or the lock held). */
struct chain_view {
	uint64_t ino, c;
	struct chunk_loc base; /* the chunk's base copy */
	const struct chunk_chain *k;
};
void chain_view_of(const struct inode *in, uint64_t c, struct chain_view *v);
/* Chunk bytes [lo, hi) of the chain into dst: each block from the newest
 * record that holds it (at most CHAIN_MAX + 1 segment reads). 0 or -errno. */
int chain_view_read(struct tier *t, const struct chain_view *v, uint64_t lo, uint64_t hi,
		    uint8_t *dst, int *tier);
/* pwrite all of len bytes. 0 or -errno. */
int chain_pwrite_full(int fd, const uint8_t *p, size_t len, uint64_t off);
/* The chunk's cold copy (base and overlays) is let go: live bytes drop. */
void chain_forget_cold(struct tier *t, struct chunk *ch);
/* Does RAM hold only part of chunk c (the rest in its chain)? */
static inline int chain_partial(const struct chunk *ch)
{
	return ch->chain && ch->chain->partial;
}
/* Spill of chunk c (len bytes), HOT_DIRTY: 1 and *bits (malloc'ed words;
 * the caller frees or hands to chain_spill_commit_locked) when it goes as
 * an overlay of those blocks; 0 when whole (no chain, or RAM holds it
 * whole with half of it dirty); -errno when it is not spilled now (stays
 * as it is: -EAGAIN nothing dirty). A chain at CHAIN_MAX is folded first. */
int chain_spill_plan_locked(struct tier *t, struct inode *in, uint64_t c, uint32_t len,
			    uint64_t **bits);
/* Spill: the overlay `bits` of chunk c is in record e of segment seg. 0, or
 * -EIO when not journaled (the chunk stays dirty). Frees bits. */
int chain_spill_commit_locked(struct tier *t, struct inode *in, uint64_t c,
			      const struct seg_entry *e, uint64_t seg, uint32_t dev, uint64_t *bits);
/* inline helpers (no module) */
/* Length of chunk c of a file of `size` bytes. */
static inline uint32_t tier_chunk_len(const struct tier *t, uint64_t size, uint64_t c)
{
	uint64_t start = c * t->chunk_size;
	if (start >= size)
		return 0;
	return (uint32_t)(size - start < t->chunk_size ? size - start : t->chunk_size);
}

/* The passthrough ops (NULL: no passthrough now). Set by the FUSE init
 * on a worker thread and cleared at unmount, read by any thread: atomic. */
static inline const struct tier_pt_ops *tier_pt(struct tier *t)
{
	return __atomic_load_n(&t->pt, __ATOMIC_ACQUIRE);
}

/* The last spill found the cold tier full (demotion makes room). */
static inline int tier_cold_full(struct tier *t)
{
	return __atomic_load_n(&t->cold_full, __ATOMIC_RELAXED);
}

/* Chunk range of [off, off+len). */
static inline void tier_chunk_range(const struct tier *t, uint64_t off, uint64_t len,
				    uint64_t *first, uint64_t *last)
{
	*first = off / t->chunk_size;
	*last = len ? (off + len - 1) / t->chunk_size : *first;
}

#endif
