/*
 * test_le — the on-disk integer byte order: least significant byte first,
 * any alignment, and get(put(v)) == v at the extremes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/le.h"

#include <string.h>

static void test_le32(void **state)
{
	uint8_t b[5] = {0xee, 0xee, 0xee, 0xee, 0xee};
	const uint8_t want[5] = {0xee, 0x78, 0x56, 0x34, 0x12};

	le_put32(b + 1, 0x12345678u); /* unaligned; b[0] untouched */
	assert_memory_equal(b, want, 5);
	assert_int_equal(le_get32(b + 1), 0x12345678u);
	le_put32(b, UINT32_MAX);
	assert_true(le_get32(b) == UINT32_MAX);
	assert_int_equal(b[4], 0x12);
}

static void test_le64(void **state)
{
	uint8_t b[9];
	const uint8_t want[8] = {0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x81};

	memset(b, 0xee, sizeof(b));
	le_put64(b + 1, 0x8102030405060708ull);
	assert_int_equal(b[0], 0xee);
	assert_memory_equal(b + 1, want, 8);
	assert_true(le_get64(b + 1) == 0x8102030405060708ull);
	le_put64(b, UINT64_MAX);
	assert_true(le_get64(b) == UINT64_MAX);
	le_put64(b, 1);
	assert_true(le_get64(b) == 1 && le_get32(b + 4) == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_le32),
	    cmocka_unit_test(test_le64),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
