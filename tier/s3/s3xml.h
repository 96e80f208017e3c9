/*
 * s3xml — parse the S3 XML responses the s3 store needs (libxml2):
 * Error, InitiateMultipartUploadResult, CompleteMultipartUploadResult (or
 * the Error a 200 OK may carry), ListMultipartUploadsResult and
 * ListBucketResult (ListObjectsV2). Elements are matched by local name, so
 * documents with or without xmlns="http://s3.amazonaws.com/doc/2006-03-01/"
 * parse alike. No network access, no entity expansion.
 * Threading: no shared state (libxml2 is initialised once); any thread.
 */
#ifndef SPW_S3XML_H
#define SPW_S3XML_H

#include <stddef.h>
#include <stdint.h>

struct s3xml_error {
	char code[64];	   /* e.g. "NoSuchKey", "SlowDown"; "" when absent */
	char message[256]; /* truncated */
};

/* Parse an <Error> document. 0, -ENOENT (well-formed but another root), -EINVAL (not XML). */
int s3xml_parse_error(const char *doc, size_t len, struct s3xml_error *err);

/* InitiateMultipartUploadResult: *upload_id malloc'ed (caller frees). 0, -EINVAL, -ENOMEM. */
int s3xml_parse_initiate(const char *doc, size_t len, char **upload_id);

/*
 * The body of a CompleteMultipartUpload 200 OK: 0 for
 * CompleteMultipartUploadResult, -EREMOTEIO for <Error> (err filled), -EINVAL
 * for anything else (empty, not XML, another root).
 */
int s3xml_parse_complete(const char *doc, size_t len, struct s3xml_error *err);

struct s3xml_upload {
	char *key, *upload_id;
};

struct s3xml_uploads {
	struct s3xml_upload *v;
	size_t n;
	int truncated;
	char *next_key_marker, *next_upload_id_marker; /* NULL when absent */
};

/* ListMultipartUploadsResult into *out (free with s3xml_uploads_free). 0, -EINVAL, -ENOMEM. */
int s3xml_parse_list_uploads(const char *doc, size_t len, struct s3xml_uploads *out);
void s3xml_uploads_free(struct s3xml_uploads *u);

struct s3xml_object {
	char *key;
	uint64_t size;
};

struct s3xml_objects {
	struct s3xml_object *v;
	size_t n;
	int truncated;
	char *next_token; /* NextContinuationToken, NULL when absent */
};

/* ListBucketResult (ListObjectsV2) into *out (free with s3xml_objects_free). 0, -EINVAL, -ENOMEM.
 */
int s3xml_parse_list_objects(const char *doc, size_t len, struct s3xml_objects *out);
void s3xml_objects_free(struct s3xml_objects *o);

#endif
