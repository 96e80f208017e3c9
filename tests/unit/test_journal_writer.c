/*
 * test_journal_writer — the journal's files and writer (index/journal.[ch]).
 * state_dir created 0700 and locked (-EBUSY for a second opener), fresh
 * recovery, checkpoint then journal replayed in order, the state files of
 * version 1 read; checkpoint + replay == live state for a seeded random
 * workload (also with checkpoints racing appends); and the read-only turn
 * after a failed write (ENOSPC on a tmpfs mounted here) or a failed
 * fdatasync (inline, background, sync each). Shared helpers:
 * journal_fixture.h.
 */
#include "tests/unit/journal_fixture.h"

/* ------------------------------------------------------------------------
 * 2. files: create, recover fresh, start, append, reopen, replay in order
 */

static void test_files_roundtrip(void **state)
{
	struct fx *f = *state;
	struct jrec rs[16];
	struct reclog want = {0}, got = {0};
	struct jrnl_recovery info;
	struct mstate *m;
	struct stat st;
	char name[64], jname[64], p[256], err[256];
	uint8_t uuid[16];
	int64_t cgen, jgen;
	int n, nz = 0;
	size_t jlen, off;
	uint8_t *jbuf;
	uint64_t jbytes, ncp, nsync;

	umask(022);
	f->m = model_new();
	model_seed(f->m);
	start_fresh(f);
	assert_int_equal(stat(f->dir, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0700);
	snprintf(p, sizeof(p), "%s/lock", f->dir);
	assert_int_equal(access(p, F_OK), 0);
	assert_string_equal(jrnl_dir(f->j), f->dir);
	memcpy(uuid, jrnl_uuid(f->j), 16);
	for (int i = 0; i < 16; i++)
		nz |= uuid[i];
	assert_true(nz); /* a new filesystem gets an id */
	cgen = newest(f->dir, "checkpoint", name, sizeof(name));
	jgen = newest(f->dir, "journal", jname, sizeof(jname));
	assert_true(cgen >= 0);
	assert_int_equal(cgen, jgen); /* checkpoint.<gen> holds what precedes journal.<gen> */
	assert_int_equal(f->snap.calls, 1);

	/* every type, and a TX (rename) */
	n = model_records(rs, 0);
	for (int i = 0; i < n; i++) {
		assert_int_equal(live_append(f, f->j, &rs[i], 1), 0);
		log_add(&want, &rs[i]);
	}
	{
		struct jrec tx[2] = {rs[1], rs[4]};

		tx[0].parent = 3;
		assert_int_equal(live_append(f, f->j, tx, 2), 0);
		log_add(&want, &tx[0]);
		log_add(&want, &tx[1]);
	}
	assert_int_equal(jrnl_sync(f->j), 0);
	assert_int_equal(jrnl_failed(f->j), 0);

	/* the journal file is its header then exactly the encoded records */
	snprintf(p, sizeof(p), "%s/%s", f->dir, jname);
	jbuf = read_all(p, &jlen);
	assert_non_null(jbuf);
	jrnl_stats(f->j, &jbytes, &ncp, &nsync);
	assert_int_equal(jbytes, jlen);
	assert_true(ncp >= 1);
	{
		struct jrec hdr;
		ssize_t hl = jrnl_decode(jbuf, jlen, &hdr);

		assert_true(hl > 0);
		assert_int_equal(hdr.type, JR_HEADER);
		assert_int_equal(hdr.hdr.kind, JRNL_KIND_JOURNAL);
		assert_int_equal(hdr.hdr.version, JRNL_VERSION);
		assert_int_equal(hdr.hdr.gen, jgen);
		assert_int_equal(hdr.hdr.chunk_size, CHUNK);
		assert_memory_equal(hdr.hdr.uuid, uuid, 16);
		off = hl;
	}
	for (int i = 0; i < n; i++) {
		size_t el;
		uint8_t *e = encode(&rs[i], &el);

		assert_true(off + el <= jlen);
		assert_memory_equal(jbuf + off, e, el);
		off += el;
		free(e);
	}
	{
		struct jrec tx[2] = {rs[1], rs[4]}, outer;
		size_t tl;
		uint8_t *t;

		tx[0].parent = 3;
		t = jrnl_encode_tx(tx, 2, &tl);
		assert_non_null(t);
		assert_true(off + tl <= jlen);
		assert_memory_equal(jbuf + off, t, tl);
		assert_int_equal(jrnl_decode(jbuf + off, jlen - off, &outer), tl);
		assert_int_equal(outer.type, JR_TX);
		off += tl;
		free(t);
	}
	assert_int_equal(off, jlen);
	free(jbuf);

	/* the checkpoint file: header, the snapshot's records, END(count) */
	snprintf(p, sizeof(p), "%s/%s", f->dir, name);
	jbuf = read_all(p, &jlen);
	assert_non_null(jbuf);
	{
		struct jrec r;
		ssize_t k;
		size_t i = 0;

		off = 0;
		k = jrnl_decode(jbuf, jlen, &r);
		assert_true(k > 0);
		assert_int_equal(r.type, JR_HEADER);
		assert_int_equal(r.hdr.kind, JRNL_KIND_CHECKPOINT);
		assert_int_equal(r.hdr.gen, cgen);
		assert_memory_equal(r.hdr.uuid, uuid, 16);
		off = k;
		for (;;) {
			k = jrnl_decode(jbuf + off, jlen - off, &r);
			assert_true(k > 0);
			off += k;
			if (r.type == JR_END)
				break;
			assert_true(i < f->snap.log.n);
			assert_true(rec_eq(&r, &f->snap.log.r[i]));
			i++;
		}
		assert_int_equal(i, f->snap.log.n);
		assert_int_equal(r.count, f->snap.log.n);
		assert_int_equal(off, jlen);
		assert_int_equal(f->snap.log.r[0].type, JR_META);
	}
	free(jbuf);

	jrnl_close(f->j, 0);
	f->j = NULL;

	/* reopen: checkpoint records then journal records, in order */
	m = jrecover(f, &f->j, &got, &info);
	assert_int_equal(info.fresh, 0);
	assert_int_equal(info.checkpoint_gen, cgen);
	assert_int_equal(info.journals, 1);
	assert_int_equal(info.truncated, 0);
	assert_memory_equal(info.uuid, uuid, 16);
	assert_memory_equal(jrnl_uuid(f->j), uuid, 16);
	assert_log_is(&got, &f->snap.log, &want);
	assert_true(info.records >= got.n);
	assert_mstate_eq(m, &f->m->st, "reopen");
	free(m);
	jrnl_close(f->j, 0);
	f->j = NULL;
	log_clear(&got);

	/* the callback's nonzero return aborts recovery and is returned */
	{
		struct mstate *m2 = mstate_new();
		struct rcv c = {.m = m2, .fail_at = 4, .fail_rc = 4242};

		f->j = jopen(f);
		assert_int_equal(jrnl_recover(f->j, rcv_fn, &c, &info, err, sizeof(err)), 4242);
		assert_int_equal(c.calls, 4);
		jrnl_close(f->j, 0);
		f->j = NULL;
		free(m2);
	}

	/* a different chunk size is refused, with a reason */
	{
		struct mstate *m2 = mstate_new();
		struct rcv c = {.m = m2};
		int rc;

		f->cfg.chunk_size = CHUNK * 2;
		err[0] = 0;
		rc = jrnl_open(&f->cfg, &f->j, err, sizeof(err));
		if (rc == 0) {
			err[0] = 0;
			rc = jrnl_recover(f->j, rcv_fn, &c, &info, err, sizeof(err));
			jrnl_close(f->j, 0);
		}
		f->j = NULL;
		assert_true(rc < 0);
		assert_true(err[0] != 0);
		f->cfg.chunk_size = CHUNK;
		free(m2);
	}

	/* a clean unmount (final checkpoint) recovers the same state */
	m = jrecover(f, &f->j, NULL, &info);
	free(m);
	assert_int_equal(jrnl_start(f->j, snap_fn, &f->snap), 0);
	jrnl_close(f->j, 1);
	f->j = NULL;
	m = jrecover(f, &f->j, &got, &info);
	assert_mstate_eq(m, &f->m->st, "after final checkpoint");
	assert_true(info.checkpoint_gen > (uint64_t)cgen);
	assert_log_is(&got, &f->snap.log, NULL); /* just the last checkpoint */
	free(m);
	jrnl_close(f->j, 0);
	f->j = NULL;
	log_free(&got);
	log_free(&want);
}

/* 6. a second opener of the same state dir is refused */
static void test_lock(void **state)
{
	struct fx *f = *state;
	struct journal *j2 = NULL;
	struct jrnl_recovery info;
	char err[256] = "";
	struct mstate *m;

	f->m = model_new();
	start_fresh(f);
	assert_int_equal(jrnl_open(&f->cfg, &j2, err, sizeof(err)), -EBUSY);
	f->j2 = j2; /* NULL on the refusal; closed by teardown otherwise */
	assert_null(j2);
	assert_true(strlen(err) > 0);
	assert_null(strchr(err, '\n'));
	/* the holder is unaffected */
	{
		struct jrec r = {.type = JR_META, .next_ino = 5, .next_seg = 6};

		assert_int_equal(live_append(f, f->j, &r, 1), 0);
	}
	jrnl_close(f->j, 0);
	f->j = NULL;
	/* released at close */
	m = jrecover(f, &f->j, NULL, &info);
	assert_mstate_eq(m, &f->m->st, "after lock release");
	free(m);
}

/* Rewrite the header of every state file in f->dir to `version` (the
 * header's length does not depend on it). */
static void set_header_version(struct fx *f, uint32_t version)
{
	for (int kind = JRNL_KIND_JOURNAL; kind <= JRNL_KIND_CHECKPOINT; kind++) {
		uint64_t *gens = NULL;
		size_t n = 0;
		assert_int_equal(jrnl_list_files(f->dir, kind, &gens, &n), 0);
		for (size_t i = 0; i < n; i++) {
			char name[JRNL_NAME_MAX], path[512];
			uint8_t buf[256];
			struct jrec r;
			jrnl_file_name(name, sizeof(name), kind, gens[i]);
			snprintf(path, sizeof(path), "%s/%s", f->dir, name);
			int fd = open(path, O_RDWR);
			assert_true(fd >= 0);
			ssize_t got = pread(fd, buf, sizeof(buf), 0);
			assert_true(got > 0);
			ssize_t len = jrnl_decode(buf, (size_t)got, &r);
			assert_true(len > 0);
			assert_int_equal(r.type, JR_HEADER);
			r.hdr.version = version;
			assert_int_equal(jrnl_encode(&r, buf), (size_t)len);
			assert_int_equal(pwrite(fd, buf, (size_t)len, 0), len);
			close(fd);
		}
		free(gens);
	}
}

/* Journal version 2 (overlays) reads the state files version 1 wrote, as
 * they are; a version it does not know is not taken for one. */
static void test_reads_version_1(void **state)
{
	struct fx *f = *state;
	struct jrnl_recovery info;
	struct mstate *m;
	struct jrec rs[2] = {{.type = JR_META, .next_ino = 9, .next_seg = 4},
			     {.type = JR_INODE, .ino = 9, .attr = {.mode = 0100644, .size = 5}}};

	f->m = model_new();
	start_fresh(f);
	assert_int_equal(live_append(f, f->j, rs, 2), 0);
	jrnl_close(f->j, 1); /* a final checkpoint */
	f->j = NULL;
	set_header_version(f, 1);
	m = jrecover(f, &f->j, NULL, &info);
	assert_int_equal(info.fresh, 0);
	assert_mstate_eq(m, &f->m->st, "a version 1 state");
	free(m);
	jrnl_close(f->j, 0);
	f->j = NULL;
	set_header_version(f, JRNL_VERSION + 1);
	{
		struct journal *j = jopen(f);
		char err[256] = "";
		struct mstate *m2 = mstate_new();
		struct rcv c = {.m = m2};
		int rc = jrnl_recover(j, rcv_fn, &c, &info, err, sizeof(err));
		/* refused: never read as version 2, nor taken for a fresh state */
		if (rc == 0)
			fail_msg("a version %u state recovered (fresh %d, %llu records)",
				 JRNL_VERSION + 1, info.fresh, (unsigned long long)m2->applied);
		assert_true(strlen(err) > 0);
		free(m2);
		jrnl_close(j, 0);
	}
}


/* ------------------------------------------------------------------------
 * 5. random workload: checkpoint + replay == live state
 */
static void gen_one(uint64_t *rs, const struct mstate *m, struct jrec *r, uint8_t *val, char *tgt)
{
	memset(r, 0, sizeof(*r));
	switch (rndn(rs, 13)) {
	case 0:
		r->type = JR_META;
		r->next_ino = m->next_ino + 1 + rndn(rs, 3);
		r->next_seg = m->next_seg + rndn(rs, 2);
		break;
	case 1:
	case 2:
		r->type = JR_INODE;
		r->ino = 1 + rndn(rs, NINO - 1);
		r->attr = (struct jrec_attr){.mode = (uint32_t)rnd(rs),
					     .uid = (uint32_t)rnd(rs),
					     .gid = (uint32_t)rnd(rs),
					     .rdev = rnd(rs),
					     .size = (rnd(rs) >> rndn(rs, 64)) % (JRNL_MAX_FILE_SIZE + 1),
					     .atime_ns = (int64_t)rnd(rs),
					     .mtime_ns = (int64_t)rnd(rs),
					     .ctime_ns = (int64_t)rnd(rs)};
		if (!rndn(rs, 3)) {
			r->name_len = 1 + rndn(rs, MAXTGT);
			for (uint32_t i = 0; i < r->name_len; i++)
				tgt[i] = 1 + rndn(rs, 255);
			r->name = tgt;
		}
		break;
	case 3:
	case 4:
	case 5: {
		int k = rndn(rs, NNAME);

		r->type = rndn(rs, 3) ? JR_LINK : JR_UNLINK;
		r->parent = 1 + rndn(rs, NDIR);
		r->name = g_names[k].s;
		r->name_len = g_names[k].len;
		if (r->type == JR_LINK)
			r->ino = 1 + rndn(rs, NINO - 1);
		break;
	}
	case 6:
	case 7: {
		int k = rndn(rs, NXN);

		r->type = rndn(rs, 3) ? JR_XATTR_SET : JR_XATTR_DEL;
		r->ino = 1 + rndn(rs, NINO - 1);
		r->name = g_xnames[k].s;
		r->name_len = g_xnames[k].len;
		if (r->type == JR_XATTR_SET) {
			r->value_len = rndn(rs, MAXVAL + 1);
			for (uint32_t i = 0; i < r->value_len; i++)
				val[i] = rnd(rs);
			r->value = val;
		}
		break;
	}
	case 8:
	case 9:
		r->type = JR_CHUNK_LOC;
		r->ino = 1 + rndn(rs, NINO - 1);
		r->chunk = rndn(rs, NCHUNK);
		r->loc = (struct chunk_loc){.seg_id = 1 + rndn(rs, NSEG - 1),
					   .off = rnd(rs) >> 1,
					   .len = (uint32_t)rndn(rs, JRNL_MAX_LOC_LEN + 1),
					   .crc = (uint32_t)rnd(rs),
					   .dev = (uint32_t)rndn(rs, 4),
					   .gen = (uint32_t)rnd(rs)};
		break;
	case 10:
		r->type = JR_CHUNK_DIRTY;
		r->ino = 1 + rndn(rs, NINO - 1);
		r->chunk = rndn(rs, NCHUNK);
		break;
	case 11:
		r->type = JR_CHUNK_ABSENT;
		r->ino = 1 + rndn(rs, NINO - 1);
		r->chunk = rndn(rs, NCHUNK);
		/* or to the end of the largest file */
		r->count = rndn(rs, 4) ? 1 + rndn(rs, 5) : JRNL_MAX_FILE_SIZE / CHUNK - r->chunk;
		break;
	default:
		r->type = rndn(rs, 10) < 7 ? JR_SEG_ADD : JR_SEG_DEL;
		r->seg.id = 1 + rndn(rs, NSEG - 1);
		if (r->type == JR_SEG_ADD) {
			r->seg.len = rnd(rs);
			r->seg.payload = rnd(rs);
			r->seg.dev = (uint32_t)rnd(rs);
			r->seg.store = rndn(rs, 2);
		}
		break;
	}
}

struct opbuf {
	struct jrec r[6];
	uint8_t val[6][MAXVAL];
	char tgt[6][MAXTGT];
	int n;
};

/* One operation: a record, a rename TX, or a TX of random records. */
static void gen_op(uint64_t *rs, struct fx *f, struct opbuf *o)
{
	uint64_t kind = rndn(rs, 16);

	pthread_mutex_lock(&f->m->lock);
	if (kind == 0) {
		int a = rndn(rs, NNAME), b = rndn(rs, NNAME);

		memset(o->r, 0, 2 * sizeof(o->r[0]));
		o->r[0].type = JR_LINK;
		o->r[0].parent = 1 + rndn(rs, NDIR);
		o->r[0].name = g_names[a].s;
		o->r[0].name_len = g_names[a].len;
		o->r[0].ino = 1 + rndn(rs, NINO - 1);
		o->r[1].type = JR_UNLINK;
		o->r[1].parent = 1 + rndn(rs, NDIR);
		o->r[1].name = g_names[b].s;
		o->r[1].name_len = g_names[b].len;
		o->n = 2;
	} else if (kind == 1) {
		o->n = 2 + rndn(rs, 5);
		for (int i = 0; i < o->n; i++)
			gen_one(rs, &f->m->st, &o->r[i], o->val[i], o->tgt[i]);
	} else {
		o->n = 1;
		gen_one(rs, &f->m->st, &o->r[0], o->val[0], o->tgt[0]);
	}
	pthread_mutex_unlock(&f->m->lock);
}

static void run_ops(struct fx *f, uint64_t *rs, int nops, int cp_one_in)
{
	struct opbuf o;

	for (int i = 0; i < nops; i++) {
		int rc;

		gen_op(rs, f, &o);
		rc = live_append(f, f->j, o.r, o.n);
		if (rc)
			fail_msg("op %d: append = %d", i, rc);
		if (cp_one_in && !rndn(rs, cp_one_in)) {
			rc = jrnl_checkpoint(f->j);
			if (rc)
				fail_msg("op %d: jrnl_checkpoint = %d", i, rc);
		}
		if (!rndn(rs, 500))
			assert_int_equal(jrnl_sync(f->j), 0);
	}
}

static void test_random_replay(void **state)
{
	struct fx *f = *state;
	uint64_t seed = 0x5eed0001, rs = seed;
	struct jrnl_recovery info;
	struct mstate *m;
	uint64_t jb, ncp, ns, ncp0;

	f->cfg.checkpoint_bytes = 64 << 10; /* automatic checkpoints too */
	f->m = model_new();
	start_fresh(f);
	jrnl_stats(f->j, &jb, &ncp0, &ns);
	run_ops(f, &rs, 4000, 400);
	jrnl_stats(f->j, &jb, &ncp, &ns);
	if (ncp < ncp0 + 3)
		fail_msg("seed %" PRIx64 ": only %" PRIu64 " checkpoints", seed, ncp - ncp0);
	jrnl_close(f->j, 0);
	f->j = NULL;
	assert_true(count_prefixed(f->dir, "checkpoint") <= 3);
	assert_true(count_prefixed(f->dir, "journal") <= 3);
	m = jrecover(f, &f->j, NULL, &info);
	assert_mstate_eq(m, &f->m->st, "random ops, close without checkpoint");
	free(m);

	/* more sessions on top: recover, start, ops, close */
	for (int s = 0; s < 3; s++) {
		char ctx[64];

		assert_int_equal(jrnl_start(f->j, snap_fn, &f->snap), 0);
		run_ops(f, &rs, 500, s == 1 ? 0 : 100);
		jrnl_close(f->j, s == 2);
		f->j = NULL;
		m = jrecover(f, &f->j, NULL, &info);
		snprintf(ctx, sizeof(ctx), "session %d", s);
		assert_mstate_eq(m, &f->m->st, ctx);
		free(m);
	}
	jrnl_close(f->j, 0);
	f->j = NULL;
}

struct cpthread {
	struct journal *j;
	atomic_int stop;
	atomic_int done;
	int err;
};

static void *cp_main(void *arg)
{
	struct cpthread *c = arg;

	while (!atomic_load(&c->stop)) {
		int rc = jrnl_checkpoint(c->j);

		if (rc) {
			c->err = rc;
			break;
		}
		atomic_fetch_add(&c->done, 1);
	}
	return NULL;
}

static void test_checkpoint_concurrent(void **state)
{
	struct fx *f = *state;
	uint64_t rs = 0x5eed0002;
	struct jrnl_recovery info;
	struct cpthread c = {0};
	pthread_t th;
	struct mstate *m;
	double deadline;
	int ops = 0;
	uint64_t jb, ncp, ns;

	f->m = model_new();
	start_fresh(f);
	c.j = f->j;
	assert_int_equal(pthread_create(&th, NULL, cp_main, &c), 0);
	deadline = now_s() + 20;
	while ((ops < 3000 || atomic_load(&c.done) < 8) && ops < 400000 && !c.err &&
	       now_s() < deadline) {
		struct opbuf o;
		int rc;

		gen_op(&rs, f, &o);
		rc = live_append(f, f->j, o.r, o.n);
		if (rc) {
			atomic_store(&c.stop, 1);
			pthread_join(th, NULL);
			fail_msg("op %d: append = %d during checkpoints", ops, rc);
		}
		ops++;
	}
	atomic_store(&c.stop, 1);
	pthread_join(th, NULL);
	assert_int_equal(c.err, 0);
	if (atomic_load(&c.done) < 8)
		fail_msg("only %d checkpoints during %d ops", atomic_load(&c.done), ops);
	jrnl_stats(f->j, &jb, &ncp, &ns);
	assert_true(ncp >= (uint64_t)atomic_load(&c.done));
	jrnl_close(f->j, 0);
	f->j = NULL;
	m = jrecover(f, &f->j, NULL, &info);
	assert_mstate_eq(m, &f->m->st, "checkpoints racing appends");
	free(m);
	jrnl_close(f->j, 0);
	f->j = NULL;
}


/* ------------------------------------------------------------------------
 * 7. failures: a full filesystem, a failing fdatasync
 */
static void test_enospc(void **state)
{
	struct fx *f = *state;
	struct jrnl_recovery info;
	struct mstate *m;
	char filler[256];
	uint8_t blk[4096];
	int fd, rc = 0, ok = 0;
	struct jrec r = {.type = JR_XATTR_SET,
			 .ino = 9,
			 .name = g_xnames[0].s,
			 .name_len = g_xnames[0].len,
			 .value = blk,
			 .value_len = MAXVAL};

	snprintf(f->mnt, sizeof(f->mnt), "%s/mnt", f->base);
	assert_int_equal(mkdir(f->mnt, 0700), 0);
	if (mount("tmpfs", f->mnt, "tmpfs", 0, "size=1m,mode=0700") != 0)
		fail_msg("mount tmpfs on %s: %s (the test needs CAP_SYS_ADMIN)", f->mnt,
			 strerror(errno));
	f->mounted = 1;
	snprintf(g_mounted, sizeof(g_mounted), "%s", f->mnt);
	snprintf(f->dir, sizeof(f->dir), "%s/state", f->mnt);
	f->m = model_new();
	model_seed(f->m);
	start_fresh(f);
	for (int i = 0; i < 3; i++)
		assert_int_equal(live_append(f, f->j, &r, 1), 0);

	/* fill the filesystem */
	snprintf(filler, sizeof(filler), "%s/filler", f->mnt);
	fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	memset(blk, 0x33, sizeof(blk));
	while (write(fd, blk, sizeof(blk)) > 0)
		;
	assert_int_equal(errno, ENOSPC);
	while (write(fd, blk, 1) > 0) /* the last bytes of a partial page */
		;
	close(fd);

	/* append until the journal's write fails: at the latest once the
	 * records no longer fit in the journal's last page */
	for (int i = 0; i < 2000; i++) {
		blk[0] = i;
		blk[1] = i >> 8;
		pthread_mutex_lock(&f->m->lock);
		rc = jrnl_append(f->j, &r);
		if (rc == 0) {
			assert_int_equal(model_apply(&f->m->st, &r), 0);
			ok++;
		}
		pthread_mutex_unlock(&f->m->lock);
		if (rc)
			break;
	}
	if (rc == 0)
		fail_msg("2000 appends of %u bytes on a full 1M tmpfs all succeeded",
			 (unsigned)jrnl_encoded_size(&r));
	assert_int_equal(rc, -EIO);
	assert_int_equal(jrnl_failed(f->j), 1);
	/* read-only for good, even once there is room again */
	assert_int_equal(unlink(filler), 0);
	assert_int_equal(jrnl_append(f->j, &r), -EIO);
	assert_int_equal(jrnl_append_tx(f->j, (struct jrec[]){r, r}, 2), -EIO);
	assert_int_equal(jrnl_sync(f->j), -EIO);
	assert_int_equal(jrnl_failed(f->j), 1);
	jrnl_close(f->j, 1); /* a final checkpoint on a failed journal must not hang */
	f->j = NULL;

	/* every append that returned 0 is there, the failed one is not */
	m = jrecover(f, &f->j, NULL, &info);
	assert_mstate_eq(m, &f->m->st, "after ENOSPC");
	free(m);
	jrnl_close(f->j, 0);
	f->j = NULL;
	assert_int_equal(umount2(f->mnt, 0), 0);
	f->mounted = 0;
	g_mounted[0] = 0;
}

static void test_fdatasync_fails(void **state)
{
	struct fx *f = *state;
	struct jrnl_recovery info;
	struct jrec rs[16];
	struct mstate *m;
	int n;

	f->m = model_new();
	model_seed(f->m);
	start_fresh(f);
	n = model_records(rs, 0);
	for (int i = 0; i < n; i++)
		assert_int_equal(live_append(f, f->j, &rs[i], 1), 0);
	atomic_store(&g_sync_failed_calls, 0);
	atomic_store(&g_fail_sync, 1);
	assert_int_equal(jrnl_sync(f->j), -EIO);
	assert_true(atomic_load(&g_sync_failed_calls) > 0);
	atomic_store(&g_fail_sync, 0);
	/* never retried as if it worked */
	assert_int_equal(jrnl_failed(f->j), 1);
	assert_int_equal(jrnl_sync(f->j), -EIO);
	assert_int_equal(jrnl_append(f->j, &rs[0]), -EIO);
	assert_int_equal(jrnl_append_tx(f->j, rs, 3), -EIO);
	jrnl_close(f->j, 0);
	f->j = NULL;
	/* the records reached the kernel before the failure: recoverable */
	m = jrecover(f, &f->j, NULL, &info);
	assert_mstate_eq(m, &f->m->st, "after a failed fdatasync");
	free(m);
	jrnl_close(f->j, 0);
	f->j = NULL;
}

/* The group-commit thread meets the failure on its own. */
static void test_fdatasync_fails_background(void **state)
{
	struct fx *f = *state;
	struct jrec rs[16];
	double deadline;
	int n, rc;

	f->cfg.sync_ms = 20;
	f->m = model_new();
	start_fresh(f);
	n = model_records(rs, 0);
	atomic_store(&g_sync_failed_calls, 0);
	atomic_store(&g_fail_sync, 1);
	rc = live_append(f, f->j, &rs[0], 1);
	assert_true(rc == 0 || rc == -EIO);
	deadline = now_s() + 10;
	while (!jrnl_failed(f->j) && now_s() < deadline) {
		struct timespec ts = {0, 2000000};
		nanosleep(&ts, NULL);
	}
	atomic_store(&g_fail_sync, 0);
	assert_int_equal(jrnl_failed(f->j), 1);
	assert_true(atomic_load(&g_sync_failed_calls) > 0);
	assert_int_equal(jrnl_append(f->j, &rs[n - 1]), -EIO);
	assert_int_equal(jrnl_sync(f->j), -EIO);
	jrnl_close(f->j, 0);
	f->j = NULL;
}

/* sync_ms = 0: the append itself syncs, and reports the failure. */
static void test_fdatasync_fails_sync_each(void **state)
{
	struct fx *f = *state;
	struct jrec rs[16];
	uint64_t jb, ncp, ns0, ns1;

	f->cfg.sync_ms = 0;
	f->m = model_new();
	start_fresh(f);
	model_records(rs, 0);
	jrnl_stats(f->j, &jb, &ncp, &ns0);
	assert_int_equal(live_append(f, f->j, &rs[0], 1), 0);
	assert_int_equal(live_append(f, f->j, &rs[1], 1), 0);
	jrnl_stats(f->j, &jb, &ncp, &ns1);
	assert_true(ns1 >= ns0 + 2); /* each append was synced */
	atomic_store(&g_fail_sync, 1);
	assert_int_equal(jrnl_append(f->j, &rs[2]), -EIO);
	atomic_store(&g_fail_sync, 0);
	assert_int_equal(jrnl_failed(f->j), 1);
	assert_int_equal(jrnl_append(f->j, &rs[3]), -EIO);
	jrnl_close(f->j, 0);
	f->j = NULL;
}


int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_files_roundtrip),
	    T(test_lock),
	    T(test_reads_version_1),
	    T(test_random_replay),
	    T(test_checkpoint_concurrent),
	    T(test_enospc),
	    T(test_fdatasync_fails),
	    T(test_fdatasync_fails_background),
	    T(test_fdatasync_fails_sync_each),
	};

	journal_fixture_init();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
