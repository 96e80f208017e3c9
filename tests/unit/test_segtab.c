/* test_segtab — tier/segtab: ids, registration, live-byte accounting,
 * totals, replay and checkpoint records (no journal, no store). */
#include "tier/tier_i.h"

#include "index/journal.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static int setup(void **state)
{
	struct tier *t = calloc(1, sizeof(*t));
	if (!t || idx_new(4 << 20, &t->idx) < 0)
		return -1;
	segtab_init(&t->segtab);
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	struct tier *t = *state;
	segtab_destroy(&t->segtab);
	idx_free(t->idx);
	free(t);
	return 0;
}

static void test_register_release(void **state)
{
	struct tier *t = *state;
	uint64_t a = segtab_alloc_id(t), b = segtab_alloc_id(t), n, bytes, live, per[2];
	struct store *st = NULL;
	uint32_t dev = 0;

	assert_int_equal(a, 1); /* id 0 is never handed out */
	assert_int_equal(b, 2);
	assert_int_equal(segtab_register(t, a, 3, 1000, 800), 0);
	assert_int_equal(segtab_register(t, b, 0, 500, 500), 0);
	segtab_totals(t, &n, &bytes, &live);
	assert_int_equal(n, 2);
	assert_int_equal(bytes, 1500);
	assert_int_equal(live, 1300);

	struct chunk c = {.seg_id = a, .seg_len = 300};
	segtab_release_chunk(t, &c);
	assert_int_equal(c.seg_id, 0);
	segtab_release_bytes(t, b, 500);
	segtab_totals(t, &n, &bytes, &live);
	assert_int_equal(live, 500);
	assert_int_equal(t->segtab.v[a].live, 500);
	assert_int_equal(t->segtab.v[b].live, 0);

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
	struct tier *t = *state;
	struct jrec meta = {.type = JR_META, .next_seg = 10};
	struct jrec add = {.type = JR_SEG_ADD, .seg = {.id = 5000, .len = 64, .payload = 60}};
	struct jrec add2 = {.type = JR_SEG_ADD, .seg = {.id = 7, .len = 32, .payload = 30}};
	struct jrec del = {.type = JR_SEG_DEL, .seg = {.id = 7}};
	uint64_t n, bytes, live;

	segtab_replay(t, &meta);
	segtab_replay(t, &add);
	segtab_replay(t, &add2);
	segtab_replay(t, &del);
	assert_true(t->segtab.cap > 5000);
	assert_int_equal(segtab_alloc_id(t), 5001);
	t->segtab.v[5000].live = 60; /* what recovery counts from the chunk maps */
	assert_true(segtab_recount(t) > 5000);
	segtab_totals(t, &n, &bytes, &live);
	assert_int_equal(n, 1);
	assert_int_equal(bytes, 64);
	assert_int_equal(live, 60);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_register_release, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_replay_recount, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
