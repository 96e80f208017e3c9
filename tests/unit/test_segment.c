/*
 * test_segment — segment format: encode/decode round trips, every single
 * flipped byte of header, record or footer detected, truncation detected,
 * and the writer/readers over a real nvme store in a temp directory.
 * Format v2: chunk sizes around every boundary, sparse chunks from a tmpfs
 * file, packing of small records, per-block checksums of range reads, a
 * corrupted map; and a v1 segment (fixture written by the v1 code) still
 * read.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/crc32c.h"
#include "common/log.h"
#include "tier/segment/segment.h"
#include "tier/segment/segment_i.h"
#include "tier/store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const uint8_t uuid[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

struct fx {
	char dir[64];
	struct store *st;
};

static void fill_pattern(uint8_t *p, size_t n, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (uint8_t)x;
	}
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	const char *dirs[1];

	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/dev/shm/spw-seg-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	dirs[0] = f->dir;
	assert_int_equal(store_nvme_open(dirs, 1, &f->st), 0);
	*state = f;
	return 0;
}

static int rm_entry(void *arg, uint64_t id, uint32_t dev, uint64_t size)
{
	return store_remove(arg, id, dev);
}

static int teardown(void **state)
{
	struct fx *f = *state;
	char cmd[128];

	spw_log_level = LOG_INFO;
	store_list(f->st, rm_entry, f->st);
	store_close(f->st);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
	assert_int_equal(system(cmd), 0);
	free(f);
	return 0;
}

static void seg_path(struct fx *f, uint64_t id, char *buf, size_t n)
{
	snprintf(buf, n, "%s/seg-%016" PRIx64 ".spw", f->dir, id);
}

/* ---- pure encode/decode ---- */

static void test_header_roundtrip(void **state)
{
	uint8_t buf[SEG_HDR_SIZE], out[16];
	uint64_t id = 0;

	seg_header_encode(buf, uuid, 0x1122334455667788ull);
	assert_memory_equal(buf, "SPWSEG01", 8);
	assert_int_equal(buf[8], 3); /* version, little-endian */
	assert_int_equal(buf[32], 0x88);
	assert_int_equal(buf[39], 0x11);
	assert_int_equal(seg_header_decode(buf, out, &id, NULL), 0);
	assert_memory_equal(out, uuid, 16);
	assert_true(id == 0x1122334455667788ull);
	for (size_t i = 0; i < SEG_HDR_SIZE; i++) {
		buf[i] ^= 0x01;
		assert_int_equal(seg_header_decode(buf, out, &id, NULL), -EIO);
		buf[i] ^= 0x01;
	}
	assert_int_equal(seg_header_decode(buf, out, &id, NULL), 0);
}

static void test_header_other_version(void **state)
{
	uint8_t buf[SEG_HDR_SIZE];
	uint64_t id;
	uint32_t crc;

	uint32_t v = 0;

	for (uint8_t ver = 0; ver < 5; ver++) {
		seg_header_encode(buf, uuid, 5);
		buf[8] = ver;
		/* Recompute the crc (crc32c of [0, 4092), stored little-endian at 4092). */
		crc = crc32c(0, buf, SEG_HDR_SIZE - 4);
		for (int i = 0; i < 4; i++)
			buf[SEG_HDR_SIZE - 4 + i] = (uint8_t)(crc >> (8 * i));
		/* versions 1, 2 and 3 are read, nothing else */
		assert_int_equal(seg_header_decode(buf, NULL, &id, &v),
				 ver >= 1 && ver <= 3 ? 0 : -ENOTSUP);
		if (ver >= 1 && ver <= 3)
			assert_int_equal(v, ver);
	}
}

static const struct seg_entry sample[3] = {
    {.ino = 42, .chunk = 0, .gen = 7, .off = 4096, .len = 8192, .crc = 0xdeadbeef,
     .chunk_len = 4 << 20},
    {.ino = 42, .chunk = 1, .gen = 9, .off = 12288, .len = 5000, .crc = 0x01020304,
     .flags = LOC_F_MAP, .chunk_len = 4 << 20},
    {.ino = 1ull << 40, .chunk = 3, .gen = 1, .off = 20480, .len = 1, .crc = 0, .chunk_len = 1},
};

static void test_footer_roundtrip(void **state)
{
	uint64_t body_end = 20480 + 1;
	uint32_t flen = seg_footer_len(body_end, 3), fl2, n = 0, v = 0;
	uint64_t seg_len = body_end + flen;
	struct seg_entry *e = NULL;
	uint8_t *buf;

	assert_int_equal(seg_len % 4096, 0);
	assert_true(flen >= 3 * SEG_ENTRY_SIZE + SEG_TRAILER_SIZE);
	buf = malloc(flen);
	assert_non_null(buf);
	seg_footer_encode(buf, flen, sample, 3);
	assert_memory_equal(buf + flen - 8, "SPWFOOT3", 8);
	assert_int_equal(seg_trailer_decode(buf + flen - SEG_TRAILER_SIZE, seg_len, &fl2, &v), 0);
	assert_int_equal(fl2, flen);
	assert_int_equal(v, 3);
	/* a v3 footer is not taken for a v1 or a v2 one */
	assert_int_equal(seg_footer_decode(buf, flen, seg_len, 1, &e, &n), -EIO);
	assert_int_equal(seg_footer_decode(buf, flen, seg_len, 2, &e, &n), -EIO);
	assert_int_equal(seg_footer_decode(buf, flen, seg_len, 4, &e, &n), -ENOTSUP);
	/* the same footer with v2's magic is a v2 footer (same entries) */
	memcpy(buf + flen - 8, "SPWFOOT2", 8);
	assert_int_equal(seg_trailer_decode(buf + flen - SEG_TRAILER_SIZE, seg_len, &fl2, &v), 0);
	assert_int_equal(v, 2);
	assert_int_equal(seg_footer_decode(buf, flen, seg_len, 2, &e, &n), 0);
	assert_memory_equal(e, sample, sizeof(sample));
	free(e);
	memcpy(buf + flen - 8, "SPWFOOT3", 8);
	assert_int_equal(seg_footer_decode(buf, flen, seg_len, 3, &e, &n), 0);
	assert_int_equal(n, 3);
	assert_memory_equal(e, sample, sizeof(sample));
	free(e);
	/* Every flipped bit pattern in every byte of the footer is caught. */
	for (uint32_t i = 0; i < flen; i++) {
		for (int bit = 0; bit < 8; bit += 7) {
			buf[i] ^= (uint8_t)(1u << bit);
			e = NULL;
			assert_int_equal(seg_footer_decode(buf, flen, seg_len, 3, &e, &n), -EIO);
			assert_null(e);
			buf[i] ^= (uint8_t)(1u << bit);
		}
	}
	free(buf);
}

static void test_footer_empty(void **state)
{
	uint32_t flen = seg_footer_len(4096, 0), n = 9;
	struct seg_entry *e = (void *)1;
	uint8_t buf[4096];

	assert_int_equal(flen, 4096);
	seg_footer_encode(buf, flen, NULL, 0);
	assert_int_equal(seg_footer_decode(buf, flen, 8192, SEG_VERSION, &e, &n), 0);
	assert_int_equal(n, 0);
	assert_null(e);
}

/* A footer with a valid crc but an entry outside the data area is refused. */
static void test_footer_bounds(void **state)
{
	struct seg_entry bad[1] = {
	    {.ino = 1, .off = 4096, .len = 8193, .flags = LOC_F_MAP, .chunk_len = 1 << 20}};
	uint32_t flen = seg_footer_len(4096 + 8192, 1), n;
	uint64_t seg_len = 4096 + 8192 + flen;
	struct seg_entry *e = NULL;
	uint8_t buf[4096];

	seg_footer_encode(buf, flen, bad, 1);
	assert_int_equal(seg_footer_decode(buf, flen, seg_len, SEG_VERSION, &e, &n), -EIO);
	bad[0].len = 8192;
	bad[0].off = 4097; /* records start on 8 bytes */
	seg_footer_encode(buf, flen, bad, 1);
	assert_int_equal(seg_footer_decode(buf, flen, seg_len, SEG_VERSION, &e, &n), -EIO);
	bad[0].off = 0; /* inside the header */
	seg_footer_encode(buf, flen, bad, 1);
	assert_int_equal(seg_footer_decode(buf, flen, seg_len, SEG_VERSION, &e, &n), -EIO);
	bad[0].off = 4096 + 8;
	bad[0].len = 8192 - 8;
	seg_footer_encode(buf, flen, bad, 1);
	assert_int_equal(seg_footer_decode(buf, flen, seg_len, SEG_VERSION, &e, &n), 0);
	free(e);
	/* a plain record is at most one block, and no longer than its chunk */
	bad[0].flags = 0;
	seg_footer_encode(buf, flen, bad, 1);
	assert_int_equal(seg_footer_decode(buf, flen, seg_len, SEG_VERSION, &e, &n), 0);
	free(e);
	bad[0].chunk_len = 100;
	seg_footer_encode(buf, flen, bad, 1);
	assert_int_equal(seg_footer_decode(buf, flen, seg_len, SEG_VERSION, &e, &n), -EIO);
	bad[0].chunk_len = 1 << 20;
	bad[0].flags = 4; /* unknown flag */
	seg_footer_encode(buf, flen, bad, 1);
	assert_int_equal(seg_footer_decode(buf, flen, seg_len, SEG_VERSION, &e, &n), -EIO);
	/* The segment length must be aligned and hold header + footer. */
	assert_int_equal(seg_trailer_decode(buf + flen - SEG_TRAILER_SIZE, seg_len + 1, &n, NULL),
			 -EIO);
	assert_int_equal(seg_trailer_decode(buf + flen - SEG_TRAILER_SIZE, 4096, &n, NULL), -EIO);
}

/* ---- writer and readers over a store ---- */

struct written {
	uint64_t id, len;
	uint32_t dev;
	struct seg_entry e[4];
	uint32_t n;
};

/* Verify everything a reader can: manifest, then each chunk. 0 or the first error. */
static int verify(struct fx *f, uint64_t id, uint32_t dev, uint64_t len)
{
	struct seg_entry *e = NULL;
	uint8_t got_uuid[16];
	uint32_t n;
	int ret;

	ret = seg_read_manifest(f->st, id, dev, len, got_uuid, NULL, &e, &n);
	if (ret < 0)
		return ret;
	if (memcmp(got_uuid, uuid, 16) != 0) {
		free(e);
		return -EBADMSG;
	}
	for (uint32_t i = 0; i < n && ret == 0; i++) {
		struct seg_chunk sc;

		ret = seg_read_chunk(f->st, id, dev, &e[i], &sc);
		if (ret == 0)
			seg_chunk_free(&sc);
	}
	free(e);
	return ret;
}

/*
 * Read e's chunk whole into buf (chunk_len bytes, holes as zeros) through
 * seg_read_chunk; 0 or its error.
 */
static int read_whole(struct fx *f, uint64_t id, uint32_t dev, const struct seg_entry *e,
		      uint8_t *buf, uint32_t chunk_len)
{
	struct seg_chunk sc;
	uint32_t pos = 0;
	int ret;

	memset(buf, 0, chunk_len);
	ret = seg_read_chunk(f->st, id, dev, e, &sc);
	if (ret < 0)
		return ret;
	for (uint32_t i = 0; i < sc.next; pos += sc.ext[i].len, i++) {
		assert_true((uint64_t)sc.ext[i].off + sc.ext[i].len <= chunk_len);
		memcpy(buf + sc.ext[i].off, sc.data + pos, sc.ext[i].len);
	}
	assert_int_equal(pos, sc.data_len);
	seg_chunk_free(&sc);
	return 0;
}

static void test_write_read(void **state)
{
	struct fx *f = *state;
	uint8_t *data = malloc(20000 + 1);
	char tmpl[] = "/var/tmp/spw-seg-hot-XXXXXX";
	struct seg_entry ent[3], *e = NULL;
	struct seg_writer *w;
	uint64_t seg_len;
	uint32_t dev = 99, n, v = 0;
	int hot;

	assert_non_null(data);
	fill_pattern(data, 20001, 3);
	hot = mkstemp(tmpl);
	assert_true(hot >= 0);
	unlink(tmpl);
	assert_int_equal(pwrite(hot, data, 20001, 0), 20001);

	assert_int_equal(seg_writer_new(f->st, uuid, 77, 0, &w), 0);
	assert_int_equal(seg_writer_bytes(w), 4096);
	/* Unaligned source pointer, odd length. */
	assert_int_equal(seg_writer_add(w, 10, 0, 1, data + 1, 5000, &ent[0]), 0);
	assert_int_equal(ent[0].off, 4096);
	assert_int_equal(ent[0].len, 5000);
	assert_int_equal(ent[0].flags, 0);
	assert_int_equal(seg_writer_bytes(w), 4096 + 5000);
	/* From an fd, at an offset: packed on 8 bytes, not 4 KiB. */
	assert_int_equal(seg_writer_add_fd(w, 11, 2, 5, hot, 333, 12000, NULL, &ent[1]), 0);
	assert_int_equal(ent[1].off, 9096);
	assert_int_equal(ent[1].len, 12000);
	assert_int_equal(ent[1].flags, 0);
	assert_int_equal(seg_writer_add(w, 12, 0, 1, data, 1, &ent[2]), 0);
	assert_int_equal(ent[2].off, 9096 + 12000);
	assert_int_equal(seg_writer_count(w), 3);
	assert_int_equal(seg_writer_finish(w, &dev, &seg_len), 0);
	assert_int_equal(dev, 0);
	assert_int_equal(seg_len, 24576); /* 21097 + footer, to 4 KiB */

	assert_int_equal(seg_read_manifest(f->st, 77, 0, seg_len, NULL, &v, &e, &n), 0);
	assert_int_equal(v, 3);
	assert_int_equal(n, 3);
	assert_memory_equal(e, ent, sizeof(ent));
	for (int i = 0; i < 3; i++) {
		uint8_t *buf = malloc(e[i].len);
		const uint8_t *want = i == 0 ? data + 1 : i == 1 ? data + 333 : data;

		assert_non_null(buf);
		assert_int_equal(read_whole(f, 77, 0, &e[i], buf, e[i].len), 0);
		assert_memory_equal(buf, want, e[i].len);
		free(buf);
	}
	free(e);
	close(hot);
	free(data);
}

/* Chunks larger than the staging buffer, crossing flush boundaries. */
static void test_large_segment(void **state)
{
	struct fx *f = *state;
	size_t sz[3] = {3 * 1024 * 1024 + 7, 5 * 1024 * 1024, 4 * 1024 * 1024 - 4096};
	char tmpl[] = "/var/tmp/spw-seg-hot-XXXXXX";
	struct seg_entry ent[3];
	struct seg_writer *w;
	uint8_t *data[3];
	uint64_t seg_len;
	uint32_t dev;
	int hot;

	hot = mkstemp(tmpl);
	assert_true(hot >= 0);
	unlink(tmpl);
	for (int i = 0; i < 3; i++) {
		data[i] = malloc(sz[i]);
		assert_non_null(data[i]);
		fill_pattern(data[i], sz[i], 10 + i);
	}
	assert_int_equal(pwrite(hot, data[1], sz[1], 0), (ssize_t)sz[1]);
	assert_int_equal(seg_writer_new(f->st, uuid, 78, 16 << 20, &w), 0);
	assert_int_equal(seg_writer_add(w, 1, 0, 1, data[0], sz[0], &ent[0]), 0);
	assert_int_equal(seg_writer_add_fd(w, 1, 1, 1, hot, 0, sz[1], NULL, &ent[1]), 0);
	assert_int_equal(seg_writer_add(w, 1, 2, 1, data[2], sz[2], &ent[2]), 0);
	assert_int_equal(seg_writer_finish(w, &dev, &seg_len), 0);
	assert_int_equal(verify(f, 78, dev, seg_len), 0);
	for (int i = 0; i < 3; i++) {
		uint8_t *buf = malloc(sz[i]);

		assert_int_equal(ent[i].flags, LOC_F_MAP);
		assert_true(ent[i].len < sz[i] + 1024); /* the map: a few hundred bytes */
		assert_int_equal(read_whole(f, 78, dev, &ent[i], buf, (uint32_t)sz[i]), 0);
		assert_memory_equal(buf, data[i], sz[i]);
		free(buf);
		free(data[i]);
	}
	close(hot);
}

static void write_small(struct fx *f, uint64_t id, uint64_t *seg_len, uint32_t *dev)
{
	static uint8_t data[3][70000];
	struct seg_writer *w;

	fill_pattern(data[0], 8192, 1);
	fill_pattern(data[1], 8192, 2);
	fill_pattern(data[2], 70000, 3);
	assert_int_equal(seg_writer_new(f->st, uuid, id, 0, &w), 0);
	assert_int_equal(seg_writer_add(w, 5, 0, 1, data[0], 8192, NULL), 0);
	assert_int_equal(seg_writer_add(w, 5, 1, 1, data[1], 8192, NULL), 0);
	/* two blocks: a mapped record, so every byte of a map is flipped too */
	assert_int_equal(seg_writer_add(w, 5, 2, 1, data[2], 70000, NULL), 0);
	assert_int_equal(seg_writer_finish(w, dev, seg_len), 0);
}

/* Flipping any single byte of a whole segment (header, payloads, footer) is detected. */
static void test_flip_every_byte(void **state)
{
	struct fx *f = *state;
	uint64_t seg_len;
	uint32_t dev;
	char path[128];
	int fd;

	write_small(f, 5, &seg_len, &dev);
	assert_int_equal(seg_len, 94208); /* 4096 + 2 * 8192 + 70032 + footer, to 4 KiB */
	assert_int_equal(verify(f, 5, dev, seg_len), 0);
	seg_path(f, 5, path, sizeof(path));
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	spw_log_level = LOG_CRIT; /* one error line per flip otherwise */
	for (uint64_t i = 0; i < seg_len; i++) {
		uint8_t b, x;

		assert_int_equal(pread(fd, &b, 1, (off_t)i), 1);
		x = b ^ (uint8_t)(1u << (i % 8));
		assert_int_equal(pwrite(fd, &x, 1, (off_t)i), 1);
		if (verify(f, 5, dev, seg_len) == 0)
			fail_msg("flipped byte %" PRIu64 " not detected", i);
		assert_int_equal(pwrite(fd, &b, 1, (off_t)i), 1);
	}
	spw_log_level = LOG_INFO;
	close(fd);
	assert_int_equal(verify(f, 5, dev, seg_len), 0);
}

static void test_truncated(void **state)
{
	struct fx *f = *state;
	uint64_t seg_len;
	uint32_t dev;
	char path[128];

	write_small(f, 6, &seg_len, &dev);
	seg_path(f, 6, path, sizeof(path));
	spw_log_level = LOG_CRIT;
	assert_int_equal(truncate(path, (off_t)(seg_len - 4096)), 0);
	/* The index still says seg_len: short read. */
	assert_int_equal(verify(f, 6, dev, seg_len), -EIO);
	/* list() says the new length: no footer there. */
	assert_int_equal(verify(f, 6, dev, seg_len - 4096), -EIO);
	assert_int_equal(truncate(path, (off_t)(seg_len - 100)), 0);
	assert_int_equal(verify(f, 6, dev, seg_len - 100), -EIO);
	assert_int_equal(truncate(path, 0), 0);
	assert_int_equal(verify(f, 6, dev, 0), -EIO);
	spw_log_level = LOG_INFO;
}

/* A segment file under another id's name is not taken for that id. */
static void test_wrong_id(void **state)
{
	struct fx *f = *state;
	char a[128], b[128];
	uint64_t seg_len;
	uint32_t dev;

	write_small(f, 7, &seg_len, &dev);
	seg_path(f, 7, a, sizeof(a));
	seg_path(f, 8, b, sizeof(b));
	assert_int_equal(rename(a, b), 0);
	spw_log_level = LOG_CRIT;
	assert_int_equal(verify(f, 8, dev, seg_len), -EIO);
	spw_log_level = LOG_INFO;
}

static int count_entry(void *arg, uint64_t id, uint32_t dev, uint64_t size)
{
	(*(int *)arg)++;
	return 0;
}

/* A short hot file: -ENODATA, nothing recorded, the writer goes on. Abort leaves nothing. */
static void test_add_fd_short_and_abort(void **state)
{
	struct fx *f = *state;
	char tmpl[] = "/var/tmp/spw-seg-hot-XXXXXX";
	uint8_t data[100] = {1, 2, 3};
	struct seg_entry *e = NULL;
	struct seg_writer *w;
	uint64_t seg_len;
	uint32_t dev, n;
	int hot, count = 0;

	hot = mkstemp(tmpl);
	assert_true(hot >= 0);
	unlink(tmpl);
	assert_int_equal(pwrite(hot, data, 100, 0), 100);
	assert_int_equal(seg_writer_new(f->st, uuid, 9, 0, &w), 0);
	assert_int_equal(seg_writer_add_fd(w, 1, 0, 1, hot, 0, 200, NULL, NULL), -ENODATA);
	assert_int_equal(seg_writer_add(w, 1, 0, 1, data, 0, NULL), -EINVAL);
	assert_int_equal(seg_writer_add_fd(w, 1, 0, 1, hot, 0, 100, NULL, NULL), 0);
	assert_int_equal(seg_writer_count(w), 1);
	assert_int_equal(seg_writer_finish(w, &dev, &seg_len), 0);
	assert_int_equal(seg_read_manifest(f->st, 9, dev, seg_len, NULL, NULL, &e, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(e[0].len, 100);
	free(e);
	assert_int_equal(verify(f, 9, dev, seg_len), 0);

	assert_int_equal(seg_writer_new(f->st, uuid, 10, 0, &w), 0);
	assert_int_equal(seg_writer_add(w, 1, 0, 1, data, 100, NULL), 0);
	seg_writer_abort(w);
	assert_int_equal(store_list(f->st, count_entry, &count), 0);
	assert_int_equal(count, 1); /* only segment 9 */
	close(hot);
}

/* ---- format v2 ---- */

/* Check bytes [off, off + len) of e's chunk through seg_read_range against want. */
static void check_range(struct fx *f, uint64_t id, uint32_t dev, const struct seg_entry *e,
			const uint8_t *want, uint32_t chunk_len, uint64_t off, uint32_t len)
{
	uint8_t *got = malloc(len ? len : 1);
	uint32_t in = off < chunk_len ? (uint32_t)(chunk_len - off < len ? chunk_len - off : len) : 0;

	assert_non_null(got);
	memset(got, 0xa5, len);
	assert_int_equal(seg_read_range(f->st, id, dev, e, off, len, got), 0);
	if (in)
		assert_memory_equal(got, want + off, in);
	for (uint32_t i = in; i < len; i++)
		assert_int_equal(got[i], 0); /* past the chunk: zeros */
	free(got);
}

/* Every size around the record boundaries round-trips, whole and by range. */
static void test_v3_sizes(void **state)
{
	static const uint32_t sz[] = {1,	 100,	      4095,	 4096,	 4097,
				      65535, 65536, 65537, 4u << 20, 3 * 65536 + 17};
	enum { N = sizeof(sz) / sizeof(sz[0]) };
	struct fx *f = *state;
	struct seg_entry ent[N];
	struct seg_writer *w;
	uint8_t *data = malloc(4u << 20), *buf = malloc(4u << 20);
	uint64_t seg_len, prev_end = SEG_HDR_SIZE;
	uint32_t dev;

	assert_non_null(data);
	assert_non_null(buf);
	fill_pattern(data, 4u << 20, 21);
	assert_int_equal(seg_writer_new(f->st, uuid, 30, 0, &w), 0);
	for (int i = 0; i < N; i++) {
		assert_int_equal(seg_writer_add(w, 3, i, 1, data, sz[i], &ent[i]), 0);
		if (sz[i] > SEG_DENSE_MAX) { /* aligned: its data on 4 KiB */
			assert_int_equal(ent[i].off % SEG_ALIGN, 0);
			assert_true(ent[i].off - prev_end < SEG_ALIGN);
		} else { /* dense: packed */
			assert_int_equal(ent[i].off % SEG_REC_ALIGN, 0);
			assert_true(ent[i].off - prev_end < SEG_REC_ALIGN);
		}
		prev_end = ent[i].off + ent[i].len;
		assert_int_equal(ent[i].chunk_len, sz[i]);
		if (sz[i] <= SEG_BLOCK) {
			assert_int_equal(ent[i].flags, 0); /* plain: no overhead */
			assert_int_equal(ent[i].len, sz[i]);
		} else {
			uint32_t blocks = (sz[i] + SEG_BLOCK - 1) / SEG_BLOCK;

			assert_int_equal(ent[i].flags, LOC_F_MAP);
			assert_int_equal(ent[i].len, sz[i] + 8 + 4 * blocks + SEG_MAP_TAIL);
		}
	}
	assert_int_equal(seg_writer_finish(w, &dev, &seg_len), 0);
	assert_int_equal(verify(f, 30, dev, seg_len), 0);
	for (int i = 0; i < N; i++) {
		assert_int_equal(read_whole(f, 30, dev, &ent[i], buf, sz[i]), 0);
		assert_memory_equal(buf, data, sz[i]);
		check_range(f, 30, dev, &ent[i], data, sz[i], 0, 1);
		check_range(f, 30, dev, &ent[i], data, sz[i], sz[i] / 2, sz[i] / 3 + 1);
		check_range(f, 30, dev, &ent[i], data, sz[i], sz[i] - 1, 4096);
		check_range(f, 30, dev, &ent[i], data, sz[i], 0, sz[i]);
	}
	/* ranges across block boundaries of the 4 MiB chunk */
	check_range(f, 30, dev, &ent[8], data, 4u << 20, SEG_BLOCK - 10, 20);
	check_range(f, 30, dev, &ent[8], data, 4u << 20, 5 * SEG_BLOCK, 3 * SEG_BLOCK + 1);
	free(data);
	free(buf);
}

/* A sparse hot file (tmpfs): only the data extents are stored, holes come back as holes. */
static void test_v2_sparse_fd(void **state)
{
	struct fx *f = *state;
	const uint32_t chunk = 4u << 20;
	char tmpl[] = "/dev/shm/spw-seg-hot-XXXXXX";
	uint8_t *want = calloc(1, chunk), *buf = malloc(chunk);
	/* written ranges, relative to the chunk (which starts at 8 MiB in the file) */
	static const struct seg_extent wr[] = {
	    {0, 4096}, {(1u << 20) + 100, 4096}, {(3u << 20), 65536 + 5}, {chunk - 1, 1}};
	static const struct seg_extent pages[] = {{0, 4096},
						  {1u << 20, 8192},
						  {3u << 20, 65536 + 4096},
						  {chunk - 4096, 4096}};
	struct seg_entry e, e2;
	struct seg_chunk sc;
	struct seg_writer *w;
	uint64_t seg_len, base = 8u << 20;
	uint32_t dev, stored = 0;
	int hot;

	assert_non_null(want);
	assert_non_null(buf);
	hot = mkstemp(tmpl);
	assert_true(hot >= 0);
	unlink(tmpl);
	for (size_t i = 0; i < sizeof(wr) / sizeof(wr[0]); i++) {
		fill_pattern(want + wr[i].off, wr[i].len, 40 + (uint32_t)i);
		assert_int_equal(pwrite(hot, want + wr[i].off, wr[i].len, (off_t)(base + wr[i].off)),
				 (ssize_t)wr[i].len);
	}
	assert_int_equal(ftruncate(hot, (off_t)(base + chunk + 4096)), 0);
	assert_int_equal(seg_writer_new(f->st, uuid, 31, 0, &w), 0);
	assert_int_equal(seg_writer_add_fd(w, 4, 2, 3, hot, base, chunk, NULL, &e), 0);
	/* a chunk of holes only: a map of no extents */
	assert_int_equal(seg_writer_add_fd(w, 4, 3, 3, hot, base - (4u << 20), chunk, NULL, &e2), 0);
	assert_int_equal(seg_writer_finish(w, &dev, &seg_len), 0);
	assert_int_equal(e.flags, LOC_F_MAP);
	assert_int_equal(e.chunk_len, chunk);
	for (size_t i = 0; i < 4; i++)
		stored += pages[i].len;
	/* the data pages tmpfs holds, plus the map: not 4 MiB */
	assert_int_equal(e.len, stored + 4 * 8 + 4 * ((stored + SEG_BLOCK - 1) / SEG_BLOCK) +
				    SEG_MAP_TAIL);
	assert_int_equal(e2.flags, LOC_F_MAP);
	assert_int_equal(e2.len, SEG_MAP_TAIL);
	assert_true(seg_len < 100 * 1024);
	assert_int_equal(verify(f, 31, dev, seg_len), 0);

	assert_int_equal(seg_read_chunk(f->st, 31, dev, &e, &sc), 0);
	assert_int_equal(sc.next, 4);
	assert_memory_equal(sc.ext, pages, sizeof(pages));
	seg_chunk_free(&sc);
	assert_int_equal(read_whole(f, 31, dev, &e, buf, chunk), 0);
	assert_memory_equal(buf, want, chunk);
	check_range(f, 31, dev, &e, want, chunk, 0, chunk);
	check_range(f, 31, dev, &e, want, chunk, 5000, 1u << 20);	/* mostly a hole */
	check_range(f, 31, dev, &e, want, chunk, 2u << 20, 4096);	/* only a hole */
	check_range(f, 31, dev, &e, want, chunk, (1u << 20) + 50, 200); /* spans two pages */
	check_range(f, 31, dev, &e, want, chunk, (3u << 20) + 65000, 1000);
	assert_int_equal(seg_read_chunk(f->st, 31, dev, &e2, &sc), 0);
	assert_int_equal(sc.next, 0);
	assert_int_equal(sc.data_len, 0);
	seg_chunk_free(&sc);
	close(hot);
	free(want);
	free(buf);
}

/* 10,000 objects of 100..3,000 bytes: the segment is at most 1.25x their
 * bytes plus header and footer. */
static void test_v2_packing(void **state)
{
	enum { N = 10000 };
	struct fx *f = *state;
	struct seg_entry *ent = calloc(N, sizeof(*ent));
	uint8_t *data = malloc(3000), buf[3000];
	uint64_t seg_len, live = 0, x = 12345, hdr_foot;
	struct seg_writer *w;
	uint32_t dev, *len = calloc(N, sizeof(*len));

	assert_non_null(ent);
	assert_non_null(data);
	assert_non_null(len);
	assert_int_equal(seg_writer_new(f->st, uuid, 32, 0, &w), 0);
	for (uint32_t i = 0; i < N; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		len[i] = 100 + (uint32_t)((x >> 33) % 2901);
		fill_pattern(data, len[i], i);
		assert_int_equal(seg_writer_add(w, 100 + i, 0, 1, data, len[i], &ent[i]), 0);
		assert_int_equal(ent[i].len, len[i]);
		live += len[i];
	}
	assert_int_equal(seg_writer_finish(w, &dev, &seg_len), 0);
	hdr_foot = SEG_HDR_SIZE + (uint64_t)N * SEG_ENTRY_SIZE + SEG_TRAILER_SIZE + SEG_ALIGN;
	print_message("packing: %u objects, %" PRIu64 " bytes live, segment %" PRIu64
		      " bytes: data area %.4fx live, whole segment %.4fx\n",
		      N, live, seg_len,
		      (double)(ent[N - 1].off + ent[N - 1].len - SEG_HDR_SIZE) / (double)live,
		      (double)seg_len / (double)live);
	assert_true((double)seg_len <= 1.25 * (double)live + (double)hdr_foot);
	assert_int_equal(seg_v3_len(len, len, N), seg_len);
	for (uint32_t i = 0; i < N; i += 97) {
		fill_pattern(data, len[i], i);
		assert_int_equal(read_whole(f, 32, dev, &ent[i], buf, len[i]), 0);
		assert_memory_equal(buf, data, len[i]);
	}
	assert_int_equal(verify(f, 32, dev, seg_len), 0);
	free(len);
	free(ent);
	free(data);
}

static void flip_byte(struct fx *f, uint64_t id, uint64_t off)
{
	char path[128];
	uint8_t b;
	int fd;

	seg_path(f, id, path, sizeof(path));
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, (off_t)off), 1);
	b ^= 0x40;
	assert_int_equal(pwrite(fd, &b, 1, (off_t)off), 1);
	close(fd);
}

/* One bad byte in one block: reads of that block fail, reads of others do not. */
static void test_v2_block_crc(void **state)
{
	struct fx *f = *state;
	const uint32_t sz = 4u << 20;
	uint8_t *data = malloc(sz), small[200];
	struct seg_entry e, e_small;
	struct seg_writer *w;
	struct seg_chunk sc;
	uint64_t seg_len;
	uint32_t dev;

	assert_non_null(data);
	fill_pattern(data, sz, 50);
	fill_pattern(small, sizeof(small), 51);
	assert_int_equal(seg_writer_new(f->st, uuid, 33, 0, &w), 0);
	assert_int_equal(seg_writer_add(w, 6, 0, 1, data, sz, &e), 0);
	assert_int_equal(seg_writer_add(w, 7, 0, 1, small, sizeof(small), &e_small), 0);
	assert_int_equal(seg_writer_finish(w, &dev, &seg_len), 0);
	/* the chunk's data starts the record: block 5 is at e.off + 5 * SEG_BLOCK */
	flip_byte(f, 33, e.off + 5 * SEG_BLOCK + 1234);
	spw_log_level = LOG_CRIT;
	uint8_t *got = malloc(3 * SEG_BLOCK);
	assert_non_null(got);
	assert_int_equal(seg_read_range(f->st, 33, dev, &e, 5 * SEG_BLOCK + 1000, 500, got),
			 -EBADMSG);
	for (uint32_t i = 0; i < 500; i++)
		assert_int_equal(got[i], 0); /* nothing unverified handed out */
	assert_int_equal(seg_read_range(f->st, 33, dev, &e, 4 * SEG_BLOCK, 3 * SEG_BLOCK, got),
			 -EBADMSG);
	assert_int_equal(seg_read_chunk(f->st, 33, dev, &e, &sc), -EBADMSG);
	spw_log_level = LOG_INFO;
	/* blocks around it are fine */
	check_range(f, 33, dev, &e, data, sz, 4 * SEG_BLOCK, SEG_BLOCK);
	check_range(f, 33, dev, &e, data, sz, 6 * SEG_BLOCK, 2 * SEG_BLOCK);
	check_range(f, 33, dev, &e, data, sz, 63 * SEG_BLOCK + 7, 100);
	/* a plain record has its one crc */
	flip_byte(f, 33, e_small.off + 199);
	spw_log_level = LOG_CRIT;
	assert_int_equal(seg_read_range(f->st, 33, dev, &e_small, 0, 10, got), -EBADMSG);
	spw_log_level = LOG_INFO;
	free(got);
	free(data);
}

/* The map cache: a partial read takes the map the writer (or a read) left
 * in the cache, checked as from disk; the blocks are still verified; a
 * record whose crc differs never gets it. */
static void test_v2_map_cache(void **state)
{
	struct fx *f = *state;
	const uint32_t sz = 3 * SEG_BLOCK + 1000;
	uint8_t *data = malloc(sz);
	struct seg_entry e, e2;
	struct seg_writer *w;
	struct seg_chunk sc;
	uint64_t seg_len;
	uint32_t dev;

	assert_non_null(data);
	fill_pattern(data, sz, 80);
	assert_int_equal(seg_writer_new(f->st, uuid, 36, 0, &w), 0);
	assert_int_equal(seg_writer_add(w, 7, 0, 1, data, sz, &e), 0);
	assert_int_equal(seg_writer_finish(w, &dev, &seg_len), 0);
	/* the map on the disk is damaged after the write: the cached copy serves */
	flip_byte(f, 36, e.off + sz + 2);
	assert_int_equal(seg_read_part(f->st, 36, dev, &e, SEG_BLOCK + 5, 100, &sc), 0);
	assert_int_equal(sc.data_len, 100);
	assert_memory_equal(sc.data, data + SEG_BLOCK + 5, 100);
	seg_chunk_free(&sc);
	/* another crc (another record at that place) is not given the cached map */
	e2 = e;
	e2.crc ^= 1;
	spw_log_level = LOG_CRIT;
	assert_int_equal(seg_read_part(f->st, 36, dev, &e2, 0, 100, &sc), -EBADMSG);
	/* a bad block is still refused with a cached map */
	flip_byte(f, 36, e.off + 10);
	assert_int_equal(seg_read_part(f->st, 36, dev, &e, 0, 100, &sc), -EBADMSG);
	flip_byte(f, 36, e.off + 10);
	/* once it is gone, the damaged map on the disk is refused */
	seg_map_cache_drop();
	assert_int_equal(seg_read_part(f->st, 36, dev, &e, SEG_BLOCK + 5, 100, &sc), -EBADMSG);
	spw_log_level = LOG_INFO;
	/* a good map read from the disk is cached again */
	flip_byte(f, 36, e.off + sz + 2);
	assert_int_equal(seg_read_part(f->st, 36, dev, &e, 0, 100, &sc), 0);
	seg_chunk_free(&sc);
	flip_byte(f, 36, e.off + sz + 2);
	assert_int_equal(seg_read_part(f->st, 36, dev, &e, 2 * SEG_BLOCK, 100, &sc), 0);
	assert_memory_equal(sc.data, data + 2 * SEG_BLOCK, 100);
	seg_chunk_free(&sc);
	free(data);
}

/* A corrupted map (extents, block crcs, or sizes) is refused. */
static void test_v2_bad_map(void **state)
{
	struct fx *f = *state;
	const uint32_t sz = 200000;
	uint8_t *data = malloc(sz), got[100];
	struct seg_entry e;
	struct seg_writer *w;
	struct seg_chunk sc;
	uint64_t seg_len, map;
	uint32_t dev, map_len = 8 + 4 * 4 + SEG_MAP_TAIL;

	assert_non_null(data);
	fill_pattern(data, sz, 60);
	assert_int_equal(seg_writer_new(f->st, uuid, 34, 0, &w), 0);
	assert_int_equal(seg_writer_add(w, 6, 0, 1, data, sz, &e), 0);
	assert_int_equal(seg_writer_finish(w, &dev, &seg_len), 0);
	assert_int_equal(e.len, sz + map_len);
	map = e.off + sz;
	spw_log_level = LOG_CRIT;
	for (uint32_t i = 0; i < map_len; i++) {
		flip_byte(f, 34, map + i);
		assert_int_equal(seg_read_chunk(f->st, 34, dev, &e, &sc), -EBADMSG);
		seg_map_cache_drop(); /* the writer left the good map in the cache */
		assert_int_equal(seg_read_range(f->st, 34, dev, &e, 1000, 100, got), -EBADMSG);
		flip_byte(f, 34, map + i);
	}
	spw_log_level = LOG_INFO;
	assert_int_equal(seg_read_chunk(f->st, 34, dev, &e, &sc), 0);
	seg_chunk_free(&sc);
	/* the index's crc must be the map's: another record's map is not taken */
	e.crc ^= 1;
	spw_log_level = LOG_CRIT;
	assert_int_equal(seg_read_chunk(f->st, 34, dev, &e, &sc), -EBADMSG);
	spw_log_level = LOG_INFO;
	free(data);
}

/* seg_read_part: the extents cut to the range, their bytes back to back,
 * only the range's blocks verified (a bad block elsewhere is not seen). */
static void test_v2_read_part(void **state)
{
	struct fx *f = *state;
	const uint32_t clen = 4u << 20;
	/* three extents: [0, 100K), [1M, 1M + 300K), [3M, 4M) */
	const struct seg_extent ext[3] = {{0, 100 << 10}, {1 << 20, 300 << 10}, {3u << 20, 1 << 20}};
	uint32_t dlen = (100 << 10) + (300 << 10) + (1 << 20), dev;
	uint8_t *data = malloc(dlen);
	struct seg_entry e;
	struct seg_writer *w;
	struct seg_chunk sc;
	uint64_t seg_len;

	assert_non_null(data);
	fill_pattern(data, dlen, 70);
	assert_int_equal(seg_writer_new(f->st, uuid, 35, 0, &w), 0);
	assert_int_equal(seg_writer_add_extents(w, 6, 0, 1, clen, ext, 3, data, &e), 0);
	assert_int_equal(seg_writer_finish(w, &dev, &seg_len), 0);
	/* [50K, 1M + 10K): the end of extent 0 and the head of extent 1 */
	assert_int_equal(seg_read_part(f->st, 35, dev, &e, 50 << 10, (1 << 20) - (40 << 10), &sc),
			 0);
	assert_int_equal(sc.next, 2);
	assert_int_equal(sc.ext[0].off, 50 << 10);
	assert_int_equal(sc.ext[0].len, 50 << 10);
	assert_int_equal(sc.ext[1].off, 1 << 20);
	assert_int_equal(sc.ext[1].len, 10 << 10);
	assert_int_equal(sc.data_len, 60 << 10);
	assert_memory_equal(sc.data, data + (50 << 10), 60 << 10);
	seg_chunk_free(&sc);
	/* a hole only */
	assert_int_equal(seg_read_part(f->st, 35, dev, &e, 2 << 20, 4096, &sc), 0);
	assert_int_equal(sc.next, 0);
	seg_chunk_free(&sc);
	/* a bad byte in the last extent's data: reads before it still verify */
	flip_byte(f, 35, e.off + dlen - 10);
	assert_int_equal(seg_read_part(f->st, 35, dev, &e, 0, 2 << 20, &sc), 0);
	assert_int_equal(sc.data_len, 400 << 10);
	assert_memory_equal(sc.data, data, 400 << 10);
	seg_chunk_free(&sc);
	spw_log_level = LOG_CRIT;
	assert_int_equal(seg_read_part(f->st, 35, dev, &e, clen - 4096, 4096, &sc), -EBADMSG);
	assert_null(sc.buf_);
	assert_int_equal(seg_read_chunk(f->st, 35, dev, &e, &sc), -EBADMSG);
	spw_log_level = LOG_INFO;
	free(data);
}

/* A segment written by the format-v1 code (tests/unit/fixtures) still reads. */
static void test_v1_fixture(void **state)
{
	static const uint32_t sz[4] = {100, 1, 5000, 70000};
	struct fx *f = *state;
	struct seg_entry *e = NULL;
	uint8_t *want = malloc(70000), *buf = malloc(70000);
	char cmd[512];
	uint32_t n, v = 0;

	assert_non_null(want);
	assert_non_null(buf);
	snprintf(cmd, sizeof(cmd), "cp '%s/seg-v1.spw' '%s/seg-0000000000000051.spw'",
		 SPW_TEST_FIXTURES, f->dir);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(seg_read_manifest(f->st, 0x51, 0, 94208, NULL, &v, &e, &n), 0);
	assert_int_equal(v, 1);
	assert_int_equal(n, 4);
	for (uint32_t i = 0; i < 4; i++) {
		assert_int_equal(e[i].ino, 42);
		assert_int_equal(e[i].chunk, i);
		assert_int_equal(e[i].gen, 7 + i);
		assert_int_equal(e[i].len, sz[i]);
		assert_int_equal(e[i].chunk_len, sz[i]);
		assert_int_equal(e[i].flags, 0);
		assert_int_equal(e[i].off % 4096, 0);
		fill_pattern(want, sz[i], 100 + i);
		assert_int_equal(read_whole(f, 0x51, 0, &e[i], buf, sz[i]), 0);
		assert_memory_equal(buf, want, sz[i]);
		check_range(f, 0x51, 0, &e[i], want, sz[i], sz[i] / 3, sz[i] / 2 + 1);
		/* a part of a v1 record: read whole (one crc), cut to the range */
		struct seg_chunk sc;
		assert_int_equal(seg_read_part(f->st, 0x51, 0, &e[i], sz[i] / 2, 4096, &sc), 0);
		assert_int_equal(sc.next, 1);
		assert_int_equal(sc.ext[0].off, sz[i] / 2);
		assert_int_equal(sc.data_len, sz[i] - sz[i] / 2 < 4096 ? sz[i] - sz[i] / 2 : 4096);
		assert_memory_equal(sc.data, want + sz[i] / 2, sc.data_len);
		seg_chunk_free(&sc);
	}
	/* v1 semantics: one crc over the whole payload */
	flip_byte(f, 0x51, e[3].off + 69999);
	spw_log_level = LOG_CRIT;
	assert_int_equal(read_whole(f, 0x51, 0, &e[3], buf, 70000), -EBADMSG);
	assert_int_equal(seg_read_range(f->st, 0x51, 0, &e[3], 0, 10, buf), -EBADMSG);
	spw_log_level = LOG_INFO;
	free(e);
	free(want);
	free(buf);
}

/* ---- add_fd from a tmpfs hot file: the read on the calling thread ---- */

/* A hot file in /dev/shm (tmpfs, as the hot tier), unlinked. */
static int shm_file(void)
{
	char tmpl[] = "/dev/shm/spw-seg-hot-XXXXXX";
	int fd = mkstemp(tmpl);

	assert_true(fd >= 0);
	unlink(tmpl);
	return fd;
}

/*
 * The SEEK_HOLE cache: chunks of the same file spilled one after another.
 * A hole punched after the walk reads back as zeros (the cache called it
 * data: its bytes are the hole's zeros); a hole the walk saw and a write
 * filled since is read as the data written (never taken as a hole); two
 * files interleaved keep their own walks.
 */
static void test_add_fd_hole_cache(void **state)
{
	struct fx *f = *state;
	const uint32_t chunk = 1u << 20;
	uint8_t *want = calloc(1, 3 * chunk), *want2 = calloc(1, 3 * chunk), *buf = malloc(chunk);
	struct seg_entry e[6];
	struct seg_chunk sc;
	struct seg_writer *w;
	uint64_t seg_len;
	uint32_t dev;
	int a = shm_file(), b = shm_file();

	assert_non_null(want);
	assert_non_null(want2);
	assert_non_null(buf);
	/* a: all data; b: all data but a 64 KiB hole in chunk 1 */
	fill_pattern(want, 3 * chunk, 60);
	assert_int_equal(pwrite(a, want, 3 * chunk, 0), (ssize_t)(3 * chunk));
	fill_pattern(want2, 3 * chunk, 61);
	memset(want2 + chunk + 65536, 0, 65536);
	assert_int_equal(pwrite(b, want2, chunk + 65536, 0), (ssize_t)(chunk + 65536));
	assert_int_equal(pwrite(b, want2 + chunk + 131072, 2 * chunk - 131072, chunk + 131072),
			 (ssize_t)(2 * chunk - 131072));

	assert_int_equal(seg_writer_new(f->st, uuid, 70, 0, &w), 0);
	assert_int_equal(seg_writer_add_fd(w, 1, 0, 1, a, 0, chunk, NULL, &e[0]), 0); /* walks a to EOF */
	assert_int_equal(seg_writer_add_fd(w, 2, 0, 1, b, 0, chunk, NULL, &e[1]), 0); /* b to its hole */
	/* after the walks: a punch in a's chunk 1, a write into b's hole */
	assert_int_equal(fallocate(a, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, chunk + 8192,
				   16384), 0);
	memset(want + chunk + 8192, 0, 16384);
	fill_pattern(want2 + chunk + 65536, 65536, 62);
	assert_int_equal(pwrite(b, want2 + chunk + 65536, 65536, chunk + 65536), 65536);
	assert_int_equal(seg_writer_add_fd(w, 1, 1, 1, a, chunk, chunk, NULL, &e[2]), 0);
	assert_int_equal(seg_writer_add_fd(w, 2, 1, 1, b, chunk, chunk, NULL, &e[3]), 0);
	assert_int_equal(seg_writer_add_fd(w, 1, 2, 1, a, 2 * chunk, chunk, NULL, &e[4]), 0);
	assert_int_equal(seg_writer_add_fd(w, 2, 2, 1, b, 2 * chunk, chunk, NULL, &e[5]), 0);
	assert_int_equal(seg_writer_finish(w, &dev, &seg_len), 0);
	assert_int_equal(verify(f, 70, dev, seg_len), 0);
	for (int i = 0; i < 6; i++) {
		const uint8_t *src = (i % 2 ? want2 : want) + (uint64_t)(i / 2) * chunk;

		assert_int_equal(read_whole(f, 70, dev, &e[i], buf, chunk), 0);
		assert_memory_equal(buf, src, chunk);
		assert_int_equal(seg_read_chunk(f->st, 70, dev, &e[i], &sc), 0);
		assert_int_equal(sc.next, 1); /* one extent each: the filled hole joined */
		assert_int_equal(sc.ext[0].off, 0);
		assert_int_equal(sc.ext[0].len, chunk);
		seg_chunk_free(&sc);
	}
	/* a fresh walk after the cache saw the file: a hole is a hole */
	assert_int_equal(fallocate(b, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 2 * chunk, 65536),
			 0);
	memset(want2 + 2 * chunk, 0, 65536);
	assert_int_equal(seg_writer_new(f->st, uuid, 71, 0, &w), 0);
	assert_int_equal(seg_writer_add_fd(w, 2, 2, 1, b, 2 * chunk, chunk, NULL, &e[0]), 0);
	assert_int_equal(seg_writer_finish(w, &dev, &seg_len), 0);
	assert_int_equal(seg_read_chunk(f->st, 71, dev, &e[0], &sc), 0);
	assert_int_equal(sc.next, 1);
	assert_int_equal(sc.ext[0].off, 65536);
	seg_chunk_free(&sc);
	assert_int_equal(read_whole(f, 71, dev, &e[0], buf, chunk), 0);
	assert_memory_equal(buf, want2 + 2 * chunk, chunk);
	close(a);
	close(b);
	free(want);
	free(want2);
	free(buf);
}

static off_t cut_to = -1;

static void cut_hook(int fd)
{
	if (cut_to >= 0)
		assert_int_equal(ftruncate(fd, cut_to), 0);
}

/*
 * A chunk truncated while it is spilled (after its extents were found,
 * before its bytes are read): -ENODATA, nothing recorded, the process alive
 * (a read, not a mapping: no SIGBUS), and the writer goes on.
 */
static void test_add_fd_truncated_during(void **state)
{
	struct fx *f = *state;
	const uint32_t chunk = 1u << 20;
	uint8_t *data = malloc(2 * chunk), *buf = malloc(chunk);
	struct seg_entry e;
	struct seg_writer *w;
	uint64_t seg_len;
	uint32_t dev;
	int hot = shm_file();

	assert_non_null(data);
	assert_non_null(buf);
	fill_pattern(data, 2 * chunk, 63);
	assert_int_equal(pwrite(hot, data, 2 * chunk, 0), (ssize_t)(2 * chunk));
	assert_int_equal(seg_writer_new(f->st, uuid, 72, 0, &w), 0);
	seg_test_add_fd_hook = cut_hook;
	cut_to = chunk + 300000; /* chunk 1 cut in its middle */
	assert_int_equal(seg_writer_add_fd(w, 1, 1, 1, hot, chunk, chunk, NULL, NULL), -ENODATA);
	cut_to = 0; /* all of it */
	assert_int_equal(pwrite(hot, data, 2 * chunk, 0), (ssize_t)(2 * chunk));
	assert_int_equal(seg_writer_add_fd(w, 1, 0, 1, hot, 0, chunk, NULL, NULL), -ENODATA);
	cut_to = -1;
	seg_test_add_fd_hook = NULL;
	assert_int_equal(seg_writer_count(w), 0);
	/* the writer goes on: the file written again, chunk 0 spilled */
	assert_int_equal(pwrite(hot, data, 2 * chunk, 0), (ssize_t)(2 * chunk));
	assert_int_equal(seg_writer_add_fd(w, 1, 0, 2, hot, 0, chunk, NULL, &e), 0);
	assert_int_equal(seg_writer_count(w), 1);
	assert_int_equal(seg_writer_finish(w, &dev, &seg_len), 0);
	assert_int_equal(verify(f, 72, dev, seg_len), 0);
	assert_int_equal(read_whole(f, 72, dev, &e, buf, chunk), 0);
	assert_memory_equal(buf, data, chunk);
	close(hot);
	free(data);
	free(buf);
}

/* A byte flipped on the disk in a chunk spilled from a tmpfs file: EIO
 * (-EBADMSG) for its block only, the blocks around it read right. */
static void test_add_fd_flipped_block(void **state)
{
	struct fx *f = *state;
	const uint32_t chunk = 1u << 20;
	uint8_t *data = malloc(2 * chunk), *got = malloc(3 * SEG_BLOCK);
	struct seg_entry e[2];
	struct seg_writer *w;
	uint64_t seg_len;
	uint32_t dev;
	int hot = shm_file();

	assert_non_null(data);
	assert_non_null(got);
	fill_pattern(data, 2 * chunk, 64);
	assert_int_equal(pwrite(hot, data, 2 * chunk, 0), (ssize_t)(2 * chunk));
	assert_int_equal(seg_writer_new(f->st, uuid, 73, 0, &w), 0);
	assert_int_equal(seg_writer_add_fd(w, 1, 0, 1, hot, 0, chunk, NULL, &e[0]), 0);
	/* the second record starts on a 4 KiB boundary too (v3: aligned) */
	assert_int_equal(seg_writer_add_fd(w, 1, 1, 1, hot, chunk, chunk, NULL, &e[1]), 0);
	assert_int_equal(e[1].off % SEG_ALIGN, 0);
	assert_int_equal(seg_writer_finish(w, &dev, &seg_len), 0);
	assert_int_equal(verify(f, 73, dev, seg_len), 0);
	flip_byte(f, 73, e[1].off + 5 * SEG_BLOCK + 77);
	spw_log_level = LOG_CRIT;
	assert_int_equal(seg_read_range(f->st, 73, dev, &e[1], 5 * SEG_BLOCK, 100, got), -EBADMSG);
	assert_int_equal(seg_read_range(f->st, 73, dev, &e[1], 4 * SEG_BLOCK, 3 * SEG_BLOCK, got),
			 -EBADMSG);
	spw_log_level = LOG_INFO;
	check_range(f, 73, dev, &e[1], data + chunk, chunk, 4 * SEG_BLOCK, SEG_BLOCK);
	check_range(f, 73, dev, &e[1], data + chunk, chunk, 6 * SEG_BLOCK, 10 * SEG_BLOCK);
	check_range(f, 73, dev, &e[0], data, chunk, 0, chunk);
	close(hot);
	free(data);
	free(got);
}

/* ---- a store that lends its buffer (put_window, as S3's part buffers) ---- */

#define MEM_PART ((1u << 20) + 8192) /* windows end off any record boundary */

struct mem_put {
	struct store_put base;
	uint8_t *data;
	size_t len, cap;
};

static struct {
	uint8_t *seg; /* the last segment finished */
	size_t seg_len;
	unsigned windows, copies; /* appends from a window / copied */
} mem;

static int mem_begin(struct store *st, uint64_t id, uint64_t hint, struct store_put **out)
{
	struct mem_put *p = calloc(1, sizeof(*p));

	assert_non_null(p);
	p->base.st = st;
	p->cap = 64u << 20;
	assert_int_equal(posix_memalign((void **)&p->data, 4096, p->cap), 0);
	*out = &p->base;
	return 0;
}

static int mem_window(struct store_put *put, void **buf, size_t *len)
{
	struct mem_put *p = (struct mem_put *)put;

	assert_true(p->len % 4096 == 0);
	*buf = p->data + p->len;
	*len = MEM_PART - p->len % MEM_PART;
	return 0;
}

static int mem_append(struct store_put *put, const void *buf, size_t len)
{
	struct mem_put *p = (struct mem_put *)put;

	assert_true(len % 4096 == 0 && (uintptr_t)buf % 4096 == 0);
	assert_true(p->len + len <= p->cap);
	if (buf == p->data + p->len) {
		assert_true(len <= MEM_PART - p->len % MEM_PART); /* inside its window */
		mem.windows++;
	} else {
		memcpy(p->data + p->len, buf, len);
		mem.copies++;
	}
	p->len += len;
	return 0;
}

static int mem_finish(struct store_put *put, uint32_t *dev)
{
	struct mem_put *p = (struct mem_put *)put;

	free(mem.seg);
	mem.seg = p->data;
	mem.seg_len = p->len;
	*dev = 0;
	free(p);
	return 0;
}

static void mem_abort(struct store_put *put)
{
	struct mem_put *p = (struct mem_put *)put;

	free(p->data);
	free(p);
}

static int mem_read(struct store *st, uint64_t id, uint32_t dev, uint64_t off, void *buf,
		    size_t len)
{
	if (off + len > mem.seg_len)
		return -EIO;
	memcpy(buf, mem.seg + off, len);
	return 0;
}

static const struct store_ops mem_ops = {
    .name = "mem",
    .put_begin = mem_begin,
    .put_append = mem_append,
    .put_window = mem_window,
    .put_finish = mem_finish,
    .put_abort = mem_abort,
    .read = mem_read,
};

/*
 * The writer stages straight into a store's window: no append copies, and
 * the segment is byte for byte the one the nvme store (the writer's own
 * stage) gets from the same chunks: sparse, dense, small, across windows.
 */
static void test_window_store_same_bytes(void **state)
{
	struct fx *f = *state;
	struct store mst = {.ops = &mem_ops};
	const uint32_t chunk = 1u << 20;
	uint8_t *data = malloc(5 * chunk), *disk = NULL, *buf = malloc(chunk);
	struct seg_entry e[6], e2[6];
	struct seg_writer *w;
	uint64_t seg_len, seg_len2;
	uint32_t dev;
	char path[128];
	int hot = shm_file(), fd;

	assert_non_null(data);
	assert_non_null(buf);
	fill_pattern(data, 5 * chunk, 65);
	assert_int_equal(pwrite(hot, data, 5 * chunk, 0), (ssize_t)(5 * chunk));
	/* chunk 1 sparse */
	assert_int_equal(fallocate(hot, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, chunk + 4096,
				   3 * 65536), 0);
	memset(data + chunk + 4096, 0, 3 * 65536);
	for (int pass = 0; pass < 2; pass++) {
		struct store *st = pass ? f->st : &mst;
		struct seg_entry *ee = pass ? e2 : e;

		assert_int_equal(seg_writer_new(st, uuid, 80, 0, &w), 0);
		for (int c = 0; c < 5; c++)
			assert_int_equal(seg_writer_add_fd(w, 3, c, 1, hot, (uint64_t)c * chunk, chunk, NULL,
							   &ee[c]), 0);
		assert_int_equal(seg_writer_add(w, 4, 0, 1, data + 7, 3000, &ee[5]), 0);
		assert_int_equal(seg_writer_finish(w, &dev, pass ? &seg_len2 : &seg_len), 0);
	}
	assert_true(mem.windows >= 5); /* 5 MiB and more through windows of 1 MiB + 8 KiB */
	assert_int_equal(mem.copies, 0);
	assert_int_equal(seg_len, seg_len2);
	assert_int_equal(mem.seg_len, seg_len);
	seg_path(f, 80, path, sizeof(path));
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	disk = malloc(seg_len);
	assert_non_null(disk);
	assert_int_equal(pread(fd, disk, seg_len, 0), (ssize_t)seg_len);
	close(fd);
	assert_memory_equal(disk, mem.seg, seg_len);
	assert_memory_equal(e, e2, sizeof(e));
	for (int c = 0; c < 5; c++) {
		assert_int_equal(read_whole(f, 80, 0, &e[c], buf, chunk), 0);
		assert_memory_equal(buf, data + (uint64_t)c * chunk, chunk);
	}
	{ /* and read back from the window store itself */
		struct seg_chunk sc;

		seg_map_cache_drop();
		assert_int_equal(seg_read_chunk(&mst, 80, 0, &e[1], &sc), 0);
		seg_chunk_free(&sc);
	}
	close(hot);
	free(disk);
	free(data);
	free(buf);
	free(mem.seg);
	mem.seg = NULL;
}


/* ---- format v3: aligned records, no bounce ---- */

/*
 * Chunk bytes [lo, hi) of e through seg_read_into against want (the
 * chunk's image, chunk_len bytes, holes as zeros): into an aligned buffer
 * and, with SEG_INTO_HOLES, into one whose holes must stay as they were.
 * Returns the bytes read in place.
 */
static uint64_t check_into(struct fx *f, uint64_t id, uint32_t dev, const struct seg_entry *e,
			   const uint8_t *want, uint32_t chunk_len, uint64_t lo, uint64_t hi)
{
	size_t room = (hi - lo + SEG_ALIGN - 1) / SEG_ALIGN * SEG_ALIGN + SEG_ALIGN;
	uint8_t *got = seg_buf_alloc(room);
	struct seg_into_stat st;

	assert_non_null(got);
	memset(got, 0xa5, room);
	assert_int_equal(seg_read_into(f->st, id, dev, e, lo, hi, got, 0, &st), 0);
	for (uint64_t i = lo; i < hi; i++)
		if (got[i - lo] != (i < chunk_len ? want[i] : 0))
			fail_msg("byte %llu of [%llu, %llu): %02x, want %02x", (unsigned long long)i,
				 (unsigned long long)lo, (unsigned long long)hi, got[i - lo],
				 i < chunk_len ? want[i] : 0);
	/* past hi: zeros (a last page read whole) or untouched, nothing else */
	for (size_t i = hi - lo; i < room; i++)
		assert_true(got[i] == 0 || got[i] == 0xa5);
	/* holes untouched: only the data bytes are written */
	memset(got, 0xa5, room);
	assert_int_equal(seg_read_into(f->st, id, dev, e, lo, hi, got, SEG_INTO_HOLES, NULL), 0);
	for (uint64_t i = lo; i < hi; i++)
		if (got[i - lo] != 0xa5 && i < chunk_len)
			assert_int_equal(got[i - lo], want[i]);
	seg_buf_free(got);
	return st.direct;
}

/*
 * The spill of a tmpfs file (4 MiB chunks, one sparse, one cut short by
 * EOF): each record on 4 KiB, its whole pages appended straight from the
 * hot file's mapping (nothing staged but a last partial page), the padding
 * under 0.5 % of the data; every reader path reads it back, and
 * seg_read_into reads block-aligned ranges in place.
 */
static void test_v3_spill_no_bounce(void **state)
{
	struct fx *f = *state;
	const uint32_t chunk = 4u << 20, tail = 3 * SEG_BLOCK + 1234;
	const uint64_t size = 3ull * chunk + tail;
	uint8_t *want = calloc(1, size);
	struct seg_entry e[4];
	struct seg_writer *w;
	uint64_t seg_len, direct, staged, data = 0, map = 0;
	uint32_t dev;
	int hot = shm_file();

	assert_non_null(want);
	fill_pattern(want, size, 90);
	/* chunk 1 sparse: a hole of 1 MiB, another of 64 KiB */
	memset(want + chunk + (1u << 20), 0, 1u << 20);
	memset(want + chunk + (3u << 20), 0, SEG_BLOCK);
	for (uint64_t o = 0; o < size; o += 1u << 20) {
		uint64_t n = size - o < (1u << 20) ? size - o : (1u << 20);
		assert_int_equal(pwrite(hot, want + o, n, (off_t)o), (ssize_t)n);
	}
	assert_int_equal(fallocate(hot, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				   (off_t)(chunk + (1u << 20)), 1u << 20), 0);
	assert_int_equal(fallocate(hot, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				   (off_t)(chunk + (3u << 20)), SEG_BLOCK), 0);
	assert_int_equal(seg_writer_new(f->st, uuid, 90, 0, &w), 0);
	/* a small record first, so the first chunk is not on 4 KiB by chance */
	assert_int_equal(seg_writer_add(w, 9, 0, 1, want, 1000, NULL), 0);
	for (int c = 0; c < 4; c++) {
		uint32_t len = c < 3 ? chunk : tail;
		assert_int_equal(seg_writer_add_fd(w, 8, c, 1, hot, (uint64_t)c * chunk, len, NULL,
						   &e[c]), 0);
		assert_int_equal(e[c].off % SEG_ALIGN, 0);
		assert_int_equal(e[c].flags, LOC_F_MAP);
	}
	seg_writer_moved(w, &direct, &staged);
	data = 2ull * chunk + (chunk - (1u << 20) - SEG_BLOCK) + tail;
	/* everything but the last partial page went straight from the pages */
	assert_true(direct == data - tail % SEG_ALIGN);
	assert_true(staged == 1000 + tail % SEG_ALIGN); /* and the small record */
	assert_int_equal(seg_writer_finish(w, &dev, &seg_len), 0);
	assert_int_equal(verify(f, 90, dev, seg_len), 0);
	for (int c = 0; c < 4; c++)
		map += e[c].len;
	map -= data;
	{
		/* padding: what is neither data nor map nor header, footer, the small record */
		uint64_t foot = seg_footer_len(e[3].off + e[3].len, 5);
		uint64_t pad = seg_len - SEG_HDR_SIZE - 1000 - data - map - foot;
		print_message("v3 padding for 4 MiB chunks: %llu bytes for %llu of data: %.4f %%\n",
			      (unsigned long long)pad, (unsigned long long)data,
			      100.0 * (double)pad / (double)data);
		assert_true((double)pad <= 0.005 * (double)data);
	}
	for (int c = 0; c < 4; c++) {
		uint32_t len = c < 3 ? chunk : tail;
		const uint8_t *img = want + (uint64_t)c * chunk;
		struct seg_chunk sc;
		uint8_t *buf = malloc(len);

		assert_non_null(buf);
		assert_int_equal(read_whole(f, 90, dev, &e[c], buf, len), 0);
		assert_memory_equal(buf, img, len);
		free(buf);
		assert_int_equal(seg_read_chunk(f->st, 90, dev, &e[c], &sc), 0);
		assert_true(seg_layout_v3_ok(&e[c], &sc));
		seg_chunk_free(&sc);
		check_range(f, 90, dev, &e[c], img, len, 5000, 70000);
		/* block-aligned ranges: in place */
		assert_true(check_into(f, 90, dev, &e[c], img, len, 0, len) > 0);
		check_into(f, 90, dev, &e[c], img, len, SEG_BLOCK, 3 * SEG_BLOCK);
		check_into(f, 90, dev, &e[c], img, len, 2 * SEG_BLOCK, len);
		/* unaligned ends: the end blocks through a window */
		check_into(f, 90, dev, &e[c], img, len, 4096, 4096 + 5000);
		check_into(f, 90, dev, &e[c], img, len, SEG_BLOCK - 4096, 2 * SEG_BLOCK + 7);
		check_into(f, 90, dev, &e[c], img, len, 8192, len + 8192); /* past the end */
		check_into(f, 90, dev, &e[c], img, len, 12345, 12346);	/* unaligned lo */
	}
	/* the sparse chunk: ranges over its holes; a range all hole */
	check_into(f, 90, dev, &e[1], want + chunk, chunk, (1u << 20) - SEG_BLOCK,
		   (2u << 20) + SEG_BLOCK);
	assert_int_equal(check_into(f, 90, dev, &e[1], want + chunk, chunk, 1u << 20, 2u << 20), 0);
	check_into(f, 90, dev, &e[1], want + chunk, chunk, (3u << 20) - 4096, (3u << 20) + 2 * SEG_BLOCK);
	close(hot);
	free(want);
}

/* add / add_extents from the caller's memory: an aligned buffer goes
 * straight to the store, an unaligned one through the stage; extents that
 * are not whole pages are widened (the bytes added are zeros), and the
 * lengths seg_v3_len predicts are the segment's. */
static void test_v3_add_buffers(void **state)
{
	struct fx *f = *state;
	const uint32_t clen = 1u << 20;
	uint8_t *al = seg_buf_alloc(clen), *img = calloc(1, clen), *packed = malloc(clen);
	static const struct seg_extent odd[3] = {{100, 5000}, {200000, 70000}, {900001, 3}};
	struct seg_entry e[5];
	struct seg_writer *w;
	struct seg_chunk sc;
	uint64_t seg_len, direct, staged;
	uint32_t dev, rl[5], dl[5], pos = 0;

	assert_non_null(al);
	assert_non_null(img);
	assert_non_null(packed);
	fill_pattern(al, clen, 91);
	for (int i = 0; i < 3; i++) {
		fill_pattern(img + odd[i].off, odd[i].len, 92 + i);
		memcpy(packed + pos, img + odd[i].off, odd[i].len);
		pos += odd[i].len;
	}
	assert_int_equal(seg_writer_new(f->st, uuid, 91, 0, &w), 0);
	assert_int_equal(seg_writer_add(w, 1, 0, 1, al, 3000, &e[0]), 0); /* dense */
	assert_int_equal(seg_writer_add(w, 1, 1, 1, al, clen, &e[1]), 0);  /* aligned, direct */
	seg_writer_moved(w, &direct, &staged);
	assert_true(direct == clen);
	assert_int_equal(seg_writer_add(w, 1, 2, 1, al + 8, clen - 8, &e[2]), 0); /* via stage */
	seg_writer_moved(w, &direct, &staged);
	assert_true(direct == clen);
	assert_true(staged >= clen - 8);
	assert_int_equal(seg_writer_add_extents(w, 1, 3, 1, clen, odd, 3, packed, &e[3]), 0);
	assert_int_equal(seg_writer_add(w, 1, 4, 1, al, 70000, &e[4]), 0); /* tail in the stage */
	assert_int_equal(seg_writer_finish(w, &dev, &seg_len), 0);
	for (int i = 1; i < 5; i++)
		assert_int_equal(e[i].off % SEG_ALIGN, 0);
	assert_int_equal(verify(f, 91, dev, seg_len), 0);
	/* the widened record: whole pages around each extent, zeros added */
	assert_int_equal(seg_read_chunk(f->st, 91, dev, &e[3], &sc), 0);
	assert_int_equal(sc.next, 3);
	assert_int_equal(sc.ext[0].off, 0);
	assert_int_equal(sc.ext[0].len, 8192);
	assert_int_equal(sc.ext[1].off, 196608);
	assert_int_equal(sc.ext[2].off, 897024);
	assert_int_equal(sc.ext[2].len, 4096);
	assert_true(seg_layout_v3_ok(&e[3], &sc));
	seg_chunk_free(&sc);
	check_into(f, 91, dev, &e[3], img, clen, 0, clen);
	check_into(f, 91, dev, &e[1], al, clen, 0, clen);
	check_into(f, 91, dev, &e[2], al + 8, clen - 8, SEG_BLOCK, clen - 8);
	check_into(f, 91, dev, &e[4], al, 70000, 0, 70000);
	check_into(f, 91, dev, &e[0], al, 3000, 0, 3000); /* plain: through a window */
	for (int i = 0; i < 5; i++)
		seg_v3_rec_size(&e[i], &rl[i], &dl[i]);
	for (int i = 0; i < 5; i++)
		assert_int_equal(rl[i], e[i].len);
	assert_int_equal(seg_v3_len(rl, dl, 5), seg_len);
	seg_buf_free(al);
	free(img);
	free(packed);
}

/* A byte flipped in an aligned record: every range whose blocks hold it,
 * read in place or through a window, is -EBADMSG; the others read. */
static void test_v3_into_corrupt(void **state)
{
	struct fx *f = *state;
	const uint32_t clen = 1u << 20;
	uint8_t *data = seg_buf_alloc(clen), *got = seg_buf_alloc(clen);
	struct seg_entry e;
	struct seg_writer *w;
	uint64_t seg_len;
	uint32_t dev;

	assert_non_null(data);
	assert_non_null(got);
	fill_pattern(data, clen, 95);
	assert_int_equal(seg_writer_new(f->st, uuid, 95, 0, &w), 0);
	assert_int_equal(seg_writer_add(w, 1, 0, 1, data, clen, &e), 0);
	assert_int_equal(seg_writer_finish(w, &dev, &seg_len), 0);
	flip_byte(f, 95, e.off + 5 * SEG_BLOCK + 77);
	spw_log_level = LOG_CRIT;
	assert_int_equal(seg_read_into(f->st, 95, dev, &e, 0, clen, got, 0, NULL), -EBADMSG);
	assert_int_equal(seg_read_into(f->st, 95, dev, &e, 5 * SEG_BLOCK, 6 * SEG_BLOCK, got, 0, NULL),
			 -EBADMSG);
	assert_int_equal(seg_read_into(f->st, 95, dev, &e, 5 * SEG_BLOCK + 4096, 5 * SEG_BLOCK + 8192,
				       got, 0, NULL), -EBADMSG); /* an edge block */
	assert_int_equal(seg_read_into(f->st, 95, dev, &e, 4096, 5 * SEG_BLOCK + 100, got, 0, NULL),
			 -EBADMSG);
	spw_log_level = LOG_INFO;
	check_into(f, 95, dev, &e, data, clen, 0, 5 * SEG_BLOCK);
	check_into(f, 95, dev, &e, data, clen, 6 * SEG_BLOCK, clen);
	check_into(f, 95, dev, &e, data, clen, 4096, 5 * SEG_BLOCK - 1);
	/* the map itself: every read of the record fails, none returns bytes */
	seg_map_cache_drop();
	flip_byte(f, 95, e.off + e.len - 20);
	spw_log_level = LOG_CRIT;
	assert_int_equal(seg_read_into(f->st, 95, dev, &e, 0, SEG_BLOCK, got, 0, NULL), -EBADMSG);
	spw_log_level = LOG_INFO;
	seg_buf_free(data);
	seg_buf_free(got);
}

/* The caller's check after a record went straight from the hot file's
 * pages: STALE drops it (no entry, its bytes padding), RECHECK keeps it
 * when the pages still hash the same and drops it when they changed. */
struct ck {
	int answer, hot;
	uint64_t off;
	int calls;
};

static int ck_fn(void *arg)
{
	struct ck *k = arg;
	uint8_t b = 0x5a;

	k->calls++;
	if (k->off != UINT64_MAX) /* a write that raced the device's read */
		assert_int_equal(pwrite(k->hot, &b, 1, (off_t)k->off), 1);
	return k->answer;
}

static void test_v3_fd_check(void **state)
{
	struct fx *f = *state;
	const uint32_t chunk = 1u << 20;
	uint8_t *data = malloc(chunk);
	struct ck k = {.hot = shm_file(), .off = UINT64_MAX};
	struct seg_fd_check ck = {.fn = ck_fn, .arg = &k};
	struct seg_entry e[2], *ents = NULL;
	struct seg_writer *w;
	uint64_t seg_len;
	uint32_t dev, n;

	assert_non_null(data);
	fill_pattern(data, chunk, 96);
	assert_int_equal(pwrite(k.hot, data, chunk, 0), (ssize_t)chunk);
	assert_int_equal(seg_writer_new(f->st, uuid, 96, 0, &w), 0);
	k.answer = SEG_FD_STALE;
	assert_int_equal(seg_writer_add_fd(w, 1, 0, 1, k.hot, 0, chunk, &ck, NULL), -ESTALE);
	assert_int_equal(k.calls, 1);
	assert_int_equal(seg_writer_count(w), 0);
	k.answer = SEG_FD_RECHECK;
	assert_int_equal(seg_writer_add_fd(w, 1, 0, 2, k.hot, 0, chunk, &ck, &e[0]), 0);
	k.off = 700000; /* the pages change before the recheck */
	assert_int_equal(seg_writer_add_fd(w, 1, 0, 3, k.hot, 0, chunk, &ck, NULL), -ESTALE);
	k.answer = SEG_FD_OK;
	k.off = UINT64_MAX;
	assert_int_equal(seg_writer_add_fd(w, 1, 0, 4, k.hot, 0, chunk, &ck, &e[1]), 0);
	assert_int_equal(k.calls, 4);
	assert_int_equal(seg_writer_count(w), 2);
	assert_int_equal(seg_writer_finish(w, &dev, &seg_len), 0);
	assert_int_equal(verify(f, 96, dev, seg_len), 0);
	assert_int_equal(seg_read_manifest(f->st, 96, dev, seg_len, NULL, NULL, &ents, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(ents[0].gen, 2);
	assert_int_equal(ents[1].gen, 4);
	free(ents);
	check_into(f, 96, dev, &e[0], data, chunk, 0, chunk);
	data[700000] = 0x5a;
	check_into(f, 96, dev, &e[1], data, chunk, 0, chunk);
	/* the stage path (as for S3): no check asked, the crcs are of the copy */
	seg_no_direct = 1;
	assert_int_equal(seg_writer_new(f->st, uuid, 97, 0, &w), 0);
	k.calls = 0;
	assert_int_equal(seg_writer_add_fd(w, 1, 0, 5, k.hot, 0, chunk, &ck, NULL), 0);
	assert_int_equal(k.calls, 0);
	assert_int_equal(seg_writer_finish(w, &dev, &seg_len), 0);
	seg_no_direct = 0;
	close(k.hot);
	free(data);
}

/* A segment written by the format-v2 code (tests/unit/fixtures/seg-v2.spw,
 * made by mkseg-v2.c): every reader path of today reads it, straight into
 * memory where a record happens to be aligned, through a window where not. */
static void test_v2_fixture(void **state)
{
	static const struct seg_extent sparse[3] = {{0, 4096}, {1u << 20, 8192}, {3u << 20, 69632}};
	struct fx *f = *state;
	struct seg_entry *e = NULL;
	uint8_t *img = calloc(1, 4u << 20), *tmp = malloc(1u << 20);
	char cmd[512];
	uint32_t n, v = 0, pos = 0;

	assert_non_null(img);
	assert_non_null(tmp);
	snprintf(cmd, sizeof(cmd), "cp '%s/seg-v2.spw' '%s/seg-0000000000000052.spw'",
		 SPW_TEST_FIXTURES, f->dir);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(seg_read_manifest(f->st, 0x52, 0, 425984, NULL, &v, &e, &n), 0);
	assert_int_equal(v, 2);
	assert_int_equal(n, 5);
	for (uint32_t i = 0; i < n; i++) {
		assert_int_equal(e[i].ino, 43);
		assert_int_equal(e[i].chunk, i);
		assert_int_equal(e[i].gen, 11 + i);
	}
	assert_int_equal(e[0].flags, 0);
	assert_int_equal(e[4].flags, LOC_F_MAP | SEG_F_OVL);
	assert_true(e[2].off % SEG_ALIGN != 0); /* packed: not aligned */
	for (uint32_t i = 0; i < 3; i++) {
		static const uint32_t sz[3] = {100, 70000, 256u << 10};
		fill_pattern(img, sz[i], 200 + i);
		assert_int_equal(read_whole(f, 0x52, 0, &e[i], tmp, sz[i]), 0);
		assert_memory_equal(tmp, img, sz[i]);
		check_range(f, 0x52, 0, &e[i], img, sz[i], sz[i] / 3, sz[i] / 2);
		assert_int_equal(check_into(f, 0x52, 0, &e[i], img, sz[i], 0, sz[i]), 0);
		check_into(f, 0x52, 0, &e[i], img, sz[i], sz[i] > 4096 ? 4096 : 0, sz[i]);
	}
	memset(img, 0, 4u << 20);
	fill_pattern(tmp, 4096 + 8192 + 69632, 203);
	for (int i = 0; i < 3; pos += sparse[i].len, i++)
		memcpy(img + sparse[i].off, tmp + pos, sparse[i].len);
	check_range(f, 0x52, 0, &e[3], img, 4u << 20, 0, 4u << 20);
	check_into(f, 0x52, 0, &e[3], img, 4u << 20, 0, 4u << 20);
	check_into(f, 0x52, 0, &e[3], img, 4u << 20, (1u << 20) - 4096, (3u << 20) + 8192);
	memset(img, 0, 4u << 20);
	fill_pattern(img + 8192, 4096, 204);
	check_into(f, 0x52, 0, &e[4], img, 4u << 20, 0, 16384);
	/* a flipped byte in the mapped 256 KiB record: caught by every path */
	flip_byte(f, 0x52, e[2].off + 100000);
	seg_map_cache_drop();
	spw_log_level = LOG_CRIT;
	assert_int_equal(read_whole(f, 0x52, 0, &e[2], tmp, 256u << 10), -EBADMSG);
	assert_int_equal(seg_read_into(f->st, 0x52, 0, &e[2], 65536, 131072,
				       (uint8_t *)((uintptr_t)(img + 4095) & ~(uintptr_t)4095), 0, NULL),
			 -EBADMSG);
	spw_log_level = LOG_INFO;
	free(e);
	free(img);
	free(tmp);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_header_roundtrip),
	    cmocka_unit_test(test_header_other_version),
	    cmocka_unit_test(test_footer_roundtrip),
	    cmocka_unit_test(test_footer_empty),
	    cmocka_unit_test(test_footer_bounds),
	    cmocka_unit_test_setup_teardown(test_write_read, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_large_segment, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_flip_every_byte, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_truncated, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_wrong_id, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_add_fd_short_and_abort, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_v3_sizes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_v2_sparse_fd, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_v2_packing, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_v2_block_crc, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_v2_bad_map, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_v2_read_part, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_v2_map_cache, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_v1_fixture, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_add_fd_hole_cache, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_add_fd_truncated_during, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_add_fd_flipped_block, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_window_store_same_bytes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_v3_spill_no_bounce, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_v3_add_buffers, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_v3_into_corrupt, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_v3_fd_check, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_v2_fixture, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
