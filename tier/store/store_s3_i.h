/*
 * store_s3_i.h — private to tier/store/store_s3*.c: the S3 store's put,
 * ranged-read and listing machinery on the request engine of
 * tier/s3/s3_xfer.h, shared by the segment store
 * (store_s3.c, which owns it) and the named objects (store_s3_obj.c).
 * Retry, logging and part-buffer rules: store_s3.c DESIGN.
 * Threading: a conn, a put and a transfer are used by one thread at a time;
 * only the s3_store fields marked "protected by cl.lock" are shared.
 */
#ifndef SPW_STORE_S3_I_H
#define SPW_STORE_S3_I_H

#include "tier/s3/s3_pool.h"
#include "tier/s3/s3_xfer.h"
#include "tier/store/store_s3.h"

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
