/*
 * store_s3 — the S3 cold store (AWS, MinIO, Ceph RGW, ...) behind struct
 * store_ops. Segment seg_id is the object <prefix>/seg-<16 hex>.spw: one PUT
 * up to part_size bytes, a multipart upload (parts in parallel) above it;
 * ranged GETs (in parallel for large ranges) to read; DELETE to remove.
 * Named objects (store_s3_*_object: journal, checkpoints) live beside the
 * segments as <prefix>/<name>, whole-object transfers on the same machinery.
 * Guarantees: an object exists under its key only once the upload returned
 * 200 OK (S3 semantics); a failed multipart upload is aborted; requests are
 * signed with SigV4, TLS is verified, secrets are never logged; transient
 * failures are retried with exponential backoff and full jitter.
 * Threading: the store is thread-safe; one put is used by one thread at a time.
 */
#ifndef SPW_STORE_S3_H
#define SPW_STORE_S3_H

#include <stddef.h>
#include <stdint.h>

#include "tier/s3/s3_pool.h" /* struct s3_pool_stats */
#include "tier/s3/s3req.h"	  /* s3_url_parse, s3_credentials_load, S3_MAX_PARTS, ... */
#include "tier/store/store.h"

#define S3_DEFAULT_PART_SIZE	 (16ull << 20)
#define S3_MIN_PART_SIZE	 (5ull << 20) /* S3's smallest non-final part */
#define S3_MAX_PART_SIZE	 (5ull << 30)
#define S3_DEFAULT_IO_WORKERS	 8u
#define S3_MAX_IO_WORKERS	 64u
#define S3_DEFAULT_REGION	 "us-east-1"
#define S3_CAPACITY		 (1ull << 50)  /* stat total: S3 has no capacity; 1 PiB */
#define S3_DEFAULT_BUFFER_BUDGET (48ull << 20) /* part buffers of all puts together */
#define S3_MAX_PART_BUFFERS	 1024u

struct s3_config {
	const char *url;      /* s3://bucket[/prefix] */
	const char *endpoint; /* http(s)://host[:port]; NULL: https://s3.<region>.amazonaws.com */
	const char *region;   /* NULL: us-east-1 */
	int path_style;	      /* 1: http(s)://host/bucket/key; 0: http(s)://bucket.host/key */
	uint64_t part_size;   /* 0: S3_DEFAULT_PART_SIZE; else 5 MiB .. 5 GiB */
	unsigned io_workers;  /* parallel connections per put/read; 0: 8 */
	const char *credentials_file; /* AWS shared-credentials file, or NULL: environment */
	const char *ca_file;	      /* CA bundle for TLS, or NULL: the system's */
	unsigned list_page; /* keys per ListObjectsV2 page (max-keys); 0: the server's (1000) */
	/* bytes of part buffers for all segment puts together, in whole parts:
	 * 0: S3_DEFAULT_BUFFER_BUDGET (at least 2 parts); else at least 1 part */
	uint64_t buffer_budget;
};

/*
 * Open the store: validate cfg, load the credentials, check the bucket
 * (HEAD: a wrong key or signature → 403, a missing bucket → 404, an
 * unreachable endpoint → connection error, each refused with a one-line
 * reason in err), then abort the unfinished multipart uploads of our
 * segments under the prefix (a server without ListMultipartUploads or
 * AbortMultipartUpload only gets a warning). One device, index 0, named
 * "s3://bucket/prefix". Caller owns *out; free with store_close().
 * 0, -EINVAL (bad config), -EACCES (credentials or permission), -ENOENT
 * (no such bucket), -EHOSTUNREACH (endpoint unreachable), -EIO, -ENOMEM.
 */
int store_s3_open(const struct s3_config *cfg, struct store **out, char *err, size_t errlen);
/*
 * Where one filesystem's objects live in the bucket: base (an s3= URL, one
 * trailing '/' dropped) + "/" + uuid as 32 lowercase hex digits, so two
 * filesystems sharing a prefix never touch each other's segments; uuid
 * NULL: base itself (the state's copy, "<uuid>/state/...", is found there).
 * Into url (len bytes, cut short if too small). The daemon and
 * spillway-fsck both open their S3 store at this URL.
 */
void store_s3_fs_url(char *url, size_t len, const char *base, const uint8_t *uuid);

/* The part-buffer pool's budget and use (see store_s3.c DESIGN, Writes).
 * 0, or -EINVAL when st is not an S3 store. */
int store_s3_buffer_stats(struct store *st, struct s3_pool_stats *out);

/*
 * Named (non-segment) objects under the store's prefix: key <prefix>/<name>
 * (just <name> for a store at the bucket root). name: [A-Za-z0-9._/-]+, no
 * leading or trailing '/', no "//", no "..", no "." component, and not a
 * segment name (seg-<16 hex>.spw at the top): else -EINVAL; a key longer
 * than 1024 bytes: -ENAMETOOLONG. st must be an S3 store (else -EINVAL).
 * Whole-object transfers, retried like segment requests. They are not
 * segments: list() never reports them and the stat() "used" bytes do not
 * count them. Any thread, concurrently with segment traffic.
 *
 * put: a PUT up to part_size bytes, a multipart upload from buf above it
 * (io_workers parts in flight, no copy). Atomic: readers see the previous
 * version or the new one whole. A failure aborts the multipart upload and
 * leaves the previous version in place (the key is never deleted).
 * 0, -EINVAL, -ENAMETOOLONG, -EFBIG (more than S3_MAX_PARTS parts),
 * -EACCES, -ENOMEM, -EIO.
 */
int store_s3_put_object(struct store *st, const char *name, const void *buf, size_t len);
/*
 * get: *buf malloc'ed (caller frees; never NULL on success, even for an
 * empty object), *len its size. One GET of the first 1 MiB; a larger object
 * is read in parallel ranged GETs of part_size, each checked against the
 * first reply's ETag (replaced meanwhile: read again, up to 3 times, then
 * -EIO). 0, -ENOENT (no such object), -EINVAL, -ENAMETOOLONG, -EACCES,
 * -ENOMEM, -EIO. *buf and *len are untouched on error.
 */
int store_s3_get_object(struct store *st, const char *name, void **buf, size_t *len);
/* delete: HEAD, then DELETE. 0, -ENOENT (no such object), -EINVAL, -EACCES, -ENOMEM, -EIO. */
int store_s3_delete_object(struct store *st, const char *name);
/*
 * Call fn(arg, name, size) for every object whose name (its key relative to
 * the store prefix) starts with sub ("" for all), all pages, in key order.
 * Everything under the prefix is reported, segments ("seg-<hex>.spw") and
 * deeper keys included: a store opened at a base prefix sees
 * "<uuid>/state/...", "<uuid>/seg-...". sub: the name alphabet, may be ""
 * or end in '/', no leading '/', no "..", no "//" (else -EINVAL).
 * name is valid only during the call. fn's nonzero return stops the walk
 * and is returned; else 0, -EINVAL, -EACCES, -ENOMEM, -EIO.
 */
int store_s3_list_objects(struct store *st, const char *sub,
			  int (*fn)(void *arg, const char *name, uint64_t size), void *arg);

#endif
