/*
 * test_pressure — the elastic hot budget (tier/hot/pressure.c) against fake
 * /proc and cgroup files (SPW_PROC_ROOT): the first decision at start, the
 * budget rule (used + available - mem_reserve, clamped to hot_min..hot_size),
 * cgroup v1 limits (hierarchical too, inactive file cache not counted),
 * mem_reserve=0 and mem_pressure=off, and growth back after the pressure;
 * and pressure_probe, which the default mem_reserve is taken from: 5% of the
 * daemon's cgroup limit (v1, v1 hierarchical, v2 with its ancestors) or of
 * the node's RAM, in whole MiB, at most 1G; and what the thread gives back
 * of the daemon's idle memory (heap_give_back, seg_buf_trim): only after a
 * still period, never twice the same.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/clock.h"
#include "common/config.h"
#include "common/heap.h"
#include "tier/hot/hot.h"
#include "tier/hot/pressure.h"
#include "tier/segment/segment.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MiB (1ULL << 20)

struct fx {
	char root[64];
	char hotdir[96];
	struct spw_config cfg;
	struct hot *hot;
	struct pressure *p;
	int changes;
};

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static void put(struct fx *f, const char *rel, const char *fmt, ...)
{
	char path[256], tmp[270];
	va_list ap;
	FILE *fp;

	snprintf(path, sizeof(path), "%s/%s", f->root, rel);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fp = fopen(tmp, "w");
	assert_non_null(fp);
	va_start(ap, fmt);
	vfprintf(fp, fmt, ap);
	va_end(ap);
	assert_int_equal(fclose(fp), 0);
	assert_int_equal(rename(tmp, path), 0);
}

static void mkdirs(struct fx *f, const char *rel)
{
	char path[256], *p;
	snprintf(path, sizeof(path), "%s/%s", f->root, rel);
	for (p = path + strlen(f->root) + 1; (p = strchr(p, '/')); p++) {
		*p = '\0';
		mkdir(path, 0755);
		*p = '/';
	}
	mkdir(path, 0755);
}

static void avail(struct fx *f, uint64_t bytes)
{
	put(f, "proc/meminfo", "MemTotal: 16000000 kB\nMemAvailable: %llu kB\n",
	    (unsigned long long)(bytes >> 10));
}

static void cg_v1(struct fx *f, uint64_t limit, uint64_t usage, uint64_t inactive, uint64_t hier)
{
	put(f, "sys/fs/cgroup/memory/job/memory.limit_in_bytes", "%llu\n",
	    (unsigned long long)limit);
	put(f, "sys/fs/cgroup/memory/job/memory.usage_in_bytes", "%llu\n",
	    (unsigned long long)usage);
	put(f, "sys/fs/cgroup/memory/job/memory.stat",
	    "cache 0\nhierarchical_memory_limit %llu\ntotal_inactive_file %llu\n",
	    (unsigned long long)hier, (unsigned long long)inactive);
}

static void changed(void *arg, uint64_t old_budget, uint64_t new_budget)
{
	struct fx *f = arg;
	__atomic_add_fetch(&f->changes, 1, __ATOMIC_RELAXED);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	const char *why;

	assert_non_null(f);
	snprintf(f->root, sizeof(f->root), "/tmp/spw-pressure-XXXXXX");
	assert_non_null(mkdtemp(f->root));
	mkdirs(f, "proc/pressure");
	mkdirs(f, "proc/self");
	mkdirs(f, "sys/fs/cgroup/memory/job");
	put(f, "proc/self/cgroup", "5:memory:/job\n3:cpu:/\n0::/\n");
	put(f, "proc/pressure/memory", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
				       "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
	avail(f, 8ULL << 30);
	cg_v1(f, 9223372036854771712ULL, 0, 0, 9223372036854771712ULL);
	snprintf(f->hotdir, sizeof(f->hotdir), "%s/hot", f->root);
	f->cfg.hot_size = 256 * MiB;
	f->cfg.hot_min = 32 * MiB;
	f->cfg.mem_reserve = 100 * MiB;
	f->cfg.mem_pressure = 1;
	f->cfg.chunk_size = 1 * MiB;
	assert_int_equal(hot_new(f->hotdir, f->cfg.hot_size, 0, &f->hot, &why), 0);
	setenv("SPW_PROC_ROOT", f->root, 1);
	setenv("SPW_PRESSURE_HOLD_MS", "200", 1);
	setenv("SPW_PRESSURE_STEP_MS", "50", 1);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	pressure_free(f->p);
	hot_free(f->hot);
	nftw(f->root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	free(f);
	return 0;
}

static void start(struct fx *f)
{
	assert_int_equal(pressure_new(&f->cfg, f->hot, changed, f, &f->p), 0);
	assert_int_equal(pressure_start(f->p), 0);
}

static void test_no_pressure_full_budget(void **state)
{
	struct fx *f = *state;
	struct pressure_stats s;
	start(f);
	pressure_get(f->p, &s);
	assert_int_equal(s.enabled, 1);
	assert_int_equal(s.cgroup, 1);
	assert_true(s.cg_limit == 0); /* v1 "unlimited" */
	assert_true(s.mem_available == 8ULL << 30);
	assert_true(s.budget == 256 * MiB);
	assert_true(hot_limit(f->hot) == 256 * MiB);
	assert_int_equal(s.shrinks, 0);
}

/* the first decision happens in pressure_start, before anything is written */
static void test_rule_at_start(void **state)
{
	struct fx *f = *state;
	struct pressure_stats s;
	avail(f, 180 * MiB); /* used 0 + 180M - 100M reserve = 80M */
	start(f);
	pressure_get(f->p, &s);
	assert_true(s.budget == 80 * MiB);
	assert_true(hot_limit(f->hot) == 80 * MiB);
	assert_int_equal(s.shrinks, 1);
	/* not s.pressure: it says whether the latest sample wanted a shrink,
	 * and the thread may have sampled again (budget settled: 0) */
	assert_true(__atomic_load_n(&f->changes, __ATOMIC_RELAXED) >= 1);
}

static void test_floor_is_hot_min(void **state)
{
	struct fx *f = *state;
	struct pressure_stats s;
	avail(f, 0);
	start(f);
	pressure_get(f->p, &s);
	assert_true(s.budget == 32 * MiB);
}

/* v1: limit - (usage - inactive file), and a tighter limit higher up */
static void test_cgroup_v1(void **state)
{
	struct fx *f = *state;
	struct pressure_stats s;
	cg_v1(f, 1ULL << 30, 1000 * MiB, 24 * MiB, 1ULL << 40); /* 1024-976 = 48M */
	start(f);
	pressure_get(f->p, &s);
	assert_true(s.cg_limit == 1ULL << 30);
	assert_true(s.available == 48 * MiB);
	assert_true(s.budget == 32 * MiB); /* 48M - 100M reserve: the floor */
	pressure_free(f->p);
	f->p = NULL;
	cg_v1(f, 9223372036854771712ULL, 100 * MiB, 0, 300 * MiB); /* hierarchical */
	start(f);
	pressure_get(f->p, &s);
	assert_true(s.cg_limit == 300 * MiB);
	assert_true(s.available == 200 * MiB);
	assert_true(s.budget == 100 * MiB);
}

static void test_reserve_zero_and_off(void **state)
{
	struct fx *f = *state;
	struct pressure_stats s;
	avail(f, 10 * MiB);
	f->cfg.mem_reserve = 0; /* only PSI counts */
	start(f);
	pressure_get(f->p, &s);
	assert_true(s.budget == 256 * MiB);
	pressure_free(f->p);
	f->p = NULL;
	f->cfg.mem_reserve = 100 * MiB;
	f->cfg.mem_pressure = 0;
	start(f);
	pressure_get(f->p, &s);
	assert_int_equal(s.enabled, 0);
	assert_true(hot_limit(f->hot) == 256 * MiB);
}

/* after the pressure: held, then in steps of at most 10% of hot_size */
static void test_grows_back_in_steps(void **state)
{
	struct fx *f = *state;
	struct pressure_stats s;
	uint64_t last, deadline, steps = 0;
	avail(f, 0);
	start(f);
	pressure_get(f->p, &s);
	assert_true(s.budget == 32 * MiB);
	avail(f, 8ULL << 30);
	last = 32 * MiB;
	deadline = clock_now_ns() + 20000000000ULL;
	uint64_t grows = 0;
	while (last < 256 * MiB && clock_now_ns() < deadline) {
		pressure_get(f->p, &s);
		uint64_t b = s.budget;
		assert_true(b >= last);
		/* never more than 10 % of hot_size per step (a busy machine may
		 * let several steps pass between two polls) */
		assert_true(b - last <= (s.grows - grows) * (256 * MiB / 10));
		if (b != last)
			steps++;
		last = b;
		grows = s.grows;
		usleep(5000);
	}
	assert_true(last == 256 * MiB);
	assert_true(steps >= 1);
	pressure_get(f->p, &s);
	assert_true(s.grows >= 8); /* 32M to 256M in steps of at most 25.6M */
}

/* the default reserve: 5% of the cgroup's limit, whole MiB */
static void test_probe_cgroup_v1(void **state)
{
	struct fx *f = *state;
	struct pressure_mem m;
	cg_v1(f, 1ULL << 30, 500 * MiB, 0, 9223372036854771712ULL);
	pressure_probe(&m);
	assert_int_equal(m.cgroup, 1);
	assert_true(m.cg_limit == 1ULL << 30);
	assert_int_equal(m.of_cgroup, 1);
	assert_true(m.limit == 1ULL << 30);
	assert_true(m.reserve == 51 * MiB); /* 51.2M: a 1 GiB cgroup logs <= 51M */
	assert_true(m.ram == 16000000ULL * 1024);
	/* a tighter limit higher up (hierarchical_memory_limit) */
	cg_v1(f, 9223372036854771712ULL, 0, 0, 300 * MiB);
	pressure_probe(&m);
	assert_true(m.cg_limit == 300 * MiB);
	assert_true(m.reserve == 15 * MiB);
	/* a tiny cgroup: still at least 1 MiB (0 would mean mem_reserve=off) */
	cg_v1(f, 8 * MiB, 0, 0, 8 * MiB);
	pressure_probe(&m);
	assert_true(m.reserve == 1 * MiB);
}

/* no limit: 5% of the node's RAM, at most 1G */
static void test_probe_node(void **state)
{
	struct fx *f = *state;
	struct pressure_mem m;
	pressure_probe(&m); /* the fixture's cgroup is unlimited */
	assert_int_equal(m.cgroup, 1);
	assert_true(m.cg_limit == 0);
	assert_int_equal(m.of_cgroup, 0);
	assert_true(m.limit == 16000000ULL * 1024);
	assert_true(m.reserve == 781 * MiB); /* 5% of 15625M */
	/* a cgroup limit above the RAM: the RAM bounds the daemon */
	cg_v1(f, 64ULL << 30, 0, 0, 64ULL << 30);
	pressure_probe(&m);
	assert_true(m.cg_limit == 64ULL << 30);
	assert_int_equal(m.of_cgroup, 0);
	assert_true(m.limit == m.ram);
	/* a big node: the cap */
	put(f, "proc/meminfo", "MemTotal: %llu kB\nMemAvailable: 1000 kB\n", 256ULL << 20);
	pressure_probe(&m);
	assert_true(m.reserve == 1ULL << 30);
	/* no meminfo: the node's RAM from sysconf */
	put(f, "proc/meminfo", "nothing\n");
	pressure_probe(&m);
	assert_true(m.ram > 0);
}

/* v2: the least memory.max / memory.high of the cgroup and its ancestors */
static void test_probe_cgroup_v2(void **state)
{
	struct fx *f = *state;
	struct pressure_mem m;
	mkdirs(f, "sys/fs/cgroup/pod/ctr");
	put(f, "proc/self/cgroup", "0::/pod/ctr\n");
	put(f, "sys/fs/cgroup/pod/ctr/memory.current", "0\n");
	put(f, "sys/fs/cgroup/pod/ctr/memory.max", "max\n");
	put(f, "sys/fs/cgroup/pod/ctr/memory.high", "%llu\n", 3ULL << 30);
	put(f, "sys/fs/cgroup/pod/memory.max", "%llu\n", 2ULL << 30);
	put(f, "sys/fs/cgroup/pod/memory.high", "max\n");
	pressure_probe(&m);
	assert_int_equal(m.cgroup, 2);
	assert_true(m.cg_limit == 2ULL << 30);
	assert_true(m.reserve == 102 * MiB);
	/* the running thread sees the same limit */
	f->cfg.mem_reserve = m.reserve;
	f->cfg.mem_reserve_given = 0;
	f->cfg.mem_limit = m.limit;
	f->cfg.mem_limit_cgroup = m.of_cgroup;
	start(f);
	struct pressure_stats s;
	pressure_get(f->p, &s);
	assert_int_equal(s.cgroup, 2);
	assert_true(s.cg_limit == 2ULL << 30);
	assert_true(s.mem_reserve == 102 * MiB);
	assert_true(s.mem_limit == 2ULL << 30);
	assert_int_equal(s.limit_cgroup, 1);
	assert_int_equal(s.reserve_given, 0);
	/* the ancestor's limit lifted: the own memory.high */
	put(f, "sys/fs/cgroup/pod/memory.max", "max\n");
	pressure_probe(&m);
	assert_true(m.cg_limit == 3ULL << 30);
}

/* pooled I/O buffers go back after a call that saw no take or return */
static void test_give_back_buffers(void **state)
{
	void *b[3];
	seg_buf_trim(); /* whatever earlier tests left: from here on, ours */
	seg_buf_trim();
	for (int i = 0; i < 3; i++)
		assert_non_null(b[i] = seg_buf_alloc(SEG_STAGE_SIZE));
	for (int i = 0; i < 3; i++)
		seg_buf_free(b[i]); /* pooled */
	assert_int_equal(seg_buf_trim(), 0); /* the pool moved since the last call */
	b[0] = seg_buf_alloc(SEG_STAGE_SIZE); /* still busy: stays */
	seg_buf_free(b[0]);
	assert_int_equal(seg_buf_trim(), 0);
	assert_true(seg_buf_trim() >= 3 * SEG_STAGE_SIZE); /* a still period: unmapped */
	assert_int_equal(seg_buf_trim(), 0);		     /* nothing left */
}

/* the free heap is trimmed once it is still, and not again until it moves */
static void test_give_back_heap(void **state)
{
	enum { N = 64 };
	void *v[N];
	heap_tune();
	for (int i = 0; i < N; i++)
		assert_non_null(v[i] = malloc(256 << 10)); /* 16 MiB from the heap */
	for (int i = 0; i < N; i += 2)
		free(v[i]); /* 8 MiB free inside the heap, between live blocks */
	if (!HEAP_GLIBC) { /* a sanitizer's allocator: nothing of glibc's to trim */
		heap_give_back();
		assert_int_equal(heap_give_back(), 0);
		for (int i = 1; i < N; i += 2)
			free(v[i]);
		return;
	}
	heap_give_back(); /* records the heap as it is */
	assert_int_equal(heap_give_back(), 1);	  /* still: trimmed */
	assert_int_equal(heap_give_back(), 0);	  /* the same heap: not again */
	for (int i = 1; i < N; i += 2)
		free(v[i]);
	assert_int_equal(heap_give_back(), 0); /* it moved: wait for a still period */
	assert_int_equal(heap_give_back(), 1);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_no_pressure_full_budget), T(test_rule_at_start), T(test_floor_is_hot_min),
	    T(test_cgroup_v1),		     T(test_reserve_zero_and_off),
	    T(test_grows_back_in_steps),
	    T(test_probe_cgroup_v1),	     T(test_probe_node),
	    T(test_probe_cgroup_v2),	     T(test_give_back_buffers),
	    T(test_give_back_heap),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
