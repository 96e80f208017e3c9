/*
 * fake_s3 — a scripted S3 server (HTTP/1.1, keep-alive) on loopback for the
 * S3 store's unit tests: the retry and protocol paths a real server will not
 * produce on demand. One thread per connection parses each request, logs
 * "METHOD target", checks its payload hash and SigV4 Authorization header,
 * and asks the test's handler for the answer; a handler that leaves status
 * 0 gets the default (the bucket exists, no unfinished uploads, else 500).
 * fake_s3_start sets AWS_ACCESS_KEY_ID/SECRET to FAKE_S3_AK/SK; stop unsets.
 * Threading: the log and counters are under the server's lock (read them
 * with the fake_s3_* calls); the handler runs on connection threads, set it
 * while no request is in flight. Stop only after the client closed its
 * connections (store_close), so the connection threads end.
 */
#ifndef SPW_FAKE_S3_H
#define SPW_FAKE_S3_H

#include <stddef.h>

#define FAKE_S3_AK "AK"
#define FAKE_S3_SK "SK"

struct fake_s3_req {
	int n; /* index among all requests */
	char method[16];
	char target[512];
	char headers[4096]; /* "Name: value\r\n" lines */
	const char *body;   /* NUL-terminated */
	size_t len;
};

struct fake_s3_resp {
	int status;	    /* 0: the default answer */
	char headers[512];  /* extra "Name: value\r\n" lines */
	const void *body;
	size_t len;
	long send_only;	    /* < 0: the whole body; else send this many body bytes and close */
	void *owned;	    /* freed once the answer is sent (e.g. a malloc'ed body) */
};

typedef void (*fake_s3_fn)(const struct fake_s3_req *rq, struct fake_s3_resp *r);

struct fake_s3;

/* Listen on a free loopback port; NULL on failure. Handler: fake_s3_default. */
struct fake_s3 *fake_s3_start(void);
void fake_s3_stop(struct fake_s3 *f);
int fake_s3_port(const struct fake_s3 *f);
void fake_s3_set_handler(struct fake_s3 *f, fake_s3_fn fn);
/* The default answers (what status 0 from a handler gets). */
void fake_s3_default(const struct fake_s3_req *rq, struct fake_s3_resp *r);

/* The value of header name in headers (into out), or NULL. */
const char *fake_s3_header(const char *headers, const char *name, char *out, size_t outlen);

/* Requests so far: all, those whose "METHOD target" starts with prefix, or
 * is exactly req, or has this method and target_part in its target. */
int fake_s3_total(struct fake_s3 *f);
int fake_s3_count(struct fake_s3 *f, const char *prefix);
int fake_s3_count_exact(struct fake_s3 *f, const char *req);
int fake_s3_count_of(struct fake_s3 *f, const char *method, const char *target_part);
/* Forget the requests so far (the log and the count). */
void fake_s3_reset_log(struct fake_s3 *f);
/* Requests whose x-amz-content-sha256 was not their body's, and those
 * without an "AWS4-HMAC-SHA256 Credential=FAKE_S3_AK/" Authorization. */
int fake_s3_hash_bad(struct fake_s3 *f);
int fake_s3_auth_missing(struct fake_s3 *f);
/* The body of the last CompleteMultipartUpload (POST ...uploadId=) into out. */
void fake_s3_complete_body(struct fake_s3 *f, char *out, size_t outlen);

#endif
