/*
 * test_journal_codec — the journal's record format (index/journal_codec.h).
 * Every record type round-trips, the framing is [len][crc32c][type], TX
 * records give their inner records back in order, every proper prefix
 * reads as torn (0) and every single-byte flip is detected; bad frames and
 * every bounded field one past its limit are refused; chunk locations'
 * flags. Also idx_chunks_reserve's overflow (a count no allocation holds).
 * Shared helpers: journal_fixture.h.
 */
#include "tests/unit/journal_fixture.h"

/* ------------------------------------------------------------------------
 * 1. codec
 */
/* The framing the header promises: [u32 len][u32 crc32c][u8 type][payload],
 * len = 1 + payload, crc over len, type and payload. */
static void assert_framing(const uint8_t *buf, size_t len, uint8_t type)
{
	uint32_t l = le_get32(buf), crc;

	assert_int_equal((size_t)l + 8, len);
	assert_int_equal(buf[8], type);
	crc = crc32c(crc32c(0, buf, 4), buf + 8, l);
	if (crc != le_get32(buf + 4))
		fail_msg("crc field %08x is not crc32c(len || type || payload) = %08x",
			 le_get32(buf + 4), crc);
}

/* Every proper prefix is torn (0); every single-byte flip is refused. */
static void assert_detects_damage(const uint8_t *rec, size_t len, size_t step)
{
	static const uint8_t masks[] = {0x01, 0x02, 0x10, 0x80, 0xff};
	const size_t pad = JRNL_MAX_RECORD + 4096;
	uint8_t *buf = calloc(1, len + pad);
	struct jrec d;

	assert_non_null(buf);
	for (size_t p = 0; p < len; p += (p < 64 || p + 64 >= len ? 1 : step)) {
		uint8_t *pre = malloc(p ? p : 1);

		assert_non_null(pre);
		memcpy(pre, rec, p);
		ssize_t rc = jrnl_decode(pre, p, &d);
		free(pre);
		if (rc != 0)
			fail_msg("prefix of %zu/%zu bytes: jrnl_decode = %zd, want 0 (torn)", p,
				 len, rc);
	}
	for (size_t i = 0; i < len; i += (i < 16 ? 1 : step)) {
		for (size_t k = 0; k < sizeof(masks); k++) {
			ssize_t rc;

			memcpy(buf, rec, len);
			buf[i] ^= masks[k];
			if (i >= 4) {
				rc = jrnl_decode(buf, len, &d);
				if (rc != -EBADMSG)
					fail_msg(
					    "byte %zu/%zu ^ %02x: jrnl_decode = %zd, want -EBADMSG",
					    i, len, masks[k], rc);
				continue;
			}
			/* a changed length: room enough that it is not just torn */
			memset(buf + len, 0, pad);
			rc = jrnl_decode(buf, len + pad, &d);
			if (rc == -EBADMSG)
				continue;
			if (rc == 0 && (uint64_t)le_get32(buf) + 8 > len + pad)
				continue;
			fail_msg("length byte %zu ^ %02x (len %u): jrnl_decode = %zd", i, masks[k],
				 le_get32(buf), rc);
		}
	}
	free(buf);
}

static void test_codec_roundtrip(void **state)
{
	struct jrec rs[16], d;
	int n = sample_records(rs);

	(void)state;
	for (int i = 0; i < n; i++) {
		size_t len;
		uint8_t *buf = encode(&rs[i], &len);
		char s[256];

		assert_framing(buf, len, rs[i].type);
		memset(&d, 0x5c, sizeof(d));
		assert_int_equal(jrnl_decode(buf, len, &d), len);
		if (!rec_eq(&rs[i], &d))
			fail_msg("record %d does not round-trip: %s", i, rec_str(&d, s, sizeof(s)));
		/* trailing bytes are not part of it */
		assert_int_equal(jrnl_decode(buf, len + 64, &d), len);
		assert_true(rec_eq(&rs[i], &d));
		/* the decoded pointers point into buf */
		if (d.name_len)
			assert_true((const uint8_t *)d.name >= buf &&
				    (const uint8_t *)d.name + d.name_len <= buf + len);
		if (d.value_len)
			assert_true((const uint8_t *)d.value >= buf &&
				    (const uint8_t *)d.value + d.value_len <= buf + len);
		free(buf);
	}
}

static void test_codec_damage(void **state)
{
	struct jrec rs[16];
	int n = sample_records(rs);

	(void)state;
	for (int i = 0; i < n; i++) {
		size_t len;
		uint8_t *buf = encode(&rs[i], &len);

		/* every byte of the small ones; a sample of the 64K xattr */
		assert_detects_damage(buf, len, len > 4096 ? 97 : 1);
		free(buf);
	}
}

static void test_codec_bad_frames(void **state)
{
	uint8_t *buf = calloc(1, JRNL_MAX_RECORD + 64);
	struct jrec d, rs[16];
	size_t len;
	uint8_t *enc;
	uint32_t l;

	(void)state;
	assert_non_null(buf);
	/* unknown types and an empty record, with a valid crc */
	for (int t = 0; t < 3; t++) {
		uint8_t type = t == 0 ? 0 : t == 1 ? JR_TYPE_MAX + 1 : 0xff;

		memset(buf, 0, 64);
		le_put32(buf, 1 + 16);
		buf[8] = type;
		le_put32(buf + 4, crc32c(crc32c(0, buf, 4), buf + 8, 17));
		assert_int_equal(jrnl_decode(buf, 8 + 17, &d), -EBADMSG);
	}
	le_put32(buf, 0);
	le_put32(buf + 4, crc32c(0, buf, 4));
	assert_int_equal(jrnl_decode(buf, 8 + 16, &d), -EBADMSG);
	/* a length above JRNL_MAX_RECORD with everything present and a valid crc */
	sample_records(rs);
	enc = encode(&rs[6], &len); /* the 64K xattr */
	memcpy(buf, enc, len);
	l = JRNL_MAX_RECORD + 1;
	le_put32(buf, l);
	le_put32(buf + 4, crc32c(crc32c(0, buf, 4), buf + 8, l));
	assert_int_equal(jrnl_decode(buf, 8 + (size_t)l, &d), -EBADMSG);
	free(enc);
	/* a record's payload with the length of another type's: a LINK payload
	 * framed as SEG_DEL, a META payload framed as INODE */
	enc = encode(&rs[4], &len);
	memcpy(buf, enc, len);
	buf[8] = JR_SEG_DEL;
	le_put32(buf + 4, crc32c(crc32c(0, buf, 4), buf + 8, len - 8));
	assert_int_equal(jrnl_decode(buf, len, &d), -EBADMSG);
	free(enc);
	enc = encode(&rs[2], &len);
	memcpy(buf, enc, len);
	buf[8] = JR_INODE;
	le_put32(buf + 4, crc32c(crc32c(0, buf, 4), buf + 8, len - 8));
	assert_int_equal(jrnl_decode(buf, len, &d), -EBADMSG);
	free(enc);
	free(buf);
}

struct collect {
	struct reclog log;
	int stop_at, calls, stop_rc;
};

static int collect_fn(void *arg, const struct jrec *r)
{
	struct collect *c = arg;

	c->calls++;
	log_add(&c->log, r);
	return c->calls == c->stop_at ? c->stop_rc : 0;
}

static void test_codec_tx(void **state)
{
	struct jrec rs[16], in[6], outer;
	struct reclog want = {0};
	struct collect c = {0};
	size_t len, plen;
	uint8_t *tx, *plain;
	uint8_t bad[256];
	int n = sample_records(rs);

	(void)state;
	/* a rename-like pair plus others, inner order kept */
	in[0] = rs[4];	   /* LINK, 255-byte name */
	in[1] = rs[5];	   /* UNLINK */
	in[2] = rs[3];	   /* INODE with target */
	in[3] = rs[8];	   /* CHUNK_LOC */
	in[4] = rs[10];	   /* CHUNK_ABSENT */
	in[5] = rs[n - 1]; /* LINK, 1-byte name */
	tx = jrnl_encode_tx(in, 6, &len);
	assert_non_null(tx);
	assert_framing(tx, len, JR_TX);
	assert_int_equal(jrnl_decode(tx, len, &outer), len);
	assert_int_equal(outer.type, JR_TX);
	assert_int_equal(jrnl_for_each_in(tx, len, &outer, collect_fn, &c), 0);
	for (int i = 0; i < 6; i++)
		log_add(&want, &in[i]);
	assert_log_is(&c.log, &want, NULL);
	/* fn's nonzero return stops it and is returned */
	log_free(&c.log);
	memset(&c, 0, sizeof(c));
	c.stop_at = 2;
	c.stop_rc = 4242;
	assert_int_equal(jrnl_for_each_in(tx, len, &outer, collect_fn, &c), 4242);
	assert_int_equal(c.calls, 2);
	log_free(&c.log);
	/* damage anywhere in a TX is caught by the outer frame */
	assert_detects_damage(tx, len, 1);
	free(tx);

	/* n == 1: a plain record, and for_each_in calls fn once */
	tx = jrnl_encode_tx(&rs[3], 1, &len);
	assert_non_null(tx);
	plain = encode(&rs[3], &plen);
	assert_int_equal(len, plen);
	assert_memory_equal(tx, plain, len);
	assert_int_equal(jrnl_decode(tx, len, &outer), len);
	assert_int_equal(outer.type, JR_INODE);
	memset(&c, 0, sizeof(c));
	assert_int_equal(jrnl_for_each_in(tx, len, &outer, collect_fn, &c), 0);
	assert_int_equal(c.calls, 1);
	assert_true(rec_eq(&c.log.r[0], &rs[3]));
	log_free(&c.log);
	free(tx);
	free(plain);

	/* malformed TX payloads with a valid outer crc: refused by decode or
	 * by for_each_in, never handed out */
	for (int t = 0; t < 6; t++) {
		uint32_t pl;
		/* a control record inside a TX: only data records may be there */
		static const struct {
			uint8_t type;
			uint32_t payload;
		} ctl[3] = {{JR_END, 8}, {JR_HEADER, 40}, {JR_TX, 5 + 8}};

		memset(bad, 0, sizeof(bad));
		bad[8] = JR_TX;
		if (t == 0) { /* too short for an inner header */
			pl = 3;
			bad[9] = 1;
		} else if (t == 1) { /* inner length past the end */
			pl = 10;
			le_put32(bad + 9, 100);
			bad[13] = JR_LINK;
		} else if (t == 2) { /* inner record of an unknown type */
			pl = 5 + 16;
			le_put32(bad + 9, 17);
			bad[13] = 0xee;
		} else { /* END, HEADER or a nested TX (holding an END) */
			pl = 5 + ctl[t - 3].payload;
			le_put32(bad + 9, 1 + ctl[t - 3].payload);
			bad[13] = ctl[t - 3].type;
			if (ctl[t - 3].type == JR_TX) {
				le_put32(bad + 14, 1 + 8);
				bad[18] = JR_END;
			}
		}
		le_put32(bad, 1 + pl);
		le_put32(bad + 4, crc32c(crc32c(0, bad, 4), bad + 8, 1 + pl));
		ssize_t rc = jrnl_decode(bad, 9 + pl, &outer);
		if (rc == -EBADMSG)
			continue;
		assert_int_equal(rc, 9 + pl);
		memset(&c, 0, sizeof(c));
		assert_int_equal(jrnl_for_each_in(bad, 9 + pl, &outer, collect_fn, &c), -EBADMSG);
		log_free(&c.log);
	}
	log_free(&want);
}


/* Every bounded field, one past its limit, is a bad record; at the limit,
 * a good one. Chunk indexes also fit the state's chunk size. */
static void test_codec_bounds(void **state)
{
	struct jrec ok[] = {
	    {.type = JR_CHUNK_LOC, .ino = 2, .chunk = JRNL_MAX_CHUNKS - 1,
	     .loc = {.seg_id = JRNL_MAX_SEG_ID, .off = UINT64_MAX - JRNL_MAX_LOC_LEN,
		     .len = JRNL_MAX_LOC_LEN}},
	    {.type = JR_CHUNK_DIRTY, .ino = 2, .chunk = JRNL_MAX_CHUNKS - 1},
	    {.type = JR_CHUNK_ABSENT, .ino = 2, .chunk = 1, .count = JRNL_MAX_CHUNKS - 1},
	    {.type = JR_INODE, .ino = 2, .attr = {.mode = 0100644, .size = JRNL_MAX_FILE_SIZE}},
	    {.type = JR_META, .next_ino = 9, .next_seg = JRNL_MAX_SEG_ID + 1},
	    {.type = JR_SEG_ADD, .seg = {.id = JRNL_MAX_SEG_ID, .len = 1}},
	    {.type = JR_SEG_DEL, .seg = {.id = JRNL_MAX_SEG_ID}},
	};
	struct jrec bad[] = {
	    {.type = JR_CHUNK_LOC, .ino = 2, .chunk = JRNL_MAX_CHUNKS, .loc = {.seg_id = 1}},
	    {.type = JR_CHUNK_LOC, .ino = 2, .loc = {.seg_id = 1, .len = JRNL_MAX_LOC_LEN + 1}},
	    {.type = JR_CHUNK_LOC, .ino = 2,
	     .loc = {.seg_id = 1, .off = UINT64_MAX - 9, .len = 10}},
	    {.type = JR_CHUNK_DIRTY, .ino = 2, .chunk = JRNL_MAX_CHUNKS},
	    {.type = JR_CHUNK_ABSENT, .ino = 2, .chunk = 1, .count = JRNL_MAX_CHUNKS},
	    {.type = JR_CHUNK_ABSENT, .ino = 2, .chunk = 1, .count = UINT64_MAX},
	    {.type = JR_INODE, .ino = 2, .attr = {.mode = 0100644, .size = JRNL_MAX_FILE_SIZE + 1}},
	    {.type = JR_META, .next_ino = 9, .next_seg = JRNL_MAX_SEG_ID + 2},
	    {.type = JR_SEG_ADD, .seg = {.id = JRNL_MAX_SEG_ID + 1, .len = 1}},
	    {.type = JR_SEG_DEL, .seg = {.id = 0}},
	};
	uint8_t buf[256];
	struct jrec d;
	size_t n;

	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		n = jrnl_encode(&ok[i], buf);
		assert_int_equal(jrnl_decode(buf, n, &d), (ssize_t)n);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		n = jrnl_encode(&bad[i], buf);
		if (jrnl_decode(buf, n, &d) != -EBADMSG)
			fail_msg("out-of-range record %zu (type %u) decoded", i, bad[i].type);
	}
	/* a segment id past JRNL_MAX_SEG_ID: 64 bits on the wire, but struct
	 * chunk_loc holds 32, so the record is patched by hand (payload from
	 * byte 9: ino, chunk, then the id) */
	n = jrnl_encode(&(struct jrec){.type = JR_CHUNK_LOC, .ino = 2, .loc = {.seg_id = 1}}, buf);
	assert_int_equal(jrnl_decode(buf, n, &d), (ssize_t)n);
	le_put64(buf + 9 + 16, JRNL_MAX_SEG_ID + 1);
	le_put32(buf + 4, crc32c(crc32c(0, buf, 4), buf + 8, n - 8));
	assert_int_equal(jrnl_decode(buf, n, &d), -EBADMSG);
	/* with 64 MiB chunks, a file has at most 2^18 of them */
	assert_true(jrnl_rec_fits(&ok[0], JRNL_MIN_CHUNK_SIZE));
	assert_false(jrnl_rec_fits(&ok[0], 64ULL << 20));
	assert_true(jrnl_rec_fits(&(struct jrec){.type = JR_CHUNK_DIRTY, .chunk = (1 << 18) - 1},
				  64ULL << 20));
	assert_false(jrnl_rec_fits(&(struct jrec){.type = JR_CHUNK_ABSENT, .chunk = 1,
						  .count = 1 << 18},
				   64ULL << 20));
}

/* idx_chunks_reserve: a count no allocation can hold fails, never wraps. */
static void test_chunks_reserve_overflow(void **state)
{
	struct inode in = {.mode = S_IFREG | 0644};

	(void)state;
	assert_int_equal(idx_chunks_reserve(&in, 1ULL << 62), -EFBIG);
	assert_int_equal(idx_chunks_reserve(&in, (1ULL << 63) + 1), -EFBIG);
	assert_int_equal(idx_chunks_reserve(&in, UINT64_MAX), -EFBIG);
	assert_null(in.chunks);
	assert_int_equal(idx_chunks_reserve(&in, 5), 0);
	assert_int_equal(in.nchunks, 8);
	assert_int_equal(idx_chunks_reserve(&in, 1ULL << 61), -EFBIG);
	assert_int_equal(in.nchunks, 8);
	free(in.chunks);
}


/*
 * Chunk locations of segment format v2 carry flags in the high 16 bits of
 * the old device field: a record written before v2 (device < 64, nothing
 * above) decodes with flags 0; unknown flags are refused.
 */
/* JR_EXTENT and JR_EXTENT_CRC (format 3) round-trip, and what is out of
 * their bounds is a bad record, never an extent. */
static void test_codec_extent(void **state)
{
	uint32_t crcs[3] = {0x11223344, 0xdeadbeef, 7};
	struct jrec e = {.type = JR_EXTENT,
			 .ino = 42,
			 .ext = {.id = 0x18eed5d01a0d0f0bull, .size = 3 * JRNL_EXT_BLOCK - 5,
				 .dev = 3, .flags = JEXT_SEALED}};
	struct jrec c = {.type = JR_EXTENT_CRC, .ino = 42, .chunk = 2, .value = crcs,
			 .value_len = sizeof(crcs)};
	struct jrec d;
	uint8_t buf[256];
	size_t len;

	(void)state;
	len = jrnl_encode(&e, buf);
	assert_int_equal(jrnl_decode(buf, len, &d), len);
	assert_int_equal(d.type, JR_EXTENT);
	assert_int_equal(d.ino, 42);
	assert_int_equal(d.ext.id, e.ext.id);
	assert_int_equal(d.ext.size, e.ext.size);
	assert_int_equal(d.ext.dev, 3);
	assert_int_equal(d.ext.flags, JEXT_SEALED);
	len = jrnl_encode(&c, buf);
	assert_int_equal(jrnl_decode(buf, len, &d), len);
	assert_int_equal(d.type, JR_EXTENT_CRC);
	assert_int_equal(d.chunk, 2);
	assert_int_equal(d.value_len, sizeof(crcs));
	assert_memory_equal(d.value, crcs, sizeof(crcs));
	/* out of bounds: each is refused whole */
	struct jrec bad[] = {
	    {.type = JR_EXTENT, .ino = 42, .ext = {.id = 1, .dev = 64}},
	    {.type = JR_EXTENT, .ino = 42, .ext = {.id = 1, .flags = 4}},
	    {.type = JR_EXTENT, .ino = 42, .ext = {.id = 0}},
	    {.type = JR_EXTENT, .ino = 0, .ext = {.id = 1}},
	    {.type = JR_EXTENT, .ino = 42, .ext = {.id = 1, .size = JRNL_MAX_FILE_SIZE + 1}},
	    {.type = JR_EXTENT_CRC, .ino = 42, .value = crcs, .value_len = 5},
	    {.type = JR_EXTENT_CRC, .ino = 42, .value = crcs, .value_len = 0},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		len = jrnl_encode(&bad[i], buf);
		if (jrnl_decode(buf, len, &d) != -EBADMSG)
			fail_msg("out-of-bounds extent record %zu decoded", i);
	}
}

static void test_codec_loc_flags(void **state)
{
	struct jrec r = {.type = JR_CHUNK_LOC, .ino = 5, .chunk = 2}, out;
	uint8_t buf[256], old[256];
	size_t n;

	(void)state;
	r.loc = (struct chunk_loc){.seg_id = 9, .off = 4104, .len = 300, .crc = 7, .dev = 3,
				  .gen = 4};
	n = jrnl_encode(&r, old);
	assert_true(n <= sizeof(old));
	assert_int_equal(jrnl_decode(old, n, &out), (ssize_t)n);
	assert_int_equal(out.loc.dev, 3);
	assert_int_equal(out.loc.flags, 0);
	r.loc.flags = LOC_F_MAP;
	assert_int_equal(jrnl_encode(&r, buf), n);
	assert_memory_not_equal(buf, old, n);
	assert_int_equal(jrnl_decode(buf, n, &out), (ssize_t)n);
	assert_int_equal(out.loc.dev, 3);
	assert_int_equal(out.loc.flags, LOC_F_MAP);
	assert_int_equal(out.loc.len, 300);
	r.loc.flags = 2; /* not a flag this code knows */
	jrnl_encode(&r, buf);
	assert_int_equal(jrnl_decode(buf, n, &out), -EBADMSG);
}


int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_codec_roundtrip),
	    cmocka_unit_test(test_codec_loc_flags),
	    cmocka_unit_test(test_codec_extent),
	    cmocka_unit_test(test_codec_damage),
	    cmocka_unit_test(test_codec_bad_frames),
	    cmocka_unit_test(test_codec_tx),
	    cmocka_unit_test(test_codec_bounds),
	    cmocka_unit_test(test_chunks_reserve_overflow),
	};

	journal_fixture_init();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
