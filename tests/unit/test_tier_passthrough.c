/*
 * test_tier_passthrough — the tier's rules for passthrough opens (tier.h):
 * which opens are handed to the kernel, the backing id's life, what is
 * counted, that a passed-through file is never punched nor evicted, and
 * that passthrough writers' bytes are found and spilled. A real hot tier
 * and index, the fake cold store (tier_fixture.c), and a fake kernel (the
 * tier_pt_ops below) that hands out backing ids; no FUSE.
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
#include <unistd.h>

/* the fake kernel: backing ids handed out and closed */
static int k_opens, k_closes, k_refuse, k_last_fd;
static int32_t k_closed_id;

static int k_open(void *ctx, int fd)
{
	assert_ptr_equal(ctx, &k_opens); /* the caller's ctx comes through */
	if (k_refuse)
		return -k_refuse;
	k_last_fd = fd;
	return 40 + ++k_opens;
}

static void k_close(void *ctx, int32_t id)
{
	k_closes++;
	k_closed_id = id;
}

static const struct tier_pt_ops k_ops = {.open = k_open, .close = k_close};

static void *CTX = &k_opens;

static uint64_t hot_pinned_bytes(struct tier *t)
{
	return hot_pinned(t->hot);
}

static int setup(void **state)
{
	k_opens = k_closes = k_refuse = 0;
	k_closed_id = 0;
	return fx_setup(state);
}

static void start(struct fx *f, uint64_t hot_size)
{
	fx_cfg_defaults(f, hot_size);
	fx_start(f);
	tier_set_passthrough(f->t, &k_ops);
}

static uint64_t st(struct fx *f, const uint64_t *field)
{
	(void)f;
	return __atomic_load_n(field, __ATOMIC_RELAXED);
}

/* Read-only opens of a file all in RAM are passed through under one
 * backing id, registered at the first and closed at the last. */
static void test_readers_share_one_backing_id(void **state)
{
	struct fx *f = *state;
	struct tier_open_out a, b;
	struct inode *in;

	start(f, 64 * MiB);
	in = fx_mk(f, "a", 3 * MiB + 17, 1);
	assert_int_equal(tier_open(f->t, in, TIER_OPEN_PASSTHROUGH, CTX, &a), 0);
	assert_int_equal(a.backing_id, 41);
	assert_int_equal(k_last_fd, in->hot_fd);
	assert_int_equal(tier_open(f->t, in, TIER_OPEN_PASSTHROUGH, CTX, &b), 0);
	assert_int_equal(b.backing_id, 41);
	assert_int_equal(k_opens, 1);
	assert_int_equal(st(f, &f->t->st.pt_open_now), 2);
	tier_close(f->t, in, &a, CTX);
	assert_int_equal(k_closes, 0);
	tier_close(f->t, in, &b, CTX);
	assert_int_equal(k_closes, 1);
	assert_int_equal(k_closed_id, 41);
	assert_int_equal(in->backing_id, 0);
	assert_int_equal(st(f, &f->t->st.pt_open_now), 0);
	assert_int_equal(st(f, &f->t->st.pt_opens), 2);
	/* without the flag (or without ops) nothing is passed through */
	assert_int_equal(tier_open(f->t, in, 0, CTX, &a), 0);
	assert_int_equal(a.backing_id, 0);
	tier_close(f->t, in, &a, CTX);
	assert_int_equal(k_opens, 1);
	idx_put(f->idx, in);
}

/* Writable opens of a file with no passthrough opens, files with cold
 * data, and files with opens through the daemon are served through the
 * daemon, each counted under its reason. */
static void test_fallbacks_by_reason(void **state)
{
	struct fx *f = *state;
	struct tier_open_out w, r;
	struct inode *in, *cold;

	start(f, 64 * MiB);
	in = fx_mk(f, "a", 2 * MiB, 1);
	assert_int_equal(tier_open(f->t, in, TIER_OPEN_WRITE | TIER_OPEN_PASSTHROUGH, CTX, &w), 0);
	assert_int_equal(w.backing_id, 0);
	assert_int_equal(st(f, &f->t->st.pt_fallback[TIER_PT_WRITE]), 1);
	/* a reader beside a daemon-path writer goes through the daemon too */
	assert_int_equal(tier_open(f->t, in, TIER_OPEN_PASSTHROUGH, CTX, &r), 0);
	assert_int_equal(r.backing_id, 0);
	assert_int_equal(st(f, &f->t->st.pt_fallback[TIER_PT_SHARED]), 1);
	tier_close(f->t, in, &r, CTX);
	tier_close(f->t, in, &w, CTX);

	cold = fx_mk(f, "c", 2 * MiB, 2);
	assert_int_equal(tier_evict_file(f->t, cold), 0);
	assert_int_equal(fx_chunk_state(cold, 0), CHUNK_COLD);
	assert_int_equal(tier_open(f->t, cold, TIER_OPEN_PASSTHROUGH, CTX, &r), 0);
	assert_int_equal(r.backing_id, 0);
	assert_int_equal(st(f, &f->t->st.pt_fallback[TIER_PT_COLD]), 1);
	tier_close(f->t, cold, &r, CTX);
	fx_check_all(f, cold, 2, 2 * MiB);

	/* the kernel refusing the hot file: through the daemon, counted */
	k_refuse = EPERM;
	assert_int_equal(tier_open(f->t, in, TIER_OPEN_PASSTHROUGH, CTX, &r), 0);
	assert_int_equal(r.backing_id, 0);
	assert_int_equal(st(f, &f->t->st.pt_fallback[TIER_PT_ERROR]), 1);
	tier_close(f->t, in, &r, CTX);
	assert_int_equal(k_opens, 0);
	assert_int_equal(st(f, &f->t->st.pt_opens), 0);
	/* the last close through the daemon drops the kernel's copy */
	assert_true(st(f, &f->t->st.cache_drops) >= 3);
	idx_put(f->idx, in);
	idx_put(f->idx, cold);
}

/* A file with passthrough opens keeps every byte in RAM: the evictor
 * spills around it, user.spillway.evict is EBUSY, and once closed it goes
 * cold like any other. */
static void test_never_punched_while_passed_through(void **state)
{
	struct fx *f = *state;
	struct tier_open_out r;
	struct inode *in, *other[10];

	start(f, 8 * MiB);
	in = fx_mk(f, "held", 2 * MiB, 7);
	assert_int_equal(tier_open(f->t, in, TIER_OPEN_PASSTHROUGH, CTX, &r), 0);
	assert_true(r.backing_id > 0);
	assert_int_equal(tier_evict_file(f->t, in), -EBUSY);
	/* 10 MiB more through an 8 MiB tier: the others go cold, not "held" */
	fx_mk_range(f, other, 0, 10, MiB, 20);
	assert_true(fx_wait_for(fx_below_threshold, f, 10000));
	assert_int_equal(fx_chunk_state(other[0], 0), CHUNK_COLD);
	for (uint64_t c = 0; c < 2; c++) {
		uint8_t s = fx_chunk_state(in, c);
		assert_true(s == CHUNK_HOT_CLEAN || s == CHUNK_HOT_DIRTY);
	}
	/* the bytes the kernel reads are the hot file's: all there */
	{
		uint8_t *buf = malloc(2 * MiB), *want = malloc(2 * MiB);
		fx_fill(want, 7, 0, 2 * MiB);
		assert_int_equal(pread(in->hot_fd, buf, 2 * MiB, 0), (ssize_t)(2 * MiB));
		assert_memory_equal(buf, want, 2 * MiB);
		free(buf);
		free(want);
	}
	tier_close(f->t, in, &r, CTX);
	assert_int_equal(tier_evict_file(f->t, in), 0);
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_COLD);
	fx_check_all(f, in, 7, 2 * MiB);
	for (int i = 0; i < 10; i++) {
		fx_check_all(f, other[i], 20 + i, MiB);
		idx_put(f->idx, other[i]);
	}
	idx_put(f->idx, in);
}

/* A writer opening while a reader is passed through is passed through too
 * (the kernel takes nothing else): what it writes into the hot file is
 * found (size, dirty chunks) at getattr (tier_refresh) and after its
 * close, spilled, and reads back from the cold tier. */
static void test_passthrough_writer_tracked(void **state)
{
	struct fx *f = *state;
	struct tier_open_out r, w;
	struct inode *in;
	uint8_t *buf;
	const uint64_t size = 2 * MiB, grown = 3 * MiB + 100;

	start(f, 64 * MiB);
	in = fx_mk(f, "a", size, 3);
	assert_int_equal(tier_evict_file(f->t, in), 0);
	assert_int_equal(tier_warm_file(f->t, in), 0);
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_HOT_CLEAN);
	assert_int_equal(tier_open(f->t, in, TIER_OPEN_PASSTHROUGH, CTX, &r), 0);
	assert_true(r.backing_id > 0);
	assert_int_equal(tier_open(f->t, in, TIER_OPEN_WRITE | TIER_OPEN_PASSTHROUGH, CTX, &w),
			 0);
	assert_int_equal(w.backing_id, r.backing_id);
	/* from the writer's open on, every chunk counts as dirty */
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_HOT_DIRTY);
	assert_int_equal(fx_chunk_state(in, 1), CHUNK_HOT_DIRTY);
	/* the kernel writes the hot file itself: tag 4's bytes from 1 MiB on */
	buf = malloc(grown - MiB);
	fx_fill(buf, 4, MiB, grown - MiB);
	assert_int_equal(pwrite(in->hot_fd, buf, grown - MiB, MiB), (ssize_t)(grown - MiB));
	free(buf);
	tier_refresh(f->t, in);
	assert_int_equal(in->size, grown);
	assert_int_equal(fx_chunk_state(in, 3), CHUNK_HOT_DIRTY);
	/* a whole-tier round leaves a file with passthrough writers alone; its
	 * own evict is EBUSY (passed through) */
	assert_int_equal(tier_evict_file(f->t, in), -EBUSY);
	tier_close(f->t, in, &w, CTX);
	tier_close(f->t, in, &r, CTX);
	assert_int_equal(k_closes, 1);
	assert_int_equal(tier_evict_file(f->t, in), 0);
	for (uint64_t c = 0; c < 4; c++)
		assert_int_equal(fx_chunk_state(in, c), CHUNK_COLD);
	assert_int_equal(fx_check_range(f, in, 3, 0, MiB), 0);
	assert_int_equal(fx_check_range(f, in, 4, MiB, grown - MiB), 0);
	idx_put(f->idx, in);
}

/* Passed-through files pin at most half the budget: past that an open goes
 * through the daemon (counted as "room"), so the evictor always has RAM to
 * turn over for writers. */
static void test_pinned_at_most_half(void **state)
{
	struct fx *f = *state;
	struct tier_open_out a, b;
	struct inode *x, *y;

	start(f, 8 * MiB);
	x = fx_mk(f, "x", 3 * MiB, 1);
	y = fx_mk(f, "y", 2 * MiB, 2);
	assert_int_equal(tier_open(f->t, x, TIER_OPEN_PASSTHROUGH, CTX, &a), 0);
	assert_true(a.backing_id > 0);
	assert_int_equal(hot_pinned_bytes(f->t), 3 * MiB);
	assert_int_equal(tier_open(f->t, y, TIER_OPEN_PASSTHROUGH, CTX, &b), 0);
	assert_int_equal(b.backing_id, 0);
	assert_int_equal(st(f, &f->t->st.pt_fallback[TIER_PT_ROOM]), 1);
	tier_close(f->t, y, &b, CTX);
	tier_close(f->t, x, &a, CTX);
	assert_int_equal(hot_pinned_bytes(f->t), 0);
	/* x closed: y fits now */
	assert_int_equal(tier_open(f->t, y, TIER_OPEN_PASSTHROUGH, CTX, &b), 0);
	assert_true(b.backing_id > 0);
	assert_int_equal(hot_pinned_bytes(f->t), 2 * MiB);
	tier_close(f->t, y, &b, CTX);
	idx_put(f->idx, x);
	idx_put(f->idx, y);
}

/* The budget shrinks (memory pressure) below what passed-through files
 * hold: the evictor cannot take their RAM, so a writer overshoots the
 * budget by the pinned bytes rather than wait for room only a close gives
 * back and get ENOSPC. */
static void test_writer_overshoots_by_pinned_only(void **state)
{
	struct fx *f = *state;
	struct tier_open_out a;
	struct inode *x, *y;
	uint64_t t0;

	start(f, 8 * MiB);
	x = fx_mk(f, "x", 4 * MiB, 1);
	assert_int_equal(tier_open(f->t, x, TIER_OPEN_PASSTHROUGH, CTX, &a), 0);
	assert_true(a.backing_id > 0);
	hot_set_limit(f->t->hot, 4 * MiB); /* what pressure.c does */
	t0 = clock_now_ns();
	y = fx_mk(f, "y", 2 * MiB, 2);
	assert_true(clock_now_ns() - t0 < f->cfg.write_wait_ms * 1000000ull);
	assert_int_equal(st(f, &f->t->st.enospc), 0);
	assert_true(hot_used(f->t->hot) <= 4 * MiB + hot_pinned(f->t->hot) + MiB);
	fx_check_all(f, y, 2, 2 * MiB);
	tier_close(f->t, x, &a, CTX);
	fx_check_all(f, x, 1, 4 * MiB);
	idx_put(f->idx, x);
	idx_put(f->idx, y);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_readers_share_one_backing_id, setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_fallbacks_by_reason, setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_never_punched_while_passed_through, setup,
					    fx_teardown),
	    cmocka_unit_test_setup_teardown(test_passthrough_writer_tracked, setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_pinned_at_most_half, setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_writer_overshoots_by_pinned_only, setup,
					    fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
