/*
 * test_store_nvme — the nvme cold store over real directories: puts land on
 * every device weighted by free space, failed/missing/read-only directories
 * are skipped, ENOSPC on a small tmpfs (mounted here, root needed; skipped
 * otherwise) sends the next put elsewhere, list/read/remove, partial puts
 * invisible, concurrent puts from several threads.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/log.h"
#include "tier/store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAXD 3
#define MiB  (1024u * 1024)

struct fx {
	char base[64];
	char dir[MAXD][96];
	int mounted[MAXD];
	struct store *st;
	uint8_t *buf; /* 4 MiB, aligned */
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	snprintf(f->base, sizeof(f->base), "/var/tmp/spw-store-XXXXXX");
	assert_non_null(mkdtemp(f->base));
	for (int i = 0; i < MAXD; i++) {
		memcpy(f->dir[i], f->base, sizeof(f->base));
		snprintf(f->dir[i] + strlen(f->base), sizeof(f->dir[i]) - sizeof(f->base), "/d%d",
			 i);
	}
	assert_int_equal(posix_memalign((void **)&f->buf, 4096, 4 * MiB), 0);
	memset(f->buf, 0x5a, 4 * MiB);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	char cmd[128];

	spw_log_level = LOG_INFO;
	store_close(f->st);
	for (int i = 0; i < MAXD; i++)
		if (f->mounted[i])
			assert_int_equal(umount2(f->dir[i], MNT_DETACH), 0);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->base);
	assert_int_equal(system(cmd), 0);
	free(f->buf);
	free(f);
	return 0;
}

/* Mount a tmpfs of the given options on dir i; skips the test when not allowed. */
static void mount_tmpfs(struct fx *f, int i, const char *opts)
{
	assert_int_equal(mkdir(f->dir[i], 0700), 0);
	if (mount("tmpfs", f->dir[i], "tmpfs", 0, opts) < 0) {
		print_message("cannot mount tmpfs (%s): skipping\n", strerror(errno));
		skip();
	}
	f->mounted[i] = 1;
}

static void open_store(struct fx *f, int n)
{
	const char *dirs[MAXD];

	for (int i = 0; i < n; i++)
		dirs[i] = f->dir[i];
	assert_int_equal(store_nvme_open(dirs, n, &f->st), 0);
}

/* Device an in-progress put went to, from its temp file; -1 if none. */
static int put_dev(struct fx *f, int n, uint64_t id)
{
	char name[64];
	int found = -1;

	snprintf(name, sizeof(name), ".tmp-%016" PRIx64, id);
	for (int i = 0; i < n; i++) {
		char path[192];

		snprintf(path, sizeof(path), "%s/%s", f->dir[i], name);
		if (access(path, F_OK) == 0) {
			assert_int_equal(found, -1);
			found = i;
		}
	}
	return found;
}

static int seg_exists(struct fx *f, int i, uint64_t id)
{
	char path[192];

	snprintf(path, sizeof(path), "%s/seg-%016" PRIx64 ".spw", f->dir[i], id);
	return access(path, F_OK) == 0;
}

/* Put one segment of len bytes (pattern from id) and finish it; returns the device. */
static uint32_t put_one(struct fx *f, uint64_t id, size_t len)
{
	struct store_put *p;
	uint32_t dev = 99;

	memset(f->buf, (int)(id & 0xff), len);
	assert_int_equal(store_put_begin(f->st, id, len, &p), 0);
	assert_int_equal(store_put_append(p, f->buf, len), 0);
	assert_int_equal(store_put_finish(p, &dev), 0);
	return dev;
}

struct seen {
	int n;
	uint64_t id[64];
	uint32_t dev[64];
	uint64_t size[64];
};

static int collect(void *arg, uint64_t id, uint32_t dev, uint64_t size)
{
	struct seen *s = arg;

	assert_true(s->n < 64);
	s->id[s->n] = id;
	s->dev[s->n] = dev;
	s->size[s->n] = size;
	s->n++;
	return 0;
}

static int stop_at_first(void *arg, uint64_t id, uint32_t dev, uint64_t size)
{
	(*(int *)arg)++;
	return 42;
}

static void test_put_list_read_remove(void **state)
{
	struct fx *f = *state;
	int per_dev[2] = {0, 0}, stopped = 0;
	uint32_t devs[20];
	struct seen s = {0};
	uint8_t *rd = NULL;

	open_store(f, 2);
	assert_string_equal(store_name(f->st), "nvme");
	assert_int_equal(store_tier(f->st), STORE_TIER_NVME);
	for (int i = 0; i < 20; i++) {
		devs[i] = put_one(f, 1000 + i, 8192);
		assert_true(devs[i] < 2);
		assert_true(seg_exists(f, (int)devs[i], 1000 + i));
		per_dev[devs[i]]++;
	}
	/* Equal free space: both get some (all 20 on one: p = 2^-19). */
	assert_true(per_dev[0] > 0 && per_dev[1] > 0);

	assert_int_equal(store_list(f->st, collect, &s), 0);
	assert_int_equal(s.n, 20);
	for (int k = 0; k < s.n; k++) {
		uint64_t i = s.id[k] - 1000;

		assert_true(i < 20);
		assert_int_equal(s.dev[k], devs[i]);
		assert_int_equal(s.size[k], 8192);
	}
	assert_int_equal(store_list(f->st, stop_at_first, &stopped), 42);
	assert_int_equal(stopped, 1);

	assert_int_equal(posix_memalign((void **)&rd, 4096, 8192), 0);
	for (int i = 0; i < 20; i++) {
		memset(rd, 0, 8192);
		assert_int_equal(store_read(f->st, 1000 + i, devs[i], 4096, rd, 4096), 0);
		assert_int_equal(rd[0], (1000 + i) & 0xff);
		assert_int_equal(rd[4095], (1000 + i) & 0xff);
	}
	/* Past the end: short read is EIO; wrong device or id: ENOENT; misaligned: EINVAL. */
	spw_log_level = LOG_CRIT;
	assert_int_equal(store_read(f->st, 1000, devs[0], 4096, rd, 8192), -EIO);
	assert_int_equal(store_read(f->st, 1000, !devs[0], 0, rd, 4096), -ENOENT);
	assert_int_equal(store_read(f->st, 1, 0, 0, rd, 4096), -ENOENT);
	assert_int_equal(store_read(f->st, 1000, devs[0], 0, rd, 100), -EINVAL);
	assert_int_equal(store_read(f->st, 1000, devs[0], 512, rd, 4096), -EINVAL);
	assert_int_equal(store_read(f->st, 1000, 7, 0, rd, 4096), -EINVAL);
	spw_log_level = LOG_INFO;
	free(rd);

	for (int i = 0; i < 20; i += 2)
		assert_int_equal(store_remove(f->st, 1000 + i, devs[i]), 0);
	assert_int_equal(store_remove(f->st, 1000, devs[0]), -ENOENT);
	s.n = 0;
	assert_int_equal(store_list(f->st, collect, &s), 0);
	assert_int_equal(s.n, 10);
	for (int k = 0; k < s.n; k++)
		assert_int_equal((s.id[k] - 1000) % 2, 1);
}

/* A put is visible under its final name only once finished; abort leaves nothing. */
static void test_partial_invisible(void **state)
{
	struct fx *f = *state;
	struct store_put *p;
	struct seen s = {0};
	uint32_t dev;
	int d;

	open_store(f, 2);
	assert_int_equal(store_put_begin(f->st, 7, 0, &p), 0);
	d = put_dev(f, 2, 7);
	assert_true(d >= 0);
	assert_int_equal(store_put_append(p, f->buf, 8192), 0);
	/* Appends must be whole aligned blocks. */
	assert_int_equal(store_put_append(p, f->buf, 100), -EINVAL);
	assert_int_equal(store_put_append(p, f->buf + 1, 4096), -EINVAL);
	assert_false(seg_exists(f, d, 7));
	assert_int_equal(store_list(f->st, collect, &s), 0);
	assert_int_equal(s.n, 0);
	spw_log_level = LOG_CRIT;
	assert_int_equal(store_read(f->st, 7, (uint32_t)d, 0, f->buf, 4096), -ENOENT);
	spw_log_level = LOG_INFO;
	store_put_abort(p);
	assert_int_equal(put_dev(f, 2, 7), -1);
	assert_false(seg_exists(f, d, 7));

	assert_int_equal(store_put_begin(f->st, 7, 0, &p), 0);
	d = put_dev(f, 2, 7);
	assert_int_equal(store_put_append(p, f->buf, 8192), 0);
	assert_int_equal(store_put_finish(p, &dev), 0);
	assert_int_equal(dev, d);
	assert_int_equal(put_dev(f, 2, 7), -1); /* temp name gone */
	assert_true(seg_exists(f, d, 7));
	assert_int_equal(store_list(f->st, collect, &s), 0);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.size[0], 8192);
}

/* Draws follow free space: 48M vs 16M tmpfs gets about 3:1; reservations count. */
static void test_weighted(void **state)
{
	struct fx *f = *state;
	struct store_put *p, *big;
	int on0 = 0, d;

	mount_tmpfs(f, 0, "size=48M");
	mount_tmpfs(f, 1, "size=16M");
	open_store(f, 2);
	for (uint64_t id = 1; id <= 400; id++) {
		assert_int_equal(store_put_begin(f->st, id, 4096, &p), 0);
		d = put_dev(f, 2, id);
		assert_true(d == 0 || d == 1);
		on0 += d == 0;
		store_put_abort(p);
	}
	/* Expect 300 (sd 8.7): the bounds are > 6 sd away. */
	assert_in_range(on0, 240, 360);

	/* 40M fits only on dir 0, and stays reserved there while in flight. */
	assert_int_equal(store_put_begin(f->st, 500, 40 * MiB, &big), 0);
	assert_int_equal(put_dev(f, 2, 500), 0);
	for (uint64_t id = 501; id < 520; id++) {
		assert_int_equal(store_put_begin(f->st, id, 12 * MiB, &p), 0);
		assert_int_equal(put_dev(f, 2, id), 1);
		store_put_abort(p);
	}
	/* Nothing has room for 20M while the 40M put is in flight. */
	assert_int_equal(store_put_begin(f->st, 530, 20 * MiB, &p), -ENOSPC);
	store_put_abort(big);
	assert_int_equal(store_put_begin(f->st, 530, 20 * MiB, &p), 0);
	assert_int_equal(put_dev(f, 2, 530), 0);
	store_put_abort(p);
}

/* ENOSPC on a small tmpfs fails the put; the next puts avoid that directory
 * until it shows the room again. */
static void test_enospc_moves_on(void **state)
{
	struct fx *f = *state;
	struct store_put *p;
	uint64_t id = 1;
	uint32_t dev = 99;
	int ret = 0, d = -1;

	mount_tmpfs(f, 0, "size=8M");
	mount_tmpfs(f, 1, "size=24M");
	open_store(f, 2);
	/* Get a put placed on the small one (p = 1/4 each draw). */
	for (; id < 200; id++) {
		assert_int_equal(store_put_begin(f->st, id, 4 * MiB, &p), 0);
		d = put_dev(f, 2, id);
		if (d == 0)
			break;
		store_put_abort(p);
	}
	assert_int_equal(d, 0);
	spw_log_level = LOG_CRIT;
	for (int k = 0; k < 3 && ret == 0; k++)
		ret = store_put_append(p, f->buf, 4 * MiB);
	assert_int_equal(ret, -ENOSPC);
	assert_int_equal(store_put_append(p, f->buf, 4096), -ENOSPC); /* sticky */
	assert_int_equal(store_put_finish(p, &dev), -ENOSPC);
	spw_log_level = LOG_INFO;
	assert_int_equal(dev, 99);
	assert_int_equal(put_dev(f, 2, id), -1);
	assert_false(seg_exists(f, 0, id));

	/* The evictor's retry and every later put go to the other directory,
	 * although the small one has room for their 4M hint. */
	for (uint64_t k = 1000; k < 1040; k++) {
		assert_int_equal(store_put_begin(f->st, k, 4 * MiB, &p), 0);
		assert_int_equal(put_dev(f, 2, k), 1);
		store_put_abort(p);
	}
	assert_int_equal(put_one(f, id, 4 * MiB), 1);

	/* Once it has room for what failed (12M), it is used again. */
	assert_int_equal(mount("tmpfs", f->dir[0], "tmpfs", MS_REMOUNT, "size=32M"), 0);
	d = -1;
	for (uint64_t k = 2000; k < 2200 && d != 0; k++) {
		assert_int_equal(store_put_begin(f->st, k, 4 * MiB, &p), 0);
		d = put_dev(f, 2, k);
		store_put_abort(p);
	}
	assert_int_equal(d, 0);
}

/* A directory that disappears, or is read-only, is skipped; all gone is EIO. */
static void test_bad_dirs_skipped(void **state)
{
	struct fx *f = *state;
	struct store_dev_stat sd[MAXD];
	struct store_put *p;

	mount_tmpfs(f, 2, "ro,size=1M");
	open_store(f, 3);
	assert_int_equal(rmdir(f->dir[1]), 0);
	spw_log_level = LOG_CRIT;
	for (uint64_t id = 1; id <= 20; id++)
		assert_int_equal(put_one(f, id, 4096), 0);
	spw_log_level = LOG_INFO;
	assert_int_equal(store_stat(f->st, sd, MAXD), 3);
	assert_int_equal(sd[0].failed, 0);
	assert_true(sd[0].total > 0 && sd[0].avail <= sd[0].total && sd[0].used <= sd[0].total);
	assert_string_equal(sd[0].name, f->dir[0]);
	assert_int_equal(sd[1].failed, 1); /* its temp file could not be created */
	assert_int_equal(sd[2].failed, 1); /* read-only */
	assert_int_equal(store_stat(f->st, sd, 1), 3);

	/* With the last one gone too: EIO, not ENOSPC. */
	for (uint64_t id = 1; id <= 20; id++)
		assert_int_equal(store_remove(f->st, id, 0), 0);
	assert_int_equal(rmdir(f->dir[0]), 0);
	spw_log_level = LOG_CRIT;
	assert_int_equal(store_put_begin(f->st, 99, 4096, &p), -EIO);
	spw_log_level = LOG_INFO;
}

static void test_open_errors(void **state)
{
	struct fx *f = *state;
	struct store *st = NULL;
	const char *dirs[2] = {NULL, NULL};
	char file[128], deep[128];

	assert_int_equal(store_nvme_open(dirs, 0, &st), -EINVAL);
	spw_log_level = LOG_CRIT;
	snprintf(deep, sizeof(deep), "%s/no/such", f->base);
	dirs[0] = deep;
	assert_int_equal(store_nvme_open(dirs, 1, &st), -ENOENT);
	snprintf(file, sizeof(file), "%s/file", f->base);
	close(open(file, O_CREAT | O_WRONLY, 0600));
	dirs[0] = file;
	assert_int_equal(store_nvme_open(dirs, 1, &st), -ENOTDIR);
	dirs[0] = dirs[1] = f->dir[0];
	assert_int_equal(store_nvme_open(dirs, 2, &st), -EINVAL);
	spw_log_level = LOG_INFO;
	/* A missing directory is created 0700. */
	dirs[0] = f->dir[1];
	assert_int_equal(store_nvme_open(dirs, 1, &st), 0);
	{
		struct stat sb;

		assert_int_equal(stat(f->dir[1], &sb), 0);
		assert_int_equal(sb.st_mode & 0777, 0700);
	}
	store_close(st);
}

struct worker {
	struct fx *f;
	int idx;
	int ok;
};

static void *worker_run(void *arg)
{
	struct worker *wk = arg;
	uint8_t *b = NULL, *r = NULL;

	wk->ok = posix_memalign((void **)&b, 4096, MiB) == 0 &&
		 posix_memalign((void **)&r, 4096, MiB) == 0;
	for (int i = 0; i < 8 && wk->ok; i++) {
		uint64_t id = (uint64_t)wk->idx << 32 | (uint64_t)i;
		struct store_put *p;
		uint32_t dev;

		memset(b, (int)(id * 7 + 1), MiB);
		wk->ok = store_put_begin(wk->f->st, id, MiB, &p) == 0 &&
			 store_put_append(p, b, MiB / 2) == 0 &&
			 store_put_append(p, b + MiB / 2, MiB / 2) == 0 &&
			 store_put_finish(p, &dev) == 0 &&
			 store_read(wk->f->st, id, dev, 0, r, MiB) == 0 && memcmp(b, r, MiB) == 0;
	}
	free(b);
	free(r);
	return NULL;
}

static int count_cb(void *arg, uint64_t id, uint32_t dev, uint64_t size)
{
	(*(int *)arg)++;
	return size == MiB ? 0 : -EBADMSG;
}

static void test_concurrent(void **state)
{
	struct fx *f = *state;
	struct worker wk[4];
	pthread_t t[4];
	int n = 0;

	open_store(f, 2);
	for (int i = 0; i < 4; i++) {
		wk[i] = (struct worker){.f = f, .idx = i};
		assert_int_equal(pthread_create(&t[i], NULL, worker_run, &wk[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(t[i], NULL), 0);
		assert_true(wk[i].ok);
	}
	assert_int_equal(store_list(f->st, count_cb, &n), 0);
	assert_int_equal(n, 32);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_put_list_read_remove, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_partial_invisible, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_weighted, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_enospc_moves_on, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_dirs_skipped, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_open_errors, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_concurrent, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
