/*
 * metaops — time one metadata phase over N entries of one directory, or
 * build a tree of many empty files as fast as one process can.
 *
 * Purpose: the metadata rates of bench/bench_fs.py (create, stat, unlink) and
 * bench/bench_journal.py (those plus mkdir, rmdir, rename, setxattr, chmod,
 * and the 1M-file tree), measured inside one process so that process start-up
 * is not counted. Each phase is a separate run so the driver can drop caches
 * or switch targets between phases. Single-threaded, except `tree` with JOBS
 * > 1 (that many forked children, each filling its share of the directories).
 *
 * Names: files DIR/m%07d and directories DIR/d%07d for FIRST <= i < FIRST+N
 * (FIRST defaults to 0; slices let a driver interleave one phase across
 * targets); rename moves each m%07d to r%07d and back (2N renames, so the
 * directory is as it was); setxattr sets user.bench (32 bytes) on each file;
 * chmod flips each file to 0600. tree makes DIR/d%04d (NDIRS of them) each holding PERDIR
 * files f%07d (numbered across the tree).
 *
 * Build: cc -O2 -Wall -o metaops bench/metaops.c
 * Usage: metaops create|stat|unlink|mkdir|rmdir|rename|setxattr|chmod DIR N [FIRST]
 *        metaops tree DIR NDIRS PERDIR [JOBS]
 * Prints one line "PHASE OPS SECONDS OPS_PER_SEC" (OPS is N, 2N for rename,
 * NDIRS*PERDIR for tree: directories are not counted); exit 1 on the first
 * error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

enum phase { PH_CREATE, PH_STAT, PH_UNLINK, PH_MKDIR, PH_RMDIR, PH_RENAME, PH_SETXATTR, PH_CHMOD };

static const char *const phase_names[] = {"create", "stat",   "unlink",	  "mkdir",
					  "rmdir",  "rename", "setxattr", "chmod"};

static double now_sec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int create_one(const char *path)
{
	int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);

	if (fd < 0)
		return -errno;
	if (close(fd) < 0)
		return -errno;
	return 0;
}

/* Returns 0 or -errno for the one operation of @ph on entry @i of @dir
 * (@back: the rename back, r -> m); @path gets the name used (for the error
 * message). */
static int do_one(enum phase ph, const char *dir, long i, int back, char *path, size_t len)
{
	static const char val[32] = "spillway-bench-xattr-value-32by";
	char to[4096];
	struct stat st;

	snprintf(path, len, "%s/%c%07ld", dir, ph == PH_MKDIR || ph == PH_RMDIR ? 'd' : 'm', i);
	switch (ph) {
	case PH_CREATE:
		return create_one(path);
	case PH_STAT:
		return stat(path, &st) < 0 ? -errno : 0;
	case PH_UNLINK:
		return unlink(path) < 0 ? -errno : 0;
	case PH_MKDIR:
		return mkdir(path, 0755) < 0 ? -errno : 0;
	case PH_RMDIR:
		return rmdir(path) < 0 ? -errno : 0;
	case PH_RENAME:
		snprintf(to, sizeof(to), "%s/r%07ld", dir, i);
		if (back)
			return rename(to, path) < 0 ? -errno : 0;
		return rename(path, to) < 0 ? -errno : 0;
	case PH_SETXATTR:
		return setxattr(path, "user.bench", val, sizeof(val), 0) < 0 ? -errno : 0;
	case PH_CHMOD:
		return chmod(path, 0600) < 0 ? -errno : 0;
	}
	return -EINVAL;
}

static long parse_count(const char *s)
{
	char *end;
	long n;

	errno = 0;
	n = strtol(s, &end, 10);
	if (errno || *end || n <= 0)
		return -1;
	return n;
}

/* Directories [first, ndirs) stepping by @step, PERDIR files each. */
static int tree_part(const char *dir, long first, long step, long ndirs, long perdir)
{
	char path[4096];
	size_t n;

	for (long d = first; d < ndirs; d += step) {
		n = (size_t)snprintf(path, sizeof(path), "%s/d%04ld", dir, d);
		if (n + 10 >= sizeof(path)) {
			fprintf(stderr, "metaops: %s: path too long\n", dir);
			return -1;
		}
		if (mkdir(path, 0755) < 0 && errno != EEXIST) {
			fprintf(stderr, "metaops: mkdir %s: %s\n", path, strerror(errno));
			return -1;
		}
		for (long f = 0; f < perdir; f++) {
			int ret;

			snprintf(path + n, sizeof(path) - n, "/f%07ld", d * perdir + f);
			ret = create_one(path);
			if (ret < 0) {
				fprintf(stderr, "metaops: create %s: %s\n", path, strerror(-ret));
				return -1;
			}
		}
	}
	return 0;
}

static int run_tree(const char *dir, long ndirs, long perdir, long jobs)
{
	pid_t pids[64];
	double t0, dt;
	int status, failed = 0;
	pid_t parent = getpid();
	long j;

	if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		fprintf(stderr, "metaops: mkdir %s: %s\n", dir, strerror(errno));
		return 1;
	}
	t0 = now_sec();
	if (jobs == 1) {
		failed = tree_part(dir, 0, 1, ndirs, perdir) < 0;
	} else {
		for (j = 0; j < jobs; j++) {
			pids[j] = fork();
			if (pids[j] < 0) {
				perror("metaops: fork");
				failed = 1;
				break;
			}
			if (pids[j] == 0) {
				/* a driver that kills us (timeout, ^C) kills the children too */
				if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
					_exit(1);
				_exit(tree_part(dir, j, jobs, ndirs, perdir) < 0 ? 1 : 0);
			}
		}
		for (long k = 0; k < j; k++)
			if (waitpid(pids[k], &status, 0) < 0 || !WIFEXITED(status) ||
			    WEXITSTATUS(status) != 0)
				failed = 1;
	}
	if (failed)
		return 1;
	dt = now_sec() - t0;
	if (dt <= 0)
		dt = 1e-9;
	printf("tree %ld %.6f %.1f\n", ndirs * perdir, dt, ndirs * perdir / dt);
	return 0;
}

int main(int argc, char **argv)
{
	char path[4096];
	enum phase ph;
	double t0, dt;
	long n, i, ops, first = 0;
	int ret, k;

	if (argc >= 5 && argc <= 6 && strcmp(argv[1], "tree") == 0) {
		long ndirs = parse_count(argv[3]), perdir = parse_count(argv[4]);
		long jobs = argc == 6 ? parse_count(argv[5]) : 1;

		if (ndirs <= 0 || ndirs > 10000 || perdir <= 0 || jobs <= 0 || jobs > 64)
			goto usage;
		return run_tree(argv[2], ndirs, perdir, jobs);
	}
	if (argc != 4 && argc != 5)
		goto usage;
	for (k = 0; k < (int)(sizeof(phase_names) / sizeof(phase_names[0])); k++)
		if (strcmp(argv[1], phase_names[k]) == 0)
			break;
	if (k == (int)(sizeof(phase_names) / sizeof(phase_names[0])))
		goto usage;
	ph = (enum phase)k;
	n = parse_count(argv[3]);
	if (argc == 5 && strcmp(argv[4], "0") != 0)
		first = parse_count(argv[4]);
	if (n <= 0 || first < 0 || first + n > 10000000)
		goto usage;

	ops = ph == PH_RENAME ? 2 * n : n;
	t0 = now_sec();
	for (i = 0; i < ops; i++) {
		/* rename: there for the first n, then back */
		ret = do_one(ph, argv[2], first + i % n, i >= n, path, sizeof(path));
		if (ret < 0) {
			fprintf(stderr, "metaops: %s %s: %s\n", argv[1], path, strerror(-ret));
			return 1;
		}
	}
	dt = now_sec() - t0;
	if (dt <= 0)
		dt = 1e-9;
	printf("%s %ld %.6f %.1f\n", argv[1], ops, dt, ops / dt);
	return 0;

usage:
	fprintf(
	    stderr,
	    "usage: metaops create|stat|unlink|mkdir|rmdir|rename|setxattr|chmod DIR N [FIRST]\n"
	    "       metaops tree DIR NDIRS PERDIR [JOBS]\n");
	return 2;
}
