/*
 * test_span — span_trim narrows a span by a byte set from both ends and
 * never reads outside it; str_trim cuts C whitespace from a string in place.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/span.h"

static void trim_span(const char *in, size_t len, const char *set, const char *want)
{
	const char *b = in, *e = in + len;

	span_trim(&b, &e, set);
	assert_true(b >= in && e <= in + len && b <= e);
	assert_int_equal((size_t)(e - b), strlen(want));
	assert_memory_equal(b, want, strlen(want));
}

static void test_span_trim(void **state)
{
	trim_span(" \tabc \r\n", 8, " \t\r\n", "abc");
	trim_span("a b", 3, " ", "a b"); /* inner blanks stay */
	trim_span("   ", 3, " ", "");	 /* all blank: empty, b == e */
	trim_span("", 0, " ", "");
	trim_span("\fx\v", 3, " \t", "\fx\v"); /* only the set's bytes go */
	trim_span(" ab  cd", 4, " ", "ab");    /* stops at the span's end */
}

/* Each end by its own set, as s3_header_parse trims a header value. */
static void test_span_ends_apart(void **state)
{
	const char in[] = ": \r\nx \r\n";
	const char *b = in + 1, *e = in + sizeof(in) - 1;

	span_ltrim(&b, e, " \t");
	assert_ptr_equal(b, in + 2); /* stops at the CR: not in the leading set */
	span_rtrim(b, &e, " \t\r\n");
	assert_int_equal(e - b, 3);
	assert_memory_equal(b, "\r\nx", 3);
}

/* A NUL is never in the set, though strchr(set, 0) finds the set's end. */
static void test_span_trim_nul(void **state)
{
	const char in[] = {' ', 0, 'x', 0, ' '};
	const char *b = in, *e = in + sizeof(in);

	span_trim(&b, &e, " ");
	assert_ptr_equal(b, in + 1);
	assert_ptr_equal(e, in + 4);
}

static void test_str_trim(void **state)
{
	char a[] = " \t\f\vkey = v\r\n", b[] = "   ", c[] = "plain";

	assert_string_equal(str_trim(a), "key = v");
	assert_string_equal(str_trim(b), "");
	assert_ptr_equal(str_trim(c), c);
	assert_string_equal(c, "plain");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_span_trim),
	    cmocka_unit_test(test_span_ends_apart),
	    cmocka_unit_test(test_span_trim_nul),
	    cmocka_unit_test(test_str_trim),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
