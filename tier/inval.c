/*
 * inval — page-cache invalidations sent by their own thread: the kernel may
 * wait on page locks held by reads that wait for us, so the evictor and
 * restore only queue them (inval_async never blocks).
 * DESIGN
 * - A LIFO list under t->ilock; one worker pops a job, drops the lock and
 *   calls the fs layer's t->inval. A job that cannot be allocated is
 *   skipped: only page cache is left behind (correct, just not freed).
 * - inval_stop: the worker sends what is still queued, then exits.
 */
#include "tier/tier_i.h"

#include <errno.h>
#include <stdlib.h>

struct inval_job {
	struct inval_job *next;
	uint64_t ino, off, len;
};

void inval_async(struct tier *t, uint64_t ino, uint64_t off, uint64_t len)
{
	struct inval_job *j;
	if (!t->inval || !(j = malloc(sizeof(*j))))
		return; /* only page cache left behind: correct, just not freed */
	j->ino = ino;
	j->off = off;
	j->len = len;
	pthread_mutex_lock(&t->ilock);
	j->next = t->iq;
	t->iq = j;
	pthread_cond_signal(&t->icond);
	pthread_mutex_unlock(&t->ilock);
}

static void *inval_worker(void *arg)
{
	struct tier *t = arg;
	pthread_mutex_lock(&t->ilock);
	for (;;) {
		struct inval_job *j;
		while (!t->iq && !t->istop)
			pthread_cond_wait(&t->icond, &t->ilock);
		if (!t->iq)
			break;
		j = t->iq;
		t->iq = j->next;
		pthread_mutex_unlock(&t->ilock);
		t->inval(t->inval_arg, j->ino, j->off, j->len);
		free(j);
		pthread_mutex_lock(&t->ilock);
	}
	pthread_mutex_unlock(&t->ilock);
	return NULL;
}

int inval_start(struct tier *t)
{
	int ret = pthread_create(&t->inval_th, NULL, inval_worker, t);
	if (ret != 0)
		return -ret;
	t->inval_started = 1;
	return 0;
}

void inval_stop(struct tier *t)
{
	if (!t->inval_started)
		return;
	pthread_mutex_lock(&t->ilock);
	t->istop = 1;
	pthread_cond_signal(&t->icond);
	pthread_mutex_unlock(&t->ilock);
	pthread_join(t->inval_th, NULL);
	t->inval_started = 0;
}
