/*
 * test_maint — the maintenance worker (tier/spill/maint.c) beside the evictor and
 * its spill pool, against the in-memory fake store (tier_fixture.c): a slow
 * compaction or demotion does not hold up a spill, and chunks rewritten,
 * truncated or unlinked while their segment is compacted end up with the
 * right bytes and the right live-byte counts (no double release, no leak).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/clock.h"
#include "fake_store.h"
#include "tier/spill/maint.h"
#include "tier/store/store_s3.h"
#include "tier/tier_i.h"
#include "tier_fixture.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The s3 tier, for demotion: a second fake store (fake_current stays the
 * nvme one). */
static struct fake_store *g_s3;

int __wrap_store_s3_open(const struct s3_config *sc, struct store **out, char *why, size_t whylen)
{
	struct fake_store *nvme = fake_current;
	int ret;

	(void)sc;
	(void)why;
	(void)whylen;
	ret = fake_store_open(out);
	g_s3 = fake_current;
	fake_current = nvme;
	return ret;
}

static void set_read_delay(struct fake_store *fs, unsigned ms)
{
	fake_lock();
	fs->read_delay_ms = ms;
	fake_unlock();
}

/* Every segment's live bytes are what the chunks of ins[0..n) (every file
 * with a cold copy) say they are, and the totals add up. */
static void assert_live_matches(struct fx *f, struct inode **ins, size_t n)
{
	struct tier *t = f->t;
	uint64_t cap = segtab_next_id(t->segtab), *want, total = 0, live_total, id, count, bytes;
	struct seg_where w;

	want = calloc(cap, sizeof(*want));
	assert_non_null(want);
	for (size_t i = 0; i < n; i++) {
		idx_inode_lock(ins[i]);
		for (uint64_t c = 0; c < ins[i]->nchunks; c++) {
			struct chunk *ch = &ins[i]->chunks[c];
			if (!ch->loc.seg_id)
				continue;
			assert_true(ch->loc.seg_id < cap);
			want[ch->loc.seg_id] += ch->loc.len;
		}
		idx_inode_unlock(ins[i]);
	}
	for (id = 1; id < cap; id++) {
		if (segtab_where(t->segtab, id, &w) < 0) {
			if (want[id])
				fail_msg("chunks point at segment %llu, which is gone",
					 (unsigned long long)id);
			continue;
		}
		if (w.live != want[id])
			fail_msg("segment %llu: live %llu, its chunks hold %llu",
				 (unsigned long long)id, (unsigned long long)w.live,
				 (unsigned long long)want[id]);
		assert_true(w.live <= w.payload);
		total += w.live;
	}
	segtab_totals(t->segtab, &count, &bytes, &live_total);
	assert_int_equal(live_total, total);
	free(want);
}

static int compacted(struct fx *f)
{
	return __atomic_load_n(&f->t->st.segments_compacted, __ATOMIC_RELAXED) > 0;
}

static int maint_idle(struct fx *f)
{
	return maint_pending(f->t) == 0;
}

static int any_read(struct fx *f)
{
	(void)f;
	fake_lock();
	unsigned n = fake_current->nreads;
	fake_unlock();
	return n > 0;
}

/* Segment id with no copy left in the fake nvme store. */
static int seg_gone(uint64_t id)
{
	fake_lock();
	int gone = !fake_current->segs[id].live;
	fake_unlock();
	return gone;
}

static uint64_t g_gone_id;

static int old_seg_gone(struct fx *f)
{
	(void)f;
	return seg_gone(g_gone_id);
}

/* Hot usage above the threshold makes the evictor spill: it does so while
 * the maintenance worker is in the middle of a compaction whose every store
 * read takes 1.5 s (about 6 s in all). With compaction on the evictor's
 * thread, the spill waited for it. */
static void test_slow_compaction_does_not_hold_up_spill(void **state)
{
	struct fx *f = *state;
	struct inode *sparse, *in[14];

	fx_cfg_defaults(f, 16 * MiB);
	f->cfg.min_spill_size = 8 * MiB; /* the 8 chunks in one segment */
	fx_start(f);
	sparse = fx_mk(f, "sparse", 8 * MiB, 1);
	assert_int_equal(tier_evict_file(f->t, sparse), 0);
	assert_int_equal(fake_live_segments(), 1);
	fake_lock();
	fake_current->nreads = 0;
	fake_current->read_delay_ms = 1500;
	fake_unlock();
	/* 3 of 8 chunks left: below gc_threshold (0.5), worth rewriting */
	assert_int_equal(tier_truncate(f->t, sparse, 3 * MiB), 0);
	assert_true(fx_wait_for(any_read, f, 5000)); /* the compaction has begun */
	assert_int_equal(FX_ST(f, segments_compacted), 0);

	uint64_t t0 = clock_now_ns();
	fx_mk_range(f, in, 0, 14, MiB, 10); /* 14 MiB of 16: past spill_threshold */
	assert_true(fx_wait_for(fx_below_threshold, f, 10000));
	uint64_t ms = (clock_now_ns() - t0) / 1000000;
	assert_true(FX_ST(f, chunks_spilled) > 8);
	if (ms > 3000)
		fail_msg("spilling took %llu ms beside a slow compaction", (unsigned long long)ms);
	if (compacted(f) || maint_pending(f->t) == 0)
		fail_msg("the compaction ended before the spill did (%llu ms): the test proves "
			 "nothing",
			 (unsigned long long)ms);

	set_read_delay(fake_current, 0);
	assert_true(fx_wait_for(compacted, f, 20000));
	assert_true(fx_wait_for(maint_idle, f, 5000));
	fx_check_all(f, sparse, 1, 3 * MiB);
	for (int i = 0; i < 14; i++)
		fx_check_all(f, in[i], 10 + i, MiB);
	struct inode *all[15] = {sparse};
	memcpy(all + 1, in, sizeof(in));
	assert_live_matches(f, all, 15);
	for (int i = 0; i < 14; i++)
		idx_put(f->idx, in[i]);
	idx_put(f->idx, sparse);
}

/* The same with a demotion (nvme -> s3) whose every nvme read takes 1 s:
 * the evictor spills meanwhile, and the demoted segment reads back. */
static int demoted(struct fx *f)
{
	return __atomic_load_n(&f->t->st.segments_demoted, __ATOMIC_RELAXED) > 0;
}

static void test_slow_demotion_does_not_hold_up_spill(void **state)
{
	struct fx *f = *state;
	struct inode *old, *in[14];

	fx_cfg_defaults(f, 16 * MiB);
	f->cfg.s3 = "s3://fake/prefix";
	f->cfg.nvme_threshold = 0.5;
	fx_start(f);
	assert_non_null(f->t->s3);
	fake_lock();
	fake_current->stat_total = 12 * MiB; /* 8 MiB of segments: 2/3 full */
	fake_unlock();
	old = fx_mk(f, "old", 8 * MiB, 2);
	fake_lock();
	fake_current->nreads = 0;
	fake_current->read_delay_ms = 1000; /* 2 MiB stages: 4 s at least */
	fake_unlock();
	assert_int_equal(tier_evict_file(f->t, old), 0); /* a spill reads nothing */
	assert_true(fx_wait_for(any_read, f, 5000));	 /* the demotion has begun */

	uint64_t t0 = clock_now_ns();
	fx_mk_range(f, in, 0, 14, MiB, 20);
	assert_true(fx_wait_for(fx_below_threshold, f, 10000));
	uint64_t ms = (clock_now_ns() - t0) / 1000000;
	if (ms > 3000)
		fail_msg("spilling took %llu ms beside a slow demotion", (unsigned long long)ms);
	if (demoted(f))
		fail_msg("the demotion ended before the spill did (%llu ms): the test proves "
			 "nothing",
			 (unsigned long long)ms);

	set_read_delay(fake_current, 0);
	assert_true(fx_wait_for(demoted, f, 20000));
	fx_check_all(f, old, 2, 8 * MiB);
	for (int i = 0; i < 14; i++)
		fx_check_all(f, in[i], 20 + i, MiB);
	for (int i = 0; i < 14; i++)
		idx_put(f->idx, in[i]);
	idx_put(f->idx, old);
}

/* Has the compaction read the record of chunk c of in (in segment seg)? */
static int record_read(uint64_t seg, struct inode *in, uint64_t c)
{
	uint64_t off, len;
	int seen = 0;

	idx_inode_lock(in);
	off = in->chunks[c].loc.off;
	len = in->chunks[c].loc.len;
	idx_inode_unlock(in);
	fake_lock();
	for (unsigned i = 0; i < fake_current->nreads && !seen; i++) {
		struct fake_read *r = &fake_current->reads[i];
		seen = r->seg_id == seg && r->off < off + len && off < r->off + r->len;
	}
	fake_unlock();
	return seen;
}

static void wait_record_read(uint64_t seg, struct inode *in, uint64_t c)
{
	uint64_t end = clock_now_ns() + 20000ull * 1000000;
	while (!record_read(seg, in, c)) {
		struct timespec ts = {0, 5 * 1000000L};
		if (clock_now_ns() > end)
			fail_msg("the compaction never read chunk %llu of inode %llu",
				 (unsigned long long)c, (unsigned long long)in->ino);
		nanosleep(&ts, NULL);
	}
}

/*
 * One segment holds a (8 chunks), b (2) and c (2). a is cut to 3 chunks:
 * the segment is sparse and gets compacted, every store read taking 400 ms.
 * After the compaction copied a's chunk 0 it is rewritten and spilled again
 * (COLD, as the copy is, in another segment); after it copied
 * b's chunk 0, b is unlinked (the compaction holds the last reference);
 * after it copied c's chunk 0, c is truncated to 0. Then: a's chunk 0 has
 * the new bytes (from its own segment), a's other chunks and nothing of b
 * or c live in the new
 * segment, every segment's live bytes are what its chunks hold (no double
 * release: an underflow would abort; no leak), the old segment is deleted
 * and the new one holds a's chunks 1 and 2 only.
 */
static void test_chunks_changed_while_compacted(void **state)
{
	struct fx *f = *state;
	struct inode *a, *b, *c;
	uint64_t seg, bino;

	fx_cfg_defaults(f, 64 * MiB);
	f->cfg.min_spill_size = 16 * MiB; /* one segment for the three */
	f->cfg.gc_threshold = 0.7;
	fx_start(f);
	a = fx_mk(f, "a", 8 * MiB, 1);
	b = fx_mk(f, "b", 2 * MiB, 2);
	c = fx_mk(f, "c", 2 * MiB, 3);
	bino = b->ino;
	assert_int_equal(evict_flush_all(f->t), 0);
	assert_int_equal(fake_live_segments(), 1);
	seg = a->chunks[0].loc.seg_id;
	assert_int_equal(b->chunks[1].loc.seg_id, seg);
	assert_int_equal(c->chunks[0].loc.seg_id, seg);
	assert_int_equal(fx_chunk_state(c, 1), CHUNK_COLD);
	{
		struct inode *all[3] = {a, b, c};
		assert_live_matches(f, all, 3);
	}
	fake_lock();
	fake_current->nreads = 0;
	fake_current->read_delay_ms = 400;
	fake_unlock();
	/* 7 of 12 chunks left: below 0.7 */
	assert_int_equal(tier_truncate(f->t, a, 3 * MiB), 0);

	wait_record_read(seg, a, 0);
	fx_write(f, a, 0, MiB, 11); /* whole chunk: claims it, no restore */
	assert_int_equal(fx_chunk_state(a, 0), CHUNK_HOT_DIRTY);
	assert_int_equal(a->chunks[0].loc.seg_id, 0);
	/* and spilled again: COLD, as the copy was, but in another segment */
	assert_int_equal(tier_evict_file(f->t, a), 0);
	assert_int_equal(fx_chunk_state(a, 0), CHUNK_COLD);
	uint64_t aseg = a->chunks[0].loc.seg_id;
	assert_int_not_equal(aseg, seg);

	wait_record_read(seg, b, 0);
	assert_int_equal(idx_unlink(f->idx, IDX_ROOT_INO, "b"), 0);
	idx_forget(f->idx, bino, 1); /* the kernel's reference, from the create */
	idx_put(f->idx, b);	     /* the compaction holds the last reference now */
	b = NULL;

	wait_record_read(seg, c, 0);
	assert_int_equal(tier_truncate(f->t, c, 0), 0);
	assert_int_equal(fx_chunk_state(c, 0), CHUNK_ABSENT);
	assert_false(compacted(f)); /* all of it raced the copy */
	/* the new segment will be sparse too: no second compaction to race the checks */
	{ /* the evictor reads it (gc_pick) while this runs */
		double thr = 0.01;
		__atomic_store(&f->cfg.gc_threshold, &thr, __ATOMIC_RELAXED);
	}

	set_read_delay(fake_current, 0);
	assert_true(fx_wait_for(compacted, f, 20000));
	g_gone_id = seg;
	assert_true(fx_wait_for(old_seg_gone, f, 5000));
	assert_true(fx_wait_for(maint_idle, f, 5000));

	assert_null(idx_get(f->idx, bino)); /* freed: its bytes released once */
	{
		struct inode *all[2] = {a, c};
		assert_live_matches(f, all, 2);
	}
	/* the new segment holds a's chunks 1 and 2, nothing else alive */
	uint64_t nseg = a->chunks[1].loc.seg_id;
	assert_int_not_equal(nseg, 0);
	assert_int_not_equal(nseg, seg);
	assert_int_equal(a->chunks[2].loc.seg_id, nseg);
	struct seg_where w;
	assert_int_equal(segtab_where(f->t->segtab, nseg, &w), 0);
	assert_int_equal(w.live, a->chunks[1].loc.len + a->chunks[2].loc.len);
	assert_int_equal(a->chunks[0].loc.seg_id, aseg); /* not moved back to the old bytes */

	assert_int_equal(fx_check_range(f, a, 11, 0, MiB), 0);
	assert_int_equal(fx_check_range(f, a, 1, MiB, 2 * MiB), 0);
	assert_int_equal(a->size, 3 * MiB);
	assert_int_equal(c->size, 0);
	idx_put(f->idx, a);
	idx_put(f->idx, c);
}

/* Unmount in the middle of a slow compaction: tier_stop returns after the
 * store read in flight (one 1 s read), not the whole compaction, and the
 * segment stays as it was. */
static void test_stop_cancels_compaction(void **state)
{
	struct fx *f = *state;
	struct inode *sparse;

	fx_cfg_defaults(f, 16 * MiB);
	f->cfg.min_spill_size = 8 * MiB;
	fx_start(f);
	sparse = fx_mk(f, "sparse", 8 * MiB, 1);
	assert_int_equal(tier_evict_file(f->t, sparse), 0);
	fake_lock();
	fake_current->nreads = 0;
	fake_current->read_delay_ms = 1000;
	fake_unlock();
	assert_int_equal(tier_truncate(f->t, sparse, 3 * MiB), 0);
	assert_true(fx_wait_for(any_read, f, 5000));
	uint64_t t0 = clock_now_ns();
	tier_stop(f->t);
	uint64_t ms = (clock_now_ns() - t0) / 1000000;
	if (ms > 2500)
		fail_msg("tier_stop waited %llu ms for a compaction", (unsigned long long)ms);
	assert_int_equal(FX_ST(f, segments_compacted), 0);
	assert_int_equal(maint_pending(f->t), 0);
	assert_int_equal(fake_live_segments(), 1);
	struct inode *all[1] = {sparse};
	assert_live_matches(f, all, 1);
	idx_put(f->idx, sparse);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_slow_compaction_does_not_hold_up_spill, fx_setup,
					    fx_teardown),
	    cmocka_unit_test_setup_teardown(test_slow_demotion_does_not_hold_up_spill, fx_setup,
					    fx_teardown),
	    cmocka_unit_test_setup_teardown(test_chunks_changed_while_compacted, fx_setup,
					    fx_teardown),
	    cmocka_unit_test_setup_teardown(test_stop_cancels_compaction, fx_setup, fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
