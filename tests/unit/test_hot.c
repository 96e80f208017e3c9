/*
 * test_hot — the RAM tier's directory and accounting (tier/hot/hot.c):
 * hot_new creates hot_dir 0700, adopts it only when it is empty or its
 * marker names this filesystem (or a volatile mount, or an older spillway
 * whose hot files the index knows) and it holds nothing but spillway's
 * 16-hex-digit files, marker and lock, and locks it against a second
 * instance; reservations add up to the limit and fail with -ENOSPC
 * past it, except overwrites of allocated pages; hot_account_locked follows
 * st_blocks. Runs on a tmpfs under /dev/shm like the real hot tier.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "index/index.h"
#include "tier/hot/hot.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#define PG 4096ULL

struct fx {
	char base[64]; /* our temp dir */
	char dir[96];  /* base/hot: the hot_dir under test */
	int tmpfs;     /* base is on tmpfs: st_blocks are exact pages */
	struct hot *hot, *hot2;
	struct inode a, b;
};

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static void inode_init(struct inode *in, uint64_t ino)
{
	memset(in, 0, sizeof(*in));
	in->ino = ino;
	in->mode = S_IFREG | 0644;
	in->hot_fd = -1;
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct statfs sfs;

	assert_non_null(f);
	snprintf(f->base, sizeof(f->base), "/dev/shm/spw-hot-XXXXXX");
	if (!mkdtemp(f->base)) {
		snprintf(f->base, sizeof(f->base), "/tmp/spw-hot-XXXXXX");
		assert_non_null(mkdtemp(f->base));
	}
	f->tmpfs = statfs(f->base, &sfs) == 0 && sfs.f_type == TMPFS_MAGIC;
	snprintf(f->dir, sizeof(f->dir), "%s/hot", f->base);
	inode_init(&f->a, 0x2a);
	inode_init(&f->b, 0x1000000002bULL);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	if (f->a.hot_fd >= 0)
		close(f->a.hot_fd);
	if (f->b.hot_fd >= 0)
		close(f->b.hot_fd);
	hot_free(f->hot2);
	hot_free(f->hot);
	nftw(f->base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	free(f);
	return 0;
}

static void touch(const char *dir, const char *name, size_t bytes)
{
	char path[256];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
	assert_true(fd >= 0);
	if (bytes) {
		char *buf = calloc(1, bytes);
		assert_non_null(buf);
		memset(buf, 0x5a, bytes);
		assert_int_equal(write(fd, buf, bytes), (ssize_t)bytes);
		free(buf);
	}
	close(fd);
}

static int exists_in(const char *dir, const char *name)
{
	char path[256];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return lstat(path, &st) == 0;
}

static int open_hot(struct fx *f, struct hot *hot, struct inode *in)
{
	int fd;

	idx_inode_lock(in);
	fd = hot_fd_get_locked(hot, in);
	idx_inode_unlock(in);
	assert_true(fd >= 0);
	return fd;
}

static void put_hot(struct hot *hot, struct inode *in)
{
	idx_inode_lock(in);
	hot_fd_put_locked(hot, in);
	idx_inode_unlock(in);
}

static void account(struct hot *hot, struct inode *in)
{
	idx_inode_lock(in);
	hot_account_locked(hot, in);
	idx_inode_unlock(in);
}

static void write_pages(int fd, uint64_t first, uint64_t n)
{
	static char page[PG];

	memset(page, 0xa5, sizeof(page));
	for (uint64_t p = first; p < first + n; p++)
		assert_int_equal(pwrite(fd, page, PG, (off_t)(p * PG)), (ssize_t)PG);
}

static uint64_t alloc_bytes(int fd)
{
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	return (uint64_t)st.st_blocks * 512;
}

/* ---- the directory ---- */

static void test_new_creates_dir_0700(void **state)
{
	struct fx *f = *state;
	const char *why = "unset";
	struct stat st;

	assert_int_equal(hot_new(f->dir, 1 << 20, 0, &f->hot, &why), 0);
	assert_null(why);
	assert_int_equal(stat(f->dir, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0700);
	assert_string_equal(hot_dir(f->hot), f->dir);
	assert_int_equal(hot_limit(f->hot), 1 << 20);
	assert_int_equal(hot_used(f->hot), 0);
	assert_int_equal(hot_reserved(f->hot), 0);
	assert_true(hot_fs_avail(f->hot) > 0);
}

static void test_adopts_existing_dir_and_fixes_mode(void **state)
{
	struct fx *f = *state;
	const char *why;
	struct stat st;

	assert_int_equal(mkdir(f->dir, 0755), 0);
	assert_int_equal(chmod(f->dir, 0755), 0);
	assert_int_equal(hot_new(f->dir, 1 << 20, 0, &f->hot, &why), 0);
	assert_int_equal(stat(f->dir, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
}

static void test_refuses_foreign_files(void **state)
{
	struct fx *f = *state;
	static const char *const foreign[] = {
	    "notes.txt",	 "00000000000000AB", /* upper-case hex is not ours */
	    "000000000000002",			     /* 15 digits */
	    "00000000000000002",		     /* 17 digits */
	    "000000000000002g",	 ".hidden",
	};

	for (size_t i = 0; i < sizeof(foreign) / sizeof(foreign[0]); i++) {
		const char *why = NULL;
		struct hot *h = NULL;
		int r;

		assert_int_equal(mkdir(f->dir, 0700), 0);
		touch(f->dir, "000000000000002a", 10); /* ours, would be removed */
		touch(f->dir, foreign[i], 10);
		r = hot_new(f->dir, 1 << 20, 0, &h, &why);
		if (r != -ENOTEMPTY)
			print_error("with '%s': hot_new = %d\n", foreign[i], r);
		assert_int_equal(r, -ENOTEMPTY);
		assert_non_null(why);
		assert_true(strlen(why) > 0);
		assert_true(exists_in(f->dir, foreign[i])); /* never deleted */
		nftw(f->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	}
}

static void put_text(const char *dir, const char *name, const char *text)
{
	char path[256];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

static void get_text(const char *dir, const char *name, char *buf, size_t len)
{
	char path[256];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	n = read(fd, buf, len - 1);
	assert_true(n >= 0);
	buf[n] = 0;
	close(fd);
}

#define FS_A "filesystem 0101010101010101010101010101010a\n"
static const struct hot_owner owner_a = {
    .id = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0x0a}, .persistent = 1};
static const struct hot_owner owner_b = {
    .id = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0x0b}, .persistent = 1};

static void test_removes_stale_hot_files(void **state)
{
	struct fx *f = *state;
	const char *why;

	assert_int_equal(mkdir(f->dir, 0700), 0);
	/* a volatile mount's hot_dir (kill -9 left files) */
	put_text(f->dir, HOT_MARKER,
		 "spillway hot_dir\nadopted\nvolatile 0123456789abcdef0123456789abcdef\n");
	touch(f->dir, "0000000000000002", 8192);
	touch(f->dir, "00000000000000ff", 0);
	touch(f->dir, "ffffffffffffffff", 100);
	touch(f->dir, ".lock", 0); /* a crashed daemon's lock file: unlocked */
	assert_int_equal(hot_new(f->dir, 1 << 20, 0, &f->hot, &why), 0);
	assert_false(exists_in(f->dir, "0000000000000002"));
	assert_false(exists_in(f->dir, "00000000000000ff"));
	assert_false(exists_in(f->dir, "ffffffffffffffff"));
	assert_int_equal(hot_used(f->hot), 0);
}

/* A directory the user names, holding files that merely look like hot
 * files, is not spillway's: refused, nothing deleted, mode unchanged (it
 * deleted every 16-hex-digit file and chmodded the directory). */
static void test_unmarked_dir_with_hot_names_untouched(void **state)
{
	struct fx *f = *state;
	const char *why = NULL;
	struct hot *h = NULL;
	struct stat st;

	assert_int_equal(mkdir(f->dir, 0755), 0);
	assert_int_equal(chmod(f->dir, 0755), 0);
	touch(f->dir, "0000000000000002", 8192);
	touch(f->dir, "00000000000000ff", 10);
	assert_int_equal(hot_dir_check(f->dir, &why), -ENOTEMPTY);
	assert_non_null(why);
	assert_int_equal(hot_new(f->dir, 1 << 20, 0, &h, &why), -ENOTEMPTY);
	assert_int_equal(hot_new(f->dir, 1 << 20, &owner_a, &h, &why), -ENOTEMPTY); /* keep too */
	assert_null(h);
	assert_true(exists_in(f->dir, "0000000000000002"));
	assert_true(exists_in(f->dir, "00000000000000ff"));
	assert_false(exists_in(f->dir, HOT_MARKER));
	assert_false(exists_in(f->dir, ".lock"));
	assert_int_equal(stat(f->dir, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0755);
}

/* hot_dir=/ chmodded / to 0700 and put its lock there. */
static void test_root_refused(void **state)
{
	const char *why = NULL;
	struct hot *h = NULL;
	struct stat before, after;

	(void)state;
	assert_int_equal(stat("/", &before), 0);
	assert_int_equal(hot_dir_check("/", &why), -EINVAL);
	assert_non_null(why);
	assert_int_equal(hot_new("/", 1 << 20, 0, &h, &why), -EINVAL);
	assert_null(h);
	assert_int_equal(stat("/", &after), 0);
	assert_int_equal(before.st_mode, after.st_mode);
	assert_int_equal(access("/" HOT_MARKER, F_OK), -1);
}

/* Made by spillway: removed at unmount. Given empty: claimed while mounted,
 * left in place (empty) at unmount. */
static void test_made_removed_given_kept(void **state)
{
	struct fx *f = *state;
	const char *why;
	struct stat st;

	assert_int_equal(hot_dir_make(f->dir), 0);
	assert_int_equal(hot_new(f->dir, 1 << 20, 0, &f->hot, &why), 0);
	hot_free(f->hot);
	f->hot = NULL;
	assert_int_equal(stat(f->dir, &st), -1);

	assert_int_equal(mkdir(f->dir, 0700), 0);
	assert_int_equal(hot_new(f->dir, 1 << 20, 0, &f->hot, &why), 0);
	assert_true(exists_in(f->dir, HOT_MARKER));
	hot_free(f->hot);
	f->hot = NULL;
	assert_int_equal(stat(f->dir, &st), 0);
	assert_false(exists_in(f->dir, HOT_MARKER));
}

static void test_refuses_other_owner(void **state)
{
	struct fx *f = *state;
	const char *why = NULL;
	struct hot *h = NULL;

	if (geteuid() != 0)
		skip();
	assert_int_equal(mkdir(f->dir, 0700), 0);
	assert_int_equal(chown(f->dir, 12345, 12345), 0);
	assert_int_equal(hot_new(f->dir, 1 << 20, 0, &h, &why), -EPERM);
	assert_non_null(why);
}

static void test_second_instance_refused(void **state)
{
	struct fx *f = *state;
	const char *why = NULL;

	assert_int_equal(hot_new(f->dir, 1 << 20, 0, &f->hot, &why), 0);
	assert_int_equal(hot_new(f->dir, 1 << 20, 0, &f->hot2, &why), -EBUSY);
	assert_null(f->hot2);
	assert_non_null(why);
	/* once the first is gone the directory can be adopted again */
	hot_free(f->hot);
	f->hot = NULL;
	assert_int_equal(hot_new(f->dir, 1 << 20, 0, &f->hot, &why), 0);
}

/*
 * BUG (tier/hot/hot.c hot_new/hot_free): a refused second hot_new tears down the
 * first instance's directory. Its failure path calls hot_free(), which
 * unlinks ".lock" (the live instance's lock file) whenever lockfd >= 0, and
 * then rmdir()s hot_dir, which succeeds while the first instance has no hot
 * files yet. A third instance then finds no lock and starts, and the first
 * one's openat(dirfd, ...) fails with ENOENT. hot_free should only unlink
 * the lock file (and rmdir) when this instance holds the lock.
 */
static void test_refused_instance_leaves_lock_alone(void **state)
{
	struct fx *f = *state;
	const char *why = NULL;
	struct hot *third = NULL;
	int r;

	assert_int_equal(hot_new(f->dir, 1 << 20, 0, &f->hot, &why), 0);
	assert_int_equal(hot_new(f->dir, 1 << 20, 0, &f->hot2, &why), -EBUSY);
	/* the first instance's directory and lock are intact */
	assert_true(exists_in(f->base, "hot"));
	assert_true(exists_in(f->dir, ".lock"));
	/* so a third attempt is refused as well */
	r = hot_new(f->dir, 1 << 20, 0, &third, &why);
	if (r == 0)
		hot_free(third);
	assert_int_equal(r, -EBUSY);
	/* and the first instance still works */
	f->a.size = 0;
	open_hot(f, f->hot, &f->a);
	assert_true(exists_in(f->dir, "000000000000002a"));
	put_hot(f->hot, &f->a);
}

/* Issue 39: a user's file named .lock made a directory count as empty: it
 * was adopted, chmodded 0700 and the user's .lock unlinked at unmount. */
static void test_user_lock_file_refused_untouched(void **state)
{
	struct fx *f = *state;
	const char *why = NULL;
	struct hot *h = NULL;
	struct stat st;
	char buf[64];

	assert_int_equal(mkdir(f->dir, 0755), 0);
	assert_int_equal(chmod(f->dir, 0755), 0);
	put_text(f->dir, ".lock", "my lock\n");
	assert_int_equal(hot_dir_check(f->dir, &why), -ENOTEMPTY);
	assert_non_null(why);
	assert_int_equal(hot_new(f->dir, 1 << 20, NULL, &h, &why), -ENOTEMPTY);
	assert_int_equal(hot_new(f->dir, 1 << 20, &owner_a, &h, &why), -ENOTEMPTY);
	assert_null(h);
	get_text(f->dir, ".lock", buf, sizeof(buf));
	assert_string_equal(buf, "my lock\n");
	assert_false(exists_in(f->dir, HOT_MARKER));
	assert_int_equal(stat(f->dir, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0755);
	/* beside a real marker, a .lock spillway did not write is refused too */
	put_text(f->dir, HOT_MARKER, "spillway hot_dir\nadopted\n" FS_A);
	assert_int_equal(hot_dir_check(f->dir, &why), -ENOTEMPTY);
	assert_int_equal(hot_new(f->dir, 1 << 20, &owner_a, &h, &why), -ENOTEMPTY);
	get_text(f->dir, ".lock", buf, sizeof(buf));
	assert_string_equal(buf, "my lock\n");
}

/* Issue 39: a user's file named .spillway-hot made any directory spillway's:
 * a user file named like a hot file was deleted at mount. */
static void test_user_marker_refused_untouched(void **state)
{
	struct fx *f = *state;
	const char *why = NULL;
	struct hot *h = NULL;
	char buf[64];
	static const char *const fakes[] = {"", "hello\n", "spillway hot_dir\n",
					    "spillway hot_dir\ncreated\nfilesystem 12\n",
					    "spillway hot_dir\ncreated\nvolatile x\n"};

	for (size_t i = 0; i < sizeof(fakes) / sizeof(fakes[0]); i++) {
		assert_int_equal(mkdir(f->dir, 0755), 0);
		put_text(f->dir, HOT_MARKER, fakes[i]);
		put_text(f->dir, "0000000000000002", "precious");
		assert_int_equal(hot_dir_check(f->dir, &why), -ENOTEMPTY);
		assert_int_equal(hot_new(f->dir, 1 << 20, NULL, &h, &why), -ENOTEMPTY);
		assert_int_equal(hot_new(f->dir, 1 << 20, &owner_a, &h, &why), -ENOTEMPTY);
		assert_null(h);
		assert_non_null(strstr(why, HOT_MARKER));
		get_text(f->dir, "0000000000000002", buf, sizeof(buf));
		assert_string_equal(buf, "precious");
		get_text(f->dir, HOT_MARKER, buf, sizeof(buf));
		assert_string_equal(buf, fakes[i]);
		assert_false(exists_in(f->dir, ".lock"));
		nftw(f->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	}
}

/* The marker names the filesystem: its own hot_dir is adopted again with the
 * hot files it kept (recovery's), another filesystem's is refused. */
static void test_marker_names_filesystem(void **state)
{
	struct fx *f = *state;
	const char *why = NULL;
	struct hot *h = NULL;
	char buf[128];

	assert_int_equal(hot_new(f->dir, 1 << 20, &owner_a, &f->hot, &why), 0);
	get_text(f->dir, HOT_MARKER, buf, sizeof(buf));
	assert_string_equal(buf, "spillway hot_dir\ncreated\n" FS_A);
	get_text(f->dir, ".lock", buf, sizeof(buf));
	assert_non_null(strstr(buf, "id 0101010101010101010101010101010a\n"));
	touch(f->dir, "000000000000002a", 100); /* a hot file kept for the next mount */
	hot_free(f->hot);
	f->hot = NULL;
	assert_true(exists_in(f->dir, HOT_MARKER));
	assert_false(exists_in(f->dir, ".lock"));
	assert_int_equal(hot_new(f->dir, 1 << 20, &owner_b, &h, &why), -ENOTEMPTY);
	assert_non_null(strstr(why, "another spillway filesystem"));
	assert_int_equal(hot_new(f->dir, 1 << 20, NULL, &h, &why), -ENOTEMPTY);
	assert_null(h);
	assert_true(exists_in(f->dir, "000000000000002a"));
	assert_int_equal(hot_new(f->dir, 1 << 20, &owner_a, &f->hot, &why), 0);
	assert_true(exists_in(f->dir, "000000000000002a")); /* recovery's to decide */
}

static int knows_2a(void *arg, uint64_t ino)
{
	return ino == *(uint64_t *)arg;
}

/* An older spillway's marker names no filesystem: its hot_dir is adopted
 * when the index knows every hot file in it, and then names this one. */
static void test_older_marker_adopted_when_known(void **state)
{
	struct fx *f = *state;
	const char *why = NULL;
	struct hot *h = NULL;
	uint64_t known = 0x2a;
	struct hot_owner own = owner_a;
	char buf[128];

	own.known = knows_2a;
	own.arg = &known;
	assert_int_equal(mkdir(f->dir, 0700), 0);
	put_text(f->dir, HOT_MARKER, "spillway hot_dir\ncreated\n");
	touch(f->dir, ".lock", 0); /* an older spillway's lock: empty */
	touch(f->dir, "000000000000002a", 100);
	touch(f->dir, "000000000000002b", 100);
	assert_int_equal(hot_dir_check(f->dir, &why), 0);
	assert_int_equal(hot_new(f->dir, 1 << 20, &own, &h, &why), -ENOTEMPTY);
	assert_non_null(strstr(why, "index"));
	assert_int_equal(hot_new(f->dir, 1 << 20, NULL, &h, &why), -ENOTEMPTY);
	assert_true(exists_in(f->dir, "000000000000002b"));
	get_text(f->dir, HOT_MARKER, buf, sizeof(buf));
	assert_string_equal(buf, "spillway hot_dir\ncreated\n");
	{
		char p[256];
		snprintf(p, sizeof(p), "%s/000000000000002b", f->dir);
		assert_int_equal(unlink(p), 0);
	}
	assert_int_equal(hot_new(f->dir, 1 << 20, &own, &f->hot, &why), 0);
	get_text(f->dir, HOT_MARKER, buf, sizeof(buf));
	assert_string_equal(buf, "spillway hot_dir\ncreated\n" FS_A);
	assert_true(exists_in(f->dir, "000000000000002a"));
}

/* ---- hot files ---- */

static void test_fd_get_put(void **state)
{
	struct fx *f = *state;
	const char *why;
	struct stat st;
	int fd, fd2;

	assert_int_equal(hot_new(f->dir, 1 << 20, 0, &f->hot, &why), 0);
	f->a.size = 3 * PG + 5; /* the hot file mirrors the logical size */
	fd = open_hot(f, f->hot, &f->a);
	assert_int_equal(f->a.hot_fd, fd);
	assert_int_equal(f->a.hot_users, 1);
	assert_true(exists_in(f->dir, "000000000000002a"));
	assert_int_equal(fstat(fd, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(st.st_size, 3 * PG + 5);
	assert_int_equal(st.st_blocks, 0); /* sparse: holes cost nothing */
	fd2 = open_hot(f, f->hot, &f->a);
	assert_int_equal(fd2, fd);
	assert_int_equal(f->a.hot_users, 2);
	/* 64-bit inode numbers name the file with 16 hex digits */
	open_hot(f, f->hot, &f->b);
	assert_true(exists_in(f->dir, "000001000000002b"));

	struct chunk ch[2] = {{.state = CHUNK_COLD}, {.state = CHUNK_HOT_DIRTY}};
	f->a.chunks = ch;
	f->a.nchunks = 2;
	put_hot(f->hot, &f->a);
	assert_int_equal(f->a.hot_fd, fd);
	put_hot(f->hot, &f->a);
	assert_int_equal(f->a.hot_users, 0);
	assert_int_equal(f->a.hot_fd, -1);
	assert_int_equal(fcntl(fd, F_GETFD), -1); /* closed */
	/* with a chunk in RAM the file itself stays until dropped */
	assert_true(exists_in(f->dir, "000000000000002a"));
	idx_inode_lock(&f->a);
	hot_drop(f->hot, &f->a);
	idx_inode_unlock(&f->a);
	assert_false(exists_in(f->dir, "000000000000002a"));
	f->a.chunks = NULL;
	f->a.nchunks = 0;
	/* nothing in RAM (every chunk cold or a hole): no hot file once unused */
	put_hot(f->hot, &f->b);
	assert_false(exists_in(f->dir, "000001000000002b"));
}

static void test_cold_file_leaves_no_hot_file(void **state)
{
	struct fx *f = *state;
	const char *why;
	struct chunk ch[3] = {{.state = CHUNK_COLD}, {.state = CHUNK_ABSENT}, {.state = CHUNK_COLD}};
	int fd;

	assert_int_equal(hot_new(f->dir, 1 << 20, 0, &f->hot, &why), 0);
	f->a.size = 3 << 20;
	f->a.chunks = ch;
	f->a.nchunks = 3;
	fd = open_hot(f, f->hot, &f->a);
	assert_int_equal(pwrite(fd, "x", 1, 5), 1); /* a stray page: gone too */
	idx_inode_lock(&f->a);
	hot_account_locked(f->hot, &f->a);
	idx_inode_unlock(&f->a);
	assert_int_equal(hot_used(f->hot), PG);
	put_hot(f->hot, &f->a);
	assert_false(exists_in(f->dir, "000000000000002a"));
	assert_int_equal(hot_used(f->hot), 0);
	assert_int_equal(f->a.hot_bytes, 0);
	f->a.chunks = NULL;
	f->a.nchunks = 0;
}

static void test_drop_ignores_non_regular(void **state)
{
	struct fx *f = *state;
	const char *why;

	assert_int_equal(hot_new(f->dir, 1 << 20, 0, &f->hot, &why), 0);
	struct chunk ch[1] = {{.state = CHUNK_HOT_DIRTY}};
	open_hot(f, f->hot, &f->a);
	f->a.size = 1; /* a chunk in RAM: its hot file outlives the last put */
	f->a.chunks = ch;
	f->a.nchunks = 1;
	put_hot(f->hot, &f->a);
	f->a.mode = S_IFDIR | 0755;
	hot_drop(f->hot, &f->a);
	assert_true(exists_in(f->dir, "000000000000002a"));
	f->a.mode = S_IFREG | 0644;
	hot_drop(f->hot, &f->a);
	assert_false(exists_in(f->dir, "000000000000002a"));
	f->a.chunks = NULL;
	f->a.nchunks = 0;
}

static void test_empty_file_leaves_no_hot_file(void **state)
{
	struct fx *f = *state;
	const char *why;

	assert_int_equal(hot_new(f->dir, 1 << 20, 0, &f->hot, &why), 0);
	open_hot(f, f->hot, &f->a);
	assert_true(exists_in(f->dir, "000000000000002a"));
	put_hot(f->hot, &f->a); /* size 0, nothing allocated: removed */
	assert_false(exists_in(f->dir, "000000000000002a"));
	open_hot(f, f->hot, &f->a); /* and made again on the next open */
	assert_true(exists_in(f->dir, "000000000000002a"));
	put_hot(f->hot, &f->a);
}

/* ---- reservations ---- */

static void test_reserve_arithmetic(void **state)
{
	struct fx *f = *state;
	const char *why;
	uint64_t limit = 16 * PG, total = 0;
	int fd;

	assert_int_equal(hot_new(f->dir, limit, 0, &f->hot, &why), 0);
	fd = open_hot(f, f->hot, &f->a);

	/* whole pages covering the range */
	assert_int_equal(hot_try_reserve(f->hot, fd, 0, PG), PG);
	total += PG;
	assert_int_equal(hot_try_reserve(f->hot, fd, 1, PG), 2 * PG); /* straddles */
	total += 2 * PG;
	assert_int_equal(hot_try_reserve(f->hot, fd, PG - 1, 2), 2 * PG);
	total += 2 * PG;
	assert_int_equal(hot_try_reserve(f->hot, fd, 5 * PG, 1), PG);
	total += PG;
	assert_int_equal(hot_try_reserve(f->hot, fd, 8 * PG, 0), 0);
	assert_int_equal(hot_reserved(f->hot), total);
	assert_int_equal(hot_used(f->hot), 0);

	/* up to the limit exactly */
	assert_int_equal(hot_try_reserve(f->hot, fd, 0, limit - total), limit - total);
	assert_int_equal(hot_reserved(f->hot), limit);
	/* past it: -ENOSPC, and nothing taken */
	assert_int_equal(hot_try_reserve(f->hot, fd, 0, 1), -ENOSPC);
	assert_int_equal(hot_try_reserve(f->hot, fd, 100 * PG, PG), -ENOSPC);
	assert_int_equal(hot_reserved(f->hot), limit);

	/* give some back: room again, exactly that much */
	hot_unreserve(f->hot, 2 * PG);
	assert_int_equal(hot_reserved(f->hot), limit - 2 * PG);
	assert_int_equal(hot_try_reserve(f->hot, fd, 0, 3 * PG), -ENOSPC);
	assert_int_equal(hot_try_reserve(f->hot, fd, 0, 2 * PG), 2 * PG);
	assert_int_equal(hot_try_reserve(f->hot, fd, 0, 1), -ENOSPC);
	hot_unreserve(f->hot, limit);
	assert_int_equal(hot_reserved(f->hot), 0);
	/* a single request larger than the limit never fits */
	assert_int_equal(hot_try_reserve(f->hot, fd, 0, limit + 1), -ENOSPC);
	assert_int_equal(hot_reserved(f->hot), 0);
	put_hot(f->hot, &f->a);
}

static void test_reserve_counts_used(void **state)
{
	struct fx *f = *state;
	const char *why;
	uint64_t limit = 16 * PG, used;
	int fd;

	assert_int_equal(hot_new(f->dir, limit, 0, &f->hot, &why), 0);
	fd = open_hot(f, f->hot, &f->a);
	write_pages(fd, 0, 10);
	account(f->hot, &f->a);
	used = hot_used(f->hot);
	assert_int_equal(used, alloc_bytes(fd));
	assert_true(used >= 10 * PG);
	if (used > limit)
		skip(); /* not tmpfs: allocation overhead too large to test the limit */
	/* room left is limit - used, for new pages */
	assert_int_equal(hot_try_reserve(f->hot, fd, 20 * PG, limit - used),
			 (int64_t)(limit - used));
	assert_int_equal(hot_try_reserve(f->hot, fd, 40 * PG, PG), -ENOSPC);
	hot_unreserve(f->hot, limit - used);
	put_hot(f->hot, &f->a);
}

static void test_overwrite_near_limit_needs_no_room(void **state)
{
	struct fx *f = *state;
	const char *why;
	uint64_t limit = 8 * PG;
	int fd;

	if (!f->tmpfs)
		skip(); /* needs exact page accounting */
	assert_int_equal(hot_new(f->dir, limit, 0, &f->hot, &why), 0);
	fd = open_hot(f, f->hot, &f->a);
	write_pages(fd, 0, 8);
	account(f->hot, &f->a);
	assert_int_equal(hot_used(f->hot), limit); /* full */

	/* overwriting allocated pages: fine, and nothing to give back */
	assert_int_equal(hot_try_reserve(f->hot, fd, 0, PG), 0);
	assert_int_equal(hot_try_reserve(f->hot, fd, 3 * PG + 7, 2 * PG), 0);
	assert_int_equal(hot_try_reserve(f->hot, fd, 0, 8 * PG), 0);
	assert_int_equal(hot_reserved(f->hot), 0);
	/* extending the file or filling a hole: no room */
	assert_int_equal(hot_try_reserve(f->hot, fd, 8 * PG, 1), -ENOSPC);
	assert_int_equal(hot_try_reserve(f->hot, fd, 7 * PG, 2 * PG), -ENOSPC);

	/* punch page 3: an overwrite spanning it needs exactly that page */
	assert_int_equal(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 3 * PG, PG), 0);
	account(f->hot, &f->a);
	assert_int_equal(hot_used(f->hot), 7 * PG);
	assert_int_equal(hot_try_reserve(f->hot, fd, 0, 8 * PG), PG);
	assert_int_equal(hot_reserved(f->hot), PG);
	/* and then no more */
	assert_int_equal(hot_try_reserve(f->hot, fd, 2 * PG, 2 * PG), -ENOSPC);
	assert_int_equal(hot_try_reserve(f->hot, fd, 0, PG), 0);
	hot_unreserve(f->hot, PG);
	assert_int_equal(hot_reserved(f->hot), 0);
	put_hot(f->hot, &f->a);
}

/* ---- accounting ---- */

static void test_account_tracks_blocks(void **state)
{
	struct fx *f = *state;
	const char *why;
	int fa, fb;

	assert_int_equal(hot_new(f->dir, 1 << 30, 0, &f->hot, &why), 0);
	fa = open_hot(f, f->hot, &f->a);
	fb = open_hot(f, f->hot, &f->b);

	account(f->hot, &f->a); /* empty file: nothing */
	assert_int_equal(hot_used(f->hot), 0);
	write_pages(fa, 0, 3);
	account(f->hot, &f->a);
	assert_int_equal(f->a.hot_bytes, alloc_bytes(fa));
	assert_int_equal(hot_used(f->hot), alloc_bytes(fa));
	if (f->tmpfs)
		assert_int_equal(hot_used(f->hot), 3 * PG);

	write_pages(fb, 10, 2); /* sparse: only two pages allocated */
	account(f->hot, &f->b);
	assert_int_equal(hot_used(f->hot), alloc_bytes(fa) + alloc_bytes(fb));
	if (f->tmpfs)
		assert_int_equal(hot_used(f->hot), 5 * PG);
	/* accounting again without change is a no-op */
	account(f->hot, &f->b);
	account(f->hot, &f->a);
	assert_int_equal(hot_used(f->hot), alloc_bytes(fa) + alloc_bytes(fb));

	/* shrinking: punch a hole, then truncate */
	assert_int_equal(fallocate(fa, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, PG, PG), 0);
	account(f->hot, &f->a);
	assert_int_equal(hot_used(f->hot), alloc_bytes(fa) + alloc_bytes(fb));
	if (f->tmpfs)
		assert_int_equal(hot_used(f->hot), 4 * PG);
	assert_int_equal(ftruncate(fa, 0), 0);
	account(f->hot, &f->a);
	assert_int_equal(f->a.hot_bytes, 0);
	assert_int_equal(hot_used(f->hot), alloc_bytes(fb));

	/* a closed hot file is not re-read */
	put_hot(f->hot, &f->a);
	account(f->hot, &f->a);
	assert_int_equal(hot_used(f->hot), alloc_bytes(fb));

	/* dropping an inode gives its bytes back */
	idx_inode_lock(&f->b);
	hot_drop(f->hot, &f->b);
	idx_inode_unlock(&f->b);
	assert_int_equal(f->b.hot_fd, -1);
	assert_int_equal(f->b.hot_bytes, 0);
	assert_int_equal(hot_used(f->hot), 0);
	assert_false(exists_in(f->dir, "000001000000002b"));
	f->b.hot_users = 0; /* hot_drop closed the fd under its users */
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
	    T(test_new_creates_dir_0700),
	    T(test_adopts_existing_dir_and_fixes_mode),
	    T(test_unmarked_dir_with_hot_names_untouched),
	    T(test_root_refused),
	    T(test_made_removed_given_kept),
	    T(test_refuses_foreign_files),
	    T(test_removes_stale_hot_files),
	    T(test_user_lock_file_refused_untouched),
	    T(test_user_marker_refused_untouched),
	    T(test_marker_names_filesystem),
	    T(test_older_marker_adopted_when_known),
	    T(test_refuses_other_owner),
	    T(test_second_instance_refused),
	    T(test_refused_instance_leaves_lock_alone),
	    T(test_fd_get_put),
	    T(test_cold_file_leaves_no_hot_file),
	    T(test_drop_ignores_non_regular),
	    T(test_empty_file_leaves_no_hot_file),
	    T(test_reserve_arithmetic),
	    T(test_reserve_counts_used),
	    T(test_overwrite_near_limit_needs_no_room),
	    T(test_account_tracks_blocks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
