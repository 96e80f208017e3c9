/*
 * test_store_s3 — the S3 store's offline parts: the retry schedule (full
 * jitter bounds, throttling base, cap, Retry-After), the credentials file
 * check (mode, profiles, environment, messages free of secrets), s3:// URL
 * and segment key parsing, request building (URL, Host, signed headers,
 * byte-exact against the S3 reference example) and the configuration
 * checks of store_s3_open that need no server; and, against a scripted
 * HTTP server on loopback, the retry and failure paths a real server will
 * not produce on demand: 503 SlowDown then success, a truncated body, a
 * short object, fail-fast 4xx, CompleteMultipartUpload answering 200 with
 * <Error> (aborted, or retried for InternalError), a failed part, list
 * pagination, stale-upload clean-up at open, HEAD+DELETE on remove. The
 * live half (s3rver) is test_store_s3_live.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/log.h"
#include "tier/store/store_s3.h"
#include "tests/unit/fake_s3.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define SECRET	     "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"

static void test_backoff_bounds(void **state)
{
	for (unsigned a = 0; a < 12; a++) {
		uint64_t ceil = 100ull << a, tceil = 500ull << a;

		if (ceil > S3_BACKOFF_CAP_MS)
			ceil = S3_BACKOFF_CAP_MS;
		if (tceil > S3_BACKOFF_CAP_MS)
			tceil = S3_BACKOFF_CAP_MS;
		/* rnd % (ceil + 1): the whole [0, ceil] range is reachable, nothing above. */
		assert_int_equal(s3_backoff_ms(a, 0, ceil), ceil);
		assert_int_equal(s3_backoff_ms(a, 0, ceil + 1), 0);
		assert_int_equal(s3_backoff_ms(a, 0, 0), 0);
		assert_int_equal(s3_backoff_ms(a, 1, tceil), tceil);
		assert_true(s3_backoff_ms(a, 0, UINT64_MAX) <= ceil);
		assert_true(s3_backoff_ms(a, 1, UINT64_MAX) <= tceil);
	}
	assert_int_equal(s3_backoff_ms(0, 0, 100), 100);
	assert_int_equal(s3_backoff_ms(1, 0, 200), 200);
	assert_int_equal(s3_backoff_ms(0, 1, 500), 500);
	/* Huge attempt numbers neither overflow nor pass the cap. */
	assert_int_equal(s3_backoff_ms(63, 0, S3_BACKOFF_CAP_MS), S3_BACKOFF_CAP_MS);
	assert_int_equal(s3_backoff_ms(1000, 1, S3_BACKOFF_CAP_MS), S3_BACKOFF_CAP_MS);
	assert_int_equal(s3_backoff_ms(4000000000u, 0, S3_BACKOFF_CAP_MS + 1), 0);
}

static void test_backoff_full_jitter_spread(void **state)
{
	uint64_t x = 88172645463325252ull, sum = 0;
	uint32_t lo = UINT32_MAX, hi = 0;
	const int n = 20000;

	for (int i = 0; i < n; i++) {
		uint32_t d;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		d = s3_backoff_ms(3, 0, x); /* ceiling 800 ms */
		assert_true(d <= 800);
		lo = d < lo ? d : lo;
		hi = d > hi ? d : hi;
		sum += d;
	}
	/* Full jitter: uniform over [0, 800], mean ~400 (not "ceiling minus a little"). */
	assert_true(lo < 20);
	assert_true(hi > 780);
	assert_in_range(sum / n, 380, 420);
}

static void test_retry_after(void **state)
{
	assert_int_equal(s3_retry_delay_ms(0, 0, 0, 42), s3_backoff_ms(0, 0, 42));
	assert_int_equal(s3_retry_delay_ms(0, 0, 3, 42), 3000);
	assert_int_equal(s3_retry_delay_ms(0, 1, 1, 0), 1000);
	/* Longer backoff wins over a short Retry-After; everything is capped. */
	assert_int_equal(s3_retry_delay_ms(8, 0, 1, 15000), 15000);
	assert_int_equal(s3_retry_delay_ms(0, 0, 3600, 0), S3_BACKOFF_CAP_MS);
}

struct credfx {
	char dir[64];
	char path[96];
};

static int cred_setup(void **state)
{
	struct credfx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/spw-s3cred-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/credentials", f->dir);
	unsetenv("AWS_PROFILE");
	*state = f;
	return 0;
}

static int cred_teardown(void **state)
{
	struct credfx *f = *state;

	unlink(f->path);
	rmdir(f->dir);
	unsetenv("AWS_PROFILE");
	free(f);
	return 0;
}

static void write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

static const char *cred_text = "# spillway test\n"
			       "[other]\n"
			       "aws_access_key_id = AKIAOTHER\n"
			       "aws_secret_access_key = othersecret\n"
			       "\n"
			       "[default]\n"
			       "aws_access_key_id=AKIAIOSFODNN7EXAMPLE\n"
			       "  aws_secret_access_key =  " SECRET "  \r\n"
			       "; a comment\n"
			       "region = eu-west-1\n"
			       "[session]\n"
			       "aws_access_key_id = ASIASESSION\n"
			       "aws_secret_access_key = s3cr3t\n"
			       "aws_session_token = FwoGZXIvYXdzEXAMPLETOKEN==\n";

static void test_creds_file_mode_refused(void **state)
{
	struct credfx *f = *state;
	const mode_t bad[] = {0644, 0640, 0604, 0620, 0660, 0601};
	struct s3_creds c;
	char err[512];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_file(f->path, cred_text, bad[i]);
		err[0] = 0;
		assert_int_equal(s3_credentials_load(f->path, &c, err, sizeof(err)), -EACCES);
		assert_null(c.access_key);
		assert_non_null(strstr(err, "group or others"));
		assert_non_null(strstr(err, "0600"));
		assert_non_null(strstr(err, f->path));
		assert_null(strstr(err, SECRET));
	}
}

static void test_creds_file_default_profile(void **state)
{
	struct credfx *f = *state;
	struct s3_creds c;
	char err[256];

	write_file(f->path, cred_text, 0600);
	assert_int_equal(s3_credentials_load(f->path, &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key, "AKIAIOSFODNN7EXAMPLE");
	assert_string_equal(c.secret_key, SECRET);
	assert_null(c.session_token);
	s3_credentials_free(&c);
	assert_null(c.access_key);
	write_file(f->path, cred_text, 0400);
	assert_int_equal(s3_credentials_load(f->path, &c, err, sizeof(err)), 0);
	s3_credentials_free(&c);
}

static void test_creds_file_profiles(void **state)
{
	struct credfx *f = *state;
	struct s3_creds c;
	char err[256];

	write_file(f->path, cred_text, 0600);
	setenv("AWS_PROFILE", "session", 1);
	assert_int_equal(s3_credentials_load(f->path, &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key, "ASIASESSION");
	assert_string_equal(c.secret_key, "s3cr3t");
	assert_string_equal(c.session_token, "FwoGZXIvYXdzEXAMPLETOKEN==");
	s3_credentials_free(&c);
	setenv("AWS_PROFILE", "other", 1);
	assert_int_equal(s3_credentials_load(f->path, &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key, "AKIAOTHER");
	s3_credentials_free(&c);
	setenv("AWS_PROFILE", "nope", 1);
	assert_int_equal(s3_credentials_load(f->path, &c, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "[nope]"));
}

static void test_creds_file_errors(void **state)
{
	struct credfx *f = *state;
	struct s3_creds c;
	char err[256];

	write_file(f->path, "[default]\naws_access_key_id = AKIA\n", 0600);
	assert_int_equal(s3_credentials_load(f->path, &c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "aws_secret_access_key"));
	unlink(f->path);
	assert_int_equal(s3_credentials_load(f->path, &c, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, f->path));
	assert_int_equal(s3_credentials_load(f->dir, &c, err, sizeof(err)), -EINVAL);
}

static void test_creds_env(void **state)
{
	struct s3_creds c;
	char err[256];

	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	unsetenv("AWS_SESSION_TOKEN");
	assert_int_equal(s3_credentials_load(NULL, &c, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "AWS_ACCESS_KEY_ID"));
	setenv("AWS_ACCESS_KEY_ID", "AKIAENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
	assert_int_equal(s3_credentials_load(NULL, &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key, "AKIAENV");
	assert_string_equal(c.secret_key, "envsecret");
	assert_null(c.session_token);
	s3_credentials_free(&c);
	setenv("AWS_SESSION_TOKEN", "tok", 1);
	assert_int_equal(s3_credentials_load(NULL, &c, err, sizeof(err)), 0);
	assert_string_equal(c.session_token, "tok");
	s3_credentials_free(&c);
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	unsetenv("AWS_SESSION_TOKEN");
}

static void url_ok(const char *url, const char *bucket, const char *prefix)
{
	char *b, *p;

	assert_int_equal(s3_url_parse(url, &b, &p), 0);
	assert_string_equal(b, bucket);
	assert_string_equal(p, prefix);
	free(b);
	free(p);
}

static void test_url_parse(void **state)
{
	const char *bad[] = {
	    "bucket/prefix",	"s3:/bucket",	     "s3://",
	    "s3://ab",		"s3://-bucket/x",    "s3://bu cket/x",
	    "s3://bucket/a//b", "s3://bucket/a/./b", "s3://bucket/../x",
	    "s3://bucket/a\nb", "http://bucket/x",
	};
	char *b = (char *)1, *p = (char *)1;

	url_ok("s3://bucket", "bucket", "");
	url_ok("s3://bucket/", "bucket", "");
	url_ok("s3://my.bucket-1/spill", "my.bucket-1", "spill");
	url_ok("s3://bucket//a/b/c//", "bucket", "a/b/c");
	url_ok("s3://bucket/node 7/spill", "bucket", "node 7/spill");
	spw_log_level = LOG_EMERG; /* the reasons are logged; keep the output quiet */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(s3_url_parse(bad[i], &b, &p), -EINVAL);
		assert_null(b);
		assert_null(p);
	}
	assert_int_equal(s3_url_parse(NULL, &b, &p), -EINVAL);
	spw_log_level = LOG_INFO;
	{
		char err[256] = "";

		assert_int_equal(s3_url_parse_err("s3://bucket/a/../b", &b, &p, err, sizeof(err)),
				 -EINVAL);
		assert_non_null(strstr(err, "s3://bucket/a/../b"));
		assert_non_null(strstr(err, "'..'"));
		assert_int_equal(s3_url_parse_err("s3://B!/x", &b, &p, err, sizeof(err)), -EINVAL);
		assert_non_null(strstr(err, "bucket name"));
	}
}

static void test_seg_key(void **state)
{
	char *k = s3_seg_key("a/b", 0x0123456789abcdefull);
	uint64_t id = 0;

	assert_string_equal(k, "a/b/seg-0123456789abcdef.spw");
	assert_int_equal(s3_seg_key_parse("a/b", k, &id), 0);
	assert_int_equal(id, 0x0123456789abcdefull);
	assert_int_equal(s3_seg_key_parse("a", k, &id), -1);
	assert_int_equal(s3_seg_key_parse("", k, &id), -1);
	free(k);
	k = s3_seg_key("", 255);
	assert_string_equal(k, "seg-00000000000000ff.spw");
	assert_int_equal(s3_seg_key_parse("", k, &id), 0);
	assert_int_equal(id, 255);
	free(k);
	assert_int_equal(s3_seg_key_parse("p", "p/seg-00000000000000FF.spw", &id), -1);
	assert_int_equal(s3_seg_key_parse("p", "p/seg-00000000000000ff.spw.tmp", &id), -1);
	assert_int_equal(s3_seg_key_parse("p", "p/x/seg-00000000000000ff.spw", &id), -1);
	assert_int_equal(s3_seg_key_parse("p", "pseg-00000000000000ff.spw", &id), -1);
}

static const char *find_header(const struct s3_req *r, const char *name)
{
	size_t n = strlen(name);

	for (int i = 0; i < r->nheaders; i++)
		if (!strncasecmp(r->headers[i], name, n) && r->headers[i][n] == ':')
			return r->headers[i] + n + 2;
	return NULL;
}

static void test_req_build_s3_reference(void **state)
{
	struct s3_creds cr = {"AKIAIOSFODNN7EXAMPLE", SECRET, NULL};
	struct s3_target t = {"https://s3.amazonaws.com", "us-east-1", "examplebucket", 0};
	struct s3_req_spec rq = {"GET", "test.txt", NULL, 0, "bytes=0-9", EMPTY_SHA256};
	struct s3_req r;

	/* Fri, 24 May 2013 00:00:00 GMT */
	assert_int_equal(s3_req_build(&t, &cr, &rq, 1369353600, &r), 0);
	assert_string_equal(r.url, "https://examplebucket.s3.amazonaws.com/test.txt");
	assert_string_equal(find_header(&r, "Host"), "examplebucket.s3.amazonaws.com");
	assert_string_equal(find_header(&r, "x-amz-date"), "20130524T000000Z");
	assert_string_equal(find_header(&r, "x-amz-content-sha256"), EMPTY_SHA256);
	assert_string_equal(find_header(&r, "Range"), "bytes=0-9");
	assert_null(find_header(&r, "x-amz-security-token"));
	assert_string_equal(
	    r.headers[r.nheaders - 1],
	    "Authorization: AWS4-HMAC-SHA256 "
	    "Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
	    "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
	    "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
	s3_req_free(&r);
}

static void test_req_build_path_style(void **state)
{
	struct s3_creds cr = {"AK", "SK", "TOKEN+/="};
	struct s3_target t = {"http://127.0.0.1:9000/", "eu-west-1", "bkt", 1};
	const struct sigv4_kv q[] = {{"uploadId", "a/b+c"}, {"partNumber", "12"}};
	struct s3_req_spec rq = {"PUT", "p q/seg-0000000000000001.spw", q, 2, NULL, EMPTY_SHA256};
	struct s3_req r;
	const char *auth;

	assert_int_equal(s3_req_build(&t, &cr, &rq, 1369353600, &r), 0);
	assert_string_equal(r.url, "http://127.0.0.1:9000/bkt/p%20q/seg-0000000000000001.spw"
				   "?partNumber=12&uploadId=a%2Fb%2Bc");
	assert_string_equal(find_header(&r, "Host"), "127.0.0.1:9000");
	assert_string_equal(find_header(&r, "x-amz-security-token"), "TOKEN+/=");
	assert_null(find_header(&r, "Range"));
	auth = find_header(&r, "Authorization");
	assert_non_null(auth);
	assert_non_null(strstr(auth, "Credential=AK/20130524/eu-west-1/s3/aws4_request, "));
	assert_non_null(strstr(auth, "SignedHeaders=host;x-amz-content-sha256;x-amz-date;"
				     "x-amz-security-token, "));
	/* The secret itself never appears in anything built. */
	for (int i = 0; i < r.nheaders; i++)
		assert_null(strstr(r.headers[i], "SK"));
	s3_req_free(&r);

	/* The bucket itself: "/" virtual-hosted, "/bkt" path-style. */
	rq = (struct s3_req_spec){"HEAD", NULL, NULL, 0, NULL, EMPTY_SHA256};
	assert_int_equal(s3_req_build(&t, &cr, &rq, 0, &r), 0);
	assert_string_equal(r.url, "http://127.0.0.1:9000/bkt");
	s3_req_free(&r);
	t.path_style = 0;
	assert_int_equal(s3_req_build(&t, &cr, &rq, 0, &r), 0);
	assert_string_equal(r.url, "http://bkt.127.0.0.1:9000/");
	assert_string_equal(find_header(&r, "Host"), "bkt.127.0.0.1:9000");
	s3_req_free(&r);
}

static void test_req_build_bad_endpoint(void **state)
{
	const char *bad[] = {"ftp://host",	  "host:9000",	       "https://",
			     "https://host/path", "https://user@host", "https://ho st"};
	struct s3_creds cr = {"AK", "SK", NULL};
	struct s3_req_spec rq = {"GET", "k", NULL, 0, NULL, EMPTY_SHA256};
	struct s3_req r;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct s3_target t = {bad[i], "us-east-1", "bkt", 1};

		assert_int_equal(s3_req_build(&t, &cr, &rq, 0, &r), -EINVAL);
		assert_null(r.url);
	}
}

/* Configuration errors store_s3_open reports before any network access. */
static void test_open_config_errors(void **state)
{
	struct s3_config cfg = {.url = "s3://bucket/p", .endpoint = "http://127.0.0.1:1"};
	struct store *st = NULL;
	char err[256];

	setenv("AWS_ACCESS_KEY_ID", "AK", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "SK", 1);
	spw_log_level = LOG_EMERG;
	cfg.url = "bucket/p";
	assert_int_equal(store_s3_open(&cfg, &st, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "bucket/p"));
	cfg.url = "s3://bucket/p";
	cfg.part_size = 1 << 20;
	assert_int_equal(store_s3_open(&cfg, &st, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "s3_part_size"));
	cfg.part_size = 0;
	cfg.endpoint = "127.0.0.1:9000";
	assert_int_equal(store_s3_open(&cfg, &st, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "s3_endpoint"));
	cfg.endpoint = "http://127.0.0.1:1";
	cfg.ca_file = "/nonexistent/ca.pem";
	assert_int_equal(store_s3_open(&cfg, &st, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "s3_ca_file"));
	cfg.ca_file = NULL;
	unsetenv("AWS_ACCESS_KEY_ID");
	assert_int_equal(store_s3_open(&cfg, &st, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "AWS_ACCESS_KEY_ID"));
	assert_null(st);
	unsetenv("AWS_SECRET_ACCESS_KEY");
	spw_log_level = LOG_INFO;
}

/* ---- a scripted S3 server on loopback, for retries and protocol paths ---- */

/* The server (fake_s3.c) and what a test keeps beside it. */
struct fake {
	struct fake_s3 *srv;
	int port;
	struct store *st;
	uint8_t data[16384]; /* the object served by GETs */
};

static struct fake *FK;

static int fake_setup(void **state)
{
	struct fake *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->srv = fake_s3_start();
	assert_non_null(f->srv);
	f->port = fake_s3_port(f->srv);
	for (size_t i = 0; i < sizeof(f->data); i++)
		f->data[i] = (uint8_t)(i * 7 + i / 4096);
	FK = f;
	*state = f;
	return 0;
}

static int fake_teardown(void **state)
{
	struct fake *f = *state;

	store_close(f->st); /* closes the client connections: the conn threads end */
	fake_s3_stop(f->srv);
	spw_log_level = LOG_INFO;
	free(f);
	FK = NULL;
	return 0;
}

static void fake_open(struct fake *f, fake_s3_fn fn)
{
	char ep[64], err[256];
	struct s3_config cfg = {.url = "s3://bkt/p",
				.endpoint = ep,
				.path_style = 1,
				.part_size = 5u << 20,
				.io_workers = 2};

	snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", f->port);
	fake_s3_set_handler(f->srv, fn);
	spw_log_level = LOG_EMERG; /* retries are expected here; keep the output clean */
	assert_int_equal(store_s3_open(&cfg, &f->st, err, sizeof(err)), 0);
}

static int count_of(const char *method, const char *target_part)
{
	return fake_s3_count_of(FK->srv, method, target_part);
}

static void put_bytes(struct store *st, uint64_t id, size_t len, int expect)
{
	static uint8_t buf[4096] __attribute__((aligned(4096)));
	struct store_put *p;
	uint32_t dev;
	int ret = 0;

	memset(buf, 0x3c, sizeof(buf));
	assert_int_equal(store_put_begin(st, id, len, &p), 0);
	for (size_t off = 0; off < len && !ret; off += sizeof(buf))
		ret = store_put_append(p, buf, sizeof(buf));
	if (ret) {
		assert_int_equal(ret, expect);
		store_put_abort(p);
		return;
	}
	assert_int_equal(store_put_finish(p, &dev), expect);
}

#define SLOWDOWN                                                                                   \
	"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"

static void fn_put_throttled(const struct fake_s3_req *rq, struct fake_s3_resp *r)
{
	if (strcmp(rq->method, "PUT"))
		return;
	if (count_of("PUT", "/bkt/p/seg-") <= 2) {
		r->status = 503;
		snprintf(r->headers, sizeof(r->headers), "Retry-After: 0\r\n");
		r->body = SLOWDOWN;
		r->len = strlen(SLOWDOWN);
	} else {
		r->status = 200;
		snprintf(r->headers, sizeof(r->headers), "ETag: \"abc\"\r\n");
	}
}

static void test_fake_put_retried_on_slowdown(void **state)
{
	struct fake *f = *state;

	fake_open(f, fn_put_throttled);
	put_bytes(f->st, 1, 8192, 0);
	assert_int_equal(fake_s3_count(f->srv, "PUT /bkt/p/seg-0000000000000001.spw"), 3);
	assert_int_equal(fake_s3_hash_bad(f->srv), 0);
	assert_int_equal(fake_s3_auth_missing(f->srv), 0);
}

/* GETs: the requested range of f->data; the first one is cut short (truncated body). */
static void fn_get_truncated_once(const struct fake_s3_req *rq, struct fake_s3_resp *r)
{
	char range[64];
	unsigned long a, b;

	if (strcmp(rq->method, "GET") || !strstr(rq->target, "/seg-"))
		return;
	if (!fake_s3_header(rq->headers, "Range", range, sizeof(range)) ||
	    sscanf(range, "bytes=%lu-%lu", &a, &b) != 2 || b >= sizeof(FK->data)) {
		r->status = 416;
		return;
	}
	r->status = 206;
	snprintf(r->headers, sizeof(r->headers), "Content-Range: bytes %lu-%lu/%zu\r\n", a, b,
		 sizeof(FK->data));
	r->body = FK->data + a;
	r->len = b - a + 1;
	if (count_of("GET", "/seg-") == 1)
		r->send_only = 100;
}

static void test_fake_read_truncated_retried(void **state)
{
	struct fake *f = *state;
	static uint8_t buf[8192] __attribute__((aligned(4096)));

	fake_open(f, fn_get_truncated_once);
	assert_int_equal(store_read(f->st, 2, 0, 4096, buf, 8192), 0);
	assert_memory_equal(buf, f->data + 4096, 8192);
	assert_int_equal(count_of("GET", "/bkt/p/seg-0000000000000002.spw"), 2);
	/* Asking past the end of a 16 KiB object: a short read, -EIO without retrying. */
	assert_int_equal(store_read(f->st, 2, 0, 12288, buf, 8192), -EIO);
	assert_int_equal(count_of("GET", "/bkt/p/seg-0000000000000002.spw"), 3);
}

static void fn_get_short_206(const struct fake_s3_req *rq, struct fake_s3_resp *r)
{
	if (strcmp(rq->method, "GET") || !strstr(rq->target, "/seg-"))
		return;
	/* The object is 4 KiB: S3 answers a longer range with what there is. */
	r->status = 206;
	snprintf(r->headers, sizeof(r->headers), "Content-Range: bytes 0-4095/4096\r\n");
	r->body = FK->data;
	r->len = 4096;
}

static void test_fake_short_object_not_retried(void **state)
{
	struct fake *f = *state;
	static uint8_t buf[8192] __attribute__((aligned(4096)));

	fake_open(f, fn_get_short_206);
	assert_int_equal(store_read(f->st, 3, 0, 0, buf, 8192), -EIO);
	assert_int_equal(count_of("GET", "/seg-"), 1);
}

#define ACCESS_DENIED "<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
#define BAD_ARG	      "<Error><Code>InvalidArgument</Code><Message>nope</Message></Error>"

static void fn_4xx(const struct fake_s3_req *rq, struct fake_s3_resp *r)
{
	if (!strcmp(rq->method, "GET") && strstr(rq->target, "/seg-")) {
		r->status = 403;
		r->body = ACCESS_DENIED;
		r->len = strlen(ACCESS_DENIED);
	} else if (!strcmp(rq->method, "PUT")) {
		r->status = 400;
		r->body = BAD_ARG;
		r->len = strlen(BAD_ARG);
	}
}

static void test_fake_4xx_fail_fast(void **state)
{
	struct fake *f = *state;
	static uint8_t buf[4096] __attribute__((aligned(4096)));

	fake_open(f, fn_4xx);
	assert_int_equal(store_read(f->st, 4, 0, 0, buf, 4096), -EACCES);
	assert_int_equal(count_of("GET", "/seg-"), 1);
	put_bytes(f->st, 4, 4096, -EIO);
	assert_int_equal(count_of("PUT", "/seg-"), 1);
}

static int
    complete_mode; /* 0: Error AccessDenied; 1: InternalError once then OK; 2: part 2 fails */

static void fn_multipart(const struct fake_s3_req *rq, struct fake_s3_resp *r)
{
	static const char init[] = "<InitiateMultipartUploadResult><Bucket>bkt</Bucket>"
				   "<Key>k</Key><UploadId>up/1</UploadId>"
				   "</InitiateMultipartUploadResult>";
	static const char internal[] = "<Error><Code>InternalError</Code><Message>We encountered "
				       "an internal error. Please try again.</Message></Error>";
	static const char done[] = "<CompleteMultipartUploadResult><Bucket>bkt</Bucket>"
				   "<ETag>\"x-3\"</ETag></CompleteMultipartUploadResult>";

	if (!strcmp(rq->method, "POST") && strstr(rq->target, "?uploads=")) {
		r->status = 200;
		r->body = init;
		r->len = sizeof(init) - 1;
	} else if (!strcmp(rq->method, "PUT") && strstr(rq->target, "uploadId=up%2F1")) {
		const char *pn = strstr(rq->target, "partNumber=");

		if (complete_mode == 2 && pn && atoi(pn + 11) == 2) {
			r->status = 400;
			r->body = BAD_ARG;
			r->len = strlen(BAD_ARG);
			return;
		}
		r->status = 200;
		snprintf(r->headers, sizeof(r->headers), "ETag: \"e%d&\"\r\n",
			 pn ? atoi(pn + 11) : 0);
	} else if (!strcmp(rq->method, "POST") && strstr(rq->target, "?uploadId=up%2F1")) {
		r->status = 200;
		if (complete_mode == 0) {
			r->body = ACCESS_DENIED;
			r->len = strlen(ACCESS_DENIED);
		} else if (complete_mode == 1 && count_of("POST", "?uploadId=") == 1) {
			r->body = internal;
			r->len = sizeof(internal) - 1;
		} else {
			r->body = done;
			r->len = sizeof(done) - 1;
		}
	} else if (!strcmp(rq->method, "DELETE") && strstr(rq->target, "?uploadId=up%2F1")) {
		r->status = 204;
	}
}

static void test_fake_complete_error_aborts(void **state)
{
	struct fake *f = *state;
	char complete[4096];

	complete_mode = 0;
	fake_open(f, fn_multipart);
	put_bytes(f->st, 5, (10u << 20) + 4096, -EIO); /* 3 parts */
	assert_int_equal(count_of("POST", "/bkt/p/seg-0000000000000005.spw?uploads="), 1);
	for (int i = 1; i <= 3; i++) {
		char t[64];

		snprintf(t, sizeof(t), "?partNumber=%d&uploadId=up%%2F1", i);
		assert_int_equal(count_of("PUT", t), 1);
	}
	assert_int_equal(count_of("POST", "?uploadId=up%2F1"), 1); /* not retried */
	assert_int_equal(count_of("DELETE", "/bkt/p/seg-0000000000000005.spw?uploadId=up%2F1"), 1);
	fake_s3_complete_body(f->srv, complete, sizeof(complete));
	assert_non_null(strstr(complete, "<Part><PartNumber>3</PartNumber>"
					 "<ETag>\"e3&amp;\"</ETag></Part>"));
	assert_int_equal(fake_s3_hash_bad(f->srv), 0);
}

static void test_fake_complete_internal_error_retried(void **state)
{
	struct fake *f = *state;
	struct store_dev_stat ds;

	complete_mode = 1;
	fake_open(f, fn_multipart);
	put_bytes(f->st, 6, (10u << 20) + 4096, 0);
	assert_int_equal(count_of("PUT", "uploadId=up%2F1"), 3);
	assert_int_equal(count_of("POST", "?uploadId=up%2F1"), 2);
	assert_int_equal(count_of("DELETE", ""), 0);
	assert_int_equal(store_stat(f->st, &ds, 1), 1);
	assert_int_equal(ds.used, (10u << 20) + 4096);
}

static void test_fake_part_failure_aborts(void **state)
{
	struct fake *f = *state;

	complete_mode = 2;
	fake_open(f, fn_multipart);
	put_bytes(f->st, 7, (15u << 20) + 4096, -EIO);
	assert_int_equal(count_of("POST", "?uploadId="), 0); /* never completed */
	assert_int_equal(count_of("DELETE", "?uploadId=up%2F1"), 1);
}

static void fn_list_pages(const struct fake_s3_req *rq, struct fake_s3_resp *r)
{
	static const char page1[] =
	    "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>bkt</Name>"
	    "<IsTruncated>true</IsTruncated><NextContinuationToken>t/1+=</NextContinuationToken>"
	    "<Contents><Key>p/seg-0000000000000001.spw</Key><Size>4096</Size></Contents>"
	    "<Contents><Key>p/other</Key><Size>1</Size></Contents></ListBucketResult>";
	static const char page2[] =
	    "<ListBucketResult><Name>bkt</Name><IsTruncated>false</IsTruncated>"
	    "<Contents><Key>p/seg-0000000000000002.spw</Key><Size>8192</Size></Contents>"
	    "</ListBucketResult>";

	if (strcmp(rq->method, "GET") || !strstr(rq->target, "list-type=2"))
		return;
	r->status = 200;
	if (strstr(rq->target, "continuation-token=t%2F1%2B%3D")) {
		r->body = page2;
		r->len = sizeof(page2) - 1;
	} else {
		r->body = page1;
		r->len = sizeof(page1) - 1;
	}
}

static int list_sum(void *arg, uint64_t id, uint32_t dev, uint64_t size)
{
	uint64_t *s = arg;

	s[0] += id;
	s[1] += size;
	s[2]++;
	return 0;
}

static void test_fake_list_pagination(void **state)
{
	struct fake *f = *state;
	uint64_t s[3] = {0};

	fake_open(f, fn_list_pages);
	assert_int_equal(store_list(f->st, list_sum, s), 0);
	assert_int_equal(s[2], 2);
	assert_int_equal(s[0], 3);
	assert_int_equal(s[1], 12288);
	assert_int_equal(count_of("GET", "list-type=2&prefix=p%2F"), 2);
	assert_int_equal(count_of("GET", "continuation-token=t%2F1%2B%3D"), 1);
}

static void fn_stale_uploads(const struct fake_s3_req *rq, struct fake_s3_resp *r)
{
	static const char uploads[] =
	    "<ListMultipartUploadsResult><Bucket>bkt</Bucket><IsTruncated>false</IsTruncated>"
	    "<Upload><Key>p/seg-0000000000000005.spw</Key><UploadId>u5</UploadId></Upload>"
	    "<Upload><Key>p/notours</Key><UploadId>u6</UploadId></Upload>"
	    "</ListMultipartUploadsResult>";

	if (!strcmp(rq->method, "GET") && strstr(rq->target, "uploads=")) {
		r->status = 200;
		r->body = uploads;
		r->len = sizeof(uploads) - 1;
	} else if (!strcmp(rq->method, "DELETE")) {
		r->status = 204;
	}
}

static void test_fake_open_aborts_stale_uploads(void **state)
{
	struct fake *f = *state;

	fake_open(f, fn_stale_uploads);
	assert_int_equal(count_of("GET", "/bkt?prefix=p%2F&uploads="), 1);
	assert_int_equal(count_of("DELETE", "/bkt/p/seg-0000000000000005.spw?uploadId=u5"), 1);
	assert_int_equal(count_of("DELETE", ""), 1);
}

static void fn_head_delete(const struct fake_s3_req *rq, struct fake_s3_resp *r)
{
	static const char none[] = "";

	if (!strcmp(rq->method, "HEAD") && strstr(rq->target, "seg-0000000000000008")) {
		r->status = count_of("DELETE", "") ? 404 : 200;
		r->body = none;
		r->len = 12288; /* Content-Length of the object; HEAD sends no body */
	} else if (!strcmp(rq->method, "DELETE")) {
		r->status = 204;
	}
}

static void test_fake_remove(void **state)
{
	struct fake *f = *state;

	fake_open(f, fn_head_delete);
	assert_int_equal(store_remove(f->st, 8, 0), 0);
	assert_int_equal(count_of("DELETE", "/bkt/p/seg-0000000000000008.spw"), 1);
	assert_int_equal(store_remove(f->st, 8, 0), -ENOENT);
	assert_int_equal(count_of("DELETE", ""), 1);
	assert_int_equal(store_remove(f->st, 8, 1), -EINVAL);
}

static void fn_head_500(const struct fake_s3_req *rq, struct fake_s3_resp *r)
{
	if (!strcmp(rq->method, "HEAD"))
		r->status = 500;
}

static void test_fake_open_gives_up(void **state)
{
	struct fake *f = *state;
	char ep[64], err[256];
	struct s3_config cfg = {.url = "s3://bkt/p", .endpoint = ep, .path_style = 1};
	struct store *st = NULL;

	snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", f->port);
	fake_s3_set_handler(f->srv, fn_head_500);
	spw_log_level = LOG_EMERG;
	assert_int_equal(store_s3_open(&cfg, &st, err, sizeof(err)), -EIO);
	assert_null(st);
	assert_int_equal(count_of("HEAD", "/bkt"), S3_OPEN_ATTEMPTS);
	assert_non_null(strstr(err, "HTTP 500"));
	assert_non_null(strstr(err, "gave up after 3 attempts"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_backoff_bounds),
	    cmocka_unit_test(test_backoff_full_jitter_spread),
	    cmocka_unit_test(test_retry_after),
	    cmocka_unit_test_setup_teardown(test_creds_file_mode_refused, cred_setup,
					    cred_teardown),
	    cmocka_unit_test_setup_teardown(test_creds_file_default_profile, cred_setup,
					    cred_teardown),
	    cmocka_unit_test_setup_teardown(test_creds_file_profiles, cred_setup, cred_teardown),
	    cmocka_unit_test_setup_teardown(test_creds_file_errors, cred_setup, cred_teardown),
	    cmocka_unit_test(test_creds_env),
	    cmocka_unit_test(test_url_parse),
	    cmocka_unit_test(test_seg_key),
	    cmocka_unit_test(test_req_build_s3_reference),
	    cmocka_unit_test(test_req_build_path_style),
	    cmocka_unit_test(test_req_build_bad_endpoint),
	    cmocka_unit_test(test_open_config_errors),
#define FAKE(t) cmocka_unit_test_setup_teardown(t, fake_setup, fake_teardown)
	    FAKE(test_fake_put_retried_on_slowdown),
	    FAKE(test_fake_read_truncated_retried),
	    FAKE(test_fake_short_object_not_retried),
	    FAKE(test_fake_4xx_fail_fast),
	    FAKE(test_fake_complete_error_aborts),
	    FAKE(test_fake_complete_internal_error_retried),
	    FAKE(test_fake_part_failure_aborts),
	    FAKE(test_fake_list_pagination),
	    FAKE(test_fake_open_aborts_stale_uploads),
	    FAKE(test_fake_remove),
	    FAKE(test_fake_open_gives_up),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
