/*
 * test_store_s3_live — the S3 store against a real S3 server on loopback:
 * @20minutes/s3rver (SigV4 checked), started here by tests/s3/s3rver.js on
 * a free port in a fresh directory and killed (by pid) in the group
 * teardown; it also stops by itself when this process dies (stdin pipe).
 * Needs node and `npm ci` in tests/s3: without them the test FAILS with a
 * message saying so (it never skips).
 * Covers: open (bucket check), single PUT, multipart upload whose parts
 * start before put_finish, ranged and split reads, list, remove, abort,
 * concurrent reads, and open refused for a wrong secret, a missing bucket
 * and an unreachable endpoint.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/log.h"
#include "tier/store_s3.h"

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

#define MiB	(1024u * 1024)
#define BUCKET	"spw-test"
#define AK	"AKIASPWTEST"
#define SK	"spw/test+secret/KEY"
#define PART	(5u * MiB)
#define BIG	(40u * MiB)
#define SMALL	(1u * MiB)
#define READY_S 60

struct live {
	char dir[64];	/* temp root */
	char data[96];	/* s3rver storage */
	char creds[96]; /* credentials file, 0600 */
	char endpoint[64];
	pid_t pid;
	int lifeline; /* write end of the server's stdin */
	uint8_t *big; /* BIG bytes of pattern */
};

static struct live L = {.pid = -1, .lifeline = -1};

static void fill_pattern(uint8_t *buf, size_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;

	for (size_t i = 0; i < len; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(buf + i, &x, len - i < 8 ? len - i : 8);
	}
}

static int in_path(const char *prog)
{
	const char *path = getenv("PATH");
	char *dup, *save = NULL;
	int found = 0;

	if (!path)
		return 0;
	dup = strdup(path);
	for (char *d = strtok_r(dup, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
		char p[PATH_MAX];

		snprintf(p, sizeof(p), "%s/%s", d, prog);
		found = access(p, X_OK) == 0;
	}
	free(dup);
	return found;
}

static void stop_server(void)
{
	if (L.pid > 0) {
		int status;

		kill(L.pid, SIGTERM);
		waitpid(L.pid, &status, 0);
		L.pid = -1;
	}
	if (L.lifeline >= 0) {
		close(L.lifeline);
		L.lifeline = -1;
	}
}

static int group_teardown(void **state);

static int group_setup(void **state)
{
	char src[PATH_MAX], s3dir[PATH_MAX], script[PATH_MAX + 16], mod[PATH_MAX + 64];
	char line[64] = "", *port_s;
	int in[2], out[2], fd, port = 0;
	size_t got = 0;
	const char *env = getenv("SPW_S3_DIR");

	signal(SIGPIPE, SIG_IGN);
	if (env) {
		snprintf(s3dir, sizeof(s3dir), "%s", env);
	} else {
		snprintf(src, sizeof(src), "%s",
			 __FILE__); /* .../tests/unit/test_store_s3_live.c */
		snprintf(s3dir, sizeof(s3dir), "%s/../s3", dirname(src));
	}
	snprintf(script, sizeof(script), "%s/s3rver.js", s3dir);
	snprintf(mod, sizeof(mod), "%s/node_modules/@20minutes/s3rver/package.json", s3dir);
	if (!in_path("node")) {
		fprintf(stderr, "test_store_s3_live: FAIL: `node` is not in PATH; this test needs "
				"Node.js >= 20 to run the local S3 server (tests/s3/s3rver.js)\n");
		return -1;
	}
	if (access(script, R_OK) || access(mod, R_OK)) {
		fprintf(stderr,
			"test_store_s3_live: FAIL: %s or %s missing: run `npm ci` in %s first "
			"(or set SPW_S3_DIR to the tests/s3 directory)\n",
			script, mod, s3dir);
		return -1;
	}

	snprintf(L.dir, sizeof(L.dir), "/tmp/spw-s3live-XXXXXX");
	if (!mkdtemp(L.dir)) {
		L.dir[0] = 0;
		return -1;
	}
	snprintf(L.data, sizeof(L.data), "%s/data", L.dir);
	snprintf(L.creds, sizeof(L.creds), "%s/credentials", L.dir);
	if (mkdir(L.data, 0700))
		goto fail;
	fd = open(L.creds, O_WRONLY | O_CREAT | O_EXCL, 0600);
	if (fd < 0 || dprintf(fd, "[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n",
			      AK, SK) < 0)
		goto fail;
	close(fd);

	if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC))
		goto fail;
	L.pid = fork();
	if (L.pid < 0)
		goto fail;
	if (L.pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		execlp("node", "node", script, "--dir", L.data, "--port", "0", "--access-key", AK,
		       "--secret-key", SK, "--bucket", BUCKET, (char *)NULL);
		fprintf(stderr, "exec node: %s\n", strerror(errno));
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	L.lifeline = in[1];
	/* Wait for "ready PORT\n" (bounded). */
	while (got < sizeof(line) - 1 && !strchr(line, '\n')) {
		struct pollfd p = {.fd = out[0], .events = POLLIN};
		ssize_t n;

		if (poll(&p, 1, READY_S * 1000) <= 0)
			break;
		n = read(out[0], line + got, sizeof(line) - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
		line[got] = 0;
	}
	close(out[0]);
	port_s = strncmp(line, "ready ", 6) ? NULL : line + 6;
	if (port_s)
		port = atoi(port_s);
	if (port <= 0) {
		fprintf(stderr, "test_store_s3_live: FAIL: s3rver did not start (got \"%s\")\n",
			line);
		stop_server();
		goto fail;
	}
	snprintf(L.endpoint, sizeof(L.endpoint), "http://127.0.0.1:%d", port);
	if (posix_memalign((void **)&L.big, 4096, BIG))
		goto fail;
	fill_pattern(L.big, BIG, 1);
	*state = &L;
	return 0;
fail:
	group_teardown(NULL);
	return -1;
}

static int group_teardown(void **state)
{
	char cmd[160];

	stop_server();
	free(L.big);
	if (L.dir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", L.dir);
		if (system(cmd) != 0)
			fprintf(stderr, "cannot remove %s\n", L.dir);
	}
	return 0;
}

static struct s3_config cfg_for(const char *prefix)
{
	static char url[128];

	snprintf(url, sizeof(url), "s3://" BUCKET "/%s", prefix);
	return (struct s3_config){
	    .url = url,
	    .endpoint = L.endpoint,
	    .region = "us-east-1",
	    .path_style = 1,
	    .part_size = PART,
	    .io_workers = 4,
	    .credentials_file = L.creds,
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

	snprintf(path, sizeof(path), "%s/" BUCKET "/._S3rver_uploads", L.data);
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
	int port = atoi(strrchr(L.endpoint, ':') + 1), n = 0;
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
	    cmocka_unit_test(test_env_credentials),
	    cmocka_unit_test(test_wrong_secret_refused),
	    cmocka_unit_test(test_missing_bucket_refused),
	    cmocka_unit_test(test_unreachable_refused),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
