/*
 * s3_xfer — the S3 request engine: transfers signed afresh on every attempt
 * and run on pooled libcurl multi handles (conns) of one s3_client, with the
 * retry rules of store_s3.c DESIGN. The S3 store (tier/store/store_s3*.c)
 * embeds one s3_client and drives its puts, reads and listings through it.
 * Threading: a conn and a transfer are used by one thread at a time; only
 * the s3_client fields marked "protected by lock" are shared.
 */
#ifndef SPW_S3_XFER_H
#define SPW_S3_XFER_H

#include "tier/s3/s3req.h"
#include "tier/s3/sigv4.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

enum { XS_IDLE, XS_WAITING, XS_RUNNING, XS_DONE };

struct s3_xfer {
	/* request, set before s3_xfer_submit() or s3_xfer_run() */
	const char *method;
	const char *key; /* NULL: the bucket */
	struct sigv4_kv q[4];
	size_t nq;
	const uint8_t *body;
	size_t body_len;
	char body_hash[SIGV4_HASH_HEX];
	uint8_t *dst; /* ranged GET: dst_len bytes of the object from off */
	size_t dst_len;
	uint64_t off;
	unsigned max_attempts;
	int complete;  /* CompleteMultipartUpload: a 200 OK may carry <Error> */
	int short_ok;  /* ranged GET from off: an object ending inside the range is fine
			* (got < dst_len; obj_total gets the size; 416 at off 0 = empty) */
	int empty_cut; /* short_ok: a 206 for a 0-byte object, cut after its headers */
	/* per attempt */
	int state;
	unsigned attempt;
	uint64_t due;  /* ms, monotonic: when a waiting retry starts */
	uint64_t since; /* ms, monotonic: when it began to wait */
	int retry_err; /* the error of the attempt a waiting retry follows */
	int probe;     /* this attempt went before its due as the client's probe */
	CURL *easy;
	struct curl_slist *hdrs;
	size_t up_pos;
	uint64_t pos; /* object offset of the next body byte (ranged GET) */
	int pos_set, overflow;
	size_t got;
	char *resp;
	size_t resp_len, resp_cap;
	long status;
	char etag[128];
	char region[64];      /* x-amz-bucket-region */
	int64_t obj_total;    /* from Content-Range, -1 when unknown */
	int64_t clen;	      /* Content-Length (HEAD), -1 when unknown */
	uint32_t retry_after; /* seconds */
	char curl_err[CURL_ERROR_SIZE];
	/* result */
	int err;
	int conn_fail; /* gave up on connection-level errors */
	char why[400];
	struct s3_xfer *next; /* in conn->live */
};

struct s3_conn {
	CURLM *multi;
	struct s3_xfer *live; /* waiting or running transfers */
	uint64_t rng;
	struct s3_conn *next; /* in s3_client.idle */
};

/* Where and as whom transfers go, and the pool of idle conns. The owner
 * fills target, creds, ca_file, io_workers and rng and initialises lock
 * before the first transfer, and frees the idle conns (s3_conn_free). */
struct s3_client {
	struct s3_target target;
	struct s3_creds creds;
	char *ca_file;	      /* NULL: the system's CAs */
	unsigned io_workers;  /* connections per conn */
	pthread_mutex_t lock;
	struct s3_conn *idle; /* protected by lock */
	uint64_t rng;	      /* protected by lock */
	int failed;	      /* protected by lock: the last request ran out of retries */
	uint64_t ok_ms;	      /* protected by lock: when a request last succeeded (monotonic) */
	uint64_t probe_ms;    /* protected by lock: when a waiting retry last went early as a
			       * probe of a failing endpoint (S3_PROBE_MS apart) */
	int unmounting;	      /* protected by lock: no retry once failed (s3_client_unmounting) */
};

/* The mount is going away: from now on a request gets at most
 * S3_UNMOUNT_ATTEMPTS attempts, and none more while S3 is failing (a
 * request ran out of retries and none has succeeded since); retries
 * already waiting past that end with their error. So an unmount never
 * waits out the retries of a dead endpoint (minutes: 8 attempts each, up
 * to 20 s apart), while a flaky one still gets a retry for the unmount's
 * last spills. */
void s3_client_unmounting(struct s3_client *cl);
/* libcurl's global init, once per process (before the first conn). */
void s3_xfer_global_init(void);
/* Run x to completion on c (or on a pooled conn when c is NULL). Returns
 * x->err; x->why says what failed. Free the reply with s3_xfer_fini(). */
int s3_xfer_run(struct s3_client *cl, struct s3_conn *c, struct s3_xfer *x);
void s3_xfer_fini(struct s3_xfer *x);
/* Queue x on c (state XS_WAITING); s3_conn_step() runs it to XS_DONE. */
void s3_xfer_submit(struct s3_conn *c, struct s3_xfer *x);
/* Drop x from c if it is still waiting or running (x->err = -ECANCELED). */
void s3_xfer_cancel(struct s3_conn *c, struct s3_xfer *x);
/* Start due retries and move data on c; with wait, block (<= 1 s) until
 * something completes. */
void s3_conn_step(struct s3_client *cl, struct s3_conn *c, int wait);
/* A conn from the pool (or a new one); NULL: no memory. s3_conn_put cancels
 * what is still on c and pools it again (c may be NULL). s3_conn_free
 * closes an idle conn for good. */
struct s3_conn *s3_conn_get(struct s3_client *cl);
void s3_conn_put(struct s3_client *cl, struct s3_conn *c);
void s3_conn_free(struct s3_conn *c);

#endif
