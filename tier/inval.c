/*
 * inval — page-cache invalidations sent by their own thread: the kernel may
 * wait on page locks held by reads that wait for us, so the evictor, restore
 * and the last close only queue them (inval_async never blocks).
 * DESIGN
 * - Its state is its own (struct inval, below; t->inval points at it): a
 *   LIFO list under its lock; one worker pops a job, drops the lock and
 *   calls the fs layer's function (tier_set_inval). A job that cannot be
 *   allocated is skipped: only page cache is left behind (correct, just not
 *   freed).
 * - inval_stop: the worker sends what is still queued, then exits.
 * - Threading: inval_async from any thread; inval_set, start, stop and free
 *   from the tier's owner (tier.c), never while inval_async may run.
 */
#include "tier/tier_i.h"

#include <errno.h>
#include <stdlib.h>

struct inval_job {
	struct inval_job *next;
	uint64_t ino, off, len;
};

struct inval {
	/* the fs layer's sender (tier_inval_fn); NULL: nothing to drop */
	void (*fn)(void *arg, uint64_t ino, uint64_t off, uint64_t len);
	void *arg;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct inval_job *q; /* under lock */
	int stop;	     /* under lock */
	pthread_t th;
	int started;
};

int inval_new(struct tier *t)
{
	struct inval *v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	pthread_mutex_init(&v->lock, NULL);
	pthread_cond_init(&v->cond, NULL);
	t->inval = v;
	return 0;
}

void inval_free(struct tier *t)
{
	struct inval *v = t->inval;
	if (!v)
		return;
	inval_stop(t);
	while (v->q) { /* never started (a failed mount): nothing to send them to */
		struct inval_job *j = v->q;
		v->q = j->next;
		free(j);
	}
	pthread_cond_destroy(&v->cond);
	pthread_mutex_destroy(&v->lock);
	free(v);
	t->inval = NULL;
}

void inval_set(struct tier *t, void (*fn)(void *, uint64_t, uint64_t, uint64_t), void *arg)
{
	t->inval->fn = fn;
	t->inval->arg = arg;
}

void inval_async(struct tier *t, uint64_t ino, uint64_t off, uint64_t len)
{
	struct inval *v = t->inval;
	struct inval_job *j;
	if (!v->fn || !(j = malloc(sizeof(*j))))
		return; /* only page cache left behind: correct, just not freed */
	j->ino = ino;
	j->off = off;
	j->len = len;
	pthread_mutex_lock(&v->lock);
	j->next = v->q;
	v->q = j;
	pthread_cond_signal(&v->cond);
	pthread_mutex_unlock(&v->lock);
}

static void *inval_worker(void *arg)
{
	struct inval *v = arg;
	pthread_mutex_lock(&v->lock);
	for (;;) {
		struct inval_job *j;
		while (!v->q && !v->stop)
			pthread_cond_wait(&v->cond, &v->lock);
		if (!v->q)
			break;
		j = v->q;
		v->q = j->next;
		pthread_mutex_unlock(&v->lock);
		if (v->fn)
			v->fn(v->arg, j->ino, j->off, j->len);
		free(j);
		pthread_mutex_lock(&v->lock);
	}
	pthread_mutex_unlock(&v->lock);
	return NULL;
}

int inval_start(struct tier *t)
{
	struct inval *v = t->inval;
	int ret = pthread_create(&v->th, NULL, inval_worker, v);
	if (ret != 0)
		return -ret;
	v->started = 1;
	return 0;
}

void inval_stop(struct tier *t)
{
	struct inval *v = t->inval;
	if (!v || !v->started)
		return;
	pthread_mutex_lock(&v->lock);
	v->stop = 1;
	pthread_cond_signal(&v->cond);
	pthread_mutex_unlock(&v->lock);
	pthread_join(v->th, NULL);
	v->started = 0;
}
