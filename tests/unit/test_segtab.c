/* test_segtab — tier/segtab: ids, registration, live-byte accounting,
 * totals, replay and checkpoint records, the GC and demotion picks (no
 * journal, no store). */
#include "tier/segment/segtab.h"

#include "index/index.h"
#include "index/journal.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

struct fx {
	struct index *idx; /* the clock */
	struct segtab *s;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	if (!f || idx_new(4 << 20, &f->idx) < 0 || segtab_new(f->idx, &f->s) < 0)
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	segtab_free(f->s);
	idx_free(f->idx);
	free(f);
	return 0;
}

/* Live bytes of segment id (0 when it is not in the table). */
static uint64_t live_of(struct segtab *s, uint64_t id)
{
	struct seg_where w;
	return segtab_where(s, id, &w) == 0 ? w.live : 0;
}

static void test_register_release(void **state)
{
	struct segtab *t = ((struct fx *)*state)->s;
	uint64_t a = segtab_alloc_id(t), b = segtab_alloc_id(t), n, bytes, live, per[2];
	struct store *st = NULL;
	uint32_t dev = 0;

	assert_int_equal(a, 1); /* id 0 is never handed out */
	assert_int_equal(b, 2);
	assert_int_equal(segtab_register(t, a, 0, 3, 1000, 800), 0);
	assert_int_equal(segtab_register(t, b, 0, 0, 500, 500), 0);
	segtab_totals(t, &n, &bytes, &live);
	assert_int_equal(n, 2);
	assert_int_equal(bytes, 1500);
	assert_int_equal(live, 1300);

	struct chunk c = {.loc = {.seg_id = a, .len = 300}};
	segtab_release_chunk(t, &c);
	assert_int_equal(c.loc.seg_id, 0);
	segtab_release_bytes(t, b, 500);
	segtab_totals(t, &n, &bytes, &live);
	assert_int_equal(live, 500);
	assert_int_equal(live_of(t, a), 500);
	assert_int_equal(live_of(t, b), 0);

	segtab_tier_bytes(t, per);
	assert_int_equal(per[0], 1500);
	assert_int_equal(per[1], 0);
	assert_int_equal(segtab_locate(t, a, &st, &dev), 0);
	assert_int_equal(dev, 3);
	assert_int_equal(segtab_locate(t, 99, &st, &dev), -ENOENT);
}

/* A table grown by replay keeps ids above every record, and a deleted
 * segment is gone from the totals once recounted. */
static void test_replay_recount(void **state)
{
	struct segtab *t = ((struct fx *)*state)->s;
	struct jrec meta = {.type = JR_META, .next_seg = 10};
	struct jrec add = {.type = JR_SEG_ADD, .seg = {.id = 5000, .len = 64, .payload = 60}};
	struct jrec add2 = {.type = JR_SEG_ADD, .seg = {.id = 7, .len = 32, .payload = 30}};
	struct jrec del = {.type = JR_SEG_DEL, .seg = {.id = 7}};
	uint64_t n, bytes, live;

	segtab_replay(t, &meta);
	segtab_replay(t, &add);
	segtab_replay(t, &add2);
	segtab_replay(t, &del);
	assert_int_equal(segtab_next_id(t), 5001);
	assert_int_equal(segtab_alloc_id(t), 5001);
	/* what recovery counts from the chunk maps */
	assert_int_equal(segtab_add_live(t, 5000, 60), 0);
	assert_int_equal(segtab_add_live(t, 7, 1), -ENOENT);
	assert_true(segtab_recount(t) > 5000);
	segtab_totals(t, &n, &bytes, &live);
	assert_int_equal(n, 1);
	assert_int_equal(bytes, 64);
	assert_int_equal(live, 60);
}

/* The GC picks: dead segments and one sparse one, each held (gc_busy) until
 * released; a segment found not worth compacting is passed over until
 * more of it dies; a dropped segment leaves the totals. */
static void test_pick_dead_drop(void **state)
{
	struct segtab *t = ((struct fx *)*state)->s;
	uint64_t dead[4], compact, n, bytes, live, id;
	struct seg_where w;

	for (int i = 0; i < 3; i++)
		assert_int_equal(segtab_register(t, segtab_alloc_id(t), 0, 0, 1000, 1000), 0);
	segtab_release_bytes(t, 1, 1000); /* 1: dead */
	segtab_release_bytes(t, 2, 900);  /* 2: sparse */
	assert_int_equal(segtab_pick_dead(t, dead, 4, 0.5, &compact), 1);
	assert_int_equal(dead[0], 1);
	assert_int_equal(compact, 2);
	/* held: not picked again */
	assert_int_equal(segtab_pick_dead(t, dead, 4, 0.5, &compact), 0);
	assert_int_equal(compact, 0);
	/* 2 would not shrink: passed over until more of it dies */
	segtab_no_gain(t, 2);
	id = 2;
	segtab_unbusy(t, &id, 1);
	assert_int_equal(segtab_pick_dead(t, dead, 4, 0.5, &compact), 0);
	assert_int_equal(compact, 0);
	segtab_release_bytes(t, 2, 50);
	assert_int_equal(segtab_pick_dead(t, dead, 4, 0.5, NULL), 0);
	assert_int_equal(segtab_pick_dead(t, dead, 4, 0.5, &compact), 0);
	assert_int_equal(compact, 2);

	segtab_drop(t, 1);
	assert_int_equal(segtab_where(t, 1, &w), -ENOENT);
	segtab_totals(t, &n, &bytes, &live);
	assert_int_equal(n, 2);
	assert_int_equal(bytes, 2000);
	assert_int_equal(live, 1050);
	/* in id order, what is left */
	id = 0;
	assert_int_equal(segtab_next(t, &id, &w), 1);
	assert_int_equal(id, 2);
	assert_int_equal(w.live, 50);
	assert_int_equal(w.payload, 1000);
	assert_int_equal(segtab_next(t, &id, &w), 1);
	assert_int_equal(id, 3);
	assert_int_equal(segtab_next(t, &id, &w), 0);
	assert_int_equal(segtab_next_id(t), 4); /* a dropped id is not handed out again */
}

/* Demotion: the least recently read segments of a store first, until their
 * bytes cover the excess; segtab_where notes no access, segtab_locate does;
 * a relocated segment counts for its new store. */
static void test_pick_oldest_relocate(void **state)
{
	struct segtab *t = ((struct fx *)*state)->s;
	uint64_t ids[4], per[2];
	struct seg_where w;
	struct store *st;
	uint32_t dev;

	for (int i = 0; i < 3; i++)
		assert_int_equal(segtab_register(t, segtab_alloc_id(t), 0, 0, 100, 100), 0);
	assert_int_equal(segtab_locate(t, 1, &st, &dev), 0); /* 1 read last */
	assert_int_equal(segtab_where(t, 2, &w), 0);	     /* no access noted */
	assert_int_equal(segtab_pick_oldest(t, 0, 150, ids, 4, NULL, NULL), 2);
	assert_int_equal(ids[0], 2);
	assert_int_equal(ids[1], 3);
	assert_int_equal(segtab_pick_oldest(t, 0, 150, ids, 4, NULL, NULL), 1); /* 2, 3 held */
	assert_int_equal(ids[0], 1);
	segtab_unbusy(t, (uint64_t[]){1, 2, 3}, 3);

	segtab_relocate(t, 3, 1, 7);
	assert_int_equal(segtab_where(t, 3, &w), 0);
	assert_int_equal(w.store, 1);
	assert_int_equal(w.dev, 7);
	segtab_tier_bytes(t, per);
	assert_int_equal(per[0], 200);
	assert_int_equal(per[1], 100);
	assert_int_equal(segtab_pick_oldest(t, 1, 1000, ids, 4, NULL, NULL), 1);
	assert_int_equal(ids[0], 3);
	segtab_unbusy(t, ids, 1);

	/* a segment written to s3 directly (an extent's demotion) is store 1
	 * from its first record; the picks say when each was read and its size */
	uint64_t s3id = segtab_alloc_id(t), at[4], len[4];
	assert_int_equal(segtab_register(t, s3id, 1, 0, 300, 300), 0);
	assert_int_equal(segtab_where(t, s3id, &w), 0);
	assert_int_equal(w.store, 1);
	assert_int_equal(segtab_pick_oldest(t, 1, 1000, ids, 4, at, len), 2);
	assert_int_equal(len[0] + len[1], 400);
	assert_true(at[0] <= at[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_register_release, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_replay_recount, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pick_dead_drop, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pick_oldest_relocate, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
