/*
 * test_sigv4 — AWS Signature V4, byte-exact against published vectors: the
 * AWS SigV4 test suite (get-vanilla, get-vanilla-query-order-key-case,
 * post-vanilla, get-vanilla-empty-query-key, get-utf8, get-space,
 * get-slashes, get-header-value-trim, post-header-key-sort,
 * post-header-value-case, post-sts-header-before) and the examples of the S3 API reference (GET
 * object with Range, PUT object, GET ?lifecycle, GET ?max-keys&prefix), plus the encoding, query
 * sorting and header trimming rules.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tier/s3/sigv4.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static const struct sigv4_key suite_key = {
    .access_key = "AKIDEXAMPLE",
    .secret_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
    .region = "us-east-1",
    .service = "service",
};

static const struct sigv4_key s3_key = {
    .access_key = "AKIAIOSFODNN7EXAMPLE",
    .secret_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    .region = "us-east-1",
    .service = "s3",
};

/* Sign with a raw path and query parameters, as store_s3 does. */
static void sign(const struct sigv4_key *key, const char *date, const char *method,
		 const char *path, const struct sigv4_kv *q, size_t nq, const struct sigv4_kv *h,
		 size_t nh, const char *payload_hash, char *auth, size_t authlen)
{
	char *uri = sigv4_uri_encode(path, 1);
	char *query = sigv4_canonical_query(q, nq);

	assert_non_null(uri);
	assert_non_null(query);
	assert_int_equal(
	    sigv4_sign(key, date, method, uri, query, h, nh, payload_hash, auth, authlen), 0);
	free(uri);
	free(query);
}

static void test_sha256(void **state)
{
	char h[SIGV4_HASH_HEX];

	sigv4_sha256_hex("", 0, h);
	assert_string_equal(h, EMPTY_SHA256);
	sigv4_sha256_hex("Welcome to Amazon S3.", 21, h);
	assert_string_equal(h, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
}

static void test_amz_date(void **state)
{
	char d[SIGV4_DATE_LEN];

	sigv4_amz_date(1440938160, d); /* 2015-08-30 12:36:00 UTC */
	assert_string_equal(d, "20150830T123600Z");
}

static void test_uri_encode(void **state)
{
	char *s;

	s = sigv4_uri_encode("/test$file.text", 1);
	assert_string_equal(s, "/test%24file.text");
	free(s);
	s = sigv4_uri_encode("a/b c+d~e_f-g.h*", 0);
	assert_string_equal(s, "a%2Fb%20c%2Bd~e_f-g.h%2A");
	free(s);
	s = sigv4_uri_encode("\xc3\xa9=", 1);
	assert_string_equal(s, "%C3%A9%3D");
	free(s);
}

static void test_canonical_query(void **state)
{
	const struct sigv4_kv q[] = {
	    {"prefix", "a/b"}, {"list-type", "2"}, {"uploads", NULL},
	    {"Param", "z"},    {"Param", "a"},
	};
	char *s = sigv4_canonical_query(q, 5);

	/* Sorted by encoded name (uppercase first, as bytes), then by value. */
	assert_string_equal(s, "Param=a&Param=z&list-type=2&prefix=a%2Fb&uploads=");
	free(s);
	s = sigv4_canonical_query(NULL, 0);
	assert_string_equal(s, "");
	free(s);
}

static void test_canonical_request_get_vanilla(void **state)
{
	const struct sigv4_kv h[] = {
	    {"X-Amz-Date", "20150830T123600Z"},
	    {"Host", "example.amazonaws.com"},
	};
	char *sh = NULL;
	char *c = sigv4_canonical_request("GET", "/", "", h, 2, EMPTY_SHA256, &sh);

	assert_string_equal(c, "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n"
			       "\nhost;x-amz-date\n" EMPTY_SHA256);
	assert_string_equal(sh, "host;x-amz-date");
	free(c);
	free(sh);
}

static void test_canonical_headers_trimmed(void **state)
{
	const struct sigv4_kv h[] = {
	    {"My-Header1", "  value1  "},
	    {"My-Header2", "\"a   b   c\""},
	    {"Host", "example.amazonaws.com"},
	};
	char *c = sigv4_canonical_request("GET", "/", "", h, 3, EMPTY_SHA256, NULL);

	assert_string_equal(c, "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value1\n"
			       "my-header2:\"a b c\"\n\nhost;my-header1;my-header2\n" EMPTY_SHA256);
	free(c);
}

static void test_get_vanilla(void **state)
{
	const struct sigv4_kv h[] = {
	    {"Host", "example.amazonaws.com"},
	    {"X-Amz-Date", "20150830T123600Z"},
	};
	char auth[512];

	sign(&suite_key, "20150830T123600Z", "GET", "/", NULL, 0, h, 2, EMPTY_SHA256, auth,
	     sizeof(auth));
	assert_string_equal(auth,
			    "AWS4-HMAC-SHA256 "
			    "Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
			    "SignedHeaders=host;x-amz-date, "
			    "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d7"
			    "63fbf31");
}

static void test_get_vanilla_query_order_key_case(void **state)
{
	const struct sigv4_kv q[] = {{"Param2", "value2"}, {"Param1", "value1"}};
	const struct sigv4_kv h[] = {
	    {"Host", "example.amazonaws.com"},
	    {"X-Amz-Date", "20150830T123600Z"},
	};
	char auth[512];

	sign(&suite_key, "20150830T123600Z", "GET", "/", q, 2, h, 2, EMPTY_SHA256, auth,
	     sizeof(auth));
	assert_non_null(strstr(auth, "SignedHeaders=host;x-amz-date, "));
	assert_non_null(strstr(auth, "Signature=b97d918cfa904a5beff61c982a1b6f458b799221646efd99d32"
				     "19ec94cdf2500"));
}

static void test_post_vanilla(void **state)
{
	const struct sigv4_kv h[] = {
	    {"Host", "example.amazonaws.com"},
	    {"X-Amz-Date", "20150830T123600Z"},
	};
	char auth[512];

	sign(&suite_key, "20150830T123600Z", "POST", "/", NULL, 0, h, 2, EMPTY_SHA256, auth,
	     sizeof(auth));
	assert_string_equal(auth,
			    "AWS4-HMAC-SHA256 "
			    "Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
			    "SignedHeaders=host;x-amz-date, "
			    "Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92e"
			    "fbe5d6b");
}

/* One AWS test suite request on example.amazonaws.com: extra headers besides Host, X-Amz-Date. */
static void suite_case(const char *method, const char *path, const struct sigv4_kv *q, size_t nq,
		       const struct sigv4_kv *extra, size_t nextra, const char *signed_headers,
		       const char *signature)
{
	struct sigv4_kv h[8] = {
	    {"Host", "example.amazonaws.com"},
	    {"X-Amz-Date", "20150830T123600Z"},
	};
	char auth[512], want[512];

	assert_true(nextra <= 6);
	for (size_t i = 0; i < nextra; i++)
		h[2 + i] = extra[i];
	sign(&suite_key, "20150830T123600Z", method, path, q, nq, h, 2 + nextra, EMPTY_SHA256, auth,
	     sizeof(auth));
	snprintf(want, sizeof(want),
		 "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/"
		 "aws4_request, SignedHeaders=%s, Signature=%s",
		 signed_headers, signature);
	assert_string_equal(auth, want);
}

static void test_suite_more(void **state)
{
	const struct sigv4_kv q1[] = {{"Param1", "value1"}};
	const struct sigv4_kv trim[] = {{"My-Header1", " value1"},
					{"My-Header2", " \"a   b   c\""}};
	const struct sigv4_kv sort[] = {{"My-Header1", "value1"}};
	const struct sigv4_kv upper[] = {{"My-Header1", "VALUE1"}};
	const struct sigv4_kv token[] = {
	    {"X-Amz-Security-Token",
	     "AQoDYXdzEPT//////////"
	     "wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRX"
	     "mxfpSPfIeoIYRqTflfKD8YUuwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsbur"
	     "EDy0KPkyQDYwT7WZ0wq5VSXDvp75YU9HFvlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPk"
	     "UL64lIZbqBAz+scqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/oLxBA=="},
	};

	suite_case("GET", "/", q1, 1, NULL, 0, "host;x-amz-date",
		   "a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb");
	suite_case("GET", "/\xe1\x88\xb4", NULL, 0, NULL, 0, "host;x-amz-date",
		   "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85");
	suite_case("GET", "/example space/", NULL, 0, NULL, 0, "host;x-amz-date",
		   "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741");
	suite_case("GET", "/example/", NULL, 0, NULL, 0, "host;x-amz-date",
		   "9a624bd73a37c9a373b5312afbebe7a714a789de108f0bdfe846570885f57e84");
	suite_case("GET", "/", NULL, 0, trim, 2, "host;my-header1;my-header2;x-amz-date",
		   "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736");
	suite_case("POST", "/", NULL, 0, sort, 1, "host;my-header1;x-amz-date",
		   "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c");
	suite_case("POST", "/", NULL, 0, upper, 1, "host;my-header1;x-amz-date",
		   "cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d");
	suite_case("POST", "/", NULL, 0, token, 1, "host;x-amz-date;x-amz-security-token",
		   "85d96828115b5dc0cfc3bd16ad9e210dd772bbebba041836c64533a82be05ead");
}

static void test_s3_get_object_range(void **state)
{
	const struct sigv4_kv h[] = {
	    {"Host", "examplebucket.s3.amazonaws.com"},
	    {"Range", "bytes=0-9"},
	    {"x-amz-content-sha256", EMPTY_SHA256},
	    {"x-amz-date", "20130524T000000Z"},
	};
	char auth[512], hash[SIGV4_HASH_HEX];
	char *c = sigv4_canonical_request("GET", "/test.txt", "", h, 4, EMPTY_SHA256, NULL);

	/* The reference's canonical request hashes to this (its StringToSign's last line). */
	sigv4_sha256_hex(c, strlen(c), hash);
	assert_string_equal(hash,
			    "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
	free(c);
	sign(&s3_key, "20130524T000000Z", "GET", "/test.txt", NULL, 0, h, 4, EMPTY_SHA256, auth,
	     sizeof(auth));
	assert_string_equal(auth,
			    "AWS4-HMAC-SHA256 "
			    "Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
			    "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
			    "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c60"
			    "36bdb41");
}

static void test_s3_put_object(void **state)
{
	const char *body = "Welcome to Amazon S3.";
	char auth[512], hash[SIGV4_HASH_HEX];

	sigv4_sha256_hex(body, strlen(body), hash);
	{
		const struct sigv4_kv h[] = {
		    {"Host", "examplebucket.s3.amazonaws.com"},
		    {"Date", "Fri, 24 May 2013 00:00:00 GMT"},
		    {"x-amz-date", "20130524T000000Z"},
		    {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
		    {"x-amz-content-sha256", hash},
		};

		sign(&s3_key, "20130524T000000Z", "PUT", "/test$file.text", NULL, 0, h, 5, hash,
		     auth, sizeof(auth));
	}
	assert_string_equal(
	    auth, "AWS4-HMAC-SHA256 "
		  "Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
		  "SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class, "
		  "Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

static void test_s3_get_lifecycle(void **state)
{
	const struct sigv4_kv q[] = {{"lifecycle", NULL}};
	const struct sigv4_kv h[] = {
	    {"Host", "examplebucket.s3.amazonaws.com"},
	    {"x-amz-date", "20130524T000000Z"},
	    {"x-amz-content-sha256", EMPTY_SHA256},
	};
	char auth[512];

	sign(&s3_key, "20130524T000000Z", "GET", "/", q, 1, h, 3, EMPTY_SHA256, auth, sizeof(auth));
	assert_string_equal(auth,
			    "AWS4-HMAC-SHA256 "
			    "Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
			    "SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
			    "Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a013"
			    "6783543");
}

static void test_s3_list_objects(void **state)
{
	const struct sigv4_kv q[] = {{"prefix", "J"}, {"max-keys", "2"}};
	const struct sigv4_kv h[] = {
	    {"Host", "examplebucket.s3.amazonaws.com"},
	    {"x-amz-date", "20130524T000000Z"},
	    {"x-amz-content-sha256", EMPTY_SHA256},
	};
	char auth[512];

	sign(&s3_key, "20130524T000000Z", "GET", "/", q, 2, h, 3, EMPTY_SHA256, auth, sizeof(auth));
	assert_non_null(strstr(auth, "SignedHeaders=host;x-amz-content-sha256;x-amz-date, "));
	assert_non_null(strstr(auth, "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed"
				     "5711ef69dc6f7"));
}

static void test_sign_errors(void **state)
{
	const struct sigv4_kv h[] = {{"Host", "example.amazonaws.com"}};
	char auth[512];

	assert_int_equal(sigv4_sign(&suite_key, "20150830", "GET", "/", "", h, 1, EMPTY_SHA256,
				    auth, sizeof(auth)),
			 -EINVAL);
	assert_int_equal(sigv4_sign(&suite_key, "20150830T123600Z", "GET", "/", "", h, 1,
				    EMPTY_SHA256, auth, 40),
			 -ENOSPC);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sha256),
	    cmocka_unit_test(test_amz_date),
	    cmocka_unit_test(test_uri_encode),
	    cmocka_unit_test(test_canonical_query),
	    cmocka_unit_test(test_canonical_request_get_vanilla),
	    cmocka_unit_test(test_canonical_headers_trimmed),
	    cmocka_unit_test(test_get_vanilla),
	    cmocka_unit_test(test_get_vanilla_query_order_key_case),
	    cmocka_unit_test(test_post_vanilla),
	    cmocka_unit_test(test_suite_more),
	    cmocka_unit_test(test_s3_get_object_range),
	    cmocka_unit_test(test_s3_put_object),
	    cmocka_unit_test(test_s3_get_lifecycle),
	    cmocka_unit_test(test_s3_list_objects),
	    cmocka_unit_test(test_sign_errors),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
