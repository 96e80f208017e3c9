/*
 * fuzz_s3_headers — S3 response header lines (s3_header_parse in
 * tier/s3/s3req.c: ETag, Retry-After, Content-Range, Content-Length,
 * x-amz-bucket-region), against a reference written here.
 * Invariants: the kind matches the name before the first ':' (any case);
 * the text is the trimmed value, NUL-terminated, cut to fit; numbers are
 * exactly what plain decimal digits say (Retry-After capped at 3600), -1
 * for anything else; the line is never read past its length.
 */
#include "fuzz.h"
#include "tier/s3/s3req.h"

#include <string.h>
#include <strings.h>

static int64_t ref_number(const char *s, size_t n)
{
	int64_t v = 0;
	if (!n)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		if (v > (INT64_MAX - (s[i] - '0')) / 10)
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *line = malloc(size ? size : 1), name[32];
	const char *colon, *s, *e;
	struct s3_hdr_val v;
	enum s3_hdr got, want = S3_HDR_OTHER;
	int64_t num = -1;
	size_t nl, tl;

	memcpy(line, data, size);
	got = s3_header_parse(line, size, &v);
	colon = memchr(line, ':', size);
	nl = colon ? (size_t)(colon - line) : 0;
	if (colon && nl < sizeof(name) && !memchr(line, 0, nl)) {
		memcpy(name, line, nl);
		name[nl] = 0;
		want = !strcasecmp(name, "etag")		  ? S3_HDR_ETAG
		       : !strcasecmp(name, "retry-after")	  ? S3_HDR_RETRY_AFTER
		       : !strcasecmp(name, "content-range")	  ? S3_HDR_CONTENT_RANGE
		       : !strcasecmp(name, "content-length")	  ? S3_HDR_CONTENT_LENGTH
		       : !strcasecmp(name, "x-amz-bucket-region") ? S3_HDR_REGION
								  : S3_HDR_OTHER;
	}
	FUZZ_CHECK(got == want, "kind %d, want %d", got, want);
	if (want == S3_HDR_OTHER) {
		FUZZ_CHECK(v.num == -1, "num for another header");
		goto out;
	}
	s = colon + 1;
	e = line + size;
	while (s < e && (*s == ' ' || *s == '\t'))
		s++;
	while (e > s && strchr(" \t\r\n", e[-1]) && e[-1])
		e--;
	tl = (size_t)(e - s) < sizeof(v.text) - 1 ? (size_t)(e - s) : sizeof(v.text) - 1;
	FUZZ_CHECK(memchr(v.text, 0, sizeof(v.text)) && !memcmp(v.text, s, tl) && v.text[tl] == 0,
		   "text '%s'", v.text);
	if (want == S3_HDR_RETRY_AFTER) {
		num = ref_number(s, (size_t)(e - s));
		if (num > 3600)
			num = 3600;
	} else if (want == S3_HDR_CONTENT_LENGTH) {
		num = ref_number(s, (size_t)(e - s));
	} else if (want == S3_HDR_CONTENT_RANGE) {
		const char *slash = NULL;
		for (const char *p = s; p < e; p++)
			if (*p == '/')
				slash = p;
		num = slash ? ref_number(slash + 1, (size_t)(e - slash - 1)) : -1;
	}
	FUZZ_CHECK(v.num == num, "num %lld, want %lld", (long long)v.num, (long long)num);
out:
	free(line);
	return 0;
}
