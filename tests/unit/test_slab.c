/* common/slab: zeroed, distinct, aligned objects of every size class; the
 * blocks of a class go back to the kernel once its objects are freed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/slab.h"

#include <errno.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#define N 20000

static void test_objects_are_zeroed_distinct_and_aligned(void **state)
{
	struct slab *s;
	static uint8_t *v[N];
	(void)state;
	assert_int_equal(slab_new(&s), 0);
	for (int i = 0; i < N; i++) {
		size_t size = 1 + (size_t)(i % (SLAB_MAX + 64)); /* past SLAB_MAX too */
		v[i] = slab_alloc(s, size);
		assert_non_null(v[i]);
		assert_int_equal((uintptr_t)v[i] % 8, 0);
		for (size_t k = 0; k < size; k++)
			assert_int_equal(v[i][k], 0);
		memset(v[i], (int)(i & 0xff) | 1, size); /* overlapping objects would clash */
	}
	for (int i = 0; i < N; i++) {
		size_t size = 1 + (size_t)(i % (SLAB_MAX + 64));
		for (size_t k = 0; k < size; k++)
			assert_int_equal(v[i][k], (i & 0xff) | 1);
	}
	/* freed objects come back zeroed */
	for (int i = 0; i < N; i += 2)
		slab_free(s, v[i], 1 + (size_t)(i % (SLAB_MAX + 64)));
	for (int i = 0; i < N; i += 2) {
		size_t size = 1 + (size_t)(i % (SLAB_MAX + 64));
		v[i] = slab_alloc(s, size);
		for (size_t k = 0; k < size; k++)
			assert_int_equal(v[i][k], 0);
	}
	for (int i = 0; i < N; i++)
		slab_free(s, v[i], 1 + (size_t)(i % (SLAB_MAX + 64)));
	slab_destroy(s);
}

/* A million inodes deleted give their RAM back: at most one block per
 * class stays mapped. */
static void test_empty_blocks_go_back(void **state)
{
	struct slab *s;
	enum { M = 100000, SIZE = 184 };
	void **v = calloc(M, sizeof(*v));
	uint64_t full;
	(void)state;
	assert_non_null(v);
	assert_int_equal(slab_new(&s), 0);
	for (int i = 0; i < M; i++)
		assert_non_null(v[i] = slab_alloc(s, SIZE));
	full = slab_mapped(s);
	if (slab_pooled()) {
		/* no per-object header: within 2% of the objects' own bytes */
		assert_true(full >= (uint64_t)M * SIZE);
		assert_true(full <= (uint64_t)M * SIZE * 102 / 100);
	} else {
		assert_int_equal(full, 0); /* ASan build: every object is calloc'ed */
	}
	for (int i = 0; i < M; i++)
		slab_free(s, v[i], SIZE);
	assert_true(slab_mapped(s) <= 64 * 1024);
	/* and the class still works */
	assert_non_null(v[0] = slab_alloc(s, SIZE));
	slab_free(s, v[0], SIZE);
	slab_destroy(s);
	free(v);
}

static int count_maps(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	int n = 0, ch;
	assert_non_null(f);
	while ((ch = fgetc(f)) != EOF)
		n += ch == '\n';
	fclose(f);
	return n;
}

/* Blocks come in runs of one mapping each: 20M files' worth of blocks must
 * not reach vm.max_map_count (65,530), so 256 blocks may not add more than
 * a few dozen mappings (one each would add 256). */
static void test_blocks_share_mappings(void **state)
{
	struct slab *s;
	enum { SIZE = 512, PER_BLOCK = 65536 / SIZE - 1, BLOCKS = 256 };
	size_t m = (size_t)PER_BLOCK * BLOCKS;
	void **v = calloc(m, sizeof(*v));
	int before, after;
	(void)state;
	assert_non_null(v);
	assert_int_equal(slab_new(&s), 0);
	before = count_maps();
	for (size_t i = 0; i < m; i++)
		assert_non_null(v[i] = slab_alloc(s, SIZE));
	after = count_maps();
	if (slab_pooled()) {
		assert_true(slab_mapped(s) >= (uint64_t)BLOCKS * 65536);
		assert_true(after - before <= BLOCKS / 8);
	}
	for (size_t i = 0; i < m; i++)
		slab_free(s, v[i], SIZE);
	slab_destroy(s);
	free(v);
}

/* A table is zeroed, and its pages are the kernel's again once freed (not
 * kept in a malloc heap): mincore of a freed table's range fails ENOMEM. */
static void test_table_pages_go_back(void **state)
{
	(void)state;
	size_t bytes = 4u << 20; /* under fs/main.c's 8 MiB mmap threshold */
	long page = sysconf(_SC_PAGESIZE);
	unsigned char vec[1];
	uint64_t *t;
	/* as the daemon (fs/main.c): calloc would keep it in the heap */
	mallopt(M_MMAP_THRESHOLD, 8 << 20);
	mallopt(M_TRIM_THRESHOLD, 256 << 20);
	t = slab_table_alloc(bytes);
	assert_non_null(t);
	for (size_t i = 0; i < bytes / sizeof(*t); i += 4096)
		assert_int_equal(t[i], 0);
	t[bytes / sizeof(*t) - 1] = 42;
	slab_table_free(t, bytes);
	if (!slab_pooled())
		return; /* ASan: calloc/free, so ASan sees the table */
	errno = 0;
	assert_int_equal(mincore((void *)((uintptr_t)t & ~(uintptr_t)(page - 1)), (size_t)page, vec),
			 -1);
	assert_int_equal(errno, ENOMEM);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_objects_are_zeroed_distinct_and_aligned),
	    cmocka_unit_test(test_empty_blocks_go_back),
	    cmocka_unit_test(test_table_pages_go_back),
	    cmocka_unit_test(test_blocks_share_mappings),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
