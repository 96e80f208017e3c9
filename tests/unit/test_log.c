/* test_log — the log module: level filtering and folding of repeated lines. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/log.h"

/* Run fn with stderr captured into a temp file; return what it printed. */
static char *capture(void (*fn)(void))
{
	char path[] = "/tmp/spw-test-log-XXXXXX";
	int fd = mkstemp(path), saved = dup(2);
	static char buf[1 << 16];
	ssize_t n;

	assert_true(fd >= 0 && saved >= 0);
	fflush(stderr);
	dup2(fd, 2);
	fn();
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	n = pread(fd, buf, sizeof(buf) - 1, 0);
	close(fd);
	unlink(path);
	assert_true(n >= 0);
	buf[n] = '\0';
	return buf;
}

static int count_lines(const char *s)
{
	int n = 0;
	for (; *s; s++)
		n += *s == '\n';
	return n;
}

static void flood(void)
{
	for (int i = 0; i < 1000; i++)
		log_err("cold dir /x: No space left on device");
	log_err("something else");
}

static void test_repeats_folded(void **state)
{
	const char *out = capture(flood);
	/* the first line, a few power-of-two summaries, the final count, the new line */
	assert_true(count_lines(out) < 12);
	assert_non_null(strstr(out, "No space left on device\n"));
	assert_non_null(strstr(out, "repeated 999 times"));
	assert_non_null(strstr(out, "something else"));
}

static void below_level(void)
{
	log_debug("debug detail %d", 42);
	log_info("info line");
}

static void test_level_filter(void **state)
{
	int saved = spw_log_level;
	spw_log_level = LOG_WARNING;
	const char *out = capture(below_level);
	spw_log_level = saved;
	assert_int_equal(count_lines(out), 0);
}

static void test_parse_level(void **state)
{
	assert_int_equal(spw_log_parse_level("error"), LOG_ERR);
	assert_int_equal(spw_log_parse_level("warn"), LOG_WARNING);
	assert_int_equal(spw_log_parse_level("info"), LOG_INFO);
	assert_int_equal(spw_log_parse_level("DEBUG"), LOG_DEBUG);
	assert_int_equal(spw_log_parse_level("loud"), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_repeats_folded),
	    cmocka_unit_test(test_level_filter),
	    cmocka_unit_test(test_parse_level),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
