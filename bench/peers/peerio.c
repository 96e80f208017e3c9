/*
 * peerio — the client side of bench/peers: small-object and big-file I/O with
 * verified contents, timed inside one process (CLOCK_MONOTONIC).
 *
 *   peerio small-write DIR N SIZE THREADS   N files DIR/dNNN/oNNNNNNN of SIZE bytes
 *   peerio small-read  DIR N SIZE THREADS   read all back in a random order, verify
 *   peerio write FILE SIZE SEED             one file, 1 MiB writes
 *   peerio read FILE SIZE SEED              open + first 4 KiB (ttfb), then the rest
 *
 * Prints one line "OK key=value..." (exit 0) or "ERR err=NAME done=X ..."
 * (exit 1): a failure is a result, reported with how far it got. Contents are
 * an xorshift stream seeded per file, so every byte read back is checked.
 * Built by peers.py with cc -O2 -pthread.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BLOCK (1 << 20)

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Fill buf with the stream for (seed, offset); offset is a multiple of 8. */
static void fill(uint64_t seed, uint64_t off, unsigned char *buf, size_t len)
{
	for (size_t i = 0; i + 8 <= len; i += 8) {
		uint64_t x = (seed + 1) * 0x9E3779B97F4A7C15ULL ^ ((off + i) >> 3);
		x ^= x >> 33;
		x *= 0xff51afd7ed558ccdULL;
		x ^= x >> 29;
		memcpy(buf + i, &x, 8);
	}
}

static const char *errname(int e)
{
	switch (e) {
	case ENOSPC:
		return "ENOSPC";
	case EIO:
		return "EIO";
	case ENOENT:
		return "ENOENT";
	case EDQUOT:
		return "EDQUOT";
	case ENOTCONN:
		return "ENOTCONN";
	case EBADMSG:
		return "BADDATA";
	case ETIMEDOUT:
		return "ETIMEDOUT";
	default:
		return strerrorname_np(e) ? strerrorname_np(e) : "E?";
	}
}

struct small {
	const char *dir;
	uint64_t n, size;
	int threads, id, reading;
	uint64_t *order;
	uint64_t done;
	int err;
};

static void small_path(char *p, size_t len, const char *dir, uint64_t i)
{
	snprintf(p, len, "%s/d%03llu/o%07llu", dir, (unsigned long long)(i / 1000),
		 (unsigned long long)i);
}

static int write_all(int fd, const unsigned char *b, size_t n)
{
	while (n) {
		ssize_t w = write(fd, b, n);
		if (w < 0)
			return -errno;
		if (w == 0)
			return -EIO;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Reads exactly n bytes unless EOF; returns bytes read or -errno. */
static ssize_t read_full(int fd, unsigned char *b, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, b + got, n - got);
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

static void *small_worker(void *arg)
{
	struct small *s = arg;
	unsigned char *want = malloc(s->size), *got = malloc(s->size);
	char path[4096];
	if (!want || !got) {
		s->err = ENOMEM;
		goto out;
	}
	for (uint64_t k = (uint64_t)s->id; k < s->n; k += (uint64_t)s->threads) {
		uint64_t i = s->reading ? s->order[k] : k;
		int fd, rc = 0;
		small_path(path, sizeof(path), s->dir, i);
		fill(i, 0, want, s->size);
		if (!s->reading) {
			fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
			if (fd < 0) {
				s->err = errno;
				break;
			}
			rc = write_all(fd, want, s->size);
		} else {
			fd = open(path, O_RDONLY);
			if (fd < 0) {
				s->err = errno;
				break;
			}
			ssize_t r = read_full(fd, got, s->size);
			rc = r < 0						      ? (int)r
			     : ((uint64_t)r != s->size || memcmp(got, want, s->size)) ? -EBADMSG
										      : 0;
		}
		if (close(fd) < 0 && !rc)
			rc = -errno;
		if (rc) {
			s->err = -rc;
			break;
		}
		s->done++;
	}
out:
	free(want);
	free(got);
	return NULL;
}

static int run_small(const char *dir, uint64_t n, uint64_t size, int threads, int reading)
{
	struct small *s = calloc((size_t)threads, sizeof(*s));
	pthread_t *th = calloc((size_t)threads, sizeof(*th));
	uint64_t *order = calloc(n, sizeof(*order)), done = 0;
	int err = 0;
	char path[4096];
	if (!s || !th || !order)
		return 2;
	if (!reading)
		for (uint64_t d = 0; d <= (n - 1) / 1000; d++) {
			snprintf(path, sizeof(path), "%s/d%03llu", dir, (unsigned long long)d);
			if (mkdir(path, 0755) < 0 && errno != EEXIST) {
				printf("ERR err=%s done=0 secs=0\n", errname(errno));
				return 1;
			}
		}
	for (uint64_t i = 0; i < n; i++)
		order[i] = i;
	srandom(12345);
	for (uint64_t i = n - 1; i > 0; i--) { /* Fisher-Yates */
		uint64_t j = ((uint64_t)random() << 31 ^ (uint64_t)random()) % (i + 1),
			 t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	double t0 = now();
	for (int i = 0; i < threads; i++) {
		s[i] = (struct small){.dir = dir,
				      .n = n,
				      .size = size,
				      .threads = threads,
				      .id = i,
				      .reading = reading,
				      .order = order};
		pthread_create(&th[i], NULL, small_worker, &s[i]);
	}
	for (int i = 0; i < threads; i++) {
		pthread_join(th[i], NULL);
		done += s[i].done;
		if (s[i].err && !err)
			err = s[i].err;
	}
	double secs = now() - t0;
	if (err)
		printf("ERR err=%s done=%llu secs=%.3f\n", errname(err), (unsigned long long)done,
		       secs);
	else
		printf("OK done=%llu secs=%.3f\n", (unsigned long long)done, secs);
	return err ? 1 : 0;
}

static int run_write(const char *path, uint64_t size, uint64_t seed)
{
	unsigned char *b = malloc(BLOCK);
	uint64_t done = 0;
	int rc = 0;
	double t0 = now();
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || !b)
		rc = fd < 0 ? -errno : -ENOMEM;
	while (!rc && done < size) {
		size_t n = size - done < BLOCK ? size - done : BLOCK;
		fill(seed, done, b, n);
		rc = write_all(fd, b, n);
		if (!rc)
			done += n;
	}
	if (fd >= 0 && close(fd) < 0 && !rc)
		rc = -errno;
	double secs = now() - t0;
	if (rc)
		printf("ERR err=%s done=%llu secs=%.3f\n", errname(-rc), (unsigned long long)done,
		       secs);
	else
		printf("OK done=%llu secs=%.3f\n", (unsigned long long)done, secs);
	free(b);
	return rc ? 1 : 0;
}

static int run_read(const char *path, uint64_t size, uint64_t seed)
{
	unsigned char *b = malloc(BLOCK), *w = malloc(BLOCK);
	uint64_t done = 0;
	double t0 = now(), ttfb = 0;
	int rc = 0;
	int fd = open(path, O_RDONLY);
	if (fd < 0 || !b || !w)
		rc = fd < 0 ? -errno : -ENOMEM;
	while (!rc && done < size) {
		/* the first read is 4 KiB: time to first byte */
		size_t n = done == 0 ? 4096 : (size - done < BLOCK ? size - done : BLOCK);
		if (n > size - done)
			n = size - done;
		ssize_t r = read_full(fd, b, n);
		if (r < 0) {
			rc = (int)r;
			break;
		}
		if ((size_t)r != n) {
			rc = -EBADMSG;
			break;
		}
		if (done == 0)
			ttfb = now() - t0;
		fill(seed, done, w, n);
		if (memcmp(b, w, n)) {
			rc = -EBADMSG;
			break;
		}
		done += n;
	}
	if (fd >= 0)
		close(fd);
	double secs = now() - t0;
	if (rc)
		printf("ERR err=%s done=%llu secs=%.3f\n", errname(-rc), (unsigned long long)done,
		       secs);
	else
		printf("OK done=%llu secs=%.3f ttfb=%.6f\n", (unsigned long long)done, secs, ttfb);
	free(b);
	free(w);
	return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 6 && !strcmp(argv[1], "small-write"))
		return run_small(argv[2], strtoull(argv[3], 0, 10), strtoull(argv[4], 0, 10),
				 atoi(argv[5]), 0);
	if (argc == 6 && !strcmp(argv[1], "small-read"))
		return run_small(argv[2], strtoull(argv[3], 0, 10), strtoull(argv[4], 0, 10),
				 atoi(argv[5]), 1);
	if (argc == 5 && !strcmp(argv[1], "write"))
		return run_write(argv[2], strtoull(argv[3], 0, 10), strtoull(argv[4], 0, 10));
	if (argc == 5 && !strcmp(argv[1], "read"))
		return run_read(argv[2], strtoull(argv[3], 0, 10), strtoull(argv[4], 0, 10));
	fprintf(stderr, "usage: peerio small-write|small-read DIR N SIZE THREADS\n"
			"       peerio write|read FILE SIZE SEED\n");
	return 2;
}
