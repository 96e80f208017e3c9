/*
 * test_s3xml — the S3 response parsers on sample documents, with and without
 * the S3 namespace: Error, InitiateMultipartUploadResult, the 200-OK
 * CompleteMultipartUpload that carries an <Error>, ListMultipartUploadsResult
 * and ListBucketResult (ListObjectsV2) with pagination fields; garbage and
 * entity tricks are refused.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tier/s3/s3xml.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NS   " xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\""
#define HEAD "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"

/* The document with the S3 namespace on its root (ns = 1) or without it. */
static char *doc(const char *root, const char *body, int ns)
{
	size_t len = strlen(root) * 2 + strlen(body) + 128;
	char *s = malloc(len);

	assert_non_null(s);
	snprintf(s, len, HEAD "<%s%s>%s</%s>", root, ns ? NS : "", body, root);
	return s;
}

static void test_error(void **state)
{
	for (int ns = 0; ns < 2; ns++) {
		char *d = doc("Error",
			      "<Code>NoSuchKey</Code><Message>The resource you requested does not "
			      "exist</Message><Resource>/mybucket/myfoto.jpg</Resource>"
			      "<RequestId>4442587FB7D0A2F9</RequestId>",
			      ns);
		struct s3xml_error e;

		assert_int_equal(s3xml_parse_error(d, strlen(d), &e), 0);
		assert_string_equal(e.code, "NoSuchKey");
		assert_string_equal(e.message, "The resource you requested does not exist");
		free(d);
	}
}

static void test_error_not_error(void **state)
{
	struct s3xml_error e;
	char *d = doc("ListBucketResult", "<Name>b</Name>", 1);

	assert_int_equal(s3xml_parse_error(d, strlen(d), &e), -ENOENT);
	assert_int_equal(s3xml_parse_error("not xml", 7, &e), -EINVAL);
	assert_int_equal(s3xml_parse_error("", 0, &e), -EINVAL);
	assert_int_equal(s3xml_parse_error("<Error><Code>X</Code>", 21, &e), -EINVAL);
	free(d);
}

static void test_error_long_message_truncated(void **state)
{
	char body[2048], msg[1024];
	struct s3xml_error e;
	char *d;

	memset(msg, 'm', sizeof(msg) - 1);
	msg[sizeof(msg) - 1] = 0;
	snprintf(body, sizeof(body), "<Code>InternalError</Code><Message>%s</Message>", msg);
	d = doc("Error", body, 0);
	assert_int_equal(s3xml_parse_error(d, strlen(d), &e), 0);
	assert_string_equal(e.code, "InternalError");
	assert_int_equal(strlen(e.message), sizeof(e.message) - 1);
	free(d);
}

static void test_initiate(void **state)
{
	for (int ns = 0; ns < 2; ns++) {
		char *d = doc("InitiateMultipartUploadResult",
			      "<Bucket>example-bucket</Bucket><Key>example-object</Key>"
			      "<UploadId>VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA"
			      "</UploadId>",
			      ns);
		char *id = NULL;

		assert_int_equal(s3xml_parse_initiate(d, strlen(d), &id), 0);
		assert_string_equal(id,
				    "VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA");
		free(id);
		free(d);
	}
}

static void test_initiate_bad(void **state)
{
	char *d = doc("InitiateMultipartUploadResult", "<Bucket>b</Bucket>", 1);
	char *e = doc("Error", "<Code>AccessDenied</Code>", 1);
	char *id = (char *)1;

	assert_int_equal(s3xml_parse_initiate(d, strlen(d), &id), -EINVAL);
	assert_null(id);
	assert_int_equal(s3xml_parse_initiate(e, strlen(e), &id), -EINVAL);
	free(d);
	free(e);
}

static void test_complete(void **state)
{
	for (int ns = 0; ns < 2; ns++) {
		char *ok = doc("CompleteMultipartUploadResult",
			       "<Location>http://Example-Bucket.s3.amazonaws.com/Example-Object"
			       "</Location><Bucket>Example-Bucket</Bucket><Key>Example-Object</Key>"
			       "<ETag>\"3858f62230ac3c915f300c664312c11f-9\"</ETag>",
			       ns);
		char *err = doc("Error",
				"<Code>InternalError</Code><Message>We encountered an internal "
				"error. Please try again.</Message><RequestId>656c76696e6727732072"
				"657175657374</RequestId>",
				ns);
		struct s3xml_error e;

		assert_int_equal(s3xml_parse_complete(ok, strlen(ok), &e), 0);
		assert_int_equal(s3xml_parse_complete(err, strlen(err), &e), -EREMOTEIO);
		assert_string_equal(e.code, "InternalError");
		assert_string_equal(e.message,
				    "We encountered an internal error. Please try again.");
		free(ok);
		free(err);
	}
}

static void test_complete_garbage(void **state)
{
	struct s3xml_error e;
	char *other = doc("ListBucketResult", "", 0);

	assert_int_equal(s3xml_parse_complete("", 0, &e), -EINVAL);
	assert_int_equal(s3xml_parse_complete("<Complete", 9, &e), -EINVAL);
	assert_int_equal(s3xml_parse_complete(other, strlen(other), &e), -EINVAL);
	free(other);
}

static void test_list_uploads(void **state)
{
	for (int ns = 0; ns < 2; ns++) {
		char *d = doc(
		    "ListMultipartUploadsResult",
		    "<Bucket>bucket</Bucket><KeyMarker></KeyMarker><UploadIdMarker></"
		    "UploadIdMarker>"
		    "<NextKeyMarker>my-movie.m2ts</NextKeyMarker>"
		    "<NextUploadIdMarker>YW55IGlkZWEgd2h5IGVsdmluZydzIHVwbG9hZCBmYWlsZWQ"
		    "</NextUploadIdMarker><MaxUploads>3</MaxUploads><IsTruncated>true</IsTruncated>"
		    "<Upload><Key>my-divisor</Key><UploadId>XMgbGlrZSBlbHZpbmcncyBub3QgaGF2aW5nIG11"
		    "Y2ggbHVjaw</UploadId><Initiator><ID>arn:aws:iam::111122223333:user/"
		    "user1-11111a31-17b5-4fb7-9df5-b111111f13de</ID><DisplayName>user1</"
		    "DisplayName>"
		    "</Initiator><StorageClass>STANDARD</StorageClass>"
		    "<Initiated>2010-11-10T20:48:33.000Z</Initiated></Upload>"
		    "<Upload><Key>my-movie.m2ts</Key><UploadId>VXBsb2FkIElEIGZvciBlbHZpbmcncyBteS1t"
		    "b3ZpZS5tMnRzIHVwbG9hZA</UploadId></Upload>"
		    "<Upload><Key>pfx/seg-0000000000000001.spw</Key><UploadId>id&amp;3</UploadId>"
		    "</Upload>",
		    ns);
		struct s3xml_uploads u;

		assert_int_equal(s3xml_parse_list_uploads(d, strlen(d), &u), 0);
		assert_int_equal(u.n, 3);
		assert_true(u.truncated);
		assert_string_equal(u.next_key_marker, "my-movie.m2ts");
		assert_string_equal(u.next_upload_id_marker,
				    "YW55IGlkZWEgd2h5IGVsdmluZydzIHVwbG9hZCBmYWlsZWQ");
		assert_string_equal(u.v[0].key, "my-divisor");
		assert_string_equal(u.v[0].upload_id,
				    "XMgbGlrZSBlbHZpbmcncyBub3QgaGF2aW5nIG11Y2ggbHVjaw");
		assert_string_equal(u.v[1].key, "my-movie.m2ts");
		assert_string_equal(u.v[2].key, "pfx/seg-0000000000000001.spw");
		assert_string_equal(u.v[2].upload_id, "id&3");
		s3xml_uploads_free(&u);
		assert_int_equal(u.n, 0);
		free(d);
	}
}

static void test_list_uploads_empty(void **state)
{
	char *d = doc("ListMultipartUploadsResult",
		      "<Bucket>b</Bucket><IsTruncated>false</IsTruncated>", 1);
	char *bad = doc("ListMultipartUploadsResult", "<Upload><Key>k</Key></Upload>", 1);
	struct s3xml_uploads u;

	assert_int_equal(s3xml_parse_list_uploads(d, strlen(d), &u), 0);
	assert_int_equal(u.n, 0);
	assert_false(u.truncated);
	assert_null(u.next_key_marker);
	s3xml_uploads_free(&u);
	/* An Upload without its UploadId cannot be aborted: refuse the page. */
	assert_int_equal(s3xml_parse_list_uploads(bad, strlen(bad), &u), -EINVAL);
	assert_null(u.v);
	free(d);
	free(bad);
}

static void test_list_objects(void **state)
{
	for (int ns = 0; ns < 2; ns++) {
		char *d =
		    doc("ListBucketResult",
			"<Name>bucket</Name><Prefix>pfx/</Prefix><KeyCount>2</KeyCount>"
			"<MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated>"
			"<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM="
			"</NextContinuationToken>"
			"<Contents><Key>pfx/seg-00000000000000ff.spw</Key>"
			"<LastModified>2009-10-12T17:50:30.000Z</LastModified>"
			"<ETag>\"fba9dede5f27731c9771645a39863328\"</ETag><Size>68719476736</Size>"
			"<StorageClass>STANDARD</StorageClass></Contents>"
			"<Contents><Key>pfx/other</Key><Size>0</Size></Contents>",
			ns);
		struct s3xml_objects o;

		assert_int_equal(s3xml_parse_list_objects(d, strlen(d), &o), 0);
		assert_int_equal(o.n, 2);
		assert_true(o.truncated);
		assert_string_equal(o.next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
		assert_string_equal(o.v[0].key, "pfx/seg-00000000000000ff.spw");
		assert_int_equal(o.v[0].size, 68719476736ull);
		assert_string_equal(o.v[1].key, "pfx/other");
		assert_int_equal(o.v[1].size, 0);
		s3xml_objects_free(&o);
		free(d);
	}
}

static void test_list_objects_last_page_and_bad_size(void **state)
{
	char *last = doc("ListBucketResult",
			 "<Name>b</Name><IsTruncated>false</IsTruncated>"
			 "<Contents><Key>a</Key><Size>5</Size></Contents>",
			 0);
	char *bad = doc("ListBucketResult", "<Contents><Key>a</Key><Size>-5</Size></Contents>", 0);
	char *nosize = doc("ListBucketResult", "<Contents><Key>a</Key></Contents>", 0);
	struct s3xml_objects o;

	assert_int_equal(s3xml_parse_list_objects(last, strlen(last), &o), 0);
	assert_false(o.truncated);
	assert_null(o.next_token);
	assert_int_equal(o.n, 1);
	assert_int_equal(o.v[0].size, 5);
	s3xml_objects_free(&o);
	assert_int_equal(s3xml_parse_list_objects(bad, strlen(bad), &o), -EINVAL);
	assert_int_equal(s3xml_parse_list_objects(nosize, strlen(nosize), &o), -EINVAL);
	assert_int_equal(s3xml_parse_list_objects("<ListBucketResult>", 18, &o), -EINVAL);
	free(last);
	free(bad);
	free(nosize);
}

static void test_no_entity_expansion(void **state)
{
	const char *d = HEAD "<!DOCTYPE Error [<!ENTITY x SYSTEM \"file:///etc/passwd\">"
			     "<!ENTITY y \"expanded\">]>"
			     "<Error><Code>&y;</Code><Message>&x;</Message></Error>";
	struct s3xml_error e;

	/* S3 never sends a DTD: a document with one is refused, entities never expanded. */
	assert_int_equal(s3xml_parse_error(d, strlen(d), &e), -EINVAL);
	assert_string_equal(e.code, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_error),
	    cmocka_unit_test(test_error_not_error),
	    cmocka_unit_test(test_error_long_message_truncated),
	    cmocka_unit_test(test_initiate),
	    cmocka_unit_test(test_initiate_bad),
	    cmocka_unit_test(test_complete),
	    cmocka_unit_test(test_complete_garbage),
	    cmocka_unit_test(test_list_uploads),
	    cmocka_unit_test(test_list_uploads_empty),
	    cmocka_unit_test(test_list_objects),
	    cmocka_unit_test(test_list_objects_last_page_and_bad_size),
	    cmocka_unit_test(test_no_entity_expansion),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
