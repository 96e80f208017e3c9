/*
 * test_store_s3_live — the S3 store against a real S3 server on loopback:
 * @20minutes/s3rver (SigV4 checked), started here by tests/s3/s3rver.js on
 * a free port in a fresh directory and killed (by pid) in the group
 * teardown; it also stops by itself when this process dies (stdin pipe).
 * Needs node and `npm ci` in tests/s3: without them the test FAILS with a
 * message saying so (it never skips).
 * Covers: open (bucket check), single PUT, multipart upload whose parts
 * start before put_finish, ranged and split reads, list, remove, abort,
 * concurrent reads, concurrent multipart puts sharing a part-buffer pool
 * smaller than puts x parts (all complete, byte-exact, the pool never over
 * its budget), and open refused for a wrong secret, a missing bucket and an
 * unreachable endpoint.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/log.h"
#include "tier/store/store_s3.h"
#include "tests/unit/s3rver_fixture.h"

#include <arpa/inet.h>
#include <dirent.h>
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
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB    (1024u * 1024)
#define BUCKET S3RVER_BUCKET
#define AK     S3RVER_AK
#define SK     S3RVER_SK
#define PART   (5u * MiB)
#define BIG    (40u * MiB)
#define SMALL  (1u * MiB)

struct live {
	struct s3rver srv;
	uint8_t *big; /* pattern bytes */
};

static struct live L = {.srv = S3RVER_INIT};

static int group_teardown(void **state);

static int group_setup(void **state)
{
	if (s3rver_start(&L.srv, "test_store_s3_live", __FILE__) < 0)
		return -1;
	if (posix_memalign((void **)&L.big, 4096, BIG)) {
		group_teardown(NULL);
		return -1;
	}
	fill_pattern(L.big, BIG, 1);
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

static struct s3_config cfg_for(const char *prefix)
{
	static char url[128];

	snprintf(url, sizeof(url), "s3://" BUCKET "/%s", prefix);
	return (struct s3_config){
	    .url = url,
	    .endpoint = L.srv.endpoint,
	    .region = "us-east-1",
	    .path_style = 1,
	    .part_size = PART,
	    .io_workers = 4,
	    .credentials_file = L.srv.creds,
	};
}

static struct store *open_ok(const char *prefix)
{
	struct s3_config cfg = cfg_for(prefix);
	struct store *st = NULL;
	char err[512] = "";
	int ret = store_s3_open(&cfg, &st, err, sizeof(err));

	if (ret)
		print_error("store_s3_open: %d %s\n", ret, err);
	assert_int_equal(ret, 0);
	assert_string_equal(err, "");
	return st;
}

/* Number of multipart uploads s3rver holds for the bucket (directories under its uploads dir). */
static int uploads_in_progress(int *parts_of_first)
{
	char path[160];
	struct dirent *de;
	DIR *d;
	int n = 0;

	snprintf(path, sizeof(path), "%s/" BUCKET "/._S3rver_uploads", L.srv.data);
	d = opendir(path);
	if (!d)
		return 0;
	while ((de = readdir(d))) {
		char sub[PATH_MAX];
		DIR *u;

		if (de->d_name[0] == '.')
			continue;
		n++;
		snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
		if (parts_of_first && (u = opendir(sub))) {
			struct dirent *pe;

			*parts_of_first = 0;
			while ((pe = readdir(u)))
				*parts_of_first +=
				    !strchr(pe->d_name, '.') && strcmp(pe->d_name, "key");
			closedir(u);
		}
	}
	closedir(d);
	return n;
}

/* Established TCP connections (both directions counted once: the client side) to the server. */
static int client_conns(void)
{
	int port = atoi(strrchr(L.srv.endpoint, ':') + 1), n = 0;
	FILE *f = fopen("/proc/net/tcp", "r");
	char line[256];

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned lport, rport, st;

		if (sscanf(line, " %*d: %*8x:%x %*8x:%x %x", &lport, &rport, &st) == 3 &&
		    (int)rport == port && st == 1)
			n++;
	}
	fclose(f);
	return n;
}

static void put_segment(struct store *st, uint64_t id, const uint8_t *data, size_t len)
{
	struct store_put *p;
	uint32_t dev = 99;

	assert_int_equal(store_put_begin(st, id, len, &p), 0);
	for (size_t off = 0; off < len; off += 4 * MiB)
		assert_int_equal(
		    store_put_append(p, data + off, len - off < 4 * MiB ? len - off : 4 * MiB), 0);
	assert_int_equal(store_put_finish(p, &dev), 0);
	assert_int_equal(dev, 0);
}

static void check_range(struct store *st, uint64_t id, const uint8_t *data, uint64_t off,
			size_t len)
{
	uint8_t *buf = NULL;

	assert_int_equal(posix_memalign((void **)&buf, 4096, len), 0);
	memset(buf, 0xee, len);
	assert_int_equal(store_read(st, id, 0, off, buf, len), 0);
	assert_memory_equal(buf, data + off, len);
	free(buf);
}

static void test_open_and_stat(void **state)
{
	struct store *st = open_ok("t1/spill");
	struct store_dev_stat ds[2];

	assert_string_equal(store_name(st), "s3");
	assert_int_equal(store_tier(st), STORE_TIER_S3);
	assert_int_equal(store_stat(st, ds, 2), 1);
	assert_string_equal(ds[0].name, "s3://" BUCKET "/t1/spill");
	assert_int_equal(ds[0].used, 0);
	assert_true(ds[0].total >= (1ull << 50));
	assert_int_equal(ds[0].avail, ds[0].total);
	assert_int_equal(ds[0].failed, 0);
	store_close(st);
}

static void test_small_put_is_single(void **state)
{
	struct store *st = open_ok("t2");
	struct store_dev_stat ds;
	struct store_put *p;
	uint32_t dev;

	assert_int_equal(uploads_in_progress(NULL), 0);
	/* Exactly one part's worth is still a single PUT. */
	assert_int_equal(store_put_begin(st, 7, PART, &p), 0);
	assert_int_equal(store_put_append(p, L.big, PART), 0);
	assert_int_equal(uploads_in_progress(NULL), 0);
	assert_int_equal(store_put_finish(p, &dev), 0);
	assert_int_equal(uploads_in_progress(NULL), 0);
	check_range(st, 7, L.big, 0, PART);
	put_segment(st, 8, L.big + 4096, SMALL);
	check_range(st, 8, L.big + 4096, 0, SMALL);
	check_range(st, 8, L.big + 4096, 8192, 4096);
	store_stat(st, &ds, 1);
	assert_int_equal(ds.used, PART + SMALL);
	/* Alignment is enforced like every store. */
	assert_int_equal(store_read(st, 8, 0, 100, L.big, 4096), -EINVAL);
	assert_int_equal(store_read(st, 8, 1, 0, L.big, 4096), -EINVAL);
	store_close(st);
}

static void test_large_put_multipart(void **state)
{
	struct store *st = open_ok("t3/spill");
	struct store_dev_stat ds;
	struct store_put *p;
	uint8_t *buf = NULL;
	uint32_t dev;
	int parts = 0, conns;

	assert_int_equal(store_put_begin(st, 0xabcdef, BIG, &p), 0);
	/* 3 parts and a page: parts 1-3 must be on their way before put_finish. */
	assert_int_equal(store_put_append(p, L.big, 3 * PART + 4096), 0);
	assert_int_equal(uploads_in_progress(&parts), 1);
	assert_int_equal(store_put_append(p, L.big + 3 * PART + 4096, BIG - 3 * PART - 4096), 0);
	assert_int_equal(store_put_finish(p, &dev), 0);
	assert_int_equal(dev, 0);
	assert_int_equal(uploads_in_progress(NULL), 0); /* completed */

	check_range(st, 0xabcdef, L.big, 0, BIG); /* 8 parallel ranged GETs */
	check_range(st, 0xabcdef, L.big, 0, 4096);
	check_range(st, 0xabcdef, L.big, PART - 4096, 8192); /* across a part boundary */
	check_range(st, 0xabcdef, L.big, 4 * MiB, 12 * MiB); /* split into 3 GETs */
	check_range(st, 0xabcdef, L.big, BIG - 4096, 4096);
	store_stat(st, &ds, 1);
	assert_int_equal(ds.used, BIG);
	/*
	 * One thread did all of this through one pooled connection set: parts
	 * and pieces went out over several connections at once (io_workers = 4),
	 * and they were reused rather than opened per request.
	 */
	conns = client_conns();
	print_message("client connections to s3rver: %d\n", conns);
	assert_in_range(conns, 2, 4);

	/* Past the end: a short read is -EIO, as on nvme; a missing segment is -ENOENT. */
	assert_int_equal(posix_memalign((void **)&buf, 4096, 8192), 0);
	spw_log_level = LOG_CRIT;
	assert_int_equal(store_read(st, 0xabcdef, 0, BIG - 4096, buf, 8192), -EIO);
	assert_int_equal(store_read(st, 0xabcdef, 0, BIG, buf, 4096), -EIO);
	assert_int_equal(store_read(st, 0xabcdee, 0, 0, buf, 4096), -ENOENT);
	spw_log_level = LOG_INFO;
	free(buf);
	store_close(st);
}

struct seen {
	uint64_t id[8], size[8];
	int n;
};

static int collect(void *arg, uint64_t id, uint32_t dev, uint64_t size)
{
	struct seen *s = arg;

	assert_int_equal(dev, 0);
	assert_true(s->n < 8);
	s->id[s->n] = id;
	s->size[s->n++] = size;
	return 0;
}

static int stop_at_first(void *arg, uint64_t id, uint32_t dev, uint64_t size)
{
	return 42;
}

static void test_list_and_remove(void **state)
{
	struct store *st = open_ok("t4");
	struct store *other = open_ok("t4/sub"); /* a nested prefix is another store */
	struct store_dev_stat ds;
	struct seen s = {0};
	uint8_t *buf = NULL;

	put_segment(st, 1, L.big, SMALL);
	put_segment(st, 2, L.big, 2 * PART + 8192);
	put_segment(other, 3, L.big, 4096);
	assert_int_equal(store_list(st, collect, &s), 0);
	assert_int_equal(s.n, 2);
	for (int i = 0; i < 2; i++)
		assert_int_equal(s.size[i], s.id[i] == 1 ? SMALL : 2 * PART + 8192);
	assert_true((s.id[0] == 1 && s.id[1] == 2) || (s.id[0] == 2 && s.id[1] == 1));
	assert_int_equal(store_list(st, stop_at_first, NULL), 42);

	assert_int_equal(store_remove(st, 1, 0), 0);
	memset(&s, 0, sizeof(s));
	assert_int_equal(store_list(st, collect, &s), 0);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.id[0], 2);
	assert_int_equal(posix_memalign((void **)&buf, 4096, 4096), 0);
	assert_int_equal(store_read(st, 1, 0, 0, buf, 4096), -ENOENT);
	assert_int_equal(store_remove(st, 1, 0), -ENOENT);
	store_stat(st, &ds, 1);
	assert_int_equal(ds.used, 2 * PART + 8192);
	assert_int_equal(store_remove(st, 2, 0), 0);
	store_stat(st, &ds, 1);
	assert_int_equal(ds.used, 0);
	memset(&s, 0, sizeof(s));
	assert_int_equal(store_list(st, collect, &s), 0);
	assert_int_equal(s.n, 0);
	memset(&s, 0, sizeof(s));
	assert_int_equal(store_list(other, collect, &s), 0);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.id[0], 3);
	free(buf);
	store_close(other);
	store_close(st);
}

static void test_put_abort(void **state)
{
	struct store *st = open_ok("t5");
	struct store_put *p;
	struct seen s = {0};
	uint8_t *buf = NULL;

	/* Multipart in flight, then abort: nothing visible under the segment's name. */
	assert_int_equal(store_put_begin(st, 5, 0, &p), 0);
	assert_int_equal(store_put_append(p, L.big, 2 * PART + 4096), 0);
	spw_log_level = LOG_ERR; /* s3rver cannot abort uploads: a warning */
	store_put_abort(p);
	/* Single-PUT size, aborted before finish: nothing was sent at all. */
	assert_int_equal(store_put_begin(st, 6, 0, &p), 0);
	assert_int_equal(store_put_append(p, L.big, 4096), 0);
	store_put_abort(p);
	spw_log_level = LOG_INFO;
	assert_int_equal(store_list(st, collect, &s), 0);
	assert_int_equal(s.n, 0);
	assert_int_equal(posix_memalign((void **)&buf, 4096, 4096), 0);
	assert_int_equal(store_read(st, 5, 0, 0, buf, 4096), -ENOENT);
	assert_int_equal(store_read(st, 6, 0, 0, buf, 4096), -ENOENT);
	/* The store is still fine for the next put of the same id. */
	put_segment(st, 5, L.big, 4096);
	check_range(st, 5, L.big, 0, 4096);
	free(buf);
	store_close(st);
}

struct reader {
	struct store *st;
	int idx, bad;
};

static void *read_thread(void *arg)
{
	struct reader *r = arg;
	uint8_t *buf = NULL;
	size_t len = 3 * MiB;

	if (posix_memalign((void **)&buf, 4096, len))
		return NULL;
	for (int k = 0; k < 4; k++) {
		uint64_t off = ((uint64_t)(r->idx * 4 + k) * 1237 * 4096) % (BIG - len);

		off -= off % 4096;
		if (store_read(r->st, 9, 0, off, buf, len) || memcmp(buf, L.big + off, len))
			r->bad++;
	}
	free(buf);
	return NULL;
}

static void test_concurrent_reads(void **state)
{
	struct store *st = open_ok("t6");
	struct reader r[4];
	pthread_t th[4];

	put_segment(st, 9, L.big, BIG);
	for (int i = 0; i < 4; i++) {
		r[i] = (struct reader){st, i, 0};
		assert_int_equal(pthread_create(&th[i], NULL, read_thread, &r[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(r[i].bad, 0);
	}
	assert_int_equal(store_remove(st, 9, 0), 0);
	store_close(st);
}

#define NWRITERS 4
#define SEG_LEN	 (3 * PART + 1 * MiB) /* 4 parts, the last one short */

struct writer {
	struct store *st;
	pthread_barrier_t *go;
	uint64_t id;
	const uint8_t *data;
	int ret;
};

/* One segment writer: 4 MiB appends, as tier/segment/segment.c stages them. */
static void *write_thread(void *arg)
{
	struct writer *w = arg;
	struct store_put *p = NULL;
	uint32_t dev;

	pthread_barrier_wait(w->go);
	w->ret = store_put_begin(w->st, w->id, SEG_LEN, &p);
	for (size_t off = 0; off < SEG_LEN && !w->ret; off += 4 * MiB)
		w->ret = store_put_append(p, w->data + off,
					  SEG_LEN - off < 4 * MiB ? SEG_LEN - off : 4 * MiB);
	if (w->ret) {
		if (p)
			store_put_abort(p);
		return NULL;
	}
	w->ret = store_put_finish(p, &dev);
	return NULL;
}

/*
 * io_workers (4) uploads at once, each wanting up to 4 parts in flight plus
 * a fill, on a pool of 1 or 2 part buffers: every upload completes, reads
 * back byte-exact, and the pool never mapped more than its budget.
 */
static void test_concurrent_puts_bounded_pool(void **state)
{
	int before = uploads_in_progress(NULL); /* test_put_abort's: s3rver cannot abort */

	for (unsigned bufs = 1; bufs <= 2; bufs++) {
		struct s3_config cfg = cfg_for(bufs == 1 ? "t9/one" : "t9/two");
		struct store *st = NULL;
		struct s3_pool_stats ps;
		struct writer w[NWRITERS];
		pthread_t th[NWRITERS];
		pthread_barrier_t go;
		char err[512] = "";

		cfg.buffer_budget = bufs * (uint64_t)PART + PART / 2; /* rounded down to bufs */
		assert_int_equal(store_s3_open(&cfg, &st, err, sizeof(err)), 0);
		assert_int_equal(store_s3_buffer_stats(st, &ps), 0);
		assert_int_equal(ps.max_bufs, bufs);
		assert_int_equal(ps.buf_size, PART);
		pthread_barrier_init(&go, NULL, NWRITERS);
		for (int i = 0; i < NWRITERS; i++) {
			w[i] = (struct writer){st, &go, 100 + i, L.big + (size_t)i * 2 * MiB, -1};
			assert_int_equal(pthread_create(&th[i], NULL, write_thread, &w[i]), 0);
		}
		for (int i = 0; i < NWRITERS; i++) {
			pthread_join(th[i], NULL);
			assert_int_equal(w[i].ret, 0);
		}
		pthread_barrier_destroy(&go);
		for (int i = 0; i < NWRITERS; i++)
			check_range(st, 100 + i, w[i].data, 0, SEG_LEN);
		assert_int_equal(store_s3_buffer_stats(st, &ps), 0);
		print_message("pool of %u: high-water %u buffers, %" PRIu64 " waits\n", ps.max_bufs,
			      ps.high, ps.waits);
		assert_in_range(ps.high, 1, bufs);
		assert_true(ps.waits > 0); /* the writers did contend for buffers */
		assert_int_equal(ps.in_use, 0);
		assert_int_equal(ps.mapped, 0); /* no put running: back to the OS */
		assert_int_equal(uploads_in_progress(NULL), before); /* all completed */
		for (int i = 0; i < NWRITERS; i++)
			assert_int_equal(store_remove(st, 100 + i, 0), 0);
		store_close(st);
	}
	/* Not an S3 store: refused. */
	assert_int_equal(store_s3_buffer_stats(NULL, &(struct s3_pool_stats){0}), -EINVAL);
}

static void test_env_credentials(void **state)
{
	struct s3_config cfg = cfg_for("t7");
	struct store *st = NULL;
	char err[512];

	cfg.credentials_file = NULL;
	setenv("AWS_ACCESS_KEY_ID", AK, 1);
	setenv("AWS_SECRET_ACCESS_KEY", SK, 1);
	assert_int_equal(store_s3_open(&cfg, &st, err, sizeof(err)), 0);
	put_segment(st, 1, L.big, 4096);
	check_range(st, 1, L.big, 0, 4096);
	store_close(st);
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
}

static void test_wrong_secret_refused(void **state)
{
	struct s3_config cfg = cfg_for("t8");
	struct store *st = NULL;
	char err[512] = "";

	cfg.credentials_file = NULL;
	setenv("AWS_ACCESS_KEY_ID", AK, 1);
	setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret", 1);
	assert_int_equal(store_s3_open(&cfg, &st, err, sizeof(err)), -EACCES);
	assert_null(st);
	assert_non_null(strstr(err, "403"));
	assert_non_null(strstr(err, "signature"));
	assert_null(strstr(err, "not-the-secret"));
	assert_null(strchr(err, '\n'));
	setenv("AWS_ACCESS_KEY_ID", "AKIAUNKNOWN", 1);
	assert_int_equal(store_s3_open(&cfg, &st, err, sizeof(err)), -EACCES);
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
}

static void test_missing_bucket_refused(void **state)
{
	struct s3_config cfg = cfg_for("x");
	struct store *st = NULL;
	char err[512] = "";

	cfg.url = "s3://no-such-bucket/x";
	assert_int_equal(store_s3_open(&cfg, &st, err, sizeof(err)), -ENOENT);
	assert_null(st);
	assert_non_null(strstr(err, "no-such-bucket"));
	assert_non_null(strstr(err, "does not exist"));
}

static void test_unreachable_refused(void **state)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof(a);
	struct s3_config cfg = cfg_for("x");
	struct store *st = NULL;
	char err[512] = "", ep[64];
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	/* A port that was free a moment ago and has no listener now. */
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
	close(fd);
	snprintf(ep, sizeof(ep), "http://127.0.0.1:%u", ntohs(a.sin_port));
	cfg.endpoint = ep;
	spw_log_level = LOG_ERR; /* the retries are warnings */
	assert_int_equal(store_s3_open(&cfg, &st, err, sizeof(err)), -EHOSTUNREACH);
	spw_log_level = LOG_INFO;
	assert_null(st);
	assert_non_null(strstr(err, "cannot reach"));
	assert_non_null(strstr(err, ep));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_open_and_stat),
	    cmocka_unit_test(test_small_put_is_single),
	    cmocka_unit_test(test_large_put_multipart),
	    cmocka_unit_test(test_list_and_remove),
	    cmocka_unit_test(test_put_abort),
	    cmocka_unit_test(test_concurrent_reads),
	    cmocka_unit_test(test_concurrent_puts_bounded_pool),
	    cmocka_unit_test(test_env_credentials),
	    cmocka_unit_test(test_wrong_secret_refused),
	    cmocka_unit_test(test_missing_bucket_refused),
	    cmocka_unit_test(test_unreachable_refused),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
