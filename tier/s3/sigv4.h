/*
 * sigv4 — AWS Signature Version 4 for HTTP requests (header-signed).
 * Pure functions over OpenSSL's SHA-256 and HMAC-SHA256: canonical request,
 * string to sign, signing key, Authorization header. URI encoding follows the
 * S3 rules (every byte except A-Z a-z 0-9 - . _ ~ is %XX-encoded, '/' kept in
 * paths); paths are not normalised or double-encoded (S3 style).
 * Threading: no state; safe from any thread. Secrets are never logged.
 */
#ifndef SPW_SIGV4_H
#define SPW_SIGV4_H

#include <stddef.h>
#include <time.h>

#define SIGV4_HASH_HEX	65 /* 64 lowercase hex digits and a NUL */
#define SIGV4_DATE_LEN	17 /* "YYYYMMDDTHHMMSSZ" and a NUL */
#define SIGV4_ALGORITHM "AWS4-HMAC-SHA256"

/* A header or a query parameter: name and value, raw (not encoded). */
struct sigv4_kv {
	const char *name;
	const char *value; /* NULL is the empty string */
};

struct sigv4_key {
	const char *access_key;
	const char *secret_key;
	const char *region;  /* e.g. "us-east-1" */
	const char *service; /* "s3" */
};

/* Lowercase hex SHA-256 of len bytes. */
void sigv4_sha256_hex(const void *data, size_t len, char out[SIGV4_HASH_HEX]);

/* "YYYYMMDDTHHMMSSZ" (UTC) for t. */
void sigv4_amz_date(time_t t, char out[SIGV4_DATE_LEN]);

/*
 * URI-encode s into a malloc'ed string (caller frees); keep_slash leaves '/'
 * as is (paths), otherwise it becomes %2F (query names and values).
 * NULL when out of memory.
 */
char *sigv4_uri_encode(const char *s, int keep_slash);

/*
 * Canonical query string of n parameters: each name and value URI-encoded,
 * joined with '=', sorted by name then value, joined with '&' ("" when
 * n == 0). The same string is a valid URL query. Malloc'ed, caller frees;
 * NULL when out of memory.
 */
char *sigv4_canonical_query(const struct sigv4_kv *q, size_t n);

/*
 * The canonical request (malloc'ed, caller frees; NULL when out of memory):
 *   METHOD \n canonical_uri \n canonical_query \n
 *   lowercase-name:trimmed-value \n ... (sorted by name) \n
 *   signed;header;names \n payload_hash
 * canonical_uri is already encoded (sigv4_uri_encode(path, 1)); every one
 * of the n headers is signed (values trimmed, inner runs of spaces folded).
 * *signed_headers (may be NULL) gets the malloc'ed "a;b;c" list.
 */
char *sigv4_canonical_request(const char *method, const char *canonical_uri,
			      const char *canonical_query, const struct sigv4_kv *hdrs, size_t n,
			      const char *payload_hash, char **signed_headers);

/*
 * Sign a request: fills auth (the Authorization header value,
 * "AWS4-HMAC-SHA256 Credential=.../aws4_request, SignedHeaders=...,
 * Signature=<64 hex>") for the canonical request built from the arguments
 * as above, at amz_date ("YYYYMMDDTHHMMSSZ", which must also be the
 * x-amz-date header among hdrs). 0, -ENOMEM, -ENOSPC (auth too small,
 * 512 bytes always suffice for short keys) or -EINVAL (bad date).
 */
int sigv4_sign(const struct sigv4_key *key, const char *amz_date, const char *method,
	       const char *canonical_uri, const char *canonical_query, const struct sigv4_kv *hdrs,
	       size_t n, const char *payload_hash, char *auth, size_t authlen);

#endif
