/*
 * s3_pool — bounded part buffers for the S3 store (contract: s3_pool.h).
 * A slot of the budget is reserved under the lock before the mmap runs
 * (outside it), so mapped never exceeds max_bufs even while several
 * threads map at once. Buffers given back stay mapped on the idle list
 * (a fresh 16 MiB mapping costs its page faults again) until
 * s3_pool_trim() unmaps them.
 */
#include "tier/s3/s3_pool.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

struct s3_pool {
	size_t buf_size;
	unsigned max_bufs;
	pthread_mutex_t lock;
	pthread_cond_t cond; /* a buffer came back or a reservation was undone */
	void **idle;	     /* protected by lock: max_bufs entries, nidle used */
	unsigned nidle;	     /* protected by lock */
	unsigned mapped;     /* protected by lock: idle + handed out + being mapped */
	unsigned high;	     /* protected by lock */
	uint64_t waits;	     /* protected by lock */
};

int s3_pool_new(size_t buf_size, unsigned max_bufs, struct s3_pool **out)
{
	struct s3_pool *pool;
	pthread_condattr_t ca;

	if (!buf_size || !max_bufs)
		return -EINVAL;
	pool = calloc(1, sizeof(*pool));
	if (!pool)
		return -ENOMEM;
	pool->idle = calloc(max_bufs, sizeof(*pool->idle));
	if (!pool->idle) {
		free(pool);
		return -ENOMEM;
	}
	pool->buf_size = buf_size;
	pool->max_bufs = max_bufs;
	pthread_mutex_init(&pool->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&pool->cond, &ca);
	pthread_condattr_destroy(&ca);
	*out = pool;
	return 0;
}

void s3_pool_free(struct s3_pool *pool)
{
	if (!pool)
		return;
	s3_pool_trim(pool);
	assert(pool->mapped == 0);
	pthread_cond_destroy(&pool->cond);
	pthread_mutex_destroy(&pool->lock);
	free(pool->idle);
	free(pool);
}

int s3_pool_get(struct s3_pool *pool, unsigned wait_ms, void **out)
{
	struct timespec until;
	void *buf = NULL;
	int ret = 0, waited = 0;

	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += wait_ms / 1000;
	until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&pool->lock);
	for (;;) {
		if (pool->nidle) {
			buf = pool->idle[--pool->nidle];
			goto out;
		}
		if (pool->mapped < pool->max_bufs)
			break;
		if (!waited++)
			pool->waits++;
		if (!wait_ms ||
		    pthread_cond_timedwait(&pool->cond, &pool->lock, &until) == ETIMEDOUT) {
			if (pool->nidle || pool->mapped < pool->max_bufs)
				continue; /* came back just as the wait ended */
			ret = -EAGAIN;
			goto out;
		}
	}
	/* room in the budget: reserve it, map outside the lock */
	if (++pool->mapped > pool->high)
		pool->high = pool->mapped;
	pthread_mutex_unlock(&pool->lock);
	buf =
	    mmap(NULL, pool->buf_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf != MAP_FAILED) {
		*out = buf;
		return 0;
	}
	pthread_mutex_lock(&pool->lock);
	pool->mapped--;
	pthread_cond_signal(&pool->cond);
	ret = -ENOMEM;
out:
	pthread_mutex_unlock(&pool->lock);
	if (!ret)
		*out = buf;
	return ret;
}

void s3_pool_put(struct s3_pool *pool, void *buf)
{
	if (!buf)
		return;
	pthread_mutex_lock(&pool->lock);
	assert(pool->nidle < pool->mapped);
	pool->idle[pool->nidle++] = buf;
	pthread_cond_signal(&pool->cond);
	pthread_mutex_unlock(&pool->lock);
}

void s3_pool_trim(struct s3_pool *pool)
{
	void *drop[64];
	unsigned n;

	do {
		pthread_mutex_lock(&pool->lock);
		for (n = 0; n < 64 && pool->nidle; n++)
			drop[n] = pool->idle[--pool->nidle];
		pthread_mutex_unlock(&pool->lock);
		if (!n)
			break;
		for (unsigned i = 0; i < n; i++)
			munmap(drop[i], pool->buf_size);
		/* counted as mapped until really unmapped */
		pthread_mutex_lock(&pool->lock);
		pool->mapped -= n;
		pthread_cond_broadcast(&pool->cond); /* room to map again */
		pthread_mutex_unlock(&pool->lock);
	} while (n == 64);
}

void s3_pool_stats(struct s3_pool *pool, struct s3_pool_stats *out)
{
	pthread_mutex_lock(&pool->lock);
	*out = (struct s3_pool_stats){
	    .buf_size = pool->buf_size,
	    .max_bufs = pool->max_bufs,
	    .mapped = pool->mapped,
	    .in_use = pool->mapped - pool->nidle,
	    .high = pool->high,
	    .waits = pool->waits,
	};
	pthread_mutex_unlock(&pool->lock);
}
