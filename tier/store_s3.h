/*
 * store_s3 — the S3 cold store (AWS, MinIO, Ceph RGW, ...) behind struct
 * store_ops. Segment seg_id is the object <prefix>/seg-<16 hex>.spw: one PUT
 * up to part_size bytes, a multipart upload (parts in parallel) above it;
 * ranged GETs (in parallel for large ranges) to read; DELETE to remove.
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

#include "tier/s3req.h" /* s3_url_parse, s3_credentials_load, ... */
#include "tier/store.h"

#define S3_DEFAULT_PART_SIZE  (16ull << 20)
#define S3_MIN_PART_SIZE      (5ull << 20) /* S3's smallest non-final part */
#define S3_MAX_PART_SIZE      (5ull << 30)
#define S3_MAX_PARTS	      10000u
#define S3_DEFAULT_IO_WORKERS 8u
#define S3_MAX_IO_WORKERS     64u
#define S3_DEFAULT_REGION     "us-east-1"
#define S3_CAPACITY	      (1ull << 50) /* stat total: S3 has no capacity; 1 PiB */

struct s3_config {
	const char *url;      /* s3://bucket[/prefix] */
	const char *endpoint; /* http(s)://host[:port]; NULL: https://s3.<region>.amazonaws.com */
	const char *region;   /* NULL: us-east-1 */
	int path_style;	      /* 1: http(s)://host/bucket/key; 0: http(s)://bucket.host/key */
	uint64_t part_size;   /* 0: S3_DEFAULT_PART_SIZE; else 5 MiB .. 5 GiB */
	unsigned io_workers;  /* parallel connections per put/read; 0: 8 */
	const char *credentials_file; /* AWS shared-credentials file, or NULL: environment */
	const char *ca_file;	      /* CA bundle for TLS, or NULL: the system's */
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

#endif
