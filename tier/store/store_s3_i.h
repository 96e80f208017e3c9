/*
 * store_s3_i.h — private to tier/store_s3*.c and s3_xfer.c: the S3 store's
 * request engine (transfers on pooled libcurl conns, s3_xfer.c), its put,
 * ranged-read and listing machinery, shared by the segment store
 * (store_s3.c, which owns it) and the named objects (store_s3_obj.c).
 * Retry, logging and part-buffer rules: store_s3.c DESIGN.
 * Threading: a conn, a put and a transfer are used by one thread at a time;
 * only the s3_store fields marked "protected by lock" are shared.
 */
#ifndef SPW_STORE_S3_I_H
#define SPW_STORE_S3_I_H

#include "tier/s3/s3_pool.h"
#include "tier/store/store_s3.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

enum { XS_IDLE, XS_WAITING, XS_RUNNING, XS_DONE };

struct s3_xfer {
	/* request, set before xfer_submit() */
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
	uint64_t due; /* ms, monotonic: when a waiting retry starts */
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
	struct s3_conn *next; /* in s3_store.idle */
};

struct s3_store {
	struct store base;
	struct s3_target target;
	char *endpoint, *region, *bucket, *prefix, *ca_file;
	char name[256];
	uint64_t part_size;
	unsigned io_workers;
	unsigned list_page; /* max-keys of a ListObjectsV2 page; 0: the server's default */
	struct s3_creds creds;
	pthread_mutex_t lock;
	struct s3_conn *idle; /* protected by lock */
	uint64_t used;	      /* protected by lock: bytes put minus removed since open */
	uint64_t rng;	      /* protected by lock */
	int failed;	      /* protected by lock: the last request ran out of retries */
	unsigned puts;	      /* protected by lock: puts in flight */
	struct s3_pool *pool; /* part buffers of every put (thread-safe itself) */
};

struct part_slot {
	uint8_t *buf; /* from s3_store.pool until collected; NULL: the caller's bytes */
	size_t len;
	unsigned part_no;
	char part_str[12];
	int busy; /* submitted, result not collected */
	struct s3_xfer x;
};

struct s3_put {
	struct store_put base;
	uint64_t seg_id;
	int named; /* a named object (store_s3_put_object), not a segment */
	char *key;
	struct s3_conn *conn;
	uint8_t *fill; /* part being filled, from s3_store.pool; NULL: none yet */
	size_t fill_len;
	struct part_slot *slots; /* io_workers */
	char *upload_id;	 /* multipart, once started */
	unsigned nparts;	 /* parts handed to slots */
	char **etags;		 /* [part_no - 1] */
	unsigned etags_cap;
	uint64_t size;
	int err; /* first error: the put is then only good for abort */
};

extern const struct store_ops s3_ops; /* st->ops of every S3 store */

static inline struct s3_store *to_s3(struct store *st)
{
	return (struct s3_store *)st;
}

/* ---- the request engine (s3_xfer.c) ---- */

/* libcurl's global init, once per process (before the first conn). */
void s3_xfer_global_init(void);
/* Run x to completion on c (or on a pooled conn when c is NULL). Returns
 * x->err; x->why says what failed. Free the reply with s3_xfer_fini(). */
int s3_xfer_run(struct s3_store *s, struct s3_conn *c, struct s3_xfer *x);
void s3_xfer_fini(struct s3_xfer *x);
/* Queue x on c (state XS_WAITING); s3_conn_step() runs it to XS_DONE. */
void s3_xfer_submit(struct s3_conn *c, struct s3_xfer *x);
/* Drop x from c if it is still waiting or running (x->err = -ECANCELED). */
void s3_xfer_cancel(struct s3_conn *c, struct s3_xfer *x);
/* Start due retries and move data on c; with wait, block (<= 1 s) until
 * something completes. */
void s3_conn_step(struct s3_store *s, struct s3_conn *c, int wait);
/* A conn from the pool (or a new one); NULL: no memory. s3_conn_put cancels
 * what is still on c and pools it again (c may be NULL). s3_conn_free
 * closes an idle conn for good. */
struct s3_conn *s3_conn_get(struct s3_store *s);
void s3_conn_put(struct s3_store *s, struct s3_conn *c);
void s3_conn_free(struct s3_conn *c);

/* ---- puts, reads and listings (store_s3.c) ---- */

/* A put of key (taken over: freed on failure too) with its conn and slots;
 * NULL: no memory. Free with s3_put_free(). */
struct s3_put *s3_put_new(struct s3_store *s, char *key);
/* A free slot for the next part (starting the multipart upload first),
 * waiting for one. 0, -EFBIG (past S3_MAX_PARTS), -ENOMEM, -EIO. */
int s3_put_slot(struct s3_put *p, struct part_slot **out);
/* Start uploading len bytes at body (alive until the part is collected) as
 * the next part. */
void s3_put_send(struct s3_put *p, struct part_slot *sl, const uint8_t *body, size_t len);
/* Wait until every part handed out is uploaded. 0, or the first part's failure. */
int s3_put_drain(struct s3_put *p);
/* CompleteMultipartUpload of the parts sent. 0, -ENOMEM, -EIO. */
int s3_put_complete(struct s3_put *p);
/* Cancel the parts in flight and abort the multipart upload, if any. */
void s3_put_cancel(struct s3_put *p);
void s3_put_free(struct s3_put *p);

/* Read len bytes at off of key into buf in parallel ranged GETs on c; with
 * etag, a piece of another ETag fails with -ESTALE. what names the object in
 * the log. 0, -ENOENT, -EACCES, -ENOMEM, -ESTALE or -EIO. */
int s3_read_pieces(struct s3_store *s, struct s3_conn *c, const char *key, uint64_t off,
		   uint8_t *buf, size_t len, const char *etag, const char *what);
/* The listing prefix: "<prefix>/" or "" for the whole bucket; NULL: no memory.
 * Caller frees. */
char *s3_list_prefix(const struct s3_store *s);
/* Call fn(arg, key, size) for every key starting with prefix, all pages.
 * 0, fn's nonzero return, -EACCES, -ENOMEM or -EIO. */
int s3_list_keys(struct s3_store *s, const char *prefix,
		 int (*fn)(void *arg, const char *key, uint64_t size), void *arg, const char *what);

#endif
