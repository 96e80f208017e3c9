/*
 * tier_fixture — a tier on a real hot tier (a tmpfs directory) and a real
 * index, with the in-memory fake store (fake_store.c) put in place of the
 * nvme store (-Wl,--wrap=store_nvme_open), for the cmocka tests of tier/'s
 * policy and workers (test_tier_policy, test_maint). No FUSE.
 * Threading: the helpers are called from the test's thread; chunk_state
 * and wait_for may race the tier's workers (they take the inode lock).
 */
#ifndef SPW_TIER_FIXTURE_H
#define SPW_TIER_FIXTURE_H

#include "common/config.h"
#include "index/index.h"
#include "tier/tier.h"

#include <stddef.h>
#include <stdint.h>

#define MiB (1ull << 20)

struct fx {
	char shm[64], cold[64], hot[96];
	struct spw_config cfg;
	struct index *idx;
	struct tier *t;
};

/* cmocka setup/teardown: temp directories; teardown stops and frees the tier. */
int fx_setup(void **state);
int fx_teardown(void **state);
/* The tests' configuration (chunk_size 1 MiB, io_workers 2, ...). */
void fx_cfg_defaults(struct fx *f, uint64_t hot_size);
/* tier_new + tier_start with f->cfg; asserts. */
int fx_start(struct fx *f);

/* Test data: byte off of the file tagged tag. */
void fx_fill(uint8_t *buf, int tag, uint64_t off, size_t len);
/* Write [off, off+len) of in with tag's bytes through the tier. */
void fx_write(struct fx *f, struct inode *in, uint64_t off, uint64_t len, int tag);
/* Create name in the root, size bytes of tag's data; the caller owns the ref. */
struct inode *fx_mk(struct fx *f, const char *name, uint64_t size, int tag);
/* Files "f<i>" for i in [from, to), size bytes each, tag tag0 + i, into in[i]. */
void fx_mk_range(struct fx *f, struct inode **in, int from, int to, uint64_t size, int tag0);
/* Read [off, off+len) through the tier and compare with tag's bytes: 0, or
 * the -errno tier_read_begin gave. */
/* The answer of a read begun (io: tier_read_begin) into buf: its bytes
 * or -1 (pread's error). */
ssize_t fx_io_copy(const struct tier_io *io, void *buf);
int fx_check_range(struct fx *f, struct inode *in, int tag, uint64_t off, size_t len);
/* The same with tier_read_begin flags (TIER_READ_RANDOM). */
int fx_check_range_flags(struct fx *f, struct inode *in, int tag, uint64_t off, size_t len,
			 unsigned flags);
void fx_check_all(struct fx *f, struct inode *in, int tag, uint64_t size);
uint8_t fx_chunk_state(struct inode *in, uint64_t c);
/* Poll pred(f) until true or ms pass; returns the last value. */
int fx_wait_for(int (*pred)(struct fx *), struct fx *f, unsigned ms);
/* Hot usage at or below spill_threshold x hot_size. */
int fx_below_threshold(struct fx *f);
/* A counter of f->t->st (struct tier_stats): the tier's workers add to
 * them atomically while the test reads, so the test reads them atomically
 * too (relaxed: a value, no ordering wanted). */
#define FX_ST(f, field) __atomic_load_n(&(f)->t->st.field, __ATOMIC_RELAXED)

#endif
