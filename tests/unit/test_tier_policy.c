/*
 * test_tier_policy — the tier's policy code (evictor candidate choice and
 * batching, spill failures, crc failures, GC, restore order, restores that
 * cannot get room) against an in-memory cold store (fake_store.c, put in
 * place of the nvme store with -Wl,--wrap=store_nvme_open). A real hot tier
 * (a tmpfs directory) and a real index; no FUSE (tier_fixture.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/config.h"
#include "fake_store.h"
#include "tier_fixture.h"
#include "index/index.h"
#include "tier/tier.h"
#include "tier/tier_i.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Writing 1.5x hot_size: the least recently written files go cold first,
 * in segments holding several chunks each, and every byte reads back. */
static void test_lru_files_spilled_first_in_batches(void **state)
{
	struct fx *f = *state;
	struct inode *in[12];

	fx_cfg_defaults(f, 8 * MiB);
	fx_start(f);
	fx_mk_range(f, in, 0, 12, MiB, 0);
	assert_true(fx_wait_for(fx_below_threshold, f, 10000));
	assert_int_equal(fx_chunk_state(in[0], 0), CHUNK_COLD);
	assert_int_equal(fx_chunk_state(in[1], 0), CHUNK_COLD);
	assert_int_not_equal(fx_chunk_state(in[11], 0), CHUNK_COLD);
	fake_lock();
	unsigned puts = fake_current->puts_finished;
	fake_unlock();
	uint64_t chunks = FX_ST(f, chunks_spilled);
	assert_true(puts >= 1);
	assert_true(chunks >= 2 * puts); /* batched, not one segment per chunk */
	for (int i = 0; i < 12; i++)
		fx_check_all(f, in[i], i, MiB);
	for (int i = 0; i < 12; i++)
		idx_put(f->idx, in[i]);
}

/* The same LRU order when the index tick passes 2^32 while the files are
 * written: a chunk keeps the tick's low 32 bits, and the evictor compares
 * ages, so the files written after the wrap (small values) are the newest,
 * not the oldest. */
static int any_cold(struct fx *f)
{
	return FX_ST(f, chunks_spilled) > 0;
}

static void test_lru_across_tick_wrap(void **state)
{
	struct fx *f = *state;
	struct inode *in[14];

	/* 11 files fit under the threshold (12 MiB of 16): no spill yet */
	fx_cfg_defaults(f, 16 * MiB);
	fx_start(f);
	/* a write takes one tick: f0..f4 get the last five before the wrap */
	idx_tick_seed(f->idx, (1ull << 32) - 6);
	fx_mk_range(f, in, 0, 11, MiB, 0);
	assert_true(in[0]->chunks[0].atime > in[10]->chunks[0].atime); /* it did wrap */
	assert_int_equal(FX_ST(f, chunks_spilled), 0);
	/* three more pass it: one round picks the oldest by age */
	fx_mk_range(f, in, 11, 14, MiB, 0);
	assert_true(fx_wait_for(any_cold, f, 10000));
	assert_true(fx_wait_for(fx_below_threshold, f, 10000));
	assert_int_equal(fx_chunk_state(in[0], 0), CHUNK_COLD);
	assert_int_equal(fx_chunk_state(in[1], 0), CHUNK_COLD);
	for (int i = 8; i < 14; i++) /* written after the wrap, and last */
		assert_int_not_equal(fx_chunk_state(in[i], 0), CHUNK_COLD);
	for (int i = 0; i < 14; i++)
		fx_check_all(f, in[i], i, MiB);
	for (int i = 0; i < 14; i++)
		idx_put(f->idx, in[i]);
}

static uint64_t g_aged_want;

static int aged(struct fx *f)
{
	return evict_aged_at(f->t) >= g_aged_want;
}

/* Files left hot and idle while the tick moves on by more than 2^31 (hours
 * of a busy node): their 32-bit ages would alias to "new"; the evictor's
 * periodic pass keeps them the oldest, so they still spill first. */
static void test_lru_after_long_idle(void **state)
{
	struct fx *f = *state;
	struct inode *in[14];

	fx_cfg_defaults(f, 16 * MiB);
	fx_start(f);
	fx_mk_range(f, in, 0, 11, MiB, 0);
	/* 2^31 + 1,000 ticks later, in steps the evictor's pass keeps up with */
	uint64_t now = idx_tick_now(f->idx);
	for (int step = 1; step <= 4; step++) {
		now += (1ull << 29) + 250;
		idx_tick_seed(f->idx, now);
		g_aged_want = now;
		assert_true(fx_wait_for(aged, f, 10000));
	}
	assert_int_equal(FX_ST(f, chunks_spilled), 0);
	fx_mk_range(f, in, 11, 14, MiB, 0);
	assert_true(fx_wait_for(any_cold, f, 10000));
	assert_true(fx_wait_for(fx_below_threshold, f, 10000));
	for (int i = 11; i < 14; i++) /* the new ones stay */
		assert_int_not_equal(fx_chunk_state(in[i], 0), CHUNK_COLD);
	for (int i = 0; i < 14; i++)
		fx_check_all(f, in[i], i, MiB);
	for (int i = 0; i < 14; i++)
		idx_put(f->idx, in[i]);
}

/* A segment the store fails to make durable drops no RAM copy: the chunks
 * stay dirty and readable; the next attempt spills them. */
static void test_failed_spill_keeps_ram_copy(void **state)
{
	struct fx *f = *state;
	struct inode *in;

	fx_cfg_defaults(f, 64 * MiB);
	fx_start(f);
	in = fx_mk(f, "a", 3 * MiB, 5);
	fake_lock();
	fake_current->fail_puts = 1;
	fake_current->fail_errno = EIO;
	fake_unlock();
	assert_true(tier_evict_file(f->t, in) < 0);
	for (uint64_t c = 0; c < 3; c++)
		assert_int_equal(fx_chunk_state(in, c), CHUNK_HOT_DIRTY);
	assert_int_equal(fake_live_segments(), 0);
	fx_check_all(f, in, 5, 3 * MiB);
	assert_int_equal(tier_evict_file(f->t, in), 0);
	for (uint64_t c = 0; c < 3; c++)
		assert_int_equal(fx_chunk_state(in, c), CHUNK_COLD);
	assert_int_equal(hot_used(f->t->hot), 0); /* and no hot file left */
	fx_check_all(f, in, 5, 3 * MiB);
	fake_lock();
	assert_true(fake_current->nreads >= 3);
	fake_unlock();
	idx_put(f->idx, in);
}

/* A flipped byte in a chunk's stored copy is EIO for that chunk (never
 * wrong bytes); the file's other chunks read fine. */
static void test_crc_failure_is_eio_for_that_chunk_only(void **state)
{
	struct fx *f = *state;
	struct inode *in;
	uint64_t seg, off;

	fx_cfg_defaults(f, 64 * MiB);
	fx_start(f);
	in = fx_mk(f, "a", 2 * MiB, 9);
	assert_int_equal(tier_evict_file(f->t, in), 0);
	idx_inode_lock(in);
	seg = in->chunks[0].loc.seg_id;
	off = in->chunks[0].loc.off;
	idx_inode_unlock(in);
	assert_int_equal(fake_flip(seg, off + 1000), 0);
	assert_int_equal(fx_check_range(f, in, 9, 0, 4096), -EIO);
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_COLD);
	assert_true(FX_ST(f, errors_crc) >= 1);
	assert_int_equal(fx_check_range(f, in, 9, MiB, MiB), 0);
	idx_put(f->idx, in);
}

/* A random reader's read of a cold chunk (TIER_READ_RANDOM) is answered
 * from the blocks it covers, verified, and restores nothing; a bad block is
 * EIO; a read across two chunks is answered piece by piece, the same way. */
static void test_random_read_restores_nothing(void **state)
{
	struct fx *f = *state;
	struct inode *in;
	uint64_t seg, off;
	unsigned n0;

	fx_cfg_defaults(f, 64 * MiB);
	fx_start(f);
	in = fx_mk(f, "a", 3 * MiB + 100, 7);
	assert_int_equal(tier_evict_file(f->t, in), 0);
	assert_int_equal(hot_used(f->t->hot), 0);
	fake_lock();
	n0 = fake_current->nreads;
	fake_unlock();
	assert_int_equal(fx_check_range_flags(f, in, 7, MiB + 5000, 4096, TIER_READ_RANDOM), 0);
	assert_int_equal(fx_check_range_flags(f, in, 7, 3 * MiB, 100, TIER_READ_RANDOM), 0);
	assert_int_equal(fx_chunk_state(in, 1), CHUNK_COLD);
	assert_int_equal(fx_chunk_state(in, 3), CHUNK_COLD);
	assert_int_equal(hot_used(f->t->hot), 0);
	assert_int_equal(FX_ST(f, direct_reads), 2);
	assert_int_equal(FX_ST(f, partial_restores), 0);
	assert_int_equal(FX_ST(f, chunks_restored), 0);
	fake_lock();
	assert_true(fake_current->nreads > n0);
	fake_unlock();
	/* a flipped byte in chunk 2: EIO, never wrong bytes, still cold */
	idx_inode_lock(in);
	seg = in->chunks[2].loc.seg_id;
	off = in->chunks[2].loc.off;
	idx_inode_unlock(in);
	assert_int_equal(fake_flip(seg, off + 77), 0);
	assert_int_equal(fx_check_range_flags(f, in, 7, 2 * MiB + 10, 4096, TIER_READ_RANDOM),
			 -EIO);
	assert_int_equal(fx_chunk_state(in, 2), CHUNK_COLD);
	assert_true(FX_ST(f, errors_crc) >= 1);
	/* across chunks 0 and 1: a piece from each, both still cold */
	assert_int_equal(fx_check_range_flags(f, in, 7, MiB - 100, 200, TIER_READ_RANDOM), 0);
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_COLD);
	assert_int_equal(fx_chunk_state(in, 1), CHUNK_COLD);
	assert_int_equal(FX_ST(f, direct_reads), 4);
	assert_int_equal(FX_ST(f, chunks_restored), 0);
	idx_put(f->idx, in);
}

static int no_live_segments(struct fx *f)
{
	(void)f;
	return fake_live_segments() == 0;
}

/* Rewriting every chunk of a cold file leaves its segment with no live
 * bytes: GC deletes it from the store. */
static void test_gc_deletes_dead_segment(void **state)
{
	struct fx *f = *state;
	struct inode *in;

	fx_cfg_defaults(f, 64 * MiB);
	fx_start(f);
	in = fx_mk(f, "a", 2 * MiB, 1);
	assert_int_equal(tier_evict_file(f->t, in), 0);
	assert_int_equal(fake_live_segments(), 1);
	idx_put(f->idx, in);
	in = NULL;
	/* overwrite both chunks whole (claims them: no restore needed) */
	assert_int_equal(idx_lookup(f->idx, IDX_ROOT_INO, "a", 0, &in), 0);
	assert_int_equal(tier_open(f->t, in, 0, NULL, &(struct tier_open_out){0}), 0);
	{
		uint8_t *buf = malloc(2 * MiB);
		struct tier_io io;
		fx_fill(buf, 2, 0, 2 * MiB);
		assert_int_equal(tier_write_begin(f->t, in, 0, 2 * MiB, 0, &io), 0);
		ssize_t w = pwrite(io.fd, buf, 2 * MiB, 0);
		assert_int_equal(tier_write_end(f->t, in, &io, w), (ssize_t)(2 * MiB));
		free(buf);
	}
	tier_close(f->t, in, &(struct tier_open_out){0}, NULL);
	assert_true(fx_wait_for(no_live_segments, f, 5000));
	fake_lock();
	assert_true(fake_current->removes >= 1);
	fake_unlock();
	fx_check_all(f, in, 2, 2 * MiB);
	idx_put(f->idx, in);
}

static struct inode *g_in;

static int all_hot(struct fx *f)
{
	(void)f;
	for (uint64_t c = 0; c < 6; c++)
		if (fx_chunk_state(g_in, c) != CHUNK_HOT_CLEAN)
			return 0;
	return 1;
}

/* restore=open brings a cold file back in file order. */
static void test_open_restores_in_file_order(void **state)
{
	struct fx *f = *state;

	fx_cfg_defaults(f, 64 * MiB);
	f->cfg.restore = RESTORE_OPEN;
	f->cfg.io_workers = 1; /* one worker: the order is the queue's */
	fx_start(f);
	g_in = fx_mk(f, "a", 6 * MiB, 4);
	assert_int_equal(tier_evict_file(f->t, g_in), 0);
	fake_lock();
	fake_current->nreads = 0;
	fake_unlock();
	assert_int_equal(tier_open(f->t, g_in, 0, NULL, &(struct tier_open_out){0}), 0);
	assert_true(fx_wait_for(all_hot, f, 10000));
	tier_close(f->t, g_in, &(struct tier_open_out){0}, NULL);
	fake_lock();
	unsigned n = fake_current->nreads;
	struct fake_read r[FAKE_MAX_LOG];
	memcpy(r, fake_current->reads, n * sizeof(*r));
	fake_unlock();
	assert_true(n >= 6);
	/* the chunk each read is for: the record it overlaps most (a read
	 * window is aligned, so it may spill into a neighbour) */
	uint64_t roff[6], rlen[6], rseg[6];
	int first[6];
	idx_inode_lock(g_in);
	for (int c = 0; c < 6; c++) {
		roff[c] = g_in->chunks[c].loc.off;
		rlen[c] = g_in->chunks[c].loc.len;
		rseg[c] = g_in->chunks[c].loc.seg_id;
		first[c] = -1;
	}
	idx_inode_unlock(g_in);
	for (unsigned i = 0; i < n; i++) {
		uint64_t best = 0;
		int bc = -1;
		for (int c = 0; c < 6; c++) {
			uint64_t a = r[i].off > roff[c] ? r[i].off : roff[c];
			uint64_t b = r[i].off + r[i].len < roff[c] + rlen[c] ? r[i].off + r[i].len
									  : roff[c] + rlen[c];
			if (r[i].seg_id == rseg[c] && b > a && b - a > best) {
				best = b - a;
				bc = c;
			}
		}
		if (bc >= 0 && first[bc] < 0)
			first[bc] = (int)i;
	}
	for (int c = 0; c < 6; c++)
		if (first[c] < 0) {
			for (unsigned i = 0; i < n; i++)
				print_error("read %u: seg %llu [%llu, +%llu)\n", i,
					    (unsigned long long)r[i].seg_id,
					    (unsigned long long)r[i].off, (unsigned long long)r[i].len);
			for (int k = 0; k < 6; k++)
				print_error("chunk %d: [%llu, +%llu)\n", k, (unsigned long long)roff[k],
					    (unsigned long long)rlen[k]);
			fail_msg("no read of chunk %d", c);
		}
	for (int c = 1; c < 6; c++)
		if (first[c] < first[c - 1])
			fail_msg("chunk %d was restored before chunk %d", c, c - 1);
	fx_check_all(f, g_in, 4, 6 * MiB);
	idx_put(f->idx, g_in);
}

static int chunk0_restoring(struct fx *f)
{
	(void)f;
	return fx_chunk_state(g_in, 0) == CHUNK_RESTORING;
}

static int chunk0_hot(struct fx *f)
{
	(void)f;
	return fx_chunk_state(g_in, 0) == CHUNK_HOT_CLEAN;
}

/* A reader of a block of a chunk that a worker restores (restore=open, one
 * 1 MiB piece per slow read) reads it from the cold copy rather than wait
 * for the worker to reach it; the worker's restore goes on. */
static void test_reader_reads_beside_a_restore(void **state)
{
	struct fx *f = *state;

	fx_cfg_defaults(f, 64 * MiB);
	f->cfg.chunk_size = 4 * MiB;
	f->cfg.restore = RESTORE_OPEN;
	fx_start(f);
	g_in = fx_mk(f, "a", 4 * MiB, 3);
	assert_int_equal(tier_evict_file(f->t, g_in), 0);
	fake_lock();
	fake_current->read_delay_ms = 500; /* the worker needs >= 2 s */
	fake_unlock();
	assert_int_equal(tier_open(f->t, g_in, 0, NULL, &(struct tier_open_out){0}), 0); /* queues chunk 0 */
	assert_true(fx_wait_for(chunk0_restoring, f, 5000));
	assert_int_equal(fx_check_range(f, g_in, 3, 4 * MiB - 5000, 4096), 0);
	/* answered while the worker is still at its first pieces */
	assert_int_equal(fx_chunk_state(g_in, 0), CHUNK_RESTORING);
	assert_int_equal(FX_ST(f, direct_reads), 1);
	assert_int_equal(FX_ST(f, published_reads), 0);
	assert_int_equal(FX_ST(f, partial_restores), 0);
	fake_lock();
	fake_current->read_delay_ms = 0;
	fake_unlock();
	assert_true(fx_wait_for(chunk0_hot, f, 10000));
	tier_close(f->t, g_in, &(struct tier_open_out){0}, NULL);
	fx_check_all(f, g_in, 3, 4 * MiB);
	idx_put(f->idx, g_in);
}

/* Chunks restored ahead of a reader and not read yet are dropped after
 * the chunks the reader has read, although plain LRU would take them
 * first (their restore is older than the reader's last read): a reader
 * slower than the restores then restored each chunk twice (Ray's
 * restores, bench/ray/restore_amp.py). */
static void test_unread_ahead_chunks_stay_before_read_ones(void **state)
{
	struct fx *f = *state;

	fx_cfg_defaults(f, 16 * MiB);
	fx_start(f);
	g_in = fx_mk(f, "a", 8 * MiB, 1);
	assert_int_equal(tier_evict_file(f->t, g_in), 0);
	restore_ahead(f->t, g_in, 0, 7);
	assert_true(fx_wait_for(all_hot, f, 10000));
	/* the reader reads chunks 0 and 1; 2..7 wait for it, unread */
	assert_int_equal(fx_check_range(f, g_in, 1, 0, 2 * MiB), 0);
	/* 6 MiB more: over the threshold (12 of 16 MiB) */
	struct inode *b = fx_mk(f, "b", 6 * MiB, 2);
	assert_true(fx_wait_for(any_cold, f, 10000));
	assert_true(fx_wait_for(fx_below_threshold, f, 10000));
	assert_int_equal(fx_chunk_state(g_in, 0), CHUNK_COLD);
	assert_int_equal(fx_chunk_state(g_in, 1), CHUNK_COLD);
	for (uint64_t c = 2; c < 8; c++)
		if (fx_chunk_state(g_in, c) != CHUNK_HOT_CLEAN)
			fail_msg("chunk %llu, restored ahead and unread, was dropped (state %d)",
				 (unsigned long long)c, fx_chunk_state(g_in, c));
	fx_check_all(f, g_in, 1, 8 * MiB);
	fx_check_all(f, b, 2, 6 * MiB);
	idx_put(f->idx, b);
	idx_put(f->idx, g_in);
}

static int old_head_cold(struct fx *f)
{
	(void)f;
	return fx_chunk_state(g_in, 0) == CHUNK_COLD;
}

/* A file read a moment ago stays in RAM while a file written long ago and
 * never spilled holds the rest: the evictor spills the old dirty chunks
 * (LRU) rather than drop the clean ones just read because that costs no
 * I/O. When every clean chunk went before any dirty one, the dirty chunks
 * of files written long ago filled the tier and a session resumed twice
 * in a row found its file cold (examples/integrations/sessions.py). */
static void test_recent_clean_stays_before_old_dirty(void **state)
{
	struct fx *f = *state;

	fx_cfg_defaults(f, 16 * MiB);
	fx_start(f);
	g_in = fx_mk(f, "old", 6 * MiB, 1); /* dirty, the least recently used */
	struct inode *rd = fx_mk(f, "read", 4 * MiB, 2);
	assert_int_equal(tier_evict_file(f->t, rd), 0);
	/* read twice: brought back into RAM (and promoted, were a first read
	 * served from its segment), clean, used after "old" was written */
	assert_int_equal(fx_check_range(f, rd, 2, 0, 4 * MiB), 0);
	assert_int_equal(fx_check_range(f, rd, 2, 0, 4 * MiB), 0);
	for (uint64_t c = 0; c < 4; c++)
		assert_int_equal(fx_chunk_state(rd, c), CHUNK_HOT_CLEAN);
	/* 10 MiB in RAM; 3 more pass the threshold (12 of 16 MiB) */
	struct inode *nw = fx_mk(f, "new", 3 * MiB, 3);
	assert_true(fx_wait_for(old_head_cold, f, 10000));
	assert_true(fx_wait_for(fx_below_threshold, f, 10000));
	for (uint64_t c = 0; c < 4; c++)
		if (fx_chunk_state(rd, c) != CHUNK_HOT_CLEAN)
			fail_msg("chunk %llu of the file just read was dropped (state %d) while "
				 "older dirty chunks were still in RAM",
				 (unsigned long long)c, fx_chunk_state(rd, c));
	fx_check_all(f, g_in, 1, 6 * MiB);
	fx_check_all(f, rd, 2, 4 * MiB);
	fx_check_all(f, nw, 3, 3 * MiB);
	idx_put(f->idx, nw);
	idx_put(f->idx, rd);
	idx_put(f->idx, g_in);
}

/* A round that must free more than a segment's worth drops the clean
 * chunks it meets before the dirty chunks written after them: LRU over
 * both, not every dirty chunk first. "old" (dirty) is the least recently
 * used, "read" (clean, read back) next, "new" (dirty) last; crossing the
 * threshold asks for about 6 MiB (low_watermark 0.4 of 16 MiB), more than
 * min_spill_size (1 MiB). Gathering dirty chunks alone spilled and dropped
 * the head of "new" while "read" stayed. */
static struct inode *g_new, *g_read;

static int old_spilled(struct fx *f)
{
	(void)f;
	return fx_chunk_state(g_in, 0) == CHUNK_COLD;
}

static void test_clean_goes_before_newer_dirty(void **state)
{
	struct fx *f = *state;

	fx_cfg_defaults(f, 16 * MiB);
	f->cfg.low_watermark = 0.40;
	f->cfg.min_spill_size = MiB;
	fx_start(f);
	g_in = fx_mk(f, "old", 2 * MiB, 1);
	g_read = fx_mk(f, "read", 4 * MiB, 2);
	assert_int_equal(tier_evict_file(f->t, g_read), 0);
	assert_int_equal(fx_check_range(f, g_read, 2, 0, 4 * MiB), 0);
	assert_int_equal(fx_check_range(f, g_read, 2, 0, 4 * MiB), 0);
	for (uint64_t c = 0; c < 4; c++)
		assert_int_equal(fx_chunk_state(g_read, c), CHUNK_HOT_CLEAN);
	/* 6 MiB in RAM; 7 more cross the threshold (12 MiB) */
	g_new = fx_mk(f, "new", 7 * MiB, 3);
	assert_true(fx_wait_for(old_spilled, f, 10000));
	assert_true(fx_wait_for(fx_below_threshold, f, 10000));
	for (uint64_t c = 0; c < 7; c++) {
		if (fx_chunk_state(g_new, c) != CHUNK_COLD)
			continue;
		for (uint64_t r = 0; r < 4; r++)
			if (fx_chunk_state(g_read, r) == CHUNK_HOT_CLEAN)
				fail_msg("chunk %llu of the newest file went cold while chunk %llu "
					 "of an older clean file stayed in RAM",
					 (unsigned long long)c, (unsigned long long)r);
	}
	fx_check_all(f, g_in, 1, 2 * MiB);
	fx_check_all(f, g_read, 2, 4 * MiB);
	fx_check_all(f, g_new, 3, 7 * MiB);
	idx_put(f->idx, g_new);
	idx_put(f->idx, g_read);
	idx_put(f->idx, g_in);
}

/* RAM full of pinned data: a read of a cold chunk does not wait for room
 * that cannot come; it overshoots hot_size by its chunk. */
static void test_cold_read_never_waits_for_impossible_room(void **state)
{
	struct fx *f = *state;
	struct inode *cold, *pinned;
	struct idx_new_node nn = {.mode = S_IFREG | 0644};

	fx_cfg_defaults(f, 8 * MiB);
	f->cfg.write_wait_ms = 30000;
	fx_start(f);
	cold = fx_mk(f, "cold", 2 * MiB, 3);
	assert_int_equal(tier_evict_file(f->t, cold), 0);
	assert_int_equal(idx_create(f->idx, IDX_ROOT_INO, "pinned", &nn, &pinned), 0);
	assert_int_equal(tier_pin(f->t, pinned, 1), 0);
	fx_write(f, pinned, 0, 8 * MiB - 256 * 1024, 6); /* nothing evictable left */
	assert_true(hot_used(f->t->hot) > 7 * MiB);
	uint64_t t0 = clock_now_ns();
	assert_int_equal(fx_check_range(f, cold, 3, MiB + 5, 4096), 0);
	uint64_t ms = (clock_now_ns() - t0) / 1000000;
	if (ms >= 1500)
		fail_msg("a cold read waited %llu ms for room that cannot come",
			 (unsigned long long)ms);
	assert_true(FX_ST(f, restore_overshoots) >= 1);
	idx_put(f->idx, pinned);
	idx_put(f->idx, cold);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_lru_files_spilled_first_in_batches, fx_setup,
					    fx_teardown),
	    cmocka_unit_test_setup_teardown(test_lru_across_tick_wrap, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_lru_after_long_idle, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_failed_spill_keeps_ram_copy, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_crc_failure_is_eio_for_that_chunk_only, fx_setup,
					    fx_teardown),
	    cmocka_unit_test_setup_teardown(test_gc_deletes_dead_segment, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_random_read_restores_nothing, fx_setup,
					    fx_teardown),
	    cmocka_unit_test_setup_teardown(test_reader_reads_beside_a_restore, fx_setup,
					    fx_teardown),
	    cmocka_unit_test_setup_teardown(test_open_restores_in_file_order, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_unread_ahead_chunks_stay_before_read_ones, fx_setup,
					    fx_teardown),
	    cmocka_unit_test_setup_teardown(test_cold_read_never_waits_for_impossible_room, fx_setup,
					    fx_teardown),
	    cmocka_unit_test_setup_teardown(test_clean_goes_before_newer_dirty, fx_setup,
					    fx_teardown),
	    cmocka_unit_test_setup_teardown(test_recent_clean_stays_before_old_dirty, fx_setup,
					    fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
