/*
 * test_fs_xattr — the values the control xattrs take (fs/ops_xattr.c,
 * xattr_vx_parse): one rule for pin, evict and warm. "1" as setfattr, echo
 * -n or echo send it ("1", "1\n", "1\0"); pin also takes "0"; anything else
 * (evict accepted "2" and "" alike) is EINVAL.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "fs/fs_i.h"

#include <errno.h>
#include <string.h>

static int parse(const char *what, const char *v, size_t n)
{
	return xattr_vx_parse(what, v, n);
}

static void test_one_as_every_writer_sends_it(void **state)
{
	(void)state;
	static const char *const v[] = {"1", "1\n", "1"};
	static const size_t n[] = {1, 2, 2}; /* the last: "1\0" */
	for (int i = 0; i < 3; i++) {
		assert_int_equal(parse("pin", v[i], n[i]), VX_PIN);
		assert_int_equal(parse("evict", v[i], n[i]), VX_EVICT);
		assert_int_equal(parse("warm", v[i], n[i]), VX_WARM);
	}
	assert_int_equal(parse("pin", "0", 1), VX_UNPIN);
	assert_int_equal(parse("pin", "0\n", 2), VX_UNPIN);
}

static void test_anything_else_einval(void **state)
{
	(void)state;
	static const char *const bad[] = {"2", "", "0", "yes", "11", "1x", " 1"};
	static const char *const what[] = {"evict", "warm", "pin"};
	for (size_t w = 0; w < 3; w++)
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			if (!strcmp(what[w], "pin") && !strcmp(bad[i], "0"))
				continue; /* unpin */
			assert_int_equal(parse(what[w], bad[i], strlen(bad[i])), -EINVAL);
		}
	assert_int_equal(parse("evict", "1", 0), -EINVAL);
	assert_int_equal(parse("stats", "1", 1), -EINVAL);
	assert_int_equal(parse("state", "1", 1), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_one_as_every_writer_sends_it),
	    cmocka_unit_test(test_anything_else_einval),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
