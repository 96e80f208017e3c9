/*
 * s3_pool — the S3 store's part buffers: equal buffers of buf_size bytes,
 * mmap'ed (so memory given back returns to the OS), at most max_bufs of them
 * mapped at once, whoever asks. Guarantees: mapped bytes never exceed
 * max_bufs * buf_size; s3_pool_get never blocks longer than its wait.
 * Threading: every call is thread-safe.
 */
#ifndef SPW_S3_POOL_H
#define SPW_S3_POOL_H

#include <stddef.h>
#include <stdint.h>

struct s3_pool;

struct s3_pool_stats {
	uint64_t buf_size; /* bytes a buffer */
	unsigned max_bufs; /* the budget, in buffers */
	unsigned mapped;   /* buffers mapped now (handed out + idle) */
	unsigned in_use;   /* buffers handed out now */
	unsigned high;	   /* most buffers ever mapped at once */
	uint64_t waits;	   /* s3_pool_get calls that found the budget used up */
};

/* A pool of up to max_bufs (>= 1) buffers of buf_size bytes (> 0); nothing
 * is mapped yet. Caller owns *out; free with s3_pool_free(). 0 or -ENOMEM. */
int s3_pool_new(size_t buf_size, unsigned max_bufs, struct s3_pool **out);
/* Unmap everything; every buffer must have been put back (asserted). */
void s3_pool_free(struct s3_pool *pool);
/*
 * A buffer of buf_size bytes (page-aligned, contents undefined) into *out:
 * an idle one, or a new mapping while the budget allows. When all max_bufs
 * are handed out, wait up to wait_ms for one to come back (0: do not wait).
 * 0, -EAGAIN (none within wait_ms), -ENOMEM (mmap failed).
 */
int s3_pool_get(struct s3_pool *pool, unsigned wait_ms, void **out);
/* Give buf (from s3_pool_get, or NULL) back; wakes a waiter. */
void s3_pool_put(struct s3_pool *pool, void *buf);
/* Unmap the idle buffers (e.g. when no upload is running). */
void s3_pool_trim(struct s3_pool *pool);
void s3_pool_stats(struct s3_pool *pool, struct s3_pool_stats *out);

#endif
