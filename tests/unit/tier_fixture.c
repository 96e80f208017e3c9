/* tier_fixture — see tier_fixture.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tier_fixture.h"

#include "common/clock.h"
#include "fake_store.h"
#include "tier/tier_i.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The tier opens its nvme store through this: hand it the fake instead. */
int __wrap_store_nvme_open(const char *const *dirs, int ndirs, struct store **out)
{
	(void)dirs;
	(void)ndirs;
	return fake_store_open(out);
}

void fx_cfg_defaults(struct fx *f, uint64_t hot_size)
{
	f->cfg = (struct spw_config){
	    .mountpoint = "/nonexistent",
	    .hot_dir = f->hot,
	    .hot_size = hot_size,
	    .chunk_size = MiB,
	    .log_level = 3,
	    .nvme = f->cold,
	    .spill_threshold = 0.75,
	    .low_watermark = 0.60,
	    .hard_watermark = 0.95,
	    .min_spill_size = 4 * MiB,
	    .extent_min = 16 * MiB,
	    .seal_delay_ms = 0,
	    .io_workers = 2,
	    .restore = RESTORE_LAZY,
	    .write_wait_ms = 5000,
	    .gc_threshold = 0.5,
	    .nvme_threshold = 0.9,
	    .metrics_interval_ms = 5000,
	    .checkpoint_size = 64 * MiB,
	};
}

int fx_start(struct fx *f)
{
	char err[256] = "";
	int ret;

	assert_int_equal(idx_new(f->cfg.chunk_size, &f->idx), 0);
	ret = tier_new(&f->cfg, f->idx, &f->t, err, sizeof(err));
	if (ret < 0)
		print_error("tier_new: %s (%d)\n", err, ret);
	assert_int_equal(ret, 0);
	assert_non_null(fake_current);
	assert_int_equal(tier_start(f->t), 0);
	return 0;
}

int fx_setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	snprintf(f->shm, sizeof(f->shm), "/dev/shm/spw-policy-XXXXXX");
	snprintf(f->cold, sizeof(f->cold), "/tmp/spw-policy-cold-XXXXXX");
	assert_non_null(mkdtemp(f->shm));
	assert_non_null(mkdtemp(f->cold));
	snprintf(f->hot, sizeof(f->hot), "%s/hot", f->shm);
	*state = f;
	return 0;
}

int fx_teardown(void **state)
{
	struct fx *f = *state;
	char cmd[256];
	if (f->t) {
		tier_stop(f->t);
		idx_free(f->idx);
		tier_free(f->t);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", f->shm, f->cold);
	if (system(cmd) != 0)
		print_error("cannot remove %s %s\n", f->shm, f->cold);
	free(f);
	return 0;
}

static uint8_t byte_at(int tag, uint64_t off)
{
	return (uint8_t)(off * 31 + (uint64_t)tag * 7 + (off >> 12));
}

void fx_fill(uint8_t *buf, int tag, uint64_t off, size_t len)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = byte_at(tag, off + i);
}

ssize_t fx_io_copy(const struct tier_io *io, void *buf)
{
	uint8_t *p = buf;

	if (!io->niov)
		return io->len ? pread(io->fd, buf, io->len, (off_t)io->off) : 0;
	for (int i = 0; i < io->niov; i++) {
		memcpy(p, io->iov[i].iov_base, io->iov[i].iov_len);
		p += io->iov[i].iov_len;
	}
	return p - (uint8_t *)buf;
}

void fx_write(struct fx *f, struct inode *in, uint64_t off, uint64_t len, int tag)
{
	uint8_t *buf = malloc(MiB);

	assert_int_equal(tier_open(f->t, in, 0, NULL, &(struct tier_open_out){0}), 0);
	for (uint64_t end = off + len; off < end; off += MiB) {
		size_t n = end - off < MiB ? end - off : MiB;
		struct tier_io io;
		fx_fill(buf, tag, off, n);
		assert_int_equal(tier_write_begin(f->t, in, off, n, 0, &io), 0);
		ssize_t w = pwrite(io.fd, buf, n, (off_t)off);
		assert_int_equal(tier_write_end(f->t, in, &io, w), (ssize_t)n);
	}
	tier_close(f->t, in, &(struct tier_open_out){0}, NULL);
	free(buf);
}

struct inode *fx_mk(struct fx *f, const char *name, uint64_t size, int tag)
{
	struct idx_new_node nn = {.mode = S_IFREG | 0644};
	struct inode *in = NULL;

	assert_int_equal(idx_create(f->idx, IDX_ROOT_INO, name, &nn, &in), 0);
	fx_write(f, in, 0, size, tag);
	return in;
}

int fx_check_range(struct fx *f, struct inode *in, int tag, uint64_t off, size_t len)
{
	return fx_check_range_flags(f, in, tag, off, len, 0);
}

int fx_check_range_flags(struct fx *f, struct inode *in, int tag, uint64_t off, size_t len,
			 unsigned flags)
{
	uint8_t *buf = malloc(len), *exp = malloc(len);
	struct tier_io io;
	int ret;

	assert_int_equal(tier_open(f->t, in, 0, NULL, &(struct tier_open_out){0}), 0);
	ret = tier_read_begin(f->t, in, off, len, flags, &io);
	if (ret == 0) {
		assert_int_equal(fx_io_copy(&io, buf), (ssize_t)len);
		tier_read_end(f->t, in, &io);
		fx_fill(exp, tag, off, len);
		assert_memory_equal(buf, exp, len);
	}
	tier_close(f->t, in, &(struct tier_open_out){0}, NULL);
	free(buf);
	free(exp);
	return ret;
}

void fx_check_all(struct fx *f, struct inode *in, int tag, uint64_t size)
{
	for (uint64_t off = 0; off < size; off += MiB)
		assert_int_equal(
		    fx_check_range(f, in, tag, off, size - off < MiB ? size - off : MiB), 0);
}

uint8_t fx_chunk_state(struct inode *in, uint64_t c)
{
	uint8_t s;
	idx_inode_lock(in);
	s = c < in->nchunks ? in->chunks[c].state : CHUNK_ABSENT;
	idx_inode_unlock(in);
	return s;
}

int fx_wait_for(int (*pred)(struct fx *), struct fx *f, unsigned ms)
{
	uint64_t end = clock_now_ns() + (uint64_t)ms * 1000000;
	while (!pred(f) && clock_now_ns() < end) {
		struct timespec ts = {0, 10 * 1000000L};
		nanosleep(&ts, NULL);
	}
	return pred(f);
}

int fx_below_threshold(struct fx *f)
{
	return hot_used(f->t->hot) + hot_reserved(f->t->hot) <=
	       (uint64_t)(f->cfg.spill_threshold * f->cfg.hot_size);
}

void fx_mk_range(struct fx *f, struct inode **in, int from, int to, uint64_t size, int tag0)
{
	char name[16];
	for (int i = from; i < to; i++) {
		snprintf(name, sizeof(name), "f%d", i);
		in[i] = fx_mk(f, name, size, tag0 + i);
	}
}
