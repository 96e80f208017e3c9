/*
 * test_segment — segment format: encode/decode round trips, every single
 * flipped byte of header, payload or footer detected, truncation detected,
 * and the writer/readers over a real nvme store in a temp directory.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/crc32c.h"
#include "common/log.h"
#include "tier/segment.h"
#include "tier/store.h"

#include <errno.h>
#include <fcntl.h>
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
	assert_int_equal(buf[8], 1); /* version, little-endian */
	assert_int_equal(buf[32], 0x88);
	assert_int_equal(buf[39], 0x11);
	assert_int_equal(seg_header_decode(buf, out, &id), 0);
	assert_memory_equal(out, uuid, 16);
	assert_true(id == 0x1122334455667788ull);
	for (size_t i = 0; i < SEG_HDR_SIZE; i++) {
		buf[i] ^= 0x01;
		assert_int_equal(seg_header_decode(buf, out, &id), -EIO);
		buf[i] ^= 0x01;
	}
	assert_int_equal(seg_header_decode(buf, out, &id), 0);
}

static void test_header_other_version(void **state)
{
	uint8_t buf[SEG_HDR_SIZE];
	uint64_t id;
	uint32_t crc;

	seg_header_encode(buf, uuid, 5);
	buf[8] = 2;
	/* Recompute the crc (crc32c of [0, 4092), stored little-endian at 4092). */
	crc = crc32c(0, buf, SEG_HDR_SIZE - 4);
	for (int i = 0; i < 4; i++)
		buf[SEG_HDR_SIZE - 4 + i] = (uint8_t)(crc >> (8 * i));
	assert_int_equal(seg_header_decode(buf, NULL, &id), -ENOTSUP);
}

static const struct seg_entry sample[3] = {
    {.ino = 42, .chunk = 0, .gen = 7, .off = 4096, .len = 8192, .crc = 0xdeadbeef},
    {.ino = 42, .chunk = 1, .gen = 9, .off = 12288, .len = 5000, .crc = 0x01020304},
    {.ino = 1ull << 40, .chunk = 3, .gen = 1, .off = 20480, .len = 1, .crc = 0},
};

static void test_footer_roundtrip(void **state)
{
	uint64_t body_end = 20480 + 1;
	uint32_t flen = seg_footer_len(body_end, 3), fl2, n = 0;
	uint64_t seg_len = body_end + flen;
	struct seg_entry *e = NULL;
	uint8_t *buf;

	assert_int_equal(seg_len % 4096, 0);
	assert_true(flen >= 3 * SEG_ENTRY_SIZE + SEG_TRAILER_SIZE);
	buf = malloc(flen);
	assert_non_null(buf);
	seg_footer_encode(buf, flen, sample, 3);
	assert_memory_equal(buf + flen - 8, "SPWFOOT1", 8);
	assert_int_equal(seg_trailer_decode(buf + flen - SEG_TRAILER_SIZE, seg_len, &fl2), 0);
	assert_int_equal(fl2, flen);
	assert_int_equal(seg_footer_decode(buf, flen, seg_len, &e, &n), 0);
	assert_int_equal(n, 3);
	assert_memory_equal(e, sample, sizeof(sample));
	free(e);
	/* Every flipped bit pattern in every byte of the footer is caught. */
	for (uint32_t i = 0; i < flen; i++) {
		for (int bit = 0; bit < 8; bit += 7) {
			buf[i] ^= (uint8_t)(1u << bit);
			e = NULL;
			assert_int_equal(seg_footer_decode(buf, flen, seg_len, &e, &n), -EIO);
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
	assert_int_equal(seg_footer_decode(buf, flen, 8192, &e, &n), 0);
	assert_int_equal(n, 0);
	assert_null(e);
}

/* A footer with a valid crc but an entry outside the data area is refused. */
static void test_footer_bounds(void **state)
{
	struct seg_entry bad[1] = {{.ino = 1, .off = 4096, .len = 8193}};
	uint32_t flen = seg_footer_len(4096 + 8192, 1), n;
	uint64_t seg_len = 4096 + 8192 + flen;
	struct seg_entry *e = NULL;
	uint8_t buf[4096];

	seg_footer_encode(buf, flen, bad, 1);
	assert_int_equal(seg_footer_decode(buf, flen, seg_len, &e, &n), -EIO);
	bad[0].len = 8192;
	bad[0].off = 4097;
	seg_footer_encode(buf, flen, bad, 1);
	assert_int_equal(seg_footer_decode(buf, flen, seg_len, &e, &n), -EIO);
	bad[0].off = 0; /* inside the header */
	seg_footer_encode(buf, flen, bad, 1);
	assert_int_equal(seg_footer_decode(buf, flen, seg_len, &e, &n), -EIO);
	bad[0].off = 4096;
	seg_footer_encode(buf, flen, bad, 1);
	assert_int_equal(seg_footer_decode(buf, flen, seg_len, &e, &n), 0);
	free(e);
	/* The segment length must be aligned and hold header + footer. */
	assert_int_equal(seg_trailer_decode(buf + flen - SEG_TRAILER_SIZE, seg_len + 1, &n), -EIO);
	assert_int_equal(seg_trailer_decode(buf + flen - SEG_TRAILER_SIZE, 4096, &n), -EIO);
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

	ret = seg_read_manifest(f->st, id, dev, len, got_uuid, &e, &n);
	if (ret < 0)
		return ret;
	if (memcmp(got_uuid, uuid, 16) != 0) {
		free(e);
		return -EBADMSG;
	}
	for (uint32_t i = 0; i < n && ret == 0; i++) {
		void *buf = seg_buf_alloc(e[i].len);

		assert_non_null(buf);
		ret = seg_read_chunk(f->st, id, dev, &e[i], buf);
		seg_buf_free(buf);
	}
	free(e);
	return ret;
}

static void test_write_read(void **state)
{
	struct fx *f = *state;
	uint8_t *data = malloc(20000 + 1);
	char tmpl[] = "/var/tmp/spw-seg-hot-XXXXXX";
	struct seg_entry ent[3], *e = NULL;
	struct seg_writer *w;
	uint64_t seg_len;
	uint32_t dev = 99, n;
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
	assert_int_equal(seg_writer_bytes(w), 4096 + 5000);
	/* From an fd, at an offset. */
	assert_int_equal(seg_writer_add_fd(w, 11, 2, 5, hot, 333, 12000, &ent[1]), 0);
	assert_int_equal(ent[1].off, 12288);
	assert_int_equal(seg_writer_add(w, 12, 0, 1, data, 1, &ent[2]), 0);
	assert_int_equal(ent[2].off, 12288 + 12288);
	assert_int_equal(seg_writer_count(w), 3);
	assert_int_equal(seg_writer_finish(w, &dev, &seg_len), 0);
	assert_int_equal(dev, 0);
	assert_int_equal(seg_len % 4096, 0);
	assert_int_equal(seg_len, 12288 + 12288 + 4096); /* footer fits after chunk 3 */

	assert_int_equal(seg_read_manifest(f->st, 77, 0, seg_len, NULL, &e, &n), 0);
	assert_int_equal(n, 3);
	assert_memory_equal(e, ent, sizeof(ent));
	for (int i = 0; i < 3; i++) {
		uint8_t *buf = seg_buf_alloc(e[i].len);
		const uint8_t *want = i == 0 ? data + 1 : i == 1 ? data + 333 : data;

		assert_non_null(buf);
		assert_int_equal(seg_read_chunk(f->st, 77, 0, &e[i], buf), 0);
		assert_memory_equal(buf, want, e[i].len);
		seg_buf_free(buf);
	}
	free(e);
	close(hot);
	free(data);
}

/* Payloads larger than the staging buffer, crossing flush boundaries. */
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
	assert_int_equal(seg_writer_add_fd(w, 1, 1, 1, hot, 0, sz[1], &ent[1]), 0);
	assert_int_equal(seg_writer_add(w, 1, 2, 1, data[2], sz[2], &ent[2]), 0);
	assert_int_equal(seg_writer_finish(w, &dev, &seg_len), 0);
	assert_int_equal(verify(f, 78, dev, seg_len), 0);
	for (int i = 0; i < 3; i++) {
		uint8_t *buf = seg_buf_alloc(sz[i]);

		assert_int_equal(seg_read_chunk(f->st, 78, dev, &ent[i], buf), 0);
		assert_memory_equal(buf, data[i], sz[i]);
		seg_buf_free(buf);
		free(data[i]);
	}
	close(hot);
}

static void write_small(struct fx *f, uint64_t id, uint64_t *seg_len, uint32_t *dev)
{
	uint8_t data[2][8192];
	struct seg_writer *w;

	fill_pattern(data[0], 8192, 1);
	fill_pattern(data[1], 8192, 2);
	assert_int_equal(seg_writer_new(f->st, uuid, id, 0, &w), 0);
	assert_int_equal(seg_writer_add(w, 5, 0, 1, data[0], 8192, NULL), 0);
	assert_int_equal(seg_writer_add(w, 5, 1, 1, data[1], 8192, NULL), 0);
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
	assert_int_equal(seg_len, 4096 + 2 * 8192 + 4096);
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
	assert_int_equal(seg_writer_add_fd(w, 1, 0, 1, hot, 0, 200, NULL), -ENODATA);
	assert_int_equal(seg_writer_add(w, 1, 0, 1, data, 0, NULL), -EINVAL);
	assert_int_equal(seg_writer_add_fd(w, 1, 0, 1, hot, 0, 100, NULL), 0);
	assert_int_equal(seg_writer_count(w), 1);
	assert_int_equal(seg_writer_finish(w, &dev, &seg_len), 0);
	assert_int_equal(seg_read_manifest(f->st, 9, dev, seg_len, NULL, &e, &n), 0);
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
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
