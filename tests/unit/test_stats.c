/* stats: the JSON rendering of one snapshot (the stats xattr). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tier/stats/stats.h"

static struct tier_snapshot *sample(void)
{
	struct tier_snapshot *s = calloc(1, sizeof(*s));
	assert_non_null(s);
	s->hot_used = 111;
	s->hot_limit = 222;
	s->segs = 3;
	s->seg_bytes = 400;
	s->seg_live = 100;
	s->tier_bytes[0] = 1000;
	s->tier_bytes[1] = 2000;
	s->c.bytes_spilled = 5 << 20;
	s->c.spill_ns = 1000000000; /* 5 MiB in 1 s */
	s->c.segments_demoted = 7;
	s->c.direct_reads = 13;
	s->slow_op = "write";
	s->c.slow_op_ns = 42000000;
	s->jrnl_on = 1;
	s->jrnl_syncs = 9;
	s->c.state_copies = 4;
	s->rec.adopted = 1;
	s->rec.adopt_gone_segments = 5;
	lhist_observe(&s->c.h_first[1], 2000000); /* one s3 first byte of 2 ms */
	s->store_name[0] = "nvme";
	s->ndev[0] = 2;
	strcpy(s->dev[0][0].name, "/a");
	strcpy(s->dev[0][1].name, "/b");
	s->dev[0][1].failed = 1;
	s->store_name[1] = "s3";
	s->ndev[1] = 1;
	strcpy(s->dev[1][0].name, "bkt/p");
	return s;
}

static int balanced(const char *j)
{
	int depth = 0;
	for (; *j; j++) {
		depth += (*j == '{' || *j == '[') - (*j == '}' || *j == ']');
		if (depth < 0)
			return 0;
	}
	return depth == 0;
}

static void test_fields_from_the_snapshot(void **state)
{
	(void)state;
	struct tier_snapshot *s = sample();
	char buf[8192];
	int n = stats_json(s, 1, buf, sizeof(buf));
	assert_true(n > 0 && (size_t)n < sizeof(buf));
	assert_int_equal(strlen(buf), (size_t)n);
	assert_true(balanced(buf));
	assert_non_null(strstr(buf, "\"hot\":{\"used\":111,\"limit\":222,"));
	assert_non_null(strstr(buf, "\"live_ratio\":0.250,"));
	assert_non_null(strstr(buf, "\"demoted\":7}"));
	assert_non_null(strstr(buf, "\"tiers\":{\"nvme\":1000,\"s3\":2000}"));
	assert_non_null(strstr(buf, "\"MiBps\":5.0}"));
	assert_non_null(strstr(buf, "\"slow_request\":{\"op\":\"write\",\"ms\":42}"));
	assert_non_null(strstr(buf, "\"syncs\":9,\"bucket_copies\":4}"));
	assert_non_null(strstr(buf, "\"adopted\":1,\"adopt_gone_segments\":5,"));
	assert_non_null(strstr(buf, "\"buffer_replies\":0,\"direct_reads\":13,"));
	assert_non_null(strstr(buf, "\"first_byte\":{\"nvme\":{\"count\":0,"));
	assert_non_null(strstr(buf, "\"s3\":{\"count\":1,"));
	/* every cold directory of both stores, in order */
	assert_non_null(strstr(buf, "\"cold\":[{\"dir\":\"/a\""));
	assert_non_null(strstr(buf, "{\"dir\":\"/b\",\"used\":0,\"avail\":0,\"failed\":1},"
				    "{\"dir\":\"bkt/p\""));
	/* s3 alone: its bytes are the first store's */
	n = stats_json(s, 0, buf, sizeof(buf));
	assert_non_null(strstr(buf, "\"tiers\":{\"nvme\":0,\"s3\":1000}"));
	free(s);
}

/* A short buffer: snprintf rules (the caller retries with the size). */
static void test_truncated_reports_whole_length(void **state)
{
	(void)state;
	struct tier_snapshot *s = sample();
	char full[8192], small[64];
	int n = stats_json(s, 1, full, sizeof(full));
	memset(small, 'x', sizeof(small));
	assert_int_equal(stats_json(s, 1, small, 40), n);
	assert_int_equal(strlen(small), 39);
	assert_memory_equal(small, full, 39);
	assert_int_equal(small[40], 'x'); /* nothing past len */
	assert_int_equal(stats_json(s, 1, NULL, 0), n);
	free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_fields_from_the_snapshot),
	    cmocka_unit_test(test_truncated_reports_whole_length),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
