/*
 * store_s3_i.h — private to tier/store/store_s3*.c: the S3 store's put,
 * ranged-read and listing machinery on the request engine of
 * tier/s3/s3_xfer.h (puts: store_s3_put.c; reads and listings:
 * store_s3_read.c), shared by the segment store (store_s3.c: its open,
 * close and store_ops table) and the named objects (store_s3_obj.c).
 * Retry and logging rules: store_s3.c DESIGN; part buffers:
 * store_s3_put.c DESIGN.
 * Threading: a conn, a put and a transfer are used by one thread at a time;
 * only the s3_store fields marked "protected by cl.lock" are shared.
 */
#ifndef SPW_STORE_S3_I_H
#define SPW_STORE_S3_I_H

#include "tier/s3/s3_pool.h"
#include "tier/s3/s3_xfer.h"
#include "tier/store/store.h"

#include <stddef.h>
#include <stdint.h>

struct s3_store {
	struct store base;
	struct s3_client cl; /* the request engine: target, creds, conns, lock */
	char *endpoint, *region, *bucket, *prefix;
	char name[256];
	uint64_t part_size;
	unsigned list_page; /* max-keys of a ListObjectsV2 page; 0: the server's default */
	uint64_t used;	    /* protected by cl.lock: bytes put minus removed since open */
	unsigned puts;	    /* protected by cl.lock: puts in flight */
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

/* ---- the store_ops calls of s3_ops (contracts: store.h) ---- */

/* store_s3_put.c */
int s3_put_begin(struct store *st, uint64_t seg_id, uint64_t size_hint, struct store_put **out);
int s3_put_append(struct store_put *put, const void *buf, size_t len);
int s3_put_window(struct store_put *put, void **buf, size_t *len);
int s3_put_finish(struct store_put *put, uint32_t *dev);
void s3_put_abort(struct store_put *put);
/* store_s3_read.c */
int s3_read(struct store *st, uint64_t seg_id, uint32_t dev, uint64_t off, void *buf, size_t len);
int s3_remove(struct store *st, uint64_t seg_id, uint32_t dev);
int s3_list(struct store *st, store_list_fn fn, void *arg);

/* ---- puts (store_s3_put.c) ---- */

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

/* ---- reads and listings (store_s3_read.c) ---- */

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
