/* test_atomic_file — common/atomic_file: content replaced whole, errno kept. */
#include "common/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

struct dir {
	char path[64];
};

static int setup(void **state)
{
	struct dir *d = calloc(1, sizeof(*d));
	if (!d)
		return -1;
	snprintf(d->path, sizeof(d->path), "/tmp/test_atomic_file.XXXXXX");
	if (!mkdtemp(d->path)) {
		free(d);
		return -1;
	}
	*state = d;
	return 0;
}

static int teardown(void **state)
{
	struct dir *d = *state;
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->path);
	int rc = system(cmd);
	free(d);
	return rc == 0 ? 0 : -1;
}

static size_t slurp(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "r");
	size_t n;
	assert_non_null(f);
	n = fread(buf, 1, cap, f);
	fclose(f);
	return n;
}

static void test_replaces_whole_content(void **state)
{
	struct dir *d = *state;
	char path[256], tmp[300], buf[64];
	snprintf(path, sizeof(path), "%s/state", d->path);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);

	assert_int_equal(atomic_file_write(path, "a much longer old content", 25), 0);
	assert_int_equal(atomic_file_write(path, "new", 3), 0);
	assert_int_equal(slurp(path, buf, sizeof(buf)), 3); /* not "newch longer..." */
	assert_memory_equal(buf, "new", 3);
	assert_int_equal(access(tmp, F_OK), -1); /* no temp file left */
	assert_int_equal(atomic_file_write(path, "", 0), 0);
	assert_int_equal(slurp(path, buf, sizeof(buf)), 0);
}

/* A full device (PATH.tmp is a link to /dev/full): ENOSPC comes back as
 * such, not as EIO, and the old content stays. */
static void test_enospc_kept(void **state)
{
	struct dir *d = *state;
	char path[256], tmp[300], buf[64];
	snprintf(path, sizeof(path), "%s/state", d->path);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);

	if (access("/dev/full", W_OK) != 0)
		skip();
	assert_int_equal(atomic_file_write(path, "old", 3), 0);
	assert_int_equal(symlink("/dev/full", tmp), 0);
	assert_int_equal(atomic_file_write(path, "new content", 11), -ENOSPC);
	assert_int_equal(slurp(path, buf, sizeof(buf)), 3);
	assert_memory_equal(buf, "old", 3);
	assert_int_equal(access(tmp, F_OK), -1); /* the temp name is cleaned up */
	/* nothing stuck: the next write goes through */
	assert_int_equal(atomic_file_write(path, "new content", 11), 0);
	assert_int_equal(slurp(path, buf, sizeof(buf)), 11);
}

static void test_missing_dir(void **state)
{
	struct dir *d = *state;
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/no/such/state", d->path);
	assert_int_equal(atomic_file_write(path, "x", 1), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_replaces_whole_content, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_enospc_kept, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_missing_dir, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
