/*
 * test_tier_admit — the admission filter (tier/admit) on the read path: a
 * cold chunk read once is answered from its segment and stays cold; a
 * re-read, a random reader's 8th read of a chunk, a warm or a write bring it
 * into RAM; a stream through a chunk, or two opens reading adjacent
 * ranges, are one access; an access older than the horizon is forgotten.
 * A real hot tier and index, an in-memory cold store (tier_fixture.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/config.h"
#include "fake_store.h"
#include "index/index.h"
#include "tier/admit/admit.h"
#include "tier/tier.h"
#include "tier/tier_i.h"
#include "tier_fixture.h"

#include <stdlib.h>

/* A tier with admit=reread and a cold file of `size` bytes, tag 3. */
static struct inode *cold_file(struct fx *f, uint64_t size)
{
	struct inode *in;

	fx_cfg_defaults(f, 64 * MiB);
	f->cfg.admit_reread = 1;
	fx_start(f);
	in = fx_mk(f, "a", size, 3);
	assert_int_equal(tier_evict_file(f->t, in), 0);
	assert_int_equal(hot_used(f->t->hot), 0);
	return in;
}

/* Read [off, off + len) in reads of `step` bytes, as a stream does. */
static void stream(struct fx *f, struct inode *in, uint64_t off, uint64_t len, uint64_t step)
{
	for (uint64_t o = off, n = 0; o < off + len; o += step, n++)
		assert_int_equal(fx_check_range_flags(f, in, 3, o,
						      off + len - o < step ? off + len - o : step,
						      n >= 2 ? TIER_READ_STREAM : 0),
				 0);
}

static int all_cold(struct inode *in, uint64_t n)
{
	for (uint64_t c = 0; c < n; c++)
		if (fx_chunk_state(in, c) != CHUNK_COLD)
			return 0;
	return 1;
}

/* A file read once, front to back, stays cold: every byte from its
 * segment, nothing restored, no RAM used; read again from the start, the
 * chunks it re-reads come into RAM. */
static void test_read_once_stays_cold_reread_promotes(void **state)
{
	struct fx *f = *state;
	struct inode *in = cold_file(f, 4 * MiB);

	stream(f, in, 0, 4 * MiB, 256 << 10);
	assert_true(all_cold(in, 4));
	assert_int_equal(FX_ST(f, chunks_restored), 0);
	assert_int_equal(FX_ST(f, bytes_restored), 0);
	assert_true(FX_ST(f, direct_reads) >= 16);
	assert_int_equal(hot_used(f->t->hot), 0);

	stream(f, in, 0, 2 * MiB, 256 << 10);
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_HOT_CLEAN);
	assert_int_equal(fx_chunk_state(in, 1), CHUNK_HOT_CLEAN);
	assert_int_equal(fx_chunk_state(in, 2), CHUNK_COLD);
	assert_int_equal(FX_ST(f, chunks_restored), 2);
	fx_check_all(f, in, 3, 4 * MiB);
	idx_put(f->idx, in);
}

/* Ray reads each object of its spill file through its own open: two reads
 * of adjacent ranges of one chunk are one access (the second starts where
 * the first ended); a read of what was read before is a second one. */
static void test_adjacent_ranges_are_one_access(void **state)
{
	struct fx *f = *state;
	struct inode *in = cold_file(f, 2 * MiB);

	assert_int_equal(fx_check_range(f, in, 3, 0, 700 << 10), 0);
	assert_int_equal(fx_check_range(f, in, 3, 700 << 10, 2 * MiB - (700 << 10)), 0);
	assert_true(all_cold(in, 2));
	assert_int_equal(FX_ST(f, chunks_restored), 0);
	/* chunk 1's first half again */
	assert_int_equal(fx_check_range(f, in, 3, MiB, 4096), 0);
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_COLD);
	assert_int_equal(fx_chunk_state(in, 1), CHUNK_HOT_CLEAN);
	idx_put(f->idx, in);
}

/* A stream's readahead requests may reach the daemon out of order: a read
 * near where the handle's last one ended (TIER_READ_NEAR) is never a
 * re-read; the same read from another handle is. */
static void test_stream_out_of_order_is_one_access(void **state)
{
	struct fx *f = *state;
	struct inode *in = cold_file(f, MiB);

	assert_int_equal(fx_check_range(f, in, 3, 512 << 10, 512 << 10), 0);
	assert_int_equal(fx_check_range_flags(f, in, 3, 0, 512 << 10, TIER_READ_NEAR), 0);
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_COLD);
	assert_int_equal(FX_ST(f, chunks_restored), 0);
	assert_int_equal(fx_check_range(f, in, 3, 0, 512 << 10), 0);
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_HOT_CLEAN);
	idx_put(f->idx, in);
}

/* A handle whose first read was a re-read goes on re-reading: its later
 * reads (near each other, so never re-reads by position) of chunks read
 * before come into RAM too when the fs layer says so (TIER_READ_AGAIN);
 * without it they are read from the segment. */
static void test_rereading_stream_brings_in_what_it_reads(void **state)
{
	struct fx *f = *state;
	struct inode *in = cold_file(f, 3 * MiB);

	stream(f, in, 0, 3 * MiB, 512 << 10);
	assert_int_equal(FX_ST(f, chunks_restored), 0);
	assert_int_equal(fx_check_range(f, in, 3, 0, 512 << 10), 0); /* a re-read */
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_HOT_CLEAN);
	assert_int_equal(fx_check_range_flags(f, in, 3, MiB, 512 << 10, TIER_READ_NEAR), 0);
	assert_int_equal(fx_chunk_state(in, 1), CHUNK_COLD);
	assert_int_equal(
	    fx_check_range_flags(f, in, 3, 2 * MiB, 512 << 10, TIER_READ_NEAR | TIER_READ_AGAIN), 0);
	assert_int_equal(fx_chunk_state(in, 2), CHUNK_HOT_CLEAN);
	idx_put(f->idx, in);
}

/* A handle whose first read finds its chunk in RAM re-reads: the read says
 * so (io.promoted), for the fs layer's TIER_READ_AGAIN; a read near the
 * handle's last one does not. */
static void test_first_read_of_what_ram_holds_is_a_reread(void **state)
{
	struct fx *f = *state;
	struct inode *in = cold_file(f, 2 * MiB);
	struct tier_io io;

	assert_int_equal(tier_warm_file(f->t, in), 0);
	assert_int_equal(tier_open(f->t, in, 0, NULL, &(struct tier_open_out){0}), 0);
	assert_int_equal(tier_read_begin(f->t, in, 0, 4096, 0, &io), 0);
	assert_int_equal(io.promoted, 1);
	tier_read_end(f->t, in, &io);
	assert_int_equal(tier_read_begin(f->t, in, 4096, 4096, TIER_READ_NEAR, &io), 0);
	assert_int_equal(io.promoted, 0);
	tier_read_end(f->t, in, &io);
	tier_close(f->t, in, &(struct tier_open_out){0}, NULL);
	idx_put(f->idx, in);
}

/* A handle as the fs layer keeps it (struct tier_reader): its first read
 * is never near, every later one is (they go on from each other). */
struct handle {
	struct tier_reader rd;
	int reads;
};

static unsigned handle_pattern(struct tier_reader *rd, uint64_t off, size_t len)
{
	struct handle *h = (struct handle *)rd;

	(void)off, (void)len;
	return h->reads++ ? TIER_READ_NEAR : 0;
}

/* One read through handle h, checked; whether it was judged a re-read. */
static int handle_read(struct fx *f, struct inode *in, struct handle *h, uint64_t off, size_t len)
{
	uint8_t *buf = malloc(len), *exp = malloc(len);
	struct tier_io io;
	int promoted;

	assert_int_equal(tier_read_begin_by(f->t, in, off, len, &h->rd, &io), 0);
	assert_int_equal(fx_io_copy(&io, buf), (ssize_t)len);
	promoted = io.promoted;
	tier_read_end(f->t, in, &io);
	fx_fill(exp, 3, off, len);
	assert_memory_equal(buf, exp, len);
	free(buf);
	free(exp);
	return promoted;
}

/* The kernel sends a re-reader's first pages as several requests, and the
 * first one judged may be a later one (its first pages still cached, or a
 * thread took it first): a read that starts inside what was read before
 * (a 16th of the chunk below where it reached) is a re-read wherever it
 * starts; the handle then re-reads (rd.again, under the inode's lock), so
 * its earlier pages, near, and its next chunks come in too. A new handle
 * that starts where the last one's reads reached is one access with it. */
static void test_reread_judged_from_any_of_its_requests(void **state)
{
	struct fx *f = *state;
	struct inode *in = cold_file(f, 3 * MiB);
	struct handle h1 = {.rd.pattern = handle_pattern}, h2 = {.rd.pattern = handle_pattern};
	struct handle h3 = {.rd.pattern = handle_pattern};

	assert_int_equal(tier_open(f->t, in, 0, NULL, &(struct tier_open_out){0}), 0);
	for (uint64_t off = 0; off < 2200 << 10; off += 100 << 10) /* to 2200 KiB */
		assert_int_equal(handle_read(f, in, &h1, off, 100 << 10), 0);
	assert_true(all_cold(in, 3));
	/* a new handle from where h1's reads reached: one access */
	assert_int_equal(handle_read(f, in, &h3, 2200 << 10, 100 << 10), 0);
	assert_int_equal(h3.rd.again, 0);
	assert_true(all_cold(in, 3));
	/* a re-reader whose request at 512 KiB is judged before its first */
	assert_int_equal(handle_read(f, in, &h2, 512 << 10, 512 << 10), 1);
	assert_int_equal(h2.rd.again, 1);
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_HOT_CLEAN);
	assert_int_equal(handle_read(f, in, &h2, 0, 512 << 10), 0); /* in RAM now */
	assert_int_equal(handle_read(f, in, &h2, MiB, MiB), 1);
	assert_int_equal(fx_chunk_state(in, 1), CHUNK_HOT_CLEAN);
	tier_close(f->t, in, &(struct tier_open_out){0}, NULL);
	fx_check_all(f, in, 3, 3 * MiB);
	idx_put(f->idx, in);
}

/* A random reader's reads of a chunk are answered from the segment until
 * it has read it RANDOM_AGAIN (8) times: then the chunk comes into RAM
 * (its pages read again, or a chunk it keeps coming back to). A stream the
 * kernel's requests made look random reads a chunk in a few requests, and
 * stays out. */
static void test_random_rereads_promote(void **state)
{
	struct fx *f = *state;
	struct inode *in = cold_file(f, 3 * MiB);

	for (int i = 0; i < 7; i++)
		assert_int_equal(fx_check_range_flags(f, in, 3, MiB + (uint64_t)i * 65536, 4096,
						      TIER_READ_RANDOM),
				 0);
	assert_int_equal(fx_check_range_flags(f, in, 3, 2 * MiB + 4096, 4096, TIER_READ_RANDOM),
			 0);
	assert_int_equal(fx_chunk_state(in, 1), CHUNK_COLD);
	assert_int_equal(fx_chunk_state(in, 2), CHUNK_COLD);
	assert_int_equal(FX_ST(f, direct_reads), 8);
	assert_int_equal(fx_check_range_flags(f, in, 3, MiB + 8192, 4096, TIER_READ_RANDOM), 0);
	assert_int_equal(fx_chunk_state(in, 1), CHUNK_HOT_CLEAN);
	assert_int_equal(fx_chunk_state(in, 2), CHUNK_COLD);
	fx_check_all(f, in, 3, 3 * MiB);
	idx_put(f->idx, in);
}

/* A read across two cold chunks is answered piece by piece from both
 * segments' records, and neither chunk comes into RAM. */
static void test_read_across_chunks_answered_in_pieces(void **state)
{
	struct fx *f = *state;
	struct inode *in = cold_file(f, 2 * MiB);

	assert_int_equal(fx_check_range(f, in, 3, MiB - 300, 600), 0);
	assert_true(all_cold(in, 2));
	assert_int_equal(FX_ST(f, direct_reads), 2);
	assert_int_equal(FX_ST(f, chunks_restored), 0);
	idx_put(f->idx, in);
}

/* An access older than the horizon is forgotten while the tier is pushing
 * data out: the next read is a first one again (read from the segment);
 * the read right after it is a second one. */
static void test_old_access_forgotten_under_pressure(void **state)
{
	struct fx *f = *state;
	struct inode *in = cold_file(f, MiB), *b;

	assert_int_equal(fx_check_range(f, in, 3, 0, MiB), 0);
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_COLD);
	/* the tier above low_watermark (40 of 64 MiB, below the spill
	 * threshold: nothing goes), and the evictor let go of chunks 100
	 * ticks old; our chunk's read is 1000 ticks old */
	b = fx_mk(f, "b", 40 * MiB, 5);
	assert_int_equal(admit_horizon(f->t), UINT32_MAX);
	admit_note_evicted(f->t, 100);
	assert_int_equal(admit_horizon(f->t), 100);
	idx_tick_seed(f->idx, idx_tick_now(f->idx) + 1000);
	assert_int_equal(fx_check_range(f, in, 3, 0, 4096), 0);
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_COLD);
	assert_int_equal(FX_ST(f, chunks_restored), 0);
	assert_int_equal(fx_check_range(f, in, 3, 0, 4096), 0);
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_HOT_CLEAN);
	idx_put(f->idx, b);
	idx_put(f->idx, in);
}

/* A warm brings a cold file into RAM whatever the filter says. */
static void test_warm_promotes(void **state)
{
	struct fx *f = *state;
	struct inode *in = cold_file(f, 2 * MiB);

	assert_int_equal(fx_check_range(f, in, 3, 0, 2 * MiB), 0);
	assert_true(all_cold(in, 2));
	assert_int_equal(tier_warm_file(f->t, in), 0);
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_HOT_CLEAN);
	assert_int_equal(fx_chunk_state(in, 1), CHUNK_HOT_CLEAN);
	fx_check_all(f, in, 3, 2 * MiB);
	idx_put(f->idx, in);
}

/* admit=always: every cold chunk a stream reads comes into RAM (the
 * behaviour before the filter). */
static void test_admit_always_restores(void **state)
{
	struct fx *f = *state;
	struct inode *in;

	fx_cfg_defaults(f, 64 * MiB);
	fx_start(f);
	in = fx_mk(f, "a", 2 * MiB, 3);
	assert_int_equal(tier_evict_file(f->t, in), 0);
	stream(f, in, 0, 2 * MiB, 256 << 10);
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_HOT_CLEAN);
	assert_int_equal(fx_chunk_state(in, 1), CHUNK_HOT_CLEAN);
	assert_int_equal(FX_ST(f, direct_reads), 0);
	idx_put(f->idx, in);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_read_once_stays_cold_reread_promotes, fx_setup,
					    fx_teardown),
	    cmocka_unit_test_setup_teardown(test_adjacent_ranges_are_one_access, fx_setup,
					    fx_teardown),
	    cmocka_unit_test_setup_teardown(test_stream_out_of_order_is_one_access, fx_setup,
					    fx_teardown),
	    cmocka_unit_test_setup_teardown(test_rereading_stream_brings_in_what_it_reads, fx_setup,
					    fx_teardown),
	    cmocka_unit_test_setup_teardown(test_first_read_of_what_ram_holds_is_a_reread, fx_setup,
					    fx_teardown),
	    cmocka_unit_test_setup_teardown(test_reread_judged_from_any_of_its_requests, fx_setup,
					    fx_teardown),
	    cmocka_unit_test_setup_teardown(test_random_rereads_promote, fx_setup,
					    fx_teardown),
	    cmocka_unit_test_setup_teardown(test_read_across_chunks_answered_in_pieces, fx_setup,
					    fx_teardown),
	    cmocka_unit_test_setup_teardown(test_old_access_forgotten_under_pressure, fx_setup,
					    fx_teardown),
	    cmocka_unit_test_setup_teardown(test_warm_promotes, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_admit_always_restores, fx_setup, fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
