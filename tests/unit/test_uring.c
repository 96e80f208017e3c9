/*
 * test_uring — the one I/O loop: full transfers over many SQEs, O_DIRECT,
 * vector writes, short reads at EOF, errors, ring teardown at thread exit, and the same
 * again on the pread/pwrite fallback (uring_disable(), run last).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/uring.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#define BIG (13u * 1024 * 1024 + 12 * 1024) /* 13 pieces + a partial one */

struct fx {
	char path[64];
	char mnt[64]; /* small tmpfs for ENOSPC, "" when not mounted */
	uint8_t *a, *b;
};

static void fill_pattern(uint8_t *p, size_t n, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (uint8_t)x;
	}
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	int fd;

	assert_non_null(f);
	snprintf(f->path, sizeof(f->path), "/var/tmp/spw-uring-XXXXXX");
	fd = mkstemp(f->path);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(posix_memalign((void **)&f->a, 4096, BIG), 0);
	assert_int_equal(posix_memalign((void **)&f->b, 4096, BIG), 0);
	fill_pattern(f->a, BIG, 7);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	unlink(f->path);
	if (f->mnt[0]) {
		umount2(f->mnt, MNT_DETACH);
		rmdir(f->mnt);
	}
	free(f->a);
	free(f->b);
	free(f);
	return 0;
}

static void roundtrip(struct fx *f, int direct)
{
	int fd = open(f->path, O_RDWR | O_TRUNC | (direct ? O_DIRECT : 0));
	size_t off = 5 * 1024 * 1024 + 8192, len = 3 * 1024 * 1024 + 4096;

	assert_true(fd >= 0);
	assert_int_equal(uring_write_full(fd, f->a, BIG, 0), 0);
	assert_int_equal(uring_fdatasync(fd), 0);
	memset(f->b, 0, BIG);
	assert_int_equal(uring_read_full(fd, f->b, BIG, 0), BIG);
	assert_memory_equal(f->a, f->b, BIG);
	/* A read at an offset returns exactly that slice. */
	memset(f->b, 0, BIG);
	assert_int_equal(uring_read_full(fd, f->b, len, off), len);
	assert_memory_equal(f->a + off, f->b, len);
	/* A write at an offset lands there and nowhere else. */
	fill_pattern(f->b, 8192, 99);
	assert_int_equal(uring_write_full(fd, f->b, 8192, 4096), 0);
	memcpy(f->a + 4096, f->b, 8192);
	assert_int_equal(uring_read_full(fd, f->b, 3 * 4096 + 4096, 0), 4 * 4096);
	assert_memory_equal(f->a, f->b, 4 * 4096);
	/* A vector write: its buffers land one after another, in pieces that
	 * never cross from one buffer to the next (the middle one is bigger
	 * than a piece, an empty one is passed over). */
	{
		struct iovec v[4] = {{f->a + 3 * 4096, 4096},
				     {f->a + 7 * 1024 * 1024, 2 * 1024 * 1024 + 8192},
				     {f->a, 0},
				     {f->a + 4096, 3 * 4096}};
		size_t total = 4096 + 2 * 1024 * 1024 + 8192 + 3 * 4096, pos = 0;

		assert_int_equal(uring_writev_full(fd, v, 4, 1024 * 1024), 0);
		memset(f->b, 0, BIG);
		assert_int_equal(uring_read_full(fd, f->b, total, 1024 * 1024), total);
		for (int i = 0; i < 4; pos += v[i].iov_len, i++)
			assert_memory_equal(f->b + pos, v[i].iov_base, v[i].iov_len);
		memcpy(f->a + 1024 * 1024, f->b, total); /* the file's bytes now */
	}
	close(fd);
}

static void test_roundtrip_buffered(void **state)
{
	assert_string_equal(uring_backend(), "io_uring");
	roundtrip(*state, 0);
}

static void test_roundtrip_direct(void **state)
{
	roundtrip(*state, 1);
}

static void short_reads(struct fx *f, int direct)
{
	size_t size = 2 * 1024 * 1024 + 3 * 4096 + 100; /* EOF inside the third piece */
	int fd = open(f->path, O_RDWR | O_TRUNC);
	int rfd;

	assert_true(fd >= 0);
	assert_int_equal(uring_write_full(fd, f->a, size, 0), 0);
	close(fd);
	rfd = open(f->path, O_RDONLY | (direct ? O_DIRECT : 0));
	assert_true(rfd >= 0);
	memset(f->b, 0, BIG);
	assert_int_equal(uring_read_full(rfd, f->b, 8 * 1024 * 1024, 0), size);
	assert_memory_equal(f->a, f->b, size);
	assert_int_equal(uring_read_full(rfd, f->b, 16384, 2 * 1024 * 1024), 3 * 4096 + 100);
	assert_memory_equal(f->a + 2 * 1024 * 1024, f->b, 3 * 4096 + 100);
	/* At and past EOF: 0 bytes. */
	assert_int_equal(uring_read_full(rfd, f->b, 4096, 3 * 1024 * 1024), 0);
	if (!direct)
		assert_int_equal(uring_read_full(rfd, f->b, 100, size), 0);
	/* Zero-length transfers do nothing. */
	assert_int_equal(uring_read_full(rfd, f->b, 0, 0), 0);
	close(rfd);
}

static void test_short_read_buffered(void **state)
{
	short_reads(*state, 0);
}

static void test_short_read_direct(void **state)
{
	short_reads(*state, 1);
}

static void errors(struct fx *f)
{
	int fd = open(f->path, O_RDONLY);
	int dfd;

	assert_true(fd >= 0);
	assert_int_equal(uring_write_full(fd, f->a, 8192, 0), -EBADF);
	close(fd);
	assert_int_equal(uring_read_full(fd, f->b, 8192, 0), -EBADF);
	assert_int_equal(uring_fdatasync(fd), -EBADF);
	/* O_DIRECT with a misaligned buffer is refused, not silently split. */
	dfd = open(f->path, O_RDWR | O_DIRECT);
	assert_true(dfd >= 0);
	assert_int_equal(uring_write_full(dfd, f->a + 1, 8192, 0), -EINVAL);
	close(dfd);
}

static void test_errors(void **state)
{
	errors(*state);
}

/* Writing more than a small tmpfs holds fails with ENOSPC, buffered and direct. */
static void enospc(struct fx *f)
{
	char file[96];

	if (!f->mnt[0]) {
		snprintf(f->mnt, sizeof(f->mnt), "/tmp/spw-uring-mnt-XXXXXX");
		assert_non_null(mkdtemp(f->mnt));
		if (mount("tmpfs", f->mnt, "tmpfs", 0, "size=1M") < 0) {
			rmdir(f->mnt);
			f->mnt[0] = 0;
			skip(); /* not root */
		}
	}
	snprintf(file, sizeof(file), "%s/f", f->mnt);
	for (int direct = 0; direct < 2; direct++) {
		int fd = open(file, O_RDWR | O_CREAT | O_TRUNC | (direct ? O_DIRECT : 0), 0600);

		if (fd < 0 && errno == EINVAL)
			continue; /* tmpfs without O_DIRECT (kernel < 6.6) */
		assert_true(fd >= 0);
		assert_int_equal(uring_write_full(fd, f->a, 3 * 1024 * 1024, 0), -ENOSPC);
		close(fd);
		unlink(file);
	}
}

static void test_enospc(void **state)
{
	enospc(*state);
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	assert_non_null(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static void *thread_io(void *arg)
{
	struct fx *f = arg;
	int fd = open(f->path, O_RDWR | O_TRUNC);
	intptr_t ok;

	if (fd < 0)
		return NULL;
	ok = strcmp(uring_backend(), "io_uring") == 0 &&
	     uring_write_full(fd, f->a, 2 * 1024 * 1024, 0) == 0 &&
	     uring_read_full(fd, f->b, 2 * 1024 * 1024, 0) == 2 * 1024 * 1024;
	close(fd);
	return (void *)ok;
}

/* Each thread gets its own ring, and the ring is gone when the thread is. */
static void test_thread_ring_freed(void **state)
{
	int before = count_fds();

	for (int i = 0; i < 3; i++) {
		pthread_t t;
		void *ok;

		assert_int_equal(pthread_create(&t, NULL, thread_io, *state), 0);
		assert_int_equal(pthread_join(t, &ok), 0);
		assert_true(ok != NULL);
		assert_int_equal(count_fds(), before);
	}
}

/*
 * A ring torn down by a thread that exits (nobody joins it: libfuse ends its
 * idle workers so) and one made afterwards by a thread that already ran,
 * which may be mapped at the same address: both do their I/O, with nothing
 * but a relaxed flag between them (no happens-before a sanitizer could
 * see). Under ThreadSanitizer the second ring's writes must not be taken
 * for a race with the first's.
 */
static atomic_int first_done;
static int fds_before;

static void *thread_io_detached(void *arg)
{
	void *ok = thread_io(arg);

	atomic_store_explicit(&first_done, ok ? 1 : -1, memory_order_relaxed);
	return NULL;
}

static void *thread_io_after(void *arg)
{
	int d;

	while ((d = atomic_load_explicit(&first_done, memory_order_relaxed)) == 0)
		sched_yield();
	while (d > 0 && count_fds() > fds_before) /* its ring is unmapped, fd closed */
		sched_yield();
	return d > 0 ? thread_io(arg) : NULL;
}

static void test_ring_recycled_between_threads(void **state)
{
	struct fx *f = *state;
	pthread_t a, b;
	pthread_attr_t at;
	void *ok;

	fds_before = count_fds();
	for (int i = 0; i < 3; i++) {
		atomic_store(&first_done, 0);
		assert_int_equal(pthread_create(&b, NULL, thread_io_after, f), 0);
		assert_int_equal(pthread_attr_init(&at), 0);
		assert_int_equal(pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED), 0);
		assert_int_equal(pthread_create(&a, &at, thread_io_detached, f), 0);
		pthread_attr_destroy(&at);
		assert_int_equal(pthread_join(b, &ok), 0);
		assert_true(ok != NULL);
	}
}

/* ---- fallback: everything again on pread/pwrite (irreversible, so last) ---- */

static void test_fallback_all(void **state)
{
	uring_disable();
	assert_string_equal(uring_backend(), "pread");
	roundtrip(*state, 0);
	roundtrip(*state, 1);
	short_reads(*state, 0);
	short_reads(*state, 1);
	errors(*state);
	enospc(*state);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_roundtrip_buffered, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_roundtrip_direct, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_short_read_buffered, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_short_read_direct, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_enospc, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_thread_ring_freed, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_ring_recycled_between_threads, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_fallback_all, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
