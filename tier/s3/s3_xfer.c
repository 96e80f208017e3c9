/*
 * s3_xfer — the S3 request engine (contract: s3_xfer.h; retry and
 * logging rules: store_s3.c DESIGN). A transfer is signed afresh on every
 * attempt and driven by s3_conn_step() on the libcurl multi handle of one
 * conn; conns are pooled in the s3_client.
 */
#include "tier/s3/s3_xfer.h"

#include "common/clock.h"
#include "common/log.h"
#include "tier/s3/s3xml.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>
#define RESP_MAX       (16u << 20) /* largest XML response kept */
#define CONNECT_MS     10000L
#define LOW_SPEED_TIME 30L /* seconds below 1 KiB/s: the attempt timed out */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static uint64_t xorshift(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1Dull;
}

static void curl_init_once(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- transfers ---- */

static size_t on_header(char *p, size_t size, size_t nmemb, void *arg)
{
	struct s3_xfer *x = arg;
	size_t len = size * nmemb;
	struct s3_hdr_val hv;

	if (len >= 5 && !strncmp(p, "HTTP/", 5)) { /* a new response (after 100 Continue too) */
		x->etag[0] = x->region[0] = 0;
		x->obj_total = x->clen = -1;
		x->retry_after = 0;
		return len;
	}
	if (x->short_ok && (len == 2 || len == 1) && (p[0] == '\r' || p[0] == '\n') &&
	    x->obj_total == 0) {
		long status = 0;

		/* End of the headers of "206, bytes 0-0/0" (s3rver's answer where S3 says
		 * 416): the object is empty, yet Content-Length promises a byte that never
		 * comes. Stop here rather than wait for the server to close. */
		curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
		if (status == 206) {
			x->empty_cut = 1;
			return 0;
		}
	}
	switch (s3_header_parse(p, len, &hv)) {
	case S3_HDR_ETAG:
		snprintf(x->etag, sizeof(x->etag), "%s", hv.text);
		break;
	case S3_HDR_RETRY_AFTER: /* an HTTP-date counts as none */
		x->retry_after = hv.num < 0 ? 0 : (uint32_t)hv.num;
		break;
	case S3_HDR_CONTENT_RANGE: /* the complete length, when known */
		if (hv.num >= 0)
			x->obj_total = hv.num;
		break;
	case S3_HDR_CONTENT_LENGTH:
		x->clen = hv.num;
		break;
	case S3_HDR_REGION: {
		size_t n = strnlen(hv.text, sizeof(x->region) - 1);
		memcpy(x->region, hv.text, n);
		x->region[n] = 0;
		break;
	}
	default:
		break;
	}
	return len;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *arg)
{
	struct s3_xfer *x = arg;
	size_t len = size * nmemb;
	long status = 0;

	curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
	if (x->dst && status >= 200 && status < 300) {
		uint64_t end = x->off + x->dst_len;

		if (!x->pos_set) {
			/* 206: the body starts at off; 200 (Range ignored): at 0. */
			x->pos = status == 206 ? x->off : 0;
			x->pos_set = 1;
		}
		if (status == 206 && x->pos + len > end) {
			x->overflow = 1;
			return 0;
		}
		for (size_t i = 0; i < len;) {
			uint64_t pos = x->pos;
			size_t n = len - i;

			if (pos < x->off) {
				n = x->off - pos < n ? (size_t)(x->off - pos) : n;
			} else if (pos < end) {
				n = end - pos < n ? (size_t)(end - pos) : n;
				memcpy(x->dst + (pos - x->off), p + i, n);
				x->got += n;
			}
			x->pos += n;
			i += n;
		}
		return len;
	}
	if (x->resp_len + len > RESP_MAX)
		return 0;
	if (x->resp_len + len + 1 > x->resp_cap) {
		size_t cap = x->resp_cap ? x->resp_cap : 4096;
		char *r;

		while (cap < x->resp_len + len + 1)
			cap *= 2;
		r = realloc(x->resp, cap);
		if (!r)
			return 0;
		x->resp = r;
		x->resp_cap = cap;
	}
	memcpy(x->resp + x->resp_len, p, len);
	x->resp_len += len;
	x->resp[x->resp_len] = 0;
	return len;
}

static size_t on_read(char *p, size_t size, size_t nmemb, void *arg)
{
	struct s3_xfer *x = arg;
	size_t n = size * nmemb;

	if (n > x->body_len - x->up_pos)
		n = x->body_len - x->up_pos;
	if (n)
		memcpy(p, x->body + x->up_pos, n);
	x->up_pos += n;
	return n;
}

static const char *xfer_what(const struct s3_xfer *x)
{
	return x->key ? x->key : "(bucket)";
}

static void xfer_release(struct s3_conn *c, struct s3_xfer *x)
{
	if (x->easy) {
		curl_multi_remove_handle(c->multi, x->easy);
		curl_easy_cleanup(x->easy);
		x->easy = NULL;
	}
	curl_slist_free_all(x->hdrs);
	x->hdrs = NULL;
}

static void conn_unlink(struct s3_conn *c, struct s3_xfer *x)
{
	for (struct s3_xfer **pp = &c->live; *pp; pp = &(*pp)->next)
		if (*pp == x) {
			*pp = x->next;
			break;
		}
	x->next = NULL;
}

static void xfer_finish(struct s3_client *s, struct s3_conn *c, struct s3_xfer *x, int err)
{
	xfer_release(c, x);
	conn_unlink(c, x);
	x->err = err;
	x->state = XS_DONE;
	pthread_mutex_lock(&s->lock);
	if (err == 0) {
		s->failed = 0;
		s->ok_ms = clock_now_ms();
	}
	else if (x->attempt + 1 >= x->max_attempts && (x->conn_fail || err == -EIO))
		s->failed = 1;
	pthread_mutex_unlock(&s->lock);
}

/* Sign and start one attempt. 0 or -errno (then the transfer is finished with it). */
static int xfer_start(struct s3_client *s, struct s3_conn *c, struct s3_xfer *x)
{
	char range[64];
	struct s3_req_spec rq = {x->method, x->key, x->q, x->nq, NULL, x->body_hash};
	struct s3_req req;
	CURL *e;
	int ret;

	x->up_pos = x->got = x->resp_len = 0;
	x->pos_set = x->overflow = x->empty_cut = 0;
	x->status = 0;
	x->etag[0] = x->region[0] = x->curl_err[0] = 0;
	x->obj_total = x->clen = -1;
	x->retry_after = 0;
	if (x->dst) {
		snprintf(range, sizeof(range), "bytes=%" PRIu64 "-%" PRIu64, x->off,
			 x->off + x->dst_len - 1);
		rq.range = range;
	}
	ret = s3_req_build(&s->target, &s->creds, &rq, time(NULL), &req);
	if (ret)
		return ret;
	x->easy = e = curl_easy_init();
	ret = -ENOMEM;
	if (!e)
		goto out;
	for (int i = 0; i < req.nheaders; i++) {
		struct curl_slist *l = curl_slist_append(x->hdrs, req.headers[i]);

		if (!l)
			goto out;
		x->hdrs = l;
	}
	x->hdrs = curl_slist_append(x->hdrs, "Expect:") ?: x->hdrs;
	curl_easy_setopt(e, CURLOPT_URL, req.url);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->hdrs);
	curl_easy_setopt(e, CURLOPT_PRIVATE, x);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_VERBOSE, 0L);
	curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->curl_err);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_MS);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1024L);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, LOW_SPEED_TIME);
	curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
	if (s->ca_file)
		curl_easy_setopt(e, CURLOPT_CAINFO, s->ca_file);
#if LIBCURL_VERSION_NUM >= 0x075500
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
	if (!strcmp(x->method, "HEAD")) {
		curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
	} else if (!strcmp(x->method, "PUT") || !strcmp(x->method, "POST")) {
		curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(e, CURLOPT_READDATA, x);
		curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)x->body_len);
		if (strcmp(x->method, "PUT"))
			curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, x->method);
	} else if (strcmp(x->method, "GET")) {
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, x->method);
	}
	if (curl_multi_add_handle(c->multi, e) != CURLM_OK)
		goto out;
	x->state = XS_RUNNING;
	ret = 0;
out:
	s3_req_free(&req);
	if (ret)
		xfer_release(c, x);
	return ret;
}

void s3_xfer_submit(struct s3_conn *c, struct s3_xfer *x)
{
	if (!x->max_attempts)
		x->max_attempts = S3_MAX_ATTEMPTS;
	if (!x->body_hash[0])
		sigv4_sha256_hex(x->body ? (const void *)x->body : "", x->body_len, x->body_hash);
	x->attempt = 0;
	x->due = x->since = 0;
	x->err = 0;
	x->conn_fail = 0;
	x->why[0] = 0;
	x->state = XS_WAITING;
	x->next = c->live;
	c->live = x;
}

static int retryable_curl(CURLcode r, int *conn)
{
	switch (r) {
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
	case CURLE_COULDNT_CONNECT:
		*conn = 1;
		return 1;
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
	case CURLE_WRITE_ERROR: /* body larger than asked */
		return 1;
	default:
		return 0;
	}
}

void s3_client_unmounting(struct s3_client *s)
{
	pthread_mutex_lock(&s->lock);
	s->unmounting = 1;
	pthread_mutex_unlock(&s->lock);
}

/* Unmounting: no retry of x's attempt (s3_client_unmounting)? */
static int no_retry(struct s3_client *s, const struct s3_xfer *x)
{
	int r;
	pthread_mutex_lock(&s->lock);
	r = s->unmounting && (s->failed || x->attempt + 1 >= S3_UNMOUNT_ATTEMPTS);
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* End x, which had a retry coming, with its last attempt's error. */
static void give_up(struct s3_client *s, struct s3_conn *c, struct s3_xfer *x)
{
	size_t l = strlen(x->why);

	snprintf(x->why + l, sizeof(x->why) - l, " (unmounting: not retried after %u attempts)",
		 x->attempt + 1);
	xfer_finish(s, c, x, x->retry_err);
}

/* One attempt ended with res: finish the transfer or schedule its retry. */
static void xfer_done(struct s3_client *s, struct s3_conn *c, struct s3_xfer *x, CURLcode res)
{
	struct s3xml_error e = {{0}, {0}};
	int retry = 0, throttled = 0, conn = 0, err = -EIO;
	uint32_t delay;

	curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &x->status);
	if (x->empty_cut)
		res = CURLE_OK; /* on_header stopped an empty object's 206 on purpose */
	if (res != CURLE_OK) {
		retry = retryable_curl(res, &conn);
		snprintf(x->why, sizeof(x->why), "%s",
			 x->overflow	  ? "server sent more than the range asked"
			 : x->curl_err[0] ? x->curl_err
					  : curl_easy_strerror(res));
	} else if (x->status >= 200 && x->status < 300) {
		err = 0;
		if (x->dst && x->status == 200 && x->obj_total < 0)
			x->obj_total = x->clen; /* Range ignored: the whole object came */
		if (x->short_ok && x->status == 200 && x->obj_total < 0 && x->got < x->dst_len)
			x->obj_total = (int64_t)x->got; /* whole (chunked) body, curl checked it */
		if (x->dst && x->got != x->dst_len && x->short_ok && x->obj_total >= 0 &&
		    x->off + x->got == (uint64_t)x->obj_total) {
			/* the object ends inside the range: all of it came */
		} else if (x->dst && x->got != x->dst_len) {
			err = -EIO;
			if (x->obj_total >= 0 && x->off + x->dst_len > (uint64_t)x->obj_total) {
				snprintf(x->why, sizeof(x->why),
					 "short read: object is %" PRId64
					 " bytes, asked %zu at %" PRIu64,
					 x->obj_total, x->dst_len, x->off);
			} else {
				retry = 1;
				snprintf(x->why, sizeof(x->why), "truncated body: %zu of %zu bytes",
					 x->got, x->dst_len);
			}
		} else if (x->complete) {
			int r = s3xml_parse_complete(x->resp, x->resp_len, &e);

			if (r == -EREMOTEIO) {
				err = -EIO;
				retry = !strcmp(e.code, "InternalError") ||
					!strcmp(e.code, "SlowDown") ||
					!strcmp(e.code, "ServiceUnavailable");
				throttled = !strcmp(e.code, "SlowDown");
				snprintf(x->why, sizeof(x->why), "200 OK with Error %s: %s", e.code,
					 e.message);
			} else if (r) {
				err = -EIO;
				retry = 1;
				snprintf(x->why, sizeof(x->why), "unparsable reply to complete");
			}
		}
	} else {
		if (x->resp_len)
			s3xml_parse_error(x->resp, x->resp_len, &e);
		snprintf(x->why, sizeof(x->why), "HTTP %ld%s%s%s%s", x->status,
			 e.code[0] ? " " : "", e.code, e.message[0] ? ": " : "", e.message);
		if (x->status == 429 || (x->status >= 500 && x->status != 501)) {
			retry = 1;
			throttled =
			    x->status == 429 || x->status == 503 || !strcmp(e.code, "SlowDown");
		} else if (x->status == 400 && (!strcmp(e.code, "RequestTimeout") ||
						!strcmp(e.code, "IncompleteBody"))) {
			retry = 1;
		} else if (x->status == 404) {
			err = -ENOENT;
		} else if (x->status == 416 && x->short_ok && x->off == 0) {
			err = 0; /* no byte 0: the object is empty */
			x->why[0] = 0;
			x->got = 0;
			x->obj_total = 0;
		} else if (x->status == 403 || !strcmp(e.code, "ExpiredToken") ||
			   !strcmp(e.code, "InvalidToken")) {
			err = -EACCES;
		} else if (x->status == 405 || x->status == 501) {
			err = -EOPNOTSUPP;
		}
	}
	x->conn_fail = conn;
	if (x->probe && retry && conn) {
		/* a probe that found the endpoint still gone: the retry it went
		 * ahead of keeps its place and its due time, its attempt not
		 * spent (a dead endpoint is probed, not given up on, faster) */
		xfer_release(c, x);
		x->probe = 0;
		x->since = clock_now_ms();
		x->state = XS_WAITING;
		return;
	}
	x->probe = 0;
	if (retry && x->attempt + 1 < x->max_attempts && no_retry(s, x)) {
		x->retry_err = err;
		give_up(s, c, x);
		return;
	}
	if (!retry || x->attempt + 1 >= x->max_attempts) {
		if (retry && x->max_attempts > 1) {
			size_t l = strlen(x->why);

			snprintf(x->why + l, sizeof(x->why) - l, " (gave up after %u attempts)",
				 x->attempt + 1);
		}
		xfer_finish(s, c, x, err);
		return;
	}
	delay = s3_retry_delay_ms(x->attempt, throttled, x->retry_after, xorshift(&c->rng));
	log_warn("s3 %s %s: %s; retry %u of %u in %u ms", x->method, xfer_what(x), x->why,
		 x->attempt + 1, x->max_attempts - 1, delay);
	xfer_release(c, x);
	x->retry_err = err;
	x->attempt++;
	x->since = clock_now_ms();
	x->due = x->since + delay;
	x->state = XS_WAITING;
}

static int conn_reap(struct s3_client *s, struct s3_conn *c)
{
	CURLMsg *m;
	int left, n = 0;

	while ((m = curl_multi_info_read(c->multi, &left))) {
		struct s3_xfer *x = NULL;

		if (m->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
		xfer_done(s, c, x, m->data.result);
		n++;
	}
	return n;
}

/* May x, a retry waiting after a connection failure with no request
 * through since, go now as the client's probe (one per S3_PROBE_MS for all
 * its conns)? Its back-off (up to 20 s) is for a dead endpoint's sake; when
 * the endpoint comes back, the probe finds it and every waiting retry goes
 * (s3_conn_step): the puts in back-off hold the part buffers, so no new
 * request would find it for them. */
static int probe_claim(struct s3_client *s, uint64_t now)
{
	int go = 0;

	pthread_mutex_lock(&s->lock);
	if (now >= s->probe_ms + S3_PROBE_MS) {
		s->probe_ms = now;
		go = 1;
	}
	pthread_mutex_unlock(&s->lock);
	return go;
}

/* Start due retries, move data; with wait, block (<= 1 s) until something completes. */
void s3_conn_step(struct s3_client *s, struct s3_conn *c, int wait)
{
	uint64_t now = clock_now_ms(), next_due = UINT64_MAX, ok;
	struct s3_xfer *x, *nx;
	int running, timeout = 1000;

	pthread_mutex_lock(&s->lock);
	ok = s->ok_ms;
	pthread_mutex_unlock(&s->lock);
	for (x = c->live; x; x = nx) {
		nx = x->next;
		if (x->state != XS_WAITING)
			continue;
		if (x->attempt && no_retry(s, x)) {
			give_up(s, c, x);
			continue;
		}
		int after_conn_fail = x->attempt && x->conn_fail;
		/* a retry after a connection failure goes now once another
		 * request got through since: the endpoint is back, and its
		 * writer need not wait out a back-off of up to 20 s */
		if (after_conn_fail && x->due > now && x->since >= ok &&
		    now >= x->since + S3_PROBE_MS && probe_claim(s, now))
			x->probe = 1;
		if (x->due <= now || x->probe || (after_conn_fail && x->since < ok)) {
			int ret = xfer_start(s, c, x);

			if (ret) {
				snprintf(x->why, sizeof(x->why), "%s", strerror(-ret));
				xfer_finish(s, c, x, ret);
			}
		} else if (x->due < next_due) {
			next_due = x->due;
		}
	}
	curl_multi_perform(c->multi, &running);
	if (conn_reap(s, c) || !wait || !c->live)
		return;
	if (next_due != UINT64_MAX && next_due - now < (uint64_t)timeout)
		timeout = (int)(next_due - now) + 1;
	curl_multi_poll(c->multi, NULL, 0, timeout, NULL);
	curl_multi_perform(c->multi, &running);
	conn_reap(s, c);
}

void s3_xfer_cancel(struct s3_conn *c, struct s3_xfer *x)
{
	if (x->state == XS_WAITING || x->state == XS_RUNNING) {
		xfer_release(c, x);
		conn_unlink(c, x);
		x->state = XS_DONE;
		x->err = -ECANCELED;
	}
}

void s3_xfer_fini(struct s3_xfer *x)
{
	free(x->resp);
	x->resp = NULL;
	x->resp_len = x->resp_cap = 0;
}

struct s3_conn *s3_conn_get(struct s3_client *s)
{
	struct s3_conn *c;

	pthread_mutex_lock(&s->lock);
	c = s->idle;
	if (c)
		s->idle = c->next;
	pthread_mutex_unlock(&s->lock);
	if (c)
		return c;
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->multi = curl_multi_init();
	if (!c->multi) {
		free(c);
		return NULL;
	}
	curl_multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)s->io_workers);
	curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, (long)s->io_workers);
	pthread_mutex_lock(&s->lock);
	c->rng = xorshift(&s->rng) | 1;
	pthread_mutex_unlock(&s->lock);
	return c;
}

void s3_conn_free(struct s3_conn *c)
{
	curl_multi_cleanup(c->multi);
	free(c);
}

void s3_conn_put(struct s3_client *s, struct s3_conn *c)
{
	if (!c)
		return;
	while (c->live)
		s3_xfer_cancel(c, c->live);
	pthread_mutex_lock(&s->lock);
	c->next = s->idle;
	s->idle = c;
	pthread_mutex_unlock(&s->lock);
}

/* Run x to completion on c (or on a pooled conn when c is NULL). Returns x->err. */
int s3_xfer_run(struct s3_client *s, struct s3_conn *c, struct s3_xfer *x)
{
	struct s3_conn *own = NULL;

	if (!c) {
		c = own = s3_conn_get(s);
		if (!c) {
			snprintf(x->why, sizeof(x->why), "out of memory");
			return x->err = -ENOMEM;
		}
	}
	s3_xfer_submit(c, x);
	while (x->state != XS_DONE)
		s3_conn_step(s, c, 1);
	s3_conn_put(s, own);
	return x->err;
}

void s3_xfer_global_init(void)
{
	pthread_once(&curl_once, curl_init_once);
}
