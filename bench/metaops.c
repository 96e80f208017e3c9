/*
 * metaops — time one metadata phase over N files in one directory.
 *
 * Purpose: the metadata rates of bench/bench_fs.py (create, stat, unlink),
 * measured inside one process so that process start-up is not counted.
 * Each phase is a separate run so the driver can drop caches between phases.
 * Single-threaded; touches only DIR/m%07d for 0 <= i < N.
 *
 * Build: cc -O2 -Wall -o metaops bench/metaops.c
 * Usage: metaops create|stat|unlink DIR N
 * Prints one line "PHASE N SECONDS OPS_PER_SEC"; exit 1 on the first error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum phase { PH_CREATE, PH_STAT, PH_UNLINK };

static double now_sec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Returns 0 or -errno for the one operation of @ph on @path. */
static int do_one(enum phase ph, const char *path)
{
	struct stat st;
	int fd;

	switch (ph) {
	case PH_CREATE:
		fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
		if (fd < 0)
			return -errno;
		if (close(fd) < 0)
			return -errno;
		return 0;
	case PH_STAT:
		return stat(path, &st) < 0 ? -errno : 0;
	case PH_UNLINK:
		return unlink(path) < 0 ? -errno : 0;
	}
	return -EINVAL;
}

int main(int argc, char **argv)
{
	char path[4096];
	enum phase ph;
	double t0, dt;
	long n, i;
	char *end;
	int ret;

	if (argc != 4)
		goto usage;
	if (strcmp(argv[1], "create") == 0)
		ph = PH_CREATE;
	else if (strcmp(argv[1], "stat") == 0)
		ph = PH_STAT;
	else if (strcmp(argv[1], "unlink") == 0)
		ph = PH_UNLINK;
	else
		goto usage;
	errno = 0;
	n = strtol(argv[3], &end, 10);
	if (errno || *end || n <= 0)
		goto usage;

	t0 = now_sec();
	for (i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/m%07ld", argv[2], i);
		ret = do_one(ph, path);
		if (ret < 0) {
			fprintf(stderr, "metaops: %s %s: %s\n", argv[1], path, strerror(-ret));
			return 1;
		}
	}
	dt = now_sec() - t0;
	if (dt <= 0)
		dt = 1e-9;
	printf("%s %ld %.6f %.1f\n", argv[1], n, dt, n / dt);
	return 0;

usage:
	fprintf(stderr, "usage: metaops create|stat|unlink DIR N\n");
	return 2;
}
