/*
 * test_fs_options — mount option parsing and validation (fs/options.c).
 * Every bad value must fail with one line naming the option and the value,
 * leave nothing behind, and never mount; good values land in spw_config,
 * libfuse's own options stay in args while spillway's are removed.
 * Mountpoints, hot_dirs and nvme dirs are fresh temp dirs, removed in teardown.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "fs/options.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <syslog.h>
#include <unistd.h>

struct fx {
	char mnt[64]; /* empty mountpoint */
	char hot[64]; /* existing hot_dir (on tmpfs when /dev/shm exists) */
	char nv1[64]; /* cold dirs */
	char nv2[64];
	char default_hot[PATH_MAX]; /* the default hot_dir, removed if we made it */
	int parsed;
	struct fuse_args args;
	struct spw_config cfg;
	char err[1024];
};

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static void rm_tree(const char *path)
{
	if (path[0])
		nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct stat st;

	assert_non_null(f);
	snprintf(f->mnt, sizeof(f->mnt), "/tmp/spw-opt-mnt-XXXXXX");
	assert_non_null(mkdtemp(f->mnt));
	if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode))
		snprintf(f->hot, sizeof(f->hot), "/dev/shm/spw-opt-hot-XXXXXX");
	else
		snprintf(f->hot, sizeof(f->hot), "/tmp/spw-opt-hot-XXXXXX");
	assert_non_null(mkdtemp(f->hot));
	snprintf(f->nv1, sizeof(f->nv1), "/tmp/spw-opt-nv1-XXXXXX");
	assert_non_null(mkdtemp(f->nv1));
	snprintf(f->nv2, sizeof(f->nv2), "/tmp/spw-opt-nv2-XXXXXX");
	assert_non_null(mkdtemp(f->nv2));
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	opt_free(&f->cfg);
	fuse_opt_free_args(&f->args);
	rm_tree(f->mnt);
	rm_tree(f->hot);
	rm_tree(f->nv1);
	rm_tree(f->nv2);
	if (f->default_hot[0])
		rm_tree(f->default_hot); /* it holds the marker (tier/hot/hot.h) */
	free(f);
	return 0;
}

/* Parse argv {"spillway", args..., NULL} against mountpoint mnt. */
static int parse_argv(struct fx *f, const char *mnt, const char *const *argv)
{
	if (f->parsed)
		opt_free(&f->cfg);
	fuse_opt_free_args(&f->args);
	memset(&f->args, 0, sizeof(f->args));
	assert_int_equal(fuse_opt_add_arg(&f->args, "spillway"), 0);
	for (; *argv; argv++)
		assert_int_equal(fuse_opt_add_arg(&f->args, *argv), 0);
	f->err[0] = '\0';
	f->parsed = 1;
	return opt_parse(&f->args, mnt, &f->cfg, f->err, sizeof(f->err));
}

/* Parse one "-o<printf>" argument against the fixture's mountpoint. */
static int __attribute__((format(printf, 2, 3))) parse_o(struct fx *f, const char *fmt, ...)
{
	char opt[2048] = "-o";
	const char *argv[2] = {opt, NULL};
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(opt + 2, sizeof(opt) - 2, fmt, ap);
	va_end(ap);
	return parse_argv(f, f->mnt, argv);
}

static void err_mentions(struct fx *f, const char *a, const char *b)
{
	if ((a && !strstr(f->err, a)) || (b && !strstr(f->err, b)))
		fail_msg("error line \"%s\" should mention '%s' and '%s'", f->err, a ? a : "",
			 b ? b : "");
	assert_null(strchr(f->err, '\n')); /* one line */
	assert_true(strlen(f->err) > 0);
}

/* hot_dir=<fixture hot>,<opts> must fail naming `name` and `value`. */
static void expect_bad(struct fx *f, const char *opts, const char *name, const char *value)
{
	int r = parse_o(f, "hot_dir=%s,%s", f->hot, opts);
	if (r != -1)
		fail_msg("-o %s: opt_parse returned %d, want -1", opts, r);
	err_mentions(f, name, value);
}

/* The comma-joined -o options left in args for libfuse. */
static void kept_opts(struct fx *f, char *buf, size_t len)
{
	buf[0] = '\0';
	for (int i = 1; i < f->args.argc; i++) {
		const char *a = f->args.argv[i];
		if (strcmp(a, "-o") == 0 && i + 1 < f->args.argc)
			a = f->args.argv[++i];
		else if (strncmp(a, "-o", 2) == 0)
			a += 2;
		else
			continue;
		if (buf[0])
			strncat(buf, ",", len - strlen(buf) - 1);
		strncat(buf, a, len - strlen(buf) - 1);
	}
}

static int has_token(const char *list, const char *tok)
{
	size_t l = strlen(tok);
	for (const char *p = list; (p = strstr(p, tok)); p += l)
		if ((p == list || p[-1] == ',') && (p[l] == ',' || p[l] == '\0'))
			return 1;
	return 0;
}

static uint64_t fs_size(const char *path)
{
	struct statvfs sv;
	assert_int_equal(statvfs(path, &sv), 0);
	return (uint64_t)sv.f_blocks * sv.f_frsize;
}

static int exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

/* ---- bad values ---- */

static void test_bad_sizes(void **state)
{
	struct fx *f = *state;

	expect_bad(f, "hot_size=-5G", "hot_size", "-5G");
	expect_bad(f, "hot_size=12Q", "hot_size", "12Q");
	expect_bad(f, "hot_size=0", "hot_size", "'0'");
	expect_bad(f, "hot_size=1M", "hot_size", "1M"); /* less than two chunks */
	expect_bad(f, "hot_size=", "hot_size", "''");
	expect_bad(f, "hot_size=1000000T", "hot_size", "1000000T"); /* larger than the fs */
	expect_bad(f, "chunk_size=3M", "chunk_size", "3M");
	expect_bad(f, "chunk_size=512K", "chunk_size", "512K");
	expect_bad(f, "chunk_size=128M", "chunk_size", "128M");
	expect_bad(f, "chunk_size=4X", "chunk_size", "4X");
	expect_bad(f, "min_spill_size=1K", "min_spill_size", "1K");
	expect_bad(f, "min_spill_size=17G", "min_spill_size", "17G");
	expect_bad(f, "min_spill_size=lots", "min_spill_size", "lots");
}

static void test_bad_fractions(void **state)
{
	struct fx *f = *state;

	expect_bad(f, "spill_threshold=1.5", "spill_threshold", "1.5");
	expect_bad(f, "spill_threshold=0", "spill_threshold", "'0'");
	expect_bad(f, "spill_threshold=half", "spill_threshold", "half");
	expect_bad(f, "low_watermark=-0.1", "low_watermark", "-0.1");
	/* low watermark must be below spill_threshold */
	expect_bad(f, "spill_threshold=0.7,low_watermark=0.8", "low_watermark", "0.8");
	expect_bad(f, "low_watermark=0.75", "low_watermark", "0.75"); /* == default spill */
	expect_bad(f, "spill_threshold=0.9,hard_watermark=0.8", "hard_watermark", "0.8");
	expect_bad(f, "hard_watermark=1.01", "hard_watermark", "1.01");
	expect_bad(f, "gc_threshold=2", "gc_threshold", "'2'");
}

static void test_bad_words(void **state)
{
	struct fx *f = *state;

	expect_bad(f, "log_level=loud", "log_level", "loud");
	expect_bad(f, "io_workers=0", "io_workers", "'0'");
	expect_bad(f, "io_workers=abc", "io_workers", "abc");
	expect_bad(f, "io_workers=257", "io_workers", "257");
	expect_bad(f, "io_workers=-1", "io_workers", "-1");
	expect_bad(f, "io_workers=4x", "io_workers", "4x");
	expect_bad(f, "io_workers=", "io_workers", "''");
	expect_bad(f, "restore=eager", "restore", "eager");
	expect_bad(f, "write_wait=forever", "write_wait", "forever");
	expect_bad(f, "write_wait=25h", "write_wait", "25h");
	expect_bad(f, "write_wait=-1s", "write_wait", "-1s");
}

static void test_bad_elastic(void **state)
{
	struct fx *f = *state;

	expect_bad(f, "hot_size=64M,hot_min=128M", "hot_min", "128M"); /* above hot_size */
	expect_bad(f, "hot_size=64M,hot_min=1M", "hot_min", "1M");     /* below two chunks */
	expect_bad(f, "hot_min=lots", "hot_min", "lots");
	expect_bad(f, "mem_reserve=1000000T", "mem_reserve", "1000000T"); /* above RAM */
	expect_bad(f, "mem_reserve=1000000T", "at most half", NULL);
	expect_bad(f, "mem_reserve=-1G", "mem_reserve", "-1G");
	expect_bad(f, "mem_pressure=maybe", "mem_pressure", "maybe");
	expect_bad(f, "mem_pressure=", "mem_pressure", "''");
}

static void test_elastic_values(void **state)
{
	struct fx *f = *state;
	uint64_t ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);

	/* defaults: hot_min = hot_size/8, mem_reserve 5% of what the daemon may
	 * have (this test's cgroup: see test_mem_reserve_follows_cgroup), on */
	assert_int_equal(parse_o(f, "hot_dir=%s,hot_size=256M", f->hot), 0);
	assert_true(f->cfg.hot_min == 32ULL << 20);
	assert_true(f->cfg.mem_limit > 0 && f->cfg.mem_limit <= ram);
	assert_true(f->cfg.mem_reserve == (f->cfg.mem_limit / 20 < (1ULL << 30)
					       ? f->cfg.mem_limit / 20 >> 20 << 20
					       : 1ULL << 30));
	assert_int_equal(f->cfg.mem_reserve_given, 0);
	assert_int_equal(f->cfg.mem_pressure, 1);
	assert_int_equal(f->cfg.keep_hot, 0);
	assert_int_equal(parse_o(f, "hot_dir=%s,hot_size=256M,hot_min=100M,mem_reserve=off,"
				    "mem_pressure=off,keep_hot",
				 f->hot),
			 0);
	assert_true(f->cfg.hot_min == 100ULL << 20);
	assert_true(f->cfg.mem_reserve == 0);
	assert_int_equal(f->cfg.mem_reserve_given, 1);
	assert_int_equal(f->cfg.mem_pressure, 0);
	assert_int_equal(f->cfg.keep_hot, 1);
}

/* A fake /proc and cgroup v1 tree under dir (SPW_PROC_ROOT): MemTotal 16G,
 * the daemon in memory cgroup /job with the given limit (0: unlimited). */
static void fake_proc(const char *dir, uint64_t limit)
{
	static const char *const dirs[] = {"proc", "proc/self", "sys", "sys/fs", "sys/fs/cgroup",
					   "sys/fs/cgroup/memory", "sys/fs/cgroup/memory/job"};
	char path[PATH_MAX];
	FILE *fp;

	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, dirs[i]);
		mkdir(path, 0755);
	}
	snprintf(path, sizeof(path), "%s/proc/meminfo", dir);
	assert_non_null(fp = fopen(path, "w"));
	fprintf(fp, "MemTotal: 16777216 kB\nMemAvailable: 8388608 kB\n");
	fclose(fp);
	snprintf(path, sizeof(path), "%s/proc/self/cgroup", dir);
	assert_non_null(fp = fopen(path, "w"));
	fprintf(fp, "4:memory:/job\n0::/\n");
	fclose(fp);
	snprintf(path, sizeof(path), "%s/sys/fs/cgroup/memory/job/memory.limit_in_bytes", dir);
	assert_non_null(fp = fopen(path, "w"));
	fprintf(fp, "%llu\n", limit ? (unsigned long long)limit : 9223372036854771712ULL);
	fclose(fp);
}

/* mem_reserve follows the daemon's memory cgroup (issue 35 item 5): 5% of
 * its limit by default, of the node's RAM without one, never above 1G; a
 * given value above half of that limit is refused with one line. */
static void test_mem_reserve_follows_cgroup(void **state)
{
	struct fx *f = *state;
	char root[] = "/tmp/spw-opt-proc-XXXXXX";

	assert_non_null(mkdtemp(root));
	setenv("SPW_PROC_ROOT", root, 1);
	fake_proc(root, 1ULL << 30); /* a 1 GiB cgroup */
	assert_int_equal(parse_o(f, "hot_dir=%s,hot_size=256M", f->hot), 0);
	assert_true(f->cfg.mem_reserve == 51ULL << 20); /* 5%: 51.2M, in whole MiB */
	assert_true(f->cfg.mem_limit == 1ULL << 30);
	assert_int_equal(f->cfg.mem_limit_cgroup, 1);
	assert_int_equal(f->cfg.mem_reserve_given, 0);
	/* given: up to half of the cgroup's limit, refused above it */
	assert_int_equal(parse_o(f, "hot_dir=%s,hot_size=256M,mem_reserve=512M", f->hot), 0);
	assert_true(f->cfg.mem_reserve == 512ULL << 20);
	assert_int_equal(f->cfg.mem_reserve_given, 1);
	expect_bad(f, "hot_size=256M,mem_reserve=513M", "mem_reserve", "513M");
	err_mentions(f, "cgroup", "512M");
	/* no limit: 5% of the node's RAM (16G here), at most 1G */
	fake_proc(root, 0);
	assert_int_equal(parse_o(f, "hot_dir=%s,hot_size=256M", f->hot), 0);
	assert_true(f->cfg.mem_reserve == (16ULL << 30) / 20 >> 20 << 20); /* 819M */
	assert_true(f->cfg.mem_limit == 16ULL << 30);
	assert_int_equal(f->cfg.mem_limit_cgroup, 0);
	expect_bad(f, "hot_size=256M,mem_reserve=9G", "mem_reserve", "9G");
	err_mentions(f, "node's RAM", "8192M");
	/* a cgroup limit above the node's RAM: the node's is the bound */
	fake_proc(root, 64ULL << 30);
	assert_int_equal(parse_o(f, "hot_dir=%s,hot_size=256M", f->hot), 0);
	assert_true(f->cfg.mem_limit == 16ULL << 30);
	assert_int_equal(f->cfg.mem_limit_cgroup, 0);
	unsetenv("SPW_PROC_ROOT");
	rm_tree(root);
}

/* io_uring=on|off (bare: on), off by default; never left for libfuse as is
 * (fs/main.c hands libfuse its own -o io_uring when the library has it) */
static void test_io_uring_option(void **state)
{
	struct fx *f = *state;
	char kept[1024];

	assert_int_equal(parse_o(f, "hot_dir=%s", f->hot), 0);
	assert_int_equal(f->cfg.io_uring, 0);
	assert_int_equal(parse_o(f, "hot_dir=%s,io_uring=on", f->hot), 0);
	assert_int_equal(f->cfg.io_uring, 1);
	kept_opts(f, kept, sizeof(kept));
	assert_null(strstr(kept, "io_uring"));
	assert_int_equal(parse_o(f, "hot_dir=%s,io_uring", f->hot), 0);
	assert_int_equal(f->cfg.io_uring, 1);
	assert_int_equal(parse_o(f, "hot_dir=%s,io_uring=on,io_uring=off", f->hot), 0);
	assert_int_equal(f->cfg.io_uring, 0);
	expect_bad(f, "io_uring=maybe", "io_uring", "maybe");
	expect_bad(f, "io_uring=", "io_uring", "''");
	expect_bad(f, "io_uring_q_depth=4", "io_uring_q_depth", NULL); /* not ours, not libfuse's */
}

static void test_unknown_option(void **state)
{
	struct fx *f = *state;

	expect_bad(f, "bogus=1", "bogus", "1");
	expect_bad(f, "ro,bogus=1,noatime", "bogus=1", NULL);
	/* a value option without its value is no known option */
	expect_bad(f, "hot_size", "hot_size", "unknown");
	/* close to libfuse's names but not them */
	expect_bad(f, "fsnamex", "fsnamex", NULL);
}

static void test_bad_mountpoint(void **state)
{
	struct fx *f = *state;
	const char *argv[] = {NULL, NULL};
	char opt[128], sub[128], file[128];
	int fd;

	snprintf(opt, sizeof(opt), "-ohot_dir=%s", f->hot);
	argv[0] = opt;
	assert_int_equal(parse_argv(f, NULL, argv), -1);
	err_mentions(f, "mountpoint", NULL);

	assert_int_equal(parse_argv(f, "/tmp/spw-opt-no-such-dir/x", argv), -1);
	err_mentions(f, "mountpoint", "/tmp/spw-opt-no-such-dir/x");

	snprintf(file, sizeof(file), "%s/file", f->nv1);
	fd = open(file, O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(parse_argv(f, file, argv), -1);
	err_mentions(f, "mountpoint", file);

	/* non-empty: a file, or just a subdirectory */
	assert_int_equal(parse_argv(f, f->nv1, argv), -1);
	err_mentions(f, "mountpoint", f->nv1);
	err_mentions(f, "not empty", NULL);
	unlink(file);
	snprintf(sub, sizeof(sub), "%s/sub", f->nv1);
	assert_int_equal(mkdir(sub, 0700), 0);
	assert_int_equal(parse_argv(f, f->nv1, argv), -1);
	err_mentions(f, "not empty", NULL);
	rmdir(sub);
	/* now empty: fine */
	assert_int_equal(parse_argv(f, f->nv1, argv), 0);
}

static void test_bad_hot_dir(void **state)
{
	struct fx *f = *state;
	char path[256];
	int fd;

	/* cannot be created */
	assert_int_equal(parse_o(f, "hot_dir=/proc/spillway-test-hot"), -1);
	err_mentions(f, "hot_dir", "/proc/spillway-test-hot");
	assert_false(exists("/proc/spillway-test-hot"));
	assert_int_equal(parse_o(f, "hot_dir=%s/a/b", f->nv1), -1); /* parent missing */
	err_mentions(f, "hot_dir", "/a/b");
	/* relative */
	assert_int_equal(parse_o(f, "hot_dir=relative/dir"), -1);
	err_mentions(f, "hot_dir", "relative/dir");
	assert_false(exists("relative"));
	/* a file */
	snprintf(path, sizeof(path), "%s/file", f->nv1);
	fd = open(path, O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(parse_o(f, "hot_dir=%s", path), -1);
	err_mentions(f, "hot_dir", path);
	unlink(path);
	/* the mountpoint itself, or inside it */
	assert_int_equal(parse_o(f, "hot_dir=%s", f->mnt), -1);
	err_mentions(f, "hot_dir", f->mnt);
	assert_int_equal(parse_o(f, "hot_dir=%s/inside", f->mnt), -1);
	err_mentions(f, "hot_dir", "inside");
}

/*
 * BUG (fs/options.c opt_parse): a hot_dir that opt_parse itself created and
 * then rejected is left behind, because the cleanup at `fail:` removes
 * cfg->hot_dir, which is only set after the checks pass. With
 * hot_dir=MNT/inside the refused mount leaves MNT non-empty, so the next,
 * corrected mount fails with "mountpoint ... not empty".
 */
static void test_rejected_hot_dir_inside_mountpoint_is_removed(void **state)
{
	struct fx *f = *state;
	char path[256];

	snprintf(path, sizeof(path), "%s/inside", f->mnt);
	assert_int_equal(parse_o(f, "hot_dir=%s", path), -1);
	err_mentions(f, "hot_dir", "inside");
	assert_false(exists(path));
	/* and the corrected command line then works */
	assert_int_equal(parse_o(f, "hot_dir=%s", f->hot), 0);
}

static void test_failure_removes_created_hot_dir(void **state)
{
	struct fx *f = *state;
	char path[256];

	snprintf(path, sizeof(path), "%s/new", f->hot);
	assert_int_equal(parse_o(f, "hot_dir=%s,io_workers=0", path), -1);
	err_mentions(f, "io_workers", "'0'");
	assert_false(exists(path));
	assert_int_equal(parse_o(f, "hot_dir=%s,nvme=/does/not/exist", path), -1);
	assert_false(exists(path));
	/* but an existing hot_dir is never removed */
	assert_int_equal(parse_o(f, "hot_dir=%s,io_workers=0", f->hot), -1);
	assert_true(exists(f->hot));
}

static void test_allow_other(void **state)
{
	struct fx *f = *state;
	char kept[1024];

	expect_bad(f, "allow_other", "allow_other", "default_permissions");
	/* with default_permissions: accepted, recorded, passed to the kernel */
	assert_int_equal(parse_o(f, "hot_dir=%s,allow_other,default_permissions", f->hot), 0);
	assert_int_equal(f->cfg.allow_other, 1);
	assert_int_equal(f->cfg.default_permissions, 1);
	kept_opts(f, kept, sizeof(kept));
	assert_true(has_token(kept, "allow_other"));
	assert_true(has_token(kept, "default_permissions"));
	/* default_permissions alone is fine */
	assert_int_equal(parse_o(f, "hot_dir=%s,default_permissions", f->hot), 0);
	assert_int_equal(f->cfg.allow_other, 0);
	assert_int_equal(f->cfg.default_permissions, 1);
}

/* s3_state: only with nvme and s3 (s3 alone always keeps it), and a state_dir. */
static void test_s3_state(void **state)
{
	struct fx *f = *state;
	char opts[512];

	expect_bad(f, "s3_state", "s3_state", "nvme");
	expect_bad(f, "s3_state,s3=s3://bucket/p,state_dir=none", "s3_state", "s3 alone");
	snprintf(opts, sizeof(opts), "s3_state,nvme=%s", f->nv1);
	expect_bad(f, opts, "s3_state", "s3=");
	snprintf(opts, sizeof(opts), "s3_state,nvme=%s,s3=s3://bucket/p,state_dir=none", f->nv1);
	expect_bad(f, opts, "s3_state", "state_dir");
	assert_int_equal(parse_o(f, "hot_dir=%s,nvme=%s,s3=s3://bucket/p,s3_state", f->hot, f->nv1), 0);
	assert_int_equal(f->cfg.s3_state, 1);
	assert_int_equal(parse_o(f, "hot_dir=%s,nvme=%s,s3=s3://bucket/p", f->hot, f->nv1), 0);
	assert_int_equal(f->cfg.s3_state, 0);
}

static void test_bad_nvme(void **state)
{
	struct fx *f = *state;
	char opts[512], file[128], slashy[128];
	int fd;

	expect_bad(f, "nvme=/does/not/exist", "nvme", "/does/not/exist");
	snprintf(opts, sizeof(opts), "nvme=%s", f->hot);
	expect_bad(f, opts, "nvme", f->hot);
	/* the same directory spelled differently is still the hot_dir */
	snprintf(slashy, sizeof(slashy), "%s/./", f->hot);
	snprintf(opts, sizeof(opts), "nvme=%s", slashy);
	expect_bad(f, opts, "nvme", slashy);
	snprintf(opts, sizeof(opts), "nvme=%s", f->mnt);
	expect_bad(f, opts, "nvme", f->mnt);
	expect_bad(f, "nvme=relative/dir", "nvme", "relative/dir");
	snprintf(file, sizeof(file), "%s/file", f->nv1);
	fd = open(file, O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	close(fd);
	snprintf(opts, sizeof(opts), "nvme=%s", file);
	expect_bad(f, opts, "nvme", file);
	/* one bad entry in a list fails the list */
	snprintf(opts, sizeof(opts), "nvme=%s:/does/not/exist", f->nv2);
	expect_bad(f, opts, "nvme", "/does/not/exist");
	expect_bad(f, "nvme=", "nvme", NULL);
	expect_bad(f, "nvme=:", "nvme", NULL);
}

/* ---- good values ---- */

static void test_defaults(void **state)
{
	struct fx *f = *state;
	char real[PATH_MAX], kept[1024];

	assert_int_equal(parse_o(f, "hot_dir=%s", f->hot), 0);
	assert_string_equal(f->err, "");
	assert_non_null(realpath(f->mnt, real));
	assert_string_equal(f->cfg.mountpoint, real);
	assert_non_null(realpath(f->hot, real));
	assert_string_equal(f->cfg.hot_dir, real);
	assert_true(f->cfg.chunk_size == 4ULL << 20);
	assert_true(f->cfg.spill_threshold == 0.75);
	assert_true(f->cfg.low_watermark == 0.60);
	assert_true(f->cfg.hard_watermark == 0.95);
	assert_true(f->cfg.gc_threshold == 0.5);
	assert_true(f->cfg.min_spill_size == 64ULL << 20);
	assert_int_equal(f->cfg.io_workers, 8);
	assert_int_equal(f->cfg.write_wait_ms, 60000);
	assert_int_equal(f->cfg.restore, RESTORE_LAZY);
	assert_int_equal(f->cfg.admit_reread, 1);
	assert_int_equal(f->cfg.log_level, LOG_INFO);
	assert_null(f->cfg.nvme);
	assert_int_equal(f->cfg.allow_other, 0);
	assert_int_equal(f->cfg.default_permissions, 0);
	assert_true(f->cfg.hot_size == fs_size(f->hot) / 2);
	/* spillway's own options are gone from args */
	kept_opts(f, kept, sizeof(kept));
	assert_null(strstr(kept, "hot_dir"));
}

static void test_default_hot_dir(void **state)
{
	struct fx *f = *state;
	const char *argv[] = {NULL};
	struct stat st;
	char prefix[64];
	int r;

	if (stat("/dev/shm", &st) != 0)
		skip();
	/* the default name hashes the mountpoint: learn it, then see it made */
	r = parse_argv(f, f->mnt, argv);
	if (f->cfg.hot_dir) /* remembered first, so teardown removes it */
		snprintf(f->default_hot, sizeof(f->default_hot), "%s", f->cfg.hot_dir);
	assert_int_equal(r, 0);
	snprintf(prefix, sizeof(prefix), "/dev/shm/spillway-%u-", (unsigned)getuid());
	assert_int_equal(strncmp(f->cfg.hot_dir, prefix, strlen(prefix)), 0);
	assert_int_equal(strlen(f->cfg.hot_dir), strlen(prefix) + 8);
	assert_int_equal(stat(f->cfg.hot_dir, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0700);
	assert_true(f->cfg.hot_size == fs_size("/dev/shm") / 2);
	/* the same mountpoint gives the same directory, already there */
	assert_int_equal(parse_argv(f, f->mnt, argv), 0);
	assert_string_equal(f->cfg.hot_dir, f->default_hot);
	/* a failure does not remove a default dir it did not create */
	assert_int_equal(parse_o(f, "io_workers=0"), -1);
	assert_true(exists(f->default_hot));
}

static void test_explicit_values(void **state)
{
	struct fx *f = *state;
	char nv[256];

	snprintf(nv, sizeof(nv), "%s:%s", f->nv1, f->nv2);
	assert_int_equal(parse_o(f,
				 "hot_dir=%s,hot_size=64M,chunk_size=8M,spill_threshold=0.8,"
				 "low_watermark=0.5,hard_watermark=0.9,min_spill_size=128M,"
				 "io_workers=16,restore=lazy,write_wait=500ms,gc_threshold=0.25,"
				 "log_level=debug,nvme=%s",
				 f->hot, nv),
			 0);
	assert_true(f->cfg.hot_size == 64ULL << 20);
	assert_true(f->cfg.chunk_size == 8ULL << 20);
	assert_true(f->cfg.spill_threshold == 0.8);
	assert_true(f->cfg.low_watermark == 0.5);
	assert_true(f->cfg.hard_watermark == 0.9);
	assert_true(f->cfg.min_spill_size == 128ULL << 20);
	assert_int_equal(f->cfg.io_workers, 16);
	assert_int_equal(f->cfg.restore, RESTORE_LAZY);
	assert_int_equal(f->cfg.write_wait_ms, 500);
	assert_true(f->cfg.gc_threshold == 0.25);
	assert_int_equal(f->cfg.log_level, LOG_DEBUG);
	assert_string_equal(f->cfg.nvme, nv);

	/* other spellings and the edges of each range */
	assert_int_equal(parse_o(f,
				 "hot_dir=%s,chunk_size=1M,hot_size=2M,io_workers=1,"
				 "restore=open,write_wait=5m,log_level=error,min_spill_size=1M",
				 f->hot),
			 0);
	assert_true(f->cfg.chunk_size == 1ULL << 20);
	assert_true(f->cfg.hot_size == 2ULL << 20);
	assert_int_equal(f->cfg.io_workers, 1);
	assert_int_equal(f->cfg.restore, RESTORE_OPEN);
	assert_int_equal(f->cfg.write_wait_ms, 300000);
	assert_int_equal(f->cfg.log_level, LOG_ERR);
	assert_true(f->cfg.min_spill_size == 1ULL << 20);
	assert_int_equal(parse_o(f,
				 "hot_dir=%s,chunk_size=64M,hot_size=128M,io_workers=256,"
				 "write_wait=24h,log_level=warn,min_spill_size=16G,"
				 "spill_threshold=1,hard_watermark=1,low_watermark=0.99",
				 f->hot),
			 0);
	assert_true(f->cfg.chunk_size == 64ULL << 20);
	assert_int_equal(f->cfg.io_workers, 256);
	assert_int_equal(f->cfg.write_wait_ms, 86400000);
	assert_int_equal(f->cfg.log_level, LOG_WARNING);
	assert_true(f->cfg.spill_threshold == 1.0);
	assert_true(f->cfg.min_spill_size == 16ULL << 30);
}

static void test_hot_dir_created(void **state)
{
	struct fx *f = *state;
	char path[256];
	struct stat st;

	snprintf(path, sizeof(path), "%s/made", f->hot);
	assert_int_equal(parse_o(f, "hot_dir=%s", path), 0);
	assert_string_equal(f->cfg.hot_dir, path);
	assert_int_equal(stat(path, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0700);
}

static void test_fuse_options_kept(void **state)
{
	struct fx *f = *state;
	char kept[1024];

	assert_int_equal(parse_o(f,
				 "ro,hot_dir=%s,noatime,hot_size=64M,fsname=x,chunk_size=4M,"
				 "subtype=spillway,nodev,nosuid,io_workers=4",
				 f->hot),
			 0);
	kept_opts(f, kept, sizeof(kept));
	assert_true(has_token(kept, "ro"));
	assert_true(has_token(kept, "noatime"));
	assert_true(has_token(kept, "fsname=x"));
	assert_true(has_token(kept, "subtype=spillway"));
	assert_true(has_token(kept, "nodev"));
	assert_true(has_token(kept, "nosuid"));
	assert_null(strstr(kept, "hot_dir"));
	assert_null(strstr(kept, "hot_size"));
	assert_null(strstr(kept, "chunk_size"));
	assert_null(strstr(kept, "io_workers"));
	assert_int_equal(f->cfg.io_workers, 4);
	/* the program name survives */
	assert_string_equal(f->args.argv[0], "spillway");
}

static void test_options_in_several_args(void **state)
{
	struct fx *f = *state;
	char hot[128], kept[1024];
	const char *argv[] = {"-o", "ro", hot, "-o", "io_workers=3,noatime", NULL};

	snprintf(hot, sizeof(hot), "-ohot_dir=%s", f->hot);
	assert_int_equal(parse_argv(f, f->mnt, argv), 0);
	assert_int_equal(f->cfg.io_workers, 3);
	kept_opts(f, kept, sizeof(kept));
	assert_true(has_token(kept, "ro"));
	assert_true(has_token(kept, "noatime"));
	assert_null(strstr(kept, "io_workers"));
}

static void test_fstab_words(void **state)
{
	struct fx *f = *state;
	char kept[1024];

	assert_int_equal(parse_o(f,
				 "defaults,_netdev,nofail,hot_dir=%s,noauto,user,"
				 "x-systemd.automount,comment=x,rw",
				 f->hot),
			 0);
	kept_opts(f, kept, sizeof(kept));
	/* accepted and dropped: libfuse would not know them */
	assert_false(has_token(kept, "defaults"));
	assert_false(has_token(kept, "_netdev"));
	assert_false(has_token(kept, "nofail"));
	assert_false(has_token(kept, "noauto"));
	assert_false(has_token(kept, "user"));
	assert_null(strstr(kept, "x-systemd"));
	assert_null(strstr(kept, "comment"));
	assert_true(has_token(kept, "rw"));
}

/*
 * main() runs fuse_parse_cmdline() first and passes what is left to
 * opt_parse. -f and -s are consumed by libfuse; this pipeline must accept them.
 */
static void test_main_pipeline_foreground(void **state)
{
	struct fx *f = *state;
	char hot[128];
	char *argv[] = {"spillway", "-f", "-s", "-o", hot, f->mnt, NULL};
	struct fuse_args args = FUSE_ARGS_INIT(6, argv);
	struct fuse_cmdline_opts o = {0};
	int r;

	snprintf(hot, sizeof(hot), "hot_dir=%s,hot_size=64M,ro", f->hot);
	assert_int_equal(fuse_parse_cmdline(&args, &o), 0);
	assert_non_null(o.mountpoint);
	r = opt_parse(&args, o.mountpoint, &f->cfg, f->err, sizeof(f->err));
	f->parsed = 1;
	if (r != 0)
		print_error("opt_parse: %s\n", f->err);
	free(o.mountpoint);
	fuse_opt_free_args(&args);
	assert_int_equal(r, 0);
	assert_true(f->cfg.hot_size == 64ULL << 20);
}

/*
 * BUG (fs/options.c opt_proc): `spillway -d MOUNTPOINT` is refused with
 * "unknown option '-d'". fuse_parse_cmdline() keeps "-d" in args
 * (FUSE_OPT_KEY("-d", FUSE_OPT_KEY_KEEP) in libfuse's helper.c, so the
 * session sees debug), and opt_proc then treats the non -o argument "-d" as
 * an unknown option. The usage text advertises -d.
 */
static void test_main_pipeline_debug_flag(void **state)
{
	struct fx *f = *state;
	char hot[128];
	char *argv[] = {"spillway", "-d", "-o", hot, f->mnt, NULL};
	struct fuse_args args = FUSE_ARGS_INIT(5, argv);
	struct fuse_cmdline_opts o = {0};
	int r;

	snprintf(hot, sizeof(hot), "hot_dir=%s", f->hot);
	assert_int_equal(fuse_parse_cmdline(&args, &o), 0);
	assert_int_equal(o.debug, 1);
	r = opt_parse(&args, o.mountpoint, &f->cfg, f->err, sizeof(f->err));
	f->parsed = 1;
	if (r != 0)
		print_error("opt_parse: %s\n", f->err);
	free(o.mountpoint);
	fuse_opt_free_args(&args);
	assert_int_equal(r, 0);
}

/* ---- the options table: every row's default, bounds and documentation ---- */

/* What every table test adds, so that the s3 rows are accepted. */
#define S3_COMPANIONS "s3=s3://bucket/prefix,state_dir=none"

static int is_s3_row(const struct opt_spec *s)
{
	return !strncmp(s->name, "s3", 2) || !strcmp(s->name, "takeover");
}

/* Writing an option's default gives the same field as not writing it. */
static void test_table_defaults_parse(void **state)
{
	struct fx *f = *state;
	struct spw_config base;
	size_t n = 0;

	assert_int_equal(parse_o(f, "hot_dir=%s," S3_COMPANIONS, f->hot), 0);
	base = f->cfg;
	f->parsed = 0; /* base keeps the strings until the end */
	for (size_t i = 0; i < opt_count; i++) {
		const struct opt_spec *s = &opt_table[i];
		if (!s->def)
			continue;
		n++;
		if (parse_o(f, "hot_dir=%s," S3_COMPANIONS ",%s=%s", f->hot, s->name, s->def) != 0)
			fail_msg("%s=%s (its default) is refused: %s", s->name, s->def, f->err);
		if (memcmp((char *)&f->cfg + s->off, (char *)&base + s->off, s->width))
			fail_msg("%s=%s differs from leaving %s out", s->name, s->def, s->name);
	}
	assert_true(n >= 15);
	opt_free(&base);
}

/* A value one past each bound of a row: refused with one line naming the option
 * and the value; the bound itself is accepted. */
static void expect_bound(struct fx *f, const struct opt_spec *s, const char *value, int ok)
{
	int r = parse_o(f, "hot_dir=%s,%s%s=%s", f->hot, is_s3_row(s) ? S3_COMPANIONS "," : "",
			s->name, value);
	if (ok && r != 0)
		fail_msg("%s=%s (a bound) is refused: %s", s->name, value, f->err);
	if (!ok) {
		if (r != -1)
			fail_msg("%s=%s (past a bound) is accepted", s->name, value);
		err_mentions(f, s->name, value);
		if (!strstr(f->err, "option '"))
			fail_msg("%s=%s: \"%s\" does not name the option", s->name, value, f->err);
	}
}

static void test_table_bounds(void **state)
{
	struct fx *f = *state;
	char v[64];
	int n = 0;

	for (size_t i = 0; i < opt_count; i++) {
		const struct opt_spec *s = &opt_table[i];
		const char *unit = s->kind == OPT_DURATION ? "ms" : "";
		if (s->kind != OPT_SIZE && s->kind != OPT_DURATION && s->kind != OPT_COUNT)
			continue;
		if (s->min > 0) {
			snprintf(v, sizeof(v), "%llu%s", (unsigned long long)s->min - 1, unit);
			expect_bound(f, s, v, 0);
			snprintf(v, sizeof(v), "%llu%s", (unsigned long long)s->min, unit);
			expect_bound(f, s, v, 1);
			n++;
		}
		if (s->max < UINT64_MAX) {
			snprintf(v, sizeof(v), "%llu%s", (unsigned long long)s->max + 1, unit);
			expect_bound(f, s, v, 0);
			snprintf(v, sizeof(v), "%llu%s", (unsigned long long)s->max, unit);
			expect_bound(f, s, v, 1);
			n++;
		}
	}
	assert_true(n >= 10);
	for (size_t i = 0; i < opt_count; i++) {
		const struct opt_spec *s = &opt_table[i];
		if (s->kind == OPT_FRACTION) {
			expect_bound(f, s, "0", 0);
			expect_bound(f, s, "1.001", 0);
		} else if (s->kind == OPT_ENUM) {
			expect_bound(f, s, "no-such-word", 0);
			for (const struct opt_word *w = s->words; w->word; w++)
				if (!w->hidden)
					err_mentions(f, w->word, NULL); /* offered */
			for (const struct opt_word *w = s->words; w->word; w++)
				expect_bound(f, s, w->word, 1);
		}
	}
}

static char *doc_text(enum opt_doc_format fmt)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);

	assert_non_null(out);
	opt_doc(out, fmt);
	assert_int_equal(fclose(out), 0);
	return buf;
}

static void test_help_lists_every_option(void **state)
{
	char *help = doc_text(OPT_DOC_HELP), *man = doc_text(OPT_DOC_MAN),
	     *readme = doc_text(OPT_DOC_README), key[96];

	for (size_t i = 0; i < opt_count; i++) {
		const struct opt_spec *s = &opt_table[i];
		const char *def = s->def_doc ? s->def_doc : s->def;
		int hidden = !!(s->flags & OPT_HIDDEN);

		snprintf(key, sizeof(key), "\n    %s", s->name);
		if ((strstr(help, key) == NULL) != hidden)
			fail_msg("--help %s %s", hidden ? "lists" : "lacks", s->name);
		snprintf(key, sizeof(key), "\n| %s | ", s->name);
		if ((strstr(readme, key) == NULL) != hidden)
			fail_msg("the README table %s %s", hidden ? "lists" : "lacks", s->name);
		if (hidden)
			continue;
		assert_non_null(s->help);
		assert_non_null(s->man);
		assert_non_null(s->man_tag);
		if (def) {
			snprintf(key, sizeof(key), "    %s%s%s (default %s)\n", s->name,
				 s->meta && s->meta[0] != '[' ? "=" : "", s->meta ? s->meta : "", def);
			if (!strstr(help, key))
				fail_msg("--help does not show %s's default: no \"%s\"", s->name, key);
		}
		snprintf(key, sizeof(key), ".TP\n");
		snprintf(key + 4, sizeof(key) - 4, s->man_tag, s->name);
		if (!strstr(man, key))
			fail_msg("the man list lacks the entry \"%s\"", key);
	}
	free(help);
	free(man);
	free(readme);
}

/*
 * man/spillway.8 and README.md hold the option list rendered from the table,
 * between their "options: begin" and "options: end" lines. With
 * SPW_REGEN_DOCS=1 in the environment the test rewrites them instead.
 */
#define SRC_ROOT SPW_TEST_FIXTURES "/../../.."
#define REGEN "SPW_REGEN_DOCS=1 build-dev/tests/test_fs_options"

static char *slurp(const char *path)
{
	FILE *in = fopen(path, "r");
	char *buf;
	long n;

	if (!in)
		fail_msg("%s: %s", path, strerror(errno));
	fseek(in, 0, SEEK_END);
	n = ftell(in);
	rewind(in);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, in), (size_t)n);
	buf[n] = '\0';
	fclose(in);
	return buf;
}

static void check_doc(const char *rel, const char *begin, const char *end,
		      enum opt_doc_format fmt)
{
	char path[PATH_MAX], *text = NULL, *want = doc_text(fmt), *b, *e = NULL;

	snprintf(path, sizeof(path), "%s/%s", SRC_ROOT, rel);
	text = slurp(path);
	b = strstr(text, begin);
	if (!b || !(b = strchr(b, '\n')) || !(e = strstr(++b, end)))
		fail_msg("%s: no \"%s\" ... \"%s\" lines around the option list", rel, begin, end);
	if ((size_t)(e - b) != strlen(want) || memcmp(b, want, strlen(want))) {
		const char *regen = getenv("SPW_REGEN_DOCS");
		FILE *out;
		if (!regen || strcmp(regen, "1"))
			fail_msg("%s: the option list differs from fs/options.c's table; "
				 "regenerate it: " REGEN,
				 rel);
		out = fopen(path, "w");
		assert_non_null(out);
		fprintf(out, "%.*s%s%s", (int)(b - text), text, want, e);
		assert_int_equal(fclose(out), 0);
		print_message("rewrote the option list of %s\n", path);
	}
	free(text);
	free(want);
}

static void test_docs_match_table(void **state)
{
	check_doc("man/spillway.8", ".\\\" options: begin", ".\\\" options: end", OPT_DOC_MAN);
	check_doc("README.md", "<!-- options: begin", "<!-- options: end", OPT_DOC_README);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_bad_sizes),
	    T(test_bad_fractions),
	    T(test_bad_words),
	    T(test_bad_elastic),
	    T(test_elastic_values),
	    T(test_mem_reserve_follows_cgroup),
	    T(test_io_uring_option),
	    T(test_unknown_option),
	    T(test_bad_mountpoint),
	    T(test_bad_hot_dir),
	    T(test_rejected_hot_dir_inside_mountpoint_is_removed),
	    T(test_failure_removes_created_hot_dir),
	    T(test_allow_other),
	    T(test_s3_state),
	    T(test_bad_nvme),
	    T(test_defaults),
	    T(test_default_hot_dir),
	    T(test_explicit_values),
	    T(test_hot_dir_created),
	    T(test_fuse_options_kept),
	    T(test_options_in_several_args),
	    T(test_fstab_words),
	    T(test_main_pipeline_foreground),
	    T(test_main_pipeline_debug_flag),
	    T(test_table_defaults_parse),
	    T(test_table_bounds),
	    T(test_help_lists_every_option),
	    T(test_docs_match_table),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
