/*
 * s3req — the pure parts of talking to S3: s3:// URL and endpoint parsing,
 * segment object keys, credentials (file or environment), the retry
 * schedule, and building one signed request (URL + SigV4 headers).
 * Guarantees: no network I/O; no secret is ever logged or put in an error
 * message; credentials files readable by group or others are refused.
 * Threading: no shared state; any thread.
 */
#ifndef SPW_S3REQ_H
#define SPW_S3REQ_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "tier/s3/sigv4.h"

/* S3's limit of parts in a multipart upload */
#define S3_MAX_PARTS 10000u

/* Retry schedule: attempts per request, and full-jitter backoff bounds. */
#define S3_MAX_ATTEMPTS	       8u
#define S3_OPEN_ATTEMPTS       3u /* the bucket check at open fails faster */
#define S3_UNMOUNT_ATTEMPTS    3u /* and every request once unmounting */
#define S3_BACKOFF_BASE_MS     100u
#define S3_BACKOFF_THROTTLE_MS 500u /* 503 SlowDown, 429 */
#define S3_BACKOFF_CAP_MS      20000u
/* While requests wait out back-offs after connection failures and none got
 * through since, one of them goes early as a probe this often (per client;
 * a failed probe spends no attempt): an endpoint back is found within it */
#define S3_PROBE_MS 1000u

struct s3_creds {
	char *access_key;
	char *secret_key;
	char *session_token; /* NULL when none */
};

/*
 * Split "s3://bucket[/prefix]" into malloc'ed *bucket and *prefix (caller
 * frees both; the prefix without leading or trailing '/', "" when none).
 * -EINVAL (the reason is logged: not s3://, bad bucket name, "." or ".."
 * or empty components in the prefix), -ENOMEM.
 */
int s3_url_parse(const char *url, char **bucket, char **prefix);
/* The same, with the one-line reason in err instead of the log. */
int s3_url_parse_err(const char *url, char **bucket, char **prefix, char *err, size_t errlen);

/* Check "http(s)://host[:port][/]"; host and hostlen get the host part. 0 or -EINVAL. */
int s3_endpoint_split(const char *ep, const char **scheme_end, const char **host, size_t *hostlen);

/*
 * Load credentials from file (AWS shared-credentials format: the profile
 * named by $AWS_PROFILE, else [default]; aws_access_key_id,
 * aws_secret_access_key, optional aws_session_token) or, when file is NULL,
 * from $AWS_ACCESS_KEY_ID, $AWS_SECRET_ACCESS_KEY, $AWS_SESSION_TOKEN.
 * A file with any group or other permission bit is refused (-EACCES: it
 * must be mode 0600 or 0400). On error err gets a one-line reason without
 * any secret. Free *out with s3_credentials_free(). 0, -EACCES, -ENOENT,
 * -EINVAL, -ENOMEM, or the -errno of open/read.
 */
int s3_credentials_load(const char *file, struct s3_creds *out, char *err, size_t errlen);
/* Wipe and free the strings of c (not c itself). */
void s3_credentials_free(struct s3_creds *c);

/*
 * Full-jitter backoff before retry number attempt + 1 (attempt 0 = the
 * first retry): a value in [0, min(cap, base << attempt)] chosen by rnd,
 * base S3_BACKOFF_THROTTLE_MS when throttled else S3_BACKOFF_BASE_MS, cap
 * S3_BACKOFF_CAP_MS. Pure.
 */
uint32_t s3_backoff_ms(unsigned attempt, int throttled, uint64_t rnd);
/* The delay actually waited: the backoff, or Retry-After (seconds, 0 = none) if longer; capped. */
uint32_t s3_retry_delay_ms(unsigned attempt, int throttled, uint32_t retry_after_s, uint64_t rnd);

/* The response headers the s3 store reads. */
enum s3_hdr {
	S3_HDR_OTHER = 0,
	S3_HDR_ETAG,
	S3_HDR_RETRY_AFTER,    /* num: delta-seconds, capped at 3600 */
	S3_HDR_CONTENT_RANGE,  /* num: the complete length after '/' */
	S3_HDR_CONTENT_LENGTH, /* num: the length */
	S3_HDR_REGION,	       /* x-amz-bucket-region */
};
struct s3_hdr_val {
	char text[128]; /* the value, trimmed, NUL-terminated, cut to fit */
	int64_t num;	/* numeric headers: the value; -1 when absent or malformed */
};
/*
 * Parse one raw header line as curl hands it ("Name: value\r\n", not
 * NUL-terminated): which S3_HDR_* it is (names are case-insensitive) and its
 * value into *v. Numbers must be plain decimal digits that fit an int64
 * (else num is -1: an HTTP-date Retry-After, "bytes * / N" gives N). Pure.
 */
enum s3_hdr s3_header_parse(const char *line, size_t len, struct s3_hdr_val *v);

/* Object key of segment seg_id: "<prefix>/seg-<16 hex>.spw" ("seg-..." when prefix is "").
 * Malloc'ed or NULL. */
char *s3_seg_key(const char *prefix, uint64_t seg_id);
/* Segment id of key when it is exactly such a key under prefix; 0 on match, -1 otherwise. */
int s3_seg_key_parse(const char *prefix, const char *key, uint64_t *id);

struct s3_target {
	const char *endpoint; /* http(s)://host[:port][/] */
	const char *region;
	const char *bucket;
	int path_style; /* 1: endpoint/bucket/key; 0: bucket.endpoint/key */
};

struct s3_req_spec {
	const char *method;
	const char *key; /* full object key, NULL for the bucket itself */
	const struct sigv4_kv *query;
	size_t nq;
	const char *range;	  /* "bytes=a-b" or NULL */
	const char *payload_hash; /* hex SHA-256 of the body */
};

#define S3_REQ_MAX_HEADERS 8
struct s3_req {
	char *url;
	char *headers[S3_REQ_MAX_HEADERS]; /* "Name: value" lines, signed, Authorization last */
	int nheaders;
};

/*
 * Build the URL and the signed headers (Host, x-amz-date,
 * x-amz-content-sha256, x-amz-security-token when a session token is set,
 * Range, Authorization) of one request at time now. Free with
 * s3_req_free(). 0, -EINVAL (bad endpoint), -ENOMEM.
 */
int s3_req_build(const struct s3_target *t, const struct s3_creds *cr, const struct s3_req_spec *rq,
		 time_t now, struct s3_req *out);
void s3_req_free(struct s3_req *r);

#endif
