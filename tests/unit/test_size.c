/*
 * test_size — the value forms mount options take: sizes (K/M/G/T powers of
 * 1024, optional B/iB), durations (ms/s/m/min/h, bare = seconds), fractions
 * in [0, 1], and size_format's human-readable output. Every rejection must
 * leave the output untouched.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/size.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#define SENTINEL 0xdeadbeefcafef00dULL

static void size_ok(const char *s, uint64_t want)
{
	uint64_t v = SENTINEL;
	int r = size_parse(s, &v);
	if (r != 0)
		print_error("size_parse(\"%s\") = %d\n", s, r);
	assert_int_equal(r, 0);
	assert_true(v == want);
}

static void size_bad(const char *s, int want_err)
{
	uint64_t v = SENTINEL;
	int r = size_parse(s, &v);
	if (r != want_err)
		print_error("size_parse(\"%s\") = %d, want %d\n", s ? s : "(null)", r, want_err);
	assert_int_equal(r, want_err);
	assert_true(v == SENTINEL); /* untouched on error */
}

static void test_size_plain_and_suffixes(void **state)
{
	size_ok("0", 0);
	size_ok("1", 1);
	size_ok("10", 10);
	size_ok("4096", 4096);
	size_ok("007", 7);
	size_ok("1K", 1024);
	size_ok("1k", 1024);
	size_ok("4K", 4ULL << 10);
	size_ok("512M", 512ULL << 20);
	size_ok("512m", 512ULL << 20);
	size_ok("2G", 2ULL << 30);
	size_ok("8g", 8ULL << 30);
	size_ok("3T", 3ULL << 40);
	size_ok("3t", 3ULL << 40);
	size_ok("0G", 0);
}

static void test_size_byte_suffixes(void **state)
{
	size_ok("512B", 512);
	size_ok("512b", 512);
	size_ok("1KB", 1024);
	size_ok("1KiB", 1024);
	size_ok("1kib", 1024);
	size_ok("64MiB", 64ULL << 20);
	size_ok("2GB", 2ULL << 30);
	size_ok("1TiB", 1ULL << 40);
	/* "iB" only after a multiplier */
	size_bad("1iB", -EINVAL);
	size_bad("1BB", -EINVAL);
	size_bad("1KiBB", -EINVAL);
	size_bad("1Ki", -EINVAL);
}

static void test_size_rejects_malformed(void **state)
{
	size_bad("", -EINVAL);
	size_bad(NULL, -EINVAL);
	size_bad("-5G", -EINVAL);
	size_bad("-1", -EINVAL);
	size_bad("+1", -EINVAL);
	size_bad("12Q", -EINVAL);
	size_bad(" 1", -EINVAL);
	size_bad("1 ", -EINVAL);
	size_bad("1 G", -EINVAL);
	size_bad("1G ", -EINVAL);
	size_bad("G", -EINVAL);
	size_bad("1.5G", -EINVAL);
	size_bad("0x10", -EINVAL);
	size_bad("1KK", -EINVAL);
	size_bad("1P", -EINVAL);
	size_bad("abc", -EINVAL);
	size_bad("1\n", -EINVAL);
}

static void test_size_overflow(void **state)
{
	size_ok("18446744073709551615", UINT64_MAX);
	size_bad("18446744073709551616", -ERANGE);
	size_bad("99999999999999999999999999", -ERANGE);
	size_ok("16777215T", 16777215ULL << 40);
	size_bad("16777216T", -ERANGE); /* 2^24 * 2^40 = 2^64 */
	size_ok("17179869183G", 17179869183ULL << 30);
	size_bad("17179869184G", -ERANGE);
	size_bad("18014398509481984K", -ERANGE); /* 2^54 * 2^10 */
	size_bad("18446744073709551615K", -ERANGE);
}

static void dur_ok(const char *s, uint64_t want)
{
	uint64_t v = SENTINEL;
	int r = duration_parse_ms(s, &v);
	if (r != 0)
		print_error("duration_parse_ms(\"%s\") = %d\n", s, r);
	assert_int_equal(r, 0);
	assert_true(v == want);
}

static void dur_bad(const char *s, int want_err)
{
	uint64_t v = SENTINEL;
	int r = duration_parse_ms(s, &v);
	if (r != want_err)
		print_error("duration_parse_ms(\"%s\") = %d, want %d\n", s ? s : "(null)", r,
			    want_err);
	assert_int_equal(r, want_err);
	assert_true(v == SENTINEL);
}

static void test_duration(void **state)
{
	dur_ok("0", 0);
	dur_ok("60", 60000); /* bare number = seconds */
	dur_ok("500ms", 500);
	dur_ok("0ms", 0);
	dur_ok("60s", 60000);
	dur_ok("1.5s", 1500);
	dur_ok(".5s", 500);
	dur_ok("5m", 300000);
	dur_ok("5min", 300000);
	dur_ok("2h", 7200000);
	dur_ok("24h", 86400000);
	dur_ok("0.0004s", 0); /* rounds to nearest ms */
	dur_ok("0.0006s", 1);

	dur_bad("", -EINVAL);
	dur_bad(NULL, -EINVAL);
	dur_bad("-1", -EINVAL);
	dur_bad("-1s", -EINVAL);
	dur_bad(" 5", -EINVAL);
	dur_bad("5 s", -EINVAL);
	dur_bad("5x", -EINVAL);
	dur_bad("5sec", -EINVAL);
	dur_bad("forever", -EINVAL);
	dur_bad("inf", -EINVAL);
	dur_bad("nan", -EINVAL);
	dur_bad("ms", -EINVAL);
	dur_bad("1e999", -ERANGE);
	dur_bad("1e20", -ERANGE);
	dur_bad("300000000h", -ERANGE); /* 1.08e15 ms */
}

static void frac_ok(const char *s, double want)
{
	double v = -42;
	int r = fraction_parse(s, &v);
	if (r != 0)
		print_error("fraction_parse(\"%s\") = %d\n", s, r);
	assert_int_equal(r, 0);
	assert_true(v == want);
}

static void frac_bad(const char *s, int want_err)
{
	double v = -42;
	int r = fraction_parse(s, &v);
	if (r != want_err)
		print_error("fraction_parse(\"%s\") = %d, want %d\n", s ? s : "(null)", r,
			    want_err);
	assert_int_equal(r, want_err);
	assert_true(v == -42);
}

static void test_fraction(void **state)
{
	frac_ok("0", 0.0);
	frac_ok("1", 1.0);
	frac_ok("1.0", 1.0);
	frac_ok("0.75", 0.75);
	frac_ok(".5", 0.5);
	frac_ok("0.6", 0.6);
	frac_ok("5e-1", 0.5);

	frac_bad("1.5", -ERANGE);
	frac_bad("2", -ERANGE);
	frac_bad("1.0000001", -ERANGE);
	frac_bad("", -EINVAL);
	frac_bad(NULL, -EINVAL);
	frac_bad("-0.1", -EINVAL);
	frac_bad(" 0.5", -EINVAL);
	frac_bad("0.5 ", -EINVAL);
	frac_bad("0.5x", -EINVAL);
	frac_bad("50%", -EINVAL);
	frac_bad("abc", -EINVAL);
	frac_bad("nan", -EINVAL);
	frac_bad("inf", -EINVAL);
	frac_bad("1e999", -EINVAL);
}

static void fmt_is(uint64_t v, const char *want)
{
	char buf[32];
	memset(buf, 'x', sizeof(buf));
	assert_ptr_equal(size_format(v, buf, sizeof(buf)), buf);
	assert_string_equal(buf, want);
}

static void test_size_format(void **state)
{
	char small[4];

	fmt_is(0, "0");
	fmt_is(1, "1");
	fmt_is(1023, "1023");
	fmt_is(1024, "1.0K");
	fmt_is(1536, "1.5K");
	fmt_is(4ULL << 20, "4.0M");
	fmt_is(64ULL << 20, "64.0M");
	fmt_is(3ULL << 29, "1.5G");
	fmt_is(1ULL << 40, "1.0T");
	fmt_is(1ULL << 50, "1.0P");
	fmt_is(1ULL << 60, "1024.0P"); /* P is the largest unit */
	fmt_is(UINT64_MAX, "16384.0P");

	/* truncates to the buffer, always terminated */
	memset(small, 'x', sizeof(small));
	assert_ptr_equal(size_format(1536, small, sizeof(small)), small);
	assert_int_equal(small[3], '\0');
	assert_string_equal(small, "1.5");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_size_plain_and_suffixes),
	    cmocka_unit_test(test_size_byte_suffixes),
	    cmocka_unit_test(test_size_rejects_malformed),
	    cmocka_unit_test(test_size_overflow),
	    cmocka_unit_test(test_duration),
	    cmocka_unit_test(test_fraction),
	    cmocka_unit_test(test_size_format),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
