/*
 * test_clock — clock_now_ms is the monotonic clock in milliseconds (it
 * agrees with clock_now_ns and never goes back); clock_deadline_ms lies the
 * asked time ahead on CLOCK_REALTIME with tv_nsec normalised.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/clock.h"

static void test_now_ms(void **state)
{
	uint64_t ns0 = clock_now_ns(), ms = clock_now_ms(), ns1 = clock_now_ns();
	struct timespec d = {0, 20 * 1000000L};

	assert_true(ms >= ns0 / 1000000 && ms <= ns1 / 1000000);
	nanosleep(&d, NULL);
	assert_true(clock_now_ms() >= ms + 20);
}

static void test_deadline_ms(void **state)
{
	struct timespec now, dl;

	clock_gettime(CLOCK_REALTIME, &now);
	dl = clock_deadline_ms(1999);
	assert_true(dl.tv_nsec >= 0 && dl.tv_nsec < 1000000000L);
	int64_t ahead =
	    ((int64_t)dl.tv_sec - now.tv_sec) * 1000 + (dl.tv_nsec - now.tv_nsec) / 1000000;
	assert_true(ahead >= 1999 && ahead < 1999 + 1000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_now_ms),
	    cmocka_unit_test(test_deadline_ms),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
