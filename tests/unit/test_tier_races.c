/*
 * test_tier_races — every place where a wait drops the inode lock and goes
 * on, driven through its interleaving on purpose: the fake store's gates
 * hold a segment read (or a segment's finish) until the test lets it go,
 * and idx_inode_wait is wrapped (-Wl,--wrap=idx_inode_wait) so the test
 * knows when a thread has dropped the lock to wait. No sleep stands in for
 * an ordering: each step waits for the event it needs (a timeout there is a
 * failure). Also the bound for truncate against a stream of random readers,
 * and the spill that reads a chunk straight from the hot file's mapped
 * pages (format v3): truncate and punch wait for it (the store holds its
 * append), and a write landing between its crcs and the device's read
 * never leaves a footer entry whose bytes fail their crc.
 * A real hot tier and index, the in-memory store (tier_fixture.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/clock.h"
#include "fake_store.h"
#include "index/index.h"
#include "tier/tier.h"
#include "tier/segment/segment.h"
#include "tier/tier_i.h"
#include "tier_fixture.h"

#include <errno.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STEP_MS 10000 /* longest any step may take before the test fails */

/* ---- events: waits entered (by the thread's tag), operations done ---- */

static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_cond = PTHREAD_COND_INITIALIZER;
static uint64_t ev_seq;		/* events so far */
static unsigned ev_waits[8];	/* idx_inode_wait calls by tag */
static uint64_t ev_wait_seq[8]; /* the event number of each tag's last wait */
static uint64_t ev_wake1[8];	/* the event number of each tag's first wake-up */
static __thread int my_tag;	/* the tier's own threads: 0 */

static unsigned ev_timeouts[8]; /* idx_inode_timedwait calls that timed out, by tag */
void __real_idx_inode_wait(struct inode *in);
void __real_idx_inode_wake(struct inode *in);
int __real_idx_inode_timedwait(struct inode *in, const struct timespec *deadline);

/* The bounded waits: counted as waits, and their timeouts noted. */
int __wrap_idx_inode_timedwait(struct inode *in, const struct timespec *deadline)
{
	int ret;

	pthread_mutex_lock(&ev_mu);
	ev_waits[my_tag]++;
	ev_wait_seq[my_tag] = ++ev_seq;
	pthread_cond_broadcast(&ev_cond);
	pthread_mutex_unlock(&ev_mu);
	ret = __real_idx_inode_timedwait(in, deadline);
	if (ret == -ETIMEDOUT) {
		pthread_mutex_lock(&ev_mu);
		ev_timeouts[my_tag]++;
		pthread_mutex_unlock(&ev_mu);
	}
	return ret;
}

/* The tier's wake-ups: the first of each tag noted, then done as usual
 * (in->lock held: a thread it wakes waits after this event). */
void __wrap_idx_inode_wake(struct inode *in)
{
	pthread_mutex_lock(&ev_mu);
	if (!ev_wake1[my_tag])
		ev_wake1[my_tag] = ++ev_seq;
	pthread_mutex_unlock(&ev_mu);
	__real_idx_inode_wake(in);
}

/* The tier's waits: counted, then done as usual. in->lock is held here, so
 * once the test sees the count, taking the lock means the waiter waits. */
void __wrap_idx_inode_wait(struct inode *in)
{
	pthread_mutex_lock(&ev_mu);
	ev_waits[my_tag]++;
	ev_wait_seq[my_tag] = ++ev_seq;
	pthread_cond_broadcast(&ev_cond);
	pthread_mutex_unlock(&ev_mu);
	__real_idx_inode_wait(in);
}

static unsigned waits_of(int tag)
{
	unsigned n;
	pthread_mutex_lock(&ev_mu);
	n = ev_waits[tag];
	pthread_mutex_unlock(&ev_mu);
	return n;
}

/* Wait until pred(arg): looked at again after every event, and every 5 ms
 * for state the tier's own threads change. pred runs without ev_mu (it may
 * take an inode lock, which the wrappers above hold while taking ev_mu)
 * and takes ev_mu itself to read the events. 1, or 0 after STEP_MS. */
static int until(int (*pred)(void *), void *arg)
{
	uint64_t end = clock_now_ns() + (uint64_t)STEP_MS * 1000000, seen;

	for (;;) {
		pthread_mutex_lock(&ev_mu);
		seen = ev_seq;
		pthread_mutex_unlock(&ev_mu);
		if (pred(arg))
			return 1;
		if (clock_now_ns() >= end)
			return 0;
		pthread_mutex_lock(&ev_mu);
		if (ev_seq == seen) {
			struct timespec dl = clock_deadline_ms(5);
			pthread_cond_timedwait(&ev_cond, &ev_mu, &dl);
		}
		pthread_mutex_unlock(&ev_mu);
	}
}

/* ---- operations on their own threads ---- */

enum { OP_READ, OP_TRUNCATE, OP_FALLOCATE, OP_FSYNC, OP_WRITE, OP_WARM, OP_EVICT };

struct op {
	struct fx *f;
	struct inode *in;
	int kind, tag;
	unsigned flags; /* reads: TIER_READ_* */
	int mode;	/* fallocate */
	uint64_t off, len;
	int data; /* reads: the tag the bytes must be (-1: zeros, -2: any); writes: the tag */
	/* results (ev_mu) */
	int ret; /* -errno; -EILSEQ: a read's bytes were wrong */
	int done;
	uint64_t done_seq;
	int joined;
	pthread_t th;
};

/* Started and not joined yet: a failed test's teardown lets them finish
 * (its ops are static: they outlive its frame). */
static struct op *g_live[64];
static int g_nlive;

static int op_read(struct op *o)
{
	struct tier_io io;
	uint8_t *buf = malloc(o->len), *exp = malloc(o->len);
	int ret;

	tier_open(o->f->t, o->in, 0, NULL, &(struct tier_open_out){0});
	ret = tier_read_begin(o->f->t, o->in, o->off, o->len, o->flags, &io);
	if (ret == 0) {
		uint64_t n = io.len;
		if (n && fx_io_copy(&io, buf) != (ssize_t)n && o->data != -2)
			ret = -EIO; /* short: a truncate raced it (fine when any bytes do) */
		tier_read_end(o->f->t, o->in, &io);
		if (o->data >= 0)
			fx_fill(exp, o->data, o->off, n);
		else
			memset(exp, 0, n);
		if (ret == 0 && o->data != -2 && (n != o->len || memcmp(buf, exp, n)))
			ret = -EILSEQ;
	}
	tier_close(o->f->t, o->in, &(struct tier_open_out){0}, NULL);
	free(buf);
	free(exp);
	return ret;
}

static int op_write(struct op *o)
{
	uint8_t *buf = malloc(o->len);
	struct tier_io io;
	int ret;

	fx_fill(buf, o->data, o->off, o->len);
	tier_open(o->f->t, o->in, 0, NULL, &(struct tier_open_out){0});
	ret = tier_write_begin(o->f->t, o->in, o->off, o->len, 0, &io);
	if (ret == 0) {
		ssize_t w = pwrite(io.fd, buf, o->len, (off_t)o->off);
		w = tier_write_end(o->f->t, o->in, &io, w);
		ret = w == (ssize_t)o->len ? 0 : w < 0 ? (int)w : -EIO;
	}
	tier_close(o->f->t, o->in, &(struct tier_open_out){0}, NULL);
	free(buf);
	return ret;
}

static void *op_main(void *arg)
{
	struct op *o = arg;
	int ret = -EINVAL;

	my_tag = o->tag;
	switch (o->kind) {
	case OP_READ:
		ret = op_read(o);
		break;
	case OP_WRITE:
		ret = op_write(o);
		break;
	case OP_TRUNCATE:
		ret = tier_truncate(o->f->t, o->in, o->len);
		break;
	case OP_FALLOCATE:
		ret = tier_fallocate(o->f->t, o->in, o->mode, o->off, o->len);
		break;
	case OP_FSYNC:
		ret = tier_fsync(o->f->t, o->in);
		break;
	case OP_WARM:
		ret = tier_warm_file(o->f->t, o->in);
		break;
	case OP_EVICT:
		ret = tier_evict_file(o->f->t, o->in);
		break;
	}
	pthread_mutex_lock(&ev_mu);
	o->ret = ret;
	o->done = 1;
	o->done_seq = ++ev_seq;
	pthread_cond_broadcast(&ev_cond);
	pthread_mutex_unlock(&ev_mu);
	return NULL;
}

static void op_start(struct op *o)
{
	assert_true(g_nlive < 64);
	assert_int_equal(pthread_create(&o->th, NULL, op_main, o), 0);
	g_live[g_nlive++] = o;
}

static int op_join(struct op *o)
{
	pthread_join(o->th, NULL);
	o->joined = 1;
	/* off the teardown's list: o lives in the test's frame, gone by then */
	for (int i = 0; i < g_nlive; i++)
		if (g_live[i] == o) {
			g_live[i] = g_live[--g_nlive];
			break;
		}
	return o->ret;
}

static int race_teardown(void **state)
{
	fake_gate_open_all();
	for (int i = 0; i < g_nlive; i++)
		if (!g_live[i]->joined)
			pthread_join(g_live[i]->th, NULL);
	g_nlive = 0;
	return fx_teardown(state);
}

/* predicates for until() */

struct waited {
	struct op *o;
	unsigned n;	 /* at least n waits by o->tag ... */
	int woken_by; /* ... or: one after the first wake-up by this tag */
};

static int done_or_waiting(void *arg)
{
	struct waited *w = arg;
	int ok;

	pthread_mutex_lock(&ev_mu);
	uint64_t wk = w->woken_by ? ev_wake1[w->woken_by] : 0;
	ok = w->o->done || ev_waits[w->o->tag] >= w->n || (wk && ev_wait_seq[w->o->tag] > wk);
	pthread_mutex_unlock(&ev_mu);
	return ok;
}

static int waiting(void *arg)
{
	struct waited *w = arg;
	int ok;

	pthread_mutex_lock(&ev_mu);
	ok = ev_waits[w->o->tag] >= w->n;
	pthread_mutex_unlock(&ev_mu);
	return ok;
}

static int op_done(struct op *o)
{
	int d;
	pthread_mutex_lock(&ev_mu);
	d = o->done;
	pthread_mutex_unlock(&ev_mu);
	return d;
}

/* A gated call arrives: ticket tk is blocked in the store. */
static void gate(unsigned tk)
{
	if (fake_gate_wait(tk, STEP_MS) < 0)
		fail_msg("gate ticket %u: no call arrived", tk);
}

static void reset_events(void)
{
	pthread_mutex_lock(&ev_mu);
	memset(ev_waits, 0, sizeof(ev_waits));
	memset(ev_wait_seq, 0, sizeof(ev_wait_seq));
	memset(ev_wake1, 0, sizeof(ev_wake1));
	memset(ev_timeouts, 0, sizeof(ev_timeouts));
	pthread_mutex_unlock(&ev_mu);
}

/* A cold file of n chunks of tag's bytes. */
static struct inode *mk_cold(struct fx *f, const char *name, uint64_t size, int tag)
{
	struct inode *in = fx_mk(f, name, size, tag);
	assert_int_equal(tier_evict_file(f->t, in), 0);
	for (uint64_t c = 0; c * f->cfg.chunk_size < size; c++)
		assert_int_equal(fx_chunk_state(in, c), CHUNK_COLD);
	reset_events();
	return in;
}

static struct op mk_op(struct fx *f, struct inode *in, int kind, int tag)
{
	return (struct op){.f = f, .in = in, .kind = kind, .tag = tag, .data = -2};
}

/* Bytes [off, off+len) of in read back (not a random read: restored). */
static void expect_bytes(struct fx *f, struct inode *in, int data, uint64_t off, uint64_t len)
{
	struct op r = mk_op(f, in, OP_READ, 7);
	r.off = off;
	r.len = len;
	r.data = data;
	op_start(&r);
	if (op_join(&r) != 0)
		fail_msg("[%llu, +%llu) reads back %s", (unsigned long long)off,
			 (unsigned long long)len,
			 r.ret == -EILSEQ ? "wrong bytes" : strerror(-r.ret));
}

/*
 * 9fe90d8, first half. truncate to 1 MiB waits for chunk 2 (a random
 * reader's direct read, RESTORING), having looked at chunk 1; while it
 * waits, a read already under way (across chunks 0 and 1: it restored
 * chunk 0 first) starts restoring chunk 1. Without "every wait starts
 * over" truncate drops chunk 1 under that restore, which then sets it
 * HOT_CLEAN with the bytes from before the truncate. (A read that starts
 * while truncate waits no longer gets that far: see the next test.)
 */
static void test_truncate_looks_again_after_each_wait(void **state)
{
	struct fx *f = *state;
	struct inode *in;

	fx_cfg_defaults(f, 64 * MiB);
	fx_start(f);
	in = mk_cold(f, "a", 4 * MiB, 3);

	static struct op r1, r2, tr;
	r1 = mk_op(f, in, OP_READ, 1);
	r2 = mk_op(f, in, OP_READ, 2);
	tr = mk_op(f, in, OP_TRUNCATE, 3);
	r1.flags = TIER_READ_RANDOM;
	r1.off = 2 * MiB + 8192, r1.len = 4096, r1.data = 3;
	r2.off = MiB / 2, r2.len = MiB; /* chunk 0's tail, chunk 1's head */
	tr.len = MiB;

	fake_gate_arm(FAKE_GATE_READ, 1);
	op_start(&r2);
	gate(1); /* r2 restores chunk 0 (outside truncate's range) */
	fake_gate_arm(FAKE_GATE_READ, 1);
	op_start(&r1);
	gate(2); /* chunk 2 RESTORING, its reader in the store */
	op_start(&tr);
	assert_true(until(waiting, &(struct waited){&tr, 1, 0})); /* at chunk 2 */
	fake_gate_arm(FAKE_GATE_READ, 1);
	fake_gate_release(1, 0);
	gate(3); /* r2 goes on to chunk 1: RESTORING, behind truncate's scan */
	fake_gate_release(2, 0);
	assert_int_equal(op_join(&r1), 0);
	/* truncate is through (without the fix), or waits for chunk 1: a wait
	 * after r1's wake-up (r1's chunk 2 was COLD again by then) */
	assert_true(until(done_or_waiting, &(struct waited){&tr, UINT32_MAX, 1}));
	fake_gate_release(3, 0);
	assert_int_equal(op_join(&r2), 0);
	assert_int_equal(op_join(&tr), 0);

	assert_int_equal(fx_chunk_state(in, 1), CHUNK_ABSENT);
	assert_int_equal(tier_truncate(f->t, in, 4 * MiB), 0);
	expect_bytes(f, in, 3, 0, MiB);
	expect_bytes(f, in, -1, MiB, 3 * MiB);
	idx_put(f->idx, in);
}

static int waiting_or_in_store(void *arg)
{
	struct waited *w = arg;
	return fake_gate_tickets() >= 2 || done_or_waiting(w);
}

/*
 * The bound for truncate against random readers: while truncate waits for
 * chunk 2's direct read, a random reader of chunk 0 that starts then waits
 * for the truncate instead of starting a direct read (and then finds the
 * file empty), so a stream of them cannot keep truncate waiting.
 */
static void test_truncate_holds_off_new_restores(void **state)
{
	struct fx *f = *state;
	struct inode *in;

	fx_cfg_defaults(f, 64 * MiB);
	fx_start(f);
	in = mk_cold(f, "a", 4 * MiB, 3);

	static struct op r1, r2, tr;
	r1 = mk_op(f, in, OP_READ, 1);
	r2 = mk_op(f, in, OP_READ, 2);
	tr = mk_op(f, in, OP_TRUNCATE, 3);
	r1.flags = r2.flags = TIER_READ_RANDOM;
	r1.off = 2 * MiB + 8192, r1.len = 4096, r1.data = 3;
	r2.off = 4096, r2.len = 4096;
	tr.len = 0;

	fake_gate_arm(FAKE_GATE_READ, 2);
	op_start(&r1);
	gate(1); /* chunk 2 RESTORING, its reader in the store */
	op_start(&tr);
	assert_true(until(waiting, &(struct waited){&tr, 1, 0}));
	op_start(&r2);
	assert_true(until(waiting_or_in_store, &(struct waited){&r2, 1, 0}));
	if (fake_gate_tickets() >= 2 || op_done(&r2))
		fail_msg("a random read started while truncate waited for the file's restores");
	fake_gate_arm(FAKE_GATE_READ, 0);
	fake_gate_release(1, 0);
	assert_int_equal(op_join(&r1), 0);
	assert_int_equal(op_join(&tr), 0);
	assert_int_equal(op_join(&r2), 0); /* nothing: the file is empty */
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_ABSENT);
	assert_int_equal(FX_ST(f, direct_reads), 1);
	assert_int_equal(tier_truncate(f->t, in, 4 * MiB), 0);
	expect_bytes(f, in, -1, 0, 4 * MiB);
	idx_put(f->idx, in);
}

/*
 * 9fe90d8, second half. truncate to the middle of chunk 0 restores chunk 0
 * first (the lock dropped for the read); meanwhile a random reader starts a
 * direct read of chunk 2. truncate must wait for it before dropping
 * chunk 2, or that reader sets it back to COLD with its old segment.
 */
static void test_truncate_waits_again_after_its_boundary_restore(void **state)
{
	struct fx *f = *state;
	struct inode *in;

	fx_cfg_defaults(f, 64 * MiB);
	fx_start(f);
	in = mk_cold(f, "a", 4 * MiB, 4);

	static struct op r2, tr;
	r2 = mk_op(f, in, OP_READ, 2);
	tr = mk_op(f, in, OP_TRUNCATE, 3);
	r2.flags = TIER_READ_RANDOM;
	r2.off = 2 * MiB + 4096, r2.len = 4096, r2.data = 4;
	tr.len = MiB / 2;

	fake_gate_arm(FAKE_GATE_READ, 1);
	op_start(&tr);
	gate(1); /* truncate restores chunk 0, unlocked */
	assert_int_equal(waits_of(3), 0);
	fake_gate_arm(FAKE_GATE_READ, 1);
	op_start(&r2);
	gate(2); /* chunk 2 RESTORING */
	fake_gate_release(1, 0);
	assert_true(until(done_or_waiting, &(struct waited){&tr, 1, 0}));
	fake_gate_release(2, 0);
	assert_int_equal(op_join(&r2), 0);
	assert_int_equal(op_join(&tr), 0);

	assert_int_equal(fx_chunk_state(in, 2), CHUNK_ABSENT);
	assert_int_equal(tier_truncate(f->t, in, 4 * MiB), 0);
	expect_bytes(f, in, 4, 0, MiB / 2);
	expect_bytes(f, in, -1, MiB / 2, MiB / 2);
	expect_bytes(f, in, -1, 2 * MiB, MiB);
	idx_put(f->idx, in);
}

/*
 * 3eb34c1 (the soak's fsx: a truncated tail came back). truncate to the
 * middle of chunk 1 restores chunk 1 first (the lock dropped); meanwhile a
 * random reader starts a direct read of chunk 2, so truncate waits again
 * once chunk 1 is hot. While it waits, an fsync spills chunk 1 - with the
 * bytes past the cut, since the ftruncate has not run yet. Had truncate
 * marked chunk 1 dirty before that wait, the spill would commit the
 * generation truncate set and keep that copy as the chunk's cold copy: once
 * the chunk is evicted and the file grows, the cut bytes are back where
 * zeros belong. Marked after the waits, with the lock held through the
 * ftruncate, no spill can take the chunk in between.
 */
static void start_durable(struct fx *f);

static void test_truncate_marks_its_boundary_after_the_waits(void **state)
{
	struct fx *f = *state;
	struct inode *in;

	start_durable(f); /* fsync spills */
	in = mk_cold(f, "a", 4 * MiB, 6);

	static struct op r2, tr, fs;
	r2 = mk_op(f, in, OP_READ, 2);
	tr = mk_op(f, in, OP_TRUNCATE, 3);
	fs = mk_op(f, in, OP_FSYNC, 4);
	r2.flags = TIER_READ_RANDOM;
	r2.off = 2 * MiB + 4096, r2.len = 4096, r2.data = 6;
	tr.len = MiB + MiB / 2;

	fake_gate_arm(FAKE_GATE_READ, 1);
	op_start(&tr);
	gate(1); /* truncate restores chunk 1, unlocked */
	fake_gate_arm(FAKE_GATE_READ, 1);
	op_start(&r2);
	gate(2); /* chunk 2 RESTORING, its reader in the store */
	fake_gate_release(1, 0);
	assert_true(until(waiting, &(struct waited){&tr, 1, 0})); /* for chunk 2 */
	op_start(&fs); /* would spill chunk 1 as it is: the tail not cut yet */
	assert_int_equal(op_join(&fs), 0);
	fake_gate_release(2, 0);
	assert_int_equal(op_join(&r2), 0);
	assert_int_equal(op_join(&tr), 0);

	/* chunk 1 out of RAM, the file grown: the cut half reads as zeros */
	assert_int_equal(tier_evict_file(f->t, in), 0);
	assert_int_equal(fx_chunk_state(in, 1), CHUNK_COLD);
	assert_int_equal(tier_truncate(f->t, in, 4 * MiB), 0);
	expect_bytes(f, in, 6, 0, MiB + MiB / 2);
	expect_bytes(f, in, -1, MiB + MiB / 2, MiB / 2);
	idx_put(f->idx, in);
}

/*
 * fallocate's second look. A punch over chunk 0 (whole: not restored, it
 * is replaced) and the head of chunk 1 (restored first, the lock dropped).
 * Meanwhile a random reader starts a direct read of chunk 0. fallocate
 * must wait for it before punching chunk 0, or that reader sets the
 * punched chunk back to COLD.
 */
static void test_fallocate_waits_again_after_its_restore(void **state)
{
	struct fx *f = *state;
	struct inode *in;

	fx_cfg_defaults(f, 64 * MiB);
	fx_start(f);
	in = mk_cold(f, "a", 4 * MiB, 5);

	static struct op r2, fa;
	r2 = mk_op(f, in, OP_READ, 2);
	fa = mk_op(f, in, OP_FALLOCATE, 3);
	r2.flags = TIER_READ_RANDOM;
	r2.off = 4096, r2.len = 4096, r2.data = 5;
	fa.mode = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
	fa.off = 0, fa.len = MiB + MiB / 2;

	fake_gate_arm(FAKE_GATE_READ, 1);
	op_start(&fa);
	gate(1); /* fallocate restores chunk 1 */
	fake_gate_arm(FAKE_GATE_READ, 1);
	op_start(&r2);
	gate(2); /* chunk 0 RESTORING */
	fake_gate_release(1, 0);
	assert_true(until(done_or_waiting, &(struct waited){&fa, 1, 0}));
	fake_gate_release(2, 0);
	assert_int_equal(op_join(&r2), 0);
	assert_int_equal(op_join(&fa), 0);

	assert_int_not_equal(fx_chunk_state(in, 0), CHUNK_COLD);
	expect_bytes(f, in, -1, 0, MiB + MiB / 2);
	expect_bytes(f, in, 5, MiB + MiB / 2, MiB / 2);
	idx_put(f->idx, in);
}

static struct inode *g_big;

static int room_waiter(void *arg)
{
	struct fx *f = arg;
	return evict_waiters(f->t, NULL) > 0;
}

/*
 * fallocate waits for hot room (evict_wait_room) with the inode lock
 * dropped; meanwhile a random reader starts a direct read of the chunk it
 * is about to zero. It must wait for that reader after the room came.
 * ZERO_RANGE: a hot_dir on a disk (tmpfs has none; there only a punch
 * replaces a chunk, and a punch does not wait for room).
 */
static void test_fallocate_waits_again_after_waiting_for_room(void **state)
{
	struct fx *f = *state;
	struct inode *in;

	snprintf(f->hot, sizeof(f->hot), "%s/hot", f->cold);
	fx_cfg_defaults(f, 8 * MiB);
	f->cfg.write_wait_ms = 20000;
	/* one round of the evictor makes the room (7 MiB of "big", 4 spilled:
	 * 5 MiB with the 2 zeroed, under 5.6): a second one would spill the
	 * zeroed chunk too, under a loaded machine before the state is read
	 * (seen once in CI) */
	f->cfg.low_watermark = 0.70;
	fx_start(f);
	in = mk_cold(f, "a", 2 * MiB, 6);
	/* RAM full of dirty bytes: the evictor spills (its segment held at
	 * the gate), and there is no room for 2 MiB more until it is durable */
	fake_gate_arm(FAKE_GATE_PUT, 1);
	g_big = fx_mk(f, "big", 7 * MiB, 8);
	gate(1);

	static struct op r2, fa;
	r2 = mk_op(f, in, OP_READ, 2);
	fa = mk_op(f, in, OP_FALLOCATE, 3);
	r2.flags = TIER_READ_RANDOM;
	r2.off = 4096, r2.len = 4096, r2.data = 6;
	fa.mode = FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE;
	fa.off = 0, fa.len = 2 * MiB;

	op_start(&fa);
	assert_true(until(room_waiter, f)); /* fallocate waits for room, unlocked */
	fake_gate_arm(FAKE_GATE_READ, 1);
	op_start(&r2);
	unsigned tr = 2;
	gate(tr); /* chunk 0 RESTORING */
	/* the evictor's segment (ticket 1) finishes: room for fallocate */
	fake_gate_release(1, 0);
	assert_true(until(done_or_waiting, &(struct waited){&fa, 1, 0}));
	fake_gate_release(tr, 0);
	assert_int_equal(op_join(&r2), 0);
	assert_int_equal(op_join(&fa), 0);

	assert_int_not_equal(fx_chunk_state(in, 0), CHUNK_COLD);
	expect_bytes(f, in, -1, 0, 2 * MiB);
	fx_check_all(f, g_big, 8, 6 * MiB);
	idx_put(f->idx, g_big);
	idx_put(f->idx, in);
}

static char g_state_dir[128];

static void start_durable(struct fx *f)
{
	fx_cfg_defaults(f, 64 * MiB);
	snprintf(g_state_dir, sizeof(g_state_dir), "%s/state", f->cold);
	assert_int_equal(mkdir(g_state_dir, 0700), 0);
	f->cfg.state_dir = g_state_dir;
	fx_start(f);
}

/*
 * fsync waits for spills of the file in flight (another fsync's here) with
 * the lock dropped; that spill fails and the chunk is dirty again. fsync
 * must look again and spill it itself: it returns 0 only with the chunk in
 * a durable segment.
 */
static void test_fsync_looks_again_after_a_failed_spill(void **state)
{
	struct fx *f = *state;
	struct inode *in;

	start_durable(f);
	in = fx_mk(f, "a", MiB, 2);
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_HOT_DIRTY);

	static struct op s1, s2;
	s1 = mk_op(f, in, OP_FSYNC, 1);
	s2 = mk_op(f, in, OP_FSYNC, 2);
	fake_gate_arm(FAKE_GATE_PUT, 1);
	op_start(&s1);
	gate(1); /* chunk 0 SPILLING, its segment not durable yet */
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_SPILLING);
	op_start(&s2);
	assert_true(until(done_or_waiting, &(struct waited){&s2, 1, 0}));
	if (op_done(&s2))
		fail_msg("fsync returned %d while the chunk's segment was not durable", s2.ret);
	fake_gate_release(1, EIO); /* that segment fails */
	assert_true(op_join(&s1) < 0);
	assert_int_equal(op_join(&s2), 0);
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_HOT_CLEAN);
	idx_inode_lock(in);
	assert_true(in->chunks[0].loc.seg_id != 0);
	idx_inode_unlock(in);
	fake_lock();
	assert_int_equal(fake_current->puts_finished, 1);
	fake_unlock();
	fx_check_all(f, in, 2, MiB);
	idx_put(f->idx, in);
}

/*
 * A whole-chunk write over a chunk a random reader is reading directly
 * waits for it, then claims the chunk (no restore: its old bytes are not
 * needed) and wins.
 */
static void test_write_claims_after_waiting_for_a_direct_read(void **state)
{
	struct fx *f = *state;
	struct inode *in;

	fx_cfg_defaults(f, 64 * MiB);
	fx_start(f);
	in = mk_cold(f, "a", 2 * MiB, 1);

	static struct op r1, w;
	r1 = mk_op(f, in, OP_READ, 1);
	w = mk_op(f, in, OP_WRITE, 2);
	r1.flags = TIER_READ_RANDOM;
	r1.off = 4096, r1.len = 4096, r1.data = 1;
	w.off = 0, w.len = MiB, w.data = 9;
	fake_gate_arm(FAKE_GATE_READ, 1);
	op_start(&r1);
	gate(1);
	op_start(&w);
	assert_true(until(done_or_waiting, &(struct waited){&w, 1, 0}));
	assert_false(op_done(&w));
	fake_gate_release(1, 0);
	assert_int_equal(op_join(&r1), 0);
	assert_int_equal(op_join(&w), 0);
	assert_int_equal(FX_ST(f, chunks_restored), 0); /* claimed, not restored */
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_HOT_DIRTY);
	expect_bytes(f, in, 9, 0, MiB);
	expect_bytes(f, in, 1, MiB, MiB);
	idx_put(f->idx, in);
}

/*
 * A reader waiting for another reader's restore of its chunk, which fails:
 * it looks again, finds the chunk COLD and restores it itself. So do a
 * partial overwrite (its wait for the chunk, then its restore: its bytes
 * land on the chunk's old ones) and a warm (restore_make_hot_locked's own
 * wait). One waiter at a time, so the failed restore's wake-up is the one
 * each waiter resumes from.
 */
static void test_waiters_restore_themselves_after_a_failed_restore(void **state)
{
	static const char *what[] = {"read", "write", "warm"};
	struct fx *f = *state;
	struct inode *in[3];

	fx_cfg_defaults(f, 64 * MiB);
	fx_start(f);
	in[0] = mk_cold(f, "a", 2 * MiB, 2);
	in[1] = mk_cold(f, "b", 2 * MiB, 2);
	in[2] = mk_cold(f, "c", MiB, 2);

	for (int k = 0; k < 3; k++) {
		/* a stream reader restores chunk 0 whole (its range is the chunk) */
		static struct op r1, wt;
		r1 = mk_op(f, in[k], OP_READ, 1);
		wt = mk_op(f, in[k], k == 0 ? OP_READ : k == 1 ? OP_WRITE : OP_WARM, 2);
		r1.flags = TIER_READ_STREAM;
		r1.off = 0, r1.len = MiB, r1.data = 2;
		if (k == 0) /* a reader of 4 KiB of it */
			wt.flags = TIER_READ_STREAM, wt.off = 8192, wt.len = 4096, wt.data = 2;
		else if (k == 1) /* a partial overwrite */
			wt.off = 100, wt.len = 1000, wt.data = 5;
		reset_events();
		fake_gate_arm(FAKE_GATE_READ, 1);
		op_start(&r1);
		gate(k + 1);
		assert_int_equal(fx_chunk_state(in[k], 0), CHUNK_RESTORING);
		op_start(&wt);
		assert_true(until(waiting, &(struct waited){&wt, 1, 0}));
		fake_gate_release(k + 1, EIO);
		assert_int_equal(op_join(&r1), -EIO);
		if (op_join(&wt) != 0)
			fail_msg("the %s waiting for a failed restore: %s", what[k],
				 wt.ret == -EILSEQ ? "wrong bytes" : strerror(-wt.ret));
		if (k > 0 && fx_chunk_state(in[k], 0) == CHUNK_COLD)
			fail_msg("the %s waiting for a failed restore left the chunk cold", what[k]);
	}
	expect_bytes(f, in[1], 2, 0, 100);
	expect_bytes(f, in[1], 5, 100, 1000);
	expect_bytes(f, in[1], 2, 1100, MiB - 1100);
	for (int k = 0; k < 3; k++)
		idx_put(f->idx, in[k]);
}

static int chunk0_state_is(void *arg)
{
	return fx_chunk_state(g_big, 0) == *(uint8_t *)arg;
}

static int worker_waiting_or_hot(void *arg)
{
	return waiting(arg) || fx_chunk_state(g_big, 0) == CHUNK_HOT_CLEAN;
}

/*
 * The end of a restore in pieces (restore=open's worker) waits for a
 * reader reading beside it from the cold copy: the chunk stays RESTORING
 * (its cold copy and its rst_part alive) until that reader is out.
 */
static void test_restore_end_waits_for_readers_beside(void **state)
{
	struct fx *f = *state;

	fx_cfg_defaults(f, 64 * MiB);
	f->cfg.chunk_size = 4 * MiB;
	f->cfg.restore = RESTORE_OPEN;
	f->cfg.io_workers = 1;
	fx_start(f);
	g_big = mk_cold(f, "a", 4 * MiB, 3);

	static struct op r;
	r = mk_op(f, g_big, OP_READ, 2);
	r.off = 4 * MiB - 8192, r.len = 4096, r.data = 3;
	fake_gate_arm(FAKE_GATE_READ, 1);
	assert_int_equal(tier_open(f->t, g_big, 0, NULL, &(struct tier_open_out){0}), 0);
	gate(1); /* the worker's first piece */
	assert_int_equal(fx_chunk_state(g_big, 0), CHUNK_RESTORING);
	fake_gate_arm(FAKE_GATE_READ, 1);
	op_start(&r);
	gate(2); /* the reader, beside it */
	fake_gate_release(1, 0);
	/* the worker reads its other pieces, then waits for the reader (or,
	 * without that wait, ends the restore under it) */
	assert_true(until(worker_waiting_or_hot, &(struct waited){&(struct op){.tag = 0}, 1, 0}));
	assert_int_equal(fx_chunk_state(g_big, 0), CHUNK_RESTORING);
	fake_gate_release(2, 0);
	assert_int_equal(op_join(&r), 0);
	uint8_t hot = CHUNK_HOT_CLEAN;
	assert_true(until(chunk0_state_is, &hot));
	assert_int_equal(FX_ST(f, direct_reads), 1);
	tier_close(f->t, g_big, &(struct tier_open_out){0}, NULL);
	fx_check_all(f, g_big, 3, 4 * MiB);
	idx_put(f->idx, g_big);
}

static unsigned timeouts_of(int tag)
{
	unsigned n;
	pthread_mutex_lock(&ev_mu);
	n = ev_timeouts[tag];
	pthread_mutex_unlock(&ev_mu);
	return n;
}

/*
 * user.spillway.evict waits (at most 2 s) for a reader still holding a
 * chunk; the reader's end wakes it and it looks again: the chunk goes at
 * once, not when the 2 s are up.
 */
static void test_evict_looks_again_when_a_reader_lets_go(void **state)
{
	struct fx *f = *state;
	struct inode *in;
	struct tier_io io;

	fx_cfg_defaults(f, 64 * MiB);
	fx_start(f);
	in = fx_mk(f, "a", MiB, 4);
	reset_events();
	assert_int_equal(tier_open(f->t, in, 0, NULL, &(struct tier_open_out){0}), 0);
	assert_int_equal(tier_read_begin(f->t, in, 0, 4096, 0, &io), 0); /* holds chunk 0 */

	static struct op ev;
	ev = mk_op(f, in, OP_EVICT, 3);
	op_start(&ev);
	assert_true(until(waiting, &(struct waited){&ev, 1, 0})); /* spilled, waits for us */
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_HOT_CLEAN);
	tier_read_end(f->t, in, &io);
	assert_int_equal(op_join(&ev), 0);
	assert_int_equal(timeouts_of(3), 0);
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_COLD);
	tier_close(f->t, in, &(struct tier_open_out){0}, NULL);
	fx_check_all(f, in, 4, MiB);
	idx_put(f->idx, in);
}

/*
 * A partial restore whose rest fails waits (at most 10 s) for the readers
 * of its blocks already in RAM before punching them; the last reader's
 * end wakes it and it looks again: the chunk is COLD at once.
 */
static void test_failed_partial_restore_looks_again_when_readers_let_go(void **state)
{
	struct fx *f = *state;
	struct inode *in;
	struct tier_io io;

	fx_cfg_defaults(f, 64 * MiB);
	f->cfg.chunk_size = 4 * MiB;
	fx_start(f);
	in = mk_cold(f, "a", 4 * MiB, 6);

	static struct op a;
	a = mk_op(f, in, OP_READ, 1);
	a.off = 8192, a.len = 4096, a.data = 6;
	fake_gate_arm(FAKE_GATE_READ, 2);
	op_start(&a);
	gate(1); /* its blocks */
	fake_gate_release(1, 0);
	gate(2); /* after its reply: the rest, its blocks published meanwhile */
	assert_int_equal(tier_open(f->t, in, 0, NULL, &(struct tier_open_out){0}), 0);
	assert_int_equal(tier_read_begin(f->t, in, 8192, 4096, 0, &io), 0); /* a published block */
	fake_gate_release(2, EIO); /* the rest fails */
	assert_true(until(waiting, &(struct waited){&a, 1, 0}));
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_RESTORING);
	tier_read_end(f->t, in, &io);
	assert_int_equal(op_join(&a), 0);
	assert_int_equal(timeouts_of(1), 0);
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_COLD);
	tier_close(f->t, in, &(struct tier_open_out){0}, NULL);
	fx_check_all(f, in, 6, 4 * MiB);
	idx_put(f->idx, in);
}

/* ---- fairness: truncate against a stream of random readers ---- */

#define NREADERS  3
#define READ_CAP  400 /* reads each reader does at most */

struct stream {
	struct fx *f;
	struct inode *in;
	int id;
	unsigned reads, after; /* reads started, those after the truncate began */
	int stop;	       /* (ev_mu) */
	int err;
};

static int g_truncating; /* (ev_mu) */

static int streaming(void *arg)
{
	struct fx *f = arg;
	return __atomic_load_n(&f->t->st.direct_reads, __ATOMIC_RELAXED) >= 4 * NREADERS;
}

static void *stream_main(void *arg)
{
	struct stream *s = arg;
	uint64_t x = 0x9E3779B97F4A7C15ull * (unsigned)(s->id + 1);

	my_tag = 4;
	for (unsigned i = 0; i < READ_CAP; i++) {
		struct op o = mk_op(s->f, s->in, OP_READ, 4);
		int stop, during;
		pthread_mutex_lock(&ev_mu);
		stop = s->stop;
		during = g_truncating;
		pthread_mutex_unlock(&ev_mu);
		if (stop)
			break;
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		o.flags = TIER_READ_RANDOM;
		/* chunks of its own (i, i + NREADERS): always a direct read */
		o.off = (uint64_t)(s->id + NREADERS * (x & 1)) * MiB + ((x >> 1) % (MiB - 4096) & ~4095ull);
		o.len = 4096;
		s->reads++;
		s->after += during;
		int ret = op_read(&o);
		if (ret < 0)
			s->err = ret;
	}
	return NULL;
}

/*
 * Random readers keep the chunks of a file RESTORING (direct reads, one
 * store read of 1 ms each, back to back) while a truncate to 0 waits for
 * all of them to be out of its range at once. The bound: the truncate
 * waits for the reads in flight when it began waiting, not for the stream
 * (no new restore of the file starts while it waits).
 */
static void test_truncate_is_not_starved_by_random_readers(void **state)
{
	struct fx *f = *state;
	struct stream s[NREADERS];
	pthread_t th[NREADERS];
	struct inode *in;

	fx_cfg_defaults(f, 64 * MiB);
	fx_start(f);
	in = mk_cold(f, "a", 2 * NREADERS * MiB, 1);
	fake_lock();
	fake_current->read_delay_ms = 1;
	fake_unlock();
	for (int i = 0; i < NREADERS; i++) {
		s[i] = (struct stream){.f = f, .in = in, .id = i};
		assert_int_equal(pthread_create(&th[i], NULL, stream_main, &s[i]), 0);
	}
	/* the stream is going: direct reads done by now */
	assert_true(until(streaming, f));
	pthread_mutex_lock(&ev_mu);
	g_truncating = 1;
	pthread_mutex_unlock(&ev_mu);
	uint64_t d0 = __atomic_load_n(&f->t->st.direct_reads, __ATOMIC_RELAXED);
	uint64_t t0 = clock_now_ns();
	assert_int_equal(tier_truncate(f->t, in, 0), 0);
	uint64_t ns = clock_now_ns() - t0;
	uint64_t overtook = __atomic_load_n(&f->t->st.direct_reads, __ATOMIC_RELAXED) - d0;
	pthread_mutex_lock(&ev_mu);
	for (int i = 0; i < NREADERS; i++)
		s[i].stop = 1;
	pthread_mutex_unlock(&ev_mu);
	unsigned reads = 0;
	for (int i = 0; i < NREADERS; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(s[i].err, 0);
		reads += s[i].reads;
	}
	print_message("truncate waited %.1f ms; %llu direct reads ended meanwhile "
		      "(%u readers, %u reads in all)\n",
		      ns / 1e6, (unsigned long long)overtook, NREADERS, reads);
	/* at most the reads in flight when it began waiting, and those past
	 * their start while it took the lock: two per reader */
	if (overtook > 2 * NREADERS)
		fail_msg("truncate waited for %llu random reads (%.1f ms), more than the %d "
			 "in flight when it began",
			 (unsigned long long)overtook, ns / 1e6, 2 * NREADERS);
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_ABSENT);
	idx_put(f->idx, in);
}


/* ---- a spill reads a chunk straight from the hot file's pages (v3) ---- */

/*
 * An operation that removes a chunk's hot pages (truncate inside or at the
 * start of it, a punch of it) while a spill has them mapped: it waits for
 * that chunk's read to end. The spill is held in the store with its pages
 * mapped (its first append); without the wait the cut pages are a SIGBUS
 * to the spill as soon as it goes on. Then the spill's copy is dead weight
 * (the chunk was changed) and the file reads as cut.
 */
static void cut_under_mapped_spill(struct fx *f, int kind, uint64_t len)
{
	struct inode *in;

	start_durable(f); /* fsync spills */
	in = fx_mk(f, "a", 2 * MiB, 4);
	reset_events();

	static struct op sp, cut;
	sp = mk_op(f, in, OP_FSYNC, 1);
	cut = mk_op(f, in, kind, 2);
	cut.len = len;
	cut.mode = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
	fake_gate_arm(FAKE_GATE_APPEND, 1);
	op_start(&sp);
	gate(1); /* chunk 0 SPILLING, its pages mapped, the store holding them */
	assert_int_equal(fx_chunk_state(in, 0), CHUNK_SPILLING);
	op_start(&cut);
	assert_true(until(done_or_waiting, &(struct waited){&cut, 1, 0}));
	if (op_done(&cut))
		fail_msg("the pages a spill had mapped were cut under it (ret %d)", cut.ret);
	fake_gate_release(1, 0);
	assert_int_equal(op_join(&cut), 0);
	assert_int_equal(op_join(&sp), 0);
	assert_int_equal(tier_fsync(f->t, in), 0);
	assert_int_equal(tier_evict_file(f->t, in), 0);
	if (kind == OP_TRUNCATE) {
		expect_bytes(f, in, 4, 0, len);
		assert_int_equal(tier_truncate(f->t, in, 2 * MiB), 0);
		expect_bytes(f, in, -1, len, 2 * MiB - len);
	} else {
		expect_bytes(f, in, -1, 0, len);
		expect_bytes(f, in, 4, len, 2 * MiB - len);
	}
	assert_int_equal(FX_ST(f, errors_crc), 0);
	idx_put(f->idx, in);
}

static void test_truncate_waits_for_a_mapped_spill(void **state)
{
	cut_under_mapped_spill(*state, OP_TRUNCATE, 100);
}

/* O_TRUNC opens truncate to 0 (fs/ops_io.c): the same path. */
static void test_truncate_to_zero_waits_for_a_mapped_spill(void **state)
{
	cut_under_mapped_spill(*state, OP_TRUNCATE, 0);
}

static void test_punch_waits_for_a_mapped_spill(void **state)
{
	cut_under_mapped_spill(*state, OP_FALLOCATE, MiB);
}

/* Every record a footer names reads back with its crcs: a record whose
 * bytes a racing write changed under the device's read never has one. */
static void check_every_record(struct fx *f)
{
	for (uint64_t id = 1; id < FAKE_MAX_SEGS; id++) {
		struct seg_entry *e = NULL;
		uint64_t len;
		uint32_t n = 0;
		int live;

		fake_lock();
		live = fake_current->segs[id].live;
		len = fake_current->segs[id].len;
		fake_unlock();
		if (!live)
			continue;
		assert_int_equal(seg_read_manifest(f->t->store, id, 0, len, NULL, NULL, &e, &n), 0);
		for (uint32_t i = 0; i < n; i++) {
			struct seg_chunk sc;
			assert_int_equal(seg_read_chunk(f->t->store, id, 0, &e[i], &sc), 0);
			seg_chunk_free(&sc);
		}
		free(e);
	}
}

/*
 * A write lands in a chunk's pages after the spill hashed them and before
 * the device read them (the store holds the append that carries them).
 * Ended before the spill looks (a new generation): the record is dropped.
 * Still in flight (pinned, same generation): the pages are hashed again,
 * differ, and the record is dropped. Either way no footer names bytes that
 * do not match their crcs, and the file reads the write's bytes.
 */
static int op_finished(void *arg)
{
	return op_done(arg);
}

static void write_under_mapped_spill(struct fx *f, int end_first)
{
	uint8_t buf[4096];
	struct tier_io io;
	struct inode *in;

	start_durable(f);
	in = fx_mk(f, "a", MiB, 4);
	reset_events();

	static struct op sp;
	sp = mk_op(f, in, OP_FSYNC, 1);
	fake_gate_arm(FAKE_GATE_APPEND, 2);
	op_start(&sp);
	gate(1); /* the header's page */
	fake_gate_release(1, 0);
	gate(2); /* chunk 0's pages: hashed, not read by the device yet */
	fx_fill(buf, 5, 8192, sizeof(buf));
	assert_int_equal(tier_write_begin(f->t, in, 8192, sizeof(buf), 0, &io), 0);
	assert_int_equal(pwrite(io.fd, buf, sizeof(buf), 8192), (ssize_t)sizeof(buf));
	if (end_first)
		assert_int_equal(tier_write_end(f->t, in, &io, sizeof(buf)), (ssize_t)sizeof(buf));
	fake_gate_release(2, 0);
	if (!end_first) {
		/* the spill looked (and dropped its record), spilled the chunk
		 * again (the pages stable now: kept) and fsync returned, all
		 * before the write ends */
		assert_true(until(op_finished, &sp));
		assert_int_equal(tier_write_end(f->t, in, &io, sizeof(buf)), (ssize_t)sizeof(buf));
	}
	assert_int_equal(op_join(&sp), 0);
	assert_int_equal(tier_fsync(f->t, in), 0);
	check_every_record(f);
	assert_int_equal(tier_evict_file(f->t, in), 0);
	expect_bytes(f, in, 4, 0, 8192);
	expect_bytes(f, in, 5, 8192, 4096);
	expect_bytes(f, in, 4, 12288, MiB - 12288);
	assert_int_equal(FX_ST(f, errors_crc), 0);
	idx_put(f->idx, in);
}

static void test_write_ended_under_mapped_spill(void **state)
{
	write_under_mapped_spill(*state, 1);
}

static void test_write_in_flight_under_mapped_spill(void **state)
{
	write_under_mapped_spill(*state, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_truncate_waits_for_a_mapped_spill, fx_setup,
					    race_teardown),
	    cmocka_unit_test_setup_teardown(test_truncate_to_zero_waits_for_a_mapped_spill,
					    fx_setup, race_teardown),
	    cmocka_unit_test_setup_teardown(test_punch_waits_for_a_mapped_spill, fx_setup,
					    race_teardown),
	    cmocka_unit_test_setup_teardown(test_write_ended_under_mapped_spill, fx_setup,
					    race_teardown),
	    cmocka_unit_test_setup_teardown(test_write_in_flight_under_mapped_spill, fx_setup,
					    race_teardown),
	    cmocka_unit_test_setup_teardown(test_truncate_looks_again_after_each_wait, fx_setup,
					    race_teardown),
	    cmocka_unit_test_setup_teardown(test_truncate_waits_again_after_its_boundary_restore,
					    fx_setup, race_teardown),
	    cmocka_unit_test_setup_teardown(test_truncate_marks_its_boundary_after_the_waits,
					    fx_setup, race_teardown),
	    cmocka_unit_test_setup_teardown(test_fallocate_waits_again_after_its_restore, fx_setup,
					    race_teardown),
	    cmocka_unit_test_setup_teardown(test_fallocate_waits_again_after_waiting_for_room,
					    fx_setup, race_teardown),
	    cmocka_unit_test_setup_teardown(test_fsync_looks_again_after_a_failed_spill, fx_setup,
					    race_teardown),
	    cmocka_unit_test_setup_teardown(test_write_claims_after_waiting_for_a_direct_read,
					    fx_setup, race_teardown),
	    cmocka_unit_test_setup_teardown(test_waiters_restore_themselves_after_a_failed_restore,
					    fx_setup, race_teardown),
	    cmocka_unit_test_setup_teardown(test_restore_end_waits_for_readers_beside, fx_setup,
					    race_teardown),
	    cmocka_unit_test_setup_teardown(test_evict_looks_again_when_a_reader_lets_go, fx_setup,
					    race_teardown),
	    cmocka_unit_test_setup_teardown(test_failed_partial_restore_looks_again_when_readers_let_go,
					    fx_setup, race_teardown),
	    cmocka_unit_test_setup_teardown(test_truncate_holds_off_new_restores, fx_setup,
					    race_teardown),
	    cmocka_unit_test_setup_teardown(test_truncate_is_not_starved_by_random_readers,
					    fx_setup, race_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
