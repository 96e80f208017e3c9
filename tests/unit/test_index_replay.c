/*
 * test_index_replay — the index's recovery path as offline tools see it:
 * records that name unknown inodes, chunk indexes past the format's bound and
 * names of missing inodes are skipped and reported to the anomaly hook;
 * idx_replay_finish reports unreachable inodes and the names it drops, keeps
 * what the hook asks it to keep, and leaves a consistent index either way.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "index/index.h"
#include "index/journal.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FMODE (S_IFREG | 0644)
#define DMODE (S_IFDIR | 0755)
#define CHUNK (4ULL << 20)

struct seen {
	struct idx_anomaly a[32];
	char names[32][64];
	int n;
	int keep; /* answer to IDX_AN_UNREACHABLE */
};

struct fx {
	struct index *idx;
	struct seen seen;
};

static int hook(void *arg, const struct idx_anomaly *a)
{
	struct seen *s = arg;
	if (s->n < 32) {
		s->a[s->n] = *a;
		snprintf(s->names[s->n], sizeof(s->names[0]), "%s", a->name ? a->name : "");
		s->a[s->n].name = s->names[s->n];
		s->n++;
	}
	return a->kind == IDX_AN_UNREACHABLE && s->keep;
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	assert_int_equal(idx_new(CHUNK, &f->idx), 0);
	idx_set_anomaly_hook(f->idx, hook, &f->seen);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	idx_free(f->idx);
	free(f);
	return 0;
}

static void rec_inode(struct index *idx, uint64_t ino, uint32_t mode)
{
	struct jrec r = {.type = JR_INODE, .ino = ino, .attr = {.mode = mode}};
	assert_int_equal(idx_replay(idx, &r), 0);
}

static void rec_link(struct index *idx, uint64_t parent, const char *name, uint64_t ino)
{
	struct jrec r = {.type = JR_LINK,
			 .parent = parent,
			 .ino = ino,
			 .name = name,
			 .name_len = (uint32_t)strlen(name)};
	assert_int_equal(idx_replay(idx, &r), 0);
}

static const struct idx_anomaly *find(const struct seen *s, enum idx_anomaly_kind k,
				      uint64_t ino)
{
	for (int i = 0; i < s->n; i++)
		if (s->a[i].kind == k && s->a[i].ino == ino)
			return &s->a[i];
	return NULL;
}

static int count_names(void *arg, uint64_t parent, const char *name, uint64_t ino)
{
	(*(int *)arg)++;
	return 0;
}

static int nnames(struct index *idx)
{
	int n = 0;
	idx_for_each_name(idx, count_names, &n);
	return n;
}

/* Records for an inode that does not exist, or that is not a file. */
static void test_unknown_inode(void **state)
{
	struct fx *f = *state;
	struct jrec x = {.type = JR_XATTR_SET, .ino = 42, .name = "user.a", .name_len = 6,
			 .value = "v", .value_len = 1};
	struct jrec c = {.type = JR_CHUNK_LOC, .ino = 43, .chunk = 2, .loc = {.seg_id = 1}};
	struct jrec d = {.type = JR_CHUNK_DIRTY, .ino = 5, .chunk = 0};

	assert_int_equal(idx_replay(f->idx, &x), 0);
	assert_int_equal(idx_replay(f->idx, &c), 0);
	rec_inode(f->idx, 5, DMODE);
	assert_int_equal(idx_replay(f->idx, &d), 0);
	assert_int_equal(f->seen.n, 3);
	assert_non_null(find(&f->seen, IDX_AN_NO_INODE, 42));
	assert_int_equal(find(&f->seen, IDX_AN_NO_INODE, 42)->rec_type, JR_XATTR_SET);
	assert_int_equal(find(&f->seen, IDX_AN_NO_INODE, 43)->chunk, 2);
	assert_non_null(find(&f->seen, IDX_AN_NOT_FILE, 5));
	/* nothing was made up for them */
	assert_null(idx_get(f->idx, 42));
	assert_null(idx_get(f->idx, 43));
}

/* Chunk indexes past the format's bound: reported, never allocated. */
static void test_chunk_out_of_range(void **state)
{
	struct fx *f = *state;
	uint64_t bad[] = {JRNL_MAX_FILE_SIZE / CHUNK, 1ull << 32, 1ull << 62, 1ull << 63,
			  UINT64_MAX};
	struct jrec ok = {.type = JR_CHUNK_LOC,
			  .ino = 7,
			  .chunk = JRNL_MAX_FILE_SIZE / CHUNK - 1,
			  .loc = {.seg_id = 3, .len = 10}};
	struct inode *in;
	struct jrec r;

	rec_inode(f->idx, 7, FMODE);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct jrec c = {.type = JR_CHUNK_LOC, .ino = 7, .chunk = bad[i]};
		f->seen.n = 0;
		assert_int_equal(idx_replay(f->idx, &c), 0);
		c.type = JR_CHUNK_DIRTY;
		assert_int_equal(idx_replay(f->idx, &c), 0);
		assert_int_equal(f->seen.n, 2);
		assert_int_equal(f->seen.a[0].kind, IDX_AN_CHUNK_RANGE);
		assert_int_equal(f->seen.a[0].chunk, bad[i]);
		assert_int_equal(f->seen.a[1].rec_type, JR_CHUNK_DIRTY);
	}
	assert_non_null(in = idx_get(f->idx, 7));
	assert_int_equal(idx_nchunks(in), 0);
	/* the last chunk a file can have is fine */
	f->seen.n = 0;
	assert_int_equal(idx_replay(f->idx, &ok), 0);
	assert_int_equal(f->seen.n, 0);
	assert_true(idx_nchunks(in) >= ok.chunk + 1);
	idx_chunk_rec(in, ok.chunk, &r);
	assert_int_equal(r.type, JR_CHUNK_LOC);
	assert_int_equal(r.loc.seg_id, 3);
	idx_chunk_rec(in, 0, &r);
	assert_int_equal(r.type, JR_CHUNK_ABSENT);
	idx_put(f->idx, in);
}

/* A name for a missing inode or in a missing directory is skipped. */
static void test_link_skipped(void **state)
{
	struct fx *f = *state;
	rec_link(f->idx, IDX_ROOT_INO, "ghost", 9);
	rec_inode(f->idx, 10, FMODE);
	rec_link(f->idx, 11, "lost", 10);
	rec_link(f->idx, 10, "in-a-file", 10);
	assert_int_equal(f->seen.n, 3);
	assert_string_equal(find(&f->seen, IDX_AN_LINK_SKIPPED, 9)->name, "ghost");
	assert_int_equal(nnames(f->idx), 0);
}

/* finish: a file named only inside an unreachable directory, a directory
 * cycle, a nameless inode; without keeping they go, names and all. */
static void test_finish_drops_and_reports(void **state)
{
	struct fx *f = *state;
	struct jrec un = {.type = JR_UNLINK, .parent = IDX_ROOT_INO, .name = "d", .name_len = 1};

	rec_inode(f->idx, 2, DMODE);
	rec_inode(f->idx, 3, FMODE);
	rec_inode(f->idx, 4, FMODE); /* nameless */
	rec_inode(f->idx, 5, FMODE);
	rec_link(f->idx, IDX_ROOT_INO, "d", 2);
	rec_link(f->idx, 2, "f", 3);
	rec_link(f->idx, IDX_ROOT_INO, "ok", 5);
	assert_int_equal(idx_replay(f->idx, &un), 0); /* /d gone, d/f left inside */
	f->seen.n = 0;
	assert_int_equal(idx_replay_finish(f->idx), 3);
	assert_int_equal(find(&f->seen, IDX_AN_UNREACHABLE, 2)->names, 0);
	assert_true(find(&f->seen, IDX_AN_UNREACHABLE, 2)->is_dir);
	assert_int_equal(find(&f->seen, IDX_AN_UNREACHABLE, 3)->names, 1);
	assert_int_equal(find(&f->seen, IDX_AN_UNREACHABLE, 4)->names, 0);
	assert_null(find(&f->seen, IDX_AN_UNREACHABLE, 5));
	assert_string_equal(find(&f->seen, IDX_AN_NAME_ORPHAN, 3)->name, "f");
	assert_int_equal(find(&f->seen, IDX_AN_NAME_ORPHAN, 3)->parent, 2);
	/* consistent: one name left, the inodes gone */
	assert_int_equal(nnames(f->idx), 1);
	assert_null(idx_get(f->idx, 2));
	assert_null(idx_get(f->idx, 3));
	assert_null(idx_get(f->idx, 4));
}

/* finish with a hook that keeps: a cycle stays with its names, nlink 0 (out
 * of checkpoints); relinked from /, the next finish finds all of it. */
static void test_finish_keeps(void **state)
{
	struct fx *f = *state;
	struct inode *a, *b;
	struct stat st;

	f->seen.keep = 1;
	rec_inode(f->idx, 2, DMODE);
	rec_inode(f->idx, 3, DMODE);
	rec_inode(f->idx, 4, FMODE);
	rec_link(f->idx, 2, "b", 3);
	rec_link(f->idx, 3, "a", 2);
	rec_link(f->idx, 3, "file", 4);
	f->seen.n = 0;
	assert_int_equal(idx_replay_finish(f->idx), 0);
	assert_int_equal(find(&f->seen, IDX_AN_UNREACHABLE, 2)->names, 1);
	assert_int_equal(find(&f->seen, IDX_AN_UNREACHABLE, 3)->names, 1);
	assert_int_equal(find(&f->seen, IDX_AN_UNREACHABLE, 4)->names, 1);
	assert_int_equal(nnames(f->idx), 3);
	assert_non_null(a = idx_find(f->idx, 2)); /* idx_get/put would destroy it */
	idx_stat(f->idx, a, &st);
	assert_int_equal(st.st_nlink, 0);

	/* rescue 2 into /, and 3 under a second name: 3 and 4 are reachable,
	 * 3's name in 2 is dropped as an alias of a directory */
	rec_link(f->idx, IDX_ROOT_INO, "rescued", 2);
	rec_link(f->idx, IDX_ROOT_INO, "alias", 3);
	{
		struct jrec un = {.type = JR_UNLINK, .parent = 3, .name = "a", .name_len = 1};
		assert_int_equal(idx_replay(f->idx, &un), 0);
	}
	f->seen.n = 0;
	assert_int_equal(idx_replay_finish(f->idx), 0);
	assert_null(find(&f->seen, IDX_AN_UNREACHABLE, 2));
	assert_null(find(&f->seen, IDX_AN_UNREACHABLE, 3));
	assert_null(find(&f->seen, IDX_AN_UNREACHABLE, 4));
	assert_int_equal(f->seen.n, 1);
	assert_int_equal(f->seen.a[0].kind, IDX_AN_DIR_ALIAS);
	assert_int_equal(f->seen.a[0].ino, 3);
	assert_string_equal(f->seen.a[0].name, "b");
	assert_int_equal(nnames(f->idx), 3);
	assert_non_null(a = idx_get(f->idx, 2));
	assert_non_null(b = idx_get(f->idx, 4));
	idx_stat(f->idx, a, &st);
	assert_int_equal(st.st_nlink, 2);
	idx_stat(f->idx, b, &st);
	assert_int_equal(st.st_nlink, 1);
	idx_put(f->idx, a);
	idx_put(f->idx, b);
}

/* Overlays (journal v2): a chain is its base (LOC), its records (OVL, each
 * with a bitmap) and, while written blocks are only in RAM, PART. The
 * records come back out as they went in, through the codec too; records
 * that do not fit a chain are skipped and reported. */
static void ovl_rec(struct jrec *r, uint64_t ino, uint64_t c, uint64_t seg, uint8_t *bits,
		    uint32_t first_blk, uint32_t nblk)
{
	memset(bits, 0, CHUNK / CHAIN_BLK / 8);
	for (uint32_t b = first_blk; b < first_blk + nblk; b++)
		bits[b / 8] |= (uint8_t)(1u << (b % 8));
	*r = (struct jrec){.type = JR_CHUNK_OVL,
			   .ino = ino,
			   .chunk = c,
			   .loc = {.seg_id = seg, .off = 4096 * seg, .len = 4096 * nblk, .crc = 7,
				   .gen = (uint32_t)seg},
			   .value = bits,
			   .value_len = CHUNK / CHAIN_BLK / 8};
}

static void test_chain_replay(void **state)
{
	struct fx *f = *state;
	uint8_t b1[CHUNK / CHAIN_BLK / 8], b2[CHUNK / CHAIN_BLK / 8], b3[CHUNK / CHAIN_BLK / 8];
	struct jrec base = {.type = JR_CHUNK_LOC,
			    .ino = 7,
			    .chunk = 2,
			    .loc = {.seg_id = 3, .off = 4096, .len = 1 << 20, .crc = 9, .gen = 1}};
	struct jrec o1, o2, part = {.type = JR_CHUNK_PART, .ino = 7, .chunk = 2};
	struct jrec rs[CHAIN_MAX + 2], back;
	struct index *idx2;
	struct inode *in, *in2;
	uint8_t buf[4096];
	int n;

	rec_inode(f->idx, 7, FMODE);
	ovl_rec(&o1, 7, 2, 4, b1, 0, 4);
	ovl_rec(&o2, 7, 2, 5, b2, 10, 1);
	assert_int_equal(idx_replay(f->idx, &base), 0);
	assert_int_equal(idx_replay(f->idx, &o1), 0);
	assert_int_equal(idx_replay(f->idx, &o2), 0);
	assert_int_equal(idx_replay(f->idx, &part), 0);
	assert_int_equal(f->seen.n, 0);
	assert_non_null(in = idx_get(f->idx, 7));
	n = idx_chunk_recs(in, 2, rs);
	assert_int_equal(n, 4);
	assert_int_equal(rs[0].type, JR_CHUNK_LOC);
	assert_int_equal(rs[0].loc.seg_id, 3);
	assert_int_equal(rs[1].type, JR_CHUNK_OVL);
	assert_int_equal(rs[1].loc.seg_id, 4);
	assert_memory_equal(rs[1].value, b1, sizeof(b1));
	assert_int_equal(rs[2].loc.seg_id, 5);
	assert_memory_equal(rs[2].value, b2, sizeof(b2));
	assert_int_equal(rs[3].type, JR_CHUNK_PART);
	/* the same records through the codec into another index */
	assert_int_equal(idx_new(CHUNK, &idx2), 0);
	rec_inode(idx2, 7, FMODE);
	for (int i = 0; i < n; i++) {
		size_t len = jrnl_encode(&rs[i], buf);
		assert_true(len <= sizeof(buf));
		assert_int_equal(jrnl_decode(buf, len, &back), (ssize_t)len);
		assert_int_equal(idx_replay(idx2, &back), 0);
	}
	assert_non_null(in2 = idx_get(idx2, 7));
	struct jrec rs2[CHAIN_MAX + 2];
	assert_int_equal(idx_chunk_recs(in2, 2, rs2), 4);
	assert_memory_equal(rs2[2].value, b2, sizeof(b2));
	assert_int_equal(rs2[2].loc.off, rs[2].loc.off);
	idx_put(idx2, in2);
	idx_free(idx2);
	/* a bitmap of another chunk size, or a chain past CHAIN_MAX: skipped */
	ovl_rec(&o1, 7, 2, 6, b3, 0, 1);
	o1.value_len--;
	assert_int_equal(idx_replay(f->idx, &o1), 0);
	assert_int_equal(f->seen.n, 1);
	assert_int_equal(f->seen.a[0].kind, IDX_AN_CHUNK_RANGE);
	o1.value_len++;
	for (int i = 2; i < CHAIN_MAX; i++)
		assert_int_equal(idx_replay(f->idx, &o1), 0);
	assert_int_equal(f->seen.n, 1);
	assert_int_equal(idx_replay(f->idx, &o1), 0);
	assert_int_equal(f->seen.n, 2);
	assert_int_equal(idx_chunk_recs(in, 2, rs), CHAIN_MAX + 2);
	/* an overlay needs a base */
	o1.chunk = 5;
	assert_int_equal(idx_replay(f->idx, &o1), 0);
	assert_int_equal(f->seen.n, 3);
	/* a new base drops the chain; a hole drops it too (ASan: no leak) */
	assert_int_equal(idx_replay(f->idx, &base), 0);
	assert_int_equal(idx_chunk_recs(in, 2, rs), 1);
	assert_int_equal(idx_replay(f->idx, &o2), 0);
	struct jrec hole = {.type = JR_CHUNK_ABSENT, .ino = 7, .chunk = 0, .count = 3};
	assert_int_equal(idx_replay(f->idx, &hole), 0);
	assert_int_equal(idx_chunk_recs(in, 2, rs), 1);
	assert_int_equal(rs[0].type, JR_CHUNK_ABSENT);
	/* and a chain left in an inode is freed with it */
	assert_int_equal(idx_replay(f->idx, &base), 0);
	assert_int_equal(idx_replay(f->idx, &o2), 0);
	idx_put(f->idx, in);
}

/* A bitmap that does not fit the record, or an empty one: a bad record. */
static void test_chain_codec_bounds(void **state)
{
	uint8_t bits[JRNL_MAX_OVL_BITMAP + 1] = {1};
	uint8_t buf[JRNL_MAX_OVL_BITMAP + 256];
	struct jrec r = {.type = JR_CHUNK_OVL,
			 .ino = 7,
			 .chunk = 1,
			 .loc = {.seg_id = 2, .len = 4096},
			 .value = bits,
			 .value_len = JRNL_MAX_OVL_BITMAP}, back;
	size_t len;
	(void)state;

	len = jrnl_encode(&r, buf);
	assert_int_equal(jrnl_decode(buf, len, &back), (ssize_t)len);
	assert_int_equal(back.value_len, JRNL_MAX_OVL_BITMAP);
	r.value_len = JRNL_MAX_OVL_BITMAP + 1;
	len = jrnl_encode(&r, buf);
	assert_int_equal(jrnl_decode(buf, len, &back), -EBADMSG);
	r.value_len = 0;
	len = jrnl_encode(&r, buf);
	assert_int_equal(jrnl_decode(buf, len, &back), -EBADMSG);
	r.value_len = 16;
	r.loc.seg_id = 0; /* an overlay is in a segment */
	len = jrnl_encode(&r, buf);
	assert_int_equal(jrnl_decode(buf, len, &back), -EBADMSG);
}

/* Without a hook nothing is reported and nothing is kept (the daemon). */
static void test_no_hook(void **state)
{
	struct fx *f = *state;
	struct jrec c = {.type = JR_CHUNK_LOC, .ino = 7, .chunk = 1ull << 62};
	idx_set_anomaly_hook(f->idx, NULL, NULL);
	f->seen.keep = 1;
	rec_inode(f->idx, 7, FMODE);
	rec_inode(f->idx, 8, FMODE);
	assert_int_equal(idx_replay(f->idx, &c), 0);
	rec_link(f->idx, IDX_ROOT_INO, "f", 7);
	assert_int_equal(idx_replay_finish(f->idx), 1);
	assert_int_equal(f->seen.n, 0);
	assert_null(idx_get(f->idx, 8));
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_unknown_inode),	       T(test_chunk_out_of_range),
	    T(test_link_skipped),	       T(test_finish_drops_and_reports),
	    T(test_finish_keeps),	       T(test_no_hook),
	    T(test_chain_replay),	       T(test_chain_codec_bounds),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
