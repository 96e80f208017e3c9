/*
 * fake_s3 — see fake_s3.h. DESIGN: an acceptor thread hands each connection
 * to a thread of its own (at most FAKE_S3_CONNS; more are closed), which
 * reads requests back to back (headers, then Content-Length body bytes),
 * logs each under the lock, calls the handler outside it, and answers with
 * Content-Length and keep-alive. A short answer (send_only) or a send error
 * closes the connection. fake_s3_stop shuts the listening socket down and
 * joins every thread.
 */
#include "tests/unit/fake_s3.h"

#include "tier/s3/sigv4.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define FAKE_S3_LOG   256
#define FAKE_S3_CONNS 64

struct fake_s3 {
	int lfd, port;
	pthread_t acceptor;
	pthread_t conn[FAKE_S3_CONNS];
	int nconn; /* protected by lock */
	pthread_mutex_t lock;
	int n;			     /* protected by lock: requests so far */
	char log[FAKE_S3_LOG][600];  /* protected by lock: "METHOD target" */
	char complete_body[4096];    /* protected by lock: last CompleteMultipartUpload body */
	int hash_bad, auth_missing;  /* protected by lock */
	fake_s3_fn fn;		     /* set while no request is in flight */
};

struct fake_s3_conn {
	struct fake_s3 *f;
	int fd;
};

const char *fake_s3_header(const char *headers, const char *name, char *out, size_t outlen)
{
	size_t n = strlen(name);

	for (const char *l = headers; l && *l;
	     l = strstr(l, "\r\n") ? strstr(l, "\r\n") + 2 : NULL) {
		if (!strncasecmp(l, name, n) && l[n] == ':') {
			const char *v = l + n + 1, *e = strstr(v, "\r\n");

			while (*v == ' ')
				v++;
			snprintf(out, outlen, "%.*s", (int)(e ? e - v : (long)strlen(v)), v);
			return out;
		}
	}
	return NULL;
}

static int send_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

void fake_s3_default(const struct fake_s3_req *rq, struct fake_s3_resp *r)
{
	static const char empty_uploads[] =
	    "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListMultipartUploadsResult>"
	    "<Bucket>bkt</Bucket><IsTruncated>false</IsTruncated></ListMultipartUploadsResult>";

	if (!strcmp(rq->method, "HEAD") && !strcmp(rq->target, "/bkt")) {
		r->status = 200;
	} else if (!strcmp(rq->method, "GET") && strstr(rq->target, "/bkt?") &&
		   strstr(rq->target, "uploads=")) {
		r->status = 200;
		r->body = empty_uploads;
		r->len = sizeof(empty_uploads) - 1;
	} else {
		r->status = 500;
	}
}

/* Log rq and check its payload hash and signature. */
static void note_request(struct fake_s3 *f, struct fake_s3_req *rq)
{
	char hash[80], auth[1024], want[SIGV4_HASH_HEX];
	const char *cred = "AWS4-HMAC-SHA256 Credential=" FAKE_S3_AK "/";

	sigv4_sha256_hex(rq->body, rq->len, want);
	pthread_mutex_lock(&f->lock);
	rq->n = f->n++;
	if (rq->n < FAKE_S3_LOG)
		snprintf(f->log[rq->n], sizeof(f->log[0]), "%s %s", rq->method, rq->target);
	if (!fake_s3_header(rq->headers, "x-amz-content-sha256", hash, sizeof(hash)) ||
	    strcmp(hash, want))
		f->hash_bad++;
	if (!fake_s3_header(rq->headers, "Authorization", auth, sizeof(auth)) ||
	    strncmp(auth, cred, strlen(cred)))
		f->auth_missing++;
	if (strstr(rq->target, "uploadId=") && !strcmp(rq->method, "POST"))
		snprintf(f->complete_body, sizeof(f->complete_body), "%s", rq->body);
	pthread_mutex_unlock(&f->lock);
}

static void *conn_thread(void *arg)
{
	struct fake_s3_conn *c = arg;
	struct fake_s3 *f = c->f;
	char *buf = malloc(65536);
	size_t have = 0;

	while (buf) {
		struct fake_s3_req rq = {0};
		struct fake_s3_resp r = {.send_only = -1};
		char *end, cl[32], head[1024];
		size_t hlen, blen = 0;
		char *body = NULL;
		ssize_t n;
		int closing;

		while (!(end = memmem(buf, have, "\r\n\r\n", 4))) {
			n = recv(c->fd, buf + have, 65535 - have, 0);
			if (n <= 0)
				goto out;
			have += (size_t)n;
		}
		hlen = (size_t)(end - buf) + 4;
		buf[hlen - 2] = 0;
		sscanf(buf, "%15s %511s", rq.method, rq.target);
		snprintf(rq.headers, sizeof(rq.headers), "%s", strstr(buf, "\r\n") + 2);
		if (fake_s3_header(rq.headers, "Content-Length", cl, sizeof(cl)))
			blen = strtoul(cl, NULL, 10);
		body = malloc(blen + 1);
		if (!body)
			goto out;
		memcpy(body, buf + hlen, have - hlen < blen ? have - hlen : blen);
		for (size_t got = have - hlen < blen ? have - hlen : blen; got < blen;) {
			n = recv(c->fd, body + got, blen - got, 0);
			if (n <= 0) {
				free(body);
				goto out;
			}
			got += (size_t)n;
		}
		body[blen] = 0;
		if (have - hlen > blen)
			memmove(buf, buf + hlen + blen, have - hlen - blen);
		have = have - hlen > blen ? have - hlen - blen : 0;
		rq.body = body;
		rq.len = blen;
		note_request(f, &rq);
		f->fn(&rq, &r);
		if (!r.status)
			fake_s3_default(&rq, &r);
		snprintf(head, sizeof(head),
			 "HTTP/1.1 %d X\r\nContent-Length: %zu\r\nConnection: keep-alive\r\n%s\r\n",
			 r.status, r.len, r.headers);
		closing = send_all(c->fd, head, strlen(head)) ||
			  (strcmp(rq.method, "HEAD") && r.len &&
			   send_all(c->fd, r.body, r.send_only < 0 ? r.len : (size_t)r.send_only)) ||
			  r.send_only >= 0;
		free(r.owned);
		free(body);
		if (closing)
			goto out;
	}
out:
	free(buf);
	close(c->fd);
	free(c);
	return NULL;
}

static void *accept_thread(void *arg)
{
	struct fake_s3 *f = arg;

	for (;;) {
		int fd = accept(f->lfd, NULL, NULL);
		struct fake_s3_conn *c;

		if (fd < 0)
			break;
		c = malloc(sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		c->f = f;
		c->fd = fd;
		pthread_mutex_lock(&f->lock);
		if (f->nconn < FAKE_S3_CONNS &&
		    pthread_create(&f->conn[f->nconn], NULL, conn_thread, c) == 0)
			f->nconn++;
		else
			close(fd), free(c);
		pthread_mutex_unlock(&f->lock);
	}
	return NULL;
}

struct fake_s3 *fake_s3_start(void)
{
	struct fake_s3 *f = calloc(1, sizeof(*f));
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof(a);

	if (!f)
		return NULL;
	pthread_mutex_init(&f->lock, NULL);
	f->fn = fake_s3_default;
	f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (f->lfd < 0 || bind(f->lfd, (struct sockaddr *)&a, sizeof(a)) || listen(f->lfd, 16) ||
	    getsockname(f->lfd, (struct sockaddr *)&a, &alen))
		goto fail;
	f->port = ntohs(a.sin_port);
	if (pthread_create(&f->acceptor, NULL, accept_thread, f))
		goto fail;
	setenv("AWS_ACCESS_KEY_ID", FAKE_S3_AK, 1);
	setenv("AWS_SECRET_ACCESS_KEY", FAKE_S3_SK, 1);
	return f;
fail:
	if (f->lfd >= 0)
		close(f->lfd);
	pthread_mutex_destroy(&f->lock);
	free(f);
	return NULL;
}

void fake_s3_stop(struct fake_s3 *f)
{
	if (!f)
		return;
	shutdown(f->lfd, SHUT_RDWR);
	close(f->lfd);
	pthread_join(f->acceptor, NULL);
	for (int i = 0; i < f->nconn; i++)
		pthread_join(f->conn[i], NULL);
	pthread_mutex_destroy(&f->lock);
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	free(f);
}

int fake_s3_port(const struct fake_s3 *f)
{
	return f->port;
}

void fake_s3_set_handler(struct fake_s3 *f, fake_s3_fn fn)
{
	f->fn = fn ? fn : fake_s3_default;
}

/* An int of f read under its lock. */
static int read_locked(struct fake_s3 *f, const int *v)
{
	int n;

	pthread_mutex_lock(&f->lock);
	n = *v;
	pthread_mutex_unlock(&f->lock);
	return n;
}

/* Log lines for which match(line, a, b) holds. */
static int count_log(struct fake_s3 *f, int (*match)(const char *, const char *, const char *),
		     const char *a, const char *b)
{
	int n = 0;

	pthread_mutex_lock(&f->lock);
	for (int i = 0; i < f->n && i < FAKE_S3_LOG; i++)
		n += match(f->log[i], a, b);
	pthread_mutex_unlock(&f->lock);
	return n;
}

static int match_prefix(const char *line, const char *prefix, const char *unused)
{
	return !strncmp(line, prefix, strlen(prefix));
}

static int match_exact(const char *line, const char *req, const char *unused)
{
	return !strcmp(line, req);
}

static int match_method_part(const char *line, const char *method, const char *part)
{
	size_t ml = strlen(method);

	return !strncmp(line, method, ml) && line[ml] == ' ' && strstr(line, part);
}

int fake_s3_total(struct fake_s3 *f)
{
	return read_locked(f, &f->n);
}

int fake_s3_count(struct fake_s3 *f, const char *prefix)
{
	return count_log(f, match_prefix, prefix, NULL);
}

int fake_s3_count_exact(struct fake_s3 *f, const char *req)
{
	return count_log(f, match_exact, req, NULL);
}

int fake_s3_count_of(struct fake_s3 *f, const char *method, const char *target_part)
{
	return count_log(f, match_method_part, method, target_part);
}

void fake_s3_reset_log(struct fake_s3 *f)
{
	pthread_mutex_lock(&f->lock);
	f->n = 0;
	pthread_mutex_unlock(&f->lock);
}

int fake_s3_hash_bad(struct fake_s3 *f)
{
	return read_locked(f, &f->hash_bad);
}

int fake_s3_auth_missing(struct fake_s3 *f)
{
	return read_locked(f, &f->auth_missing);
}

void fake_s3_complete_body(struct fake_s3 *f, char *out, size_t outlen)
{
	pthread_mutex_lock(&f->lock);
	snprintf(out, outlen, "%s", f->complete_body);
	pthread_mutex_unlock(&f->lock);
}
