/*
 * test_index — the in-memory namespace: inode numbers (only grow), internal
 * and kernel reference counts and the release hook (exactly once, only when
 * nlink, nlookup and refs are all 0), POSIX errors of create/lookup/unlink/
 * rmdir/link/rename (flags included), directory nlink counts, readdir cookies
 * (resumable while entries come and go, 100k entries), xattrs and chunk maps.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "index/index.h"

#include <errno.h>
#include <linux/fs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <time.h>

#define FMODE	(S_IFREG | 0644)
#define DMODE	(S_IFDIR | 0755)
#define CHUNK	(4ULL << 20)
#define BIG_DIR 100000

struct fx {
	struct index *idx;
	uint32_t *rel; /* release count per inode number */
	uint64_t relcap;
	uint64_t nrel;
	int hook_saw_locked; /* the inode's lock was held when the hook ran */
};

static void on_release(void *arg, struct inode *in)
{
	struct fx *f = arg;

	if (in->ino >= f->relcap) {
		uint64_t ncap = f->relcap ? f->relcap : 1024;
		while (ncap <= in->ino)
			ncap *= 2;
		f->rel = realloc(f->rel, ncap * sizeof(*f->rel));
		if (!f->rel)
			abort();
		memset(f->rel + f->relcap, 0, (ncap - f->relcap) * sizeof(*f->rel));
		f->relcap = ncap;
	}
	f->rel[in->ino]++;
	f->nrel++;
	/* the hook runs without locks held */
	if (idx_inode_trylock(in) != 0)
		f->hook_saw_locked = 1;
	else
		idx_inode_unlock(in);
}

static uint32_t released(struct fx *f, uint64_t ino)
{
	return ino < f->relcap ? f->rel[ino] : 0;
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	assert_int_equal(idx_new(CHUNK, &f->idx), 0);
	idx_set_release_hook(f->idx, on_release, f);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	if (f->idx)
		idx_free(f->idx);
	free(f->rel);
	free(f);
	return 0;
}

/* Create and drop both references the create took: the name alone holds it. */
static uint64_t mk(struct fx *f, uint64_t parent, const char *name, mode_t mode)
{
	struct idx_new_node nn = {.mode = mode, .uid = 1000, .gid = 1000};
	struct inode *in = NULL;
	uint64_t ino;
	int r = idx_create(f->idx, parent, name, &nn, &in);

	if (r != 0)
		print_error("idx_create(%llu, \"%s\") = %d\n", (unsigned long long)parent, name, r);
	assert_int_equal(r, 0);
	assert_non_null(in);
	ino = in->ino;
	idx_put(f->idx, in);
	idx_forget(f->idx, ino, 1);
	return ino;
}

static int try_mk(struct fx *f, uint64_t parent, const char *name, mode_t mode)
{
	struct idx_new_node nn = {.mode = mode};
	struct inode *in = NULL;
	int r = idx_create(f->idx, parent, name, &nn, &in);

	if (r == 0) {
		uint64_t ino = in->ino;
		idx_put(f->idx, in);
		idx_forget(f->idx, ino, 1);
	}
	return r;
}

/* ino of parent/name (> 0) or -errno; leaves no reference behind. */
static int64_t lk(struct fx *f, uint64_t parent, const char *name)
{
	struct inode *in = NULL;
	int r = idx_lookup(f->idx, parent, name, 0, &in);
	int64_t ino;

	if (r < 0)
		return r;
	ino = (int64_t)in->ino;
	idx_put(f->idx, in);
	return ino;
}

static uint32_t nlink_of(struct fx *f, uint64_t ino)
{
	struct inode *in = idx_get(f->idx, ino);
	uint32_t n;

	assert_non_null(in);
	idx_inode_lock(in);
	n = in->nlink;
	idx_inode_unlock(in);
	idx_put(f->idx, in);
	return n;
}

static int alive(struct fx *f, uint64_t ino)
{
	struct inode *in = idx_get(f->idx, ino);
	if (!in)
		return 0;
	idx_put(f->idx, in);
	return 1;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* CPU time: immune to a loaded machine (tests run in parallel with builds). */
static double cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- inode table and references ---- */

static void test_root(void **state)
{
	struct fx *f = *state;
	struct inode *r = idx_get(f->idx, IDX_ROOT_INO);
	struct stat st;

	assert_non_null(r);
	assert_true(S_ISDIR(r->mode));
	idx_stat(f->idx, r, &st);
	assert_int_equal(st.st_ino, IDX_ROOT_INO);
	assert_int_equal(st.st_nlink, 2);
	assert_true(S_ISDIR(st.st_mode));
	idx_put(f->idx, r);
	assert_int_equal(lk(f, IDX_ROOT_INO, "."), IDX_ROOT_INO);
	assert_int_equal(lk(f, IDX_ROOT_INO, ".."), IDX_ROOT_INO);
	assert_int_equal(idx_chunk_size(f->idx), CHUNK);
	assert_null(idx_get(f->idx, 0));
	assert_null(idx_get(f->idx, 12345));
	{
		uint64_t a = idx_tick(f->idx), b = idx_tick(f->idx);
		assert_true(b > a);
	}
	/* the root survives every forget */
	idx_forget(f->idx, IDX_ROOT_INO, 1000);
	assert_true(alive(f, IDX_ROOT_INO));
	assert_int_equal(f->nrel, 0);
}

static void test_inode_numbers_only_grow(void **state)
{
	struct fx *f = *state;
	uint64_t prev = IDX_ROOT_INO, first;

	first = mk(f, IDX_ROOT_INO, "x", FMODE);
	assert_true(first > IDX_ROOT_INO);
	prev = first;
	assert_int_equal(idx_unlink(f->idx, IDX_ROOT_INO, "x"), 0);
	assert_int_equal(released(f, first), 1);
	assert_false(alive(f, first));
	for (int i = 0; i < 200; i++) {
		/* same name, same parent, destroyed right away: still a new number */
		uint64_t ino = mk(f, IDX_ROOT_INO, "x", (i & 1) ? DMODE : FMODE);
		assert_true(ino > prev);
		prev = ino;
		if (i & 1)
			assert_int_equal(idx_rmdir(f->idx, IDX_ROOT_INO, "x"), 0);
		else
			assert_int_equal(idx_unlink(f->idx, IDX_ROOT_INO, "x"), 0);
		assert_int_equal(released(f, ino), 1);
		assert_false(alive(f, ino));
	}
	assert_false(alive(f, first));
}

static void test_refs_keep_unlinked_inode(void **state)
{
	struct fx *f = *state;
	struct idx_new_node nn = {.mode = FMODE};
	struct inode *in, *g1, *g2;
	uint64_t ino;

	assert_int_equal(idx_create(f->idx, IDX_ROOT_INO, "f", &nn, &in), 0);
	ino = in->ino;
	assert_int_equal(in->refs, 1);
	assert_int_equal(in->nlookup, 1);
	assert_int_equal(in->nlink, 1);
	g1 = idx_get(f->idx, ino);
	g2 = idx_get(f->idx, ino);
	assert_ptr_equal(g1, in);
	assert_ptr_equal(g2, in);
	assert_int_equal(in->refs, 3);

	assert_int_equal(idx_unlink(f->idx, IDX_ROOT_INO, "f"), 0);
	assert_int_equal(lk(f, IDX_ROOT_INO, "f"), -ENOENT);
	assert_int_equal(in->nlink, 0);
	/* unlinked but referenced: alive and reachable by number */
	assert_true(alive(f, ino));
	assert_int_equal(released(f, ino), 0);

	idx_forget(f->idx, ino, 1); /* kernel ref gone, 3 internal refs left */
	assert_int_equal(released(f, ino), 0);
	idx_put(f->idx, g1);
	idx_put(f->idx, g2);
	assert_int_equal(released(f, ino), 0);
	assert_true(alive(f, ino));
	idx_put(f->idx, in); /* last reference */
	assert_int_equal(released(f, ino), 1);
	assert_false(alive(f, ino));
	assert_int_equal(f->nrel, 1);
	assert_false(f->hook_saw_locked);
}

static void test_forget_is_last(void **state)
{
	struct fx *f = *state;
	struct idx_new_node nn = {.mode = FMODE};
	struct inode *in, *l;
	uint64_t ino;

	assert_int_equal(idx_create(f->idx, IDX_ROOT_INO, "f", &nn, &in), 0);
	ino = in->ino;
	idx_put(f->idx, in);
	/* two more kernel lookups: nlookup 3 */
	assert_int_equal(idx_lookup(f->idx, IDX_ROOT_INO, "f", 1, &l), 0);
	idx_put(f->idx, l);
	assert_int_equal(idx_lookup(f->idx, IDX_ROOT_INO, "f", 1, &l), 0);
	assert_int_equal(l->nlookup, 3);
	idx_put(f->idx, l);
	/* kernel_ref = 0 does not count */
	assert_int_equal(idx_lookup(f->idx, IDX_ROOT_INO, "f", 0, &l), 0);
	assert_int_equal(l->nlookup, 3);
	idx_put(f->idx, l);

	assert_int_equal(idx_unlink(f->idx, IDX_ROOT_INO, "f"), 0);
	assert_int_equal(released(f, ino), 0);
	idx_forget(f->idx, ino, 2);
	assert_int_equal(released(f, ino), 0);
	assert_true(alive(f, ino));
	idx_forget(f->idx, ino, 1);
	assert_int_equal(released(f, ino), 1);
	assert_false(alive(f, ino));
	/* a late forget for a dead number is harmless */
	idx_forget(f->idx, ino, 1);
	assert_int_equal(released(f, ino), 1);
	assert_int_equal(f->nrel, 1);
}

static void test_forget_more_than_looked_up(void **state)
{
	struct fx *f = *state;
	struct idx_new_node nn = {.mode = FMODE};
	struct inode *in;
	uint64_t ino;

	assert_int_equal(idx_create(f->idx, IDX_ROOT_INO, "f", &nn, &in), 0);
	ino = in->ino;
	idx_forget(f->idx, ino, 99); /* clamps at 0; the name and the ref keep it */
	assert_int_equal(in->nlookup, 0);
	assert_true(alive(f, ino));
	idx_put(f->idx, in);
	assert_true(alive(f, ino)); /* the name still holds it */
	assert_int_equal(released(f, ino), 0);
	assert_int_equal(idx_unlink(f->idx, IDX_ROOT_INO, "f"), 0);
	assert_int_equal(released(f, ino), 1);
}

static int kref_cb(void *arg, const char *name, struct inode *child, uint64_t cookie)
{
	if (strcmp(name, "f") == 0)
		idx_kernel_ref_locked(child);
	return 0;
}

static void test_readdirplus_kernel_ref(void **state)
{
	struct fx *f = *state;
	uint64_t ino = mk(f, IDX_ROOT_INO, "f", FMODE);

	assert_int_equal(idx_readdir(f->idx, IDX_ROOT_INO, 0, kref_cb, NULL), 0);
	assert_int_equal(idx_unlink(f->idx, IDX_ROOT_INO, "f"), 0);
	assert_int_equal(released(f, ino), 0); /* the readdirplus lookup holds it */
	idx_forget(f->idx, ino, 1);
	assert_int_equal(released(f, ino), 1);
}

static void test_free_releases_rest_once(void **state)
{
	struct fx *f = *state;
	uint64_t a = mk(f, IDX_ROOT_INO, "a", FMODE);
	uint64_t d = mk(f, IDX_ROOT_INO, "d", DMODE);
	uint64_t b = mk(f, d, "b", FMODE);
	uint64_t gone = mk(f, d, "gone", FMODE);
	struct inode *held;

	assert_int_equal(idx_unlink(f->idx, d, "gone"), 0);
	assert_int_equal(released(f, gone), 1);
	/* an unlinked file still referenced at shutdown */
	held = idx_get(f->idx, b);
	assert_int_equal(idx_unlink(f->idx, d, "b"), 0);
	assert_int_equal(released(f, b), 0);
	(void)held; /* deliberately never put: idx_free must still release it */

	idx_free(f->idx);
	f->idx = NULL;
	assert_int_equal(released(f, IDX_ROOT_INO), 1);
	assert_int_equal(released(f, a), 1);
	assert_int_equal(released(f, d), 1);
	assert_int_equal(released(f, b), 1);
	assert_int_equal(released(f, gone), 1); /* not a second time */
	assert_int_equal(f->nrel, 5);
}

/* ---- create / lookup ---- */

static void test_create_errors(void **state)
{
	struct fx *f = *state;
	char name[300];
	uint64_t file = mk(f, IDX_ROOT_INO, "file", FMODE);
	uint64_t dir = mk(f, IDX_ROOT_INO, "dir", DMODE);

	assert_int_equal(try_mk(f, IDX_ROOT_INO, "file", FMODE), -EEXIST);
	assert_int_equal(try_mk(f, IDX_ROOT_INO, "file", DMODE), -EEXIST);
	assert_int_equal(try_mk(f, IDX_ROOT_INO, "dir", FMODE), -EEXIST);
	assert_int_equal(try_mk(f, IDX_ROOT_INO, ".", FMODE), -EEXIST);
	assert_int_equal(try_mk(f, IDX_ROOT_INO, "..", DMODE), -EEXIST);
	assert_int_equal(try_mk(f, IDX_ROOT_INO, "", FMODE), -ENOENT);
	assert_int_equal(try_mk(f, file, "x", FMODE), -ENOTDIR);
	assert_int_equal(try_mk(f, 999999, "x", FMODE), -ENOENT);

	memset(name, 'n', 255);
	name[255] = '\0';
	assert_int_equal(try_mk(f, dir, name, FMODE), 0);
	name[255] = 'n';
	name[256] = '\0';
	assert_int_equal(try_mk(f, dir, name, FMODE), -ENAMETOOLONG);

	/* same name in different directories is fine */
	assert_int_equal(try_mk(f, dir, "file", FMODE), 0);
	assert_true(lk(f, dir, "file") != lk(f, IDX_ROOT_INO, "file"));

	/* a removed directory takes no new entries */
	{
		struct inode *held;
		uint64_t gone = mk(f, IDX_ROOT_INO, "gone", DMODE);
		held = idx_get(f->idx, gone);
		assert_int_equal(idx_rmdir(f->idx, IDX_ROOT_INO, "gone"), 0);
		assert_int_equal(try_mk(f, gone, "x", FMODE), -ENOENT);
		idx_put(f->idx, held);
		assert_int_equal(released(f, gone), 1);
	}
}

static void test_create_attrs(void **state)
{
	struct fx *f = *state;
	struct idx_new_node nn = {
	    .mode = S_IFLNK | 0777, .uid = 42, .gid = 43, .symlink = "../target"};
	struct idx_new_node fifo = {.mode = S_IFIFO | 0600};
	struct inode *in;
	struct stat st;

	assert_int_equal(idx_create(f->idx, IDX_ROOT_INO, "ln", &nn, &in), 0);
	assert_string_equal(idx_symlink(in), "../target");
	idx_stat(f->idx, in, &st);
	assert_true(S_ISLNK(st.st_mode));
	assert_int_equal(st.st_size, strlen("../target"));
	assert_int_equal(st.st_uid, 42);
	assert_int_equal(st.st_gid, 43);
	assert_int_equal(st.st_nlink, 1);
	assert_int_equal(in->hot_fd, -1);
	idx_put(f->idx, in);
	idx_forget(f->idx, st.st_ino, 1);

	assert_int_equal(idx_create(f->idx, IDX_ROOT_INO, "fifo", &fifo, &in), 0);
	idx_stat(f->idx, in, &st);
	assert_true(S_ISFIFO(st.st_mode));
	idx_put(f->idx, in);
	idx_forget(f->idx, st.st_ino, 1);
	assert_int_equal(nlink_of(f, IDX_ROOT_INO), 2); /* no subdirectories */
}

/* What only one file type has shares one word of the inode: each type
 * reads back its own (and only its own) value. */
/* '..' of directory dir is parent. */
static void assert_dotdot(struct index *idx, uint64_t dir, uint64_t parent)
{
	struct inode *up;

	assert_int_equal(idx_lookup(idx, dir, "..", 0, &up), 0);
	assert_int_equal(up->ino, parent);
	idx_put(idx, up);
}

static void test_type_fields_do_not_mix(void **state)
{
	struct fx *f = *state;
	struct idx_new_node dev = {.mode = S_IFCHR | 0600, .rdev = 0x0801},
			    dir = {.mode = S_IFDIR | 0755, .rdev = 0x0801},
			    reg = {.mode = S_IFREG | 0644, .rdev = 0x0801, .symlink = "x"},
			    lnk = {.mode = S_IFLNK | 0777, .rdev = 0x0801, .symlink = "t"};
	struct inode *d, *c, *r, *l;
	struct stat st;

	assert_int_equal(idx_create(f->idx, IDX_ROOT_INO, "dev", &dev, &c), 0);
	assert_int_equal(idx_create(f->idx, IDX_ROOT_INO, "dir", &dir, &d), 0);
	assert_int_equal(idx_create(f->idx, d->ino, "reg", &reg, &r), 0);
	assert_int_equal(idx_create(f->idx, d->ino, "lnk", &lnk, &l), 0);
	idx_stat(f->idx, c, &st);
	assert_int_equal(st.st_rdev, 0x0801);
	assert_null(idx_symlink(c));
	idx_stat(f->idx, d, &st);
	assert_int_equal(st.st_rdev, 0);
	assert_dotdot(f->idx, d->ino, IDX_ROOT_INO);
	assert_null(idx_symlink(d));
	assert_non_null(idx_dir(d));
	assert_null(idx_dir(c));
	idx_stat(f->idx, r, &st);
	assert_int_equal(st.st_rdev, 0);
	assert_int_equal(st.st_size, 0);
	assert_null(idx_symlink(r));
	assert_null(idx_dir(r));
	assert_null(idx_dir(l));
	/* a chunk map only for a regular file (the pointer shares its word) */
	assert_int_equal(idx_chunks_reserve(d, 1), -EINVAL);
	assert_int_equal(idx_chunks_reserve(l, 3), -EINVAL);
	assert_int_equal(idx_chunks_reserve(r, 3), 0);
	idx_stat(f->idx, l, &st);
	assert_int_equal(st.st_rdev, 0);
	assert_string_equal(idx_symlink(l), "t");
	assert_int_equal(idx_rdev(l), 0);
	/* '..' of the directory is still its parent after its entries came */
	assert_dotdot(f->idx, d->ino, IDX_ROOT_INO);
	assert_string_equal(idx_symlink(l), "t");
	idx_put(f->idx, c);
	idx_put(f->idx, d);
	idx_put(f->idx, r);
	idx_put(f->idx, l);
}

static void test_lookup(void **state)
{
	struct fx *f = *state;
	uint64_t d = mk(f, IDX_ROOT_INO, "d", DMODE);
	uint64_t e = mk(f, d, "e", DMODE);
	uint64_t file = mk(f, e, "file", FMODE);

	assert_int_equal(lk(f, IDX_ROOT_INO, "d"), d);
	assert_int_equal(lk(f, d, "e"), e);
	assert_int_equal(lk(f, e, "file"), file);
	assert_int_equal(lk(f, e, ".."), d);
	assert_int_equal(lk(f, d, ".."), IDX_ROOT_INO);
	assert_int_equal(lk(f, e, "."), e);
	assert_int_equal(lk(f, e, "nope"), -ENOENT);
	assert_int_equal(lk(f, IDX_ROOT_INO, "e"), -ENOENT);
	assert_int_equal(lk(f, file, "x"), -ENOTDIR);
	assert_int_equal(lk(f, 888888, "x"), -ENOENT);
	/* lookups left no references: removing everything releases everything */
	assert_int_equal(idx_unlink(f->idx, e, "file"), 0);
	assert_int_equal(idx_rmdir(f->idx, d, "e"), 0);
	assert_int_equal(idx_rmdir(f->idx, IDX_ROOT_INO, "d"), 0);
	assert_int_equal(released(f, file), 1);
	assert_int_equal(released(f, e), 1);
	assert_int_equal(released(f, d), 1);
}

/* ---- unlink / rmdir / nlink ---- */

static void test_unlink_rmdir_errors(void **state)
{
	struct fx *f = *state;
	uint64_t d = mk(f, IDX_ROOT_INO, "d", DMODE);
	uint64_t file = mk(f, d, "file", FMODE);

	assert_int_equal(idx_unlink(f->idx, IDX_ROOT_INO, "d"), -EISDIR);
	assert_int_equal(idx_rmdir(f->idx, d, "file"), -ENOTDIR);
	assert_int_equal(idx_rmdir(f->idx, IDX_ROOT_INO, "d"), -ENOTEMPTY);
	assert_int_equal(idx_unlink(f->idx, d, "nope"), -ENOENT);
	assert_int_equal(idx_rmdir(f->idx, d, "nope"), -ENOENT);
	assert_int_equal(idx_rmdir(f->idx, d, "."), -EINVAL);
	assert_int_equal(idx_rmdir(f->idx, d, ".."), -ENOTEMPTY);
	assert_int_equal(idx_unlink(f->idx, file, "x"), -ENOTDIR);
	assert_int_equal(idx_unlink(f->idx, 777777, "x"), -ENOENT);
	/* nothing was removed by the failures */
	assert_int_equal(lk(f, d, "file"), file);
	assert_int_equal(lk(f, IDX_ROOT_INO, "d"), d);
	assert_int_equal(f->nrel, 0);

	assert_int_equal(idx_unlink(f->idx, d, "file"), 0);
	assert_int_equal(idx_unlink(f->idx, d, "file"), -ENOENT);
	assert_int_equal(idx_dir_entries(f->idx, d), 0);
	assert_int_equal(idx_rmdir(f->idx, IDX_ROOT_INO, "d"), 0);
	assert_int_equal(lk(f, IDX_ROOT_INO, "d"), -ENOENT);
	assert_int_equal(released(f, d), 1);
	assert_int_equal(released(f, file), 1);
}

static void test_dir_nlink(void **state)
{
	struct fx *f = *state;
	uint64_t a, b, c;
	struct stat st;
	struct inode *in;

	assert_int_equal(nlink_of(f, IDX_ROOT_INO), 2);
	a = mk(f, IDX_ROOT_INO, "a", DMODE);
	b = mk(f, IDX_ROOT_INO, "b", DMODE);
	mk(f, IDX_ROOT_INO, "file", FMODE);
	assert_int_equal(nlink_of(f, IDX_ROOT_INO), 4); /* 2 + two subdirs; files don't count */
	assert_int_equal(nlink_of(f, a), 2);
	c = mk(f, a, "c", DMODE);
	mk(f, a, "c2", DMODE);
	mk(f, a, "f", FMODE);
	assert_int_equal(nlink_of(f, a), 4);
	assert_int_equal(nlink_of(f, c), 2);
	in = idx_get(f->idx, a);
	idx_stat(f->idx, in, &st);
	assert_int_equal(st.st_nlink, 4);
	idx_put(f->idx, in);

	assert_int_equal(idx_rmdir(f->idx, a, "c2"), 0);
	assert_int_equal(nlink_of(f, a), 3);
	/* move c from a to b */
	assert_int_equal(idx_rename(f->idx, a, "c", b, "c", 0), 0);
	assert_int_equal(nlink_of(f, a), 2);
	assert_int_equal(nlink_of(f, b), 3);
	assert_int_equal(nlink_of(f, c), 2);
	assert_int_equal(lk(f, c, ".."), b);
	/* rename within the same directory changes no counts */
	assert_int_equal(idx_rename(f->idx, b, "c", b, "c3", 0), 0);
	assert_int_equal(nlink_of(f, b), 3);
	assert_int_equal(nlink_of(f, IDX_ROOT_INO), 4);
	assert_int_equal(idx_unlink(f->idx, a, "f"), 0);
	assert_int_equal(idx_rmdir(f->idx, IDX_ROOT_INO, "a"), 0);
	assert_int_equal(nlink_of(f, IDX_ROOT_INO), 3);
}

/* ---- link ---- */

static void test_link(void **state)
{
	struct fx *f = *state;
	uint64_t d = mk(f, IDX_ROOT_INO, "d", DMODE);
	uint64_t file = mk(f, IDX_ROOT_INO, "f", FMODE);
	struct inode *in;

	assert_int_equal(idx_link(f->idx, file, d, "g", &in), 0);
	assert_int_equal(in->ino, file);
	assert_int_equal(in->nlink, 2);
	idx_put(f->idx, in);
	idx_forget(f->idx, file, 1);
	assert_int_equal(lk(f, d, "g"), file);
	assert_int_equal(lk(f, IDX_ROOT_INO, "f"), file);
	assert_int_equal(nlink_of(f, d), 2); /* a linked file is no subdir */

	assert_int_equal(idx_link(f->idx, d, IDX_ROOT_INO, "dlink", &in), -EPERM);
	assert_int_equal(idx_link(f->idx, file, d, "g", &in), -EEXIST);
	assert_int_equal(idx_link(f->idx, file, IDX_ROOT_INO, "d", &in), -EEXIST);
	assert_int_equal(idx_link(f->idx, file, IDX_ROOT_INO, ".", &in), -EEXIST);
	assert_int_equal(idx_link(f->idx, 555555, d, "x", &in), -ENOENT);
	assert_int_equal(idx_link(f->idx, file, file, "x", &in), -ENOTDIR);
	assert_int_equal(idx_link(f->idx, file, 555555, "x", &in), -ENOENT);
	assert_int_equal(nlink_of(f, file), 2);

	assert_int_equal(idx_unlink(f->idx, IDX_ROOT_INO, "f"), 0);
	assert_int_equal(nlink_of(f, file), 1);
	assert_int_equal(released(f, file), 0);
	assert_int_equal(lk(f, d, "g"), file);
	assert_int_equal(idx_unlink(f->idx, d, "g"), 0);
	assert_int_equal(released(f, file), 1);
}

/* ---- rename ---- */

static void test_rename_basic(void **state)
{
	struct fx *f = *state;
	uint64_t d = mk(f, IDX_ROOT_INO, "d", DMODE);
	uint64_t a = mk(f, IDX_ROOT_INO, "a", FMODE);
	uint64_t b = mk(f, IDX_ROOT_INO, "b", FMODE);

	assert_int_equal(idx_rename(f->idx, IDX_ROOT_INO, "a", IDX_ROOT_INO, "a2", 0), 0);
	assert_int_equal(lk(f, IDX_ROOT_INO, "a"), -ENOENT);
	assert_int_equal(lk(f, IDX_ROOT_INO, "a2"), a);
	assert_int_equal(idx_rename(f->idx, IDX_ROOT_INO, "a2", d, "a3", 0), 0);
	assert_int_equal(lk(f, IDX_ROOT_INO, "a2"), -ENOENT);
	assert_int_equal(lk(f, d, "a3"), a);
	assert_int_equal(idx_dir_entries(f->idx, d), 1);
	assert_int_equal(nlink_of(f, a), 1);

	/* onto an existing file: the target is replaced and (unreferenced) released */
	assert_int_equal(idx_rename(f->idx, d, "a3", IDX_ROOT_INO, "b", 0), 0);
	assert_int_equal(lk(f, IDX_ROOT_INO, "b"), a);
	assert_int_equal(lk(f, d, "a3"), -ENOENT);
	assert_int_equal(released(f, b), 1);
	assert_false(alive(f, b));
	assert_int_equal(released(f, a), 0);
	assert_int_equal(nlink_of(f, a), 1);
	/* onto itself (same name) */
	assert_int_equal(idx_rename(f->idx, IDX_ROOT_INO, "b", IDX_ROOT_INO, "b", 0), 0);
	assert_int_equal(lk(f, IDX_ROOT_INO, "b"), a);
	assert_int_equal(nlink_of(f, a), 1);
}

static void test_rename_over_referenced(void **state)
{
	struct fx *f = *state;
	uint64_t a = mk(f, IDX_ROOT_INO, "a", FMODE);
	uint64_t b = mk(f, IDX_ROOT_INO, "b", FMODE);
	struct inode *open_b = idx_get(f->idx, b);

	assert_int_equal(idx_rename(f->idx, IDX_ROOT_INO, "a", IDX_ROOT_INO, "b", 0), 0);
	assert_int_equal(lk(f, IDX_ROOT_INO, "b"), a);
	assert_int_equal(open_b->nlink, 0);
	assert_int_equal(released(f, b), 0); /* still open */
	idx_put(f->idx, open_b);
	assert_int_equal(released(f, b), 1);
	assert_int_equal(released(f, a), 0);
}

static void test_rename_dir_over_empty_dir(void **state)
{
	struct fx *f = *state;
	uint64_t p = mk(f, IDX_ROOT_INO, "p", DMODE);
	uint64_t q = mk(f, IDX_ROOT_INO, "q", DMODE);
	uint64_t src = mk(f, p, "src", DMODE);
	uint64_t dst = mk(f, q, "dst", DMODE);
	uint64_t full = mk(f, q, "full", DMODE);

	mk(f, full, "x", FMODE);
	mk(f, src, "inner", FMODE);
	assert_int_equal(idx_rename(f->idx, p, "src", q, "full", 0), -ENOTEMPTY);
	assert_int_equal(idx_rename(f->idx, p, "src", q, "dst", 0), 0);
	assert_int_equal(released(f, dst), 1);
	assert_int_equal(lk(f, q, "dst"), src);
	assert_int_equal(lk(f, src, ".."), q);
	assert_true(lk(f, src, "inner") > 0);
	assert_int_equal(nlink_of(f, p), 2);
	assert_int_equal(nlink_of(f, q), 4); /* dst replaced by src, full */
	assert_int_equal(nlink_of(f, src), 2);
	assert_int_equal(released(f, full), 0);
}

static void test_rename_errors(void **state)
{
	struct fx *f = *state;
	uint64_t a = mk(f, IDX_ROOT_INO, "a", DMODE);
	uint64_t b = mk(f, a, "b", DMODE);
	uint64_t c = mk(f, b, "c", DMODE);
	uint64_t file = mk(f, IDX_ROOT_INO, "file", FMODE);
	uint64_t file2 = mk(f, IDX_ROOT_INO, "file2", FMODE);
	uint64_t empty = mk(f, IDX_ROOT_INO, "empty", DMODE);

	assert_int_equal(idx_rename(f->idx, IDX_ROOT_INO, "nope", IDX_ROOT_INO, "x", 0), -ENOENT);
	assert_int_equal(idx_rename(f->idx, IDX_ROOT_INO, "file", 444444, "x", 0), -ENOENT);
	assert_int_equal(idx_rename(f->idx, IDX_ROOT_INO, "file", file2, "x", 0), -ENOTDIR);
	assert_int_equal(
	    idx_rename(f->idx, IDX_ROOT_INO, "file", IDX_ROOT_INO, "file2", RENAME_NOREPLACE),
	    -EEXIST);
	assert_int_equal(idx_rename(f->idx, IDX_ROOT_INO, "file", IDX_ROOT_INO, "file2",
				    RENAME_NOREPLACE | RENAME_EXCHANGE),
			 -EINVAL);
	assert_int_equal(
	    idx_rename(f->idx, IDX_ROOT_INO, "file", IDX_ROOT_INO, "file2", RENAME_WHITEOUT),
	    -EINVAL);
	assert_int_equal(
	    idx_rename(f->idx, IDX_ROOT_INO, "file", IDX_ROOT_INO, "new", RENAME_EXCHANGE),
	    -ENOENT);
	/* directory onto a file, file onto a directory */
	assert_int_equal(idx_rename(f->idx, IDX_ROOT_INO, "empty", IDX_ROOT_INO, "file", 0),
			 -ENOTDIR);
	assert_int_equal(idx_rename(f->idx, IDX_ROOT_INO, "file", IDX_ROOT_INO, "empty", 0),
			 -EISDIR);
	/* directory onto a non-empty directory */
	assert_int_equal(idx_rename(f->idx, IDX_ROOT_INO, "empty", IDX_ROOT_INO, "a", 0),
			 -ENOTEMPTY);
	/* directory into its own subtree */
	assert_int_equal(idx_rename(f->idx, IDX_ROOT_INO, "a", a, "x", 0), -EINVAL);
	assert_int_equal(idx_rename(f->idx, IDX_ROOT_INO, "a", b, "x", 0), -EINVAL);
	assert_int_equal(idx_rename(f->idx, IDX_ROOT_INO, "a", c, "a", 0), -EINVAL);
	assert_int_equal(idx_rename(f->idx, a, "b", c, "b", 0), -EINVAL);
	/* NOREPLACE onto a free name works */
	assert_int_equal(
	    idx_rename(f->idx, IDX_ROOT_INO, "file2", IDX_ROOT_INO, "file3", RENAME_NOREPLACE), 0);

	/* every failure above changed nothing */
	assert_int_equal(lk(f, IDX_ROOT_INO, "file"), file);
	assert_int_equal(lk(f, IDX_ROOT_INO, "file3"), file2);
	assert_int_equal(lk(f, IDX_ROOT_INO, "empty"), empty);
	assert_int_equal(lk(f, IDX_ROOT_INO, "a"), a);
	assert_int_equal(lk(f, a, "b"), b);
	assert_int_equal(lk(f, b, "c"), c);
	assert_int_equal(lk(f, c, ".."), b);
	assert_int_equal(nlink_of(f, IDX_ROOT_INO), 4);
	assert_int_equal(nlink_of(f, a), 3);
	assert_int_equal(nlink_of(f, b), 3);
	assert_int_equal(nlink_of(f, c), 2);
	assert_int_equal(f->nrel, 0);
}

static void test_rename_exchange(void **state)
{
	struct fx *f = *state;
	uint64_t p = mk(f, IDX_ROOT_INO, "p", DMODE);
	uint64_t q = mk(f, IDX_ROOT_INO, "q", DMODE);
	uint64_t d = mk(f, p, "d", DMODE);    /* dir in p */
	uint64_t file = mk(f, q, "f", FMODE); /* file in q */
	uint64_t d2 = mk(f, q, "d2", DMODE);
	uint64_t sub = mk(f, d, "sub", DMODE);

	assert_int_equal(nlink_of(f, p), 3);
	assert_int_equal(nlink_of(f, q), 3);
	/* file <-> dir across parents */
	assert_int_equal(idx_rename(f->idx, p, "d", q, "f", RENAME_EXCHANGE), 0);
	assert_int_equal(lk(f, p, "d"), file);
	assert_int_equal(lk(f, q, "f"), d);
	assert_int_equal(lk(f, d, ".."), q);
	assert_int_equal(nlink_of(f, p), 2); /* lost its subdir */
	assert_int_equal(nlink_of(f, q), 4); /* d2 + d */
	assert_int_equal(nlink_of(f, d), 3);
	assert_int_equal(nlink_of(f, file), 1);
	assert_int_equal(f->nrel, 0);

	/* dir <-> dir across parents: counts unchanged, '..' swapped */
	assert_int_equal(idx_rename(f->idx, p, "d", q, "f", RENAME_EXCHANGE), 0); /* back */
	assert_int_equal(idx_rename(f->idx, p, "d", q, "d2", RENAME_EXCHANGE), 0);
	assert_int_equal(lk(f, p, "d"), d2);
	assert_int_equal(lk(f, q, "d2"), d);
	assert_int_equal(lk(f, d2, ".."), p);
	assert_int_equal(lk(f, d, ".."), q);
	assert_int_equal(nlink_of(f, p), 3);
	assert_int_equal(nlink_of(f, q), 3);

	/* a dir with its own descendant: EINVAL both ways */
	assert_int_equal(idx_rename(f->idx, q, "d2", d, "sub", RENAME_EXCHANGE), -EINVAL);
	assert_int_equal(idx_rename(f->idx, d, "sub", q, "d2", RENAME_EXCHANGE), -EINVAL);
	assert_int_equal(lk(f, d, "sub"), sub);
	assert_int_equal(lk(f, q, "d2"), d);

	/* same parent: names swap, counts stay */
	assert_int_equal(idx_rename(f->idx, q, "f", q, "d2", RENAME_EXCHANGE), 0);
	assert_int_equal(lk(f, q, "f"), d);
	assert_int_equal(lk(f, q, "d2"), file);
	assert_int_equal(nlink_of(f, q), 3);
	assert_int_equal(f->nrel, 0);
}

static void test_rename_hardlink_noop(void **state)
{
	struct fx *f = *state;
	uint64_t d = mk(f, IDX_ROOT_INO, "d", DMODE);
	uint64_t file = mk(f, IDX_ROOT_INO, "a", FMODE);
	struct inode *in;

	assert_int_equal(idx_link(f->idx, file, IDX_ROOT_INO, "b", &in), 0);
	idx_put(f->idx, in);
	idx_forget(f->idx, file, 1);
	assert_int_equal(idx_link(f->idx, file, d, "c", &in), 0);
	idx_put(f->idx, in);
	idx_forget(f->idx, file, 1);
	assert_int_equal(nlink_of(f, file), 3);

	/* POSIX: both names refer to the same file: do nothing, succeed */
	assert_int_equal(idx_rename(f->idx, IDX_ROOT_INO, "a", IDX_ROOT_INO, "b", 0), 0);
	assert_int_equal(lk(f, IDX_ROOT_INO, "a"), file);
	assert_int_equal(lk(f, IDX_ROOT_INO, "b"), file);
	assert_int_equal(idx_rename(f->idx, d, "c", IDX_ROOT_INO, "a", 0), 0);
	assert_int_equal(lk(f, d, "c"), file);
	assert_int_equal(lk(f, IDX_ROOT_INO, "a"), file);
	assert_int_equal(nlink_of(f, file), 3);
	assert_int_equal(idx_dir_entries(f->idx, IDX_ROOT_INO), 3);
	assert_int_equal(released(f, file), 0);
}

/*
 * BUG (index.c idx_rename): RENAME_NOREPLACE onto an existing name must fail
 * with EEXIST even when that name is a hard link to the source (rename(2):
 * "Return an error if newpath already exists"; Linux's do_renameat2 checks
 * NOREPLACE before vfs_rename's same-inode no-op). idx_rename tests
 * `dst == src` first and returns 0.
 */
static void test_rename_noreplace_onto_hardlink(void **state)
{
	struct fx *f = *state;
	uint64_t file = mk(f, IDX_ROOT_INO, "a", FMODE);
	struct inode *in;

	assert_int_equal(idx_link(f->idx, file, IDX_ROOT_INO, "b", &in), 0);
	idx_put(f->idx, in);
	idx_forget(f->idx, file, 1);
	assert_int_equal(idx_rename(f->idx, IDX_ROOT_INO, "a", IDX_ROOT_INO, "b", RENAME_NOREPLACE),
			 -EEXIST);
	assert_int_equal(lk(f, IDX_ROOT_INO, "a"), file);
	assert_int_equal(lk(f, IDX_ROOT_INO, "b"), file);
	assert_int_equal(nlink_of(f, file), 2);
}

/* ---- readdir ---- */

struct listing {
	int n;
	char names[16][32];
	uint64_t cookies[16];
	uint64_t inos[16];
	int stop_after; /* 0 = never */
};

static int list_cb(void *arg, const char *name, struct inode *child, uint64_t cookie)
{
	struct listing *l = arg;
	if (l->stop_after && l->n == l->stop_after)
		return 1;
	if (l->n < 16) {
		snprintf(l->names[l->n], sizeof(l->names[0]), "%s", name);
		l->cookies[l->n] = cookie;
		l->inos[l->n] = child->ino;
	}
	l->n++;
	return 0;
}

static void test_readdir_small(void **state)
{
	struct fx *f = *state;
	uint64_t d = mk(f, IDX_ROOT_INO, "d", DMODE);
	uint64_t x = mk(f, d, "x", FMODE);
	uint64_t y = mk(f, d, "y", DMODE);
	uint64_t z = mk(f, d, "z", FMODE);
	struct listing l = {0};

	assert_int_equal(idx_readdir(f->idx, d, 0, list_cb, &l), 0);
	assert_int_equal(l.n, 5);
	assert_string_equal(l.names[0], ".");
	assert_int_equal(l.cookies[0], 1);
	assert_int_equal(l.inos[0], d);
	assert_string_equal(l.names[1], "..");
	assert_int_equal(l.cookies[1], 2);
	assert_int_equal(l.inos[1], IDX_ROOT_INO);
	/* then creation order */
	assert_string_equal(l.names[2], "x");
	assert_string_equal(l.names[3], "y");
	assert_string_equal(l.names[4], "z");
	assert_int_equal(l.inos[2], x);
	assert_int_equal(l.inos[3], y);
	assert_int_equal(l.inos[4], z);
	assert_true(l.cookies[2] > 2 && l.cookies[3] > l.cookies[2] && l.cookies[4] > l.cookies[3]);

	/* resume after '.', after '..', after y */
	memset(&l, 0, sizeof(l));
	assert_int_equal(idx_readdir(f->idx, d, 1, list_cb, &l), 0);
	assert_int_equal(l.n, 4);
	assert_string_equal(l.names[0], "..");
	memset(&l, 0, sizeof(l));
	assert_int_equal(idx_readdir(f->idx, d, 2, list_cb, &l), 0);
	assert_int_equal(l.n, 3);
	assert_string_equal(l.names[0], "x");
	{
		uint64_t yc;
		memset(&l, 0, sizeof(l));
		assert_int_equal(idx_readdir(f->idx, d, 0, list_cb, &l), 0);
		yc = l.cookies[3];
		memset(&l, 0, sizeof(l));
		assert_int_equal(idx_readdir(f->idx, d, yc, list_cb, &l), 0);
		assert_int_equal(l.n, 1);
		assert_string_equal(l.names[0], "z");
		/* y removed: resuming at its cookie still works */
		assert_int_equal(idx_rmdir(f->idx, d, "y"), 0);
		memset(&l, 0, sizeof(l));
		assert_int_equal(idx_readdir(f->idx, d, yc, list_cb, &l), 0);
		assert_int_equal(l.n, 1);
		assert_string_equal(l.names[0], "z");
		/* past the end */
		memset(&l, 0, sizeof(l));
		assert_int_equal(idx_readdir(f->idx, d, yc + 1000, list_cb, &l), 0);
		assert_int_equal(l.n, 0);
	}
	/* the callback stops the walk */
	memset(&l, 0, sizeof(l));
	l.stop_after = 2;
	assert_int_equal(idx_readdir(f->idx, d, 0, list_cb, &l), 0);
	assert_int_equal(l.n, 2);
	/* a renamed-away entry disappears, a new one comes last */
	assert_int_equal(idx_rename(f->idx, d, "x", IDX_ROOT_INO, "x", 0), 0);
	mk(f, d, "w", FMODE);
	memset(&l, 0, sizeof(l));
	assert_int_equal(idx_readdir(f->idx, d, 2, list_cb, &l), 0);
	assert_int_equal(l.n, 2);
	assert_string_equal(l.names[0], "z");
	assert_string_equal(l.names[1], "w");

	/* errors */
	memset(&l, 0, sizeof(l));
	assert_int_equal(idx_readdir(f->idx, z, 0, list_cb, &l), -ENOTDIR);
	assert_int_equal(idx_readdir(f->idx, 333333, 0, list_cb, &l), -ENOENT);
	assert_int_equal(l.n, 0);
	/* root's '..' is root */
	memset(&l, 0, sizeof(l));
	assert_int_equal(idx_readdir(f->idx, IDX_ROOT_INO, 0, list_cb, &l), 0);
	assert_int_equal(l.inos[1], IDX_ROOT_INO);
}

struct batch {
	int n, max;
	uint64_t last; /* cookie of the last entry accepted */
	uint64_t prev_cookie;
	uint64_t bad_order; /* cookies not strictly increasing */
	uint64_t bad_name, bad_ino, dots;
	uint32_t *seen;	   /* per entry index */
	uint64_t *ino_of;  /* per entry index, expected inode */
	uint32_t *seen_in; /* batch number where seen (1-based) */
	uint32_t batchno;
	uint32_t nentries;
	uint32_t seen_new[1000]; /* entries created during the walk */
};

static int batch_cb(void *arg, const char *name, struct inode *child, uint64_t cookie)
{
	struct batch *b = arg;
	unsigned i;
	char tail;

	if (b->n == b->max)
		return 1; /* buffer full: this entry is not consumed */
	if (cookie <= b->prev_cookie)
		b->bad_order++;
	b->prev_cookie = cookie;
	b->last = cookie;
	b->n++;
	if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
		if (cookie != (name[1] ? 2u : 1u))
			b->bad_order++;
		b->dots++;
		return 0;
	}
	if (sscanf(name, "new%u%c", &i, &tail) == 1 && i < 1000) {
		b->seen_new[i]++;
		return 0;
	}
	if (sscanf(name, "e%u%c", &i, &tail) != 1 || i >= b->nentries) {
		b->bad_name++;
		return 0;
	}
	if (child->ino != b->ino_of[i])
		b->bad_ino++;
	b->seen[i]++;
	if (!b->seen_in[i])
		b->seen_in[i] = b->batchno;
	return 0;
}

/* One idx_readdir call of at most `max` entries resuming at b->last. */
static int next_batch(struct fx *f, uint64_t dir, struct batch *b)
{
	b->n = 0;
	b->batchno++;
	/* a walk that stops making progress must fail, not spin */
	if (b->batchno > 2 * (b->nentries / b->max) + 100)
		fail_msg("readdir still returning entries after %u batches", b->batchno);
	assert_int_equal(idx_readdir(f->idx, dir, b->last, batch_cb, b), 0);
	return b->n;
}

static struct batch *batch_new(uint32_t n)
{
	struct batch *b = calloc(1, sizeof(*b));
	assert_non_null(b);
	b->seen = calloc(n, sizeof(*b->seen));
	b->seen_in = calloc(n, sizeof(*b->seen_in));
	b->ino_of = calloc(n, sizeof(*b->ino_of));
	assert_non_null(b->seen);
	assert_non_null(b->seen_in);
	assert_non_null(b->ino_of);
	b->nentries = n;
	b->max = 100;
	return b;
}

static void batch_free(struct batch *b)
{
	free(b->seen);
	free(b->seen_in);
	free(b->ino_of);
	free(b);
}

static uint64_t fill_big_dir(struct fx *f, struct batch *b)
{
	uint64_t d = mk(f, IDX_ROOT_INO, "big", DMODE);
	char name[32];
	double t0 = now_s(), dt;

	for (uint32_t i = 0; i < b->nentries; i++) {
		snprintf(name, sizeof(name), "e%u", i);
		b->ino_of[i] = mk(f, d, name, FMODE);
	}
	for (uint32_t i = 0; i < b->nentries; i++) {
		snprintf(name, sizeof(name), "e%u", i);
		if (lk(f, d, name) != (int64_t)b->ino_of[i])
			fail_msg("lookup of %s did not find its inode", name);
	}
	dt = now_s() - t0;
	print_message("      %u creates + lookups: %.3f s\n", b->nentries, dt);
	assert_true(dt < 10.0); /* not a benchmark: catches quadratic behaviour */
	assert_int_equal(idx_dir_entries(f->idx, d), b->nentries);
	return d;
}

static void test_readdir_100k(void **state)
{
	struct fx *f = *state;
	struct batch *b = batch_new(BIG_DIR);
	uint64_t d = fill_big_dir(f, b), calls = 0, missing = 0, dup = 0;
	double t0 = now_s();

	while (next_batch(f, d, b) > 0) {
		calls++;
		if (b->batchno == 1)
			assert_int_equal(b->dots, 2);
	}
	print_message("      readdir of %u entries in %llu calls: %.3f s\n", BIG_DIR,
		      (unsigned long long)calls, now_s() - t0);
	for (uint32_t i = 0; i < BIG_DIR; i++) {
		missing += b->seen[i] == 0;
		dup += b->seen[i] > 1;
	}
	assert_int_equal(b->bad_order, 0);
	assert_int_equal(b->bad_name, 0);
	assert_int_equal(b->bad_ino, 0);
	assert_int_equal(b->dots, 2);
	assert_int_equal(missing, 0);
	assert_int_equal(dup, 0);
	assert_int_equal(calls, (BIG_DIR + 2 + 99) / 100);
	batch_free(b);
}

static uint64_t rnd_state = 88172645463325252ULL;

static uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

/*
 * Readdir in batches of 100 while deleting entries between batches, in a
 * shuffled order so deletions land both behind and ahead of the cursor.
 * `victims` lists the entries to delete; `per_batch` of them go each time.
 * Entries created meanwhile (`grow`) may or may not be seen, but never twice.
 */
static void readdir_while_deleting(struct fx *f, uint32_t *victims, uint32_t nvictims,
				   uint32_t per_batch, int grow)
{
	struct batch *b = batch_new(BIG_DIR);
	uint64_t d = fill_big_dir(f, b);
	uint32_t *deleted_in = calloc(BIG_DIR, sizeof(*deleted_in)), vpos = 0, added = 0;
	uint64_t missing = 0, dup = 0, ghost = 0;
	char name[32];

	assert_non_null(deleted_in);
	/* Fisher-Yates */
	for (uint32_t i = nvictims - 1; i > 0; i--) {
		uint32_t j = rnd() % (i + 1), t = victims[i];
		victims[i] = victims[j];
		victims[j] = t;
	}
	while (next_batch(f, d, b) > 0) {
		for (uint32_t k = 0; k < per_batch && vpos < nvictims; k++, vpos++) {
			uint32_t v = victims[vpos];
			snprintf(name, sizeof(name), "e%u", v);
			assert_int_equal(idx_unlink(f->idx, d, name), 0);
			deleted_in[v] = b->batchno;
		}
		if (grow && added < 1000) {
			snprintf(name, sizeof(name), "new%u", added++);
			mk(f, d, name, FMODE);
		}
	}
	for (uint32_t i = 0; i < BIG_DIR; i++) {
		dup += b->seen[i] > 1;
		if (!deleted_in[i])
			missing += b->seen[i] == 0;
		/* a deleted entry is seen, if at all, in a batch before its deletion */
		else if (b->seen[i] && b->seen_in[i] > deleted_in[i])
			ghost++;
	}
	print_message("      deleted %u of %u while reading in %u batches\n", vpos, BIG_DIR,
		      b->batchno);
	assert_int_equal(vpos, nvictims);
	assert_int_equal(b->bad_order, 0);
	assert_int_equal(b->bad_ino, 0);
	assert_int_equal(b->bad_name, 0);
	for (uint32_t i = 0; i < 1000; i++)
		dup += b->seen_new[i] > 1;
	assert_int_equal(b->dots, 2);
	assert_int_equal(dup, 0);
	assert_int_equal(missing, 0);
	assert_int_equal(ghost, 0);
	assert_int_equal(idx_dir_entries(f->idx, d), BIG_DIR - nvictims + added);
	free(deleted_in);
	batch_free(b);
}

static void test_readdir_delete_every_other(void **state)
{
	struct fx *f = *state;
	uint32_t n = BIG_DIR / 2, *v = malloc(n * sizeof(*v));

	assert_non_null(v);
	for (uint32_t i = 0; i < n; i++)
		v[i] = 2 * i + 1;
	readdir_while_deleting(f, v, n, 100, 0);
	free(v);
}

/* Three quarters deleted: the slot array gets compacted mid-walk. */
static void test_readdir_delete_most_compacts(void **state)
{
	struct fx *f = *state;
	uint32_t n = 0, *v = malloc(BIG_DIR * sizeof(*v));

	assert_non_null(v);
	for (uint32_t i = 0; i < BIG_DIR; i++)
		if (i % 4 != 0)
			v[n++] = i;
	readdir_while_deleting(f, v, n, 300, 1);
	free(v);
}

/*
 * `rm -rf` of a big directory: read a batch, unlink what was read, resume.
 * Every unlink removes the oldest live entry, so the slot array grows a run
 * of empty slots at its front. A linear-time implementation does 200k of
 * these in well under a second of CPU; allow 3 s.
 *
 * BUG (index.c dir_search/dir_remove): dir_remove finds the slot with
 * dir_search, whose binary search walks the run of NULL slots from every
 * probe that lands in it, so each unlink costs O(k log n) after k removals
 * from the front: quadratic overall (measured: 100k entries 2.1 s, 200k 7 s,
 * 400k ~28 s; 1M would take minutes, holding the index lock throughout).
 */
#define RMRF_ENTRIES 200000

static void test_rm_rf_order_is_linear(void **state)
{
	struct fx *f = *state;
	struct batch *b = batch_new(RMRF_ENTRIES);
	uint64_t d = mk(f, IDX_ROOT_INO, "big", DMODE), removed = 0, left = 0;
	char name[32];
	double t0, dt;

	for (uint32_t i = 0; i < RMRF_ENTRIES; i++) {
		snprintf(name, sizeof(name), "e%u", i);
		b->ino_of[i] = mk(f, d, name, FMODE);
	}
	t0 = cpu_s();
	while (next_batch(f, d, b) > 0) {
		for (uint32_t i = removed; i < RMRF_ENTRIES && b->seen[i]; i++, removed++) {
			snprintf(name, sizeof(name), "e%u", i);
			assert_int_equal(idx_unlink(f->idx, d, name), 0);
		}
		if (cpu_s() - t0 > 3.0) /* fail fast instead of waiting it out */
			fail_msg("only %llu of %u entries removed after 3 s of CPU",
				 (unsigned long long)removed, RMRF_ENTRIES);
	}
	dt = cpu_s() - t0;
	print_message("      readdir + unlink of %u entries in order: %.3f s CPU\n", RMRF_ENTRIES,
		      dt);
	for (uint32_t i = 0; i < RMRF_ENTRIES; i++)
		left += b->seen[i] != 1;
	assert_int_equal(left, 0);
	assert_int_equal(removed, RMRF_ENTRIES);
	assert_int_equal(idx_dir_entries(f->idx, d), 0);
	assert_int_equal(idx_rmdir(f->idx, IDX_ROOT_INO, "big"), 0);
	assert_int_equal(f->nrel, RMRF_ENTRIES + 1);
	batch_free(b);
	assert_true(dt < 3.0);
}

/* ---- xattrs ---- */

static void test_xattrs(void **state)
{
	struct fx *f = *state;
	struct idx_new_node nn = {.mode = FMODE};
	struct inode *in;
	char buf[128], big_name[300];
	char *big;

	assert_int_equal(idx_create(f->idx, IDX_ROOT_INO, "f", &nn, &in), 0);
	assert_int_equal(idx_xattr_list(in, NULL, 0), 0);
	assert_int_equal(idx_xattr_get(in, "user.a", buf, sizeof(buf)), -ENODATA);
	assert_int_equal(idx_xattr_get(in, "user.a", NULL, 0), -ENODATA);
	assert_int_equal(idx_xattr_remove(f->idx, in, "user.a"), -ENODATA);

	assert_int_equal(idx_xattr_set(f->idx, in, "user.a", "hello", 5, 0), 0);
	assert_int_equal(idx_xattr_get(in, "user.a", NULL, 0), 5);
	memset(buf, 0, sizeof(buf));
	assert_int_equal(idx_xattr_get(in, "user.a", buf, sizeof(buf)), 5);
	assert_memory_equal(buf, "hello", 5);
	assert_int_equal(idx_xattr_get(in, "user.a", buf, 4), -ERANGE);
	assert_int_equal(idx_xattr_get(in, "user.a", buf, 5), 5);

	/* XATTR_CREATE on an existing name fails and keeps the value */
	assert_int_equal(idx_xattr_set(f->idx, in, "user.a", "x", 1, XATTR_CREATE), -EEXIST);
	assert_int_equal(idx_xattr_get(in, "user.a", buf, sizeof(buf)), 5);
	/* XATTR_REPLACE on a missing name fails and creates nothing */
	assert_int_equal(idx_xattr_set(f->idx, in, "user.b", "x", 1, XATTR_REPLACE), -ENODATA);
	assert_int_equal(idx_xattr_get(in, "user.b", NULL, 0), -ENODATA);
	assert_int_equal(idx_xattr_set(f->idx, in, "user.a", "bye", 3, XATTR_REPLACE), 0);
	assert_int_equal(idx_xattr_get(in, "user.a", buf, sizeof(buf)), 3);
	assert_memory_equal(buf, "bye", 3);
	assert_int_equal(idx_xattr_set(f->idx, in, "user.b", "", 0, XATTR_CREATE), 0);
	assert_int_equal(idx_xattr_get(in, "user.b", NULL, 0), 0);
	assert_int_equal(idx_xattr_get(in, "user.b", buf, sizeof(buf)), 0);
	/* plain set overwrites */
	assert_int_equal(idx_xattr_set(f->idx, in, "user.b", "12", 2, 0), 0);
	assert_int_equal(idx_xattr_get(in, "user.b", buf, sizeof(buf)), 2);
	assert_memory_equal(buf, "12", 2);

	/* list: size query, too small, exact */
	assert_int_equal(idx_xattr_list(in, NULL, 0), 14); /* "user.a\0user.b\0" */
	assert_int_equal(idx_xattr_list(in, buf, 13), -ERANGE);
	memset(buf, 'z', sizeof(buf));
	assert_int_equal(idx_xattr_list(in, buf, 14), 14);
	assert_int_equal(buf[6], '\0');
	assert_int_equal(buf[13], '\0');
	assert_true((strcmp(buf, "user.a") == 0 && strcmp(buf + 7, "user.b") == 0) ||
		    (strcmp(buf, "user.b") == 0 && strcmp(buf + 7, "user.a") == 0));

	assert_int_equal(idx_xattr_remove(f->idx, in, "user.a"), 0);
	assert_int_equal(idx_xattr_remove(f->idx, in, "user.a"), -ENODATA);
	assert_int_equal(idx_xattr_get(in, "user.a", NULL, 0), -ENODATA);
	assert_int_equal(idx_xattr_list(in, buf, sizeof(buf)), 7);
	assert_string_equal(buf, "user.b");

	/* limits: names up to 255, values up to 64K */
	memset(big_name, 'n', sizeof(big_name));
	memcpy(big_name, "user.", 5);
	big_name[255] = '\0';
	assert_int_equal(idx_xattr_set(f->idx, in, big_name, "v", 1, 0), 0);
	big_name[255] = 'n';
	big_name[256] = '\0';
	assert_int_equal(idx_xattr_set(f->idx, in, big_name, "v", 1, 0), -ERANGE);
	big = calloc(1, 65537);
	assert_non_null(big);
	assert_int_equal(idx_xattr_set(f->idx, in, "user.big", big, 65536, 0), 0);
	assert_int_equal(idx_xattr_get(in, "user.big", NULL, 0), 65536);
	assert_int_equal(idx_xattr_set(f->idx, in, "user.big", big, 65537, 0), -E2BIG);
	assert_int_equal(idx_xattr_get(in, "user.big", NULL, 0), 65536);
	free(big);

	idx_put(f->idx, in);
	idx_forget(f->idx, in->ino, 1); /* alive: still named */
	/* the xattrs go with the inode (leak checkers see it) */
	assert_int_equal(idx_unlink(f->idx, IDX_ROOT_INO, "f"), 0);
	assert_int_equal(f->nrel, 1);
}

/* ---- chunk map ---- */

static void test_chunks_reserve(void **state)
{
	struct fx *f = *state;
	struct idx_new_node nn = {.mode = FMODE};
	struct inode *in;
	uint64_t n1, bad = 0;
	struct chunk *before;
	struct stat st;

	assert_int_equal(idx_create(f->idx, IDX_ROOT_INO, "f", &nn, &in), 0);
	assert_int_equal(in->nchunks, 0);
	idx_inode_lock(in);
	assert_int_equal(idx_chunks_reserve(in, 0), 0);
	assert_int_equal(in->nchunks, 0);
	/* one chunk: inside the inode's own allocation, zeroed */
	assert_int_equal(idx_chunks_reserve(in, 1), 0);
	assert_int_equal(in->nchunks, 1);
	assert_true((char *)in->chunks > (char *)in &&
		    (char *)in->chunks < (char *)in + sizeof(*in) + sizeof(struct chunk));
	assert_int_equal(in->chunks[0].state, CHUNK_ABSENT);
	in->chunks[0].state = CHUNK_COLD;
	in->chunks[0].loc.seg_id = 5;
	/* growing moves it out, contents kept */
	assert_int_equal(idx_chunks_reserve(in, 3), 0);
	assert_int_equal(in->chunks[0].state, CHUNK_COLD);
	assert_int_equal(in->chunks[0].loc.seg_id, 5);
	in->chunks[0].state = CHUNK_ABSENT;
	in->chunks[0].loc.seg_id = 0;
	assert_true(in->nchunks >= 3);
	assert_non_null(in->chunks);
	for (uint64_t c = 0; c < in->nchunks; c++) {
		assert_int_equal(in->chunks[c].state, CHUNK_ABSENT);
		assert_int_equal(in->chunks[c].loc.seg_id, 0);
		assert_int_equal(in->chunks[c].gen, 0);
	}
	in->chunks[1].state = CHUNK_HOT_DIRTY;
	in->chunks[1].gen = 7;
	in->chunks[2].state = CHUNK_COLD;
	in->chunks[2].loc.seg_id = 99;
	in->chunks[2].loc.len = 4096;
	n1 = in->nchunks;

	/* smaller or equal: nothing moves */
	before = in->chunks;
	assert_int_equal(idx_chunks_reserve(in, 2), 0);
	assert_int_equal(idx_chunks_reserve(in, n1), 0);
	assert_ptr_equal(in->chunks, before);
	assert_int_equal(in->nchunks, n1);

	/* grow: old entries kept, every new one zero (ABSENT) */
	assert_int_equal(idx_chunks_reserve(in, 1000), 0);
	assert_true(in->nchunks >= 1000);
	assert_int_equal(in->chunks[1].state, CHUNK_HOT_DIRTY);
	assert_int_equal(in->chunks[1].gen, 7);
	assert_int_equal(in->chunks[2].state, CHUNK_COLD);
	assert_int_equal(in->chunks[2].loc.seg_id, 99);
	for (uint64_t c = 3; c < in->nchunks; c++) {
		static const struct chunk zero;
		if (memcmp(&in->chunks[c], &zero, sizeof(zero)) != 0)
			bad++;
	}
	assert_int_equal(bad, 0);
	/* one more than a power of two */
	assert_int_equal(idx_chunks_reserve(in, 1025), 0);
	assert_true(in->nchunks >= 1025);
	assert_int_equal(in->chunks[1024].state, CHUNK_ABSENT);
	in->hot_bytes = 8192;
	idx_inode_unlock(in);

	/* st_blocks: hot bytes plus cold-only bytes */
	idx_stat(f->idx, in, &st);
	assert_int_equal(st.st_blocks, (8192 + 4096) / 512);
	assert_true(S_ISREG(st.st_mode));
	idx_put(f->idx, in);
}

static int count_cb(void *arg, struct inode *in)
{
	(*(uint64_t *)arg)++;
	return 0;
}

static int stop_cb(void *arg, struct inode *in)
{
	(*(uint64_t *)arg)++;
	return 7;
}

static void test_counts_and_for_each(void **state)
{
	struct fx *f = *state;
	uint64_t inodes, files, seen = 0;
	uint64_t d = mk(f, IDX_ROOT_INO, "d", DMODE);

	mk(f, d, "a", FMODE);
	mk(f, d, "b", FMODE);
	mk(f, IDX_ROOT_INO, "c", FMODE);
	idx_counts(f->idx, &inodes, &files);
	assert_int_equal(inodes, 5);
	assert_int_equal(files, 3);
	assert_int_equal(idx_for_each(f->idx, count_cb, &seen), 0);
	assert_int_equal(seen, 5);
	seen = 0;
	assert_int_equal(idx_for_each(f->idx, stop_cb, &seen), 7);
	assert_int_equal(seen, 1);
	assert_int_equal(idx_unlink(f->idx, d, "a"), 0);
	idx_counts(f->idx, &inodes, &files);
	assert_int_equal(inodes, 4);
	assert_int_equal(files, 2);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_root),
	    T(test_inode_numbers_only_grow),
	    T(test_refs_keep_unlinked_inode),
	    T(test_forget_is_last),
	    T(test_forget_more_than_looked_up),
	    T(test_readdirplus_kernel_ref),
	    T(test_free_releases_rest_once),
	    T(test_create_errors),
	    T(test_create_attrs),
	    T(test_type_fields_do_not_mix),
	    T(test_lookup),
	    T(test_unlink_rmdir_errors),
	    T(test_dir_nlink),
	    T(test_link),
	    T(test_rename_basic),
	    T(test_rename_over_referenced),
	    T(test_rename_dir_over_empty_dir),
	    T(test_rename_errors),
	    T(test_rename_exchange),
	    T(test_rename_hardlink_noop),
	    T(test_rename_noreplace_onto_hardlink),
	    T(test_readdir_small),
	    T(test_readdir_100k),
	    T(test_readdir_delete_every_other),
	    T(test_readdir_delete_most_compacts),
	    T(test_rm_rf_order_is_linear),
	    T(test_xattrs),
	    T(test_chunks_reserve),
	    T(test_counts_and_for_each),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
