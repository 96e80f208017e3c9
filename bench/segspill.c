/*
 * segspill — the segment writer and reader alone: CPU seconds per GiB of
 * spilling a hot (tmpfs) file into segments of an nvme store, as the
 * evictor does (seg_writer_add_fd per chunk, 64 MiB segments, finish =
 * fdatasync + rename), and of restoring those chunks into a fresh tmpfs
 * file, as a whole-chunk restore does, without FUSE, the index or the
 * evictor: what bench_cpu's spill step costs in tier/segment*.c and the
 * store, and the restore part of its read step. CPU is
 * getrusage(RUSAGE_SELF) (every thread, io_uring workers included) around
 * each phase only.
 *
 * Build (from the repo, after the build dir is built):
 *   cc -O2 -I. -o build/segspill bench/segspill.c build/libspw_segment.a \
 *      build/libspw_store.a build/libspw_index.a build/libspw_common.a -luring -lpthread
 * Usage: segspill HOT_FILE COLD_DIR SIZE_MIB [CHUNK_MIB [REPS]]
 *   HOT_FILE is created (SIZE_MIB of random bytes, on a tmpfs for the real
 *   thing) and removed at the end; HOT_FILE.r is the restore's target.
 *   SPW_NO_URING=1 makes the store write with pwrite on the calling thread
 *   instead of the uring loop; SPW_SEGSPILL_STAGE=1 makes the writer copy
 *   through its stage (pread, the v2 way) instead of appending straight
 *   from the hot file's mapped pages, and the restore read into a buffer
 *   and pwrite (the v2 way) instead of reading into a mapping of the target
 *   (seg_read_into, format v3); SPW_SEGSPILL_BUF=1 reads each chunk into one
 *   reused aligned buffer instead of a tmpfs file (a direct read's reply
 *   buffer: through a window and a copy, or in place); SPW_SEGSPILL_NO_RESTORE=1
 *   skips the restore.
 *   Prints per rep "spill cpu_s_per_gib user sys wall_s" and, unless
 *   skipped, "restore cpu_s_per_gib user sys wall_s".
 *   Built against the v2 code (which has no seg_read_into), define
 *   SEGSPILL_V2 (-DSEGSPILL_V2): the v2 calls only.
 */
#define _GNU_SOURCE
#include "tier/segment/segment.h"
#ifndef SEGSPILL_V2
#include "tier/segment/segment_i.h"
#endif
#include "tier/store/store.h"
#include "common/uring.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static double tv(struct timeval t)
{
	return t.tv_sec + t.tv_usec / 1e6;
}

struct meter {
	struct rusage r0;
	struct timespec t0;
};

static void meter_start(struct meter *m)
{
	getrusage(RUSAGE_SELF, &m->r0);
	clock_gettime(CLOCK_MONOTONIC, &m->t0);
}

static void meter_print(const struct meter *m, const char *what, uint64_t bytes)
{
	struct rusage r1;
	struct timespec t1;
	double u, s, g = (double)bytes / (1 << 30);

	clock_gettime(CLOCK_MONOTONIC, &t1);
	getrusage(RUSAGE_SELF, &r1);
	u = tv(r1.ru_utime) - tv(m->r0.ru_utime);
	s = tv(r1.ru_stime) - tv(m->r0.ru_stime);
	printf("%s %.3f %.3f %.3f %.3f\n", what, (u + s) / g, u / g, s / g,
	       (t1.tv_sec - m->t0.tv_sec) + (t1.tv_nsec - m->t0.tv_nsec) / 1e9);
}

/* Restore chunk c (entry e of segment id) into fd at c * chunk: the v2 way
 * (read into a buffer, pwrite the extents) or, format v3, read straight
 * into a shared mapping of the target's range. With buf (the admission
 * path's direct read into a reply buffer): into buf instead, the v2 way
 * through a window and a copy (seg_read_range), v3 in place
 * (seg_read_into). 0 or -errno. */
static int restore_one(struct store *st, uint64_t id, const struct seg_entry *e, int fd,
		       uint64_t base, uint32_t len, int stage, void *buf)
{
	struct seg_chunk sc;
	int ret;

	if (buf && stage)
		return seg_read_range(st, id, 0, e, 0, len, buf);
#ifndef SEGSPILL_V2
	if (buf)
		return seg_read_into(st, id, 0, e, 0, len, buf, 0, NULL);
	if (!stage) {
		void *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)base);

		if (map == MAP_FAILED)
			return -errno;
		ret = seg_read_into(st, id, 0, e, 0, len, map, SEG_INTO_HOLES, NULL);
		munmap(map, len);
		return ret;
	}
#endif
	if ((ret = seg_read_chunk(st, id, 0, e, &sc)) < 0)
		return ret;
	for (uint32_t i = 0, pos = 0; ret == 0 && i < sc.next; pos += sc.ext[i].len, i++)
		if (pwrite(fd, sc.data + pos, sc.ext[i].len, (off_t)(base + sc.ext[i].off)) !=
		    (ssize_t)sc.ext[i].len)
			ret = -EIO;
	seg_chunk_free(&sc);
	return ret;
}

int main(int argc, char **argv)
{
	const char *dirs[1];
	struct store *st;
	uint64_t size, chunk, nchunks, *segs;
	struct seg_entry *ents;
	char rpath[4200];
	void *rbuf = NULL;
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
	int stage = getenv("SPW_SEGSPILL_STAGE") != NULL;
#ifdef SEGSPILL_V2
	stage = 1;
#else
	seg_no_direct = stage; /* through the stage: pread + copy */
#endif
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
	nchunks = (size + chunk - 1) / chunk;
	ents = calloc(nchunks, sizeof(*ents));
	segs = calloc(nchunks, sizeof(*segs));
	snprintf(rpath, sizeof(rpath), "%s.r", argv[1]);
	if (getenv("SPW_SEGSPILL_BUF")) { /* read into one reused aligned buffer */
		rbuf = seg_buf_alloc(chunk);
		memset(rbuf, 0, chunk); /* faulted in, as a pooled reply buffer */
	}
	for (int r = 0; r < reps; r++) {
		struct seg_writer *w = NULL;
		struct meter m;
		uint64_t id = 1000 + r;
		int rfd;

		meter_start(&m);
		for (uint64_t c = 0; c < nchunks; c++) {
			if (!w && seg_writer_new(st, uuid, id, 64 << 20, &w) < 0)
				return 1;
#ifdef SEGSPILL_V2
			if (seg_writer_add_fd(w, 7, c, 1, fd, c * chunk, (uint32_t)chunk, &ents[c]) < 0) {
#else
			if (seg_writer_add_fd(w, 7, c, 1, fd, c * chunk, (uint32_t)chunk, NULL,
					      &ents[c]) < 0) {
#endif
				fprintf(stderr, "add_fd failed\n");
				return 1;
			}
			segs[c] = id;
			if (seg_writer_bytes(w) >= (64u << 20)) {
				if (seg_writer_finish(w, NULL, NULL) < 0)
					return 1;
				w = NULL;
				id += 100;
			}
		}
		if (w && seg_writer_finish(w, NULL, NULL) < 0)
			return 1;
		meter_print(&m, "spill", size);
		if (!getenv("SPW_SEGSPILL_NO_RESTORE")) {
			rfd = open(rpath, O_RDWR | O_CREAT | O_TRUNC, 0600);
			if (rfd < 0 || ftruncate(rfd, (off_t)size) < 0) {
				perror(rpath);
				return 1;
			}
			meter_start(&m);
			for (uint64_t c = 0; c < nchunks; c++)
				if (restore_one(st, segs[c], &ents[c], rfd, c * chunk,
						(uint32_t)chunk, stage, rbuf) < 0) {
					fprintf(stderr, "restore of chunk %llu failed\n",
						(unsigned long long)c);
					return 1;
				}
			meter_print(&m, "restore", size);
			close(rfd);
			unlink(rpath);
		}
		/* the segments go: the next rep writes afresh */
		for (uint64_t k = 1000 + r; k < 1000 + r + 100 * (size / (64 << 20) + 2); k += 100)
			store_remove(st, k, 0);
	}
	free(ents);
	free(segs);
	seg_buf_free(rbuf);
	close(fd);
	unlink(argv[1]);
	store_close(st);
	return 0;
}
