/*
 * segspill — the segment writer alone: CPU seconds per GiB of spilling a
 * hot (tmpfs) file into segments of an nvme store, as the evictor does
 * (seg_writer_add_fd per chunk, 64 MiB segments, finish = fdatasync +
 * rename), without FUSE, the index or the evictor: what bench_cpu's spill
 * step costs in tier/segment.c and the store. CPU is getrusage(RUSAGE_SELF)
 * (every thread, io_uring workers included) around the writes only.
 *
 * Build (from the repo, after the build dir is built):
 *   cc -O2 -I. -o build/segspill bench/segspill.c build/libspw_segment.a \
 *      build/libspw_store.a build/libspw_index.a build/libspw_common.a -luring -lpthread
 * Usage: segspill HOT_FILE COLD_DIR SIZE_MIB [CHUNK_MIB [REPS]]
 *   HOT_FILE is created (SIZE_MIB of random bytes, on a tmpfs for the real
 *   thing) and removed at the end; SPW_NO_URING=1 makes the store write with pwrite
 *   on the calling thread instead of the uring loop. Prints "cpu_s_per_gib user sys wall_s" per rep.
 */
#define _GNU_SOURCE
#include "tier/segment.h"
#include "tier/store/store.h"
#include "common/uring.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static double tv(struct timeval t)
{
	return t.tv_sec + t.tv_usec / 1e6;
}

int main(int argc, char **argv)
{
	const char *dirs[1];
	struct store *st;
	uint64_t size, chunk;
	uint8_t uuid[16] = {1};
	int fd, reps;

	if (argc < 4) {
		fprintf(stderr, "usage: segspill HOT_FILE COLD_DIR SIZE_MIB [CHUNK_MIB [REPS]]\n");
		return 2;
	}
	size = strtoull(argv[3], NULL, 0) << 20;
	chunk = (argc > 4 ? strtoull(argv[4], NULL, 0) : 4) << 20;
	reps = argc > 5 ? atoi(argv[5]) : 3;
	dirs[0] = argv[2];
	if (getenv("SPW_NO_URING"))
		uring_disable(); /* the store's appends: pwrite on this thread */
	if (store_nvme_open(dirs, 1, &st) < 0) {
		perror("store");
		return 1;
	}
	fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	{
		char *b = malloc(1 << 20);
		srand(1);
		for (int i = 0; i < (1 << 20); i++)
			b[i] = (char)rand();
		for (uint64_t o = 0; o < size; o += 1 << 20) {
			b[0] = (char)o;
			if (pwrite(fd, b, 1 << 20, (off_t)o) != 1 << 20) {
				perror("pwrite");
				return 1;
			}
		}
		free(b);
	}
	for (int r = 0; r < reps; r++) {
		struct rusage r0, r1;
		struct timespec t0, t1;
		struct seg_writer *w = NULL;
		uint64_t id = 1000 + r;

		getrusage(RUSAGE_SELF, &r0);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (uint64_t c = 0; c * chunk < size; c++) {
			if (!w && seg_writer_new(st, uuid, id, 64 << 20, &w) < 0)
				return 1;
			if (seg_writer_add_fd(w, 7, c, 1, fd, c * chunk, (uint32_t)chunk, NULL, NULL) < 0) {
				fprintf(stderr, "add_fd failed\n");
				return 1;
			}
			if (seg_writer_bytes(w) >= (64u << 20)) {
				if (seg_writer_finish(w, NULL, NULL) < 0)
					return 1;
				w = NULL;
				id += 100;
			}
		}
		if (w && seg_writer_finish(w, NULL, NULL) < 0)
			return 1;
		clock_gettime(CLOCK_MONOTONIC, &t1);
		getrusage(RUSAGE_SELF, &r1);
		{
			double u = tv(r1.ru_utime) - tv(r0.ru_utime);
			double s = tv(r1.ru_stime) - tv(r0.ru_stime);
			double g = (double)size / (1 << 30);

			printf("%.3f %.3f %.3f %.3f\n", (u + s) / g, u / g, s / g,
			       (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
		}
		/* the segments go: the next rep writes afresh */
		for (uint64_t k = 1000 + r; k < 1000 + r + 100 * (size / (64 << 20) + 2); k += 100)
			store_remove(st, k, 0);
	}
	close(fd);
	unlink(argv[1]);
	store_close(st);
	return 0;
}
