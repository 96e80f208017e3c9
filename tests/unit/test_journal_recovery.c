/*
 * test_journal_recovery — recovery from what a crash or a bad disk leaves
 * (index/journal_recover.c, index/index_replay.c): torn tails cut at every
 * byte, a flipped byte stops replay at that record, a crash in the middle
 * of a checkpoint, a snapshot failing half way; the crash windows around
 * checkpoints (jrnl_sync's promise across a rotation, journals dropped
 * after a bad record stay dropped, a first checkpoint that fails, an
 * empty TX); and out-of-range records refused by replay (chunk 2^32,
 * 2^62, 2^63, a header or an end mark inside a journal). Shared helpers:
 * journal_fixture.h.
 */
#include "tests/unit/journal_fixture.h"

/* ------------------------------------------------------------------------
 * 3 & 4. torn tails and flipped bytes
 */
struct torn {
	struct savedir saved;
	char jname[64];
	int js;			   /* index of the journal in saved */
	size_t start[16], end[16]; /* record offsets in the journal file */
	int k;
	size_t hdr_len;
	struct mstate *states[17]; /* states[m]: after the first m records */
};

/* A journal with K records after a checkpoint; everything saved. */
static void torn_prepare(struct fx *f, struct torn *t)
{
	struct jrec rs[16];
	int n = model_records(rs, 1);
	size_t off;

	f->m = model_new();
	model_seed(f->m);
	start_fresh(f);
	t->k = n;
	t->states[0] = mstate_new();
	memcpy(t->states[0], &f->m->st, sizeof(struct mstate));
	/* record 6 as a TX of two */
	for (int i = 0; i < n; i++) {
		int cnt = 1;
		struct jrec tx[2];

		if (i == 6) {
			tx[0] = rs[6];
			tx[1] = rs[0];
			tx[1].ino = 11;
			cnt = 2;
		}
		assert_int_equal(live_append(f, f->j, cnt == 2 ? tx : &rs[i], cnt), 0);
		t->states[i + 1] = mstate_new();
		memcpy(t->states[i + 1], &f->m->st, sizeof(struct mstate));
	}
	jrnl_close(f->j, 0);
	f->j = NULL;
	assert_true(newest(f->dir, "journal", t->jname, sizeof(t->jname)) >= 0);
	save_dir(f->dir, &t->saved);
	t->js = save_find(&t->saved, t->jname);
	assert_true(t->js >= 0);
	/* walk the records */
	{
		const uint8_t *b = t->saved.data[t->js];
		size_t len = t->saved.len[t->js];
		struct jrec r;
		ssize_t k = jrnl_decode(b, len, &r);

		assert_true(k > 0);
		assert_int_equal(r.type, JR_HEADER);
		t->hdr_len = off = k;
		for (int i = 0; i < n; i++) {
			k = jrnl_decode(b + off, len - off, &r);
			assert_true(k > 0);
			t->start[i] = off;
			off += k;
			t->end[i] = off;
		}
		assert_int_equal(off, len);
	}
}

static void torn_free(struct torn *t)
{
	save_free(&t->saved);
	for (int i = 0; i <= t->k; i++)
		free(t->states[i]);
}

/* Restore the saved dir with the journal replaced by buf[0..len). */
static void torn_restore(struct fx *f, struct torn *t, const uint8_t *buf, size_t len)
{
	char p[256];

	restore_dir(f->dir, &t->saved);
	snprintf(p, sizeof(p), "%s/%s", f->dir, t->jname);
	assert_int_equal(write_all(p, buf, len), 0);
}

/* Start on the recovered state, append one record, close; a new recovery
 * must give want + that record, the record last. */
static void append_after_recovery(struct fx *f, const struct mstate *want, const char *ctx)
{
	struct jrnl_recovery info;
	struct reclog got = {0};
	struct mstate *m;
	struct jrec r = {.type = JR_XATTR_SET,
			 .ino = 47,
			 .name = g_xnames[3].s,
			 .name_len = g_xnames[3].len,
			 .value = "after-the-cut",
			 .value_len = 13};
	char msg[128];

	m = jrecover(f, &f->j, NULL, &info);
	assert_mstate_eq(m, want, ctx);
	model_free(f->m);
	f->m = model_new();
	memcpy(&f->m->st, m, sizeof(*m));
	f->snap.m = f->m;
	free(m);
	assert_int_equal(jrnl_start(f->j, snap_fn, &f->snap), 0);
	assert_int_equal(live_append(f, f->j, &r, 1), 0);
	jrnl_close(f->j, 0);
	f->j = NULL;
	m = jrecover(f, &f->j, &got, &info);
	snprintf(msg, sizeof(msg), "%s, then an append", ctx);
	assert_mstate_eq(m, &f->m->st, msg);
	assert_true(got.n > 0);
	assert_true(rec_eq(&got.r[got.n - 1], &r));
	assert_int_equal(info.truncated, 0);
	jrnl_close(f->j, 0);
	f->j = NULL;
	free(m);
	log_free(&got);
}

static void test_torn_tail(void **state)
{
	struct fx *f = *state;
	struct torn t = {0};
	const uint8_t *jb;
	size_t jl;

	torn_prepare(f, &t);
	jb = t.saved.data[t.js];
	jl = t.saved.len[t.js];
	/* every cut, from an empty journal file to the whole of it */
	for (size_t c = 0; c <= jl; c++) {
		struct jrnl_recovery info;
		struct mstate *m;
		char ctx[96];
		int mrec = 0;
		size_t good;

		while (mrec < t.k && t.end[mrec] <= c)
			mrec++;
		good = mrec ? t.end[mrec - 1] : (c >= t.hdr_len ? t.hdr_len : 0);
		torn_restore(f, &t, jb, c);
		m = jrecover(f, &f->j, NULL, &info);
		snprintf(ctx, sizeof(ctx), "journal cut at %zu of %zu (%d records whole)", c, jl,
			 mrec);
		assert_mstate_eq(m, t.states[mrec], ctx);
		if (c >= t.hdr_len && info.truncated != c - good)
			fail_msg("%s: truncated = %" PRIu64 ", want %zu", ctx, info.truncated,
				 c - good);
		jrnl_close(f->j, 0);
		f->j = NULL;
		free(m);
	}
	/* then the cut is where new records go: at every record boundary, one
	 * byte past it, and mid-record in the last records */
	for (int i = 0; i < t.k; i++) {
		size_t cuts[3] = {t.start[i], t.start[i] + 1, (t.start[i] + t.end[i]) / 2};

		for (int q = 0; q < (i >= t.k - 3 ? 3 : 2); q++) {
			char ctx[96];

			torn_restore(f, &t, jb, cuts[q]);
			snprintf(ctx, sizeof(ctx), "journal cut at %zu, record %d", cuts[q], i);
			append_after_recovery(f, t.states[i], ctx);
		}
	}
	torn_free(&t);
}

static void test_bit_flip(void **state)
{
	struct fx *f = *state;
	struct torn t = {0};
	size_t jl;
	uint8_t *b;

	torn_prepare(f, &t);
	jl = t.saved.len[t.js];
	b = malloc(jl);
	assert_non_null(b);
	for (int i = 0; i < t.k; i++) {
		size_t rl = t.end[i] - t.start[i];
		size_t pos[] = {0, 1, 3, 4, 7, 8, 9, rl / 2, rl - 1};

		for (size_t q = 0; q < sizeof(pos) / sizeof(pos[0]); q++) {
			struct jrnl_recovery info;
			struct mstate *m;
			char ctx[96];

			memcpy(b, t.saved.data[t.js], jl);
			b[t.start[i] + pos[q]] ^= q & 1 ? 0x80 : 0x01;
			torn_restore(f, &t, b, jl);
			m = jrecover(f, &f->j, NULL, &info);
			snprintf(ctx, sizeof(ctx), "byte %zu of record %d flipped", pos[q], i);
			assert_mstate_eq(m, t.states[i], ctx);
			if (info.truncated != jl - t.start[i])
				fail_msg("%s: truncated = %" PRIu64 ", want %zu", ctx,
					 info.truncated, jl - t.start[i]);
			jrnl_close(f->j, 0);
			f->j = NULL;
			free(m);
		}
		/* and the journal carries on after the bad record */
		if (i == 0 || i == t.k / 2 || i == t.k - 1) {
			char ctx[96];

			memcpy(b, t.saved.data[t.js], jl);
			b[t.start[i] + (t.end[i] - t.start[i]) / 2] ^= 0x20;
			torn_restore(f, &t, b, jl);
			snprintf(ctx, sizeof(ctx), "record %d flipped", i);
			append_after_recovery(f, t.states[i], ctx);
		}
	}
	/* a damaged journal header: the checkpoint alone */
	for (size_t p = 0; p < t.hdr_len; p += 3) {
		struct jrnl_recovery info;
		struct mstate *m;
		char ctx[96];

		memcpy(b, t.saved.data[t.js], jl);
		b[p] ^= 0x04;
		torn_restore(f, &t, b, jl);
		m = jrecover(f, &f->j, NULL, &info);
		snprintf(ctx, sizeof(ctx), "journal header byte %zu flipped", p);
		assert_mstate_eq(m, t.states[0], ctx);
		jrnl_close(f->j, 0);
		f->j = NULL;
		free(m);
	}
	free(b);
	torn_free(&t);
}

/* A crash in the middle of a checkpoint: the new journal exists, its
 * checkpoint does not (or is torn). The older checkpoint and both journals
 * give everything. */
static void test_checkpoint_crash(void **state)
{
	struct fx *f = *state;
	struct jrec rs[16];
	struct savedir before, after, crash;
	struct jrnl_recovery info;
	char cname[64], cname2[64];
	struct mstate *m;
	int n;

	f->m = model_new();
	model_seed(f->m);
	start_fresh(f);
	n = model_records(rs, 0);
	for (int i = 0; i < n / 2; i++)
		assert_int_equal(live_append(f, f->j, &rs[i], 1), 0);
	save_dir(f->dir, &before); /* checkpoint.g1 + journal.g1 as of now */
	assert_true(newest(f->dir, "checkpoint", cname, sizeof(cname)) >= 0);
	assert_int_equal(jrnl_checkpoint(f->j), 0);
	for (int i = n / 2; i < n; i++)
		assert_int_equal(live_append(f, f->j, &rs[i], 1), 0);
	jrnl_close(f->j, 0);
	f->j = NULL;
	save_dir(f->dir, &after);
	assert_true(newest(f->dir, "checkpoint", cname2, sizeof(cname2)) >= 0);
	assert_string_not_equal(cname, cname2);

	/* crash = the old checkpoint, every journal, no new checkpoint */
	for (int variant = 0; variant < 3; variant++) {
		char ctx[64];

		memset(&crash, 0, sizeof(crash));
		for (int i = 0; i < before.n; i++) {
			memcpy(crash.name[crash.n], before.name[i], 64);
			crash.data[crash.n] = before.data[i];
			crash.len[crash.n++] = before.len[i];
		}
		for (int i = 0; i < after.n; i++) {
			if (save_find(&before, after.name[i]) >= 0)
				continue;
			if (!strcmp(after.name[i], cname2)) {
				if (variant == 0)
					continue; /* not renamed into place yet */
				/* variant 1: torn in the middle; 2: all but its END */
				size_t keep = variant == 1 ? after.len[i] / 2 : after.len[i] - 1;

				memcpy(crash.name[crash.n], after.name[i], 64);
				crash.data[crash.n] = after.data[i];
				crash.len[crash.n++] = keep;
				continue;
			}
			memcpy(crash.name[crash.n], after.name[i], 64);
			crash.data[crash.n] = after.data[i];
			crash.len[crash.n++] = after.len[i];
		}
		restore_dir(f->dir, &crash);
		m = jrecover(f, &f->j, NULL, &info);
		snprintf(ctx, sizeof(ctx), "crash during checkpoint, variant %d", variant);
		assert_mstate_eq(m, &f->m->st, ctx);
		assert_true(info.journals >= 2);
		jrnl_close(f->j, 0);
		f->j = NULL;
		free(m);
	}
	/* and the finished checkpoint alone (older files gone) is complete too */
	restore_dir(f->dir, &after);
	m = jrecover(f, &f->j, NULL, &info);
	assert_mstate_eq(m, &f->m->st, "after the checkpoint");
	jrnl_close(f->j, 0);
	f->j = NULL;
	free(m);
	save_free(&before);
	save_free(&after);
}

/* A snapshot that fails half way installs no checkpoint; nothing is lost. */
static void test_checkpoint_snapshot_fails(void **state)
{
	struct fx *f = *state;
	struct jrec rs[16];
	struct jrnl_recovery info;
	struct mstate *m;
	int n;

	f->m = model_new();
	model_seed(f->m);
	start_fresh(f);
	n = model_records(rs, 0);
	for (int i = 0; i < n / 2; i++)
		assert_int_equal(live_append(f, f->j, &rs[i], 1), 0);
	f->snap.fail_after = 3;
	assert_true(jrnl_checkpoint(f->j) != 0);
	f->snap.fail_after = 0;
	for (int i = n / 2; i < n; i++)
		assert_int_equal(live_append(f, f->j, &rs[i], 1), 0);
	assert_int_equal(jrnl_failed(f->j), 0);
	jrnl_close(f->j, 0);
	f->j = NULL;
	m = jrecover(f, &f->j, NULL, &info);
	assert_mstate_eq(m, &f->m->st, "after a failed snapshot");
	free(m);
	/* and the next checkpoint works */
	assert_int_equal(jrnl_start(f->j, snap_fn, &f->snap), 0);
	assert_int_equal(jrnl_checkpoint(f->j), 0);
	jrnl_close(f->j, 0);
	f->j = NULL;
	m = jrecover(f, &f->j, NULL, &info);
	assert_mstate_eq(m, &f->m->st, "after the next checkpoint");
	free(m);
}


/* ------------------------------------------------------------------------
 * crash windows around checkpoints
 */
struct cprun {
	struct journal *j;
	int rc;
};

static void *cp_once(void *arg)
{
	struct cprun *c = arg;

	c->rc = jrnl_checkpoint(c->j);
	return NULL;
}

/* jrnl_sync's promise across a checkpoint's rotation: a record appended to
 * the old journal while the rotation's fdatasync of it is in flight must be
 * durable when a later jrnl_sync returns 0 (before the new checkpoint is). */
static void test_rotation_keeps_sync_promise(void **state)
{
	struct fx *f = *state;
	struct jrec rs[16];
	struct cprun cp = {0};
	struct jrnl_recovery info;
	struct mstate *m;
	struct stat st;
	pthread_t th;
	char jname[64], p[256];
	off_t r1_end = -1;
	int got_gate, snap_held = 0, rc1 = -1, rcs = -1, durable = 0, ck_synced = 0;

	f->cfg.sync_ms = 3600 * 1000; /* no background syncs */
	f->m = model_new();
	model_seed(f->m);
	start_fresh(f);
	model_records(rs, 0);
	assert_int_equal(live_append(f, f->j, &rs[0], 1), 0);
	assert_true(newest(f->dir, "journal", jname, sizeof(jname)) >= 0);
	snprintf(p, sizeof(p), "%s/%s", f->dir, jname);

	pthread_mutex_lock(&g_sy_mu);
	g_nsync = 0;
	snprintf(g_gate_name, sizeof(g_gate_name), "%s", jname);
	g_gate = 1;
	f->snap.gate = 1;
	pthread_mutex_unlock(&g_sy_mu);
	atomic_store(&g_track, 1);
	cp.j = f->j;
	assert_int_equal(pthread_create(&th, NULL, cp_once, &cp), 0);
	/* no cmocka assert until the join: the thread uses the journal */
	pthread_mutex_lock(&g_sy_mu);
	got_gate = gate_wait_while(&g_gate, 1, 10) == 0 && g_gate == 2;
	pthread_mutex_unlock(&g_sy_mu);
	if (got_gate) {
		/* the rotation's fdatasync of the old journal is done but has not
		 * returned: this record lands in the old journal, after it */
		rc1 = live_append(f, f->j, &rs[1], 1);
		if (stat(p, &st) == 0)
			r1_end = st.st_size;
	}
	pthread_mutex_lock(&g_sy_mu);
	g_gate = 3;
	pthread_cond_broadcast(&g_sy_cv);
	if (got_gate) /* the rotation is over once the snapshot runs */
		snap_held = gate_wait_while(&f->snap.gate, 1, 10) == 0 && f->snap.gate == 2;
	pthread_mutex_unlock(&g_sy_mu);
	if (snap_held) {
		rcs = jrnl_sync(f->j);
		pthread_mutex_lock(&g_sy_mu);
		for (int i = 0; i < g_nsync; i++) {
			if (!strcmp(g_synclog[i].name, jname) && g_synclog[i].size >= r1_end)
				durable = 1;
			if (!strncmp(g_synclog[i].name, "checkpoint.", 11))
				ck_synced = 1;
		}
		pthread_mutex_unlock(&g_sy_mu);
	}
	pthread_mutex_lock(&g_sy_mu);
	f->snap.gate = 0;
	pthread_cond_broadcast(&g_sy_cv);
	pthread_mutex_unlock(&g_sy_mu);
	pthread_join(th, NULL);
	gates_off();
	if (!got_gate)
		fail_msg("jrnl_checkpoint never fdatasync'd the old journal %s", jname);
	assert_int_equal(rc1, 0);
	assert_true(snap_held);
	assert_int_equal(rcs, 0);
	assert_int_equal(cp.rc, 0);
	if (!durable && !ck_synced)
		fail_msg("jrnl_sync returned 0, but the record appended to %s (ending at byte "
			 "%lld) while the rotation's fdatasync was in flight was never "
			 "fdatasync'd, and no checkpoint covers it yet",
			 jname, (long long)r1_end);
	jrnl_close(f->j, 0);
	f->j = NULL;
	m = jrecover(f, &f->j, NULL, &info);
	assert_mstate_eq(m, &f->m->st, "after the rotation");
	free(m);
}

/* Journals dropped after a bad record must stay dropped: two failed
 * checkpoints leave journal.1..3; a bad record in journal.1 cuts replay
 * there. Records appended after that recovery, then a crash, must not be
 * followed by journal.3's stale records. */
static void test_stale_journals_stay_dropped(void **state)
{
	struct fx *f = *state;
	struct jrec rs[16], r;
	struct mstate *want = mstate_new();
	char jname[64], p[256];
	uint8_t *b;
	size_t len;
	ssize_t k1, k2;
	int n;

	f->m = model_new();
	model_seed(f->m);
	memcpy(want, &f->m->st, sizeof(*want));
	start_fresh(f);
	n = model_records(rs, 0);
	assert_true(n >= 9);
	for (int i = 0; i < 3; i++)
		assert_int_equal(live_append(f, f->j, &rs[i], 1), 0);
	f->snap.fail_after = 1;
	assert_true(jrnl_checkpoint(f->j) != 0);
	for (int i = 3; i < 6; i++)
		assert_int_equal(live_append(f, f->j, &rs[i], 1), 0);
	assert_true(jrnl_checkpoint(f->j) != 0);
	f->snap.fail_after = 0;
	for (int i = 6; i < 9; i++)
		assert_int_equal(live_append(f, f->j, &rs[i], 1), 0);
	jrnl_close(f->j, 0);
	f->j = NULL;
	assert_int_equal(count_prefixed(f->dir, "journal."), 3);
	assert_int_equal(count_prefixed(f->dir, "checkpoint."), 1);

	/* damage the second record of journal.1 */
	snprintf(jname, sizeof(jname), "journal.%016x", 1);
	snprintf(p, sizeof(p), "%s/%s", f->dir, jname);
	b = read_all(p, &len);
	assert_non_null(b);
	k1 = jrnl_decode(b, len, &r);
	assert_true(k1 > 0);
	k2 = jrnl_decode(b + k1, len - k1, &r);
	assert_true(k2 > 0);
	b[k1 + k2 + 12] ^= 0x40;
	assert_int_equal(write_all(p, b, len), 0);
	free(b);
	assert_int_equal(model_apply(want, &rs[0]), 0);

	append_after_recovery(f, want, "journal.1 bad at its 2nd record, journal.2 and .3 after");
	free(want);
}

/* A first checkpoint that fails (or a crash before it is renamed into
 * place) leaves journal.1 without any checkpoint. Nothing was ever
 * appended, so the next mount must start, not refuse the state dir. */
static void test_first_checkpoint_fails(void **state)
{
	struct fx *f = *state;
	struct jrnl_recovery info;
	struct mstate *m = mstate_new();
	struct rcv c = {.m = m};
	struct jrec rs[16];
	char err[256] = "";
	int rc;

	f->m = model_new();
	f->snap.m = f->m;
	f->snap.fail_after = 1;
	f->j = jopen(f);
	assert_int_equal(jrnl_recover(f->j, rcv_fn, &c, &info, err, sizeof(err)), 0);
	assert_int_equal(info.fresh, 1);
	assert_true(jrnl_start(f->j, snap_fn, &f->snap) != 0);
	jrnl_close(f->j, 0);
	f->j = NULL;
	f->snap.fail_after = 0;

	f->j = jopen(f);
	rc = jrnl_recover(f->j, rcv_fn, &c, &info, err, sizeof(err));
	if (rc)
		fail_msg("after a failed first checkpoint (nothing appended yet), "
			 "jrnl_recover = %d: %s",
			 rc, err);
	assert_int_equal(m->applied, 0);
	free(m);
	assert_int_equal(jrnl_start(f->j, snap_fn, &f->snap), 0);
	model_records(rs, 0);
	assert_int_equal(live_append(f, f->j, &rs[0], 1), 0);
	jrnl_close(f->j, 0);
	f->j = NULL;
	m = jrecover(f, &f->j, NULL, &info);
	assert_mstate_eq(m, &f->m->st, "after a failed first checkpoint");
	free(m);
}

/* A TX of no records must not poison the journal: it is refused, or
 * written as something recovery reads back. */
static void test_empty_tx(void **state)
{
	struct fx *f = *state;
	struct jrnl_recovery info;
	struct jrec rs[16], d;
	struct mstate *m;
	size_t len = 0;
	uint8_t *buf;
	int rc;

	model_records(rs, 0);
	buf = jrnl_encode_tx(rs, 0, &len);
	if (buf) {
		ssize_t k = jrnl_decode(buf, len, &d);

		free(buf);
		if (k != (ssize_t)len)
			fail_msg("jrnl_encode_tx(n = 0) makes a record that jrnl_decode refuses "
				 "(%zd): appended, it ends replay there",
				 k);
	}
	f->m = model_new();
	start_fresh(f);
	rc = jrnl_append_tx(f->j, rs, 0);
	assert_int_not_equal(rc, -EIO);
	assert_int_equal(jrnl_failed(f->j), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(live_append(f, f->j, &rs[i], 1), 0);
	jrnl_close(f->j, 0);
	f->j = NULL;
	m = jrecover(f, &f->j, NULL, &info);
	assert_mstate_eq(m, &f->m->st, "records after an empty TX");
	assert_int_equal(info.truncated, 0);
	free(m);
}


/* ------------------------------------------------------------------------
 * out-of-range records (architecture review): a JR_CHUNK_LOC record with a
 * valid crc and chunk index 2^32 refused the mount (ENOMEM), 2^62 wrapped
 * cap * sizeof in idx_chunks_reserve (heap overflow), 2^63 wrapped cap *= 2
 * to 0 (replay never returned). Now such a record is a bad record: replay
 * stops there, nothing is allocated for it, the records before it stand.
 */
static int replay_fn(void *arg, const struct jrec *r)
{
	int ret = idx_replay(arg, r);
	return ret < 0 ? ret : 0;
}

/* Append bad (a record with a valid crc that replay must refuse) and a good
 * record after it to a journal; recovery cuts the journal at bad. */
static void replay_bad_record(struct fx *f, const struct jrec *bad, const char *what)
{
	struct jrec file = {.type = JR_INODE, .ino = 5, .attr = {.mode = 0100644, .size = 2 * CHUNK}};
	struct jrec link = {.type = JR_LINK, .parent = 1, .ino = 5, .name = "f", .name_len = 1};
	struct jrec good = {.type = JR_CHUNK_LOC,
			    .ino = 5,
			    .chunk = 0,
			    .loc = {.seg_id = 7, .off = 4096, .len = CHUNK, .crc = 1, .gen = 1}};
	struct jrec after = {.type = JR_CHUNK_DIRTY, .ino = 5, .chunk = 1};
	struct jrnl_recovery info;
	struct index *idx;
	struct inode *in;
	uint8_t raw[256];
	char jname[64], p[256], err[256] = "";
	size_t n = 0;
	int fd;

	f->m = model_new();
	start_fresh(f);
	assert_int_equal(jrnl_append(f->j, &file), 0);
	assert_int_equal(jrnl_append(f->j, &link), 0);
	assert_int_equal(jrnl_append(f->j, &good), 0);
	jrnl_close(f->j, 0);
	f->j = NULL;

	/* the encoder does not check: the bad record has a valid crc */
	n += jrnl_encode(bad, raw + n);
	n += jrnl_encode(&after, raw + n);
	assert_true(newest(f->dir, "journal", jname, sizeof(jname)) >= 0);
	snprintf(p, sizeof(p), "%s/%s", f->dir, jname);
	fd = open(p, O_WRONLY | O_APPEND);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, raw, n), (ssize_t)n);
	close(fd);

	assert_int_equal(idx_new(CHUNK, &idx), 0);
	f->j = jopen(f);
	if (jrnl_recover(f->j, replay_fn, idx, &info, err, sizeof(err)) != 0)
		fail_msg("%s: jrnl_recover refused the state: %s", what, err);
	assert_int_equal(info.truncated, n); /* cut at the bad record, as for a bad crc */
	in = idx_get(idx, 5);
	assert_non_null(in);
	assert_true(in->nchunks >= 1 && in->nchunks <= 64);
	assert_int_equal(in->chunks[0].loc.seg_id, 7);
	/* the record after the cut is not applied (a one-chunk map may be all
	 * there is: chunks[1] exists only when the map grew) */
	assert_true(in->nchunks < 2 || in->chunks[1].state != CHUNK_HOT_DIRTY);
	idx_put(idx, in);
	/* the journal is cut there: a new start takes a checkpoint over it */
	assert_int_equal(jrnl_start(f->j, snap_fn, &f->snap), 0);
	idx_free(idx);
}

static void replay_bad_chunk(struct fx *f, uint64_t bad_chunk)
{
	struct jrec bad = {.type = JR_CHUNK_LOC,
			   .ino = 5,
			   .chunk = bad_chunk,
			   .loc = {.seg_id = 7, .off = 4096, .len = CHUNK, .crc = 1, .gen = 1}};
	uint8_t raw[256];
	char what[64];

	jrnl_encode(&bad, raw);
	assert_int_equal(jrnl_decode(raw, sizeof(raw), &(struct jrec){0}), -EBADMSG);
	snprintf(what, sizeof(what), "chunk %" PRIu64, bad_chunk);
	replay_bad_record(f, &bad, what);
}

static void test_replay_chunk_2_32(void **state)
{
	replay_bad_chunk(*state, 1ULL << 32);
}

static void test_replay_chunk_2_62(void **state)
{
	replay_bad_chunk(*state, 1ULL << 62);
}

static void test_replay_chunk_2_63(void **state)
{
	replay_bad_chunk(*state, 1ULL << 63);
}

/* A header or an end mark (found by fuzz_journal_replay) inside a journal
 * decodes fine on its own, but only opens or closes a file: in the middle of
 * one it is a bad record, never handed to replay. */
static void test_replay_header_in_body(void **state)
{
	struct jrec hdr = {.type = JR_HEADER,
			   .hdr = {.version = JRNL_VERSION, .kind = JRNL_KIND_JOURNAL, .gen = 1,
				   .chunk_size = CHUNK}};

	replay_bad_record(*state, &hdr, "a header after the first record");
}

static void test_replay_end_in_body(void **state)
{
	struct jrec end = {.type = JR_END, .count = 3};

	replay_bad_record(*state, &end, "an end mark in a journal");
}


int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_torn_tail),
	    T(test_bit_flip),
	    T(test_checkpoint_crash),
	    T(test_checkpoint_snapshot_fails),
	    T(test_rotation_keeps_sync_promise),
	    T(test_stale_journals_stay_dropped),
	    T(test_first_checkpoint_fails),
	    T(test_empty_tx),
	    T(test_replay_chunk_2_32),
	    T(test_replay_chunk_2_62),
	    T(test_replay_chunk_2_63),
	    T(test_replay_header_in_body),
	    T(test_replay_end_in_body),
	};

	journal_fixture_init();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
