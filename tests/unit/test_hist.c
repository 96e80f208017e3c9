/* test_hist — common/hist: bucket choice, cumulative rendering, quantiles. */
#include "common/hist.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static char *render(struct hist *h)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_non_null(f);
	hist_write(f, "x", "help", h);
	fclose(f);
	return buf;
}

static void test_hist_buckets(void **state)
{
	struct hist h;
	memset(&h, 0, sizeof(h));
	hist_observe(&h, 500000);	  /* 0.5 ms: le=0.001 */
	hist_observe(&h, 1000000);	  /* exactly 1 ms: still le=0.001 */
	hist_observe(&h, 3000000);	  /* 3 ms: le=0.005 */
	hist_observe(&h, 60000000000ull); /* 60 s: +Inf only */
	assert_int_equal(h.count, 4);
	assert_int_equal(h.bucket[0], 2);
	assert_int_equal(h.bucket[2], 1);
	assert_int_equal(h.bucket[HIST_BUCKETS - 1], 1);

	char *out = render(&h);
	assert_non_null(strstr(out, "# TYPE x histogram\n"));
	assert_non_null(strstr(out, "x_bucket{le=\"0.001\"} 2\n"));
	assert_non_null(strstr(out, "x_bucket{le=\"0.005\"} 3\n"));
	assert_non_null(strstr(out, "x_bucket{le=\"30\"} 3\n"));
	assert_non_null(strstr(out, "x_bucket{le=\"+Inf\"} 4\n"));
	assert_non_null(strstr(out, "x_count 4\n"));
	free(out);
}

static void test_lhist_quantile(void **state)
{
	struct lhist h;
	memset(&h, 0, sizeof(h));
	assert_int_equal(lhist_quantile(&h, 0.5), 0);
	for (int i = 0; i < 99; i++)
		lhist_observe(&h, 100000); /* 100 us */
	lhist_observe(&h, 50000000);	   /* 50 ms */
	uint64_t p50 = lhist_quantile(&h, 0.5), p99 = lhist_quantile(&h, 0.99);
	uint64_t p100 = lhist_quantile(&h, 1.0);
	/* four buckets per power of two: within 25 % */
	assert_true(p50 >= 75000 && p50 <= 125000);
	assert_true(p99 >= 75000 && p99 <= 125000);
	assert_true(p100 >= 37500000 && p100 <= 62500000);
	assert_int_equal(h.count, 100);
}

/* hist_read/lhist_read copy every bucket, the count and the sum. */
static void test_read_copies(void **state)
{
	(void)state;
	struct hist h = {0}, hc;
	struct lhist l = {0}, lc;
	hist_observe(&h, 2000000);
	hist_observe(&h, 40000000000ull);
	lhist_observe(&l, 5000);
	lhist_observe(&l, 7000000);
	memset(&hc, 0xff, sizeof(hc));
	memset(&lc, 0xff, sizeof(lc));
	hist_read(&hc, &h);
	lhist_read(&lc, &l);
	assert_memory_equal(&hc, &h, sizeof(h));
	assert_memory_equal(&lc, &l, sizeof(l));
	assert_int_equal(lhist_quantile(&lc, 0.99), lhist_quantile(&l, 0.99));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_hist_buckets),
	    cmocka_unit_test(test_lhist_quantile),
	    cmocka_unit_test(test_read_copies),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
