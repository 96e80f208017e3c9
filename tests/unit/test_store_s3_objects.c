/*
 * test_store_s3_objects — named objects of the S3 store (store_s3_put_object,
 * _get_object, _delete_object, _list_objects: the journal and checkpoints
 * beside the segments).
 * Live half, against @20minutes/s3rver on loopback started exactly as
 * test_store_s3_live does (tests/s3/s3rver.js, a fresh directory, killed by
 * pid in the group teardown, stdin lifeline; no node or no `npm ci`: FAIL):
 * round trips (small, empty, one part, multipart), overwrite, -ENOENT,
 * delete, paged listing with and without a sub-prefix, the segment list
 * ignoring named objects, discovery from a base prefix, traffic next to
 * segment puts from other threads, and refused names.
 * Scripted half, against the scripted server of fake_s3.c, for what s3rver
 * cannot show: the parts of a multipart object put, a failed put that
 * keeps the key, a read of an object replaced mid-way, an empty object
 * as S3 answers it (416 to a ranged GET), and which
 * unfinished uploads store_s3_open aborts (s3rver has no
 * ListMultipartUploads).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/log.h"
#include "tier/store/store_s3.h"
#include "tests/unit/fake_s3.h"
#include "tests/unit/s3rver_fixture.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB	(1024u * 1024)
#define BUCKET	S3RVER_BUCKET
#define AK	S3RVER_AK
#define SK	S3RVER_SK
#define PART	(5u * MiB)
#define BIG	(2u * PART + 12345u) /* multipart: 3 parts, the last one short and unaligned */
#define UUID_A	"0123456789abcdef0123456789abcdef"
#define UUID_B	"fedcba9876543210fedcba9876543210"

struct live {
	struct s3rver srv;
	uint8_t *big; /* pattern bytes */
};

static struct live L = {.srv = S3RVER_INIT};

static int group_teardown(void **state);

static int group_setup(void **state)
{
	if (s3rver_start(&L.srv, "test_store_s3_objects", __FILE__) < 0)
		return -1;
	if (posix_memalign((void **)&L.big, 4096, BIG + 4096)) {
		group_teardown(NULL);
		return -1;
	}
	fill_pattern(L.big, BIG + 4096, 1);
	*state = &L;
	return 0;
}

static int group_teardown(void **state)
{
	s3rver_cleanup(&L.srv);
	free(L.big);
	L.big = NULL;
	return 0;
}

static struct store *open_live(const char *prefix, unsigned list_page)
{
	char url[128], err[512] = "";
	struct s3_config cfg = {
	    .url = url,
	    .endpoint = L.srv.endpoint,
	    .region = "us-east-1",
	    .path_style = 1,
	    .part_size = PART,
	    .io_workers = 4,
	    .credentials_file = L.srv.creds,
	    .list_page = list_page,
	};
	struct store *st = NULL;
	int ret;

	snprintf(url, sizeof(url), "s3://" BUCKET "%s%s", *prefix ? "/" : "", prefix);
	spw_log_level = LOG_ERR; /* s3rver has no ListMultipartUploads: a warning at open */
	ret = store_s3_open(&cfg, &st, err, sizeof(err));
	spw_log_level = LOG_INFO;
	if (ret)
		print_error("store_s3_open %s: %d %s\n", url, ret, err);
	assert_int_equal(ret, 0);
	return st;
}

static void put_ok(struct store *st, const char *name, const void *buf, size_t len)
{
	int ret = store_s3_put_object(st, name, buf, len);

	if (ret)
		print_error("put_object %s (%zu bytes): %d\n", name, len, ret);
	assert_int_equal(ret, 0);
}

static void get_equals(struct store *st, const char *name, const void *want, size_t len)
{
	void *buf = NULL;
	size_t got = 12345678;
	int ret = store_s3_get_object(st, name, &buf, &got);

	if (ret)
		print_error("get_object %s: %d\n", name, ret);
	assert_int_equal(ret, 0);
	assert_non_null(buf);
	assert_int_equal(got, len);
	if (len)
		assert_memory_equal(buf, want, len);
	free(buf);
}

static void put_segment(struct store *st, uint64_t id, const uint8_t *data, size_t len)
{
	struct store_put *p;
	uint32_t dev = 99;

	assert_int_equal(store_put_begin(st, id, len, &p), 0);
	assert_int_equal(store_put_append(p, data, len), 0);
	assert_int_equal(store_put_finish(p, &dev), 0);
	assert_int_equal(dev, 0);
}

#define MAXSEEN 64
struct seen {
	char name[MAXSEEN][160];
	uint64_t size[MAXSEEN];
	int n, stop_after, stop_ret;
};

static int collect(void *arg, const char *name, uint64_t size)
{
	struct seen *s = arg;

	assert_true(s->n < MAXSEEN);
	assert_true(strlen(name) < sizeof(s->name[0]));
	snprintf(s->name[s->n], sizeof(s->name[0]), "%s", name);
	s->size[s->n++] = size;
	return s->stop_after && s->n == s->stop_after ? s->stop_ret : 0;
}

static int seen_index(const struct seen *s, const char *name)
{
	for (int i = 0; i < s->n; i++)
		if (!strcmp(s->name[i], name))
			return i;
	return -1;
}

static uint64_t seg_ids[MAXSEEN];
static int nseg;

static int collect_seg(void *arg, uint64_t id, uint32_t dev, uint64_t size)
{
	assert_int_equal(dev, 0);
	assert_true(nseg < MAXSEEN);
	seg_ids[nseg++] = id;
	return 0;
}

/* ---- live tests ---- */

static void test_round_trip(void **state)
{
	struct store *st = open_live("o1/" UUID_A, 0);
	struct store_dev_stat ds;

	/* Small, at an odd address and length. */
	put_ok(st, "state/small", L.big + 3, 1001);
	get_equals(st, "state/small", L.big + 3, 1001);
	/* Empty. */
	put_ok(st, "state/empty", NULL, 0);
	get_equals(st, "state/empty", NULL, 0);
	put_ok(st, "state/empty2", L.big, 0);
	get_equals(st, "state/empty2", NULL, 0);
	/* Exactly one part (single PUT), then above it (multipart from the buffer). */
	put_ok(st, "state/one-part", L.big + 1, PART);
	get_equals(st, "state/one-part", L.big + 1, PART);
	put_ok(st, "state/checkpoint.0000000000000001", L.big + 7, BIG);
	get_equals(st, "state/checkpoint.0000000000000001", L.big + 7, BIG);
	/* Just past the 1 MiB first GET: a second GET for the rest. */
	put_ok(st, "a.b_c-D/9", L.big + 5, MiB + 1);
	get_equals(st, "a.b_c-D/9", L.big + 5, MiB + 1);
	/* Named objects are not segments: the segment accounting is untouched. */
	assert_int_equal(store_stat(st, &ds, 1), 1);
	assert_int_equal(ds.used, 0);
	store_close(st);
}

static void test_overwrite(void **state)
{
	struct store *st = open_live("o2/" UUID_A, 0);
	uint8_t other[3000];

	fill_pattern(other, sizeof(other), 9);
	put_ok(st, "state/x", L.big, 5000);
	put_ok(st, "state/x", other, sizeof(other));
	get_equals(st, "state/x", other, sizeof(other));
	/* Larger (multipart) over small, then small over the multipart one: no stale tail. */
	put_ok(st, "state/x", L.big + 11, BIG);
	get_equals(st, "state/x", L.big + 11, BIG);
	put_ok(st, "state/x", other, 17);
	get_equals(st, "state/x", other, 17);
	put_ok(st, "state/x", NULL, 0);
	get_equals(st, "state/x", NULL, 0);
	store_close(st);
}

static void test_missing_and_delete(void **state)
{
	struct store *st = open_live("o3/" UUID_A, 0);
	void *buf = (void *)0x1;
	size_t len = 77;
	struct seen s = {0};

	assert_int_equal(store_s3_get_object(st, "state/none", &buf, &len), -ENOENT);
	assert_ptr_equal(buf, (void *)0x1); /* untouched on error */
	assert_int_equal(len, 77);
	assert_int_equal(store_s3_delete_object(st, "state/none"), -ENOENT);

	put_ok(st, "state/a", L.big, 100);
	put_ok(st, "state/b", L.big, BIG);
	assert_int_equal(store_s3_delete_object(st, "state/a"), 0);
	assert_int_equal(store_s3_get_object(st, "state/a", &buf, &len), -ENOENT);
	assert_int_equal(store_s3_delete_object(st, "state/a"), -ENOENT);
	assert_int_equal(store_s3_delete_object(st, "state/b"), 0);
	assert_int_equal(store_s3_get_object(st, "state/b", &buf, &len), -ENOENT);
	assert_int_equal(store_s3_list_objects(st, "", collect, &s), 0);
	assert_int_equal(s.n, 0);
	/* Gone for good: a new put of the same name starts afresh. */
	put_ok(st, "state/a", L.big + 1, 10);
	get_equals(st, "state/a", L.big + 1, 10);
	store_close(st);
}

static void test_list_pages(void **state)
{
	struct store *st = open_live("o4/" UUID_A, 4); /* 4 keys a page */
	struct seen s = {0};
	char name[64];

	for (int i = 0; i < 13; i++) {
		snprintf(name, sizeof(name), "state/journal.%04d", i);
		put_ok(st, name, L.big, (size_t)i * 10);
	}
	for (int i = 0; i < 3; i++) {
		snprintf(name, sizeof(name), "other/o%d", i);
		put_ok(st, name, L.big, 1);
	}
	put_segment(st, 1, L.big, 4096);
	put_segment(st, 2, L.big, 8192);

	/* A sub-prefix: 13 keys = 4 pages, in key order, names relative to the store. */
	assert_int_equal(store_s3_list_objects(st, "state/", collect, &s), 0);
	assert_int_equal(s.n, 13);
	for (int i = 0; i < 13; i++) {
		snprintf(name, sizeof(name), "state/journal.%04d", i);
		assert_string_equal(s.name[i], name);
		assert_int_equal(s.size[i], (uint64_t)i * 10);
	}
	/* A sub-prefix that is not a whole component. */
	memset(&s, 0, sizeof(s));
	assert_int_equal(store_s3_list_objects(st, "state/journal.000", collect, &s), 0);
	assert_int_equal(s.n, 10);
	assert_string_equal(s.name[9], "state/journal.0009");
	/* Everything: 18 keys over 5 pages, segments included. */
	memset(&s, 0, sizeof(s));
	assert_int_equal(store_s3_list_objects(st, "", collect, &s), 0);
	assert_int_equal(s.n, 18);
	assert_true(seen_index(&s, "other/o2") >= 0);
	assert_true(seen_index(&s, "seg-0000000000000002.spw") >= 0);
	assert_int_equal(s.size[seen_index(&s, "seg-0000000000000002.spw")], 8192);
	assert_true(seen_index(&s, "state/journal.0012") >= 0);
	/* fn stops the walk (on the 6th key, on the second page) and its value comes back. */
	memset(&s, 0, sizeof(s));
	s.stop_after = 6;
	s.stop_ret = 7;
	assert_int_equal(store_s3_list_objects(st, "state/", collect, &s), 7);
	assert_int_equal(s.n, 6);
	/* Nothing under a sub-prefix. */
	memset(&s, 0, sizeof(s));
	assert_int_equal(store_s3_list_objects(st, "nothing/", collect, &s), 0);
	assert_int_equal(s.n, 0);
	store_close(st);
}

static void test_segment_list_ignores_objects(void **state)
{
	struct store *st = open_live("o5/" UUID_A, 3);
	struct store *nested = open_live("o5/" UUID_A "/state", 0);

	put_segment(st, 3, L.big, 4096);
	put_ok(st, "state/checkpoint.0000000000000003", L.big, 300);
	put_ok(st, "state/journal.0000000000000004", L.big, 30);
	put_ok(st, "x/seg-0000000000000009.spw", L.big, 4096); /* nested: not ours */
	put_ok(st, "seg-0000000000000001.spw.bak", L.big, 4096);
	put_ok(st, "seg-00000000000000zz.spw", L.big, 4096);
	put_segment(st, 4, L.big, 8192);
	put_segment(nested, 5, L.big, 4096); /* a segment of another store */
	nseg = 0;
	assert_int_equal(store_list(st, collect_seg, NULL), 0);
	assert_int_equal(nseg, 2);
	assert_true((seg_ids[0] == 3 && seg_ids[1] == 4) || (seg_ids[0] == 4 && seg_ids[1] == 3));
	nseg = 0;
	assert_int_equal(store_list(nested, collect_seg, NULL), 0);
	assert_int_equal(nseg, 1);
	assert_int_equal(seg_ids[0], 5);
	/* The objects are all there for list_objects. */
	{
		struct seen s = {0};

		assert_int_equal(store_s3_list_objects(st, "", collect, &s), 0);
		assert_int_equal(s.n, 8);
	}
	store_close(nested);
	store_close(st);
}

static void test_discovery(void **state)
{
	struct store *a = open_live("disc/" UUID_A, 0), *b = open_live("disc/" UUID_B, 0);
	struct store *base, *root;
	struct seen s = {0};
	int i;

	put_ok(a, "state/checkpoint.0000000000000003", L.big, 4000);
	put_ok(a, "state/journal.0000000000000004", L.big + 1, 40);
	put_segment(a, 1, L.big, 4096);
	put_ok(b, "state/checkpoint.0000000000000001", L.big + 2, 1000);

	/* Opening at the base prefix (no uuid) lists every mount's keys, relative. */
	base = open_live("disc", 2);
	assert_int_equal(store_s3_list_objects(base, "", collect, &s), 0);
	assert_int_equal(s.n, 4);
	i = seen_index(&s, UUID_A "/state/checkpoint.0000000000000003");
	assert_true(i >= 0);
	assert_int_equal(s.size[i], 4000);
	assert_true(seen_index(&s, UUID_A "/state/journal.0000000000000004") >= 0);
	assert_true(seen_index(&s, UUID_A "/seg-0000000000000001.spw") >= 0);
	assert_true(seen_index(&s, UUID_B "/state/checkpoint.0000000000000001") >= 0);
	memset(&s, 0, sizeof(s));
	assert_int_equal(store_s3_list_objects(base, UUID_B "/state/", collect, &s), 0);
	assert_int_equal(s.n, 1);
	assert_string_equal(s.name[0], UUID_B "/state/checkpoint.0000000000000001");
	get_equals(base, UUID_A "/state/checkpoint.0000000000000003", L.big, 4000);
	/* A base store has no segments of its own. */
	nseg = 0;
	assert_int_equal(store_list(base, collect_seg, NULL), 0);
	assert_int_equal(nseg, 0);

	/* At the bucket root: full keys. */
	root = open_live("", 0);
	memset(&s, 0, sizeof(s));
	assert_int_equal(store_s3_list_objects(root, "disc/" UUID_A "/state/", collect, &s), 0);
	assert_int_equal(s.n, 2);
	assert_string_equal(s.name[0], "disc/" UUID_A "/state/checkpoint.0000000000000003");
	store_close(root);

	/* Opening the base (and the root) deleted nothing; the mounts still read theirs. */
	get_equals(a, "state/journal.0000000000000004", L.big + 1, 40);
	get_equals(b, "state/checkpoint.0000000000000001", L.big + 2, 1000);
	nseg = 0;
	assert_int_equal(store_list(a, collect_seg, NULL), 0);
	assert_int_equal(nseg, 1);
	store_close(base);
	store_close(b);
	store_close(a);
}

struct obj_thread {
	struct store *st;
	int idx, bad;
};

static void *object_thread(void *arg)
{
	struct obj_thread *t = arg;
	char name[64];

	for (int k = 0; k < 3; k++) {
		size_t len = k == 1 ? PART + MiB + 3 : 70000 + (size_t)k;
		void *buf = NULL;
		size_t got = 0;

		snprintf(name, sizeof(name), "state/t%d.%d", t->idx, k);
		if (store_s3_put_object(t->st, name, L.big + t->idx + k, len) ||
		    store_s3_get_object(t->st, name, &buf, &got) || got != len ||
		    memcmp(buf, L.big + t->idx + k, len))
			t->bad++;
		free(buf);
	}
	return NULL;
}

static void test_concurrent_with_segments(void **state)
{
	struct store *st = open_live("o6/" UUID_A, 0);
	struct obj_thread t[2];
	pthread_t th[2];
	uint8_t *buf = NULL;
	struct seen s = {0};

	for (int i = 0; i < 2; i++) {
		t[i] = (struct obj_thread){st, i, 0};
		assert_int_equal(pthread_create(&th[i], NULL, object_thread, &t[i]), 0);
	}
	/* Segment traffic meanwhile, from this thread. */
	put_segment(st, 7, L.big, 2 * PART + 4096);
	assert_int_equal(posix_memalign((void **)&buf, 4096, 2 * PART + 4096), 0);
	assert_int_equal(store_read(st, 7, 0, 0, buf, 2 * PART + 4096), 0);
	assert_memory_equal(buf, L.big, 2 * PART + 4096);
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(t[i].bad, 0);
	}
	assert_int_equal(store_s3_list_objects(st, "state/", collect, &s), 0);
	assert_int_equal(s.n, 6);
	nseg = 0;
	assert_int_equal(store_list(st, collect_seg, NULL), 0);
	assert_int_equal(nseg, 1);
	free(buf);
	store_close(st);
}

static void test_bad_names(void **state)
{
	static const char *const bad[] = {
	    "",
	    "/state/x",
	    "state/",
	    "a//b",
	    "..",
	    "a/../b",
	    "a..b",
	    "../x",
	    ".",
	    "./a",
	    "a/./b",
	    "a/.",
	    "a b",
	    "a\nb",
	    "a?b",
	    "a%2Fb",
	    "a+b",
	    "a\\b",
	    "caf\xc3\xa9",
	    "seg-0000000000000001.spw",
	    "seg-abcdefabcdef0123.spw",
	};
	struct store *st = open_live("o7/" UUID_A, 0);
	char dir[] = "/tmp/spw-s3obj-nvme-XXXXXX", cmd[64], *longname;
	const char *dirs[1] = {dir};
	struct store *nv = NULL;
	struct seen s = {0};
	void *buf = NULL;
	size_t len = 0;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (store_s3_put_object(st, bad[i], "x", 1) != -EINVAL)
			fail_msg("put_object accepted \"%s\"", bad[i]);
		assert_int_equal(store_s3_get_object(st, bad[i], &buf, &len), -EINVAL);
		assert_int_equal(store_s3_delete_object(st, bad[i]), -EINVAL);
	}
	assert_int_equal(store_s3_put_object(st, NULL, "x", 1), -EINVAL);
	assert_int_equal(store_s3_put_object(st, "state/x", NULL, 1), -EINVAL);
	/* Listing prefixes: "" and a trailing '/' are fine, the rest as names. */
	assert_int_equal(store_s3_list_objects(st, "/state", collect, &s), -EINVAL);
	assert_int_equal(store_s3_list_objects(st, "a..b", collect, &s), -EINVAL);
	assert_int_equal(store_s3_list_objects(st, "a//", collect, &s), -EINVAL);
	assert_int_equal(store_s3_list_objects(st, "a b", collect, &s), -EINVAL);
	assert_int_equal(store_s3_list_objects(st, NULL, collect, &s), -EINVAL);
	assert_int_equal(store_s3_list_objects(st, "", NULL, NULL), -EINVAL);
	/* Longer than S3's 1024-byte keys. */
	longname = malloc(1100);
	assert_non_null(longname);
	memset(longname, 'k', 1099);
	longname[1099] = 0;
	assert_int_equal(store_s3_put_object(st, longname, "x", 1), -ENAMETOOLONG);
	free(longname);
	/* Nothing reached the bucket; the valid neighbours of the refused names do. */
	assert_int_equal(store_s3_list_objects(st, "", collect, &s), 0);
	assert_int_equal(s.n, 0);
	put_ok(st, ".hidden", "x", 1);
	put_ok(st, "x/seg-0000000000000001.spw", "x", 1);
	put_ok(st, "seg-0000000000000001.spw.tmp", "x", 1);
	put_ok(st, "A-Z_a-z.0-9", "x", 1);
	assert_int_equal(store_s3_list_objects(st, "", collect, &s), 0);
	assert_int_equal(s.n, 4);
	/* Not an S3 store. */
	assert_non_null(mkdtemp(dir));
	assert_int_equal(store_nvme_open(dirs, 1, &nv), 0);
	assert_int_equal(store_s3_put_object(nv, "state/x", "x", 1), -EINVAL);
	assert_int_equal(store_s3_get_object(nv, "state/x", &buf, &len), -EINVAL);
	assert_int_equal(store_s3_delete_object(nv, "state/x"), -EINVAL);
	assert_int_equal(store_s3_list_objects(nv, "", collect, &s), -EINVAL);
	store_close(nv);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
	store_close(st);
}

/* ---- a scripted S3 server on loopback (fake_s3.c), and its script ---- */

struct fake {
	struct fake_s3 *srv;
	pthread_mutex_t lock; /* the script's counters below */
	/* script, set while no request is in flight */
	const char *uploads_xml; /* the ListMultipartUploads answer (filtered by prefix) */
	int complete_status;	 /* status of CompleteMultipartUpload, 0: 200 */
	int put_status;		 /* status of a single PUT, 0: 200 */
	/* what a multipart upload assembled (parts at (N-1) * PART), protected by lock */
	uint8_t *asm_buf;
	size_t asm_cap, asm_len;
	size_t part_len[16];
	/* GET: the object served is v[0] for the first get_switch GETs, then v[1] */
	const uint8_t *v[2];
	size_t vlen;
	int gets, get_switch; /* gets: protected by lock */
	int empty;	      /* GET: a 0-byte object, answered as S3 does (416 to a Range) */
	struct store *st;
};

static struct fake F;

/* The uploads of F.uploads_xml whose key starts with the request's prefix= (decoded). */
static char *fake_uploads(const char *target)
{
	const char *p = strstr(target, "prefix="), *u = F.uploads_xml;
	char prefix[256] = "";
	size_t k = 0;
	FILE *f;
	char *out = NULL;
	size_t outlen = 0;

	for (p = p ? p + 7 : ""; *p && *p != '&' && k < sizeof(prefix) - 1; p++) {
		if (*p == '%' && p[1] && p[2]) {
			char hex[3] = {p[1], p[2], 0};

			prefix[k++] = (char)strtol(hex, NULL, 16);
			p += 2;
		} else {
			prefix[k++] = *p;
		}
	}
	prefix[k] = 0;
	f = open_memstream(&out, &outlen);
	fputs("<ListMultipartUploadsResult><Bucket>bkt</Bucket><IsTruncated>false</IsTruncated>",
	      f);
	while (u && (u = strstr(u, "<Upload><Key>"))) {
		const char *key = u + 13, *end = strstr(u, "</Upload>") + 9;

		if (!strncmp(key, prefix, strlen(prefix)))
			fprintf(f, "%.*s", (int)(end - u), u);
		u = end;
	}
	fputs("</ListMultipartUploadsResult>", f);
	fclose(f);
	return out;
}

/* Answer one request: status, extra header lines, body (malloc'ed or static in *keep). */
static int fake_answer(const char *method, const char *target, const char *headers,
		       const char *body, size_t blen, char *hdrs, size_t hlen, char **resp,
		       size_t *rlen)
{
	static const char initiate[] = "<InitiateMultipartUploadResult><Bucket>bkt</Bucket>"
				       "<Key>k</Key><UploadId>up1</UploadId>"
				       "</InitiateMultipartUploadResult>";
	static const char complete[] = "<CompleteMultipartUploadResult><ETag>\"c\"</ETag>"
				       "</CompleteMultipartUploadResult>";
	static const char denied[] = "<Error><Code>AccessDenied</Code><Message>no</Message>"
				     "</Error>";
	char range[64];
	int part;

	*resp = NULL;
	*rlen = 0;
	hdrs[0] = 0;
	if (!strcmp(method, "HEAD") && !strcmp(target, "/bkt"))
		return 200;
	if (!strcmp(method, "GET") && strstr(target, "uploads=")) {
		*resp = fake_uploads(target);
		*rlen = strlen(*resp);
		return 200;
	}
	if (!strcmp(method, "DELETE"))
		return 204;
	if (!strcmp(method, "POST") && strstr(target, "?uploads=")) {
		*resp = strdup(initiate);
		*rlen = strlen(initiate);
		return 200;
	}
	if (!strcmp(method, "PUT") &&
	    sscanf(strstr(target, "partNumber=") ?: "", "partNumber=%d", &part) == 1) {
		size_t off = (size_t)(part - 1) * PART;

		pthread_mutex_lock(&F.lock);
		if (part >= 1 && part <= 16 && off + blen <= F.asm_cap) {
			memcpy(F.asm_buf + off, body, blen);
			F.part_len[part - 1] = blen;
			if (off + blen > F.asm_len)
				F.asm_len = off + blen;
		}
		pthread_mutex_unlock(&F.lock);
		snprintf(hdrs, hlen, "ETag: \"p%d\"\r\n", part);
		return 200;
	}
	if (!strcmp(method, "POST") && strstr(target, "uploadId=")) {
		if (F.complete_status) {
			*resp = strdup(denied);
			*rlen = strlen(denied);
			return F.complete_status;
		}
		*resp = strdup(complete);
		*rlen = strlen(complete);
		return 200;
	}
	if (!strcmp(method, "PUT")) {
		if (F.put_status) {
			*resp = strdup(denied);
			*rlen = strlen(denied);
			return F.put_status;
		}
		snprintf(hdrs, hlen, "ETag: \"s\"\r\n");
		return 200;
	}
	if (!strcmp(method, "GET") && F.empty && fake_s3_header(headers, "Range", range, sizeof(range))) {
		static const char bad_range[] = "<Error><Code>InvalidRange</Code></Error>";

		*resp = strdup(bad_range);
		*rlen = strlen(bad_range);
		return 416;
	}
	if (!strcmp(method, "GET") && F.vlen && fake_s3_header(headers, "Range", range, sizeof(range))) {
		unsigned long long a = 0, b = 0;
		int g, ver;

		pthread_mutex_lock(&F.lock);
		g = F.gets++;
		pthread_mutex_unlock(&F.lock);
		ver = g >= F.get_switch;
		sscanf(range, "bytes=%llu-%llu", &a, &b);
		if (b >= F.vlen)
			b = F.vlen - 1;
		*resp = malloc(b - a + 1);
		memcpy(*resp, F.v[ver] + a, b - a + 1);
		*rlen = b - a + 1;
		snprintf(hdrs, hlen, "ETag: \"v%d\"\r\nContent-Range: bytes %llu-%llu/%zu\r\n", ver,
			 a, b, F.vlen);
		return 206;
	}
	(void)body;
	return 500;
}

/* The script as a fake_s3 handler. */
static void fake_handler(const struct fake_s3_req *rq, struct fake_s3_resp *r)
{
	char *resp;
	size_t rlen;

	r->status = fake_answer(rq->method, rq->target, rq->headers, rq->body, rq->len,
				r->headers, sizeof(r->headers), &resp, &rlen);
	r->body = resp;
	r->len = rlen;
	r->owned = resp;
}

static int fake_setup(void **state)
{
	memset(&F, 0, sizeof(F));
	pthread_mutex_init(&F.lock, NULL);
	F.asm_cap = 16 * PART;
	F.asm_buf = malloc(F.asm_cap);
	F.srv = F.asm_buf ? fake_s3_start() : NULL;
	if (!F.srv) {
		free(F.asm_buf);
		return -1;
	}
	fake_s3_set_handler(F.srv, fake_handler);
	return 0;
}

static int fake_teardown(void **state)
{
	store_close(F.st); /* closes the client connections: the conn threads end */
	F.st = NULL;
	fake_s3_stop(F.srv);
	pthread_mutex_destroy(&F.lock);
	free(F.asm_buf);
	spw_log_level = LOG_INFO;
	return 0;
}

static struct store *fake_open(const char *prefix)
{
	char ep[64], err[256], url[128];
	struct s3_config cfg = {
	    .url = url, .endpoint = ep, .path_style = 1, .part_size = PART, .io_workers = 2};
	struct store *st = NULL;

	snprintf(url, sizeof(url), "s3://bkt/%s", prefix);
	snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", fake_s3_port(F.srv));
	assert_int_equal(store_s3_open(&cfg, &st, err, sizeof(err)), 0);
	return st;
}

static int fake_count(const char *prefix)
{
	return fake_s3_count(F.srv, prefix);
}

static int fake_count_exact(const char *req)
{
	return fake_s3_count_exact(F.srv, req);
}

static int fake_total(void)
{
	return fake_s3_total(F.srv);
}

/* Forget the requests so far and what the script saw of them. */
static void fake_reset_log(void)
{
	fake_s3_reset_log(F.srv);
	pthread_mutex_lock(&F.lock);
	F.gets = 0;
	F.asm_len = 0;
	memset(F.part_len, 0, sizeof(F.part_len));
	pthread_mutex_unlock(&F.lock);
}

static void test_fake_multipart_parts(void **state)
{
	size_t len = 2 * PART + 2 * MiB + 5;
	uint8_t *data = malloc(len + 1);

	assert_non_null(data);
	fill_pattern(data, len + 1, 3);
	F.st = fake_open("p/" UUID_A);
	fake_reset_log();
	/* Above part_size: initiate, three parts straight from the buffer, complete. */
	assert_int_equal(
	    store_s3_put_object(F.st, "state/checkpoint.0000000000000002", data + 1, len), 0);
	assert_int_equal(fake_count("POST /bkt/p/" UUID_A "/state/checkpoint.0000000000000002"
				    "?uploads="),
			 1);
	assert_int_equal(fake_count("PUT /bkt/p/" UUID_A "/state/checkpoint.0000000000000002"
				    "?partNumber="),
			 3);
	assert_int_equal(fake_count("POST /bkt/p/" UUID_A "/state/checkpoint.0000000000000002"
				    "?uploadId=up1"),
			 1);
	assert_int_equal(
	    fake_count_exact("PUT /bkt/p/" UUID_A "/state/checkpoint.0000000000000002"), 0);
	assert_int_equal(fake_total(), 5);
	assert_int_equal(F.part_len[0], PART);
	assert_int_equal(F.part_len[1], PART);
	assert_int_equal(F.part_len[2], 2 * MiB + 5);
	assert_int_equal(F.asm_len, len);
	assert_memory_equal(F.asm_buf, data + 1, len);
	/* Exactly part_size: one PUT. */
	fake_reset_log();
	assert_int_equal(store_s3_put_object(F.st, "state/one", data, PART), 0);
	assert_int_equal(fake_total(), 1);
	assert_int_equal(fake_count_exact("PUT /bkt/p/" UUID_A "/state/one"), 1);
	free(data);
}

static void test_fake_failed_put_keeps_key(void **state)
{
	size_t len = PART + 1;
	uint8_t *data = calloc(1, len);

	assert_non_null(data);
	F.st = fake_open("p/" UUID_A);
	spw_log_level = LOG_EMERG; /* the failures are logged as errors */
	/* A multipart put whose complete is refused: aborted, and the key (the previous
	 * version) is not deleted, unlike a failed segment put. */
	fake_reset_log();
	F.complete_status = 403;
	assert_int_equal(store_s3_put_object(F.st, "state/c", data, len), -EIO);
	F.complete_status = 0;
	assert_int_equal(fake_count("DELETE /bkt/p/" UUID_A "/state/c?uploadId=up1"), 1);
	assert_int_equal(fake_count_exact("DELETE /bkt/p/" UUID_A "/state/c"), 0);
	assert_int_equal(fake_count("DELETE"), 1);
	/* A single PUT refused: -EACCES (not retried), nothing deleted. */
	fake_reset_log();
	F.put_status = 403;
	assert_int_equal(store_s3_put_object(F.st, "state/j", data, 10), -EACCES);
	F.put_status = 0;
	assert_int_equal(fake_total(), 1);
	assert_int_equal(fake_count("DELETE"), 0);
	spw_log_level = LOG_INFO;
	free(data);
}

static void test_fake_get_replaced_midway(void **state)
{
	size_t len = 3 * MiB + 100;
	uint8_t *v0 = malloc(len), *v1 = malloc(len);
	void *buf = NULL;
	size_t got = 0;

	assert_true(v0 && v1);
	fill_pattern(v0, len, 4);
	fill_pattern(v1, len, 5);
	F.st = fake_open("p/" UUID_A);
	F.v[0] = v0;
	F.v[1] = v1;
	F.vlen = len;
	/* The first GET (1 MiB) sees version 0, the rest version 1: the ETags differ, so
	 * the whole object is read again, all of version 1. */
	F.get_switch = 1;
	fake_reset_log();
	spw_log_level = LOG_ERR; /* the change is a warning */
	assert_int_equal(store_s3_get_object(F.st, "state/x", &buf, &got), 0);
	spw_log_level = LOG_INFO;
	assert_int_equal(got, len);
	assert_memory_equal(buf, v1, len);
	assert_int_equal(fake_count("GET /bkt/p/" UUID_A "/state/x"), 4);
	free(buf);
	/* Unchanged: a 1 MiB GET and one ranged GET for the rest. */
	F.get_switch = 1000;
	fake_reset_log();
	assert_int_equal(store_s3_get_object(F.st, "state/x", &buf, &got), 0);
	assert_int_equal(got, len);
	assert_memory_equal(buf, v0, len);
	assert_int_equal(fake_count("GET /bkt/p/" UUID_A "/state/x"), 2);
	free(buf);
	F.vlen = 0;
	/* Empty: S3 answers the first ranged GET with 416 InvalidRange. */
	F.empty = 1;
	fake_reset_log();
	assert_int_equal(store_s3_get_object(F.st, "state/e", &buf, &got), 0);
	F.empty = 0;
	assert_non_null(buf);
	assert_int_equal(got, 0);
	assert_int_equal(fake_total(), 1);
	free(buf);
	free(v0);
	free(v1);
}

/*
 * store_s3_open's clean-up of unfinished multipart uploads: a mount store
 * (<base>/<uuid>) aborts segment uploads of its own and of sibling uuids,
 * never a state object's; a store at the base prefix aborts only segment
 * uploads directly under the base (none of a mount's).
 */
static void test_fake_open_abort_scope(void **state)
{
	static const char uploads[] =
	    "<Upload><Key>base/" UUID_A "/seg-0000000000000001.spw</Key><UploadId>u1</UploadId>"
	    "</Upload>"
	    "<Upload><Key>base/" UUID_B "/seg-0000000000000002.spw</Key><UploadId>u2</UploadId>"
	    "</Upload>"
	    "<Upload><Key>base/" UUID_A "/state/checkpoint.0000000000000003</Key>"
	    "<UploadId>u3</UploadId></Upload>"
	    "<Upload><Key>base/" UUID_B "/state/checkpoint.0000000000000001</Key>"
	    "<UploadId>u4</UploadId></Upload>"
	    "<Upload><Key>base/seg-0000000000000004.spw</Key><UploadId>u5</UploadId></Upload>"
	    "<Upload><Key>base/" UUID_A "/x/seg-0000000000000005.spw</Key><UploadId>u6</UploadId>"
	    "</Upload>"
	    "<Upload><Key>other/" UUID_A "/seg-0000000000000006.spw</Key><UploadId>u7</UploadId>"
	    "</Upload>";
	struct store *st;

	F.uploads_xml = uploads;
	fake_reset_log();
	st = fake_open("base/" UUID_A);
	assert_int_equal(fake_count("GET /bkt?prefix=base%2F&uploads="), 1);
	assert_int_equal(fake_count("DELETE /bkt/base/" UUID_A "/seg-0000000000000001.spw"
				    "?uploadId=u1"),
			 1);
	assert_int_equal(fake_count("DELETE /bkt/base/" UUID_B "/seg-0000000000000002.spw"
				    "?uploadId=u2"),
			 1);
	assert_int_equal(fake_count("DELETE"), 2);
	store_close(st);

	fake_reset_log();
	st = fake_open("base");
	assert_int_equal(fake_count("GET /bkt?prefix=base%2F&uploads="), 1);
	assert_int_equal(fake_count("DELETE /bkt/base/seg-0000000000000004.spw?uploadId=u5"), 1);
	assert_int_equal(fake_count("DELETE"), 1);
	store_close(st);
	F.uploads_xml = NULL;
}

int main(void)
{
	const struct CMUnitTest live[] = {
	    cmocka_unit_test(test_round_trip),
	    cmocka_unit_test(test_overwrite),
	    cmocka_unit_test(test_missing_and_delete),
	    cmocka_unit_test(test_list_pages),
	    cmocka_unit_test(test_segment_list_ignores_objects),
	    cmocka_unit_test(test_discovery),
	    cmocka_unit_test(test_concurrent_with_segments),
	    cmocka_unit_test(test_bad_names),
	};
	const struct CMUnitTest fake[] = {
	    cmocka_unit_test_setup_teardown(test_fake_multipart_parts, fake_setup, fake_teardown),
	    cmocka_unit_test_setup_teardown(test_fake_failed_put_keeps_key, fake_setup,
					    fake_teardown),
	    cmocka_unit_test_setup_teardown(test_fake_get_replaced_midway, fake_setup,
					    fake_teardown),
	    cmocka_unit_test_setup_teardown(test_fake_open_abort_scope, fake_setup, fake_teardown),
	};
	int failed =
	    cmocka_run_group_tests_name("live (s3rver)", live, group_setup, group_teardown);

	failed += cmocka_run_group_tests_name("scripted server", fake, NULL, NULL);
	return failed;
}
