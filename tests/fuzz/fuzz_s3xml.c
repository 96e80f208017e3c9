/*
 * fuzz_s3xml — the S3 XML response parsers (tier/s3/s3xml.c). The first byte
 * picks the parser: Error, InitiateMultipartUploadResult,
 * CompleteMultipartUpload's reply, ListMultipartUploadsResult,
 * ListBucketResult (ListObjectsV2); the rest is the body.
 * Invariants: return codes are the documented ones; fixed-size strings are
 * NUL-terminated inside their arrays; accepted lists have a non-NULL key per
 * entry and n == 0 exactly when v is NULL; a rejected document leaves
 * nothing allocated (outputs empty; LeakSanitizer checks the rest).
 */
#include "fuzz.h"
#include "tier/s3/s3xml.h"

#include <errno.h>
#include <string.h>

static void check_err(const struct s3xml_error *e)
{
	FUZZ_CHECK(memchr(e->code, 0, sizeof(e->code)) && memchr(e->message, 0, sizeof(e->message)),
		   "unterminated error strings");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct s3xml_error err;
	struct s3xml_uploads u;
	struct s3xml_objects o;
	char *doc, *id = NULL;
	int ret;

	if (size < 1)
		return 0;
	doc = malloc(size - 1 ? size - 1 : 1);
	memcpy(doc, data + 1, size - 1);
	memset(&err, 0x55, sizeof(err));
	switch (data[0] % 5) {
	case 0:
		ret = s3xml_parse_error(doc, size - 1, &err);
		FUZZ_CHECK(ret == 0 || ret == -ENOENT || ret == -EINVAL, "error: %d", ret);
		if (ret == 0)
			check_err(&err);
		break;
	case 1:
		ret = s3xml_parse_initiate(doc, size - 1, &id);
		FUZZ_CHECK(ret == 0 || ret == -EINVAL || ret == -ENOMEM, "initiate: %d", ret);
		FUZZ_CHECK((ret == 0) == (id != NULL), "initiate: %d with id %p", ret, (void *)id);
		free(id);
		break;
	case 2:
		ret = s3xml_parse_complete(doc, size - 1, &err);
		FUZZ_CHECK(ret == 0 || ret == -EREMOTEIO || ret == -EINVAL, "complete: %d", ret);
		if (ret == -EREMOTEIO)
			check_err(&err);
		break;
	case 3:
		memset(&u, 0x55, sizeof(u));
		ret = s3xml_parse_list_uploads(doc, size - 1, &u);
		FUZZ_CHECK(ret == 0 || ret == -EINVAL || ret == -ENOMEM, "list uploads: %d", ret);
		if (ret == 0) {
			FUZZ_CHECK((u.n == 0) == (u.v == NULL), "n %zu, v %p", u.n, (void *)u.v);
			for (size_t i = 0; i < u.n; i++)
				FUZZ_CHECK(u.v[i].key && u.v[i].upload_id, "upload %zu", i);
			s3xml_uploads_free(&u);
		} else {
			FUZZ_CHECK(!u.v && !u.n && !u.next_key_marker && !u.next_upload_id_marker,
				   "a rejected list left output behind");
		}
		break;
	default:
		memset(&o, 0x55, sizeof(o));
		ret = s3xml_parse_list_objects(doc, size - 1, &o);
		FUZZ_CHECK(ret == 0 || ret == -EINVAL || ret == -ENOMEM, "list objects: %d", ret);
		if (ret == 0) {
			FUZZ_CHECK((o.n == 0) == (o.v == NULL), "n %zu, v %p", o.n, (void *)o.v);
			for (size_t i = 0; i < o.n; i++)
				FUZZ_CHECK(o.v[i].key, "object %zu", i);
			s3xml_objects_free(&o);
		} else {
			FUZZ_CHECK(!o.v && !o.n && !o.next_token, "a rejected list left output behind");
		}
		break;
	}
	free(doc);
	return 0;
}
