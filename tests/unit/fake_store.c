/* fake_store — see fake_store.h. */
#include "fake_store.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct fake_store *fake_current;
static pthread_mutex_t fake_mu = PTHREAD_MUTEX_INITIALIZER;

/* Gates (fake_gate_*): protected by fake_mu. */
#define GATE_MAX 256
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static unsigned gate_armed[3];	      /* calls of each kind still to block */
static unsigned gate_next;	      /* tickets given */
static uint8_t gate_blocked[GATE_MAX]; /* by ticket: at the gate now */
static uint8_t gate_released[GATE_MAX];
static int gate_err[GATE_MAX];

/* A call of kind arriving: when armed, block until released. Returns 0 or
 * the -errno the test released it with. fake_mu held. */
static int gate_pass_locked(int kind)
{
	unsigned tk;

	if (!gate_armed[kind] || gate_next + 1 >= GATE_MAX)
		return 0;
	gate_armed[kind]--;
	tk = ++gate_next;
	gate_blocked[tk] = 1;
	pthread_cond_broadcast(&gate_cond);
	while (!gate_released[tk])
		pthread_cond_wait(&gate_cond, &fake_mu);
	gate_blocked[tk] = 0;
	return gate_err[tk] ? -gate_err[tk] : 0;
}

void fake_gate_arm(int kind, unsigned n)
{
	fake_lock();
	gate_armed[kind] = n;
	fake_unlock();
}

int fake_gate_wait(unsigned ticket, unsigned ms)
{
	struct timespec dl;
	int ret = 0;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += ms / 1000;
	dl.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	fake_lock();
	while (ticket < GATE_MAX && !gate_blocked[ticket] && ret == 0)
		if (pthread_cond_timedwait(&gate_cond, &fake_mu, &dl) == ETIMEDOUT)
			ret = -ETIMEDOUT;
	if (ticket < GATE_MAX && gate_blocked[ticket])
		ret = 0;
	fake_unlock();
	return ticket < GATE_MAX ? ret : -ETIMEDOUT;
}

void fake_gate_release(unsigned ticket, int err)
{
	fake_lock();
	if (ticket < GATE_MAX) {
		gate_err[ticket] = err;
		gate_released[ticket] = 1;
		pthread_cond_broadcast(&gate_cond);
	}
	fake_unlock();
}

void fake_gate_open_all(void)
{
	fake_lock();
	gate_armed[0] = gate_armed[1] = gate_armed[2] = 0;
	memset(gate_released, 1, sizeof(gate_released));
	pthread_cond_broadcast(&gate_cond);
	fake_unlock();
}

unsigned fake_gate_tickets(void)
{
	unsigned n;
	fake_lock();
	n = gate_next;
	fake_unlock();
	return n;
}

struct fake_put {
	struct store_put base;
	uint64_t id;
	uint8_t *data;
	uint64_t len, cap;
};

void fake_lock(void)
{
	pthread_mutex_lock(&fake_mu);
}

void fake_unlock(void)
{
	pthread_mutex_unlock(&fake_mu);
}

static struct fake_store *fs_of(struct store *st)
{
	return (struct fake_store *)st;
}

static int f_put_begin(struct store *st, uint64_t seg_id, uint64_t size_hint,
		       struct store_put **out)
{
	struct fake_put *p;

	if (seg_id >= FAKE_MAX_SEGS)
		return -ENOSPC;
	if (!(p = calloc(1, sizeof(*p))))
		return -ENOMEM;
	p->base.st = st;
	p->id = seg_id;
	*out = &p->base;
	return 0;
}

static int f_put_append(struct store_put *put, const void *buf, size_t len)
{
	struct fake_put *p = (struct fake_put *)put;

	if (len % STORE_ALIGN || (uintptr_t)buf % STORE_ALIGN)
		return -EINVAL;
	fake_lock();
	int ret = gate_pass_locked(FAKE_GATE_APPEND);
	fake_unlock();
	if (ret < 0)
		return ret;
	if (p->len + len > p->cap) {
		uint64_t cap = p->cap ? p->cap : 1 << 20;
		uint8_t *d;
		while (cap < p->len + len)
			cap *= 2;
		if (!(d = realloc(p->data, cap)))
			return -ENOMEM;
		p->data = d;
		p->cap = cap;
	}
	memcpy(p->data + p->len, buf, len);
	p->len += len;
	return 0;
}

static int f_put_finish(struct store_put *put, uint32_t *dev)
{
	struct fake_put *p = (struct fake_put *)put;
	struct fake_store *f = fs_of(put->st);
	int ret = 0;

	fake_lock();
	if ((ret = gate_pass_locked(FAKE_GATE_PUT)) < 0) {
		f->puts_failed++;
		free(p->data);
	} else if (f->fail_puts) {
		f->fail_puts--;
		f->puts_failed++;
		ret = -(f->fail_errno ? f->fail_errno : EIO);
		free(p->data);
	} else {
		free(f->segs[p->id].data);
		f->segs[p->id] = (struct fake_seg){.data = p->data, .len = p->len, .live = 1};
		f->puts_finished++;
	}
	fake_unlock();
	if (dev)
		*dev = 0;
	free(p);
	return ret;
}

static void f_put_abort(struct store_put *put)
{
	struct fake_put *p = (struct fake_put *)put;
	free(p->data);
	free(p);
}

static int f_read(struct store *st, uint64_t seg_id, uint32_t dev, uint64_t off, void *buf,
		  size_t len)
{
	struct fake_store *f = fs_of(st);
	unsigned delay;
	int ret = 0;

	if (off % STORE_ALIGN || len % STORE_ALIGN || (uintptr_t)buf % STORE_ALIGN)
		return -EINVAL;
	fake_lock();
	delay = f->read_delay_ms;
	if ((ret = gate_pass_locked(FAKE_GATE_READ)) < 0) {
		; /* released with an error */
	} else if (seg_id >= FAKE_MAX_SEGS || !f->segs[seg_id].live) {
		ret = -ENOENT;
	} else if (off + len > f->segs[seg_id].len) {
		ret = -EIO;
	} else {
		memcpy(buf, f->segs[seg_id].data + off, len);
		if (f->nreads < FAKE_MAX_LOG)
			f->reads[f->nreads++] = (struct fake_read){seg_id, off, len};
	}
	fake_unlock();
	if (delay) {
		struct timespec ts = {delay / 1000, (long)(delay % 1000) * 1000000L};
		nanosleep(&ts, NULL);
	}
	return ret;
}

static int f_remove(struct store *st, uint64_t seg_id, uint32_t dev)
{
	struct fake_store *f = fs_of(st);
	int ret = -ENOENT;

	fake_lock();
	if (seg_id < FAKE_MAX_SEGS && f->segs[seg_id].live) {
		f->segs[seg_id].live = 0;
		free(f->segs[seg_id].data);
		f->segs[seg_id].data = NULL;
		f->removes++;
		ret = 0;
	}
	fake_unlock();
	return ret;
}

static int f_stat(struct store *st, struct store_dev_stat *out, int max)
{
	struct fake_store *f = fs_of(st);
	uint64_t used = 0, total;

	fake_lock();
	for (int i = 0; i < FAKE_MAX_SEGS; i++)
		if (f->segs[i].live)
			used += f->segs[i].len;
	total = f->stat_total ? f->stat_total : 1ull << 40;
	fake_unlock();
	if (max > 0)
		out[0] = (struct store_dev_stat){.name = "fake",
						 .used = used,
						 .total = total,
						 .avail = used < total ? total - used : 0};
	return 1;
}

static int f_list(struct store *st, store_list_fn fn, void *arg)
{
	struct fake_store *f = fs_of(st);
	for (uint64_t i = 0; i < FAKE_MAX_SEGS; i++) {
		int live;
		uint64_t len;
		fake_lock();
		live = f->segs[i].live;
		len = f->segs[i].len;
		fake_unlock();
		if (live) {
			int r = fn(arg, i, 0, len);
			if (r)
				return r;
		}
	}
	return 0;
}

static void f_close(struct store *st)
{
	struct fake_store *f = fs_of(st);
	for (int i = 0; i < FAKE_MAX_SEGS; i++)
		free(f->segs[i].data);
	if (fake_current == f)
		fake_current = NULL;
	free(f);
}

static const struct store_ops fake_ops = {
    .name = "fake",
    .tier = STORE_TIER_NVME, /* a local tier for the tests */
    .put_begin = f_put_begin,
    .put_append = f_put_append,
    .put_finish = f_put_finish,
    .put_abort = f_put_abort,
    .read = f_read,
    .remove = f_remove,
    .stat = f_stat,
    .list = f_list,
    .close = f_close,
};

int fake_store_open(struct store **out)
{
	struct fake_store *f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->base.ops = &fake_ops;
	fake_lock();
	fake_current = f;
	gate_armed[0] = gate_armed[1] = gate_armed[2] = 0;
	gate_next = 0;
	memset(gate_blocked, 0, sizeof(gate_blocked));
	memset(gate_released, 0, sizeof(gate_released));
	memset(gate_err, 0, sizeof(gate_err));
	fake_unlock();
	*out = &f->base;
	return 0;
}

unsigned fake_live_segments(void)
{
	unsigned n = 0;
	fake_lock();
	for (int i = 0; i < FAKE_MAX_SEGS && fake_current; i++)
		n += fake_current->segs[i].live;
	fake_unlock();
	return n;
}

int fake_flip(uint64_t id, uint64_t off)
{
	int ret = -ENOENT;
	fake_lock();
	if (fake_current && id < FAKE_MAX_SEGS && fake_current->segs[id].live &&
	    off < fake_current->segs[id].len) {
		fake_current->segs[id].data[off] ^= 0x5a;
		ret = 0;
	}
	fake_unlock();
	return ret;
}
