/*
 * s3rver_fixture.h — the local S3 server for the live S3 unit tests:
 * @20minutes/s3rver (SigV4 checked) started by tests/s3/s3rver.js on a free
 * loopback port, in a fresh temp directory with a 0600 credentials file;
 * stopped by pid (and by itself when the test dies: its stdin is a pipe
 * from us). No node or no `npm ci`: the caller FAILS with a message saying
 * so (never skips). Header-only, for test binaries; one server per process.
 */
#ifndef SPW_S3RVER_FIXTURE_H
#define SPW_S3RVER_FIXTURE_H

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define S3RVER_BUCKET  "spw-test"
#define S3RVER_AK      "AKIASPWTEST"
#define S3RVER_SK      "spw/test+secret/KEY"
#define S3RVER_READY_S 60

struct s3rver {
	char dir[64];	/* temp root */
	char data[96];	/* s3rver storage */
	char creds[96]; /* credentials file, 0600 */
	char endpoint[64];
	pid_t pid;    /* -1: not running */
	int lifeline; /* write end of the server's stdin, -1: none */
};

#define S3RVER_INIT {.pid = -1, .lifeline = -1}

/* Deterministic bytes (xorshift) for payloads. */
static inline void fill_pattern(uint8_t *buf, size_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;

	for (size_t i = 0; i < len; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(buf + i, &x, len - i < 8 ? len - i : 8);
	}
}

static inline int s3rver_in_path(const char *prog)
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

static inline void s3rver_stop(struct s3rver *s)
{
	if (s->pid > 0) {
		int status;

		kill(s->pid, SIGTERM);
		waitpid(s->pid, &status, 0);
		s->pid = -1;
	}
	if (s->lifeline >= 0) {
		close(s->lifeline);
		s->lifeline = -1;
	}
}

/* Stop the server and remove its directory. */
static inline void s3rver_cleanup(struct s3rver *s)
{
	char cmd[160];

	s3rver_stop(s);
	if (s->dir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", s->dir);
		if (system(cmd) != 0)
			fprintf(stderr, "cannot remove %s\n", s->dir);
		s->dir[0] = 0;
	}
}

/*
 * Start the server. `who` names the test in messages; `srcfile` is the
 * caller's __FILE__ (tests/s3 is found next to tests/unit, or SPW_S3_DIR).
 * Node runs with --openssl-legacy-provider: s3rver makes its ListObjectsV2
 * continuation tokens with DES, which OpenSSL 3 (Node >= 17) only has in
 * the legacy provider; without it every truncated page is an HTTP 500.
 * 0, or -1 with a message on stderr and nothing left behind.
 */
static inline int s3rver_start(struct s3rver *s, const char *who, const char *srcfile)
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
		snprintf(src, sizeof(src), "%s", srcfile);
		snprintf(s3dir, sizeof(s3dir), "%s/../s3", dirname(src));
	}
	snprintf(script, sizeof(script), "%s/s3rver.js", s3dir);
	snprintf(mod, sizeof(mod), "%s/node_modules/@20minutes/s3rver/package.json", s3dir);
	if (!s3rver_in_path("node")) {
		fprintf(stderr, "%s: FAIL: `node` is not in PATH; this test needs Node.js >= 20 "
				"to run the local S3 server (tests/s3/s3rver.js)\n", who);
		return -1;
	}
	if (access(script, R_OK) || access(mod, R_OK)) {
		fprintf(stderr,
			"%s: FAIL: %s or %s missing: run `npm ci` in %s first (or set "
			"SPW_S3_DIR to the tests/s3 directory)\n",
			who, script, mod, s3dir);
		return -1;
	}

	snprintf(s->dir, sizeof(s->dir), "/tmp/spw-s3rver-XXXXXX");
	if (!mkdtemp(s->dir)) {
		s->dir[0] = 0;
		return -1;
	}
	snprintf(s->data, sizeof(s->data), "%s/data", s->dir);
	snprintf(s->creds, sizeof(s->creds), "%s/credentials", s->dir);
	if (mkdir(s->data, 0700))
		goto fail;
	fd = open(s->creds, O_WRONLY | O_CREAT | O_EXCL, 0600);
	if (fd < 0 || dprintf(fd, "[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n",
			      S3RVER_AK, S3RVER_SK) < 0)
		goto fail;
	close(fd);

	if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC))
		goto fail;
	s->pid = fork();
	if (s->pid < 0)
		goto fail;
	if (s->pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		execlp("node", "node", "--openssl-legacy-provider", script, "--dir", s->data,
		       "--port", "0", "--access-key", S3RVER_AK, "--secret-key", S3RVER_SK,
		       "--bucket", S3RVER_BUCKET, (char *)NULL);
		fprintf(stderr, "exec node: %s\n", strerror(errno));
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	s->lifeline = in[1];
	/* Wait for "ready PORT\n" (bounded). */
	while (got < sizeof(line) - 1 && !strchr(line, '\n')) {
		struct pollfd p = {.fd = out[0], .events = POLLIN};
		ssize_t n;

		if (poll(&p, 1, S3RVER_READY_S * 1000) <= 0)
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
		fprintf(stderr, "%s: FAIL: s3rver did not start (got \"%s\")\n", who, line);
		goto fail;
	}
	snprintf(s->endpoint, sizeof(s->endpoint), "http://127.0.0.1:%d", port);
	return 0;
fail:
	s3rver_cleanup(s);
	return -1;
}

#endif
