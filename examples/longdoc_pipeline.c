/*
 * longdoc_pipeline — the problem statement's pipeline, on plain files.
 * Build: part of the CMake build (build/examples/longdoc_pipeline).
 * Run:   longdoc_pipeline DIR [-p PRODUCERS] [-t TOTAL] [-s FILE_SIZE]
 *
 * Many producers each write large "activation tensor" files (random data,
 * crc32c computed while writing) into DIR concurrently; then one aggregator
 * reads every file back and verifies its checksum. On a RAM-only object
 * store this dies with "object store full" once TOTAL exceeds RAM; on a
 * spillway mount with a cold tier it completes. Exit 0 only if every byte
 * verified.
 */
#include "common/crc32c.h"
#include "common/size.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BLOCK (1 << 20)

struct job {
	const char *dir;
	int id, nprod;
	uint64_t nfiles, file_size;
	uint32_t *crcs; /* one per file */
	int failed;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void fill(uint64_t *state, unsigned char *buf, size_t len)
{
	uint64_t x = *state;
	for (size_t i = 0; i + 8 <= len; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(buf + i, &x, 8);
	}
	*state = x;
}

static void *producer(void *arg)
{
	struct job *j = arg;
	unsigned char *buf = malloc(BLOCK);
	char path[4096];

	for (uint64_t f = (uint64_t)j->id; f < j->nfiles && buf; f += (uint64_t)j->nprod) {
		uint64_t state = 0x9E3779B97F4A7C15ULL * (f + 1), done = 0;
		uint32_t crc = 0;
		int fd;
		snprintf(path, sizeof(path), "%s/tensor-%05llu.bin", j->dir, (unsigned long long)f);
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0) {
			fprintf(stderr, "producer %d: %s: %s\n", j->id, path, strerror(errno));
			j->failed = 1;
			break;
		}
		while (done < j->file_size) {
			size_t n = j->file_size - done < BLOCK ? j->file_size - done : BLOCK;
			ssize_t w;
			fill(&state, buf, n);
			crc = crc32c(crc, buf, n);
			w = write(fd, buf, n);
			if (w != (ssize_t)n) {
				fprintf(stderr, "producer %d: write %s: %s\n", j->id, path,
					w < 0 ? strerror(errno) : "short write");
				j->failed = 1;
				break;
			}
			done += n;
		}
		if (close(fd) < 0) {
			fprintf(stderr, "producer %d: close %s: %s\n", j->id, path,
				strerror(errno));
			j->failed = 1;
		}
		j->crcs[f] = crc;
		if (j->failed)
			break;
	}
	free(buf);
	return NULL;
}

int main(int argc, char **argv)
{
	uint64_t total = 1ULL << 30, file_size = 64ULL << 20;
	int nprod = 8, opt, bad = 0;
	unsigned char *buf;
	double t0, t1, t2;

	while ((opt = getopt(argc, argv, "p:t:s:")) != -1) {
		switch (opt) {
		case 'p':
			nprod = atoi(optarg);
			break;
		case 't':
			bad |= size_parse(optarg, &total) < 0;
			break;
		case 's':
			bad |= size_parse(optarg, &file_size) < 0;
			break;
		default:
			bad = 1;
		}
	}
	if (bad || optind != argc - 1 || nprod < 1 || file_size == 0) {
		fprintf(stderr, "usage: %s DIR [-p PRODUCERS] [-t TOTAL] [-s FILE_SIZE]\n",
			argv[0]);
		return 2;
	}
	uint64_t nfiles = (total + file_size - 1) / file_size;
	uint32_t *crcs = calloc(nfiles, sizeof(*crcs));
	struct job *jobs = calloc((size_t)nprod, sizeof(*jobs));
	pthread_t *th = calloc((size_t)nprod, sizeof(*th));
	buf = malloc(BLOCK);
	if (!crcs || !jobs || !th || !buf)
		return 1;

	printf("pipeline: %d producers, %llu files x %llu MiB = %llu MiB into %s\n", nprod,
	       (unsigned long long)nfiles, (unsigned long long)(file_size >> 20),
	       (unsigned long long)(nfiles * file_size >> 20), argv[optind]);
	t0 = now();
	for (int i = 0; i < nprod; i++) {
		jobs[i] = (struct job){.dir = argv[optind],
				       .id = i,
				       .nprod = nprod,
				       .nfiles = nfiles,
				       .file_size = file_size,
				       .crcs = crcs};
		pthread_create(&th[i], NULL, producer, &jobs[i]);
	}
	for (int i = 0; i < nprod; i++) {
		pthread_join(th[i], NULL);
		bad |= jobs[i].failed;
	}
	t1 = now();
	printf("produce: %.2f s, %.0f MiB/s%s\n", t1 - t0,
	       (double)(nfiles * file_size >> 20) / (t1 - t0), bad ? " (FAILED)" : "");

	/* aggregator: read everything back and verify */
	uint64_t verified = 0;
	for (uint64_t f = 0; f < nfiles && !bad; f++) {
		char path[4096];
		uint32_t crc = 0;
		uint64_t got = 0;
		ssize_t r;
		int fd;
		snprintf(path, sizeof(path), "%s/tensor-%05llu.bin", argv[optind],
			 (unsigned long long)f);
		fd = open(path, O_RDONLY);
		if (fd < 0) {
			fprintf(stderr, "aggregator: %s: %s\n", path, strerror(errno));
			bad = 1;
			break;
		}
		while ((r = read(fd, buf, BLOCK)) > 0) {
			crc = crc32c(crc, buf, (size_t)r);
			got += (uint64_t)r;
		}
		if (r < 0 || got != file_size || crc != crcs[f]) {
			fprintf(stderr, "aggregator: %s: %s\n", path,
				r < 0 ? strerror(errno) : "checksum or size mismatch");
			bad = 1;
		}
		close(fd);
		verified += got;
	}
	t2 = now();
	if (!bad)
		printf("aggregate: %.2f s, %.0f MiB/s, %llu files verified\n", t2 - t1,
		       (double)(verified >> 20) / (t2 - t1), (unsigned long long)nfiles);
	printf("%s: %llu MiB written and verified in %.2f s\n", bad ? "FAILED" : "OK",
	       (unsigned long long)(verified >> 20), t2 - t0);
	free(buf);
	free(crcs);
	free(jobs);
	free(th);
	return bad ? 1 : 0;
}
