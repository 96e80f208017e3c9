/*
 * segment_fd.c — a chunk of the hot file into a segment: its data extents
 * (SEEK_DATA/SEEK_HOLE, walked once per file), and its bytes, straight from
 * the hot file's pages when the writer can take them (segment.h,
 * seg_writer_add_fd).
 *
 * DESIGN
 * - No bounce (format v3): an aligned record's data is appended from a
 *   read-only MAP_SHARED mapping of the chunk's range of the hot file:
 *   tmpfs extents are whole pages, so each one is page-aligned in the
 *   mapping as in the segment, and O_DIRECT takes the pages as they are;
 *   the block crcs are taken on them once, just before. Measured against
 *   v2's pread into the stage in bench/README ("No bounce").
 * - Only data extents are touched: a read fault on a hole of a shared
 *   tmpfs mapping allocates a page. The extents come from SEEK_DATA (never
 *   a hole); when the hole cache below answered (it may be stale after a
 *   punch), or the caller named them (an overlay's blocks), every page of
 *   an extent is checked resident (mincore, which faults nothing) before
 *   the mapping is used; one that is not (a hole, or a page swapped out)
 *   sends the chunk through pread, which allocates nothing.
 * - A truncate under a mapping is a SIGBUS on the next touch: the caller
 *   keeps the range from shrinking for the call (spill.c waits: truncate
 *   and punch wait for a chunk's mapped spill). A truncate before the
 *   mapping is seen (fstat after mmap): -ENODATA, as for pread.
 * - A write racing the spill may change the pages between their crcs and
 *   the O_DIRECT write: the caller's check (struct seg_fd_check) says
 *   whether one can have, and the record stands, is re-hashed, or is
 *   dropped (segment_write.c).
 * Threading: per call; the hole cache is per thread.
 */
#include "tier/segment/segment_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/*
 * Where the last SEEK_HOLE of a hot file found its hole. On tmpfs,
 * SEEK_HOLE walks every page from its start to the first hole, which in a
 * file all data is EOF: asked afresh for every chunk, spilling a file cost
 * O(file) per chunk, O(file^2) in all (a 256 MiB file: a third of the
 * spill's CPU; a 1 GiB file: 2.2 of the writer's 2.8 CPU-s/GiB). Each
 * thread remembers, for the last HOLE_CACHE files it spilled, that [d, h)
 * was data, and answers a later chunk inside it from that (segments of the
 * same file are written one after another by the same spill worker). A
 * stale answer can only call data what became a hole since (a punch, a
 * truncate and regrowth, the inode number of a deleted file reused): its
 * bytes are read (pread: no page is allocated) as zeros, what the hole
 * holds, or, through a mapping, found not resident first (mincore: see
 * map_chunk) and read with pread after all; a hole is never taken from here (SEEK_DATA, which skips holes
 * cheaply, is always asked past h, and data found right at h extends the
 * extent before it).
 */
#define HOLE_CACHE 8

struct hole_cache {
	dev_t dev;
	ino_t ino;
	uint64_t d, h; /* [d, h) was data; valid when h > d */
};

static _Thread_local struct hole_cache hole_cache[HOLE_CACHE];
static _Thread_local unsigned hole_cache_next;

/* This thread's entry for (dev, ino): its own, or the oldest one, emptied. */
static struct hole_cache *hole_cache_of(dev_t dev, ino_t ino)
{
	struct hole_cache *hc;

	for (unsigned i = 0; i < HOLE_CACHE; i++)
		if (hole_cache[i].ino == ino && hole_cache[i].dev == dev)
			return &hole_cache[i];
	hc = &hole_cache[hole_cache_next++ % HOLE_CACHE];
	*hc = (struct hole_cache){.dev = dev, .ino = ino};
	return hc;
}

/* Merge neighbours across the smallest holes until at most SEG_MAX_EXTENTS remain. */
static uint32_t extents_merge(struct seg_extent *x, uint32_t n)
{
	for (uint64_t gap = 4096; n > SEG_MAX_EXTENTS; gap *= 2) {
		uint32_t k = 0;

		for (uint32_t i = 1; i < n; i++) {
			if ((uint64_t)x[i].off - (x[k].off + x[k].len) <= gap)
				x[k].len = x[i].off + x[i].len - x[k].off;
			else
				x[++k] = x[i];
		}
		n = k + 1;
	}
	return n;
}

/*
 * The data extents of [base, base + len) of fd, relative to base. *out is
 * malloc'ed (caller frees). *cached: some extent came from the hole cache
 * (it may call data what is a hole now). -ENODATA when fd is shorter than
 * base + len.
 */
static int fd_extents(int fd, uint64_t base, uint32_t len, struct seg_extent **out, uint32_t *n,
		      int *cached)
{
	struct hole_cache *hc;
	uint64_t pos = base, end = base + len;
	struct seg_extent *x = NULL;
	uint32_t k = 0, cap = 0;
	struct stat sb;
	int ret = 0;

	if (fstat(fd, &sb) < 0)
		return -errno;
	if ((uint64_t)sb.st_size < end)
		return -ENODATA;
	hc = hole_cache_of(sb.st_dev, sb.st_ino);
	while (pos < end) {
		off_t d = lseek(fd, (off_t)pos, SEEK_DATA), h;

		if (d < 0 && (errno == EINVAL || errno == EOPNOTSUPP) && pos == base) {
			d = (off_t)base; /* no SEEK_DATA here: all of it is data */
			h = (off_t)end;
		} else if (d < 0) {
			if (errno == ENXIO)
				break; /* holes up to EOF */
			ret = -errno;
			goto err;
		} else if ((uint64_t)d >= end) {
			break;
		} else if ((uint64_t)d >= hc->d && (uint64_t)d < hc->h) {
			h = (off_t)hc->h; /* inside the data the last SEEK_HOLE walked */
			*cached = 1;
		} else if ((h = lseek(fd, d, SEEK_HOLE)) < 0) {
			/* ENXIO: d is past EOF now, the file was cut since the fstat */
			ret = errno == ENXIO ? -ENODATA : -errno;
			goto err;
		} else if (h > d) {
			hc->d = (uint64_t)d;
			hc->h = (uint64_t)h;
		}
		if ((uint64_t)h > end || h <= d)
			h = (off_t)end;
		if (k > 0 && x[k - 1].off + x[k - 1].len == (uint64_t)d - base) {
			/* the cache's hole was filled since: one extent, as a fresh walk */
			x[k - 1].len += (uint32_t)((uint64_t)h - (uint64_t)d);
			pos = (uint64_t)h;
			continue;
		}
		if (k == cap) {
			uint32_t ncap = cap ? cap * 2 : 8;
			struct seg_extent *nx = realloc(x, ncap * sizeof(*nx));

			if (!nx) {
				ret = -ENOMEM;
				goto err;
			}
			x = nx;
			cap = ncap;
		}
		x[k++] = (struct seg_extent){(uint32_t)((uint64_t)d - base),
					     (uint32_t)((uint64_t)h - (uint64_t)d)};
		pos = (uint64_t)h;
	}
	*out = x;
	*n = extents_merge(x, k);
	return 0;
err:
	free(x);
	return ret;
}

/* Test hook (segment_i.h): called by add_fd after the extents are known,
 * before any byte is read or mapped. */
void (*seg_test_add_fd_hook)(int fd);

/*
 * Map chunk bytes [0, len) at fd_off of fd read-only for a record of
 * extents x[0..n): NULL when it cannot be (mmap failed, or, unless the
 * extents are fresh from SEEK_DATA, a page of an extent is not resident:
 * see DESIGN) and the bytes go through pread, or MAP_FAILED with *err when
 * fd is shorter than fd_off + len now.
 */
static uint8_t *map_chunk(int fd, uint64_t fd_off, uint32_t len, const struct seg_extent *x,
			  uint32_t n, int fresh, int *err)
{
	size_t maplen = align_up(len), pages = maplen / SEG_ALIGN;
	unsigned char *vec = NULL;
	uint8_t *map;
	struct stat sb;

	map = mmap(NULL, maplen, PROT_READ, MAP_SHARED, fd, (off_t)fd_off);
	if (map == MAP_FAILED)
		return NULL;
	/* cut since the extents were found (the caller holds truncates off
	 * from here on) */
	if (fstat(fd, &sb) < 0 || (uint64_t)sb.st_size < fd_off + len) {
		munmap(map, maplen);
		*err = -ENODATA;
		return MAP_FAILED;
	}
	if (fresh)
		return map;
	if (!(vec = malloc(pages)) || mincore(map, maplen, vec) < 0)
		goto no;
	for (uint32_t i = 0; i < n; i++)
		for (size_t p = x[i].off / SEG_ALIGN; p < align_up((uint64_t)x[i].off + x[i].len) / SEG_ALIGN; p++)
			if (!(vec[p] & 1))
				goto no;
	free(vec);
	return map;
no:
	free(vec);
	munmap(map, maplen);
	return NULL;
}

/* add_fd_ext; fresh: ext is SEEK_DATA's own answer (no page of it can be
 * a hole: no mincore) */
static int add_fd_ext(struct seg_writer *w, uint64_t ino, uint64_t chunk, uint64_t gen, int fd,
		      uint64_t fd_off, uint32_t chunk_len, const struct seg_extent *ext,
		      uint32_t next, int fresh, const struct seg_fd_check *check,
		      struct seg_entry *entry_out)
{
	struct seg_src src = {.kind = SEG_SRC_FD, .fd = fd, .base = fd_off};
	uint8_t *map = NULL;
	int ret = 0;

	if (seg_w_err(w))
		return seg_w_err(w);
	if (chunk_len == 0 || chunk_len > SEG_MAX_CHUNK_LEN)
		return -EINVAL;
	if (fd_off % SEG_ALIGN == 0 && seg_w_direct_ok(w, ext, next)) {
		map = map_chunk(fd, fd_off, chunk_len, ext, next, fresh, &ret);
		if (map == MAP_FAILED)
			return ret;
		if (map) {
			src.kind = SEG_SRC_IMG;
			src.img = map;
		}
	}
	ret = seg_w_record(w, ino, chunk, gen, chunk_len, ext, next, &src, check, entry_out);
	if (map)
		munmap(map, align_up(chunk_len));
	return ret;
}

int seg_writer_add_fd_ext(struct seg_writer *w, uint64_t ino, uint64_t chunk, uint64_t gen,
			  int fd, uint64_t fd_off, uint32_t chunk_len, const struct seg_extent *ext,
			  uint32_t next, const struct seg_fd_check *check,
			  struct seg_entry *entry_out)
{
	return add_fd_ext(w, ino, chunk, gen, fd, fd_off, chunk_len, ext, next, 0, check,
			  entry_out);
}

int seg_writer_add_fd(struct seg_writer *w, uint64_t ino, uint64_t chunk, uint64_t gen, int fd,
		      uint64_t fd_off, uint32_t len, const struct seg_fd_check *check,
		      struct seg_entry *entry_out)
{
	struct seg_extent *x = NULL;
	uint32_t n = 0;
	int ret, cached = 0;

	if (seg_w_err(w))
		return seg_w_err(w);
	if (len == 0 || len > SEG_MAX_CHUNK_LEN)
		return -EINVAL;
	ret = fd_extents(fd, fd_off, len, &x, &n, &cached);
	if (ret == 0 && seg_test_add_fd_hook)
		seg_test_add_fd_hook(fd);
	if (ret == 0)
		/* fresh unless the cache answered, or a test hook changed the file */
		ret = add_fd_ext(w, ino, chunk, gen, fd, fd_off, len, x, n,
				 !cached && !seg_test_add_fd_hook, check, entry_out);
	free(x);
	return ret;
}
